//! Managed-agent enrollment and retirement preparation (reference §6.1–§6.4; F94–F97).
//!
//! A registered remote manager asks its host to enroll an agent it will run: the host checks the
//! manager's current registration, writes the agent's managed ledger row at a lifecycle uid the
//! host alone picks, and provisions the agent's broker durables. Retirement preparation tears the
//! footprint down, then releases the row, so the terminal retirement can follow.
//!
//! **Serialization (§6.6).** Both machines read the alias's row and then write on that reading.
//! Two of them interleaving on one `(owner, actor)` could enroll two uids or enroll over a
//! retirement in flight, so both are [`crate::actors::AliasScript`]s: they run only inside a
//! [`crate::actors::Serialized`], built from the guard of
//! [`crate::actors::ActorLedger::lock_alias`] for their alias and holding it from the first step
//! to the last. The file ledger's lock also excludes other processes sharing the ledger
//! directory.
//!
//! Round trips, counted on the model: enrollment = 1 KV get (the manager gate) + 2 ledger ops
//! (find, grant or envelope re-walk) + 1 durables op; retirement preparation = 1 KV get + 2
//! ledger ops (find, revoke) + 1 durables op (0 + 0 when the row is gone or at another uid).

use serde_json::{Map, Value};

use crate::actors::row::{check_channel, iso8601_millis};
use crate::actors::{
    ActorRow, ActorsOutcome, ActorsRequest, AliasScript, Boundary, DurablesOutcome,
    DurablesRequest, Held, LockHeld, RowSpace, TokenHash,
};
use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::machine::{Ctx, Halt};
use crate::manager::door::{self, check_registered, Door, Knock, Presented};
use crate::manager::{
    managed_retirement_op_id, parse_coordinates, parse_identities, ManagerEnvelope, ManagerHost,
    RegistrationProof, RequestId, RetirementTarget, Supervisor,
};
use crate::names::{ActorToken, InstanceId, LifecycleUid, OpId, OwnerToken, Principal, SpaceName};
use crate::stored::{ObjectWriter, MAX_SAFE_INTEGER};

/// The wire kind of an enrollment request and result.
pub const ENROLLMENT_KIND: &str = "manager-managed-agent-enrollment";
/// The wire kind of a retirement preparation request and result.
pub const PREPARE_RETIREMENT_KIND: &str = "manager-managed-agent-prepare-retirement";
/// The bound on each enrollment list: wider is a configuration mistake or a body-size attack.
pub const MAX_ENROLLMENT_LIST: usize = 64;

const ENVELOPE_KEYS: [&str; 9] = [
    "v",
    "kind",
    "space",
    "actor",
    "instanceId",
    "managerLifecycleUid",
    "requestId",
    "registrationProof",
    "serveEpoch",
];

// ---- Requests ---------------------------------------------------------------------------------

/// The envelope every managed-agent request shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedEnvelope {
    pub manager: ManagerEnvelope,
    /// The host-issued current-registration proof (HMAC) the request presents.
    pub registration_proof: RegistrationProof,
    /// The manager's serve process epoch the request claims is current.
    pub serve_epoch: ProcessEpoch,
}

/// What to enroll. The request carries no lifecycle uid: the host picks it (F95).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentTarget {
    pub actor: ActorToken,
    /// SHA-256 of the participant's locally held actor token; the token never travels (F95).
    pub token_hash: TokenHash,
    pub role: Option<String>,
    pub label: Option<String>,
    pub capabilities: Option<Vec<String>>,
    pub subscribe: Option<Vec<String>>,
    pub allow_subscribe: Option<Vec<String>>,
    pub allow_publish: Option<Vec<String>>,
}

/// `manager-managed-agent-enrollment`, parsed (closed; unknown input fields are refused, never
/// retained).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentRequest {
    pub envelope: ManagedEnvelope,
    pub target: EnrollmentTarget,
}

/// `manager-managed-agent-prepare-retirement`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareRetirementRequest {
    pub envelope: ManagedEnvelope,
    pub target: RetirementTarget,
    /// Always `managedRetirementOpId(target.lifecycleUid)` (F96): only the parser sets it, and
    /// it refuses any other, so the machine needs no re-check.
    op_id: OpId,
}

impl PrepareRetirementRequest {
    pub fn op_id(&self) -> &OpId {
        &self.op_id
    }
}

fn refuse(what: &str, detail: impl AsRef<str>) -> EpError {
    EpError::bad_request(format!("{what} request {}", detail.as_ref()))
}

fn object<'v>(raw: &'v Value, what: &str) -> Result<&'v Map<String, Value>, EpError> {
    raw.as_object()
        .ok_or_else(|| refuse(what, "must be an object"))
}

fn closed(map: &Map<String, Value>, allowed: &[&str], what: &str, at: &str) -> Result<(), EpError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(refuse(
            what,
            format!("{at}carries unknown field {key:?} (the protocol is closed)"),
        )),
        None => Ok(()),
    }
}

fn non_empty<'m>(map: &'m Map<String, Value>, key: &str, what: &str) -> Result<&'m str, EpError> {
    map.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| refuse(what, format!("requires non-empty {key}")))
}

/// Prefixes a grammar refusal from [`crate::names`] with the request it came from.
fn grammar(what: &str) -> impl Fn(EpError) -> EpError + '_ {
    move |e| refuse(what, e.message)
}

fn parse_envelope(
    map: &Map<String, Value>,
    what: &str,
    kind: &str,
) -> Result<ManagedEnvelope, EpError> {
    if map.get("v").and_then(Value::as_u64) != Some(1)
        || map.get("kind").and_then(Value::as_str) != Some(kind)
    {
        return Err(refuse(
            what,
            format!("must carry {{ v: 1, kind: {kind:?} }}"),
        ));
    }
    let coordinates = parse_coordinates(map, &|detail| refuse(what, detail))?;
    let registration_proof = non_empty(map, "registrationProof", what).and_then(|proof| {
        RegistrationProof::parse(proof)
            .ok_or_else(|| refuse(what, "requires a sha256 registrationProof"))
    })?;
    let serve_epoch = map
        .get("serveEpoch")
        .and_then(Value::as_u64)
        .filter(|&e| e <= MAX_SAFE_INTEGER)
        .ok_or_else(|| refuse(what, "serveEpoch must be a non-negative safe integer"))?;
    let identities = parse_identities(map.get("identities"), &|detail| refuse(what, detail))?;
    Ok(ManagedEnvelope {
        manager: coordinates.with(identities),
        registration_proof,
        serve_epoch: ProcessEpoch(serve_epoch),
    })
}

/// One optional bounded list of channel patterns on an enrollment target.
fn channel_list(
    map: &Map<String, Value>,
    field: &str,
    what: &str,
) -> Result<Option<Vec<String>>, EpError> {
    let Some(value) = map.get(field) else {
        return Ok(None);
    };
    let items = value.as_array().ok_or_else(|| {
        refuse(
            what,
            format!("target.{field} must be an array of channel patterns when present"),
        )
    })?;
    if items.len() > MAX_ENROLLMENT_LIST {
        return Err(refuse(
            what,
            format!(
                "target.{field} carries {} entries, more than the {MAX_ENROLLMENT_LIST}-entry bound",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .map(|item| {
            let s = item.as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
                refuse(
                    what,
                    format!("target.{field} must contain only non-empty strings"),
                )
            })?;
            check_channel(s).map_err(|e| refuse(what, e))?;
            Ok(s.to_owned())
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

impl EnrollmentRequest {
    /// Parses the closed enrollment request (reference §6.1). Every refusal is `bad-request`
    /// "managed agent enrollment request …". A `lifecycleUid` anywhere is an unknown field:
    /// the participant never names the uid (F95).
    pub fn parse(raw: &Value) -> Result<EnrollmentRequest, EpError> {
        let what = "managed agent enrollment";
        let map = object(raw, what)?;
        let allowed: Vec<&str> = ENVELOPE_KEYS
            .iter()
            .copied()
            .chain(["target", "identities"])
            .collect();
        closed(map, &allowed, what, "")?;
        let envelope = parse_envelope(map, what, ENROLLMENT_KIND)?;
        let t = map
            .get("target")
            .and_then(Value::as_object)
            .ok_or_else(|| refuse(what, "requires a target"))?;
        closed(
            t,
            &[
                "actor",
                "tokenHash",
                "role",
                "label",
                "capabilities",
                "subscribe",
                "allowSubscribe",
                "allowPublish",
            ],
            what,
            "target ",
        )?;
        let actor = t
            .get("actor")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refuse(what, "target requires a non-empty actor"))?;
        let actor = ActorToken::parse(actor).map_err(grammar(what))?;
        let token_hash = t
            .get("tokenHash")
            .and_then(Value::as_str)
            .and_then(|h| TokenHash::parse(h).ok())
            .ok_or_else(|| {
                refuse(
                    what,
                    "target.tokenHash must be a lowercase hex sha256 digest of the locally held \
                     actorToken",
                )
            })?;
        let role = match t.get("role") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .filter(|r| r.len() <= 64 && crate::actors::row::is_role(r))
                    .ok_or_else(|| {
                        refuse(
                            what,
                            "target.role must be a 1-64 character role token when present",
                        )
                    })?
                    .to_owned(),
            ),
        };
        let label = match t.get("label") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .filter(|l| (1..=256).contains(&l.encode_utf16().count()))
                    .ok_or_else(|| {
                        refuse(
                            what,
                            "target.label must be a 1-256 character string when present",
                        )
                    })?
                    .to_owned(),
            ),
        };
        let capabilities = match t.get("capabilities") {
            None => None,
            Some(v) => {
                let caps = v.as_array().ok_or_else(|| {
                    refuse(what, "target.capabilities must be an array when present")
                })?;
                if caps.len() > MAX_ENROLLMENT_LIST {
                    return Err(refuse(
                        what,
                        format!(
                            "target.capabilities carries {} entries, more than the \
                             {MAX_ENROLLMENT_LIST}-entry bound",
                            caps.len()
                        ),
                    ));
                }
                let caps = caps
                    .iter()
                    .map(|c| {
                        c.as_str()
                            .filter(|c| c.len() <= 64 && crate::actors::row::is_scope_token(c))
                            .map(str::to_owned)
                            .ok_or_else(|| {
                                refuse(what, "target.capabilities must contain only 1-64 character capability tokens")
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(caps)
            }
        };
        Ok(EnrollmentRequest {
            envelope,
            target: EnrollmentTarget {
                actor,
                token_hash,
                role,
                label,
                capabilities,
                subscribe: channel_list(t, "subscribe", what)?,
                allow_subscribe: channel_list(t, "allowSubscribe", what)?,
                allow_publish: channel_list(t, "allowPublish", what)?,
            },
        })
    }
}

impl PrepareRetirementRequest {
    /// Parses the closed prepare-retirement request (reference §6.1): the target is exactly
    /// `{owner (u_), actor, lifecycleUid}` and the op id must be the one derived from the
    /// target's uid, so one lifecycle never has two terminal operations (F96).
    pub fn parse(raw: &Value) -> Result<PrepareRetirementRequest, EpError> {
        let what = "managed agent prepare-retirement";
        let map = object(raw, what)?;
        let allowed: Vec<&str> = ENVELOPE_KEYS
            .iter()
            .copied()
            .chain(["target", "opId", "identities"])
            .collect();
        closed(map, &allowed, what, "")?;
        let envelope = parse_envelope(map, what, PREPARE_RETIREMENT_KIND)?;
        let t = map
            .get("target")
            .and_then(Value::as_object)
            .filter(|t| {
                t.len() == 3
                    && ["owner", "actor", "lifecycleUid"]
                        .iter()
                        .all(|k| t.contains_key(*k))
            })
            .ok_or_else(|| {
                refuse(
                    what,
                    "target must be exactly { owner, actor, lifecycleUid }",
                )
            })?;
        let field = |k: &str| {
            t.get(k).and_then(Value::as_str).ok_or_else(|| {
                refuse(
                    what,
                    "target must contain string owner, actor, and lifecycleUid",
                )
            })
        };
        let (owner, actor, uid) = (field("owner")?, field("actor")?, field("lifecycleUid")?);
        if !crate::names::DerivedOwner::is_derived(owner) {
            return Err(refuse(
                what,
                format!("target owner {owner:?} is not a derived owner (u_ + 26 base32 chars)"),
            ));
        }
        let target = RetirementTarget {
            owner: OwnerToken::parse(owner).map_err(grammar(what))?,
            actor: ActorToken::parse(actor).map_err(grammar(what))?,
            lifecycle_uid: LifecycleUid::parse(uid).map_err(grammar(what))?,
        };
        let op_id = map
            .get("opId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refuse(what, "requires a non-empty opId"))?;
        let op_id = OpId::parse(op_id).map_err(grammar(what))?;
        if op_id != managed_retirement_op_id(&target.lifecycle_uid)? {
            return Err(refuse(
                what,
                format!(
                    "opId must be the derived terminal operation id for lifecycle {}",
                    target.lifecycle_uid
                ),
            ));
        }
        Ok(PrepareRetirementRequest {
            envelope,
            target,
            op_id,
        })
    }
}

/// F97: a plane that owns no host storage refuses both managed-agent kinds with `unimplemented`
/// before anything else; any other kind is not this door's to refuse (`None`).
pub fn refuse_without_host_storage(kind: &str) -> Option<EpError> {
    (kind == ENROLLMENT_KIND || kind == PREPARE_RETIREMENT_KIND).then(|| {
        EpError::new(
            crate::ErrorCode::Unimplemented,
            format!(
                "{kind} must be handled by host platform interception: this plane owns no host \
                 storage (no actor ledger)"
            ),
        )
    })
}

/// The shared decision (reference §6.2): host space, then `supervise`, then (for prepare) the
/// target owner and op id, then the current registration at the serve epoch (F94).
fn authorize(
    cx: &mut Ctx<'_>,
    host: &ManagerHost,
    caller: &Supervisor,
    envelope: &ManagedEnvelope,
    kind_what: &str,
    door: &Door,
    extra: impl FnOnce() -> Result<(), EpError>,
) -> Result<(), Halt> {
    if envelope.manager.space != host.space {
        return Err(EpError::permission_denied(format!(
            "{kind_what} request names space {}, not host space {}",
            envelope.manager.space.as_str(),
            host.space.as_str()
        ))
        .into());
    }
    caller.require_supervise(kind_what)?;
    extra()?;
    let knock = Knock {
        envelope: &envelope.manager,
        owner: caller.owner(),
        account: None,
        epoch: Some(envelope.serve_epoch),
        proof: Presented::Current(&envelope.registration_proof),
    };
    check_registered(cx, door, host, &knock)?;
    Ok(())
}

/// Maps a ledger failure to the caller's error: a refusal is `permission-denied` (the envelope
/// or the row spaces forbid it), a broken row `internal`, an unreachable ledger `unavailable`.
fn ledger_error(outcome: ActorsOutcome, wanted: &str) -> EpError {
    match outcome {
        ActorsOutcome::Refused(why) => EpError::permission_denied(why),
        ActorsOutcome::Corrupt(why) => EpError::internal(why),
        ActorsOutcome::Unavailable(why) => EpError::unavailable(format!("actor ledger: {why}")),
        other => EpError::internal(format!(
            "the actor ledger answered {other:?} where {wanted} was due"
        )),
    }
}

// ---- Enrollment --------------------------------------------------------------------------------

/// The enrollment's answer (reference §6.3 item 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentResult {
    pub space: SpaceName,
    pub owner: OwnerToken,
    /// The request's (interactive) actor.
    pub actor: ActorToken,
    pub instance_id: InstanceId,
    pub manager_lifecycle_uid: LifecycleUid,
    pub request_id: RequestId,
    pub registration_proof: RegistrationProof,
    pub serve_epoch: ProcessEpoch,
    pub material: EnrollmentMaterial,
    /// `true` when this call wrote the row; `false` for a retry of an earlier enrollment.
    pub first: bool,
}

/// What the agent needs to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentMaterial {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub lifecycle_uid: LifecycleUid,
    pub sentinel_creds: String,
    pub subscribe: Vec<String>,
    pub allow_subscribe: Vec<String>,
    pub allow_publish: Vec<String>,
    pub agent_bearer_exchange_url: String,
}

impl EnrollmentResult {
    /// The wire result, keys in the reference's order.
    pub fn to_json(&self) -> String {
        let m = &self.material;
        let material = ObjectWriter::new()
            .string("owner", m.owner.as_str())
            .string("actor", m.actor.as_str())
            .string("lifecycleUid", m.lifecycle_uid.as_str())
            .string("sentinelCreds", &m.sentinel_creds)
            .strings("subscribe", m.subscribe.iter().map(String::as_str))
            .strings(
                "allowSubscribe",
                m.allow_subscribe.iter().map(String::as_str),
            )
            .strings("allowPublish", m.allow_publish.iter().map(String::as_str))
            .string("agentBearerExchangeUrl", &m.agent_bearer_exchange_url)
            .finish();
        ObjectWriter::new()
            .uint("v", 1)
            .string("kind", ENROLLMENT_KIND)
            .string("space", self.space.as_str())
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("instanceId", self.instance_id.as_str())
            .string("managerLifecycleUid", self.manager_lifecycle_uid.as_str())
            .string("requestId", self.request_id.as_str())
            .string("registrationProof", self.registration_proof.as_str())
            .uint("serveEpoch", self.serve_epoch.0)
            .raw("material", &material)
            .finish()
    }
}

/// Enrolls a managed agent (reference §6.3). Keeps F94 (authorized against the caller
/// instance's current open gate, serve principal, serve epoch and host-issued proof) and F95
/// (the uid is the host's: a retry with the same token hash gets the uid already enrolled, a
/// first enrollment gets one minted from `fresh_uid_entropy`, never from the request).
///
/// Steps after the decision: read the alias's managed row; another token hash is `conflict`
/// (the enrolled lifecycle must be retired first); the same hash is a retry, whose envelope is
/// re-walked because the spawner may have narrowed since. A first enrollment grants the row
/// with `parent = <owner>.<request actor>` (the ledger walks the envelope before writing). Then
/// durables are provisioned at the uid; if that fails on a first enrollment the row is revoked
/// at that uid and the footprint deprovisioned (cleanup failures are noted, the provisioning
/// error returned); a retry keeps its row, because the first answer may already have reached
/// the participant. Runs only under its alias lock (module docs).
#[derive(Debug, Clone)]
pub struct EnrollManagedAgent {
    pub host: ManagerHost,
    pub caller: Supervisor,
    pub request: EnrollmentRequest,
    /// Host entropy for a fresh lifecycle uid (used only when nothing is enrolled).
    pub fresh_uid_entropy: [u8; 20],
    /// Unix milliseconds, stamped as the row's `grantedAt`.
    pub now_ms: u64,
}

impl EnrollManagedAgent {
    /// The alias this enrollment must hold the lock of.
    pub fn alias(&self) -> Principal {
        Principal::new(
            self.caller.owner().clone(),
            self.request.target.actor.clone(),
        )
    }
}

impl AliasScript for EnrollManagedAgent {
    type Output = EnrollmentResult;

    fn alias(&self) -> Principal {
        EnrollManagedAgent::alias(self)
    }

    fn run_held(&self, cx: &mut Ctx<'_>, _: LockHeld<'_>) -> Result<EnrollmentResult, Halt> {
        let envelope = &self.request.envelope;
        let target = &self.request.target;
        authorize(
            cx,
            &self.host,
            &self.caller,
            envelope,
            "managed agent enrollment",
            &door::ENROLLMENT,
            || Ok(()),
        )?;
        let alias = self.alias();
        let held = match cx.actors(ActorsRequest::Find {
            space: RowSpace::Managed,
            principal: alias.clone(),
        })? {
            ActorsOutcome::Found(held) => held.map(|Held { row, .. }| row),
            other => return Err(ledger_error(other, "a managed row").into()),
        };
        let (row, first) = match held {
            Some(row) => {
                let uid = row.lifecycle_uid.clone().ok_or_else(|| {
                    EpError::internal(format!(
                        "managed row {} carries no lifecycle uid",
                        alias.key()
                    ))
                })?;
                if row.token_hash.as_ref() != Some(&target.token_hash) {
                    return Err(EpError::conflict(format!(
                        "managed agent {:?} is enrolled at lifecycle {uid}; prepare that \
                         lifecycle's retirement before enrolling a successor",
                        target.actor.as_str()
                    ))
                    .with_detail(serde_json::json!({"lifecycleUid": uid.as_str()}))
                    .into());
                }
                match cx.actors(ActorsRequest::CheckEnvelope {
                    row: row.clone(),
                    boundary: Boundary::Spawn,
                })? {
                    ActorsOutcome::Within => (row, false),
                    other => return Err(ledger_error(other, "an envelope verdict").into()),
                }
            }
            None => {
                let wanted = ActorRow {
                    owner: self.caller.owner().clone(),
                    actor: target.actor.clone(),
                    scope: target.capabilities.clone().unwrap_or_default(),
                    allow_subscribe: target.allow_subscribe.clone().unwrap_or_default(),
                    allow_publish: target.allow_publish.clone().unwrap_or_default(),
                    role: target.role.clone(),
                    parent: Some(Principal::new(
                        self.caller.owner().clone(),
                        envelope.manager.actor.clone(),
                    )),
                    label: target.label.clone(),
                    token_hash: Some(target.token_hash.clone()),
                    lifecycle_uid: Some(LifecycleUid::mint(self.fresh_uid_entropy)),
                    granted_at: iso8601_millis(self.now_ms),
                };
                match cx.actors(ActorsRequest::GrantManaged(wanted))? {
                    ActorsOutcome::Granted(row) => (row, true),
                    other => return Err(ledger_error(other, "a granted row").into()),
                }
            }
        };
        let uid = row
            .lifecycle_uid
            .clone()
            .ok_or_else(|| EpError::internal("the granted managed row carries no lifecycle uid"))?;
        let subscribe = target.subscribe.clone().unwrap_or_default();
        let provisioned = cx.durables(DurablesRequest::Provision {
            principal: alias.clone(),
            lifecycle_uid: uid.clone(),
            subscribe: subscribe.clone(),
            allow_subscribe: row.allow_subscribe.clone(),
            role: target.role.clone(),
        })?;
        if let DurablesOutcome::Failed(why) = provisioned {
            let mut error = EpError::unavailable(format!(
                "managed agent {:?} could not have its durables provisioned at lifecycle {uid}: \
                 {why}",
                target.actor.as_str()
            ));
            if first {
                error = roll_back(cx, &alias, &uid, error)?;
            } else {
                error = error.with_note(
                    "the enrolled row is kept (a retry keeps its grant); retry the enrollment",
                );
            }
            return Err(error.into());
        }
        Ok(EnrollmentResult {
            space: envelope.manager.space.clone(),
            owner: self.caller.owner().clone(),
            actor: envelope.manager.actor.clone(),
            instance_id: envelope.manager.instance_id.clone(),
            manager_lifecycle_uid: envelope.manager.manager_lifecycle_uid.clone(),
            request_id: envelope.manager.request_id.clone(),
            registration_proof: envelope.registration_proof.clone(),
            serve_epoch: envelope.serve_epoch,
            material: EnrollmentMaterial {
                owner: self.caller.owner().clone(),
                actor: target.actor.clone(),
                lifecycle_uid: uid,
                sentinel_creds: self.host.agents.sentinel_creds.clone(),
                subscribe,
                allow_subscribe: row.allow_subscribe,
                allow_publish: row.allow_publish,
                agent_bearer_exchange_url: self.host.agents.agent_bearer_exchange_url.clone(),
            },
            first,
        })
    }
}

/// Undoes a first enrollment whose provisioning failed, footprint before grant (as retirement
/// does): deprovision whatever the failed attempt left, then revoke the row at exactly that uid.
/// In this order a crash between the two leaves a row a same-hash retry or a retirement still
/// finds, never a footprint nothing names; for the same reason a failed deprovision keeps the
/// row. A cleanup failure is noted on the original error, never substituted for it.
fn roll_back(
    cx: &mut Ctx<'_>,
    alias: &Principal,
    uid: &LifecycleUid,
    error: EpError,
) -> Result<EpError, Halt> {
    if let DurablesOutcome::Failed(why) = cx.durables(DurablesRequest::Deprovision {
        principal: alias.clone(),
        lifecycle_uid: uid.clone(),
        member_channels: Vec::new(),
    })? {
        return Ok(error.with_note(format!(
            "deprovisioning the partial footprint failed too ({why}); the row at {uid} is kept so \
             a retry with the same token hash or a retirement can finish it"
        )));
    }
    Ok(
        match cx.actors(ActorsRequest::RevokeManagedAt {
            principal: alias.clone(),
            lifecycle_uid: uid.clone(),
        })? {
            ActorsOutcome::Revoked(_) => error,
            other => error.with_note(format!(
            "rolling back the grant failed too ({}); the row at {uid} is left for a retry with \
             the same token hash",
            ledger_error(other, "a revocation").message
        )),
        },
    )
}

// ---- Retirement preparation ------------------------------------------------------------------

/// The preparation's answer (reference §6.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareRetirementResult {
    pub space: SpaceName,
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub instance_id: InstanceId,
    pub manager_lifecycle_uid: LifecycleUid,
    pub request_id: RequestId,
    pub target: RetirementTarget,
    pub op_id: OpId,
    /// Whether a row at the target uid was released by this call (false: nothing to release).
    pub released: bool,
}

impl PrepareRetirementResult {
    /// The wire result, keys in the reference's order (`prepared` is always true).
    pub fn to_json(&self) -> String {
        let target = ObjectWriter::new()
            .string("owner", self.target.owner.as_str())
            .string("actor", self.target.actor.as_str())
            .string("lifecycleUid", self.target.lifecycle_uid.as_str())
            .finish();
        ObjectWriter::new()
            .uint("v", 1)
            .string("kind", PREPARE_RETIREMENT_KIND)
            .string("space", self.space.as_str())
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("instanceId", self.instance_id.as_str())
            .string("managerLifecycleUid", self.manager_lifecycle_uid.as_str())
            .string("requestId", self.request_id.as_str())
            .raw("target", &target)
            .string("opId", self.op_id.as_str())
            .raw("prepared", "true")
            .finish()
    }
}

/// Prepares a managed lifecycle's terminal retirement (reference §6.4). Keeps F94 (same
/// current-registration decision as enrollment) and F96 (target owner = authenticated owner;
/// the op id is re-derived from the target uid). If the alias's managed row still names the
/// target uid, its broker footprint is deprovisioned first (member channels = the row's concrete
/// `allowSubscribe` entries) and only then the row revoked at that uid — footprint before grant,
/// so a retry still knows what to purge. A row at another uid (a successor) or none is a no-op.
/// Runs only under its alias lock (module docs).
#[derive(Debug, Clone)]
pub struct PrepareManagedRetirement {
    pub host: ManagerHost,
    pub caller: Supervisor,
    pub request: PrepareRetirementRequest,
}

impl PrepareManagedRetirement {
    /// The alias this preparation must hold the lock of.
    pub fn alias(&self) -> Principal {
        Principal::new(
            self.request.target.owner.clone(),
            self.request.target.actor.clone(),
        )
    }
}

impl AliasScript for PrepareManagedRetirement {
    type Output = PrepareRetirementResult;

    fn alias(&self) -> Principal {
        PrepareManagedRetirement::alias(self)
    }

    fn run_held(&self, cx: &mut Ctx<'_>, _: LockHeld<'_>) -> Result<PrepareRetirementResult, Halt> {
        let request = &self.request;
        let target = &request.target;
        let what = "managed agent prepare-retirement";
        authorize(
            cx,
            &self.host,
            &self.caller,
            &request.envelope,
            what,
            &door::PREPARE_RETIREMENT,
            || {
                if target.owner != *self.caller.owner() {
                    return Err(EpError::permission_denied(format!(
                        "{what} target owner {} does not match authenticated owner {}",
                        target.owner, self.caller.owner
                    )));
                }
                Ok(())
            },
        )?;
        let alias = self.alias();
        let held = match cx.actors(ActorsRequest::Find {
            space: RowSpace::Managed,
            principal: alias.clone(),
        })? {
            ActorsOutcome::Found(held) => held.map(|Held { row, .. }| row),
            other => return Err(ledger_error(other, "a managed row").into()),
        };
        let at_target =
            held.filter(|row| row.lifecycle_uid.as_ref() == Some(&target.lifecycle_uid));
        let released = match at_target {
            None => false,
            Some(row) => {
                let member_channels = row
                    .allow_subscribe
                    .iter()
                    .filter(|c| !c.split('.').any(|s| s == "*" || s == ">"))
                    .cloned()
                    .collect();
                if let DurablesOutcome::Failed(why) = cx.durables(DurablesRequest::Deprovision {
                    principal: alias.clone(),
                    lifecycle_uid: target.lifecycle_uid.clone(),
                    member_channels,
                })? {
                    return Err(EpError::unavailable(format!(
                        "{what} could not deprovision the footprint of lifecycle {}: {why}; the \
                         grant is kept so a retry knows what to purge",
                        target.lifecycle_uid
                    ))
                    .into());
                }
                match cx.actors(ActorsRequest::RevokeManagedAt {
                    principal: alias,
                    lifecycle_uid: target.lifecycle_uid.clone(),
                })? {
                    ActorsOutcome::Revoked(removed) => removed,
                    other => return Err(ledger_error(other, "a revocation").into()),
                }
            }
        };
        let e = &request.envelope.manager;
        Ok(PrepareRetirementResult {
            space: e.space.clone(),
            owner: self.caller.owner().clone(),
            actor: e.actor.clone(),
            instance_id: e.instance_id.clone(),
            manager_lifecycle_uid: e.manager_lifecycle_uid.clone(),
            request_id: e.request_id.clone(),
            target: target.clone(),
            op_id: request.op_id.clone(),
            released,
        })
    }
}
