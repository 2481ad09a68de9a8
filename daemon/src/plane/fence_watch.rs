//! The serving plane's watch over its own registration: the host fence on its gate (F6), a cut
//! sealed scanner, a credential that could not be renewed, and a lost server, which it rides
//! out ([`ride_out`]) rather than stop.

use std::time::Duration;

use cotal_core::host::{
    broker_awaited_copy, broker_lost_copy, gate_unreadable_copy, AwaitHostFence,
};
use cotal_io_nats::host::hold_fence_pushed;
use tokio::sync::watch;
use tracing::{error, warn};

use super::connections::Connections;
use super::metrics::PlaneMetrics;
use super::{Ended, Readiness, Registered};

/// How often a running plane re-reads its own gate (F6: only a fresh read can tell) when
/// nothing woke it: every write of the gate is pushed to the watch at once
/// ([`push_gate_writes`](cotal_io_nats::host::push_gate_writes)), so this is how late, at most, it notices a successor while that
/// push is down.
const FENCE_POLL: Duration = Duration::from_millis(250);
/// How long the gate may stay unreadable before the plane gives up: it can no longer tell
/// whether it has been fenced, so it stops claiming to serve.
const UNREACHABLE_LIMIT: Duration = Duration::from_secs(10);
/// How long after a scanner drop the plane looks at its other connections to tell a broker loss
/// (everything dropped) from a cut scanner.
const BROKER_LOSS_GRACE: Duration = Duration::from_millis(200);

/// Holds the registration until the core's host fence resolves (fenced), driven by
/// [`hold_fence_pushed`]: one leader read of the gate at once when anyone writes it (this plane's own
/// writes through its hub, everyone else's pushed by [`push_gate_writes`](cotal_io_nats::host::push_gate_writes)), else every
/// [`FENCE_POLL`], and a stop with an error once no read has succeeded for
/// [`UNREACHABLE_LIMIT`].
///
/// Fenced means what [`host_fenced`](cotal_core::host::host_fenced) says: the gate is gone, at
/// another epoch, or not `open`. A frozen gate at this plane's own epoch counts: a barrier won
/// the gate (F21: a successor's registration of this instance, a retirement, or a reconciler),
/// nothing is minted at this plane's coordinate while it stands (F22), and none of them reopens
/// it at this registration again (a re-registration reopens at the next epoch, F69; an
/// abort-reopen at the next generation, F52), so a plane that waited would only claim to serve
/// what it no longer can. The watch is armed only after the confirming read saw the gate open
/// at this start's committed epoch and registration revision, so it never sees this start's
/// own freeze.
///
/// A lost server (every connection dropped at once, the scanners included) is ridden out
/// ([`ride_out`]) while the fence watch goes on: the plane serves again once its server is
/// back, or stops when the fence watch gives up on the gate.
pub(super) async fn watch_fence(
    connections: &Connections,
    registered: &Registered,
    readiness: &watch::Sender<Readiness>,
    metrics: &PlaneMetrics,
) -> Ended {
    let (gate, epoch) = (&registered.gate, registered.process_epoch);
    let fence = match AwaitHostFence::new(gate.clone(), epoch) {
        Ok(fence) => fence
            .with_poll(FENCE_POLL)
            .with_floor(registered.gate_revision),
        Err(e) => return Ended::Failed(e.message),
    };
    // Every write of the gate, by anyone, is pushed to the fence at once; the poll is only the
    // fallback while the push is down.
    let fenced = hold_fence_pushed(&connections.reader, fence, UNREACHABLE_LIMIT);
    tokio::pin!(fenced);
    let fenced = loop {
        // The reader's connection as the servers know it now: a scanner drop that the reader
        // did not share (it is connected to the same connection after the grace) is a cut
        // scanner, not a lost server.
        let reader_at = connections.reader.server_connection();
        tokio::select! {
            fenced = &mut fenced => break fenced,
            copy = connections.scanners.died(&gate.space) => {
                // A scanner gone while the reader stayed connected was cut on its own: a
                // kick, or in a cluster the loss of the one node it was on. The plane stops
                // serving at once (reference §2.6: it cannot scan, and a sealed scanner never
                // reconnects), but it ends as a failure, not a fence: no successor holds its
                // gate, and a supervisor must restart it (the copy says so), where a fenced
                // exit would keep the space without a plane (found by the daemon's fault
                // campaign: one isolated node made a plane exit 3 with nothing running after
                // it).
                tokio::time::sleep(BROKER_LOSS_GRACE).await;
                if connections.reader.is_connected()
                    && connections.reader.server_connection() == reader_at
                {
                    error!("stopping: {copy}");
                    return Ended::Failed(copy);
                }
            }
            // A connection whose credential could not be renewed fails closed: the plane stops
            // rather than serve on authority it can no longer hold.
            e = connections.failed() => return Ended::Failed(format!("stopping: {}", e.message)),
        }
        // Everything dropped at once: the server went away (a restart, a network blip).
        tokio::select! {
            fenced = &mut fenced => break fenced,
            back = ride_out(connections, readiness) => match back {
                Ok(()) => metrics.server_regained(),
                Err(e) => return Ended::Failed(format!("stopping: {}", e.message)),
            }
        }
    };
    let end = match fenced {
        Ok(end) => end,
        Err(_) if !connections.reader.is_connected() => {
            return Ended::Failed(broker_lost_copy(UNREACHABLE_LIMIT.as_secs()));
        }
        Err(e) => {
            let secs = UNREACHABLE_LIMIT.as_secs();
            return Ended::Failed(gate_unreadable_copy(gate, secs, &e.to_string()));
        }
    };
    let why = end.plane_copy(gate, epoch);
    if let Some(refusal) = end.rollback_refusal(gate, &why) {
        metrics.rollback();
        crate::audit::refused("plane", "fence-watch", &gate.key(), &refusal);
    }
    warn!(gate = %gate.key(), "fenced: {why}");
    Ended::Fenced(why)
}

/// How often a plane whose server went away looks whether its connections are back.
const RECONNECT_POLL: Duration = Duration::from_millis(20);

/// Rides out a lost server: the plane says it is reconnecting (its doors refuse with the agent's
/// retry copy, and connects wait for it, [`connect`]), and serves again as soon as the
/// connections its decisions ride are back (each reconnects on its own,
/// [`cotal_io_nats::reconnect_delay`]): a connect is decided by fresh reads, so a revoke
/// acknowledged before or during the loss holds (F59), and a sealed scan meanwhile is guarded
/// as ever (the row still names this plane's hold until the re-take, and a takeover fails its
/// after-check). Once the barrier connection and the scanners are back it re-takes the plane
/// claim with the scanners' reconnected connections ([`Connections::retake_claim`]), so a peer
/// asking about them finds them live; a claim another plane took meanwhile ends this one, and
/// so do connections not all back within [`UNREACHABLE_LIMIT`] (in a cluster, one node may
/// come back before another).
async fn ride_out(
    connections: &Connections,
    readiness: &watch::Sender<Readiness>,
) -> Result<(), cotal_core::EpError> {
    let cause = broker_awaited_copy(UNREACHABLE_LIMIT.as_secs());
    warn!("{cause}");
    readiness.send_if_modified(|now| match now {
        Readiness::Ready => {
            *now = Readiness::Reconnecting(cause);
            true
        }
        _ => false,
    });
    let back = async {
        while !connections.deciding_connected() {
            tokio::time::sleep(RECONNECT_POLL).await;
        }
        readiness.send_if_modified(|now| match now {
            Readiness::Reconnecting(_) => {
                *now = Readiness::Ready;
                true
            }
            _ => false,
        });
        while !connections.claiming_connected() {
            tokio::time::sleep(RECONNECT_POLL).await;
        }
    };
    if tokio::time::timeout(UNREACHABLE_LIMIT, back).await.is_err() {
        let lost = broker_lost_copy(UNREACHABLE_LIMIT.as_secs());
        return Err(cotal_core::EpError::unavailable(lost));
    }
    connections.retake_claim().await
}
