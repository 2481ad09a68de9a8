//! The terminal retirement barrier on the KV model: the managed-retire-door cells of
//! reference-auth-service §11.6 (the §3.9 outcome table, a full retirement with exactly one
//! eviction, no mint at the retired uid, crash resume), and the rules the barrier keeps (G7,
//! G8, G10, H4, H5; F14, F21, F47, F49, F50).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::run;
use cotal_core::driver::{ModelWorld, World};
use cotal_core::gate::{GateState, OpKind};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::lifecycle::{
    interactive_retirement_op_id, managed_retirement_op_id, AgentGate, EnsureRootCredential,
    HeadState, LifecycleHead, RetireLifecycle, Retirement, RootEntropy,
};
use cotal_core::machine::{Effect, Machine, Replay, Step};
use cotal_core::names::{keys, ActorToken, LifecycleUid, ManagerInstance, OwnerToken, Principal};
use cotal_core::{EpError, ErrorCode};

const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
const ACTOR: &str = "agent";
const UID: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
const UID2: &str = "vvvvvvvvvvvvvvvvvvvvvvvvvv";
const MGR: &str = "auth-service:s1";
const NOW: u64 = 1_780_000_000_000;

fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}
fn actor() -> ActorToken {
    ActorToken::parse(ACTOR).unwrap()
}
fn uid(s: &str) -> LifecycleUid {
    LifecycleUid::parse(s).unwrap()
}
fn holder() -> Principal {
    Principal::new(owner(), actor())
}

/// A world whose evictor verifies every holder gone.
fn world() -> ModelWorld {
    let mut world = ModelWorld::default();
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    world
}

fn ensure(at: &str, entropy: u8) -> EnsureRootCredential {
    EnsureRootCredential {
        owner: owner(),
        actor: actor(),
        lifecycle_uid: uid(at),
        manager_instance: ManagerInstance::parse(MGR).unwrap(),
        now_ms: NOW,
        entropy: RootEntropy {
            op: [entropy; 20],
            credentials: [[entropy; 20], [entropy + 1; 20], [entropy + 2; 20]],
        },
        known: None,
    }
}

/// A live incarnation at `at` with its stamped root credential.
fn live(world: &mut ModelWorld, at: &str, entropy: u8) {
    run(world, ensure(at, entropy)).unwrap();
}

fn retire(at: &str) -> RetireLifecycle {
    retire_as(at, managed_retirement_op_id(&uid(at)).unwrap())
}

fn retire_as(at: &str, op_id: cotal_core::names::OpId) -> RetireLifecycle {
    RetireLifecycle {
        owner: owner(),
        actor: actor(),
        lifecycle_uid: uid(at),
        op_id,
        guard: None,
    }
}

fn outcome(at: &str, retired: bool, not_started: bool, already_retired: bool) -> Retirement {
    Retirement {
        retired,
        lifecycle_uid: uid(at),
        not_started,
        already_retired,
    }
}

fn gate_row(world: &ModelWorld, at: &str) -> AgentGate {
    let key = keys::agent_gate(&uid(at));
    AgentGate::parse(&world.kv.get(Store::Auth, &key).unwrap().value, &uid(at)).unwrap()
}

fn head_row(world: &ModelWorld) -> LifecycleHead {
    let key = keys::lifecycle_head(&owner(), &actor());
    LifecycleHead::parse(
        &world.kv.get(Store::Records, &key).unwrap().value,
        &owner(),
        &actor(),
    )
    .unwrap()
}

fn family(world: &ModelWorld, at: &str) -> Vec<LedgerRow> {
    let prefix = keys::cred_family_prefix(&uid(at));
    world
        .kv
        .keys(Store::Auth, &prefix)
        .into_iter()
        .map(|k| LedgerRow::parse(&world.kv.get(Store::Auth, &k).unwrap().value, &k).unwrap())
        .collect()
}

fn refused(e: &EpError, code: ErrorCode, words: &[&str]) {
    assert_eq!(e.code, code, "{e}");
    for w in words {
        assert!(e.message.contains(w), "{w:?} missing from: {e}");
    }
}

/// The end state of a completed retirement of `at` under `managedRetirementOpId(at)`.
fn assert_retired(world: &ModelWorld, at: &str) {
    let op = managed_retirement_op_id(&uid(at)).unwrap();
    let gate = gate_row(world, at);
    assert_eq!(gate.state(), GateState::Retired);
    assert_eq!(gate.op().unwrap().op_id(), &op);
    assert_eq!(gate.op().unwrap().kind(), OpKind::Retirement);
    let head = head_row(world);
    assert_eq!(head.state(), HeadState::Retired);
    assert_eq!(head.lifecycle_uid(), &uid(at));
    assert_eq!(head.retirement_op(), None);
    let rows = family(world, at);
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r.state() == CredState::Revoked));
    let frontier = world
        .kv
        .get(Store::Records, &keys::frontier(&uid(at)))
        .unwrap();
    assert_eq!(
        String::from_utf8(frontier.value).unwrap(),
        format!(r#"{{"lifecycleUid":"{at}","opId":"{op}","streams":{{}}}}"#)
    );
}

/// Whether `effect` is one of the barrier's durable steps: a write or an eviction.
fn is_step(effect: &Effect) -> bool {
    matches!(effect, Effect::Kv(r) if r.is_write()) || matches!(effect, Effect::Evict(_))
}

/// Runs `machine` until it is about to perform its `n`th step (0-based), then drops it: a crash
/// right before that step.
fn crash_before<M: Machine>(machine: &mut M, world: &mut ModelWorld, n: usize) -> bool {
    let mut seen = 0;
    let mut step = machine.step(None);
    while let Step::Effect(effect) = step {
        if is_step(&effect) {
            if seen == n {
                return true;
            }
            seen += 1;
        }
        let observed = World::perform(world, &effect);
        step = machine.step(Some(observed));
    }
    false
}

// ---- the op ids ------------------------------------------------------------------------------

#[test]
fn the_retirement_op_ids_are_the_first_26_hex_of_their_sha256() {
    // python3: hashlib.sha256(b"retire:" + b"u" * 26).hexdigest()[:26], and likewise for
    // "interactive-retire:".
    assert_eq!(
        managed_retirement_op_id(&uid(UID)).unwrap().as_str(),
        "b69dee5436c6fdf20421a8dbf8"
    );
    assert_eq!(
        interactive_retirement_op_id(&uid(UID)).unwrap().as_str(),
        "34cd909d28898a0bfb3663a66d"
    );
}

// ---- the outcome table -----------------------------------------------------------------------

#[test]
fn managed_retire_door_no_head_is_not_started() {
    let mut world = world();
    let done = run(&mut world, retire(UID)).unwrap();
    assert_eq!(done, outcome(UID, false, true, false));
    assert!(world.kv.keys(Store::Records, "").is_empty());
    assert!(world.evicted().is_empty());
}

#[test]
fn managed_retire_door_head_retired_at_another_uid_is_not_started() {
    let mut world = world();
    live(&mut world, UID, 1);
    run(&mut world, retire(UID)).unwrap();
    let done = run(&mut world, retire(UID2)).unwrap();
    assert_eq!(done, outcome(UID2, false, true, false));
    assert_eq!(
        world.kv.get(Store::Auth, &keys::agent_gate(&uid(UID2))),
        None
    );
}

#[test]
fn managed_retire_door_head_active_at_another_uid_is_conflict_and_untouched() {
    let mut world = world();
    live(&mut world, UID, 1);
    let before = head_row(&world);
    let e = run(&mut world, retire(UID2)).unwrap_err();
    refused(&e, ErrorCode::Conflict, &["active at uid", UID, UID2]);
    assert_eq!(head_row(&world), before);
    assert_eq!(gate_row(&world, UID).state(), GateState::Open);
    assert!(world.evicted().is_empty());
}

#[test]
fn managed_retire_door_retires_a_live_lifecycle_with_exactly_one_eviction() {
    let mut world = world();
    live(&mut world, UID, 1);
    let done = run(&mut world, retire(UID)).unwrap();
    assert_eq!(done, outcome(UID, true, false, false));
    assert_retired(&world, UID);
    assert_eq!(world.evicted(), vec![holder()]);
}

#[test]
fn managed_retire_door_no_mint_at_the_retired_uid() {
    let mut world = world();
    live(&mut world, UID, 1);
    run(&mut world, retire(UID)).unwrap();
    let e = run(&mut world, ensure(UID, 7)).unwrap_err();
    refused(&e, ErrorCode::PermissionDenied, &["retired", "F5"]);
    assert!(family(&world, UID)
        .iter()
        .all(|r| r.state() == CredState::Revoked));
    // H1: the alias itself is replaceable, at a fresh uid only.
    live(&mut world, UID2, 9);
    assert!(head_row(&world).is_active_at(&uid(UID2)));
}

#[test]
fn managed_retire_door_repeat_is_already_retired_and_writes_nothing() {
    let mut world = world();
    live(&mut world, UID, 1);
    run(&mut world, retire(UID)).unwrap();
    let seqs = (
        world.kv.last_sequence(Store::Auth),
        world.kv.last_sequence(Store::Records),
    );
    let again = run(&mut world, retire(UID)).unwrap();
    assert_eq!(again, outcome(UID, true, false, true));
    assert_eq!(
        (
            world.kv.last_sequence(Store::Auth),
            world.kv.last_sequence(Store::Records)
        ),
        seqs
    );
    assert_eq!(world.evicted().len(), 1);
}

// ---- crash resume ----------------------------------------------------------------------------

#[test]
fn managed_retire_door_crash_resume_at_every_step_finishes_the_barrier() {
    // freeze, head retiring, revoke, evict, frontier, gate retired, head retired.
    for n in 0..7 {
        let mut world = world();
        live(&mut world, UID, 1);
        let mut first = Replay::new(retire(UID));
        assert!(crash_before(&mut first, &mut world, n), "step {n} exists");
        let done = run(&mut world, retire(UID)).unwrap();
        assert_eq!(done, outcome(UID, true, false, false), "crash before {n}");
        assert_retired(&world, UID);
        // Containment is redone only while no frontier proves it complete.
        let evictions = world.evicted().len();
        assert_eq!(evictions, if n == 4 { 2 } else { 1 }, "crash before {n}");
    }
}

#[test]
fn f50_an_unverified_eviction_leaves_it_frozen_and_a_rerun_finishes() {
    let mut world = world();
    live(&mut world, UID, 1);
    world.set_evictor(Box::new(|holders| vec![false; holders.len()]));
    let e = run(&mut world, retire(UID)).unwrap_err();
    refused(&e, ErrorCode::Unavailable, &["not verified", "F50"]);
    let op = managed_retirement_op_id(&uid(UID)).unwrap();
    assert!(gate_row(&world, UID).is_retirement_of(&op, GateState::Frozen));
    assert!(head_row(&world).is_retiring_by(&uid(UID), &op));
    assert!(family(&world, UID)
        .iter()
        .all(|r| r.state() == CredState::Revoked));
    assert_eq!(
        world.kv.get(Store::Records, &keys::frontier(&uid(UID))),
        None
    );
    // Nothing mints while it is frozen, and the alias is not replaceable.
    run(&mut world, ensure(UID, 7)).unwrap_err();
    refused(
        &run(&mut world, ensure(UID2, 9)).unwrap_err(),
        ErrorCode::FailedPrecondition,
        &["retiring"],
    );
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    let done = run(&mut world, retire(UID)).unwrap();
    assert_eq!(done, outcome(UID, true, false, false));
    assert_retired(&world, UID);
}

// ---- one operation per lifecycle -------------------------------------------------------------

#[test]
fn f49_another_op_over_a_retirement_freeze_is_conflict() {
    let mut world = world();
    live(&mut world, UID, 1);
    let interactive = interactive_retirement_op_id(&uid(UID)).unwrap();
    // Crash the interactive retirement right after its freeze (before the head step).
    let mut first = Replay::new(retire_as(UID, interactive.clone()));
    assert!(crash_before(&mut first, &mut world, 1));
    let e = run(&mut world, retire(UID)).unwrap_err();
    refused(&e, ErrorCode::Conflict, &["frozen by a retirement", "F14"]);
    // ... and after its head step, the head names the op.
    let mut world = self::world();
    live(&mut world, UID, 1);
    let mut first = Replay::new(retire_as(UID, interactive.clone()));
    assert!(crash_before(&mut first, &mut world, 2));
    let e = run(&mut world, retire(UID)).unwrap_err();
    refused(&e, ErrorCode::Conflict, &["retiring", "F49"]);
    // The interactive op itself resumes and finishes.
    let done = run(&mut world, retire_as(UID, interactive)).unwrap();
    assert_eq!(done, outcome(UID, true, false, false));
}

#[test]
fn f49_a_retirement_terminalized_by_another_op_refuses() {
    let mut world = world();
    live(&mut world, UID, 1);
    let interactive = interactive_retirement_op_id(&uid(UID)).unwrap();
    // Crash the interactive retirement right before its head terminal.
    let mut first = Replay::new(retire_as(UID, interactive));
    assert!(crash_before(&mut first, &mut world, 6));
    let e = run(&mut world, retire(UID)).unwrap_err();
    refused(&e, ErrorCode::Conflict, &["F49"]);
}

// ---- the freeze beats a staged mint (F21) ----------------------------------------------------

#[test]
fn f21_a_mint_staged_before_the_freeze_is_revoked_and_never_released() {
    let mut world = world();
    // A first mint of a fresh alias, run up to its finalize touch: its row is staged, not
    // released.
    let other = ActorToken::parse("other").unwrap();
    let mint = EnsureRootCredential {
        actor: other.clone(),
        ..ensure(UID2, 5)
    };
    let mut minting = Replay::new(mint);
    let mut step = minting.step(None);
    let touch = loop {
        match step {
            Step::Effect(effect)
                if matches!(&effect, Effect::Kv(r) if r.is_write()
                    && r.store() == Store::Auth
                    && r.key().starts_with("gate.")
                    && !family(&world, UID2).is_empty()) =>
            {
                break effect
            }
            Step::Effect(effect) => {
                let observed = World::perform(&mut world, &effect);
                step = minting.step(Some(observed));
            }
            Step::Done(result) => panic!("finished before the touch: {:?}", result.err()),
        }
    };
    let retire_other = RetireLifecycle {
        actor: other.clone(),
        ..retire(UID2)
    };
    let done = run(&mut world, retire_other).unwrap();
    assert!(done.retired);
    // The staged row was enumerated after the freeze and revoked (F21).
    assert!(family(&world, UID2)
        .iter()
        .all(|r| r.state() == CredState::Revoked));
    // The mint's touch now loses; it releases nothing.
    let mut step = minting.step(Some(World::perform(&mut world, &touch)));
    let result = loop {
        match step {
            Step::Effect(effect) => {
                let observed = World::perform(&mut world, &effect);
                step = minting.step(Some(observed));
            }
            Step::Done(result) => break result,
        }
    };
    assert!(result.is_err(), "{result:?}");
    assert!(family(&world, UID2)
        .iter()
        .all(|r| r.state() == CredState::Revoked));
}

// ---- ambiguous writes ------------------------------------------------------------------------

#[test]
fn every_ambiguous_retirement_write_settles_by_read_back() {
    let triggers = [
        Trigger::new(Store::Auth, KvOp::Update, "gate."),
        Trigger::new(Store::Records, KvOp::Update, "lifecycle."),
        Trigger::new(Store::Auth, KvOp::Update, "cred."),
        Trigger::new(Store::Records, KvOp::CreateStrict, "frontier."),
    ];
    for trigger in triggers {
        for applied in [true, false] {
            let mut world = world();
            live(&mut world, UID, 1);
            let fault = if applied {
                Fault::AmbiguousApplied
            } else {
                Fault::AmbiguousNotApplied
            };
            world.kv.inject(trigger.clone(), fault);
            let done = run(&mut world, retire(UID)).unwrap();
            assert_eq!(
                done,
                outcome(UID, true, false, false),
                "{trigger:?} {applied}"
            );
            assert_eq!(world.kv.pending_faults(), 0, "{trigger:?} {applied}");
            assert_retired(&world, UID);
            assert_eq!(world.evicted().len(), 1, "{trigger:?} {applied}");
        }
    }
}
