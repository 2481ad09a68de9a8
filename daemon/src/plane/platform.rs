//! The platform control door on a hosted plane (reference §7.3): one in-process call, with no
//! route, capability or IdP input, that issues the manager-service request family for the one
//! control manager the platform assigned to the context's account. The envelope and every check
//! are core's ([`AuthorizePlatformControl`]); this module reads the platform's assignment fresh
//! for the call, runs the checks on the issuer connection, and dispatches the inner request to
//! the same operations the human route runs, under the platform holder.

use std::future::Future;
use std::pin::Pin;

use cotal_core::error::EpError;
use cotal_core::manager::PlatformAssignment;
use cotal_core::manager_route::ManagerServiceRequest;
use cotal_core::names::{platform_control_owner, SpaceName};
use cotal_core::platform_control::{AuthorizePlatformControl, PlatformControlRequest};
use serde_json::Value;

use super::decision::Decided;
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
        let parsed = ManagerServiceRequest::parse(&inner, &host).map_err(refuse)?;
        let body = ops
            .operate(holder, parsed, crate::clock::now_ms())
            .await
            .map_err(refuse)?;
        Ok((caller, kind, body))
    }
}
