//! Manager-service authority requests (reference-auth-service §4.1–§4.2), split by phase:
//! - [`tokens`]: the grammars of nkeys, idempotency tokens and proofs;
//! - [`envelope`]: the coordinates and identities every registered-manager request shares;
//! - [`request`]: the manager-service request as a sum of its operations, and its closed parser;
//! - [`proof`]: the deterministic registration proof and the host-secret HMAC
//!   current-registration proof;
//! - [`host`]: the host's facts and the authenticated holder;
//! - [`door`]: the one registered-manager check every operation calls;
//! - [`maintenance`]: the family eviction and gate reconciliation a registered manager asks for;
//! - [`select`]: which manager instance a `manager-caller` bearer addresses, chosen at the
//!   exchange and re-checked at the callout.
//!
//! **Byte compatibility.** Both proofs hash a `JSON.stringify` text whose key order is fixed by the
//! reference, so a proof minted by a TypeScript host verifies here and vice versa. The identities
//! are written in the parser's canonical order (supervisor, executor, serve, goalWriter,
//! sessionLedger) whatever order the caller sent, exactly as the reference rebuilds them.

pub mod door;
pub mod envelope;
pub mod host;
pub mod maintenance;
pub mod proof;
pub mod request;
pub mod select;
pub mod tokens;

pub use door::{check_registered, Door, DoorWording, GateRule, Knock, Presented};
pub(crate) use envelope::{parse_coordinates, parse_identities};
pub use envelope::{ManagerActors, ManagerEnvelope, ManagerIdentities, IDENTITY_NAMES};
pub use host::{AgentOnboarding, ManagerHost, Supervisor, SUPERVISE};
pub use maintenance::{
    AuthorizeMaintenance, Maintenance, MaintenancePlan, MaintenanceRequest, MAINTENANCE_KIND,
};
pub use proof::{
    constant_time_eq, current_registration_proof, hmac_sha256, registration_proof, ProofSecret,
    CURRENT_REGISTRATION_DOMAIN,
};
pub use request::{
    managed_retirement_op_id, ManagerAuthorityRequest, ManagerCall, ManagerOperation, RenewalFence,
    Retirement, RetirementTarget, RunFence, SessionGrant,
};
pub use select::{
    manager_verdict, AuthorizeManagerCaller, LocalManager, ManagerCallerVerdict,
    SelectManagerInstance, Verdict, MANAGER_GATE_PREFIX,
};
pub use tokens::{AccountKey, RegistrationProof, RequestId, UserKey};

use serde_json::{Map, Value};

use crate::wire;

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
