use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use nkeys::{KeyPair, KeyPairType};

use super::go_json::{base32_nopad, GoObject};
use super::*;

#[test]
fn base32_matches_rfc4648_vectors() {
    // RFC 4648 §10, padding stripped.
    for (input, want) in [
        ("", ""),
        ("f", "MY"),
        ("fo", "MZXQ"),
        ("foo", "MZXW6"),
        ("foob", "MZXW6YQ"),
        ("fooba", "MZXW6YTB"),
        ("foobar", "MZXW6YTBOI"),
    ] {
        assert_eq!(base32_nopad(input.as_bytes()), want);
    }
    assert_eq!(base32_nopad(&[0xff; 32]).len(), 52);
    assert!(base32_nopad(&[0xff; 5]).chars().all(|c| c == '7'));
}

#[test]
fn authorization_responses_carry_exactly_one_verdict() {
    let signer = KeyPair::new_from_raw(KeyPairType::Account, [1; 32]).unwrap();
    let account = KeyPair::new_from_raw(KeyPairType::Account, [2; 32]).unwrap();
    let user = KeyPair::new_from_raw(KeyPairType::User, [3; 32]).unwrap();
    let server = KeyPair::new_from_raw(KeyPairType::Server, [4; 32]).unwrap();
    let mint = |verdict: &AuthorizationVerdict| {
        authorization_response_jwt(
            &signer,
            &account.public_key(),
            &user.public_key(),
            &server.public_key(),
            verdict,
            UnixSeconds(10),
        )
    };
    assert!(mint(&AuthorizationVerdict::Error(String::new())).is_err());
    assert!(mint(&AuthorizationVerdict::Jwt(String::new())).is_err());
    let token = mint(&AuthorizationVerdict::Error("no".into())).unwrap();
    let claims = verify(
        &token,
        ClaimType::AuthorizationResponse,
        &signer.public_key(),
        UnixSeconds(10),
    )
    .unwrap();
    assert_eq!(claims.aud, Some(server.public_key()));
    // Both or neither is what the server refuses; the decoder refuses it too.
    let forged = |nats: &str| {
        let payload = format!(
            r#"{{"iss":"{}","sub":"{}","nats":{nats}}}"#,
            signer.public_key(),
            user.public_key()
        );
        format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(HEADER),
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode([0u8; 64])
        )
    };
    for (nats, needle) in [
        (
            r#"{"type":"authorization_response","version":2,"jwt":"a","error":"b"}"#,
            "both",
        ),
        (
            r#"{"type":"authorization_response","version":2}"#,
            "neither",
        ),
    ] {
        let e = decode(&forged(nats)).unwrap_err();
        assert!(e.message.contains(needle), "{e}");
    }
}

#[test]
fn go_object_escapes_html_and_omits_zero_values() {
    let s = GoObject::new()
        .str_nonempty("a", "<&>\"\\\u{2028}é")
        .str_nonempty("empty", "")
        .int_nonzero("zero", 0)
        .int("n", -1)
        .flag("off", false)
        .seconds("t", Some(UnixSeconds(0)))
        .strs_nonempty("none", &[])
        .finish()
        .unwrap();
    assert_eq!(s, r#"{"a":"\u003c\u0026\u003e\"\\\u2028é","n":-1}"#);
    assert!(GoObject::new().str_nonempty("a", "x\ny").finish().is_err());
}
