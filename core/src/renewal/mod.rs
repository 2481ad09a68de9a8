//! Manager-service operations (reference-auth-service §4.3–§4.6): `prepare`, `activate`,
//! `renew`, `session`, `retire`, `renewStandingBundle` and `renewRunDriver` as sans-IO machines,
//! the closed result [`RemoteManagerAuthorityMaterial`], and renewal compensation
//! ([`compensation`]).
//!
//! Every JWT is a data-account user JWT for a caller-held nkey (`sub` = the nkey, signed by the
//! data account's signing key, `issuer_account` = the account); the plane never sees a seed and
//! returns JWTs only. Credentials of the manager's endpoint family (serve, goalWriter,
//! sessionLedger) are released only through the fence: ledger row first, then a revision-pinned
//! touch of the manager gate, under the cleanup intent of [`compensation`].
//!
//! KV round trips on the model (no faults, no prior pending intent): `prepare` 0, `renew` 1,
//! `session` 0, `retire` 1, `activate` 16, `renewStandingBundle` 18 plus 2 artifact reads per
//! registered closure, `renewRunDriver` 4.

pub mod compensation;
mod ops;
mod result;
mod sign;

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::issuance::{GateObservation, GateRef};
use crate::jwt::UnixSeconds;
use crate::machine::{Ctx, Halt, Script};
use crate::manager::door::{check_registered, Door, Knock, Presented};
use crate::manager::{
    AccountKey, ManagerActors, ManagerAuthorityRequest, ManagerCall, ManagerHost, Supervisor,
    UserKey,
};
use crate::names::OwnerToken;

pub use compensation::{
    release_family, CleanupIntent, FamilyMember, IntentRow, IntentState, Ownership, Participant,
    ParticipantState, RenewalFault, Role,
};

/// One signed credential: the profiles' own type, re-exported where results name it.
pub use crate::profiles::IssuedCredential;
/// The cluster type URN of the manager's command surface.
pub use ops::{
    activate, authorize_remote_manager_retirement, authorize_renewal, prepare, renew,
    renew_run_driver, renew_standing_bundle, retire, session,
};
pub use result::{
    check_credential_set, expires_at_ms, material, required_credentials, CredentialName, Issued,
    RemoteManagerAuthorityMaterial,
};

pub const MANAGER_URN: &str = "ai.cotal.manager";

// ---- Inputs ---------------------------------------------------------------------------------

/// One manager-service authority request, ready to issue. `now_ms` is the injected clock (unix
/// millis).
#[derive(Debug, Clone)]
pub struct ManagerAuthority {
    pub host: ManagerHost,
    pub holder: Supervisor,
    pub request: ManagerAuthorityRequest,
    pub now_ms: u64,
    /// A test probe that fails the release at one point; it exists only with the
    /// `fault-probes` feature, so a production build cannot inject one.
    #[cfg(feature = "fault-probes")]
    pub fault: Option<RenewalFault>,
}

impl ManagerAuthority {
    pub fn new(
        host: ManagerHost,
        holder: Supervisor,
        request: ManagerAuthorityRequest,
        now_ms: u64,
    ) -> Self {
        ManagerAuthority {
            host,
            holder,
            request,
            now_ms,
            #[cfg(feature = "fault-probes")]
            fault: None,
        }
    }

    /// The injected test fault, if any (always none without `fault-probes`).
    fn fault(&self) -> Option<RenewalFault> {
        #[cfg(feature = "fault-probes")]
        return self.fault;
        #[cfg(not(feature = "fault-probes"))]
        None
    }

    fn now(&self) -> UnixSeconds {
        UnixSeconds::from_millis(self.now_ms)
    }

    fn owner(&self) -> &OwnerToken {
        self.holder.owner()
    }

    fn actors(&self) -> ManagerActors {
        ManagerActors::for_instance(&self.request.envelope.instance_id)
    }

    fn gate(&self) -> Result<GateRef, EpError> {
        self.request.envelope.gate()
    }

    /// Knocks on `door` with this request's envelope and holder.
    fn knock(
        &self,
        cx: &mut Ctx<'_>,
        door: &Door,
        account: Option<&AccountKey>,
        epoch: Option<ProcessEpoch>,
        proof: Presented<'_>,
    ) -> Result<GateObservation, Halt> {
        let knock = Knock {
            envelope: &self.request.envelope,
            owner: self.owner(),
            account,
            epoch,
            proof,
        };
        check_registered(cx, door, &self.host, &knock)
    }
}

impl Script for ManagerAuthority {
    type Output = RemoteManagerAuthorityMaterial;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<RemoteManagerAuthorityMaterial, Halt> {
        issue(cx, self)
    }
}

// ---- Holder and request checks --------------------------------------------------------------

/// Every nkey the request names (the five identities, and a run's driver and mediator, a
/// retirement's requester, a session's serving key) must be distinct: one nkey cannot collapse
/// separate authority lifetimes. The parser checks only driver ≠ mediator.
pub fn require_distinct_identities(request: &ManagerAuthorityRequest) -> Result<(), EpError> {
    let mut keys: Vec<&UserKey> = request.envelope.identities.keys().to_vec();
    if let Some(run) = request.run() {
        keys.extend([&run.driver_id, &run.mediator_id]);
    }
    if let Some(retirement) = request.retirement() {
        keys.push(&retirement.id);
    }
    if let Some(session) = request.session() {
        keys.push(&session.id);
    }
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != keys.len() {
        return Err(EpError::bad_request(
            "manager-service identities must be distinct; one nkey cannot collapse separate \
             authority lifetimes",
        ));
    }
    Ok(())
}

/// Issues one manager-service operation (reference §4.3): the holder's `supervise` scope,
/// distinct nkeys, the operation's own checks and credentials, the closed-set check, and the
/// closed result.
pub fn issue(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
) -> Result<RemoteManagerAuthorityMaterial, Halt> {
    call.holder.require_supervise("manager-service authority")?;
    let r = &call.request;
    require_distinct_identities(r)?;
    let issued = match &r.call {
        ManagerCall::Prepare => prepare(call)?,
        ManagerCall::Renew { proof } => renew(cx, call, proof)?,
        ManagerCall::Activate {
            proof,
            contract_artifacts,
        } => activate(cx, call, proof, contract_artifacts)?,
        ManagerCall::RenewStandingBundle { proof, fence } => {
            renew_standing_bundle(cx, call, proof, fence)?
        }
        ManagerCall::RenewRunDriver { proof, fence, run } => {
            renew_run_driver(cx, call, proof, fence, run)?
        }
        ManagerCall::Session { proof, session: s } => session(call, proof, s)?,
        ManagerCall::Retire { proof, retirement } => retire(cx, call, proof, retirement)?,
    };
    material(call, issued).map_err(Halt::from)
}
