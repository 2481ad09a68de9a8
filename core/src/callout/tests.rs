use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use nkeys::{KeyPair, KeyPairType, XKey};
use serde_json::{json, Value};

use super::*;
use crate::jwt::{AuthorizationResponse, Permission};

const NOW: UnixSeconds = UnixSeconds(1_800_000_000);

fn key(kind: KeyPairType, n: u8) -> KeyPair {
    KeyPair::new_from_raw(kind, [n; 32]).unwrap()
}

struct Keys {
    server: KeyPair,
    server_xkey: String,
    callout: KeyPair,
    callout_signing: KeyPair,
    data: KeyPair,
    data_signing: KeyPair,
    user: KeyPair,
}

fn keys() -> Keys {
    Keys {
        server: key(KeyPairType::Server, 1),
        server_xkey: XKey::new_from_raw([2; 32]).public_key(),
        callout: key(KeyPairType::Account, 3),
        callout_signing: key(KeyPairType::Account, 4),
        data: key(KeyPairType::Account, 5),
        data_signing: key(KeyPairType::Account, 6),
        user: key(KeyPairType::User, 7),
    }
}

/// The claims of a request as nats-server 2.15.1 writes them (callout-operator-mode §4).
fn claims(k: &Keys) -> Value {
    json!({
        "aud": "nats-authorization-request",
        "exp": NOW.0 + 2,
        "iat": NOW.0,
        "jti": "ignored",
        "iss": k.server.public_key(),
        "sub": k.callout.public_key(),
        "nats": {
            "type": "authorization_request",
            "version": 2,
            "server_id": {
                "name": "lab", "host": "127.0.0.1", "id": k.server.public_key(),
                "version": "2.15.1", "xkey": k.server_xkey,
            },
            "user_nkey": k.user.public_key(),
            "client_info": {
                "host": "127.0.0.1", "id": 10, "user": "USENTINEL", "name": "ibx-1",
                "name_tag": "sentinel", "kind": "Client", "type": "nats", "nonce": "p1K3",
            },
            "connect_opts": {
                "jwt": "eyJ.sentinel", "sig": "c2ln", "auth_token": "the-bearer",
                "name": "ibx-1", "lang": "rust", "version": "0.51", "protocol": 1,
            },
        },
    })
}

/// Signs claims as a JWT with `signer`, independently of the codec under test.
fn sign(signer: &KeyPair, claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let input = format!("{header}.{payload}");
    let sig = URL_SAFE_NO_PAD.encode(signer.sign(input.as_bytes()).unwrap());
    format!("{input}.{sig}")
}

fn verify(k: &Keys, token: &str) -> Result<ConnectRequest, DropReason> {
    verify_request(token, &k.server_xkey, &TrustedServers::Any, NOW)
}

fn dropped(k: &Keys, edit: impl FnOnce(&mut Value), signer: &KeyPair) -> DropReason {
    let mut c = claims(k);
    edit(&mut c);
    verify(k, &sign(signer, &c)).unwrap_err()
}

/// [`dropped`] for the server-signed claims with `member` removed from the object at `pointer`.
fn dropped_without(k: &Keys, pointer: &str, member: &str) -> DropReason {
    let edit = |c: &mut Value| {
        let object = c.pointer_mut(pointer).and_then(Value::as_object_mut);
        object.unwrap().remove(member);
    };
    dropped(k, edit, &k.server)
}

/// [`dropped`] for the server-signed claims with `value` at `pointer`.
fn dropped_with(k: &Keys, pointer: &str, value: Value) -> DropReason {
    dropped(k, |c| *c.pointer_mut(pointer).unwrap() = value, &k.server)
}

#[test]
fn a_well_formed_request_yields_what_the_plane_decides_on() {
    let k = keys();
    let request = verify(&k, &sign(&k.server, &claims(&k))).unwrap();
    assert_eq!(request.user_nkey.as_str(), k.user.public_key());
    assert_eq!(request.server_id.as_str(), k.server.public_key());
    assert_eq!(request.server_name, "lab");
    assert_eq!(request.server_xkey, k.server_xkey);
    assert_eq!(request.nonce.as_deref(), Some("ibx-1"));
    assert_eq!(
        request.bearer.as_ref().map(AuthToken::expose),
        Some("the-bearer")
    );
    assert_eq!(request.client.id, 10);
    assert_eq!(request.client.name_tag, "sentinel");
    assert_eq!(request.expires_at, Some(UnixSeconds(NOW.0 + 2)));
    // The bearer never shows in Debug output.
    assert!(!format!("{request:?}").contains("the-bearer"));
}

#[test]
fn a_request_without_token_or_name_is_still_verified() {
    let k = keys();
    let mut c = claims(&k);
    let opts = c["nats"]["connect_opts"].as_object_mut().unwrap();
    opts.remove("auth_token");
    opts.remove("name");
    let request = verify(&k, &sign(&k.server, &c)).unwrap();
    assert_eq!(request.bearer, None);
    assert_eq!(request.nonce, None);
}

#[test]
fn a_wildcard_nonce_is_carried_verbatim() {
    let k = keys();
    let mut c = claims(&k);
    c["nats"]["connect_opts"]["name"] = json!(">");
    let request = verify(&k, &sign(&k.server, &c)).unwrap();
    assert_eq!(request.nonce.as_deref(), Some(">"));
}

#[test]
fn garbage_and_other_claim_types_are_dropped() {
    let k = keys();
    assert!(matches!(
        verify(&k, "not a jwt"),
        Err(DropReason::Malformed(_))
    ));
    let user = jwt::user_jwt(
        &k.data_signing,
        &k.data.public_key(),
        &k.user.public_key(),
        "u",
        &UserNats::default(),
        Validity {
            issued_at: NOW,
            expires_at: None,
        },
    )
    .unwrap();
    assert_eq!(
        verify(&k, &user).unwrap_err(),
        DropReason::NotARequest(ClaimType::User)
    );
    let unversioned = dropped_without(&k, "/nats", "version");
    assert!(matches!(unversioned, DropReason::Malformed(_)));
}

#[test]
fn a_request_not_signed_by_a_server_key_is_dropped() {
    let k = keys();
    // An account key posing as the server: the decoder refuses the issuer kind.
    let account = key(KeyPairType::Account, 9);
    let reason = dropped(
        &k,
        |c| {
            c["iss"] = json!(account.public_key());
            c["nats"]["server_id"]["id"] = json!(account.public_key());
        },
        &account,
    );
    let DropReason::Malformed(why) = reason else {
        panic!("{reason:?}")
    };
    assert!(why.contains("cannot issue authorization_request"), "{why}");
}

#[test]
fn a_server_id_that_is_no_server_key_is_dropped() {
    let k = keys();
    let reason = dropped_with(&k, "/nats/server_id/id", json!(k.callout.public_key()));
    assert_eq!(reason, DropReason::NotAServerId);
    let reason = dropped_without(&k, "/nats/server_id", "id");
    assert_eq!(reason, DropReason::NotAServerId);
}

#[test]
fn an_issuer_other_than_the_claimed_server_is_dropped() {
    let k = keys();
    let other = key(KeyPairType::Server, 11);
    let reason = dropped_with(&k, "/nats/server_id/id", json!(other.public_key()));
    assert_eq!(reason, DropReason::IssuerNotServer);
}

#[test]
fn a_bad_signature_is_dropped() {
    let k = keys();
    let forger = key(KeyPairType::Server, 12);
    assert_eq!(dropped(&k, |_| {}, &forger), DropReason::BadSignature);
    let token = sign(&k.server, &claims(&k));
    let (input, _) = token.rsplit_once('.').unwrap();
    let zero = URL_SAFE_NO_PAD.encode([0u8; 64]);
    assert_eq!(
        verify(&k, &format!("{input}.{zero}")).unwrap_err(),
        DropReason::BadSignature
    );
}

#[test]
fn a_server_outside_the_expected_set_is_dropped() {
    let k = keys();
    let token = sign(&k.server, &claims(&k));
    let other = ServerId::parse(&key(KeyPairType::Server, 13).public_key()).unwrap();
    let only = |ids: Vec<ServerId>| {
        verify_request(&token, &k.server_xkey, &TrustedServers::Only(ids), NOW)
    };
    assert_eq!(
        only(vec![other.clone()]).unwrap_err(),
        DropReason::UnexpectedServer
    );
    let ours = ServerId::parse(&k.server.public_key()).unwrap();
    assert!(only(vec![other, ours]).is_ok());
}

#[test]
fn a_signed_xkey_other_than_the_sealing_key_is_dropped() {
    let k = keys();
    let token = sign(&k.server, &claims(&k));
    let relay = XKey::new_from_raw([14; 32]).public_key();
    assert_eq!(
        verify_request(&token, &relay, &TrustedServers::Any, NOW).unwrap_err(),
        DropReason::XkeyMismatch
    );
    let reason = dropped_without(&k, "/nats/server_id", "xkey");
    assert_eq!(reason, DropReason::XkeyMismatch);
}

#[test]
fn a_missing_or_malformed_user_nkey_is_dropped() {
    let k = keys();
    let reason = dropped_without(&k, "/nats", "user_nkey");
    assert_eq!(reason, DropReason::MissingUserNkey);
    let reason = dropped_with(&k, "/nats/user_nkey", json!(k.data.public_key()));
    assert_eq!(reason, DropReason::NotAUserNkey);
}

#[test]
fn only_a_request_strictly_past_its_exp_is_stale() {
    let k = keys();
    // A sub-second auth timeout makes exp == iat (G12): still answered at that second.
    let mut c = claims(&k);
    c["exp"] = json!(NOW.0);
    assert!(verify(&k, &sign(&k.server, &c)).is_ok());
    c["exp"] = json!(NOW.0 - 1);
    assert_eq!(
        verify(&k, &sign(&k.server, &c)).unwrap_err(),
        DropReason::Expired
    );
}

#[test]
fn drop_reasons_have_stable_labels() {
    assert_eq!(DropReason::XkeyMismatch.label(), "xkey-mismatch");
    assert_eq!(DropReason::XkeyMismatch.to_string(), "xkey-mismatch");
    assert_eq!(
        DropReason::Malformed("x".into()).to_string(),
        "malformed: x"
    );
}

#[test]
fn deny_reasons_fold_to_ascii() {
    assert_eq!(
        fold_reason("denied \u{2014} bearer expired"),
        "denied - bearer expired"
    );
    assert_eq!(fold_reason("a\u{2013}b\u{2212}c"), "a-b-c");
    assert_eq!(fold_reason("nope \u{1F6AB} \u{65E5}\u{672C}"), "nope ? ??");
    assert_eq!(fold_reason("caf\u{e9}"), "caf?");
    assert_eq!(fold_reason("line\nbreak\ttab"), "line break tab");
    assert_eq!(fold_reason(""), "denied");
    assert_eq!(fold_reason(" \n "), "denied");
    assert_eq!(fold_reason(&"x".repeat(1000)).len(), MAX_REASON_CHARS);
    let plain = "bad token: <&> \"quoted\"";
    assert_eq!(fold_reason(plain), plain);
}

/// The callout's answer to the server-signed test request, with the test accounts' keys.
fn answer_for(k: &Keys, decision: Result<Admit, String>) -> Answer {
    let (callout, data) = (k.callout.public_key(), k.data.public_key());
    let keys = AnswerKeys {
        callout_account: &callout,
        callout_signer: &k.callout_signing,
        data_account: &data,
        data_signer: &k.data_signing,
    };
    answer(keys, &request(k), decision, NOW).unwrap()
}

fn request(k: &Keys) -> ConnectRequest {
    verify(k, &sign(&k.server, &claims(k))).unwrap()
}

fn response_of(k: &Keys, token: &str) -> AuthorizationResponse {
    let claims = jwt::verify(
        token,
        ClaimType::AuthorizationResponse,
        &k.callout_signing.public_key(),
        NOW,
    )
    .unwrap();
    assert_eq!(claims.sub, k.user.public_key());
    assert_eq!(claims.aud.as_deref(), Some(k.server.public_key().as_str()));
    assert_eq!(claims.exp, None);
    let Nats::AuthorizationResponse(response) = claims.nats else {
        panic!("{:?}", claims.nats)
    };
    assert_eq!(
        response.issuer_account.as_deref(),
        Some(k.callout.public_key().as_str())
    );
    response
}

#[test]
fn an_admission_carries_a_user_jwt_in_the_data_account() {
    let k = keys();
    let permissions = Permissions {
        publish: Permission {
            allow: vec!["a.ok.>".into()],
            deny: vec![],
        },
        ..Permissions::default()
    };
    let admit = Admit {
        name: "alice".into(),
        permissions: permissions.clone(),
        tags: vec!["owner:u_x".into()],
        limits: crate::profiles::CONNECT_LIMITS,
        expires_at: UnixSeconds(NOW.0 + 600),
    };
    let Answer::Admitted {
        response,
        user_jwt,
        expires_at,
    } = answer_for(&k, Ok(admit))
    else {
        panic!("not admitted")
    };
    assert_eq!(expires_at, UnixSeconds(NOW.0 + 600));
    let inner = response_of(&k, &response);
    assert_eq!(inner.verdict, AuthorizationVerdict::Jwt(user_jwt.clone()));
    let user = jwt::verify(
        &user_jwt,
        ClaimType::User,
        &k.data_signing.public_key(),
        NOW,
    )
    .unwrap();
    assert_eq!(user.sub, k.user.public_key());
    assert_eq!(user.name, "alice");
    assert_eq!(user.exp, Some(UnixSeconds(NOW.0 + 600)));
    assert_eq!(user.iat, NOW);
    assert_eq!(user.user_account(), Some(k.data.public_key().as_str()));
    let nats = user.user().unwrap();
    assert_eq!(nats.permissions, permissions);
    assert_eq!(nats.tags, vec!["owner:u_x".to_owned()]);
    // The admitted connection carries the profile's finite limits, read back from the JWT.
    assert_eq!(nats.limits, crate::profiles::CONNECT_LIMITS);
}

#[test]
fn a_denial_is_signed_and_its_reason_folded() {
    let k = keys();
    let denied = answer_for(&k, Err("denied \u{2014} bearer expired".into()));
    let Answer::Denied { response, reason } = &denied else {
        panic!("{denied:?}")
    };
    assert_eq!(reason, "denied - bearer expired");
    assert_eq!(
        response_of(&k, response).verdict,
        AuthorizationVerdict::Error("denied - bearer expired".into())
    );
    assert_eq!(denied.response(), response);

    // An admission whose credential cannot be minted (already expired) is a denial too.
    let stale = Admit {
        name: "alice".into(),
        permissions: Permissions::default(),
        tags: vec![],
        limits: crate::profiles::CONNECT_LIMITS,
        expires_at: NOW,
    };
    let Answer::Denied { reason, .. } = answer_for(&k, Ok(stale)) else {
        panic!("a stale admission was admitted")
    };
    assert!(
        reason.starts_with("cannot mint the connection's credential"),
        "{reason}"
    );
}
