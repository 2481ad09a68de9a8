//! The plane's Ed25519 signing keys, their published JWKS, and rotation (reference §10.2, §3.6).
//!
//! A key is born from a caller-supplied 32-byte seed (the plane draws no randomness); its `kid`
//! is the RFC 7638 thumbprint of its public JWK, so any verifier can recompute it.
//!
//! **Rotation.** [`KeyRing::rotate`] makes a new key current at once; the old one starts
//! retiring and stays published until `retired_at +` [`KEY_RETENTION_SECS`]: a verifier may
//! hold a JWKS document for [`JWKS_MAX_AGE_SECS`], and a bearer signed just before the
//! rotation lives for up to [`MAX_BEARER_TTL_SECS`], so before that instant someone may still
//! legitimately present or check a token it signed. [`KeyRing::prune`] drops it from then on;
//! after that its tokens are refused as naming an unknown kid.

use std::fmt;

use cotal_core::jwt::UnixSeconds;
use cotal_core::trust::IssuerKeys;
use cotal_core::EpError;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, ThumbprintHash};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use serde_json::{json, Value};
use zeroize::Zeroizing;

use super::jose::{self, quote};
use super::user::MAX_BEARER_TTL_SECS;

/// How long a verifier may cache the published JWKS (`GET /jwks`), in seconds.
pub const JWKS_MAX_AGE_SECS: u64 = 300;

/// The `Cache-Control` header value served with the JWKS: [`JWKS_MAX_AGE_SECS`].
pub const JWKS_CACHE_CONTROL: &str = "max-age=300";

/// How long a retiring key stays published after it stopped signing: one JWKS cache lifetime
/// plus the longest bearer lifetime (900 s), 1 200 s in all.
pub const KEY_RETENTION_SECS: u64 = JWKS_MAX_AGE_SECS + MAX_BEARER_TTL_SECS;

/// The DER prefix of a PKCS#8 v1 Ed25519 private key (RFC 8410 §7); the 32-byte seed follows.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// One Ed25519 signing key of the plane. `Debug` shows the kid only.
#[derive(Clone)]
pub struct SigningKey {
    kid: String,
    x: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish()
    }
}

impl SigningKey {
    /// The key whose RFC 8032 private seed is `seed`. Deterministic: the same seed always gives
    /// the same public key, kid and signatures.
    pub fn from_seed(seed: &[u8; 32]) -> Result<Self, EpError> {
        jose::provider_ready()?;
        let mut der = Zeroizing::new(Vec::with_capacity(48));
        der.extend_from_slice(&ED25519_PKCS8_PREFIX);
        der.extend_from_slice(seed);
        let encoding = EncodingKey::from_ed_der(&der);
        let broken = |e: jsonwebtoken::errors::Error| {
            EpError::internal(format!(
                "cannot derive the Ed25519 public key from a seed: {e}"
            ))
        };
        let jwk = Jwk::from_encoding_key(&encoding, Algorithm::EdDSA).map_err(broken)?;
        let AlgorithmParameters::OctetKeyPair(okp) = &jwk.algorithm else {
            return Err(EpError::internal("an Ed25519 key did not yield an OKP JWK"));
        };
        let kid = jwk.thumbprint(ThumbprintHash::SHA256).map_err(broken)?;
        let decoding = DecodingKey::from_ed_components(&okp.x).map_err(broken)?;
        Ok(SigningKey {
            kid,
            x: okp.x.clone(),
            encoding,
            decoding,
        })
    }

    /// The RFC 7638 SHA-256 thumbprint of the public key: the `kid` of every token it signs.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key, base64url (the JWK `x` member).
    pub fn public_x(&self) -> &str {
        &self.x
    }

    /// The published JWK, members in this order: `kty`, `crv`, `x`, `kid`, `alg`, `use`.
    pub fn public_jwk(&self) -> Value {
        json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": self.x,
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        })
    }

    pub(crate) fn encoding(&self) -> &EncodingKey {
        &self.encoding
    }

    pub(crate) fn decoding(&self) -> &DecodingKey {
        &self.decoding
    }
}

/// A key that stopped signing and is still published: since `retired_at` when this ring rotated
/// it, or (`None`) for as long as the trust root keeps it, which its own prune decides.
#[derive(Debug, Clone)]
struct Retiring {
    key: SigningKey,
    retired_at: Option<UnixSeconds>,
}

impl Retiring {
    fn drop_at(&self) -> Option<UnixSeconds> {
        self.retired_at
            .map(|at| UnixSeconds(at.0.saturating_add(KEY_RETENTION_SECS)))
    }
}

/// The plane's published keys: one current key that signs, and retiring keys that only verify
/// until their retention ends. Kids are unique across the ring.
#[derive(Debug, Clone)]
pub struct KeyRing {
    current: SigningKey,
    /// Oldest retirement first.
    retiring: Vec<Retiring>,
}

impl KeyRing {
    pub fn new(current: SigningKey) -> Self {
        KeyRing {
            current,
            retiring: Vec::new(),
        }
    }

    /// The trust root's keys: `current` signs, every one of `published` stays published and
    /// accepted until the trust root prunes it. Refuses (`conflict`) a kid listed twice.
    pub fn with_published(
        current: SigningKey,
        published: Vec<SigningKey>,
    ) -> Result<Self, EpError> {
        let mut ring = KeyRing::new(current);
        for key in published {
            if ring.key(key.kid()).is_some() {
                return Err(EpError::conflict(format!(
                    "key kid {} is listed twice",
                    quote(key.kid())
                )));
            }
            ring.retiring.push(Retiring {
                key,
                retired_at: None,
            });
        }
        Ok(ring)
    }

    /// The trust root's issuer keys ([`IssuerKeys`]) as a ring: the active one signs, every
    /// one it still lists is published and accepted (a rotation's previous keys, until
    /// `issuer prune`). The error is one sentence.
    pub fn of_issuer_keys(keys: &IssuerKeys) -> Result<Self, String> {
        let load = |seed: &[u8; 32]| {
            SigningKey::from_seed(seed)
                .map_err(|e| format!("an issuer key does not load: {}", e.message))
        };
        let published = keys
            .published()
            .map(|k| load(k.seed()))
            .collect::<Result<Vec<_>, String>>()?;
        KeyRing::with_published(load(keys.active().seed())?, published).map_err(|e| e.message)
    }

    /// The key that signs new bearers.
    pub fn current(&self) -> &SigningKey {
        &self.current
    }

    /// Makes `next` the signing key; the previous one retires at `now` and stays published
    /// until `now +` [`KEY_RETENTION_SECS`]. Refuses (`conflict`) a key whose kid is already
    /// in the ring: re-adding a retiring key would silently extend or shorten its retention.
    pub fn rotate(&mut self, next: SigningKey, now: UnixSeconds) -> Result<(), EpError> {
        if self.key(next.kid()).is_some() {
            return Err(EpError::conflict(format!(
                "key kid {} is already in the ring; rotate to a fresh key",
                quote(next.kid())
            )));
        }
        let previous = std::mem::replace(&mut self.current, next);
        self.retiring.push(Retiring {
            key: previous,
            retired_at: Some(now),
        });
        Ok(())
    }

    /// When the retiring key `kid` leaves the JWKS: `None` for the current key or an unknown
    /// kid.
    pub fn drop_at(&self, kid: &str) -> Option<UnixSeconds> {
        self.retiring
            .iter()
            .find(|r| r.key.kid() == kid)
            .and_then(Retiring::drop_at)
    }

    /// Drops every retiring key whose retention has ended (`now >= retired_at +`
    /// [`KEY_RETENTION_SECS`]) and returns their kids. The current key is never dropped.
    pub fn prune(&mut self, now: UnixSeconds) -> Vec<String> {
        let (gone, kept): (Vec<Retiring>, Vec<Retiring>) = std::mem::take(&mut self.retiring)
            .into_iter()
            .partition(|r| r.drop_at().is_some_and(|at| now >= at));
        self.retiring = kept;
        gone.into_iter().map(|r| r.key.kid).collect()
    }

    /// The published key with this kid, current or retiring.
    pub fn key(&self, kid: &str) -> Option<&SigningKey> {
        std::iter::once(&self.current)
            .chain(self.retiring.iter().map(|r| &r.key))
            .find(|k| k.kid() == kid)
    }

    /// The kids published now: the current key first, then retiring keys oldest first.
    pub fn kids(&self) -> Vec<&str> {
        std::iter::once(&self.current)
            .chain(self.retiring.iter().map(|r| &r.key))
            .map(SigningKey::kid)
            .collect()
    }

    /// The JWKS document `{"keys":[…]}` (public members only), in [`KeyRing::kids`] order.
    /// Serve it with `Cache-Control:` [`JWKS_CACHE_CONTROL`].
    pub fn jwks(&self) -> Value {
        let keys: Vec<Value> = std::iter::once(&self.current)
            .chain(self.retiring.iter().map(|r| &r.key))
            .map(SigningKey::public_jwk)
            .collect();
        json!({ "keys": keys })
    }
}
