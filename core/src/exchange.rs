//! `POST /exchange` (reference §3.5, §10.3) after its token checks: a signed-in human (an IdP
//! token the adapter verified, its owner derived) or an agent secret becomes the plan of a
//! short-lived bearer bound to the actor's lifecycle and to its incarnation's root credential.
//! The script reads the ledger through its effect and runs the manager selection, the session
//! check and the root-credential ensure as sub-scripts, in the reference's order; the adapter
//! signs the plan and answers.

use serde_json::Value;

use crate::actors::authorize::{authorize_agent_exchange, authorize_human_grant};
use crate::actors::ActorRow;
use crate::bearer::{BearerAct, SessionClaim};
use crate::error::EpError;
use crate::jwt::UnixSeconds;
use crate::lifecycle::{EnsureRootCredential, RootEntropy};
use crate::machine::{Ctx, Halt, Script};
use crate::manager::{LocalManager, SelectManagerInstance};
use crate::names::{
    ActorToken, CredentialId, DerivedOwner, InstanceId, LifecycleUid, ManagerInstance, OwnerToken,
    Principal, SpaceName,
};
use crate::session::{SessionCoordinates, VerifySession};
use crate::view::View;

/// The longest an agent's bearer lives, in seconds.
pub const AGENT_BEARER_TTL_SECS: u64 = 300;

/// The lifetime a caller asked for within `cap`: absent is the cap, a fraction is floored, a
/// huge ask is the cap; below one second (or not a number) is no lifetime at all.
pub fn ttl_within(asked: Option<f64>, cap: u64) -> Option<u64> {
    match asked {
        None => Some(cap),
        Some(t) if t.is_finite() && t >= 1.0 => {
            // Saturating: a huge ask is simply the cap.
            let whole = if t >= cap as f64 { cap } else { t as u64 };
            Some(whole.min(cap))
        }
        Some(_) => None,
    }
}

/// A signed-in human, after the adapter verified its IdP token: the owner derived from the
/// token's subject, and when that token expires (the bearer never outlives it).
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub owner: DerivedOwner,
    pub token_expires_at: UnixSeconds,
    pub actor: String,
    /// A view the exchange serves ([`View::served_at_exchange`], checked before the token).
    pub view: Option<View>,
    pub session_grant: Option<Value>,
}

/// An agent presenting its secret for its managed row, as the body names it (nothing in it is
/// evidence until the secret matched).
#[derive(Debug, Clone)]
pub struct AgentSecret {
    pub owner: String,
    pub actor: String,
    pub secret: String,
    /// The agent asks for the `manager-caller` view.
    pub manager_caller: bool,
}

impl AgentSecret {
    /// The principal the body claims, when its names parse: a hint for the root-credential
    /// cache, never an identity.
    pub fn claimed(&self) -> Option<Principal> {
        match (
            OwnerToken::parse(&self.owner),
            ActorToken::parse(&self.actor),
        ) {
            (Ok(owner), Ok(actor)) => Some(Principal::new(owner, actor)),
            _ => None,
        }
    }
}

/// Who asks, after the adapter's token checks.
#[derive(Debug, Clone)]
pub enum Exchanger {
    Human(SignedIn),
    Agent(AgentSecret),
}

impl Exchanger {
    /// The principal the exchanger claims, when its names parse: a hint for the
    /// root-credential cache, never an identity (a human's owner is verified, its actor not yet
    /// granted; an agent's names are unproven until its secret matched).
    pub fn claimed(&self) -> Option<Principal> {
        match self {
            Exchanger::Human(human) => ActorToken::parse(&human.actor)
                .ok()
                .map(|actor| Principal::new(human.owner.owner().clone(), actor)),
            Exchanger::Agent(agent) => agent.claimed(),
        }
    }

    /// Whether the bearer asked for is a `manager-caller`'s, whose selection reads the
    /// workspace's own manager.
    pub fn asks_manager_caller(&self) -> bool {
        match self {
            Exchanger::Human(human) => human.view == Some(View::ManagerCaller),
            Exchanger::Agent(agent) => agent.manager_caller,
        }
    }
}

/// What the root-credential ensure needs from the adapter.
#[derive(Debug, Clone)]
pub struct RootInputs {
    /// The minting authority the head and reservation record (`auth-service:<space>`).
    pub manager_instance: ManagerInstance,
    pub entropy: RootEntropy,
    /// The lifecycle and root id an earlier ensure of the caller's actor returned: a hint used
    /// only when the lifecycle is still the grant's, never evidence (the head decides).
    pub known: Option<(LifecycleUid, CredentialId)>,
}

/// One exchange to plan.
#[derive(Debug, Clone)]
pub struct PlanExchange {
    pub space: SpaceName,
    pub exchanger: Exchanger,
    pub ttl_secs: Option<f64>,
    pub manager_instance_id: Option<String>,
    pub now: UnixSeconds,
    /// The workspace's own manager, read fresh by the adapter (§3.10).
    pub local: Option<LocalManager>,
    pub root: RootInputs,
}

/// A bearer to sign.
#[derive(Debug, Clone)]
pub struct BearerPlan {
    /// The ledger row's principal, whom the audit line names.
    pub principal: Principal,
    /// The claim, its lifecycle and root credential set.
    pub act: BearerAct,
    pub ttl_secs: u64,
    /// The credential row the bearer is bound to (`cred.<uid>.<id>`), for the audit line.
    pub row: String,
}

/// A refused exchange and whom the audit line names: `None` for a caller that never
/// authenticated (its claimed name is not evidence).
#[derive(Debug, Clone)]
pub struct ExchangeRefusal {
    pub caller: Option<Principal>,
    pub error: EpError,
}

impl Script for PlanExchange {
    type Output = Result<BearerPlan, ExchangeRefusal>;

    /// Keeps the exchange's fences: only a granted actor at its current lifecycle gets a bearer,
    /// the root credential is ensured before anything is signed (the callout admits only a live,
    /// stamped one), and a bearer outlives neither its IdP token nor the session it names.
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Self::Output, Halt> {
        let mut caller = None;
        let planned = cx.recover(|cx| match &self.exchanger {
            Exchanger::Human(human) => self.human(cx, human, &mut caller),
            Exchanger::Agent(agent) => self.agent(cx, agent, &mut caller),
        })?;
        Ok(planned.map_err(|error| ExchangeRefusal { caller, error }))
    }
}

impl PlanExchange {
    /// The human arm (§10.3): owner → the manager selection (a `manager-caller` view) → the
    /// interactive grant (and the view's scope) → TTL = min(asked, cap, the IdP token's
    /// remaining life, the session's) → the root credential → the plan.
    fn human(
        &self,
        cx: &mut Ctx<'_>,
        human: &SignedIn,
        caller: &mut Option<Principal>,
    ) -> Result<BearerPlan, Halt> {
        let SignedIn {
            owner,
            token_expires_at,
            actor,
            view,
            session_grant,
        } = human;
        let now = self.now.0;
        // The reference selects the manager instance right after deriving the owner.
        let instance = match view {
            Some(View::ManagerCaller) => Some(self.select(cx, owner.owner())?),
            _ => None,
        };
        let actor = ActorToken::parse(actor).map_err(|e| EpError::permission_denied(e.message))?;
        let principal = Principal::new(owner.owner().clone(), actor.clone());
        *caller = Some(principal.clone());
        let required = view.and_then(|v| v.required_scope().map(|s| (v.as_str(), s)));
        let grant = authorize_human_grant(cx, &self.space, owner, &actor, required)?;
        let cap = View::ttl_cap_secs(*view);
        let asked = ttl_within(self.ttl_secs, cap).ok_or_else(|| {
            EpError::bad_request(format!(
                "ttlSec must be at least 1 (bearers live at most {cap} s)"
            ))
        })?;
        let mut remaining = token_expires_at.0.saturating_sub(now);
        if remaining == 0 {
            return Err(
                EpError::permission_denied("the IdP token has expired; sign in again").into(),
            );
        }
        // The session is checked against the holder's current lifecycle before anything is
        // signed (§3.5); the bearer never outlives the session it names.
        let session = match (view, session_grant) {
            (Some(View::SessionCaller), Some(grant_value)) => {
                let claim = SessionCoordinates::from_grant(grant_value)?;
                let held = cx.call(&VerifySession {
                    space: self.space.clone(),
                    holder: principal.clone(),
                    lifecycle_uid: grant.lifecycle_uid.clone(),
                    claim,
                    now_ms: now.saturating_mul(1000),
                })?;
                remaining = remaining.min(held.exp_secs.saturating_sub(now));
                if remaining == 0 {
                    return Err(EpError::permission_denied(
                        "session redemption refused: the session expires within the second",
                    )
                    .into());
                }
                Some(SessionClaim {
                    endpoint: held.endpoint.to_string(),
                    session_id: held.session_id.to_string(),
                    epoch: held.epoch.0,
                    exp: held.exp_secs,
                })
            }
            _ => None,
        };
        let mut act = BearerAct::new(owner.owner().clone(), actor);
        act.scope = Some(grant.row.scope.clone());
        act.parent = grant.row.parent.clone();
        act.view = *view;
        act.manager_instance_id = instance;
        act.session = session;
        self.bind(
            cx,
            &grant.row,
            grant.lifecycle_uid,
            act,
            asked.min(remaining),
        )
    }

    /// The agent arm: the managed row the secret opens, its lifecycle, TTL ≤ 300 s, the
    /// incarnation's root credential, the plan.
    fn agent(
        &self,
        cx: &mut Ctx<'_>,
        agent: &AgentSecret,
        caller: &mut Option<Principal>,
    ) -> Result<BearerPlan, Halt> {
        let AgentSecret {
            owner,
            actor,
            secret,
            manager_caller,
        } = agent;
        let row = authorize_agent_exchange(cx, owner, actor, secret)?;
        *caller = Some(row.principal());
        let uid = row.lifecycle_uid.clone().ok_or_else(|| {
            EpError::permission_denied(format!(
                "actor {actor:?} has no lifecycleUid on its ledger row - respawn it (bearers are \
                 lifecycle-bound)"
            ))
        })?;
        let instance = match manager_caller {
            true => Some(self.select(cx, &row.owner)?),
            false => None,
        };
        let ttl = ttl_within(self.ttl_secs, AGENT_BEARER_TTL_SECS).ok_or_else(|| {
            EpError::bad_request(format!(
                "ttlSec must be at least 1 (agent bearers live at most {AGENT_BEARER_TTL_SECS} s)"
            ))
        })?;
        let mut act = BearerAct::new(row.owner.clone(), row.actor.clone());
        act.scope = Some(row.scope.clone());
        act.parent = row.parent.clone();
        if instance.is_some() {
            act.view = Some(View::ManagerCaller);
            act.manager_instance_id = instance;
        }
        self.bind(cx, &row, uid, act, ttl)
    }

    /// §3.10 for a `manager-caller` bearer: the requested instance (its grammar checked first),
    /// or the owner's one live remote manager.
    fn select(&self, cx: &mut Ctx<'_>, owner: &OwnerToken) -> Result<InstanceId, Halt> {
        let requested = self
            .manager_instance_id
            .as_deref()
            .map(|id| {
                InstanceId::parse(id).map_err(|e| {
                    EpError::bad_request(format!("managerInstanceId is malformed: {}", e.message))
                })
            })
            .transpose()?;
        let selected = cx.call(&SelectManagerInstance {
            space: self.space.clone(),
            owner: owner.clone(),
            local: self.local.clone(),
            requested,
        })?;
        Ok(InstanceId::clone(&selected))
    }

    /// Ensures the incarnation's root credential **before** the bearer is signed (the bearer
    /// names it, and the callout admits only a live, stamped one), then binds the claim to it.
    fn bind(
        &self,
        cx: &mut Ctx<'_>,
        row: &ActorRow,
        uid: LifecycleUid,
        mut act: BearerAct,
        ttl_secs: u64,
    ) -> Result<BearerPlan, Halt> {
        let root = cx.call(&EnsureRootCredential {
            owner: row.owner.clone(),
            actor: row.actor.clone(),
            lifecycle_uid: uid.clone(),
            manager_instance: self.root.manager_instance.clone(),
            now_ms: self.now.0.saturating_mul(1000),
            entropy: self.root.entropy,
            known: self
                .root
                .known
                .as_ref()
                .filter(|(known, _)| *known == uid)
                .map(|(_, id)| id.clone()),
        })?;
        let credential = root.credential_id.clone();
        act.lifecycle_uid = Some(uid.clone());
        act.credential_id = Some(credential.clone());
        Ok(BearerPlan {
            principal: row.principal(),
            act,
            ttl_secs,
            row: format!("cred.{uid}.{credential}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifetime_is_floored_capped_and_never_below_a_second() {
        assert_eq!(ttl_within(None, 900), Some(900));
        assert_eq!(ttl_within(Some(1.9), 900), Some(1));
        assert_eq!(ttl_within(Some(1e12), 300), Some(300));
        assert_eq!(ttl_within(Some(0.0), 900), None);
        assert_eq!(ttl_within(Some(-5.0), 900), None);
        assert_eq!(ttl_within(Some(f64::NAN), 900), None);
    }
}
