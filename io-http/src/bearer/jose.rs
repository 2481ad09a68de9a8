//! Compact-JWS plumbing shared by the IdP verifier and the plane's own bearers.
//!
//! The protected header is read here, strictly and *before* any key is chosen, so that every
//! refusal can name exactly what was wrong; `jsonwebtoken` then checks the signature with the
//! one algorithm the pinned key dictates. Claims are checked by the callers against a `now`
//! they are handed: `jsonwebtoken`'s own time checks read the wall clock, so they stay off.

use std::collections::HashSet;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cotal_core::canon::parse_strict;
use cotal_core::jwt::UnixSeconds;
use cotal_core::EpError;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

/// The largest token either verifier reads. Far above any real bearer or OIDC ID token (a few
/// KiB), and it bounds the base64 and JSON work an unauthenticated caller can ask for.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Longest prefix of a caller-controlled value quoted in a refusal.
const QUOTE_MAX: usize = 80;

/// Header parameters that carry or point at key material. Keys come from the pinned set only,
/// never from the token that wants to be verified by them.
const EMBEDDED_KEY_PARAMS: [&str; 4] = ["jku", "jwk", "x5u", "x5c"];

/// Refuses (`internal`) when no `jsonwebtoken` crypto backend is selected: the crate would
/// panic at the first signature instead. Checked once where keys are built, so every later
/// signature and verification has its backend.
pub(crate) fn provider_ready() -> Result<(), EpError> {
    jsonwebtoken::crypto::CryptoProvider::try_get_default()
        .map(|_| ())
        .ok_or_else(|| {
            EpError::internal(
                "no jsonwebtoken crypto backend is selected; build with exactly one of its \
                 rust_crypto or aws_lc_rs features",
            )
        })
}

/// Quotes a caller-controlled value for a refusal, truncated so hostile input cannot bloat logs.
pub(crate) fn quote(value: &str) -> String {
    let n = value.chars().count();
    if n <= QUOTE_MAX {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(QUOTE_MAX).collect();
    format!("{head:?}… ({n} chars)")
}

/// An algorithm name as shown in a refusal: bare when it looks like one, quoted otherwise.
pub(crate) fn show_alg(alg: &str) -> String {
    let plain = (1..=16).contains(&alg.len()) && alg.chars().all(|c| c.is_ascii_alphanumeric());
    if plain && alg != "none" {
        alg.to_owned()
    } else {
        quote(alg)
    }
}

/// The protected header, reduced to what key selection needs.
#[derive(Debug)]
pub(crate) struct JoseHeader {
    pub alg: String,
    pub kid: Option<String>,
}

/// Reads the protected header of a compact JWS. `what` names the token in refusals.
///
/// Refuses oversize tokens, anything but three segments, a header that is not strict JSON
/// (duplicate keys included: two `alg`s would let two parsers disagree), embedded key
/// material, and any `crit` extension (none is understood here).
pub(crate) fn read_header(token: &str, what: &str) -> Result<JoseHeader, EpError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(EpError::permission_denied(format!(
            "{what} is {} bytes; the limit is {MAX_TOKEN_BYTES} bytes",
            token.len()
        )));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(EpError::permission_denied(format!(
            "{what} is not a compact JWS (three base64url segments joined by '.')"
        )));
    };
    let malformed = |why: &str| EpError::permission_denied(format!("{what} header {why}"));
    let bytes = URL_SAFE_NO_PAD
        .decode(header)
        .map_err(|_| malformed("is not unpadded base64url"))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| malformed("is not UTF-8"))?;
    let strict = parse_strict(text).map_err(|e| {
        let why = e.message.trim_start_matches("invalid JSON text: ");
        malformed(&format!("is not strict JSON ({why})"))
    })?;
    let Value::Object(map) = strict else {
        return Err(malformed("is not a JSON object"));
    };
    if let Some(param) = EMBEDDED_KEY_PARAMS.iter().find(|p| map.contains_key(**p)) {
        return Err(malformed(&format!(
            "carries embedded key material ({param}); keys resolve only through the pinned JWKS"
        )));
    }
    if map.contains_key("crit") {
        return Err(malformed(
            "names critical extensions (crit); none is understood here",
        ));
    }
    let alg = match map.get("alg") {
        Some(Value::String(alg)) => alg.clone(),
        Some(_) => return Err(malformed("has a non-string alg")),
        None => return Err(malformed("has no alg")),
    };
    let kid = match map.get("kid") {
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(malformed("has a non-string kid")),
        None => None,
    };
    Ok(JoseHeader { alg, kid })
}

/// `alg` as one of `accepted`, or the refusal naming it, with the reason spelled out for the
/// two classic attacks: `none`, and HMAC key confusion.
pub(crate) fn accepted_algorithm(alg: &str, accepted: &[Algorithm]) -> Result<Algorithm, EpError> {
    if let Some(found) = alg
        .parse::<Algorithm>()
        .ok()
        .filter(|a| accepted.contains(a))
    {
        return Ok(found);
    }
    let list: Vec<&str> = accepted.iter().map(|a| alg_name(*a)).collect();
    let why = if alg.eq_ignore_ascii_case("none") {
        " (an unsigned token proves nothing)"
    } else if alg.get(..2).is_some_and(|p| p.eq_ignore_ascii_case("HS")) {
        " (HMAC would let a published public key serve as the shared secret)"
    } else {
        ""
    };
    Err(EpError::permission_denied(format!(
        "algorithm {} is not accepted{why}; accepted: {}",
        show_alg(alg),
        list.join(", ")
    )))
}

/// The JOSE spelling of the three algorithms the verifiers accept.
pub(crate) fn alg_name(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::EdDSA => "EdDSA",
        Algorithm::RS256 => "RS256",
        Algorithm::ES256 => "ES256",
        // `Algorithm` is non-exhaustive; nothing here ever selects another one.
        _ => "another algorithm",
    }
}

/// Checks the signature of `token` under `key` with exactly `alg`, and returns the claims.
///
/// `jsonwebtoken` is asked for the signature only: with `exp`/`nbf` validation off it never
/// reads the clock, and `iss`/`aud` are checked by the caller with precise refusals.
pub(crate) fn verify_signature(
    token: &str,
    alg: Algorithm,
    key: &DecodingKey,
    what: &str,
    kid: &str,
) -> Result<Map<String, Value>, EpError> {
    let mut validation = Validation::new(alg);
    validation.required_spec_claims = HashSet::new();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
        Ok(data) => Ok(data.claims),
        Err(e) => Err(EpError::permission_denied(match e.kind() {
            ErrorKind::InvalidSignature => format!(
                "{what} signature does not verify under key kid {}",
                quote(kid)
            ),
            ErrorKind::Json(_) | ErrorKind::Utf8(_) => {
                format!("{what} claims are not a JSON object")
            }
            ErrorKind::Base64(_) => format!("{what} is not unpadded base64url"),
            _ => format!("{what} is malformed ({e})"),
        })),
    }
}

/// A NumericDate claim (RFC 7519 §2): `None` when absent. Fractions are floored; the leeway
/// dwarfs the difference.
pub(crate) fn numeric_date(
    claims: &Map<String, Value>,
    name: &str,
    what: &str,
) -> Result<Option<u64>, EpError> {
    let Some(value) = claims.get(name) else {
        return Ok(None);
    };
    let seconds = value.as_u64().or_else(|| {
        // 2^53: beyond it a double no longer holds every whole second.
        value
            .as_f64()
            .filter(|f| f.is_finite() && (0.0..9_007_199_254_740_992.0).contains(f))
            .map(|f| f.floor() as u64)
    });
    seconds.map(Some).ok_or_else(|| {
        EpError::permission_denied(format!(
            "{what} claim {name} is not a non-negative NumericDate (got {})",
            quote(&value.to_string())
        ))
    })
}

/// The lifetime window every token must sit in at `now`, `leeway` seconds of clock skew
/// allowed on each edge: not expired (`now < exp + leeway`), already valid
/// (`nbf <= now + leeway`) and not issued in the future (`iat <= now + leeway`).
pub(crate) fn check_window(
    what: &str,
    exp: u64,
    nbf: Option<u64>,
    iat: Option<u64>,
    now: UnixSeconds,
    leeway: u64,
) -> Result<(), EpError> {
    let now = now.0;
    let late = now.saturating_add(leeway);
    if now >= exp.saturating_add(leeway) {
        return Err(EpError::permission_denied(format!(
            "{what} expired at {exp} (now {now}, leeway {leeway} s)"
        )));
    }
    if let Some(nbf) = nbf.filter(|nbf| *nbf > late) {
        return Err(EpError::permission_denied(format!(
            "{what} is not valid before {nbf} (now {now}, leeway {leeway} s)"
        )));
    }
    if let Some(iat) = iat.filter(|iat| *iat > late) {
        return Err(EpError::permission_denied(format!(
            "{what} was issued at {iat}, in the future (now {now}, leeway {leeway} s)"
        )));
    }
    Ok(())
}

/// The `iss` claim, which must equal `expected` exactly.
pub(crate) fn check_issuer(
    claims: &Map<String, Value>,
    expected: &str,
    what: &str,
) -> Result<(), EpError> {
    match claims.get("iss") {
        Some(Value::String(iss)) if iss == expected => Ok(()),
        Some(Value::String(iss)) => Err(EpError::permission_denied(format!(
            "{what} issuer {} is not the pinned issuer {}",
            quote(iss),
            quote(expected)
        ))),
        Some(_) => Err(EpError::permission_denied(format!(
            "{what} issuer is not a string"
        ))),
        None => Err(EpError::permission_denied(format!("{what} has no issuer"))),
    }
}

/// The `aud` claim as a list: a string or an array of strings (RFC 7519 §4.1.3).
pub(crate) fn audiences(claims: &Map<String, Value>, what: &str) -> Result<Vec<String>, EpError> {
    let bad = || {
        EpError::permission_denied(format!(
            "{what} audience is not a string or a list of strings"
        ))
    };
    match claims.get("aud") {
        Some(Value::String(aud)) => Ok(vec![aud.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
        None => Err(EpError::permission_denied(format!(
            "{what} has no audience"
        ))),
    }
}

/// Shows an audience list in a refusal.
pub(crate) fn show_audiences(auds: &[String]) -> String {
    let shown: Vec<String> = auds.iter().take(8).map(|a| quote(a)).collect();
    let more = auds.len().saturating_sub(shown.len());
    if more == 0 {
        format!("[{}]", shown.join(", "))
    } else {
        format!("[{}, … {more} more]", shown.join(", "))
    }
}
