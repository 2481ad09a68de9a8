//! A remote manager's registration over the executor credential the plane issues (issue 25),
//! measured on the running daemon beside its floor in the same process against the same server
//! (never a threshold):
//!
//! * **manager registration** — what a reference manager does at every restart: `prepare` over
//!   real HTTP (`POST /manager-service-authority`), a connection with the `executor` credential
//!   it returns, and the registration ceremony over that credential alone (a participant's
//!   binding: the gate observed, the barrier — freeze, family listed with a pinned consumer,
//!   revoked, its holders evicted through the plane's `manager-service-maintenance` door over
//!   HTTP — the spec, the reopen at the next epoch, the serve grant and the READY status);
//! * **floor** — the same ceremony for the same instance run the way the plane runs its own
//!   registration: on a connection with the plane's registration-executor grants for
//!   `manager/<iid>` (shapes proven at bind, the family listed by `STREAM.INFO`) with the
//!   servers' listing and kick called in process, no HTTP, no credential issued. The two
//!   alternate restart by restart, so both see the same store.
//!
//! The ratio is manager registrations/s over floor registrations/s: what the reference's
//! registration surface (an issued credential, the door's eviction) costs over the plane doing
//! the same writes itself. The round trips of both ceremonies are printed. The plane's own
//! `auth` registration and its raw replay are `cotal-tests`'s `registration` bench.
//!
//! Run with `cargo bench -p cotal-authd --bench manager_registration` (`MANAGER_REG_N` sets
//! the count, default 40, at most 100, after 5 unmeasured). Needs the pinned nats-server
//! (`scripts/nats-server.sh`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::manager::{manager_gate, participant, space_name, Flow};
use cotal_core::kv::Store;
use cotal_core::plane_grants;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{AuthorityClient, DataAccountSigner, SpaceOptions, StoreSet};

const WARMUP: usize = 5;

/// Latencies → (p50, p99, per second over their sum).
fn summary(mut took: Vec<Duration>) -> (Duration, Duration, f64) {
    took.sort();
    let at = |q: f64| {
        let i = ((took.len() as f64 - 1.0) * q).round() as usize;
        took.get(i).copied().unwrap_or_default()
    };
    let total: Duration = took.iter().sum();
    (at(0.5), at(0.99), took.len() as f64 / total.as_secs_f64())
}

fn main() {
    let n: usize = std::env::var("MANAGER_REG_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
        .min(100);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(bench(n));
}

async fn bench(n: usize) {
    let f = Flow::with_up(&[], &[("RUST_LOG", "error")]).await;
    let (_supervisor, closure) = f.prepared_and_registered().await;
    // An activation gives the family live holders, so the first restarts evict through the
    // door; every later one lists, revokes nothing new and verifies the holders gone.
    f.granted(&f.activate_request("activate000000000000001"));

    let gate = manager_gate();
    let trusted = {
        let (space, endpoint, instance) =
            (space_name(), gate.endpoint.clone(), gate.instance.clone());
        AuthorityClient::open(
            &f.server,
            "bench-manager-registration-floor".to_owned(),
            DataAccountSigner::of(&f.material),
            move |conn| {
                plane_grants::gate_reconcile(&space, conn, &endpoint, &instance).map(Into::into)
            },
            Duration::from_secs(600),
            space_name(),
            SpaceOptions {
                create_missing: false,
                replicas_as_found: true,
                stores: StoreSet::of(&[Store::Auth, Store::Records, Store::Contracts]),
                ..SpaceOptions::default()
            },
        )
        .await
        .unwrap()
    };
    let floor_space = trusted.space().unwrap();
    let oracle = Arc::new(Oracle::new(
        &f.server,
        f.material.system_user().creds(),
        f.material.data_account(),
        "bench-manager-oracle".to_owned(),
    ));

    let (mut manager, mut floor) = (Vec::new(), Vec::new());
    let (mut manager_trips, mut floor_trips) = (0, 0);
    for i in 0..n + WARMUP {
        let op = u8::try_from(10 + 2 * i).unwrap();
        let start = Instant::now();
        let executor = f.executor(&format!("benchprepare{i:012}")).await;
        let bound = participant(&executor).await.unwrap();
        f.register_over(&bound, f.maintenance_evictor(), &closure, op)
            .await
            .unwrap_or_else(|e| panic!("manager registration {i}: {e}"));
        let took = start.elapsed();
        manager_trips = bound.round_trips();
        executor.client.drain().await.unwrap();

        let before = floor_space.round_trips();
        let start = Instant::now();
        f.register_over(&floor_space, oracle.evictor(), &closure, op + 1)
            .await
            .unwrap_or_else(|e| panic!("floor registration {i}: {e}"));
        let floor_took = start.elapsed();
        floor_trips = floor_space.round_trips() - before;
        if i >= WARMUP {
            manager.push(took);
            floor.push(floor_took);
        }
    }
    trusted.close().await.unwrap();

    let (m50, m99, rate) = summary(manager);
    let (f50, f99, floor_rate) = summary(floor);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ratio = rate / floor_rate;
    println!(
        "remote manager registration, {n} sequential restarts after {WARMUP} unmeasured, each \
         alternating with its floor (operator-mode nats-server, the space's own broker-config)"
    );
    println!("| figure | per second | p50 ms | p99 ms | KV round trips |");
    println!("|---|---|---|---|---|");
    println!(
        "| manager: prepare over HTTP + the ceremony over the issued executor, eviction through \
         the door | {rate:.1} | {:.2} | {:.2} | {manager_trips} |",
        ms(m50),
        ms(m99)
    );
    println!(
        "| floor: the same ceremony on the plane's registration-executor grants, eviction in \
         process | {floor_rate:.1} | {:.2} | {:.2} | {floor_trips} |",
        ms(f50),
        ms(f99)
    );
    println!("ratio manager registrations/s over floor registrations/s: {ratio:.2}");
    println!(
        "BENCH\tmanager registrations/s over the executor (p50 {:.2} ms, p99 {:.2} ms, \
         {manager_trips} KV round trips vs {floor_trips})\t{rate:.1}\t{floor_rate:.1}\t\
         {ratio:.2}\tthe reference surface's cost over the plane's own registration",
        ms(m50),
        ms(m99)
    );
}
