//! How a gate's costs grow with its credential family, 10 to 1,000 rows per gate, on a real
//! operator-mode nats-server, each beside its floor measured in the same run (issue 13).
//!
//! For each family size N (`FAMILY_ROWS`, default `10,100,1000`), on fresh gates (at least
//! `FAMILY_GATES`, default 3, and at least `FAMILY_MIN_ROWS` rows per size in all, default
//! 3,000, so 300 gates of 10; the figures are medians over them), after each gate is
//! provisioned and registered as `up` registers the plane's own instance:
//!
//! * **mint** — N serve mints through the fence (`FinalizeServeMint`: observe, stage the row,
//!   touch the gate), each its own credential, all held by the gate's serve principal (F28:
//!   a serve credential has no other holder); the figure is the p50 of the last 10, made with
//!   the family at N−10..N rows;
//! * **barrier** — freeze → enumerate the family (the key listing plus one leader read per row)
//!   → revoke every active row → reopen (`cotal_core::barrier`), as one `Replay` machine;
//! * **renewal** — `renewStandingBundle` (`ManagerAuthority`, as the manager route runs it) on
//!   a manager gate provisioned, registered and activated as `tests/tests/nats_renewal.rs` does,
//!   renewed until its family holds N rows (each renewal releases three: serve, goalWriter,
//!   sessionLedger); the figure is the p50 of the last 10 renewals (all of them below 10);
//! * **re-registration** — the whole `RegisterServing` ceremony over the N (now revoked) rows:
//!   the enumeration again, then verified eviction of the family's holder journaled in the
//!   repair cursor, spec, promote, reopen. Eviction is answered by a stand-in that verifies
//!   every holder at once, so the figure is the authority plane's cost, not the liveness
//!   oracle's.
//!
//! The floor of each is its own recorded history replayed raw (`support/replay.rs`) on a mirror
//! space of the same server that received exactly the same writes, right after it. Linear means
//! the cost per row stays flat from 10 to 1,000 rows, and so does the machine's ratio to its
//! floor (a replay that grew quadratically in the rows would show as a falling ratio).
//!
//! Run with `cargo bench -p cotal-tests --bench family_rows`. Needs the pinned nats-server
//! (`scripts/nats-server.sh`).

#[path = "support/replay.rs"]
mod replay;
#[path = "support/client.rs"]
mod support_client;

use std::time::{Duration, Instant};

use cotal_core::barrier;
use cotal_core::gate::Coordinates;
use cotal_core::host::{auth_instance, PrepareSelfAuthorized};
use cotal_core::issuance::{observe_gate, FinalizeServeMint, GateRef, ServeCredential, ServeGrant};
use cotal_core::jwt::UserNats;
use cotal_core::machine::{script, Halt};
use cotal_core::names::{ActorToken, CredentialId, InstanceId, OpId, SourceMember, SpaceName};
use cotal_core::serving::RegisterServing;
use cotal_core::EpError;
use cotal_io_nats::{AuthorityClient, NatsWorld, Space, SpaceOptions};
use cotal_tests::nats::operator::OperatorServer;
use cotal_tests::nats::wall_clock;
use nkeys::KeyPair;
use replay::{run_recorded, History, Raw};
use sha2::{Digest as _, Sha256};
use support_client::{client, fail};

/// The mints whose latencies make the mint figure: the last ones, at the family's full size.
const TAIL: usize = 10;

/// An unrestricted connection to `space`, creating its stores.
async fn bench_client(live: &OperatorServer, space: &str) -> Result<AuthorityClient, String> {
    let name = SpaceName::parse(space).map_err(fail)?;
    let label = format!("bench-{space}");
    let open = |_: &_| Ok(UserNats::default());
    client(live, &name, &label, open, SpaceOptions::default()).await
}

/// The measured space, its mirror and the raw replayer of the mirror.
struct Bench<'s> {
    bound: &'s Space,
    raw: Raw,
    serve_key: String,
    ops: u64,
}

impl Bench<'_> {
    fn op(&mut self) -> OpId {
        self.ops += 1;
        let mut op = [0u8; 20];
        op[..8].copy_from_slice(&self.ops.to_be_bytes());
        OpId::mint(op)
    }

    /// A world whose evictions are verified at once (see the module doc).
    fn world(&self) -> NatsWorld<'_> {
        let mut world = NatsWorld::new(self.bound);
        world.set_evictor(Box::new(|holders| {
            let verdicts = vec![true; holders.len()];
            Box::pin(async move { verdicts })
        }));
        world
    }

    /// Runs `step` on the measured space, then replays its history raw on the mirror; how
    /// long each took. Both must have made the same number of round trips.
    async fn timed<T>(
        &mut self,
        step: impl AsyncFnOnce(&Self, &mut History) -> Result<T, EpError>,
    ) -> Result<(T, Duration, Duration), String> {
        let mut log = History::new();
        let (trips, raw_trips) = (self.bound.round_trips(), self.raw.round_trips());
        let start = Instant::now();
        let out = step(self, &mut log).await.map_err(|e| e.to_string())?;
        let took = start.elapsed();
        let start = Instant::now();
        self.raw.replay(&log).await?;
        let floor = start.elapsed();
        let (trips, raw_trips) = (
            self.bound.round_trips() - trips,
            self.raw.round_trips() - raw_trips,
        );
        if trips != raw_trips {
            return Err(format!(
                "the replay made {raw_trips} round trips where the machine made {trips}; the \
                 floor is not the same request sequence"
            ));
        }
        Ok((out, took, floor))
    }

    /// Registers the instance as `up` does (prepare, then the serving ceremony); its grant.
    async fn register(&mut self, instance: &InstanceId) -> Result<(ServeGrant, Dur2), String> {
        let op = self.op();
        let ceremony =
            auth_instance(self.bound.space(), instance, &self.serve_key, op).map_err(fail)?;
        let (grant, took, floor) = self
            .timed(async |b, log| {
                run_recorded(&mut b.world(), PrepareSelfAuthorized(&ceremony), log).await?;
                let register = RegisterServing {
                    register: ceremony.registration()?,
                    status: serde_json::Map::new(),
                };
                let serving = run_recorded(&mut b.world(), register, log).await?;
                Ok(serving.serve.grant)
            })
            .await?;
        Ok((grant, Dur2 { took, floor }))
    }
}

/// A measured duration and its floor's.
#[derive(Clone, Copy)]
struct Dur2 {
    took: Duration,
    floor: Duration,
}

/// One gate's figures at one family size.
struct GateRun {
    mint: Dur2,
    renewal: Dur2,
    barrier: Dur2,
    reregistration: Dur2,
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn main() -> Result<(), String> {
    let sizes: Vec<usize> = std::env::var("FAMILY_ROWS")
        .unwrap_or_else(|_| "10,100,1000".to_owned())
        .split(',')
        .map(|n| n.trim().parse().map_err(fail))
        .collect::<Result<_, _>>()?;
    let knob = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (gates, min_rows) = (knob("FAMILY_GATES", 3), knob("FAMILY_MIN_ROWS", 3000));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(fail)?;
    runtime.block_on(bench(&sizes, gates.max(1), min_rows))
}

async fn bench(sizes: &[usize], gates: usize, min_rows: usize) -> Result<(), String> {
    let live = OperatorServer::start(wall_clock()).map_err(fail)?;
    let measured = bench_client(&live, "rowsa").await?;
    let mirror = bench_client(&live, "rowsb").await?;
    let bound = measured.space().map_err(|e| e.message)?;
    let mirrored = mirror.space().map_err(|e| e.message)?;
    let raw = Raw::bind(
        &mirrored,
        &[
            cotal_core::kv::Store::Auth,
            cotal_core::kv::Store::Records,
            cotal_core::kv::Store::Contracts,
        ],
    )
    .await?;
    let mut b = Bench {
        bound: &bound,
        raw,
        serve_key: KeyPair::new_user().public_key(),
        ops: 0,
    };
    let mut results: Vec<(usize, Vec<GateRun>)> = Vec::new();
    let mut instances = 0usize;
    for &rows in sizes {
        let mut runs = Vec::new();
        // Small families are fast and noisy: at least `min_rows` rows per size in all.
        for _ in 0..gates.max(min_rows.div_ceil(rows.max(1))) {
            instances += 1;
            let instance = InstanceId::parse(&format!("famrows{instances:0>19}")).map_err(fail)?;
            runs.push(gate_run(&mut b, &instance, rows).await?);
        }
        results.push((rows, runs));
    }
    report(&results, gates, min_rows);
    measured.close().await.map_err(|e| e.message)?;
    mirror.close().await.map_err(|e| e.message)?;
    Ok(())
}

/// Provisions and registers a fresh gate, mints `rows` credentials into its family, then runs
/// the barrier and a re-registration over them.
async fn gate_run(
    b: &mut Bench<'_>,
    instance: &InstanceId,
    rows: usize,
) -> Result<GateRun, String> {
    let (grant, _) = b.register(instance).await?;
    let gate = GateRef::new(
        grant.space.clone(),
        grant.endpoint.clone(),
        grant.instance.clone(),
    );
    let (mut mints, mut mint_floors) = (Vec::new(), Vec::new());
    for k in 0..rows {
        let credential = ServeCredential {
            credential_id: CredentialId::from_sha256_hex(
                &Sha256::digest(format!("{instance}.{k}").as_bytes()).into(),
            ),
            holder_actor: ActorToken::parse(&b.serve_key).map_err(fail)?,
            source_chain: vec![SourceMember::parse("session.bench").map_err(fail)?],
            exp: 1_900_000_000,
        };
        let finalize = FinalizeServeMint {
            gate: gate.clone(),
            grant: grant.clone(),
            credential,
        };
        let ((), took, floor) = b
            .timed(async |b, log| {
                run_recorded(&mut b.world(), finalize, log)
                    .await
                    .map(|_| ())
            })
            .await?;
        if k + TAIL >= rows {
            mints.push(took);
            mint_floors.push(floor);
        }
    }
    let op = b.op();
    let (revoked, took, floor) = b
        .timed(async |b, log| {
            // Written as the ceremony's own steps are: each finished step memoized.
            let barrier = script(|cx| {
                let observed = cx.sub(|cx| observe_gate(cx, &gate))?;
                let observed = Option::as_ref(&observed)
                    .ok_or_else(|| Halt::from(EpError::internal("the bench gate is gone")))?;
                let token = cx
                    .sub(|cx| barrier::freeze(cx, &gate, &op, observed))?
                    .ok_or_else(|| Halt::from(EpError::conflict("the bench freeze lost")))?;
                let family = barrier::enumerate_family(cx, &gate)?;
                let revoked = barrier::revoke_active(cx, &family)?;
                let at = observed.gate.coordinates();
                let successor = Coordinates {
                    generation: at.generation.next()?,
                    ..at
                };
                if !barrier::reopen(cx, &gate, &op, token, successor)? {
                    return Err(EpError::conflict("the bench reopen lost").into());
                }
                Ok(revoked)
            });
            run_recorded(&mut b.world(), barrier, log).await
        })
        .await?;
    if revoked != rows {
        return Err(format!("the barrier revoked {revoked} rows of {rows}"));
    }
    let barrier = Dur2 { took, floor };
    let (_, reregistration) = b.register(instance).await?;
    let renewal = manager::renewals(b, rows, instance).await?;
    Ok(GateRun {
        mint: Dur2 {
            took: p50(mints),
            floor: p50(mint_floors),
        },
        renewal,
        barrier,
        reregistration,
    })
}

fn report(results: &[(usize, Vec<GateRun>)], gates: usize, min_rows: usize) {
    let median = |runs: &[GateRun], pick: fn(&GateRun) -> Dur2| Dur2 {
        took: p50(runs.iter().map(|r| pick(r).took).collect()),
        floor: p50(runs.iter().map(|r| pick(r).floor).collect()),
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let per_row = |d: Duration, rows: usize| d.as_secs_f64() * 1e6 / rows.max(1) as f64;
    println!(
        "credential rows per gate, medians over at least {gates} gates per size and {min_rows} \
         rows (operator-mode nats-server; floor = the same recorded requests replayed raw on a \
         mirror space)"
    );
    println!(
        "| rows | mint p50 ms | floor | renewal p50 ms | floor | barrier ms | floor | per row µs \
         | floor per row µs | re-registration ms | floor | per row µs | floor per row µs |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    type Figure = (&'static str, fn(&GateRun) -> Dur2, bool);
    let figures: [Figure; 4] = [
        ("mint", |r| r.mint, false),
        ("renewal", |r| r.renewal, false),
        ("barrier", |r| r.barrier, true),
        ("re-registration", |r| r.reregistration, true),
    ];
    let mut summary: Vec<Vec<(usize, Dur2)>> = vec![Vec::new(); figures.len()];
    for (rows, runs) in results {
        let [mint, renewal, barrier, rereg] = figures.map(|(_, pick, _)| median(runs, pick));
        println!(
            "| {rows} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.0} | {:.0} | {:.1} | \
             {:.1} | {:.0} | {:.0} |",
            ms(mint.took),
            ms(mint.floor),
            ms(renewal.took),
            ms(renewal.floor),
            ms(barrier.took),
            ms(barrier.floor),
            per_row(barrier.took, *rows),
            per_row(barrier.floor, *rows),
            ms(rereg.took),
            ms(rereg.floor),
            per_row(rereg.took, *rows),
            per_row(rereg.floor, *rows),
        );
        for (i, d) in [mint, renewal, barrier, rereg].into_iter().enumerate() {
            if let Some(s) = summary.get_mut(i) {
                s.push((*rows, d));
            }
        }
    }
    for ((name, _, scales), points) in figures.iter().zip(&summary) {
        let (Some(&(few, small)), Some(&(many, large))) = (points.first(), points.last()) else {
            continue;
        };
        // The per-row cost of a cost that scales with the rows; the cost itself for one that
        // should not (a mint or a renewal makes its rows whatever the family holds).
        let unit = |d: Duration, rows: usize| {
            if *scales {
                per_row(d, rows)
            } else {
                d.as_secs_f64() * 1e6
            }
        };
        let growth = unit(large.took, many) / unit(small.took, few);
        let floor_growth = unit(large.floor, many) / unit(small.floor, few);
        let what = if *scales { "per row" } else { "per operation" };
        println!(
            "{name} {what}: {:.0} µs at {few} rows, {:.0} µs at {many} rows (x{growth:.2}); \
             floor {:.0} -> {:.0} µs (x{floor_growth:.2}); ratio to floor {:.2} -> {:.2}",
            unit(small.took, few),
            unit(large.took, many),
            unit(small.floor, few),
            unit(large.floor, many),
            small.floor.as_secs_f64() / small.took.as_secs_f64(),
            large.floor.as_secs_f64() / large.took.as_secs_f64(),
        );
        if *scales && many > few {
            // The fixed cost of a small family hides in its per-row figure; the slope does not.
            let slope = |a: Duration, b: Duration| {
                (b.as_secs_f64() - a.as_secs_f64()) * 1e6 / (many - few) as f64
            };
            println!(
                "{name} marginal cost per added row, {few} -> {many} rows: {:.0} µs (floor {:.0} \
                 µs)",
                slope(small.took, large.took),
                slope(small.floor, large.floor),
            );
        }
        println!(
            "BENCH\t{name} {what}, {few} -> {many} rows per gate (µs)\t{:.0} -> {:.0}\t\
             {:.0} -> {:.0}\t{:.2} -> {:.2}\tlinear: ratio flat (cost x{growth:.2} from {few} \
             to {many} rows, floor's x{floor_growth:.2})",
            unit(small.took, few),
            unit(large.took, many),
            unit(small.floor, few),
            unit(large.floor, many),
            small.floor.as_secs_f64() / small.took.as_secs_f64(),
            large.floor.as_secs_f64() / large.took.as_secs_f64(),
        );
    }
}

/// The renewal figure's manager gate (the fixture of `tests/tests/nats_renewal.rs`).
mod manager {
    use std::sync::Arc;

    use cotal_core::authority::SelfAuthority;
    use cotal_core::contract::publish_cluster;
    use cotal_core::issuance::{GateRef, ProvisionGate};
    use cotal_core::machine::script;
    use cotal_core::manager::{
        registration_proof, AccountKey, AgentOnboarding, ManagerAuthorityRequest, ManagerHost,
        ProofSecret, Supervisor,
    };
    use cotal_core::names::{DerivedOwner, EndpointName, InstanceId, OwnerToken, Principal};
    use cotal_core::profiles::StandingTtl;
    use cotal_core::registration::{RegisterInstance, EVICT_PRINCIPALS_MAX};
    use cotal_core::renewal::ManagerAuthority;
    use cotal_core::service::ServiceSpec;
    use cotal_core::EpError;
    use nkeys::{KeyPair, KeyPairType};
    use serde_json::{json, Value};

    use super::{fail, p50, run_recorded, Bench, Dur2, TAIL};

    const UID: &str = "llllllllllllllllllllllllll";
    const OWNER: &str = "u_cccccccccccccccccccccccccc";
    const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";
    const T0: u64 = 1_700_000_000_000;
    /// Rows one `renewStandingBundle` releases into the family, and `activate` before it.
    const ROWS_PER_RENEWAL: usize = 3;

    fn key(kind: KeyPairType, n: u8) -> Result<KeyPair, String> {
        KeyPair::new_from_raw(kind, [n; 32]).map_err(fail)
    }

    fn parse<T>(r: Result<T, EpError>) -> Result<T, String> {
        r.map_err(|e| e.to_string())
    }

    fn document() -> Value {
        let commands: Vec<Value> = ["spawn", "status", "turn"]
            .iter()
            .map(|c| {
                json!({"name": c, "class": "ephemeral", "targeted": false,
                       "capability": format!("x.{c}"), "inputDigest": VOID, "outputDigest": VOID,
                       "traits": []})
            })
            .collect();
        json!({"urn": "ai.cotal.manager", "revision": 1, "attributes": [], "events": [],
               "commands": commands})
    }

    struct Fixture {
        host: ManagerHost,
        holder: Supervisor,
        identities: Value,
        instance: InstanceId,
    }

    impl Fixture {
        /// The request envelope of `operation` with its `extra` members.
        fn envelope(
            &self,
            b: &Bench<'_>,
            operation: &str,
            rid: &str,
            extra: &[(&str, Value)],
        ) -> Value {
            let mut raw = serde_json::Map::new();
            for (name, value) in [
                ("v", json!(1)),
                ("kind", json!("manager-service-authority")),
                ("operation", json!(operation)),
                ("space", json!(b.bound.space().as_str())),
                ("actor", json!("cli")),
                ("instanceId", json!(self.instance.as_str())),
                ("managerLifecycleUid", json!(UID)),
                ("requestId", json!(rid)),
                ("identities", self.identities.clone()),
            ] {
                raw.insert(name.to_owned(), value);
            }
            for (name, value) in extra {
                raw.insert((*name).to_owned(), value.clone());
            }
            Value::Object(raw)
        }

        fn call(&self, raw: &Value, now_ms: u64) -> Result<ManagerAuthority, String> {
            Ok(ManagerAuthority::new(
                self.host.clone(),
                self.holder.clone(),
                parse(ManagerAuthorityRequest::parse(raw))?,
                now_ms,
            ))
        }
    }

    /// Provisions, registers and activates a manager gate at `instance`'s manager twin, then
    /// renews its standing bundle until the family holds at least `rows` rows; the last
    /// renewals' p50 and their floors'.
    pub(super) async fn renewals(
        b: &mut Bench<'_>,
        rows: usize,
        instance: &InstanceId,
    ) -> Result<Dur2, String> {
        let space = b.bound.space().clone();
        let instance = parse(InstanceId::parse(&format!(
            "m{}",
            instance.as_str().get(1..).unwrap_or_default()
        )))?;
        let endpoint = parse(EndpointName::parse("manager"))?;
        let owner = parse(OwnerToken::parse(OWNER))?;
        let gate = GateRef::new(space.clone(), endpoint.clone(), instance.clone());
        let mut identities = serde_json::Map::new();
        for (n, duty) in (1..).zip([
            "supervisor",
            "executor",
            "serve",
            "goalWriter",
            "sessionLedger",
        ]) {
            let id = key(KeyPairType::User, n)?.public_key();
            identities.insert(duty.to_owned(), json!({ "id": id }));
        }
        let fixture = Fixture {
            host: ManagerHost {
                space: space.clone(),
                account: AccountKey::parse(&key(KeyPairType::Account, 40)?.public_key())
                    .ok_or("the bench account key does not parse")?,
                signer: Arc::new(key(KeyPairType::Account, 41)?),
                proof_secret: ProofSecret::new("SAAHOSTSECRETFORTHEBENCHONLY"),
                standing_ttl: StandingTtl::DEFAULT,
                agents: AgentOnboarding {
                    sentinel_creds: String::new(),
                    agent_bearer_exchange_url: String::new(),
                },
            },
            holder: Supervisor::human(parse(DerivedOwner::parse(OWNER))?, vec!["supervise".into()]),
            identities: Value::Object(identities),
            instance: instance.clone(),
        };
        let principal = parse(Principal::parse(&format!(
            "{OWNER}.manager_serve_{instance}"
        )))?;
        let op = b.op();
        let doc = document();
        b.timed(async |b, log| {
            let mut world = b.world();
            run_recorded(
                &mut world,
                ProvisionGate {
                    gate: gate.clone(),
                    principal,
                },
                log,
            )
            .await?;
            let closure =
                run_recorded(&mut world, script(|cx| publish_cluster(cx, &doc)), log).await?;
            let spec = ServiceSpec::from_value(
                json!({"endpoint": "manager", "owner": OWNER,
                       "clusterDigests": [closure.to_prefixed()], "protocol": {"v": 1}}),
                &endpoint,
            )?;
            let register = RegisterInstance {
                space: space.clone(),
                spec,
                instance: instance.clone(),
                registrant: owner.clone(),
                authority: Arc::new(SelfAuthority {
                    name: endpoint.clone(),
                    owner: owner.clone(),
                }),
                op_id: op,
                evict_max: EVICT_PRINCIPALS_MAX,
            };
            run_recorded(&mut world, register, log).await.map(|_| ())
        })
        .await?;

        // The activation proof is deterministic over the request; computed on a placeholder.
        let activate = |proof: &str| {
            fixture.envelope(
                b,
                "activate",
                "activate000000000000001",
                &[
                    ("contractArtifacts", json!([document()])),
                    ("registrationProof", json!(proof)),
                ],
            )
        };
        let placeholder = activate(&format!("sha256:{}", "0".repeat(64)));
        let proof = parse(registration_proof(
            &owner,
            &parse(ManagerAuthorityRequest::parse(&placeholder))?,
        ))?;
        let call = fixture.call(&activate(proof.as_str()), T0)?;
        let (activated, _, _) = b
            .timed(async |b, log| run_recorded(&mut b.world(), call, log).await)
            .await?;
        let proof = activated
            .next_registration_proof
            .clone()
            .ok_or("activate answered no registration proof")?;

        let account = key(KeyPairType::Account, 40)?.public_key();
        let count = rows
            .saturating_sub(ROWS_PER_RENEWAL)
            .div_ceil(ROWS_PER_RENEWAL)
            .max(1);
        let (mut took, mut floors) = (Vec::new(), Vec::new());
        for k in 0..count {
            let raw = fixture.envelope(
                b,
                "renewStandingBundle",
                &format!("standing{k:016}"),
                &[
                    ("registrationProof", json!(proof.as_str())),
                    ("accountPublicKey", json!(account)),
                    ("processEpoch", json!(0)),
                ],
            );
            let call = fixture.call(&raw, T0 + 1_000 * (k as u64 + 1))?;
            let (_, t, floor) = b
                .timed(async |b, log| run_recorded(&mut b.world(), call, log).await)
                .await?;
            if k + TAIL >= count {
                took.push(t);
                floors.push(floor);
            }
        }
        Ok(Dur2 {
            took: p50(took),
            floor: p50(floors),
        })
    }
}
