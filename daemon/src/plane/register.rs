//! The plane's own registration, crash-safe: its op id is recorded durably before the freeze
//! and resumed by the next start, under a lock held for the ceremony (F14, F69).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cotal_core::host::{auth_instance, resumed_op};
use cotal_core::kv::Store;
use cotal_core::names::{OpId, SpaceName};
use cotal_core::plane_grants::{self, PlaneConnection};
use cotal_core::self_registration::auth_gate;
use cotal_io_fs::random;
use cotal_io_fs::registration::{self, RegistrationLock};
use cotal_io_nats::authority::AuthorityClient;
use cotal_io_nats::self_registration::register_self;
use cotal_io_nats::{NatsWorld, Space};
use tracing::{info, warn};

#[cfg(feature = "kill-points")]
use super::kill_point::{KillPoint, REGISTRATION_KILL_AT};
use super::{Registered, Start};
use crate::audit;

impl Start<'_> {
    /// The registration ceremony on its own short-lived connection, scoped to this instance's
    /// keys (reference §2.5 step 2); the connection closes when the ceremony ends. `mint` is
    /// the plane's one other open connection: the ceremony's eviction spares both (F68: a
    /// family row naming the plane's own principal evicts that holder's other connections, never
    /// the plane's, so the plane comes up over such a family).
    pub(super) async fn register(&self, mint: &AuthorityClient) -> Result<Registered, String> {
        let space = self.space().clone();
        let instance = self.inputs.identity.instance.clone();
        let client = {
            let (space, instance) = (space.clone(), instance.clone());
            self.dialer
                .open(
                    PlaneConnection::AuthRegistration,
                    move |conn| plane_grants::auth_registration(&space, conn, &instance),
                    self.dialer
                        .options(&[Store::Auth, Store::Records, Store::Contracts], false),
                )
                .await?
        };
        // One start registers this instance at a time; the lock dies with its holder, which is
        // what lets the next start resume a recorded operation as its only executor.
        let lock = lock_registration(&self.inputs.root, &space).await;
        let result = async {
            let _lock = lock?;
            let bound = client.space().map_err(|e| e.message.clone())?;
            let record = registration::record_path(&self.inputs.root, &space);
            let op_id = self.operation(&bound, &record).await?;
            let ceremony = auth_instance(
                &space,
                &instance,
                &self.inputs.identity.serve_key,
                op_id.clone(),
            )
            .map_err(|e| e.message.clone())?;
            #[cfg(feature = "kill-points")]
            let kill = KillPoint::from_env(REGISTRATION_KILL_AT)?;
            let own = [mint.conn_id(), client.conn_id()].map(|c| c.as_str().to_owned());
            let oracle = Arc::new(self.oracle().sparing(own));
            let world = || {
                #[cfg(feature = "kill-points")]
                let hook = kill.as_ref().map(KillPoint::hook);
                #[cfg(not(feature = "kill-points"))]
                let hook = None;
                NatsWorld::new(&bound).hooked(hook).with_oracle(&oracle)
            };
            let provisioned = |provisioned| {
                if provisioned {
                    info!(gate = %ceremony.gate.key(), "provisioned the gate");
                }
            };
            let reg = register_self(&bound, &ceremony, world, provisioned)
                .await
                .map_err(|stopped| {
                    if stopped.audited() {
                        audit::refused("plane", "register", &ceremony.gate.key(), &stopped.error);
                    }
                    stopped.sentence()
                })?;
            registration::clear(&record)?;
            let gate_revision = self.raise_mark(&bound, &ceremony.gate).await?;
            audit::granted(
                "plane",
                "register",
                &ceremony.gate.key(),
                audit::At {
                    generation: Some(reg.generation.0),
                    epoch: Some(reg.process_epoch.0),
                },
            );
            info!(
                op_id = %op_id,
                epoch = reg.process_epoch.0,
                generation = reg.generation.0,
                registration_revision = reg.registration_revision.0,
                "registered the auth instance"
            );
            Ok(Registered {
                gate: ceremony.gate.clone(),
                process_epoch: reg.process_epoch,
                generation: reg.generation,
                registration_revision: reg.registration_revision,
                gate_revision,
            })
        }
        .await;
        if let Err(e) = client.close().await {
            warn!("closing the registration connection failed: {e}");
        }
        result
    }

    /// The operation this start registers under (crash-safe self-registration): the one an
    /// earlier start recorded, when the gate is still frozen by it ([`resumed_op`]: that start
    /// crashed mid-ceremony, and the registration lock this start holds proves it gone), else a
    /// fresh one, recorded durably before the ceremony freezes the gate. Nothing acts on the
    /// gate before the rollback check ([`Start::check_rollback`]).
    async fn operation(&self, bound: &Space, record: &Path) -> Result<OpId, String> {
        let recorded = registration::load(record)?;
        let gate =
            auth_gate(self.space(), &self.inputs.identity.instance).map_err(|e| e.message)?;
        let observed = super::high_water::observe(bound, &gate).await?;
        self.check_rollback(bound, &gate, observed.as_ref()).await?;
        if let Some(op_id) = resumed_op(observed.as_ref().map(|o| &o.gate), recorded.as_ref()) {
            warn!(
                op_id = %op_id,
                gate = %gate.key(),
                "resuming the registration a previous start left frozen (it crashed mid-ceremony)"
            );
            return Ok(op_id);
        }
        let op_id = random::fresh_op_id()?;
        registration::record(record, &op_id)?;
        Ok(op_id)
    }
}

/// How long a start waits for another start of the same instance to finish registering.
const REGISTRATION_LOCK_WAIT: Duration = Duration::from_secs(30);
const REGISTRATION_LOCK_POLL: Duration = Duration::from_millis(20);

/// Takes the registration lock of `space`'s instance, waiting on the blocking pool while
/// another start holds it (io-fs bounds the wait and names a stopped or hung holder).
async fn lock_registration(root: &Path, space: &SpaceName) -> Result<RegistrationLock, String> {
    let (root, space) = (root.to_owned(), space.clone());
    let (wait, poll) = (REGISTRATION_LOCK_WAIT, REGISTRATION_LOCK_POLL);
    tokio::task::spawn_blocking(move || registration::lock_within(&root, &space, wait, poll))
        .await
        .map_err(|e| format!("the registration lock task failed: {e}"))?
}
