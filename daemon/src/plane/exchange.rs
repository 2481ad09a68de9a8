//! `POST /exchange` (reference §3.5, §10.3): an IdP token (a signed-in human) or an agent secret
//! becomes a short-lived Cotal bearer. The face checks the body's shape (`face::exchange`),
//! io-http verifies the IdP token, core's `exchange::PlanExchange` decides the bearer (grant,
//! lifecycle, manager selection, session, root credential), io-http signs it; this module wires
//! them in that order and turns the outcome into an answer and an audit line.

use std::sync::Arc;

use crate::ledger::Ledger;
use cotal_core::error::EpError;
use cotal_core::exchange::{BearerPlan, ExchangeRefusal, PlanExchange};
use cotal_core::jwt::UnixSeconds;
use cotal_core::kv::Store;
use cotal_core::names::SpaceName;
use cotal_core::trust::DaemonMaterial;
use cotal_io_http::bearer::BearerIssuer;
use cotal_io_http::face::exchange::{self, ExchangeRequest, ExchangeShape};
use cotal_io_http::face::{Answer, DoorRequest, StatusCode};
use cotal_io_http::idp_keys::IdpKeys;
use cotal_io_nats::NatsWorld;

use super::connections::PlaneLink;
use super::decision::{Decided, Recorder};
use super::manager_caller::LocalManagerFile;
use super::roots::RootHints;

/// What the exchange needs, built once per plane.
pub(super) struct Exchange {
    pub(super) space: SpaceName,
    pub(super) material: DaemonMaterial,
    pub(super) idp: Arc<IdpKeys>,
    pub(super) ledger: Ledger,
    pub(super) bearers: BearerIssuer,
    pub(super) roots: RootHints,
    pub(super) local: LocalManagerFile,
    pub(super) connections: PlaneLink,
    pub(super) recorder: Recorder,
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
        let now = UnixSeconds(crate::clock::now_secs());
        let outcome = match self.plan(parsed, now).await {
            Ok(plan) => self.sign(plan, now),
            Err(refusal) => Err(refusal),
        };
        let (audited, outcome) = match outcome {
            Ok((plan, token, exp)) => {
                let instance = plan.act.manager_instance_id.as_ref();
                let owner = plan.principal.owner().as_str();
                let body = exchange::granted(&token, owner, exp, instance.map(|i| i.as_str()));
                (plan.audited(), Ok(body))
            }
            Err(refusal) => (refusal.audited(), Err(refusal.error)),
        };
        let decided = Decided::new("exchange", &audited.caller, &audited.row);
        self.recorder.answer(request, &decided, outcome)
    }

    /// The token checks the adapter owns (a served view, then the IdP token, then the derived
    /// owner), then core's plan over the mint connection — with the sessions store on the
    /// issuing connection and the manager gate listing on the sealed ledger scanner.
    async fn plan(
        &self,
        request: ExchangeRequest,
        now: UnixSeconds,
    ) -> Result<BearerPlan, ExchangeRefusal> {
        let anonymous = ExchangeRefusal::anonymous;
        let ExchangeRequest {
            ttl_secs,
            manager_instance_id,
            arm,
        } = request;
        let exchanger = arm
            .verify(&self.idp, &self.material, now)
            .await
            .map_err(anonymous)?;
        let claimed = exchanger.claimed();
        let local = match exchanger.asks_manager_caller() {
            true => self.local.read().map_err(anonymous)?,
            false => None,
        };
        let planner = PlanExchange {
            space: self.space.clone(),
            exchanger,
            ttl_secs,
            manager_instance_id,
            now,
            local,
            root: self.roots.inputs(claimed.as_ref()).map_err(anonymous)?,
        };
        let plan = self.run(planner).await.map_err(anonymous)??;
        if let (Some(uid), Some(id)) = (&plan.act.lifecycle_uid, &plan.act.credential_id) {
            self.roots.remember(&plan.principal, uid, id);
        }
        Ok(plan)
    }

    async fn run(
        &self,
        planner: PlanExchange,
    ) -> Result<Result<BearerPlan, ExchangeRefusal>, EpError> {
        let connections = self.connections.get()?;
        let (mint, issuer, scanner) = (
            connections.mint.space()?,
            connections.issuer.space()?,
            connections.scanners.ledger.space()?,
        );
        NatsWorld::new(&mint)
            .route(Store::Sessions, &issuer)
            .with_actors(self.ledger.port())
            .scanning(Store::Auth, &scanner)
            .run_script(planner)
            .await
    }

    /// Signs the plan: the bearer's token and expiry.
    fn sign(
        &self,
        plan: BearerPlan,
        now: UnixSeconds,
    ) -> Result<(BearerPlan, String, u64), ExchangeRefusal> {
        match self.bearers.issue(&plan.act, Some(plan.ttl_secs), now) {
            Ok(issued) => Ok((plan, issued.token, issued.expires_at.0)),
            Err(error) => Err(ExchangeRefusal {
                caller: Some(plan.principal),
                error,
            }),
        }
    }
}
