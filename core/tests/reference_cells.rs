//! Ports of the reference's acceptance cells onto the KV model:
//! reference-gate-impl §6.1 (`endpoint-serve-gate.smoke.ts`, cells A1–E4) and §6.6
//! (`sibling-mint-fence.smoke.ts`: FROZEN, MOVED, SUPERSEDED, CONTENDED).
// Test code: a failed unwrap is a failed test, which is the point.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::*;
use cotal_core::barrier;
use cotal_core::driver::ModelWorld;
use cotal_core::gate::{EndpointGate, GateState, OpKind};
use cotal_core::issuance::{GateObservation, ProvisionGate};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::{KvOp, KvOutcome, KvRequest, Revision, Store};
use cotal_core::ledger::{self, CredState, LedgerRow, Revocation};
use cotal_core::machine::Ctx;
use cotal_core::names::{Principal, SourceMember};
use cotal_core::ErrorCode;

/// The mint adapter's revision-pinned touch (`commit(expectedRevision)` of the reference),
/// expressed on the model: true iff the gate is open at exactly `pin`.
fn commit(world: &mut ModelWorld, pin: Revision) -> bool {
    let key = gate_ref().key();
    let Some(entry) = world.kv.get(Store::Auth, &key) else {
        return false;
    };
    if entry.revision != pin
        || EndpointGate::parse(&entry.value).unwrap().state() != GateState::Open
    {
        return false;
    }
    matches!(
        world.kv.execute(&KvRequest::Update {
            store: Store::Auth,
            key,
            value: entry.value,
            expected: pin,
        }),
        KvOutcome::Written(_)
    )
}

fn stage(world: &mut ModelWorld, row: &LedgerRow) {
    let (key, bytes) = (row.key(), row.to_bytes());
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| {
            ledger::create_byte_idempotent(cx, Store::Auth, &key, &bytes, "ledger row")
        }),
    )
    .unwrap();
}

fn enumerate(world: &mut ModelWorld) -> Vec<barrier::FamilyRow> {
    let gate = gate_ref();
    run(world, barrier::EnumerateFamily { gate }).unwrap()
}

fn evict(world: &mut ModelWorld, holders: Vec<Principal>) -> Vec<bool> {
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| cx.evict(holders.clone())),
    )
    .unwrap()
}

fn c2_row() -> LedgerRow {
    let gate = gate_ref();
    LedgerRow::endpoint_active(
        gate.endpoint,
        &gate.instance,
        cotal_core::names::CredentialId::parse(&format!("sha256-{}", "a".repeat(64))).unwrap(),
        principal(P),
        vec![SourceMember::parse("session.abc").unwrap()],
        1_900_000_000,
    )
    .unwrap()
}

#[test]
fn endpoint_serve_gate_cells_a1_to_e4() {
    let mut world = ModelWorld::default();

    // A1: provision → open, generation 0, no op, principal P.
    provision(&mut world);
    let a1 = observe(&mut world).unwrap();
    assert_eq!(a1.gate.state(), GateState::Open);
    assert_eq!(a1.gate.generation().0, 0);
    assert!(a1.gate.op().is_none());
    assert_eq!(a1.gate.principal(), &principal(P));
    // A2: provision again with P → no error, generation still 0.
    provision(&mut world);
    assert_eq!(observe(&mut world).unwrap().gate.generation().0, 0);
    // A3: provision with a different principal → conflict.
    let a3 = run(
        &mut world,
        ProvisionGate {
            gate: gate_ref(),
            principal: principal(OTHER),
        },
    );
    assert_eq!(a3.unwrap_err().code, ErrorCode::Conflict);

    // B1: barrier(op1).observe → open, identity as configured.
    let op1 = op(1);
    let b1 = observe(&mut world).unwrap();
    assert_eq!(b1.gate.state(), GateState::Open);
    assert_eq!(gate_ref().key(), format!("epgate.throwaway.{IID}"));
    // B2: freeze(observed.revision) → token; frozen, op.opId = op1, kind registration.
    let token = freeze(&mut world, &op1).unwrap();
    let b2 = observe(&mut world).unwrap();
    assert_eq!(b2.gate.state(), GateState::Frozen);
    assert_eq!(b2.gate.op().unwrap().op_id(), &op1);
    assert_eq!(b2.gate.op().unwrap().kind(), OpKind::Registration);
    assert_eq!(b2.revision, token.0);
    // B3: the mint adapter sees frozen; commit(token) → false (commit is open-only).
    assert!(!commit(&mut world, token.0));
    // B4: reopen(token, gen+1, same epoch, regRev 1, same nar) → open, generation 1, no op.
    assert!(reopen(&mut world, &op1, token, coords(1, 0, 1, 0)).unwrap());
    let b4 = observe(&mut world).unwrap();
    assert_eq!(b4.gate.state(), GateState::Open);
    assert_eq!(b4.gate.generation().0, 1);
    assert_eq!(b4.gate.registration_revision().0, 1);
    assert!(b4.gate.op().is_none());

    // C1: mint observe → open at generation 1.
    let c1 = observe(&mut world).unwrap();
    assert_eq!(
        (c1.gate.state(), c1.gate.generation().0),
        (GateState::Open, 1)
    );
    // C2: stage the row → exists, active, holder P, endpoint and lifecycleUid correct.
    let row = c2_row();
    stage(&mut world, &row);
    let stored = LedgerRow::parse(
        &world.kv.get(Store::Auth, &row.key()).unwrap().value,
        &row.key(),
    )
    .unwrap();
    assert_eq!(stored.state(), CredState::Active);
    assert_eq!(stored.holder_principal(), &principal(P));
    assert_eq!(stored.endpoint().unwrap().as_str(), "throwaway");
    assert_eq!(stored.lifecycle_uid().as_str(), IID);
    // C3: commit(observed revision) → true; C4: commit(revision − 1) → false.
    assert!(commit(&mut world, c1.revision));
    let now = observe(&mut world).unwrap().revision;
    assert!(!commit(&mut world, Revision(now.0 - 1)));

    // D1: a barrier with no evictor: evict(P) → not verified.
    assert_eq!(evict(&mut world, vec![principal(P)]), vec![false]);
    // D2: with an evictor: freeze wins, enumerate returns exactly the C2 row, revoke, evict,
    // reopen at gen+1 / regRev 2, re-enumerate shows revoked.
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    let op2 = op(2);
    let token = freeze(&mut world, &op2).unwrap();
    let rows = enumerate(&mut world);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].key, row.key());
    assert_eq!(rows[0].row.state(), CredState::Active);
    assert_eq!(rows[0].row.holder_principal(), &principal(P));
    let key = rows[0].key.clone();
    let revoked = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| ledger::revoke_row(cx, &key)),
    )
    .unwrap();
    assert_eq!(revoked, Revocation::Revoked);
    world.log.clear();
    assert_eq!(evict(&mut world, vec![principal(P)]), vec![true]);
    assert_eq!(world.evicted(), vec![principal(P)]);
    assert!(reopen(&mut world, &op2, token, coords(2, 0, 2, 0)).unwrap());
    assert_eq!(observe(&mut world).unwrap().gate.generation().0, 2);
    assert_eq!(enumerate(&mut world)[0].row.state(), CredState::Revoked);

    // E1: freeze by bar3 wins; E2: bar4.freeze(current revision) → null.
    let (op3, op4) = (op(3), op(4));
    let before_e1 = observe(&mut world).unwrap();
    let token3 = freeze(&mut world, &op3).unwrap();
    let current = observe(&mut world).unwrap();
    let e2 = run(&mut world, {
        let (gate, op4, observed) = (gate_ref(), op4.clone(), current.clone());
        Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op4, &observed))
    });
    assert_eq!(
        e2.unwrap_err().code,
        ErrorCode::Conflict,
        "a frozen gate is refused before any CAS"
    );
    let e2_stale = run(&mut world, {
        let (gate, observed) = (gate_ref(), before_e1);
        Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op4, &observed))
    });
    assert_eq!(
        e2_stale.unwrap(),
        None,
        "the pinned CAS at the pre-freeze revision loses"
    );
    // E3: bar3.reopen(token − 1) → false; E4: bar3.reopen(token) → true.
    let stale_token = barrier::FreezeToken(Revision(token3.0 .0 - 1));
    assert!(!reopen(&mut world, &op3, stale_token, coords(3, 0, 2, 0)).unwrap());
    assert!(reopen(&mut world, &op3, token3, coords(3, 0, 2, 0)).unwrap());
}

// ---- §6.6 sibling mint fence -----------------------------------------------------------------

/// The manager's two sibling mints (goal-writer and session-ledger), each observing the gate and
/// committing through the sibling fence; `interpose` runs right after the mint's first gate read.
fn sibling_mints(
    world: &mut ModelWorld,
    interpose: fn(&mut KvModel),
) -> Vec<(
    LedgerRow,
    Result<cotal_core::issuance::Release, cotal_core::EpError>,
)> {
    let holders = [
        ("u_cccccccccccccccccccccccccc.goalw", 21),
        ("u_cccccccccccccccccccccccccc.sessl", 22),
    ];
    holders
        .into_iter()
        .map(|(holder, n)| {
            let row = sibling_row(n, holder);
            world.kv.inject(
                Trigger::new(Store::Auth, KvOp::Get, gate_ref().key()),
                Fault::After(Box::new(interpose)),
            );
            let observed = observe(world).unwrap();
            let result = commit_sibling(world, observed, row.clone());
            (row, result)
        })
        .collect()
}

fn active_rows(world: &ModelWorld) -> usize {
    family(world)
        .iter()
        .filter(|(_, s)| *s == CredState::Active)
        .count()
}

#[test]
fn sibling_cell_frozen_refuses_before_any_write() {
    let mut world = registered_world(7);
    freeze(&mut world, &op(2)).unwrap();
    for (_, result) in sibling_mints(&mut world, |_| {}) {
        assert_eq!(result.unwrap_err().code, ErrorCode::Expired);
    }
    assert_eq!(active_rows(&world), 0);
    assert!(family(&world).is_empty());
}

#[test]
fn sibling_cell_moved_refuses_and_revokes_the_staged_row() {
    let mut world = registered_world(7);
    for (row, result) in sibling_mints(&mut world, freeze_raw) {
        assert_eq!(result.unwrap_err().code, ErrorCode::Expired);
        // The first mint staged and revoked; the second saw the frozen gate and wrote nothing.
        assert_ne!(row_state(&world, &row.key()), Some(CredState::Active));
    }
    assert_eq!(active_rows(&world), 0);
}

#[test]
fn sibling_cell_superseded_refuses_even_though_the_gate_is_open_again() {
    let mut world = registered_world(7);
    let gen0 = observe(&mut world).unwrap().gate.generation().0;
    for (_, result) in sibling_mints(&mut world, supersede_raw) {
        assert_eq!(result.unwrap_err().code, ErrorCode::Expired);
    }
    let now: GateObservation = observe(&mut world).unwrap();
    assert_eq!(now.gate.state(), GateState::Open);
    assert_eq!(
        now.gate.generation().0,
        gen0 + 2,
        "superseded once per mint"
    );
    assert_eq!(active_rows(&world), 0);
}

#[test]
fn sibling_cell_contended_by_a_peer_touch_succeeds_exactly_once() {
    let mut world = registered_world(7);
    let before = observe(&mut world).unwrap();
    let results = sibling_mints(&mut world, touch_raw);
    let after = observe(&mut world).unwrap();
    assert!(after.revision.0 >= before.revision.0 + 2);
    assert_eq!(
        after.gate, before.gate,
        "state, generation and epoch unchanged"
    );
    for (row, result) in results {
        let release = result.unwrap();
        assert_eq!(release.row_key, row.key());
        assert!(release.row_key.ends_with(row.credential_id().as_str()));
        assert_eq!(row_state(&world, &row.key()), Some(CredState::Active));
    }
    assert_eq!(
        active_rows(&world),
        2,
        "exactly one new active row per released credential"
    );
}
