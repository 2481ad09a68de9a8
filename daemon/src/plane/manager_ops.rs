//! The manager-service route's operations (reference §3.7), one per parsed kind, each run on
//! the plane connection whose grant it needs: the manager-service operations on the issuer,
//! managed-agent enrollment and retirement preparation under the alias lock with the broker's
//! durables, runs ([`super::runs`]), the ledger-reading doors with the host's actor ledger
//! attached, maintenance ([`super::maintenance`]), and the goal-index scan on the sealed records
//! scanner.

use std::sync::Arc;

use cotal_core::actors::AliasScript;
use cotal_core::error::EpError;
use cotal_core::machine::Script;
use cotal_core::manager::{ManagerHost, Supervisor};
use cotal_core::manager_ops::{served_host, GoalIndex, Operation};
use cotal_core::manager_route::ManagerServiceRequest;
use cotal_core::trust::DaemonMaterial;
use cotal_io_fs::random;

use crate::ledger::Ledger;
use cotal_io_nats::durables::NatsDurables;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::NatsWorld;
use serde_json::Value;

use super::connections::PlaneLink;
use super::runs::Runs;

/// What the operations need, built once per plane.
pub(super) struct ManagerOps {
    pub(super) material: DaemonMaterial,
    pub(super) ledger: Ledger,
    pub(super) host: ManagerHost,
    /// The public face's exchange URL, set once it is bound.
    pub(super) public_exchange: Arc<std::sync::OnceLock<String>>,
    pub(super) connections: PlaneLink,
    /// The servers' listing and kick (sparing the plane's own connections): the maintenance
    /// door's verified eviction.
    pub(super) oracle: Arc<Oracle>,
    /// The servers, for the reconciler's own connection.
    pub(super) server: cotal_io_nats::Dial,
    /// Agents' mailboxes, created and removed as real JetStream consumers.
    pub(super) durables: Arc<NatsDurables>,
    /// Run admission and attempts.
    pub(super) runs: Runs,
}

impl std::fmt::Debug for ManagerOps {
    // The material and the host hold secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerOps").finish_non_exhaustive()
    }
}

impl ManagerOps {
    /// Parses one request (its kind's closed body) and runs its core operation (the kind
    /// table is core's [`ManagerServiceRequest::operation`]) on the connections its grants need.
    pub(super) async fn operate(
        &self,
        holder: Supervisor,
        request: &Value,
        now_ms: u64,
    ) -> Result<Value, EpError> {
        let host = self.host();
        let parsed = ManagerServiceRequest::parse(request, &host)?;
        match parsed.operation(host, holder, now_ms) {
            Operation::Enroll(enrollment) => {
                let entropy = random::entropy().map_err(EpError::unavailable)?;
                self.serialized(enrollment.with(entropy)).await
            }
            Operation::Serialized(script) => self.serialized(script).await,
            Operation::WithLedger(script) => self.with_ledger(script).await,
            Operation::OnIssuer(script) => self.on_issuer(script).await,
            Operation::RunAdmission(run) => self.runs.admit(run).await,
            Operation::RunAttempt(run) => self.runs.attempt(run).await,
            Operation::Maintenance(maintenance) => self.maintain(maintenance).await,
            Operation::GoalIndexScan(scan) => self.scan_goal_index(scan).await,
        }
    }

    /// The host, with the public face's exchange URL once that face is bound (enrolled agents
    /// exchange their secrets there).
    pub(super) fn host(&self) -> ManagerHost {
        served_host(&self.host, self.public_exchange.get())
    }

    /// Runs a door's script on the issuer connection, whose grant reads the manager gates and
    /// records (the goal-index scan's door, the platform control door's checks).
    pub(super) async fn on_issuer<S: Script>(&self, script: S) -> Result<S::Output, EpError> {
        let bound = self.connections.get()?.issuer.space()?;
        NatsWorld::new(&bound).run_script(script).await
    }

    /// Runs a registered-manager door that reads the host's actor ledger (retained-agent
    /// validation, admin authorization) on the issuer connection with the ledger attached, read
    /// fresh at every call.
    async fn with_ledger<S: Script>(&self, script: S) -> Result<S::Output, EpError> {
        let bound = self.connections.get()?.issuer.space()?;
        NatsWorld::new(&bound)
            .with_actors(self.ledger.port())
            .run_script(script)
            .await
    }

    /// `manager-goal-index-scan`: the door on the issuer connection (the manager gate), then the
    /// enumeration of the authenticated owner's index entries, listed and read on the sealed
    /// records scanner (reference §4.7, F98), and core writes the answer.
    async fn scan_goal_index(&self, goal_index: GoalIndex) -> Result<Value, EpError> {
        self.on_issuer(goal_index.authorize).await?;
        let scanner = self.connections.get()?.scanners.records.space()?;
        NatsWorld::new(&scanner).run_script(goal_index.scan).await
    }

    /// Runs a managed-agent operation under its alias lock on the issuer connection, with the
    /// ledger and the broker's durables attached (reference §6.3, §6.6).
    async fn serialized<S: AliasScript>(&self, script: S) -> Result<S::Output, EpError> {
        let bound = self.connections.get()?.issuer.space()?;
        NatsWorld::new(&bound)
            .with_actors(self.ledger.port())
            .with_nats_durables(Arc::clone(&self.durables))
            .run_serialized(script)
            .await
    }
}
