//! `POST /manager-service-authority` (reference §3.7): a signed-in human with the `supervise`
//! scope asks the plane for a remote manager's authority. The IdP token is verified against the
//! pinned IdP (the same key set the exchange uses), the owner derived, the caller's interactive
//! grant read fresh, and the request dispatched on its `kind` to the core operation; every
//! refusal is a 403 with one sentence (429 once the face's budget is spent).
//!
//! The kinds' operations and the connections they run on are [`super::manager_ops`]'s. Served:
//! the manager-service operations (`prepare`, `activate`, `renew`,
//! `renewStandingBundle`, `renewRunDriver`, `session`, `retire`: `core::renewal`), run on the
//! plane's remote-manager issuer connection, and managed-agent enrollment and retirement
//! preparation (`core::enrollment`, under the alias lock, the agent's mailboxes real JetStream
//! consumers), run admission and attempts (`core::run`, see [`super::runs`]), and the doors a
//! restarted manager knocks on (`core::manager`): retained-agent validation and admin
//! authorization against the host's actor ledger, and the goal-index scan, enumerated on the
//! sealed records scanner. Refused as `unimplemented`: the kinds the reference leaves to a host
//! platform.

use std::sync::Arc;

use crate::ledger::Ledger;
use cotal_core::actors::authorize::authorize_human_grant;
use cotal_core::error::EpError;
use cotal_core::jwt::UnixSeconds;
use cotal_core::manager::Supervisor;
use cotal_core::manager_route::{kind, ManagerServiceRequest};
use cotal_core::names::SpaceName;
use cotal_core::trust::DaemonMaterial;
use cotal_io_http::face::{Answer, DoorRequest};
use cotal_io_http::idp_keys::IdpKeys;
use serde_json::Value;

use super::decision::{Decided, Recorder};
use super::manager_ops::ManagerOps;

const NEEDS: &str = "manager-service authority needs { idpToken, request }";

/// The route's dependencies, built once per plane.
pub(super) struct ManagerRoute {
    pub(super) space: SpaceName,
    pub(super) material: DaemonMaterial,
    pub(super) idp: Arc<IdpKeys>,
    pub(super) ledger: Ledger,
    /// Each kind's operation on the connections its grants need.
    pub(super) ops: Arc<ManagerOps>,
    pub(super) recorder: Recorder,
}

impl std::fmt::Debug for ManagerRoute {
    // The material and the host hold secrets: only the space is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerRoute")
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

impl ManagerRoute {
    pub(super) async fn answer(&self, request: &DoorRequest) -> Answer {
        let Some(idp_token) = request
            .body
            .get("idpToken")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        else {
            return Answer::bad_request(NEEDS);
        };
        let inner = request.body.get("request").cloned().unwrap_or(Value::Null);
        let (caller, outcome) = match self.decide(idp_token, &inner).await {
            Ok((caller, body)) => (caller, Ok(body)),
            Err((caller, error)) => (caller, Err(error)),
        };
        let decided = Decided::new("manager-service-authority", &caller, kind(&inner));
        self.recorder.answer(request, &decided, outcome)
    }

    /// The reference's order: IdP token → owner → the request's shape → the caller's grant →
    /// the operation.
    async fn decide(
        &self,
        idp_token: &str,
        request: &Value,
    ) -> Result<(String, Value), (String, EpError)> {
        let anonymous = |e| ("anonymous".to_owned(), e);
        let now_ms = crate::clock::now_ms();
        let identity = self
            .idp
            .verify(idp_token, UnixSeconds::from_millis(now_ms))
            .await
            .map_err(anonymous)?;
        let owner = self
            .material
            .owner_for_idp_subject(&identity.subject)
            .map_err(anonymous)?;
        let caller = owner.to_string();
        let refuse = |e| (caller.clone(), e);
        let actor = ManagerServiceRequest::actor(request).map_err(refuse)?;
        let (space, granted_owner, granted_actor) =
            (self.space.clone(), owner.clone(), actor.clone());
        let grant = self
            .ledger
            .run(move |ledger| {
                authorize_human_grant(&mut &*ledger, &space, &granted_owner, &granted_actor, None)
            })
            .await
            .and_then(|grant| grant)
            .map_err(refuse)?;
        let caller = format!("{owner}.{actor}");
        let refuse = |e| (caller.clone(), e);
        let holder = Supervisor::human(owner, grant.row.scope.clone());
        let body = self.ops.operate(holder, request, now_ms).await;
        let body = body.map_err(refuse)?;
        Ok((caller, body))
    }
}
