//! The platform control door (reference §7.3; SPEC 13.1, 13.6, 13.9): one in-process call on a
//! hosted context's handle that issues the manager-service request family for the one control
//! manager the platform assigned to the context's account, under the `p_` owner derived for that
//! account ([`crate::names::platform_control_owner`]). It has no route, no capability and no
//! IdP input, and adds no request kind: after its checks the inner request goes through the same
//! parser and operations the human route uses, with the assignment in place of `supervise`
//! ([`Supervisor::platform`]). Every refusal comes before any write.
//!
//! The check order is the reference's: the closed envelope ([`PlatformControlRequest::parse`]);
//! the envelope's space and account against the context's; the assignment, read fresh by the
//! platform for this call (an unreadable one is `unavailable`, none or a revoked one
//! `permission-denied`); its account and revision against the envelope, its instance and
//! lifecycle against the inner request; the inner space and account; the assigned instance's
//! gate, when it has one, held by this owner's serve principal; and for `prepare` and
//! `activate`, a predecessor the assignment names neither registered nor frozen.

use serde_json::{Map, Value};

use crate::error::{EpError, ErrorCode};
use crate::gate::GateState;
use crate::issuance::{observe_gate, GateRef};
use crate::machine::{Ctx, Halt, Script};
use crate::manager::tokens::AccountKey;
use crate::manager::{AssignmentState, ManagerActors, PlatformAssignment, Supervisor};
use crate::names::{keys, ActorToken, EndpointName, InstanceId, OwnerToken, Principal, SpaceName};
use crate::service::{read_record, RecordRead};
use crate::wire::safe_uint;

pub const PLATFORM_CONTROL_KIND: &str = "platform-control-authority";

/// The envelope's members; any other is refused (the protocol is closed).
const ENVELOPE_KEYS: [&str; 6] = [
    "v",
    "kind",
    "space",
    "accountPublicKey",
    "assignmentRevision",
    "request",
];

/// The inner kinds the door serves: the manager-service family a human's route serves.
const INNER_KINDS: [&str; 7] = [
    "manager-service-authority",
    "manager-service-maintenance",
    "manager-retained-agent-validation",
    "manager-goal-index-scan",
    "manager-admin-authorization",
    "manager-run-admission",
    "manager-run-attempt",
];

/// The managed-agent kinds: the platform decides them on its own route.
const MANAGED_AGENT_KINDS: [&str; 4] = [
    "manager-managed-agent-enrollment",
    "manager-managed-agent-prepare-retirement",
    "manager-managed-agent-runtime-create",
    "manager-managed-agent-runtime-status",
];

/// The exact members of an inner `session` object.
const SESSION_KEYS: [&str; 5] = ["endpoint", "epoch", "exp", "id", "sessionId"];

/// The one envelope constant an inner request's `actor` carries; it names no principal.
const INNER_ACTOR: &str = "cli";

fn bad_request(what: &str) -> EpError {
    EpError::bad_request(format!("platform control request {what}"))
}

fn denied(why: impl Into<String>) -> EpError {
    EpError::permission_denied(why)
}

/// A parsed platform control envelope and the inner coordinates its checks read.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformControlRequest {
    pub space: String,
    pub account_public_key: AccountKey,
    pub assignment_revision: u64,
    /// The inner request, parsed later by the human route's own parser.
    pub request: Value,
    kind: String,
    instance_id: String,
    manager_lifecycle_uid: String,
}

impl PlatformControlRequest {
    /// The closed envelope: `{v: 1, kind: "platform-control-authority", space,
    /// accountPublicKey, assignmentRevision, request}`, an inner kind of the served family
    /// (a managed-agent kind is `unimplemented`), an inner `actor` of `"cli"`, string
    /// `instanceId` and `managerLifecycleUid`, and an inner `session` of exactly its five
    /// members. Everything else is `bad-request`.
    pub fn parse(raw: &Value) -> Result<PlatformControlRequest, EpError> {
        let o = raw
            .as_object()
            .ok_or_else(|| bad_request("must be an object"))?;
        if let Some(key) = o.keys().find(|k| !ENVELOPE_KEYS.contains(&k.as_str())) {
            return Err(bad_request(&format!(
                "carries unknown field {} (the protocol is closed)",
                Value::from(key.as_str())
            )));
        }
        if o.get("v") != Some(&Value::from(1)) || text(o, "kind") != Some(PLATFORM_CONTROL_KIND) {
            return Err(bad_request(
                "must carry { v: 1, kind: \"platform-control-authority\" }",
            ));
        }
        let space = text(o, "space")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad_request("requires a space"))?;
        let account_public_key = text(o, "accountPublicKey")
            .and_then(AccountKey::parse)
            .ok_or_else(|| bad_request("requires an account public key"))?;
        let assignment_revision = o
            .get("assignmentRevision")
            .and_then(safe_uint)
            .ok_or_else(|| bad_request("requires a non-negative integer assignmentRevision"))?;
        let inner = o
            .get("request")
            .and_then(Value::as_object)
            .ok_or_else(|| bad_request("requires an inner request object"))?;
        let kind = text(inner, "kind").unwrap_or_default();
        if MANAGED_AGENT_KINDS.contains(&kind) {
            return Err(EpError::new(
                ErrorCode::Unimplemented,
                "managed agent kinds are decided by the platform on its own route, not by the \
                 platform control door",
            ));
        }
        if !INNER_KINDS.contains(&kind) {
            return Err(bad_request(&format!(
                "carries unknown inner kind {}",
                inner.get("kind").cloned().unwrap_or(Value::Null)
            )));
        }
        if text(inner, "actor") != Some(INNER_ACTOR) {
            return Err(bad_request(
                "inner request actor must be the envelope constant \"cli\"",
            ));
        }
        let [instance_id, manager_lifecycle_uid] = ["instanceId", "managerLifecycleUid"]
            .map(|key| text(inner, key).map(str::to_owned).ok_or(key));
        let instance_id =
            instance_id.map_err(|key| bad_request(&format!("inner request requires {key}")))?;
        let manager_lifecycle_uid = manager_lifecycle_uid
            .map_err(|key| bad_request(&format!("inner request requires {key}")))?;
        if let Some(session) = inner.get("session") {
            let exact = session.as_object().is_some_and(|s| {
                let mut keys: Vec<&str> = s.keys().map(String::as_str).collect();
                keys.sort_unstable();
                keys == SESSION_KEYS
            });
            if !exact {
                return Err(bad_request(
                    "inner session must be exactly { id, endpoint, sessionId, epoch, exp } (the \
                     protocol is closed)",
                ));
            }
        }
        Ok(PlatformControlRequest {
            space: space.to_owned(),
            account_public_key,
            assignment_revision,
            kind: kind.to_owned(),
            instance_id,
            manager_lifecycle_uid,
            request: Value::Object(inner.clone()),
        })
    }

    /// The envelope names the context's own space and account (`permission-denied` otherwise):
    /// one context never issues for another account. Checked before the assignment is read.
    pub fn check_context(&self, space: &SpaceName, account: &AccountKey) -> Result<(), EpError> {
        if self.space != space.as_str() || self.account_public_key != *account {
            return Err(denied(
                "platform control request names another space or account than this authority \
                 context",
            ));
        }
        Ok(())
    }

    /// The inner request's kind, as the audit line names it.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    fn inner_text(&self, key: &str) -> Option<&str> {
        self.request.get(key).and_then(Value::as_str)
    }
}

fn text<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str)
}

/// The door's checks for one call (see the module doc). Its output is the holder the inner
/// request's operation runs under. KV round trips: 1 (the assigned instance's gate); a `prepare`
/// or `activate` with a predecessor adds 2.
#[derive(Debug, Clone)]
pub struct AuthorizePlatformControl {
    /// The context's own space and account.
    pub space: SpaceName,
    pub account: AccountKey,
    /// The platform owner derived for the context's account.
    pub owner: OwnerToken,
    pub request: PlatformControlRequest,
    /// What the platform's observer answered for this call: its error, no row, or the row.
    pub assignment: Result<Option<PlatformAssignment>, String>,
}

impl Script for AuthorizePlatformControl {
    type Output = Supervisor;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Supervisor, Halt> {
        let r = &self.request;
        r.check_context(&self.space, &self.account)?;
        let assignment = self.current_assignment()?;
        if assignment.space != self.space
            || assignment.account_public_key != self.account
            || assignment.assignment_revision != r.assignment_revision
        {
            return Err(denied(
                "platform control request does not match the current assignment's account or \
                 revision",
            )
            .into());
        }
        if r.instance_id != assignment.instance_id.as_str()
            || r.manager_lifecycle_uid != assignment.lifecycle_uid.as_str()
        {
            return Err(denied(
                "platform control request names an instance or lifecycle the current assignment \
                 does not",
            )
            .into());
        }
        let inner_account = r.inner_text("accountPublicKey");
        if r.inner_text("space") != Some(self.space.as_str())
            || inner_account.is_some_and(|a| a != self.account.as_str())
        {
            return Err(
                denied("platform control inner request names another space or account").into(),
            );
        }
        self.require_own_instance(cx, &assignment.instance_id)?;
        let operation = r.inner_text("operation");
        if r.kind == "manager-service-authority"
            && matches!(operation, Some("prepare" | "activate"))
        {
            if let Some(predecessor) = &assignment.predecessor_instance_id {
                require_stopped(cx, &self.space, predecessor)?;
            }
        }
        Ok(Supervisor::platform(self.owner.clone(), assignment)?)
    }
}

impl AuthorizePlatformControl {
    /// The account's assignment as the platform read it for this call.
    fn current_assignment(&self) -> Result<PlatformAssignment, EpError> {
        match &self.assignment {
            Err(why) => Err(EpError::unavailable(format!(
                "platform control assignment is unreadable: {why}"
            ))),
            Ok(Some(a)) if a.state == AssignmentState::Assigned => Ok(a.clone()),
            Ok(_) => Err(denied(
                "platform control has no current assignment for this account",
            )),
        }
    }

    /// The assigned instance's gate, when it has one, records this owner's serve principal: the
    /// door never acts for an instance another owner registered (F28).
    fn require_own_instance(&self, cx: &mut Ctx<'_>, instance: &InstanceId) -> Result<(), Halt> {
        let Some(observed) = observe_gate(cx, &manager_gate(&self.space, instance)?)? else {
            return Ok(());
        };
        let serve = ActorToken::parse(&ManagerActors::for_instance(instance).serve)
            .map_err(EpError::stored)?;
        if *observed.gate.principal() != Principal::new(self.owner.clone(), serve) {
            return Err(denied(format!(
                "platform control instance {instance} is registered to another principal"
            ))
            .into());
        }
        Ok(())
    }
}

fn manager_gate(space: &SpaceName, instance: &InstanceId) -> Result<GateRef, EpError> {
    let manager = EndpointName::parse("manager").map_err(EpError::stored)?;
    Ok(GateRef::new(space.clone(), manager, instance.clone()))
}

/// A predecessor the assignment names must have stopped through its own path: neither its
/// `svc.manager` registration current nor its gate frozen (`failed-precondition`). Read-only:
/// the door never probes, freezes, evicts, revokes or deregisters it.
fn require_stopped(
    cx: &mut Ctx<'_>,
    space: &SpaceName,
    predecessor: &InstanceId,
) -> Result<(), Halt> {
    let manager = EndpointName::parse("manager").map_err(EpError::stored)?;
    let registered = matches!(
        read_record(cx, &keys::svc_spec(&manager, predecessor))?,
        RecordRead::Live { .. }
    );
    let frozen = observe_gate(cx, &manager_gate(space, predecessor)?)?
        .is_some_and(|o| o.gate.state() == GateState::Frozen);
    if registered || frozen {
        return Err(EpError::failed_precondition(format!(
            "platform control predecessor {predecessor} is still registered or frozen; it must \
             stop through its own path first"
        ))
        .into());
    }
    Ok(())
}
