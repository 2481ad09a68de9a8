//! The host fence on NATS (DESIGN §5 item 3): [`await_host_fence`] runs the core's
//! [`AwaitHostFence`] with leader-served reads, and cuts its poll sleep short the moment this
//! plane itself writes the gate; [`hold_fence`] does the same for a long-lived process that
//! outlives failed reads up to a bound (the daemon's own `auth` instance).
//!
//! Own writes are known without asking the server: every write a [`Space`] executes on an
//! `epgate.*` key of the auth store that committed or may have committed is announced on the
//! space's [`GateWrites`] hub, and waiters on that key re-read at once. Writers elsewhere (another
//! plane, an operator tool) are seen by the poll, at most [`HOST_FENCE_POLL`](cotal_core::host::HOST_FENCE_POLL) late. Nothing here
//! creates a consumer on the auth bucket: no runtime credential may (SPEC 13.9).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use cotal_core::gate::ProcessEpoch;
use cotal_core::host::{AwaitHostFence, FenceEnd};
use cotal_core::issuance::GateRef;
use cotal_core::kv::{KvOp, KvOutcome, KvRequest, Store};
use cotal_core::machine::{Effect, Machine, Observation, Step};
use cotal_core::EpError;
use futures::future;
use tokio::sync::watch;

use crate::authority::AuthorityClient;
use crate::follow::{Followed, Interest};
use crate::shape::StoreLayout;
use crate::space::Space;

/// The prefix of every issuance-gate key.
const GATE_PREFIX: &str = "epgate.";

/// What a fence wait reads through: a [`Space`], or something that hands out the current one
/// per read ([`AuthorityClient`](crate::authority::AuthorityClient), whose binding is replaced
/// at every credential renewal). The fence takes the binding afresh for each read, so a long
/// watch never pins a connection that is about to be retired.
pub trait FenceReads {
    /// The hub announcing this reader's own gate writes; it must outlive every binding swap.
    fn gate_writes(&self) -> &GateWrites;
    /// Executes one leader-served read (F6: only a fresh read can tell).
    fn read(&self, request: &KvRequest) -> impl Future<Output = KvOutcome> + Send;
}

impl FenceReads for Space {
    fn gate_writes(&self) -> &GateWrites {
        Space::gate_writes(self)
    }

    fn read(&self, request: &KvRequest) -> impl Future<Output = KvOutcome> + Send {
        self.execute(request)
    }
}

/// Announces a space's own gate writes to whoever waits on that gate. Keyed by gate key; a key is
/// tracked only while someone waits on it, so writes to unwatched gates cost one map lookup.
#[derive(Debug, Default)]
pub struct GateWrites {
    watched: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl GateWrites {
    /// Starts watching `key`. Subscribe before the read whose result the wait depends on, so a
    /// write landing between the read and the wait still wakes it.
    pub fn subscribe(&self, key: &str) -> GateWriteWaiter<'_> {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        let sender = watched
            .entry(key.to_owned())
            .or_insert_with(|| watch::channel(0).0);
        GateWriteWaiter {
            hub: self,
            key: key.to_owned(),
            receiver: sender.subscribe(),
        }
    }

    /// Called by [`Space`] after each request: wakes the waiters of a gate this space wrote, or
    /// may have written (an ambiguous write may have committed; a spurious wake costs one read).
    pub(crate) fn note(&self, request: &KvRequest, outcome: &KvOutcome) {
        let write = !matches!(request.op(), KvOp::Get | KvOp::Keys);
        let landed = matches!(outcome, KvOutcome::Written(_) | KvOutcome::Ambiguous(_));
        if !(write && landed && request.store() == Store::Auth) {
            return;
        }
        let key = request.key();
        if !key.starts_with(GATE_PREFIX) {
            return;
        }
        self.wake(key);
    }

    /// Wakes the waiters of `key`: a write of it was seen, this space's own or another
    /// writer's ([`push_gate_writes`]).
    pub fn wake(&self, key: &str) {
        let watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = watched.get(key) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// One waiter's subscription to a gate's own writes; unsubscribes on drop.
#[derive(Debug)]
pub struct GateWriteWaiter<'h> {
    hub: &'h GateWrites,
    key: String,
    receiver: watch::Receiver<u64>,
}

impl GateWriteWaiter<'_> {
    /// Marks every write so far as seen: only later ones wake [`GateWriteWaiter::written`].
    pub fn mark_seen(&mut self) {
        self.receiver.borrow_and_update();
    }

    /// Resolves at the first write after the last [`GateWriteWaiter::mark_seen`].
    pub async fn written(&mut self) {
        if self.receiver.changed().await.is_err() {
            // The sender lives while this waiter does; if it is ever gone, only the poll wakes.
            future::pending::<()>().await;
        }
    }
}

impl Drop for GateWriteWaiter<'_> {
    fn drop(&mut self) {
        let mut watched = self
            .hub
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Ours is the last receiver: stop tracking the key.
        if watched
            .get(&self.key)
            .is_some_and(|sender| sender.receiver_count() <= 1)
        {
            watched.remove(&self.key);
        }
    }
}

/// Waits until the host incarnation of `gate` at `epoch` is fenced: resolves with the gate as
/// read then (`None` when it is absent or deleted). Reads are leader-served; between reads it
/// waits [`HOST_FENCE_POLL`](cotal_core::host::HOST_FENCE_POLL) or until this space writes the gate, whichever is first. A failed
/// read rejects. Drop the future to stop waiting. Keeps F6 (only a fresh read can tell).
///
/// Round trips: one leader read per wake-up, and up to five more when the read after a write
/// wake finds the gate unchanged ([`SETTLE_REREADS`]).
pub async fn await_host_fence(
    space: &(impl FenceReads + Sync),
    gate: GateRef,
    epoch: ProcessEpoch,
) -> Result<FenceEnd, EpError> {
    run_fence(space, AwaitHostFence::new(gate, epoch)?).await
}

/// Drives an armed [`AwaitHostFence`] (see [`await_host_fence`]); for callers holding a
/// caller-supplied JSON epoch ([`AwaitHostFence::from_json`]).
pub async fn run_fence(
    space: &(impl FenceReads + Sync),
    mut fence: AwaitHostFence,
) -> Result<FenceEnd, EpError> {
    let mut waiter = space.gate_writes().subscribe(&fence.gate().key());
    step_fence(space, &mut fence, &mut waiter, || {}).await
}

/// Drives `fence` like [`run_fence`], for a process that must outlive a flaky server: a failed
/// read does not end the wait. The fence is re-armed ([`AwaitHostFence::rearmed`]) after its
/// poll (or this space's next write of the gate), and the wait rejects with the last read's
/// error only once no read has shown the incarnation held for `unreachable_limit`, counted from
/// the call: past that, a fence could no longer be noticed in time.
///
/// Round trips: one leader read per wake-up, failed reads included, and up to five more when the
/// read after a write wake finds the gate unchanged ([`SETTLE_REREADS`]).
pub async fn hold_fence(
    space: &(impl FenceReads + Sync),
    mut fence: AwaitHostFence,
    unreachable_limit: Duration,
) -> Result<FenceEnd, EpError> {
    let mut waiter = space.gate_writes().subscribe(&fence.gate().key());
    let mut last_held = Instant::now();
    loop {
        // The fence sleeps only right after a read that saw the incarnation held.
        let held = || last_held = Instant::now();
        match step_fence(space, &mut fence, &mut waiter, held).await {
            Ok(seen) => return Ok(seen),
            Err(e) if last_held.elapsed() >= unreachable_limit => return Err(e),
            Err(_) => {
                wake(&mut waiter, fence.poll()).await;
                fence = fence.rearmed();
            }
        }
    }
}

/// Re-reads after a write wake whose read still showed the gate's previous revision, this far
/// apart: the push feed's core delivery can reach the reader before the stream has stored the
/// write (measured: about 1 in 200 leader reads made right after a delivery on a loaded
/// machine), and without a re-read the fence would see that write only at its next poll.
const SETTLE_REREADS: [Duration; 5] = [
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(4),
    Duration::from_millis(8),
    Duration::from_millis(16),
];

/// The revision a read found, if it found a row.
fn read_revision(outcome: &KvOutcome) -> Option<u64> {
    match outcome {
        KvOutcome::Entry(Some(entry)) => Some(entry.revision.0),
        _ => None,
    }
}

/// Steps `fence` to its end; `held` runs at each sleep it asks for.
///
/// Each read is leader-served and decides (F6); a write wake only makes the next read come
/// early. When the read after a write wake shows the same revision as the read before it, the
/// write is not stored yet (or was an own write that did not commit), so it is re-read
/// [`SETTLE_REREADS`] apart until the revision moves, and the fence is handed the last read.
async fn step_fence(
    space: &(impl FenceReads + Sync),
    fence: &mut AwaitHostFence,
    waiter: &mut GateWriteWaiter<'_>,
    mut held: impl FnMut(),
) -> Result<FenceEnd, EpError> {
    let mut observation = None;
    let (mut last_revision, mut woken) = (None, false);
    loop {
        observation = Some(match fence.step(observation.take()) {
            Step::Done(result) => return result,
            Step::Effect(Effect::Kv(request)) => {
                waiter.mark_seen();
                let mut outcome = space.read(&request).await;
                if woken {
                    for pause in SETTLE_REREADS {
                        if read_revision(&outcome) != last_revision {
                            break;
                        }
                        tokio::time::sleep(pause).await;
                        waiter.mark_seen();
                        outcome = space.read(&request).await;
                    }
                }
                (last_revision, woken) = (read_revision(&outcome), false);
                Observation::Kv(outcome)
            }
            Step::Effect(Effect::Sleep(duration)) => {
                held();
                woken = wake(waiter, duration).await;
                Observation::Slept
            }
            Step::Effect(other) => {
                return Err(EpError::internal(format!(
                    "the host fence asked for {other:?}, which it never needs"
                )))
            }
        });
    }
}

/// Waits `duration`, or less when this space writes the watched gate first.
/// Whether a write woke it (rather than the timer).
async fn wake(waiter: &mut GateWriteWaiter<'_>, duration: Duration) -> bool {
    let woken = Box::pin(waiter.written());
    let timer = Box::pin(tokio::time::sleep(duration));
    matches!(future::select(woken, timer).await, future::Either::Left(_))
}

/// [`await_host_fence`] over `client`, woken by every write of the gate, anyone's
/// ([`push_gate_writes`]); the poll stays as the fallback while the push is down.
pub async fn await_host_fence_pushed(
    client: &AuthorityClient,
    gate: GateRef,
    epoch: ProcessEpoch,
) -> Result<FenceEnd, EpError> {
    run_fence_pushed(client, AwaitHostFence::new(gate, epoch)?).await
}

/// Drives an armed [`AwaitHostFence`] over `client` as [`await_host_fence_pushed`] does.
pub async fn run_fence_pushed(
    client: &AuthorityClient,
    fence: AwaitHostFence,
) -> Result<FenceEnd, EpError> {
    let gate = fence.gate().clone();
    pushed(client, &gate, run_fence(client, fence)).await
}

/// [`hold_fence`] over `client`, woken by every write of the gate, anyone's
/// ([`push_gate_writes`]); the poll stays as the fallback while the push is down.
pub async fn hold_fence_pushed(
    client: &AuthorityClient,
    fence: AwaitHostFence,
    unreachable_limit: Duration,
) -> Result<FenceEnd, EpError> {
    let gate = fence.gate().clone();
    pushed(client, &gate, hold_fence(client, fence, unreachable_limit)).await
}

/// Runs `wait` beside the gate's push feed; a push that stops is logged and the wait goes on
/// polling.
async fn pushed<T>(client: &AuthorityClient, gate: &GateRef, wait: impl Future<Output = T>) -> T {
    let wait = std::pin::pin!(wait);
    let push = std::pin::pin!(push_gate_writes(client, gate));
    match future::select(wait, push).await {
        future::Either::Left((done, _)) => done,
        future::Either::Right((down, wait)) => {
            tracing::warn!(
                connection = client.label(),
                "the gate push stopped ({}); the fence polls",
                down.message
            );
            wait.await
        }
    }
}

/// Pushes every write of `gate`, by any writer, to the waiters of that gate on `client`'s hub
/// ([`FenceReads::gate_writes`]): a core subscription on the gate key's subject
/// (`$KV.cotal_auth_<space>.<key>`, which every KV write of the key is published on), held on
/// the client's current connection and moved to each renewed one before the old one is let go.
/// A delivery carries no authority: it only wakes the fence, whose leader read decides (F6).
///
/// Runs until the client fails closed, and returns that error; a subscription that cannot be
/// made is retried, the fence's poll covering the gap. The subject needs a `sub` grant on that
/// one key (the reader's [`auth_reader_watching`](cotal_core::plane_grants::auth_reader_watching)).
pub async fn push_gate_writes(client: &AuthorityClient, gate: &GateRef) -> EpError {
    let key = gate.key();
    let subject = format!(
        "{}{key}",
        StoreLayout::of(Store::Auth, &gate.space).subject_prefix
    );
    let mut pushes = Followed::new(
        format!("{} (gate push)", client.label()),
        client,
        vec![Interest::Subject(subject)],
    );
    loop {
        match pushes.next().await {
            Ok(_) => client.gate_writes().wake(&key),
            Err(gone) => return gone,
        }
    }
}
