//! Service records in the records bucket (`svc.<endpointToken>.<instanceId>.spec|status`,
//! reference-gate-impl §2.4) and the records-bucket CAS helpers every records writer uses (§3.1).
//!
//! Records writes are loud: a lost CAS is `conflict`, which the caller re-reads and re-decides,
//! never a silent retry. A create is fenced against the key's whole history (`CreateStrict`), so a
//! deleted key is reopened only by a write pinned to its deletion marker. Spec and status values
//! are open schemas: they are validated field by field and written back in the caller's member
//! order with `JSON.stringify` spelling, so rows stay byte-compatible with the reference.

use serde_json::{Map, Value};

use crate::canon::Digest;
use crate::error::EpError;
use crate::gate::{ProcessEpoch, RegistrationRevision};
use crate::issuance::{observe_gate, GateRef};
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{KvRequest, Operation, Revision, Store};
use crate::ledger;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, EndpointName, InstanceId, OwnerToken};
use crate::wire::{self, safe_uint};

// ---- records CAS helpers --------------------------------------------------------------------

/// What a leader-served read of a records key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordRead {
    /// The key has never been written (or its history was compacted away).
    Absent,
    /// The last message is a DEL or PURGE marker. Its revision is what a rewrite pins to.
    Deleted {
        revision: Revision,
        operation: Operation,
    },
    /// A live value.
    Live { value: Vec<u8>, revision: Revision },
}

/// Leader-served read of a records key; a marker is reported, never read as absence.
pub fn read_record(cx: &mut Ctx<'_>, key: &str) -> Result<RecordRead, Halt> {
    Ok(match ledger::read(cx, Store::Records, key)? {
        None => RecordRead::Absent,
        Some(entry) if entry.is_put() => RecordRead::Live {
            value: entry.value,
            revision: entry.revision,
        },
        Some(entry) => RecordRead::Deleted {
            revision: entry.revision,
            operation: entry.operation,
        },
    })
}

/// Create-only write fenced against the key's whole history: an existing key or a DEL/PURGE
/// marker is `conflict` (reference §3.1 `createRecordEntry`). An ambiguous create is ours when
/// the read-back shows our bytes; an empty key is created again (bounded).
pub fn create_record(cx: &mut Ctx<'_>, key: &str, bytes: &[u8]) -> Result<Revision, Halt> {
    let request = KvRequest::CreateStrict {
        store: Store::Records,
        key: key.to_owned(),
        value: bytes.to_vec(),
    };
    write_settled(cx, request, bytes, Revision(0), || {
        EpError::conflict(format!(
            "create of {key} lost its CAS: the key already exists or carries a deletion marker; \
             re-read and re-decide"
        ))
    })
}

/// Revision-pinned write of a records key (also the rewrite of a marker, pinned to the marker's
/// revision). A moved revision is `conflict` (reference §3.1 `updateRecordEntry`). An ambiguous
/// update is ours when the read-back shows our bytes past the pin; an unmoved key is retried.
pub fn update_record(
    cx: &mut Ctx<'_>,
    key: &str,
    bytes: &[u8],
    expected: Revision,
) -> Result<Revision, Halt> {
    let request = KvRequest::Update {
        store: Store::Records,
        key: key.to_owned(),
        value: bytes.to_vec(),
        expected,
    };
    write_settled(cx, request, bytes, expected, || {
        EpError::conflict(format!(
            "update of {key} at revision {expected} lost its CAS; re-read and re-decide"
        ))
    })
}

/// Revision-pinned delete of a records key: it removes the record that was read, or nothing
/// (reference §3.1 `deleteRecordEntry`). A marker carries no bytes, so an ambiguous delete whose
/// read-back shows the key moved cannot be attributed and is `unavailable`.
pub fn delete_record(cx: &mut Ctx<'_>, key: &str, expected: Revision) -> Result<Revision, Halt> {
    let request = KvRequest::Delete {
        store: Store::Records,
        key: key.to_owned(),
        expected,
    };
    write_settled(cx, request, &[], expected, || {
        EpError::conflict(format!(
            "delete of {key} at revision {expected} lost its CAS: the record moved after it was \
             read, so it is NOT the record that was inspected; re-read and re-decide"
        ))
    })
}

/// Sends `request` and settles an ambiguous outcome by a leader read-back: our PUT bytes at a
/// revision past `pin` are ours; an unmoved key (still at `pin`, or absent for a create) means
/// it did not commit, so the write is re-sent. Anything else — including a lost CAS on a re-send,
/// which the earlier attempt may have caused by landing late — cannot be attributed and is
/// `unavailable`, saying the write may have committed.
fn write_settled(
    cx: &mut Ctx<'_>,
    request: KvRequest,
    bytes: &[u8],
    pin: Revision,
    lost: impl Fn() -> EpError,
) -> Result<Revision, Halt> {
    let key = request.key().to_owned();
    let is_delete = matches!(request, KvRequest::Delete { .. });
    let unknown = |heard: &Heard| {
        EpError::unavailable(format!(
            "the outcome of writing {key} is unknown ({}) and the read-back cannot attribute \
             what is stored now; the write may have committed, re-read before deciding",
            heard.last_unanswered().unwrap_or("no answer")
        ))
    };
    let settled = settle_write(cx, &request, |cx, heard| {
        let resend_lost = match heard {
            Heard::Lost { earlier: None } => return Err(lost().into()),
            Heard::Lost { earlier: Some(_) } => true,
            Heard::Unanswered(_) => false,
            Heard::NotSent { why, earlier } => {
                let outcome = match earlier {
                    None => "nothing was written".to_owned(),
                    Some(e) => format!("an earlier unanswered attempt ({e}) may have committed"),
                };
                return Err(EpError::unavailable(format!(
                    "writing {key} failed before it was sent ({why}); {outcome}"
                ))
                .into());
            }
        };
        let unmoved = match read_record(cx, &key)? {
            RecordRead::Live { value, revision }
                if !is_delete && value == bytes && revision > pin =>
            {
                return Ok(Verdict::Settled(revision))
            }
            RecordRead::Absent => pin == Revision(0),
            RecordRead::Live { revision, .. } | RecordRead::Deleted { revision, .. } => {
                revision == pin && pin != Revision(0)
            }
        };
        if resend_lost || !unmoved {
            return Err(unknown(heard).into());
        }
        Ok(Verdict::Unmoved)
    })?;
    match settled {
        Settled::Written(revision) | Settled::Judged(revision) => Ok(revision),
        Settled::Exhausted(heard) => Err(EpError::unavailable(format!(
            "writing {key} stayed ambiguous across {AMBIGUOUS_WRITE_ATTEMPTS} attempts ({}); it \
             may have committed",
            heard.last_unanswered().unwrap_or("no answer")
        ))
        .into()),
    }
}

// ---- value validation -----------------------------------------------------------------------

fn invalid(what: impl AsRef<str>) -> EpError {
    EpError::internal(format!(
        "service record does not validate: {}",
        what.as_ref()
    ))
}

fn object(value: Value, what: &str) -> Result<Map<String, Value>, EpError> {
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(invalid(format!("{what} is not an object"))),
    }
}

fn decode(bytes: &[u8], what: &str) -> Result<Value, EpError> {
    serde_json::from_slice(bytes)
        .map_err(|e| EpError::internal(format!("stored {what} does not decode as JSON: {e}")))
}

/// A present field as a safe uint, `None` when absent, refusal when malformed.
fn opt_uint(map: &Map<String, Value>, field: &str, what: &str) -> Result<Option<u64>, EpError> {
    match map.get(field) {
        None => Ok(None),
        Some(v) => safe_uint(v)
            .map(Some)
            .ok_or_else(|| invalid(format!("{what}.{field} is not a non-negative safe integer"))),
    }
}

fn positive(map: &Map<String, Value>, field: &str) -> Result<Option<u64>, EpError> {
    match opt_uint(map, field, "activation")? {
        Some(0) => Err(invalid(format!("activation.{field} must be positive"))),
        n => Ok(n),
    }
}

fn uint(map: &Map<String, Value>, field: &str, what: &str) -> Result<u64, EpError> {
    opt_uint(map, field, what)?.ok_or_else(|| invalid(format!("{what}.{field} is missing")))
}

/// The row bytes of `value` as `JSON.stringify` writes them (integer-index keys first, then
/// insertion order; ECMAScript numbers). serde_json holds only finite doubles, so this cannot
/// fail for a parsed value; a refusal would be a bug and is kept loud.
fn js_bytes(value: &Value) -> Result<Vec<u8>, EpError> {
    let mut out = String::new();
    wire::js_stringify(&mut out, value)?;
    Ok(out.into_bytes())
}

// ---- the spec value -------------------------------------------------------------------------

/// The virtual activation policy `spec.activation` (closed schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivationPolicy {
    pub capacity: u64,
    pub max_restarts: Option<u64>,
    pub restart_window_ms: Option<u64>,
}

const ACTIVATION_FIELDS: [&str; 4] = ["mode", "capacity", "maxRestarts", "restartWindowMs"];

impl ActivationPolicy {
    fn parse(value: &Value) -> Result<ActivationPolicy, EpError> {
        let Value::Object(map) = value else {
            return Err(invalid("activation policy is not an object"));
        };
        if let Some(k) = map
            .keys()
            .find(|k| !ACTIVATION_FIELDS.contains(&k.as_str()))
        {
            return Err(invalid(format!(
                "activation policy carries unknown field {k:?} (closed schema)"
            )));
        }
        if map.get("mode").and_then(Value::as_str) != Some("on-demand") {
            return Err(invalid("activation.mode is not \"on-demand\""));
        }
        Ok(ActivationPolicy {
            capacity: positive(map, "capacity")?
                .ok_or_else(|| invalid("activation.capacity is required"))?,
            max_restarts: positive(map, "maxRestarts")?,
            restart_window_ms: positive(map, "restartWindowMs")?,
        })
    }
}

/// A `svc….spec` value. The schema is open: unknown members pass and are kept, and the row is
/// written back exactly as given. The key's store revision is the registration revision.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSpec {
    endpoint: EndpointName,
    owner: OwnerToken,
    cluster_digests: Vec<Digest>,
    activation: Option<ActivationPolicy>,
    value: Value,
    /// The row bytes, written once at validation.
    bytes: Vec<u8>,
}

impl ServiceSpec {
    /// Validates a spec value for the record keyed under `key_endpoint`; every violation is
    /// `internal` (mediated-writer state that does not validate is a writer bug).
    pub fn from_value(value: Value, key_endpoint: &EndpointName) -> Result<ServiceSpec, EpError> {
        let Value::Object(map) = &value else {
            return Err(invalid("spec is not an object"));
        };
        let text = |field: &str| map.get(field).and_then(Value::as_str);
        let endpoint = EndpointName::parse(text("endpoint").ok_or_else(|| invalid("endpoint"))?)
            .map_err(|e| invalid(format!("endpoint: {}", e.message)))?;
        if endpoint.token() != key_endpoint.token() {
            return Err(invalid(format!(
                "endpoint {endpoint} disagrees with the record key's endpoint {key_endpoint}"
            )));
        }
        let owner = OwnerToken::parse(text("owner").ok_or_else(|| invalid("owner"))?)
            .map_err(|e| invalid(format!("owner: {}", e.message)))?;
        if map.get("endpointType").is_some_and(|t| !t.is_string()) {
            return Err(invalid("endpointType is not a string"));
        }
        let digests = || invalid("clusterDigests must be a non-empty array of sha256 digests");
        let cluster_digests = map
            .get("clusterDigests")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(digests)?
            .iter()
            .map(|d| d.as_str().and_then(|s| Digest::parse_prefixed(s).ok()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(digests)?;
        let protocol_v = map.get("protocol").and_then(Value::as_object);
        if protocol_v.and_then(|p| p.get("v")).and_then(safe_uint) != Some(1) {
            return Err(invalid("protocol.v must be 1"));
        }
        let activation = map
            .get("activation")
            .map(ActivationPolicy::parse)
            .transpose()?;
        let bytes = js_bytes(&value)?;
        Ok(ServiceSpec {
            endpoint,
            owner,
            cluster_digests,
            activation,
            value,
            bytes,
        })
    }

    /// Parses stored spec bytes of the record keyed under `key_endpoint` (`internal` if bad).
    pub fn parse(bytes: &[u8], key_endpoint: &EndpointName) -> Result<ServiceSpec, EpError> {
        ServiceSpec::from_value(decode(bytes, "service spec")?, key_endpoint)
    }

    pub fn endpoint(&self) -> &EndpointName {
        &self.endpoint
    }
    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }
    pub fn endpoint_type(&self) -> Option<&str> {
        self.value.get("endpointType").and_then(Value::as_str)
    }
    /// Complete-closure digests of the served cluster documents.
    pub fn cluster_digests(&self) -> &[Digest] {
        &self.cluster_digests
    }
    pub fn activation(&self) -> Option<&ActivationPolicy> {
        self.activation.as_ref()
    }
    /// The value as given, unknown members included.
    pub fn value(&self) -> &Value {
        &self.value
    }
    /// The row bytes: the value as given, `JSON.stringify` spelling.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.bytes.clone()
    }
}

// ---- the status value -----------------------------------------------------------------------

/// The convergence states readers key on.
pub const SERVICE_READY: &str = "ready";
pub const SERVICE_EXITED: &str = "exited";
/// Restart-intensity escalation: terminal, never overwritten by a status write.
pub const SERVICE_ESCALATED: &str = "escalated";
/// Supervisor-owned fields: the restart history and the retirement mark.
pub const RESTARTS_FIELD: &str = "restarts";
pub const RETIRED_AT_FIELD: &str = "retiredAt";

/// `^[a-z][a-z0-9-]{0,31}$`.
fn is_state_token(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && s.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// One restart in the supervisor's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restart {
    pub t: u64,
    pub epoch: ProcessEpoch,
}

/// A `svc….status` value: open schema, members kept in the caller's order.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceStatus {
    epoch: ProcessEpoch,
    observed_spec_revision: RegistrationRevision,
    restarts: Option<Vec<Restart>>,
    retired_at: Option<u64>,
    fields: Map<String, Value>,
    /// The row bytes, written once at validation.
    bytes: Vec<u8>,
}

impl ServiceStatus {
    /// Validates a status value; every violation is `internal`. A status always carries
    /// `observedSpecRevision`; a restart history has unique epochs (a duplicate is a fabricated
    /// count); a retirement mark appears only on an `escalated` row.
    pub fn from_value(value: Value) -> Result<ServiceStatus, EpError> {
        let fields = object(value, "status")?;
        let epoch = ProcessEpoch(uint(&fields, "epoch", "status")?);
        let state = fields.get("state").and_then(Value::as_str);
        if !state.is_some_and(is_state_token) {
            return Err(invalid(
                "status.state is not a token ^[a-z][a-z0-9-]{0,31}$",
            ));
        }
        let observed = uint(&fields, "observedSpecRevision", "status")?;
        let restarts = match fields.get(RESTARTS_FIELD) {
            None => None,
            Some(history) => Some(parse_restarts(history)?),
        };
        let retired_at = opt_uint(&fields, RETIRED_AT_FIELD, "status")?;
        if retired_at.is_some() && state != Some(SERVICE_ESCALATED) {
            return Err(invalid(
                "status.retiredAt appears only on an escalated row (a mark on a live row would \
                 fake a completed retirement)",
            ));
        }
        let bytes = js_bytes(&Value::Object(fields.clone()))?;
        Ok(ServiceStatus {
            epoch,
            observed_spec_revision: RegistrationRevision(observed),
            restarts,
            retired_at,
            fields,
            bytes,
        })
    }

    /// Parses stored status bytes (`internal` if bad).
    pub fn parse(bytes: &[u8]) -> Result<ServiceStatus, EpError> {
        ServiceStatus::from_value(decode(bytes, "service status")?)
    }

    pub fn epoch(&self) -> ProcessEpoch {
        self.epoch
    }
    pub fn state(&self) -> &str {
        self.fields
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    pub fn observed_spec_revision(&self) -> RegistrationRevision {
        self.observed_spec_revision
    }
    pub fn restarts(&self) -> Option<&[Restart]> {
        self.restarts.as_deref()
    }
    pub fn retired_at(&self) -> Option<u64> {
        self.retired_at
    }
    /// Every member in order, extra fields included.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }
    /// The row bytes: members in order, `JSON.stringify` spelling.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.bytes.clone()
    }
}

fn parse_restarts(history: &Value) -> Result<Vec<Restart>, EpError> {
    let refuse = || invalid("status.restarts is not an array of {t, epoch}");
    let restarts = history
        .as_array()
        .ok_or_else(refuse)?
        .iter()
        .map(|e| {
            let map = e.as_object().ok_or_else(refuse)?;
            let (t, epoch) = (map.get("t"), map.get("epoch"));
            match (t.and_then(safe_uint), epoch.and_then(safe_uint)) {
                (Some(t), Some(epoch)) => Ok(Restart {
                    t,
                    epoch: ProcessEpoch(epoch),
                }),
                _ => Err(refuse()),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut epochs: Vec<ProcessEpoch> = restarts.iter().map(|r| r.epoch).collect();
    epochs.sort_unstable();
    epochs.dedup();
    if epochs.len() != restarts.len() {
        return Err(invalid(
            "status.restarts has duplicate epochs (a fabricated count)",
        ));
    }
    Ok(restarts)
}

// ---- the status writer ----------------------------------------------------------------------

/// One status write of an endpoint instance.
#[derive(Debug, Clone)]
pub struct WriteStatus {
    /// The instance's issuance gate: its `processEpoch` is the authoritative current epoch.
    pub gate: GateRef,
    pub endpoint: EndpointName,
    pub instance: InstanceId,
    /// The writing epoch, taken from the broker-authenticated `epr` subject, never the payload.
    pub epoch: ProcessEpoch,
    /// The status object as the writer sent it.
    pub status: Value,
    /// Pins the write to the status revision the caller derived from (0 = observed absent), for
    /// read-modify-write callers such as the supervisor's restart history.
    pub expected_status_revision: Option<Revision>,
    /// The supervisor grant: only it may originate `escalated`, `restarts` and `retiredAt`.
    pub supervisor: bool,
}

impl Script for WriteStatus {
    type Output = Revision;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Revision, Halt> {
        write_service_status(cx, self)
    }
}

/// Writes an instance's status under the full writer fence (F42, reference §3.15), in order:
/// an instance-side write may not originate `escalated` (`failed-precondition`) and its
/// supervisor-only fields are dropped; the payload epoch must equal the writing epoch
/// (`internal`); the spec must be a live PUT and `observedSpecRevision` may not run ahead of it
/// (`failed-precondition`); the writing epoch must equal a fresh leader read of the gate's
/// `processEpoch` (`expired`) — the stored status alone cannot fence, since during a takeover
/// the superseded epoch still equals it; a stored `escalated` is never overwritten
/// (`failed-precondition`); an epoch below the stored one is `conflict`. Then the write is a
/// CAS: a create on a never-written key, a rewrite pinned to a deregistration marker, or an
/// update pinned to the stored status, with the supervisor fields carried forward on an
/// instance-side write. Returns the status revision.
pub fn write_service_status(cx: &mut Ctx<'_>, w: &WriteStatus) -> Result<Revision, Halt> {
    if (&w.gate.endpoint, &w.gate.instance) != (&w.endpoint, &w.instance) {
        return Err(
            EpError::internal("the status write names another gate than its record").into(),
        );
    }
    let who = format!("{}/{}", w.endpoint, w.instance);
    let mut raw = object(w.status.clone(), "status")?;
    if !w.supervisor {
        if raw.get("state").and_then(Value::as_str) == Some(SERVICE_ESCALATED) {
            return Err(EpError::failed_precondition(format!(
                "an instance-side status write cannot originate \"{SERVICE_ESCALATED}\" for \
                 {who}; escalation is the supervisor's authority"
            ))
            .into());
        }
        // Forged supervisor fields are dropped, not refused: the instance's ordinary
        // convergence write still goes through.
        raw.shift_remove(RESTARTS_FIELD);
        raw.shift_remove(RETIRED_AT_FIELD);
    }
    let status = ServiceStatus::from_value(Value::Object(raw))?;
    if status.epoch != w.epoch {
        return Err(EpError::internal(format!(
            "status.epoch {} disagrees with the writer-authenticated epoch {}; the epoch rides \
             the subject",
            status.epoch, w.epoch
        ))
        .into());
    }
    let spec_revision = match read_record(cx, &keys::svc_spec(&w.endpoint, &w.instance))? {
        RecordRead::Live { revision, .. } => revision,
        _ => {
            return Err(EpError::failed_precondition(format!(
                "status write for {who} has no registered spec; writing it would create the torn \
                 record state readers reject"
            ))
            .into())
        }
    };
    if status.observed_spec_revision.0 > spec_revision.0 {
        return Err(EpError::failed_precondition(format!(
            "observedSpecRevision {} runs ahead of the spec revision {spec_revision}; a status \
             can only observe a registration that exists",
            status.observed_spec_revision
        ))
        .into());
    }
    let Some(gate) = observe_gate(cx, &w.gate)? else {
        return Err(EpError::failed_precondition(format!(
            "no issuance gate for {who}; a gate is never deleted"
        ))
        .into());
    };
    let current = gate.gate.process_epoch();
    if current != w.epoch {
        return Err(EpError::expired(format!(
            "status write from epoch {} is not the gate's current processEpoch {current}; a \
             superseded incarnation cannot commit (F42)",
            w.epoch
        ))
        .into());
    }
    // For endpoints the epoch advances only at a barrier's completing reopen, so the epoch read
    // alone passes for the whole barrier: an instance write landing then would leave a READY at
    // an epoch the reopen is about to supersede. Beyond the reference, an instance write
    // therefore needs the gate open; the supervisor (escalation, restart history) is not held
    // up by a barrier.
    if !w.supervisor && gate.gate.state() != crate::gate::GateState::Open {
        return Err(EpError::unavailable(format!(
            "the issuance gate of {who} is {} by a barrier; an instance status write waits for \
             it to reopen (its epoch may be superseded), then retries (F42)",
            gate.gate.state().as_str()
        ))
        .into());
    }
    let key = keys::svc_status(&w.endpoint, &w.instance);
    let stored = read_record(cx, &key)?;
    if let Some(expected) = w.expected_status_revision {
        let now = match &stored {
            RecordRead::Live { revision, .. } => *revision,
            _ => Revision(0),
        };
        if now != expected {
            return Err(EpError::conflict(format!(
                "the status for {who} moved (observed revision {expected}, stored {now}); a \
                 derived write against a moved base would lose the concurrent write, re-read \
                 and re-derive"
            ))
            .into());
        }
    }
    match stored {
        RecordRead::Absent => create_record(cx, &key, &status.to_bytes()),
        RecordRead::Deleted { revision, .. } => {
            update_record(cx, &key, &status.to_bytes(), revision)
        }
        RecordRead::Live { value, revision } => {
            let recorded = ServiceStatus::parse(&value)?;
            if recorded.state() == SERVICE_ESCALATED {
                return Err(EpError::failed_precondition(format!(
                    "{who} is escalated; the state is terminal and a status write cannot clear it"
                ))
                .into());
            }
            if w.epoch < recorded.epoch {
                return Err(EpError::conflict(format!(
                    "status write from epoch {} is below the stored status epoch {} (F42)",
                    w.epoch, recorded.epoch
                ))
                .into());
            }
            let mut fields = status.fields;
            if !w.supervisor {
                // Stripped above, so these land after the caller's members, as the
                // reference's re-assignment does.
                for field in [RESTARTS_FIELD, RETIRED_AT_FIELD] {
                    if let Some(v) = recorded.fields.get(field) {
                        fields.insert(field.to_owned(), v.clone());
                    }
                }
            }
            update_record(cx, &key, &js_bytes(&Value::Object(fields))?, revision)
        }
    }
}
