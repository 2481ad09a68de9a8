//! One named test per fence rule this layer keeps (spec-fence-rules §4 C and D, F43), plus the
//! ambiguous-write branches of each machine (DESIGN §5.1), all on the KV model.
// Test code: a failed unwrap is a failed test, which is the point.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::*;
use cotal_core::barrier::{self, FreezeToken};
use cotal_core::driver::ModelWorld;
use cotal_core::gate::{EndpointGate, GateOp, GateState, OpKind};
use cotal_core::issuance::{FinalizeServeMint, ProvisionGate};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::settle::AMBIGUOUS_WRITE_ATTEMPTS;
use cotal_core::kv::{KvOp, KvRequest, Revision, Store};
use cotal_core::ledger::{self, CredState, Revocation};
use cotal_core::machine::{Ctx, Effect};
use cotal_core::ErrorCode;

fn serve_mint(
    world: &mut ModelWorld,
    n: u8,
) -> Result<cotal_core::issuance::Release, cotal_core::EpError> {
    run(
        world,
        FinalizeServeMint {
            gate: gate_ref(),
            grant: grant(0, 7, 0),
            credential: serve_credential(n, "term"),
        },
    )
}

fn sibling_mint(
    world: &mut ModelWorld,
    n: u8,
) -> Result<cotal_core::issuance::Release, cotal_core::EpError> {
    let observed = observe(world).unwrap();
    commit_sibling(world, observed, sibling_row(n, SIBLING))
}

fn gate_now(world: &ModelWorld) -> EndpointGate {
    stored_gate(&world.kv)
}

// ---- C. Gate structure and operation ownership -------------------------------------------

#[test]
fn f12_op_is_required_when_frozen_and_forbidden_when_open() {
    let open = EndpointGate::provisioned(principal(P)).unwrap();
    assert!(open.op().is_none());
    let frozen = open.frozen(GateOp::registration(op(1))).unwrap();
    assert_eq!(frozen.op().unwrap().kind(), OpKind::Registration);
    let reopened = frozen.reopened(&op(1), coords(1, 0, 0, 0)).unwrap();
    assert!(reopened.op().is_none());
    // Rows violating the rule never parse (more cases in records_golden.rs).
    let open_with_op = frozen
        .to_json()
        .replace(r#""state":"frozen""#, r#""state":"open""#);
    assert_eq!(
        EndpointGate::parse(open_with_op.as_bytes())
            .unwrap_err()
            .code,
        ErrorCode::Internal
    );
}

#[test]
fn f13_transitions_outside_the_allowed_sets_are_refused_before_any_cas() {
    let mut world = registered_world(7);
    let before = world.kv.last_sequence(Store::Auth);
    let open = gate_now(&world);
    // An activation intent never freezes an open gate.
    let activation = GateOp::new(op(2), OpKind::Activation, None).unwrap();
    assert_eq!(
        open.frozen(activation).unwrap_err().code,
        ErrorCode::BadRequest
    );
    // A retirement freeze never reopens.
    let retiring = open
        .frozen(GateOp::new(op(2), OpKind::Retirement, None).unwrap())
        .unwrap();
    assert_eq!(
        retiring
            .reopened(&op(2), coords(2, 0, 7, 0))
            .unwrap_err()
            .code,
        ErrorCode::FailedPrecondition
    );
    // Only takeover/registration carry a successor summary.
    assert!(GateOp::new(op(2), OpKind::Retirement, Some("x".into())).is_err());
    // A reopen that does not advance generation by exactly 1 is refused (Q-13) ...
    let frozen = open.frozen(GateOp::registration(op(2))).unwrap();
    for bad in [coords(1, 0, 7, 0), coords(3, 0, 7, 0), coords(2, 2, 7, 0)] {
        assert!(frozen.reopened(&op(2), bad).is_err(), "{bad:?}");
    }
    // ... and through the machine, before it writes anything.
    let token = freeze(&mut world, &op(2)).unwrap();
    let written = world.kv.last_sequence(Store::Auth);
    assert_eq!(written.0, before.0 + 1);
    assert_eq!(
        reopen(&mut world, &op(2), token, coords(5, 0, 7, 0))
            .unwrap_err()
            .code,
        ErrorCode::Internal
    );
    assert_eq!(world.kv.last_sequence(Store::Auth), written);
    assert_eq!(gate_now(&world).state(), GateState::Frozen);
}

#[test]
fn f14_only_the_freezing_operation_reopens_and_only_at_its_token() {
    let mut world = registered_world(7);
    let token = freeze(&mut world, &op(2)).unwrap();
    assert_eq!(
        reopen(&mut world, &op(3), token, coords(2, 0, 7, 0))
            .unwrap_err()
            .code,
        ErrorCode::PermissionDenied
    );
    assert!(!reopen(
        &mut world,
        &op(2),
        FreezeToken(Revision(token.0 .0 - 1)),
        coords(2, 0, 7, 0)
    )
    .unwrap());
    assert_eq!(gate_now(&world).state(), GateState::Frozen);
    assert!(reopen(&mut world, &op(2), token, coords(2, 0, 7, 0)).unwrap());
    assert_eq!(gate_now(&world).generation().0, 2);
}

#[test]
fn f15_a_retired_gate_never_mints_and_never_refreezes() {
    let mut world = registered_world(7);
    let retired = gate_now(&world)
        .to_json()
        .replace(r#""state":"open""#, r#""state":"retired""#)
        .replace(
            "}",
            &format!(r#","op":{{"opId":"{}","kind":"retirement"}}}}"#, op(4)),
        );
    world
        .kv
        .put(Store::Auth, &gate_ref().key(), retired.as_bytes());
    let err = serve_mint(&mut world, 1).unwrap_err();
    assert_eq!(err.code, ErrorCode::Expired);
    assert_eq!(err.details[0]["gateState"], "retired");
    assert_eq!(
        sibling_mint(&mut world, 2).unwrap_err().code,
        ErrorCode::Expired
    );
    let observed = observe(&mut world).unwrap();
    let (gate, op_id) = (gate_ref(), op(5));
    let refreeze = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op_id, &observed)),
    );
    assert_eq!(refreeze.unwrap_err().code, ErrorCode::Conflict);
    assert!(family(&world).is_empty());
}

#[test]
fn f16_a_second_barrier_neither_freezes_a_frozen_gate_nor_reopens_it() {
    let mut world = registered_world(7);
    let stale = observe(&mut world).unwrap();
    let token = freeze(&mut world, &op(2)).unwrap();
    // The second barrier's freeze is pinned to the pre-freeze observation: it loses.
    let (gate, op_id) = (gate_ref(), op(3));
    let lost = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op_id, &stale)),
    )
    .unwrap();
    assert_eq!(lost, None);
    // Re-observing shows frozen: freezing it again is refused before any CAS.
    let frozen = observe(&mut world).unwrap();
    assert_eq!(
        frozen
            .gate
            .frozen(GateOp::registration(op(3)))
            .unwrap_err()
            .code,
        ErrorCode::Conflict
    );
    assert_eq!(
        reopen(&mut world, &op(3), token, coords(2, 0, 7, 0))
            .unwrap_err()
            .code,
        ErrorCode::PermissionDenied
    );
}

// ---- D. The mint protocol ------------------------------------------------------------------

#[test]
fn f19_mint_order_is_observe_stage_touch_then_release() {
    let mut world = registered_world(7);
    world.log.clear();
    let release = serve_mint(&mut world, 1).unwrap();
    let ops: Vec<(KvOp, String)> = world
        .log
        .iter()
        .map(|e| match e {
            Effect::Kv(r) => (r.op(), r.key().to_string()),
            other => panic!("unexpected effect {other:?}"),
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            (KvOp::Get, gate_ref().key()),
            (KvOp::Create, release.row_key.clone()),
            (KvOp::Update, gate_ref().key()),
        ],
        "three round trips: the touch reuses the observed bytes instead of re-reading"
    );
    assert_eq!(row_state(&world, &release.row_key), Some(CredState::Active));
    assert_eq!(
        world
            .kv
            .get(Store::Auth, &gate_ref().key())
            .unwrap()
            .revision,
        release.gate_revision
    );
}

#[test]
fn f20_a_lost_touch_revokes_the_staged_row_and_releases_nothing() {
    let mut world = registered_world(7);
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, gate_ref().family_prefix()),
        Fault::After(Box::new(touch_raw)),
    );
    let err = serve_mint(&mut world, 1).unwrap_err();
    assert_eq!(err.code, ErrorCode::Expired, "{err}");
    assert_eq!(
        family(&world),
        vec![(sibling_row(1, P).key(), CredState::Revoked)]
    );
}

#[test]
fn f21_freeze_beats_mint_when_it_lands_between_stage_and_touch() {
    let mut world = registered_world(7);
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, gate_ref().family_prefix()),
        Fault::After(Box::new(freeze_raw)),
    );
    assert_eq!(
        serve_mint(&mut world, 1).unwrap_err().code,
        ErrorCode::Expired
    );
    assert!(family(&world).iter().all(|(_, s)| *s == CredState::Revoked));
}

#[test]
fn f21_a_mint_that_won_is_enumerated_by_the_later_freeze() {
    let mut world = registered_world(7);
    let release = serve_mint(&mut world, 1).unwrap();
    freeze(&mut world, &op(2)).unwrap();
    let gate = gate_ref();
    let rows = run(&mut world, barrier::EnumerateFamily { gate }).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].key, release.row_key);
    assert_eq!(rows[0].row.state(), CredState::Active);
    assert_eq!(rows[0].row.holder_principal(), &principal(P));
}

#[test]
fn f22_no_release_and_no_row_under_a_frozen_gate() {
    let mut world = registered_world(7);
    freeze(&mut world, &op(2)).unwrap();
    let serve = serve_mint(&mut world, 1).unwrap_err();
    assert_eq!(serve.code, ErrorCode::Expired);
    assert_eq!(serve.details[0]["kind"], "ai.cotal.ep.lifecycle-blocked");
    assert_eq!(serve.details[0]["gateState"], "frozen");
    assert_eq!(serve.details[0]["blockedOp"]["kind"], "registration");
    assert_eq!(
        sibling_mint(&mut world, 2).unwrap_err().code,
        ErrorCode::Expired
    );
    assert!(
        family(&world).is_empty(),
        "a refused-at-observe mint writes nothing"
    );
}

#[test]
fn f23_after_a_reopen_no_credential_of_the_old_generation_is_live() {
    let mut world = registered_world(7);
    let old = serve_mint(&mut world, 1).unwrap();
    let stale = observe(&mut world).unwrap();
    let token = freeze(&mut world, &op(2)).unwrap();
    let gate = gate_ref();
    let rows = run(&mut world, barrier::EnumerateFamily { gate }).unwrap();
    for row in rows {
        let key = row.key.clone();
        run(
            &mut world,
            Proc(move |cx: &mut Ctx<'_>| ledger::revoke_row(cx, &key)),
        )
        .unwrap();
    }
    assert!(reopen(&mut world, &op(2), token, coords(2, 1, 8, 0)).unwrap());
    assert_eq!(row_state(&world, &old.row_key), Some(CredState::Revoked));
    // A sibling still holding the generation-1 observation cannot release.
    let err = commit_sibling(&mut world, stale, sibling_row(3, SIBLING)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Expired);
    assert_eq!(
        row_state(&world, &sibling_row(3, SIBLING).key()),
        Some(CredState::Revoked)
    );
}

#[test]
fn f26_revoke_is_monotonic_idempotent_and_loud_on_absence_or_markers() {
    let mut world = registered_world(7);
    let release = serve_mint(&mut world, 1).unwrap();
    let key = release.row_key.clone();
    let revoke = |world: &mut ModelWorld, key: String| {
        run(
            world,
            Proc(move |cx: &mut Ctx<'_>| ledger::revoke_row(cx, &key)),
        )
    };
    assert_eq!(
        revoke(&mut world, key.clone()).unwrap(),
        Revocation::Revoked
    );
    assert_eq!(
        revoke(&mut world, key.clone()).unwrap(),
        Revocation::AlreadyRevoked
    );
    assert_eq!(row_state(&world, &key), Some(CredState::Revoked));
    let absent = sibling_row(9, P).key();
    assert_eq!(
        revoke(&mut world, absent).unwrap_err().code,
        ErrorCode::FailedPrecondition
    );
    world.kv.delete_unpinned(Store::Auth, &key);
    assert_eq!(
        revoke(&mut world, key.clone()).unwrap_err().code,
        ErrorCode::FailedPrecondition
    );
    world.kv.purge(Store::Auth, &key);
    assert_eq!(
        revoke(&mut world, key).unwrap_err().code,
        ErrorCode::FailedPrecondition
    );
}

#[test]
fn f26_revoke_retries_a_lost_pin_a_bounded_number_of_times() {
    let mut world = registered_world(7);
    let key = serve_mint(&mut world, 1).unwrap().row_key;
    // Each read is followed by a rewrite of the same active row: every CAS loses.
    for _ in 0..ledger::REVOKE_ATTEMPTS {
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Get, key.clone()),
            Fault::After(Box::new({
                let key = key.clone();
                move |kv: &mut KvModel| {
                    let v = kv.get(Store::Auth, &key).unwrap().value;
                    kv.put(Store::Auth, &key, &v);
                }
            })),
        );
    }
    let k = key.clone();
    let err = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| ledger::revoke_row(cx, &k)),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("kept losing its pin"));
    assert_eq!(row_state(&world, &key), Some(CredState::Active));
}

#[test]
fn f27_a_serve_grant_at_any_stale_coordinate_is_expired() {
    for (epoch, reg, nar) in [(1, 7, 0), (0, 6, 0), (0, 7, 1)] {
        let mut world = registered_world(7);
        let err = run(
            &mut world,
            FinalizeServeMint {
                gate: gate_ref(),
                grant: grant(epoch, reg, nar),
                credential: serve_credential(1, "term"),
            },
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::Expired, "{epoch} {reg} {nar}: {err}");
        assert!(family(&world).is_empty());
    }
    // An open-at-birth gate (registration revision 0) can never satisfy a real grant.
    let mut world = ModelWorld::default();
    provision(&mut world);
    assert_eq!(
        serve_mint(&mut world, 1).unwrap_err().code,
        ErrorCode::Expired
    );
    // An absent gate is expired too.
    let mut empty = ModelWorld::default();
    assert_eq!(
        serve_mint(&mut empty, 1).unwrap_err().code,
        ErrorCode::Expired
    );
}

#[test]
fn f27_a_grant_for_another_gate_is_internal() {
    let mut world = registered_world(7);
    let mut foreign = grant(0, 7, 0);
    foreign.endpoint = cotal_core::names::EndpointName::parse("other").unwrap();
    let err = run(
        &mut world,
        FinalizeServeMint {
            gate: gate_ref(),
            grant: foreign,
            credential: serve_credential(1, "term"),
        },
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Internal);
}

#[test]
fn f28_a_sibling_actor_under_the_same_owner_cannot_win_the_serve_gate() {
    let mut world = registered_world(7);
    let err = run(
        &mut world,
        FinalizeServeMint {
            gate: gate_ref(),
            grant: grant(0, 7, 0),
            credential: serve_credential(1, "goalw"),
        },
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
    assert!(family(&world).is_empty(), "no active row is written");
}

#[test]
fn f29_staging_is_byte_idempotent_and_foreign_content_conflicts() {
    let mut world = registered_world(7);
    let first = serve_mint(&mut world, 1).unwrap();
    // A byte-identical retry of the same credential stages again without conflict.
    let again = serve_mint(&mut world, 1).unwrap();
    assert_eq!(first.row_key, again.row_key);
    // The same credential id bound to other content is a conflict.
    let foreign = sibling_row(1, SIBLING);
    assert_eq!(foreign.key(), first.row_key);
    let observed = observe(&mut world).unwrap();
    let err = commit_sibling(&mut world, observed, foreign).unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    assert_eq!(
        row_state(&world, &first.row_key),
        Some(CredState::Active),
        "never re-bound"
    );
}

// ---- F43. Sibling commit ---------------------------------------------------------------------

#[test]
fn f43_a_peer_touch_is_benign_contention_and_the_sibling_retries() {
    let mut world = registered_world(7);
    let observed = observe(&mut world).unwrap();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, gate_ref().family_prefix()),
        Fault::After(Box::new(touch_raw)),
    );
    let release = commit_sibling(&mut world, observed.clone(), sibling_row(2, SIBLING)).unwrap();
    assert!(release.gate_revision.0 >= observed.revision.0 + 2);
    assert_eq!(row_state(&world, &release.row_key), Some(CredState::Active));
}

#[test]
fn f43_any_moved_field_refuses_expired_and_revokes() {
    for mutation in [freeze_raw as fn(&mut KvModel), supersede_raw] {
        let mut world = registered_world(7);
        let observed = observe(&mut world).unwrap();
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Create, gate_ref().family_prefix()),
            Fault::After(Box::new(mutation)),
        );
        let row = sibling_row(2, SIBLING);
        let err = commit_sibling(&mut world, observed, row.clone()).unwrap_err();
        assert_eq!(err.code, ErrorCode::Expired);
        assert_eq!(row_state(&world, &row.key()), Some(CredState::Revoked));
    }
}

#[test]
fn f43_contention_is_bounded_at_64_attempts() {
    let mut world = registered_world(7);
    let observed = observe(&mut world).unwrap();
    // A peer touches the gate right before every sibling touch.
    for _ in 0..cotal_core::issuance::SIBLING_COMMIT_ATTEMPTS {
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Create, gate_ref().family_prefix()),
            Fault::After(Box::new(touch_raw)),
        );
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Get, gate_ref().key()),
            Fault::After(Box::new(touch_raw)),
        );
    }
    let row = sibling_row(2, SIBLING);
    let err = commit_sibling(&mut world, observed, row.clone()).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("stayed contended"));
    assert_eq!(row_state(&world, &row.key()), Some(CredState::Revoked));
}

#[test]
fn f43_a_refusal_whose_revoke_fails_reports_the_debt() {
    let mut world = registered_world(7);
    let observed = observe(&mut world).unwrap();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, gate_ref().family_prefix()),
        Fault::After(Box::new(freeze_raw)),
    );
    let row = sibling_row(2, SIBLING);
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, row.key()),
        Fault::Unavailable,
    );
    let err = commit_sibling(&mut world, observed, row.clone()).unwrap_err();
    assert_eq!(err.code, ErrorCode::Expired);
    assert!(err.message.contains("reconciliation debt"), "{err}");
}

// ---- Provisioning and enumeration ------------------------------------------------------------

#[test]
fn provision_is_byte_idempotent_and_foreign_or_moved_gates_conflict() {
    let mut world = ModelWorld::default();
    provision(&mut world);
    provision(&mut world);
    assert_eq!(gate_now(&world).generation().0, 0);
    let other = run(
        &mut world,
        ProvisionGate {
            gate: gate_ref(),
            principal: principal(OTHER),
        },
    );
    assert_eq!(other.unwrap_err().code, ErrorCode::Conflict);
    freeze(&mut world, &op(2)).unwrap();
    let moved = run(
        &mut world,
        ProvisionGate {
            gate: gate_ref(),
            principal: principal(P),
        },
    );
    assert_eq!(moved.unwrap_err().code, ErrorCode::Conflict);
    let no_owner = run(
        &mut ModelWorld::default(),
        ProvisionGate {
            gate: gate_ref(),
            principal: principal("alice.term"),
        },
    );
    assert_eq!(no_owner.unwrap_err().code, ErrorCode::BadRequest);
}

#[test]
fn f9_a_marker_on_the_gate_is_refused_never_read_as_absence() {
    let mut world = registered_world(7);
    world.kv.delete_unpinned(Store::Auth, &gate_ref().key());
    let err = serve_mint(&mut world, 1).unwrap_err();
    assert_eq!(err.code, ErrorCode::FailedPrecondition);
    assert!(err.message.contains("carries a DEL marker"));
}

#[test]
fn q18_a_marker_in_the_family_is_corruption_not_a_skip() {
    for purge in [false, true] {
        let mut world = registered_world(7);
        serve_mint(&mut world, 1).unwrap();
        let key = serve_mint(&mut world, 2).unwrap().row_key;
        if purge {
            world.kv.purge(Store::Auth, &key);
        } else {
            world.kv.delete_unpinned(Store::Auth, &key);
        }
        let gate = gate_ref();
        let err = run(&mut world, barrier::EnumerateFamily { gate }).unwrap_err();
        assert_eq!(err.code, ErrorCode::Internal);
        assert!(err.message.contains("corruption"));
    }
}

#[test]
fn enumeration_stays_inside_the_exact_family_prefix() {
    let mut world = registered_world(7);
    serve_mint(&mut world, 1).unwrap();
    // A neighbouring instance whose id extends ours must not leak into our family.
    let longer = format!("epcred.throwaway.{IID}x.sha256-00");
    world.kv.put(Store::Auth, &longer, b"junk");
    let gate = gate_ref();
    let rows = run(&mut world, barrier::EnumerateFamily { gate }).unwrap();
    assert_eq!(rows.len(), 1);
}

// ---- Ambiguous writes: settled by read-back, or failed closed --------------------------------

#[test]
fn ambiguous_freeze_that_committed_is_recognised_by_its_op_id() {
    let mut world = registered_world(7);
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, gate_ref().key()),
        Fault::AmbiguousApplied,
    );
    let token = freeze(&mut world, &op(2)).unwrap();
    assert_eq!(
        world
            .kv
            .get(Store::Auth, &gate_ref().key())
            .unwrap()
            .revision,
        token.0
    );
    assert!(reopen(&mut world, &op(2), token, coords(2, 0, 7, 0)).unwrap());
}

#[test]
fn ambiguous_freeze_that_did_not_commit_is_retried_at_the_same_pin() {
    let mut world = registered_world(7);
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, gate_ref().key()),
        Fault::AmbiguousNotApplied,
    );
    let token = freeze(&mut world, &op(2)).unwrap();
    assert_eq!(gate_now(&world).op().unwrap().op_id(), &op(2));
    assert_eq!(
        world
            .kv
            .get(Store::Auth, &gate_ref().key())
            .unwrap()
            .revision,
        token.0
    );
}

#[test]
fn ambiguous_freeze_raced_by_another_writer_is_a_lost_freeze() {
    let mut world = registered_world(7);
    let observed = observe(&mut world).unwrap();
    // The freeze's CAS is lost in flight; before its read-back, a foreign barrier freezes.
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, gate_ref().key()),
        Fault::AmbiguousNotApplied,
    );
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, gate_ref().key()),
        Fault::After(Box::new(|_| {})),
    );
    let (gate, op_id) = (gate_ref(), op(2));
    let mut machine = cotal_core::machine::Replay::new(Proc(move |cx: &mut Ctx<'_>| {
        barrier::freeze(cx, &gate, &op_id, &observed)
    }));
    let mut obs = None;
    let result = loop {
        match cotal_core::machine::Machine::step(&mut machine, obs.take()) {
            cotal_core::machine::Step::Done(r) => break r,
            cotal_core::machine::Step::Effect(effect) => {
                if matches!(&effect, Effect::Kv(KvRequest::Get { .. })) {
                    freeze_raw(&mut world.kv);
                }
                obs = Some(cotal_core::driver::World::perform(&mut world, &effect));
            }
        }
    };
    assert_eq!(
        result.unwrap(),
        None,
        "not ours: a lost freeze, never a stolen token"
    );
    assert_eq!(gate_now(&world).op().unwrap().op_id(), &op(9));
}

#[test]
fn ambiguous_reopen_is_settled_by_its_exact_successor() {
    for applied in [true, false] {
        let mut world = registered_world(7);
        let token = freeze(&mut world, &op(2)).unwrap();
        let fault = ambiguous(applied);
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Update, gate_ref().key()),
            fault,
        );
        assert!(reopen(&mut world, &op(2), token, coords(2, 1, 9, 0)).unwrap());
        let gate = gate_now(&world);
        assert_eq!(
            (gate.state(), gate.coordinates()),
            (GateState::Open, coords(2, 1, 9, 0))
        );
    }
}

#[test]
fn ambiguous_reopen_that_cannot_be_read_back_leaves_the_outcome_unknown() {
    let mut world = registered_world(7);
    let token = freeze(&mut world, &op(2)).unwrap();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, gate_ref().key()),
        Fault::AmbiguousApplied,
    );
    // The first read serves the reopen's pin check; the read-back after the ambiguous CAS fails.
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, gate_ref().key()),
        Fault::After(Box::new(|_| {})),
    );
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, gate_ref().key()),
        Fault::Unavailable,
    );
    let err = reopen(&mut world, &op(2), token, coords(2, 0, 7, 0)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
}

#[test]
fn ambiguous_stage_is_settled_by_its_exact_bytes() {
    for applied in [true, false] {
        let mut world = registered_world(7);
        let fault = ambiguous(applied);
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Create, gate_ref().family_prefix()),
            fault,
        );
        let release = serve_mint(&mut world, 1).unwrap();
        assert_eq!(row_state(&world, &release.row_key), Some(CredState::Active));
    }
}

#[test]
fn ambiguous_touch_fails_closed_revoking_the_staged_row() {
    for applied in [true, false] {
        let mut world = registered_world(7);
        let fault = ambiguous(applied);
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Update, gate_ref().key()),
            fault,
        );
        let err = serve_mint(&mut world, 1).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("fails closed"));
        assert_eq!(
            family(&world),
            vec![(sibling_row(1, P).key(), CredState::Revoked)]
        );
    }
}

#[test]
fn stage_that_stays_ambiguous_fails_closed_and_revokes_a_late_landing_write() {
    let family_prefix = gate_ref().family_prefix();
    let mut world = registered_world(7);
    for _ in 0..AMBIGUOUS_WRITE_ATTEMPTS {
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Create, family_prefix.clone()),
            Fault::AmbiguousNotApplied,
        );
    }
    let err = serve_mint(&mut world, 1).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(
        family(&world).is_empty(),
        "nothing landed, nothing to revoke"
    );

    // Same, but the last lost publish lands late, right after the last read-back missed it.
    let mut world = registered_world(7);
    for _ in 0..AMBIGUOUS_WRITE_ATTEMPTS {
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Create, family_prefix.clone()),
            Fault::AmbiguousNotApplied,
        );
    }
    for _ in 0..AMBIGUOUS_WRITE_ATTEMPTS - 1 {
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Get, family_prefix.clone()),
            Fault::After(Box::new(|_| {})),
        );
    }
    let gate = gate_ref();
    let late = cotal_core::ledger::LedgerRow::endpoint_active(
        gate.endpoint,
        &gate.instance,
        credential_id(2),
        principal(P),
        serve_credential(2, "term").source_chain,
        1_900_000_000,
    )
    .unwrap();
    let (late_key, late_bytes) = (late.key(), late.to_bytes());
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, family_prefix),
        Fault::After(Box::new(move |kv: &mut KvModel| {
            kv.put(Store::Auth, &late_key, &late_bytes);
        })),
    );
    let err = serve_mint(&mut world, 2).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert_eq!(family(&world), vec![(late.key(), CredState::Revoked)]);
}

#[test]
fn ambiguous_revoke_is_settled_by_the_next_read() {
    let mut world = registered_world(7);
    let key = serve_mint(&mut world, 1).unwrap().row_key;
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, key.clone()),
        Fault::AmbiguousApplied,
    );
    let k = key.clone();
    let outcome = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| ledger::revoke_row(cx, &k)),
    )
    .unwrap();
    assert_eq!(outcome, Revocation::Revoked);
    assert_eq!(row_state(&world, &key), Some(CredState::Revoked));
}

#[test]
fn ambiguous_reopen_is_recognised_even_after_a_later_barrier_froze_the_gate_again() {
    let mut world = registered_world(7);
    let token = freeze(&mut world, &op(2)).unwrap();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, gate_ref().key()),
        Fault::AmbiguousApplied,
    );
    // Between the lost ack and the read-back, another barrier freezes the reopened gate.
    let (gate, op_id) = (gate_ref(), op(2));
    let mut machine = cotal_core::machine::Replay::new(Proc(move |cx: &mut Ctx<'_>| {
        barrier::reopen(cx, &gate, &op_id, token, coords(2, 1, 9, 0))
    }));
    let mut obs = None;
    let mut updates = 0;
    let result = loop {
        match cotal_core::machine::Machine::step(&mut machine, obs.take()) {
            cotal_core::machine::Step::Done(r) => break r,
            cotal_core::machine::Step::Effect(effect) => {
                let is_update = matches!(&effect, Effect::Kv(KvRequest::Update { .. }));
                obs = Some(cotal_core::driver::World::perform(&mut world, &effect));
                if is_update {
                    updates += 1;
                    freeze_raw(&mut world.kv);
                }
            }
        }
    };
    assert_eq!(updates, 1);
    assert!(
        result.unwrap(),
        "generation 2 at our coordinates can only be our reopen"
    );
    let gate = gate_now(&world);
    assert_eq!(gate.state(), GateState::Frozen);
    assert_eq!(gate.coordinates(), coords(2, 1, 9, 0));
}
