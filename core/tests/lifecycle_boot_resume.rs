//! Boot crash-resume of interrupted retirements on the KV model (reference-auth-service §2.11):
//! the gates are the intents, so a crash before any durable step of a managed retirement is
//! found from its gate and finished by one resume under the op the gate names (F47, F48, F49);
//! an activation freeze is not the boot's to resume (F18); a gate that cannot be examined is
//! reported without hiding the others; and under a plane claim the listing and the resumed
//! retirement's family enumeration run only while the claim is held (SPEC 13.13).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::lifecycle::{
    actor, assert_retired, crash_before, ensure, family, gate_row, head_row, live, owner, retire,
    retire_as, sequences, uid, world, ACTOR, MGR, OWNER, UID, UID2,
};
use common::run;
use cotal_core::driver::{ModelWorld, World};
use cotal_core::gate::{GateState, OpKind};
use cotal_core::kv::{KvRequest, Store};
use cotal_core::ledger::CredState;
use cotal_core::lifecycle::{
    interactive_retirement_op_id, managed_retirement_op_id, FindOpenOperations, OpenOperations,
    RetireLifecycle,
};
use cotal_core::machine::{Effect, Machine, Replay, Step};
use cotal_core::names::{keys, SpaceName};
use cotal_core::plane_claim::{
    AcquirePlaneClaim, ClaimHold, ClaimRefusal, ClaimRow, ConnTuple, PLANE_CLAIM_KEY,
};
use cotal_core::ErrorCode;

/// A third incarnation's uid, for gates beside the one under test.
const UID3: &str = "wwwwwwwwwwwwwwwwwwwwwwwwww";
/// The managed retirement's durable steps: freeze, head retiring, revoke, evict, frontier, gate
/// retired, head retired.
const RETIREMENT_STEPS: usize = 7;

fn find(world: &mut ModelWorld) -> OpenOperations {
    run(world, FindOpenOperations { guard: None }).unwrap()
}

/// Asserts `found` owes exactly the managed retirement of the alias at `at`, carrying `guard`.
fn owes_one(found: &OpenOperations, at: &str, guard: Option<&ClaimHold>) -> RetireLifecycle {
    assert!(found.unexamined.is_empty(), "{:?}", found.unexamined);
    let [owed] = found.retirements.as_slice() else {
        panic!(
            "expected one owed retirement, found {:?}",
            found.retirements
        );
    };
    assert_eq!(owed.owner, owner());
    assert_eq!(owed.actor, actor());
    assert_eq!(owed.lifecycle_uid, uid(at));
    assert_eq!(owed.op_id, managed_retirement_op_id(&uid(at)).unwrap());
    assert_eq!(owed.guard.as_ref(), guard);
    owed.clone()
}

fn owes_nothing(found: &OpenOperations) {
    assert!(found.retirements.is_empty(), "{:?}", found.retirements);
    assert!(found.unexamined.is_empty(), "{:?}", found.unexamined);
}

/// A managed retirement of the live incarnation at `at`, crashed right before its `n`th step.
fn crashed_retirement(world: &mut ModelWorld, at: &str, n: usize) {
    let mut first = Replay::new(retire(at));
    assert!(crash_before(&mut first, world, n), "step {n} exists");
}

// ---- what is owed ----------------------------------------------------------------------------

#[test]
fn nothing_is_owed_without_a_retirement_in_flight() {
    let mut world = world();
    owes_nothing(&find(&mut world));
    // A live incarnation.
    live(&mut world, UID, 1);
    owes_nothing(&find(&mut world));
    // A managed retirement crashed before its freeze wrote nothing.
    crashed_retirement(&mut world, UID, 0);
    assert_eq!(gate_row(&world, UID).state(), GateState::Open);
    owes_nothing(&find(&mut world));
    // A completed retirement, then its successor live at a fresh uid.
    run(&mut world, retire(UID)).unwrap();
    owes_nothing(&find(&mut world));
    live(&mut world, UID2, 9);
    owes_nothing(&find(&mut world));
}

#[test]
fn f47_a_retirement_crashed_after_its_freeze_is_owed_and_one_resume_finishes_it() {
    for n in 1..RETIREMENT_STEPS {
        let mut world = world();
        live(&mut world, UID, 1);
        crashed_retirement(&mut world, UID, n);
        let owed = owes_one(&find(&mut world), UID, None);
        let done = run(&mut world, owed).unwrap();
        assert!(
            done.retired && !done.not_started && !done.already_retired,
            "crash before {n}: {done:?}"
        );
        assert_retired(&world, UID);
        owes_nothing(&find(&mut world));
    }
}

#[test]
fn f48_a_gate_retired_under_a_head_still_retiring_is_owed_until_the_head_terminal() {
    let mut world = world();
    live(&mut world, UID, 1);
    // Crash before the last step (H5): the gate is terminal, the head is not.
    crashed_retirement(&mut world, UID, RETIREMENT_STEPS - 1);
    let op = managed_retirement_op_id(&uid(UID)).unwrap();
    assert!(gate_row(&world, UID).is_retirement_of(&op, GateState::Retired));
    assert!(head_row(&world).is_retiring_by(&uid(UID), &op));
    let owed = owes_one(&find(&mut world), UID, None);
    let evicted = world.evicted().len();
    run(&mut world, owed).unwrap();
    assert_retired(&world, UID);
    assert_eq!(
        world.evicted().len(),
        evicted,
        "the frontier proves containment done: no second eviction"
    );
    owes_nothing(&find(&mut world));
}

#[test]
fn f49_the_resume_runs_the_operation_the_gate_names() {
    let mut world = world();
    live(&mut world, UID, 1);
    let interactive = interactive_retirement_op_id(&uid(UID)).unwrap();
    let mut first = Replay::new(retire_as(UID, interactive.clone()));
    assert!(crash_before(&mut first, &mut world, 3));
    let found = find(&mut world);
    let [owed] = found.retirements.as_slice() else {
        panic!("{:?}", found.retirements);
    };
    assert_eq!(owed.op_id, interactive);
    let done = run(&mut world, owed.clone()).unwrap();
    assert!(done.retired);
    let gate = gate_row(&world, UID);
    assert!(gate.is_retirement_of(&interactive, GateState::Retired));
    owes_nothing(&find(&mut world));
}

#[test]
fn f18_an_activation_frozen_gate_is_not_owed() {
    let mut world = world();
    // An ensure crashed before its activation's reopen (G1): reservation, gate, head written.
    let mut first = Replay::new(ensure(UID, 1));
    assert!(crash_before(&mut first, &mut world, 3));
    let gate = gate_row(&world, UID);
    assert_eq!(gate.state(), GateState::Frozen);
    assert_eq!(gate.op().unwrap().kind(), OpKind::Activation);
    let before = sequences(&world);
    owes_nothing(&find(&mut world));
    assert_eq!(
        sequences(&world),
        before,
        "the boot's search writes nothing"
    );
    // The next exchange resumes the activation under its own op.
    live(&mut world, UID, 1);
    assert_eq!(gate_row(&world, UID).state(), GateState::Open);
    owes_nothing(&find(&mut world));
}

#[test]
fn a_gate_that_cannot_be_examined_is_reported_and_the_others_are_still_found() {
    let mut world = world();
    live(&mut world, UID, 1);
    crashed_retirement(&mut world, UID, 2);
    // A gate key naming no lifecycle uid.
    world.kv.put(Store::Auth, "gate.NOT_A_UID", b"{}");
    // A retirement freeze whose reservation is missing.
    let op = managed_retirement_op_id(&uid(UID3)).unwrap();
    world.kv.put(
        Store::Auth,
        &keys::agent_gate(&uid(UID3)),
        format!(
            r#"{{"lifecycleUid":"{UID3}","state":"frozen","generation":1,"op":{{"opId":"{op}","kind":"retirement"}}}}"#
        )
        .as_bytes(),
    );
    // A gate whose bytes are corrupt.
    world
        .kv
        .put(Store::Auth, &keys::agent_gate(&uid(UID2)), b"garbled{");
    let before = sequences(&world);
    let found = find(&mut world);
    assert_eq!(
        sequences(&world),
        before,
        "the boot's search writes nothing"
    );
    let [owed] = found.retirements.as_slice() else {
        panic!("{:?}", found.retirements);
    };
    assert_eq!(owed.lifecycle_uid, uid(UID));
    let mut unexamined: Vec<String> = found
        .unexamined
        .iter()
        .map(|e| {
            assert_eq!(e.code, ErrorCode::Internal, "{e}");
            e.message.clone()
        })
        .collect();
    unexamined.sort();
    assert_eq!(unexamined.len(), 3, "{unexamined:?}");
    assert!(
        unexamined
            .iter()
            .any(|m| m.contains("gate.NOT_A_UID") && m.contains("names no lifecycle uid")),
        "{unexamined:?}"
    );
    assert!(
        unexamined
            .iter()
            .any(|m| m.contains(&format!("uid.{UID3} is absent"))
                && m.contains(op.as_str())
                && m.contains("corruption")),
        "{unexamined:?}"
    );
    assert!(
        unexamined
            .iter()
            .any(|m| !m.contains("NOT_A_UID") && !m.contains(UID3)),
        "the corrupt gate's refusal: {unexamined:?}"
    );
    // The owed retirement still finishes.
    run(&mut world, owed.clone()).unwrap();
    assert_retired(&world, UID);
}

/// F9: a gate a retirement holds whose alias has no head at all (a retirement freezes only
/// under its head, and heads are never deleted) is corruption: reported, never "resumed" into a
/// barrier that would find nothing to retire on every start.
#[test]
fn f9_a_retirement_gate_without_its_head_is_unexamined() {
    let mut world = world();
    let op = managed_retirement_op_id(&uid(UID3)).unwrap();
    world.kv.put(
        Store::Records,
        &keys::uid_reservation(&uid(UID3)),
        format!(r#"{{"owner":"{OWNER}","actor":"{ACTOR}","mintedBy":"{MGR}"}}"#).as_bytes(),
    );
    world.kv.put(
        Store::Auth,
        &keys::agent_gate(&uid(UID3)),
        format!(
            r#"{{"lifecycleUid":"{UID3}","state":"frozen","generation":1,"op":{{"opId":"{op}","kind":"retirement"}}}}"#
        )
        .as_bytes(),
    );
    let found = find(&mut world);
    assert!(found.retirements.is_empty(), "{:?}", found.retirements);
    let [e] = found.unexamined.as_slice() else {
        panic!("{:?}", found.unexamined);
    };
    assert_eq!(e.code, ErrorCode::Internal, "{e}");
    assert!(
        e.message.contains("head") && e.message.contains("corruption"),
        "{e}"
    );
}

#[test]
fn a_deleted_gate_key_is_unexamined_not_absent() {
    // A listing names markers too; a never-deleted gate's marker is corruption (F9).
    let mut world = world();
    live(&mut world, UID, 1);
    crashed_retirement(&mut world, UID, 1);
    world
        .kv
        .put(Store::Auth, &keys::agent_gate(&uid(UID3)), b"{}");
    world
        .kv
        .delete_unpinned(Store::Auth, &keys::agent_gate(&uid(UID3)));
    let found = run(&mut world, FindOpenOperations { guard: None }).unwrap();
    let [e] = found.unexamined.as_slice() else {
        panic!("{:?}", found.unexamined);
    };
    assert!(e.message.contains("F9") && e.message.contains(UID3), "{e}");
    assert_eq!(found.retirements.len(), 1, "{:?}", found.retirements);
}

// ---- under the plane claim -------------------------------------------------------------------

fn nkey(c: char) -> String {
    format!("U{}", c.to_string().repeat(55))
}

fn claim(world: &mut ModelWorld) -> ClaimHold {
    run(
        world,
        AcquirePlaneClaim {
            space: SpaceName::parse("s1").unwrap(),
            claim_id: "claim1".into(),
            ledger: ConnTuple::new("NSERVER", 11, &nkey('A')).unwrap(),
            records: ConnTuple::new("NSERVER", 12, &nkey('B')).unwrap(),
            now_ms: 1_780_000_000_123,
        },
    )
    .unwrap()
}

/// Another plane takes the claim: the row rewritten under another claim id and generation.
fn steal(world: &mut ModelWorld) {
    let row = ClaimRow::parse(&world.kv.get(Store::Auth, PLANE_CLAIM_KEY).unwrap().value).unwrap();
    let stolen = ClaimRow {
        claim_id: "claim2".into(),
        generation: row.generation + 1,
        ..row
    };
    world
        .kv
        .put(Store::Auth, PLANE_CLAIM_KEY, &stolen.to_bytes());
}

fn lost(e: &cotal_core::EpError, words: &[&str]) {
    assert_eq!(ClaimRefusal::of(e), Some(ClaimRefusal::Lost), "{e}");
    assert_eq!(e.code, ErrorCode::FailedPrecondition, "{e}");
    for w in words {
        assert!(e.message.contains(w), "{w:?} missing from: {e}");
    }
}

#[test]
fn a_held_claim_guards_the_listing_and_the_owed_retirement_carries_it() {
    let mut world = world();
    let hold = claim(&mut world);
    live(&mut world, UID, 1);
    crashed_retirement(&mut world, UID, 2);
    let found = run(
        &mut world,
        FindOpenOperations {
            guard: Some(hold.clone()),
        },
    )
    .unwrap();
    let owed = owes_one(&found, UID, Some(&hold));
    run(&mut world, owed).unwrap();
    assert_retired(&world, UID);
    let found = run(&mut world, FindOpenOperations { guard: Some(hold) }).unwrap();
    owes_nothing(&found);
}

#[test]
fn a_stolen_claim_refuses_the_listing_before_it_runs() {
    let mut world = world();
    let hold = claim(&mut world);
    live(&mut world, UID, 1);
    crashed_retirement(&mut world, UID, 2);
    steal(&mut world);
    let before = world.log.len();
    let e = run(&mut world, FindOpenOperations { guard: Some(hold) }).unwrap_err();
    lost(&e, &["refusing to enumerate", "no longer held"]);
    assert!(
        !world.log[before..]
            .iter()
            .any(|e| matches!(e, Effect::Kv(KvRequest::Keys { .. }))),
        "no listing ran"
    );
}

#[test]
fn a_claim_stolen_mid_listing_discards_the_enumeration() {
    let mut world = world();
    let hold = claim(&mut world);
    live(&mut world, UID, 1);
    crashed_retirement(&mut world, UID, 2);
    let mut machine = Replay::new(FindOpenOperations { guard: Some(hold) });
    let mut step = machine.step(None);
    let result = loop {
        match step {
            Step::Effect(effect) => {
                let listing = matches!(&effect, Effect::Kv(KvRequest::Keys { .. }));
                let observed = World::perform(&mut world, &effect);
                if listing {
                    steal(&mut world);
                }
                step = machine.step(Some(observed));
            }
            Step::Done(result) => break result,
        }
    };
    lost(&result.unwrap_err(), &["DISCARDING this enumeration"]);
}

#[test]
fn a_retirement_under_a_stolen_claim_refuses_before_revoking_anything() {
    let mut world = world();
    let hold = claim(&mut world);
    live(&mut world, UID, 1);
    let stale = RetireLifecycle {
        guard: Some(hold),
        ..retire(UID)
    };
    steal(&mut world);
    let e = run(&mut world, stale.clone()).unwrap_err();
    lost(&e, &["refusing to enumerate"]);
    let rows = family(&world, UID);
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|r| r.state() == CredState::Active),
        "{rows:?}"
    );
    assert!(world.evicted().is_empty(), "nothing was evicted");
    assert_eq!(
        world.kv.get(Store::Records, &keys::frontier(&uid(UID))),
        None
    );
    // The gate stays frozen by the op, so the next plane's boot owes it and finishes it.
    let op = managed_retirement_op_id(&uid(UID)).unwrap();
    assert!(gate_row(&world, UID).is_retirement_of(&op, GateState::Frozen));
    let owed = owes_one(&find(&mut world), UID, None);
    run(&mut world, owed).unwrap();
    assert_retired(&world, UID);
}
