//! Where the plane runs its retirement barriers: one in-process flight per op id (F49: one
//! process never runs one retirement twice at once), shared by the loopback retire doors, the
//! auth control rail and the boot's crash-resume (reference §2.5 steps 7–8).
//!
//! A flight runs on its own task ([`Flights`]), so a caller that stops waiting never cancels a
//! barrier halfway: the next caller of the same op id joins the run still in flight, or, once it
//! ended, starts a new run that resumes from what the stores hold. Each run takes the plane claim as its guard and lists its family on the sealed
//! ledger scanner.

use std::sync::Arc;
use std::time::Duration;

use cotal_core::error::EpError;
use cotal_core::kv::Store;
use cotal_core::lifecycle::{FindOpenOperations, RetireLifecycle, Retirement};
use cotal_core::machine::{Machine, Replay};
use cotal_core::names::{OpId, Principal};
use cotal_io_nats::flights::{Boarded, Done, Flights};
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::NatsWorld;
use tracing::{error, info};

use super::connections::PlaneLink;
#[cfg(feature = "kill-points")]
use super::kill_point::{KillPoint, RETIREMENT_KILL_AT};
use super::metrics::PlaneMetrics;
use crate::audit;

/// The longest one request waits for its flight; the flight itself goes on.
pub(super) const RETIRE_WAIT: Duration = Duration::from_secs(30);
// A retire door answers within its wait, never cut first by the loopback face's deadline.
const _: () = assert!(RETIRE_WAIT.as_secs() < cotal_io_http::face::LOOPBACK_DEADLINE.as_secs());

/// Who asked for a retirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// A loopback retire door.
    Door,
    /// The auth control rail's `retire-lifecycle`.
    Rail,
    /// The boot's crash-resume.
    Boot,
}

impl Entry {
    fn as_str(self) -> &'static str {
        match self {
            Entry::Door => "door",
            Entry::Rail => "rail",
            Entry::Boot => "boot",
        }
    }
}

/// What one barrier run did.
#[derive(Debug, Clone)]
pub(super) struct Ran {
    pub(super) retirement: Retirement,
    /// Every principal the run evicted (and verified gone).
    pub(super) evicted: Vec<Principal>,
}

/// The plane's retirement flights.
pub(super) struct Retirements {
    connections: PlaneLink,
    oracle: Arc<Oracle>,
    metrics: Arc<PlaneMetrics>,
    flights: Arc<Flights<OpId, Ran>>,
    /// The crash-test hook ([`RETIREMENT_KILL_AT`]), when set.
    #[cfg(feature = "kill-points")]
    kill: Option<KillPoint>,
}

impl std::fmt::Debug for Retirements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retirements").finish_non_exhaustive()
    }
}

/// The coordinates a flight is bound to: the alias and the uid.
fn coordinates(barrier: &RetireLifecycle) -> String {
    format!(
        "{}/{} {}",
        barrier.owner, barrier.actor, barrier.lifecycle_uid
    )
}

impl Retirements {
    pub(super) fn new(
        connections: PlaneLink,
        oracle: Arc<Oracle>,
        metrics: Arc<PlaneMetrics>,
    ) -> Result<Arc<Retirements>, String> {
        Ok(Arc::new(Retirements {
            connections,
            oracle,
            metrics,
            flights: Arc::default(),
            #[cfg(feature = "kill-points")]
            kill: KillPoint::from_env(RETIREMENT_KILL_AT)?,
        }))
    }

    /// The servers' listing and kick, sparing the plane's own connections: the one oracle every
    /// eviction the plane runs on a caller's behalf uses.
    pub(super) fn oracle(&self) -> Arc<Oracle> {
        Arc::clone(&self.oracle)
    }

    /// Runs `barrier`, or joins the run of its op id already in flight, and waits for it at
    /// most [`RETIRE_WAIT`]. A run in flight for the same op id but other coordinates refuses
    /// `conflict` and changes nothing: an op id names one lifecycle's retirement.
    pub(super) async fn retire(
        self: &Arc<Self>,
        barrier: RetireLifecycle,
        entry: Entry,
    ) -> Result<Ran, EpError> {
        let done = self.flight(barrier, entry)?;
        tokio::time::timeout(RETIRE_WAIT, done).await.map_err(|_| {
            EpError::unavailable(format!(
                "the retirement did not finish within {RETIRE_WAIT:?}; it goes on, and \
                     asking again joins it or resumes it"
            ))
        })?
    }

    fn flight(
        self: &Arc<Self>,
        barrier: RetireLifecycle,
        entry: Entry,
    ) -> Result<Done<Ran>, EpError> {
        let target = coordinates(&barrier);
        let op_id = barrier.op_id.clone();
        let me = Arc::clone(self);
        let run = async move { me.execute(barrier).await };
        match self.flights.board(op_id.clone(), target.clone(), run) {
            Ok(Boarded::Started(done)) => {
                self.metrics.retirement_flight(entry.as_str(), true);
                Ok(done)
            }
            Ok(Boarded::Joined(done)) => {
                self.metrics.retirement_flight(entry.as_str(), false);
                Ok(done)
            }
            Err(other) => Err(EpError::conflict(format!(
                "operation {op_id} is already in flight for another lifecycle ({other}); this \
                 retirement of {target} was a full no-op - nothing was retired"
            ))),
        }
    }

    /// One barrier run on the barrier connection, its family listed on the sealed ledger
    /// scanner under the plane claim, eviction verified by the servers' own listing.
    async fn execute(&self, mut barrier: RetireLifecycle) -> Result<Ran, EpError> {
        let connections = self.connections.get()?;
        barrier.guard = Some(connections.hold.clone());
        let retirement;
        let evicted;
        {
            let bound = connections.barrier.space()?;
            let scanner = connections.scanners.ledger.space()?;
            let mut world = NatsWorld::new(&bound);
            world.set_scanner(Store::Auth, &scanner);
            world.set_evictor(self.oracle.evictor());
            world.set_prober(self.oracle.prober());
            #[cfg(feature = "kill-points")]
            world.set_send_hook(self.kill.as_ref().map(KillPoint::hook));
            retirement = world.run(&mut Replay::new(barrier)).await?;
            evicted = world.evicted();
        }
        Ok(Ran {
            retirement,
            evicted,
        })
    }

    /// Runs `machine` on the barrier connection with the ledger scanner for its listings: the
    /// reads a retirement's callers make before joining a flight.
    pub(super) async fn read<M: Machine>(&self, machine: M) -> Result<M::Output, EpError> {
        let connections = self.connections.get()?;
        let bound = connections.barrier.space()?;
        let scanner = connections.scanners.ledger.space()?;
        let mut world = NatsWorld::new(&bound);
        world.set_scanner(Store::Auth, &scanner);
        world.run(&mut { machine }).await
    }

    /// Boot crash-resume (reference §2.11): finds every retirement a crash interrupted and
    /// finishes each before the plane answers anything. Loud on every failure, never failing
    /// the boot: a retirement that cannot finish leaves its gate frozen, so nothing mints for
    /// that alias until a later resume (or a retire request) succeeds (fail-closed).
    pub(super) async fn resume_open(self: &Arc<Self>) {
        let guard = match self.connections.get() {
            Ok(connections) => connections.hold.clone(),
            Err(e) => {
                error!(
                    "auth-barrier: the boot resume could not start: {}",
                    e.message
                );
                return;
            }
        };
        let found = self
            .read(Replay::new(FindOpenOperations { guard: Some(guard) }))
            .await;
        let open = match found {
            Ok(open) => open,
            Err(e) => {
                error!(
                    "auth-barrier: listing the open operations FAILED ({}) - any retirement a \
                     crash interrupted stays frozen until a later start or a retire request \
                     resumes it (fail-closed)",
                    e.message
                );
                return;
            }
        };
        for e in &open.unexamined {
            error!(
                "auth-barrier: a lifecycle gate could not be examined for resume ({}) - it stays \
                 as it is (fail-closed)",
                e.message
            );
        }
        for barrier in open.retirements {
            let (op, uid) = (barrier.op_id.clone(), barrier.lifecycle_uid.clone());
            let row = format!("gate.{uid}");
            match self.retire(barrier, Entry::Boot).await {
                Ok(ran) => {
                    audit::granted("plane", "resume-retirement", &row, audit::At::default());
                    info!(
                        op = %op,
                        lifecycle = %uid,
                        evicted = ran.evicted.len(),
                        "auth-barrier: resumed retirement {op} for {uid}: finished, {} \
                         principal(s) evicted",
                        ran.evicted.len()
                    );
                }
                Err(e) => {
                    audit::refused("plane", "resume-retirement", &row, &e);
                    error!(
                        "auth-barrier: resuming retirement {op} for {uid} FAILED ({}) - the gate \
                         stays frozen and nothing mints for this alias until a resume succeeds \
                         (fail-closed)",
                        e.message
                    );
                }
            }
        }
    }

    /// Stops every run in flight (the plane is closing): each resumes under its op id on the
    /// next request or the next start, so stopping one halfway loses nothing.
    pub(super) async fn close(&self) {
        self.flights.close().await;
    }
}
