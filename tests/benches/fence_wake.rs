//! Fence wake latency on a real operator-mode nats-server: from the moment another writer
//! sends the write that fences a plane's gate (a freeze) to the moment the plane's fence watch
//! (`hold_fence_pushed`: the fence with its push feed, exactly as `up` runs it) resolves
//! fenced, reported as p50/p99/max beside its floor measured in the same run: a bare core
//! subscription on the same key receiving the same write. Never a threshold.
//!
//! Run with `cargo bench -p cotal-tests --bench fence_wake` (`FENCE_WAKES` sets the count,
//! default 300). The `BENCH` line is the summary `scripts/bench.sh` collects.

#[path = "support/client.rs"]
mod bench_client;

use std::time::{Duration, Instant};

use bench_client::{client, fail};
use cotal_core::gate::{Coordinates, EndpointGate, GateOp, Generation, ProcessEpoch};
use cotal_core::host::AwaitHostFence;
use cotal_core::issuance::GateRef;
use cotal_core::jwt::UserNats;
use cotal_core::kv::{KvOutcome, KvRequest, Revision, Store};
use cotal_core::names::{EndpointName, InstanceId, OpId, Principal, SpaceName};
use cotal_core::plane_grants::auth_reader_watching;
use cotal_io_nats::host::{hold_fence_pushed, run_fence_pushed};
use cotal_io_nats::{AuthorityClient, SpaceOptions, StoreSet};
use cotal_tests::nats::operator::OperatorServer;
use cotal_tests::nats::wall_clock;
use futures::StreamExt;

fn percentiles(mut samples: Vec<Duration>) -> [Duration; 3] {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).copied().unwrap_or_default()
    };
    [
        at(0.5),
        at(0.99),
        samples.last().copied().unwrap_or_default(),
    ]
}

/// Whose fence wait is measured.
#[derive(Clone, Copy)]
enum Watcher {
    /// The plane's own fence watch, as `up` runs it.
    Plane,
    /// A host incarnation's `await_host_fence`, as the hosted handle runs it.
    Host,
}

impl Watcher {
    fn name(self) -> &'static str {
        match self {
            Watcher::Plane => "fence",
            Watcher::Host => "host fence",
        }
    }
}

fn main() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(fail)?;
    runtime.block_on(bench())
}

async fn bench() -> Result<(), String> {
    let wakes: usize = std::env::var("FENCE_WAKES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let live = OperatorServer::start(wall_clock()).map_err(fail)?;
    let space = SpaceName::parse("bench").map_err(fail)?;
    let gate = GateRef::new(
        space.clone(),
        EndpointName::parse("auth").map_err(fail)?,
        InstanceId::parse("benchbenchbenchbenchbenchb").map_err(fail)?,
    );
    // The other writer: unrestricted, on its own connection (a successor, a barrier, a tool).
    let stores = |create_missing| SpaceOptions {
        create_missing,
        stores: StoreSet::of(&[Store::Auth, Store::Records]),
        ..SpaceOptions::default()
    };
    let bench = SpaceName::parse("bench").map_err(fail)?;
    let open = |_: &_| Ok(UserNats::default());
    let writer = client(&live, &bench, "bench-writer", open, stores(true)).await?;
    let watched = gate.clone();
    let reader = client(
        &live,
        &bench,
        "bench-reader",
        |conn| auth_reader_watching(&space, conn, &watched).map(Into::into),
        stores(false),
    )
    .await?;
    let floor_client = writer.space().map_err(|e| e.message)?.client().clone();
    let subject = format!("$KV.cotal_auth_bench.{}", gate.key());
    let mut floor = floor_client.subscribe(subject).await.map_err(fail)?;
    floor_client.flush().await.map_err(fail)?;

    let principal = Principal::parse("local.bench").map_err(fail)?;
    let mut row = EndpointGate::provisioned(principal).map_err(|e| e.message)?;
    let mut revision = put(&writer, &gate, &row, None).await?;
    floor.next().await.ok_or("the floor subscription ended")?;
    for watcher in [Watcher::Plane, Watcher::Host] {
        let (mut fence_wakes, mut floor_wakes) = (Vec::new(), Vec::new());
        for n in 0..wakes {
            let epoch = row.process_epoch();
            let fence = AwaitHostFence::new(gate.clone(), epoch).map_err(|e| e.message)?;
            let op = OpId::mint([u8::try_from(n % 250).unwrap_or(0); 20]);
            let frozen = row
                .frozen(GateOp::registration(op.clone()))
                .map_err(|e| e.message)?;
            let watch = async {
                match watcher {
                    Watcher::Plane => hold_fence_pushed(&reader, fence, Duration::from_secs(30))
                        .await
                        .map(|_| Instant::now()),
                    Watcher::Host => run_fence_pushed(&reader, fence)
                        .await
                        .map(|_| Instant::now()),
                }
            };
            let write = async {
                // Let the watch arm (its first read) before the fencing write goes out.
                tokio::time::sleep(Duration::from_millis(5)).await;
                let sent = Instant::now();
                let landed = put(&writer, &gate, &frozen, Some(revision)).await;
                let heard = floor.next().await.map(|_| Instant::now());
                (sent, landed, heard)
            };
            let (fenced, (sent, landed, heard)) = tokio::join!(watch, write);
            let fenced = fenced.map_err(|e| e.message)?;
            revision = landed?;
            let heard = heard.ok_or("the floor subscription ended")?;
            fence_wakes.push(fenced.duration_since(sent));
            floor_wakes.push(heard.duration_since(sent));
            // Reopen at the next epoch for the next round (the floor hears it; drain it).
            let next = Coordinates {
                generation: Generation(row.generation().0 + 1),
                process_epoch: ProcessEpoch(epoch.0 + 1),
                registration_revision: row.registration_revision(),
                name_authority_revision: row.name_authority_revision(),
            };
            row = frozen.reopened(&op, next).map_err(|e| e.message)?;
            revision = put(&writer, &gate, &row, Some(revision)).await?;
            floor.next().await.ok_or("the floor subscription ended")?;
        }
        let [f50, f99, fmax] = percentiles(fence_wakes);
        let [b50, b99, bmax] = percentiles(floor_wakes);
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
        println!(
            "{} wake on another writer's freeze, {wakes} wakes (send -> fenced):",
            watcher.name()
        );
        println!("  fence watch (push + leader read): p50 {f50:?}  p99 {f99:?}  max {fmax:?}");
        println!("  floor (bare subscription):        p50 {b50:?}  p99 {b99:?}  max {bmax:?}");
        println!(
            "  ratio fence/floor: p50 {:.2}  p99 {:.2}  (goal: p99 <= 5 ms; before the push the \
             poll alone took up to 250 ms)",
            ratio(f50, b50),
            ratio(f99, b99)
        );
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "BENCH\t{} wake p50 / p99 / max (ms)\t{:.2} / {:.2} / {:.2}\t{:.2} / {:.2} / \
             {:.2}\t{:.2} / {:.2}\tp99 <= 5 ms",
            watcher.name(),
            ms(f50),
            ms(f99),
            ms(fmax),
            ms(b50),
            ms(b99),
            ms(bmax),
            ratio(b50, f50),
            ratio(b99, f99),
        );
    }
    reader.close().await.map_err(|e| e.message)?;
    writer.close().await.map_err(|e| e.message)?;
    Ok(())
}

/// Writes `row` at the gate (create-only when `at` is `None`, else pinned); its new revision.
async fn put(
    writer: &AuthorityClient,
    gate: &GateRef,
    row: &EndpointGate,
    at: Option<Revision>,
) -> Result<Revision, String> {
    let (store, key, value) = (Store::Auth, gate.key(), row.to_bytes());
    let request = match at {
        None => KvRequest::Create { store, key, value },
        Some(expected) => KvRequest::Update {
            store,
            key,
            value,
            expected,
        },
    };
    match writer
        .space()
        .map_err(|e| e.message)?
        .execute(&request)
        .await
    {
        KvOutcome::Written(revision) => Ok(revision),
        other => Err(format!("the gate write failed: {other:?}")),
    }
}
