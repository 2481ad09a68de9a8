//! NATS JWT v2 codec and creds text (`cotal_core::jwt`): round trips, header exactness, `jti`
//! recomputation, every refusal, and golden vectors against the two reference libraries.
//!
//! Fixtures live in `tests/fixtures/jwt/` (see its README): `js-vectors.json` minted by
//! `@nats-io/jwt` (`generate.mjs`), `go-vectors.json` minted by Go `nats-io/jwt` v2
//! (`go-crosscheck.go`), and `rust-minted.json`, tokens minted here that both generators fed to
//! their library's decoder. CI only reads them. `COTAL_BLESS_JWT_FIXTURE=1` rewrites
//! `rust-minted.json` (then rerun both generators).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cotal_core::jwt::{
    self, AccountLimits, AccountNats, ClaimType, Claims, Creds, ExternalAuthorization,
    JetStreamLimits, Nats, NatsLimits, OperatorNats, Permission, Permissions, ResponsePermission,
    UnixSeconds, UserNats, Validity, HEADER, MAX_CREDS_BYTES, MAX_JWT_BYTES,
};
use cotal_core::ErrorCode;
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};

const IAT: UnixSeconds = UnixSeconds(1_700_000_000);
const EXP: UnixSeconds = UnixSeconds(1_700_086_400);

fn key(kind: KeyPairType, n: u8) -> KeyPair {
    KeyPair::new_from_raw(kind, [n; 32]).unwrap()
}

struct Keys {
    operator: KeyPair,
    system: KeyPair,
    account: KeyPair,
    signing: KeyPair,
    user: KeyPair,
}

fn keys() -> Keys {
    Keys {
        operator: key(KeyPairType::Operator, 1),
        system: key(KeyPairType::Account, 2),
        account: key(KeyPairType::Account, 3),
        signing: key(KeyPairType::Account, 4),
        user: key(KeyPairType::User, 5),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn grant() -> UserNats {
    UserNats {
        permissions: Permissions {
            publish: Permission {
                allow: strings(&["cotal.s.ep.inst.svc.i1.>", "_INBOX.>"]),
                deny: strings(&["cotal.s.ep.admin.>"]),
            },
            subscribe: Permission {
                allow: strings(&["cotal.s.ep.cls.svc.run.> q.svc", "_INBOX.>"]),
                deny: Vec::new(),
            },
            response: Some(ResponsePermission {
                max: 1,
                ttl_nanos: 5_000_000_000,
            }),
        },
        tags: strings(&["owner:o1", "actor:a1", "principal:o1.a1"]),
        ..UserNats::default()
    }
}

fn live() -> Validity {
    Validity {
        issued_at: IAT,
        expires_at: Some(EXP),
    }
}

fn user_token(k: &Keys) -> String {
    jwt::user_jwt(
        &k.signing,
        &k.account.public_key(),
        &k.user.public_key(),
        "endpoint-serve",
        &grant(),
        live(),
    )
    .unwrap()
}

fn account_nats(k: &Keys) -> AccountNats {
    AccountNats {
        limits: AccountLimits {
            jetstream: JetStreamLimits::UNLIMITED,
            ..AccountLimits::default()
        },
        signing_keys: vec![k.signing.public_key()],
        ..AccountNats::default()
    }
}

fn operator_nats(k: &Keys) -> OperatorNats {
    OperatorNats {
        system_account: Some(k.system.public_key()),
        ..OperatorNats::default()
    }
}

fn parts(token: &str) -> (Vec<u8>, Value, Vec<u8>) {
    let p: Vec<&str> = token.split('.').collect();
    assert_eq!(p.len(), 3);
    (
        URL_SAFE_NO_PAD.decode(p[0]).unwrap(),
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p[1]).unwrap()).unwrap(),
        URL_SAFE_NO_PAD.decode(p[2]).unwrap(),
    )
}

/// Signs arbitrary header and claims text, for tokens the codec itself would never mint.
fn forge(signer: &KeyPair, header: &str, claims: &str) -> String {
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let sig = signer.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// A well-formed v2 user claim from `iss` about `sub`, with `extra` merged over it.
fn claims_json(iss: &str, sub: &str, extra: Value) -> String {
    let mut c = json!({
        "jti": "X", "iat": IAT.0, "iss": iss, "name": "n", "sub": sub,
        "nats": {"pub": {}, "sub": {}, "type": "user", "version": 2}
    });
    merge(&mut c, extra);
    c.to_string()
}

fn merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) if v.is_object() => merge(slot, v),
                    _ => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, cotal_core::EpError>, code: ErrorCode, needle: &str) {
    let e = r.expect_err("expected a refusal");
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(needle), "{e:?} lacks {needle:?}");
}

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../tests/fixtures/jwt/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn seed_key(seed: &Value) -> KeyPair {
    KeyPair::from_seed(seed.as_str().unwrap()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Round trips and layout
// ---------------------------------------------------------------------------------------------

#[test]
fn header_is_exact() {
    let k = keys();
    for token in [
        user_token(&k),
        jwt::account_jwt(
            &k.operator,
            &k.account.public_key(),
            "data",
            &account_nats(&k),
            live(),
        )
        .unwrap(),
        jwt::operator_jwt(&k.operator, "op", &operator_nats(&k), live()).unwrap(),
    ] {
        let (header, _, sig) = parts(&token);
        assert_eq!(header, HEADER.as_bytes());
        assert_eq!(sig.len(), 64);
        assert!(token.starts_with("eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ."));
    }
}

#[test]
fn user_round_trip_through_decode_and_verify() {
    let k = keys();
    let token = user_token(&k);
    let claims = jwt::verify(&token, ClaimType::User, &k.signing.public_key(), IAT).unwrap();
    let expected = Claims {
        jti: claims.jti.clone(),
        iat: IAT,
        exp: Some(EXP),
        nbf: None,
        aud: None,
        iss: k.signing.public_key(),
        sub: k.user.public_key(),
        name: "endpoint-serve".into(),
        nats: Nats::User {
            user: grant(),
            issuer_account: Some(k.account.public_key()),
        },
    };
    assert_eq!(claims, expected);
    assert_eq!(jwt::decode(&token).unwrap(), expected);
    assert_eq!(claims.user(), Some(&grant()));
    assert_eq!(claims.user_account(), Some(k.account.public_key().as_str()));
}

#[test]
fn user_section_is_written_in_go_field_order() {
    let k = keys();
    let (_, claims, _) = parts(&user_token(&k));
    let keys_of = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys_of(&claims),
        ["exp", "jti", "iat", "iss", "name", "sub", "nats"]
    );
    assert_eq!(
        keys_of(&claims["nats"]),
        [
            "pub",
            "sub",
            "resp",
            "subs",
            "data",
            "payload",
            "issuer_account",
            "tags",
            "type",
            "version"
        ]
    );
    assert_eq!(
        claims["nats"]["resp"],
        json!({"max": 1, "ttl": 5_000_000_000_i64})
    );
    assert_eq!(claims["nats"]["subs"], json!(-1));
    assert_eq!(claims["nats"]["version"], json!(2));
}

#[test]
fn account_signed_user_has_no_issuer_account_and_empty_sections_stay() {
    let k = keys();
    let token = jwt::user_jwt(
        &k.account,
        &k.account.public_key(),
        &k.user.public_key(),
        "plain",
        &UserNats::default(),
        Validity {
            issued_at: IAT,
            expires_at: None,
        },
    )
    .unwrap();
    let (_, raw, _) = parts(&token);
    assert_eq!(
        raw["nats"],
        json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
               "type": "user", "version": 2})
    );
    assert!(raw.get("exp").is_none());
    let claims = jwt::verify(&token, ClaimType::User, &k.account.public_key(), EXP).unwrap();
    assert_eq!(claims.exp, None);
    assert_eq!(
        claims.nats,
        Nats::User {
            user: UserNats::default(),
            issuer_account: None
        }
    );
    assert_eq!(claims.user_account(), Some(k.account.public_key().as_str()));
}

#[test]
fn account_round_trip() {
    let k = keys();
    let nats = AccountNats {
        default_permissions: Permissions {
            publish: Permission {
                allow: strings(&["a.>"]),
                deny: Vec::new(),
            },
            ..Permissions::default()
        },
        tags: strings(&["space:s"]),
        ..account_nats(&k)
    };
    let token =
        jwt::account_jwt(&k.operator, &k.account.public_key(), "data", &nats, live()).unwrap();
    let claims = jwt::verify(&token, ClaimType::Account, &k.operator.public_key(), IAT).unwrap();
    assert_eq!(claims.nats, Nats::Account(nats));
    assert_eq!(claims.sub, k.account.public_key());
    let (_, raw, _) = parts(&token);
    assert_eq!(
        raw["nats"]["limits"],
        json!({"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
               "wildcards": true, "conn": -1, "leaf": -1, "mem_storage": -1,
               "disk_storage": -1, "streams": -1, "consumer": -1})
    );
    assert_eq!(raw["nats"]["signing_keys"], json!([k.signing.public_key()]));
    assert_eq!(raw["nats"]["authorization"], json!({}));
}

/// The raw `nats` section of a token, as the bytes the signer wrote.
fn raw_nats_section(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap();
    let claims = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    let start = claims.find(r#""nats":"#).unwrap() + r#""nats":"#.len();
    claims[start..claims.len() - 1].to_owned()
}

fn callout_authorization(k: &Keys) -> ExternalAuthorization {
    ExternalAuthorization {
        auth_users: vec![k.user.public_key()],
        allowed_accounts: vec![k.account.public_key()],
        xkey: Some(nkeys::XKey::new_from_raw([6; 32]).public_key()),
    }
}

#[test]
fn account_authorization_block_has_gos_bytes_and_position() {
    let k = keys();
    let auth = callout_authorization(&k);
    let nats = AccountNats {
        signing_keys: vec![k.signing.public_key()],
        authorization: Some(auth.clone()),
        ..AccountNats::default()
    };
    let callout = k.system.public_key();
    let token = jwt::account_jwt(&k.operator, &callout, "AUTH_s", &nats, live()).unwrap();
    assert_eq!(
        raw_nats_section(&token),
        format!(
            r#"{{"limits":{{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,"conn":-1,"leaf":-1}},"signing_keys":["{sk}"],"default_permissions":{{"pub":{{}},"sub":{{}}}},"authorization":{{"auth_users":["{u}"],"allowed_accounts":["{a}"],"xkey":"{x}"}},"type":"account","version":2}}"#,
            sk = k.signing.public_key(),
            u = auth.auth_users[0],
            a = auth.allowed_accounts[0],
            x = auth.xkey.as_deref().unwrap(),
        )
    );
    let claims = jwt::verify(&token, ClaimType::Account, &k.operator.public_key(), IAT).unwrap();
    assert_eq!(claims.nats, Nats::Account(nats));

    // Without xkey and with the wildcard account.
    let open = AccountNats {
        authorization: Some(ExternalAuthorization {
            allowed_accounts: strings(&["*"]),
            xkey: None,
            ..auth.clone()
        }),
        ..AccountNats::default()
    };
    let token = jwt::account_jwt(&k.operator, &callout, "AUTH_s", &open, live()).unwrap();
    assert!(raw_nats_section(&token).contains(&format!(
        r#""authorization":{{"auth_users":["{}"],"allowed_accounts":["*"]}},"type""#,
        auth.auth_users[0]
    )));
    assert_eq!(
        jwt::decode(&token).unwrap().nats,
        Nats::Account(open.clone())
    );
}

#[test]
fn account_authorization_block_refusals() {
    let k = keys();
    let good = callout_authorization(&k);
    let mint = |auth: ExternalAuthorization| {
        let nats = AccountNats {
            authorization: Some(auth),
            ..AccountNats::default()
        };
        jwt::account_jwt(&k.operator, &k.system.public_key(), "AUTH", &nats, live())
            .unwrap_err()
            .message
    };
    let no_users = mint(ExternalAuthorization {
        auth_users: vec![],
        ..good.clone()
    });
    assert!(
        no_users.contains("allowed accounts but no auth users"),
        "{no_users}"
    );
    let empty = mint(ExternalAuthorization::default());
    assert!(empty.contains("needs at least one auth user"), "{empty}");
    let wrong_user = mint(ExternalAuthorization {
        auth_users: vec![k.account.public_key()],
        ..good.clone()
    });
    assert!(wrong_user.contains("auth user"), "{wrong_user}");
    let wildcard = mint(ExternalAuthorization {
        allowed_accounts: vec!["*".into(), k.account.public_key()],
        ..good.clone()
    });
    assert!(wildcard.contains("must be the only entry"), "{wildcard}");
    let bad_xkey = mint(ExternalAuthorization {
        xkey: Some(k.user.public_key()),
        ..good.clone()
    });
    assert!(bad_xkey.contains("authorization xkey"), "{bad_xkey}");

    // A foreign token whose block allows accounts without users is malformed on decode; one
    // without any member decodes as no block.
    let claims = |auth: &str| {
        format!(
            r#"{{"iat":1,"iss":"{}","sub":"{}","nats":{{"authorization":{auth},"type":"account","version":2}}}}"#,
            k.operator.public_key(),
            k.system.public_key()
        )
    };
    let forged = forge(
        &k.operator,
        HEADER,
        &claims(&format!(
            r#"{{"allowed_accounts":["{}"]}}"#,
            k.account.public_key()
        )),
    );
    let refusal = jwt::decode(&forged).unwrap_err().message;
    assert!(refusal.contains("no auth users"), "{refusal}");
    let empty = forge(&k.operator, HEADER, &claims("{}"));
    let Nats::Account(a) = jwt::decode(&empty).unwrap().nats else {
        panic!("not an account")
    };
    assert_eq!(a.authorization, None);
}

#[test]
fn operator_round_trip() {
    let k = keys();
    let nats = OperatorNats {
        signing_keys: vec![key(KeyPairType::Operator, 9).public_key()],
        ..operator_nats(&k)
    };
    let token = jwt::operator_jwt(&k.operator, "op", &nats, live()).unwrap();
    let claims = jwt::verify(&token, ClaimType::Operator, &k.operator.public_key(), IAT).unwrap();
    assert_eq!(claims.nats, Nats::Operator(nats));
    assert_eq!(claims.iss, claims.sub);
}

#[test]
fn minting_is_deterministic() {
    let k = keys();
    assert_eq!(user_token(&k), user_token(&k));
}

// ---------------------------------------------------------------------------------------------
// jti
// ---------------------------------------------------------------------------------------------

#[test]
fn jti_recomputes_from_the_standard_claims() {
    let k = keys();
    let claims = jwt::decode(&user_token(&k)).unwrap();
    assert_eq!(claims.recompute_jti().unwrap(), claims.jti);
    assert_eq!(claims.jti.len(), 52);
    assert!(claims
        .jti
        .chars()
        .all(|c| c.is_ascii_uppercase() || ('2'..='7').contains(&c)));
    // The hash input, spelled out: Go's ClaimsData with an empty jti.
    let standard = format!(
        r#"{{"exp":{},"iat":{},"iss":"{}","name":"endpoint-serve","sub":"{}"}}"#,
        EXP.0,
        IAT.0,
        k.signing.public_key(),
        k.user.public_key()
    );
    use sha2::Digest as _;
    let digest = sha2::Sha512_256::digest(standard.as_bytes());
    assert_eq!(claims.jti, base32_reference(&digest));
}

/// An independent bit-by-bit base32 (RFC 4648, unpadded) for the jti check above.
fn base32_reference(bytes: &[u8]) -> String {
    let bits: Vec<u8> = bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    bits.chunks(5)
        .map(|c| {
            let v = c
                .iter()
                .chain(std::iter::repeat(&0))
                .take(5)
                .fold(0u8, |a, b| a << 1 | b);
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"[v as usize] as char
        })
        .collect()
}

#[test]
fn jti_covers_standard_claims_not_the_nats_section() {
    let k = keys();
    let mint = |name: &str, tags: &[&str]| {
        let nats = UserNats {
            tags: strings(tags),
            ..UserNats::default()
        };
        let t = jwt::user_jwt(
            &k.account,
            &k.account.public_key(),
            &k.user.public_key(),
            name,
            &nats,
            live(),
        )
        .unwrap();
        jwt::decode(&t).unwrap().jti
    };
    assert_eq!(mint("a", &["x"]), mint("a", &["y"]));
    assert_ne!(mint("a", &["x"]), mint("b", &["x"]));
}

// ---------------------------------------------------------------------------------------------
// Refusals: minting
// ---------------------------------------------------------------------------------------------

#[test]
fn mint_over_the_size_bound_is_refused_before_signing() {
    let k = keys();
    let mut nats = grant();
    nats.permissions.publish.allow = (0..600)
        .map(|i| format!("cotal.s.ep.subject.{i:04}"))
        .collect();
    let r = jwt::user_jwt(
        &k.signing,
        &k.account.public_key(),
        &k.user.public_key(),
        "big",
        &nats,
        live(),
    );
    let Err(e) = r else {
        panic!("an oversize mint must be refused")
    };
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("16384-byte bound"), "{e}");
    assert_eq!(e.details[0]["limit"], json!(MAX_JWT_BYTES));
    // A public-only signer proves the refusal came before any signature was attempted.
    let public_only = KeyPair::from_public_key(&k.signing.public_key()).unwrap();
    refused(
        jwt::user_jwt(
            &public_only,
            &k.account.public_key(),
            &k.user.public_key(),
            "big",
            &nats,
            live(),
        ),
        ErrorCode::BadRequest,
        "16384-byte bound",
    );
    // Just under the bound still mints, and its length is within it.
    nats.permissions.publish.allow.truncate(300);
    let ok = jwt::user_jwt(
        &k.signing,
        &k.account.public_key(),
        &k.user.public_key(),
        "big",
        &nats,
        live(),
    )
    .unwrap();
    assert!(ok.len() <= MAX_JWT_BYTES);
}

#[test]
fn mint_refuses_wrong_key_kinds_lifetimes_and_control_characters() {
    let k = keys();
    let acct = k.account.public_key();
    let user = k.user.public_key();
    let public_only = KeyPair::from_public_key(&k.signing.public_key()).unwrap();
    let mint = |signer: &KeyPair, account: &str, user: &str, name: &str, v: Validity| {
        jwt::user_jwt(signer, account, user, name, &grant(), v)
    };
    let lifetime = |iat, exp| Validity {
        issued_at: iat,
        expires_at: Some(exp),
    };
    let bad_signing = AccountNats {
        signing_keys: vec![k.operator.public_key()],
        ..AccountNats::default()
    };
    let bad_system = OperatorNats {
        system_account: Some(user.clone()),
        ..OperatorNats::default()
    };
    let seedless_user = KeyPair::from_public_key(&user).unwrap();
    for (result, needle) in [
        (
            mint(&k.operator, &acct, &user, "n", live()),
            "Operator keys cannot sign user JWTs",
        ),
        (
            mint(&k.signing, &user, &user, "n", live()),
            "not a public Account nkey",
        ),
        (mint(&k.signing, &acct, &acct, "n", live()), "subject"),
        (mint(&k.signing, &acct, "UNOTAKEY", "n", live()), "subject"),
        (
            mint(&k.signing, &acct, &user, "n", lifetime(EXP, IAT)),
            "not after",
        ),
        (
            mint(&k.signing, &acct, &user, "n", lifetime(IAT, IAT)),
            "not after",
        ),
        (
            mint(&k.signing, &acct, &user, "a\nb", live()),
            "control character",
        ),
        (mint(&public_only, &acct, &user, "n", live()), "no seed"),
        (
            jwt::account_jwt(&k.user, &acct, "a", &AccountNats::default(), live()),
            "User keys cannot sign account JWTs",
        ),
        (
            jwt::account_jwt(&k.operator, &acct, "a", &bad_signing, live()),
            "account signing key",
        ),
        (
            jwt::operator_jwt(&k.account, "op", &OperatorNats::default(), live()),
            "Account keys cannot sign operator JWTs",
        ),
        (
            jwt::operator_jwt(&k.operator, "op", &bad_system, live()),
            "system account",
        ),
        (
            jwt::user_creds(&k.signing, &acct, &seedless_user, "n", &grant(), live())
                .map(|c| c.jwt),
            "no seed",
        ),
    ] {
        refused(result, ErrorCode::BadRequest, needle);
    }
}

// ---------------------------------------------------------------------------------------------
// Refusals: decoding and verification
// ---------------------------------------------------------------------------------------------

#[test]
fn decode_refuses_oversize_input() {
    let k = keys();
    let token = user_token(&k);
    let padded = format!("{token}{}", "A".repeat(MAX_JWT_BYTES + 1 - token.len()));
    refused(
        jwt::decode(&padded),
        ErrorCode::BadRequest,
        "16384-byte bound",
    );
    refused(
        jwt::verify(&padded, ClaimType::User, &k.signing.public_key(), IAT),
        ErrorCode::BadRequest,
        "16384-byte bound",
    );
}

#[test]
fn decode_refuses_bad_structure_and_base64() {
    let k = keys();
    let token = user_token(&k);
    let p: Vec<&str> = token.split('.').collect();
    for (bad, needle) in [
        (String::new(), "three"),
        (format!("{}.{}", p[0], p[1]), "three"),
        (format!("{token}.x"), "three"),
        (
            format!("{}=.{}.{}", p[0], p[1], p[2]),
            "header is not base64url",
        ),
        (
            format!("{}.{}+.{}", p[0], p[1], p[2]),
            "claims is not base64url",
        ),
        (
            format!("{}.{}.{}=", p[0], p[1], p[2]),
            "signature is not base64url",
        ),
        (
            format!("{}.{}.{}", p[0], p[1], "*"),
            "signature is not base64url",
        ),
        // A last symbol with non-zero trailing bits is not canonical base64url.
        (
            format!("{}.{}.{}B", p[0], p[1], &p[2][..85]),
            "signature is not base64url",
        ),
        (
            format!("{}.{}.{}", URL_SAFE_NO_PAD.encode("[]"), p[1], p[2]),
            "header is not a JSON object",
        ),
        (
            format!("{}.{}.{}", URL_SAFE_NO_PAD.encode("{"), p[1], p[2]),
            "header is not JSON",
        ),
        (
            format!("{}.{}.{}", p[0], URL_SAFE_NO_PAD.encode("7"), p[2]),
            "claims is not a JSON object",
        ),
    ] {
        refused(jwt::decode(&bad), ErrorCode::BadRequest, needle);
    }
}

#[test]
fn decode_refuses_bad_headers() {
    let k = keys();
    let claims = claims_json(&k.account.public_key(), &k.user.public_key(), json!({}));
    for (header, needle) in [
        (r#"{"typ":"JWT","alg":"HS256"}"#, "alg"),
        (r#"{"typ":"JWT","alg":"none"}"#, "alg"),
        (r#"{"typ":"JWT","alg":"EdDSA"}"#, "alg"),
        (r#"{"typ":"JWT"}"#, "alg"),
        (r#"{"typ":"JWS","alg":"ed25519-nkey"}"#, "typ"),
        (r#"{"alg":"ed25519-nkey"}"#, "typ"),
        (r#"{"typ":1,"alg":"ed25519-nkey"}"#, "typ"),
    ] {
        refused(
            jwt::decode(&forge(&k.account, header, &claims)),
            ErrorCode::BadRequest,
            needle,
        );
    }
    // What Go's header check accepts, this accepts: any case, and the v1 algorithm name.
    for header in [
        r#"{"typ":"jwt","alg":"ED25519-NKEY"}"#,
        r#"{"typ":"JWT","alg":"ed25519"}"#,
    ] {
        let t = forge(&k.account, header, &claims);
        jwt::verify(&t, ClaimType::User, &k.account.public_key(), IAT).unwrap();
    }
}

#[test]
fn decode_refuses_bad_claims() {
    let k = keys();
    let acct = k.account.public_key();
    let user = k.user.public_key();
    let op = k.operator.public_key();
    let mut cases: Vec<(String, &str)> = [
        (json!({"type": "user"}), "v1 claim"),
        (json!({"nats": {"version": 1}}), "version 1"),
        (json!({"nats": {"version": 3}}), "version 3"),
        (json!({"nats": {"version": "2"}}), "nats.version"),
        (
            json!({"nats": {"type": "activation"}}),
            "unsupported NATS JWT claim type",
        ),
        (
            json!({"nats": {"type": "generic"}}),
            "unsupported NATS JWT claim type",
        ),
        (json!({"nats": null}), "no nats section"),
        (json!({"nats": []}), "nats is not an object"),
        (json!({"exp": -5}), "exp is not a non-negative integer"),
        (json!({"iat": 1.5}), "iat is not a non-negative integer"),
        (json!({"name": 7}), "name is not a string"),
        (json!({"nats": {"pub": {"allow": "a.>"}}}), "nats.pub.allow"),
        (json!({"nats": {"sub": {"deny": [1]}}}), "nats.sub.deny"),
        (json!({"nats": {"subs": "many"}}), "nats.subs"),
        (json!({"nats": {"resp": {"max": true}}}), "nats.resp.max"),
        (json!({"nats": {"tags": {}}}), "nats.tags"),
        (json!({"nats": {"issuer_account": user}}), "issuer_account"),
    ]
    .into_iter()
    .map(|(extra, needle)| (claims_json(&acct, &user, extra), needle))
    .collect();
    let scoped = json!({"nats": {"type": "account", "signing_keys": [{"kind": "user_scope"}]}});
    cases.extend([
        (
            claims_json("AXYZ", &user, json!({})),
            "is not a public nkey",
        ),
        (
            claims_json(&op, &user, json!({})),
            "keys cannot issue user claims",
        ),
        (
            claims_json(&user, &user, json!({})),
            "keys cannot issue user claims",
        ),
        (claims_json(&acct, &acct, json!({})), "sub"),
        (claims_json(&op, &acct, scoped), "scoped signers"),
    ]);
    for (claims, needle) in cases {
        let t = forge(&k.account, HEADER, &claims);
        refused(jwt::decode(&t), ErrorCode::BadRequest, needle);
    }
    // Unknown fields and nulls are ignored, as Go ignores them.
    let lenient = claims_json(
        &acct,
        &user,
        json!({"future": {"x": 1}, "aud": "NATS", "nats": {"src": ["10.0.0.0/8"], "tags": null}}),
    );
    let c = jwt::decode(&forge(&k.account, HEADER, &lenient)).unwrap();
    assert_eq!(c.aud.as_deref(), Some("NATS"));
    assert_eq!(c.user().unwrap().tags, Vec::<String>::new());
}

#[test]
fn verify_refuses_another_issuer() {
    let k = keys();
    let token = user_token(&k);
    refused(
        jwt::verify(&token, ClaimType::User, &k.account.public_key(), IAT),
        ErrorCode::PermissionDenied,
        "not by the expected issuer",
    );
}

#[test]
fn verify_refuses_bad_signatures() {
    let k = keys();
    let token = user_token(&k);
    let signer = k.signing.public_key();
    let p: Vec<&str> = token.split('.').collect();
    // Claims re-encoded with a widened grant, old signature kept.
    let (_, mut claims, _) = parts(&token);
    claims["nats"]["pub"]["allow"] = json!([">"]);
    let widened = format!(
        "{}.{}.{}",
        p[0],
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        p[2]
    );
    // A signature from a foreign key over the same input.
    let foreign = key(KeyPairType::Account, 66)
        .sign(format!("{}.{}", p[0], p[1]).as_bytes())
        .unwrap();
    let foreign = format!("{}.{}.{}", p[0], p[1], URL_SAFE_NO_PAD.encode(foreign));
    // A signature of the wrong length, and an empty one.
    let short = format!("{}.{}.{}", p[0], p[1], URL_SAFE_NO_PAD.encode([7u8; 63]));
    let empty = format!("{}.{}.", p[0], p[1]);
    for bad in [widened, foreign, short, empty] {
        refused(
            jwt::verify(&bad, ClaimType::User, &signer, IAT),
            ErrorCode::PermissionDenied,
            "signature does not verify",
        );
        // Decoding alone does not look at the signature.
        jwt::decode(&bad).unwrap();
    }
    // A token whose claims name the expected issuer but which another key signed.
    let claims = claims_json(&signer, &k.user.public_key(), json!({}));
    refused(
        jwt::verify(
            &forge(&k.account, HEADER, &claims),
            ClaimType::User,
            &signer,
            IAT,
        ),
        ErrorCode::PermissionDenied,
        "signature does not verify",
    );
}

#[test]
fn verify_refuses_the_wrong_claim_type() {
    let k = keys();
    let account = jwt::account_jwt(
        &k.operator,
        &k.account.public_key(),
        "data",
        &account_nats(&k),
        live(),
    )
    .unwrap();
    refused(
        jwt::verify(&account, ClaimType::User, &k.operator.public_key(), IAT),
        ErrorCode::BadRequest,
        "claim type account, expected user",
    );
    let op = jwt::operator_jwt(&k.operator, "op", &operator_nats(&k), live()).unwrap();
    refused(
        jwt::verify(&op, ClaimType::Account, &k.operator.public_key(), IAT),
        ErrorCode::BadRequest,
        "claim type operator, expected account",
    );
}

#[test]
fn verify_refuses_expired_tokens_at_and_after_exp() {
    let k = keys();
    let token = user_token(&k);
    let signer = k.signing.public_key();
    jwt::verify(&token, ClaimType::User, &signer, UnixSeconds(EXP.0 - 1)).unwrap();
    for now in [EXP, UnixSeconds(EXP.0 + 1), UnixSeconds(u64::MAX)] {
        refused(
            jwt::verify(&token, ClaimType::User, &signer, now),
            ErrorCode::Expired,
            "expired at",
        );
    }
}

#[test]
fn verify_refuses_tokens_not_yet_valid() {
    let k = keys();
    let claims = claims_json(
        &k.account.public_key(),
        &k.user.public_key(),
        json!({"nbf": IAT.0 + 10}),
    );
    let t = forge(&k.account, HEADER, &claims);
    refused(
        jwt::verify(&t, ClaimType::User, &k.account.public_key(), IAT),
        ErrorCode::FailedPrecondition,
        "not valid before",
    );
    let c = jwt::verify(
        &t,
        ClaimType::User,
        &k.account.public_key(),
        UnixSeconds(IAT.0 + 10),
    )
    .unwrap();
    assert_eq!(c.nbf, Some(UnixSeconds(IAT.0 + 10)));
}

#[test]
fn unix_seconds_from_millis_rounds_down() {
    assert_eq!(UnixSeconds::from_millis(1_700_000_000_999), IAT);
}

// ---------------------------------------------------------------------------------------------
// Creds text
// ---------------------------------------------------------------------------------------------

#[test]
fn creds_text_layout_is_exact() {
    let k = keys();
    let creds = jwt::user_creds(
        &k.signing,
        &k.account.public_key(),
        &k.user,
        "endpoint-serve",
        &grant(),
        live(),
    )
    .unwrap();
    assert_eq!(creds.jwt, user_token(&k));
    let seed = k.user.seed().unwrap();
    let want = format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
************************* IMPORTANT *************************\n\
NKEY Seed printed below can be used to sign and prove identity.\n\
NKEYs are sensitive and should be treated as secrets.\n\n\
-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
*************************************************************\n",
        jwt = creds.jwt
    );
    assert_eq!(creds.text(), want);
    assert_eq!(jwt::format_creds(&creds.jwt, &seed).unwrap(), want);
    assert_eq!(jwt::parse_creds(&want).unwrap(), creds);
    assert_eq!(
        jwt::parse_creds(&want.replace('\n', "\r\n")).unwrap(),
        creds
    );
    assert!(!format!("{creds:?}").contains(&seed));
}

#[test]
fn creds_refusals() {
    let k = keys();
    let token = user_token(&k);
    let seed = k.user.seed().unwrap();
    let account = jwt::account_jwt(
        &k.operator,
        &k.account.public_key(),
        "data",
        &account_nats(&k),
        live(),
    )
    .unwrap();
    refused(
        jwt::format_creds(&account, &seed),
        ErrorCode::BadRequest,
        "not account JWTs",
    );
    refused(
        jwt::format_creds(&token, &k.account.seed().unwrap()),
        ErrorCode::BadRequest,
        "not a user nkey seed",
    );
    refused(
        jwt::format_creds(&token, &key(KeyPairType::User, 77).seed().unwrap()),
        ErrorCode::BadRequest,
        "does not belong to the JWT subject",
    );
    refused(
        jwt::format_creds("x.y.z", &seed),
        ErrorCode::BadRequest,
        "malformed NATS JWT",
    );

    let good = Creds {
        jwt: token.clone(),
        seed: seed.clone(),
    }
    .text();
    for (text, needle) in [
        (String::new(), "not NATS creds"),
        ("hello".to_owned(), "not NATS creds"),
        (
            good.split("\n\n*****").next().unwrap().to_owned(),
            "not NATS creds",
        ),
        (
            good.replace("------END USER NKEY SEED------", "END"),
            "not NATS creds",
        ),
        (good.replace(&seed, "S U"), "not NATS creds"),
        (
            good.replace(&seed, &k.account.seed().unwrap()),
            "not a user nkey seed",
        ),
        (
            format!("{good}{}", " ".repeat(MAX_CREDS_BYTES)),
            "byte bound",
        ),
    ] {
        refused(jwt::parse_creds(&text), ErrorCode::BadRequest, needle);
    }
}

// ---------------------------------------------------------------------------------------------
// Golden vectors: tokens minted here, and tokens minted by the reference libraries
// ---------------------------------------------------------------------------------------------

/// What `rust-minted.json` must hold: deterministic tokens from the fixed test keys.
fn rust_minted() -> Value {
    let k = keys();
    let operator = jwt::operator_jwt(
        &k.operator,
        "cotal-test-operator",
        &operator_nats(&k),
        live(),
    )
    .unwrap();
    let system = jwt::account_jwt(
        &k.operator,
        &k.system.public_key(),
        "SYS",
        &AccountNats::default(),
        live(),
    )
    .unwrap();
    let account = jwt::account_jwt(
        &k.operator,
        &k.account.public_key(),
        "data",
        &account_nats(&k),
        live(),
    )
    .unwrap();
    let creds = jwt::user_creds(
        &k.signing,
        &k.account.public_key(),
        &k.user,
        "endpoint-serve",
        &grant(),
        live(),
    )
    .unwrap();
    json!({
        "about": "NATS JWTs minted by cotal_core::jwt from fixed raw keys; decoded by generate.mjs and go-crosscheck.go",
        "iat": IAT.0,
        "exp": EXP.0,
        "seeds": {
            "operator": k.operator.seed().unwrap(),
            "system_account": k.system.seed().unwrap(),
            "account": k.account.seed().unwrap(),
            "account_signing": k.signing.seed().unwrap(),
            "user": k.user.seed().unwrap(),
        },
        "tokens": {
            "operator": operator,
            "system_account": system,
            "account": account,
            "user": creds.jwt,
        },
        "creds": creds.text(),
    })
}

#[test]
fn rust_minted_fixture_is_current() {
    let want = rust_minted();
    let path = format!(
        "{}/../tests/fixtures/jwt/rust-minted.json",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var_os("COTAL_BLESS_JWT_FIXTURE").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&want).unwrap() + "\n").unwrap();
    }
    assert_eq!(
        fixture("rust-minted.json"),
        want,
        "rerun with COTAL_BLESS_JWT_FIXTURE=1"
    );
}

/// Both reference decoders accepted exactly the tokens this crate mints today.
#[test]
fn reference_libraries_accept_tokens_minted_here() {
    let ours = &fixture("rust-minted.json")["tokens"];
    for (lib, file) in [
        ("@nats-io/jwt", "js-vectors.json"),
        ("nats-io/jwt v2", "go-vectors.json"),
    ] {
        let checked = &fixture(file)["decoded_rust_minted"];
        for name in ["operator", "system_account", "account", "user"] {
            let c = &checked[name];
            assert_eq!(c["token"], ours[name], "{lib} checked a stale {name} token");
            assert_eq!(c["ok"], json!(true), "{lib} refused our {name} token: {c}");
            let mine = jwt::decode(ours[name].as_str().unwrap()).unwrap();
            assert_eq!(c["claims"]["sub"], json!(mine.sub), "{lib}: {name}");
            assert_eq!(c["claims"]["iss"], json!(mine.iss), "{lib}: {name}");
        }
        let user = &checked["user"]["claims"]["nats"];
        assert_eq!(
            user["pub"]["allow"],
            json!(grant().permissions.publish.allow),
            "{lib}"
        );
        assert_eq!(
            user["sub"]["allow"],
            json!(grant().permissions.subscribe.allow),
            "{lib}"
        );
        assert_eq!(user["tags"], json!(grant().tags), "{lib}");
    }
    for file in ["js-vectors.json", "go-vectors.json"] {
        let parsed = &fixture(file)["parsed_rust_creds"];
        assert_eq!(parsed["ok"], json!(true), "{file}: {parsed}");
    }
}

/// Expected-claims check shared by both libraries' user vectors.
fn assert_user_vector(v: &Value, lib: &str) -> Claims {
    let seeds = &v["seeds"];
    let signing = seed_key(&seeds["account_signing"]);
    let account = seed_key(&seeds["account"]);
    let user = seed_key(&seeds["user"]);
    let token = v["tokens"]["user"].as_str().unwrap();
    let exp = UnixSeconds(v["expected"]["user"]["exp"].as_u64().unwrap());
    let c = jwt::verify(
        token,
        ClaimType::User,
        &signing.public_key(),
        UnixSeconds(exp.0 - 1),
    )
    .unwrap_or_else(|e| panic!("{lib} user JWT: {e}"));
    let expected = &v["expected"]["user"];
    assert_eq!(c.sub, user.public_key(), "{lib}");
    assert_eq!(c.name, expected["name"].as_str().unwrap(), "{lib}");
    assert_eq!(c.exp, Some(exp), "{lib}");
    assert_eq!(c.iat.0, expected["iat"].as_u64().unwrap(), "{lib}");
    assert_eq!(
        c.user_account(),
        Some(account.public_key().as_str()),
        "{lib}"
    );
    let u = c.user().unwrap();
    let list = |p: &str| -> Vec<String> { serde_json::from_value(expected[p].clone()).unwrap() };
    assert_eq!(u.permissions.publish.allow, list("pub_allow"), "{lib}");
    assert_eq!(u.permissions.publish.deny, list("pub_deny"), "{lib}");
    assert_eq!(u.permissions.subscribe.allow, list("sub_allow"), "{lib}");
    assert_eq!(u.tags, list("tags"), "{lib}");
    assert_eq!(u.limits, NatsLimits::UNLIMITED, "{lib}");
    refused(
        jwt::verify(token, ClaimType::User, &signing.public_key(), exp),
        ErrorCode::Expired,
        "expired",
    );
    refused(
        jwt::verify(token, ClaimType::User, &account.public_key(), IAT),
        ErrorCode::PermissionDenied,
        "expected issuer",
    );
    c
}

#[test]
fn js_reference_user_jwt_decodes_and_verifies() {
    let v = fixture("js-vectors.json");
    let c = assert_user_vector(&v, "@nats-io/jwt");
    // @nats-io/jwt stamps aud "NATS" and a jti of its own (base64 SHA-512), which is why
    // verification never checks the jti.
    assert_eq!(c.aud.as_deref(), Some("NATS"));
    assert_ne!(c.recompute_jti().unwrap(), c.jti);

    let seeds = &v["seeds"];
    let operator = seed_key(&seeds["operator"]);
    let t = &v["tokens"];
    let acct = jwt::verify(
        t["account"].as_str().unwrap(),
        ClaimType::Account,
        &operator.public_key(),
        IAT,
    )
    .unwrap();
    let Nats::Account(a) = &acct.nats else {
        panic!("not an account")
    };
    assert_eq!(
        a.signing_keys,
        [seed_key(&seeds["account_signing"]).public_key()]
    );
    let op = jwt::verify(
        t["operator"].as_str().unwrap(),
        ClaimType::Operator,
        &operator.public_key(),
        IAT,
    )
    .unwrap();
    let Nats::Operator(o) = &op.nats else {
        panic!("not an operator")
    };
    assert_eq!(
        o.system_account,
        Some(seed_key(&seeds["system_account"]).public_key())
    );
    // The JS creds layout (no closing rule, older banner wording) parses too.
    let creds = jwt::parse_creds(v["creds"].as_str().unwrap()).unwrap();
    assert_eq!(creds.jwt, t["user"].as_str().unwrap());
    assert_eq!(creds.seed, seeds["user"].as_str().unwrap());
}

#[test]
fn go_reference_user_jwt_is_byte_identical_to_ours() {
    let v = fixture("go-vectors.json");
    let c = assert_user_vector(&v, "nats-io/jwt v2");
    // Go's jti is the algorithm implemented here.
    assert_eq!(c.recompute_jti().unwrap(), c.jti);
    // Same keys, claims and second: the same bytes.
    let seeds = &v["seeds"];
    let signing = seed_key(&seeds["account_signing"]);
    let account = seed_key(&seeds["account"]);
    let user = seed_key(&seeds["user"]);
    let validity = Validity {
        issued_at: c.iat,
        expires_at: c.exp,
    };
    let ours = jwt::user_creds(
        &signing,
        &account.public_key(),
        &user,
        &c.name,
        c.user().unwrap(),
        validity,
    )
    .unwrap();
    assert_eq!(ours.jwt, v["tokens"]["user"].as_str().unwrap());
    // FormatUserConfig's bytes.
    assert_eq!(ours.text(), v["creds"].as_str().unwrap());
    // Operator claims too (the account layout gained fields after the Go release used).
    let operator = seed_key(&seeds["operator"]);
    let op_token = v["tokens"]["operator"].as_str().unwrap();
    let op = jwt::verify(op_token, ClaimType::Operator, &operator.public_key(), IAT).unwrap();
    assert_eq!(op.recompute_jti().unwrap(), op.jti);
    let Nats::Operator(o) = &op.nats else {
        panic!("not an operator")
    };
    let again = jwt::operator_jwt(
        &operator,
        &op.name,
        o,
        Validity {
            issued_at: op.iat,
            expires_at: op.exp,
        },
    )
    .unwrap();
    assert_eq!(again, op_token);
    let acct = jwt::verify(
        v["tokens"]["account"].as_str().unwrap(),
        ClaimType::Account,
        &operator.public_key(),
        IAT,
    )
    .unwrap();
    assert_eq!(acct.recompute_jti().unwrap(), acct.jti);
    let Nats::Account(a) = &acct.nats else {
        panic!("not an account")
    };
    assert_eq!(a.limits.jetstream, JetStreamLimits::UNLIMITED);
    assert_eq!(a.signing_keys, [signing.public_key()]);
}

/// RFC 8032 §7.1 TEST 1 and TEST 2 signed through nkeys, byte for byte: the precomputed
/// basepoint tables `core/Cargo.toml` turns on (ed25519-dalek `fast`) change how fast a
/// signature is computed, never its bytes (the golden tokens of `rust-minted.json` hold too).
#[test]
fn nkeys_signatures_are_the_rfc_8032_vectors() {
    let hex = |s: &str| data_encoding::HEXLOWER.decode(s.as_bytes()).unwrap();
    for (seed, message, signature) in [
        (
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
            "",
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
        ),
        (
            "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
            "72",
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
        ),
    ] {
        let seed: [u8; 32] = hex(seed).try_into().unwrap();
        let signer = KeyPair::new_from_raw(KeyPairType::Account, seed).unwrap();
        let message = hex(message);
        let signed = signer.sign(&message).unwrap();
        assert_eq!(signed, hex(signature));
        signer.verify(&message, &signed).unwrap();
    }
}
