//! Where the plane runs its retirement barriers: one in-process flight per op id (F49: one
//! process never runs one retirement twice at once), shared by the loopback retire doors, the
//! auth control rail and the boot's crash-resume (reference §2.5 steps 7–8).
//!
//! A flight runs on its own task ([`Flights`]), so a caller that stops waiting never cancels a
//! barrier halfway: the next caller of the same op id joins the run still in flight, or, once it
//! ended, starts a new run that resumes from what the stores hold. Each run takes the plane claim
//! as its guard and lists its family on the sealed ledger scanner. The entries, the refusals and
//! the boot resume's sentences are `core::lifecycle`'s; the boot resume is
//! [`super::boot_resume`].

use std::sync::Arc;
use std::time::Duration;

use cotal_core::error::EpError;
use cotal_core::kv::Store;
use cotal_core::lifecycle::{flight_conflict, flight_timed_out, RetireLifecycle};
pub(super) use cotal_core::lifecycle::{Ran, RetireEntry as Entry};
use cotal_core::machine::Script;
use cotal_core::names::OpId;
use cotal_core::plane_claim::ClaimHold;
use cotal_io_nats::flights::{Boarded, Flights};
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::NatsWorld;

use super::connections::PlaneLink;
#[cfg(feature = "kill-points")]
use super::kill_point::{KillPoint, RETIREMENT_KILL_AT};
use super::metrics::PlaneMetrics;

/// The longest one request waits for its flight; the flight itself goes on.
pub(super) const RETIRE_WAIT: Duration = Duration::from_secs(30);
// A retire door answers within its wait, never cut first by the loopback face's deadline.
const _: () = assert!(RETIRE_WAIT.as_secs() < cotal_io_http::face::LOOPBACK_DEADLINE.as_secs());

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
        let (target, op_id) = (barrier.coordinates(), barrier.op_id.clone());
        let me = Arc::clone(self);
        let run = async move { me.execute(barrier).await };
        let (done, started) = match self.flights.board(op_id.clone(), target.clone(), run) {
            Ok(Boarded::Started(done)) => (done, true),
            Ok(Boarded::Joined(done)) => (done, false),
            Err(other) => return Err(flight_conflict(&op_id, &other, &target)),
        };
        self.metrics.retirement_flight(entry.as_str(), started);
        tokio::time::timeout(RETIRE_WAIT, done)
            .await
            .map_err(|_| flight_timed_out(RETIRE_WAIT))?
    }

    /// One barrier run on the barrier connection, its family listed on the sealed ledger
    /// scanner under the plane claim, eviction verified by the servers' own listing.
    async fn execute(&self, mut barrier: RetireLifecycle) -> Result<Ran, EpError> {
        let connections = self.connections.get()?;
        barrier.guard = Some(connections.hold());
        let (bound, scanner) = (
            connections.barrier.space()?,
            connections.scanners.ledger.space()?,
        );
        let mut world = NatsWorld::new(&bound)
            .scanning(Store::Auth, &scanner)
            .with_oracle(&self.oracle);
        #[cfg(feature = "kill-points")]
        world.set_send_hook(self.kill.as_ref().map(KillPoint::hook));
        let retirement = world.run_script(barrier).await?;
        Ok(Ran {
            retirement,
            evicted: world.evicted(),
        })
    }

    /// The plane claim every run takes as its guard.
    pub(super) fn guard(&self) -> Result<ClaimHold, EpError> {
        Ok(self.connections.get()?.hold())
    }

    /// Runs `script` on the barrier connection with the ledger scanner for its listings: the
    /// reads a retirement's callers make before joining a flight.
    pub(super) async fn read<S: Script>(&self, script: S) -> Result<S::Output, EpError> {
        let connections = self.connections.get()?;
        let bound = connections.barrier.space()?;
        let scanner = connections.scanners.ledger.space()?;
        let mut world = NatsWorld::new(&bound).scanning(Store::Auth, &scanner);
        world.run_script(script).await
    }

    /// Stops every run in flight (the plane is closing): each resumes under its op id on the
    /// next request or the next start, so stopping one halfway loses nothing.
    pub(super) async fn close(&self) {
        self.flights.close().await;
    }
}
