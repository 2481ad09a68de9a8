//! The claims a NATS JWT carries: the standard claims and each kind's `nats` section, as the
//! minting builders take them and the decoder returns them.

use std::fmt;

use nkeys::KeyPairType;

use super::{MAX_JWT_BYTES, MAX_REQUEST_JWT_BYTES, MAX_RESPONSE_JWT_BYTES, NO_LIMIT};

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

    pub(super) fn parse(s: &str) -> Option<Self> {
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
    pub(super) fn subject_kind(self) -> KeyPairType {
        match self {
            ClaimType::Operator => KeyPairType::Operator,
            ClaimType::Account | ClaimType::AuthorizationRequest => KeyPairType::Account,
            ClaimType::User | ClaimType::AuthorizationResponse => KeyPairType::User,
        }
    }

    /// Whether a key of `kind` may issue this claim: operators self-sign, accounts are signed
    /// by an operator key (or self-signed outside operator mode), users and authorization
    /// responses by an account key, authorization requests by a server key.
    pub(super) fn issuer_allowed(self, kind: &KeyPairType) -> bool {
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
    pub(super) const fn max_bytes(self) -> usize {
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

/// Per-connection message limits (`subs`, `data`, `payload`); [`NO_LIMIT`](super::NO_LIMIT) is unlimited and
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
}
