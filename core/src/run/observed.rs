//! Observed run requests (SPEC §14.8, reference-auth-service §5.1): what the issuing host saw
//! callers publish on the served run request subjects, so a registered manager can only forward
//! a request the broker really carried — and each forward only once. Pure and clock-free: the
//! NATS adapter records what its subscription delivers and passes `now` in.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

use crate::canon::Digest;
use crate::gate::ProcessEpoch;
use crate::journal::RunId;
use crate::names::InstanceId;
use crate::wire::safe_uint;

/// How long an observation stays takeable: 5 minutes.
pub const OBSERVED_RUN_REQUEST_WINDOW_MS: u64 = 5 * 60 * 1000;

/// What a served run request asks for, as its caller published it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunRequestOperation {
    Start,
    Resume {
        run_id: RunId,
    },
    Answer {
        /// `args.endpoint`, or the subject's endpoint when absent.
        endpoint: String,
        run_id: RunId,
        step_key: String,
        amend: bool,
    },
}

/// One observation: the operation and the request envelope's `{class, op, bind}` (kept opaque
/// here; the served-caller check compares them with the registered contract).
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedRunRequest {
    pub operation: RunRequestOperation,
    pub envelope: Value,
}

/// An observed envelope's `bind` (SPEC §13.2): the manager incarnation its caller resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestBind {
    pub instance_id: InstanceId,
    pub epoch: ProcessEpoch,
}

/// What the served-caller check reads off an observed envelope: its declared class, the input
/// and output contract digests its `op` pins, and its optional `bind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeFacts {
    pub class: String,
    pub input_digest: Digest,
    pub output_digest: Digest,
    pub bind: Option<RequestBind>,
}

impl ObservedRunRequest {
    /// The envelope's `{class, op: {inputDigest, outputDigest}, bind?: {instanceId, epoch}}`, or
    /// `None` when any of them is missing or malformed (a request no registered manager runs).
    pub fn facts(&self) -> Option<EnvelopeFacts> {
        let e = self.envelope.as_object()?;
        let op = e.get("op")?.as_object()?;
        let digest = |key: &str| {
            op.get(key)
                .and_then(Value::as_str)
                .and_then(|s| Digest::parse_prefixed(s).ok())
        };
        let bind = match e.get("bind") {
            None => None,
            Some(b) => {
                let b = b.as_object()?;
                Some(RequestBind {
                    instance_id: InstanceId::parse(b.get("instanceId")?.as_str()?).ok()?,
                    epoch: ProcessEpoch(b.get("epoch").and_then(safe_uint)?),
                })
            }
        };
        Some(EnvelopeFacts {
            class: e.get("class")?.as_str()?.to_owned(),
            input_digest: digest("inputDigest")?,
            output_digest: digest("outputDigest")?,
            bind,
        })
    }
}

#[derive(Debug)]
struct Slot {
    seq: u64,
    expires_at: u64,
    request: ObservedRunRequest,
}

/// Observations keyed by exact subject, in insertion order. Each is consumed at most once.
#[derive(Debug, Default)]
pub struct ObservedRunRequests {
    slots: BTreeMap<String, Slot>,
    /// `(seq, subject)` in insertion order; stale pairs (re-inserted or taken subjects) are
    /// skipped when pruning.
    order: VecDeque<(u64, String)>,
    next_seq: u64,
}

impl ObservedRunRequests {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `request` as published on `subject` at `now` (unix millis): expired entries are
    /// pruned from the front first, and a repeat re-inserts (fresh window, back of the order).
    pub fn record(&mut self, subject: &str, request: ObservedRunRequest, now: u64) {
        self.prune(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.slots.insert(
            subject.to_owned(),
            Slot {
                seq,
                expires_at: now.saturating_add(OBSERVED_RUN_REQUEST_WINDOW_MS),
                request,
            },
        );
        self.order.push_back((seq, subject.to_owned()));
    }

    /// Removes and returns the observation of exactly `subject` if it is unexpired at `now`.
    /// The adapter flushes its subscription first, so anything the broker queued before the
    /// manager's forward has been recorded.
    pub fn take(&mut self, subject: &str, now: u64) -> Option<ObservedRunRequest> {
        let slot = self.slots.remove(subject)?;
        (slot.expires_at > now).then_some(slot.request)
    }

    /// How many observations are held (expired ones included until pruned).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn prune(&mut self, now: u64) {
        while let Some((seq, subject)) = self.order.front() {
            match self.slots.get(subject) {
                Some(slot) if slot.seq == *seq && slot.expires_at > now => return,
                Some(slot) if slot.seq == *seq => {
                    self.slots.remove(subject);
                }
                _ => {}
            }
            self.order.pop_front();
        }
    }
}
