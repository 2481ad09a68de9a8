//! The verify-enrollment decision (reference §3.8, §6.2): a host platform that keeps its own
//! database and durables authenticates the human on its own route, then asks the plane only
//! whether the managed-agent request may proceed. The plane holds the manager gates and the
//! proof secret, so the decision is its own; it mints nothing, writes nothing, and no secret
//! crosses back.

use serde_json::{json, Value};

use crate::actors::authorize::authorize_human_grant;
use crate::error::EpError;
use crate::machine::{Ctx, Halt, Script};
use crate::manager::door::{self, Door};
use crate::manager::{ManagerHost, Supervisor};
use crate::names::{ActorToken, DerivedOwner, SpaceName};
use crate::wire::unknown_member;

use super::{
    authorize, authorize_prepare, target_owned, EnrollmentRequest, PrepareRetirementRequest,
    RuntimeRequest, ENROLLMENT_KIND, PREPARE_RETIREMENT_KIND, RUNTIME_CREATE_KIND,
    RUNTIME_STATUS_KIND,
};

/// One of the four managed-agent requests the door decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyRequest {
    Enrollment(EnrollmentRequest),
    PrepareRetirement(PrepareRetirementRequest),
    Runtime(RuntimeRequest),
}

impl VerifyRequest {
    /// The kinds the door answers.
    pub const KINDS: [&'static str; 4] = [
        ENROLLMENT_KIND,
        PREPARE_RETIREMENT_KIND,
        RUNTIME_CREATE_KIND,
        RUNTIME_STATUS_KIND,
    ];

    /// Parses `raw` by its `kind` with that kind's closed parser; any other kind is
    /// `bad-request` naming the four.
    pub fn parse(raw: &Value) -> Result<VerifyRequest, EpError> {
        match raw.get("kind").and_then(Value::as_str) {
            Some(ENROLLMENT_KIND) => EnrollmentRequest::parse(raw).map(VerifyRequest::Enrollment),
            Some(PREPARE_RETIREMENT_KIND) => {
                PrepareRetirementRequest::parse(raw).map(VerifyRequest::PrepareRetirement)
            }
            Some(RUNTIME_CREATE_KIND) => {
                RuntimeRequest::parse(raw, RUNTIME_CREATE_KIND).map(VerifyRequest::Runtime)
            }
            Some(RUNTIME_STATUS_KIND) => {
                RuntimeRequest::parse(raw, RUNTIME_STATUS_KIND).map(VerifyRequest::Runtime)
            }
            _ => Err(EpError::bad_request(format!(
                "managed agent enrollment verification needs request.kind to be one of {}",
                Self::KINDS.join(", ")
            ))),
        }
    }
}

/// Decides one request for the authenticated `caller` (its scope read by the door from this
/// plane's own ledger, never from the body), as the operation itself would before its first
/// write (reference §6.2): host space, `supervise`, for the targeted kinds the target owner,
/// then the manager's current registration at the serve epoch with its proof (F94, F96). KV
/// round trips: 1 (the manager gate).
///
/// Answers `{authorized: true, owner, actor, instanceId, serveEpoch}` for enrollment (`actor`
/// the agent to enroll) and prepare-retirement (`actor` the target's), and `{authorized: true,
/// owner, instanceId, actor, target}` for the runtime kinds.
#[derive(Debug, Clone)]
pub struct VerifyEnrollment {
    pub host: ManagerHost,
    pub caller: Supervisor,
    pub request: VerifyRequest,
}

impl Script for VerifyEnrollment {
    type Output = Value;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Value, Halt> {
        let (host, caller) = (&self.host, &self.caller);
        let owner = caller.owner().as_str();
        match &self.request {
            VerifyRequest::Enrollment(request) => {
                authorize(
                    cx,
                    host,
                    caller,
                    &request.envelope,
                    "managed agent enrollment",
                    &door::ENROLLMENT,
                    || Ok(()),
                )?;
                let e = &request.envelope;
                Ok(json!({
                    "authorized": true, "owner": owner, "actor": request.target.actor.as_str(),
                    "instanceId": e.manager.instance_id.as_str(), "serveEpoch": e.serve_epoch.0,
                }))
            }
            VerifyRequest::PrepareRetirement(request) => {
                authorize_prepare(cx, host, caller, request)?;
                let e = &request.envelope;
                Ok(json!({
                    "authorized": true, "owner": owner, "actor": request.target.actor.as_str(),
                    "instanceId": e.manager.instance_id.as_str(), "serveEpoch": e.serve_epoch.0,
                }))
            }
            VerifyRequest::Runtime(request) => {
                let door: &Door = if request.kind == RUNTIME_CREATE_KIND {
                    &door::RUNTIME_CREATE
                } else {
                    &door::RUNTIME_STATUS
                };
                authorize(cx, host, caller, &request.envelope, door.name, door, || {
                    target_owned(door.name, &request.target, caller)
                })?;
                let (e, t) = (&request.envelope, &request.target);
                Ok(json!({
                    "authorized": true, "owner": owner,
                    "instanceId": e.manager.instance_id.as_str(),
                    "actor": e.manager.actor.as_str(),
                    "target": {"owner": t.owner.as_str(), "actor": t.actor.as_str(),
                               "lifecycleUid": t.lifecycle_uid.as_str()},
                }))
            }
        }
    }
}

/// The loopback verify door's body, closed to `{owner, request}`: the owner the host platform
/// authenticated, the request's actor and the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyAsked {
    pub owner: DerivedOwner,
    pub actor: ActorToken,
    pub request: VerifyRequest,
}

impl VerifyAsked {
    /// Every shape or grammar failure of the body is one sentence naming it (a 400).
    pub fn parse(body: &Value) -> Result<VerifyAsked, String> {
        let Value::Object(map) = body else {
            return Err("the body must be an object {owner, request}".to_owned());
        };
        if let Some(extra) = unknown_member(map, &["owner", "request"]) {
            return Err(format!("unknown field {extra:?}"));
        }
        let owner = map
            .get("owner")
            .and_then(Value::as_str)
            .ok_or("owner must be a string")?;
        let owner = DerivedOwner::parse(owner).map_err(|e| e.message)?;
        let request = map
            .get("request")
            .filter(|r| r.is_object())
            .ok_or("request must be an object")?;
        let actor = request
            .get("actor")
            .and_then(Value::as_str)
            .ok_or("request.actor must be a string")?;
        let actor = ActorToken::parse(actor).map_err(|e| e.message)?;
        let request = VerifyRequest::parse(request).map_err(|e| e.message)?;
        Ok(VerifyAsked {
            owner,
            actor,
            request,
        })
    }

    /// Who asked, for the audit line.
    pub fn caller(&self) -> String {
        format!("{}.{}", self.owner, self.actor)
    }
}

/// The verify door's decision: the caller's interactive grant read fresh from this plane's
/// ledger (its scope is the caller's, never the body's), then [`VerifyEnrollment`].
#[derive(Debug, Clone)]
pub struct VerifyAtDoor {
    pub space: SpaceName,
    pub host: ManagerHost,
    pub asked: VerifyAsked,
}

impl Script for VerifyAtDoor {
    type Output = Value;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Value, Halt> {
        let a = &self.asked;
        let grant = authorize_human_grant(cx, &self.space, &a.owner, &a.actor, None)?;
        let decision = cx.call(&VerifyEnrollment {
            host: self.host.clone(),
            caller: Supervisor::human(a.owner.clone(), grant.row.scope),
            request: a.request.clone(),
        })?;
        Ok(Value::clone(&decision))
    }
}
