//! Crash-safe self-registration on the KV model. The plane's own `auth` instance and a host
//! incarnation register through the shared self-authorized ceremony, the process dies after
//! every possible number of effects, and a restart applies the restart rule ([`resumed_op`]:
//! resume the recorded op id exactly when the gate is still frozen by it, else take a fresh one).
//! Whatever the crash left behind, the restart must come up (F14: a retry of the same operation
//! finishes its own freeze) at exactly the epoch the completed registrations add up to (F69: the
//! first commits epoch 0, each later one the previous + 1).
//!
//! The durable op record is a [`Record`] the test keeps across "processes": written before the
//! ceremony (so before its freeze), cleared only after a completed run.
//!
//! The single-crash sweeps run every interrupted attempt for real. The lost-reply and
//! double-crash sweeps cover every kill point too, but rebuild each crash state by replaying a
//! prefix of the uninterrupted run's effects (runs are deterministic, so an attempt cut after k
//! effects performed exactly the first k), and restart once per distinct durable state: a
//! restart's outcome is a function of what the store holds and of the op record.
//! `CRASH_TRACE=1` prints every effect with its outcome.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use common::ceremony::{command, document};
use common::{op, IID};
use cotal_core::barrier;
use cotal_core::driver::{ModelWorld, World};
use cotal_core::gate::{EndpointGate, GateOp, GateState, OpKind, ProcessEpoch};
use cotal_core::host::{
    auth_instance, resumed_op, HostConfig, HostEndpoint, RegisterHostIncarnation,
    SelfAuthorizedInstance, SelfContract,
};
use cotal_core::issuance::{observe_gate, GateObservation, GateRef};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, KvRequest, Store};
use cotal_core::machine::{Ctx, Effect, Halt, Machine, Replay, Script, Step};
use cotal_core::names::{keys, InstanceId, OpId, SpaceName};
use cotal_core::{EpError, ErrorCode};
use nkeys::{KeyPair, KeyPairType};

const SPACE: &str = "s1";
const HOST: &str = "com.example.host";
/// A second plane of the same space: its own `auth` instance shares the endpoint's governance
/// head with the first.
const PEER_IID: &str = "pppppppppppppppppppppppppp";

/// The op id the crashed first attempt recorded.
fn op_a() -> OpId {
    op(1)
}

/// The op id of the registration that ran to completion before the crashed attempt.
fn op_prior() -> OpId {
    op(7)
}

/// A barrier the restarting process never recorded.
fn op_foreign() -> OpId {
    op(9)
}

fn tracing() -> bool {
    std::env::var_os("CRASH_TRACE").is_some()
}

fn space() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn instance() -> InstanceId {
    InstanceId::parse(IID).unwrap()
}

fn serve_key() -> String {
    KeyPair::new_from_raw(KeyPairType::User, [9; 32])
        .unwrap()
        .public_key()
}

fn host() -> HostConfig {
    let doc = document(HOST, vec![command("work", "ephemeral", &[])]);
    HostConfig {
        space: space(),
        endpoint: HostEndpoint::parse(HOST).unwrap(),
        contract: SelfContract::from_cluster(&doc).unwrap(),
    }
}

/// Which self-registering process is under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    /// The plane's own `auth` instance ([`auth_instance`]).
    Plane,
    /// A platform host's incarnation ([`RegisterHostIncarnation`]).
    Host,
}

impl Subject {
    fn gate(self) -> GateRef {
        match self {
            Subject::Plane => GateRef::new(
                space(),
                cotal_core::names::EndpointName::parse(cotal_core::host::AUTH_ENDPOINT).unwrap(),
                instance(),
            ),
            Subject::Host => host().gate(&instance()),
        }
    }

    /// One start of the process under `op_id`, as a machine.
    fn start(self, op_id: OpId) -> Replay<Start> {
        Replay::new(match self {
            Subject::Plane => Start::Plane(plane(&instance(), op_id)),
            Subject::Host => Start::Host(RegisterHostIncarnation {
                host: host(),
                instance: instance(),
                op_id,
            }),
        })
    }
}

fn plane(instance: &InstanceId, op_id: OpId) -> SelfAuthorizedInstance {
    auth_instance(&space(), instance, &serve_key(), op_id).unwrap()
}

/// One start of either ceremony, answering the epoch it committed.
enum Start {
    Plane(SelfAuthorizedInstance),
    Host(RegisterHostIncarnation),
}

impl Script for Start {
    type Output = ProcessEpoch;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<ProcessEpoch, Halt> {
        match self {
            Start::Plane(ceremony) => ceremony.run(cx).map(|r| r.process_epoch),
            Start::Host(start) => start.run(cx).map(|h| h.process_epoch),
        }
    }
}

// ---- reading the world (straight from the model, not through the code under test) --------------

fn stored(world: &ModelWorld, subject: Subject) -> Option<EndpointGate> {
    let entry = world.kv.get(Store::Auth, &subject.gate().key())?;
    Some(EndpointGate::parse(&entry.value).unwrap())
}

fn frozen_by(world: &ModelWorld, subject: Subject, op_id: &OpId) -> bool {
    stored(world, subject).is_some_and(|g| {
        g.state() == GateState::Frozen
            && g.op()
                .is_some_and(|o| o.kind() == OpKind::Registration && o.op_id() == op_id)
    })
}

/// The registration revision the gate stands at (0 before any registration). Only a completing
/// reopen moves it (an abort-reopen keeps it; Q-13 moves only the generation), so a change tells
/// a completed registration from an aborted or interrupted one.
fn registration_revision(world: &ModelWorld, subject: Subject) -> u64 {
    stored(world, subject).map_or(0, |g| g.registration_revision().0)
}

fn describe(world: &ModelWorld, subject: Subject) -> String {
    stored(world, subject).map_or_else(|| "absent".into(), |g| g.to_json())
}

// ---- running a process that may die --------------------------------------------------------

/// How a run that may be cut short ended.
#[derive(Debug)]
enum Ended {
    /// The process died after its budget of effects; its machine was dropped unfinished.
    Crashed,
    /// The ceremony finished within the budget.
    Done(Result<ProcessEpoch, EpError>),
}

/// A lost reply on one effect of a run: the effect at index `at` is a KV write, and the model
/// answers it `Ambiguous` with the write committed (`applied`) or not.
#[derive(Debug, Clone, Copy)]
struct Lost {
    at: usize,
    applied: bool,
}

/// Runs `machine` until it finishes or `budget` effects have been performed, whichever comes
/// first; at the budget the process dies.
fn run_for<M: Machine<Output = ProcessEpoch>>(
    world: &mut ModelWorld,
    machine: &mut M,
    budget: usize,
    lost: Option<Lost>,
) -> Ended {
    let mut observation = None;
    let mut performed = 0;
    loop {
        match machine.step(observation.take()) {
            Step::Done(result) => return Ended::Done(result),
            Step::Effect(_) if performed == budget => return Ended::Crashed,
            Step::Effect(effect) => {
                let lost_here = lost.filter(|l| l.at == performed);
                if let Some(lost) = lost_here {
                    let Effect::Kv(request) = &effect else {
                        panic!("effect {performed} is not a KV write: {effect:?}")
                    };
                    assert!(request.is_write(), "effect {performed} is a read");
                    // Scheduled right before the request, so this request is its next match.
                    let fault = if lost.applied {
                        Fault::AmbiguousApplied
                    } else {
                        Fault::AmbiguousNotApplied
                    };
                    world.kv.inject(
                        Trigger::new(request.store(), request.op(), request.key()),
                        fault,
                    );
                }
                let seen = world.perform(&effect);
                if lost_here.is_some() {
                    assert_eq!(world.kv.pending_faults(), 0, "the lost reply never fired");
                }
                if tracing() {
                    eprintln!("  [{performed}] {effect:?}\n      -> {seen:?}");
                }
                observation = Some(seen);
                performed += 1;
            }
        }
    }
}

/// The effects of one clean, uninterrupted start on `world`.
fn clean_effects(world: &mut ModelWorld, subject: Subject, op_id: OpId) -> Vec<Effect> {
    let from = world.log.len();
    match run_for(world, &mut subject.start(op_id), usize::MAX, None) {
        Ended::Done(Ok(_)) => {}
        other => panic!("a clean start did not complete: {other:?}"),
    }
    world.log[from..].to_vec()
}

/// A fresh world holding exactly what `effects` wrote. The model is deterministic, so applying
/// the same requests in order reproduces every revision; only fault-free histories are replayed.
fn replayed(effects: &[Effect]) -> ModelWorld {
    let mut world = ModelWorld::default();
    for effect in effects {
        if let Effect::Kv(request) = effect {
            world.kv.apply(request);
        }
    }
    world
}

/// The effects of one completed registration under `op_prior` on a virgin space, computed once
/// per subject (a ceremony costs milliseconds in debug; thousands of kill points start from it).
fn registered_history(subject: Subject) -> &'static [Effect] {
    static PLANE: OnceLock<Vec<Effect>> = OnceLock::new();
    static HOST_: OnceLock<Vec<Effect>> = OnceLock::new();
    let cell = match subject {
        Subject::Plane => &PLANE,
        Subject::Host => &HOST_,
    };
    cell.get_or_init(|| clean_effects(&mut ModelWorld::default(), subject, op_prior()))
}

/// The world a crashed attempt starts from: a virgin space (first start), or one where
/// `op_prior` already registered the instance (a restart of a registered instance, epoch 0).
fn world_for(registered: bool, subject: Subject) -> ModelWorld {
    if !registered {
        return ModelWorld::default();
    }
    let world = replayed(registered_history(subject));
    assert_eq!(stored(&world, subject).unwrap().process_epoch().0, 0);
    world
}

// ---- the restart rule --------------------------------------------------------------------------

/// The durable op record of one process across its restarts.
#[derive(Debug, Default)]
struct Record(Option<OpId>);

/// What a restart decided before it ran the ceremony.
#[derive(Debug)]
struct Decision {
    /// The gate as the restart observed it.
    observed: Option<GateObservation>,
    /// `Some(recorded)` when it resumed.
    resumed: Option<OpId>,
    /// The op id it runs under.
    op_id: OpId,
}

/// A restart's first steps: observe the gate, apply [`resumed_op`], and write the record of the
/// op it runs under — unless it dies between the observation and the record write
/// (`write_record` false), which leaves the old record in place.
fn decide(
    world: &mut ModelWorld,
    subject: Subject,
    record: &mut Record,
    fresh: OpId,
    write_record: bool,
) -> Decision {
    let gate = subject.gate();
    let observed = common::run(
        world,
        common::Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &gate)),
    )
    .unwrap();
    let resumed = resumed_op(observed.as_ref().map(|o| &o.gate), record.0.as_ref());
    let op_id = resumed.clone().unwrap_or(fresh);
    if write_record {
        record.0 = Some(op_id.clone());
    }
    Decision {
        observed,
        resumed,
        op_id,
    }
}

/// A restart that runs to completion; a completed run clears the record.
fn restart(
    world: &mut ModelWorld,
    subject: Subject,
    record: &mut Record,
    fresh: OpId,
) -> (Decision, Result<ProcessEpoch, EpError>) {
    let decision = decide(world, subject, record, fresh, true);
    let mut machine = subject.start(decision.op_id.clone());
    let Ended::Done(result) = run_for(world, &mut machine, usize::MAX, None) else {
        unreachable!("an unbounded run does not crash")
    };
    if result.is_ok() {
        record.0 = None;
    }
    (decision, result)
}

/// Checks a restart against the gate the crash left: it resumed exactly when the gate stood
/// frozen by the recorded op, came up, and left the gate open, without an op, at
/// `expected_epoch`. A restart that did not come up is the `Err` (the sweeps collect them, so
/// one run names every such kill point); anything else wrong panics at once.
fn came_up(
    world: &ModelWorld,
    subject: Subject,
    what: &str,
    frozen_by_recorded: Option<&OpId>,
    decision: &Decision,
    result: Result<ProcessEpoch, EpError>,
    expected_epoch: u64,
) -> Result<(), String> {
    assert_eq!(
        decision.resumed.as_ref(),
        frozen_by_recorded,
        "{what}: the restart resumes exactly when the gate is frozen by the recorded op (saw \
         {:?})",
        decision.observed.as_ref().map(|o| o.gate.to_json())
    );
    let epoch = result.map_err(|e| {
        format!(
            "{what}: the restart under {} (resumed: {}) did not come up: {e}; the gate is now {}",
            decision.op_id,
            decision.resumed.is_some(),
            describe(world, subject)
        )
    })?;
    let gate = stored(world, subject).unwrap();
    assert_eq!(gate.state(), GateState::Open, "{what}");
    assert!(gate.op().is_none(), "{what}: an open gate carries no op");
    assert_eq!(gate.process_epoch().0, expected_epoch, "{what}: gate epoch");
    assert_eq!(
        epoch.0, expected_epoch,
        "{what}: the epoch the restart committed"
    );
    Ok(())
}

/// Fails naming every kill point whose restart did not come up.
fn assert_all_came_up(what: &str, stuck: &[String]) {
    assert!(
        stuck.is_empty(),
        "{what}: {} kill points left a restart that could not come up:\n{}",
        stuck.len(),
        stuck.join("\n")
    );
}

/// Tallies over one sweep, so no test passes on a sweep that never reached a branch.
#[derive(Debug, Default)]
struct Tally {
    kill_points: usize,
    /// Kill points whose restart actually ran: the others reached a durable state (and record)
    /// an earlier kill point already restarted from, whose outcome the restart would repeat.
    restarted: usize,
    /// The crash left the gate frozen by A, so the restart resumed A.
    resumed: usize,
    /// A's registration completed (its reopen landed) before the crash.
    landed: usize,
    /// The restart took a fresh op (no gate, an open gate, or A never froze).
    fresh: usize,
    /// Kill points after which the restart could not come up.
    stuck: Vec<String>,
    /// Restart once per distinct durable state (the fingerprints seen so far), or at every kill
    /// point when `None`.
    seen: Option<BTreeSet<String>>,
}

impl Tally {
    fn assert_covered(&self, what: &str) {
        println!(
            "{what}: {} kill points ({} distinct durable states restarted); {} left the gate \
             frozen by A (resumed), {} came after A's reopen landed, {} restarts took a fresh op",
            self.kill_points, self.restarted, self.resumed, self.landed, self.fresh
        );
        assert_all_came_up(what, &self.stuck);
        assert!(self.kill_points > 10, "{what}: only {self:?}");
        assert!(self.resumed > 0, "{what}: no crash left the gate frozen");
        assert!(self.landed > 0, "{what}: no crashed attempt completed");
        assert!(self.fresh > 0, "{what}: no fresh restart");
    }
}

/// Everything durable the model holds: per store, its last sequence and every key's last
/// message. Two worlds with the same fingerprint answer every request alike (the model consults
/// nothing else), so a restart's outcome is a function of the fingerprint and the op record.
fn fingerprint(world: &ModelWorld) -> String {
    let mut out = String::new();
    for store in [
        Store::Auth,
        Store::Records,
        Store::Admission,
        Store::Contracts,
    ] {
        out.push_str(&format!("{store:?}@{}:", world.kv.last_sequence(store).0));
        for key in world.kv.keys(store, "") {
            out.push_str(&format!("{:?};", world.kv.get(store, &key)));
        }
    }
    out
}

/// What a crash of attempt A (op A recorded) left: the world, and whether A's registration
/// completed before it died.
struct Crashed {
    world: ModelWorld,
    landed: bool,
    what: String,
}

/// The restart after one crash: it applies the rule and must come up at the epoch after the
/// prior registration (if any) and A's (if it landed): the first registration commits epoch 0,
/// every later completed one the previous + 1.
fn restart_after(subject: Subject, registered: bool, crashed: Crashed, tally: &mut Tally) {
    let Crashed {
        mut world,
        landed,
        what,
    } = crashed;
    tally.kill_points += 1;
    if let Some(seen) = &mut tally.seen {
        if !seen.insert(fingerprint(&world)) {
            return;
        }
    }
    tally.restarted += 1;
    let frozen = frozen_by(&world, subject, &op_a());
    let after_crash = registration_revision(&world, subject);
    let mut record = Record(Some(op_a()));
    let (decision, result) = restart(&mut world, subject, &mut record, op(2));
    let expected = u64::from(registered) + u64::from(landed);
    let up = came_up(
        &world,
        subject,
        &what,
        frozen.then_some(&op_a()),
        &decision,
        result,
        expected,
    );
    tally.resumed += usize::from(frozen);
    tally.landed += usize::from(landed);
    tally.fresh += usize::from(!frozen);
    match up {
        Ok(()) => {
            assert_ne!(
                registration_revision(&world, subject),
                after_crash,
                "{what}: the restart completed a registration of its own"
            );
            assert!(
                record.0.is_none(),
                "{what}: a completed restart clears the record"
            );
        }
        Err(stuck) => tally.stuck.push(stuck),
    }
}

/// A finished attempt (its process then died before clearing its record) succeeded exactly
/// when its registration landed; a lost reply may make it refuse (an ambiguous slot-take
/// aborts), a clean run never does.
fn assert_finished(what: &str, result: &Result<ProcessEpoch, EpError>, landed: bool, clean: bool) {
    assert_eq!(
        result.is_ok(),
        landed,
        "{what}: a finished attempt succeeds iff it completed: {result:?}"
    );
    assert!(
        !clean || result.is_ok(),
        "{what}: a clean attempt failed: {result:?}"
    );
}

// ---- one crash ---------------------------------------------------------------------------------

/// Attempt A dies after exactly k effects, for every k = 0, 1, … until it finishes within k
/// (that last kill point is a completed attempt whose process died before clearing its record);
/// after each, a restart must come up.
fn crash_at_every_step(subject: Subject) {
    for registered in [false, true] {
        // Every kill point restarts: each is its own interrupted run.
        let mut tally = Tally::default();
        let base: Vec<Effect> = if registered {
            registered_history(subject).to_vec()
        } else {
            Vec::new()
        };
        let clean_run = clean_effects(&mut replayed(&base), subject, op_a());
        for k in 0.. {
            let mut world = world_for(registered, subject);
            let before = registration_revision(&world, subject);
            let ended = run_for(&mut world, &mut subject.start(op_a()), k, None);
            // The crash: the machine is gone; the world and the record are what is left.
            let landed = registration_revision(&world, subject) != before;
            // The other sweeps rebuild crash states from prefixes of an uninterrupted run;
            // this interrupted run shows that prefix holds exactly what it left.
            let mut prefix = base.clone();
            prefix.extend(clean_run.iter().take(k).cloned());
            assert_eq!(
                fingerprint(&replayed(&prefix)),
                fingerprint(&world),
                "{subject:?} k={k}: a prefix replay differs from the interrupted run"
            );
            let what = format!("{subject:?} registered={registered} k={k} landed={landed}");
            let finished = match &ended {
                Ended::Done(result) => {
                    assert_finished(&what, result, landed, true);
                    true
                }
                Ended::Crashed => false,
            };
            let crashed = Crashed {
                world,
                landed,
                what,
            };
            restart_after(subject, registered, crashed, &mut tally);
            if finished {
                break;
            }
            assert!(k < 10_000, "{subject:?}: the ceremony never finishes");
        }
        tally.assert_covered(&format!(
            "{subject:?} {}, a crash at every step",
            if registered { "restart" } else { "first start" }
        ));
    }
}

#[test]
fn f14_auth_instance_survives_a_crash_at_every_step() {
    crash_at_every_step(Subject::Plane);
}

#[test]
fn f14_host_incarnation_survives_a_crash_at_every_step() {
    crash_at_every_step(Subject::Host);
}

// ---- a lost reply on every write ---------------------------------------------------------------

/// The world after the first `k` effects of a run whose effect `lost.at` was answered
/// ambiguously: the run is deterministic, so an interrupted run performed exactly these; the
/// lost write committed iff `applied`.
fn replayed_with(base: &[Effect], run: &[Effect], k: usize, lost: Lost) -> ModelWorld {
    let mut world = replayed(base);
    for (i, effect) in run.iter().enumerate().take(k) {
        if let Effect::Kv(request) = effect {
            if i != lost.at || lost.applied {
                world.kv.apply(request);
            }
        }
    }
    world
}

/// Every write of the ceremony answered `Ambiguous`, committed or not, and the process dying at
/// every step after it: right after the lost reply, inside the read-back that settles it, at
/// every later step, and after the run finished (before clearing its record); then a restart.
fn lost_reply_on_every_write(subject: Subject) {
    for registered in [false, true] {
        let base: Vec<Effect> = if registered {
            registered_history(subject).to_vec()
        } else {
            Vec::new()
        };
        let before = registration_revision(&replayed(&base), subject);
        let writes: Vec<usize> = clean_effects(&mut replayed(&base), subject, op_a())
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Effect::Kv(r) if r.is_write()))
            .map(|(i, _)| i)
            .collect();
        assert!(writes.len() >= 5, "{subject:?}: writes at {writes:?}");
        let mut tally = Tally {
            seen: Some(BTreeSet::new()),
            ..Tally::default()
        };
        for &at in &writes {
            for applied in [true, false] {
                let lost = Lost { at, applied };
                // The whole run with the lost reply; each interrupted run is a prefix of it.
                let mut world = replayed(&base);
                let Ended::Done(result) = run_for(
                    &mut world,
                    &mut subject.start(op_a()),
                    usize::MAX,
                    Some(lost),
                ) else {
                    unreachable!("an unbounded run does not crash")
                };
                let run = world.log.clone();
                let finished_landed = registration_revision(&world, subject) != before;
                let what = format!("{subject:?} registered={registered} {lost:?}");
                assert_finished(&what, &result, finished_landed, false);
                for k in at + 1..=run.len() {
                    let world = replayed_with(&base, &run, k, lost);
                    let landed = registration_revision(&world, subject) != before;
                    let what = format!("{what} k={k} landed={landed}");
                    let crashed = Crashed {
                        world,
                        landed,
                        what,
                    };
                    restart_after(subject, registered, crashed, &mut tally);
                }
            }
        }
        tally.assert_covered(&format!(
            "{subject:?} registered={registered}, a lost reply on each of {} writes",
            writes.len()
        ));
    }
}

#[test]
fn f14_auth_instance_survives_a_lost_reply_on_every_write() {
    lost_reply_on_every_write(Subject::Plane);
}

#[test]
fn f14_host_incarnation_survives_a_lost_reply_on_every_write() {
    lost_reply_on_every_write(Subject::Host);
}

// ---- two crashes in a row ----------------------------------------------------------------------

/// Where the second process dies.
#[derive(Debug, Clone, Copy)]
enum Second {
    /// After its observation, before its record write (the record still names op A).
    BeforeRecord,
    /// After `j` effects of its ceremony.
    After(usize),
}

/// How a double-crash sweep went.
#[derive(Debug, Default)]
struct Pairs {
    /// (k, j) pairs covered, equivalent ones included.
    covered: usize,
    /// Pairs whose third start actually ran (distinct durable states and records).
    ran: usize,
    /// Every pair after which the third start could not come up.
    stuck: Vec<String>,
}

/// Every (k, j) pair: attempt A dies after k effects (every k up to its completion, the last
/// being a completed attempt that died before clearing its record); its restart decides
/// (resume A or fresh B) and dies between its observation and its record write, or after j
/// effects of its own run (every j); a third start applies the rule again and must come up.
///
/// A run is deterministic, so the first j effects of an interrupted run are those of its
/// uninterrupted run: each crash state is rebuilt by replaying a prefix of the uninterrupted
/// effects. Pairs whose durable state (and record) a covered pair already reached are counted
/// but not re-run: the third start would repeat that pair's outcome exactly.
fn double_crash(subject: Subject, registered: bool) -> Pairs {
    let base: Vec<Effect> = if registered {
        registered_history(subject).to_vec()
    } else {
        Vec::new()
    };
    let first_run = clean_effects(&mut replayed(&base), subject, op_a());
    let mut pairs = Pairs::default();
    let mut seen = BTreeMap::new();
    for k in 0..=first_run.len() {
        let mut after_first = base.clone();
        after_first.extend_from_slice(&first_run[..k]);
        let world = replayed(&after_first);
        let landed_first = registration_revision(&world, subject)
            != registration_revision(&replayed(&base), subject);

        // The restart's decision depends only on the world and the record (op A).
        let mut probe = replayed(&after_first);
        let decision = decide(&mut probe, subject, &mut Record(Some(op_a())), op(2), true);
        let second_run = clean_effects(&mut probe, subject, decision.op_id.clone());

        let mut seconds = vec![Second::BeforeRecord];
        seconds.extend((0..=second_run.len()).map(Second::After));
        for second in seconds {
            pairs.covered += 1;
            let (effects, recorded) = match second {
                Second::BeforeRecord => (&[][..], op_a()),
                Second::After(j) => (&second_run[..j], decision.op_id.clone()),
            };
            let mut history = after_first.clone();
            // The decision's gate read changed nothing; only the second run's effects count.
            history.extend_from_slice(effects);
            let mut world = replayed(&history);
            let what = format!("{subject:?} registered={registered} k={k} {second:?}");
            let state = (fingerprint(&world), recorded.clone());
            if let Some(outcome) = seen.get(&state) {
                // Already restarted from this very state: a stuck one is stuck here too.
                if let Some(first) = outcome {
                    pairs.stuck.push(format!("{what}: the state of {first}"));
                }
                continue;
            }
            pairs.ran += 1;
            let landed_second = registration_revision(&world, subject)
                != registration_revision(&replayed(&after_first), subject);
            let completed =
                u64::from(registered) + u64::from(landed_first) + u64::from(landed_second);
            // The process that wrote the record died; the third start resumes it iff the gate
            // stands frozen by it.
            let frozen = frozen_by(&world, subject, &recorded);
            if tracing() {
                eprintln!("-- {what}: third start");
            }
            let mut record = Record(Some(recorded.clone()));
            let (decision, result) = restart(&mut world, subject, &mut record, op(3));
            let up = came_up(
                &world,
                subject,
                &what,
                frozen.then_some(&recorded),
                &decision,
                result,
                completed,
            );
            seen.insert(state, up.as_ref().err().map(|_| what.clone()));
            if let Err(e) = up {
                pairs.stuck.push(e);
            }
        }
    }
    pairs
}

fn two_crashes_in_a_row(subject: Subject) {
    let mut stuck = Vec::new();
    for registered in [false, true] {
        let pairs = double_crash(subject, registered);
        println!(
            "{subject:?} registered={registered}, two crashes in a row: {} kill-point pairs \
             ({} distinct durable states restarted), {} stuck",
            pairs.covered,
            pairs.ran,
            pairs.stuck.len()
        );
        assert!(pairs.covered > 100 && pairs.ran > 20, "{pairs:?}");
        stuck.extend(pairs.stuck);
    }
    assert_all_came_up(&format!("{subject:?}, two crashes in a row"), &stuck);
}

#[test]
fn f14_auth_instance_survives_two_crashes_in_a_row() {
    two_crashes_in_a_row(Subject::Plane);
}

#[test]
fn f14_host_incarnation_survives_two_crashes_in_a_row() {
    two_crashes_in_a_row(Subject::Host);
}

// ---- a leftover governance slot under a resumed freeze -----------------------------------------

/// Runs `machine` until it has performed the freeze of `subject`'s gate, then kills it.
fn die_after_the_freeze(world: &mut ModelWorld, subject: Subject, op_id: OpId) {
    let key = subject.gate().key();
    let mut machine = subject.start(op_id.clone());
    let mut observation = None;
    loop {
        match machine.step(observation.take()) {
            Step::Done(result) => panic!("finished before its freeze: {result:?}"),
            Step::Effect(effect) => {
                let freeze = matches!(&effect, Effect::Kv(KvRequest::Update { key: k, .. })
                    if *k == key);
                observation = Some(world.perform(&effect));
                if freeze {
                    assert!(frozen_by(world, subject, &op_id));
                    return;
                }
            }
        }
    }
}

/// The governance head's provisional slot as stored, as `(instanceId, generation)`.
fn provisional_slot(world: &ModelWorld, subject: Subject) -> Option<(String, u64)> {
    let entry = world
        .kv
        .get(Store::Records, &keys::govern(&subject.gate().endpoint))?;
    let head: serde_json::Value = serde_json::from_slice(&entry.value).unwrap();
    let slot = head.get("provisional")?;
    Some((
        slot["instanceId"].as_str().unwrap().to_owned(),
        slot["generation"].as_u64().unwrap(),
    ))
}

/// One crash and one transient fault. A registration completes but its best-effort slot release
/// after the reopen cannot reach the store (the slot is harmless behind the open gate, F64), so
/// the head keeps this instance's slot at the old generation. The next start freezes the gate
/// and dies before its Phase-1 slot-take; its restart resumes the recorded op (the gate is
/// frozen by it) and must come up: the leftover slot is its own orphan from an earlier
/// generation, exactly what a fresh registration replaces (`OwnOrphan`).
#[test]
fn f14_a_resume_over_a_leftover_own_slot_comes_up() {
    let mut stuck = Vec::new();
    for subject in [Subject::Plane, Subject::Host] {
        let mut world = world_for(true, subject);
        // The release's head read is the third governance read of a re-registration (after
        // Phase 1's and the promote's); refuse it, and the release gives up.
        let govern = keys::govern(&subject.gate().endpoint);
        for fault in [
            Fault::After(Box::new(|_| {})),
            Fault::After(Box::new(|_| {})),
            Fault::Unavailable,
        ] {
            world.kv.inject(
                Trigger::new(Store::Records, KvOp::Get, govern.clone()),
                fault,
            );
        }
        let completed = run_for(&mut world, &mut subject.start(op(5)), usize::MAX, None);
        assert!(
            matches!(completed, Ended::Done(Ok(ProcessEpoch(1)))),
            "{completed:?}"
        );
        assert_eq!(world.kv.pending_faults(), 0);
        let gate = stored(&world, subject).unwrap();
        assert_eq!(
            provisional_slot(&world, subject),
            Some((IID.to_owned(), gate.generation().0 - 1)),
            "{subject:?}: the slot outlived its registration"
        );

        let mut record = Record(Some(op_a()));
        die_after_the_freeze(&mut world, subject, op_a());
        let (decision, result) = restart(&mut world, subject, &mut record, op(2));
        assert_eq!(decision.resumed, Some(op_a()), "{subject:?}");
        let up = came_up(
            &world,
            subject,
            &format!("{subject:?}"),
            Some(&op_a()),
            &decision,
            result,
            2,
        );
        stuck.extend(up.err());
    }
    assert_all_came_up("a resume over a leftover own slot", &stuck);
}

/// Two planes of one space share the `auth` endpoint's governance head. The peer plane completes
/// a registration and dies before releasing its slot; this plane freezes its gate and dies
/// before its slot-take; its restart resumes and must come up: the peer's slot is orphaned (the
/// peer's gate reopened past its stamp), which a fresh registration reclaims (F64).
#[test]
fn f14_a_resume_over_a_peer_planes_orphaned_slot_comes_up() {
    let subject = Subject::Plane;
    let mut world = world_for(true, subject);
    let peer = InstanceId::parse(PEER_IID).unwrap();
    // The peer's registration runs through its reopen and dies before the release: the reopen
    // is its gate's second update (provision is a create, then freeze, then reopen).
    let peer_key = GateRef::new(space(), subject.gate().endpoint, peer.clone()).key();
    let mut machine = Replay::new(plane(&peer, op(6)));
    let mut observation = None;
    let mut gate_updates = 0;
    loop {
        match machine.step(observation.take()) {
            Step::Done(result) => panic!("the peer finished: {result:?}"),
            Step::Effect(effect) => {
                if matches!(&effect, Effect::Kv(KvRequest::Update { key, .. }) if *key == peer_key)
                {
                    gate_updates += 1;
                }
                observation = Some(world.perform(&effect));
                if gate_updates == 2 {
                    break;
                }
            }
        }
    }
    assert_eq!(
        provisional_slot(&world, subject),
        Some((PEER_IID.to_owned(), 0)),
        "the peer's slot outlived its registration"
    );

    let mut record = Record(Some(op_a()));
    die_after_the_freeze(&mut world, subject, op_a());
    let (decision, result) = restart(&mut world, subject, &mut record, op(2));
    assert_eq!(decision.resumed, Some(op_a()));
    let up = came_up(
        &world,
        subject,
        "Plane beside a peer plane",
        Some(&op_a()),
        &decision,
        result,
        1,
    );
    assert_all_came_up(
        "a resume over a peer plane's orphaned slot",
        up.err().as_slice(),
    );
}

// ---- a freeze the restart never recorded -------------------------------------------------------

/// Freezes `subject`'s gate under `op_id` (a barrier of some other operation), outside any
/// registration.
fn freeze_under(world: &mut ModelWorld, subject: Subject, op_id: OpId) {
    let gate = subject.gate();
    let observed = {
        let gate = gate.clone();
        common::run(
            world,
            common::Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &gate)),
        )
        .unwrap()
        .unwrap()
    };
    let froze = common::run(
        world,
        common::Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op_id, &observed)),
    )
    .unwrap();
    assert!(froze.is_some());
}

/// A gate frozen by an op id the process never recorded (a reconciler's, an operator's) is not
/// the restart's to finish. With the record naming another op (a stale record of an attempt that
/// completed, or of one that never froze), or with no record at all, the rule takes a fresh op,
/// and the ceremony refuses it "frozen by another operation" without touching the gate — on
/// this restart and the next.
#[test]
fn f14_a_gate_frozen_by_a_foreign_op_is_refused_and_stays_frozen() {
    for subject in [Subject::Plane, Subject::Host] {
        for recorded in [Some(op_a()), Some(op_prior()), None] {
            let what = format!("{subject:?} recorded={recorded:?}");
            let mut world = world_for(true, subject);
            freeze_under(&mut world, subject, op_foreign());
            let before = world.kv.get(Store::Auth, &subject.gate().key()).unwrap();

            let mut record = Record(recorded.clone());
            for fresh in [op(2), op(3)] {
                let (decision, result) = restart(&mut world, subject, &mut record, fresh.clone());
                assert_eq!(
                    decision.resumed, None,
                    "{what}: never resumes a foreign freeze"
                );
                assert_eq!(decision.op_id, fresh, "{what}");
                let e = result.unwrap_err();
                assert_eq!(e.code, ErrorCode::Conflict, "{what}: {e}");
                assert!(
                    e.message.contains("frozen by another operation"),
                    "{what}: {e}"
                );
                let after = world.kv.get(Store::Auth, &subject.gate().key()).unwrap();
                assert_eq!(after, before, "{what}: the gate is untouched");
                assert!(frozen_by(&world, subject, &op_foreign()), "{what}");
                // The refused run keeps its record (the daemon exits with it); the next start
                // decides again from what it observes.
                assert_eq!(record.0, Some(fresh), "{what}");
            }
        }
    }
}

/// The rule on its own, over the gate shapes a restart can observe.
#[test]
fn resumed_op_resumes_only_the_recorded_registration_freeze() {
    let subject = Subject::Plane;
    let open = stored(&world_for(true, subject), subject).unwrap();
    assert_eq!(resumed_op(None, Some(&op_a())), None, "no gate");
    assert_eq!(resumed_op(Some(&open), None), None, "no record");
    assert_eq!(
        resumed_op(Some(&open), Some(&op_prior())),
        None,
        "open: stale"
    );
    let frozen = open.frozen(GateOp::registration(op_a())).unwrap();
    assert_eq!(resumed_op(Some(&frozen), Some(&op_a())), Some(op_a()));
    assert_eq!(resumed_op(Some(&frozen), Some(&op_foreign())), None);
    assert_eq!(resumed_op(Some(&frozen), None), None);
    let takeover = open
        .frozen(GateOp::new(op_a(), OpKind::Takeover, None).unwrap())
        .unwrap();
    assert_eq!(
        resumed_op(Some(&takeover), Some(&op_a())),
        None,
        "a takeover freeze under the recorded id is not the ceremony's to finish"
    );
}

/// The fixture's shape: a first start is KV requests and artifact reads only, and writes its
/// gate three times (provision, freeze, reopen).
#[test]
fn a_first_start_provisions_freezes_and_reopens_its_gate() {
    for subject in [Subject::Plane, Subject::Host] {
        let effects = clean_effects(&mut ModelWorld::default(), subject, op_a());
        assert!(
            effects
                .iter()
                .all(|e| matches!(e, Effect::Kv(_) | Effect::ReadArtifact(_))),
            "{subject:?}: {effects:?}"
        );
        let key = subject.gate().key();
        if subject == Subject::Plane {
            assert_eq!(plane(&instance(), op_a()).gate.key(), key);
        }
        let gate_writes = effects
            .iter()
            .filter(|e| matches!(e, Effect::Kv(r) if r.is_write() && r.key() == key))
            .count();
        assert_eq!(gate_writes, 3, "{subject:?}");
        println!("{subject:?}: a first start takes {} effects", effects.len());
    }
}
