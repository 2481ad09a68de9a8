//! `manager-admin-authorization` (reference-auth-service §4.7): a registered remote manager asks
//! whether one of its users (the caller `{owner, actor, lifecycleUid}` an admin-tier command
//! came from) currently holds the ledger scope `admin`.
//!
//! **One boolean, nothing else.** The answer is the request's echo, the authenticated manager
//! owner and `authorized`. An absent row, a revoked or narrowed grant, a caller of another
//! owner and a caller at another lifecycle of the actor are all the same `false`, so the
//! manager learns nothing about the ledger beyond the one question it may ask. The row is read
//! fresh on every call from both row spaces (the reference's `findActorUnified`), so a revoke,
//! a narrowing or a re-grant (which rotates the lifecycle) is seen at the very next command. A
//! ledger that cannot be read, or that grants the principal in both spaces, fails the request
//! closed rather than answering `false`.
//!
//! **Who may ask.** The request is closed and carries the current-registration envelope: the
//! human holder needs `supervise` (F90), and the manager is checked against its instance's
//! current open gate, serve principal, serve epoch and host-issued proof through the one door
//! (F94's check). Only then is the ledger read.

use serde_json::Value;

use crate::actors::LedgerRead;
use crate::enrollment::{grammar, open_closed, refuse, ManagedEnvelope};
use crate::error::EpError;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{ActorToken, DerivedOwner, LifecycleUid, OwnerToken, Principal};
use crate::wire::ObjectWriter;

use super::door::ADMIN_AUTHORIZATION;
use super::echo_current;
use super::host::{ManagerHost, Supervisor};

/// The request kind this door serves.
pub const ADMIN_AUTHORIZATION_KIND: &str = "manager-admin-authorization";
/// The ledger scope the decision is about.
pub const ADMIN_SCOPE: &str = "admin";

/// How the door's refusals name it.
const WHAT: &str = "manager admin authorization";

/// The user a manager asks about: a derived owner's actor at one lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminCaller {
    pub owner: DerivedOwner,
    pub actor: ActorToken,
    pub lifecycle_uid: LifecycleUid,
}

impl AdminCaller {
    fn to_json(&self) -> String {
        ObjectWriter::new()
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("lifecycleUid", self.lifecycle_uid.as_str())
            .finish()
    }
}

/// A parsed `manager-admin-authorization` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminAuthorizationRequest {
    pub envelope: ManagedEnvelope,
    pub caller: AdminCaller,
}

impl AdminAuthorizationRequest {
    /// The reference's closed parser, in its order: an object, no unknown member, the
    /// current-registration envelope, then `caller`: an object of exactly `owner`, `actor` and
    /// `lifecycleUid`, each non-empty, then their grammars (a derived owner, an actor token, a
    /// lifecycle token). Every refusal is `bad-request` "manager admin authorization request …".
    pub fn parse(raw: &Value) -> Result<AdminAuthorizationRequest, EpError> {
        let (map, envelope) = open_closed(raw, WHAT, ADMIN_AUTHORIZATION_KIND, &["caller"])?;
        let caller = map
            .get("caller")
            .and_then(Value::as_object)
            .ok_or_else(|| refuse(WHAT, "requires caller"))?;
        const CALLER: [&str; 3] = ["owner", "actor", "lifecycleUid"];
        if caller.len() != CALLER.len() || !CALLER.iter().all(|k| caller.contains_key(*k)) {
            return Err(refuse(
                WHAT,
                "caller must contain exactly owner, actor, lifecycleUid",
            ));
        }
        let field = |key: &str| {
            caller
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| refuse(WHAT, format!("requires non-empty caller.{key}")))
        };
        let (owner, actor, uid) = (field("owner")?, field("actor")?, field("lifecycleUid")?);
        Ok(AdminAuthorizationRequest {
            envelope,
            caller: AdminCaller {
                owner: DerivedOwner::parse(owner).map_err(grammar(WHAT))?,
                actor: ActorToken::parse(actor).map_err(grammar(WHAT))?,
                lifecycle_uid: LifecycleUid::parse(uid).map_err(grammar(WHAT))?,
            },
        })
    }
}

/// The door's answer: the request echoed, the authenticated manager owner and the one boolean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminAuthorization {
    pub request: AdminAuthorizationRequest,
    pub owner: OwnerToken,
    pub authorized: bool,
}

impl AdminAuthorization {
    /// The wire answer: the request's members in the reference's order (`identities` and
    /// `caller` included), then `owner` and `authorized`.
    pub fn to_json(&self) -> String {
        let r = &self.request;
        echo_current(ADMIN_AUTHORIZATION_KIND, &r.envelope, None)
            .raw("identities", &r.envelope.manager.identities.to_json())
            .raw("caller", &r.caller.to_json())
            .string("owner", self.owner.as_str())
            .raw("authorized", if self.authorized { "true" } else { "false" })
            .finish()
    }
}

/// The door (`authorizeRemoteManagerAdmin`), in the reference's order:
/// 1. the request's space is the host's (`permission-denied`);
/// 2. the holder's scope names `supervise` (`permission-denied`, F90);
/// 3. the registered-manager check at the request's serve epoch with its current-registration
///    proof ([`ADMIN_AUTHORIZATION`]: gate open, server-derived serve principal, epoch, proof;
///    F94's check);
/// 4. the decision: a caller of the holder's own owner whose row, read fresh from both spaces,
///    names the caller's lifecycle and holds `admin`. A caller of another owner is `false`
///    without a read.
///
/// KV round trips: 1 (the gate); ledger reads: 1 (0 for a caller of another owner).
#[derive(Debug, Clone)]
pub struct AuthorizeManagerAdmin {
    pub host: ManagerHost,
    /// The authenticated human holder the manager runs under.
    pub holder: Supervisor,
    pub request: AdminAuthorizationRequest,
}

impl Script for AuthorizeManagerAdmin {
    type Output = AdminAuthorization;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<AdminAuthorization, Halt> {
        let e = &self.request.envelope;
        e.require_host_space(&self.host, WHAT)?;
        if !self.holder.supervises() {
            return Err(EpError::permission_denied(format!(
                "{WHAT} needs manager scope \"{}\"",
                super::SUPERVISE
            ))
            .into());
        }
        e.check_current(cx, &ADMIN_AUTHORIZATION, &self.host, self.holder.owner())?;
        let caller = &self.request.caller;
        let authorized = caller.owner.owner() == self.holder.owner() && holds_admin(cx, caller)?;
        Ok(AdminAuthorization {
            request: self.request.clone(),
            owner: self.holder.owner().clone(),
            authorized,
        })
    }
}

/// Whether `caller`'s current row, in either space, is at the caller's lifecycle and holds
/// [`ADMIN_SCOPE`]. A ledger that cannot answer refuses instead (fail closed).
fn holds_admin(cx: &mut Ctx<'_>, caller: &AdminCaller) -> Result<bool, Halt> {
    let principal = Principal::new(caller.owner.owner().clone(), caller.actor.clone());
    Ok(cx.find_unified(&principal)?.is_some_and(|held| {
        held.row.lifecycle_uid.as_ref() == Some(&caller.lifecycle_uid)
            && held.row.scope.iter().any(|s| s == ADMIN_SCOPE)
    }))
}
