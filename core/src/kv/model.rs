//! A deterministic in-memory KV with NATS JetStream KV semantics, plus fault hooks.
//!
//! Unit tests, property tests, fuzzing and the simulator all drive this model, and the NATS
//! adapter is tested to agree with it on a real server. What it reproduces:
//!
//! * each store is one stream with a stream-wide sequence: every write (PUT or marker) takes the
//!   next sequence, and a key's revision is the sequence of its last message;
//! * `Update`/`Delete` CAS on the per-subject last sequence (a marker's revision counts);
//! * `Create` succeeds on an empty subject or over a DEL/PURGE marker, `CreateStrict` only on an
//!   empty subject;
//! * a PURGE marker drops the subject's earlier messages; a per-subject history limit drops the
//!   oldest messages beyond it (the last message always survives);
//! * `Keys` lists every subject with a message, markers included.
//!
//! Faults are scheduled against the next request that matches a [`Trigger`]: an ambiguous
//! outcome with the write applied or not, a transient `Unavailable`, or an interposed mutation
//! that runs right after the request (CAS contention between two steps of a machine).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use super::{Entry, KvOp, KvOutcome, KvRequest, Operation, Revision, Store};

/// One stored message on a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Message {
    value: Vec<u8>,
    revision: Revision,
    operation: Operation,
}

/// One bucket: a stream of messages, indexed by subject.
#[derive(Debug, Clone)]
struct Bucket {
    last_sequence: u64,
    history: usize,
    subjects: BTreeMap<String, VecDeque<Message>>,
}

impl Bucket {
    fn new(history: usize) -> Self {
        Bucket {
            last_sequence: 0,
            history: history.max(1),
            subjects: BTreeMap::new(),
        }
    }

    fn last(&self, key: &str) -> Option<&Message> {
        self.subjects.get(key).and_then(|messages| messages.back())
    }

    fn last_revision(&self, key: &str) -> Revision {
        self.last(key).map(|m| m.revision).unwrap_or_default()
    }

    /// A conditional write: appends when its precondition `holds`, else loses the CAS and
    /// leaves the bucket unchanged.
    fn append_if(
        &mut self,
        holds: bool,
        key: &str,
        value: &[u8],
        operation: Operation,
    ) -> KvOutcome {
        if holds {
            KvOutcome::Written(self.append(key, value.to_vec(), operation))
        } else {
            KvOutcome::CasLost
        }
    }

    fn append(&mut self, key: &str, value: Vec<u8>, operation: Operation) -> Revision {
        self.last_sequence += 1;
        let revision = Revision(self.last_sequence);
        let messages = self.subjects.entry(key.to_owned()).or_default();
        if operation == Operation::Purge {
            messages.clear();
        }
        messages.push_back(Message {
            value,
            revision,
            operation,
        });
        while messages.len() > self.history {
            messages.pop_front();
        }
        revision
    }
}

/// Which requests a scheduled fault fires on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub store: Store,
    pub op: KvOp,
    /// The request's key (for `Keys`, its prefix) must start with this.
    pub key_prefix: String,
}

impl Trigger {
    pub fn new(store: Store, op: KvOp, key_prefix: impl Into<String>) -> Self {
        Trigger {
            store,
            op,
            key_prefix: key_prefix.into(),
        }
    }

    fn matches(&self, request: &KvRequest) -> bool {
        request.store() == self.store
            && request.op() == self.op
            && request.key().starts_with(&self.key_prefix)
    }
}

/// A mutation run against the model right after a triggering request.
pub type Interposed = Box<dyn FnOnce(&mut KvModel)>;

/// What happens to the next request that matches a trigger.
pub enum Fault {
    /// The write commits, but the caller hears `Ambiguous` (the ack was lost).
    AmbiguousApplied,
    /// The write does not commit, and the caller hears `Ambiguous` (the request was lost).
    AmbiguousNotApplied,
    /// The request is refused before any effect.
    Unavailable,
    /// The request runs normally, then this mutation runs before the caller sees the answer.
    After(Interposed),
}

impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::AmbiguousApplied => f.write_str("AmbiguousApplied"),
            Fault::AmbiguousNotApplied => f.write_str("AmbiguousNotApplied"),
            Fault::Unavailable => f.write_str("Unavailable"),
            Fault::After(_) => f.write_str("After(..)"),
        }
    }
}

/// The in-memory KV: one bucket per store.
pub struct KvModel {
    buckets: BTreeMap<Store, Bucket>,
    default_history: usize,
    faults: Vec<(Trigger, Fault)>,
    requests_served: u64,
}

impl fmt::Debug for KvModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvModel")
            .field("buckets", &self.buckets)
            .field("faults", &self.faults)
            .field("requests_served", &self.requests_served)
            .finish()
    }
}

impl Default for KvModel {
    fn default() -> Self {
        Self::new()
    }
}

impl KvModel {
    /// History depth of the reference's smoke buckets.
    pub const DEFAULT_HISTORY: usize = 8;

    pub fn new() -> Self {
        Self::with_history(Self::DEFAULT_HISTORY)
    }

    /// A model whose buckets keep at most `history` messages per subject (at least 1).
    pub fn with_history(history: usize) -> Self {
        KvModel {
            buckets: BTreeMap::new(),
            default_history: history.max(1),
            faults: Vec::new(),
            requests_served: 0,
        }
    }

    fn bucket(&mut self, store: Store) -> &mut Bucket {
        // The issued store keeps every message of a key, as its real shape does (its immutable
        // rows are read as the first message on their key).
        let history = match store {
            Store::Issued => usize::MAX,
            _ => self.default_history,
        };
        self.buckets
            .entry(store)
            .or_insert_with(|| Bucket::new(history))
    }

    /// Schedules `fault` for the next request matching `trigger`. Faults fire once, in the
    /// order they were scheduled.
    pub fn inject(&mut self, trigger: Trigger, fault: Fault) {
        self.faults.push((trigger, fault));
    }

    /// Drops every fault scheduled but not yet fired.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Faults scheduled but not yet fired.
    pub fn pending_faults(&self) -> usize {
        self.faults.len()
    }

    /// Requests answered so far (the round-trip count an operation costs).
    pub fn requests_served(&self) -> u64 {
        self.requests_served
    }

    /// Executes one request, applying the first scheduled fault that matches it.
    pub fn execute(&mut self, request: &KvRequest) -> KvOutcome {
        self.requests_served += 1;
        let position = self.faults.iter().position(|(t, _)| t.matches(request));
        let Some(position) = position else {
            return self.apply(request);
        };
        let (_, fault) = self.faults.remove(position);
        match fault {
            Fault::AmbiguousApplied => {
                let outcome = self.apply(request);
                if request.is_write() {
                    KvOutcome::Ambiguous(format!(
                        "injected: {:?} on {} committed but its acknowledgement was lost",
                        request.op(),
                        request.key()
                    ))
                } else {
                    outcome
                }
            }
            Fault::AmbiguousNotApplied => {
                if request.is_write() {
                    KvOutcome::Ambiguous(format!(
                        "injected: {:?} on {} timed out before it committed",
                        request.op(),
                        request.key()
                    ))
                } else {
                    KvOutcome::Unavailable(format!("injected: read of {} timed out", request.key()))
                }
            }
            Fault::Unavailable => KvOutcome::Unavailable(format!(
                "injected: {:?} on {} refused before sending",
                request.op(),
                request.key()
            )),
            Fault::After(mutation) => {
                let outcome = self.apply(request);
                mutation(self);
                outcome
            }
        }
    }

    /// Executes one request with no fault injection.
    pub fn apply(&mut self, request: &KvRequest) -> KvOutcome {
        match request {
            KvRequest::Get { store, key } => KvOutcome::Entry(self.get(*store, key)),
            KvRequest::GetFirst { store, key } => KvOutcome::Entry(self.get_first(*store, key)),
            KvRequest::Create { store, key, value } => {
                let bucket = self.bucket(*store);
                let free = !matches!(bucket.last(key), Some(m) if m.operation == Operation::Put);
                bucket.append_if(free, key, value, Operation::Put)
            }
            KvRequest::CreateStrict { store, key, value } => {
                let bucket = self.bucket(*store);
                let never_written = bucket.last(key).is_none();
                bucket.append_if(never_written, key, value, Operation::Put)
            }
            KvRequest::Update {
                store,
                key,
                value,
                expected,
            } => {
                let bucket = self.bucket(*store);
                let at_pin = bucket.last_revision(key) == *expected;
                bucket.append_if(at_pin, key, value, Operation::Put)
            }
            KvRequest::Delete {
                store,
                key,
                expected,
            } => {
                let bucket = self.bucket(*store);
                let at_pin = bucket.last_revision(key) == *expected;
                bucket.append_if(at_pin, key, &[], Operation::Delete)
            }
            KvRequest::Keys { store, prefix } => KvOutcome::Keys(self.keys(*store, prefix)),
        }
    }

    /// The last message of `key`, as a leader-served read sees it.
    pub fn get(&self, store: Store, key: &str) -> Option<Entry> {
        let message = self.buckets.get(&store)?.last(key)?;
        Some(Entry {
            key: key.to_owned(),
            value: message.value.clone(),
            revision: message.revision,
            operation: message.operation,
        })
    }

    /// The first retained message of `key`.
    pub fn get_first(&self, store: Store, key: &str) -> Option<Entry> {
        let message = self.buckets.get(&store)?.subjects.get(key)?.front()?;
        Some(Entry {
            key: key.to_owned(),
            value: message.value.clone(),
            revision: message.revision,
            operation: message.operation,
        })
    }

    /// Every key under `prefix` with a message on its subject, markers included, sorted.
    pub fn keys(&self, store: Store, prefix: &str) -> Vec<String> {
        self.buckets
            .get(&store)
            .map(|b| {
                b.subjects
                    .iter()
                    .filter(|(k, m)| k.starts_with(prefix) && !m.is_empty())
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The retained messages of `key`, oldest first, as `(revision, operation, value)`.
    pub fn history(&self, store: Store, key: &str) -> Vec<(Revision, Operation, Vec<u8>)> {
        self.buckets
            .get(&store)
            .and_then(|b| b.subjects.get(key))
            .map(|messages| {
                messages
                    .iter()
                    .map(|m| (m.revision, m.operation, m.value.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The store's last stream sequence.
    pub fn last_sequence(&self, store: Store) -> Revision {
        Revision(
            self.buckets
                .get(&store)
                .map(|b| b.last_sequence)
                .unwrap_or_default(),
        )
    }

    /// Unpinned put (a raw writer outside the fence discipline; tests and corruption only).
    pub fn put(&mut self, store: Store, key: &str, value: &[u8]) -> Revision {
        self.bucket(store)
            .append(key, value.to_vec(), Operation::Put)
    }

    /// Unpinned DEL marker (corruption injection for never-deleted families).
    pub fn delete_unpinned(&mut self, store: Store, key: &str) -> Revision {
        self.bucket(store)
            .append(key, Vec::new(), Operation::Delete)
    }

    /// Unpinned PURGE marker: drops the subject's history and leaves the marker.
    pub fn purge(&mut self, store: Store, key: &str) -> Revision {
        self.bucket(store).append(key, Vec::new(), Operation::Purge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(key: &str, v: &str) -> KvRequest {
        KvRequest::Create {
            store: Store::Auth,
            key: key.into(),
            value: v.as_bytes().to_vec(),
        }
    }
    fn strict(key: &str, v: &str) -> KvRequest {
        KvRequest::CreateStrict {
            store: Store::Auth,
            key: key.into(),
            value: v.as_bytes().to_vec(),
        }
    }
    fn update(key: &str, v: &str, expected: u64) -> KvRequest {
        KvRequest::Update {
            store: Store::Auth,
            key: key.into(),
            value: v.as_bytes().to_vec(),
            expected: Revision(expected),
        }
    }
    fn delete(key: &str, expected: u64) -> KvRequest {
        KvRequest::Delete {
            store: Store::Auth,
            key: key.into(),
            expected: Revision(expected),
        }
    }

    #[test]
    fn revisions_are_stream_wide_across_keys() {
        let mut kv = KvModel::new();
        assert_eq!(
            kv.execute(&create("a", "1")),
            KvOutcome::Written(Revision(1))
        );
        assert_eq!(
            kv.execute(&create("b", "1")),
            KvOutcome::Written(Revision(2))
        );
        assert_eq!(
            kv.execute(&update("a", "2", 1)),
            KvOutcome::Written(Revision(3))
        );
        // Stores are separate streams.
        let other = KvRequest::Create {
            store: Store::Records,
            key: "a".into(),
            value: b"x".to_vec(),
        };
        assert_eq!(kv.execute(&other), KvOutcome::Written(Revision(1)));
    }

    #[test]
    fn create_recreates_over_a_tombstone_but_strict_create_refuses() {
        let mut kv = KvModel::new();
        kv.execute(&create("k", "1"));
        assert_eq!(kv.execute(&create("k", "2")), KvOutcome::CasLost);
        assert_eq!(kv.execute(&delete("k", 1)), KvOutcome::Written(Revision(2)));
        assert_eq!(kv.execute(&strict("k", "3")), KvOutcome::CasLost);
        assert_eq!(
            kv.execute(&create("k", "3")),
            KvOutcome::Written(Revision(3))
        );
        kv.purge(Store::Auth, "k");
        assert_eq!(kv.execute(&strict("k", "4")), KvOutcome::CasLost);
        assert_eq!(
            kv.execute(&strict("fresh", "4")),
            KvOutcome::Written(Revision(5))
        );
    }

    #[test]
    fn stale_update_and_stale_delete_lose_their_pin() {
        let mut kv = KvModel::new();
        kv.execute(&create("k", "1"));
        kv.execute(&update("k", "2", 1));
        assert_eq!(kv.execute(&update("k", "3", 1)), KvOutcome::CasLost);
        assert_eq!(kv.execute(&delete("k", 1)), KvOutcome::CasLost);
        assert_eq!(kv.execute(&delete("k", 2)), KvOutcome::Written(Revision(3)));
        // An update pinned to the marker's revision overwrites it (re-registration of a
        // deregistered record).
        assert_eq!(
            kv.execute(&update("k", "4", 3)),
            KvOutcome::Written(Revision(4))
        );
    }

    #[test]
    fn markers_are_visible_to_get_and_keys() {
        let mut kv = KvModel::new();
        kv.execute(&create("p.a", "1"));
        kv.execute(&create("p.b", "1"));
        kv.execute(&create("q.c", "1"));
        kv.delete_unpinned(Store::Auth, "p.b");
        let listed = kv.execute(&KvRequest::Keys {
            store: Store::Auth,
            prefix: "p.".into(),
        });
        assert_eq!(listed, KvOutcome::Keys(vec!["p.a".into(), "p.b".into()]));
        let entry = kv.get(Store::Auth, "p.b").unwrap();
        assert_eq!(entry.operation, Operation::Delete);
        assert!(entry.value.is_empty());
    }

    #[test]
    fn history_limit_keeps_the_newest_messages_and_purge_drops_the_rest() {
        let mut kv = KvModel::with_history(2);
        kv.put(Store::Auth, "k", b"1");
        kv.put(Store::Auth, "k", b"2");
        kv.put(Store::Auth, "k", b"3");
        let revisions: Vec<u64> = kv
            .history(Store::Auth, "k")
            .iter()
            .map(|(r, _, _)| r.0)
            .collect();
        assert_eq!(revisions, vec![2, 3]);
        kv.purge(Store::Auth, "k");
        assert_eq!(kv.history(Store::Auth, "k").len(), 1);
        assert_eq!(
            kv.get(Store::Auth, "k").unwrap().operation,
            Operation::Purge
        );
    }

    #[test]
    fn faults_fire_once_on_the_matching_request() {
        let mut kv = KvModel::new();
        kv.inject(
            Trigger::new(Store::Auth, KvOp::Create, "a"),
            Fault::AmbiguousApplied,
        );
        kv.inject(
            Trigger::new(Store::Auth, KvOp::Create, "b"),
            Fault::AmbiguousNotApplied,
        );
        kv.inject(
            Trigger::new(Store::Auth, KvOp::Update, "a"),
            Fault::Unavailable,
        );
        assert!(matches!(
            kv.execute(&create("a", "1")),
            KvOutcome::Ambiguous(_)
        ));
        assert!(kv.get(Store::Auth, "a").is_some());
        assert!(matches!(
            kv.execute(&create("b", "1")),
            KvOutcome::Ambiguous(_)
        ));
        assert!(kv.get(Store::Auth, "b").is_none());
        assert!(matches!(
            kv.execute(&update("a", "2", 1)),
            KvOutcome::Unavailable(_)
        ));
        assert_eq!(
            kv.execute(&update("a", "2", 1)),
            KvOutcome::Written(Revision(2))
        );
        assert_eq!(kv.pending_faults(), 0);
    }

    #[test]
    fn an_interposed_mutation_runs_after_the_request() {
        let mut kv = KvModel::new();
        kv.put(Store::Auth, "g", b"v");
        kv.inject(
            Trigger::new(Store::Auth, KvOp::Get, "g"),
            Fault::After(Box::new(|kv: &mut KvModel| {
                kv.put(Store::Auth, "g", b"w");
            })),
        );
        let seen = kv.execute(&KvRequest::Get {
            store: Store::Auth,
            key: "g".into(),
        });
        assert!(matches!(seen, KvOutcome::Entry(Some(ref e)) if e.value == b"v"));
        assert_eq!(kv.get(Store::Auth, "g").unwrap().value, b"w");
    }
}
