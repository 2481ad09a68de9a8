//! Registrations per second on a real operator-mode nats-server, beside their floor measured in
//! the same run (issue 13): the same KV request sequence replayed raw, with no logic.
//!
//! **What is measured.** A registration is what `cotal-authd up` runs to register the plane's
//! own `auth` instance (`daemon/src/plane/register.rs`): `PrepareSelfAuthorized` (the contract
//! artifacts published create-only, the gate observed), `RegisterServing` (the whole
//! `RegisterInstance` ceremony — observe, freeze, authorize under the freeze, enumerate and
//! revoke the credential family, publish the spec, promote, reopen at the next epoch — then the
//! serve grant and the READY status) and `confirm_registration`, each a `Replay` machine on a
//! `NatsWorld` over a connection with exactly the registration connection's grants
//! (`plane_grants::auth_registration`). Every iteration re-registers the same instance, as every
//! restart of `up` does. Starting a whole daemon per registration would measure process start,
//! trust-root loading and six connection handshakes instead; the state-dir records `up` writes
//! around the ceremony (the op id, the high-water marks) are file I/O and not part of it.
//!
//! **The floor.** Each registration's history (every effect with its observation, reads
//! included) is replayed raw on a mirror space of the same server that has received exactly
//! the same writes (`support/replay.rs`), over a connection with the same grants on the mirror,
//! right after the registration it mirrors, so both see the same server state and drift. The
//! ratio is registrations/s over replays/s: the share of the raw I/O rate the machines keep
//! (goal ≥ 0.9).
//!
//! Run with `cargo bench -p cotal-tests --bench registration` (`REGISTRATION_N` sets the count,
//! default 200, after 10 unmeasured). Needs the pinned nats-server (`scripts/nats-server.sh`).

#[path = "support/client.rs"]
mod bench_client;
#[path = "support/replay.rs"]
mod replay;

use std::time::{Duration, Instant};

use bench_client::{client, fail};
use cotal_core::host::{auth_instance, confirm_registration, PrepareSelfAuthorized};
use cotal_core::jwt::UserNats;
use cotal_core::kv::Store;
use cotal_core::machine::script;
use cotal_core::names::{InstanceId, OpId, SpaceName};
use cotal_core::plane_grants;
use cotal_core::serving::RegisterServing;
use cotal_core::EpError;
use cotal_io_nats::{AuthorityClient, NatsWorld, Space, SpaceOptions, StoreSet};
use cotal_tests::nats::operator::OperatorServer;
use cotal_tests::nats::wall_clock;
use nkeys::KeyPair;
use replay::{run_recorded, History, Raw};

const WARMUP: usize = 10;
const INSTANCE: &str = "benchbenchbenchbenchbenchb";
/// The stores the registration connection binds, as `up` binds them.
const STORES: [Store; 3] = [Store::Auth, Store::Records, Store::Contracts];

/// The registration connection of `space`: exactly `up`'s grants for the instance.
async fn registration_client(
    live: &OperatorServer,
    space: &SpaceName,
) -> Result<AuthorityClient, String> {
    // The stores exist first, as the mint writer's boot ensure makes them before `up`
    // registers.
    let ensure = SpaceOptions {
        stores: StoreSet::ALL,
        ..SpaceOptions::default()
    };
    let ensure = client(
        live,
        space,
        "bench-ensure",
        |_| Ok(UserNats::default()),
        ensure,
    )
    .await?;
    ensure.close().await.map_err(|e| e.message)?;
    let (grant_space, instance) = (space.clone(), InstanceId::parse(INSTANCE).map_err(fail)?);
    client(
        live,
        space,
        "bench-registration",
        move |conn| plane_grants::auth_registration(&grant_space, conn, &instance).map(Into::into),
        SpaceOptions {
            create_missing: false,
            stores: StoreSet::of(&STORES),
            ..SpaceOptions::default()
        },
    )
    .await
}

/// One registration as `up` runs it; its whole history is appended to `log`.
async fn register(
    bound: &Space,
    serve_key: &str,
    n: usize,
    log: &mut History,
) -> Result<(), EpError> {
    let mut op = [0u8; 20];
    op[..8].copy_from_slice(&(n as u64).to_be_bytes());
    let ceremony = auth_instance(
        bound.space(),
        &InstanceId::parse(INSTANCE)?,
        serve_key,
        OpId::mint(op),
    )?;
    run_recorded(
        &mut NatsWorld::new(bound),
        PrepareSelfAuthorized(&ceremony),
        log,
    )
    .await?;
    let register = RegisterServing {
        register: ceremony.registration()?,
        status: serde_json::Map::new(),
    };
    let serving = run_recorded(&mut NatsWorld::new(bound), register, log).await?;
    let (gate, registered) = (ceremony.gate.clone(), serving.registered);
    run_recorded(
        &mut NatsWorld::new(bound),
        script(|cx| confirm_registration(cx, &gate, &registered)),
        log,
    )
    .await
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// Latencies → (p50, p99, per second over their sum).
fn summary(mut took: Vec<Duration>) -> (Duration, Duration, f64) {
    took.sort();
    let total: Duration = took.iter().sum();
    (
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took.len() as f64 / total.as_secs_f64().max(1e-9),
    )
}

fn main() -> Result<(), String> {
    let n: usize = std::env::var("REGISTRATION_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(fail)?;
    runtime.block_on(bench(n))
}

async fn bench(n: usize) -> Result<(), String> {
    let live = OperatorServer::start(wall_clock()).map_err(fail)?;
    let measured = registration_client(&live, &SpaceName::parse("rega").map_err(fail)?).await?;
    let mirror = registration_client(&live, &SpaceName::parse("regb").map_err(fail)?).await?;
    let bound = measured.space().map_err(|e| e.message)?;
    let mirrored = mirror.space().map_err(|e| e.message)?;
    let mut raw = Raw::bind(&mirrored, &STORES).await?;
    let serve_key = KeyPair::new_user().public_key();

    let (mut machine, mut floor) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut trips, mut effects) = (0, 0);
    // The first registration provisions the gate; it and the warm-up are not measured, but
    // the mirror replays them too, so it stays in the measured space's state.
    for i in 0..=n + WARMUP {
        let mut log = History::new();
        let (before, raw_before) = (bound.round_trips(), raw.round_trips());
        let start = Instant::now();
        register(&bound, &serve_key, i, &mut log)
            .await
            .map_err(|e| format!("registration {i} failed: {e}"))?;
        let took = start.elapsed();
        let start = Instant::now();
        raw.replay(&log).await?;
        let raw_took = start.elapsed();
        let raw_trips = raw.round_trips() - raw_before;
        trips = bound.round_trips() - before;
        if trips != raw_trips {
            return Err(format!(
                "registration {i}: the replay made {raw_trips} round trips where the \
                 registration made {trips}; the floor is not the same request sequence"
            ));
        }
        effects = log.len();
        if i > WARMUP {
            machine.push(took);
            floor.push(raw_took);
        }
    }
    let (m50, m99, rate) = summary(machine);
    let (f50, f99, floor_rate) = summary(floor);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ratio = rate / floor_rate;
    println!(
        "registration as `up` runs it (prepare, register + serve grant + READY, confirm), {n} \
         sequential re-registrations after {WARMUP} unmeasured, {effects} effects and {trips} \
         KV round trips each (operator-mode nats-server, the registration connection's grants)"
    );
    println!("| figure | per second | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    println!(
        "| registration | {rate:.0} | {:.2} | {:.2} |",
        ms(m50),
        ms(m99)
    );
    println!(
        "| floor: its recorded request sequence replayed raw on a mirror space | {floor_rate:.0} \
         | {:.2} | {:.2} |",
        ms(f50),
        ms(f99)
    );
    println!("ratio registrations/s over replays/s: {ratio:.2} (goal >= 0.9)");
    println!(
        "BENCH\tregistrations/s (p50 {:.2} ms, p99 {:.2} ms)\t{rate:.0}\t{floor_rate:.0}\t\
         {ratio:.2}\t>= 0.9 of the raw replay",
        ms(m50),
        ms(m99)
    );
    measured.close().await.map_err(|e| e.message)?;
    mirror.close().await.map_err(|e| e.message)?;
    Ok(())
}
