//! Managed-agent enrollment (reference §6.2–§6.3).

use crate::actors::row::iso8601_millis;
use crate::actors::{
    ActorRow, AliasScript, Boundary, DurablesOutcome, DurablesRequest, LedgerRead, LockHeld,
};
use crate::error::EpError;
use crate::machine::{Ctx, Halt};
use crate::manager::door;
use crate::manager::{echo_current, ManagerHost, Supervisor};
use crate::names::{ActorToken, LifecycleUid, OwnerToken, Principal};
use crate::wire::ObjectWriter;

use super::{authorize, find_managed, EnrollmentRequest, ManagedEnvelope, ENROLLMENT_KIND};

// ---- Enrollment --------------------------------------------------------------------------------

/// The enrollment's answer (reference §6.3 item 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentResult {
    /// The request's envelope, which the answer echoes.
    pub envelope: ManagedEnvelope,
    /// The authenticated owner.
    pub owner: OwnerToken,
    pub material: EnrollmentMaterial,
    /// `true` when this call wrote the row; `false` for a retry of an earlier enrollment.
    pub first: bool,
}

/// What the agent needs to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentMaterial {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub lifecycle_uid: LifecycleUid,
    pub sentinel_creds: String,
    pub subscribe: Vec<String>,
    pub allow_subscribe: Vec<String>,
    pub allow_publish: Vec<String>,
    pub agent_bearer_exchange_url: String,
}

impl EnrollmentResult {
    /// The wire result, keys in the reference's order.
    pub fn to_json(&self) -> String {
        let m = &self.material;
        let material = ObjectWriter::new()
            .string("owner", m.owner.as_str())
            .string("actor", m.actor.as_str())
            .string("lifecycleUid", m.lifecycle_uid.as_str())
            .string("sentinelCreds", &m.sentinel_creds)
            .strings("subscribe", m.subscribe.iter().map(String::as_str))
            .strings(
                "allowSubscribe",
                m.allow_subscribe.iter().map(String::as_str),
            )
            .strings("allowPublish", m.allow_publish.iter().map(String::as_str))
            .string("agentBearerExchangeUrl", &m.agent_bearer_exchange_url)
            .finish();
        echo_current(ENROLLMENT_KIND, &self.envelope, Some(&self.owner))
            .raw("material", &material)
            .finish()
    }
}

/// Enrolls a managed agent (reference §6.3). Keeps F94 (authorized against the caller
/// instance's current open gate, serve principal, serve epoch and host-issued proof) and F95
/// (the uid is the host's: a retry with the same token hash gets the uid already enrolled, a
/// first enrollment gets one minted from `fresh_uid_entropy`, never from the request).
///
/// Steps after the decision: read the alias's managed row; another token hash is `conflict`
/// (the enrolled lifecycle must be retired first); the same hash is a retry, whose envelope is
/// re-walked because the spawner may have narrowed since. A first enrollment grants the row
/// with `parent = <owner>.<request actor>` (the ledger walks the envelope before writing). Then
/// durables are provisioned at the uid; if that fails on a first enrollment the row is revoked
/// at that uid and the footprint deprovisioned (cleanup failures are noted, the provisioning
/// error returned); a retry keeps its row, because the first answer may already have reached
/// the participant. Runs only under its alias lock (module docs).
#[derive(Debug, Clone)]
pub struct EnrollManagedAgent {
    pub host: ManagerHost,
    pub caller: Supervisor,
    pub request: EnrollmentRequest,
    /// Host entropy for a fresh lifecycle uid (used only when nothing is enrolled).
    pub fresh_uid_entropy: [u8; 20],
    /// Unix milliseconds, stamped as the row's `grantedAt`.
    pub now_ms: u64,
}

impl AliasScript for EnrollManagedAgent {
    type Output = EnrollmentResult;

    /// The alias this enrollment must hold the lock of.
    fn alias(&self) -> Principal {
        Principal::new(
            self.caller.owner().clone(),
            self.request.target.actor.clone(),
        )
    }

    fn run_held(&self, cx: &mut Ctx<'_>, _: LockHeld<'_>) -> Result<EnrollmentResult, Halt> {
        let envelope = &self.request.envelope;
        let target = &self.request.target;
        authorize(
            cx,
            &self.host,
            &self.caller,
            envelope,
            "managed agent enrollment",
            &door::ENROLLMENT,
            || Ok(()),
        )?;
        let alias = self.alias();
        let held = find_managed(cx, &alias)?;
        let (row, first) = match held {
            Some(row) => (self.reenrolled(cx, &alias, row)?, false),
            None => (cx.grant_managed(self.wanted_row())?, true),
        };
        let uid = row
            .lifecycle_uid
            .clone()
            .ok_or_else(|| EpError::internal("the granted managed row carries no lifecycle uid"))?;
        let subscribe = target.subscribe.clone().unwrap_or_default();
        let provisioned = cx.durables(DurablesRequest::Provision {
            principal: alias.clone(),
            lifecycle_uid: uid.clone(),
            subscribe: subscribe.clone(),
            allow_subscribe: row.allow_subscribe.clone(),
            role: target.role.clone(),
        })?;
        if let DurablesOutcome::Failed(why) = provisioned {
            return Err(self.unprovisioned(cx, &alias, &uid, first, &why)?.into());
        }
        Ok(EnrollmentResult {
            envelope: envelope.clone(),
            owner: self.caller.owner().clone(),
            material: EnrollmentMaterial {
                owner: self.caller.owner().clone(),
                actor: target.actor.clone(),
                lifecycle_uid: uid,
                sentinel_creds: self.host.agents.sentinel_creds.clone(),
                subscribe,
                allow_subscribe: row.allow_subscribe,
                allow_publish: row.allow_publish,
                agent_bearer_exchange_url: self.host.agents.agent_bearer_exchange_url.clone(),
            },
            first,
        })
    }
}

impl EnrollManagedAgent {
    /// The alias already holds a managed row: an exact retry of this enrollment (the same token
    /// hash) keeps it, once the row is re-checked within its spawner's grant; any other row is
    /// a live predecessor, `conflict`.
    fn reenrolled(
        &self,
        cx: &mut Ctx<'_>,
        alias: &Principal,
        row: ActorRow,
    ) -> Result<ActorRow, Halt> {
        let target = &self.request.target;
        let uid = row.lifecycle_uid.clone().ok_or_else(|| {
            EpError::internal(format!(
                "managed row {} carries no lifecycle uid",
                alias.key()
            ))
        })?;
        if row.token_hash.as_ref() != Some(&target.token_hash) {
            return Err(EpError::conflict(format!(
                "managed agent {:?} is enrolled at lifecycle {uid}; prepare that \
                 lifecycle's retirement before enrolling a successor",
                target.actor.as_str()
            ))
            .with_detail(serde_json::json!({"lifecycleUid": uid.as_str()}))
            .into());
        }
        cx.check_envelope(&row, Boundary::Spawn)?;
        Ok(row)
    }

    /// The row a first enrollment grants: the target's grant under the caller's owner, parented
    /// to the manager, at a lifecycle uid the host mints (F95).
    fn wanted_row(&self) -> ActorRow {
        let target = &self.request.target;
        ActorRow {
            owner: self.caller.owner().clone(),
            actor: target.actor.clone(),
            scope: target.capabilities.clone().unwrap_or_default(),
            allow_subscribe: target.allow_subscribe.clone().unwrap_or_default(),
            allow_publish: target.allow_publish.clone().unwrap_or_default(),
            role: target.role.clone(),
            parent: Some(Principal::new(
                self.caller.owner().clone(),
                self.request.envelope.manager.actor.clone(),
            )),
            label: target.label.clone(),
            token_hash: Some(target.token_hash.clone()),
            lifecycle_uid: Some(LifecycleUid::mint(self.fresh_uid_entropy)),
            granted_at: iso8601_millis(self.now_ms),
        }
    }

    /// The refusal when the durables could not be provisioned: a first enrollment rolls its
    /// row back; a retry keeps the row it found.
    fn unprovisioned(
        &self,
        cx: &mut Ctx<'_>,
        alias: &Principal,
        uid: &LifecycleUid,
        first: bool,
        why: &str,
    ) -> Result<EpError, Halt> {
        let error = EpError::unavailable(format!(
            "managed agent {:?} could not have its durables provisioned at lifecycle {uid}: \
             {why}",
            self.request.target.actor.as_str()
        ));
        if first {
            roll_back(cx, alias, uid, error)
        } else {
            Ok(error.with_note(
                "the enrolled row is kept (a retry keeps its grant); retry the enrollment",
            ))
        }
    }
}

/// Undoes a first enrollment whose provisioning failed, footprint before grant (as retirement
/// does): deprovision whatever the failed attempt left, then revoke the row at exactly that uid.
/// In this order a crash between the two leaves a row a same-hash retry or a retirement still
/// finds, never a footprint nothing names; for the same reason a failed deprovision keeps the
/// row. A cleanup failure is noted on the original error, never substituted for it.
fn roll_back(
    cx: &mut Ctx<'_>,
    alias: &Principal,
    uid: &LifecycleUid,
    error: EpError,
) -> Result<EpError, Halt> {
    if let DurablesOutcome::Failed(why) = cx.durables(DurablesRequest::Deprovision {
        principal: alias.clone(),
        lifecycle_uid: uid.clone(),
        member_channels: Vec::new(),
    })? {
        return Ok(error.with_note(format!(
            "deprovisioning the partial footprint failed too ({why}); the row at {uid} is kept so \
             a retry with the same token hash or a retirement can finish it"
        )));
    }
    Ok(match cx.recover(|cx| cx.revoke_managed_at(alias, uid))? {
        Ok(_) => error,
        Err(failed) => error.with_note(format!(
            "rolling back the grant failed too ({}); the row at {uid} is left for a retry \
                 with the same token hash",
            failed.message
        )),
    })
}
