//! Managed-agent retirement preparation (reference §6.4).

use crate::actors::{
    ActorsOutcome, ActorsRequest, AliasScript, DurablesOutcome, DurablesRequest, Held, LockHeld,
    RowSpace,
};
use crate::error::EpError;
use crate::machine::{Ctx, Halt};
use crate::manager::{echo_coordinates, ManagerHost, RequestId, RetirementTarget, Supervisor};
use crate::names::{ActorToken, InstanceId, LifecycleUid, OpId, OwnerToken, Principal, SpaceName};
use crate::wire::ObjectWriter;

use super::{
    authorize_prepare, ledger_error, PrepareRetirementRequest, PREPARE_RETIREMENT_KIND,
    PREPARE_WHAT,
};

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
        let w = ObjectWriter::new()
            .uint("v", 1)
            .string("kind", PREPARE_RETIREMENT_KIND)
            .string("space", self.space.as_str())
            .string("owner", self.owner.as_str());
        echo_coordinates(
            w,
            &self.actor,
            &self.instance_id,
            &self.manager_lifecycle_uid,
            &self.request_id,
        )
        .raw("target", &self.target.to_json())
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

impl AliasScript for PrepareManagedRetirement {
    type Output = PrepareRetirementResult;

    /// The alias this preparation must hold the lock of.
    fn alias(&self) -> Principal {
        Principal::new(
            self.request.target.owner.clone(),
            self.request.target.actor.clone(),
        )
    }

    fn run_held(&self, cx: &mut Ctx<'_>, _: LockHeld<'_>) -> Result<PrepareRetirementResult, Halt> {
        let request = &self.request;
        let target = &request.target;
        let what = PREPARE_WHAT;
        authorize_prepare(cx, &self.host, &self.caller, request)?;
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
