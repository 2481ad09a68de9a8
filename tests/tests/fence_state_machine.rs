//! Random interleavings of mints, barriers, peer touches, crashes and ambiguous or refused
//! writes over one gate, checked after every transition against the fence rules
//! (F19–F23, F26, F43, Q-13). The scenario and its checker live in `cotal_tests::fence`, shared
//! with the `fence_ops` fuzz target.
//!
//! `PROPTEST_CASES=<n>` raises (or lowers) the 256 cases each property runs by default.
// Test code: a failed unwrap is a failed test, which is the point.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Mutex;

use cotal_core::ErrorCode;
use cotal_tests::fence::{
    config_strategy, fault_strategy, op_strategy, run_ops, step_strategy, Config, Op, Scenario,
    Stats,
};
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};

/// Longest transition sequence the state machine generates.
const MAX_TRANSITIONS: usize = 60;
/// Faults one case may schedule: enough to land several inside one mint or barrier, few
/// enough that most runs still complete barriers.
const MAX_FAULTS: usize = 6;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        source_file: Some(file!()),
        ..ProptestConfig::default()
    }
}

/// The reference model: the cast, which actors may have a machine in flight, and how many
/// faults were scheduled. "May": the reference cannot know when a machine finishes (that
/// depends on the KV), so a `Step` marks an actor possibly busy and only a `Crash` clears it.
/// It is used to aim `Crash` at actors that can have something to lose.
#[derive(Debug, Clone)]
struct FenceRef {
    config: Config,
    maybe_busy: Vec<bool>,
    faults: usize,
}

impl ReferenceStateMachine for FenceRef {
    type State = FenceRef;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<FenceRef> {
        config_strategy()
            .prop_map(|config| FenceRef {
                maybe_busy: vec![false; config.actors()],
                config,
                faults: 0,
            })
            .boxed()
    }

    fn transitions(state: &FenceRef) -> BoxedStrategy<Op> {
        let actors = u8::try_from(state.maybe_busy.len()).unwrap();
        let busy: Vec<u8> = (0..actors)
            .filter(|&a| state.maybe_busy[usize::from(a)])
            .collect();
        let mut options: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (14, step_strategy(&state.config)),
            (2, Just(Op::PeerTouch).boxed()),
        ];
        if state.faults < MAX_FAULTS {
            options.push((3, fault_strategy().boxed()));
        }
        if !busy.is_empty() {
            options.push((
                1,
                proptest::sample::select(busy).prop_map(Op::Crash).boxed(),
            ));
        }
        Union::new_weighted(options).boxed()
    }

    fn apply(mut state: FenceRef, op: &Op) -> FenceRef {
        match *op {
            Op::Step(a) => state.maybe_busy[usize::from(a)] = true,
            Op::Crash(a) => state.maybe_busy[usize::from(a)] = false,
            Op::Ambiguous { .. } | Op::Unavailable { .. } => state.faults += 1,
            Op::PeerTouch => {}
        }
        state
    }

    /// Re-checked while shrinking: a shrunk sequence must still name real actors, crash only
    /// possibly busy ones, and stay within the fault budget.
    fn preconditions(state: &FenceRef, op: &Op) -> bool {
        let actor = |a: u8| state.maybe_busy.get(usize::from(a)).copied();
        match *op {
            Op::Step(a) => actor(a).is_some(),
            Op::Crash(a) => actor(a) == Some(true),
            Op::Ambiguous { .. } | Op::Unavailable { .. } => state.faults < MAX_FAULTS,
            Op::PeerTouch => true,
        }
    }
}

/// Stats of every case the state machine ran (it is the only writer).
static MACHINE_STATS: Mutex<Option<Stats>> = Mutex::new(None);

fn record(into: &Mutex<Option<Stats>>, stats: &Stats) {
    into.lock()
        .unwrap()
        .get_or_insert_with(Stats::default)
        .merge(stats);
}

/// The system under test is the scenario itself: each transition is applied to it, and
/// its checker runs after every transition.
struct FenceTest;

impl StateMachineTest for FenceTest {
    type SystemUnderTest = Scenario;
    type Reference = FenceRef;

    fn init_test(reference: &FenceRef) -> Scenario {
        Scenario::new(&reference.config).unwrap()
    }

    fn apply(mut scenario: Scenario, _reference: &FenceRef, op: Op) -> Scenario {
        if let Err(violation) = scenario.apply(&op) {
            panic!("{violation}\n{scenario:?}");
        }
        scenario
    }

    fn check_invariants(scenario: &Scenario, _reference: &FenceRef) {
        if let Err(violation) = scenario.check() {
            panic!("{violation}\n{scenario:?}");
        }
    }

    /// Drains every in-flight machine and runs the final check, so a violation that only
    /// shows once the stragglers finish still fails the case.
    fn teardown(scenario: Scenario, _reference: FenceRef) {
        match scenario.finish() {
            Ok(stats) => record(&MACHINE_STATS, &stats),
            Err(violation) => panic!("{violation}"),
        }
    }
}

/// Refuses a vacuous pass: across all cases, mints of both outcomes and completed barriers.
fn assert_not_vacuous(what: &str, stats: &Stats) {
    eprintln!("{what}: {stats:?}");
    assert!(stats.serve_releases > 0, "{what}: no serve release");
    assert!(stats.sibling_releases > 0, "{what}: no sibling release");
    assert!(
        stats.refused_with(ErrorCode::Expired) > 0,
        "{what}: no expired refusal"
    );
    assert!(
        stats.refused_with(ErrorCode::Unavailable) > 0,
        "{what}: no unavailable refusal"
    );
    assert!(stats.barriers_completed > 0, "{what}: no barrier completed");
    assert!(stats.barriers_lost > 0, "{what}: no barrier lost a race");
    assert!(stats.lost_touches > 0, "{what}: no touch lost its pin");
    assert!(stats.mint_crashes > 0, "{what}: no mint crashed");
    assert!(stats.barrier_resumes > 0, "{what}: no barrier resumed");
}

/// F19–F23 over random interleavings: the proptest-state-machine property. Run by hand
/// (rather than through `prop_state_machine!`) so the stats of all cases can be asserted once
/// the runner is done.
#[test]
fn f19_to_f23_fence_state_machine() {
    let config = proptest_config();
    let mut runner = TestRunner::new(config.clone());
    let strategy = FenceRef::sequential_strategy(1..=MAX_TRANSITIONS);
    let result = runner.run(&strategy, |(initial, transitions, seen)| {
        FenceTest::test_sequential(config.clone(), initial, transitions, seen);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let stats = MACHINE_STATS.lock().unwrap().take().unwrap_or_default();
    assert_not_vacuous("state machine", &stats);
}

fn config_and_ops(max_ops: usize) -> impl Strategy<Value = (Config, Vec<Op>)> {
    config_strategy().prop_flat_map(move |config| {
        let ops = proptest::collection::vec(op_strategy(&config), 0..=max_ops);
        (Just(config), ops)
    })
}

/// F19–F23, F26, Q-13 through `run_ops` (the fuzz target's entry point), with unbounded
/// faults and longer schedules than the state machine.
#[test]
fn f19_to_f23_run_ops_never_violates_a_fence_rule() {
    let mut runner = TestRunner::new(proptest_config());
    let totals = Mutex::new(Stats::default());
    let result = runner.run(&config_and_ops(120), |(config, ops)| {
        let stats = run_ops(&config, &ops).map_err(|v| TestCaseError::fail(v.to_string()))?;
        totals.lock().unwrap().merge(&stats);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let stats = totals.into_inner().unwrap();
    assert_not_vacuous("run_ops", &stats);
    assert!(stats.debts > 0 || stats.refused() > 0);
}

proptest! {
    #![proptest_config(proptest_config())]

    /// F22/Q-13 without faults or crashes: every mint either releases or refuses, and the
    /// generation ends at 1 + completed barriers.
    #[test]
    fn q13_fault_free_schedules_release_or_refuse_every_mint(
        (config, ops) in config_strategy().prop_flat_map(|config| {
            let op = prop_oneof![8 => step_strategy(&config), 1 => Just(Op::PeerTouch)];
            (Just(config), proptest::collection::vec(op, 0..=80))
        })
    ) {
        let stats = run_ops(&config, &ops).map_err(|v| TestCaseError::fail(v.to_string()))?;
        prop_assert_eq!(stats.refused_with(ErrorCode::Unavailable), 0);
        prop_assert_eq!(stats.debts, 0);
        prop_assert_eq!(stats.barrier_failures, 0);
        prop_assert_eq!(stats.reopens, stats.barriers_completed);
    }
}
