//! Crash-safe self-registration as a user meets it: `cotal-authd up` killed (`SIGKILL`, no
//! cleanup at all) at every KV write of its registration and at seeded random instants, then
//! started again, on the embedded `nats-server`. Every next start must come up at the next
//! epoch, and no crash may leave the gate frozen for good (F14: a restart resumes its own
//! frozen registration by the op id it recorded before the freeze; F69: each completed
//! re-registration advances the epoch). Kill points come from the binary's
//! `COTAL_AUTHD_KILL_AT` test hook; each test prints the outcomes it met.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;

/// Seeded random crashes (`COTAL_KILL_CYCLES` raises or lowers the count).
const RANDOM_CYCLES: usize = 100;
const SEED: u64 = 0x5eed_c07a1;

/// How a crash left the plane, checked against the rule that only the recorded operation may
/// hold the gate frozen; returns the outcome's name and the epoch the next start must commit.
/// `last` is the epoch the previous start committed.
fn after_crash(state: &Path, last: Option<u64>) -> (&'static str, u64) {
    let Some(g) = gate(state) else {
        return ("no gate yet", 0);
    };
    let epoch = g["processEpoch"].as_u64().unwrap();
    let first = g["registrationRevision"] == 0;
    match g["state"].as_str().unwrap() {
        "open" if first => ("gate provisioned, not yet registered", epoch),
        "open" if Some(epoch) == last => ("gate open: killed before its freeze", epoch + 1),
        "open" => ("gate open: killed after its reopen", epoch + 1),
        "frozen" => {
            let op = g["op"]["opId"].as_str().unwrap();
            assert_eq!(
                recorded_op(state).as_deref(),
                Some(op),
                "a frozen gate must be the recorded operation's: {g}"
            );
            let next = if first { epoch } else { epoch + 1 };
            ("gate frozen by the recorded op (resumed)", next)
        }
        other => panic!("unexpected gate state {other}: {g}"),
    }
}

/// A start that must come up at `epoch`; it is then killed (`SIGKILL`) so the next cycle starts
/// from a crash while serving.
fn comes_up_at(state: &Path, reaper: &mut Reaper, epoch: u64, context: &str) -> Duration {
    let began = Instant::now();
    reaper.0.push(quiet_up(state));
    let child = reaper.0.last_mut().unwrap();
    let d = ready(state, child);
    let took = began.elapsed();
    assert_eq!(d["processEpoch"], epoch, "{context}: {d}");
    let g = gate(state).unwrap();
    assert_eq!(g["state"], "open", "{context}: {g}");
    assert_eq!(g["processEpoch"], epoch, "{context}: {g}");
    child.kill().unwrap();
    child.wait().unwrap();
    took
}

fn report(what: &str, outcomes: &BTreeMap<&'static str, usize>) {
    let total: usize = outcomes.values().sum();
    eprintln!("{what}: {total} kill points");
    for (outcome, n) in outcomes {
        eprintln!("  {n:>4}  {outcome}");
    }
}

/// Every write boundary of a restart (a re-registration), before and after each write: the
/// next start always comes up at exactly the next epoch.
#[test]
fn f14_a_restart_killed_at_every_write_boundary_comes_up_next_time() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);
    comes_up_at(&state, &mut reaper, 0, "first start");
    let mut outcomes = BTreeMap::new();
    let mut writes = 0;
    let mut last = 0;
    'points: for k in 1.. {
        for phase in ["before", "after"] {
            let point = format!("{phase}:{k}");
            let mut victim = start_killed_at(&state, &point);
            if died(&state, &mut victim).is_none() {
                break 'points;
            }
            writes = k;
            let (outcome, epoch) = after_crash(&state, Some(last));
            *outcomes.entry(outcome).or_default() += 1;
            comes_up_at(&state, &mut reaper, epoch, &format!("after a kill {point}"));
            last = epoch;
        }
    }
    report("restart", &outcomes);
    assert!(
        writes >= 8,
        "a restart writes at least 8 times, saw {writes}"
    );
    assert!(outcomes.contains_key("gate frozen by the recorded op (resumed)"));
}

/// Every write boundary of a first start (a virgin space: the gate is provisioned, then the
/// first registration commits epoch 0), each on a fresh state dir.
#[test]
fn f14_a_first_start_killed_at_every_write_boundary_comes_up_next_time() {
    require_server();
    let mut outcomes = BTreeMap::new();
    let mut writes = 0;
    'points: for k in 1.. {
        for phase in ["before", "after"] {
            let dir = tempfile::tempdir().unwrap();
            let state = dir.path().join("state");
            let mut reaper = Reaper(Vec::new(), state.clone());
            init(&state);
            let point = format!("{phase}:{k}");
            let mut victim = start_killed_at(&state, &point);
            if died(&state, &mut victim).is_none() {
                break 'points;
            }
            writes = k;
            let (outcome, epoch) = after_crash(&state, None);
            *outcomes.entry(outcome).or_default() += 1;
            comes_up_at(
                &state,
                &mut reaper,
                epoch,
                &format!("first start killed {point}"),
            );
        }
    }
    report("first start", &outcomes);
    assert!(
        writes >= 9,
        "a first start writes at least 9 times, saw {writes}"
    );
    assert!(outcomes.contains_key("gate frozen by the recorded op (resumed)"));
}

/// SplitMix64: the seeded delays.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `kill -9` at seeded random instants spread over a whole start (spawn to ready, and a little
/// past it), then a start that must come up at the next epoch.
#[test]
fn f14_kill_9_at_random_instants_never_leaves_the_gate_frozen() {
    require_server();
    let cycles = std::env::var("COTAL_KILL_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(RANDOM_CYCLES);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);
    comes_up_at(&state, &mut reaper, 0, "first start");
    let mut span = comes_up_at(&state, &mut reaper, 1, "second start");
    let mut last = 1;
    let mut rng = SEED;
    let mut outcomes = BTreeMap::new();
    for cycle in 0..cycles {
        // Spread over 0..1.25 × the last start's time to ready.
        let window = u64::try_from(span.as_micros() * 5 / 4).unwrap().max(1);
        let delay = Duration::from_micros(next(&mut rng) % window);
        reaper.0.push(quiet_up(&state));
        sleep(delay);
        let victim = reaper.0.last_mut().unwrap();
        let ready_first = discovery(&state).is_some_and(|d| d["pid"] == victim.id());
        victim.kill().unwrap();
        victim.wait().unwrap();
        let (outcome, epoch) = after_crash(&state, Some(last));
        let outcome = if ready_first {
            "killed while serving"
        } else {
            outcome
        };
        *outcomes.entry(outcome).or_default() += 1;
        span = comes_up_at(
            &state,
            &mut reaper,
            epoch,
            &format!("cycle {cycle}, killed after {delay:?}"),
        );
        last = epoch;
    }
    report("random kill -9", &outcomes);
    assert!(
        outcomes.len() >= 2,
        "the delays must hit more than one stage: {outcomes:?}"
    );
}
