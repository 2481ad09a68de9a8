//! The actor ledger's rows in a replicated KV bucket (`cotal_actors_<space>`), for a plane whose
//! standby runs on another host: every plane of the space reads the same rows, leader-served
//! and fresh per call, so a standby that takes over serves every grant and revoke the active
//! acknowledged (issue 27).
//!
//! The rows are the file ledger's bytes exactly ([`ActorRow::to_file_bytes`]), one key per row:
//! `interactive.<owner>.<actor>` and `managed.<owner>.<actor>`. The ledger's semantics are the
//! one implementation in [`super::store`]; this module only says how a row is loaded, written
//! and removed:
//!
//! * a load is a leader-served `Get`; a deletion marker reads as no row, an unanswered read as
//!   `Unavailable` (fail closed);
//! * a write is pinned to the revision of the key as this request last read it (reading it
//!   first when it has not), so a writer that raced in between loses instead of being
//!   overwritten; an unanswered or lost write is `Unavailable`, which the ledger settles by
//!   reading back (our exact bytes mean it landed);
//! * a removal writes a deletion marker pinned the same way.

use std::collections::BTreeMap;

use super::row::RowSpace;
use super::store::{RowStore, StoreError};
use crate::kv::model::KvModel;
use crate::kv::{KvOutcome, KvRequest, Revision, Store};
use crate::names::Principal;

/// Executes KV requests synchronously: the KV model in tests and the simulator, a blocking
/// bridge to JetStream in the adapter.
pub trait KvPort {
    /// One request, its outcome.
    fn execute(&mut self, request: &KvRequest) -> KvOutcome;
}

impl KvPort for KvModel {
    fn execute(&mut self, request: &KvRequest) -> KvOutcome {
        KvModel::execute(self, request)
    }
}

impl<P: KvPort + ?Sized> KvPort for &mut P {
    fn execute(&mut self, request: &KvRequest) -> KvOutcome {
        (**self).execute(request)
    }
}

/// The key of `principal`'s row in `space`.
pub fn row_key(space: RowSpace, principal: &Principal) -> String {
    format!("{}{}", prefix(space), principal.key())
}

fn prefix(space: RowSpace) -> &'static str {
    match space {
        RowSpace::Interactive => "interactive.",
        RowSpace::Managed => "managed.",
    }
}

/// The rows of one ledger request over a KV port. Built per request: the revisions it pins its
/// writes to are the ones this request read.
#[derive(Debug)]
pub struct KvRows<P> {
    port: P,
    bucket: String,
    /// The revision each key was last read or written at this request (`None`: no message).
    seen: BTreeMap<String, Option<Revision>>,
}

impl<P: KvPort> KvRows<P> {
    /// Rows over `port`; `bucket` names the bucket in refusals.
    pub fn new(port: P, bucket: impl Into<String>) -> KvRows<P> {
        KvRows {
            port,
            bucket: bucket.into(),
            seen: BTreeMap::new(),
        }
    }

    /// The key's last message as a leader-served read returns it; a marker's revision is kept
    /// (a write over it is pinned to it) and it reads as no row.
    fn read(&mut self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let request = KvRequest::Get {
            store: Store::Actors,
            key: key.to_owned(),
        };
        match self.port.execute(&request) {
            KvOutcome::Entry(None) => {
                self.seen.insert(key.to_owned(), None);
                Ok(None)
            }
            KvOutcome::Entry(Some(entry)) => {
                self.seen.insert(key.to_owned(), Some(entry.revision));
                Ok(entry.is_put().then_some(entry.value))
            }
            KvOutcome::Unavailable(why) | KvOutcome::Ambiguous(why) => {
                Err(StoreError::Unavailable(format!(
                    "{}: the read was not served: {why}",
                    self.at(key)
                )))
            }
            other => Err(StoreError::Unavailable(format!(
                "{}: a read answered {other:?}",
                self.at(key)
            ))),
        }
    }

    /// The revision this request read `key` at, reading it now if it has not.
    fn pin(&mut self, key: &str) -> Result<Option<Revision>, StoreError> {
        if let Some(seen) = self.seen.get(key) {
            return Ok(*seen);
        }
        self.read(key)?;
        Ok(self.seen.get(key).copied().flatten())
    }

    /// Sends a pinned write; a commit moves the pin, anything else is `Unavailable` for the
    /// ledger to settle by reading back (and forgets the pin, so that read-back reads afresh).
    fn write(&mut self, key: &str, request: KvRequest) -> Result<(), StoreError> {
        match self.port.execute(&request) {
            KvOutcome::Written(revision) => {
                self.seen.insert(key.to_owned(), Some(revision));
                Ok(())
            }
            outcome => {
                self.seen.remove(key);
                let why = match outcome {
                    KvOutcome::CasLost => "another writer moved the row first".to_owned(),
                    KvOutcome::Unavailable(why) | KvOutcome::Ambiguous(why) => why,
                    other => format!("the write answered {other:?}"),
                };
                Err(StoreError::Unavailable(format!("{}: {why}", self.at(key))))
            }
        }
    }

    fn at(&self, key: &str) -> String {
        format!("{} key {key}", self.bucket)
    }
}

impl<P: KvPort> RowStore for KvRows<P> {
    fn load(
        &mut self,
        space: RowSpace,
        principal: &Principal,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(&row_key(space, principal))
    }

    fn store(
        &mut self,
        space: RowSpace,
        principal: &Principal,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let key = row_key(space, principal);
        let request = match self.pin(&key)? {
            // No message at all: create-only. Over a marker: pinned to the marker.
            None => KvRequest::CreateStrict {
                store: Store::Actors,
                key: key.clone(),
                value: bytes.to_vec(),
            },
            Some(expected) => KvRequest::Update {
                store: Store::Actors,
                key: key.clone(),
                value: bytes.to_vec(),
                expected,
            },
        };
        self.write(&key, request)
    }

    fn remove(&mut self, space: RowSpace, principal: &Principal) -> Result<bool, StoreError> {
        let key = row_key(space, principal);
        if self.read(&key)?.is_none() {
            return Ok(false);
        }
        let Some(expected) = self.seen.get(&key).copied().flatten() else {
            return Ok(false);
        };
        let request = KvRequest::Delete {
            store: Store::Actors,
            key: key.clone(),
            expected,
        };
        self.write(&key, request).map(|()| true)
    }

    fn describe(&self, space: RowSpace, principal: &Principal) -> String {
        self.at(&row_key(space, principal))
    }

    /// The principals with a live row: the keys under the space's prefix, each read so a key
    /// whose last message is a deletion marker is left out.
    fn principals(
        &mut self,
        space: RowSpace,
    ) -> Result<Vec<Result<Principal, String>>, StoreError> {
        let request = KvRequest::Keys {
            store: Store::Actors,
            prefix: prefix(space).to_owned(),
        };
        let keys = match self.port.execute(&request) {
            KvOutcome::Keys(keys) => keys,
            KvOutcome::Unavailable(why) | KvOutcome::Ambiguous(why) => {
                return Err(StoreError::Unavailable(format!(
                    "{}: the listing was not served: {why}",
                    self.bucket
                )))
            }
            other => {
                return Err(StoreError::Unavailable(format!(
                    "{}: a listing answered {other:?}",
                    self.bucket
                )))
            }
        };
        let mut principals = Vec::new();
        for key in keys {
            let Some(name) = key.strip_prefix(prefix(space)) else {
                continue;
            };
            let parsed = Principal::parse(name)
                .ok()
                .filter(|p| p.key() == name)
                .ok_or_else(|| format!("{}: not a row key", self.at(&key)));
            match parsed {
                Ok(principal) => {
                    if self.read(&key)?.is_some() {
                        principals.push(Ok(principal));
                    }
                }
                Err(why) => principals.push(Err(why)),
            }
        }
        Ok(principals)
    }
}
