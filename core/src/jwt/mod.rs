//! NATS JWT v2: the credentials the plane mints (issue: credentials), and the creds-file text
//! that carries a user JWT with its seed.
//!
//! Pure: the clock (`iat`, `exp`, `now`) and every key are inputs; nothing here reads time or
//! draws randomness, and Ed25519 signatures are deterministic, so the same inputs always give
//! the same token bytes.
//!
//! **Wire layout.** Minted tokens follow the Go library `nats-io/jwt` v2 (the one nats-server
//! links): header exactly [`HEADER`]; claims serialized as Go's `encoding/json` writes them —
//! fields in struct order, `omitempty` fields left out when zero, `<`, `>`, `&`, U+2028 and
//! U+2029 escaped; `jti` = unpadded RFC 4648 base32 of SHA-512/256 over the *standard* claims
//! (`aud`, `exp`, `iat`, `iss`, `name`, `nbf`, `sub` — not the `nats` section) serialized with an
//! empty `jti`. A user JWT minted here is byte-identical to Go's `UserClaims.Encode` for the same
//! keys, claims and second (checked against fixtures, `core/tests/jwt_codec.rs`).
//!
//! **Decoding** is lenient where Go's is (unknown fields ignored, `typ`/`alg` case-insensitive,
//! the old `ed25519` algorithm name accepted) and strict where a fence needs it: one size bound,
//! canonical unpadded base64url, v2 claims only, issuer and subject nkeys of the right kind.
//! The `jti` is never checked on decode: Go and nats-server do not check it, and the JavaScript
//! library `@nats-io/jwt` fills it with a different digest (base64 SHA-512 of its own JSON).
//!
//! **Serving these tokens.** A nats-server in operator mode accepts them with `operator:
//! <operator JWT>`, `system_account: <system account public key>`, `resolver: MEMORY` and a
//! `resolver_preload` mapping each account public key to its account JWT (operator and account
//! JWTs minted without expiry). A user JWT travels inside CONNECT, and the server's default
//! `max_control_line` (4096 bytes) refuses larger profiles (the provisioner's, a serve JWT past a
//! few commands) with `maximum control line exceeded`; a deployment must raise it to at least
//! [`MAX_JWT_BYTES`] plus the CONNECT envelope (≈ 17 KiB; 32 KiB is a safe setting). The live
//! test `tests/tests/nats_live_jwt.rs` runs exactly this setup.

mod claims;
mod creds;
mod go_json;
mod mint;
mod read;
#[cfg(test)]
mod tests;
mod verify;

pub use claims::{
    AccountLimits, AccountNats, AuthToken, AuthorizationRequest, AuthorizationResponse,
    AuthorizationVerdict, ClaimType, Claims, ExternalAuthorization, JetStreamLimits, Nats,
    NatsLimits, OperatorNats, Permission, Permissions, RequestClient, RequestConnect,
    RequestServer, ResponsePermission, UnixSeconds, UserNats, Validity,
};
pub use creds::{format_creds, parse_creds, Creds};
pub use mint::{account_jwt, authorization_response_jwt, operator_jwt, user_creds, user_jwt};
pub use verify::{decode, verify, verify_signature};

/// The largest JWT the plane mints or decodes. A mint over it is refused before anything is
/// written (SPEC §13.9 "JWT policy gate", reference 16 KiB).
pub const MAX_JWT_BYTES: usize = 16 * 1024;

/// The largest authorization request [`decode`] reads. The server copies the client's CONNECT
/// fields (the sentinel JWT, its signature, the bearer in `auth_token`, the name) into the
/// request, and the broker bounds that CONNECT by its `max_control_line`
/// ([`crate::trust::MAX_CONTROL_LINE`], 32 KiB); base64url makes it 4/3 larger and the server
/// and client sections add well under a kilobyte, so 64 KiB holds every request the broker lets
/// through.
pub const MAX_REQUEST_JWT_BYTES: usize = 64 * 1024;

/// The largest authorization response minted or decoded: it embeds one user JWT of at most
/// [`MAX_JWT_BYTES`], base64url-encoded again (4/3), plus a few hundred bytes of claims.
pub const MAX_RESPONSE_JWT_BYTES: usize = 24 * 1024;

/// The largest creds text [`parse_creds`] reads: one maximal JWT plus the seed and decoration.
pub const MAX_CREDS_BYTES: usize = MAX_JWT_BYTES + 1024;

/// The JOSE header of every JWT minted here, byte for byte.
pub const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;

/// The `nats` limit value meaning "unlimited".
pub const NO_LIMIT: i64 = -1;

/// The claims version this codec writes and the only one it reads.
pub(super) const CLAIMS_VERSION: i64 = 2;

/// An Ed25519 signature, base64url without padding.
pub(super) const SIGNATURE_CHARS: usize = 86;
