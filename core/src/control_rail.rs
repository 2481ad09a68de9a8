//! The auth control rail's one command, `retire-lifecycle` (reference-auth-service §2.5 step 9,
//! the reference's `auth-admin` listener): a remote manager's despawn asks the plane to retire
//! one managed incarnation, over the `auth` endpoint's class rail, with the
//! `retirement-requester` credential the manager route issued for exactly that target.
//!
//! Who is asking is broker-enforced, never read from the body: the caller triple and the target
//! triple ride the request subject, and the requester's only publish row names both
//! ([`crate::profiles::retirement_requester`], F4). At serve time the plane re-checks, fresh and
//! leader-served, that the caller's manager instance still holds a current serve registration
//! (its `epgate` present, not retired, recording the caller's principal, at the declared epoch:
//! F94), then applies the outcome table below. The barrier itself is [`RetireLifecycle`] under
//! the lifecycle's one retirement op id (F49); the plane runs one flight per op id shared with
//! the loopback managed-retire door.
//!
//! Every refusal says what happened, why, and what to run next, in the operator's words: a
//! despawn that was refused changed nothing.

use serde_json::{json, Value};

use crate::endpoint_rail::TargetedRequest;
use crate::error::{EpError, ErrorCode};
use crate::gate::{GateState, ProcessEpoch};
use crate::issuance::GateRef;
use crate::machine::{Ctx, Halt, Script};
use crate::manager::door::{check_gate, Door, DoorWording, GateKnock, GateRule};
use crate::names::{EndpointName, InstanceId, OpId, Principal, SpaceName};
use crate::profiles::RailCaller;
use crate::wire::safe_uint;

use crate::lifecycle::{
    managed_retirement_op_id, read_gate, read_head, HeadState, RetireLifecycle,
};

/// One `retire-lifecycle` call as the subject and the body carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetireCall {
    pub space: SpaceName,
    /// The requesting manager's triple, from the subject (broker-enforced).
    pub caller: RailCaller,
    /// The incarnation to retire, from the subject's `handle` triple (broker-enforced).
    pub target: RailCaller,
    /// The call's nonce, echoed on the reply subject.
    pub nonce: String,
    /// The requester's stable op id: the target's one retirement op id (F49).
    pub op_id: OpId,
    /// The caller's manager instance and the epoch it registered at.
    pub serve_endpoint: EndpointName,
    pub serve_instance: InstanceId,
    pub serve_epoch: ProcessEpoch,
}

/// The input schema's members (`additionalProperties: false`).
const ARGS: [&str; 4] = ["opId", "serveEndpoint", "serveInstanceId", "serveEpoch"];

impl RetireCall {
    /// The call a checked request makes: `args` validated against the command's closed input
    /// schema before anything is read (§13.7; `bad-request` naming the member).
    pub fn from_request(space: &SpaceName, request: &TargetedRequest) -> Result<Self, EpError> {
        let Value::Object(args) = &request.args else {
            return Err(EpError::bad_request(
                "retire-lifecycle args must be {opId, serveEndpoint, serveInstanceId, serveEpoch}",
            ));
        };
        if let Some(extra) = args.keys().find(|k| !ARGS.contains(&k.as_str())) {
            return Err(EpError::bad_request(format!(
                "retire-lifecycle args carry the unknown member {extra:?}"
            )));
        }
        let text = |k: &str| {
            args.get(k).and_then(Value::as_str).ok_or_else(|| {
                EpError::bad_request(format!("retire-lifecycle args.{k} must be a string"))
            })
        };
        let serve_epoch = args.get("serveEpoch").and_then(safe_uint).ok_or_else(|| {
            EpError::bad_request("retire-lifecycle args.serveEpoch must be a non-negative integer")
        })?;
        let call = RetireCall {
            space: space.clone(),
            caller: request.subject.caller.clone(),
            target: request.subject.target.clone(),
            nonce: request.subject.nonce.clone(),
            op_id: OpId::parse(text("opId")?).map_err(as_bad_request)?,
            serve_endpoint: EndpointName::parse(text("serveEndpoint")?).map_err(as_bad_request)?,
            serve_instance: InstanceId::parse(text("serveInstanceId")?).map_err(as_bad_request)?,
            serve_epoch: ProcessEpoch(serve_epoch),
        };
        check_op_id(&call.target, &call.op_id)?;
        Ok(call)
    }

    /// The command's output (its closed output schema): `{retired, lifecycleUid, opId,
    /// evictedPrincipals}`.
    pub fn output(&self, evicted: &[Principal]) -> Value {
        json!({
            "retired": true,
            "lifecycleUid": self.target.uid.as_str(),
            "opId": self.op_id.as_str(),
            "evictedPrincipals": evicted.iter().map(Principal::key).collect::<Vec<_>>(),
        })
    }

    /// The barrier this call runs once admitted.
    pub fn barrier(&self) -> RetireLifecycle {
        RetireLifecycle {
            owner: self.target.owner.clone(),
            actor: self.target.actor.clone(),
            lifecycle_uid: self.target.uid.clone(),
            op_id: self.op_id.clone(),
            guard: None,
        }
    }

    fn alias(&self) -> String {
        format!("{}/{}", self.target.owner, self.target.actor)
    }
}

/// Checks that `op_id` is the target's one retirement op id: a despawn retried any number of
/// times resumes one operation, and no caller can run a second one under a name of its choice
/// (F49). Needs no read.
pub fn check_op_id(target: &RailCaller, op_id: &OpId) -> Result<(), EpError> {
    let expected = managed_retirement_op_id(&target.uid)?;
    if *op_id != expected {
        return Err(EpError::bad_request(format!(
            "retire-lifecycle names operation {op_id} for lifecycle {}, whose one retirement \
             operation is {expected} (F49); nothing was retired",
            target.uid
        )));
    }
    Ok(())
}

/// What the serve-time check decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RailAdmission {
    /// The target is retired at this uid already: success, nothing to run.
    AlreadyRetired,
    /// Run the barrier (create or resume).
    Retire,
}

/// The serve-time check of one call, in order, every read leader-served (F6, F7):
/// 1. the caller's `epgate.<serveEndpoint>.<serveInstanceId>` is present and not retired
///    (`failed-precondition`), records the caller's principal (`permission-denied`) and sits at
///    the declared epoch (`conflict`: a superseded manager, F94);
/// 2. the target's head exists (`failed-precondition`), is retired at this uid
///    ([`RailAdmission::AlreadyRetired`]) or is at this uid (`conflict`: a stale trigger);
/// 3. the target's gate is not held (frozen, or retired ahead of its head) by another
///    operation (`conflict`).
///
/// Writes nothing: a refused despawn is a full no-op.
#[derive(Debug, Clone)]
pub struct AdmitRetireCall {
    pub call: RetireCall,
}

impl Script for AdmitRetireCall {
    type Output = RailAdmission;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<RailAdmission, Halt> {
        let call = &self.call;
        check_op_id(&call.target, &call.op_id)?;
        let serve = GateRef::new(
            call.space.clone(),
            call.serve_endpoint.clone(),
            call.serve_instance.clone(),
        );
        let caller = Principal::new(call.caller.owner.clone(), call.caller.actor.clone());
        let alias = call.alias();
        check_gate(
            cx,
            &RAIL_CALLER,
            &GateKnock {
                gate: &serve,
                principal: &caller,
                epoch: Some(call.serve_epoch),
                says: &[("space", &call.space), ("alias", &alias)],
            },
        )?;
        let uid = &call.target.uid;
        let Some(head) = read_head(cx, &call.target.owner, &call.target.actor)? else {
            return Err(EpError::failed_precondition(format!(
                "no lifecycle exists for \"{}\"; there is nothing to retire",
                call.alias()
            ))
            .into());
        };
        if head.row.lifecycle_uid() == uid && head.row.state() == HeadState::Retired {
            return Ok(RailAdmission::AlreadyRetired);
        }
        if head.row.lifecycle_uid() != uid {
            return Err(EpError::conflict(format!(
                "the despawn names a stale incarnation of \"{}\" ({uid}; current is {}); \
                 nothing was retired. NEXT: refresh the agent list and retry against the \
                 current incarnation",
                call.alias(),
                head.row.lifecycle_uid()
            ))
            .into());
        }
        if let Some(gate) = read_gate(cx, uid)? {
            // Frozen by another op, or retired by one whose head terminal has not landed yet:
            // either way that operation holds the lifecycle, not this despawn.
            let held = matches!(gate.row.state(), GateState::Frozen | GateState::Retired);
            if let Some(op) = gate.row.op().filter(|op| held && *op.op_id() != call.op_id) {
                return Err(EpError::conflict(format!(
                    "another operation ({} {}) already holds \"{}\"; this despawn did not start \
                     a second one. NEXT: wait for that operation to finish (or its resume on \
                     the next auth-service start), then retry",
                    op.kind().as_str(),
                    op.op_id(),
                    call.alias()
                ))
                .into());
            }
        }
        Ok(RailAdmission::Retire)
    }
}

/// The rail's caller check: the requesting manager's serve registration, present and not
/// retired (a manager mid-restart may still despawn), recording the requester, at the epoch it
/// declares. Every refusal says the despawn was a full no-op and what to run next.
const RAIL_CALLER: Door = Door {
    name: "retire-lifecycle",
    gate: GateRule::NotRetired,
    wording: &DoorWording {
        // The rail's requests name no account: the host binding is never checked.
        host_binding: "{door} is bound to the host-assigned space",
        no_gate: "no manager instance currently holds a serve registration for \"{space}\" \
                  (instance {instance} is {state}), so nothing may retire agents. The despawn \
                  of \"{alias}\" was a FULL no-op - the agent is unchanged and still running. \
                  NEXT: start or recover the manager (`cotal supervise`), then retry the despawn",
        foreign_gate: "the serve registration of manager instance {instance} belongs to \
                       {principal}, not the requester {serve}, so this despawn of \"{alias}\" \
                       was REFUSED as a FULL no-op - the agent is unchanged and still running. \
                       NEXT: retry the despawn from the manager that registered it",
        stale_epoch: "the requesting manager instance {instance} was SUPERSEDED (it registered \
                      at epoch {epoch}, the current serve grant is epoch {current}), so this \
                      despawn of \"{alias}\" was REFUSED as a FULL no-op - the agent is \
                      unchanged and still running, nothing was torn down. NEXT: recover the \
                      manager (`cotal supervise`), then retry the despawn under the current \
                      serving instance",
        // The rail presents no registration proof: the broker-enforced subject is the proof.
        bad_proof: "{door} presents no registration proof",
    },
};

/// A grammar refusal of an argument is the caller's bad request, whatever code the grammar uses.
fn as_bad_request(e: EpError) -> EpError {
    EpError::new(ErrorCode::BadRequest, e.message)
}
