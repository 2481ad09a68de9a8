//! The KV request set the machines speak, and the outcomes a driver answers with.
//!
//! These mirror NATS JetStream KV exactly (DESIGN §3): a bucket is a stream, a key's revision is
//! the stream sequence of the last message on its subject (so revisions are bucket-wide), CAS
//! compares the per-subject last sequence, and deletions leave DEL/PURGE markers that readers
//! must see. [`model::KvModel`] reproduces these semantics in memory.

pub mod model;
pub mod settle;

use std::fmt;

/// Which per-space store a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Store {
    /// `cotal_auth_<space>`: gates, credential ledgers, repair cursors.
    Auth,
    /// `cotal_records_<space>`: service records, governance heads, lifecycle heads.
    Records,
    /// `cotal_admission_<space>`: run admissions and revocation markers.
    Admission,
    /// `EPC_<space>`: content-addressed contract artifacts.
    Contracts,
    /// `cotal_issued_<space>`: issued-authority evidence, attempt rows and the source index
    /// (SPEC §13.15). Append-only per key: nothing on a key is ever removed.
    Issued,
    /// `cotal_accepted_<space>`: the accepted rows a connected client reads its generation
    /// from (SPEC §13.15). Write-once per key.
    Accepted,
    /// `cotal_sessions_<space>`: redeemed session rows, written by the serving managers'
    /// `session-ledger` credentials and only read by this plane (SPEC §13.6).
    Sessions,
    /// `cotal_actors_<space>`: the actor ledger's rows, for a space whose ledger is replicated
    /// (`init --ledger kv`) rather than kept in the active plane's state dir.
    Actors,
}

/// A KV revision: the stream sequence of a key's last message. Revision 0 means "no message".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Revision(pub u64);

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The operation recorded by a key's last message (`KV-Operation` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Put,
    /// A `DEL` marker: the key was deleted; its history may remain.
    Delete,
    /// A `PURGE` marker: the key's earlier history was removed.
    Purge,
}

impl Operation {
    pub const fn as_str(self) -> &'static str {
        match self {
            Operation::Put => "PUT",
            Operation::Delete => "DEL",
            Operation::Purge => "PURGE",
        }
    }
}

/// The last message of a key as a leader-served read returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Vec<u8>,
    pub revision: Revision,
    pub operation: Operation,
}

impl Entry {
    /// True when the entry is a live value rather than a deletion marker.
    pub fn is_put(&self) -> bool {
        self.operation == Operation::Put
    }
}

/// One KV operation on a named store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvRequest {
    /// Leader-served read of a key's last message (F7, F8).
    Get { store: Store, key: String },
    /// Leader-served read of a key's *first* message: the row that was created, whatever was
    /// published on the key since (immutable rows of an append-only store, SPEC §13.15).
    GetFirst { store: Store, key: String },
    /// Create-only write that, like the NATS KV client's `create`, also succeeds over a DEL or
    /// PURGE marker (it recreates the key).
    Create {
        store: Store,
        key: String,
        value: Vec<u8>,
    },
    /// Create-only write fenced against the key's whole history: refused over any marker
    /// (the reference's records `put` with `previousSeq: 0`).
    CreateStrict {
        store: Store,
        key: String,
        value: Vec<u8>,
    },
    /// Revision-pinned write: commits only if the key's last message has revision `expected`.
    Update {
        store: Store,
        key: String,
        value: Vec<u8>,
        expected: Revision,
    },
    /// Revision-pinned deletion: writes a DEL marker only at revision `expected`.
    Delete {
        store: Store,
        key: String,
        expected: Revision,
    },
    /// Every key under `prefix` whose subject still has a message, markers included (sorted).
    Keys { store: Store, prefix: String },
}

/// The kind of a [`KvRequest`], used by fault triggers and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvOp {
    Get,
    GetFirst,
    Create,
    CreateStrict,
    Update,
    Delete,
    Keys,
}

impl KvRequest {
    /// A create-only write refused over any marker (`pin` = `None`), or a write pinned to the
    /// key's last revision `pin`: how a row that is never deleted is written, first and after.
    pub fn create_or_update(
        store: Store,
        key: String,
        value: Vec<u8>,
        pin: Option<Revision>,
    ) -> KvRequest {
        match pin {
            None => KvRequest::CreateStrict { store, key, value },
            Some(expected) => KvRequest::Update {
                store,
                key,
                value,
                expected,
            },
        }
    }

    pub fn op(&self) -> KvOp {
        match self {
            KvRequest::Get { .. } => KvOp::Get,
            KvRequest::GetFirst { .. } => KvOp::GetFirst,
            KvRequest::Create { .. } => KvOp::Create,
            KvRequest::CreateStrict { .. } => KvOp::CreateStrict,
            KvRequest::Update { .. } => KvOp::Update,
            KvRequest::Delete { .. } => KvOp::Delete,
            KvRequest::Keys { .. } => KvOp::Keys,
        }
    }

    pub fn store(&self) -> Store {
        match self {
            KvRequest::Get { store, .. }
            | KvRequest::GetFirst { store, .. }
            | KvRequest::Create { store, .. }
            | KvRequest::CreateStrict { store, .. }
            | KvRequest::Update { store, .. }
            | KvRequest::Delete { store, .. }
            | KvRequest::Keys { store, .. } => *store,
        }
    }

    /// The key written or read; for `Keys`, the prefix.
    pub fn key(&self) -> &str {
        match self {
            KvRequest::Get { key, .. }
            | KvRequest::GetFirst { key, .. }
            | KvRequest::Create { key, .. }
            | KvRequest::CreateStrict { key, .. }
            | KvRequest::Update { key, .. }
            | KvRequest::Delete { key, .. } => key,
            KvRequest::Keys { prefix, .. } => prefix,
        }
    }

    /// True for requests that may change the store.
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            KvRequest::Get { .. } | KvRequest::GetFirst { .. } | KvRequest::Keys { .. }
        )
    }
}

/// How a driver answers a [`KvRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvOutcome {
    /// Answer to `Get` (`GetFirst`): the last (first) message, or `None` when the subject has
    /// none.
    Entry(Option<Entry>),
    /// Answer to a write that committed at this revision.
    Written(Revision),
    /// The write's revision pin (or create-only condition) did not hold: nothing was written.
    CasLost,
    /// Answer to `Keys`.
    Keys(Vec<String>),
    /// The request was never sent (or the server refused it before any effect): nothing
    /// was written.
    Unavailable(String),
    /// The request went out but no answer came back: the write may or may not have committed.
    /// Only a leader read-back can tell.
    Ambiguous(String),
}

/// How a driver answered a `Get`: the typed view [`crate::machine::Ctx::get`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The key's last message, or `None` when its subject has none.
    Entry(Option<Entry>),
    /// The read was not served (never sent, or no answer came back): nothing is known.
    Unavailable(String),
}

/// How a driver answered a `Keys`: the typed view [`crate::machine::Ctx::keys`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeysOutcome {
    /// Every key under the prefix that still has a message, markers included (sorted).
    Keys(Vec<String>),
    /// The listing was not served: nothing is known.
    Unavailable(String),
}

/// How a driver answered a write (`Create`, `CreateStrict`, `Update`, `Delete`): the typed view
/// [`crate::machine::Ctx::write`] and its per-kind helpers return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The write committed at this revision.
    Written(Revision),
    /// The revision pin (or create-only condition) did not hold: nothing was written.
    CasLost,
    /// The request was never sent (or refused before any effect): nothing was written.
    NotSent(String),
    /// The request went out unanswered: it may or may not have committed. Only a leader
    /// read-back can tell ([`settle::settle_write`]).
    Ambiguous(String),
}

impl ReadOutcome {
    /// The read view of `outcome`; `Err` hands back an outcome a read cannot produce. A read
    /// that went out unanswered changed nothing, so it is as unavailable as one never sent.
    pub fn from_outcome(outcome: KvOutcome) -> Result<Self, KvOutcome> {
        match outcome {
            KvOutcome::Entry(entry) => Ok(ReadOutcome::Entry(entry)),
            KvOutcome::Unavailable(why) | KvOutcome::Ambiguous(why) => {
                Ok(ReadOutcome::Unavailable(why))
            }
            other @ (KvOutcome::Written(_) | KvOutcome::CasLost | KvOutcome::Keys(_)) => Err(other),
        }
    }
}

impl KeysOutcome {
    /// The listing view of `outcome`; `Err` hands back an outcome a listing cannot produce.
    pub fn from_outcome(outcome: KvOutcome) -> Result<Self, KvOutcome> {
        match outcome {
            KvOutcome::Keys(keys) => Ok(KeysOutcome::Keys(keys)),
            KvOutcome::Unavailable(why) | KvOutcome::Ambiguous(why) => {
                Ok(KeysOutcome::Unavailable(why))
            }
            other @ (KvOutcome::Written(_) | KvOutcome::CasLost | KvOutcome::Entry(_)) => {
                Err(other)
            }
        }
    }
}

impl WriteOutcome {
    /// The write view of `outcome`; `Err` hands back an outcome a write cannot produce.
    pub fn from_outcome(outcome: KvOutcome) -> Result<Self, KvOutcome> {
        match outcome {
            KvOutcome::Written(revision) => Ok(WriteOutcome::Written(revision)),
            KvOutcome::CasLost => Ok(WriteOutcome::CasLost),
            KvOutcome::Unavailable(why) => Ok(WriteOutcome::NotSent(why)),
            KvOutcome::Ambiguous(why) => Ok(WriteOutcome::Ambiguous(why)),
            other @ (KvOutcome::Entry(_) | KvOutcome::Keys(_)) => Err(other),
        }
    }
}
