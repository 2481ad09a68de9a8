//! Manager-service authority requests (reference-auth-service §4.1–§4.2), split by phase:
//! - [`tokens`]: the grammars of nkeys, idempotency tokens and proofs;
//! - [`envelope`]: the coordinates and identities every registered-manager request shares;
//! - [`request`]: the manager-service request as a sum of its operations, and its closed parser;
//! - [`proof`]: the deterministic registration proof and the host-secret HMAC
//!   current-registration proof;
//! - [`host`]: the host's facts and the authenticated holder;
//! - [`door`]: the one registered-manager check every operation calls;
//! - [`maintenance`]: the family eviction and gate reconciliation a registered manager asks for;
//! - [`retained`]: whether a managed agent a restarted manager kept running is still the same
//!   live lifecycle;
//! - [`goal_index`]: the in-flight goals of the manager endpoint a restarted manager settles;
//! - [`admin`]: whether one of a manager's users currently holds `admin`;
//! - [`select`]: which manager instance a `manager-caller` bearer addresses, chosen at the
//!   exchange and re-checked at the callout.
//!
//! **Byte compatibility.** Both proofs hash a `JSON.stringify` text whose key order is fixed by the
//! reference, so a proof minted by a TypeScript host verifies here and vice versa. The identities
//! are written in the parser's canonical order (supervisor, executor, serve, goalWriter,
//! sessionLedger) whatever order the caller sent, exactly as the reference rebuilds them.

pub mod admin;
pub mod door;
pub mod envelope;
pub mod goal_index;
pub mod host;
pub mod maintenance;
pub mod platform;
pub mod proof;
pub mod request;
pub mod retained;
pub mod select;
pub mod tokens;

pub use admin::{
    AdminAuthorization, AdminAuthorizationRequest, AdminCaller, AuthorizeManagerAdmin,
    ADMIN_AUTHORIZATION_KIND, ADMIN_SCOPE,
};
pub use door::{check_registered, Door, DoorWording, GateRule, Knock, Presented};
pub(crate) use envelope::{echo_envelope, parse_coordinates, parse_identities, with_envelope};
pub use envelope::{ManagerActors, ManagerEnvelope, ManagerIdentities, IDENTITY_NAMES};
pub use goal_index::{
    AuthorizeGoalIndexScan, GoalAllocation, GoalIndexEntry, GoalIndexScan, GoalIndexScanRequest,
    ScanGoalIndex, GOAL_INDEX_SCAN_KIND,
};
pub use host::{AgentOnboarding, ManagerHost, Supervisor, SUPERVISE};
pub use maintenance::{
    AuthorizeMaintenance, Maintenance, MaintenancePlan, MaintenanceRequest, MAINTENANCE_KIND,
};
pub use platform::{AssignmentState, PlatformAssignment};
pub use proof::{
    constant_time_eq, current_registration_proof, hmac_sha256, registration_proof, ProofSecret,
    CURRENT_REGISTRATION_DOMAIN,
};
pub use request::{
    ManagerAuthorityRequest, ManagerCall, ManagerOperation, RenewalFence, Retirement,
    RetirementTarget, RunFence, SessionGrant,
};
pub use retained::{
    RetainedAgentAuthority, RetainedAgentValidation, RetainedSecret, RetainedValidationRequest,
    ValidateRetainedAgent, ACTOR_TOKEN_MAX, RETAINED_VALIDATION_KIND, SENTINEL_CREDS_MAX,
};
pub use select::{
    manager_verdict, AuthorizeManagerCaller, LocalManager, ManagerCallerVerdict,
    SelectManagerInstance, Verdict, MANAGER_GATE_PREFIX,
};
pub use tokens::{AccountKey, RegistrationProof, RequestId, UserKey};

use serde_json::{Map, Value};

use crate::enrollment::ManagedEnvelope;
use crate::names::OwnerToken;
use crate::wire::{self, ObjectWriter};

/// A JavaScript `Number.isSafeInteger(x) && x >= min` field.
pub(crate) fn safe_at_least(map: &Map<String, Value>, key: &str, min: u64) -> Option<u64> {
    map.get(key).and_then(wire::safe_uint).filter(|n| *n >= min)
}

pub(crate) fn string<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m str> {
    map.get(key).and_then(Value::as_str)
}

/// `Object.keys(o)` compared as a set with `keys`: an object with exactly these members.
pub(crate) fn exactly<'m>(
    value: Option<&'m Value>,
    keys: &[&str],
) -> Option<&'m Map<String, Value>> {
    value
        .and_then(Value::as_object)
        .filter(|m| m.len() == keys.len() && keys.iter().all(|k| m.contains_key(*k)))
}

/// The members a current-registration door's answer opens with, in the reference's order:
/// `v`, `kind`, `space`, the authenticated `owner` where the door places it there, then the
/// request's coordinates, its proof and its serve epoch (never its identities).
pub(crate) fn echo_current(
    kind: &str,
    e: &ManagedEnvelope,
    owner: Option<&OwnerToken>,
) -> ObjectWriter {
    echo_envelope(kind, &e.manager, owner)
        .string("registrationProof", e.registration_proof.as_str())
        .uint("serveEpoch", e.serve_epoch.0)
}
