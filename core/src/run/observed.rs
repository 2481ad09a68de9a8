//! Observed run requests (SPEC §14.8, reference-auth-service §5.1): what the issuing host saw
//! callers publish on the served run request subjects, so a registered manager can only forward
//! a request the broker really carried — and each forward only once. Pure and clock-free: the
//! NATS adapter subscribes to [`served_run_request_subjects`], hands each delivery to
//! [`ObservedRunRequest::parse`], records what parses and passes `now` in.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Map, Value};

use crate::canon::Digest;
use crate::gate::ProcessEpoch;
use crate::journal::RunId;
use crate::names::{space_prefix, InstanceId, SpaceName};
use crate::wire::safe_uint;

use super::subject::parse_request_subject;

/// The endpoint whose run commands are observed.
const RUN_ENDPOINT: &str = "manager";

/// The served run commands: what a caller publishes to start, resume or answer a run.
const RUN_COMMANDS: [&str; 3] = ["run-start", "run-resume", "run-answer"];

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

/// The subscription patterns of the served run requests of `space`: the `manager` endpoint's
/// `run-start`, `run-resume` and `run-answer` on the legacy and the `v1` rail, every route and
/// every target form, and no other command. Per rail and command, two patterns:
/// `…ep[.v1].*.manager.<cmd>.>` holds the class routes (`one`, `all`; the route token is
/// wildcarded since NATS has no alternation, and a token that is no route is dropped by
/// [`ObservedRunRequest::parse`]), and `…ep[.v1].inst.manager.*.<cmd>.>` the instance route,
/// whose instance id sits between the endpoint and the command. The trailing `>` spans the
/// optional target, the caller, the `v1` generation and the nonce. No valid request subject
/// matches two patterns, so none is recorded twice.
pub fn served_run_request_subjects(space: &SpaceName) -> Vec<String> {
    let p = space_prefix(space);
    let mut patterns = Vec::with_capacity(RUN_COMMANDS.len() * 4);
    for rail in ["ep", "ep.v1"] {
        for command in RUN_COMMANDS {
            patterns.push(format!("{p}.{rail}.*.{RUN_ENDPOINT}.{command}.>"));
            patterns.push(format!("{p}.{rail}.inst.{RUN_ENDPOINT}.*.{command}.>"));
        }
    }
    patterns
}

/// The endpoint request envelope's `id` grammar (§13.3): 1..64 of `[A-Za-z0-9_-]`.
fn is_request_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str)
}

impl ObservedRunRequest {
    /// What a delivery on a served run request subject of `space` asked for, or `None` when it
    /// is not one a manager would take as a run request: the subject must be a request-plane
    /// subject of this space's `manager` endpoint and one of the three run commands (any rail,
    /// route or target), and `payload` an endpoint request envelope that agrees with it (`v` 1,
    /// a well-formed `id`, `op.endpoint`/`op.command` naming the subject's, `from.id` the
    /// subject's `<owner>.<actor>`). The operation comes from `args`: a valid `runId` for a
    /// resume and an answer, and for an answer a string `stepKey`, an optional boolean `amend`
    /// (false when absent) and `endpoint` (the subject's when absent or null). What is kept of
    /// the envelope is `{class, op, bind}`, the fields the served-caller check compares; the
    /// caller's own identity is the subject's, already checked against `from.id`.
    pub fn parse(space: &SpaceName, subject: &str, payload: &[u8]) -> Option<ObservedRunRequest> {
        let s = parse_request_subject(subject)?;
        if s.space != space.token()
            || s.endpoint.as_str() != RUN_ENDPOINT
            || !RUN_COMMANDS.contains(&s.command.as_str())
        {
            return None;
        }
        let Ok(Value::Object(envelope)) = serde_json::from_slice::<Value>(payload) else {
            return None;
        };
        let op = envelope.get("op").and_then(Value::as_object);
        let sender = format!("{}.{}", s.owner, s.actor);
        let agrees = envelope.get("v").and_then(safe_uint) == Some(1)
            && text(envelope.get("id")).is_some_and(is_request_id)
            && text(op.and_then(|o| o.get("endpoint"))) == Some(s.endpoint.as_str())
            && text(op.and_then(|o| o.get("command"))) == Some(s.command.as_str())
            && text(envelope.get("from").and_then(|f| f.get("id"))) == Some(sender.as_str());
        if !agrees {
            return None;
        }
        let args = envelope.get("args");
        let arg = |key: &str| args.and_then(|a| a.get(key));
        let run_id = || RunId::parse(text(arg("runId"))?).ok();
        let operation = match s.command.as_str() {
            "run-start" => RunRequestOperation::Start,
            "run-resume" => RunRequestOperation::Resume { run_id: run_id()? },
            "run-answer" => RunRequestOperation::Answer {
                endpoint: match arg("endpoint") {
                    None | Some(Value::Null) => s.endpoint.as_str().to_owned(),
                    Some(e) => e.as_str()?.to_owned(),
                },
                run_id: run_id()?,
                step_key: text(arg("stepKey"))?.to_owned(),
                amend: match arg("amend") {
                    None => false,
                    Some(a) => a.as_bool()?,
                },
            },
            _ => return None,
        };
        let kept: Map<String, Value> = ["class", "op", "bind"]
            .into_iter()
            .filter_map(|k| Some((k.to_owned(), envelope.get(k)?.clone())))
            .collect();
        Some(ObservedRunRequest {
            operation,
            envelope: Value::Object(kept),
        })
    }

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
