//! The deterministic simulator (DESIGN §6 DST): a seeded scheduler that owns one
//! [`ModelWorld`] and many concurrent actors running the core's registration-ceremony machines,
//! steps ONE machine effect at a time, injects faults, and checks invariants named after the
//! fence rules after every step (the list is in the `check` module).
//!
//! Shape of one seed:
//! * the [`Fixture`] space: one endpoint, 2–3 provisioned instances sharing its governance slot,
//!   three published surfaces; the seed picks how many instances start already registered, so
//!   most registrations in a history are re-registrations (the path that advances the epoch);
//! * actors: one registrant per instance (register → grant → READY; each run resumes the
//!   instance's last op id or takes a fresh one), two minters (serve mints with grants from
//!   earlier registrations, stale ones included, and sibling mints), a deregistrar, one
//!   reconciler per instance (with a scripted liveness oracle and a failing evictor), and a
//!   status writer replaying READY writes at granted epochs, stale ones included;
//! * planes, in one seed of eight ([`SimConfig::planes`] forces them): two planes of the space,
//!   each registering its own instance of the `auth` endpoint with the self-authorized ceremony
//!   (`SelfAuthorizedInstance` from `auth_instance`), the two instances sharing the `auth`
//!   governance head, under the daemon's crash-safe restart rule. A plane start observes its
//!   gate, applies `resumed_op` to the observation and its durable op record (resume the recorded
//!   op exactly when the gate is still frozen by it), writes the record of a fresh op before the
//!   ceremony can freeze, runs the ceremony, and clears the record once it completed; a failed
//!   ceremony exits with its record kept. The record survives the plane's crashes; each of those
//!   steps is a step boundary a crash can fall on, and besides the random crash faults a plane
//!   dies, at the seed's fault rate, right after a committed write of its ceremony (the daemon's
//!   kill-after-write hook) and right before its record write or clear: the states a restart
//!   must resume from. A plane never has two live executors of one op id (the daemon's
//!   registration lock): it restarts only after its run crashed or ended, and it is never
//!   partitioned. The other faults reach its keys too;
//! * faults chosen by the seed: crashes at any step boundary (the machine is dropped and the
//!   actor later restarts), partitions (the registrant restarts while its old machine runs on
//!   as a zombie), ambiguous writes (applied or not), transient `unavailable`, raw peer touches
//!   of a gate (CAS contention), evictions that fail, liveness that cannot be proven;
//! * a "swarm" profile per seed: fault rates and weights vary by seed, so some histories are
//!   quiet and some are hostile;
//! * at the end: every in-flight machine is drained (or, in most seeds, every process crashes at
//!   once), then a clean reconcile of every frozen gate must reopen it, every plane must restart
//!   and register at an epoch above every one it committed before, its gate ending open, and in
//!   one seed of four a clean registration + grant + READY + serve mint of one instance must
//!   succeed (nothing is stuck for good).
//!
//! Gaps of the core this simulator found are closed and checked strictly (the minimal
//! reproductions are regression tests in `tests/sim.rs`): an instance READY write under a
//! successor's frozen barrier (F42), and a reconcile acting on a freeze reopened before its probe
//! (F52). The one tolerated window is counted in [`SimStats::stale_ready_races`]. A restart
//! resuming its op id beside its still-running partitioned predecessor is off by default (see
//! [`SimConfig::resume_beside_zombie`]).
//!
//! Liveness oracle: an instance's holder is dead iff its registrant is not running and its last
//! run crashed or exited; `gone` is answered only then (and not always), and a dead holder stays
//! dead while a reconcile that was told `gone` is in flight.

mod check;
mod fixture;
mod machines;
mod rng;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use cotal_core::canon::{self, Digest};
use cotal_core::deregistration::Deregister;
use cotal_core::driver::{ModelWorld, World};
use cotal_core::gate::{
    EndpointGate, GateState, NameAuthorityRevision, OpKind, ProcessEpoch, RegistrationRevision,
};
use cotal_core::govern::ForeignSlotCondition;
use cotal_core::issuance::{FinalizeServeMint, ServeCredential, ServeGrant};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, KvOutcome, KvRequest, Revision, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::{Effect, Liveness, Observation, Step};
use cotal_core::names::{keys, CredentialId, OpId, Principal, SourceMember};
use cotal_core::reconcile::ReconcileGate;
use cotal_core::registration::{RegisterInstance, Registered, EVICT_PRINCIPALS_MAX};
use cotal_core::service::WriteStatus;
use cotal_core::serving::{AuthorizeServeGrant, RegisterServing};
use cotal_core::EpError;

use crate::fence::{SiblingMint, Violation};

pub use fixture::{Fixture, Instance, Surface, ENDPOINT, MAX_INSTANCES, OWNER, PLANES, SPACE};
pub use machines::Broken;
use machines::{
    Local, ObserveGate, Outcome, ReopenWithoutRevoke, SimMachine, SkipRevoke, UnfencedReady,
};
pub use rng::SplitMix64;

/// Seeds `cargo test` runs by default.
pub const DEFAULT_SEEDS: u64 = 2_000;
/// Scheduler steps per seed before the drain.
pub const DEFAULT_STEPS: usize = 150;
/// Trace lines kept per seed (a ring: the last ones before a failure).
pub const DEFAULT_TRACE_LINES: usize = 96;
/// Steps the drain and each settle run may take; every machine has bounded retries, so more
/// than this is a liveness bug.
pub const SETTLE_STEPS: usize = 5_000;
/// Grants remembered per instance (the newest, and stale ones a zombie might still hold).
const GRANT_HISTORY: usize = 6;
/// Mints started per instance, at most: every row of a family is enumerated, revoked and
/// evicted by each later registration, and a registration is replayed from the top once per
/// effect, so long families would make each seed quadratically dearer without exercising
/// anything new.
const FAMILY_MAX: usize = 6;
/// Faults scheduled but not yet fired, at most.
const PENDING_FAULTS_MAX: usize = 3;

/// How a batch of seeds runs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Scheduler steps per seed before the drain.
    pub steps: usize,
    /// Trace ring size.
    pub trace_lines: usize,
    /// A deliberately broken variant (teeth tests only).
    pub broken: Option<Broken>,
    /// Let a restarted registrant resume its op id while the partitioned predecessor running
    /// that op is still alive (two live executors of one op id). The core's resume-by-op-id
    /// assumes this never happens. Its pre-publish re-check refuses a spec once the other
    /// executor moved the gate, but a resume shares the other's freeze token, so both pass it
    /// until one reopens: with this on, the checks still find a spec published between the
    /// other's re-check and reopen (F64), an abort-reopen at the old coordinate after the other
    /// published (E2/F63), two publishes under one freeze (F63/F69), and a Phase 2 revoking a
    /// row of the gate the other had already reopened (F19/F20). Planes are never partitioned
    /// (the daemon's registration lock proves its predecessor gone), so it never applies to them.
    pub resume_beside_zombie: bool,
    /// Run this many planes in every seed (at most [`PLANES`]) instead of the seed's own draw.
    pub planes: Option<usize>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            steps: DEFAULT_STEPS,
            trace_lines: DEFAULT_TRACE_LINES,
            broken: None,
            resume_beside_zombie: false,
            planes: None,
        }
    }
}

/// Counters over one or many seeds, so a run can be shown not to be vacuous.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    pub seeds: u64,
    pub steps: u64,
    /// KV requests the model served (`KvModel::requests_served`), setup replay excluded.
    pub kv_requests: u64,
    pub registrations: u64,
    /// Completed reopens that advanced the epoch (re-registrations, F69).
    pub epoch_advances: u64,
    pub reopens: u64,
    pub registration_refusals: u64,
    /// Registration runs that ended with their own freeze still in place.
    pub left_frozen: u64,
    pub resumes: u64,
    pub serve_releases: u64,
    pub sibling_releases: u64,
    pub mint_refusals: u64,
    pub deregistrations: u64,
    pub reconciles: u64,
    pub reconcile_refusals: u64,
    pub ready_writes: u64,
    pub status_refusals: u64,
    pub crashes: u64,
    pub faults: u64,
    pub peer_touches: u64,
    pub failed_evictions: u64,
    /// Registrants partitioned away while a restart took over.
    pub partitions: u64,
    /// READY writes that landed at an epoch a successor's reopen had already superseded. The
    /// core refuses an instance write unless its gate read finds the gate OPEN at the writing
    /// epoch, so each of these read it so, and a successor's whole barrier (freeze, re-register,
    /// reopen at the next epoch) then ran before the write landed: the gate lives in the auth
    /// bucket and the status in the records bucket, so no CAS spans the read and the write.
    /// Tolerated and counted; any other stale READY is an F42 violation.
    pub stale_ready_races: u64,
    /// Plane starts (each observes its gate and applies the restart rule), the final restarts
    /// included.
    pub plane_starts: u64,
    /// Plane ceremonies that completed (the final restarts included).
    pub plane_registrations: u64,
    /// Plane ceremonies that failed (the process exits, its record kept).
    pub plane_refusals: u64,
    /// Plane starts that resumed their recorded op (the gate was still frozen by it).
    pub plane_resumes: u64,
    /// Crashes of a running plane process, at any step.
    pub plane_crashes: u64,
    /// ... of them between the gate observation and the record write of a fresh op.
    pub plane_crashes_before_record: u64,
    /// ... of them with the plane's gate frozen by its recorded op (a restart must resume it).
    pub plane_crashes_frozen: u64,
    /// ... of them after a completed ceremony, before its record was cleared.
    pub plane_crashes_before_clear: u64,
    /// Final plane restarts first refused because the peer plane's crashed registration held
    /// the shared governance slot (in flight at its gate's generation); each registered once the
    /// peer's own restart had healed it.
    pub plane_final_waits: u64,
}

impl SimStats {
    pub fn merge(&mut self, o: &SimStats) {
        self.seeds += o.seeds;
        self.steps += o.steps;
        self.kv_requests += o.kv_requests;
        self.registrations += o.registrations;
        self.epoch_advances += o.epoch_advances;
        self.reopens += o.reopens;
        self.registration_refusals += o.registration_refusals;
        self.left_frozen += o.left_frozen;
        self.resumes += o.resumes;
        self.serve_releases += o.serve_releases;
        self.sibling_releases += o.sibling_releases;
        self.mint_refusals += o.mint_refusals;
        self.deregistrations += o.deregistrations;
        self.reconciles += o.reconciles;
        self.reconcile_refusals += o.reconcile_refusals;
        self.ready_writes += o.ready_writes;
        self.status_refusals += o.status_refusals;
        self.crashes += o.crashes;
        self.faults += o.faults;
        self.peer_touches += o.peer_touches;
        self.failed_evictions += o.failed_evictions;
        self.partitions += o.partitions;
        self.stale_ready_races += o.stale_ready_races;
        self.plane_starts += o.plane_starts;
        self.plane_registrations += o.plane_registrations;
        self.plane_refusals += o.plane_refusals;
        self.plane_resumes += o.plane_resumes;
        self.plane_crashes += o.plane_crashes;
        self.plane_crashes_before_record += o.plane_crashes_before_record;
        self.plane_crashes_frozen += o.plane_crashes_frozen;
        self.plane_crashes_before_clear += o.plane_crashes_before_clear;
        self.plane_final_waits += o.plane_final_waits;
    }
}

/// A violated invariant, with what is needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    /// The scheduler step the violation was detected at.
    pub step: u64,
    pub violation: Violation,
    /// The last trace lines before the violation, oldest first.
    pub trace: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} violated {} at step {} (replay with the same config: SIM_SEED={} cargo \
             test -p cotal-tests --test sim simulated -- --nocapture)",
            self.seed, self.violation, self.step, self.seed
        )?;
        writeln!(f, "last {} trace lines:", self.trace.len())?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// Runs one seed: the scheduled history, the drain, the settle phase and the final check. A
/// panic anywhere (the core must never panic on a reachable path) is reported as a failure of
/// the seed, rule `panic`.
pub fn run_seed(seed: u64, config: &SimConfig) -> Result<SimStats, Failure> {
    let setup = |violation| Failure {
        seed,
        step: 0,
        violation,
        trace: Vec::new(),
    };
    let fixture = Fixture::get().map_err(setup)?;
    let mut sim = Sim::new(seed, config, fixture).map_err(setup)?;
    let ran = panic::catch_unwind(AssertUnwindSafe(|| sim.run())).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        Err(Violation::new("panic", message))
    });
    match ran {
        Ok(()) => Ok(sim.stats()),
        Err(violation) => Err(Failure {
            seed,
            step: sim.step_no,
            violation,
            trace: sim.trace.iter().map(Line::render).collect(),
        }),
    }
}

/// Runs `seeds` on `threads` worker threads (seeds are independent; each thread takes every
/// `threads`-th seed). Stops early once any seed fails and returns the failure with the lowest
/// seed found, so a failing batch always names a seed that replays on its own.
pub fn run_seeds(
    seeds: Range<u64>,
    config: &SimConfig,
    threads: usize,
) -> Result<SimStats, Failure> {
    let threads = threads.max(1);
    let stop = AtomicBool::new(false);
    let results: Vec<(SimStats, Option<Failure>)> = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, seeds) = (&stop, seeds.clone());
                scope.spawn(move || {
                    let mut total = SimStats::default();
                    for seed in seeds.skip(t).step_by(threads) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        match run_seed(seed, config) {
                            Ok(stats) => total.merge(&stats),
                            Err(failure) => {
                                stop.store(true, Ordering::Relaxed);
                                return (total, Some(failure));
                            }
                        }
                    }
                    (total, None)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    let failure = Failure {
                        seed: u64::MAX,
                        step: 0,
                        violation: Violation::new("panic", "a simulator thread panicked"),
                        trace: Vec::new(),
                    };
                    (SimStats::default(), Some(failure))
                })
            })
            .collect()
    });
    let mut total = SimStats::default();
    let mut first: Option<Failure> = None;
    for (stats, failure) in results {
        total.merge(&stats);
        if let Some(f) = failure {
            if first.as_ref().is_none_or(|g| f.seed < g.seed) {
                first = Some(f);
            }
        }
    }
    match first {
        Some(failure) => Err(failure),
        None => Ok(total),
    }
}

/// The seed's swarm profile: how hostile this history is.
#[derive(Debug, Clone)]
struct Profile {
    instances: usize,
    /// Instances registered by the setup (the first ones).
    registered: usize,
    /// Per-mille chance a scheduler step is a fault instead of an actor step.
    fault_rate: u32,
    /// Weights of: ambiguous-applied, ambiguous-not-applied, unavailable, peer touch, crash,
    /// partition.
    fault_mix: [u32; 6],
    /// Per-mille chance one holder's eviction fails.
    evict_fail: u32,
    /// Per-mille chance a dead holder is reported `gone` (else unknown / unestablishable).
    gone: u32,
    /// Per-mille chance a step starts a burst (one actor stepped several times in a row).
    burst: u32,
    /// Registrations evict one holder per call (exercises the cursor's chunk journaling).
    evict_one_by_one: bool,
    /// Planes registering their own `auth` instances.
    planes: usize,
}

impl Profile {
    fn draw(rng: &mut SplitMix64) -> Profile {
        let mut mix = [0u32; 6];
        for w in &mut mix {
            *w = rng.below_u32(5);
        }
        let instances = if rng.chance(500) { 2 } else { 3 };
        Profile {
            instances,
            registered: if rng.chance(200) {
                0
            } else {
                1 + rng.index(instances)
            },
            fault_rate: rng.below_u32(180),
            fault_mix: mix,
            evict_fail: rng.below_u32(250),
            gone: 600 + rng.below_u32(401),
            burst: rng.below_u32(60),
            evict_one_by_one: rng.chance(250),
            // Drawn last, so the other draws of a seed are what they were before planes. Planes
            // run in one seed of eight: a plane start replays the whole self-authorized ceremony
            // (contract publication included), so a plane seed costs about two plain ones.
            planes: if rng.chance(125) { PLANES } else { 0 },
        }
    }
}

/// Who an actor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Registrant(usize),
    /// A partitioned predecessor of instance `i`'s registrant: its machine goes on running
    /// while the registrant restarts (see [`Sim::partition`]). It never starts anything itself.
    Zombie(usize),
    Minter,
    Deregistrar,
    Reconciler(usize),
    StatusWriter,
    /// Plane `p`'s process: it starts, registers, serves, and restarts, crashing anywhere.
    Plane(usize),
}

/// What a flight is doing, with what the checker needs to judge its end.
#[derive(Debug, Clone)]
enum Job {
    /// A registration run; `serving` runs the whole `RegisterServing` machine, otherwise the
    /// registrant chains a grant and a READY write after `RegisterInstance` (the same steps,
    /// as separate machines: cheaper to replay).
    Register {
        op_id: OpId,
        resumed: bool,
        serving: bool,
    },
    /// The registrant's serve-grant authorization at the epoch its registration committed.
    Grant {
        epoch: ProcessEpoch,
    },
    BrokenBarrier,
    ServeMint {
        grant: ServeGrant,
        id: CredentialId,
        row_key: String,
    },
    SiblingMint {
        id: CredentialId,
        row_key: String,
    },
    Deregister,
    Reconcile,
    /// A READY status write at a grant's epoch.
    Status {
        grant: ServeGrant,
    },
    /// A plane start's gate observation; the restart rule decides from it what comes next.
    PlaneObserve,
    /// Writing the durable record of the fresh op a plane start takes, before its ceremony.
    PlaneRecord {
        op_id: OpId,
    },
    /// The plane's self-authorized ceremony under `op_id` (`resumed`: the restart rule resumed
    /// the recorded op).
    Plane {
        op_id: OpId,
        resumed: bool,
    },
    /// Clearing the record after a completed ceremony.
    PlaneClear,
}

impl Job {
    fn is_mint(&self) -> bool {
        matches!(self, Job::ServeMint { .. } | Job::SiblingMint { .. })
    }

    fn label(&self) -> &'static str {
        match self {
            Job::Register { .. } => "register",
            Job::Grant { .. } => "grant",
            Job::BrokenBarrier => "broken-barrier",
            Job::ServeMint { .. } => "serve-mint",
            Job::SiblingMint { .. } => "sibling-mint",
            Job::Deregister => "deregister",
            Job::Reconcile => "reconcile",
            Job::Status { .. } => "status",
            Job::PlaneObserve => "plane-observe",
            Job::PlaneRecord { .. } => "plane-record",
            Job::Plane { .. } => "plane",
            Job::PlaneClear => "plane-clear",
        }
    }

    /// A registration ceremony under `op_id`: an instance's, or a plane's.
    fn registers_as(&self) -> Option<&OpId> {
        match self {
            Job::Register { op_id, .. } | Job::Plane { op_id, .. } => Some(op_id),
            _ => None,
        }
    }
}

/// Facts about a flight's effects, gathered as the simulator executes them.
#[derive(Debug, Clone, Default)]
struct Notes {
    /// Some KV outcome was `Ambiguous` or `Unavailable`.
    saw_fault: bool,
    /// A request on the flight's own gate was answered `Ambiguous` or `Unavailable` after the
    /// flight's freeze had committed (an abort-reopen that could not be settled).
    gate_fault_after_freeze: bool,
    /// The flight enumerated its gate's credential family (Phase 2 began).
    phase2: bool,
    /// The flight's own freeze of its gate committed.
    froze: bool,
    /// The freeze the flight executes, as the gate revision it stands at: the flight's own
    /// committed freeze, or the freeze of its op id its first gate read found (a resume). One
    /// op id may have two live executors (a restart resuming beside its partitioned zombie), so
    /// the op id alone does not say whose freeze a gate stands at.
    freeze: Option<Revision>,
    probe: Option<Liveness>,
    /// The revision of the flight's first read of its own gate.
    first_gate_read: Option<Revision>,
    /// The state and epoch of the flight's latest read of its own gate (a status writer's
    /// fresh epoch read).
    last_gate_read: Option<(GateState, ProcessEpoch)>,
    /// The gate had already moved past that first read when the probe was answered (such a
    /// reconcile refuses `raced` at its re-read after the probe, so no repair is owed).
    stale_at_probe: bool,
    evict_failed: bool,
    /// The revision a mint's committed touch produced.
    touch: Option<Revision>,
    /// The flight's latest effect was a write that committed.
    committed_write: bool,
}

/// One machine in flight.
struct Flight {
    id: u64,
    job: Job,
    instance: usize,
    machine: SimMachine,
    pending: Option<Observation>,
    notes: Notes,
}

struct Actor {
    role: Role,
    flight: Option<Flight>,
    /// How the last flight ended (the settle phase judges it).
    last: Option<Result<(), EpError>>,
}

/// A credential whose mint touch committed: released (or as good as released, if its minter
/// crashed right after the touch), and ledgered at `row_key`.
#[derive(Debug, Clone)]
struct Credential {
    row_key: String,
    coords: (ProcessEpoch, RegistrationRevision, NameAuthorityRevision),
    holder: Principal,
    /// Its holder was verified evicted under some freeze after it was released.
    evicted: bool,
}

/// What the simulator remembers per instance (the endpoint's, then the planes' `auth` ones).
#[derive(Debug)]
struct InstanceState {
    gate_key: String,
    /// The governance head of the instance's endpoint.
    govern_key: String,
    /// The gate exists. A plane's gate is provisioned by its first start; until then `gate` is
    /// the row that start will create.
    provisioned: bool,
    family_prefix: String,
    spec_key: String,
    status_key: String,
    /// The gate as last seen, with its revision.
    gate: EndpointGate,
    gate_revision: Revision,
    /// The op id of the registrant's last run.
    op: Option<OpId>,
    /// The holder process is down (crashed or exited); see the liveness oracle.
    down: bool,
    /// A reconcile that was told `gone` is in flight: the holder may not come back meanwhile.
    reconciling: bool,
    /// The first revision the spec key ever had a message at.
    spec_first: Option<Revision>,
    /// The freeze (gate revision) the live spec was published under, if any.
    spec_published_under: Option<Revision>,
    /// The last stored live status epoch (F42 monotonicity).
    status_epoch: Option<ProcessEpoch>,
    /// Holders verified evicted under the gate's current freeze.
    evicted: BTreeSet<Principal>,
    credentials: Vec<Credential>,
    grants: Vec<ServeGrant>,
    /// Mints started on this instance (see [`FAMILY_MAX`]).
    staged: usize,
}

/// What the simulator remembers per plane.
#[derive(Debug, Default)]
struct PlaneState {
    /// The durable op record: written before the ceremony's freeze, cleared after a completed
    /// run, kept across crashes.
    record: Option<OpId>,
    /// The highest epoch a registration of this plane completed at (its reopen landed).
    committed: Option<ProcessEpoch>,
    /// What the plane's last completed ceremony returned.
    registered: Option<Registered>,
}

/// F65 tracker: one governance head's binding map as last seen, with its revision.
#[derive(Debug)]
struct HeadTracker {
    key: String,
    binding: Vec<(String, BTreeSet<String>)>,
    revision: Revision,
}

struct Sim<'f> {
    seed: u64,
    rng: SplitMix64,
    config: SimConfig,
    profile: Profile,
    fixture: &'f Fixture,
    world: ModelWorld,
    setup_requests: u64,
    actors: Vec<Actor>,
    /// The endpoint's instances (`0..profile.instances`), then one `auth` instance per plane.
    instances: Vec<InstanceState>,
    planes: Vec<PlaneState>,
    /// Set for the settle phase: faults stop, evictions verify, dead holders are `gone`.
    settling: bool,
    step_no: u64,
    flights: u64,
    minted: u64,
    burst: Option<(usize, u32)>,
    trace: VecDeque<Line>,
    stats: SimStats,
    /// F26 tracker: the last seen state of every ledger row written during the seed.
    rows: BTreeMap<String, CredState>,
    /// F65 trackers: the endpoint's governance head, and the `auth` endpoint's when planes run.
    heads: Vec<HeadTracker>,
}

impl<'f> Sim<'f> {
    fn new(seed: u64, config: &SimConfig, fixture: &'f Fixture) -> Result<Sim<'f>, Violation> {
        let mut rng = SplitMix64::new(seed);
        let mut profile = Profile::draw(&mut rng);
        if let Some(planes) = config.planes {
            profile.planes = planes.min(PLANES);
        }
        let world = fixture.world(profile.registered);
        let setup_requests = world.kv.requests_served();
        let govern_key = keys::govern(&fixture.endpoint);
        let mut instances = fixture
            .instances
            .iter()
            .take(profile.instances)
            .enumerate()
            .map(|(n, inst)| {
                let (e, i) = (&inst.gate.endpoint, &inst.gate.instance);
                let spec_key = keys::svc_spec(e, i);
                let spec_first = world.kv.get(Store::Records, &spec_key).map(|e| e.revision);
                let grants = if n < profile.registered {
                    fixture.setup_grant(n).cloned().into_iter().collect()
                } else {
                    Vec::new()
                };
                let gate_key = inst.gate.key();
                let (gate, gate_revision) = world
                    .kv
                    .get(Store::Auth, &gate_key)
                    .and_then(|entry| {
                        EndpointGate::parse(&entry.value)
                            .ok()
                            .map(|g| (g, entry.revision))
                    })
                    .ok_or_else(|| {
                        Violation::new("setup", format!("gate {gate_key} unreadable"))
                    })?;
                Ok(InstanceState {
                    govern_key: govern_key.clone(),
                    provisioned: true,
                    family_prefix: inst.gate.family_prefix(),
                    spec_key,
                    status_key: keys::svc_status(e, i),
                    gate_key,
                    gate,
                    gate_revision,
                    op: None,
                    down: false,
                    reconciling: false,
                    spec_first,
                    spec_published_under: None,
                    status_epoch: None,
                    evicted: BTreeSet::new(),
                    credentials: Vec::new(),
                    grants,
                    staged: 0,
                })
            })
            .collect::<Result<Vec<_>, Violation>>()?;
        let mut heads = vec![HeadTracker::new(govern_key)];
        for ceremony in fixture.planes.iter().take(profile.planes) {
            let g = &ceremony.gate;
            let gate = EndpointGate::provisioned(ceremony.principal.clone())
                .map_err(|e| Violation::new("setup", e.to_string()))?;
            instances.push(InstanceState {
                gate_key: g.key(),
                govern_key: keys::govern(&g.endpoint),
                provisioned: false,
                family_prefix: g.family_prefix(),
                spec_key: keys::svc_spec(&g.endpoint, &g.instance),
                status_key: keys::svc_status(&g.endpoint, &g.instance),
                gate,
                gate_revision: Revision(0),
                op: None,
                down: false,
                reconciling: false,
                spec_first: None,
                spec_published_under: None,
                status_epoch: None,
                evicted: BTreeSet::new(),
                credentials: Vec::new(),
                grants: Vec::new(),
                staged: 0,
            });
            if heads.len() == 1 {
                heads.push(HeadTracker::new(keys::govern(&g.endpoint)));
            }
        }
        let planes = (0..profile.planes).map(|_| PlaneState::default()).collect();
        let mut actors = Vec::new();
        let n = profile.instances;
        actors.extend((0..n).map(|i| Actor::new(Role::Registrant(i))));
        actors.extend((0..n).map(|i| Actor::new(Role::Zombie(i))));
        actors.extend((0..2).map(|_| Actor::new(Role::Minter)));
        actors.push(Actor::new(Role::Deregistrar));
        actors.extend((0..n).map(|i| Actor::new(Role::Reconciler(i))));
        actors.push(Actor::new(Role::StatusWriter));
        actors.extend((0..profile.planes).map(|p| Actor::new(Role::Plane(p))));
        let mut trace = VecDeque::with_capacity(config.trace_lines.min(1024));
        trace.push_back(Line::Text(format!("seed {seed}: {profile:?}")));
        Ok(Sim {
            seed,
            rng,
            config: config.clone(),
            profile,
            fixture,
            world,
            setup_requests,
            actors,
            instances,
            planes,
            settling: false,
            step_no: 0,
            flights: 0,
            minted: 0,
            burst: None,
            trace,
            stats: SimStats::default(),
            rows: BTreeMap::new(),
            heads,
        })
    }

    fn stats(&self) -> SimStats {
        let mut stats = self.stats.clone();
        stats.seeds = 1;
        stats.steps = self.step_no;
        stats.kv_requests = self
            .world
            .kv
            .requests_served()
            .saturating_sub(self.setup_requests);
        stats
    }

    fn run(&mut self) -> Result<(), Violation> {
        for _ in 0..self.config.steps {
            self.tick()?;
        }
        self.drain()?;
        self.settle()?;
        self.final_check()
    }

    fn note(&mut self, line: String) {
        self.trace_line(Line::Text(line));
    }

    fn trace_line(&mut self, line: Line) {
        if self.config.trace_lines == 0 {
            return;
        }
        while self.trace.len() >= self.config.trace_lines {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    // ---- scheduling ---------------------------------------------------------------------------

    /// One scheduler step: a fault, or one effect of one actor; then the invariants.
    fn tick(&mut self) -> Result<(), Violation> {
        self.step_no += 1;
        if let Some((actor, left)) = self.burst.take() {
            if left > 1 {
                self.burst = Some((actor, left - 1));
            }
            self.step_actor(actor, true)?;
            return self.after_step();
        }
        if self.rng.chance(self.profile.fault_rate) {
            self.fault()?;
            return self.after_step();
        }
        let weights: Vec<u32> = self.actors.iter().map(|a| self.weight(a)).collect();
        if let Some(actor) = self.rng.weighted(&weights) {
            if self.rng.chance(self.profile.burst) {
                let length = 4 + self.rng.below_u32(20);
                self.burst = Some((actor, length));
            }
            self.step_actor(actor, true)?;
        }
        self.after_step()
    }

    fn weight(&self, actor: &Actor) -> u32 {
        match actor.role {
            Role::Registrant(_) | Role::Minter => 3,
            Role::Zombie(_) if actor.flight.is_some() => 3,
            Role::Zombie(_) => 0,
            Role::Deregistrar | Role::StatusWriter => 1,
            Role::Reconciler(i) => match self.instances.get(i) {
                Some(inst) if inst.gate.state() == GateState::Frozen => 3,
                _ => 1,
            },
            // A running start goes at a registrant's pace; a serving plane restarts less often.
            Role::Plane(_) if actor.flight.is_some() => 3,
            Role::Plane(_) => 1,
        }
    }

    /// The instance index of plane `p`'s `auth` gate.
    fn plane_instance(&self, p: usize) -> usize {
        self.profile.instances + p
    }

    /// The plane whose `auth` instance is instance `i`, if it is one.
    fn plane_of(&self, i: usize) -> Option<usize> {
        i.checked_sub(self.profile.instances)
            .filter(|&p| p < self.planes.len())
    }

    /// Ends the history: in one seed of three every busy actor is stepped round-robin until
    /// all are idle (starting nothing new); otherwise every process crashes at once, which is
    /// as legitimate an ending and far cheaper to simulate (finishing a half-done registration
    /// replays it many times over), and leaves the settle phase more to repair.
    fn drain(&mut self) -> Result<(), Violation> {
        if !self.rng.chance(333) {
            self.note("-- everyone crashes".into());
            for a in 0..self.actors.len() {
                self.crash_actor(a);
            }
            return self.after_step();
        }
        self.note("-- drain".into());
        for _ in 0..SETTLE_STEPS {
            let busy: Vec<usize> = (0..self.actors.len())
                .filter(|&a| self.actors.get(a).is_some_and(|x| x.flight.is_some()))
                .collect();
            if busy.is_empty() {
                return Ok(());
            }
            for actor in busy {
                self.step_no += 1;
                self.step_actor(actor, false)?;
                self.after_step()?;
            }
        }
        Err(Violation::new(
            "liveness",
            format!("machines still in flight after {SETTLE_STEPS} drain rounds"),
        ))
    }

    /// The settle phase: no more faults; every frozen gate is reconciled with its holder gone
    /// and eviction verifying (E4/F52: it must reopen); then one instance registers, is granted,
    /// writes READY and mints once more (F64: nothing may be blocked forever).
    fn settle(&mut self) -> Result<(), Violation> {
        self.note("-- settle".into());
        self.settling = true;
        self.world.kv.clear_faults();
        for inst in &mut self.instances {
            inst.down = true;
        }
        for i in 0..self.profile.instances {
            let frozen = self
                .instances
                .get(i)
                .is_some_and(|s| s.gate.state() == GateState::Frozen);
            if frozen {
                let actor = self.actor_of(Role::Reconciler(i))?;
                if let Err(e) = self.run_to_end(actor, Job::Reconcile, i)? {
                    return Err(Violation::new(
                        "E4/F52",
                        format!(
                            "instance {i}: a reconcile with the holder gone and every eviction \
                             verified did not reopen the frozen gate: {e}"
                        ),
                    ));
                }
            }
        }
        self.settle_planes()?;
        // One instance in one seed of four (seeded): a full registration over the family a
        // history accumulated is the most expensive thing the simulator replays, and over
        // thousands of seeds every instance still gets its turn.
        if !self.rng.chance(250) {
            return Ok(());
        }
        let i = self.rng.index(self.profile.instances);
        let actor = self.actor_of(Role::Registrant(i))?;
        let op_id = OpId::mint(self.rng.entropy20());
        let job = Job::Register {
            op_id,
            resumed: false,
            serving: false,
        };
        if let Err(e) = self.run_to_end(actor, job, i)? {
            return Err(Violation::new(
                "F64",
                format!(
                    "instance {i} cannot register after every gate was reconciled; the \
                     endpoint is blocked: {e}"
                ),
            ));
        }
        let Some(grant) = self.instances.get(i).and_then(|s| s.grants.last().cloned()) else {
            return Err(Violation::new(
                "sim",
                format!("instance {i} registered but recorded no grant"),
            ));
        };
        let minter = self.actor_of(Role::Minter)?;
        let job = self.serve_mint_job(i, grant);
        if let Err(e) = self.run_to_end(minter, job, i)? {
            return Err(Violation::new(
                "F27",
                format!(
                    "instance {i}: a serve mint with the grant of the registration that \
                     just completed was refused: {e}"
                ),
            ));
        }
        Ok(())
    }

    /// F14/F69 after the history: every plane restarts (a fresh process applying the restart
    /// rule to whatever the history left: a gate frozen by its crashed ceremony, a record never
    /// cleared, a governance slot left behind) and must register at an epoch strictly above
    /// every epoch it committed before; then every plane's gate is open, under no op, and no
    /// record is left. Nothing reconciles a plane's gate: only its own restart can heal it.
    ///
    /// One refusal is legitimate, once: the peer plane's crashed registration holds the shared
    /// governance slot at its gate's still-frozen generation, which no reader can tell from a
    /// registration in flight (F64). The plane exits (a resume keeps its freeze, a fresh run
    /// abort-reopens) and restarts after the peer's own restart has completed that registration.
    fn settle_planes(&mut self) -> Result<(), Violation> {
        let mut pending: Vec<usize> = (0..self.planes.len()).collect();
        if self.rng.chance(500) {
            pending.reverse();
        }
        for round in 0..2 {
            let mut waiting = Vec::new();
            for &p in &pending {
                let i = self.plane_instance(p);
                let before = self.planes.get(p).and_then(|s| s.committed);
                let actor = self.actor_of(Role::Plane(p))?;
                self.stats.plane_starts += 1;
                let ended = self.run_to_end(actor, Job::PlaneObserve, i)?;
                let peer_in_flight = |e: &EpError| {
                    ForeignSlotCondition::of(e) == Some(ForeignSlotCondition::InFlight)
                };
                match ended {
                    Ok(()) => {
                        let epoch = self
                            .planes
                            .get(p)
                            .and_then(|s| s.registered.as_ref())
                            .map(|r| r.process_epoch);
                        let above = match (epoch, before) {
                            (Some(e), Some(b)) => e > b,
                            (e, _) => e.is_some(),
                        };
                        if !above {
                            return Err(Violation::new(
                                "F69",
                                format!(
                                    "plane {p}'s final restart registered at epoch {epoch:?}, \
                                     not above the epoch {before:?} it had already committed"
                                ),
                            ));
                        }
                    }
                    Err(e) if round == 0 && pending.len() > 1 && peer_in_flight(&e) => {
                        self.stats.plane_final_waits += 1;
                        waiting.push(p);
                    }
                    Err(e) => {
                        return Err(Violation::new(
                            "F14",
                            format!(
                                "plane {p}'s restart after the history could not register \
                                 (round {round}; its record {:?}, its gate {}): {e}",
                                self.planes
                                    .get(p)
                                    .and_then(|s| s.record.as_ref())
                                    .map(ToString::to_string),
                                self.instances
                                    .get(i)
                                    .map_or_else(String::new, |s| s.gate.to_json())
                            ),
                        ))
                    }
                }
            }
            // A wait is owed to a peer that came up after it in the same round.
            if waiting.len() == pending.len() && !waiting.is_empty() {
                return Err(Violation::new(
                    "F14",
                    format!("every plane's final restart waited for another: {waiting:?}"),
                ));
            }
            pending = waiting;
        }
        for p in 0..self.planes.len() {
            let i = self.plane_instance(p);
            let (Some(inst), Some(plane)) = (self.instances.get(i), self.planes.get(p)) else {
                continue;
            };
            if inst.gate.state() != GateState::Open
                || inst.gate.op().is_some()
                || plane.record.is_some()
            {
                return Err(Violation::new(
                    "F14",
                    format!(
                        "after every plane's final restart, plane {p}'s gate is {} and its \
                         record {:?}; a registered plane's gate is open under no op and its \
                         record is cleared",
                        inst.gate.to_json(),
                        plane.record.as_ref().map(ToString::to_string)
                    ),
                ));
            }
        }
        Ok(())
    }

    fn actor_of(&self, role: Role) -> Result<usize, Violation> {
        self.actors
            .iter()
            .position(|a| a.role == role)
            .ok_or_else(|| Violation::new("sim", format!("no actor plays {role:?}")))
    }

    /// Starts `job` on the idle `actor` and steps it until it ends; returns how it ended.
    fn run_to_end(
        &mut self,
        actor: usize,
        job: Job,
        instance: usize,
    ) -> Result<Result<(), EpError>, Violation> {
        let flight = self.launch(job, instance)?;
        if let Some(a) = self.actors.get_mut(actor) {
            a.flight = Some(flight);
            a.last = None;
        }
        for _ in 0..SETTLE_STEPS {
            self.step_no += 1;
            self.step_actor(actor, false)?;
            self.after_step()?;
            if let Some(a) = self.actors.get_mut(actor) {
                if a.flight.is_none() {
                    return Ok(a.last.take().unwrap_or(Ok(())));
                }
            }
        }
        Err(Violation::new(
            "liveness",
            format!("a settle run did not finish within {SETTLE_STEPS} steps"),
        ))
    }

    // ---- faults -------------------------------------------------------------------------------

    fn fault(&mut self) -> Result<(), Violation> {
        let Some(kind) = self.rng.weighted(&self.profile.fault_mix) else {
            return Ok(());
        };
        let i = self.rng.index(self.instances.len());
        match kind {
            0..=2 => {
                if self.world.kv.pending_faults() >= PENDING_FAULTS_MAX {
                    return Ok(());
                }
                let trigger = self.fault_target(i, kind == 2);
                let fault = match kind {
                    0 => Fault::AmbiguousApplied,
                    1 => Fault::AmbiguousNotApplied,
                    _ => Fault::Unavailable,
                };
                self.note(format!(
                    "fault: {fault:?} on next {:?} {:?} {}",
                    trigger.store, trigger.op, trigger.key_prefix
                ));
                self.world.kv.inject(trigger, fault);
                self.stats.faults += 1;
            }
            3 => self.peer_touch(i),
            4 => self.crash(),
            _ => self.partition(i),
        }
        Ok(())
    }

    /// Instance `i`'s registrant is partitioned away, not dead: the platform restarts it while
    /// the old machine keeps running as a zombie (fencing exists for exactly this). The restart
    /// resumes the same op id or takes a fresh one, like any restart.
    fn partition(&mut self, i: usize) {
        let (Ok(registrant), Ok(zombie)) = (
            self.actor_of(Role::Registrant(i)),
            self.actor_of(Role::Zombie(i)),
        ) else {
            return;
        };
        if self.actors.get(zombie).is_none_or(|z| z.flight.is_some()) {
            return;
        }
        let Some(flight) = self
            .actors
            .get_mut(registrant)
            .and_then(|r| r.flight.take())
        else {
            return;
        };
        self.note(format!(
            "fault: partition of instance {i}: {}#{} keeps running as a zombie",
            flight.job.label(),
            flight.id
        ));
        if let Some(z) = self.actors.get_mut(zombie) {
            z.flight = Some(flight);
            z.last = None;
        }
        self.stats.partitions += 1;
    }

    /// A key one of the ceremony's writes (or, for `unavailable`, reads) goes to.
    fn fault_target(&mut self, i: usize, reads_too: bool) -> Trigger {
        let Some(inst) = self.instances.get(i) else {
            return Trigger::new(Store::Auth, KvOp::Update, "epgate.");
        };
        let govern = inst.govern_key.clone();
        if self.plane_of(i).is_some() {
            // Only what a plane's ceremony sends: a fault nobody would ever trigger stays pending
            // and crowds out the others (see PENDING_FAULTS_MAX).
            let mut targets: Vec<(Store, KvOp, String)> = vec![
                (Store::Auth, KvOp::Create, inst.gate_key.clone()),
                (Store::Auth, KvOp::Update, inst.gate_key.clone()),
                (Store::Records, KvOp::CreateStrict, inst.spec_key.clone()),
                (Store::Records, KvOp::Update, inst.spec_key.clone()),
                (Store::Records, KvOp::CreateStrict, govern.clone()),
                (Store::Records, KvOp::Update, govern.clone()),
                // The contract artifacts a start publishes (both planes publish the same ones).
                (Store::Contracts, KvOp::CreateStrict, String::new()),
            ];
            if reads_too {
                targets.extend([
                    (Store::Auth, KvOp::Get, inst.gate_key.clone()),
                    (Store::Auth, KvOp::Keys, inst.family_prefix.clone()),
                    (Store::Records, KvOp::Get, inst.spec_key.clone()),
                    (Store::Records, KvOp::Get, govern),
                    (Store::Contracts, KvOp::Get, String::new()),
                ]);
            }
            let (store, op, key) = self.rng.pick(&targets).cloned().unwrap_or((
                Store::Auth,
                KvOp::Update,
                String::new(),
            ));
            return Trigger::new(store, op, key);
        }
        let repair = format!("eprepair.{}", inst.gate_key.trim_start_matches("epgate."));
        let mut targets: Vec<(Store, KvOp, String)> = vec![
            (Store::Auth, KvOp::Update, inst.gate_key.clone()),
            (Store::Auth, KvOp::Create, inst.family_prefix.clone()),
            (Store::Auth, KvOp::Update, inst.family_prefix.clone()),
            (Store::Records, KvOp::CreateStrict, inst.spec_key.clone()),
            (Store::Records, KvOp::Update, inst.spec_key.clone()),
            (Store::Records, KvOp::Delete, inst.spec_key.clone()),
            (Store::Records, KvOp::CreateStrict, govern.clone()),
            (Store::Records, KvOp::Update, govern.clone()),
            (Store::Records, KvOp::CreateStrict, inst.status_key.clone()),
            (Store::Records, KvOp::Update, inst.status_key.clone()),
            (Store::Records, KvOp::Delete, inst.status_key.clone()),
            (Store::Auth, KvOp::Create, repair.clone()),
            (Store::Auth, KvOp::Update, repair.clone()),
            (Store::Auth, KvOp::Delete, repair),
        ];
        if reads_too {
            targets.extend([
                (Store::Auth, KvOp::Get, inst.gate_key.clone()),
                (Store::Auth, KvOp::Keys, inst.family_prefix.clone()),
                (Store::Records, KvOp::Get, inst.spec_key.clone()),
                (Store::Records, KvOp::Get, govern),
                // Contract artifact reads (the closure a registration or grant verifies).
                (Store::Contracts, KvOp::Get, String::new()),
            ]);
        }
        let (store, op, key) =
            self.rng
                .pick(&targets)
                .cloned()
                .unwrap_or((Store::Auth, KvOp::Update, String::new()));
        Trigger::new(store, op, key)
    }

    /// A peer plane's mint commits: identical gate bytes pinned to the current revision.
    fn peer_touch(&mut self, i: usize) {
        let Some(key) = self.instances.get(i).map(|s| s.gate_key.clone()) else {
            return;
        };
        let Some(entry) = self.world.kv.get(Store::Auth, &key) else {
            return;
        };
        let open = EndpointGate::parse(&entry.value).is_ok_and(|g| g.state() == GateState::Open);
        if open {
            self.world.kv.apply(&KvRequest::Update {
                store: Store::Auth,
                key,
                value: entry.value,
                expected: entry.revision,
            });
            self.stats.peer_touches += 1;
            self.note(format!("fault: peer touch of gate {i}"));
        }
    }

    /// A busy actor's process dies between two effects: its machine is dropped.
    fn crash(&mut self) {
        let busy: Vec<usize> = (0..self.actors.len())
            .filter(|&a| self.actors.get(a).is_some_and(|x| x.flight.is_some()))
            .collect();
        if let Some(&a) = self.rng.pick(&busy) {
            self.crash_actor(a);
        }
    }

    fn crash_actor(&mut self, a: usize) {
        let Some(actor) = self.actors.get_mut(a) else {
            return;
        };
        let Some(flight) = actor.flight.take() else {
            return;
        };
        actor.last = None;
        let role = actor.role;
        if let Some(inst) = self.instances.get_mut(flight.instance) {
            match role {
                Role::Registrant(_) => inst.down = true,
                Role::Reconciler(_) => inst.reconciling = false,
                _ => {}
            }
        }
        if let Role::Plane(p) = role {
            self.plane_crashed(p, &flight);
        }
        self.stats.crashes += 1;
        self.note(format!(
            "fault: crash of actor {a} ({}#{} on instance {})",
            flight.job.label(),
            flight.id,
            flight.instance
        ));
    }

    /// Plane `p`'s process died running `flight`: the machine is gone, the store and the op
    /// record are what is left (the record is durable, unless a broken variant says otherwise).
    fn plane_crashed(&mut self, p: usize, flight: &Flight) {
        self.stats.plane_crashes += 1;
        let frozen_by_record = self.instances.get(flight.instance).is_some_and(|s| {
            s.gate.state() == GateState::Frozen
                && s.gate.op().map(|o| o.op_id())
                    == self.planes.get(p).and_then(|r| r.record.as_ref())
        });
        match flight.job {
            Job::PlaneRecord { .. } => self.stats.plane_crashes_before_record += 1,
            Job::PlaneClear => self.stats.plane_crashes_before_clear += 1,
            _ if frozen_by_record => self.stats.plane_crashes_frozen += 1,
            _ => {}
        }
        if self.config.broken == Some(Broken::PlaneRecordNotDurable) {
            if let Some(plane) = self.planes.get_mut(p) {
                plane.record = None;
            }
        }
    }

    // ---- actors -------------------------------------------------------------------------------

    /// True when a plane process dies right before its pending record write or record clear.
    /// Those steps perform no effect and last one scheduler pick each, so a crash fault drawn at
    /// random rarely lands on them; the seed's fault rate, tripled, aims one there.
    fn dies_at_local_step(&mut self, a: usize) -> bool {
        let local = self.actors.get(a).is_some_and(|x| {
            matches!(x.role, Role::Plane(_))
                && x.flight
                    .as_ref()
                    .is_some_and(|f| matches!(f.job, Job::PlaneRecord { .. } | Job::PlaneClear))
        });
        local && !self.settling && self.rng.chance((3 * self.profile.fault_rate).min(1000))
    }

    /// True when a plane process dies right after a write of its ceremony committed, before it
    /// reads the reply (the daemon's kill-after-write crash hook): the states a restart must
    /// resume from are the ones right after a freeze, a slot take, a spec publish, a promote or
    /// a reopen, and a crash fault drawn at random lands right there only now and then.
    fn dies_after_write(&mut self, flight: &Flight) -> bool {
        matches!(flight.job, Job::Plane { .. })
            && flight.notes.committed_write
            && !self.settling
            && self.rng.chance(self.profile.fault_rate)
    }

    /// Advances `actor` by one effect (starting a new flight first if idle and `may_start`).
    fn step_actor(&mut self, a: usize, may_start: bool) -> Result<(), Violation> {
        if may_start && self.dies_at_local_step(a) {
            self.crash_actor(a);
            return Ok(());
        }
        let Some(actor) = self.actors.get_mut(a) else {
            return Ok(());
        };
        let role = actor.role;
        let mut flight = match actor.flight.take() {
            Some(flight) => flight,
            None if may_start => match self.start(role)? {
                Some(flight) => flight,
                None => return Ok(()),
            },
            None => return Ok(()),
        };
        match flight.machine.step(flight.pending.take()) {
            Step::Effect(effect) => {
                let observation = self.perform(a, &mut flight, &effect)?;
                let killed = may_start && self.dies_after_write(&flight);
                flight.pending = Some(observation);
                if let Some(actor) = self.actors.get_mut(a) {
                    actor.flight = Some(flight);
                }
                if killed {
                    self.crash_actor(a);
                }
                Ok(())
            }
            Step::Done(result) => self.finish(a, flight, result),
        }
    }

    /// A new flight for an idle actor, or `None` when it has nothing to do now.
    fn start(&mut self, role: Role) -> Result<Option<Flight>, Violation> {
        let n = self.profile.instances;
        let (job, i) = match role {
            Role::Registrant(i) => {
                let Some(inst) = self.instances.get(i) else {
                    return Ok(None);
                };
                if inst.reconciling {
                    return Ok(None);
                }
                // Resuming by op id assumes at most one live executor per op id: beside a
                // running zombie the restart takes a fresh op id unless told otherwise.
                let zombie = self
                    .actors
                    .iter()
                    .any(|a| a.role == Role::Zombie(i) && a.flight.is_some());
                let may_resume = !zombie || self.config.resume_beside_zombie;
                let op_id = match &inst.op {
                    Some(op) if may_resume && self.rng.chance(500) => op.clone(),
                    _ => OpId::mint(self.rng.entropy20()),
                };
                let resumed = inst.gate.state() == GateState::Frozen
                    && inst.gate.op().is_some_and(|o| o.op_id() == &op_id);
                if self.config.broken == Some(Broken::ReopenWithoutRevoke) && self.rng.chance(300) {
                    (Job::BrokenBarrier, i)
                } else {
                    let serving = self.rng.chance(80);
                    (
                        Job::Register {
                            op_id,
                            resumed,
                            serving,
                        },
                        i,
                    )
                }
            }
            Role::Minter => {
                let i = self.rng.index(n);
                let rows = self.instances.get(i).map_or(0, |s| s.staged);
                if rows >= FAMILY_MAX {
                    return Ok(None);
                }
                if let Some(inst) = self.instances.get_mut(i) {
                    inst.staged += 1;
                }
                let grants = self.instances.get(i).map_or(0, |s| s.grants.len());
                if grants > 0 && self.rng.chance(600) {
                    let pick = if self.rng.chance(650) {
                        grants - 1
                    } else {
                        self.rng.index(grants)
                    };
                    let grant = self
                        .instances
                        .get(i)
                        .and_then(|s| s.grants.get(pick))
                        .cloned();
                    match grant {
                        Some(grant) => (self.serve_mint_job(i, grant), i),
                        None => return Ok(None),
                    }
                } else {
                    (self.sibling_mint_job(i)?, i)
                }
            }
            Role::Zombie(_) => return Ok(None),
            // The plane process (re)starts: its previous run crashed, failed, or completed and
            // the plane then stopped. Either way that run is over, so a resume never runs beside
            // a live executor of its op id.
            Role::Plane(p) => {
                self.stats.plane_starts += 1;
                (Job::PlaneObserve, self.plane_instance(p))
            }
            Role::Deregistrar => (Job::Deregister, self.rng.index(n)),
            Role::Reconciler(i) => (Job::Reconcile, i),
            Role::StatusWriter => {
                let i = self.rng.index(n);
                let grants = self
                    .instances
                    .get(i)
                    .map_or(&[][..], |s| s.grants.as_slice());
                let Some(grant) = self.rng.pick(grants).cloned() else {
                    return Ok(None);
                };
                (Job::Status { grant }, i)
            }
        };
        self.launch(job, i).map(Some)
    }

    /// Builds the machine for a plane job on plane `p`'s instance.
    fn plane_machine(&mut self, job: &Job, p: usize) -> Result<SimMachine, Violation> {
        let no_plane = || Violation::new("sim", format!("no plane {p}"));
        Ok(match job {
            Job::PlaneObserve => {
                let gate = self
                    .fixture
                    .planes
                    .get(p)
                    .ok_or_else(no_plane)?
                    .gate
                    .clone();
                machines::erase(ObserveGate { gate }, |o| o)
            }
            Job::PlaneRecord { .. } | Job::PlaneClear => Box::new(Local),
            Job::Plane { op_id, resumed } => {
                if *resumed {
                    self.stats.plane_resumes += 1;
                }
                let ceremony = self.fixture.plane(p, op_id.clone()).ok_or_else(no_plane)?;
                machines::erase(ceremony, Outcome::Registered)
            }
            _ => {
                return Err(Violation::new(
                    "sim",
                    format!("{} is no plane job", job.label()),
                ))
            }
        })
    }

    /// Builds the machine for `job` on instance `i`.
    fn launch(&mut self, job: Job, i: usize) -> Result<Flight, Violation> {
        if let Some(p) = self.plane_of(i) {
            let machine = self.plane_machine(&job, p)?;
            return Ok(self.flight(job, i, machine));
        }
        let (Some(inst), Some(fx)) = (self.instances.get_mut(i), self.fixture.instance(i)) else {
            return Err(Violation::new("sim", format!("no instance {i}")));
        };
        let gate = fx.gate.clone();
        let machine: SimMachine = match &job {
            Job::Register {
                op_id,
                resumed,
                serving,
            } => {
                inst.down = false;
                inst.op = Some(op_id.clone());
                if *resumed {
                    self.stats.resumes += 1;
                }
                let surface = if self.settling {
                    Surface::Extended
                } else {
                    match self.rng.below(10) {
                        0..=5 => Surface::Default,
                        6..=8 => Surface::Extended,
                        _ => Surface::Stripped,
                    }
                };
                let spec = self.fixture.spec(surface).cloned().ok_or_else(|| {
                    Violation::new("sim", format!("no spec for surface {surface:?}"))
                })?;
                let evict_max = if self.profile.evict_one_by_one {
                    1
                } else {
                    EVICT_PRINCIPALS_MAX
                };
                let register = RegisterInstance {
                    space: gate.space.clone(),
                    registrant: spec.owner().clone(),
                    spec,
                    instance: gate.instance.clone(),
                    authority: self.fixture.authority.clone(),
                    op_id: op_id.clone(),
                    evict_max,
                };
                let erased = if *serving {
                    let script = RegisterServing {
                        register,
                        status: Default::default(),
                    };
                    machines::erase(script, |s| Outcome::Serving(Box::new(s)))
                } else {
                    machines::erase(register, Outcome::Registered)
                };
                match self.config.broken {
                    Some(Broken::SkipRevoke) => Box::new(SkipRevoke(erased)),
                    _ => erased,
                }
            }
            Job::BrokenBarrier => {
                inst.down = false;
                let op_id = OpId::mint(self.rng.entropy20());
                inst.op = Some(op_id.clone());
                machines::erase(ReopenWithoutRevoke { gate, op_id }, |o| o)
            }
            Job::ServeMint { grant, id, .. } => {
                let credential = ServeCredential {
                    credential_id: id.clone(),
                    holder_actor: fx.serve.actor().clone(),
                    source_chain: vec![SourceMember::Root],
                    exp: fixture::EXP,
                };
                machines::erase(
                    FinalizeServeMint {
                        gate,
                        grant: grant.clone(),
                        credential,
                    },
                    Outcome::Release,
                )
            }
            Job::SiblingMint { id, .. } => {
                let row = self.sibling_row(i, id.clone())?;
                machines::erase(SiblingMint { gate, row }, Outcome::Release)
            }
            Job::Deregister => machines::erase(Deregister { gate }, Outcome::Deregistration),
            Job::Reconcile => {
                machines::erase(ReconcileGate { gate }, |r| Outcome::Reconciled(Box::new(r)))
            }
            Job::Grant { epoch } => machines::erase(
                AuthorizeServeGrant {
                    gate,
                    epoch: *epoch,
                    holder: self.fixture.owner.clone(),
                    authority: self.fixture.authority.clone(),
                },
                |g| Outcome::Grant(Box::new(g)),
            ),
            Job::Status { grant } => {
                let grant = grant.clone();
                if self.config.broken == Some(Broken::StaleReady) {
                    machines::erase(
                        UnfencedReady {
                            gate,
                            epoch: grant.epoch,
                            observed_spec_revision: grant.registration_revision.0,
                        },
                        |o| o,
                    )
                } else {
                    let text = machines::ready_status(grant.epoch, grant.registration_revision.0);
                    let status = canon::parse_strict(&text)
                        .map_err(|e| Violation::new("sim", e.to_string()))?;
                    machines::erase(
                        WriteStatus {
                            endpoint: gate.endpoint.clone(),
                            instance: gate.instance.clone(),
                            gate,
                            epoch: grant.epoch,
                            status,
                            expected_status_revision: None,
                            supervisor: false,
                        },
                        Outcome::Status,
                    )
                }
            }
            Job::PlaneObserve | Job::PlaneRecord { .. } | Job::Plane { .. } | Job::PlaneClear => {
                return Err(Violation::new(
                    "sim",
                    format!("{} on instance {i}, which is no plane's", job.label()),
                ))
            }
        };
        Ok(self.flight(job, i, machine))
    }

    /// A new flight of `job` on instance `i`.
    fn flight(&mut self, job: Job, i: usize, machine: SimMachine) -> Flight {
        self.flights += 1;
        let id = self.flights;
        let detail = match &job {
            Job::Register { op_id, serving, .. } => format!("op {op_id} serving {serving}"),
            Job::PlaneRecord { op_id } => format!("op {op_id}"),
            Job::Plane { op_id, resumed } => format!("op {op_id} resumed {resumed}"),
            Job::Grant { epoch } => format!("epoch {epoch}"),
            Job::ServeMint { grant, .. } | Job::Status { grant } => {
                format!("grant e{} r{}", grant.epoch, grant.registration_revision)
            }
            _ => String::new(),
        };
        self.note(format!(
            "start {}#{id} on instance {i} {detail}",
            job.label()
        ));
        Flight {
            id,
            job,
            instance: i,
            machine,
            pending: None,
            notes: Notes::default(),
        }
    }

    /// The credential id of the next mint: unique per seed and mint.
    fn next_credential_id(&mut self) -> CredentialId {
        self.minted += 1;
        let text = format!("cotal-sim-{}-{}", self.seed, self.minted);
        CredentialId::from_sha256_hex(Digest::of(text.as_bytes()).as_bytes())
    }

    fn serve_mint_job(&mut self, i: usize, grant: ServeGrant) -> Job {
        let id = self.next_credential_id();
        let row_key = self.fixture.instance(i).map_or_else(String::new, |fx| {
            keys::epcred(&fx.gate.endpoint, &fx.gate.instance, &id)
        });
        Job::ServeMint { grant, id, row_key }
    }

    fn sibling_mint_job(&mut self, i: usize) -> Result<Job, Violation> {
        let id = self.next_credential_id();
        let row_key = self.sibling_row(i, id.clone())?.key();
        Ok(Job::SiblingMint { id, row_key })
    }

    /// The sibling credential `id` of instance `i`, as its ledger row.
    fn sibling_row(&self, i: usize, id: CredentialId) -> Result<LedgerRow, Violation> {
        let fx = self
            .fixture
            .instance(i)
            .ok_or_else(|| Violation::new("sim", format!("no instance {i}")))?;
        LedgerRow::endpoint_active(
            fx.gate.endpoint.clone(),
            &fx.gate.instance,
            id,
            fx.sibling.clone(),
            vec![SourceMember::Root],
            fixture::EXP,
        )
        .map_err(|e| Violation::new("sim", e.to_string()))
    }

    // ---- effects ------------------------------------------------------------------------------

    /// Executes one effect for `flight`, with the checks due at that exact moment.
    fn perform(
        &mut self,
        a: usize,
        flight: &mut Flight,
        effect: &Effect,
    ) -> Result<Observation, Violation> {
        let tag = Tag {
            actor: a,
            label: flight.job.label(),
            flight: flight.id,
        };
        flight.notes.committed_write = false;
        match effect {
            Effect::Kv(request) => self.perform_kv(tag, flight, request),
            Effect::Evict(holders) => {
                let verdicts: Vec<bool> = holders
                    .iter()
                    .map(|_| self.settling || !self.rng.chance(self.profile.evict_fail))
                    .collect();
                // Credentials are released only while the gate is open, so every credential
                // known now predates the current freeze and dies with this eviction.
                if let Some(inst) = self.instances.get_mut(flight.instance) {
                    if inst.gate.state() == GateState::Frozen {
                        for (holder, _) in holders.iter().zip(&verdicts).filter(|(_, &v)| v) {
                            inst.evicted.insert(holder.clone());
                            for c in inst.credentials.iter_mut().filter(|c| c.holder == *holder) {
                                c.evicted = true;
                            }
                        }
                    }
                }
                if verdicts.iter().any(|v| !v) {
                    flight.notes.evict_failed = true;
                    self.stats.failed_evictions += 1;
                }
                self.note(format!("{tag} evict {holders:?} -> {verdicts:?}"));
                Ok(Observation::Evicted(verdicts))
            }
            Effect::Probe(holder) => {
                let liveness = self.oracle(flight.instance);
                flight.notes.probe = Some(liveness);
                flight.notes.stale_at_probe = self
                    .instances
                    .get(flight.instance)
                    .is_some_and(|s| Some(s.gate_revision) != flight.notes.first_gate_read);
                if liveness == Liveness::Gone {
                    if let Some(inst) = self.instances.get_mut(flight.instance) {
                        inst.reconciling = true;
                    }
                }
                self.note(format!("{tag} probe {holder} -> {liveness:?}"));
                Ok(Observation::Probed(liveness))
            }
            Effect::ReadArtifact(_)
            | Effect::Reads(_)
            | Effect::Actors(_)
            | Effect::Durables(_)
            | Effect::ProbePlane(_) => {
                let observation = self.world.perform(effect);
                self.world.log.clear();
                Ok(observation)
            }
            Effect::Sleep(_) => Ok(Observation::Slept),
        }
    }

    /// The scripted liveness oracle: `gone` only for a dead holder (and not always), `live`
    /// (or sometimes `unknown`) for a running one.
    fn oracle(&mut self, i: usize) -> Liveness {
        let dead = self.holder_dead(i);
        if dead && (self.settling || self.rng.chance(self.profile.gone)) {
            Liveness::Gone
        } else if dead {
            if self.rng.chance(500) {
                Liveness::Unknown
            } else {
                Liveness::Unestablishable
            }
        } else if self.rng.chance(900) {
            Liveness::Live
        } else {
            Liveness::Unknown
        }
    }

    /// True when instance `i`'s holder process is down and neither its registrant nor a zombie
    /// predecessor is running.
    fn holder_dead(&self, i: usize) -> bool {
        let running = self.actors.iter().any(|a| {
            matches!(a.role, Role::Registrant(j) | Role::Zombie(j) if j == i) && a.flight.is_some()
        });
        !running && self.instances.get(i).is_some_and(|s| s.down)
    }

    fn perform_kv(
        &mut self,
        tag: Tag,
        flight: &mut Flight,
        request: &KvRequest,
    ) -> Result<Observation, Violation> {
        let target = self.instance_of_key(request.store(), request.key());
        self.before_kv(flight, request, target)?;
        let store = request.store();
        let sequence = self.world.kv.last_sequence(store);
        let gate_before = match (target, request) {
            (Some((j, KeyKind::Gate)), KvRequest::Update { .. }) => self
                .instances
                .get(j)
                .and_then(|s| self.world.kv.get(Store::Auth, &s.gate_key)),
            _ => None,
        };
        let frozen_before = flight.notes.froze;
        let outcome = self.world.kv.execute(request);
        let committed = self.world.kv.last_sequence(store) > sequence;
        flight.notes.committed_write = committed && request.is_write();
        if matches!(outcome, KvOutcome::Ambiguous(_) | KvOutcome::Unavailable(_)) {
            flight.notes.saw_fault = true;
            if frozen_before && target == Some((flight.instance, KeyKind::Gate)) {
                flight.notes.gate_fault_after_freeze = true;
            }
        }
        match (target, request, &outcome) {
            (Some((j, KeyKind::Family)), KvRequest::Keys { .. }, _) if j == flight.instance => {
                flight.notes.phase2 = true;
            }
            (Some((j, KeyKind::Gate)), KvRequest::Get { .. }, KvOutcome::Entry(Some(e)))
                if j == flight.instance =>
            {
                let gate = EndpointGate::parse(&e.value).ok();
                let n = &mut flight.notes;
                if n.first_gate_read.is_none() {
                    n.first_gate_read = Some(e.revision);
                    let frozen_by = gate
                        .as_ref()
                        .filter(|g| g.state() == GateState::Frozen)
                        .and_then(EndpointGate::op);
                    let resumes = match (flight.job.registers_as(), frozen_by) {
                        (Some(op_id), Some(op)) => {
                            op.kind() == OpKind::Registration && op.op_id() == op_id
                        }
                        _ => false,
                    };
                    if resumes {
                        n.freeze = Some(e.revision);
                    }
                }
                n.last_gate_read = gate.map(|g| (g.state(), g.process_epoch()));
            }
            _ => {}
        }
        self.trace_line(Line::Kv {
            tag,
            request: request.clone(),
            outcome: outcome.clone(),
            committed: committed && request.is_write(),
        });
        if committed {
            self.after_commit(flight, request, target, gate_before)?;
        }
        Ok(Observation::Kv(outcome))
    }

    /// Which instance key (if any) a request addresses.
    fn instance_of_key(&self, store: Store, key: &str) -> Option<(usize, KeyKind)> {
        self.instances
            .iter()
            .enumerate()
            .find_map(|(j, s)| match store {
                Store::Auth if key == s.gate_key => Some((j, KeyKind::Gate)),
                Store::Auth if key.starts_with(&s.family_prefix) => Some((j, KeyKind::Family)),
                Store::Records if key == s.spec_key => Some((j, KeyKind::Spec)),
                Store::Records if key == s.status_key => Some((j, KeyKind::Status)),
                _ => None,
            })
    }

    // ---- ends of flights ----------------------------------------------------------------------

    fn finish(
        &mut self,
        a: usize,
        flight: Flight,
        result: Result<Outcome, EpError>,
    ) -> Result<(), Violation> {
        let summary = match &result {
            Ok(outcome) => format!("ok {}", brief_output(outcome)),
            Err(e) => format!("ERR {}: {}", e.code, first_line(&e.message)),
        };
        self.note(format!(
            "a{a} {}#{} done: {summary}",
            flight.job.label(),
            flight.id
        ));
        let last = result.as_ref().map(|_| ()).map_err(Clone::clone);
        let next = self.judge(&flight, result)?;
        let next = match next {
            Some(job) => Some(self.launch(job, flight.instance)?),
            None => None,
        };
        if let Some(actor) = self.actors.get_mut(a) {
            actor.last = Some(last);
            // A chained step keeps the actor busy: the serving process is still running.
            actor.flight = next;
        }
        Ok(())
    }
}

/// Who performed an effect, for the trace.
#[derive(Debug, Clone, Copy)]
struct Tag {
    actor: usize,
    label: &'static str,
    flight: u64,
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a{} {}#{}", self.actor, self.label, self.flight)
    }
}

/// One trace entry. KV lines keep the request and outcome and are rendered only when a failure
/// is printed: formatting (and parsing gate rows for it) on every step would cost more than the
/// step itself.
enum Line {
    Text(String),
    Kv {
        tag: Tag,
        request: KvRequest,
        outcome: KvOutcome,
        committed: bool,
    },
}

impl Line {
    fn render(&self) -> String {
        match self {
            Line::Text(text) => text.clone(),
            Line::Kv {
                tag,
                request,
                outcome,
                committed,
            } => format!(
                "{tag} {} -> {}{}",
                brief_request(request),
                brief_outcome(outcome),
                if *committed { " [committed]" } else { "" }
            ),
        }
    }
}

/// Which kind of instance key a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Gate,
    Family,
    Spec,
    Status,
}

impl HeadTracker {
    fn new(key: String) -> HeadTracker {
        HeadTracker {
            key,
            binding: Vec::new(),
            revision: Revision(0),
        }
    }
}

impl Actor {
    fn new(role: Role) -> Actor {
        Actor {
            role,
            flight: None,
            last: None,
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn brief_request(r: &KvRequest) -> String {
    let short = |key: &str| -> String { key.chars().take(72).collect() };
    match r {
        KvRequest::Get { store, key } => format!("get {store:?} {}", short(key)),
        KvRequest::GetFirst { store, key } => format!("get-first {store:?} {}", short(key)),
        KvRequest::Create { store, key, value } => {
            format!("create {store:?} {}{}", short(key), brief_value(key, value))
        }
        KvRequest::CreateStrict { store, key, value } => {
            format!(
                "create! {store:?} {}{}",
                short(key),
                brief_value(key, value)
            )
        }
        KvRequest::Update {
            store,
            key,
            value,
            expected,
        } => format!(
            "update {store:?} {}@{expected}{}",
            short(key),
            brief_value(key, value)
        ),
        KvRequest::Delete {
            store,
            key,
            expected,
        } => format!("delete {store:?} {}@{expected}", short(key)),
        KvRequest::Keys { store, prefix } => format!("keys {store:?} {}", short(prefix)),
    }
}

/// A few words about a written value: a gate's state and coordinates, a row's state.
fn brief_value(key: &str, value: &[u8]) -> String {
    if key.starts_with("epgate.") {
        if let Ok(g) = EndpointGate::parse(value) {
            let c = g.coordinates();
            return format!(
                " ({} g{} e{} r{})",
                g.state().as_str(),
                c.generation,
                c.process_epoch,
                c.registration_revision
            );
        }
    }
    if key.starts_with("epcred.") {
        if let Ok(row) = LedgerRow::parse(value, key) {
            return format!(" ({})", row.state().as_str());
        }
    }
    String::new()
}

fn brief_outcome(o: &KvOutcome) -> String {
    match o {
        KvOutcome::Entry(Some(e)) => format!("rev {} {}", e.revision, e.operation.as_str()),
        KvOutcome::Entry(None) => "absent".into(),
        KvOutcome::Written(r) => format!("written {r}"),
        KvOutcome::CasLost => "CAS lost".into(),
        KvOutcome::Keys(k) => format!("{} keys", k.len()),
        KvOutcome::Unavailable(_) => "UNAVAILABLE".into(),
        KvOutcome::Ambiguous(_) => "AMBIGUOUS".into(),
    }
}

fn brief_output(o: &Outcome) -> String {
    match o {
        Outcome::Registered(r) => format!(
            "registered g{} e{} r{}",
            r.generation, r.process_epoch, r.registration_revision
        ),
        Outcome::Grant(g) => format!(
            "grant e{} r{}",
            g.grant.epoch, g.grant.registration_revision
        ),
        Outcome::Serving(s) => format!(
            "registered g{} e{} r{}",
            s.registered.generation, s.registered.process_epoch, s.registered.registration_revision
        ),
        Outcome::Release(r) => format!("released {}", r.row_key),
        Outcome::Deregistration(d) => format!("{d:?}"),
        Outcome::Reconciled(r) => format!(
            "reconciled to g{} (completed: {})",
            r.after.generation, r.completed_registration
        ),
        Outcome::Status(r) => format!("status at {r}"),
        Outcome::Barrier => "barrier".into(),
        Outcome::Observed(Some(g)) => format!(
            "observed {} g{} e{}{}",
            g.state().as_str(),
            g.generation(),
            g.process_epoch(),
            g.op()
                .map_or_else(String::new, |o| format!(" by {}", o.op_id()))
        ),
        Outcome::Observed(None) => "observed no gate".into(),
        Outcome::Local => "local".into(),
    }
}
