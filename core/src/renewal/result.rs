//! The closed result of a manager-service operation and the closed set of credentials each
//! operation issues (reference §4.3 items 6–7).

use std::fmt;

use crate::error::EpError;
use crate::manager::{
    ManagerActors, ManagerOperation, RegistrationProof, RenewalFence, Retirement, RunFence,
};
use crate::names::{ActorToken, OwnerToken, SpaceName};
use crate::profiles::IssuedCredential;
use crate::wire::ObjectWriter;

use super::{ManagerAuthority, Role};

// ---- Credentials and the result -------------------------------------------------------------

/// The closed set of credential names a manager-service result may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CredentialName {
    Supervisor,
    Executor,
    Serve,
    GoalWriter,
    SessionLedger,
    SessionServing,
    RetirementRequester,
    RunDriver,
    RunMediator,
}

impl CredentialName {
    pub const fn as_str(self) -> &'static str {
        match self {
            CredentialName::Supervisor => "supervisor",
            CredentialName::Executor => "executor",
            CredentialName::Serve => "serve",
            CredentialName::GoalWriter => "goalWriter",
            CredentialName::SessionLedger => "sessionLedger",
            CredentialName::SessionServing => "sessionServing",
            CredentialName::RetirementRequester => "retirementRequester",
            CredentialName::RunDriver => "runDriver",
            CredentialName::RunMediator => "runMediator",
        }
    }
}

impl fmt::Display for CredentialName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Role> for CredentialName {
    fn from(role: Role) -> Self {
        match role {
            Role::Serve => CredentialName::Serve,
            Role::GoalWriter => CredentialName::GoalWriter,
            Role::SessionLedger => CredentialName::SessionLedger,
        }
    }
}

/// What an operation issued, before the closed-set check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub credentials: Vec<(CredentialName, IssuedCredential)>,
    pub next_registration_proof: Option<RegistrationProof>,
}

/// The credentials an operation must issue (reference §4.3 item 6).
pub const fn required_credentials(operation: ManagerOperation) -> &'static [CredentialName] {
    use CredentialName as C;
    match operation {
        ManagerOperation::Prepare | ManagerOperation::Renew => &[C::Supervisor, C::Executor],
        ManagerOperation::Activate => &[C::Serve, C::GoalWriter, C::SessionLedger],
        ManagerOperation::Session => &[C::SessionServing],
        ManagerOperation::Retire => &[C::RetirementRequester],
        ManagerOperation::RenewStandingBundle => &[
            C::Supervisor,
            C::Executor,
            C::Serve,
            C::GoalWriter,
            C::SessionLedger,
        ],
        ManagerOperation::RenewRunDriver => &[C::RunDriver, C::RunMediator],
    }
}

/// The closed-set check on what an operation issued: a missing required credential is
/// `internal` "… did not issue required credential NAME"; for the two renewals the issued set
/// must be exactly the required set, else `internal` "… returned credentials outside its closed
/// profile set". A renewal never hands out a credential its profile set does not name (F90).
pub fn check_credential_set(
    operation: ManagerOperation,
    issued: &[CredentialName],
) -> Result<(), EpError> {
    let op = operation.as_str();
    let required = required_credentials(operation);
    if let Some(missing) = required.iter().find(|name| !issued.contains(name)) {
        return Err(EpError::internal(format!(
            "manager-service {op} did not issue required credential {missing}"
        )));
    }
    let mut distinct = issued.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if operation.is_renewal()
        && (distinct.len() != issued.len() || issued.iter().any(|n| !required.contains(n)))
    {
        return Err(EpError::internal(format!(
            "manager-service {op} returned credentials outside its closed profile set"
        )));
    }
    Ok(())
}

/// `min(exp) × 1000`: the result expires with its shortest-lived credential.
pub fn expires_at_ms(credentials: &[(CredentialName, IssuedCredential)]) -> Result<u64, EpError> {
    credentials
        .iter()
        .map(|(_, c)| c.exp)
        .min()
        .and_then(|exp| exp.checked_mul(1000))
        .ok_or_else(|| EpError::internal("a manager-service result carries no credential"))
}

/// The closed result of a manager-service operation (reference §4.3 item 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteManagerAuthorityMaterial {
    pub operation: ManagerOperation,
    pub space: SpaceName,
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub instance_id: crate::names::InstanceId,
    pub lifecycle_uid: crate::names::LifecycleUid,
    pub request_id: crate::manager::RequestId,
    pub registration_proof: Option<RegistrationProof>,
    /// Renewals echo their host fence.
    pub host_fence: Option<RenewalFence>,
    pub run: Option<RunFence>,
    /// `retire` echoes its terminal coordinates.
    pub retirement: Option<Retirement>,
    /// Unix millis.
    pub issued_at: u64,
    /// Unix millis: the earliest credential expiry.
    pub expires_at: u64,
    pub actors: ManagerActors,
    pub identities: crate::manager::ManagerIdentities,
    pub next_registration_proof: Option<RegistrationProof>,
    pub credentials: Vec<(CredentialName, IssuedCredential)>,
}

impl RemoteManagerAuthorityMaterial {
    /// The credential issued under `name`.
    pub fn credential(&self, name: CredentialName) -> Option<&IssuedCredential> {
        self.credentials
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c)
    }

    /// The issued names, in issue order.
    pub fn names(&self) -> Vec<CredentialName> {
        self.credentials.iter().map(|(n, _)| *n).collect()
    }

    /// The result as the reference's `JSON.stringify` writes it. Never contains a seed.
    pub fn to_json(&self) -> String {
        let mut w = ObjectWriter::new()
            .uint("v", 1)
            .string("kind", "manager-service-authority")
            .string("operation", self.operation.as_str())
            .string("space", self.space.as_str())
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("instanceId", self.instance_id.as_str())
            .string("lifecycleUid", self.lifecycle_uid.as_str())
            .string("requestId", self.request_id.as_str());
        if let Some(proof) = &self.registration_proof {
            w = w.string("registrationProof", proof.as_str());
        }
        if let Some(fence) = &self.host_fence {
            w = w
                .string("accountPublicKey", fence.account_public_key.as_str())
                .uint("processEpoch", fence.process_epoch.0);
        }
        if let Some(run) = &self.run {
            let run = ObjectWriter::new()
                .string("runId", run.run_id.as_str())
                .string("holder", run.holder.as_str())
                .string("takeoverId", run.takeover_id.as_str())
                .uint("epoch", run.epoch.0)
                .uint("fencingToken", run.fencing_token.0)
                .string("driverId", run.driver_id.as_str())
                .string("mediatorId", run.mediator_id.as_str())
                .finish();
            w = w.raw("run", &run);
        }
        if let Some(retirement) = &self.retirement {
            w = w.raw("retirement", &retirement_json(retirement));
        }
        w = w
            .uint("issuedAt", self.issued_at)
            .uint("expiresAt", self.expires_at)
            .raw("actors", &self.actors.to_json())
            .raw("identities", &self.identities.to_json());
        if let Some(proof) = &self.next_registration_proof {
            w = w.string("nextRegistrationProof", proof.as_str());
        }
        let credentials = self
            .credentials
            .iter()
            .fold(ObjectWriter::new(), |o, (name, c)| {
                o.raw(
                    name.as_str(),
                    &ObjectWriter::new()
                        .string("jwt", &c.jwt)
                        .uint("exp", c.exp)
                        .finish(),
                )
            })
            .finish();
        w.raw("credentials", &credentials).finish()
    }
}

/// `{id, target: {owner, actor, lifecycleUid}, opId, serveEpoch}`, the parsed request's order.
fn retirement_json(r: &Retirement) -> String {
    ObjectWriter::new()
        .string("id", r.id.as_str())
        .raw("target", &r.target.to_json())
        .string("opId", r.op_id.as_str())
        .uint("serveEpoch", r.serve_epoch.0)
        .finish()
}

/// Applies the closed-set check and assembles the result.
pub fn material(
    call: &ManagerAuthority,
    issued: Issued,
) -> Result<RemoteManagerAuthorityMaterial, EpError> {
    let r = &call.request;
    let names: Vec<CredentialName> = issued.credentials.iter().map(|(n, _)| *n).collect();
    check_credential_set(r.operation(), &names)?;
    let e = &r.envelope;
    Ok(RemoteManagerAuthorityMaterial {
        operation: r.operation(),
        space: e.space.clone(),
        owner: call.owner().clone(),
        actor: e.actor.clone(),
        instance_id: e.instance_id.clone(),
        lifecycle_uid: e.manager_lifecycle_uid.clone(),
        request_id: e.request_id.clone(),
        registration_proof: r.registration_proof().cloned(),
        host_fence: r.renewal().cloned(),
        run: r.run().cloned(),
        retirement: r.retirement().cloned(),
        issued_at: call.now_ms,
        expires_at: expires_at_ms(&issued.credentials)?,
        actors: call.actors(),
        identities: e.identities.clone(),
        next_registration_proof: issued.next_registration_proof,
        credentials: issued.credentials,
    })
}
