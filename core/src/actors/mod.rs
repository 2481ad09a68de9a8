//! The host's actor ledger: interactive and managed rows, the delegation envelope, and the
//! ledger and broker-durable requests machines send as effects.
//!
//! The ledger lives on the host's disk, not in NATS KV, so machines reach it through
//! [`crate::machine::Effect::Actors`] and drivers answer with an [`ActorLedger`] port: the
//! file-backed one in `cotal-io-fs`, or the in-memory twin [`MemoryActors`] here. Both share the
//! row grammar ([`row`]) and the envelope walk ([`envelope`]), so the twin fails closed exactly
//! where the files do. Broker durables are likewise an effect answered by a [`DurablesPort`].
//!
//! **Per-alias serialization (reference §6.6).** Enrollment and retirement preparation for one
//! `(owner, actor)` must never overlap. The types keep it: the [`crate::enrollment`] machines are
//! [`AliasScript`]s, which run only inside a [`Serialized`] built from an [`AliasGuard`] for
//! their alias ([`ActorLedger::lock_alias`]), held until the machine is done. The file ledger's
//! lock is an `flock` on a per-alias lock file, so it holds across threads and across processes
//! sharing the ledger directory.

pub mod authorize;
pub mod envelope;
pub mod footprint;
pub mod grant;
pub mod kv_rows;
mod memory;
mod read;
pub mod row;
mod serialized;
pub mod store;

use std::any::Any;
use std::fmt;

pub use memory::{Footprint, MemoryActors, MemoryDurables};
pub use read::{denied, LedgerRead};
pub use row::{ActorRow, RowSpace, TokenHash};
pub use serialized::{AliasScript, LockHeld, Serialized};

use crate::names::{LifecycleUid, Principal};

/// Where a delegation envelope is checked: at authorship (spawn/enrollment) or at an agent's
/// bearer exchange. Only the refusal wording differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    Spawn,
    Exchange,
}

/// One request to the actor ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActorsRequest {
    /// Reads the row of `principal` in one space.
    Find {
        space: RowSpace,
        principal: Principal,
    },
    /// Reads both spaces; a principal granted in both is a broken ledger (`Corrupt`).
    FindUnified { principal: Principal },
    /// Walks the delegation envelope of `row` against the ledger as it is now.
    CheckEnvelope { row: ActorRow, boundary: Boundary },
    /// Upserts an interactive row (operator path). The row must carry its lifecycle uid: the
    /// ledger mints nothing.
    GrantInteractive(ActorRow),
    /// Upserts a managed row: validation, the spawn envelope walk, no shadowing of an
    /// interactive row, write, then the post-write shadow re-check.
    GrantManaged(ActorRow),
    /// Removes the managed row of `principal` only while it still names `lifecycle_uid`.
    RevokeManagedAt {
        principal: Principal,
        lifecycle_uid: LifecycleUid,
    },
    /// Removes the interactive row of `principal` (operator path; a managed row is refused).
    RevokeInteractive { principal: Principal },
    /// Every row of one space, in principal order, each read and checked as `Find` reads it.
    List { space: RowSpace },
}

impl ActorsRequest {
    /// Whether the request writes (fault hooks count writes).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            ActorsRequest::GrantInteractive(_)
                | ActorsRequest::GrantManaged(_)
                | ActorsRequest::RevokeManagedAt { .. }
                | ActorsRequest::RevokeInteractive { .. }
        )
    }
}

/// A row with the space it was found in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub space: RowSpace,
    pub row: ActorRow,
}

/// The ledger's answer. Every failure is closed: nothing is granted on `Refused`, `Corrupt` or
/// `Unavailable`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActorsOutcome {
    Found(Option<Held>),
    /// The row as written.
    Granted(ActorRow),
    /// Whether a row was removed.
    Revoked(bool),
    /// The rows of a space: each one the row, or the sentence saying why its file is not one.
    Listed(Vec<Result<ActorRow, String>>),
    /// The envelope walk admitted the row.
    Within,
    /// Refused by policy or grammar (envelope exceeded, shadowing, bad row); the sentence says
    /// what and how to fix it.
    Refused(String),
    /// A stored row failed its grammar; the sentence names the file.
    Corrupt(String),
    /// The ledger could not be read or written; whether a write landed is settled by the
    /// adapter's read-back, and this is only returned when even that failed.
    Unavailable(String),
}

/// Why a ledger request was not carried out (the failing arms of [`ActorsOutcome`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    Refused(String),
    Corrupt(String),
    Unavailable(String),
}

impl From<Denial> for ActorsOutcome {
    fn from(denial: Denial) -> Self {
        match denial {
            Denial::Refused(why) => ActorsOutcome::Refused(why),
            Denial::Corrupt(why) => ActorsOutcome::Corrupt(why),
            Denial::Unavailable(why) => ActorsOutcome::Unavailable(why),
        }
    }
}

/// Holds the lock on one alias until dropped.
pub struct AliasGuard {
    alias: Principal,
    /// Whatever keeps the lock held: dropping it releases the lock.
    _held: Box<dyn Any + Send>,
}

impl AliasGuard {
    /// Wraps whatever keeps the lock on `alias` held (a locked file, a map entry's guard).
    pub fn new(alias: Principal, held: Box<dyn Any + Send>) -> Self {
        AliasGuard { alias, _held: held }
    }

    pub fn alias(&self) -> &Principal {
        &self.alias
    }
}

impl fmt::Debug for AliasGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AliasGuard({})", self.alias)
    }
}

/// The actor-ledger port.
pub trait ActorLedger: Send + Sync + fmt::Debug {
    /// Executes one ledger request.
    fn execute(&self, request: &ActorsRequest) -> ActorsOutcome;
    /// Blocks until this caller alone holds `alias` (§6.6); released when the guard drops.
    fn lock_alias(&self, alias: &Principal) -> Result<AliasGuard, String>;
    /// Takes the alias lock if it is free right now.
    fn try_lock_alias(&self, alias: &Principal) -> Result<Option<AliasGuard>, String>;
    /// Whether [`ActorLedger::execute`] waits on this process's async runtime (a replicated
    /// ledger's KV round trips): such a ledger is asked from a blocking thread, never from an
    /// async task, which it would stall. A few small local files answer inline.
    fn blocks(&self) -> bool {
        false
    }
}

/// One request to the broker about an agent's lifecycle-keyed durables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurablesRequest {
    /// Creates the agent's durables at `lifecycle_uid` (a `provisioner` credential: no presence,
    /// no consume).
    Provision {
        principal: Principal,
        lifecycle_uid: LifecycleUid,
        subscribe: Vec<String>,
        allow_subscribe: Vec<String>,
        role: Option<String>,
    },
    /// Removes the footprint of exactly that lifecycle (a `deprovisioner` credential pinned to
    /// `{principal, lifecycleUid, memberChannels}`).
    Deprovision {
        principal: Principal,
        lifecycle_uid: LifecycleUid,
        member_channels: Vec<String>,
    },
}

/// The broker's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurablesOutcome {
    Done,
    Failed(String),
}

/// The broker-durables port.
pub trait DurablesPort: Send + Sync + fmt::Debug {
    fn execute(&self, request: &DurablesRequest) -> DurablesOutcome;
}
