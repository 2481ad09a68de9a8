//! Decoding and verification of a token: size bounds, the three base64url parts, the header,
//! the signature against the expected issuer, and the validity window.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use nkeys::KeyPair;
use serde_json::{Map, Value};

use crate::error::EpError;

use super::claims::{ClaimType, Claims, UnixSeconds};
use super::read::{claims_from, malformed};
use super::MAX_REQUEST_JWT_BYTES;

/// A structurally valid token: its claims, what was signed and the signature.
struct Parsed<'t> {
    claims: Claims,
    signing_input: &'t str,
    signature: Vec<u8>,
}

/// Decodes a NATS JWT **without checking its signature** (for inspecting a token already
/// trusted, e.g. one this plane just minted). Refuses `bad-request` for: more than
/// [`MAX_JWT_BYTES`](super::MAX_JWT_BYTES) ([`MAX_REQUEST_JWT_BYTES`](super::MAX_REQUEST_JWT_BYTES), [`MAX_RESPONSE_JWT_BYTES`](super::MAX_RESPONSE_JWT_BYTES) for the callout's
/// kinds); not three dot-separated parts; non-canonical base64url; a header whose `typ` is not
/// `JWT` or whose `alg` is not `ed25519-nkey`/`ed25519`; claims that are not a v2 operator,
/// account, user, authorization request or authorization response claim with well-typed fields
/// and issuer/subject nkeys of the right kind.
pub fn decode(token: &str) -> Result<Claims, EpError> {
    parse(token).map(|p| p.claims)
}

/// Decodes and verifies a NATS JWT: it must be a `kind` claim issued by `issuer` (the caller's
/// trusted public nkey), its Ed25519 signature must verify under that key, and it must be
/// valid at `now`. Refusals: everything [`decode`] refuses; another issuer or a bad signature
/// → `permission-denied`; another claim type → `bad-request`; `now >= exp` → `expired`
/// (RFC 7519: not accepted *on or after* `exp`, one second stricter than the Go library);
/// `now < nbf` → `failed-precondition`.
pub fn verify(
    token: &str,
    kind: ClaimType,
    issuer: &str,
    now: UnixSeconds,
) -> Result<Claims, EpError> {
    let claims = verify_signature(token, issuer)?;
    if claims.claim_type() != kind {
        return Err(EpError::bad_request(format!(
            "the JWT is of claim type {}, expected {kind}",
            claims.claim_type()
        )));
    }
    if let Some(exp) = claims.exp {
        if now >= exp {
            return Err(EpError::expired(format!(
                "the JWT expired at {} (now {}); mint a fresh one",
                exp.0, now.0
            )));
        }
    }
    if let Some(nbf) = claims.nbf {
        if now < nbf {
            return Err(EpError::failed_precondition(format!(
                "the JWT is not valid before {} (now {})",
                nbf.0, now.0
            )));
        }
    }
    Ok(claims)
}

/// Decodes a NATS JWT and checks only who signed it: it must be issued by `issuer` and its
/// Ed25519 signature must verify under that key. No claim type or time check — for a caller
/// with its own rules there (the auth callout's whole-second request expiry). Refusals: those
/// of [`decode`]; another issuer or a bad signature → `permission-denied`.
pub fn verify_signature(token: &str, issuer: &str) -> Result<Claims, EpError> {
    let parsed = parse(token)?;
    let claims = parsed.claims;
    if claims.iss != issuer {
        return Err(EpError::permission_denied(format!(
            "the JWT was issued by {}, not by the expected issuer {issuer}",
            claims.iss
        )));
    }
    let key = KeyPair::from_public_key(&claims.iss)
        .map_err(|_| EpError::permission_denied("the JWT issuer is not a public nkey"))?;
    key.verify(parsed.signing_input.as_bytes(), &parsed.signature)
        .map_err(|_| {
            EpError::permission_denied(format!(
                "the JWT signature does not verify under its issuer {issuer}"
            ))
        })?;
    Ok(claims)
}

fn oversize(token: &str, limit: usize) -> EpError {
    EpError::bad_request(format!(
        "the JWT is {} bytes, over the {limit}-byte bound",
        token.len()
    ))
}

fn parse(token: &str) -> Result<Parsed<'_>, EpError> {
    // The largest bound of any kind first, so no oversize input is even base64-decoded; the
    // kind's own bound once the claims name it.
    if token.len() > MAX_REQUEST_JWT_BYTES {
        return Err(oversize(token, MAX_REQUEST_JWT_BYTES));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("expected three dot-separated parts"));
    };
    check_header(&json_object(header, "header")?)?;
    let claims = claims_from(&json_object(payload, "claims")?)?;
    let limit = claims.claim_type().max_bytes();
    if token.len() > limit {
        return Err(oversize(token, limit));
    }
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|e| malformed(format_args!("signature is not base64url: {e}")))?;
    let signing_input = token
        .get(..header.len() + 1 + payload.len())
        .ok_or_else(|| malformed("truncated signing input"))?;
    Ok(Parsed {
        claims,
        signing_input,
        signature,
    })
}

fn json_object(part: &str, what: &str) -> Result<Map<String, Value>, EpError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|e| malformed(format_args!("{what} is not base64url: {e}")))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(malformed(format_args!("{what} is not a JSON object"))),
        Err(e) => Err(malformed(format_args!("{what} is not JSON: {e}"))),
    }
}

/// Go's `Header.Valid`: `typ` is `JWT` in any case; `alg` is `ed25519-nkey` or the v1 name
/// `ed25519`, in any case.
fn check_header(header: &Map<String, Value>) -> Result<(), EpError> {
    let typ = header.get("typ").and_then(Value::as_str).unwrap_or("");
    if !typ.eq_ignore_ascii_case("JWT") {
        return Err(EpError::bad_request(format!(
            "not a NATS JWT: header typ {typ:?} is not \"JWT\""
        )));
    }
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    if !(alg.eq_ignore_ascii_case("ed25519-nkey") || alg.eq_ignore_ascii_case("ed25519")) {
        return Err(EpError::bad_request(format!(
            "not a NATS JWT: header alg {alg:?} is not \"ed25519-nkey\""
        )));
    }
    Ok(())
}
