//! The value types a binding carries: the standing lifetime, the validated tokens that land in
//! subjects, and the caller triple on the endpoint rails.

use std::fmt;

use super::{STANDING_TTL_MAX_SECS, STANDING_TTL_MIN_SECS};
use crate::error::EpError;
use crate::names::{str_newtype, ActorToken, LifecycleUid, OwnerToken};

/// A standing credential's lifetime, bounded to
/// [`STANDING_TTL_MIN_SECS`]..=[`STANDING_TTL_MAX_SECS`]; 24 h unless the operator says less.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StandingTtl(u64);

impl StandingTtl {
    pub const DEFAULT: StandingTtl = StandingTtl(STANDING_TTL_MAX_SECS);

    /// Refuses a lifetime outside the bounds with `bad-request` naming the bound it broke.
    pub fn new(seconds: u64) -> Result<Self, EpError> {
        if seconds < STANDING_TTL_MIN_SECS {
            return Err(EpError::bad_request(format!(
                "standing credential lifetime {seconds} s is refused: it must be at least \
                 {STANDING_TTL_MIN_SECS} s"
            )));
        }
        if seconds > STANDING_TTL_MAX_SECS {
            return Err(EpError::bad_request(format!(
                "standing credential lifetime {seconds} s is refused: it must be at most \
                 {STANDING_TTL_MAX_SECS} s (24 h); renewal, not a longer lifetime, keeps it alive"
            )));
        }
        Ok(StandingTtl(seconds))
    }

    /// The lifetime a trusted host gave, if it gave one (`None`: [`StandingTtl::DEFAULT`]).
    pub fn given(seconds: Option<u64>) -> Result<Self, EpError> {
        seconds.map_or(Ok(StandingTtl::DEFAULT), StandingTtl::new)
    }

    pub const fn seconds(self) -> u64 {
        self.0
    }
}

impl Default for StandingTtl {
    fn default() -> Self {
        StandingTtl::DEFAULT
    }
}

pub(super) fn all_chars(s: &str, ok: impl Fn(char) -> bool) -> bool {
    s.chars().all(ok)
}

pub(super) fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

str_newtype! {
    /// The authenticated connection id that keys the reply inbox `_INBOX_<connId>.>`: the
    /// caller-held user nkey, or a client-chosen inbox nonce. Metacharacters would widen the
    /// inbox grant to other connections, so only `[A-Za-z0-9_-]{8,120}` passes.
    ConnId, "connection id", "[A-Za-z0-9_-]{8,120}",
    |s: &str| (8..=120).contains(&s.len()) && all_chars(s, id_char)
}
str_newtype! {
    /// A workflow run id (the `wfj.<runId>` token).
    RunId, "run id", "[A-Za-z0-9_-]{1,64}",
    |s: &str| (1..=64).contains(&s.len()) && all_chars(s, id_char)
}
str_newtype! {
    /// A takeover attempt id; names the per-takeover journal replay durable.
    TakeoverId, "takeover id", "[A-Za-z0-9_-]{1,64}",
    |s: &str| (1..=64).contains(&s.len()) && all_chars(s, id_char)
}
str_newtype! {
    /// A checkpoint token: the request id a pause is keyed by.
    CheckpointToken, "checkpoint token", "[A-Za-z0-9_-]{1,64}",
    |s: &str| (1..=64).contains(&s.len()) && all_chars(s, id_char)
}
str_newtype! {
    /// A work-pool token (`pool_<e>_<pool>` parses from its last `_` because a pool has none).
    PoolToken, "pool", "[a-z0-9-]{1,32}",
    |s: &str| (1..=32).contains(&s.len())
        && all_chars(s, |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}
str_newtype! {
    /// A concrete channel (dot-separated `[A-Za-z0-9_-]+` segments, no wildcard): the
    /// deprovisioner deletes exact membership rows, so a wildcard channel is refused at mint.
    Channel, "channel", "dot-separated [A-Za-z0-9_-]+ segments (no wildcard)",
    |s: &str| s.split('.').all(|seg| !seg.is_empty() && all_chars(seg, id_char))
}

/// A caller triple on the endpoint rails (`<owner>.<actor>.<uid>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailCaller {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub uid: LifecycleUid,
}

impl fmt::Display for RailCaller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.owner, self.actor, self.uid)
    }
}
