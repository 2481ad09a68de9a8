//! Bearer tokens: IdP tokens against a pinned JWKS, and the plane's own EdDSA bearers with
//! their JWKS and key rotation. Every refusal is asserted by its exact sentence.
//!
//! Keys: Ed25519 from the RFC 8032 §7.1 seeds; RSA-2048 and P-256 from the PEM fixtures in
//! `tests/fixtures` (see the README there). `now` is a fixed instant throughout.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use cotal_core::jwt::UnixSeconds;
use cotal_core::names::{ActorToken, InstanceId, LifecycleUid, OwnerToken, SpaceName};
use cotal_core::view::View;
use cotal_core::{EpError, ErrorCode};
use cotal_io_http::bearer::{
    BearerAct, BearerIssuer, IdpConfig, IdpVerifier, KeyRing, SigningKey, TransferWriterClaim,
    JWKS_CACHE_CONTROL, JWKS_MAX_AGE_SECS, KEY_RETENTION_SECS, MAX_BEARER_TTL_SECS,
};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

// ---- fixtures -------------------------------------------------------------------------------

/// 2026-01-01T00:00:00Z.
const NOW: u64 = 1_767_225_600;

/// RFC 8032 §7.1 TEST 1 and TEST 2 secret keys.
const SEED_1: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const SEED_2: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";

/// The RFC 7638 thumbprint of the TEST 1 public key (also RFC 8037 Appendix A.3).
const KID_1: &str = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k";
const KID_2: &str = "FtIu-VbGrfe_KB6CH7GNwODB72MNxj_ml11dEvO-7kk";

const IDP_ISS: &str = "https://id.example.test";
const IDP_AUD: &str = "cotal-plane";

const OWNER: &str = "u_abcdefghijklmnopqrstuvwxyz";

fn now() -> UnixSeconds {
    UnixSeconds(NOW)
}

fn seed(hex: &str) -> [u8; 32] {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    bytes.try_into().unwrap()
}

/// An Ed25519 signing key for `jsonwebtoken`: PKCS#8 v1 DER (RFC 8410) around the seed.
fn ed_key(seed_hex: &str) -> EncodingKey {
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    der.extend_from_slice(&seed(seed_hex));
    EncodingKey::from_ed_der(&der)
}

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The DER body of a single-block PEM file.
fn pem_der(name: &str) -> Vec<u8> {
    let body: String = fixture(name)
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    STANDARD.decode(body).unwrap()
}

fn rsa_key() -> EncodingKey {
    EncodingKey::from_rsa_der(&pem_der("idp-rsa-private.pem"))
}

fn ec_key() -> EncodingKey {
    EncodingKey::from_ec_der(&pem_der("idp-p256-private.pem"))
}

/// The public JWK of `key` as an IdP would publish it.
fn public_jwk(key: &EncodingKey, alg: Algorithm, kid: &str) -> Jwk {
    let mut jwk = Jwk::from_encoding_key(key, alg).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

fn idp_jwks() -> JwkSet {
    JwkSet {
        keys: vec![
            public_jwk(&ed_key(SEED_1), Algorithm::EdDSA, "ed-1"),
            public_jwk(&rsa_key(), Algorithm::RS256, "rsa-1"),
            public_jwk(&ec_key(), Algorithm::ES256, "ec-1"),
        ],
    }
}

fn idp() -> IdpVerifier {
    IdpVerifier::new(IdpConfig {
        issuer: IDP_ISS.into(),
        audience: IDP_AUD.into(),
        jwks: idp_jwks(),
    })
    .unwrap()
}

fn idp_claims() -> Value {
    json!({
        "iss": IDP_ISS,
        "aud": IDP_AUD,
        "sub": "human-42",
        "email": "ada@example.test",
        "iat": NOW - 10,
        "exp": NOW + 300,
    })
}

fn with(mut claims: Value, name: &str, value: Value) -> Value {
    claims[name] = value;
    claims
}

fn sign(alg: Algorithm, kid: Option<&str>, claims: &Value, key: &EncodingKey) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

fn b64(json: &Value) -> String {
    URL_SAFE_NO_PAD.encode(json.to_string())
}

/// A token with any header at all, HMAC-SHA256-signed with `secret` (or unsigned).
fn forged(header: Value, claims: &Value, secret: Option<&[u8]>) -> String {
    let signing_input = format!("{}.{}", b64(&header), b64(claims));
    let sig = match secret {
        Some(secret) => jsonwebtoken::crypto::sign(
            signing_input.as_bytes(),
            &EncodingKey::from_secret(secret).unwrap(),
            Algorithm::HS256,
        )
        .unwrap(),
        None => String::new(),
    };
    format!("{signing_input}.{sig}")
}

/// The refusal's sentence, after checking it is `permission-denied`.
fn denied<T: std::fmt::Debug>(result: Result<T, EpError>) -> String {
    let err = result.expect_err("expected a refusal");
    assert_eq!(err.code, ErrorCode::PermissionDenied, "{err}");
    err.message
}

fn bad_request<T: std::fmt::Debug>(result: Result<T, EpError>) -> String {
    let err = result.expect_err("expected a refusal");
    assert_eq!(err.code, ErrorCode::BadRequest, "{err}");
    err.message
}

// ---- IdP tokens: accepted -------------------------------------------------------------------

#[test]
fn idp_eddsa_token_verifies() {
    let token = sign(
        Algorithm::EdDSA,
        Some("ed-1"),
        &idp_claims(),
        &ed_key(SEED_1),
    );
    let id = idp().verify(&token, now()).unwrap();
    assert_eq!(id.subject, "human-42");
    assert_eq!(id.issuer, IDP_ISS);
    assert_eq!(id.email.as_deref(), Some("ada@example.test"));
    assert_eq!(id.issued_at, UnixSeconds(NOW - 10));
    assert_eq!(id.expires_at, UnixSeconds(NOW + 300));
    assert_eq!(id.kid, "ed-1");
    assert_eq!(id.algorithm, Algorithm::EdDSA);
}

/// The reference's IdP bridge verifies EdDSA only: an RS256 or ES256 token is refused by its
/// algorithm, even signed by a key the JWKS lists, and such a key never verifies.
#[test]
fn idp_rs256_and_es256_tokens_are_refused_eddsa_only() {
    for (alg, kid, key) in [
        (Algorithm::RS256, "rsa-1", rsa_key()),
        (Algorithm::ES256, "ec-1", ec_key()),
    ] {
        let token = sign(alg, Some(kid), &idp_claims(), &key);
        assert_eq!(
            denied(idp().verify(&token, now())),
            format!("algorithm {alg:?} is not accepted; accepted: EdDSA")
        );
    }
}

/// `aud` as a one-element array naming exactly the pin verifies (and `email` is optional); a
/// multi-audience proof, even one that lists the pin, is refused (reference §10.3).
#[test]
fn idp_audience_is_exactly_the_pin_and_email_is_optional() {
    let mut claims = with(idp_claims(), "aud", json!([IDP_AUD]));
    claims.as_object_mut().unwrap().remove("email");
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &claims, &ed_key(SEED_1));
    assert_eq!(idp().verify(&token, now()).unwrap().email, None);

    let claims = with(idp_claims(), "aud", json!(["other-rp", IDP_AUD]));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &claims, &ed_key(SEED_1));
    assert_eq!(
        denied(idp().verify(&token, now())),
        r#"IdP token audience ["other-rp", "cotal-plane"] is not exactly "cotal-plane"; a multi-audience proof is refused"#
    );
}

// ---- IdP tokens: refused, one sentence each -------------------------------------------------

#[test]
fn idp_wrong_aud_is_refused() {
    let claims = with(idp_claims(), "aud", json!(["other-rp", "another-rp"]));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &claims, &ed_key(SEED_1));
    assert_eq!(
        denied(idp().verify(&token, now())),
        r#"IdP token audience ["other-rp", "another-rp"] is not exactly "cotal-plane"; a multi-audience proof is refused"#
    );
}

#[test]
fn idp_wrong_iss_is_refused() {
    let claims = with(idp_claims(), "iss", json!("https://evil.example.test"));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &claims, &ed_key(SEED_1));
    assert_eq!(
        denied(idp().verify(&token, now())),
        r#"IdP token issuer "https://evil.example.test" is not the pinned issuer "https://id.example.test""#
    );
}

#[test]
fn idp_expired_is_refused_from_the_leeway_edge_on() {
    // Valid through exp + 4 s of leeway; refused from exp + 5 s (the reference's skew).
    let at_edge = with(idp_claims(), "exp", json!(NOW - 4));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &at_edge, &ed_key(SEED_1));
    idp().verify(&token, now()).unwrap();

    let expired = with(idp_claims(), "exp", json!(NOW - 5));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &expired, &ed_key(SEED_1));
    assert_eq!(
        denied(idp().verify(&token, now())),
        "IdP token expired at 1767225595 (now 1767225600, leeway 5 s)"
    );
}

#[test]
fn idp_not_yet_valid_is_refused() {
    let at_edge = with(idp_claims(), "nbf", json!(NOW + 5));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &at_edge, &ed_key(SEED_1));
    idp().verify(&token, now()).unwrap();

    let early = with(idp_claims(), "nbf", json!(NOW + 6));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &early, &ed_key(SEED_1));
    assert_eq!(
        denied(idp().verify(&token, now())),
        "IdP token is not valid before 1767225606 (now 1767225600, leeway 5 s)"
    );
}

#[test]
fn idp_iat_in_the_future_is_refused() {
    let at_edge = with(idp_claims(), "iat", json!(NOW + 5));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &at_edge, &ed_key(SEED_1));
    idp().verify(&token, now()).unwrap();

    let claims = with(idp_claims(), "iat", json!(NOW + 6));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &claims, &ed_key(SEED_1));
    assert_eq!(
        denied(idp().verify(&token, now())),
        "IdP token was issued at 1767225606, in the future (now 1767225600, leeway 5 s)"
    );
}

#[test]
fn idp_missing_exp_iat_or_sub_is_refused() {
    for (claim, sentence) in [
        ("exp", "IdP token has no exp claim; it is required"),
        ("iat", "IdP token has no iat claim; it is required"),
        (
            "sub",
            "IdP token has no subject (sub must be a non-empty string)",
        ),
    ] {
        let mut claims = idp_claims();
        claims.as_object_mut().unwrap().remove(claim);
        let token = sign(Algorithm::EdDSA, Some("ed-1"), &claims, &ed_key(SEED_1));
        assert_eq!(
            denied(idp().verify(&token, now())),
            sentence,
            "without {claim}"
        );
    }
    let empty = with(idp_claims(), "sub", json!(""));
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &empty, &ed_key(SEED_1));
    assert_eq!(
        denied(idp().verify(&token, now())),
        "IdP token has no subject (sub must be a non-empty string)"
    );
}

#[test]
fn idp_alg_none_is_refused() {
    let token = forged(json!({"alg": "none", "kid": "ed-1"}), &idp_claims(), None);
    assert_eq!(
        denied(idp().verify(&token, now())),
        r#"algorithm "none" is not accepted (an unsigned token proves nothing); accepted: EdDSA"#
    );
}

#[test]
fn idp_hs256_confusion_with_the_rsa_public_key_as_secret_is_refused() {
    // The classic attack: the RSA key is public, so sign HS256 with its published bytes and
    // hope the verifier feeds the same bytes to HMAC.
    let public_pem = fixture("idp-rsa-public.pem");
    let token = forged(
        json!({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}),
        &idp_claims(),
        Some(public_pem.as_bytes()),
    );
    assert_eq!(
        denied(idp().verify(&token, now())),
        "algorithm HS256 is not accepted (HMAC would let a published public key serve as the \
         shared secret); accepted: EdDSA"
    );
}

/// An EdDSA token naming a pinned EC or RSA key is refused with the key's reason: such keys
/// never verify here.
#[test]
fn idp_alg_key_mismatch_is_refused() {
    for kid in ["ec-1", "rsa-1"] {
        let token = sign(Algorithm::EdDSA, Some(kid), &idp_claims(), &ed_key(SEED_1));
        assert_eq!(
            denied(idp().verify(&token, now())),
            format!(
                "key kid \"{kid}\" in the pinned JWKS cannot verify tokens: it is an EC or RSA \
                 key; IdP tokens are verified with EdDSA (Ed25519) keys only, as the reference's \
                 IdP bridge pins them"
            )
        );
    }
}

#[test]
fn idp_unknown_kid_is_refused() {
    let token = sign(
        Algorithm::EdDSA,
        Some("ed-9"),
        &idp_claims(),
        &ed_key(SEED_1),
    );
    assert_eq!(
        denied(idp().verify(&token, now())),
        r#"no key with kid "ed-9" in the pinned JWKS"#
    );
}

#[test]
fn idp_missing_kid_is_refused() {
    let token = sign(Algorithm::EdDSA, None, &idp_claims(), &ed_key(SEED_1));
    assert_eq!(
        denied(idp().verify(&token, now())),
        "IdP token header has no kid; the pinned JWKS is searched by kid only"
    );
}

#[test]
fn idp_bad_signature_is_refused() {
    // Signed by the RFC 8032 TEST 2 key while claiming the pinned TEST 1 key.
    let token = sign(
        Algorithm::EdDSA,
        Some("ed-1"),
        &idp_claims(),
        &ed_key(SEED_2),
    );
    assert_eq!(
        denied(idp().verify(&token, now())),
        r#"IdP token signature does not verify under key kid "ed-1""#
    );
}

#[test]
fn idp_embedded_key_header_is_refused() {
    let good = sign(
        Algorithm::EdDSA,
        Some("ed-1"),
        &idp_claims(),
        &ed_key(SEED_1),
    );
    let (_, rest) = good.split_once('.').unwrap();
    // Each header that can carry or point at a key of its own (RFC 7515 §4.1.2–4.1.6).
    for (param, value) in [
        ("jku", json!("https://evil.example.test/jwks")),
        (
            "jwk",
            json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}),
        ),
        ("x5u", json!("https://evil.example.test/cert.pem")),
        ("x5c", json!(["MIIBszCCAVmgAwIBAgIUQ"])),
    ] {
        let mut header = json!({"alg": "EdDSA", "kid": "ed-1"});
        header[param] = value;
        let token = format!("{}.{rest}", b64(&header));
        assert_eq!(
            denied(idp().verify(&token, now())),
            format!(
                "IdP token header carries embedded key material ({param}); keys resolve only \
                 through the pinned JWKS"
            )
        );
    }
}

#[test]
fn idp_duplicate_alg_header_is_refused() {
    let good = sign(
        Algorithm::EdDSA,
        Some("ed-1"),
        &idp_claims(),
        &ed_key(SEED_1),
    );
    let (_, rest) = good.split_once('.').unwrap();
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"EdDSA","kid":"ed-1","alg":"HS256"}"#);
    assert_eq!(
        denied(idp().verify(&format!("{header}.{rest}"), now())),
        r#"IdP token header is not strict JSON (duplicate object key "alg"; send each key once at line 1 column 33)"#
    );
}

#[test]
fn verification_reads_no_clock() {
    // Valid only around 2001-09-09 and long expired by any wall clock: `now` alone decides.
    let then = 1_000_000_000;
    let claims = with(
        with(idp_claims(), "iat", json!(then)),
        "exp",
        json!(then + 300),
    );
    let token = sign(Algorithm::EdDSA, Some("ed-1"), &claims, &ed_key(SEED_1));
    idp().verify(&token, UnixSeconds(then)).unwrap();
    let issued = plane().issue(&act(), None, UnixSeconds(then)).unwrap();
    plane().verify(&issued.token, UnixSeconds(then)).unwrap();
}

#[test]
fn idp_oversize_token_is_refused() {
    let token = "a".repeat(16 * 1024 + 1);
    assert_eq!(
        denied(idp().verify(&token, now())),
        "IdP token is 16385 bytes; the limit is 16384 bytes"
    );
}

#[test]
fn idp_symmetric_key_in_the_pinned_jwks_never_verifies() {
    let mut jwks = idp_jwks();
    let oct: Jwk =
        serde_json::from_value(json!({"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"})).unwrap();
    jwks.keys.push(oct);
    let verifier = IdpVerifier::new(IdpConfig {
        issuer: IDP_ISS.into(),
        audience: IDP_AUD.into(),
        jwks,
    })
    .unwrap();
    let token = sign(
        Algorithm::EdDSA,
        Some("hmac"),
        &idp_claims(),
        &ed_key(SEED_1),
    );
    assert_eq!(
        denied(verifier.verify(&token, now())),
        r#"key kid "hmac" in the pinned JWKS cannot verify tokens: it is a symmetric (oct) key, and shared secrets are never accepted"#
    );
}

#[test]
fn idp_pinning_refuses_ambiguous_or_useless_key_sets() {
    let config = |keys: Vec<Jwk>| IdpConfig {
        issuer: IDP_ISS.into(),
        audience: IDP_AUD.into(),
        jwks: JwkSet { keys },
    };
    let ed = public_jwk(&ed_key(SEED_1), Algorithm::EdDSA, "k");
    let ec = public_jwk(&ec_key(), Algorithm::ES256, "k");
    assert_eq!(
        bad_request(IdpVerifier::new(config(vec![ed, ec]))),
        r#"the pinned IdP JWKS lists kid "k" twice; selection by kid must be unambiguous"#
    );
    let rs256 = public_jwk(&rsa_key(), Algorithm::RS256, "rsa-256");
    assert_eq!(
        bad_request(IdpVerifier::new(config(vec![rs256]))),
        r#"the pinned IdP JWKS has no usable signing key with a kid (EdDSA) [kid "rsa-256": it is an EC or RSA key; IdP tokens are verified with EdDSA (Ed25519) keys only, as the reference's IdP bridge pins them]"#
    );
}

#[test]
fn mangled_tokens_are_refused_without_panicking() {
    let good = sign(
        Algorithm::EdDSA,
        Some("ed-1"),
        &idp_claims(),
        &ed_key(SEED_1),
    );
    let verifier = idp();
    for cut in 0..good.len() {
        assert!(
            verifier.verify(&good[..cut], now()).is_err(),
            "cut at {cut}"
        );
    }
    // Every header byte, then a sample of the rest (each flip there costs a verification).
    let header_len = good.find('.').unwrap() + 1;
    let positions = (0..header_len).chain((header_len..good.len()).step_by(11));
    for at in positions {
        for c in [b'A', b'~'] {
            let mut bytes = good.clone().into_bytes();
            bytes[at] = c;
            // A flip in a base64 padding bit may leave the token intact; nothing may panic.
            let _ = verifier.verify(&String::from_utf8(bytes).unwrap(), now());
        }
    }
}

// ---- the plane's bearers: keys and JWKS -----------------------------------------------------

#[test]
fn signing_key_from_rfc8032_seed_has_the_rfc_public_key_and_thumbprint() {
    let key = SigningKey::from_seed(&seed(SEED_1)).unwrap();
    // RFC 8032 TEST 1 public key d75a9801…511a, base64url.
    assert_eq!(
        key.public_x(),
        "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    );
    assert_eq!(key.kid(), KID_1);
    assert_eq!(
        format!("{key:?}"),
        format!("SigningKey {{ kid: {KID_1:?} }}")
    );
}

#[test]
fn jwks_golden_for_the_plane_key() {
    let ring = KeyRing::new(SigningKey::from_seed(&seed(SEED_1)).unwrap());
    assert_eq!(
        ring.jwks().to_string(),
        r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k","alg":"EdDSA","use":"sig"}]}"#
    );
}

#[test]
fn jwks_cache_control_is_max_age_300() {
    assert_eq!(JWKS_CACHE_CONTROL, "max-age=300");
    assert_eq!(JWKS_CACHE_CONTROL, format!("max-age={JWKS_MAX_AGE_SECS}"));
    assert_eq!(KEY_RETENTION_SECS, 300 + MAX_BEARER_TTL_SECS);
}

// ---- the plane's bearers: issue and verify --------------------------------------------------

fn space() -> SpaceName {
    SpaceName::parse("acme").unwrap()
}

fn plane() -> BearerIssuer {
    BearerIssuer::new(
        space(),
        KeyRing::new(SigningKey::from_seed(&seed(SEED_1)).unwrap()),
    )
}

fn act() -> BearerAct {
    let mut act = BearerAct::new(
        OwnerToken::parse(OWNER).unwrap(),
        ActorToken::parse("worker_1").unwrap(),
    );
    act.scope = Some(vec!["chat".into()]);
    act.lifecycle_uid = Some(LifecycleUid::parse("0123456789abcdefghijklmnop").unwrap());
    act
}

/// Well-formed bearer claims as the plane mints them, for tampering before signing.
fn bearer_claims() -> Value {
    json!({
        "scope": [],
        "ver": 1,
        "act": {"owner": OWNER, "actor": "worker_1"},
        "sub": OWNER,
        "iss": "urn:cotal:auth:acme",
        "aud": "acme",
        "iat": NOW,
        "nbf": NOW,
        "exp": NOW + 600,
    })
}

/// Signs `claims` with a plane key, exactly as the issuer would, so only the claims differ.
fn plane_signed(claims: &Value, seed_hex: &str, kid: &str) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.typ = None;
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &ed_key(seed_hex)).unwrap()
}

#[test]
fn bearer_golden_token_and_round_trip() {
    let issued = plane().issue(&act(), Some(600), now()).unwrap();
    // Independently signed (Python `cryptography`, RFC 8032 TEST 1 key) over header
    // {"alg":"EdDSA","kid":KID_1} and claims scope, ver, act, sub, iss, aud, iat, nbf, exp.
    assert_eq!(
        issued.token,
        "eyJhbGciOiJFZERTQSIsImtpZCI6ImtQcktfcW14VldhWVZBOXd3QkY2SXVvM3ZWeno3VHhIQ1R3WEJ5Z3JTNGsifQ.\
         eyJzY29wZSI6WyJjaGF0Il0sInZlciI6MSwiYWN0Ijp7Im93bmVyIjoidV9hYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5eiIsImFjdG9yIjoid29ya2VyXzEiLCJzY29wZSI6WyJjaGF0Il0sImxpZmVjeWNsZVVpZCI6IjAxMjM0NTY3ODlhYmNkZWZnaGlqa2xtbm9wIn0sInN1YiI6InVfYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoiLCJpc3MiOiJ1cm46Y290YWw6YXV0aDphY21lIiwiYXVkIjoiYWNtZSIsImlhdCI6MTc2NzIyNTYwMCwibmJmIjoxNzY3MjI1NjAwLCJleHAiOjE3NjcyMjYyMDB9.\
         azmbrEOQrLQ2XUEZigqcRygJc8RsGlOipkFeP_g040SMuh5RRvXEnNe68jD1Lng963Uv-ZKdbZxYdcqACMapBA"
    );
    assert_eq!(issued.expires_at, UnixSeconds(NOW + 600));
    assert_eq!(issued.kid, KID_1);

    let verified = plane().verify(&issued.token, now()).unwrap();
    assert_eq!(verified.owner.as_str(), OWNER);
    assert_eq!(verified.space, space());
    assert_eq!(verified.scope, vec!["chat".to_owned()]);
    assert_eq!(verified.act, act());
    assert_eq!(verified.ver, 1);
    assert_eq!(verified.issued_at, now());
    assert_eq!(verified.expires_at, UnixSeconds(NOW + 600));
    assert_eq!(verified.kid, KID_1);
}

#[test]
fn bearer_views_round_trip_with_their_companion_claims() {
    let mut tw = act();
    tw.view = Some(View::TransferWriter);
    tw.transfer_writer = Some(TransferWriterClaim {
        instance_id: InstanceId::parse("abcdefghijklmnopqrstuvwxyz").unwrap(),
        hex: "ab".repeat(32),
    });
    // Default ttl is the view's cap: 300 s for transfer-writer.
    let issued = plane().issue(&tw, None, now()).unwrap();
    assert_eq!(issued.expires_at, UnixSeconds(NOW + 300));
    assert_eq!(plane().verify(&issued.token, now()).unwrap().act, tw);

    assert_eq!(
        bad_request(plane().issue(&tw, Some(301), now())),
        "cannot issue the bearer: ttl 301 s is out of range (0, 300]; short-lived bearers are \
         the revocation lever"
    );
}

#[test]
fn bearer_issue_refuses_what_verify_would_refuse() {
    let mut caller = act();
    caller.view = Some(View::ManagerCaller);
    assert_eq!(
        bad_request(plane().issue(&caller, None, now())),
        r#"cannot issue the bearer: view "manager-caller" and act.managerInstanceId come together or not at all"#
    );
    let local = BearerAct::new(OwnerToken::local(), ActorToken::parse("a").unwrap());
    assert_eq!(
        bad_request(plane().issue(&local, None, now())),
        r#"cannot issue the bearer: act.owner "local" is not a derived owner (u_ + 26 base32 chars [a-z2-7])"#
    );
    assert_eq!(
        bad_request(plane().issue(&act(), Some(901), now())),
        "cannot issue the bearer: ttl 901 s is out of range (0, 900]; short-lived bearers are \
         the revocation lever"
    );
}

#[test]
fn bearer_wrong_aud_is_refused() {
    let claims = with(bearer_claims(), "aud", json!("other-space"));
    let token = plane_signed(&claims, SEED_1, KID_1);
    assert_eq!(
        denied(plane().verify(&token, now())),
        r#"bearer audience ["other-space"] is not exactly the space "acme"; a multi-audience bearer would replay across spaces"#
    );
    let claims = with(bearer_claims(), "aud", json!(["acme", "other-space"]));
    let token = plane_signed(&claims, SEED_1, KID_1);
    assert_eq!(
        denied(plane().verify(&token, now())),
        r#"bearer audience ["acme", "other-space"] is not exactly the space "acme"; a multi-audience bearer would replay across spaces"#
    );
}

#[test]
fn bearer_wrong_iss_is_refused() {
    let claims = with(bearer_claims(), "iss", json!("urn:cotal:auth:other"));
    let token = plane_signed(&claims, SEED_1, KID_1);
    assert_eq!(
        denied(plane().verify(&token, now())),
        r#"bearer issuer "urn:cotal:auth:other" is not the pinned issuer "urn:cotal:auth:acme""#
    );
}

#[test]
fn bearer_expired_is_refused_from_the_leeway_edge_on() {
    let issued = plane().issue(&act(), Some(60), now()).unwrap();
    plane()
        .verify(&issued.token, UnixSeconds(NOW + 64))
        .unwrap();
    assert_eq!(
        denied(plane().verify(&issued.token, UnixSeconds(NOW + 65))),
        "bearer expired at 1767225660 (now 1767225665, leeway 5 s)"
    );
}

#[test]
fn bearer_not_yet_valid_is_refused() {
    let issued = plane().issue(&act(), Some(60), now()).unwrap();
    plane().verify(&issued.token, UnixSeconds(NOW - 5)).unwrap();
    // iat and nbf are both `now`; nbf is checked first.
    assert_eq!(
        denied(plane().verify(&issued.token, UnixSeconds(NOW - 6))),
        "bearer is not valid before 1767225600 (now 1767225594, leeway 5 s)"
    );
}

#[test]
fn bearer_postdated_beyond_the_cap_is_refused() {
    // exp - iat is within the cap, but the whole window sits in the future.
    let claims = with(
        with(bearer_claims(), "exp", json!(NOW + 900 + 6)),
        "iat",
        json!(NOW + 5),
    );
    let token = plane_signed(&with(claims, "nbf", json!(NOW)), SEED_1, KID_1);
    assert_eq!(
        denied(plane().verify(&token, now())),
        "bearer exp 1767226506 is more than the 900 s cap past now (1767225600); short-lived \
         bearers are the revocation lever"
    );
}

#[test]
fn bearer_stale_ver_is_refused() {
    let token = plane_signed(&with(bearer_claims(), "ver", json!(0)), SEED_1, KID_1);
    assert_eq!(
        denied(plane().verify(&token, now())),
        "bearer ver 0 is not 1: a stale or unknown token shape (downgrade defence)"
    );
}

#[test]
fn bearer_sub_other_than_act_owner_is_refused() {
    let claims = with(
        bearer_claims(),
        "sub",
        json!("u_zzzzzzzzzzzzzzzzzzzzzzzzzz"),
    );
    let token = plane_signed(&claims, SEED_1, KID_1);
    assert_eq!(
        denied(plane().verify(&token, now())),
        r#"bearer act.owner "u_abcdefghijklmnopqrstuvwxyz" is not sub "u_zzzzzzzzzzzzzzzzzzzzzzzzzz"; inconsistent principal"#
    );
}

#[test]
fn bearer_alg_none_is_refused() {
    let token = forged(json!({"alg": "none", "kid": KID_1}), &bearer_claims(), None);
    assert_eq!(
        denied(plane().verify(&token, now())),
        r#"algorithm "none" is not accepted (an unsigned token proves nothing); accepted: EdDSA"#
    );
}

#[test]
fn bearer_hs256_confusion_with_the_published_key_is_refused() {
    let x = URL_SAFE_NO_PAD
        .decode(plane().ring().current().public_x())
        .unwrap();
    let token = forged(
        json!({"alg": "HS256", "kid": KID_1}),
        &bearer_claims(),
        Some(&x),
    );
    assert_eq!(
        denied(plane().verify(&token, now())),
        "algorithm HS256 is not accepted (HMAC would let a published public key serve as the \
         shared secret); accepted: EdDSA"
    );
}

#[test]
fn bearer_alg_key_mismatch_is_refused() {
    let token = sign(Algorithm::ES256, Some(KID_1), &bearer_claims(), &ec_key());
    assert_eq!(
        denied(plane().verify(&token, now())),
        "algorithm ES256 is not accepted; accepted: EdDSA"
    );
}

#[test]
fn bearer_unknown_kid_is_refused() {
    let token = plane_signed(&bearer_claims(), SEED_2, KID_2);
    assert_eq!(
        denied(plane().verify(&token, now())),
        r#"unknown kid: no key with kid "FtIu-VbGrfe_KB6CH7GNwODB72MNxj_ml11dEvO-7kk" is published in the bearer JWKS (never this plane's, or retired and pruned)"#
    );
}

#[test]
fn bearer_missing_kid_is_refused() {
    let token = sign(Algorithm::EdDSA, None, &bearer_claims(), &ed_key(SEED_1));
    assert_eq!(
        denied(plane().verify(&token, now())),
        "bearer header has no kid; bearer keys are selected by kid only"
    );
}

#[test]
fn bearer_bad_signature_is_refused() {
    // The TEST 2 key signing under the TEST 1 kid.
    let token = plane_signed(&bearer_claims(), SEED_2, KID_1);
    assert_eq!(
        denied(plane().verify(&token, now())),
        r#"bearer signature does not verify under key kid "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k""#
    );
}

// ---- rotation -------------------------------------------------------------------------------

#[test]
fn rotated_key_still_verifies_until_prune_then_is_refused_as_unknown_kid() {
    let mut plane = plane();
    let old = plane.issue(&act(), None, now()).unwrap();
    let rotated_at = UnixSeconds(NOW + 100);
    plane
        .ring_mut()
        .rotate(SigningKey::from_seed(&seed(SEED_2)).unwrap(), rotated_at)
        .unwrap();

    // New bearers are signed by the new key; the old key's bearer still verifies.
    let new = plane.issue(&act(), None, rotated_at).unwrap();
    assert_eq!(new.kid, KID_2);
    assert_eq!(plane.ring().kids(), vec![KID_2, KID_1]);
    plane.verify(&old.token, rotated_at).unwrap();
    plane.verify(&new.token, rotated_at).unwrap();

    // Published until retired_at + 300 + 900 = rotation + 1200, dropped at that instant.
    let drop_at = UnixSeconds(rotated_at.0 + 1200);
    assert_eq!(plane.ring().drop_at(KID_1), Some(drop_at));
    assert_eq!(plane.ring().drop_at(KID_2), None);
    assert!(plane
        .ring_mut()
        .prune(UnixSeconds(drop_at.0 - 1))
        .is_empty());
    assert_eq!(plane.ring().jwks()["keys"].as_array().unwrap().len(), 2);
    plane.verify(&old.token, rotated_at).unwrap();

    assert_eq!(plane.ring_mut().prune(drop_at), vec![KID_1.to_owned()]);
    assert_eq!(plane.ring().kids(), vec![KID_2]);
    assert_eq!(
        plane.ring().jwks()["keys"][0]["kid"],
        Value::String(KID_2.into())
    );
    assert_eq!(
        denied(plane.verify(&old.token, rotated_at)),
        r#"unknown kid: no key with kid "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" is published in the bearer JWKS (never this plane's, or retired and pruned)"#
    );
    plane.verify(&new.token, rotated_at).unwrap();

    // The current key is never pruned.
    assert!(plane.ring_mut().prune(UnixSeconds(u64::MAX)).is_empty());
}

#[test]
fn rotating_to_a_key_already_in_the_ring_is_refused() {
    let mut ring = KeyRing::new(SigningKey::from_seed(&seed(SEED_1)).unwrap());
    ring.rotate(SigningKey::from_seed(&seed(SEED_2)).unwrap(), now())
        .unwrap();
    let err = ring
        .rotate(SigningKey::from_seed(&seed(SEED_1)).unwrap(), now())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    assert_eq!(
        err.message,
        r#"key kid "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" is already in the ring; rotate to a fresh key"#
    );
}

// ---- the trust root's issuer keys as a ring -------------------------------------------------

/// The trust root's `issuer.json` with the TEST 1 key alone.
fn trust_root_keys(space: &SpaceName) -> cotal_core::trust::IssuerKeys {
    let key = cotal_core::trust::IssuerKey::from_seed(seed(SEED_1)).unwrap();
    let bytes = json!({
        "ver": 1,
        "issuer": format!("urn:cotal:auth:{space}"),
        "activeKid": key.kid(),
        "keys": [{"kid": key.kid(), "privateJwk": {
            "kty": "OKP", "crv": "Ed25519", "x": key.x(), "d": URL_SAFE_NO_PAD.encode(key.seed()),
        }}],
    })
    .to_string();
    cotal_core::trust::IssuerKeys::parse(bytes.as_bytes(), space, "issuer.json").unwrap()
}

/// The running plane follows the trust root's keys: a failed read keeps the keys in use, a
/// rotation is adopted by the next read.
#[tokio::test]
async fn the_issuer_follows_the_trust_roots_keys_and_keeps_them_through_a_failed_read() {
    use std::time::Duration;
    let space = SpaceName::parse("bearer").unwrap();
    let one = trust_root_keys(&space);
    let issuer = BearerIssuer::of_issuer_keys(space.clone(), &one).unwrap();
    assert_eq!(issuer.ring().kids(), vec![KID_1]);
    let period = Duration::from_millis(5);
    let missing = || Err("it is missing".to_owned());
    let _ = tokio::time::timeout(Duration::from_millis(50), issuer.follow(period, missing)).await;
    assert_eq!(issuer.ring().kids(), vec![KID_1]);

    let next = cotal_core::trust::IssuerKey::from_seed(seed(SEED_2)).unwrap();
    let rotated = one.rotated(next).unwrap();
    let read = || KeyRing::of_issuer_keys(&rotated);
    let _ = tokio::time::timeout(Duration::from_millis(50), issuer.follow(period, read)).await;
    assert_eq!(issuer.ring().kids(), vec![KID_2, KID_1]);
}

#[test]
fn the_issuer_adopts_a_rotation_and_a_prune_of_the_trust_roots_keys_once_each() {
    let space = SpaceName::parse("bearer").unwrap();
    let one = trust_root_keys(&space);
    let issuer = BearerIssuer::new(space.clone(), KeyRing::of_issuer_keys(&one).unwrap());
    assert_eq!(issuer.ring().kids(), vec![KID_1]);
    // The same keys again: nothing to adopt.
    assert_eq!(issuer.adopt(KeyRing::of_issuer_keys(&one).unwrap()), None);

    let next = cotal_core::trust::IssuerKey::from_seed(seed(SEED_2)).unwrap();
    let rotated = one.rotated(next).unwrap();
    let adopted = issuer.adopt(KeyRing::of_issuer_keys(&rotated).unwrap());
    // The signing key first, then the one that still verifies.
    assert_eq!(adopted, Some(vec![KID_2.to_owned(), KID_1.to_owned()]));
    assert_eq!(issuer.ring().current().kid(), KID_2);
    assert_eq!(
        issuer.adopt(KeyRing::of_issuer_keys(&rotated).unwrap()),
        None
    );

    let pruned = rotated.pruned();
    assert_eq!(
        issuer.adopt(KeyRing::of_issuer_keys(&pruned).unwrap()),
        Some(vec![KID_2.to_owned()])
    );
    assert_eq!(issuer.ring().kids(), vec![KID_2]);
}
