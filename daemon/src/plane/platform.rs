//! The platform control door on a hosted plane (reference §7.3): one in-process call, with no
//! route, capability or IdP input, that issues the manager-service request family for the one
//! control manager the platform assigned to the context's account. The envelope and every check
//! are core's ([`AuthorizePlatformControl`]); this module reads the platform's assignment fresh
//! for the call, runs the checks on the issuer connection, and dispatches the inner request to
//! the same operations the human route runs, under the platform holder.

use std::future::Future;
use std::pin::Pin;

use cotal_core::error::EpError;
use cotal_core::lifecycle::{ActivateLifecycle, Activated};
use cotal_core::manager::PlatformAssignment;
use cotal_core::names::{platform_control_owner, SpaceName};
use cotal_core::names::{ActorToken, DerivedOwner, LifecycleUid};
use cotal_core::platform_control::{AuthorizePlatformControl, PlatformControlRequest};
use cotal_core::self_registration::plane_manager_instance;
use cotal_io_fs::random;
use cotal_io_nats::NatsWorld;
use serde_json::Value;

use super::decision::Decided;
use super::host::NOT_READY;
use super::Plane;

/// What a platform's observer answers: the account's one current assignment, none, or why it
/// could not be read.
pub type Observed<'a> =
    Pin<Box<dyn Future<Output = Result<Option<PlatformAssignment>, String>> + Send + 'a>>;

/// The platform backend's view of its assignments, read fresh on every door call and never
/// cached.
pub trait ObserveAssignment: Send + Sync + std::fmt::Debug {
    fn observe<'a>(&'a self, space: &'a SpaceName, account_public_key: &'a str) -> Observed<'a>;
}

impl Plane {
    /// `activateManagedLifecycle` (reference §7.3): activates a delegated launch's lifecycle at
    /// its pinned uid, before any ledger row or durable exists, and mints nothing, so a launch
    /// the host compensates or the user retires reaches the terminal barrier even when its agent
    /// never exchanged. Runs the core activation on the mint connection under the plane's own
    /// manager instance, as the exchange's root ensure does; it keeps F2, F5, F18 and F55–F57
    /// (reservation first, gate frozen before the head, the gate reopened last, a lost head CAS
    /// burning its uid), and refuses a live incarnation at another uid (F60).
    pub async fn activate_managed_lifecycle(
        &self,
        owner: &DerivedOwner,
        actor: &ActorToken,
        lifecycle_uid: &LifecycleUid,
    ) -> Result<Activated, EpError> {
        self.refuse_unless_ready()?;
        let space = &self.registered.gate.space;
        let manager_instance = plane_manager_instance(space)?;
        let activate = ActivateLifecycle {
            owner: owner.owner().clone(),
            actor: actor.clone(),
            lifecycle_uid: lifecycle_uid.clone(),
            manager_instance,
            op_entropy: random::random_bytes().map_err(EpError::unavailable)?,
        };
        let connections = self.connections.lock().await.clone();
        let connections = connections.ok_or_else(|| EpError::unavailable(NOT_READY))?;
        let bound = connections.mint.space()?;
        NatsWorld::new(&bound).run_script(activate).await
    }

    /// One platform control call (see the module doc); every refusal comes before any write,
    /// and each decision is recorded like a door's.
    pub async fn platform_control_authority(
        &self,
        raw: &Value,
        observer: &dyn ObserveAssignment,
    ) -> Result<Value, EpError> {
        let (caller, kind, outcome) = match self.platform_control(raw, observer).await {
            Ok((caller, kind, body)) => (caller, kind, Ok(body)),
            Err((caller, kind, e)) => (caller, kind, Err(e)),
        };
        let decided = Decided::new("platform-control-authority", &caller, &kind);
        self.recorder.record(&decided, outcome.as_ref().err());
        outcome
    }

    async fn platform_control(
        &self,
        raw: &Value,
        observer: &dyn ObserveAssignment,
    ) -> Result<(String, String, Value), (String, String, EpError)> {
        let anonymous = |e| ("platform".to_owned(), "-".to_owned(), e);
        self.refuse_unless_ready().map_err(anonymous)?;
        let request = PlatformControlRequest::parse(raw).map_err(anonymous)?;
        let ops = &self.manager_ops;
        let host = ops.host();
        let account = host.account.clone();
        let owner =
            platform_control_owner(ops.material.owner_secret(), &host.space, account.as_str());
        let (caller, kind) = (owner.to_string(), request.kind().to_owned());
        let refuse = |e| (caller.clone(), kind.clone(), e);
        request
            .check_context(&host.space, &account)
            .map_err(refuse)?;
        let assignment = observer.observe(&host.space, account.as_str()).await;
        let inner = request.request.clone();
        let door = AuthorizePlatformControl {
            space: host.space.clone(),
            account,
            owner,
            request,
            assignment,
        };
        let holder = ops.on_issuer(door).await.map_err(refuse)?;
        let body = ops.operate(holder, &inner, crate::clock::now_ms()).await;
        let body = body.map_err(refuse)?;
        Ok((caller, kind, body))
    }
}
