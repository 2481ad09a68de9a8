//! The plane's answer to each auth-callout connect (reference §8.2–§8.4): a bearer the plane
//! signed, for an actor the ledger still grants at the bearer's lifecycle, whose credential row
//! is live on the store — then the actor's profile (its ledger row's agent profile, or its
//! view's), in a user JWT that dies with the bearer. Every check fails closed: a plane that is
//! not serving, an unreadable ledger or store, or a store whose shape is unproven denies.

use std::sync::Arc;

use cotal_core::actors::authorize::authorize_connect;
use cotal_core::actors::RowSpace;
use cotal_core::callout::{Admit, ConnectRequest};
use cotal_core::error::EpError;
use cotal_core::jwt::UnixSeconds;
use cotal_core::lifecycle::AuthorizeConnectCredential;
use cotal_core::machine::Replay;
use cotal_core::names::{Principal, SpaceName};
use cotal_core::profiles::{
    agent, session_caller, view_profile, AgentBinding, ConnId, ConnectTtl, ConnectViewBinding,
    ManagerCallerBinding, SessionCallerBinding, ViewBinding,
};
use cotal_core::session::SessionCoordinates;
use cotal_core::view::View;
use cotal_io_fs::FileActors;
use cotal_io_http::bearer::BearerIssuer;
use cotal_io_nats::callout::{Authorize, AuthorizeFuture};
use cotal_io_nats::NatsWorld;
use tokio::sync::watch;

use super::connections::PlaneLink;
use super::manager_caller::ManagerCallers;
use super::metrics::PlaneMetrics;
use super::session_caller::SessionCallers;
use super::Readiness;
use crate::audit;

/// What an agent is told by a plane that is not serving (the operator's cause is on /health).
const NOT_SERVING: &str = "the auth service is momentarily unavailable; retry shortly";

/// Decides the plane's callout connects.
pub(super) struct ConnectAuthorizer {
    pub(super) space: SpaceName,
    pub(super) bearers: BearerIssuer,
    pub(super) ledger: FileActors,
    pub(super) callers: ManagerCallers,
    pub(super) sessions: SessionCallers,
    pub(super) connections: PlaneLink,
    pub(super) readiness: watch::Receiver<Readiness>,
    pub(super) metrics: Arc<PlaneMetrics>,
}

impl ConnectAuthorizer {
    /// The checks in the reference's order: serving, the bearer, the ledger row (scope and
    /// lifecycle), the live credential row (and a root's head stamp), the nonce, the profile.
    async fn decide(&self, request: &ConnectRequest) -> Result<(Principal, Admit), EpError> {
        if *self.readiness.borrow() != Readiness::Ready {
            return Err(EpError::unavailable(NOT_SERVING));
        }
        let token = request.bearer.as_ref().ok_or_else(|| {
            EpError::permission_denied(
                "the connect carries no bearer (auth_token); exchange for one at /exchange",
            )
        })?;
        let now = crate::clock::now_secs();
        let bearer = self.bearers.verify(token.expose(), UnixSeconds(now))?;
        let act = &bearer.act;
        let principal = Principal::new(act.owner.clone(), act.actor.clone());
        let scope = act.scope.clone().unwrap_or_default();
        let held = authorize_connect(&self.ledger, &principal, &scope, act.lifecycle_uid.as_ref())?;
        let (Some(uid), Some(credential)) = (act.lifecycle_uid.clone(), act.credential_id.clone())
        else {
            return Err(EpError::permission_denied(
                "the bearer names no credential; exchange again",
            ));
        };
        let check = AuthorizeConnectCredential {
            holder: principal.clone(),
            lifecycle_uid: uid.clone(),
            credential_id: credential,
            now_ms: now.saturating_mul(1000),
        };
        let bound = self.connections.get()?.reader.space().map_err(|e| {
            EpError::permission_denied(format!("the connect reader is down: {}", e.message))
        })?;
        NatsWorld::new(&bound).run(&mut Replay::new(check)).await?;
        let nonce = request.nonce.as_deref().unwrap_or_default();
        let conn_nonce = ConnId::parse(nonce).map_err(|e| {
            EpError::permission_denied(format!(
                "the connection name must be the client's inbox nonce: {}",
                e.message
            ))
        })?;
        let ttl = ConnectTtl::until(UnixSeconds(now), bearer.expires_at)?;
        let view_binding = ViewBinding {
            space: self.space.clone(),
            principal: principal.clone(),
            conn_nonce,
            ttl,
        };
        let profile = match act.view {
            Some(View::ManagerCaller) => {
                let instance = act.manager_instance_id.clone().ok_or_else(|| {
                    EpError::permission_denied("a manager-caller bearer names no manager instance")
                })?;
                self.callers.authorize(&act.owner, &instance).await?;
                let binding = ManagerCallerBinding {
                    view: view_binding,
                    lifecycle_uid: uid,
                    instance,
                    issued: None,
                };
                self.callers
                    .profile(binding, held.space == RowSpace::Interactive)
                    .await?
            }
            Some(View::SessionCaller) => {
                let claim = act.session.as_ref().ok_or_else(|| {
                    EpError::permission_denied("a session-caller bearer names no session")
                })?;
                let coordinates = SessionCoordinates::from_claim(
                    &claim.endpoint,
                    &claim.session_id,
                    claim.epoch,
                )?;
                let held = self
                    .sessions
                    .verify(&principal, &uid, coordinates, now.saturating_mul(1000))
                    .await?;
                if held.exp_secs != claim.exp {
                    return Err(EpError::permission_denied(
                        "the session row's expiry is not the bearer's session claim; exchange                          again",
                    ));
                }
                session_caller(&SessionCallerBinding {
                    view: view_binding,
                    endpoint: held.endpoint,
                    session: held.session_id,
                    epoch: held.epoch,
                })?
            }
            None => agent(&AgentBinding {
                space: self.space.clone(),
                principal: principal.clone(),
                lifecycle_uid: uid,
                allow_subscribe: held.row.allow_subscribe.clone(),
                allow_publish: held.row.allow_publish.clone(),
                role: held.row.role.clone(),
                scope,
                conn_nonce: view_binding.conn_nonce,
                ttl,
            })?,
            Some(view) => view_profile(
                view,
                &ConnectViewBinding {
                    view: view_binding,
                    lifecycle_uid: uid,
                    scope,
                },
            )?,
        };
        Ok((
            principal.clone(),
            Admit {
                // The dash form, as the reference names a callout user: a reader attributing
                // `CONNZ`'s `authorized_user` reads it so.
                name: principal.name(),
                permissions: profile.permissions,
                tags: profile.tags,
                expires_at: bearer.expires_at,
            },
        ))
    }
}

impl Authorize for ConnectAuthorizer {
    fn authorize(&self, request: ConnectRequest) -> AuthorizeFuture<'_> {
        Box::pin(async move {
            match self.decide(&request).await {
                Ok((principal, admit)) => {
                    self.metrics.decided("connect", None);
                    audit::granted(
                        &principal.key(),
                        "connect",
                        &principal.key(),
                        audit::At::default(),
                    );
                    Ok(admit)
                }
                Err(e) => {
                    self.metrics.decided("connect", Some(e.code));
                    audit::refused("connect", "connect", request.user_nkey.as_str(), &e);
                    Err(e.message)
                }
            }
        })
    }
}
