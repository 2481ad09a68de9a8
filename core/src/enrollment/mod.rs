//! Managed-agent enrollment and retirement preparation (reference §6.1–§6.4; F94–F97), and the
//! verify-enrollment decision a host platform asks for instead ([`VerifyEnrollment`], §3.8).
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

mod enroll;
mod request;
mod retire;
mod verify;

use crate::actors::{ActorRow, LedgerRead, RowSpace};
use crate::error::EpError;
use crate::machine::{Ctx, Halt};
use crate::manager::door::{check_registered, Door, Knock, Presented};
use crate::manager::{with_envelope, ManagerHost, Supervisor};
use crate::names::{OwnerToken, Principal};

pub use enroll::{EnrollManagedAgent, EnrollmentMaterial, EnrollmentResult};
pub(crate) use request::{exact_target, grammar, open_closed, refuse};
pub use request::{
    EnrollmentRequest, EnrollmentTarget, ManagedEnvelope, PrepareRetirementRequest, RuntimeRequest,
};
pub use retire::{PrepareManagedRetirement, PrepareRetirementResult};
pub use verify::{VerifyAsked, VerifyAtDoor, VerifyEnrollment, VerifyRequest};

/// The wire kind of an enrollment request and result.
pub const ENROLLMENT_KIND: &str = "manager-managed-agent-enrollment";
/// The wire kind of a retirement preparation request and result.
pub const PREPARE_RETIREMENT_KIND: &str = "manager-managed-agent-prepare-retirement";
/// The wire kinds a host platform's own runtime asks the verify-enrollment door about.
pub const RUNTIME_CREATE_KIND: &str = "manager-managed-agent-runtime-create";
pub const RUNTIME_STATUS_KIND: &str = "manager-managed-agent-runtime-status";
/// The bound on each enrollment list: wider is a configuration mistake or a body-size attack.
pub const MAX_ENROLLMENT_LIST: usize = 64;

/// The members of [`ManagedEnvelope`] on the wire.
pub(crate) const ENVELOPE_KEYS: [&str; 10] = with_envelope(["registrationProof", "serveEpoch"]);

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

/// Enrollment through the manager-service route hands the agent a bearer it exchanges on the
/// public face (reference §3.7), so it needs that face bound: `failed-precondition` otherwise.
pub fn require_public_exchange(host: &ManagerHost) -> Result<(), EpError> {
    if host.agents.agent_bearer_exchange_url.is_empty() {
        return Err(EpError::failed_precondition(
            "managed agent enrollment needs the public exchange face (the enrolled agent \
             exchanges its secret there); start the plane with --exchange-public-port",
        ));
    }
    Ok(())
}

/// The shared decision (reference §6.2): host space, then `supervise`, then `extra` (the
/// target owner, for the targeted kinds), then the current registration at the serve epoch
/// (F94).
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
    envelope.check_current(cx, door, host, caller.owner())
}

impl ManagedEnvelope {
    /// Refuses (`permission-denied`) an envelope naming another space than the host's, as
    /// "<who> names space X, not this host space Y".
    pub(crate) fn require_host_space(&self, host: &ManagerHost, who: &str) -> Result<(), EpError> {
        if self.manager.space != host.space {
            return Err(EpError::permission_denied(format!(
                "{who} names space {}, not this host space {}",
                self.manager.space, host.space
            )));
        }
        Ok(())
    }

    /// The registered-manager check every managed door ends its authorization with (F94): the
    /// gate sits at the envelope's serve epoch, records `owner`'s serve principal and matches
    /// the envelope's current-registration proof. No account is presented: these requests name
    /// none. KV round trips: 1.
    pub(crate) fn check_current(
        &self,
        cx: &mut Ctx<'_>,
        door: &Door,
        host: &ManagerHost,
        owner: &OwnerToken,
    ) -> Result<(), Halt> {
        let knock = Knock {
            envelope: &self.manager,
            owner,
            account: None,
            epoch: Some(self.serve_epoch),
            proof: Presented::Current(&self.registration_proof),
        };
        check_registered(cx, door, host, &knock)?;
        Ok(())
    }
}

/// How prepare-retirement refusals name the operation.
const PREPARE_WHAT: &str = "managed agent prepare-retirement";

/// The prepare-retirement decision (reference §6.2): the shared checks with the target owner
/// the authenticated owner (the op id was checked by the parser, F96).
fn authorize_prepare(
    cx: &mut Ctx<'_>,
    host: &ManagerHost,
    caller: &Supervisor,
    request: &PrepareRetirementRequest,
) -> Result<(), Halt> {
    let what = PREPARE_WHAT;
    authorize(
        cx,
        host,
        caller,
        &request.envelope,
        what,
        &crate::manager::door::PREPARE_RETIREMENT,
        || target_owned(what, &request.target, caller),
    )
}

/// A managed-agent request may target only its authenticated owner's agents.
fn target_owned(
    what: &str,
    target: &crate::manager::RetirementTarget,
    caller: &Supervisor,
) -> Result<(), EpError> {
    if target.owner != *caller.owner() {
        return Err(EpError::permission_denied(format!(
            "{what} target owner {} does not match authenticated owner {}",
            target.owner,
            caller.owner()
        )));
    }
    Ok(())
}

/// Reads the alias's managed row, if any: both machines decide on it under the alias lock.
pub(crate) fn find_managed(cx: &mut Ctx<'_>, alias: &Principal) -> Result<Option<ActorRow>, Halt> {
    Ok(cx.find_row(RowSpace::Managed, alias)?.map(|held| held.row))
}
