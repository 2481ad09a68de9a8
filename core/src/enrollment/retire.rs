//! Managed-agent retirement preparation (reference §6.4).

use crate::actors::{AliasScript, DurablesOutcome, DurablesRequest, LedgerRead, LockHeld};
use crate::error::EpError;
use crate::machine::{Ctx, Halt};
use crate::manager::{echo_envelope, ManagerEnvelope, ManagerHost, RetirementTarget, Supervisor};
use crate::names::{OpId, OwnerToken, Principal};

use super::{
    authorize_prepare, find_managed, PrepareRetirementRequest, PREPARE_RETIREMENT_KIND,
    PREPARE_WHAT,
};

// ---- Retirement preparation ------------------------------------------------------------------

/// The preparation's answer (reference §6.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareRetirementResult {
    /// The request's manager envelope, which the answer echoes.
    pub manager: ManagerEnvelope,
    /// The authenticated owner.
    pub owner: OwnerToken,
    pub target: RetirementTarget,
    pub op_id: OpId,
    /// Whether a row at the target uid was released by this call (false: nothing to release).
    pub released: bool,
}

impl PrepareRetirementResult {
    /// The wire result, keys in the reference's order (`prepared` is always true).
    pub fn to_json(&self) -> String {
        echo_envelope(PREPARE_RETIREMENT_KIND, &self.manager, Some(&self.owner))
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
        let held = find_managed(cx, &alias)?;
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
                cx.revoke_managed_at(&alias, &target.lifecycle_uid)?
            }
        };
        Ok(PrepareRetirementResult {
            manager: request.envelope.manager.clone(),
            owner: self.caller.owner().clone(),
            target: target.clone(),
            op_id: request.op_id.clone(),
            released,
        })
    }
}
