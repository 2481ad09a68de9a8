//! Deterministic fence schedules, one per interleaving worth pinning, and "teeth" tests that
//! run deliberately broken mint and barrier scripts through the same scenario to show the
//! checker catches each broken rule.
//!
//! Effect counts the schedules rely on (see core's issuance.rs and the scenario's barrier):
//! * serve mint: get gate, create row, touch gate, then done;
//! * sibling mint: get gate, create row, touch gate (a lost touch: re-read gate, touch again);
//! * barrier: get gate, freeze, list family, get each listed row, then (get row, revoke row)
//!   per active row, get gate, reopen, then done.
//!
//! The k-th `Step` of an actor executes its k-th effect; one more `Step` collects the result.
// Test code: a failed unwrap is a failed test, which is the point.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_core::barrier::{self, FreezeToken};
use cotal_core::gate::{GateState, Generation};
use cotal_core::issuance::{observe_gate, GateRef, Release};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::ledger::{self, CredState, LedgerRow};
use cotal_core::machine::{Ctx, Halt, Replay, Script};
use cotal_core::{EpError, ErrorCode};
use cotal_tests::fence::{
    run_ops, BarrierOutcome, Config, FaultTarget, MintKind, MintStatus, Op, Scenario, Violation,
};

const M0: Op = Op::Step(0);

fn scenario(minters: Vec<MintKind>, barriers: u8) -> Scenario {
    Scenario::new(&Config::new(minters, barriers)).unwrap()
}

fn apply_all(s: &mut Scenario, ops: &[Op]) {
    for (i, op) in ops.iter().enumerate() {
        s.apply(op)
            .unwrap_or_else(|v| panic!("op #{i} {op:?}: {v}"));
    }
}

fn steps(actor: u8, n: usize) -> Vec<Op> {
    vec![Op::Step(actor); n]
}

fn status(s: &Scenario, mint: usize) -> &MintStatus {
    &s.mints()[mint].status
}

fn refused_code(s: &Scenario, mint: usize) -> ErrorCode {
    match status(s, mint) {
        MintStatus::Refused(e) => e.code,
        other => panic!("mint {mint} is {other:?}, not refused"),
    }
}

// ---- correct scripts under hostile schedules ---------------------------------------------------

#[test]
fn f19_serve_mint_on_a_quiet_gate_releases_and_ledgers() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    apply_all(&mut s, &steps(0, 4));
    assert!(matches!(status(&s, 0), MintStatus::Released(_)));
    assert_eq!(s.row_state(&s.mints()[0].row_key), Some(CredState::Active));
    assert_eq!(s.finish().unwrap().serve_releases, 1);
}

#[test]
fn f20_freeze_between_stage_and_touch_refuses_expired_and_revokes_row() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    // Mint: observe, stage. Barrier (actor 1): observe, freeze. Mint: touch (lost), then it
    // revokes its own row (read, update) and refuses.
    let mut ops = steps(0, 2);
    ops.extend(steps(1, 2));
    ops.extend(steps(0, 4));
    apply_all(&mut s, &ops);
    assert_eq!(refused_code(&s, 0), ErrorCode::Expired);
    assert_eq!(s.row_state(&s.mints()[0].row_key), Some(CredState::Revoked));
    assert_eq!(s.stats().lost_touches, 1);
    let stats = s.finish().unwrap();
    assert_eq!(stats.barriers_completed, 1);
    assert_eq!(stats.releases(), 0);
}

#[test]
fn f21_freeze_after_release_enumerates_and_revokes_row() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let mut ops = steps(0, 4);
    // observe, freeze, list, get row, get row, revoke, get gate, reopen, done
    ops.extend(steps(1, 9));
    apply_all(&mut s, &ops);
    assert!(!s.is_busy(1));
    assert!(matches!(status(&s, 0), MintStatus::Released(_)));
    assert_eq!(s.row_state(&s.mints()[0].row_key), Some(CredState::Revoked));
    let gate = s.read_gate().unwrap();
    assert_eq!(
        (gate.state(), gate.generation()),
        (GateState::Open, Generation(2))
    );
    let stats = s.finish().unwrap();
    assert_eq!((stats.barriers_completed, stats.reopens), (1, 1));
}

#[test]
fn f21_ambiguous_applied_freeze_still_enumerates_released_row() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let mut ops = steps(0, 4);
    ops.push(Op::Ambiguous {
        applied: true,
        target: FaultTarget::Gate,
    });
    // The freeze commits but is answered ambiguously; the barrier reads the gate back, finds
    // its own op id, and goes on: list, get row, get row, revoke, get gate, reopen (F21
    // checked), done.
    ops.extend(steps(1, 10));
    apply_all(&mut s, &ops);
    assert!(matches!(status(&s, 0), MintStatus::Released(_)));
    assert_eq!(s.row_state(&s.mints()[0].row_key), Some(CredState::Revoked));
    assert!(!s.is_busy(1));
    let stats = s.finish().unwrap();
    assert_eq!((stats.barriers_completed, stats.reopens), (1, 1));
}

#[test]
fn f21_ambiguous_not_applied_reopen_is_retried_and_checked_again() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let mut ops = steps(0, 4);
    // Barrier: observe, freeze, list, get row, get row, revoke — then its reopen will be lost.
    ops.extend(steps(1, 6));
    ops.push(Op::Ambiguous {
        applied: false,
        target: FaultTarget::Gate,
    });
    apply_all(&mut s, &ops);
    let stats = s.finish().unwrap();
    assert_eq!((stats.barriers_completed, stats.reopens), (1, 1));
}

#[test]
fn f43_sibling_mint_repins_past_a_peer_touch_and_releases() {
    let mut s = scenario(vec![MintKind::Sibling], 1);
    // Observe, stage, [peer touch], touch (lost), re-read (only the revision moved), touch
    // (won), done.
    let ops = [M0, M0, Op::PeerTouch, M0, M0, M0, M0];
    apply_all(&mut s, &ops);
    assert!(matches!(status(&s, 0), MintStatus::Released(_)));
    let stats = s.finish().unwrap();
    assert_eq!(
        (
            stats.sibling_releases,
            stats.lost_touches,
            stats.peer_touches
        ),
        (1, 1, 1)
    );
}

#[test]
fn f43_sibling_mint_refuses_expired_when_a_barrier_moved_the_gate() {
    let mut s = scenario(vec![MintKind::Sibling], 1);
    let mut ops = steps(0, 2);
    // A whole barrier, which also revokes the staged (still active) sibling row.
    ops.extend(steps(1, 9));
    // Touch (lost), re-read (generation moved), revoke (already revoked: a read), done.
    ops.extend(steps(0, 4));
    apply_all(&mut s, &ops);
    assert_eq!(refused_code(&s, 0), ErrorCode::Expired);
    assert_eq!(s.row_state(&s.mints()[0].row_key), Some(CredState::Revoked));
    s.finish().unwrap();
}

#[test]
fn f20_serve_mint_refuses_on_a_peer_touch_and_revokes_row() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    // A serve mint does not re-pin: a lost touch refuses even if only a peer touched the gate.
    let ops = [M0, M0, Op::PeerTouch, M0, M0, M0, M0];
    apply_all(&mut s, &ops);
    assert_eq!(refused_code(&s, 0), ErrorCode::Expired);
    assert_eq!(s.row_state(&s.mints()[0].row_key), Some(CredState::Revoked));
}

#[test]
fn f20_ambiguous_applied_touch_fails_closed_and_revokes_row() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let ops = [
        M0,
        M0,
        Op::Ambiguous {
            applied: true,
            target: FaultTarget::Gate,
        },
        M0,
        M0,
        M0,
        M0,
    ];
    apply_all(&mut s, &ops);
    assert_eq!(refused_code(&s, 0), ErrorCode::Unavailable);
    assert_eq!(s.row_state(&s.mints()[0].row_key), Some(CredState::Revoked));
    // The touch did commit: a later barrier must find the row (already revoked: no revoke).
    // observe, freeze, list, get row, get gate, reopen, done.
    apply_all(&mut s, &steps(1, 7));
    assert!(!s.is_busy(1));
    assert_eq!(s.finish().unwrap().barriers_completed, 1);
}

#[test]
fn f20_revoke_failure_is_reported_as_reconciliation_debt() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let ops = [
        M0,
        M0,
        Op::PeerTouch,
        Op::Unavailable {
            target: FaultTarget::Revoke,
        },
        M0, // touch lost
        M0, // read row
        M0, // revoke: refused before sending
        M0, // done: expired, naming the row it left active
    ];
    apply_all(&mut s, &ops);
    let row = s.mints()[0].row_key.clone();
    match status(&s, 0) {
        MintStatus::Refused(e) => {
            assert_eq!(e.code, ErrorCode::Expired);
            assert!(e.message.contains(&row), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.row_state(&row), Some(CredState::Active));
    assert_eq!(s.stats().debts, 1);
    // A barrier pays the debt: observe, freeze, list, get row, get row, revoke.
    apply_all(&mut s, &steps(1, 6));
    assert_eq!(s.row_state(&row), Some(CredState::Revoked));
    s.finish().unwrap();
}

#[test]
fn f20_unavailable_stage_refuses_without_a_row() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let ops = [
        Op::Unavailable {
            target: FaultTarget::Stage,
        },
        M0,
        M0,
        M0,
        M0,
    ];
    apply_all(&mut s, &ops);
    assert_eq!(refused_code(&s, 0), ErrorCode::Unavailable);
    assert_eq!(s.row_state(&s.mints()[0].row_key), None);
}

#[test]
fn f22_crashed_mint_after_its_touch_is_never_released_and_a_barrier_revokes_its_row() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let mut ops = steps(0, 3);
    ops.push(Op::Crash(0));
    ops.extend(steps(1, 6)); // observe, freeze, list, get row, get row, revoke
    apply_all(&mut s, &ops);
    assert!(matches!(status(&s, 0), MintStatus::Crashed));
    assert_eq!(s.row_state(&s.mints()[0].row_key), Some(CredState::Revoked));
    let stats = s.finish().unwrap();
    assert_eq!((stats.releases(), stats.mint_crashes), (0, 1));
    assert_eq!(stats.refused(), 0, "a crash is not a refusal");
}

#[test]
fn f21_crashed_barrier_resumes_its_own_freeze_and_reopens() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let mut ops = steps(0, 4);
    ops.extend(steps(1, 3)); // observe, freeze, list
    ops.push(Op::Crash(1));
    ops.extend(steps(0, 2)); // a new mint observes the frozen gate and refuses
    apply_all(&mut s, &ops);
    assert_eq!(refused_code(&s, 1), ErrorCode::Expired);
    assert_eq!(s.read_gate().unwrap().state(), GateState::Frozen);
    // Resume: observe (frozen by us), list, get row, get row, revoke, get gate, reopen, done.
    apply_all(&mut s, &steps(1, 8));
    assert!(!s.is_busy(1));
    let stats = s.finish().unwrap();
    assert_eq!(
        (stats.barrier_crashes, stats.barrier_resumes, stats.reopens),
        (1, 1, 1)
    );
}

#[test]
fn f21_unavailable_reopen_leaves_the_gate_frozen_until_the_barrier_resumes() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let mut ops = steps(1, 4); // observe, freeze, list (empty), get gate
    ops.push(Op::Unavailable {
        target: FaultTarget::Gate,
    });
    ops.extend(steps(1, 2)); // reopen refused before sending; barrier fails
    apply_all(&mut s, &ops);
    assert_eq!(s.stats().barrier_failures, 1);
    assert_eq!(s.read_gate().unwrap().state(), GateState::Frozen);
    // Resume: observe (frozen by us), list, get gate, reopen, done.
    apply_all(&mut s, &steps(1, 5));
    let stats = s.finish().unwrap();
    assert_eq!((stats.barrier_resumes, stats.reopens), (1, 1));
}

#[test]
fn f21_two_barriers_race_one_freezes_the_other_loses() {
    let mut s = scenario(vec![MintKind::Serve], 2);
    // Both observe the open gate; barrier 1 freezes first, barrier 2's pinned freeze loses.
    let ops = [
        Op::Step(1),
        Op::Step(2),
        Op::Step(1),
        Op::Step(2),
        Op::Step(2),
    ];
    apply_all(&mut s, &ops);
    let stats = s.finish().unwrap();
    assert_eq!((stats.barriers_completed, stats.barriers_lost), (1, 1));
    assert_eq!(stats.reopens, 1);
}

#[test]
fn q13_each_completed_barrier_advances_generation_by_exactly_one() {
    let mut s = scenario(vec![MintKind::Serve, MintKind::Sibling], 2);
    for round in 0..3u8 {
        apply_all(&mut s, &steps(0, 4));
        apply_all(&mut s, &steps(1, 4));
        let barrier = 2 + round % 2;
        apply_all(&mut s, &steps(barrier, 1));
        s.drain().unwrap();
    }
    let gate = s.read_gate().unwrap();
    assert_eq!(gate.generation(), Generation(4));
    let stats = s.finish().unwrap();
    assert_eq!(stats.reopens, 3);
    assert_eq!(stats.barriers_completed, 3);
}

#[test]
fn run_ops_reports_nothing_for_an_empty_schedule() {
    let stats = run_ops(&Config::new(vec![MintKind::Serve], 1), &[]).unwrap();
    assert_eq!(stats.releases() + stats.refused(), 0);
}

// ---- teeth: broken scripts the checker must catch ---------------------------------------------

/// Releases whatever its touch wins: never checks that the observed gate is open (breaks F22).
struct ReleaseWithoutOpenCheck {
    gate: GateRef,
    row: LedgerRow,
}

impl Script for ReleaseWithoutOpenCheck {
    type Output = Release;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Release, Halt> {
        let observed =
            observe_gate(cx, &self.gate)?.ok_or_else(|| Halt::Fail(EpError::expired("no gate")))?;
        let row_key = self.row.key();
        ledger::create_byte_idempotent(cx, Store::Auth, &row_key, &self.row.to_bytes(), "row")?;
        match cx.kv(KvRequest::Update {
            store: Store::Auth,
            key: self.gate.key(),
            value: observed.raw.clone(),
            expected: observed.revision,
        })? {
            KvOutcome::Written(gate_revision) => Ok(Release {
                row_key,
                gate_revision,
            }),
            other => Err(EpError::expired(format!("touch: {other:?}")).into()),
        }
    }
}

/// Observes an open gate, stages, then re-reads the gate and touches at the *fresh* revision:
/// the touch is not pinned to the observation, so it overwrites whatever happened since (F19).
struct UnpinnedTouch {
    gate: GateRef,
    row: LedgerRow,
}

impl Script for UnpinnedTouch {
    type Output = Release;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Release, Halt> {
        let observed = observe_gate(cx, &self.gate)?
            .filter(|o| o.gate.state() == GateState::Open)
            .ok_or_else(|| Halt::Fail(EpError::expired("not open")))?;
        let row_key = self.row.key();
        ledger::create_byte_idempotent(cx, Store::Auth, &row_key, &self.row.to_bytes(), "row")?;
        let now =
            observe_gate(cx, &self.gate)?.ok_or_else(|| Halt::Fail(EpError::expired("no gate")))?;
        match cx.kv(KvRequest::Update {
            store: Store::Auth,
            key: self.gate.key(),
            value: observed.raw.clone(),
            expected: now.revision,
        })? {
            KvOutcome::Written(gate_revision) => Ok(Release {
                row_key,
                gate_revision,
            }),
            other => Err(EpError::expired(format!("touch: {other:?}")).into()),
        }
    }
}

/// Refuses on a lost touch but forgets to revoke its staged row (breaks F20).
struct RefuseWithoutRevoke {
    gate: GateRef,
    row: LedgerRow,
}

impl Script for RefuseWithoutRevoke {
    type Output = Release;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Release, Halt> {
        let observed = observe_gate(cx, &self.gate)?
            .filter(|o| o.gate.state() == GateState::Open)
            .ok_or_else(|| Halt::Fail(EpError::expired("not open")))?;
        let row_key = self.row.key();
        ledger::create_byte_idempotent(cx, Store::Auth, &row_key, &self.row.to_bytes(), "row")?;
        match cx.kv(KvRequest::Update {
            store: Store::Auth,
            key: self.gate.key(),
            value: observed.raw.clone(),
            expected: observed.revision,
        })? {
            KvOutcome::Written(gate_revision) => Ok(Release {
                row_key,
                gate_revision,
            }),
            _ => Err(EpError::expired("the gate moved").into()),
        }
    }
}

/// Enumerates the family *before* freezing (breaks F21): a mint that wins its touch between
/// the enumeration and the freeze is never revoked.
struct EnumerateBeforeFreeze {
    gate: GateRef,
    op_id: cotal_core::names::OpId,
}

impl Script for EnumerateBeforeFreeze {
    type Output = BarrierOutcome;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<BarrierOutcome, Halt> {
        let family = barrier::enumerate_family(cx, &self.gate)?;
        let observed =
            observe_gate(cx, &self.gate)?.ok_or_else(|| Halt::Fail(EpError::expired("no gate")))?;
        let Some(token) = barrier::freeze(cx, &self.gate, &self.op_id, &observed)? else {
            return Ok(BarrierOutcome::Lost);
        };
        for member in family.iter().filter(|m| m.row.state() == CredState::Active) {
            ledger::revoke_row(cx, &member.key)?;
        }
        let mut successor = observed.gate.coordinates();
        successor.generation = Generation(successor.generation.0 + 1);
        barrier::reopen(cx, &self.gate, &self.op_id, token, successor)?;
        Ok(BarrierOutcome::Reopened {
            token,
            revoked: family.len(),
            resumed: false,
        })
    }
}

/// Reopens by writing the pre-freeze bytes back at the freeze token: open again, generation
/// unchanged (breaks Q-13).
struct ReopenWithoutAdvance {
    gate: GateRef,
    op_id: cotal_core::names::OpId,
}

impl Script for ReopenWithoutAdvance {
    type Output = BarrierOutcome;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<BarrierOutcome, Halt> {
        let observed =
            observe_gate(cx, &self.gate)?.ok_or_else(|| Halt::Fail(EpError::expired("no gate")))?;
        let Some(token) = barrier::freeze(cx, &self.gate, &self.op_id, &observed)? else {
            return Ok(BarrierOutcome::Lost);
        };
        cx.kv(KvRequest::Update {
            store: Store::Auth,
            key: self.gate.key(),
            value: observed.raw.clone(),
            expected: token.0,
        })?;
        Ok(BarrierOutcome::LeftFrozen {
            token: FreezeToken(token.0),
        })
    }
}

fn serve_row(s: &mut Scenario) -> LedgerRow {
    let id = s.fresh_credential_id();
    let holder = s.gate_principal().clone();
    s.active_row(id, &holder).unwrap()
}

fn expect_violation(s: &mut Scenario, ops: &[Op]) -> Violation {
    for op in ops {
        if let Err(v) = s.apply(op) {
            return v;
        }
    }
    match s.drain().and_then(|()| s.final_check()) {
        Err(v) => v,
        Ok(()) => panic!("the broken script went unnoticed: {s:?}"),
    }
}

#[test]
fn f22_teeth_release_under_a_frozen_gate_is_caught() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    apply_all(&mut s, &steps(1, 2)); // the barrier freezes
    let row = serve_row(&mut s);
    let gate = s.gate_ref().clone();
    s.start_mint_with(
        0,
        row.key(),
        Box::new(Replay::new(ReleaseWithoutOpenCheck { gate, row })),
    )
    .unwrap();
    let v = expect_violation(&mut s, &steps(0, 4));
    assert_eq!(v.rule, "F19/F22", "{v}");
    assert!(v.detail.contains("frozen"), "{v}");
}

#[test]
fn f19_teeth_touch_without_revision_pin_is_caught() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let row = serve_row(&mut s);
    let gate = s.gate_ref().clone();
    s.start_mint_with(
        0,
        row.key(),
        Box::new(Replay::new(UnpinnedTouch { gate, row })),
    )
    .unwrap();
    let mut ops = steps(0, 2); // observe open, stage
    ops.extend(steps(1, 2)); // the barrier freezes
    ops.extend(steps(0, 2)); // re-read, touch at the frozen revision
    let v = expect_violation(&mut s, &ops);
    assert_eq!(v.rule, "F19/F22", "{v}");
}

#[test]
fn f20_teeth_refusal_that_leaves_its_row_active_is_caught() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let row = serve_row(&mut s);
    let gate = s.gate_ref().clone();
    s.start_mint_with(
        0,
        row.key(),
        Box::new(Replay::new(RefuseWithoutRevoke { gate, row })),
    )
    .unwrap();
    let v = expect_violation(&mut s, &[M0, M0, Op::PeerTouch, M0, M0]);
    assert_eq!(v.rule, "F20", "{v}");
}

#[test]
fn f21_teeth_enumerating_before_the_freeze_is_caught() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let gate = s.gate_ref().clone();
    let op_id = cotal_core::names::OpId::mint([0x42; 20]);
    s.start_barrier_with(
        1,
        Box::new(Replay::new(EnumerateBeforeFreeze { gate, op_id })),
    )
    .unwrap();
    let mut ops = steps(1, 1); // list: empty
    ops.extend(steps(0, 4)); // a serve mint releases
    ops.extend(steps(1, 5)); // observe, freeze, get gate, reopen
    let v = expect_violation(&mut s, &ops);
    assert_eq!(v.rule, "F21/F23", "{v}");
}

#[test]
fn q13_teeth_reopen_without_advancing_generation_is_caught() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let gate = s.gate_ref().clone();
    let op_id = cotal_core::names::OpId::mint([0x43; 20]);
    s.start_barrier_with(
        1,
        Box::new(Replay::new(ReopenWithoutAdvance { gate, op_id })),
    )
    .unwrap();
    let v = expect_violation(&mut s, &steps(1, 4));
    assert_eq!(v.rule, "Q-13", "{v}");
}

#[test]
fn f29_ambiguous_stage_revoked_by_a_barrier_before_read_back_is_refused_not_released() {
    let mut s = scenario(vec![MintKind::Serve], 1);
    let mut ops = vec![
        M0,
        Op::Ambiguous {
            applied: true,
            target: FaultTarget::Stage,
        },
        M0, // the stage commits, the answer is lost
    ];
    // A barrier freezes and revokes the freshly staged row before the mint reads it back.
    ops.extend(steps(1, 6)); // observe, freeze, list, get row, get row, revoke
    ops.extend(steps(0, 3)); // read back: our row, but revoked; re-read to name it; done
    apply_all(&mut s, &ops);
    let row = s.mints()[0].row_key.clone();
    assert_eq!(s.row_state(&row), Some(CredState::Revoked));
    // Nothing is released, and the refusal says why: a barrier moved the gate (F20), not a
    // foreign rebinding of the name (F29).
    assert_eq!(refused_code(&s, 0), ErrorCode::Expired);
    let stats = s.finish().unwrap();
    assert_eq!(stats.releases(), 0);
}
