//! Host incarnations and the host fence on a real `nats-server` (reference-auth-service §7.2,
//! DESIGN §5 item 3): register-host-incarnation through the NATS driver, a later start fencing the
//! first, and `await_host_fence` resolving on a move this plane made (woken by its own write, no
//! poll tick) and on a foreign plane's move (seen by the ≤ 1 s leader-read poll), on deletion,
//! and at once for a stale epoch.
//!
//! Latencies are measured and printed for the report; only outcomes and orderings are asserted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cotal_core::gate::{EndpointGate, GateOp, GateState, OpKind, ProcessEpoch};
use cotal_core::host::{
    FenceEnd, HostConfig, HostEndpoint, HostIncarnation, RegisterHostIncarnation, SelfContract,
};
use cotal_core::issuance::GateRef;
use cotal_core::kv::{KvOp, KvOutcome, KvRequest, Store};
use cotal_core::machine::Replay;
use cotal_core::names::{InstanceId, OpId, SpaceName};
use cotal_io_nats::host::await_host_fence;
use cotal_io_nats::{NatsWorld, SendHook, SendPhase, Space, SpaceOptions};
use cotal_tests::nats::{NatsServer, ServerOptions};
use serde_json::json;

const IID: &str = "hhhhhhhhhhhhhhhhhhhhhhhhhh";
/// How long a waiter is left to reach its poll sleep before the move it waits for.
const ARM: Duration = Duration::from_millis(150);

static SPACES: AtomicU32 = AtomicU32::new(0);

fn fresh_space() -> SpaceName {
    let n = SPACES.fetch_add(1, Ordering::Relaxed);
    SpaceName::parse(&format!("hostfence{n}")).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn host(space: &SpaceName) -> HostConfig {
    let command = json!({
        "name": "work", "class": "ephemeral", "targeted": false, "capability": "host.work",
        "inputDigest": "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d",
        "outputDigest": "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d",
        "traits": [],
    });
    let doc = json!({
        "urn": "com.example.host", "revision": 1, "attributes": [], "events": [],
        "commands": [command],
    });
    HostConfig {
        space: space.clone(),
        endpoint: HostEndpoint::parse("com.example.host").unwrap(),
        contract: SelfContract::from_cluster(&doc).unwrap(),
    }
}

fn instance() -> InstanceId {
    InstanceId::parse(IID).unwrap()
}

async fn connect(server: &NatsServer, space: &SpaceName) -> Space {
    Space::connect(&server.url(), space.clone(), SpaceOptions::default())
        .await
        .unwrap()
}

/// One host start through `space`'s driver; returns the incarnation and the instant its first
/// gate update (the registration barrier's freeze, which already fences the predecessor: its
/// gate is no longer `open`) was acknowledged.
async fn start(space: &Space, n: u8) -> (HostIncarnation, Instant) {
    let acks: Arc<Mutex<Option<Instant>>> = Arc::default();
    let seen = Arc::clone(&acks);
    let hook: SendHook = Box::new(move |phase, request: &KvRequest| {
        if phase == SendPhase::After
            && request.store() == Store::Auth
            && request.op() == KvOp::Update
            && request.key().starts_with("epgate.")
        {
            seen.lock().unwrap().get_or_insert_with(Instant::now);
        }
        Box::pin(async {})
    });
    let mut world = NatsWorld::new(space);
    world.set_send_hook(Some(hook));
    let started = world
        .run(&mut Replay::new(RegisterHostIncarnation {
            host: host(space.space()),
            instance: instance(),
            op_id: OpId::mint([n; 20]),
        }))
        .await
        .unwrap();
    let froze = acks.lock().unwrap().expect("the start wrote its gate");
    (started, froze)
}

fn gate(space: &Space) -> GateRef {
    host(space.space()).gate(&instance())
}

/// register-host-incarnation on a real server: epoch 0, then 1 for the next start; round trips
/// counted; a second start made by this plane wakes the first incarnation's fence through its
/// own write, and a third start made by another plane (another connection) wakes the second's
/// fence through the poll.
#[test]
fn f69_host_restart_fences_the_predecessor_own_and_foreign() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let name = fresh_space();
        let plane = connect(&server, &name).await;
        let foreign = connect(&server, &name).await;

        let before = plane.round_trips();
        let (first, _) = start(&plane, 1).await;
        let first_trips = plane.round_trips() - before;
        assert_eq!(first.process_epoch, ProcessEpoch(0));

        // Own move: this plane starts the next incarnation while the first one waits.
        let (fenced, (second, froze)) = tokio::join!(
            async {
                let seen = await_host_fence(&plane, gate(&plane), first.process_epoch).await;
                (seen, Instant::now())
            },
            async {
                tokio::time::sleep(ARM).await;
                start(&plane, 2).await
            }
        );
        let (fenced, woke) = fenced;
        let fenced = fenced.unwrap().observation().cloned().unwrap();
        assert_eq!(second.process_epoch, ProcessEpoch(1));
        assert_fenced_by_successor(&fenced.gate, ProcessEpoch(0));
        let own_saw = fenced.gate.state();
        let own = woke.saturating_duration_since(froze);

        // Foreign move: another plane starts the third incarnation; this plane's waiter on the
        // second one learns it from its poll.
        let (fenced, (third, froze)) = tokio::join!(
            async {
                let seen = await_host_fence(&plane, gate(&plane), second.process_epoch).await;
                (seen, Instant::now())
            },
            async {
                tokio::time::sleep(ARM).await;
                let before = foreign.round_trips();
                let started = start(&foreign, 3).await;
                println!(
                    "register-host-incarnation on NATS: first start {first_trips} round trips, \
                     later start {}",
                    foreign.round_trips() - before
                );
                started
            }
        );
        let (fenced, woke) = fenced;
        let fenced = fenced.unwrap().observation().cloned().unwrap();
        assert_eq!(third.process_epoch, ProcessEpoch(2));
        assert_fenced_by_successor(&fenced.gate, ProcessEpoch(1));
        let polled = woke.saturating_duration_since(froze);
        println!(
            "host fence wake after the successor's freeze was acknowledged: own move {own:?} \
             (saw the gate {}), foreign move {polled:?} (saw it {}); poll period {:?}",
            own_saw.as_str(),
            fenced.gate.state().as_str(),
            cotal_core::host::HOST_FENCE_POLL
        );
    });
}

/// The successor's start fences the incarnation at `epoch` from its freeze on: the waiter sees
/// the gate frozen by that registration at `epoch`, or already reopened at `epoch + 1`.
fn assert_fenced_by_successor(gate: &EndpointGate, epoch: ProcessEpoch) {
    match gate.state() {
        GateState::Frozen => {
            assert_eq!(gate.process_epoch(), epoch);
            assert_eq!(gate.op().map(GateOp::kind), Some(OpKind::Registration));
        }
        GateState::Open => assert_eq!(gate.process_epoch(), ProcessEpoch(epoch.0 + 1)),
        other => panic!("the gate is {}", other.as_str()),
    }
}

/// The wake-up itself, without any clock: after a gate write through this plane's space a
/// subscribed waiter is ready on its first poll; after the same kind of write through another
/// plane's connection it is not (only the poll will see that one).
#[test]
fn own_gate_writes_wake_waiters_at_once_foreign_ones_do_not() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let name = fresh_space();
        let plane = connect(&server, &name).await;
        let foreign = connect(&server, &name).await;
        start(&plane, 1).await;
        let key = gate(&plane).key();
        let mut waiter = plane.gate_writes().subscribe(&key);

        waiter.mark_seen();
        start(&foreign, 2).await;
        assert!(!ready(waiter.written()).await, "a foreign write woke us");

        waiter.mark_seen();
        start(&plane, 3).await;
        assert!(
            ready(waiter.written()).await,
            "our own write did not wake us"
        );

        // A write to another key of the auth bucket is not a gate write.
        waiter.mark_seen();
        let other = plane
            .execute(&KvRequest::Create {
                store: Store::Auth,
                key: "eprepair.com_example_host.hhhhhhhhhhhhhhhhhhhhhhhhhh".into(),
                value: b"{}".to_vec(),
            })
            .await;
        assert!(matches!(other, KvOutcome::Written(_)), "{other:?}");
        assert!(!ready(waiter.written()).await, "a non-gate write woke us");
    });
}

/// True when `future` is ready on its first poll.
async fn ready(future: impl std::future::Future<Output = ()>) -> bool {
    tokio::select! {
        biased;
        () = future => true,
        () = std::future::ready(()) => false,
    }
}

/// `awaitHostFence` resolves `null` once the gate is deleted (whoever deletes it).
#[test]
fn host_fence_resolves_none_when_the_gate_is_deleted() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let name = fresh_space();
        let plane = connect(&server, &name).await;
        let (first, _) = start(&plane, 1).await;
        let (seen, ()) = tokio::join!(
            await_host_fence(&plane, gate(&plane), first.process_epoch),
            async {
                tokio::time::sleep(ARM).await;
                let KvOutcome::Entry(Some(entry)) = plane
                    .execute(&KvRequest::Get {
                        store: Store::Auth,
                        key: gate(&plane).key(),
                    })
                    .await
                else {
                    panic!("no gate")
                };
                let deleted = plane
                    .execute(&KvRequest::Delete {
                        store: Store::Auth,
                        key: gate(&plane).key(),
                        expected: entry.revision,
                    })
                    .await;
                assert!(matches!(deleted, KvOutcome::Written(_)), "{deleted:?}");
            }
        );
        assert_eq!(seen.unwrap(), FenceEnd::Gone);
    });
}

/// A stale epoch (the gate has moved on) and an absent gate resolve on the first read: one
/// round trip, no sleep.
#[test]
fn host_fence_for_a_stale_epoch_returns_at_once() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let name = fresh_space();
        let plane = connect(&server, &name).await;
        let absent = GateRef::new(
            name.clone(),
            host(&name).endpoint.name().clone(),
            InstanceId::parse("aaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap(),
        );
        let before = plane.round_trips();
        assert_eq!(
            await_host_fence(&plane, absent, ProcessEpoch(0))
                .await
                .unwrap(),
            FenceEnd::Gone
        );
        assert_eq!(plane.round_trips() - before, 1);

        start(&plane, 1).await;
        start(&plane, 2).await;
        let before = plane.round_trips();
        let FenceEnd::Superseded(seen) = await_host_fence(&plane, gate(&plane), ProcessEpoch(0))
            .await
            .unwrap()
        else {
            panic!("a gate at a later epoch supersedes the stale one");
        };
        assert_eq!(plane.round_trips() - before, 1);
        assert_eq!(seen.gate.process_epoch(), ProcessEpoch(1));
        assert_eq!(seen.gate.state(), GateState::Open);
    });
}
