//! The plane's decision on one auth-callout connect (reference §8.2–§8.4), as a script: from a
//! bearer whose signature the adapter verified, the connection's name and `now`, to the user the
//! broker admits (or the refusal). The checks run in the reference's order: the ledger row (scope
//! and lifecycle), the live credential row (and for a root, the head's stamp), the inbox nonce,
//! the lifetime, the nonce's binding to the principal ([`BindInbox`]: beyond the reference, which
//! let any principal connect under any well-formed nonce), then the profile of the bearer's view
//! with that view's own re-check (the manager instance, the redeemed session). Every check fails
//! closed: an unreadable ledger or store denies.

use crate::actors::authorize::authorize_connect;
use crate::actors::RowSpace;
use crate::bearer::BearerAct;
use crate::callout::Admit;
use crate::error::EpError;
use crate::inbox::BindInbox;
use crate::issued::{IssueManagerCaller, IssuedGeneration};
use crate::jwt::UnixSeconds;
use crate::kv::ReadOutcome;
use crate::lifecycle::AuthorizeConnectCredential;
use crate::machine::{Ctx, Halt, Script};
use crate::manager::{AuthorizeManagerCaller, LocalManager};
use crate::names::{LifecycleUid, Principal, SpaceName};
use crate::profiles::{
    agent, manager_caller, session_caller, view_profile, AgentBinding, ConnId, ConnectTtl,
    ConnectViewBinding, ManagerCallerBinding, Profile, SessionCallerBinding, ViewBinding,
};
use crate::session::{SessionCoordinates, VerifySession};
use crate::view::ConnectSource;

/// One connect to decide.
#[derive(Debug, Clone)]
pub struct DecideConnect {
    pub space: SpaceName,
    /// The verified bearer's `act` claim.
    pub act: BearerAct,
    /// The verified bearer's `exp`: the admitted user dies with it.
    pub expires_at: UnixSeconds,
    /// The connection's name (`connect_opts.name`): the client's inbox nonce.
    pub connection_name: Option<String>,
    pub now: UnixSeconds,
    /// The workspace's own manager, read fresh by the adapter for a `manager-caller` bearer
    /// (§3.10: a re-check never trusts a cached identity).
    pub local: Option<LocalManager>,
    /// Entropy for an interactive `manager-caller`'s first issuance (unused otherwise).
    pub fresh_generation: IssuedGeneration,
    /// The principal this plane has already seen bound to the connection name
    /// ([`crate::inbox::KnownBindings`]): judged without a read, a binding being write-once.
    pub known_binding: Option<Principal>,
}

/// An admitted connect: the principal the audit line names and the user the broker admits.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub principal: Principal,
    pub admit: Admit,
}

impl Script for DecideConnect {
    type Output = Admitted;

    /// Keeps the connect-time fences: a revoked or retired credential, a re-granted lifecycle
    /// and a narrowed scope never connect (reference §8.3), a view's authority is re-read at the
    /// mint, never trusted from the bearer (§8.4), and an inbox nonce admits only the principal
    /// it is bound to (issue 26 item 1: no connection of one principal is granted another's
    /// inbox).
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Admitted, Halt> {
        let act = &self.act;
        let principal = Principal::new(act.owner.clone(), act.actor.clone());
        let scope = act.scope.clone().unwrap_or_default();
        let held = authorize_connect(cx, &principal, &scope, act.lifecycle_uid.as_ref())?;
        let (Some(uid), Some(credential)) = (act.lifecycle_uid.clone(), act.credential_id.clone())
        else {
            return Err(EpError::permission_denied(
                "the bearer names no credential; exchange again",
            )
            .into());
        };
        let credential = AuthorizeConnectCredential {
            holder: principal.clone(),
            lifecycle_uid: uid.clone(),
            credential_id: credential,
            now_ms: self.now.0.saturating_mul(1000),
        };
        let nonce = ConnId::parse(self.connection_name.as_deref().unwrap_or_default());
        let read = nonce.as_ref().ok().filter(|_| self.known_binding.is_none());
        // One round trip for every row the connect stands on: the credential, the head and,
        // unless this plane has seen it, the nonce's binding. Each judgement holds in whichever
        // order they land (the credential's doc says why its two do; a binding never changes).
        let [row, head] = credential.reads();
        let (row, head, binding) = match read {
            Some(nonce) => {
                let [row, head, binding] =
                    cx.reads_together([row, head, BindInbox::read_of(nonce)])?;
                (row, head, Some(binding))
            }
            None => {
                let [row, head] = cx.reads_together([row, head])?;
                (row, head, None)
            }
        };
        credential.judge(row, head)?;
        let conn_nonce = nonce.map_err(|e| {
            EpError::permission_denied(format!(
                "the connection name must be the client's inbox nonce: {}",
                e.message
            ))
        })?;
        let ttl = ConnectTtl::until(self.now, self.expires_at)?;
        // Last of the checks on the principal and before anything is issued for the
        // connection: a connect refused for any other reason never binds a nonce, and no
        // profile (nor a manager-caller's issuance) is made on a nonce another principal holds.
        let bind = BindInbox {
            nonce: conn_nonce.clone(),
            principal: principal.clone(),
        };
        match (&self.known_binding, binding) {
            (Some(holder), _) => bind.admits(holder)?,
            (None, read) => bind.bind_after(
                cx,
                read.unwrap_or_else(|| ReadOutcome::Unavailable("the binding was not read".into())),
            )?,
        }
        let view = ViewBinding {
            space: self.space.clone(),
            principal: principal.clone(),
            conn_nonce,
            ttl,
        };
        let profile = match act.view {
            None => agent(&AgentBinding {
                space: self.space.clone(),
                principal: principal.clone(),
                lifecycle_uid: uid,
                allow_subscribe: held.row.allow_subscribe.clone(),
                allow_publish: held.row.allow_publish.clone(),
                role: held.row.role.clone(),
                scope,
                conn_nonce: view.conn_nonce,
                ttl,
            })?,
            Some(v) => match v.connect_source() {
                ConnectSource::ManagerCaller => {
                    self.manager_caller(cx, view, uid, held.space == RowSpace::Interactive)?
                }
                ConnectSource::SessionCaller => self.session_caller(cx, view, &uid)?,
                _ => view_profile(
                    v,
                    &ConnectViewBinding {
                        view,
                        lifecycle_uid: uid,
                        scope,
                    },
                )?,
            },
        };
        Ok(Admitted {
            admit: Admit {
                // The dash form, as the reference names a callout user: a reader attributing
                // `CONNZ`'s `authorized_user` reads it so.
                name: principal.name(),
                permissions: profile.permissions,
                tags: profile.tags,
                limits: profile.limits,
                expires_at: self.expires_at,
            },
            principal,
        })
    }
}

impl DecideConnect {
    /// §8.4 for `manager-caller`: the bearer's instance is still a candidate of its owner's,
    /// then an interactive row's connection is issued (SPEC §13.15, its ledger row the
    /// issuance's source); a managed row's view stays on the legacy rail and issues nothing.
    fn manager_caller(
        &self,
        cx: &mut Ctx<'_>,
        view: ViewBinding,
        uid: LifecycleUid,
        interactive: bool,
    ) -> Result<Profile, Halt> {
        let instance = self.act.manager_instance_id.clone().ok_or_else(|| {
            EpError::permission_denied("a manager-caller bearer names no manager instance")
        })?;
        cx.call(&AuthorizeManagerCaller {
            space: self.space.clone(),
            owner: self.act.owner.clone(),
            local: self.local.clone(),
            instance: instance.clone(),
        })?;
        let binding = ManagerCallerBinding {
            view,
            lifecycle_uid: uid,
            instance,
            issued: None,
        };
        if !interactive {
            return Ok(manager_caller(&binding)?);
        }
        let issued = cx.call(&IssueManagerCaller {
            binding,
            fresh_generation: self.fresh_generation.clone(),
        })?;
        Ok(Profile::clone(&issued))
    }

    /// §8.4 for `session-caller`: the holder still holds the bearer's session at its lifecycle,
    /// and the row's expiry is the one the bearer was signed with.
    fn session_caller(
        &self,
        cx: &mut Ctx<'_>,
        view: ViewBinding,
        uid: &LifecycleUid,
    ) -> Result<Profile, Halt> {
        let claim = self.act.session.as_ref().ok_or_else(|| {
            EpError::permission_denied("a session-caller bearer names no session")
        })?;
        let coordinates =
            SessionCoordinates::from_claim(&claim.endpoint, &claim.session_id, claim.epoch)?;
        let held = cx.call(&VerifySession {
            space: self.space.clone(),
            holder: view.principal.clone(),
            lifecycle_uid: uid.clone(),
            claim: coordinates,
            now_ms: self.now.0.saturating_mul(1000),
        })?;
        if held.exp_secs != claim.exp {
            return Err(EpError::permission_denied(
                "the session row's expiry is not the bearer's session claim; exchange again",
            )
            .into());
        }
        Ok(session_caller(&SessionCallerBinding {
            view,
            endpoint: held.endpoint.clone(),
            session: held.session_id.clone(),
            epoch: held.epoch,
        })?)
    }
}
