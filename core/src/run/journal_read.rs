//! The run journal's checkpoint reader (reference-auth-service §5.5 item 4): the pause an
//! answering run operator settles, read off the run's own journal and the pause's own status
//! record, never off the request.
//!
//! Where things live (reference `run-journal.ts`, `endpoint-binding.ts`, `endpoint-records.ts`,
//! `endpoint-checkpoint.ts`, `checkpoint-answer.ts`, and the language's `journal.ts` and
//! `pause-token.ts`):
//!
//! * **The journal** is the stream `WFJ_<space>` (limits retention, no `max_age`,
//!   `allow_direct: false`), ONE subject per run, `cotal.<space>.wfj.<runId>`. Its records, in
//!   append order: an activation `{v:1, kind:"activation", run, n, holder, fencingToken, epoch,
//!   replayedTo, at}` and steps `{v:1, kind:"step", run, n, at, entry}`. `n` is the record's
//!   ordinal from 0 (the chain: `records[i].n == i`), and the first record is an activation
//!   that replayed nothing (`replayedTo: 0`). Both envelopes are closed.
//! * **A step's entry** is the language's journal entry `{v:1, seq, run, scope, kind, name,
//!   occurrence, inputHash, requestId?, attempt?, state, status?, result?, error?, external?,
//!   cancel?, closed?, hold?, startedAt, endedAt?}`, appended WHOLE on every change (begin
//!   `pending`, bind and re-issue still `pending`, settle `settled`). So the step's latest
//!   record is where it stands. A step is addressed by `<scope>/<kind>[:<name>]#<occurrence>`
//!   (the name part only when the name is not empty), the key `answers.stepKey` carries.
//! * **The pause token** of a checkpoint step is its latest record's `requestId`. An `ask`'s is
//!   the last `external.askToken` string among its records, else the latest `requestId`. Only
//!   a `checkpoint` or an `ask` has a pause.
//! * **Open or settled**: an answer needs the latest record `pending` ("…has no open checkpoint
//!   at…", `CheckpointNotOpen`). An amendment needs it settled (`CheckpointNotAmendable`). Both
//!   are `failed-precondition`.
//! * **The pause's status** is the records key `cp.<endpointToken>.<token>.status`: `{state:
//!   "waiting"|"resumed"|"expired", deadlineGeneration, deadline, observedSpecRevision,
//!   settledGeneration?, settledHolder?, settledTs?, settledAnswerId?}`. The plane's
//!   `checkpointWaiting` needs `waiting`. Its `checkpointSettled` needs `resumed` naming
//!   `settledAnswerId`. A DEL/PURGE marker is a deletion, never absence.
//!
//! How the two reads combine ([`ReadJournalCheckpoint`]): an open step with a waiting status is
//! [`CheckpointState::Waiting`]. A settled step with a resumed status is
//! [`CheckpointState::Resumed`], and with an expired one [`CheckpointState::Expired`]; then
//! [`super::pause_token`] decides. Every other pairing (an open step whose status is missing or
//! already settled, a settled step whose pause is still waiting or has no status) is refused
//! here with `failed-precondition`. The reference refuses each of them for an answer and an
//! amendment alike; only the wording differs.
//!
//! Garbled bytes anywhere in the journal, a record of another run, a broken chain or a
//! beheaded journal are `internal`, never "no checkpoint". A refusal never turns into `None`:
//! `None` means the journal records no step at that key.
//!
//! What could not be pinned down from the reference, and what is built instead:
//! * A *held* step (the language's §7.8 `hold`) is read at `holdRequestId(requestId)`, a
//!   derivation no stored reference version shows. The plane refuses a held step with
//!   `failed-precondition` rather than guess its token.
//! * The newest checkpoint status writer (the one that adds `settledAnswerId`) is not stored.
//!   The field is read as optional, allowed only on `resumed`, and must be an id token, as the
//!   resume seam requires. The other variant rules are the stored `parseCpStatus` ones.
//! * The reference replays the whole journal through a per-call consumer. The plane instead
//!   walks the run's subject with leader-served `STREAM.MSG.GET next_by_subj` (no consumer, so
//!   no consumer grant), and reads at most [`MAX_JOURNAL_RECORDS`] records. The reference has
//!   no such bound.
//! * The entry schema is read closed over the field set above. An entry field this list does
//!   not name is refused, because a new field can change which pause a step names (`hold`
//!   did), and an open reader would then pin the wrong token.

use serde_json::{Map, Value};

use crate::error::EpError;
use crate::journal::{RunHolder, RunId};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{kv_stream, records_bucket, space_prefix, EndpointName, SpaceName};
use crate::profiles::CheckpointToken;
use crate::service::{self, RecordRead};
use crate::wire;

use super::checkpoint::{AnswerId, CheckpointState, JournalCheckpoint};
use super::request::OperatorAnswers;

/// The most journal records the plane reads for one answer (the adapter stops past it): a
/// bound on the leader-served walk, one round trip per record. It is not from the reference.
pub const MAX_JOURNAL_RECORDS: usize = 16_384;

/// The per-space journal stream.
pub fn journal_stream(space: &SpaceName) -> String {
    format!("WFJ_{}", space.token())
}

/// A run's one journal subject.
pub fn journal_subject(space: &SpaceName, run: &RunId) -> String {
    format!("{}.wfj.{}", space_prefix(space), run.as_str())
}

/// The rows the connection that reads an answer's checkpoint publishes to: the journal walk
/// (`STREAM.MSG.GET` on the journal stream) and the leader read of the pause's status
/// (`STREAM.MSG.GET` on the records bucket). No consumer row: the walk creates none. Both API
/// subjects are subject-blind (they serve any run's journal, any record), so they belong on the
/// plane's own connection, never on a run's credential.
pub fn journal_checkpoint_rows(space: &SpaceName) -> [String; 2] {
    [
        format!("$JS.API.STREAM.MSG.GET.{}", journal_stream(space)),
        format!(
            "$JS.API.STREAM.MSG.GET.{}",
            kv_stream(&records_bucket(space))
        ),
    ]
}

/// The status key of a pause: `cp.<endpointToken>.<token>.status`.
pub fn checkpoint_status_key(endpoint: &EndpointName, token: &CheckpointToken) -> String {
    format!("cp.{}.{}.status", endpoint.token(), token.as_str())
}

/// One message of a run's journal subject, as the adapter read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalMessage {
    /// The stream sequence it is stored at (named in refusals).
    pub seq: u64,
    pub data: Vec<u8>,
}

/// What the run's journal says of the pause at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalPause {
    /// The step's latest record is `pending`: the pause `token` names is open.
    Open(CheckpointToken),
    /// The step's latest record is `settled`; it settled under `token`.
    Settled(CheckpointToken),
}

impl JournalPause {
    pub fn token(&self) -> &CheckpointToken {
        match self {
            JournalPause::Open(token) | JournalPause::Settled(token) => token,
        }
    }
}

const ACTIVATION_FIELDS: [&str; 9] = [
    "v",
    "kind",
    "run",
    "n",
    "holder",
    "fencingToken",
    "epoch",
    "replayedTo",
    "at",
];
const STEP_FIELDS: [&str; 6] = ["v", "kind", "run", "n", "at", "entry"];
const ENTRY_FIELDS: [&str; 20] = [
    "v",
    "seq",
    "run",
    "scope",
    "kind",
    "name",
    "occurrence",
    "inputHash",
    "requestId",
    "attempt",
    "state",
    "status",
    "result",
    "error",
    "external",
    "cancel",
    "closed",
    "hold",
    "startedAt",
    "endedAt",
];

/// The fields of one step record the fold reads.
struct StepRecord {
    key: String,
    kind: String,
    pending: bool,
    request_id: Option<String>,
    ask_token: Option<String>,
    held: bool,
}

/// One parsed journal record: its ordinal, whether it is the genesis activation (one that
/// replayed nothing), and the step it records, if it is a step.
struct Record {
    n: u64,
    genesis: bool,
    step: Option<StepRecord>,
}

/// Reads a run's journal messages (append order) down to the pause at `step_key`. `None`: no
/// record is filed under that key. See the module doc for the rules and every refusal.
pub fn journal_pause(
    run: &RunId,
    step_key: &str,
    messages: &[JournalMessage],
) -> Result<Option<JournalPause>, EpError> {
    let mut at_step: Vec<StepRecord> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let record = parse_record(run, message)?;
        // The chain is the only check that sees a record missing from the middle; the genesis
        // anchor the only one that sees a journal renumbered from its middle. A missing record
        // could be the settle of the very step asked about.
        if u64::try_from(index).ok() != Some(record.n) {
            return Err(garbled(
                run,
                message.seq,
                &format!(
                    "it is journal entry {} where entry {index} was expected; records are \
                     missing from the journal",
                    record.n
                ),
            ));
        }
        if index == 0 && !record.genesis {
            return Err(garbled(
                run,
                message.seq,
                "the journal does not begin with an activation that replayed nothing; its \
                 prefix is missing",
            ));
        }
        if let Some(step) = record.step.filter(|s| s.key == step_key) {
            at_step.push(step);
        }
    }
    let Some(latest) = at_step.last() else {
        return Ok(None);
    };
    let refuse = |why: &str| {
        EpError::failed_precondition(format!(
            "run {} has no open checkpoint at step {step_key:?} and it is not amendable: {why}",
            run.as_str()
        ))
    };
    let held = at_step.iter().any(|s| s.held);
    if !held && latest.kind != "checkpoint" && latest.kind != "ask" {
        return Err(refuse("that step is neither a checkpoint nor an ask"));
    }
    if held {
        return Err(refuse(
            "that step is held (its records carry `hold`), and this plane does not derive a \
             held step's pause token",
        ));
    }
    // As the language names it: no token without the latest record's request id, even for
    // an ask whose attempt token an earlier record carries.
    let token = latest.request_id.as_deref().map(|request_id| {
        let ask_token = || at_step.iter().rev().find_map(|s| s.ask_token.as_deref());
        match latest.kind.as_str() {
            "ask" => ask_token().unwrap_or(request_id),
            _ => request_id,
        }
    });
    let Some(token) = token else {
        return Err(refuse(if latest.pending {
            "that step is pending but carries no request id, so the checkpoint it is waiting \
             on cannot be named"
        } else {
            "that step settled carrying no request id, so no pause can be named"
        }));
    };
    let token = CheckpointToken::parse(token).map_err(|_| {
        EpError::internal(format!(
            "run {} journal names the pause token {token:?} at step {step_key:?}, which is not \
             a checkpoint token",
            run.as_str()
        ))
    })?;
    Ok(Some(if latest.pending {
        JournalPause::Open(token)
    } else {
        JournalPause::Settled(token)
    }))
}

fn garbled(run: &RunId, seq: u64, why: &str) -> EpError {
    EpError::internal(format!(
        "run {} journal record at stream sequence {seq}: {why}",
        run.as_str()
    ))
}

fn parse_record(run: &RunId, message: &JournalMessage) -> Result<Record, EpError> {
    let bad = |why: String| garbled(run, message.seq, &why);
    let map =
        wire::parse_object(&message.data, "run journal record").map_err(|e| bad(e.message))?;
    if map.get("v").and_then(wire::safe_uint) != Some(1) {
        return Err(bad("it must carry v: 1".into()));
    }
    // A writer stamps `run` with its subject's run; a record of another run on this subject
    // would make this run answer for a history it never had.
    if map.get("run").and_then(Value::as_str) != Some(run.as_str()) {
        return Err(bad("it does not name this run".into()));
    }
    let uint = |field: &str| {
        map.get(field).and_then(wire::safe_uint).ok_or_else(|| {
            bad(format!(
                "{field:?} is missing or not a safe unsigned integer"
            ))
        })
    };
    let n = uint("n")?;
    uint("at")?;
    match map.get("kind").and_then(Value::as_str) {
        Some("activation") => {
            closed(&map, &ACTIVATION_FIELDS).map_err(|why| bad(format!("it {why}")))?;
            let holder = map.get("holder").and_then(Value::as_str).unwrap_or("");
            RunHolder::parse(holder).map_err(|e| bad(format!("its holder: {}", e.message)))?;
            if uint("fencingToken")? < 1 {
                return Err(bad("its fencingToken must be at least 1".into()));
            }
            uint("epoch")?;
            let replayed_to = uint("replayedTo")?;
            Ok(Record {
                n,
                genesis: replayed_to == 0,
                step: None,
            })
        }
        Some("step") => {
            closed(&map, &STEP_FIELDS).map_err(|why| bad(format!("it {why}")))?;
            let entry = match map.get("entry") {
                Some(Value::Object(entry)) => entry,
                _ => return Err(bad("its entry is missing or not an object".into())),
            };
            let step = parse_entry(run, entry).map_err(|why| bad(format!("its entry {why}")))?;
            Ok(Record {
                n,
                genesis: false,
                step: Some(step),
            })
        }
        _ => Err(bad("its kind is neither activation nor step".into())),
    }
}

fn closed(map: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match wire::unknown_member(map, allowed) {
        Some(field) => Err(format!(
            "carries the unknown field {field:?}; journal records are closed"
        )),
        None => Ok(()),
    }
}

/// The step entry, closed over [`ENTRY_FIELDS`]; the fields the fold does not read are only
/// type-checked. Refusals are phrased to follow "its entry".
fn parse_entry(run: &RunId, entry: &Map<String, Value>) -> Result<StepRecord, String> {
    closed(entry, &ENTRY_FIELDS)?;
    let uint = |field: &str| entry.get(field).and_then(wire::safe_uint);
    let string = |field: &str| entry.get(field).and_then(Value::as_str);
    let typed = |field: &str, ok: fn(&Value) -> bool| match entry.get(field) {
        Some(value) if !ok(value) => Err(format!("has a malformed {field:?}")),
        _ => Ok(()),
    };
    if uint("v") != Some(1) {
        return Err("must carry v: 1".into());
    }
    if string("run") != Some(run.as_str()) {
        return Err("does not name this run".into());
    }
    let (Some(scope), Some(kind), Some(name), Some(occurrence)) = (
        string("scope"),
        string("kind"),
        string("name"),
        uint("occurrence"),
    ) else {
        return Err("lacks a string scope, kind and name and an unsigned occurrence".into());
    };
    let kind_ok = !kind.is_empty()
        && kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if !kind_ok {
        return Err(format!(
            "has the kind {kind:?}, which is not an effect kind"
        ));
    }
    let pending = match string("state") {
        Some("pending") => true,
        Some("settled") => false,
        _ => return Err("has a state that is neither pending nor settled".into()),
    };
    if uint("seq").is_none() || uint("startedAt").is_none() || string("inputHash").is_none() {
        return Err("lacks an unsigned seq and startedAt and a string inputHash".into());
    }
    typed("requestId", Value::is_string)?;
    typed("attempt", |v| wire::safe_uint(v).is_some())?;
    typed("endedAt", |v| wire::safe_uint(v).is_some())?;
    typed("status", |v| {
        matches!(v.as_str(), Some("ok" | "failed" | "cancelled"))
    })?;
    for field in ["error", "external", "cancel", "hold"] {
        typed(field, Value::is_object)?;
    }
    typed("closed", Value::is_boolean)?;
    let named = if name.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}:{name}")
    };
    Ok(StepRecord {
        key: format!("{scope}/{named}#{occurrence}"),
        kind: kind.to_owned(),
        pending,
        request_id: string("requestId").map(str::to_owned),
        // Only a string counts, as in the language: any other `askToken` is not a token.
        ask_token: entry
            .get("external")
            .and_then(|e| e.get("askToken"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        held: entry.contains_key("hold"),
    })
}

/// Where the pause's status record says it stands.
#[derive(Debug)]
enum PauseStatus {
    Waiting,
    Resumed { answer_id: Option<AnswerId> },
    Expired,
}

impl PauseStatus {
    fn as_str(&self) -> &'static str {
        match self {
            PauseStatus::Waiting => "waiting",
            PauseStatus::Resumed { .. } => "resumed",
            PauseStatus::Expired => "expired",
        }
    }
}

const STATUS_FIELDS: [&str; 8] = [
    "state",
    "deadlineGeneration",
    "deadline",
    "observedSpecRevision",
    "settledGeneration",
    "settledHolder",
    "settledTs",
    "settledAnswerId",
];

/// Parses a pause's stored status, closed, with the reference's per-state variants: `waiting`
/// carries no settlement; a settled state carries `settledGeneration` (the current deadline
/// generation) and `settledTs`, the holder exactly when `resumed`, and an answer id only then.
fn parse_status(bytes: &[u8]) -> Result<PauseStatus, EpError> {
    const WHAT: &str = "checkpoint status";
    let map = wire::parse_object(bytes, WHAT)?;
    wire::reject_unknown(&map, &STATUS_FIELDS, WHAT)?;
    let malformed = |why: &str| EpError::internal(format!("stored {WHAT} {why}"));
    let positive = |field: &str| wire::uint_field(&map, field, WHAT).map(|n| n >= 1);
    if !positive("deadlineGeneration")? || !positive("observedSpecRevision")? {
        return Err(malformed(
            "must carry deadlineGeneration and observedSpecRevision of at least 1",
        ));
    }
    wire::uint_field(&map, "deadline", WHAT)?;
    let has = |field: &str| map.contains_key(field);
    let state = wire::str_field(&map, "state", WHAT)?;
    if state == "waiting" {
        return if [
            "settledGeneration",
            "settledHolder",
            "settledTs",
            "settledAnswerId",
        ]
        .iter()
        .any(|f| has(f))
        {
            Err(malformed("is waiting but carries settlement coordinates"))
        } else {
            Ok(PauseStatus::Waiting)
        };
    }
    let resumed = match state {
        "resumed" => true,
        "expired" => false,
        other => {
            return Err(malformed(&format!(
                "state {other:?} is not waiting, resumed or expired"
            )))
        }
    };
    let generation = wire::uint_field(&map, "deadlineGeneration", WHAT)?;
    if map.get("settledGeneration").and_then(wire::safe_uint) != Some(generation) {
        return Err(malformed(
            "settles another generation than its deadline generation",
        ));
    }
    wire::uint_field(&map, "settledTs", WHAT)?;
    if !resumed {
        return if has("settledHolder") || has("settledAnswerId") {
            Err(malformed(
                "is expired but names a resuming holder or an answer; an expiry accepts none",
            ))
        } else {
            Ok(PauseStatus::Expired)
        };
    }
    let holder_ok = match map.get("settledHolder") {
        Some(Value::Object(holder)) => {
            holder.len() == 2
                && ["id", "lifecycleUid"].iter().all(|f| {
                    holder
                        .get(*f)
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty())
                })
        }
        _ => false,
    };
    if !holder_ok {
        return Err(malformed(
            "is resumed without a closed {id, lifecycleUid} settledHolder",
        ));
    }
    let answer_id = match map.get("settledAnswerId") {
        None => None,
        Some(value) => {
            let id = value
                .as_str()
                .filter(|s| is_id_token(s))
                .and_then(AnswerId::parse)
                .ok_or_else(|| malformed("names a settledAnswerId that is not an id token"))?;
            Some(id)
        }
    };
    Ok(PauseStatus::Resumed { answer_id })
}

/// The reference's id token `[A-Za-z0-9_-]{1,64}`: what its resume seam admits as an answer id.
fn is_id_token(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// The journal checkpoint an answering run operator's issue step takes
/// ([`super::AnsweringAttempt::issue`]): folds the run's journal messages (read by the adapter
/// off [`journal_subject`], append order) to the pause at `step_key`, then reads that pause's
/// status record. KV round trips: 0 when the journal names no pause at the step, else 1 (the
/// leader read of the status).
#[derive(Debug, Clone)]
pub struct ReadJournalCheckpoint {
    /// The hosting endpoint: its token leads the pause's status key.
    pub endpoint: EndpointName,
    pub run: RunId,
    pub step_key: String,
    pub journal: Vec<JournalMessage>,
}

impl ReadJournalCheckpoint {
    /// The read for the pause `answers` names.
    pub fn for_answers(
        endpoint: EndpointName,
        answers: &OperatorAnswers,
        journal: Vec<JournalMessage>,
    ) -> Self {
        ReadJournalCheckpoint {
            endpoint,
            run: answers.run_id.clone(),
            step_key: answers.step_key.clone(),
            journal,
        }
    }
}

impl Script for ReadJournalCheckpoint {
    type Output = Option<JournalCheckpoint>;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Option<JournalCheckpoint>, Halt> {
        let Some(pause) = journal_pause(&self.run, &self.step_key, &self.journal)? else {
            return Ok(None);
        };
        let token = pause.token();
        let key = checkpoint_status_key(&self.endpoint, token);
        let status = match service::read_record(cx, &key)? {
            RecordRead::Absent => None,
            RecordRead::Deleted { operation, .. } => {
                return Err(EpError::failed_precondition(format!(
                    "the checkpoint status {key} carries a {} marker; a deletion never erases \
                     a pause - reconcile the store (SPEC 13.6)",
                    operation.as_str()
                ))
                .into())
            }
            RecordRead::Live { value, .. } => Some(parse_status(&value).map_err(|e| {
                EpError::internal(format!("checkpoint status {key}: {}", e.message))
            })?),
        };
        let refuse = |why: String| {
            EpError::failed_precondition(format!(
                "run {} has no open checkpoint at step {:?} and it is not amendable: {why}",
                self.run.as_str(),
                self.step_key
            ))
        };
        let state = match (&pause, status) {
            (JournalPause::Open(_), Some(PauseStatus::Waiting)) => CheckpointState::Waiting,
            (JournalPause::Settled(_), Some(PauseStatus::Resumed { answer_id })) => {
                CheckpointState::Resumed { answer_id }
            }
            (JournalPause::Settled(_), Some(PauseStatus::Expired)) => CheckpointState::Expired,
            (JournalPause::Open(_), None) => {
                return Err(refuse(format!(
                    "the journal records its pause {token} but not yet the status {key} (a mint \
                     in flight, or a torn store); retry shortly"
                ))
                .into())
            }
            (JournalPause::Open(_), Some(settled)) => {
                return Err(refuse(format!(
                    "its pause {token} already settled ({}) and the journal has not recorded the \
                     settlement yet",
                    settled.as_str()
                ))
                .into())
            }
            (JournalPause::Settled(_), Some(PauseStatus::Waiting)) => {
                return Err(refuse(format!(
                    "the step settled while its pause {token} is still waiting (it settled \
                     without its pause, as a cancelled branch does)"
                ))
                .into())
            }
            (JournalPause::Settled(_), None) => {
                return Err(refuse(format!(
                    "the step settled but its pause {token} has no status {key}, so no answer \
                     was accepted"
                ))
                .into())
            }
        };
        Ok(Some(JournalCheckpoint {
            step_key: self.step_key.clone(),
            token: token.clone(),
            state,
        }))
    }
}
