//! IdP token verification against a pinned JWKS: the human arm of the token exchange
//! (reference §10.3, SPEC's "IdP bridge"). The key set comes from configuration and is never
//! fetched, so a token can only ever be checked against keys the operator pinned.
//!
//! **Algorithm choice.** EdDSA only, as the reference's IdP bridge pins it (§10.3): a pinned JWK
//! is usable only as OKP/Ed25519 (its `alg`, when present, must be EdDSA), and the header's `alg`
//! must be EdDSA. Keys of another type stay listed as unusable, so a token naming one is told
//! why. That closes `alg: none`, HMAC key confusion (a published public key used as an HS256
//! secret) and cross-family substitution, each with its own refusal.

use std::collections::BTreeMap;
use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cotal_core::jwt::UnixSeconds;
use cotal_core::EpError;
use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::jose::{self, alg_name, quote};

/// Clock skew allowed on `exp`, `nbf` and `iat`: the reference's 5 s, the same as the plane's
/// own bearers, so an expired ID token is dead within seconds.
pub const IDP_CLOCK_LEEWAY_SECS: u64 = 5;

/// The algorithms an IdP token may use.
pub const IDP_ALGORITHMS: [Algorithm; 1] = [Algorithm::EdDSA];

/// What refusals call the token.
const WHAT: &str = "IdP token";

/// The pinned identity provider: who issues, for whom, and with which keys.
#[derive(Debug, Clone)]
pub struct IdpConfig {
    /// The exact `iss` every token must carry.
    pub issuer: String,
    /// The audience this plane answers to; a token's `aud` must be exactly it.
    pub audience: String,
    /// The IdP's public keys, pinned by the operator.
    pub jwks: JwkSet,
}

/// What a verified IdP token says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdpIdentity {
    /// `sub`: the IdP's stable id for the human (non-empty).
    pub subject: String,
    /// `iss`: equal to the pinned issuer.
    pub issuer: String,
    /// `email`, when the token carries one.
    pub email: Option<String>,
    /// `iat`.
    pub issued_at: UnixSeconds,
    /// `exp`: the exchange caps the bearer it mints at this instant.
    pub expires_at: UnixSeconds,
    /// The pinned key that verified the signature.
    pub kid: String,
    pub algorithm: Algorithm,
}

/// A pinned key: usable with exactly one algorithm, or kept with the reason it cannot verify,
/// so a token naming it is refused with that reason rather than "unknown kid".
#[derive(Debug)]
enum Slot {
    Usable { alg: Algorithm, key: DecodingKey },
    Unusable(String),
}

/// Verifies IdP tokens against a pinned JWKS. Pure: `now` is an argument and nothing is
/// fetched, so the same inputs always give the same answer.
pub struct IdpVerifier {
    issuer: String,
    audience: String,
    keys: BTreeMap<String, Slot>,
}

impl fmt::Debug for IdpVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdpVerifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("kids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl IdpVerifier {
    /// Pins `config`. Refuses (`bad-request`) an empty issuer or audience, a kid listed twice
    /// (selection by kid must be unambiguous) and a set without one usable signing key. Keys
    /// without a `kid` can never be selected and are left out; keys of another type or
    /// algorithm stay listed as unusable, so a token naming one learns why it was refused.
    pub fn new(config: IdpConfig) -> Result<Self, EpError> {
        jose::provider_ready()?;
        if config.issuer.is_empty() || config.audience.is_empty() {
            return Err(EpError::bad_request(
                "IdP configuration needs a non-empty issuer and audience",
            ));
        }
        let mut keys = BTreeMap::new();
        for jwk in &config.jwks.keys {
            let Some(kid) = jwk.common.key_id.clone() else {
                continue;
            };
            let slot = match pin(jwk) {
                Ok((alg, key)) => Slot::Usable { alg, key },
                Err(why) => Slot::Unusable(why),
            };
            if keys.insert(kid.clone(), slot).is_some() {
                return Err(EpError::bad_request(format!(
                    "the pinned IdP JWKS lists kid {} twice; selection by kid must be unambiguous",
                    quote(&kid)
                )));
            }
        }
        if !keys.values().any(|s| matches!(s, Slot::Usable { .. })) {
            let reasons: Vec<String> = keys
                .iter()
                .filter_map(|(kid, s)| match s {
                    Slot::Unusable(why) => Some(format!("kid {}: {why}", quote(kid))),
                    Slot::Usable { .. } => None,
                })
                .collect();
            return Err(EpError::bad_request(format!(
                "the pinned IdP JWKS has no usable signing key with a kid (EdDSA) [{}]",
                reasons.join("; ")
            )));
        }
        Ok(IdpVerifier {
            issuer: config.issuer,
            audience: config.audience,
            keys,
        })
    }

    /// Whether the key `token`'s header names is pinned here. A token whose header does not
    /// read counts as known: refetching keys cannot help it, and `verify` says what is wrong.
    pub fn knows_kid_of(&self, token: &str) -> bool {
        match jose::read_header(token, WHAT) {
            Ok(header) => header.kid.is_none_or(|kid| self.keys.contains_key(&kid)),
            Err(_) => true,
        }
    }

    /// Verifies `token` at `now` and returns who it names. Every refusal is `permission-denied`
    /// with a sentence naming the one thing that was wrong, checked in this order: size and
    /// shape, header (no embedded keys, no `crit`), algorithm (EdDSA only), `kid` (present,
    /// pinned, usable, and of the header's algorithm), signature, `iss` (exact), `aud` (exactly
    /// the configured audience: a string, or a one-element array; a multi-audience proof is
    /// refused), `exp` and `iat` (required) and `nbf` (when present) within
    /// [`IDP_CLOCK_LEEWAY_SECS`], then a non-empty string `sub`.
    pub fn verify(&self, token: &str, now: UnixSeconds) -> Result<IdpIdentity, EpError> {
        let header = jose::read_header(token, WHAT)?;
        let alg = jose::accepted_algorithm(&header.alg, &IDP_ALGORITHMS)?;
        let kid = header.kid.ok_or_else(|| {
            EpError::permission_denied(format!(
                "{WHAT} header has no kid; the pinned JWKS is searched by kid only"
            ))
        })?;
        let (key_alg, key) = match self.keys.get(&kid) {
            Some(Slot::Usable { alg, key }) => (*alg, key),
            Some(Slot::Unusable(why)) => {
                return Err(EpError::permission_denied(format!(
                    "key kid {} in the pinned JWKS cannot verify tokens: {why}",
                    quote(&kid)
                )))
            }
            None => {
                return Err(EpError::permission_denied(format!(
                    "no key with kid {} in the pinned JWKS",
                    quote(&kid)
                )))
            }
        };
        if alg != key_alg {
            return Err(EpError::permission_denied(format!(
                "{WHAT} algorithm {} does not match key kid {}, which the pinned JWKS holds as an {} key",
                alg_name(alg),
                quote(&kid),
                alg_name(key_alg)
            )));
        }
        let claims = jose::verify_signature(token, alg, key, WHAT, &kid)?;

        jose::check_issuer(&claims, &self.issuer, WHAT)?;
        let auds = jose::audiences(&claims, WHAT)?;
        if !matches!(auds.as_slice(), [only] if *only == self.audience) {
            return Err(EpError::permission_denied(format!(
                "{WHAT} audience {} is not exactly {}; a multi-audience proof is refused",
                jose::show_audiences(&auds),
                quote(&self.audience)
            )));
        }
        let required = |name: &str| {
            jose::numeric_date(&claims, name, WHAT)?.ok_or_else(|| {
                EpError::permission_denied(format!("{WHAT} has no {name} claim; it is required"))
            })
        };
        let exp = required("exp")?;
        let iat = required("iat")?;
        let nbf = jose::numeric_date(&claims, "nbf", WHAT)?;
        jose::check_window(WHAT, exp, nbf, Some(iat), now, IDP_CLOCK_LEEWAY_SECS)?;

        let subject = match claims.get("sub") {
            Some(Value::String(sub)) if !sub.is_empty() => sub.clone(),
            _ => {
                return Err(EpError::permission_denied(format!(
                    "{WHAT} has no subject (sub must be a non-empty string)"
                )))
            }
        };
        let email = match claims.get("email") {
            None => None,
            Some(Value::String(email)) => Some(email.clone()),
            Some(_) => {
                return Err(EpError::permission_denied(format!(
                    "{WHAT} email claim is not a string"
                )))
            }
        };
        Ok(IdpIdentity {
            subject,
            issuer: self.issuer.clone(),
            email,
            issued_at: UnixSeconds(iat),
            expires_at: UnixSeconds(exp),
            kid,
            algorithm: alg,
        })
    }
}

/// Maps one pinned JWK to its single algorithm and key, or says why it cannot verify.
fn pin(jwk: &Jwk) -> Result<(Algorithm, DecodingKey), String> {
    if let Some(use_) = &jwk.common.public_key_use {
        if *use_ != PublicKeyUse::Signature {
            return Err("its use is not \"sig\"".to_owned());
        }
    }
    let declared = jwk.common.key_algorithm;
    let (alg, key) = match &jwk.algorithm {
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            agree(declared, KeyAlgorithm::EdDSA)?;
            exact_len(&p.x, 32, "x")?;
            (Algorithm::EdDSA, DecodingKey::from_ed_components(&p.x))
        }
        AlgorithmParameters::EllipticCurve(_) | AlgorithmParameters::RSA(_) => {
            return Err(
                "it is an EC or RSA key; IdP tokens are verified with EdDSA (Ed25519) \
                        keys only, as the reference's IdP bridge pins them"
                    .to_owned(),
            )
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err("it is a symmetric (oct) key, and shared secrets are never accepted".into())
        }
        _ => return Err("its key type is not OKP/Ed25519".to_owned()),
    };
    let key = key.map_err(|e| format!("it does not decode ({e})"))?;
    // A probe verification builds the backend's public key: an Ed25519 or P-256 point off its
    // curve fails here, once, instead of on every token.
    jsonwebtoken::crypto::verify("", b"probe", &key, alg)
        .map_err(|e| format!("it is not a valid {} public key ({e})", alg_name(alg)))?;
    Ok((alg, key))
}

/// A JWK's own `alg`, when present, must name the algorithm its type implies.
fn agree(declared: Option<KeyAlgorithm>, implied: KeyAlgorithm) -> Result<(), String> {
    match declared {
        Some(d) if d != implied => Err(format!(
            "it declares alg {d}, which this verifier does not accept for its key type (only {implied})"
        )),
        _ => Ok(()),
    }
}

fn decode(b64: &str, member: &str) -> Result<Vec<u8>, String> {
    URL_SAFE_NO_PAD
        .decode(b64)
        .map_err(|_| format!("its {member} is not unpadded base64url"))
}

fn exact_len(b64: &str, len: usize, member: &str) -> Result<(), String> {
    let got = decode(b64, member)?.len();
    if got == len {
        Ok(())
    } else {
        Err(format!("its {member} is {got} bytes, not {len}"))
    }
}
