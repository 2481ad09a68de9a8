//! The plane's own registration, crash-safe: its op id is recorded durably before the freeze
//! and resumed by the next start, under a lock held for the ceremony (F14, F69).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cotal_core::high_water::RolledBack;
use cotal_core::host::{auth_instance, resumed_op};
use cotal_core::issuance::{observe_gate, GateObservation, GateRef};
use cotal_core::kv::{Revision, Store};
use cotal_core::machine::{script, Replay};
use cotal_core::names::{OpId, SpaceName};
use cotal_core::plane_grants::{self, PlaneConnection};
use cotal_core::rollback::Mark;
use cotal_core::self_registration::auth_gate;
use cotal_io_fs::registration::{self, RegistrationLock};
use cotal_io_fs::{marks, random};
use cotal_io_nats::authority::AuthorityClient;
use cotal_io_nats::high_water::{check_before_acting, check_streams, StreamCheck, Streams};
use cotal_io_nats::self_registration::register_self;
use cotal_io_nats::{drive, NatsWorld, Space};
use tracing::{error, info, warn};

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
    /// fresh one, recorded durably before the ceremony freezes the gate.
    async fn operation(&self, bound: &Space, record: &Path) -> Result<OpId, String> {
        let recorded = registration::load(record)?;
        let gate =
            auth_gate(self.space(), &self.inputs.identity.instance).map_err(|e| e.message)?;
        let observed = observe(bound, &gate).await?;
        // Before anything acts on the gate: has the store gone back behind what this state dir
        // saw? A rolled-back gate could be registered at a superseded epoch (ecosystem §8).
        let high = marks::load(&marks::path(&self.inputs.root, self.space()))?;
        let (seen, key) = (observed.as_ref(), gate.key());
        check_before_acting(bound, &key, seen, &high.gates, &high.streams)
            .await
            .map_err(|check| refused(check, "register", true))?;
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

impl Start<'_> {
    /// Raises the high-water mark to the gate as it stands after this start's registration;
    /// returns the gate's revision then, the floor the fence watch holds it to.
    async fn raise_mark(&self, bound: &Space, gate: &GateRef) -> Result<Revision, String> {
        let seen = observe(bound, gate)
            .await?
            .ok_or_else(|| format!("gate {} vanished right after its registration", gate.key()))?;
        let path = marks::path(&self.inputs.root, self.space());
        let mut high = marks::load(&path)?;
        high.raise_gate(&gate.key(), Mark::of(&seen));
        raise_streams(&mut high, bound).await?;
        marks::save(&path, &high)?;
        Ok(seen.revision)
    }
}

/// One leader read of the plane's own gate.
async fn observe(bound: &Space, gate: &GateRef) -> Result<Option<GateObservation>, String> {
    drive(&mut Replay::new(script(|cx| observe_gate(cx, gate))), bound)
        .await
        .map_err(|e| format!("reading the plane's gate failed: {e}"))
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

/// Raises the stream marks of core's rollback stores to their last sequences as `bound` reads
/// them; a stream found below its mark is refused (the mark stands, never lowered).
pub(super) async fn raise_streams(
    high: &mut marks::HighWater,
    bound: &Space,
) -> Result<(), String> {
    let read = check_streams(bound, &high.streams, Streams::All)
        .await
        .map_err(|check| refused(check, "high-water", false))?;
    for (stream, last) in read {
        high.raise_stream(&stream, last);
    }
    Ok(())
}

/// What a failed rollback check says: a read that failed as it is; a store behind its mark
/// audited as refused over its row (and logged, `loud`, where the start refuses to act).
fn refused(check: StreamCheck, operation: &str, loud: bool) -> String {
    match check {
        StreamCheck::Unread(why) => why,
        StreamCheck::Rolled(RolledBack { row, error }) => {
            audit::refused("plane", operation, &row, &error);
            if loud {
                error!("{}", error.message);
            }
            error.message
        }
    }
}
