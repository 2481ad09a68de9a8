//! Run admission (SPEC §14.8, F88; reference-gate-impl §2.5, §3.22): the immutable record of the
//! authority a hosted run was admitted under, `admission.v1.<endpointToken>.<runId>`, and the
//! separate create-only revocation marker `revoked.v1.<endpointToken>.<runId>`, both in the
//! admission store as RFC 8785 canonical JSON. A run with no readable, matching, unrevoked
//! admission is issued nothing.

use serde_json::{json, Map, Value};

use crate::canon;
use crate::error::EpError;
use crate::journal::RunId;
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{KvRequest, Revision, Store};
use crate::ledger;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{
    keys, ActorToken, EndpointName, InstanceId, LifecycleUid, OwnerToken, SpaceName,
};
use crate::wire::safe_uint;

use crate::issued::{closed, text, IssuedGeneration, IssuedRef, ShapeError, SubjectPermissions};

/// The caller a run was admitted for: the issued triple with its generation, or an operator's
/// principal (no generation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunCaller {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub uid: LifecycleUid,
    pub generation: Option<IssuedGeneration>,
}

impl RunCaller {
    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("owner".into(), self.owner.as_str().into());
        m.insert("actor".into(), self.actor.as_str().into());
        m.insert("uid".into(), self.uid.as_str().into());
        if let Some(g) = &self.generation {
            m.insert("generation".into(), g.as_str().into());
        }
        Value::Object(m)
    }

    fn from_value(value: Option<&Value>) -> Result<RunCaller, ShapeError> {
        const LABEL: &str = "admission caller";
        let m = closed(value, &["owner", "actor", "uid", "generation"], LABEL)?;
        let bad = || format!("{LABEL} is malformed");
        Ok(RunCaller {
            owner: OwnerToken::parse(text(m, "owner", LABEL)?).map_err(|_| bad())?,
            actor: ActorToken::parse(text(m, "actor", LABEL)?).map_err(|_| bad())?,
            uid: LifecycleUid::parse(text(m, "uid", LABEL)?).map_err(|_| bad())?,
            generation: match m.get("generation") {
                None => None,
                Some(g) => Some(
                    g.as_str()
                        .and_then(IssuedGeneration::parse)
                        .ok_or_else(bad)?,
                ),
            },
        })
    }

    /// Whether `reference` names exactly this caller (triple and generation).
    pub fn is(&self, reference: &IssuedRef) -> bool {
        self.owner == reference.owner
            && self.actor == reference.actor
            && self.uid == reference.uid
            && self.generation.as_ref() == Some(&reference.generation)
    }
}

/// Where a run's authority came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Provenance {
    /// A served `run-start`: the caller's issued evidence, at the attempt row's revision (> 0).
    Issued {
        reference: IssuedRef,
        resolved_revision: u64,
    },
    /// A local drive or explicit migration, on evidence the operator names.
    Operator { by: String, reason: String },
}

impl Provenance {
    fn to_value(&self) -> Value {
        match self {
            Provenance::Issued {
                reference,
                resolved_revision,
            } => json!({
                "kind": "issued",
                "ref": reference.to_value(),
                "resolvedRevision": resolved_revision,
            }),
            Provenance::Operator { by, reason } => {
                json!({"kind": "operator", "by": by, "reason": reason})
            }
        }
    }

    fn from_value(value: Option<&Value>) -> Result<Provenance, ShapeError> {
        let m = closed(
            value,
            &["kind", "ref", "resolvedRevision", "by", "reason"],
            "admission provenance",
        )?;
        match m.get("kind").and_then(Value::as_str) {
            Some("issued") => {
                let revision = m.get("resolvedRevision").and_then(safe_uint);
                match revision {
                    Some(r) if r > 0 && !m.contains_key("by") && !m.contains_key("reason") => {
                        Ok(Provenance::Issued {
                            reference: IssuedRef::from_value(m.get("ref"))?,
                            resolved_revision: r,
                        })
                    }
                    _ => Err("issued admission provenance is malformed".into()),
                }
            }
            Some("operator") => {
                let field = |k: &str| m.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
                match (field("by"), field("reason")) {
                    (Some(by), Some(reason))
                        if !m.contains_key("ref") && !m.contains_key("resolvedRevision") =>
                    {
                        Ok(Provenance::Operator {
                            by: by.to_owned(),
                            reason: reason.to_owned(),
                        })
                    }
                    _ => Err("operator admission provenance is malformed".into()),
                }
            }
            _ => Err("unsupported admission provenance".into()),
        }
    }
}

/// The admission record: `{version:1, space, endpoint, runId, instanceId, caller, ceiling,
/// provenance, admittedAt}`. Construct through [`RunAdmission::new`] or
/// [`RunAdmission::from_value`], both of which enforce the closed schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAdmission(AdmissionParts);

/// The members of a [`RunAdmission`] before [`RunAdmission::new`] checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionParts {
    pub space: SpaceName,
    pub endpoint: EndpointName,
    pub run_id: RunId,
    pub instance_id: InstanceId,
    pub caller: RunCaller,
    pub ceiling: SubjectPermissions,
    pub provenance: Provenance,
    pub admitted_at: u64,
}

impl RunAdmission {
    /// Validates what the reference's `admissionSnapshot` does before a create: `admittedAt > 0`
    /// and an issued provenance naming exactly the caller in this space. A refusal is
    /// `internal` (the plane built a bad record; no caller input reaches here unchecked).
    pub fn new(parts: AdmissionParts) -> Result<RunAdmission, EpError> {
        let admission = RunAdmission(parts);
        admission.check().map_err(EpError::internal)?;
        Ok(admission)
    }

    fn check(&self) -> Result<(), ShapeError> {
        if self.0.admitted_at == 0 || self.0.admitted_at > crate::wire::MAX_SAFE_INTEGER {
            return Err("run admission admittedAt must be a positive safe integer".into());
        }
        if let Provenance::Issued { reference, .. } = &self.0.provenance {
            if reference.space != self.0.space || !self.0.caller.is(reference) {
                return Err("run admission's issued reference disagrees with its caller".into());
            }
        }
        Ok(())
    }

    pub fn space(&self) -> &SpaceName {
        &self.0.space
    }
    pub fn endpoint(&self) -> &EndpointName {
        &self.0.endpoint
    }
    pub fn run_id(&self) -> &RunId {
        &self.0.run_id
    }
    pub fn instance_id(&self) -> &InstanceId {
        &self.0.instance_id
    }
    pub fn caller(&self) -> &RunCaller {
        &self.0.caller
    }
    pub fn ceiling(&self) -> &SubjectPermissions {
        &self.0.ceiling
    }
    pub fn provenance(&self) -> &Provenance {
        &self.0.provenance
    }
    pub fn admitted_at(&self) -> u64 {
        self.0.admitted_at
    }

    pub fn to_value(&self) -> Value {
        json!({
            "version": 1,
            "space": self.0.space.as_str(),
            "endpoint": self.0.endpoint.as_str(),
            "runId": self.0.run_id.as_str(),
            "instanceId": self.0.instance_id.as_str(),
            "caller": self.0.caller.to_value(),
            "ceiling": self.0.ceiling.to_value(),
            "provenance": self.0.provenance.to_value(),
            "admittedAt": self.0.admitted_at,
        })
    }

    /// The stored bytes: RFC 8785 canonical JSON, as the reference's `canonicalJson`.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EpError> {
        Ok(canon::canonicalize(&self.to_value())?.into_bytes())
    }

    /// Reads a record at the consuming boundary: closed schema, version, grammars and the
    /// caller/provenance agreement. The refusal text is the caller's to wrap.
    pub fn from_value(value: &Value) -> Result<RunAdmission, ShapeError> {
        let m = closed(
            Some(value),
            &[
                "version",
                "space",
                "endpoint",
                "runId",
                "instanceId",
                "caller",
                "ceiling",
                "provenance",
                "admittedAt",
            ],
            "run admission",
        )?;
        if m.get("version").and_then(safe_uint) != Some(1) {
            return Err("unsupported run admission version".into());
        }
        let bad = |what: &str| format!("run admission {what} is malformed");
        let admission = RunAdmission(AdmissionParts {
            space: SpaceName::parse(text(m, "space", "run admission")?)
                .ok()
                .filter(|s| m.get("space").and_then(Value::as_str) == Some(s.as_str()))
                .ok_or_else(|| bad("space"))?,
            endpoint: EndpointName::parse(text(m, "endpoint", "run admission")?)
                .map_err(|_| bad("endpoint"))?,
            run_id: RunId::parse(text(m, "runId", "run admission")?).map_err(|_| bad("runId"))?,
            instance_id: InstanceId::parse(text(m, "instanceId", "run admission")?)
                .map_err(|_| bad("instanceId"))?,
            caller: RunCaller::from_value(m.get("caller"))?,
            ceiling: SubjectPermissions::from_value(m.get("ceiling"))?,
            provenance: Provenance::from_value(m.get("provenance"))?,
            admitted_at: m
                .get("admittedAt")
                .and_then(safe_uint)
                .ok_or_else(|| bad("admittedAt"))?,
        });
        admission.check()?;
        Ok(admission)
    }
}

/// The revocation marker `{version:1, runId, reason, by, revokedAt}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRevocation {
    pub run_id: RunId,
    pub reason: String,
    pub by: String,
    /// Unix millis, > 0.
    pub revoked_at: u64,
}

impl RunRevocation {
    pub fn to_bytes(&self) -> Result<Vec<u8>, EpError> {
        let value = json!({
            "version": 1,
            "runId": self.run_id.as_str(),
            "reason": self.reason,
            "by": self.by,
            "revokedAt": self.revoked_at,
        });
        Ok(canon::canonicalize(&value)?.into_bytes())
    }

    fn from_value(value: &Value, run: &RunId) -> Result<RunRevocation, ShapeError> {
        let m = closed(
            Some(value),
            &["version", "runId", "reason", "by", "revokedAt"],
            "run revocation",
        )?;
        let revoked_at = m.get("revokedAt").and_then(safe_uint).filter(|t| *t > 0);
        match (
            m.get("version").and_then(safe_uint),
            m.get("runId").and_then(Value::as_str),
            m.get("reason").and_then(Value::as_str),
            m.get("by").and_then(Value::as_str),
            revoked_at,
        ) {
            (Some(1), Some(id), Some(reason), Some(by), Some(revoked_at)) if id == run.as_str() => {
                Ok(RunRevocation {
                    run_id: run.clone(),
                    reason: reason.to_owned(),
                    by: by.to_owned(),
                    revoked_at,
                })
            }
            _ => Err("run revocation is malformed".into()),
        }
    }
}

/// What [`read_run_admission`] found: the admission, its revision, and the revocation marker if
/// one exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionView {
    pub admission: RunAdmission,
    pub revision: Revision,
    pub revoked: Option<RunRevocation>,
}

/// A leader-served read of one admission-store key: absence is `None`; a DEL/PURGE marker is a
/// deletion, never absence (`failed-precondition`); bytes that are not JSON are returned as
/// `Err(text)` for the caller to classify.
fn read_leader(cx: &mut Ctx<'_>, key: &str) -> Result<Option<Found>, Halt> {
    match ledger::read(cx, Store::Admission, key)? {
        None => Ok(None),
        Some(entry) if !entry.is_put() => Err(EpError::failed_precondition(format!(
            "admission row {key} carries a {} marker; a deletion is never absence (SPEC 14.8)",
            entry.operation.as_str()
        ))
        .into()),
        Some(entry) => {
            let value =
                serde_json::from_slice::<Value>(&entry.value).map_err(|e| format!("not JSON: {e}"));
            Ok(Some((value, entry.revision, entry.value)))
        }
    }
}

/// The admission a host acts on (reference `readRunAdmission`; two leader reads). In order:
/// absent → `permission-denied` "run R has no admission record on endpoint E…"; a deletion
/// marker → `failed-precondition`; garbled → `permission-denied` (garbled trusted state never
/// authorizes); other coordinates → `permission-denied`; then the revocation marker, returned in
/// the view (a garbled marker is `internal`; its marker form `failed-precondition`). Keeps F88:
/// missing, unreadable or mismatched admission never continues a run; the caller refuses a
/// revoked one.
pub fn read_run_admission(
    cx: &mut Ctx<'_>,
    space: &SpaceName,
    endpoint: &EndpointName,
    run: &RunId,
) -> Result<AdmissionView, Halt> {
    let key = keys::run_admission(endpoint, run);
    let Some((value, revision, _)) = read_leader(cx, &key)? else {
        return Err(EpError::permission_denied(format!(
            "run {run} has no admission record on endpoint {endpoint}; a run with no admission \
             runs no channel effect (SPEC 14.8)",
            run = run.as_str()
        ))
        .into());
    };
    let admission = value
        .and_then(|v| RunAdmission::from_value(&v))
        .map_err(|why| {
            EpError::permission_denied(format!(
                "run {}'s admission record is unreadable ({why}); garbled trusted state never \
                 authorizes (SPEC 14.8)",
                run.as_str()
            ))
        })?;
    if admission.space() != space || admission.endpoint() != endpoint || admission.run_id() != run {
        return Err(EpError::permission_denied(format!(
            "run {}'s admission record names other coordinates ({}/{}/{}); refused (SPEC 14.8)",
            run.as_str(),
            admission.space(),
            admission.endpoint(),
            admission.run_id().as_str()
        ))
        .into());
    }
    let revoked = match read_leader(cx, &keys::run_revocation(endpoint, run))? {
        None => None,
        Some((value, _, _)) => Some(
            value
                .and_then(|v| RunRevocation::from_value(&v, run))
                .map_err(|why| {
                    EpError::internal(format!(
                        "run {}'s revocation marker is unreadable ({why})",
                        run.as_str()
                    ))
                })?,
        ),
    };
    Ok(AdmissionView {
        admission,
        revision,
        revoked,
    })
}

/// A leader read-back of an admission-store key: the decoded value (or why it is not JSON),
/// its revision and its raw bytes.
pub(crate) type Found = (Result<Value, ShapeError>, Revision, Vec<u8>);

/// What a settled create-only write found.
pub(crate) enum Created {
    /// The create was acknowledged at this revision.
    Written(Revision),
    /// The key holds a value: after a CAS loss, or after an ambiguous answer (possibly our own
    /// write). The caller judges whose it is.
    Found(Found),
}

/// Sends a create-only write and settles an ambiguous outcome by leader read-back: a value found
/// after an ambiguous answer or a CAS loss is returned for the caller to judge; nothing found
/// after an ambiguous answer is re-sent (bounded). A marker is `failed-precondition`.
pub(crate) fn create_settled(cx: &mut Ctx<'_>, key: &str, bytes: &[u8]) -> Result<Created, Halt> {
    let request = KvRequest::CreateStrict {
        store: Store::Admission,
        key: key.to_owned(),
        value: bytes.to_vec(),
    };
    let settled = settle_write(cx, &request, |cx, heard| {
        if let Heard::NotSent { why, earlier } = heard {
            let committed = earlier
                .as_ref()
                .map(|a| format!("; an earlier unanswered attempt ({a}) may have committed"))
                .unwrap_or_default();
            return Err(
                EpError::unavailable(format!("create of {key} failed: {why}{committed}")).into(),
            );
        }
        Ok(match read_leader(cx, key)? {
            Some(found) => Verdict::Settled(found),
            None => Verdict::Unmoved,
        })
    })?;
    match settled {
        Settled::Written(revision) => Ok(Created::Written(revision)),
        Settled::Judged(found) => Ok(Created::Found(found)),
        Settled::Exhausted(_) => Err(EpError::unavailable(format!(
            "create of {key} stayed ambiguous after {AMBIGUOUS_WRITE_ATTEMPTS} attempts and the \
             read-back found nothing; it may still commit"
        ))
        .into()),
    }
}

/// Writes the revocation marker (F88): create-only and idempotent — an existing marker (ours
/// from an ambiguous earlier attempt, or anyone's) means the run is revoked, which is all this
/// promises. Never removed. Round trips: 1 (create), +1 read-back per lost or ambiguous create.
#[derive(Debug, Clone)]
pub struct RevokeRun {
    pub endpoint: EndpointName,
    pub revocation: RunRevocation,
}

impl Script for RevokeRun {
    type Output = ();
    fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        if self.revocation.revoked_at == 0 {
            return Err(EpError::bad_request("a run revocation needs revokedAt > 0").into());
        }
        let key = keys::run_revocation(&self.endpoint, &self.revocation.run_id);
        match create_settled(cx, &key, &self.revocation.to_bytes()?)? {
            Created::Written(_) | Created::Found(_) => Ok(()),
        }
    }
}
