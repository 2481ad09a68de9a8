//! The closed run request parsers (reference-auth-service §5.2, §5.4): a registered manager's
//! run admission forward and its run attempt / run operator requests. Every refusal is
//! `bad-request` "manager run admission request …" (the attempt parser reuses the admission
//! parser's envelope and prefix, as the reference does).

use std::fmt;

use serde_json::{Map, Value};

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::journal::{FencingToken, RunEpoch, RunId};
use crate::manager::{
    parse_coordinates, parse_identities, with_envelope, AccountKey, ManagerEnvelope,
    RegistrationProof, UserKey,
};
use crate::profiles::TakeoverId as ReplayTakeover;
use crate::wire::{self, safe_uint};

/// A served request subject as forwarded: at most this many bytes (the rail's bound).
pub const MAX_SERVED_SUBJECT_BYTES: usize = 1024;
/// A checkpoint step key: 1..=1024 characters.
pub const MAX_STEP_KEY_CHARS: usize = 1024;

fn refuse(what: impl fmt::Display) -> EpError {
    EpError::bad_request(format!("manager run admission request {what}"))
}

fn string<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m str> {
    map.get(key).and_then(Value::as_str)
}

fn exactly<'m>(value: Option<&'m Value>, keys: &[&str]) -> Option<&'m Map<String, Value>> {
    value
        .and_then(Value::as_object)
        .filter(|m| m.len() == keys.len() && keys.iter().all(|k| m.contains_key(*k)))
}

/// What every registered-manager run request carries besides its operation: the envelope, the
/// current-registration proof, the host-assigned account and the serve process epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RegisteredRun {
    pub envelope: ManagerEnvelope,
    pub registration_proof: RegistrationProof,
    pub account_public_key: AccountKey,
    pub process_epoch: ProcessEpoch,
}

/// A run admission forward (§5.2): the host-minted run id and the served `run-start` subject
/// verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunAdmissionRequest {
    pub registered: RegisteredRun,
    pub run_id: RunId,
    pub subject: String,
}

/// A driver/mediator attempt (§5.4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptSpec {
    pub run_id: RunId,
    /// `^[A-Za-z0-9_-]{1,64}$`: names the attempt's journal replay durable.
    pub takeover_id: ReplayTakeover,
    pub epoch: RunEpoch,
    pub fencing_token: FencingToken,
    pub driver_id: UserKey,
    pub mediator_id: UserKey,
    /// The served `run-resume` subject, when a caller asked for this attempt.
    pub served: Option<String>,
}

/// The one pause an answering operator writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperatorAnswers {
    pub run_id: RunId,
    pub step_key: String,
    pub amend: bool,
}

/// A run operator (§5.4): read-only unless it `answers` one pause.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperatorSpec {
    pub id: UserKey,
    pub takeover_id: ReplayTakeover,
    pub ask: OperatorAsk,
}

/// What an operator asks for: an outer run id and `answers` never ride together, and `served`
/// rides only with `answers`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OperatorAsk {
    /// Read one run's status (`runId`), or the list.
    Read { run_id: Option<RunId> },
    /// Answer one pause. The served `run-answer` subject is required, but its absence is refused
    /// at authorization (`permission-denied`, in the reference's order), not as a malformed
    /// body.
    Answer {
        answers: OperatorAnswers,
        served: Option<String>,
    },
}

/// Exactly one of an attempt or an operator.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AttemptBody {
    Attempt(AttemptSpec),
    Operator(OperatorSpec),
}

/// A run attempt request (§5.4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunAttemptRequest {
    pub registered: RegisteredRun,
    pub body: AttemptBody,
}

/// The members every registered run request carries; an admission adds `run`, an attempt
/// `attempt` or `operator`.
const REGISTERED_KEYS: [&str; 11] =
    with_envelope(["registrationProof", "accountPublicKey", "processEpoch"]);

/// `parseRemoteRunAdmissionRequest` (§5.2): closed (a caller-supplied `ceiling` is an unknown
/// field), `v:1`, kind `manager-run-admission`, the shared envelope with a required proof, an
/// account nkey, a non-negative safe `processEpoch`, and `run` exactly `{runId, subject}` with a
/// host-minted run id. Keeps F87 (the run id is host-minted grammar, never a caller name) and
/// F90 (closed: the request names no ceiling, profile or permission).
pub fn parse_run_admission_request(raw: &Value) -> Result<RunAdmissionRequest, EpError> {
    let o = raw.as_object().ok_or_else(|| refuse("must be an object"))?;
    if let Some(k) = wire::member_outside(o, |k| REGISTERED_KEYS.contains(&k) || k == "run") {
        return Err(refuse(format_args!("has unknown field {k}")));
    }
    let registered = parse_registered(o, "manager-run-admission")?;
    let run = exactly(o.get("run"), &["runId", "subject"]);
    let parsed = run.and_then(|r| {
        let run_id = string(r, "runId").and_then(|s| RunId::parse(s).ok())?;
        Some((run_id, string(r, "subject")?.to_owned()))
    });
    let (run_id, subject) =
        parsed.ok_or_else(|| refuse("requires exactly run.runId (host-minted) and run.subject"))?;
    Ok(RunAdmissionRequest {
        registered,
        run_id,
        subject,
    })
}

/// `parseRemoteRunAttemptRequest` (§5.4): kind `manager-run-attempt`, exactly one of `attempt`
/// or `operator`, the rest validated as the admission envelope. Stricter than the reference in
/// one place: a `run` member is refused as unknown instead of being silently replaced.
pub fn parse_run_attempt_request(raw: &Value) -> Result<RunAttemptRequest, EpError> {
    let o = raw.as_object().ok_or_else(|| refuse("must be an object"))?;
    if string(o, "kind") != Some("manager-run-attempt") {
        return Err(refuse("must be v1 manager-run-attempt"));
    }
    let (attempt, operator) = (o.get("attempt"), o.get("operator"));
    if attempt.is_some() == operator.is_some() {
        return Err(refuse("carries exactly one of attempt or operator"));
    }
    let allowed = |k: &str| REGISTERED_KEYS.contains(&k) || k == "attempt" || k == "operator";
    if let Some(k) = wire::member_outside(o, allowed) {
        return Err(refuse(format_args!("has unknown field {k}")));
    }
    let registered = parse_registered(o, "manager-run-attempt")?;
    let body = match (attempt, operator) {
        (Some(a), _) => AttemptBody::Attempt(parse_attempt(a)?),
        (_, Some(op)) => AttemptBody::Operator(parse_operator(op)?),
        (None, None) => return Err(refuse("carries exactly one of attempt or operator")),
    };
    Ok(RunAttemptRequest { registered, body })
}

/// `plain(v, keys, optional)`: an object with every required key and nothing else but optional
/// ones.
fn plain<'v>(
    value: &'v Value,
    keys: &[&str],
    optional: &[&str],
) -> Result<&'v Map<String, Value>, EpError> {
    let m = value
        .as_object()
        .ok_or_else(|| refuse("attempt/operator must be an object"))?;
    let extra = m
        .keys()
        .any(|k| !keys.contains(&k.as_str()) && !optional.contains(&k.as_str()));
    if extra || keys.iter().any(|k| !m.contains_key(*k)) {
        return Err(refuse(format_args!(
            "attempt/operator must carry exactly {}",
            keys.join(", ")
        )));
    }
    Ok(m)
}

fn safe_at_least(m: &Map<String, Value>, key: &str, min: u64) -> Option<u64> {
    m.get(key).and_then(safe_uint).filter(|n| *n >= min)
}

/// `served` absent, or a 1..=1024-character string.
fn served(m: &Map<String, Value>) -> Result<Option<String>, ()> {
    match m.get("served") {
        None => Ok(None),
        Some(Value::String(s))
            if !s.is_empty() && s.chars().count() <= MAX_SERVED_SUBJECT_BYTES =>
        {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(()),
    }
}

fn parse_attempt(value: &Value) -> Result<AttemptSpec, EpError> {
    let a = plain(
        value,
        &[
            "runId",
            "takeoverId",
            "epoch",
            "fencingToken",
            "driverId",
            "mediatorId",
        ],
        &["served"],
    )?;
    let parsed = (|| {
        let run_id = string(a, "runId").and_then(|s| RunId::parse(s).ok())?;
        let takeover_id = string(a, "takeoverId").and_then(|s| ReplayTakeover::parse(s).ok())?;
        let epoch = safe_at_least(a, "epoch", 1)?;
        let fencing_token = safe_at_least(a, "fencingToken", 1)?;
        let driver_id = string(a, "driverId").and_then(UserKey::parse)?;
        let mediator_id = string(a, "mediatorId").and_then(UserKey::parse)?;
        (driver_id != mediator_id).then_some(AttemptSpec {
            run_id,
            takeover_id,
            epoch: RunEpoch(epoch),
            fencing_token: FencingToken(fencing_token),
            driver_id,
            mediator_id,
            served: None,
        })
    })()
    .ok_or_else(|| {
        refuse(
            "attempt requires a run id, takeover id, positive epoch/fencingToken and distinct \
             driver/mediator nkeys",
        )
    })?;
    let served = served(a).map_err(|()| refuse("attempt served must be a request subject"))?;
    Ok(AttemptSpec { served, ..parsed })
}

fn parse_operator(value: &Value) -> Result<OperatorSpec, EpError> {
    let op = plain(
        value,
        &["id", "takeoverId"],
        &["runId", "answers", "served"],
    )?;
    let invalid = || refuse("operator requires an nkey id, a takeover id and an optional run id");
    let id = string(op, "id")
        .and_then(UserKey::parse)
        .ok_or_else(invalid)?;
    let takeover_id = string(op, "takeoverId")
        .and_then(|s| ReplayTakeover::parse(s).ok())
        .ok_or_else(invalid)?;
    let run_id = match op.get("runId") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(|s| RunId::parse(s).ok())
                .ok_or_else(invalid)?,
        ),
    };
    let answers = match op.get("answers") {
        None => None,
        Some(v) => {
            let t = plain(v, &["runId", "stepKey"], &["amend"])?;
            let bad = || {
                refuse(
                    "operator answers carries the run id and step key of one pause, an optional \
                     amend: true and no outer run id",
                )
            };
            let run_id = string(t, "runId")
                .and_then(|s| RunId::parse(s).ok())
                .ok_or_else(bad)?;
            let step_key = string(t, "stepKey")
                .filter(|s| !s.is_empty() && s.chars().count() <= MAX_STEP_KEY_CHARS)
                .ok_or_else(bad)?;
            let amend = match t.get("amend") {
                None => false,
                Some(Value::Bool(true)) => true,
                Some(_) => return Err(bad()),
            };
            if op.contains_key("runId") {
                return Err(bad());
            }
            Some(OperatorAnswers {
                run_id,
                step_key: step_key.to_owned(),
                amend,
            })
        }
    };
    let served_refusal = || {
        refuse(
            "operator served is the run-answer subject, and only an answering operator carries \
             one",
        )
    };
    let served = served(op).map_err(|()| served_refusal())?;
    let ask = match (answers, served) {
        (Some(answers), served) => OperatorAsk::Answer { answers, served },
        (None, None) => OperatorAsk::Read { run_id },
        (None, Some(_)) => return Err(served_refusal()),
    };
    Ok(OperatorSpec {
        id,
        takeover_id,
        ask,
    })
}

/// The shared registered-manager envelope, checked in the reference's order: `v:1` and the kind,
/// the non-empty coordinates and their grammars, the proof, the identities, the account and the
/// process epoch.
fn parse_registered(o: &Map<String, Value>, kind: &str) -> Result<RegisteredRun, EpError> {
    if o.get("v").and_then(safe_uint) != Some(1) || string(o, "kind") != Some(kind) {
        return Err(refuse(format_args!(
            "must carry {{ v: 1, kind: \"{kind}\" }}"
        )));
    }
    let coordinates = parse_coordinates(o, &|what| refuse(what))?;
    let registration_proof = string(o, "registrationProof")
        .and_then(RegistrationProof::parse)
        .ok_or_else(|| refuse("requires a sha256 registrationProof"))?;
    let identities = parse_identities(o.get("identities"), &|what| refuse(what))?;
    let account_public_key = string(o, "accountPublicKey")
        .and_then(AccountKey::parse)
        .ok_or_else(|| refuse("requires an account public key"))?;
    let process_epoch = o
        .get("processEpoch")
        .and_then(wire::safe_uint)
        .ok_or_else(|| refuse("requires a non-negative processEpoch"))?;
    Ok(RegisteredRun {
        envelope: coordinates.with(identities),
        registration_proof,
        account_public_key,
        process_epoch: ProcessEpoch(process_epoch),
    })
}
