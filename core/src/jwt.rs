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

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use nkeys::{KeyPair, KeyPairType};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha512_256};

use crate::error::EpError;

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
const CLAIMS_VERSION: i64 = 2;

/// An Ed25519 signature, base64url without padding.
const SIGNATURE_CHARS: usize = 86;

/// Seconds since the Unix epoch: the unit of `iat`, `exp` and `nbf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixSeconds(pub u64);

impl UnixSeconds {
    /// Whole seconds of a unix-millisecond instant (the plane's clock unit), rounded down.
    pub const fn from_millis(millis: u64) -> Self {
        UnixSeconds(millis / 1000)
    }
}

/// When a minted JWT was issued and when it stops being valid (`None`: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub issued_at: UnixSeconds,
    pub expires_at: Option<UnixSeconds>,
}

/// The claim kinds the plane mints and reads (`nats.type`): the trust chain (operator,
/// account, user) and the two messages of the auth callout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimType {
    Operator,
    Account,
    User,
    /// What the server sends the callout service for each connect (signed by the server).
    AuthorizationRequest,
    /// The callout service's verdict (signed by a callout-account key).
    AuthorizationResponse,
}

impl ClaimType {
    pub const fn as_str(self) -> &'static str {
        match self {
            ClaimType::Operator => "operator",
            ClaimType::Account => "account",
            ClaimType::User => "user",
            ClaimType::AuthorizationRequest => "authorization_request",
            ClaimType::AuthorizationResponse => "authorization_response",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            ClaimType::Operator,
            ClaimType::Account,
            ClaimType::User,
            ClaimType::AuthorizationRequest,
            ClaimType::AuthorizationResponse,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }

    /// The nkey kind of the claim's subject: a request is about the callout account, a
    /// response about the connecting user's per-connect nkey.
    fn subject_kind(self) -> KeyPairType {
        match self {
            ClaimType::Operator => KeyPairType::Operator,
            ClaimType::Account | ClaimType::AuthorizationRequest => KeyPairType::Account,
            ClaimType::User | ClaimType::AuthorizationResponse => KeyPairType::User,
        }
    }

    /// Whether a key of `kind` may issue this claim: operators self-sign, accounts are signed
    /// by an operator key (or self-signed outside operator mode), users and authorization
    /// responses by an account key, authorization requests by a server key.
    fn issuer_allowed(self, kind: &KeyPairType) -> bool {
        matches!(
            (self, kind),
            (ClaimType::Operator, KeyPairType::Operator)
                | (
                    ClaimType::Account,
                    KeyPairType::Operator | KeyPairType::Account
                )
                | (
                    ClaimType::User | ClaimType::AuthorizationResponse,
                    KeyPairType::Account
                )
                | (ClaimType::AuthorizationRequest, KeyPairType::Server)
        )
    }

    /// The size bound of this kind's tokens.
    const fn max_bytes(self) -> usize {
        match self {
            ClaimType::Operator | ClaimType::Account | ClaimType::User => MAX_JWT_BYTES,
            ClaimType::AuthorizationRequest => MAX_REQUEST_JWT_BYTES,
            ClaimType::AuthorizationResponse => MAX_RESPONSE_JWT_BYTES,
        }
    }
}

impl fmt::Display for ClaimType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One direction of a NATS permission: subjects allowed and denied. A subscribe allow entry may
/// be queue-qualified as `"<subject> <queue>"`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Permission {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

/// Permission to publish to reply subjects of received requests (`resp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePermission {
    /// Responses allowed per request.
    pub max: i64,
    /// How long the permission lasts, in nanoseconds (0 = no limit).
    pub ttl_nanos: i64,
}

/// The `pub`/`sub`/`resp` permission set of a user JWT.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Permissions {
    pub publish: Permission,
    pub subscribe: Permission,
    pub response: Option<ResponsePermission>,
}

/// Per-connection message limits (`subs`, `data`, `payload`); [`NO_LIMIT`] is unlimited and
/// `0` is written as absent, as Go's `omitempty` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatsLimits {
    pub subs: i64,
    pub data: i64,
    pub payload: i64,
}

impl NatsLimits {
    pub const UNLIMITED: NatsLimits = NatsLimits {
        subs: NO_LIMIT,
        data: NO_LIMIT,
        payload: NO_LIMIT,
    };
}

/// Unlimited, as both reference libraries default a new user.
impl Default for NatsLimits {
    fn default() -> Self {
        NatsLimits::UNLIMITED
    }
}

/// The `nats` section of a user JWT as the plane grants it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserNats {
    pub permissions: Permissions,
    pub limits: NatsLimits,
    /// The server skips nonce signing for bearer tokens; the plane never mints them.
    pub bearer_token: bool,
    /// Empty: every connection type.
    pub allowed_connection_types: Vec<String>,
    /// `owner:<o>`, `actor:<a>`, `principal:<o>.<a>` for the plane's profiles.
    pub tags: Vec<String>,
}

/// A grant alone: unlimited, every connection type, no tags.
impl From<Permissions> for UserNats {
    fn from(permissions: Permissions) -> Self {
        UserNats {
            permissions,
            ..UserNats::default()
        }
    }
}

/// JetStream limits of an account; all zero disables JetStream for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JetStreamLimits {
    pub mem_storage: i64,
    pub disk_storage: i64,
    pub streams: i64,
    pub consumer: i64,
    pub max_ack_pending: i64,
    pub mem_max_stream_bytes: i64,
    pub disk_max_stream_bytes: i64,
    pub max_bytes_required: bool,
}

impl JetStreamLimits {
    /// JetStream enabled without limits (what `nsc` writes for `-1` storage, streams, consumers).
    pub const UNLIMITED: JetStreamLimits = JetStreamLimits {
        mem_storage: NO_LIMIT,
        disk_storage: NO_LIMIT,
        streams: NO_LIMIT,
        consumer: NO_LIMIT,
        max_ack_pending: 0,
        mem_max_stream_bytes: 0,
        disk_max_stream_bytes: 0,
        max_bytes_required: false,
    };
}

/// The operator-set limits of an account (`nats.limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountLimits {
    pub nats: NatsLimits,
    pub imports: i64,
    pub exports: i64,
    pub wildcards: bool,
    pub disallow_bearer: bool,
    pub conn: i64,
    pub leaf: i64,
    pub jetstream: JetStreamLimits,
}

/// Go's `NewAccountClaims` defaults: everything unlimited, wildcard exports allowed,
/// JetStream disabled.
impl Default for AccountLimits {
    fn default() -> Self {
        AccountLimits {
            nats: NatsLimits::UNLIMITED,
            imports: NO_LIMIT,
            exports: NO_LIMIT,
            wildcards: true,
            disallow_bearer: false,
            conn: NO_LIMIT,
            leaf: NO_LIMIT,
            jetstream: JetStreamLimits::default(),
        }
    }
}

/// The `nats` section of an account JWT.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccountNats {
    pub limits: AccountLimits,
    /// Public account nkeys that may sign this account's users (unscoped), in written order.
    pub signing_keys: Vec<String>,
    pub default_permissions: Permissions,
    /// The auth callout of this account (`nats.authorization`); `None` writes Go's empty `{}`.
    pub authorization: Option<ExternalAuthorization>,
    pub tags: Vec<String>,
}

/// An account's external authorization (the auth callout in operator mode): connections to
/// the account by anyone but `auth_users` are handed to the callout service, which may place
/// them into one of `allowed_accounts`.
///
/// Only an *enabled* block is represented: the server ignores a block without `auth_users`,
/// and one with `allowed_accounts` but no `auth_users` makes it treat the whole account as
/// invalid (every connect then fails), so minting refuses an empty `auth_users`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExternalAuthorization {
    /// Public user nkeys (`U…`) that bypass the callout: the callout service's own users.
    pub auth_users: Vec<String>,
    /// Public account nkeys (`A…`) the callout may place users into, or the lone entry `*`.
    pub allowed_accounts: Vec<String>,
    /// The curve key (`X…`) requests are sealed to; `None` sends them in plaintext.
    pub xkey: Option<String>,
}

/// The `nats` section of an operator JWT.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OperatorNats {
    /// Public operator nkeys that may sign accounts on the operator's behalf.
    pub signing_keys: Vec<String>,
    /// The system account's public nkey (required by a server in operator mode).
    pub system_account: Option<String>,
    pub tags: Vec<String>,
}

/// The client's `auth_token` from CONNECT (the bearer it presents to the auth callout). It is
/// a credential: `Debug` never prints it, and nothing but [`AuthToken::expose`] reads it.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(String);

impl AuthToken {
    /// Wraps a token (the test side of a request, and the decoder).
    pub fn new(token: impl Into<String>) -> Self {
        AuthToken(token.into())
    }

    /// The token text, for the one check that must read it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuthToken(<redacted, {} bytes>)", self.0.len())
    }
}

/// `nats.server_id` of an authorization request: the server that asks. Empty strings are the
/// fields the server left out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestServer {
    /// The server's public nkey (`N…`), which also signs the request.
    pub id: String,
    pub name: String,
    pub host: String,
    pub version: String,
    /// The server's curve key (`X…`) that sealed the request; absent when the callout account
    /// has no xkey.
    pub xkey: Option<String>,
}

/// `nats.client_info` of an authorization request: the connection as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestClient {
    pub host: String,
    /// The server's connection id (`cid`).
    pub id: u64,
    /// The public key the client authenticated with (the sentinel's).
    pub user: String,
    /// The `name` of the JWT the client authenticated with.
    pub name_tag: String,
    pub kind: String,
}

/// The `connect_opts` fields of an authorization request the callout reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestConnect {
    /// `auth_token`; absent when the client sent none (the callout is called anyway).
    pub auth_token: Option<AuthToken>,
    /// The CONNECT `name`.
    pub name: Option<String>,
    pub lang: String,
    pub version: String,
}

/// The `nats` section of an authorization request (nats-io/jwt v2 `AuthorizationRequest`, the
/// fields the callout reads; the sentinel JWT, its signature and TLS details are not kept).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthorizationRequest {
    pub server_id: RequestServer,
    /// The fresh per-connect user nkey (`U…`) the answer must name; empty when absent.
    pub user_nkey: String,
    pub client_info: RequestClient,
    pub connect_opts: RequestConnect,
}

/// An authorization response's verdict: exactly one of `jwt` and `error` (the server refuses
/// both or neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorizationVerdict {
    /// The user JWT the connection is admitted with.
    Jwt(String),
    /// Why it is refused (the server logs it; the client sees only `Authorization Violation`).
    Error(String),
}

/// The `nats` section of an authorization response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationResponse {
    pub verdict: AuthorizationVerdict,
    pub issuer_account: Option<String>,
}

/// The `nats` section, by claim type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nats {
    Operator(OperatorNats),
    Account(AccountNats),
    /// `issuer_account` names the account when a signing key (not the account key) signed.
    User {
        user: UserNats,
        issuer_account: Option<String>,
    },
    AuthorizationRequest(AuthorizationRequest),
    AuthorizationResponse(AuthorizationResponse),
}

impl Nats {
    pub fn claim_type(&self) -> ClaimType {
        match self {
            Nats::Operator(_) => ClaimType::Operator,
            Nats::Account(_) => ClaimType::Account,
            Nats::User { .. } => ClaimType::User,
            Nats::AuthorizationRequest(_) => ClaimType::AuthorizationRequest,
            Nats::AuthorizationResponse(_) => ClaimType::AuthorizationResponse,
        }
    }
}

/// Decoded JWT claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub jti: String,
    pub iat: UnixSeconds,
    pub exp: Option<UnixSeconds>,
    pub nbf: Option<UnixSeconds>,
    pub aud: Option<String>,
    /// The signer's public nkey.
    pub iss: String,
    /// The public nkey the claim is about.
    pub sub: String,
    pub name: String,
    pub nats: Nats,
}

impl Claims {
    pub fn claim_type(&self) -> ClaimType {
        self.nats.claim_type()
    }

    /// The user section, when this is a user JWT.
    pub fn user(&self) -> Option<&UserNats> {
        match &self.nats {
            Nats::User { user, .. } => Some(user),
            _ => None,
        }
    }

    /// The account a user JWT belongs to: `issuer_account` when a signing key signed, else the
    /// issuer itself. `None` for other claim types.
    pub fn user_account(&self) -> Option<&str> {
        match &self.nats {
            Nats::User { issuer_account, .. } => {
                Some(issuer_account.as_deref().unwrap_or(&self.iss))
            }
            _ => None,
        }
    }

    /// The `jti` nats-io/jwt v2 (Go) derives from these claims: base32 of SHA-512/256 over the
    /// standard claims with an empty `jti`.
    pub fn recompute_jti(&self) -> Result<String, EpError> {
        let standard = standard_claims(
            self.aud.as_deref(),
            self.exp,
            None,
            self.iat,
            &self.iss,
            &self.name,
            self.nbf,
            &self.sub,
        )
        .finish()?;
        Ok(jti_of(&standard))
    }
}

// ---------------------------------------------------------------------------------------------
// Minting
// ---------------------------------------------------------------------------------------------

/// Mints an operator JWT, self-signed by the operator key (the trust root a server in operator
/// mode is configured with).
pub fn operator_jwt(
    operator: &KeyPair,
    name: &str,
    nats: &OperatorNats,
    validity: Validity,
) -> Result<String, EpError> {
    let subject = operator.public_key();
    let section = operator_section(nats)?;
    mint(
        operator,
        ClaimType::Operator,
        &subject,
        None,
        name,
        &section,
        validity,
    )
}

/// Mints an account JWT for the public account nkey `account`, signed by the operator key or
/// one of its signing keys.
pub fn account_jwt(
    signer: &KeyPair,
    account: &str,
    name: &str,
    nats: &AccountNats,
    validity: Validity,
) -> Result<String, EpError> {
    let section = account_section(nats)?;
    mint(
        signer,
        ClaimType::Account,
        account,
        None,
        name,
        &section,
        validity,
    )
}

/// Mints a user JWT for a caller-held public user nkey `user` (the seed never leaves the
/// caller), in account `account`, signed by the account key or one of the account's signing
/// keys — in that case the claim names the account as `issuer_account`, as both reference
/// libraries do. `name` is the profile. Refused before signing when the token would exceed
/// [`MAX_JWT_BYTES`].
pub fn user_jwt(
    signer: &KeyPair,
    account: &str,
    user: &str,
    name: &str,
    nats: &UserNats,
    validity: Validity,
) -> Result<String, EpError> {
    expect_public_key(account, &KeyPairType::Account, "account")?;
    let issuer_account = (signer.public_key() != account).then_some(account);
    let section = user_section(nats, issuer_account)?;
    mint(
        signer,
        ClaimType::User,
        user,
        None,
        name,
        &section,
        validity,
    )
}

/// Mints an authorization response (the auth callout's answer) for the connecting `user` nkey
/// on `server` (its `N…` id, the `aud`), signed by `signer` (a key of the callout account,
/// named as `issuer_account` whichever key signs: nats-server 2.15.1 refuses a plaintext
/// response whose `issuer_account` is another account, callout-operator-mode §5.2). No `exp`:
/// the server acts on the response at once. Refused (`bad-request`) for an empty error — the
/// server treats it as no verdict — and a token over [`MAX_RESPONSE_JWT_BYTES`].
pub fn authorization_response_jwt(
    signer: &KeyPair,
    callout_account: &str,
    user: &str,
    server: &str,
    verdict: &AuthorizationVerdict,
    issued_at: UnixSeconds,
) -> Result<String, EpError> {
    expect_public_key(callout_account, &KeyPairType::Account, "callout account")?;
    expect_public_key(server, &KeyPairType::Server, "server")?;
    let (jwt, error) = match verdict {
        AuthorizationVerdict::Jwt(jwt) => (jwt.as_str(), ""),
        AuthorizationVerdict::Error(error) => ("", error.as_str()),
    };
    if jwt.is_empty() && error.is_empty() {
        return Err(EpError::bad_request(
            "an authorization response needs a user JWT or a non-empty error",
        ));
    }
    // Go's `AuthorizationResponse` field order.
    let obj = GoObject::new()
        .str_nonempty("jwt", jwt)
        .str_nonempty("error", error)
        .str_nonempty("issuer_account", callout_account);
    let section = generic_into(obj, &[], ClaimType::AuthorizationResponse).finish()?;
    let validity = Validity {
        issued_at,
        expires_at: None,
    };
    mint(
        signer,
        ClaimType::AuthorizationResponse,
        user,
        Some(server),
        "",
        &section,
        validity,
    )
}

/// Mints a user JWT for `user` (a key pair the plane holds) and returns it with the seed, for
/// [`Creds::text`]. Same claims and refusals as [`user_jwt`].
pub fn user_creds(
    signer: &KeyPair,
    account: &str,
    user: &KeyPair,
    name: &str,
    nats: &UserNats,
    validity: Validity,
) -> Result<Creds, EpError> {
    let seed = user
        .seed()
        .map_err(|_| EpError::bad_request("the user key pair has no seed; creds need one"))?;
    let jwt = user_jwt(signer, account, &user.public_key(), name, nats, validity)?;
    Ok(Creds { jwt, seed })
}

/// Serializes, hashes and signs one claim. The size bound is checked on the exact signing
/// input before the signature is made, so an oversize mint costs no signature and leaves no
/// trace.
fn mint(
    signer: &KeyPair,
    kind: ClaimType,
    subject: &str,
    aud: Option<&str>,
    name: &str,
    nats_section: &str,
    validity: Validity,
) -> Result<String, EpError> {
    let issuer = signer.public_key();
    let signer_kind = signer.key_pair_type();
    if !kind.issuer_allowed(&signer_kind) {
        return Err(EpError::bad_request(format!(
            "{signer_kind:?} keys cannot sign {kind} JWTs"
        )));
    }
    expect_public_key(subject, &kind.subject_kind(), "subject")?;
    if let Some(exp) = validity.expires_at {
        if exp <= validity.issued_at {
            return Err(EpError::bad_request(format!(
                "JWT expiry {} is not after its issue time {}; mint with a positive lifetime",
                exp.0, validity.issued_at.0
            )));
        }
    }
    let standard = |jti: Option<&str>| {
        standard_claims(
            aud,
            validity.expires_at,
            jti,
            validity.issued_at,
            &issuer,
            name,
            None,
            subject,
        )
    };
    let jti = jti_of(&standard(None).finish()?);
    let payload = standard(Some(jti.as_str()))
        .raw("nats", nats_section)
        .finish()?;

    let mut token = URL_SAFE_NO_PAD.encode(HEADER);
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(payload, &mut token);
    let size = token.len() + 1 + SIGNATURE_CHARS;
    let limit = kind.max_bytes();
    if size > limit {
        return Err(EpError::bad_request(format!(
            "the {kind} JWT would be {size} bytes, over the {limit}-byte bound; \
             narrow the permission set"
        ))
        .with_detail(serde_json::json!({"bytes": size, "limit": limit})));
    }
    let signature = signer
        .sign(token.as_bytes())
        .map_err(|_| EpError::bad_request(format!("the {kind} JWT signer has no seed")))?;
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(signature, &mut token);
    Ok(token)
}

/// Go's `ClaimsData` in field order; `jti: None` is the empty `jti` the hash is taken over.
#[allow(clippy::too_many_arguments)]
fn standard_claims(
    aud: Option<&str>,
    exp: Option<UnixSeconds>,
    jti: Option<&str>,
    iat: UnixSeconds,
    iss: &str,
    name: &str,
    nbf: Option<UnixSeconds>,
    sub: &str,
) -> GoObject {
    GoObject::new()
        .str_nonempty("aud", aud.unwrap_or(""))
        .seconds("exp", exp)
        .str_nonempty("jti", jti.unwrap_or(""))
        .seconds("iat", Some(iat))
        .str_nonempty("iss", iss)
        .str_nonempty("name", name)
        .seconds("nbf", nbf)
        .str_nonempty("sub", sub)
}

fn jti_of(standard_claims_json: &str) -> String {
    base32_nopad(&Sha512_256::digest(standard_claims_json.as_bytes()))
}

fn permission_json(p: &Permission) -> Result<String, EpError> {
    GoObject::new()
        .strs_nonempty("allow", &p.allow)
        .strs_nonempty("deny", &p.deny)
        .finish()
}

/// Go's `Permissions`: `pub` and `sub` always (possibly `{}`), `resp` when set.
fn permissions_into(obj: GoObject, p: &Permissions) -> Result<GoObject, EpError> {
    let mut obj = obj
        .raw("pub", &permission_json(&p.publish)?)
        .raw("sub", &permission_json(&p.subscribe)?);
    if let Some(resp) = p.response {
        let r = GoObject::new()
            .int("max", resp.max)
            .int("ttl", resp.ttl_nanos)
            .finish()?;
        obj = obj.raw("resp", &r);
    }
    Ok(obj)
}

fn nats_limits_into(obj: GoObject, l: &NatsLimits) -> GoObject {
    obj.int_nonzero("subs", l.subs)
        .int_nonzero("data", l.data)
        .int_nonzero("payload", l.payload)
}

fn generic_into(obj: GoObject, tags: &[String], kind: ClaimType) -> GoObject {
    obj.strs_nonempty("tags", tags)
        .str_nonempty("type", kind.as_str())
        .int("version", CLAIMS_VERSION)
}

/// Go's `User`: permissions, user limits (none written), nats limits, bearer flag, connection
/// types, `issuer_account`, generic fields.
fn user_section(u: &UserNats, issuer_account: Option<&str>) -> Result<String, EpError> {
    let obj = permissions_into(GoObject::new(), &u.permissions)?;
    let obj = nats_limits_into(obj, &u.limits)
        .flag("bearer_token", u.bearer_token)
        .strs_nonempty("allowed_connection_types", &u.allowed_connection_types)
        .str_nonempty("issuer_account", issuer_account.unwrap_or(""));
    generic_into(obj, &u.tags, ClaimType::User).finish()
}

/// Go's `Account` (current layout): limits always, signing keys when any, default permissions
/// and the external-authorization object always (`{}` when there is none), generic fields.
fn account_section(a: &AccountNats) -> Result<String, EpError> {
    for key in &a.signing_keys {
        expect_public_key(key, &KeyPairType::Account, "account signing key")?;
    }
    let l = &a.limits;
    let js = &l.jetstream;
    let limits = nats_limits_into(GoObject::new(), &l.nats)
        .int_nonzero("imports", l.imports)
        .int_nonzero("exports", l.exports)
        .flag("wildcards", l.wildcards)
        .flag("disallow_bearer", l.disallow_bearer)
        .int_nonzero("conn", l.conn)
        .int_nonzero("leaf", l.leaf)
        .int_nonzero("mem_storage", js.mem_storage)
        .int_nonzero("disk_storage", js.disk_storage)
        .int_nonzero("streams", js.streams)
        .int_nonzero("consumer", js.consumer)
        .int_nonzero("max_ack_pending", js.max_ack_pending)
        .int_nonzero("mem_max_stream_bytes", js.mem_max_stream_bytes)
        .int_nonzero("disk_max_stream_bytes", js.disk_max_stream_bytes)
        .flag("max_bytes_required", js.max_bytes_required)
        .finish()?;
    let defaults = permissions_into(GoObject::new(), &a.default_permissions)?.finish()?;
    let authorization = match &a.authorization {
        None => "{}".to_owned(),
        Some(auth) => authorization_json(auth)?,
    };
    let obj = GoObject::new()
        .raw("limits", &limits)
        .strs_nonempty("signing_keys", &a.signing_keys)
        .raw("default_permissions", &defaults)
        .raw("authorization", &authorization);
    generic_into(obj, &a.tags, ClaimType::Account).finish()
}

/// Go's `ExternalAuthorization` (`auth_users`, `allowed_accounts`, `xkey`), after the checks
/// its `Validate` makes, so a block the server would reject is never signed.
fn authorization_json(auth: &ExternalAuthorization) -> Result<String, EpError> {
    if auth.auth_users.is_empty() {
        return Err(EpError::bad_request(if auth.allowed_accounts.is_empty() {
            "an external authorization block needs at least one auth user; without one the \
             server ignores it"
        } else {
            "an external authorization block with allowed accounts but no auth users makes \
             the server treat the whole account as invalid; name the callout service's user"
        }));
    }
    for user in &auth.auth_users {
        expect_public_key(user, &KeyPairType::User, "auth user")?;
    }
    let wildcard = auth.allowed_accounts.iter().any(|a| a == "*");
    if wildcard && auth.allowed_accounts.len() > 1 {
        return Err(EpError::bad_request(
            "allowed account \"*\" (any account) must be the only entry",
        ));
    }
    if !wildcard {
        for account in &auth.allowed_accounts {
            expect_public_key(account, &KeyPairType::Account, "allowed account")?;
        }
    }
    if let Some(xkey) = &auth.xkey {
        expect_public_key(xkey, &KeyPairType::Curve, "authorization xkey")?;
    }
    GoObject::new()
        .strs_nonempty("auth_users", &auth.auth_users)
        .strs_nonempty("allowed_accounts", &auth.allowed_accounts)
        .str_nonempty("xkey", auth.xkey.as_deref().unwrap_or(""))
        .finish()
}

/// Go's `Operator`: signing keys, system account, generic fields.
fn operator_section(o: &OperatorNats) -> Result<String, EpError> {
    for key in &o.signing_keys {
        expect_public_key(key, &KeyPairType::Operator, "operator signing key")?;
    }
    if let Some(system) = &o.system_account {
        expect_public_key(system, &KeyPairType::Account, "system account")?;
    }
    let obj = GoObject::new()
        .strs_nonempty("signing_keys", &o.signing_keys)
        .str_nonempty("system_account", o.system_account.as_deref().unwrap_or(""));
    generic_into(obj, &o.tags, ClaimType::Operator).finish()
}

/// A JSON object written the way Go's `encoding/json` writes a struct: fields in the order
/// appended, `*_nonempty`/`flag`/`seconds` skipping Go's zero values (`omitempty`), strings
/// escaped HTML-safe. Control characters are refused rather than escaped: no subject, tag or
/// name needs one, and Go's own escaping of `\b`/`\f` changed between releases, which would
/// make the `jti` depend on the Go version.
#[derive(Debug)]
struct GoObject {
    out: String,
    first: bool,
    control_char: bool,
}

impl GoObject {
    fn new() -> Self {
        GoObject {
            out: String::from("{"),
            first: true,
            control_char: false,
        }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.push_string(key);
        self.out.push(':');
    }

    fn push_string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '<' => self.out.push_str("\\u003c"),
                '>' => self.out.push_str("\\u003e"),
                '&' => self.out.push_str("\\u0026"),
                '\u{2028}' => self.out.push_str("\\u2028"),
                '\u{2029}' => self.out.push_str("\\u2029"),
                c if c < ' ' => self.control_char = true,
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn str_nonempty(mut self, key: &str, value: &str) -> Self {
        if !value.is_empty() {
            self.key(key);
            self.push_string(value);
        }
        self
    }

    fn int(mut self, key: &str, value: i64) -> Self {
        self.key(key);
        self.out.push_str(&value.to_string());
        self
    }

    fn int_nonzero(self, key: &str, value: i64) -> Self {
        if value == 0 {
            self
        } else {
            self.int(key, value)
        }
    }

    fn seconds(mut self, key: &str, value: Option<UnixSeconds>) -> Self {
        if let Some(UnixSeconds(s)) = value.filter(|s| s.0 != 0) {
            self.key(key);
            self.out.push_str(&s.to_string());
        }
        self
    }

    fn flag(mut self, key: &str, value: bool) -> Self {
        if value {
            self.key(key);
            self.out.push_str("true");
        }
        self
    }

    fn strs_nonempty(mut self, key: &str, values: &[String]) -> Self {
        if !values.is_empty() {
            self.key(key);
            self.out.push('[');
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.push_string(v);
            }
            self.out.push(']');
        }
        self
    }

    /// Appends an already-serialized JSON value.
    fn raw(mut self, key: &str, json: &str) -> Self {
        self.key(key);
        self.out.push_str(json);
        self
    }

    fn finish(mut self) -> Result<String, EpError> {
        if self.control_char {
            return Err(EpError::bad_request(
                "a JWT claim string contains a control character; names, subjects and tags \
                 must be printable",
            ));
        }
        self.out.push('}');
        Ok(self.out)
    }
}

/// RFC 4648 base32 (`A–Z2–7`) without padding, as Go's `base32.StdEncoding.WithPadding(NoPadding)`.
fn base32_nopad(bytes: &[u8]) -> String {
    data_encoding::BASE32_NOPAD.encode(bytes)
}

// ---------------------------------------------------------------------------------------------
// Decoding and verification
// ---------------------------------------------------------------------------------------------

/// A structurally valid token: its claims, what was signed and the signature.
struct Parsed<'t> {
    claims: Claims,
    signing_input: &'t str,
    signature: Vec<u8>,
}

/// Decodes a NATS JWT **without checking its signature** (for inspecting a token already
/// trusted, e.g. one this plane just minted). Refuses `bad-request` for: more than
/// [`MAX_JWT_BYTES`] ([`MAX_REQUEST_JWT_BYTES`], [`MAX_RESPONSE_JWT_BYTES`] for the callout's
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

fn malformed(what: impl fmt::Display) -> EpError {
    EpError::bad_request(format!("malformed NATS JWT: {what}"))
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

/// Reads typed optional fields; JSON `null` counts as absent, as in Go.
struct Fields<'m> {
    map: &'m Map<String, Value>,
    section: &'static str,
}

impl<'m> Fields<'m> {
    fn get(&self, key: &str) -> Option<&'m Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, expected: &str) -> EpError {
        malformed(format_args!("{}{key} is not {expected}", self.section))
    }

    fn str(&self, key: &str) -> Result<Option<&'m str>, EpError> {
        self.get(key)
            .map(|v| v.as_str().ok_or_else(|| self.wrong(key, "a string")))
            .transpose()
    }

    fn int(&self, key: &str) -> Result<i64, EpError> {
        self.get(key)
            .map(|v| {
                v.as_i64()
                    .ok_or_else(|| self.wrong(key, "a 64-bit integer"))
            })
            .transpose()
            .map(Option::unwrap_or_default)
    }

    /// A time claim; zero is absent (Go's `omitempty`); negative is refused, since Go would
    /// read a negative `exp` as "never expires".
    fn seconds(&self, key: &str) -> Result<Option<UnixSeconds>, EpError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(0) => Ok(None),
                Some(s) => Ok(Some(UnixSeconds(s))),
                None => Err(self.wrong(key, "a non-negative integer")),
            },
        }
    }

    fn flag(&self, key: &str) -> Result<bool, EpError> {
        self.get(key)
            .map(|v| v.as_bool().ok_or_else(|| self.wrong(key, "a boolean")))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    fn strs(&self, key: &str) -> Result<Vec<String>, EpError> {
        let Some(v) = self.get(key) else {
            return Ok(Vec::new());
        };
        let items = v
            .as_array()
            .ok_or_else(|| self.wrong(key, "an array of strings"))?;
        items
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| self.wrong(key, "an array of strings"))
            })
            .collect()
    }

    fn object(&self, key: &str, section: &'static str) -> Result<Option<Fields<'m>>, EpError> {
        self.get(key)
            .map(|v| {
                v.as_object()
                    .map(|map| Fields { map, section })
                    .ok_or_else(|| self.wrong(key, "an object"))
            })
            .transpose()
    }
}

fn claims_from(map: &Map<String, Value>) -> Result<Claims, EpError> {
    let top = Fields { map, section: "" };
    if top.get("type").is_some() {
        return Err(malformed(
            "a v1 claim (top-level type); only v2 NATS JWTs are accepted",
        ));
    }
    let nats = top
        .object("nats", "nats.")?
        .ok_or_else(|| malformed("claims carry no nats section"))?;
    let version = nats.int("version")?;
    if version != CLAIMS_VERSION {
        return Err(malformed(format_args!(
            "claims version {version}; only version 2 is accepted"
        )));
    }
    let type_name = nats.str("type")?.unwrap_or("");
    let kind = ClaimType::parse(type_name).ok_or_else(|| {
        EpError::bad_request(format!(
            "unsupported NATS JWT claim type {type_name:?}; expected operator, account, user, \
             authorization_request or authorization_response"
        ))
    })?;
    let iss = top.str("iss")?.unwrap_or("");
    let issuer_kind = public_key_kind(iss)
        .ok_or_else(|| malformed(format_args!("iss {iss:?} is not a public nkey")))?;
    if !kind.issuer_allowed(&issuer_kind) {
        return Err(malformed(format_args!(
            "{issuer_kind:?} keys cannot issue {kind} claims"
        )));
    }
    let sub = top.str("sub")?.unwrap_or("");
    expect_public_key(sub, &kind.subject_kind(), "sub").map_err(|e| malformed(e.message))?;
    let nats = match kind {
        ClaimType::User => user_from(&nats)?,
        ClaimType::Account => Nats::Account(account_from(&nats)?),
        ClaimType::Operator => Nats::Operator(operator_from(&nats)?),
        ClaimType::AuthorizationRequest => Nats::AuthorizationRequest(request_from(&nats)?),
        ClaimType::AuthorizationResponse => Nats::AuthorizationResponse(response_from(&nats)?),
    };
    Ok(Claims {
        jti: top.str("jti")?.unwrap_or("").to_owned(),
        iat: top.seconds("iat")?.unwrap_or(UnixSeconds(0)),
        exp: top.seconds("exp")?,
        nbf: top.seconds("nbf")?,
        aud: top.str("aud")?.map(str::to_owned),
        iss: iss.to_owned(),
        sub: sub.to_owned(),
        name: top.str("name")?.unwrap_or("").to_owned(),
        nats,
    })
}

fn permission_from(f: Option<Fields<'_>>) -> Result<Permission, EpError> {
    let Some(f) = f else {
        return Ok(Permission::default());
    };
    Ok(Permission {
        allow: f.strs("allow")?,
        deny: f.strs("deny")?,
    })
}

fn permissions_from(f: &Fields<'_>) -> Result<Permissions, EpError> {
    let response = match f.object("resp", "nats.resp.")? {
        Some(r) => Some(ResponsePermission {
            max: r.int("max")?,
            ttl_nanos: r.int("ttl")?,
        }),
        None => None,
    };
    Ok(Permissions {
        publish: permission_from(f.object("pub", "nats.pub.")?)?,
        subscribe: permission_from(f.object("sub", "nats.sub.")?)?,
        response,
    })
}

fn nats_limits_from(f: &Fields<'_>) -> Result<NatsLimits, EpError> {
    Ok(NatsLimits {
        subs: f.int("subs")?,
        data: f.int("data")?,
        payload: f.int("payload")?,
    })
}

fn user_from(f: &Fields<'_>) -> Result<Nats, EpError> {
    let issuer_account = f.str("issuer_account")?.map(str::to_owned);
    if let Some(account) = &issuer_account {
        expect_public_key(account, &KeyPairType::Account, "nats.issuer_account")
            .map_err(|e| malformed(e.message))?;
    }
    Ok(Nats::User {
        user: UserNats {
            permissions: permissions_from(f)?,
            limits: nats_limits_from(f)?,
            bearer_token: f.flag("bearer_token")?,
            allowed_connection_types: f.strs("allowed_connection_types")?,
            tags: f.strs("tags")?,
        },
        issuer_account,
    })
}

fn account_from(f: &Fields<'_>) -> Result<AccountNats, EpError> {
    let limits = match f.object("limits", "nats.limits.")? {
        None => AccountLimits {
            nats: NatsLimits {
                subs: 0,
                data: 0,
                payload: 0,
            },
            imports: 0,
            exports: 0,
            wildcards: false,
            disallow_bearer: false,
            conn: 0,
            leaf: 0,
            jetstream: JetStreamLimits::default(),
        },
        Some(l) => AccountLimits {
            nats: nats_limits_from(&l)?,
            imports: l.int("imports")?,
            exports: l.int("exports")?,
            wildcards: l.flag("wildcards")?,
            disallow_bearer: l.flag("disallow_bearer")?,
            conn: l.int("conn")?,
            leaf: l.int("leaf")?,
            jetstream: JetStreamLimits {
                mem_storage: l.int("mem_storage")?,
                disk_storage: l.int("disk_storage")?,
                streams: l.int("streams")?,
                consumer: l.int("consumer")?,
                max_ack_pending: l.int("max_ack_pending")?,
                mem_max_stream_bytes: l.int("mem_max_stream_bytes")?,
                disk_max_stream_bytes: l.int("disk_max_stream_bytes")?,
                max_bytes_required: l.flag("max_bytes_required")?,
            },
        },
    };
    // Scoped signing keys (objects with a user template) are refused rather than read as plain
    // keys: dropping the template would misstate what the key may sign.
    let signing_keys = f.strs("signing_keys").map_err(|_| {
        malformed("nats.signing_keys is not a list of public keys (scoped signers are unsupported)")
    })?;
    let default_permissions = match f.object("default_permissions", "nats.default_permissions.")? {
        Some(d) => permissions_from(&d)?,
        None => Permissions::default(),
    };
    let authorization = match f.object("authorization", "nats.authorization.")? {
        Some(a) => authorization_from(&a)?,
        None => None,
    };
    Ok(AccountNats {
        limits,
        signing_keys,
        default_permissions,
        authorization,
        tags: f.strs("tags")?,
    })
}

/// An enabled block (one with `auth_users`) or `None`: the server ignores a block without
/// users (an `xkey` alone included), and refuses an account whose block allows accounts
/// without users, so such a token is malformed here too.
fn authorization_from(f: &Fields<'_>) -> Result<Option<ExternalAuthorization>, EpError> {
    let auth_users = f.strs("auth_users")?;
    let allowed_accounts = f.strs("allowed_accounts")?;
    if auth_users.is_empty() {
        if !allowed_accounts.is_empty() {
            return Err(malformed(
                "nats.authorization has allowed accounts but no auth users (the server treats \
                 such an account as invalid)",
            ));
        }
        return Ok(None);
    }
    Ok(Some(ExternalAuthorization {
        auth_users,
        allowed_accounts,
        xkey: f.str("xkey")?.filter(|x| !x.is_empty()).map(str::to_owned),
    }))
}

fn request_from(f: &Fields<'_>) -> Result<AuthorizationRequest, EpError> {
    let text = |f: &Fields<'_>, key: &str| f.str(key).map(|s| s.unwrap_or("").to_owned());
    let server_id = match f.object("server_id", "nats.server_id.")? {
        None => RequestServer::default(),
        Some(s) => RequestServer {
            id: text(&s, "id")?,
            name: text(&s, "name")?,
            host: text(&s, "host")?,
            version: text(&s, "version")?,
            xkey: s.str("xkey")?.filter(|x| !x.is_empty()).map(str::to_owned),
        },
    };
    let client_info = match f.object("client_info", "nats.client_info.")? {
        None => RequestClient::default(),
        Some(c) => RequestClient {
            host: text(&c, "host")?,
            id: u64::try_from(c.int("id")?)
                .map_err(|_| malformed("nats.client_info.id is negative"))?,
            user: text(&c, "user")?,
            name_tag: text(&c, "name_tag")?,
            kind: text(&c, "kind")?,
        },
    };
    let connect_opts = match f.object("connect_opts", "nats.connect_opts.")? {
        None => RequestConnect::default(),
        Some(c) => RequestConnect {
            // Go writes both with `omitempty`: an empty string is a field the client left out.
            auth_token: c
                .str("auth_token")?
                .filter(|t| !t.is_empty())
                .map(AuthToken::new),
            name: c.str("name")?.filter(|n| !n.is_empty()).map(str::to_owned),
            lang: text(&c, "lang")?,
            version: text(&c, "version")?,
        },
    };
    Ok(AuthorizationRequest {
        server_id,
        user_nkey: text(f, "user_nkey")?,
        client_info,
        connect_opts,
    })
}

/// Go's `AuthorizationResponse.Validate`: exactly one of `jwt` and a non-empty `error`.
fn response_from(f: &Fields<'_>) -> Result<AuthorizationResponse, EpError> {
    let jwt = f.str("jwt")?.filter(|s| !s.is_empty());
    let error = f.str("error")?.filter(|s| !s.is_empty());
    let verdict = match (jwt, error) {
        (Some(jwt), None) => AuthorizationVerdict::Jwt(jwt.to_owned()),
        (None, Some(error)) => AuthorizationVerdict::Error(error.to_owned()),
        (Some(_), Some(_)) => {
            return Err(malformed(
                "an authorization response sets both jwt and error",
            ))
        }
        (None, None) => {
            return Err(malformed(
                "an authorization response sets neither jwt nor error",
            ))
        }
    };
    let issuer_account = f.str("issuer_account")?.map(str::to_owned);
    if let Some(account) = &issuer_account {
        expect_public_key(account, &KeyPairType::Account, "nats.issuer_account")
            .map_err(|e| malformed(e.message))?;
    }
    Ok(AuthorizationResponse {
        verdict,
        issuer_account,
    })
}

fn operator_from(f: &Fields<'_>) -> Result<OperatorNats, EpError> {
    Ok(OperatorNats {
        signing_keys: f.strs("signing_keys")?,
        system_account: f.str("system_account")?.map(str::to_owned),
        tags: f.strs("tags")?,
    })
}

/// The kind of a well-formed public nkey (base32, checksum, public prefix), `None` when `s` is
/// not one. Like Go's `IsValidPublic*Key` it does not decompress the curve point: that costs as
/// much as a third of a signature, and [`verify`] does it once for the issuer anyway.
fn public_key_kind(s: &str) -> Option<KeyPairType> {
    nkeys::from_public_key(s)
        .ok()
        .map(|(prefix, _)| KeyPairType::from(prefix))
}

fn expect_public_key(s: &str, kind: &KeyPairType, what: &str) -> Result<(), EpError> {
    match public_key_kind(s) {
        Some(k) if &k == kind => Ok(()),
        _ => Err(EpError::bad_request(format!(
            "{what} {s:?} is not a public {kind:?} nkey"
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// Creds text
// ---------------------------------------------------------------------------------------------

/// A user JWT with its seed: the content of a `.creds` file. `Debug` never prints the seed.
#[derive(Clone, PartialEq, Eq)]
pub struct Creds {
    pub jwt: String,
    pub seed: String,
}

impl fmt::Debug for Creds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Creds")
            .field("jwt", &self.jwt)
            .field("seed", &"<redacted>")
            .finish()
    }
}

impl Creds {
    /// The standard creds layout, byte for byte what nats-io/jwt v2's `FormatUserConfig`
    /// writes (decorated JWT block, the warning banner, decorated seed block, closing rule).
    pub fn text(&self) -> String {
        format!(
            "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n",
            self.jwt, self.seed
        )
    }
}

/// Formats creds text for a user JWT and its seed, refusing (`bad-request`) what Go's
/// `FormatUserConfig` refuses: a token that is not a user JWT, a seed that is not a user
/// seed, a seed whose public key is not the JWT's subject. The signature is not checked here.
pub fn format_creds(user_jwt: &str, user_seed: &str) -> Result<String, EpError> {
    let creds = Creds {
        jwt: user_jwt.to_owned(),
        seed: user_seed.to_owned(),
    };
    check_creds(&creds)?;
    Ok(creds.text())
}

/// Parses creds text: the first `---…---` delimited block is the JWT, the second the seed
/// (the same blocks Go's `ParseDecoratedJWT`/`ParseDecoratedUserNKey` find, `\r\n` tolerated),
/// then checks them as [`format_creds`] does. Refusals are `bad-request`.
pub fn parse_creds(text: &str) -> Result<Creds, EpError> {
    if text.len() > MAX_CREDS_BYTES {
        return Err(EpError::bad_request(format!(
            "the creds text is {} bytes, over the {MAX_CREDS_BYTES}-byte bound",
            text.len()
        )));
    }
    let mut lines = text.lines().map(str::trim);
    let mut next_block = || -> Option<String> {
        lines.by_ref().find(|l| is_rule(l))?;
        let value = lines.next()?;
        let valid = !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '='));
        (valid && lines.next().is_some_and(is_rule)).then(|| value.to_owned())
    };
    let (Some(jwt), Some(seed)) = (next_block(), next_block()) else {
        return Err(EpError::bad_request(
            "not NATS creds: expected a delimited JWT block followed by a delimited seed block",
        ));
    };
    let creds = Creds { jwt, seed };
    check_creds(&creds)?;
    Ok(creds)
}

/// A `-----BEGIN …-----` / `------END …------` delimiter line.
fn is_rule(line: &str) -> bool {
    line.len() >= 6 && line.starts_with("---") && line.ends_with("---")
}

fn check_creds(creds: &Creds) -> Result<(), EpError> {
    let claims = decode(&creds.jwt)?;
    if claims.claim_type() != ClaimType::User {
        return Err(EpError::bad_request(format!(
            "only user JWTs go into creds, not {} JWTs",
            claims.claim_type()
        )));
    }
    let user = KeyPair::from_seed(&creds.seed)
        .ok()
        .filter(|k| k.key_pair_type() == KeyPairType::User)
        .ok_or_else(|| EpError::bad_request("the creds seed is not a user nkey seed"))?;
    if user.public_key() != claims.sub {
        return Err(EpError::bad_request(
            "the creds seed does not belong to the JWT subject",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
}
