//! reference-gate-impl §6.1 (`endpoint-serve-gate.smoke.ts`, cells A1–E4) on a real
//! `nats-server`: the core's machines (provision, observe, barrier freeze/reopen, stage,
//! enumerate, revoke, the serve-mint finalize) driven through the NATS adapter's async driver,
//! mirroring `core/tests/reference_cells.rs` on the KV model.
//!
//! Then ambiguity for real: a write goes out and the server dies before its ack comes back.
//! Three ways, each deterministic about what happened to the write:
//! * **not applied**: the server is paused (SIGSTOP) before the publish and killed after it, so
//!   the publish dies unread in its socket; restart;
//! * **applied, ack lost**: the client talks through a loopback proxy that swallows the server's
//!   replies from just before the publish; once the write is visible to a second connection the
//!   proxied connection is cut; the client reconnects;
//! * **crash after flush** (the literal scenario): flush, then kill -9 and restart; whether the
//!   ack escaped first is a race, so the test reports which path it saw.
//!
//! In every case the machine must settle the outcome by a leader read-back (freeze: our `opId`
//! on the frozen gate; reopen: our exact successor coordinates) or fail closed (the serve-mint
//! touch rewrites identical bytes, so it revokes its row and refuses `unavailable`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cotal_core::authority::SelfAuthority;
use cotal_core::barrier::{self, FamilyRow, FreezeToken};
use cotal_core::contract::publish_cluster;
use cotal_core::gate::{
    Coordinates, EndpointGate, GateState, Generation, NameAuthorityRevision, OpKind, ProcessEpoch,
    RegistrationRevision,
};
use cotal_core::issuance::{
    observe_gate, FinalizeServeMint, GateObservation, GateRef, ProvisionGate, ServeCredential,
    ServeGrant,
};
use cotal_core::kv::{KvOutcome, KvRequest, Revision, Store};
use cotal_core::ledger::{self, CredState, LedgerRow, Revocation};
use cotal_core::machine::{Ctx, Effect, Halt, Observation, Replay, Script};
use cotal_core::names::{
    keys, ActorToken, CredentialId, EndpointName, InstanceId, OpId, OwnerToken, Principal,
    SourceMember, SpaceName,
};
use cotal_core::registration::{RegisterInstance, Registered, EVICT_PRINCIPALS_MAX};
use cotal_core::service::ServiceSpec;
use cotal_core::{EpError, ErrorCode};
use cotal_io_nats::async_nats::connection::State;
use cotal_io_nats::async_nats::Client;
use cotal_io_nats::{NatsWorld, Replicas, SendHook, SendPhase, Space, SpaceOptions};
use cotal_tests::nats::{NatsCluster, NatsServer, ServerOptions};
use serde_json::json;

/// The future a [`SendHook`] returns (`futures::future::BoxFuture` without the dependency).
type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

// ---- fixtures (the reference smoke's, as in core/tests/common) -------------------------------

const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";
const P: &str = "u_cccccccccccccccccccccccccc.term";
const OTHER: &str = "u_dddddddddddddddddddddddddd.term";

fn principal(s: &str) -> Principal {
    Principal::parse(s).unwrap()
}

fn op(n: u8) -> OpId {
    OpId::mint([n; 20])
}

fn coords(generation: u64, epoch: u64, reg: u64, nar: u64) -> Coordinates {
    Coordinates {
        generation: Generation(generation),
        process_epoch: ProcessEpoch(epoch),
        registration_revision: RegistrationRevision(reg),
        name_authority_revision: NameAuthorityRevision(nar),
    }
}

static SPACES: AtomicU32 = AtomicU32::new(0);

fn fresh_space() -> SpaceName {
    let n = SPACES.fetch_add(1, Ordering::Relaxed);
    SpaceName::parse(&format!("cells{n}")).unwrap()
}

fn gate_in(space: &SpaceName) -> GateRef {
    GateRef::new(
        space.clone(),
        EndpointName::parse("throwaway").unwrap(),
        InstanceId::parse(IID).unwrap(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A script from a closure, for composing core procedures.
struct Proc<F>(F);

impl<T, F: Fn(&mut Ctx<'_>) -> Result<T, Halt>> Script for Proc<F> {
    type Output = T;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<T, Halt> {
        (self.0)(cx)
    }
}

async fn run<S: Script>(world: &mut NatsWorld<'_>, script: S) -> Result<S::Output, EpError> {
    world.run(&mut Replay::new(script)).await
}

async fn observe(world: &mut NatsWorld<'_>, gate: &GateRef) -> Option<GateObservation> {
    let gate = gate.clone();
    run(world, Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &gate)))
        .await
        .unwrap()
}

async fn provision(world: &mut NatsWorld<'_>, gate: &GateRef) {
    let provision = ProvisionGate {
        gate: gate.clone(),
        principal: principal(P),
    };
    run(world, provision).await.unwrap();
}

async fn freeze(world: &mut NatsWorld<'_>, gate: &GateRef, op_id: &OpId) -> Option<FreezeToken> {
    let observed = observe(world, gate).await.unwrap();
    let (gate, op_id) = (gate.clone(), op_id.clone());
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op_id, &observed)),
    )
    .await
    .unwrap()
}

async fn reopen(
    world: &mut NatsWorld<'_>,
    gate: &GateRef,
    op_id: &OpId,
    token: FreezeToken,
    successor: Coordinates,
) -> Result<bool, EpError> {
    let (gate, op_id) = (gate.clone(), op_id.clone());
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| barrier::reopen(cx, &gate, &op_id, token, successor)),
    )
    .await
}

/// The mint adapter's revision-pinned touch (`commit(expectedRevision)` of the reference):
/// true iff the gate is open at exactly `pin` and the rewrite at `pin` wins.
async fn commit(space: &Space, gate: &GateRef, pin: Revision) -> bool {
    let read = space
        .execute(&KvRequest::Get {
            store: Store::Auth,
            key: gate.key(),
        })
        .await;
    let KvOutcome::Entry(Some(entry)) = read else {
        return false;
    };
    if entry.revision != pin
        || EndpointGate::parse(&entry.value).unwrap().state() != GateState::Open
    {
        return false;
    }
    let touch = KvRequest::Update {
        store: Store::Auth,
        key: gate.key(),
        value: entry.value,
        expected: pin,
    };
    matches!(space.execute(&touch).await, KvOutcome::Written(_))
}

async fn stage(world: &mut NatsWorld<'_>, row: &LedgerRow) {
    let (key, bytes) = (row.key(), row.to_bytes());
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| {
            ledger::create_byte_idempotent(cx, Store::Auth, &key, &bytes, "ledger row")
        }),
    )
    .await
    .unwrap();
}

async fn enumerate(world: &mut NatsWorld<'_>, gate: &GateRef) -> Vec<FamilyRow> {
    let enumerate = barrier::EnumerateFamily { gate: gate.clone() };
    run(world, enumerate).await.unwrap()
}

async fn evict(world: &mut NatsWorld<'_>, holders: Vec<Principal>) -> Vec<bool> {
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| cx.evict(holders.clone())),
    )
    .await
    .unwrap()
}

fn c2_row(gate: &GateRef) -> LedgerRow {
    LedgerRow::endpoint_active(
        gate.endpoint.clone(),
        &gate.instance,
        CredentialId::parse(&format!("sha256-{}", "a".repeat(64))).unwrap(),
        principal(P),
        vec![SourceMember::parse("session.abc").unwrap()],
        1_900_000_000,
    )
    .unwrap()
}

async fn row_state(space: &Space, key: &str) -> Option<CredState> {
    let read = space
        .execute(&KvRequest::Get {
            store: Store::Auth,
            key: key.into(),
        })
        .await;
    match read {
        KvOutcome::Entry(Some(e)) => Some(LedgerRow::parse(&e.value, key).unwrap().state()),
        KvOutcome::Entry(None) => None,
        other => panic!("reading {key}: {other:?}"),
    }
}

fn options(timeout: Duration) -> SpaceOptions {
    SpaceOptions {
        request_timeout: timeout,
        ..SpaceOptions::default()
    }
}

// ---- §6.1 cells ------------------------------------------------------------------------------

#[test]
fn endpoint_serve_gate_cells_a1_to_e4() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let name = fresh_space();
        let space = Space::connect(&server.url(), name.clone(), options(Duration::from_secs(5)))
            .await
            .unwrap();
        let gate = gate_in(&name);
        let mut world = NatsWorld::new(&space);

        // A1: provision → open, generation 0, no op, principal P.
        provision(&mut world, &gate).await;
        let a1 = observe(&mut world, &gate).await.unwrap();
        assert_eq!(a1.gate.state(), GateState::Open);
        assert_eq!(a1.gate.generation().0, 0);
        assert!(a1.gate.op().is_none());
        assert_eq!(a1.gate.principal(), &principal(P));
        // A2: provision again with P → no error, generation still 0.
        provision(&mut world, &gate).await;
        assert_eq!(
            observe(&mut world, &gate)
                .await
                .unwrap()
                .gate
                .generation()
                .0,
            0
        );
        // A3: provision with a different principal → conflict.
        let a3 = run(
            &mut world,
            ProvisionGate {
                gate: gate.clone(),
                principal: principal(OTHER),
            },
        )
        .await;
        assert_eq!(a3.unwrap_err().code, ErrorCode::Conflict);

        // B1: barrier(op1).observe → open; the key carries the endpoint token.
        let op1 = op(1);
        assert_eq!(
            observe(&mut world, &gate).await.unwrap().gate.state(),
            GateState::Open
        );
        assert_eq!(gate.key(), format!("epgate.throwaway.{IID}"));
        // B2: freeze(observed.revision) → token; frozen, op.opId = op1, kind registration.
        let token = freeze(&mut world, &gate, &op1).await.unwrap();
        let b2 = observe(&mut world, &gate).await.unwrap();
        assert_eq!(b2.gate.state(), GateState::Frozen);
        assert_eq!(b2.gate.op().unwrap().op_id(), &op1);
        assert_eq!(b2.gate.op().unwrap().kind(), OpKind::Registration);
        assert_eq!(b2.revision, token.0);
        // B3: the mint adapter sees frozen; commit(token) → false (commit is open-only).
        assert!(!commit(&space, &gate, token.0).await);
        // B4: reopen(token, gen+1, same epoch, regRev 1, same nar) → open, generation 1.
        assert!(reopen(&mut world, &gate, &op1, token, coords(1, 0, 1, 0))
            .await
            .unwrap());
        let b4 = observe(&mut world, &gate).await.unwrap();
        assert_eq!(b4.gate.state(), GateState::Open);
        assert_eq!(b4.gate.generation().0, 1);
        assert_eq!(b4.gate.registration_revision().0, 1);
        assert!(b4.gate.op().is_none());

        // C1: mint observe → open at generation 1.
        let c1 = observe(&mut world, &gate).await.unwrap();
        assert_eq!(
            (c1.gate.state(), c1.gate.generation().0),
            (GateState::Open, 1)
        );
        // C2: stage the row → active, holder P, endpoint and lifecycleUid correct.
        let row = c2_row(&gate);
        stage(&mut world, &row).await;
        assert_eq!(row_state(&space, &row.key()).await, Some(CredState::Active));
        // C3: commit(observed revision) → true; C4: commit(revision − 1) → false.
        assert!(commit(&space, &gate, c1.revision).await);
        let now = observe(&mut world, &gate).await.unwrap().revision;
        assert!(!commit(&space, &gate, Revision(now.0 - 1)).await);

        // D1: a barrier with no evictor: evict(P) → not verified.
        assert_eq!(evict(&mut world, vec![principal(P)]).await, vec![false]);
        // D2: with an evictor: freeze, enumerate exactly the C2 row, revoke, evict, reopen at
        // gen+1 / regRev 2; re-enumerate shows it revoked.
        world.set_evictor(Box::new(|holders| {
            let verdicts = vec![true; holders.len()];
            Box::pin(async move { verdicts })
        }));
        let op2 = op(2);
        let token = freeze(&mut world, &gate, &op2).await.unwrap();
        let rows = enumerate(&mut world, &gate).await;
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].key, row.key());
        assert_eq!(rows[0].row.state(), CredState::Active);
        assert_eq!(rows[0].row.holder_principal(), &principal(P));
        let key = rows[0].key.clone();
        let revoked = run(
            &mut world,
            Proc(move |cx: &mut Ctx<'_>| ledger::revoke_row(cx, &key)),
        )
        .await
        .unwrap();
        assert_eq!(revoked, Revocation::Revoked);
        world.log.clear();
        assert_eq!(evict(&mut world, vec![principal(P)]).await, vec![true]);
        assert_eq!(world.evicted(), vec![principal(P)]);
        assert!(reopen(&mut world, &gate, &op2, token, coords(2, 0, 2, 0))
            .await
            .unwrap());
        assert_eq!(
            observe(&mut world, &gate)
                .await
                .unwrap()
                .gate
                .generation()
                .0,
            2
        );
        assert_eq!(
            enumerate(&mut world, &gate).await[0].row.state(),
            CredState::Revoked
        );

        // E1: freeze by bar3 wins; E2: bar4.freeze(current revision) → refused, and pinned to
        // the pre-freeze revision → null.
        let (op3, op4) = (op(3), op(4));
        let before_e1 = observe(&mut world, &gate).await.unwrap();
        let token3 = freeze(&mut world, &gate, &op3).await.unwrap();
        let current = observe(&mut world, &gate).await.unwrap();
        let e2 = run(&mut world, {
            let (gate, op4, observed) = (gate.clone(), op4.clone(), current.clone());
            Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op4, &observed))
        })
        .await;
        assert_eq!(e2.unwrap_err().code, ErrorCode::Conflict);
        let e2_stale = run(&mut world, {
            let (gate, observed) = (gate.clone(), before_e1);
            Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op4, &observed))
        })
        .await;
        assert_eq!(
            e2_stale.unwrap(),
            None,
            "the pinned CAS at the pre-freeze revision loses"
        );
        // E3: bar3.reopen(token − 1) → false; E4: bar3.reopen(token) → true.
        let stale_token = FreezeToken(Revision(token3.0 .0 - 1));
        assert!(
            !reopen(&mut world, &gate, &op3, stale_token, coords(3, 0, 2, 0))
                .await
                .unwrap()
        );
        assert!(reopen(&mut world, &gate, &op3, token3, coords(3, 0, 2, 0))
            .await
            .unwrap());
        println!(
            "cells A1–E4: {} KV round trips (bind included)",
            space.round_trips()
        );
    });
}

fn grant(gate: &GateRef, epoch: u64, reg: u64) -> ServeGrant {
    ServeGrant {
        space: gate.space.clone(),
        endpoint: gate.endpoint.clone(),
        instance: gate.instance.clone(),
        owner: OwnerToken::parse("u_cccccccccccccccccccccccccc").unwrap(),
        epoch: ProcessEpoch(epoch),
        registration_revision: RegistrationRevision(reg),
        name_authority_revision: NameAuthorityRevision(0),
    }
}

fn serve_credential(n: u8) -> ServeCredential {
    ServeCredential {
        credential_id: CredentialId::from_sha256_hex(&[n; 32]),
        holder_actor: ActorToken::parse("term").unwrap(),
        source_chain: vec![SourceMember::parse("session.abc").unwrap()],
        exp: 1_900_000_000,
    }
}

/// Provisions the gate and registers it once: open at generation 1, epoch 0, revision `reg`.
async fn registered(world: &mut NatsWorld<'_>, gate: &GateRef, reg: u64) {
    provision(world, gate).await;
    let token = freeze(world, gate, &op(1)).await.unwrap();
    assert!(reopen(world, gate, &op(1), token, coords(1, 0, reg, 0))
        .await
        .unwrap());
}

#[test]
fn serve_mint_finalize_releases_at_the_grant_and_refuses_a_frozen_gate() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let name = fresh_space();
        let space = Space::connect(&server.url(), name.clone(), options(Duration::from_secs(5)))
            .await
            .unwrap();
        let gate = gate_in(&name);
        let mut world = NatsWorld::new(&space);
        registered(&mut world, &gate, 7).await;

        let before = space.round_trips();
        let release = world
            .run(&mut FinalizeServeMint::machine(
                gate.clone(),
                grant(&gate, 0, 7),
                serve_credential(1),
            ))
            .await
            .unwrap();
        // observe, stage (create), touch.
        assert_eq!(space.round_trips() - before, 3);
        assert_eq!(
            row_state(&space, &release.row_key).await,
            Some(CredState::Active)
        );
        assert_eq!(
            observe(&mut world, &gate).await.unwrap().revision,
            release.gate_revision
        );

        // A grant from another registration revision is expired; a frozen gate refuses
        // before writing anything.
        let stale = world
            .run(&mut FinalizeServeMint::machine(
                gate.clone(),
                grant(&gate, 0, 6),
                serve_credential(2),
            ))
            .await;
        assert_eq!(stale.unwrap_err().code, ErrorCode::Expired);
        freeze(&mut world, &gate, &op(2)).await.unwrap();
        let frozen = world
            .run(&mut FinalizeServeMint::machine(
                gate.clone(),
                grant(&gate, 0, 7),
                serve_credential(3),
            ))
            .await;
        assert_eq!(frozen.unwrap_err().code, ErrorCode::Expired);
        let family = enumerate(&mut world, &gate).await;
        assert_eq!(family.len(), 1, "only the released credential has a row");
    });
}

// ---- ambiguity for real ----------------------------------------------------------------------

/// Waits until `client` is connected again after a server restart or a cut connection.
async fn reconnected(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while client.connection_state() != State::Connected {
        assert!(Instant::now() < deadline, "the client did not reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loopback TCP proxy whose server-to-client direction can be swallowed, and whose
/// connections can be cut: a network that loses exactly one ack.
struct Proxy {
    port: u16,
    swallow: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let swallow = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (sw, conns) = (swallow.clone(), connections.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                conns
                    .lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let never = Arc::new(AtomicBool::new(false));
                std::thread::spawn(move || pump(client, server, never));
                let sw = sw.clone();
                std::thread::spawn(move || pump(s2, c2, sw));
            }
        });
        Proxy {
            port,
            swallow,
            connections,
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Closes every proxied connection and stops swallowing.
    fn cut(&self) {
        for c in self.connections.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        self.swallow.store(false, Ordering::SeqCst);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, swallow: Arc<AtomicBool>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if swallow.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// How the server loses the write's ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// Paused before the publish, killed after it: the publish is never read.
    NotApplied,
    /// Replies swallowed by the proxy from before the publish; the connection is cut once the
    /// write is visible to a second connection.
    AppliedAckLost,
    /// Flush, then kill -9 and restart: whichever way the race goes.
    CrashAfterFlush,
}

/// A send hook that makes the first publish of an `Update` on `key` lose its ack per `loss`.
fn losing_hook(
    loss: Loss,
    key: String,
    server: Arc<Mutex<NatsServer>>,
    client: Client,
    proxy: Option<Arc<Proxy>>,
    observer: Option<Arc<Space>>,
) -> SendHook {
    let armed = Arc::new(AtomicBool::new(true));
    Box::new(move |phase, request| {
        let target = matches!(request, KvRequest::Update { key: k, .. } if *k == key);
        let fire = target && armed.load(Ordering::SeqCst);
        if fire && phase == SendPhase::After {
            armed.store(false, Ordering::SeqCst);
        }
        let (server, client, proxy, observer) = (
            server.clone(),
            client.clone(),
            proxy.clone(),
            observer.clone(),
        );
        // The write is visible once the key holds its bytes at a revision past the one it was
        // pinned to: a mint touch rewrites identical bytes, so the bytes alone would match
        // before the touch landed.
        let (expected, pinned) = match request {
            KvRequest::Update {
                value, expected, ..
            } => (value.clone(), *expected),
            _ => (Vec::new(), Revision(0)),
        };
        let key = key.clone();
        let work: BoxFuture<()> = Box::pin(async move {
            if !fire {
                return;
            }
            match (loss, phase) {
                (Loss::NotApplied, SendPhase::Before) => {
                    let server = server.clone();
                    tokio::task::spawn_blocking(move || server.lock().unwrap().pause().unwrap())
                        .await
                        .unwrap();
                }
                (Loss::AppliedAckLost, SendPhase::Before) => {
                    proxy.unwrap().swallow.store(true, Ordering::SeqCst);
                }
                (Loss::NotApplied, SendPhase::After) => {
                    let server = server.clone();
                    tokio::task::spawn_blocking(move || {
                        let mut s = server.lock().unwrap();
                        s.kill().unwrap();
                        s.restart().unwrap();
                    })
                    .await
                    .unwrap();
                    reconnected(&client).await;
                }
                (Loss::AppliedAckLost, SendPhase::After) => {
                    let observer = observer.unwrap();
                    let deadline = Instant::now() + Duration::from_secs(10);
                    loop {
                        let seen = observer
                            .execute(&KvRequest::Get {
                                store: Store::Auth,
                                key: key.clone(),
                            })
                            .await;
                        if matches!(&seen, KvOutcome::Entry(Some(e)) if e.value == expected && e.revision > pinned)
                        {
                            break;
                        }
                        assert!(Instant::now() < deadline, "the write never became visible");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    proxy.unwrap().cut();
                    reconnected(&client).await;
                }
                (Loss::CrashAfterFlush, SendPhase::After) => {
                    client.flush().await.unwrap();
                    let server = server.clone();
                    tokio::task::spawn_blocking(move || {
                        let mut s = server.lock().unwrap();
                        s.kill().unwrap();
                        s.restart().unwrap();
                    })
                    .await
                    .unwrap();
                    reconnected(&client).await;
                }
                (Loss::CrashAfterFlush, SendPhase::Before) => {}
            }
        });
        work
    })
}

/// Which machine's write loses its ack.
#[derive(Debug, Clone, Copy)]
enum Victim {
    Freeze,
    Reopen,
    ServeMintTouch,
}

/// What a run's trace shows: writes answered `Ambiguous`, and gate writes sent in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Trace {
    ambiguous: usize,
    gate_writes: usize,
}

fn trace(history: &[(Effect, Observation)], gate: &GateRef) -> Trace {
    Trace {
        ambiguous: history
            .iter()
            .filter(|(_, o)| matches!(o, Observation::Kv(KvOutcome::Ambiguous(_))))
            .count(),
        gate_writes: history
            .iter()
            .filter(|(e, _)| matches!(e, Effect::Kv(KvRequest::Update { key, .. }) if *key == gate.key()))
            .count(),
    }
}

/// One ambiguous gate write and a second, pinned attempt after the read-back found it absent.
const RETRIED: Trace = Trace {
    ambiguous: 1,
    gate_writes: 2,
};
/// One ambiguous gate write that the read-back recognised as ours: no second attempt.
const RECOGNISED: Trace = Trace {
    ambiguous: 1,
    gate_writes: 1,
};

/// Runs `victim` with its gate write losing its ack per `loss`; checks the machine settled the
/// outcome against the store or failed closed, and returns its trace.
fn lose_an_ack(victim: Victim, loss: Loss) -> Trace {
    let server = Arc::new(Mutex::new(
        NatsServer::start(ServerOptions::default()).unwrap(),
    ));
    let upstream = server.lock().unwrap().port();
    let direct = server.lock().unwrap().url();
    let proxy = (loss == Loss::AppliedAckLost).then(|| Arc::new(Proxy::start(upstream)));
    runtime().block_on(async {
        let name = fresh_space();
        let url = proxy.as_ref().map_or(direct.clone(), |p| p.url());
        let space = Space::connect(&url, name.clone(), options(Duration::from_millis(1500)))
            .await
            .unwrap();
        let observer = match loss {
            Loss::AppliedAckLost => Some(Arc::new(
                Space::connect(&direct, name.clone(), options(Duration::from_secs(5)))
                    .await
                    .unwrap(),
            )),
            _ => None,
        };
        let gate = gate_in(&name);
        let mut world = NatsWorld::new(&space);
        registered(&mut world, &gate, 7).await;
        let hook = losing_hook(
            loss,
            gate.key(),
            server.clone(),
            space.client().clone(),
            proxy.clone(),
            observer,
        );

        let trace = match victim {
            Victim::Freeze => {
                let observed = observe(&mut world, &gate).await.unwrap();
                world.set_send_hook(Some(hook));
                let mut machine = barrier::FreezeGate::machine(gate.clone(), op(2), observed);
                let token = world.run(&mut machine).await;
                world.set_send_hook(None);
                let now = observe(&mut world, &gate).await.unwrap();
                // Settled by read-back: the freeze is ours, at the revision it reports.
                let token = token.unwrap().expect("the freeze settles as won");
                assert_eq!(now.revision, token.0);
                assert_eq!(now.gate.state(), GateState::Frozen);
                assert_eq!(now.gate.op().unwrap().op_id(), &op(2));
                trace(machine.history(), &gate)
            }
            Victim::Reopen => {
                let token = freeze(&mut world, &gate, &op(2)).await.unwrap();
                world.set_send_hook(Some(hook));
                let successor = coords(2, 0, 8, 0);
                let mut machine =
                    barrier::ReopenGate::machine(gate.clone(), op(2), token, successor);
                let reopened = world.run(&mut machine).await;
                world.set_send_hook(None);
                let now = observe(&mut world, &gate).await.unwrap();
                match reopened {
                    Ok(true) => {
                        assert_eq!(now.gate.state(), GateState::Open);
                        assert_eq!(now.gate.coordinates(), successor);
                    }
                    // Fail closed: an unresolved reopen says so, and the gate is not open
                    // at some coordinate nobody chose.
                    Err(e) => {
                        assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
                        assert!(now.revision == token.0 || now.gate.coordinates() == successor);
                    }
                    Ok(false) => panic!("nobody else moved the gate"),
                }
                trace(machine.history(), &gate)
            }
            Victim::ServeMintTouch => {
                let observed = observe(&mut world, &gate).await.unwrap();
                world.set_send_hook(Some(hook));
                let mut machine = FinalizeServeMint::machine(
                    gate.clone(),
                    grant(&gate, 0, 7),
                    serve_credential(9),
                );
                let released = world.run(&mut machine).await;
                world.set_send_hook(None);
                let row_key = machine.history().iter().find_map(|(e, _)| match e {
                    Effect::Kv(KvRequest::Create { key, .. }) => Some(key.clone()),
                    _ => None,
                });
                let row = row_state(&space, &row_key.unwrap()).await;
                let now = observe(&mut world, &gate).await.unwrap();
                assert_eq!(
                    now.gate, observed.gate,
                    "a touch never changes the gate's fields"
                );
                match loss {
                    Loss::NotApplied => {
                        assert_eq!(
                            now.revision, observed.revision,
                            "the lost touch never landed"
                        )
                    }
                    Loss::AppliedAckLost => {
                        assert!(now.revision > observed.revision, "the touch landed unacked")
                    }
                    Loss::CrashAfterFlush => {}
                }
                match released {
                    // The ack made it after all (only possible in the crash race).
                    Ok(_) => assert_eq!(row, Some(CredState::Active)),
                    // Fail closed: the touch's outcome cannot be read back (identical bytes),
                    // so the row is revoked and nothing is released.
                    Err(e) => {
                        assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
                        assert_eq!(row, Some(CredState::Revoked));
                    }
                }
                trace(machine.history(), &gate)
            }
        };
        println!("{victim:?} / {loss:?}: {trace:?}");
        trace
    })
}

#[test]
fn an_ambiguous_freeze_that_did_not_apply_is_settled_by_read_back_and_retried() {
    assert_eq!(lose_an_ack(Victim::Freeze, Loss::NotApplied), RETRIED);
}

#[test]
fn an_ambiguous_freeze_that_applied_is_settled_by_read_back_as_ours() {
    assert_eq!(
        lose_an_ack(Victim::Freeze, Loss::AppliedAckLost),
        RECOGNISED
    );
}

#[test]
fn an_ambiguous_reopen_is_settled_by_its_successor_coordinates() {
    assert_eq!(lose_an_ack(Victim::Reopen, Loss::NotApplied), RETRIED);
    assert_eq!(
        lose_an_ack(Victim::Reopen, Loss::AppliedAckLost),
        RECOGNISED
    );
}

#[test]
fn an_ambiguous_serve_mint_touch_fails_closed() {
    // Fails closed either way: one ambiguous touch, never retried, the row revoked.
    assert_eq!(
        lose_an_ack(Victim::ServeMintTouch, Loss::NotApplied),
        RECOGNISED
    );
    assert_eq!(
        lose_an_ack(Victim::ServeMintTouch, Loss::AppliedAckLost),
        RECOGNISED
    );
}

#[test]
fn a_server_crash_right_after_a_write_went_out_never_leaves_an_unsettled_gate() {
    // Whether the ack escaped before the kill is a race; both paths are checked inside.
    lose_an_ack(Victim::Freeze, Loss::CrashAfterFlush);
    lose_an_ack(Victim::Reopen, Loss::CrashAfterFlush);
}

// ---- R3: registration while the cluster loses a node -----------------------------------------

const OWNER: &str = "u_cccccccccccccccccccccccccc";
const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";

/// Publishes the fixture surface (`ping`, governed: guarded; `pong`) and returns a spec for the
/// fixture instance naming it.
async fn publish_surface(world: &mut NatsWorld<'_>) -> ServiceSpec {
    let command = |name: &str, traits: &[&str]| {
        json!({
            "name": name, "class": "ephemeral", "targeted": false,
            "capability": format!("x.{name}"), "inputDigest": VOID, "outputDigest": VOID,
            "traits": traits,
        })
    };
    let doc = json!({
        "urn": "com.acme.ping", "revision": 1, "attributes": [], "events": [],
        "commands": [command("ping", &["ai.cotal.guarded"]), command("pong", &[])],
    });
    let closure = run(
        world,
        Proc(move |cx: &mut Ctx<'_>| publish_cluster(cx, &doc)),
    )
    .await
    .unwrap();
    let spec = json!({
        "endpoint": "throwaway", "owner": OWNER, "clusterDigests": [closure.to_prefixed()],
        "protocol": {"v": 1},
    });
    ServiceSpec::from_value(spec, &EndpointName::parse("throwaway").unwrap()).unwrap()
}

fn registrar(space: &SpaceName, spec: &ServiceSpec, op_id: OpId) -> RegisterInstance {
    let owner = OwnerToken::parse(OWNER).unwrap();
    RegisterInstance {
        space: space.clone(),
        spec: spec.clone(),
        instance: InstanceId::parse(IID).unwrap(),
        registrant: owner.clone(),
        authority: Arc::new(SelfAuthority {
            name: EndpointName::parse("throwaway").unwrap(),
            owner,
        }),
        op_id,
        evict_max: EVICT_PRINCIPALS_MAX,
    }
}

/// The node that leads `stream`, by its server name.
async fn stream_leader(space: &Space, cluster: &NatsCluster, stream: &str) -> Option<usize> {
    let js = cotal_io_nats::async_nats::jetstream::new(space.client().clone());
    let info = js.get_stream(stream).await.ok()?.cached_info().clone();
    let leader = info.cluster?.leader?;
    (0..cluster.size()).find(|&i| cluster.node(i).is_ok_and(|n| n.name() == leader))
}

/// The gate is frozen by `op_id`, or open at the coordinates `before` had, or open at a
/// completed re-registration: epoch + 1 and the spec key's revision. Anything else is an
/// inconsistent coordinate. A read that fails during an election checks nothing.
async fn consistent(
    world: &mut NatsWorld<'_>,
    gate: &GateRef,
    before: &EndpointGate,
    op_id: &OpId,
) -> Option<bool> {
    let spec_key = keys::svc_spec(&gate.endpoint, &gate.instance);
    let now = {
        let gate = gate.clone();
        run(world, Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &gate)))
            .await
            .ok()??
    };
    let spec = world
        .space
        .execute(&KvRequest::Get {
            store: Store::Records,
            key: spec_key,
        })
        .await;
    let KvOutcome::Entry(Some(spec)) = spec else {
        return None;
    };
    let g = &now.gate;
    Some(match g.state() {
        GateState::Frozen => g.op().is_some_and(|o| o.op_id() == op_id),
        GateState::Open => {
            let kept = g.process_epoch() == before.process_epoch()
                && g.registration_revision() == before.registration_revision();
            let advanced = g.process_epoch().0 == before.process_epoch().0 + 1
                && g.registration_revision().0 == spec.revision.0
                && g.generation() > before.generation();
            kept || advanced
        }
        _ => false,
    })
}

/// Re-registers with `op_id` until it completes (a retry with the same op id resumes its own
/// freeze), checking the gate's consistency after every failed attempt.
async fn reregister(
    world: &mut NatsWorld<'_>,
    gate: &GateRef,
    registrar: RegisterInstance,
) -> Registered {
    let before = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let gate = gate.clone();
            if let Ok(Some(g)) =
                run(world, Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &gate))).await
            {
                break g.gate;
            }
            assert!(Instant::now() < deadline, "the gate stayed unreadable");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        match world.run(&mut Replay::new(registrar.clone())).await {
            Ok(done) => {
                assert_eq!(
                    consistent(world, gate, &before, &registrar.op_id).await,
                    Some(true)
                );
                assert_eq!(done.process_epoch.0, before.process_epoch().0 + 1);
                return done;
            }
            Err(e) => {
                println!(
                    "r3: registration attempt failed ({}): {}",
                    e.code, e.message
                );
                assert_ne!(
                    consistent(world, gate, &before, &registrar.op_id).await,
                    Some(false),
                    "a failed registration left an inconsistent gate"
                );
                assert!(
                    Instant::now() < deadline,
                    "the registration never completed: {e}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

#[test]
fn r3_registration_completes_or_stays_frozen_when_a_node_and_the_stream_leader_die() {
    let mut cluster = NatsCluster::start(3).unwrap();
    runtime().block_on(async {
        let name = fresh_space();
        let r3 = SpaceOptions {
            replicas: Replicas::Three,
            request_timeout: Duration::from_secs(2),
            create_missing: true,
            ..SpaceOptions::default()
        };
        let space = Space::connect(&cluster.urls().join(","), name.clone(), r3)
            .await
            .unwrap();
        let gate = gate_in(&name);
        let mut world = NatsWorld::new(&space);
        world.set_evictor(Box::new(|holders| {
            let verdicts = vec![true; holders.len()];
            Box::pin(async move { verdicts })
        }));
        let spec = publish_surface(&mut world).await;
        provision(&mut world, &gate).await;
        let before = space.round_trips();
        let first = world
            .run(&mut Replay::new(registrar(&name, &spec, op(1))))
            .await
            .unwrap();
        println!(
            "r3: a first registration took {} KV round trips",
            space.round_trips() - before
        );
        assert_eq!((first.generation.0, first.process_epoch.0), (1, 0));

        // Kill the auth stream's leader, then re-register.
        let auth = space.layout(Store::Auth).stream.clone();
        let leader = stream_leader(&space, &cluster, &auth).await.unwrap();
        cluster.kill_node(leader).unwrap();
        let second = reregister(&mut world, &gate, registrar(&name, &spec, op(2))).await;
        assert!(second.registration_revision > first.registration_revision);

        // Bring it back, kill a node that leads nothing we read, and re-register again.
        cluster.restart_node(leader).unwrap();
        cluster.wait_formed().unwrap();
        let now_leader = stream_leader(&space, &cluster, &auth).await;
        let follower = (0..3).find(|&i| Some(i) != now_leader).unwrap();
        cluster.kill_node(follower).unwrap();
        let third = reregister(&mut world, &gate, registrar(&name, &spec, op(3))).await;
        assert_eq!(third.process_epoch.0, 2);
    });
}

// ---- Throughput (reported, never asserted) ---------------------------------------------------

/// Registrations per second on one loopback server (R1, `sync_interval: always`), reported as a
/// ratio against raw CAS updates timed in the same process: a registration is a fixed number
/// of sequential round trips, so the ratio says how close the ceremony runs to the KV's own
/// latency. Each registration is a re-registration with a fresh op id (the steady state).
#[test]
fn registrations_per_second_against_raw_cas_round_trips() {
    const REGISTRATIONS: u64 = 20;
    const CAS_SAMPLES: u64 = 200;
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let name = fresh_space();
        let space = Space::connect(&server.url(), name.clone(), options(Duration::from_secs(5)))
            .await
            .unwrap();
        let gate = gate_in(&name);
        let mut world = NatsWorld::new(&space);
        let spec = publish_surface(&mut world).await;
        provision(&mut world, &gate).await;
        world
            .run(&mut Replay::new(registrar(&name, &spec, op(1))))
            .await
            .unwrap();

        let (trips_before, started) = (space.round_trips(), Instant::now());
        for n in 0..REGISTRATIONS {
            let id = OpId::mint([u8::try_from(n % 200).unwrap_or(0) + 40; 20]);
            world
                .run(&mut Replay::new(registrar(&name, &spec, id)))
                .await
                .unwrap();
        }
        let per_registration = started.elapsed().as_secs_f64() / REGISTRATIONS as f64;
        let trips = (space.round_trips() - trips_before) / REGISTRATIONS;

        let key = "bench.cas".to_string();
        let mut revision = match space
            .execute(&KvRequest::Create {
                store: Store::Records,
                key: key.clone(),
                value: b"0".to_vec(),
            })
            .await
        {
            KvOutcome::Written(r) => r,
            other => panic!("seeding the CAS key: {other:?}"),
        };
        let started = Instant::now();
        for _ in 0..CAS_SAMPLES {
            revision = match space
                .execute(&KvRequest::Update {
                    store: Store::Records,
                    key: key.clone(),
                    value: b"1".to_vec(),
                    expected: revision,
                })
                .await
            {
                KvOutcome::Written(r) => r,
                other => panic!("CAS: {other:?}"),
            };
        }
        let per_cas = started.elapsed().as_secs_f64() / CAS_SAMPLES as f64;
        println!(
            "registrations: {:.1}/s ({trips} KV round trips each, {:.2} ms); raw CAS {:.0}/s; one \
             registration costs {:.1} raw CAS round trips",
            1.0 / per_registration,
            per_registration * 1e3,
            1.0 / per_cas,
            per_registration / per_cas
        );
        assert!(trips > 0);
    });
}
