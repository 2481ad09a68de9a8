//! Bearer tokens on the HTTP face: IdP tokens the exchange accepts ([`idp`]), and the plane's
//! own EdDSA bearers with their published JWKS and key rotation ([`keys`], [`user`]).
//!
//! Pure: `now` (unix seconds) and key material are arguments; nothing here reads a clock,
//! draws randomness or fetches a key set. Signatures go through `jsonwebtoken` (pure-Rust
//! `rust_crypto` backend); headers and claims are checked here so every refusal is a
//! `permission-denied` [`cotal_core::EpError`] whose sentence names exactly what was wrong.

pub mod idp;
mod jose;
pub mod keys;
pub mod user;

pub use idp::{IdpConfig, IdpIdentity, IdpVerifier, IDP_ALGORITHMS, IDP_CLOCK_LEEWAY_SECS};
pub use jose::MAX_TOKEN_BYTES;
pub use keys::{KeyRing, SigningKey, JWKS_CACHE_CONTROL, JWKS_MAX_AGE_SECS, KEY_RETENTION_SECS};
pub use user::{
    BearerAct, BearerIssuer, IssuedBearer, SessionClaim, TransferWriterClaim, VerifiedBearer,
    BEARER_CLOCK_LEEWAY_SECS, MAX_BEARER_TTL_SECS, TRANSFER_WRITER_TTL_SECS, USER_TOKEN_VER,
};
