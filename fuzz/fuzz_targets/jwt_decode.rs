//! NATS JWTs and creds text from arbitrary bytes: `jwt::decode`, `jwt::verify` and
//! `jwt::parse_creds` never panic, and decode and verify agree on structure — a token decode
//! accepts is refused by verify (against its own issuer, type and issue time) only for its
//! signature or its validity window, never as malformed.
//!
//! Input starting with `{` is taken as the claims JSON and wrapped in a valid header and a
//! zero signature, so the fuzzer mutates the claims parser directly instead of base64 text.
#![no_main]

use cotal_core::jwt::{self, HEADER};
use cotal_core::ErrorCode;
use libfuzzer_sys::fuzz_target;

/// Unpadded base64url (the fuzz crate takes no codec dependency of its own).
fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let token = if data.first() == Some(&b'{') {
        format!(
            "{}.{}.{}",
            b64url(HEADER.as_bytes()),
            b64url(data),
            b64url(&[0u8; 64])
        )
    } else {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let _ = jwt::parse_creds(text);
        text.to_owned()
    };
    let Ok(claims) = jwt::decode(&token) else {
        return;
    };
    let _ = claims.recompute_jti();
    if let Err(e) = jwt::verify(&token, claims.claim_type(), &claims.iss, claims.iat) {
        assert!(
            matches!(
                e.code,
                ErrorCode::PermissionDenied | ErrorCode::Expired | ErrorCode::FailedPrecondition
            ),
            "decode accepted what verify calls malformed: {e}"
        );
    }
});
