//! The request kinds `POST /manager-service-authority` serves or refuses (reference §3.7), as one
//! sum type: the route's kind table lives here, not in the adapter.
//!
//! It sits above `manager`, `enrollment` and `run` (each of which builds on `manager`'s envelope
//! and host), so no module below it imports it back.
//!
//! The reference's order is kept by parsing in two steps: [`ManagerServiceRequest::actor`] before
//! the caller's grant is read, and [`ManagerServiceRequest::parse`] (the kind and its body) after.

use serde_json::Value;

use crate::enrollment::{
    require_public_exchange, EnrollmentRequest, PrepareRetirementRequest, ENROLLMENT_KIND,
    PREPARE_RETIREMENT_KIND, RUNTIME_CREATE_KIND, RUNTIME_STATUS_KIND,
};
use crate::error::{EpError, ErrorCode};
use crate::manager::{
    AdminAuthorizationRequest, GoalIndexScanRequest, MaintenanceRequest, ManagerAuthorityRequest,
    ManagerHost, RetainedValidationRequest, ADMIN_AUTHORIZATION_KIND, GOAL_INDEX_SCAN_KIND,
    MAINTENANCE_KIND, RETAINED_VALIDATION_KIND,
};
use crate::names::ActorToken;
use crate::run::{
    parse_run_admission_request, parse_run_attempt_request, RunAdmissionRequest, RunAttemptRequest,
};

/// The run admission kind (SPEC §14.8).
pub const RUN_ADMISSION_KIND: &str = "manager-run-admission";
/// The run attempt kind (SPEC §14.8).
pub const RUN_ATTEMPT_KIND: &str = "manager-run-attempt";

/// The kinds the reference leaves to a host platform, and why each is refused here.
const PLATFORM_KINDS: [(&str, &str); 4] = [
    (
        RUNTIME_CREATE_KIND,
        "managed agent runtime requests must be handled by host platform interception",
    ),
    (
        RUNTIME_STATUS_KIND,
        "managed agent runtime requests must be handled by host platform interception",
    ),
    (
        "delegated-user-intent",
        "delegated user intents are not served by this auth service",
    ),
    (
        "manager-delegated-user-intent-execution",
        "delegated user intents are not served by this auth service",
    ),
];

/// One manager-service request, parsed by its kind.
#[derive(Debug, Clone)]
pub enum ManagerServiceRequest {
    /// Managed-agent enrollment (`core::enrollment`).
    Enrollment(EnrollmentRequest),
    /// Managed-agent retirement preparation (`core::enrollment`).
    PrepareRetirement(PrepareRetirementRequest),
    /// Run admission (`core::run`).
    RunAdmission(RunAdmissionRequest),
    /// A run attempt (`core::run`).
    RunAttempt(RunAttemptRequest),
    /// Family eviction or registration reconcile (`manager::maintenance`).
    Maintenance(MaintenanceRequest),
    /// Retained-agent validation (`manager::retained`).
    RetainedValidation(RetainedValidationRequest),
    /// Admin authorization (`manager::admin`).
    AdminAuthorization(AdminAuthorizationRequest),
    /// The goal-index scan (`manager::goal_index`).
    GoalIndexScan(GoalIndexScanRequest),
    /// The manager-service operations (`prepare`, `activate`, `renew`, …: `core::renewal`);
    /// every kind not named above is parsed, or refused, here.
    Authority(ManagerAuthorityRequest),
}

impl ManagerServiceRequest {
    /// The request's actor, the first thing the route reads of it (before the caller's grant).
    pub fn actor(request: &Value) -> Result<ActorToken, EpError> {
        if !request.is_object() {
            return Err(EpError::bad_request(
                "manager-service authority request must be an object",
            ));
        }
        let actor = request
            .get("actor")
            .and_then(Value::as_str)
            .ok_or_else(|| EpError::bad_request("manager-service authority requires an actor"))?;
        ActorToken::parse(actor).map_err(|e| EpError::bad_request(e.message))
    }

    /// The request by its `kind`; the platform's kinds are `unimplemented`. Enrollment hands
    /// the agent a bearer it exchanges on the public face, so it needs `host`'s face bound,
    /// checked before its body as the reference does.
    pub fn parse(request: &Value, host: &ManagerHost) -> Result<ManagerServiceRequest, EpError> {
        let kind = kind(request);
        if let Some((_, why)) = PLATFORM_KINDS.iter().find(|(k, _)| *k == kind) {
            return Err(EpError::new(ErrorCode::Unimplemented, *why));
        }
        Ok(match kind {
            ENROLLMENT_KIND => {
                require_public_exchange(host)?;
                Self::Enrollment(EnrollmentRequest::parse(request)?)
            }
            PREPARE_RETIREMENT_KIND => {
                Self::PrepareRetirement(PrepareRetirementRequest::parse(request)?)
            }
            RUN_ADMISSION_KIND => Self::RunAdmission(parse_run_admission_request(request)?),
            RUN_ATTEMPT_KIND => Self::RunAttempt(parse_run_attempt_request(request)?),
            MAINTENANCE_KIND => Self::Maintenance(MaintenanceRequest::parse(request)?),
            RETAINED_VALIDATION_KIND => {
                Self::RetainedValidation(RetainedValidationRequest::parse(request)?)
            }
            ADMIN_AUTHORIZATION_KIND => {
                Self::AdminAuthorization(AdminAuthorizationRequest::parse(request)?)
            }
            GOAL_INDEX_SCAN_KIND => Self::GoalIndexScan(GoalIndexScanRequest::parse(request)?),
            _ => Self::Authority(ManagerAuthorityRequest::parse(request)?),
        })
    }
}

/// The request's `kind`, for dispatch and the audit line (`-` when it names none).
pub fn kind(request: &Value) -> &str {
    request.get("kind").and_then(Value::as_str).unwrap_or("-")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::manager::{AccountKey, AgentOnboarding, ProofSecret};
    use crate::names::SpaceName;
    use crate::profiles::StandingTtl;

    /// A host whose public face is not bound (no exchange URL).
    fn host() -> ManagerHost {
        let key = nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::Account, [7; 32]).unwrap();
        ManagerHost {
            space: SpaceName::parse("s1").unwrap(),
            account: AccountKey::parse(&key.public_key()).unwrap(),
            signer: Arc::new(key),
            proof_secret: ProofSecret::new("secret"),
            standing_ttl: StandingTtl::DEFAULT,
            agents: AgentOnboarding {
                sentinel_creds: String::new(),
                agent_bearer_exchange_url: String::new(),
            },
        }
    }

    fn parse(request: serde_json::Value) -> Result<ManagerServiceRequest, EpError> {
        ManagerServiceRequest::parse(&request, &host())
    }

    #[test]
    fn the_platform_kinds_are_unimplemented() {
        for (kind, _) in PLATFORM_KINDS {
            let e = parse(json!({ "kind": kind, "actor": "mgr" })).unwrap_err();
            assert_eq!(e.code, ErrorCode::Unimplemented, "{kind}");
        }
    }

    #[test]
    fn the_actor_is_read_first_and_closed() {
        assert_eq!(
            ManagerServiceRequest::actor(&json!([])).unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            ManagerServiceRequest::actor(&json!({ "kind": "x" }))
                .unwrap_err()
                .code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            ManagerServiceRequest::actor(&json!({ "actor": "mgr" })).map(|a| a.to_string()),
            Ok("mgr".to_owned())
        );
    }

    #[test]
    fn an_unknown_kind_is_the_authority_parsers_refusal() {
        let e = parse(json!({ "kind": "nope", "actor": "mgr" })).unwrap_err();
        assert_eq!(
            Some(e),
            ManagerAuthorityRequest::parse(&json!({ "kind": "nope", "actor": "mgr" })).err()
        );
    }

    /// Reference §3.7: enrollment without a bound public face is refused before its body is read.
    #[test]
    fn enrollment_needs_the_public_face_before_its_body() {
        let e = parse(json!({ "kind": ENROLLMENT_KIND, "actor": "mgr" })).unwrap_err();
        assert_eq!(e.code, ErrorCode::FailedPrecondition);
    }
}
