//! `POST /exchange` (reference §3.5, §10.3): an IdP token (a signed-in human) or an agent secret
//! becomes a short-lived Cotal bearer bound to the actor's lifecycle and to its incarnation's
//! root credential. The decisions are core's (`actors::authorize`, the lifecycle machines), the
//! shape rules the face's (`face::exchange`), the signatures `io-http`'s; this module runs them
//! in the reference's order and turns the outcome into an answer and an audit line.

use std::sync::Arc;

use cotal_core::actors::authorize::{authorize_agent_exchange, authorize_human_grant};
use cotal_core::actors::ActorRow;
use cotal_core::error::EpError;
use cotal_core::jwt::UnixSeconds;
use cotal_core::names::{ActorToken, InstanceId, LifecycleUid, OwnerToken, Principal, SpaceName};
use cotal_core::session::SessionCoordinates;
use cotal_core::trust::DaemonMaterial;
use cotal_core::view::View;
use cotal_io_fs::FileActors;
use cotal_io_http::bearer::{BearerAct, BearerIssuer, SessionClaim};
use cotal_io_http::face::exchange::{self, ExchangeRequest, ExchangeShape, AGENT_BEARER_TTL_SECS};
use cotal_io_http::face::{Answer, Door, DoorRequest, StatusCode};
use cotal_io_http::idp_keys::IdpKeys;
use serde_json::json;

use super::manager_caller::ManagerCallers;
use super::metrics::PlaneMetrics;
use super::roots::MintRoots;
use super::session_caller::SessionCallers;
use crate::audit;

/// What the exchange needs, built once per plane.
pub(super) struct Exchange {
    pub(super) space: SpaceName,
    pub(super) material: DaemonMaterial,
    pub(super) idp: Arc<IdpKeys>,
    pub(super) ledger: FileActors,
    pub(super) bearers: BearerIssuer,
    pub(super) roots: MintRoots,
    pub(super) callers: ManagerCallers,
    pub(super) sessions: SessionCallers,
    pub(super) metrics: Arc<PlaneMetrics>,
}

impl std::fmt::Debug for Exchange {
    // The material holds secrets: only the space is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

impl Exchange {
    /// Answers one guarded `/exchange` request.
    pub(super) async fn answer(&self, request: &DoorRequest) -> Answer {
        let parsed = match exchange::parse(request.face, &request.body) {
            Ok(parsed) => parsed,
            Err(ExchangeShape::Malformed(why)) => return Answer::bad_request(why),
            Err(ExchangeShape::RefusedView(why)) => {
                tracing::warn!(peer = %request.peer, "refused an exchange: {why}");
                return Answer::refused(StatusCode::FORBIDDEN, why);
            }
        };
        let (arm, outcome) = match parsed {
            human @ ExchangeRequest::Human { .. } => ("human", self.human(human).await),
            agent @ ExchangeRequest::Agent { .. } => ("agent", self.agent(agent).await),
        };
        match outcome {
            Ok(minted) => {
                self.metrics.decided("exchange", None);
                audit::granted(
                    &minted.principal.key(),
                    "exchange",
                    &minted.row,
                    audit::At::default(),
                );
                let mut body = json!({
                    "token": minted.token,
                    "owner": minted.principal.owner().as_str(),
                    "exp": minted.exp,
                });
                if let (Some(instance), Some(o)) = (&minted.instance, body.as_object_mut()) {
                    o.insert("managerInstanceId".into(), json!(instance.as_str()));
                }
                Answer::ok(body)
            }
            Err(refusal) => {
                self.metrics.decided("exchange", Some(refusal.error.code));
                tracing::warn!(peer = %request.peer, arm, "refused an exchange: {}", refusal.error.message);
                audit::refused(&refusal.caller, "exchange", &refusal.row, &refusal.error);
                Answer::refusal(Door::Exchange, &refusal.error)
            }
        }
    }

    /// The human arm (§10.3): IdP token → derived owner → interactive grant (and the view's
    /// scope) → lifecycle → TTL = min(asked, cap, the IdP token's remaining life) → the
    /// incarnation's root credential → the bearer.
    async fn human(&self, request: ExchangeRequest) -> Result<Minted, Refusal> {
        let ExchangeRequest::Human {
            idp_token,
            actor,
            ttl_secs,
            view,
            manager_instance_id,
            session_grant,
        } = request
        else {
            return Err(Refusal::anonymous(EpError::internal(
                "not a human exchange",
            )));
        };
        let now = crate::clock::now_secs();
        let view = match view.as_deref() {
            None => None,
            Some(name) => Some(View::served_at_exchange(name).map_err(Refusal::anonymous)?),
        };
        let identity = self
            .idp
            .verify(&idp_token, UnixSeconds(now))
            .await
            .map_err(Refusal::anonymous)?;
        let owner = self
            .material
            .owner_for_idp_subject(&identity.subject)
            .map_err(Refusal::anonymous)?;
        // The reference selects the manager instance right after deriving the owner.
        let instance = match view {
            Some(View::ManagerCaller) => Some(
                self.select(owner.owner(), manager_instance_id.as_deref())
                    .await
                    .map_err(Refusal::anonymous)?,
            ),
            _ => None,
        };
        let actor = ActorToken::parse(&actor)
            .map_err(|e| Refusal::anonymous(EpError::permission_denied(e.message)))?;
        let principal = Principal::new(owner.owner().clone(), actor.clone());
        let refuse = |error| Refusal::of(&principal, error);
        let required = view.and_then(|v| v.required_scope().map(|s| (v.as_str(), s)));
        let grant = authorize_human_grant(&self.ledger, &self.space, &owner, &actor, required)
            .map_err(refuse)?;
        let cap = View::ttl_cap_secs(view);
        let asked = exchange::ttl_within(ttl_secs, cap).ok_or_else(|| {
            refuse(EpError::bad_request(format!(
                "ttlSec must be at least 1 (bearers live at most {cap} s)"
            )))
        })?;
        let mut remaining = identity.expires_at.0.saturating_sub(now);
        if remaining == 0 {
            return Err(refuse(EpError::permission_denied(
                "the IdP token has expired; sign in again",
            )));
        }
        // The session is checked against the holder's current lifecycle before anything is
        // signed (§3.5); the bearer never outlives the session it names.
        let session = match (view, &session_grant) {
            (Some(View::SessionCaller), Some(grant_value)) => {
                let claim = SessionCoordinates::from_grant(grant_value).map_err(refuse)?;
                let held = self
                    .sessions
                    .verify(
                        &principal,
                        &grant.lifecycle_uid,
                        claim,
                        now.saturating_mul(1000),
                    )
                    .await
                    .map_err(refuse)?;
                remaining = remaining.min(held.exp_secs.saturating_sub(now));
                if remaining == 0 {
                    return Err(refuse(EpError::permission_denied(
                        "session redemption refused: the session expires within the second",
                    )));
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
        act.view = view;
        act.manager_instance_id = instance;
        act.session = session;
        self.mint(
            principal,
            &grant.row,
            grant.lifecycle_uid,
            act,
            asked.min(remaining),
            now,
        )
        .await
    }

    /// The agent arm: the managed row the secret opens, its lifecycle, TTL ≤ 300 s, the
    /// incarnation's root credential, the bearer.
    async fn agent(&self, request: ExchangeRequest) -> Result<Minted, Refusal> {
        let ExchangeRequest::Agent {
            owner,
            actor,
            secret,
            ttl_secs,
            manager_caller,
            manager_instance_id,
        } = request
        else {
            return Err(Refusal::anonymous(EpError::internal(
                "not an agent exchange",
            )));
        };
        let now = crate::clock::now_secs();
        let row = authorize_agent_exchange(&self.ledger, &owner, &actor, &secret)
            .map_err(Refusal::anonymous)?;
        let principal = row.principal();
        let refuse = |error| Refusal::of(&principal, error);
        let uid = row.lifecycle_uid.clone().ok_or_else(|| {
            refuse(EpError::permission_denied(format!(
                "actor {actor:?} has no lifecycleUid on its ledger row - respawn it (bearers are \
                 lifecycle-bound)"
            )))
        })?;
        let instance = match manager_caller {
            true => Some(
                self.select(&row.owner, manager_instance_id.as_deref())
                    .await
                    .map_err(refuse)?,
            ),
            false => None,
        };
        let ttl = exchange::ttl_within(ttl_secs, AGENT_BEARER_TTL_SECS).ok_or_else(|| {
            refuse(EpError::bad_request(format!(
                "ttlSec must be at least 1 (agent bearers live at most {AGENT_BEARER_TTL_SECS} s)"
            )))
        })?;
        let mut act = BearerAct::new(row.owner.clone(), row.actor.clone());
        act.scope = Some(row.scope.clone());
        act.parent = row.parent.clone();
        if instance.is_some() {
            act.view = Some(View::ManagerCaller);
            act.manager_instance_id = instance;
        }
        self.mint(principal, &row, uid, act, ttl, now).await
    }

    /// §3.10 for a `manager-caller` bearer: the requested instance (its grammar checked
    /// first), or the owner's one live remote manager.
    async fn select(
        &self,
        owner: &OwnerToken,
        requested: Option<&str>,
    ) -> Result<InstanceId, EpError> {
        let requested = requested
            .map(|id| {
                InstanceId::parse(id).map_err(|e| {
                    EpError::bad_request(format!("managerInstanceId is malformed: {}", e.message))
                })
            })
            .transpose()?;
        self.callers.select(owner, requested).await
    }

    /// Ensures the incarnation's root credential **before** signing (the bearer names it, and the
    /// callout admits only a live, stamped one), then signs.
    async fn mint(
        &self,
        principal: Principal,
        row: &ActorRow,
        uid: LifecycleUid,
        mut act: BearerAct,
        ttl: u64,
        now: u64,
    ) -> Result<Minted, Refusal> {
        let refuse = |error| Refusal::of(&principal, error);
        let credential = self
            .roots
            .ensure(&principal, &uid, now.saturating_mul(1000))
            .await
            .map_err(refuse)?;
        act.lifecycle_uid = Some(uid.clone());
        act.credential_id = Some(credential.clone());
        let instance = act.manager_instance_id.clone();
        let issued = self
            .bearers
            .issue(&act, Some(ttl), UnixSeconds(now))
            .map_err(refuse)?;
        Ok(Minted {
            row: format!("cred.{uid}.{credential}"),
            principal: row.principal(),
            token: issued.token,
            exp: issued.expires_at.0,
            instance,
        })
    }
}

/// A minted bearer and what the audit line names.
struct Minted {
    principal: Principal,
    row: String,
    token: String,
    exp: u64,
    /// The manager instance a `manager-caller` bearer is pinned to, echoed to the caller.
    instance: Option<InstanceId>,
}

/// A refused exchange: the error, and who and what the audit line names (a caller that never
/// authenticated is `anonymous`; its claimed name is not evidence).
struct Refusal {
    caller: String,
    row: String,
    error: EpError,
}

impl Refusal {
    fn anonymous(error: EpError) -> Refusal {
        Refusal {
            caller: "anonymous".to_owned(),
            row: "-".to_owned(),
            error,
        }
    }

    fn of(principal: &Principal, error: EpError) -> Refusal {
        Refusal {
            caller: principal.key(),
            row: format!("actor.{}", principal.key()),
            error,
        }
    }
}
