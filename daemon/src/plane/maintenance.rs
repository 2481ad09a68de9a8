//! `manager-service-maintenance` (reference §3.7): what core's door allows, carried out with
//! the plane's oracle (an eviction verified by a complete sweep) or the reconciler's own
//! short-lived connection, and the answer core writes from what was done.

use cotal_core::error::EpError;
use cotal_core::issuance::GateRef;
use cotal_core::kv::Store;
use cotal_core::manager::MaintenancePlan;
use cotal_core::manager_ops::{Maintained, Maintenance};
use cotal_core::reconcile::{ReconcileGate, ReconcileReport};
use cotal_io_nats::NatsWorld;
use serde_json::Value;

use super::manager_ops::ManagerOps;

impl ManagerOps {
    /// `manager-service-maintenance`: the core door decides what may be done, on the issuer
    /// connection with the family listed by the sealed auth scanner (F98); an eviction then
    /// runs on the plane's oracle (verified by a complete sweep) and core writes the answer.
    pub(super) async fn maintain(&self, maintenance: Maintenance) -> Result<Value, EpError> {
        let connections = self.connections.get()?;
        let (issuer, scanner) = (
            connections.issuer.space()?,
            connections.scanners.ledger.space()?,
        );
        let plan = NatsWorld::new(&issuer)
            .scanning(Store::Auth, &scanner)
            .run_script(maintenance.authorize)
            .await?;
        let done = match plan {
            MaintenancePlan::Evict(holders) => {
                Maintained::Evicted(self.oracle.evict_with_evidence(&holders).await)
            }
            MaintenancePlan::Reconcile(gate) => {
                Maintained::Reconciled(Box::new(self.reconcile(&gate).await?))
            }
        };
        maintenance.echo.answer(done)
    }

    /// `reconcile-registration`: the liveness-guarded repair `cotal-authd gate reconcile` runs
    /// (F52, F53, F68), on its own short-lived connection scoped to the target gate, with the
    /// plane's oracle as prober and evictor. A refusal (holder alive or unknown, eviction
    /// unverified, raced) leaves the gate frozen and answers its sentence.
    async fn reconcile(&self, gate: &GateRef) -> Result<ReconcileReport, EpError> {
        let client = crate::gate_cmd::open_reconciler(&self.server, &self.material, gate)
            .await
            .map_err(EpError::unavailable)?;
        let reconcile = ReconcileGate { gate: gate.clone() };
        let (result, _closed) = client
            .run_once(reconcile, |world| world.with_oracle(&self.oracle))
            .await;
        result
    }
}
