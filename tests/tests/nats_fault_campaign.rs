//! The fault campaign (issue 13, part 4): a 3-node nats-server cluster whose nodes are separate
//! hosts in network namespaces ([`NetnsCluster`]), an R3 space on it, and clients running the
//! production machines through the production NATS adapter while a seeded schedule partitions
//! the network (both ways, one way, a node isolated), `kill -9`s a node or the auth stream's
//! leader, SIGSTOPs a node and restarts one:
//!
//! * endpoint workers, two per instance: each registers its instance (the whole ceremony,
//!   fencing the other worker's epoch), then renews its serve credential by minting through
//!   the gate until it is fenced, and registers again;
//! * lifecycle clients: activate an actor, exchange for its root credential, connect-check it,
//!   and now and then have the operator revoke it and check again.
//!
//! A capture on its own connection reads every message of the auth store's stream as it lands;
//! after the run a leader read takes each acknowledged revision back. The independent checker
//! ([`cotal_tests::fault::checker`], plain JSON, none of the plane's code) then judges the run.
//!
//! The default is one short history, for CI. A campaign:
//! `COTAL_FAULT_HISTORIES=20 COTAL_FAULT_SECONDS=60 cargo test -p cotal-tests --test
//! nats_fault_campaign -- --nocapture` (`COTAL_FAULT_SEED` picks the first seed;
//! `COTAL_FAULT_DUMP=<file>` writes the last history's captured stream and events there).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "campaign/capture.rs"]
mod capture;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cotal_core::authority::SelfAuthority;
use cotal_core::contract::publish_cluster;
use cotal_core::gate::NameAuthorityRevision;
use cotal_core::issuance::{
    FinalizeServeMint, GateRef, ProvisionGate, ServeCredential, ServeGrant,
};
use cotal_core::ledger::Revocation;
use cotal_core::lifecycle::{
    ActivateLifecycle, AuthorizeConnectCredential, EnsureRootCredential, RevokeCredential,
    RootEntropy,
};
use cotal_core::machine::{Ctx, Halt, Replay, Script};
use cotal_core::names::{
    keys, ActorToken, CredentialId, EndpointName, InstanceId, LifecycleUid, ManagerInstance, OpId,
    OwnerToken, Principal, SourceMember, SpaceName,
};
use cotal_core::registration::{RegisterInstance, Registered, EVICT_PRINCIPALS_MAX};
use cotal_core::service::ServiceSpec;
use cotal_core::{EpError, ErrorCode};
use cotal_io_nats::async_nats::{self, Client};
use cotal_io_nats::{NatsWorld, Replicas, Space, SpaceOptions};
use cotal_tests::fault::checker::{self, Report};
use cotal_tests::fault::history::{Event, History};
use cotal_tests::fault::inject;
use cotal_tests::fault::schedule::{Fault, Plan};
use cotal_tests::nats::{NetnsCluster, ServerOptions};
use cotal_tests::sim::SplitMix64;
use serde_json::json;

const OWNER: &str = "u_cccccccccccccccccccccccccc";
const ENDPOINT: &str = "throwaway";
const INSTANCES: [&str; 2] = ["iiiiiiiiiiiiiiiiiiiiiiiiii", "jjjjjjjjjjjjjjjjjjjjjjjjjj"];
const WORKERS_PER_INSTANCE: u32 = 2;
const LIFECYCLE_CLIENTS: u32 = 2;
const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";

/// Each JetStream request's bound: past it a write is ambiguous and the machine settles it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// One operation that has not ended by then is counted as a stall (a liveness figure, not a
/// safety violation) and abandoned.
const OP_TIMEOUT: Duration = Duration::from_secs(20);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A script from a closure, for composing core procedures.
struct Proc<F>(F);

impl<T, F: Fn(&mut Ctx<'_>) -> Result<T, Halt>> Script for Proc<F> {
    type Output = T;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<T, Halt> {
        (self.0)(cx)
    }
}

/// Liveness figures of one history (never judged: faults are allowed to slow things down).
#[derive(Debug, Default)]
struct Stalls(AtomicU64);

impl Stalls {
    fn one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}

fn endpoint() -> EndpointName {
    EndpointName::parse(ENDPOINT).unwrap()
}

fn refused(history: &History, op: &'static str, e: &EpError) {
    history.record(Event::Refused {
        op,
        code: e.code.to_string(),
        message: e.message.clone(),
    });
}

fn options() -> SpaceOptions {
    SpaceOptions {
        replicas: Replicas::Three,
        request_timeout: REQUEST_TIMEOUT,
        create_missing: true,
        ..SpaceOptions::default()
    }
}

/// A client's own connection, retried while the cluster is faulted.
async fn connect(urls: &str, name: &SpaceName, deadline: Instant) -> Option<Space> {
    while Instant::now() < deadline {
        if let Ok(space) = Space::connect(urls, name.clone(), options()).await {
            return Some(space);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// Runs a setup step until it succeeds: on a faulted cluster a freshly created R3 stream can
/// take longer to elect its leader than a publish's resends on "no responders" cover, and until
/// then the step is `unavailable`.
async fn settled<T>(what: &str, mut step: impl AsyncFnMut() -> Result<T, EpError>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match step().await {
            Ok(done) => return done,
            Err(e) if e.code == ErrorCode::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Publishes the fixture surface and returns a spec naming it.
async fn publish_surface(world: &mut NatsWorld<'_>) -> ServiceSpec {
    let doc = json!({
        "urn": "com.acme.ping", "revision": 1, "attributes": [], "events": [],
        "commands": [{
            "name": "ping", "class": "ephemeral", "targeted": false, "capability": "x.ping",
            "inputDigest": VOID, "outputDigest": VOID, "traits": [],
        }],
    });
    let closure = settled("publishing the fixture surface", async || {
        let doc = doc.clone();
        world
            .run(&mut Replay::new(Proc(move |cx: &mut Ctx<'_>| {
                publish_cluster(cx, &doc)
            })))
            .await
    })
    .await;
    let spec = json!({
        "endpoint": ENDPOINT, "owner": OWNER, "clusterDigests": [closure.to_prefixed()],
        "protocol": {"v": 1},
    });
    ServiceSpec::from_value(spec, &endpoint()).unwrap()
}

fn registrar(
    name: &SpaceName,
    spec: &ServiceSpec,
    instance: &InstanceId,
    op_id: OpId,
) -> RegisterInstance {
    RegisterInstance {
        space: name.clone(),
        spec: spec.clone(),
        instance: instance.clone(),
        registrant: owner(),
        authority: Arc::new(SelfAuthority {
            name: endpoint(),
            owner: owner(),
        }),
        op_id,
        evict_max: EVICT_PRINCIPALS_MAX,
    }
}

fn grant(gate: &GateRef, registered: &Registered) -> ServeGrant {
    ServeGrant {
        space: gate.space.clone(),
        endpoint: gate.endpoint.clone(),
        instance: gate.instance.clone(),
        owner: owner(),
        epoch: registered.process_epoch,
        registration_revision: registered.registration_revision,
        name_authority_revision: NameAuthorityRevision(0),
    }
}

/// An endpoint worker: register (resuming its own op id until it completes), then renew by
/// minting until fenced, again and again until `deadline`.
#[allow(clippy::too_many_arguments)]
async fn endpoint_worker(
    urls: &str,
    name: &SpaceName,
    spec: &ServiceSpec,
    instance: &InstanceId,
    worker: u32,
    seed: u64,
    deadline: Instant,
    history: &History,
    stalls: &Stalls,
) {
    let Some(space) = connect(urls, name, deadline).await else {
        return;
    };
    let mut world = NatsWorld::new(&space);
    // The predecessor's connection is fenced by the gate, not kicked: liveness and eviction
    // are part 2 of the plane-claim issue and have their own real-server tests.
    world.set_evictor(Box::new(|holders| {
        let verdicts = vec![true; holders.len()];
        Box::pin(async move { verdicts })
    }));
    let gate = GateRef::new(name.clone(), endpoint(), instance.clone());
    let mut rng = SplitMix64::new(seed);
    'life: while Instant::now() < deadline {
        let op_id = OpId::mint(rng.entropy20());
        let registered = loop {
            if Instant::now() >= deadline {
                break 'life;
            }
            let mut machine = Replay::new(registrar(name, spec, instance, op_id.clone()));
            match tokio::time::timeout(OP_TIMEOUT, world.run(&mut machine)).await {
                Ok(Ok(done)) => break done,
                Ok(Err(e)) => refused(history, "register", &e),
                Err(_) => stalls.one(),
            }
            tokio::time::sleep(Duration::from_millis(100 + rng.below(300))).await;
        };
        history.record(Event::Registered {
            gate: gate.key(),
            worker,
            epoch: registered.process_epoch.0,
            generation: registered.generation.0,
            registration_revision: registered.registration_revision.0,
        });
        for _ in 0..2 + rng.below(10) {
            if Instant::now() >= deadline {
                break 'life;
            }
            let mut id = [0u8; 32];
            id[..20].copy_from_slice(&rng.entropy20());
            id[20..28].copy_from_slice(&rng.next_u64().to_le_bytes());
            let credential = ServeCredential {
                credential_id: CredentialId::from_sha256_hex(&id),
                holder_actor: ActorToken::parse("term").unwrap(),
                source_chain: vec![SourceMember::parse("session.abc").unwrap()],
                exp: 1_900_000_000,
            };
            let mut mint =
                FinalizeServeMint::machine(gate.clone(), grant(&gate, &registered), credential);
            match tokio::time::timeout(OP_TIMEOUT, world.run(&mut mint)).await {
                Ok(Ok(release)) => history.record(Event::Released {
                    gate: gate.key(),
                    worker,
                    row_key: release.row_key,
                    gate_revision: release.gate_revision.0,
                    epoch: registered.process_epoch.0,
                    registration_revision: registered.registration_revision.0,
                }),
                Ok(Err(e)) => {
                    refused(history, "renew", &e);
                    if e.code == ErrorCode::Expired {
                        // Fenced (or the gate is mid-barrier): this incarnation is over.
                        continue 'life;
                    }
                }
                Err(_) => stalls.one(),
            }
            tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
        }
    }
}

fn wall_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn token26(rng: &mut SplitMix64) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..26)
        .map(|_| char::from(ALPHABET[rng.index(ALPHABET.len())]))
        .collect()
}

/// A lifecycle client: for one actor after another, activate, then exchange for the root
/// credential and connect-check it; now and then the operator revokes it, a connect check
/// follows, and the client moves on to a fresh actor.
async fn lifecycle_client(
    urls: &str,
    name: &SpaceName,
    client: u32,
    seed: u64,
    deadline: Instant,
    history: &History,
    stalls: &Stalls,
) {
    let Some(space) = connect(urls, name, deadline).await else {
        return;
    };
    let mut world = NatsWorld::new(&space);
    let mut rng = SplitMix64::new(seed);
    let manager = ManagerInstance::parse("auth-service:fault").unwrap();
    let mut actors = 0u32;
    'actor: while Instant::now() < deadline {
        actors += 1;
        let actor = ActorToken::parse(&format!("agent{client}x{actors}")).unwrap();
        let uid = LifecycleUid::parse(&token26(&mut rng)).unwrap();
        let op_entropy = rng.entropy20();
        loop {
            if Instant::now() >= deadline {
                break 'actor;
            }
            let mut activate = Replay::new(ActivateLifecycle {
                owner: owner(),
                actor: actor.clone(),
                lifecycle_uid: uid.clone(),
                manager_instance: manager.clone(),
                op_entropy,
            });
            match tokio::time::timeout(OP_TIMEOUT, world.run(&mut activate)).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) => refused(history, "activate", &e),
                Err(_) => stalls.one(),
            }
            tokio::time::sleep(Duration::from_millis(100 + rng.below(300))).await;
        }
        let holder = Principal::new(owner(), actor.clone());
        loop {
            if Instant::now() >= deadline {
                break 'actor;
            }
            let mut ensure = Replay::new(EnsureRootCredential {
                owner: owner(),
                actor: actor.clone(),
                lifecycle_uid: uid.clone(),
                manager_instance: manager.clone(),
                now_ms: wall_ms(),
                entropy: RootEntropy {
                    op: rng.entropy20(),
                    credentials: [rng.entropy20(), rng.entropy20(), rng.entropy20()],
                },
                known: None,
            });
            let root = match tokio::time::timeout(OP_TIMEOUT, world.run(&mut ensure)).await {
                Ok(Ok(root)) => root,
                Ok(Err(e)) => {
                    refused(history, "exchange", &e);
                    tokio::time::sleep(Duration::from_millis(100 + rng.below(200))).await;
                    continue;
                }
                Err(_) => {
                    stalls.one();
                    continue;
                }
            };
            let row_key = keys::cred(&uid, &root.credential_id);
            history.record(Event::Exchanged {
                row_key: row_key.clone(),
            });
            let check = |started_ms| AuthorizeConnectCredential {
                holder: holder.clone(),
                lifecycle_uid: uid.clone(),
                credential_id: root.credential_id.clone(),
                now_ms: started_ms,
            };
            let started_ms = history.now_ms();
            let mut connect = Replay::new(check(wall_ms()));
            match tokio::time::timeout(OP_TIMEOUT, world.run(&mut connect)).await {
                Ok(Ok(_)) => history.record(Event::Admitted {
                    row_key: row_key.clone(),
                    started_ms,
                }),
                Ok(Err(e)) => refused(history, "connect", &e),
                Err(_) => stalls.one(),
            }
            if rng.chance(150) {
                let mut revoke = Replay::new(RevokeCredential {
                    lifecycle_uid: uid.clone(),
                    credential_id: root.credential_id.clone(),
                });
                match tokio::time::timeout(OP_TIMEOUT, world.run(&mut revoke)).await {
                    Ok(Ok(Revocation::Revoked | Revocation::AlreadyRevoked)) => {
                        history.record(Event::Revoked {
                            row_key: row_key.clone(),
                            acked_ms: history.now_ms(),
                        });
                        let started_ms = history.now_ms();
                        let mut connect = Replay::new(check(wall_ms()));
                        match tokio::time::timeout(OP_TIMEOUT, world.run(&mut connect)).await {
                            Ok(Ok(_)) => history.record(Event::Admitted {
                                row_key: row_key.clone(),
                                started_ms,
                            }),
                            Ok(Err(e)) => refused(history, "connect", &e),
                            Err(_) => stalls.one(),
                        }
                        continue 'actor;
                    }
                    Ok(Err(e)) => refused(history, "revoke", &e),
                    Err(_) => stalls.one(),
                }
            }
            tokio::time::sleep(Duration::from_millis(rng.below(80))).await;
        }
    }
}

/// The checker's own connection to the cluster, retried while a fault holds.
async fn checker_client(urls: &str) -> Client {
    let servers: Vec<&str> = urls.split(',').collect();
    loop {
        if let Ok(client) = async_nats::ConnectOptions::new()
            .name("fault-checker")
            .connect(servers.clone())
            .await
        {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What one history did and what the checker found.
struct Outcome {
    report: Report,
    faults: Vec<Fault>,
    stalls: u64,
    messages: usize,
}

fn run_history(seed: u64, seconds: u64) -> Outcome {
    let opts = ServerOptions {
        // Routes to a cut-off peer die within a few seconds instead of the default 2 minutes.
        extra_config: "ping_interval: \"1s\"\nping_max: 3\n".into(),
        ..ServerOptions::default()
    };
    let net = NetnsCluster::start_with(3, opts).unwrap();
    let urls = net.urls().join(",");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let name = SpaceName::parse(&format!("fault{seed}")).unwrap();
    rt.block_on(async move {
        let setup = Space::connect(&urls, name.clone(), options())
            .await
            .unwrap();
        let layout = setup.layout(cotal_core::kv::Store::Auth).clone();
        capture::keep_all_history(setup.client(), &layout.stream).await;
        let mut world = NatsWorld::new(&setup);
        let spec = publish_surface(&mut world).await;
        let term = Principal::parse(&format!("{OWNER}.term")).unwrap();
        for iid in INSTANCES {
            let gate = GateRef::new(name.clone(), endpoint(), InstanceId::parse(iid).unwrap());
            settled("provisioning a gate", async || {
                world
                    .run(&mut ProvisionGate::machine(gate.clone(), term.clone()))
                    .await
            })
            .await;
        }
        drop(world);

        let history = History::new();
        let stalls = Stalls::default();
        let done = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let stream = layout.stream.clone();
        let faults = Arc::new(Mutex::new(Vec::new()));
        let injector = {
            let (faults, stream) = (faults.clone(), stream.clone());
            tokio::task::spawn_blocking(move || {
                let mut net = net;
                let mut plan = Plan::new(seed, 3);
                let mut failure = None;
                while Instant::now() < deadline {
                    match inject::apply(&mut net, plan.next_step(), &stream) {
                        Ok(fault) => faults.lock().unwrap().push(fault),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                (net, failure)
            })
        };
        let instances: Vec<InstanceId> = INSTANCES
            .iter()
            .map(|i| InstanceId::parse(i).unwrap())
            .collect();
        let mut clients = Vec::new();
        let mut n = 0u32;
        for instance in &instances {
            for _ in 0..WORKERS_PER_INSTANCE {
                let seed = seed.wrapping_mul(1000).wrapping_add(u64::from(n));
                clients.push(futures::future::Either::Left(endpoint_worker(
                    &urls, &name, &spec, instance, n, seed, deadline, &history, &stalls,
                )));
                n += 1;
            }
        }
        for c in 0..LIFECYCLE_CLIENTS {
            let seed = seed.wrapping_mul(1000).wrapping_add(500 + u64::from(c));
            clients.push(futures::future::Either::Right(lifecycle_client(
                &urls, &name, c, seed, deadline, &history, &stalls,
            )));
        }
        let prefix = layout.subject_prefix.clone();
        let recorder = capture::capture(
            checker_client(&urls).await,
            stream.clone(),
            prefix.clone(),
            done.clone(),
        );
        let work = async {
            futures::future::join_all(clients).await;
            done.store(true, Ordering::Relaxed);
        };
        let (captured, ()) = tokio::join!(recorder, work);
        let (net, failure) = injector.await.unwrap();
        if let Some(failure) = failure {
            panic!("seed {seed}: {failure}");
        }
        net.cluster().wait_formed().unwrap();
        let events = history.events();
        let finals =
            capture::final_reads(checker_client(&urls).await, &stream, &prefix, &events).await;
        let report = checker::check(&captured, &finals, &events);
        // For reading a failing seed: the run's whole stream and history, one line each.
        if let Ok(path) = std::env::var("COTAL_FAULT_DUMP") {
            let mut text = String::new();
            for m in &captured {
                text.push_str(&format!(
                    "{} {:?} {} {}\n",
                    m.seq,
                    m.op,
                    m.key,
                    String::from_utf8_lossy(&m.payload)
                ));
            }
            for e in &events {
                text.push_str(&format!("{e:?}\n"));
            }
            std::fs::write(path, text).unwrap();
        }
        let faults = faults.lock().unwrap().clone();
        drop(net);
        Outcome {
            report,
            faults,
            stalls: stalls.0.load(Ordering::Relaxed),
            messages: captured.len(),
        }
    })
}

#[test]
fn fault_campaign_on_a_namespaced_r3_cluster_keeps_every_fence() {
    let histories = env_u64("COTAL_FAULT_HISTORIES", 1);
    let seconds = env_u64("COTAL_FAULT_SECONDS", 20);
    let first = env_u64("COTAL_FAULT_SEED", 1);
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    let (mut releases, mut registrations, mut admissions, mut stalls, mut messages) =
        (0, 0, 0, 0, 0);
    let mut violations = Vec::new();
    for seed in first..first + histories {
        let outcome = run_history(seed, seconds);
        for fault in &outcome.faults {
            *by_kind.entry(fault.kind()).or_default() += 1;
        }
        for (code, n) in &outcome.report.refusals {
            *refusals.entry(code.clone()).or_default() += n;
        }
        releases += outcome.report.releases;
        registrations += outcome.report.registrations;
        admissions += outcome.report.admissions;
        stalls += outcome.stalls;
        messages += outcome.messages;
        println!(
            "seed {seed}: {} faults, {} registrations, {} releases, {} admissions, {} stream \
             messages, {} stalls, {} violations",
            outcome.faults.len(),
            outcome.report.registrations,
            outcome.report.releases,
            outcome.report.admissions,
            outcome.messages,
            outcome.stalls,
            outcome.report.violations.len()
        );
        violations.extend(
            outcome
                .report
                .violations
                .into_iter()
                .map(|v| format!("seed {seed}: {v}")),
        );
    }
    println!(
        "campaign: {histories} histories of {seconds} s; faults {by_kind:?}; {registrations} \
         registrations, {releases} releases, {admissions} connect admissions, {messages} stream \
         messages checked; refusals {refusals:?}; {stalls} stalled operations"
    );
    assert!(
        registrations > 0 && releases > 0 && admissions > 0,
        "the clients made no progress at all"
    );
    assert!(
        violations.is_empty(),
        "violations:\n{}",
        violations.join("\n")
    );
}
