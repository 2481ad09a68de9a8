//! The lifecycle registry on the KV model: the head, uid reservation and agent gate rows (closed
//! parsers, the reference's bytes), the activation saga (spec §3.1 G0–G2, §3.3 H0–H1; F2, F5,
//! F55–F57), the root credential (reference-auth-service §9.3; F58–F60), the connect check and
//! the deny-new cells of reference-auth-service §11.2.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::run;
use cotal_core::driver::{ModelWorld, World};
use cotal_core::gate::{GateState, Generation, OpKind};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, KvRequest, Store};
use cotal_core::ledger::{CredState, LedgerRow, Revocation};
use cotal_core::lifecycle::rows::read_gate;
use cotal_core::lifecycle::{
    ActivateLifecycle, ActivationRun, AgentGate, AuthorizeConnectCredential, EnsureRootCredential,
    HeadState, LifecycleHead, RevokeCredential, RootCredential, RootEntropy, UidReservation,
    ROOT_CREDENTIAL_TTL_MS,
};
use cotal_core::machine::{script, Effect, Machine, Replay, Step};
use cotal_core::names::{
    keys, ActorToken, CredentialId, LifecycleUid, ManagerInstance, OpId, OwnerToken, Principal,
    SourceMember,
};
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
fn head_key() -> String {
    keys::lifecycle_head(&owner(), &actor())
}

fn activation(at: &str, entropy: u8) -> ActivateLifecycle {
    ActivateLifecycle {
        owner: owner(),
        actor: actor(),
        lifecycle_uid: uid(at),
        manager_instance: ManagerInstance::parse(MGR).unwrap(),
        op_entropy: [entropy; 20],
    }
}

fn ensure(at: &str, entropy: u8, now_ms: u64) -> EnsureRootCredential {
    EnsureRootCredential {
        owner: owner(),
        actor: actor(),
        lifecycle_uid: uid(at),
        manager_instance: ManagerInstance::parse(MGR).unwrap(),
        now_ms,
        entropy: RootEntropy {
            op: [entropy; 20],
            credentials: [[entropy; 20], [entropy + 1; 20], [entropy + 2; 20]],
        },
        known: None,
    }
}

fn connect_in(
    world: &mut ModelWorld,
    at: &str,
    id: &CredentialId,
    who: Principal,
    now_ms: u64,
) -> Result<bool, EpError> {
    run(
        world,
        AuthorizeConnectCredential {
            holder: who,
            lifecycle_uid: uid(at),
            credential_id: id.clone(),
            now_ms,
        },
    )
    .map(|a| a.root)
}

fn stored(world: &ModelWorld, store: Store, key: &str) -> String {
    String::from_utf8(world.kv.get(store, key).unwrap().value).unwrap()
}

fn gate_row(world: &ModelWorld, at: &str) -> AgentGate {
    AgentGate::parse(
        &world
            .kv
            .get(Store::Auth, &keys::agent_gate(&uid(at)))
            .unwrap()
            .value,
        &uid(at),
    )
    .unwrap()
}

fn head_row(world: &ModelWorld) -> LifecycleHead {
    LifecycleHead::parse(
        &world.kv.get(Store::Records, &head_key()).unwrap().value,
        &owner(),
        &actor(),
    )
    .unwrap()
}

fn refused(e: &EpError, code: ErrorCode, words: &[&str]) {
    assert_eq!(e.code, code, "{e}");
    for w in words {
        assert!(e.message.contains(w), "{w:?} missing from: {e}");
    }
}

/// Steps `machine` on `world` until the next effect satisfies `stop`, leaving it unperformed.
fn step_until<M: Machine>(
    machine: &mut M,
    world: &mut ModelWorld,
    stop: impl Fn(&Effect) -> bool,
) -> Effect {
    let mut step = machine.step(None);
    loop {
        match step {
            Step::Effect(effect) if stop(&effect) => return effect,
            Step::Effect(effect) => {
                let observed = World::perform(world, &effect);
                step = machine.step(Some(observed));
            }
            Step::Done(result) => panic!("finished before the stop: {:?}", result.err()),
        }
    }
}

/// Performs `pending`, then runs `machine` to its end.
fn finish<M: Machine>(
    machine: &mut M,
    world: &mut ModelWorld,
    pending: Effect,
) -> Result<M::Output, EpError> {
    let mut step = machine.step(Some(World::perform(world, &pending)));
    loop {
        match step {
            Step::Effect(effect) => {
                let observed = World::perform(world, &effect);
                step = machine.step(Some(observed));
            }
            Step::Done(result) => return result,
        }
    }
}

fn is_write_to(effect: &Effect, store: Store, prefix: &str) -> bool {
    matches!(effect, Effect::Kv(r) if r.is_write() && r.store() == store && r.key().starts_with(prefix))
}

// ---- rows: golden bytes --------------------------------------------------------------------

#[test]
fn the_rows_write_the_reference_bytes() {
    let op = OpId::mint([7; 20]);
    let frozen = AgentGate::activation_frozen(uid(UID), op.clone());
    assert_eq!(
        frozen.to_json(),
        format!(
            r#"{{"lifecycleUid":"{UID}","state":"frozen","generation":0,"op":{{"opId":"{op}","kind":"activation"}}}}"#
        )
    );
    assert_eq!(
        frozen.reopened(&op).unwrap().to_json(),
        format!(r#"{{"lifecycleUid":"{UID}","state":"open","generation":1}}"#)
    );
    assert_eq!(
        frozen.retired(&op).unwrap().to_json(),
        format!(
            r#"{{"lifecycleUid":"{UID}","state":"retired","generation":0,"op":{{"opId":"{op}","kind":"activation"}}}}"#
        )
    );
    let reservation = UidReservation {
        owner: owner(),
        actor: actor(),
        minted_by: ManagerInstance::parse(MGR).unwrap(),
    };
    assert_eq!(
        String::from_utf8(reservation.to_bytes()).unwrap(),
        format!(r#"{{"owner":"{OWNER}","actor":"{ACTOR}","mintedBy":"{MGR}"}}"#)
    );
    let head = LifecycleHead::activated(
        owner(),
        actor(),
        uid(UID),
        ManagerInstance::parse(MGR).unwrap(),
    );
    let base = format!(
        r#"{{"owner":"{OWNER}","actor":"{ACTOR}","lifecycleUid":"{UID}","managerInstance":"{MGR}","processEpoch":1,"state":"active""#
    );
    assert_eq!(head.to_json(), format!("{base}}}"));
    let id = CredentialId::mint([9; 20]);
    assert_eq!(
        head.stamped(&id).unwrap().to_json(),
        format!(r#"{base},"currentCredentialId":"{id}"}}"#)
    );
    let row = LedgerRow::agent_active(
        uid(UID),
        id.clone(),
        holder(),
        vec![SourceMember::Root],
        NOW,
    )
    .unwrap();
    assert_eq!(row.key(), format!("cred.{UID}.{id}"));
    assert_eq!(
        row.to_json(),
        format!(
            r#"{{"credentialId":"{id}","holderPrincipal":"{OWNER}.{ACTOR}","lifecycleUid":"{UID}","sourceChain":["root"],"state":"active","exp":{NOW}}}"#
        )
    );
    // The reference mints root credential ids as lifecycle tokens.
    assert!(LifecycleUid::parse(id.as_str()).is_ok());
}

#[test]
fn a_stamp_after_a_takeover_stamp_keeps_the_stored_member_order() {
    let op = OpId::mint([3; 20]);
    let stored = format!(
        r#"{{"owner":"{OWNER}","actor":"{ACTOR}","lifecycleUid":"{UID}","managerInstance":"{MGR}","processEpoch":2,"state":"active","lastTakeoverOpId":"{op}"}}"#
    );
    let head = LifecycleHead::parse(stored.as_bytes(), &owner(), &actor()).unwrap();
    assert_eq!(head.to_json(), stored);
    let id = CredentialId::mint([4; 20]);
    let stamped = head.stamped(&id).unwrap().to_json();
    assert_eq!(
        stamped,
        format!(
            r#"{},"currentCredentialId":"{id}"}}"#,
            stored.trim_end_matches('}')
        )
    );
    assert_eq!(
        head.stamped(&id).unwrap().stamped(&id).unwrap().to_json(),
        stamped
    );
    let other = CredentialId::mint([5; 20]);
    refused(
        &head.stamped(&id).unwrap().stamped(&other).unwrap_err(),
        ErrorCode::FailedPrecondition,
        &["barrier"],
    );
}

// ---- rows: closed parsers ------------------------------------------------------------------

#[test]
fn the_head_parser_is_closed_and_refuses_impossible_state() {
    let op = OpId::mint([1; 20]);
    let good = |tail: &str| {
        format!(
            r#"{{"owner":"{OWNER}","actor":"{ACTOR}","lifecycleUid":"{UID}","managerInstance":"{MGR}","processEpoch":1{tail}}}"#
        )
    };
    let parse = |s: String| LifecycleHead::parse(s.as_bytes(), &owner(), &actor());
    assert_eq!(
        parse(good(r#","state":"active""#)).unwrap().state(),
        HeadState::Active
    );
    let retiring = parse(good(&format!(
        r#","state":"retiring","op":{{"opId":"{op}","kind":"retirement"}}"#
    )))
    .unwrap();
    assert_eq!(retiring.retirement_op(), Some(&op));
    for bad in [
        good(r#","state":"active","extra":1"#),
        good(r#","state":"retiring""#),
        good(&format!(
            r#","state":"active","op":{{"opId":"{op}","kind":"retirement"}}"#
        )),
        good(&format!(
            r#","state":"retired","op":{{"opId":"{op}","kind":"retirement"}}"#
        )),
        good(&format!(
            r#","state":"retiring","op":{{"opId":"{op}","kind":"takeover"}}"#
        )),
        good(&format!(
            r#","state":"retiring","op":{{"opId":"{op}","kind":"retirement","x":1}}"#
        )),
        good(r#","state":"dormant""#),
        good(r#","state":"active","currentCredentialId":"""#),
        good(r#","state":"active","lastTakeoverOpId":"NOT-A-TOKEN""#),
        good(r#","state":"active","currentCredentialId":"a:b""#),
        good(r#","state":"active""#).replace(r#""processEpoch":1"#, r#""processEpoch":0"#),
        good(r#","state":"active""#).replace(r#""processEpoch":1"#, r#""processEpoch":-1"#),
        good(r#","state":"active""#).replace(
            &format!(r#""managerInstance":"{MGR}""#),
            r#""managerInstance":"""#,
        ),
        good(r#","state":"active""#).replace(UID, "short"),
        good(r#","state":"active""#).replace(ACTOR, "other"),
        good(r#","state":"active""#).replace(OWNER, "u_bbbbbbbbbbbbbbbbbbbbbbbbbb"),
        "[]".to_owned(),
        "{".to_owned(),
    ] {
        let e = parse(bad.clone()).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "{bad}: {e}");
    }
}

#[test]
fn the_gate_parser_is_closed_and_refuses_impossible_state() {
    let op = OpId::mint([1; 20]);
    let parse = |s: &str| AgentGate::parse(s.as_bytes(), &uid(UID));
    let frozen = format!(
        r#"{{"lifecycleUid":"{UID}","state":"frozen","generation":0,"op":{{"opId":"{op}","kind":"activation"}}}}"#
    );
    let gate = parse(&frozen).unwrap();
    assert_eq!(gate.state(), GateState::Frozen);
    assert_eq!(gate.activation_op(), Some(&op));
    assert_eq!(gate.to_json(), frozen);
    for bad in [
        format!(r#"{{"lifecycleUid":"{UID}","state":"open","generation":1,"extra":true}}"#),
        format!(r#"{{"lifecycleUid":"{UID2}","state":"open","generation":1}}"#),
        format!(r#"{{"lifecycleUid":"{UID}","state":"frozen","generation":0}}"#),
        format!(r#"{{"lifecycleUid":"{UID}","state":"retired","generation":0}}"#),
        format!(
            r#"{{"lifecycleUid":"{UID}","state":"open","generation":1,"op":{{"opId":"{op}","kind":"activation"}}}}"#
        ),
        format!(
            r#"{{"lifecycleUid":"{UID}","state":"retired","generation":1,"op":{{"opId":"{op}","kind":"takeover"}}}}"#
        ),
        format!(
            r#"{{"lifecycleUid":"{UID}","state":"frozen","generation":0,"op":{{"opId":"{op}","kind":"activation","successor":"x"}}}}"#
        ),
        format!(
            r#"{{"lifecycleUid":"{UID}","state":"frozen","generation":0,"op":{{"opId":"BAD","kind":"activation"}}}}"#
        ),
        format!(r#"{{"lifecycleUid":"{UID}","state":"ajar","generation":1}}"#),
        format!(r#"{{"lifecycleUid":"{UID}","state":"open","generation":-1}}"#),
        r#"{"state":"open","generation":1}"#.to_owned(),
    ] {
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "{bad}: {e}");
    }
    // Transitions are op-pinned (F14) and per kind (F13).
    let stranger = OpId::mint([2; 20]);
    refused(
        &gate.reopened(&stranger).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["F14"],
    );
    refused(
        &gate.retired(&stranger).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["F14"],
    );
    let open = gate.reopened(&op).unwrap();
    assert_eq!(open.generation(), Generation(1));
    refused(
        &open.reopened(&op).unwrap_err(),
        ErrorCode::FailedPrecondition,
        &["not frozen"],
    );
}

#[test]
fn the_reservation_parser_is_closed() {
    let ok = format!(r#"{{"owner":"{OWNER}","actor":"{ACTOR}","mintedBy":"{MGR}"}}"#);
    assert!(UidReservation::parse(ok.as_bytes())
        .unwrap()
        .names(&owner(), &actor()));
    for bad in [
        format!(r#"{{"owner":"{OWNER}","actor":"{ACTOR}","mintedBy":"{MGR}","x":1}}"#),
        format!(r#"{{"owner":"{OWNER}","actor":"{ACTOR}"}}"#),
        format!(r#"{{"owner":"{OWNER}","actor":"a.b","mintedBy":"{MGR}"}}"#),
        format!(r#"{{"owner":"{OWNER}","actor":"{ACTOR}","mintedBy":""}}"#),
    ] {
        assert_eq!(
            UidReservation::parse(bad.as_bytes()).unwrap_err().code,
            ErrorCode::Internal,
            "{bad}"
        );
    }
}

#[test]
fn f9_a_marker_at_a_never_deleted_key_is_corruption_not_absence() {
    for (store, key) in [
        (Store::Records, head_key()),
        (Store::Records, keys::uid_reservation(&uid(UID))),
        (Store::Auth, keys::agent_gate(&uid(UID))),
    ] {
        let mut world = ModelWorld::default();
        world.kv.put(store, &key, b"{}");
        world.kv.delete_unpinned(store, &key);
        let e = run(&mut world, activation(UID, 1)).unwrap_err();
        refused(&e, ErrorCode::FailedPrecondition, &["marker", "F9"]);
    }
    let mut world = ModelWorld::default();
    run(&mut world, ensure(UID, 1, NOW)).unwrap();
    let key = keys::agent_gate(&uid(UID));
    world.kv.purge(Store::Auth, &key);
    let e = run(
        &mut world,
        script(|cx| read_gate(cx, &uid(UID)).map(|_| ())),
    )
    .unwrap_err();
    refused(&e, ErrorCode::FailedPrecondition, &["PURGE"]);
}

// ---- activation ----------------------------------------------------------------------------

fn assert_activated(world: &ModelWorld, at: &str) {
    let gate = gate_row(world, at);
    assert_eq!(
        (gate.state(), gate.generation()),
        (GateState::Open, Generation(1))
    );
    let head = head_row(world);
    assert!(head.is_active_at(&uid(at)));
    assert_eq!(head.process_epoch().0, 1);
    assert_eq!(head.current_credential_id(), None);
    assert_eq!(
        stored(world, Store::Records, &keys::uid_reservation(&uid(at))),
        format!(r#"{{"owner":"{OWNER}","actor":"{ACTOR}","mintedBy":"{MGR}"}}"#)
    );
}

#[test]
fn f55_activation_reserves_freezes_casts_the_head_and_reopens_last() {
    let mut world = ModelWorld::default();
    let done = run(&mut world, activation(UID, 1)).unwrap();
    assert_eq!(done.run, ActivationRun::Completed(OpId::mint([1; 20])));
    assert_activated(&world, UID);
    // The normative order of the writes, and nothing else written.
    let writes: Vec<(Store, String, KvOp)> = world
        .log
        .iter()
        .filter_map(|e| match e {
            Effect::Kv(r) if r.is_write() => Some((r.store(), r.key().to_owned(), r.op())),
            _ => None,
        })
        .collect();
    let gate = keys::agent_gate(&uid(UID));
    assert_eq!(
        writes,
        [
            (
                Store::Records,
                keys::uid_reservation(&uid(UID)),
                KvOp::CreateStrict
            ),
            (Store::Auth, gate.clone(), KvOp::CreateStrict),
            (Store::Records, head_key(), KvOp::CreateStrict),
            (Store::Auth, gate, KvOp::Update),
        ]
    );
    assert_eq!(world.kv.requests_served(), 6, "the documented round trips");
}

#[test]
fn a_completed_activation_reruns_as_a_no_op() {
    let mut world = ModelWorld::default();
    run(&mut world, activation(UID, 1)).unwrap();
    let before = world.kv.last_sequence(Store::Auth);
    let again = run(&mut world, activation(UID, 2)).unwrap();
    assert_eq!(again.run, ActivationRun::AlreadyActive);
    assert_eq!(world.kv.last_sequence(Store::Auth), before);
    assert_activated(&world, UID);
}

#[test]
fn f57_a_crash_at_every_step_resumes_the_same_op() {
    for crash_after in 0..4 {
        let mut world = ModelWorld::default();
        let mut first = Replay::new(activation(UID, 1));
        let mut writes = 0;
        let mut step = first.step(None);
        while let Step::Effect(effect) = step {
            if matches!(&effect, Effect::Kv(r) if r.is_write()) {
                if writes == crash_after {
                    break;
                }
                writes += 1;
            }
            let observed = World::perform(&mut world, &effect);
            step = first.step(Some(observed));
        }
        // A new run with other entropy: the op id comes from the frozen gate once it exists.
        let resumed = run(&mut world, activation(UID, 2)).unwrap();
        let expected = if crash_after >= 2 { [1; 20] } else { [2; 20] };
        assert_eq!(
            resumed.run,
            ActivationRun::Completed(OpId::mint(expected)),
            "crash after {crash_after}"
        );
        assert_activated(&world, UID);
    }
}

#[test]
fn every_ambiguous_activation_write_settles_by_read_back() {
    let triggers = [
        Trigger::new(Store::Records, KvOp::CreateStrict, "uid."),
        Trigger::new(Store::Auth, KvOp::CreateStrict, "gate."),
        Trigger::new(Store::Records, KvOp::CreateStrict, "lifecycle."),
        Trigger::new(Store::Auth, KvOp::Update, "gate."),
    ];
    for trigger in triggers {
        for applied in [true, false] {
            let mut world = ModelWorld::default();
            let fault = if applied {
                Fault::AmbiguousApplied
            } else {
                Fault::AmbiguousNotApplied
            };
            world.kv.inject(trigger.clone(), fault);
            let done = run(&mut world, activation(UID, 1)).unwrap();
            assert_eq!(
                done.run,
                ActivationRun::Completed(OpId::mint([1; 20])),
                "{trigger:?} {applied}"
            );
            assert_eq!(world.kv.pending_faults(), 0);
            assert_activated(&world, UID);
        }
    }
}

#[test]
fn f56_the_head_cas_loser_retires_its_orphan_gate_and_burns_its_uid() {
    let mut world = ModelWorld::default();
    let mut loser = Replay::new(activation(UID, 1));
    let pending = step_until(&mut loser, &mut world, |e| {
        is_write_to(e, Store::Records, "lifecycle.")
    });
    run(&mut world, activation(UID2, 2)).unwrap();
    let e = finish(&mut loser, &mut world, pending).unwrap_err();
    refused(&e, ErrorCode::Conflict, &["lost the head CAS", "F56", UID2]);
    let orphan = gate_row(&world, UID);
    assert_eq!(orphan.state(), GateState::Retired);
    assert_eq!(orphan.op().unwrap().op_id(), &OpId::mint([1; 20]));
    assert_eq!(orphan.op().unwrap().kind(), OpKind::Activation);
    assert!(world
        .kv
        .get(Store::Records, &keys::uid_reservation(&uid(UID)))
        .is_some());
    assert!(head_row(&world).is_active_at(&uid(UID2)));
    // A rerun of the loser refuses: the alias is held at the winner's uid.
    let e = run(&mut world, activation(UID, 3)).unwrap_err();
    refused(&e, ErrorCode::AlreadyExists, &["takeover"]);
}

#[test]
fn f57_an_orphan_left_by_a_crash_after_the_lost_head_cas_is_retired_on_rerun() {
    let mut world = ModelWorld::default();
    let mut loser = Replay::new(activation(UID, 1));
    step_until(&mut loser, &mut world, |e| {
        is_write_to(e, Store::Records, "lifecycle.")
    });
    drop(loser);
    run(&mut world, activation(UID2, 2)).unwrap();
    let e = run(&mut world, activation(UID, 1)).unwrap_err();
    refused(&e, ErrorCode::AlreadyExists, &["takeover"]);
    assert_eq!(gate_row(&world, UID).state(), GateState::Retired);
    assert!(head_row(&world).is_active_at(&uid(UID2)));
}

#[test]
fn two_interleaved_activations_of_one_grant_converge() {
    let mut world = ModelWorld::default();
    let mut a = Replay::new(activation(UID, 1));
    let pending = step_until(&mut a, &mut world, |e| {
        is_write_to(e, Store::Records, "lifecycle.")
    });
    let b = run(&mut world, activation(UID, 2)).unwrap();
    assert_eq!(
        b.run,
        ActivationRun::Completed(OpId::mint([1; 20])),
        "b adopts a's frozen gate"
    );
    let a = finish(&mut a, &mut world, pending).unwrap();
    assert!(matches!(
        a.run,
        ActivationRun::Completed(_) | ActivationRun::AlreadyActive
    ));
    assert_activated(&world, UID);
}

#[test]
fn f60_a_live_head_at_another_uid_refuses_takeover_and_writes_nothing() {
    let mut world = ModelWorld::default();
    run(&mut world, activation(UID, 1)).unwrap();
    let before = (
        world.kv.last_sequence(Store::Auth),
        world.kv.last_sequence(Store::Records),
    );
    let e = run(&mut world, activation(UID2, 2)).unwrap_err();
    refused(
        &e,
        ErrorCode::AlreadyExists,
        &["takeover", UID, UID2, "no takeover barrier"],
    );
    assert_eq!(
        before,
        (
            world.kv.last_sequence(Store::Auth),
            world.kv.last_sequence(Store::Records)
        )
    );
    assert!(world
        .kv
        .get(Store::Records, &keys::uid_reservation(&uid(UID2)))
        .is_none());
}

#[test]
fn f2_a_reservation_of_another_alias_is_never_adopted() {
    let mut world = ModelWorld::default();
    world.kv.put(
        Store::Records,
        &keys::uid_reservation(&uid(UID)),
        format!(r#"{{"owner":"{OWNER}","actor":"other","mintedBy":"{MGR}"}}"#).as_bytes(),
    );
    let e = run(&mut world, activation(UID, 1)).unwrap_err();
    refused(&e, ErrorCode::PermissionDenied, &["reserved by", "other"]);
    assert!(world
        .kv
        .get(Store::Auth, &keys::agent_gate(&uid(UID)))
        .is_none());
}

#[test]
fn h1_a_retired_head_is_replaced_at_a_fresh_uid_and_a_retiring_one_refuses() {
    let mut world = ModelWorld::default();
    let retired = format!(
        r#"{{"owner":"{OWNER}","actor":"{ACTOR}","lifecycleUid":"{UID2}","managerInstance":"{MGR}","processEpoch":3,"state":"retired"}}"#
    );
    world
        .kv
        .put(Store::Records, &head_key(), retired.as_bytes());
    run(&mut world, activation(UID, 1)).unwrap();
    assert_activated(&world, UID);

    let mut world = ModelWorld::default();
    let op = OpId::mint([8; 20]);
    let retiring = format!(
        r#"{{"owner":"{OWNER}","actor":"{ACTOR}","lifecycleUid":"{UID2}","managerInstance":"{MGR}","processEpoch":1,"state":"retiring","op":{{"opId":"{op}","kind":"retirement"}}}}"#
    );
    world
        .kv
        .put(Store::Records, &head_key(), retiring.as_bytes());
    refused(
        &run(&mut world, activation(UID, 1)).unwrap_err(),
        ErrorCode::FailedPrecondition,
        &["retiring"],
    );
}

#[test]
fn f14_a_gate_frozen_by_another_operation_is_not_adopted() {
    let mut world = ModelWorld::default();
    run(&mut world, activation(UID, 1)).unwrap();
    let key = keys::agent_gate(&uid(UID));
    let op = OpId::mint([6; 20]);
    world.kv.put(
        Store::Auth,
        &key,
        format!(r#"{{"lifecycleUid":"{UID}","state":"frozen","generation":1,"op":{{"opId":"{op}","kind":"takeover"}}}}"#).as_bytes(),
    );
    // The head is ours and the gate frozen by a barrier: nothing mints, nothing adopts it.
    refused(
        &run(&mut world, ensure(UID, 1, NOW)).unwrap_err(),
        ErrorCode::FailedPrecondition,
        &["barrier is in flight"],
    );
}

// ---- the root credential -------------------------------------------------------------------

fn stamped(world: &ModelWorld) -> CredentialId {
    head_row(world).current_credential_id().unwrap().clone()
}

fn row(world: &ModelWorld, at: &str, id: &CredentialId) -> LedgerRow {
    let key = keys::cred(&uid(at), id);
    LedgerRow::parse(&world.kv.get(Store::Auth, &key).unwrap().value, &key).unwrap()
}

#[test]
fn root_credential_idempotent() {
    let mut world = ModelWorld::default();
    let first = run(&mut world, ensure(UID, 1, NOW)).unwrap();
    assert_eq!(world.kv.requests_served(), 11, "the documented round trips");
    assert!(first.minted);
    assert_eq!(first.credential_id, CredentialId::mint([1; 20]));
    assert_eq!(stamped(&world), first.credential_id);
    let r = row(&world, UID, &first.credential_id);
    assert_eq!(r.state(), CredState::Active);
    assert_eq!(r.exp(), NOW + ROOT_CREDENTIAL_TTL_MS);
    assert_eq!(r.source_chain(), [SourceMember::Root]);
    assert_eq!(r.holder_principal(), &holder());
    let served = world.kv.requests_served();
    assert!(connect_in(&mut world, UID, &first.credential_id, holder(), NOW).unwrap());
    assert_eq!(
        world.kv.requests_served() - served,
        2,
        "a root connect reads row and head"
    );
    for n in [10, 20, 30] {
        let served = world.kv.requests_served();
        let again = run(&mut world, ensure(UID, n, NOW + u64::from(n))).unwrap();
        assert_eq!(
            world.kv.requests_served() - served,
            2,
            "the fast path reads head and row"
        );
        assert_eq!(
            again,
            RootCredential {
                credential_id: first.credential_id.clone(),
                minted: false
            }
        );
    }
    assert_eq!(
        world.kv.keys(Store::Auth, "cred.").len(),
        1,
        "one root per incarnation"
    );
}

#[test]
fn concurrent_ensures_converge_on_one_id_and_the_loser_row_ends_revoked() {
    let mut world = ModelWorld::default();
    let mut a = Replay::new(ensure(UID, 1, NOW));
    let pending = step_until(&mut a, &mut world, |e| {
        is_write_to(e, Store::Records, "lifecycle.")
            && matches!(e, Effect::Kv(KvRequest::Update { .. }))
    });
    let b = run(&mut world, ensure(UID, 10, NOW)).unwrap();
    assert!(b.minted);
    let a = finish(&mut a, &mut world, pending).unwrap();
    assert_eq!(
        a,
        RootCredential {
            credential_id: b.credential_id.clone(),
            minted: false
        }
    );
    assert_eq!(stamped(&world), b.credential_id);
    assert_eq!(
        row(&world, UID, &CredentialId::mint([1; 20])).state(),
        CredState::Revoked
    );
    assert_eq!(
        row(&world, UID, &b.credential_id).state(),
        CredState::Active
    );
}

#[test]
fn f20_a_sibling_finalize_between_observe_and_touch_revokes_and_converges() {
    let mut world = ModelWorld::default();
    run(&mut world, activation(UID, 1)).unwrap();
    let mut a = Replay::new(ensure(UID, 1, NOW));
    let pending = step_until(&mut a, &mut world, |e| is_write_to(e, Store::Auth, "gate."));
    let b = run(&mut world, ensure(UID, 10, NOW)).unwrap();
    let a = finish(&mut a, &mut world, pending).unwrap();
    assert_eq!(a.credential_id, b.credential_id);
    assert_eq!(
        row(&world, UID, &CredentialId::mint([1; 20])).state(),
        CredState::Revoked
    );
}

#[test]
fn every_ambiguous_root_write_settles() {
    let triggers = [
        Trigger::new(Store::Auth, KvOp::Create, "cred."),
        Trigger::new(Store::Auth, KvOp::Update, "gate."),
        Trigger::new(Store::Records, KvOp::Update, "lifecycle."),
    ];
    for trigger in triggers {
        for applied in [true, false] {
            let mut world = ModelWorld::default();
            run(&mut world, activation(UID, 1)).unwrap();
            let fault = if applied {
                Fault::AmbiguousApplied
            } else {
                Fault::AmbiguousNotApplied
            };
            world.kv.inject(trigger.clone(), fault);
            let got = run(&mut world, ensure(UID, 1, NOW)).unwrap();
            assert!(got.minted, "{trigger:?} {applied}");
            assert_eq!(stamped(&world), got.credential_id);
            // Exactly one active row, the stamped one; any other was revoked before export.
            let active: Vec<String> = world
                .kv
                .keys(Store::Auth, "cred.")
                .into_iter()
                .filter(|k| {
                    let r =
                        LedgerRow::parse(&world.kv.get(Store::Auth, k).unwrap().value, k).unwrap();
                    r.state() == CredState::Active
                })
                .collect();
            assert_eq!(
                active,
                [keys::cred(&uid(UID), &got.credential_id)],
                "{trigger:?} {applied}"
            );
            assert_eq!(
                run(&mut world, ensure(UID, 50, NOW)).unwrap().credential_id,
                got.credential_id
            );
        }
    }
}

#[test]
fn revoked_row_denied_and_exchange_refused_barrier() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    assert!(connect_in(&mut world, UID, &root, holder(), NOW).unwrap());
    let revoke = RevokeCredential {
        lifecycle_uid: uid(UID),
        credential_id: root.clone(),
    };
    assert_eq!(
        run(&mut world, revoke.clone()).unwrap(),
        Revocation::Revoked
    );
    assert_eq!(run(&mut world, revoke).unwrap(), Revocation::AlreadyRevoked);
    refused(
        &connect_in(&mut world, UID, &root, holder(), NOW).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["revoked"],
    );
    refused(
        &run(&mut world, ensure(UID, 2, NOW)).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["barrier", "revoked"],
    );
}

#[test]
fn an_expired_root_refuses_the_exchange_barrier() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    let at_exp = NOW + ROOT_CREDENTIAL_TTL_MS;
    refused(
        &run(&mut world, ensure(UID, 2, at_exp)).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["barrier", "expired"],
    );
    refused(
        &connect_in(&mut world, UID, &root, holder(), at_exp).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["expired"],
    );
    assert!(connect_in(&mut world, UID, &root, holder(), at_exp - 1).unwrap());
}

#[test]
fn an_absent_stamped_row_is_corruption() {
    let mut world = ModelWorld::default();
    run(&mut world, activation(UID, 1)).unwrap();
    let head = head_row(&world)
        .stamped(&CredentialId::mint([4; 20]))
        .unwrap();
    world.kv.put(Store::Records, &head_key(), &head.to_bytes());
    refused(
        &run(&mut world, ensure(UID, 1, NOW)).unwrap_err(),
        ErrorCode::Internal,
        &["absent", "corruption"],
    );
}

#[test]
fn a_head_cas_lost_three_times_is_unavailable_and_leaves_no_live_row() {
    let mut world = ModelWorld::default();
    run(&mut world, activation(UID, 1)).unwrap();
    for _ in 0..3 {
        // Right after each finalize touch, something else rewrites the head: the stamp loses.
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Update, "gate."),
            Fault::After(Box::new(|kv| {
                let key = keys::lifecycle_head(&owner(), &actor());
                let bytes = kv.get(Store::Records, &key).unwrap().value;
                kv.put(Store::Records, &key, &bytes);
            })),
        );
    }
    let e = run(&mut world, ensure(UID, 1, NOW)).unwrap_err();
    refused(&e, ErrorCode::Unavailable, &["head stamp", "re-exchange"]);
    let rows = world.kv.keys(Store::Auth, "cred.");
    assert_eq!(rows.len(), 3);
    for n in 1..=3 {
        assert_eq!(
            row(&world, UID, &CredentialId::mint([n; 20])).state(),
            CredState::Revoked
        );
    }
    assert_eq!(head_row(&world).current_credential_id(), None);
}

#[test]
fn regrant_at_new_uid_refused_takeover() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    refused(
        &run(&mut world, ensure(UID2, 2, NOW)).unwrap_err(),
        ErrorCode::AlreadyExists,
        &["takeover"],
    );
    // The live incarnation is untouched.
    assert_eq!(stamped(&world), root);
    assert!(connect_in(&mut world, UID, &root, holder(), NOW).unwrap());
}

// ---- the known-root hint: head and row read together ---------------------------------------

/// Runs `script` on `world` and returns its outcome with every effect it asked for.
fn with_effects<S: cotal_core::machine::Script>(
    world: &mut ModelWorld,
    script: S,
) -> (Result<S::Output, EpError>, Vec<Effect>) {
    let mut machine = Replay::new(script);
    let outcome = cotal_core::driver::drive(&mut machine, world);
    let effects = machine.history().iter().map(|(e, _)| e.clone()).collect();
    (outcome, effects)
}

fn knowing(at: &str, entropy: u8, now_ms: u64, known: &CredentialId) -> EnsureRootCredential {
    EnsureRootCredential {
        known: Some(known.clone()),
        ..ensure(at, entropy, now_ms)
    }
}

fn is_together_read(effect: &Effect) -> bool {
    matches!(effect, Effect::Reads(reads) if reads.len() == 2
        && reads.iter().all(|r| matches!(r, KvRequest::Get { .. })))
}

#[test]
fn f59_a_known_root_is_proven_in_one_round_trip() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    let (again, effects) = with_effects(&mut world, knowing(UID, 2, NOW, &root));
    assert_eq!(
        again.unwrap(),
        RootCredential {
            credential_id: root.clone(),
            minted: false
        }
    );
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert!(is_together_read(&effects[0]), "{effects:?}");
}

#[test]
fn f59_a_stale_known_root_falls_back_to_the_stamped_one() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    let stale = CredentialId::mint([77; 20]);
    let (again, effects) = with_effects(&mut world, knowing(UID, 2, NOW, &stale));
    assert_eq!(again.unwrap().credential_id, root);
    assert_eq!(
        effects.len(),
        2,
        "the together read, then the stamped row: {effects:?}"
    );
    assert!(is_together_read(&effects[0]));
    assert_eq!(
        effects[1],
        Effect::Kv(KvRequest::Get {
            store: Store::Auth,
            key: keys::cred(&uid(UID), &root)
        })
    );
}

#[test]
fn revoked_known_root_refuses_the_exchange_barrier() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    run(
        &mut world,
        RevokeCredential {
            lifecycle_uid: uid(UID),
            credential_id: root.clone(),
        },
    )
    .unwrap();
    refused(
        &run(&mut world, knowing(UID, 2, NOW, &root)).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["barrier", "revoked"],
    );
    refused(
        &run(
            &mut world,
            knowing(UID, 2, NOW + ROOT_CREDENTIAL_TTL_MS, &root),
        )
        .unwrap_err(),
        ErrorCode::PermissionDenied,
        &["barrier"],
    );
}

#[test]
fn regrant_at_new_uid_with_the_old_known_root_refused_takeover() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    // The hint names the live incarnation's root, but the ensure is for another uid: the head
    // is not active at that uid, so the hint decides nothing.
    refused(
        &run(&mut world, knowing(UID2, 2, NOW, &root)).unwrap_err(),
        ErrorCode::AlreadyExists,
        &["takeover"],
    );
    assert_eq!(stamped(&world), root);
}

#[test]
fn an_unreadable_head_or_row_beside_a_known_root_fails_closed() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, "cred."),
        Fault::Unavailable,
    );
    refused(
        &run(&mut world, knowing(UID, 2, NOW, &root)).unwrap_err(),
        ErrorCode::Unavailable,
        &["fails closed"],
    );
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::Get, "lifecycle."),
        Fault::Unavailable,
    );
    refused(
        &run(&mut world, knowing(UID, 2, NOW, &root)).unwrap_err(),
        ErrorCode::Unavailable,
        &["fails closed"],
    );
    assert_eq!(
        run(&mut world, knowing(UID, 2, NOW, &root))
            .unwrap()
            .credential_id,
        root
    );
}

// ---- the connect check ---------------------------------------------------------------------

#[test]
fn a_stamped_root_connects() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    assert!(connect_in(&mut world, UID, &root, holder(), NOW).unwrap());
    let (authorized, effects) = with_effects(
        &mut world,
        AuthorizeConnectCredential {
            holder: holder(),
            lifecycle_uid: uid(UID),
            credential_id: root,
            now_ms: NOW,
        },
    );
    assert!(authorized.unwrap().root);
    assert_eq!(
        effects.len(),
        1,
        "the row and the head in one round trip: {effects:?}"
    );
    assert!(is_together_read(&effects[0]));
}

#[test]
fn unknown_credid_denied() {
    let mut world = ModelWorld::default();
    run(&mut world, ensure(UID, 1, NOW)).unwrap();
    let e = connect_in(
        &mut world,
        UID,
        &CredentialId::mint([99; 20]),
        holder(),
        NOW,
    )
    .unwrap_err();
    refused(&e, ErrorCode::PermissionDenied, &["not in the ledger"]);
}

#[test]
fn minted_but_unstamped_root_denied() {
    let mut world = ModelWorld::default();
    let mut a = Replay::new(ensure(UID, 1, NOW));
    // Crash right before the head stamp: the row is active and finalized, never stamped.
    step_until(&mut a, &mut world, |e| {
        matches!(
            e,
            Effect::Kv(KvRequest::Update {
                store: Store::Records,
                ..
            })
        )
    });
    let orphan = CredentialId::mint([1; 20]);
    assert_eq!(row(&world, UID, &orphan).state(), CredState::Active);
    refused(
        &connect_in(&mut world, UID, &orphan, holder(), NOW).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["not the current root", "F59"],
    );
    // The retry mints a fresh id; the orphan is never exported and stays denied.
    let root = run(&mut world, ensure(UID, 10, NOW)).unwrap().credential_id;
    assert_ne!(root, orphan);
    assert!(connect_in(&mut world, UID, &root, holder(), NOW).unwrap());
    assert!(connect_in(&mut world, UID, &orphan, holder(), NOW).is_err());
}

#[test]
fn a_wrong_holder_is_denied() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    let other = Principal::new(owner(), ActorToken::parse("other").unwrap());
    refused(
        &connect_in(&mut world, UID, &root, other, NOW).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["another principal"],
    );
}

#[test]
fn an_unreadable_ledger_denies_the_connect() {
    let mut world = ModelWorld::default();
    let root = run(&mut world, ensure(UID, 1, NOW)).unwrap().credential_id;
    // The row, then the head read beside it: either unanswered denies a root's connect.
    for (store, prefix) in [(Store::Auth, "cred."), (Store::Records, "lifecycle.")] {
        world
            .kv
            .inject(Trigger::new(store, KvOp::Get, prefix), Fault::Unavailable);
        refused(
            &connect_in(&mut world, UID, &root, holder(), NOW).unwrap_err(),
            ErrorCode::PermissionDenied,
            &["could not be proven live"],
        );
    }
    let garbled = keys::cred(&uid(UID), &root);
    world.kv.put(Store::Auth, &garbled, b"{\"credentialId\":1}");
    refused(
        &connect_in(&mut world, UID, &root, holder(), NOW).unwrap_err(),
        ErrorCode::PermissionDenied,
        &["could not be proven live"],
    );
}

#[test]
fn revoking_an_absent_row_is_corruption() {
    let mut world = ModelWorld::default();
    let e = run(
        &mut world,
        RevokeCredential {
            lifecycle_uid: uid(UID),
            credential_id: CredentialId::mint([1; 20]),
        },
    )
    .unwrap_err();
    refused(&e, ErrorCode::FailedPrecondition, &["absent"]);
}
