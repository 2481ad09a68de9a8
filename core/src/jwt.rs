//! NATS JWT v2: the credentials the plane mints (issue: credentials). Types shared by the JWT
//! codec and the permission profiles.

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
