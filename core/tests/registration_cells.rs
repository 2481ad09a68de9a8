//! The registration ceremony on the KV model: reference-gate-impl §6.2 (registration subset),
//! the §6.15 extra cells, and one named test per rule the ceremony keeps (F64–F69, F13/F14,
//! Q-5, Q-13), including every failure branch of the §5.9 matrix and its ambiguous writes.

// Test code: a failed unwrap is a failed test, which is the point.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::ceremony::*;
use common::*;
use cotal_core::driver::ModelWorld;
use cotal_core::gate::{EndpointGate, GateOp, GateState, OpKind};
use cotal_core::govern::{read_governance, GovernanceHead};
use cotal_core::issuance::{FinalizeServeMint, GateRef};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::ledger::CredState;
use cotal_core::machine::Ctx;
use cotal_core::names::{keys, InstanceId};
use cotal_core::registration::{RegisterInstance, Registered};
use cotal_core::repair::load_cursor;
use cotal_core::service::ServiceSpec;
use cotal_core::{EpError, ErrorCode};

const IID_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbb";

fn register(world: &mut ModelWorld, r: &RegisterInstance) -> Result<Registered, EpError> {
    run(world, r.clone())
}

fn gate_of(world: &ModelWorld, gate: &GateRef) -> EndpointGate {
    EndpointGate::parse(&world.kv.get(Store::Auth, &gate.key()).unwrap().value).unwrap()
}

fn fixture_gate(world: &ModelWorld) -> EndpointGate {
    gate_of(world, &gate_ref())
}

fn spec_record(world: &ModelWorld) -> Option<(Vec<u8>, u64)> {
    let key = keys::svc_spec(&gate_ref().endpoint, &gate_ref().instance);
    world
        .kv
        .get(Store::Records, &key)
        .filter(|e| e.is_put())
        .map(|e| (e.value, e.revision.0))
}

fn head(world: &mut ModelWorld) -> GovernanceHead {
    let endpoint = gate_ref().endpoint;
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| read_governance(cx, &endpoint)),
    )
    .unwrap()
    .0
}

fn spec_key() -> String {
    keys::svc_spec(&gate_ref().endpoint, &gate_ref().instance)
}

// ---- §6.2 registration subset ----------------------------------------------------------------

#[test]
fn first_registration_opens_at_generation_1_epoch_0_and_the_spec_revision() {
    let (mut world, r) = ceremony();
    let done = register(&mut world, &r).unwrap();
    let (bytes, revision) = spec_record(&world).unwrap();
    assert_eq!(bytes, r.spec.to_bytes(), "the spec is written as given");
    assert_eq!(done.registration_revision.0, revision);
    assert_eq!((done.process_epoch.0, done.generation.0), (0, 1));
    let gate = fixture_gate(&world);
    assert_eq!(gate.state(), GateState::Open);
    assert_eq!(gate.coordinates(), coords(1, 0, revision, 0));
    // The slot was promoted (ping's guarded trait is now binding) and released.
    let head = head(&mut world);
    assert!(head.provisional.is_none());
    assert_eq!(head.commands.to_json(), r#"{"ping":["ai.cotal.guarded"]}"#);
    // An empty family needs no repair cursor.
    let g = gate_ref();
    let cursor = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| load_cursor(cx, &g)),
    )
    .unwrap();
    assert!(cursor.is_none());
}

#[test]
fn f69_a_restart_re_registers_at_a_later_revision_and_advances_the_epoch() {
    let (mut world, r) = ceremony();
    let first = register(&mut world, &r).unwrap();
    let again = RegisterInstance {
        op_id: op(2),
        ..r.clone()
    };
    let second = register(&mut world, &again).unwrap();
    assert!(second.registration_revision > first.registration_revision);
    assert_eq!((second.process_epoch.0, second.generation.0), (1, 2));
    assert_eq!(fixture_gate(&world).process_epoch().0, 1);
}

#[test]
fn f67_registrant_must_be_the_spec_owner_and_nothing_is_frozen() {
    let (mut world, r) = ceremony();
    let before = world.kv.last_sequence(Store::Auth);
    let foreign = RegisterInstance {
        registrant: cotal_core::names::OwnerToken::parse("u_dddddddddddddddddddddddddd").unwrap(),
        ..r
    };
    assert_eq!(
        register(&mut world, &foreign).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        world.kv.last_sequence(Store::Auth),
        before,
        "refused before any write"
    );
}

#[test]
fn f61_an_unauthorized_owner_is_refused_under_the_freeze_and_the_gate_abort_reopens() {
    let (mut world, r) = ceremony();
    let refused = RegisterInstance {
        authority: TableAuthority::with("throwaway", "u_dddddddddddddddddddddddddd", 0),
        ..r
    };
    let err = register(&mut world, &refused).unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
    // E2: the abort reopen advances only the generation.
    let gate = fixture_gate(&world);
    assert_eq!(
        (gate.state(), gate.coordinates()),
        (GateState::Open, coords(1, 0, 0, 0))
    );
    assert!(spec_record(&world).is_none());
}

#[test]
fn f67_a_name_transfer_racing_the_registration_is_conflict() {
    let (mut world, r) = ceremony();
    let moved = RegisterInstance {
        authority: TableAuthority::with("throwaway", OWNER, 4),
        ..r
    };
    assert_eq!(
        register(&mut world, &moved).unwrap_err().code,
        ErrorCode::Conflict
    );
    assert_eq!(fixture_gate(&world).state(), GateState::Open);
}

#[test]
fn f67_a_re_registration_never_changes_ownership() {
    let (mut world, r) = ceremony();
    register(&mut world, &r).unwrap();
    let evil = "u_eeeeeeeeeeeeeeeeeeeeeeeeee";
    let closure = r.spec.cluster_digests()[0];
    let takeover = RegisterInstance {
        spec: spec_for("throwaway", evil, &[closure]),
        registrant: cotal_core::names::OwnerToken::parse(evil).unwrap(),
        authority: TableAuthority::with("throwaway", evil, 0),
        op_id: op(2),
        ..r
    };
    assert_eq!(
        register(&mut world, &takeover).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    let gate = fixture_gate(&world);
    assert_eq!((gate.state(), gate.generation().0), (GateState::Open, 2));
}

#[test]
fn a_gate_that_was_never_provisioned_is_failed_precondition() {
    let (mut world, r) = ceremony();
    let unprovisioned = RegisterInstance {
        instance: InstanceId::parse(IID_B).unwrap(),
        ..r
    };
    let err = register(&mut world, &unprovisioned).unwrap_err();
    assert_eq!(err.code, ErrorCode::FailedPrecondition);
}

// ---- Gate states and op ownership ------------------------------------------------------------

#[test]
fn f14_a_gate_frozen_by_another_operation_is_conflict_with_the_reconcile_remedy() {
    let (mut world, r) = ceremony();
    freeze(&mut world, &op(7)).unwrap();
    let err = register(&mut world, &r).unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    assert_eq!(err.details[0]["kind"], "ai.cotal.ep.lifecycle-blocked");
    assert_eq!(err.details[0]["gateState"], "frozen");
    assert_eq!(err.details[0]["remedy"], "cotal-authd gate reconcile");
    assert!(
        err.message.contains(&format!(
            "cotal-authd gate reconcile --space {} --endpoint {} --instance {}",
            r.space,
            r.spec.endpoint(),
            r.instance
        )),
        "{err}"
    );
    assert_eq!(fixture_gate(&world).op().unwrap().op_id(), &op(7));
}

#[test]
fn f15_a_retired_gate_never_registers() {
    let (mut world, r) = ceremony();
    let retired = fixture_gate(&world)
        .frozen(GateOp::new(op(7), OpKind::Retirement, None).unwrap())
        .unwrap()
        .to_json()
        .replace(r#""state":"frozen""#, r#""state":"retired""#);
    world
        .kv
        .put(Store::Auth, &gate_ref().key(), retired.as_bytes());
    let err = register(&mut world, &r).unwrap_err();
    assert_eq!(err.code, ErrorCode::FailedPrecondition);
    assert_eq!(err.details[0]["gateState"], "retired");
}

#[test]
fn evict_max_outside_1_to_256_is_internal_before_any_freeze() {
    for evict_max in [0, 257] {
        let (mut world, r) = ceremony();
        let before = world.kv.last_sequence(Store::Auth);
        let bad = RegisterInstance { evict_max, ..r };
        assert_eq!(
            register(&mut world, &bad).unwrap_err().code,
            ErrorCode::Internal
        );
        assert_eq!(world.kv.last_sequence(Store::Auth), before);
    }
}

// ---- F68: revoke and verified eviction of the whole family -----------------------------------

fn registered_with_credentials() -> (ModelWorld, RegisterInstance, Vec<String>) {
    let (mut world, r) = ceremony();
    let done = register(&mut world, &r).unwrap();
    let grant = {
        let mut g = grant(0, done.registration_revision.0, 0);
        g.epoch = done.process_epoch;
        g
    };
    let mut keys = Vec::new();
    for n in 1..=2 {
        let release = run(
            &mut world,
            FinalizeServeMint {
                gate: gate_ref(),
                grant: grant.clone(),
                credential: serve_credential(n, "term"),
            },
        )
        .unwrap();
        keys.push(release.row_key);
    }
    let observed = observe(&mut world).unwrap();
    keys.push(
        commit_sibling(&mut world, observed, sibling_row(3, SIBLING))
            .unwrap()
            .row_key,
    );
    (world, r, keys)
}

#[test]
fn f68_re_registration_revokes_the_whole_family_and_evicts_every_holder_before_the_spec() {
    let (mut world, r, keys) = registered_with_credentials();
    // A row a partial earlier barrier already revoked still has its holder evicted.
    let k = keys[1].clone();
    run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| cotal_core::ledger::revoke_row(cx, &k)),
    )
    .unwrap();
    world.log.clear();
    register(&mut world, &RegisterInstance { op_id: op(2), ..r }).unwrap();
    for key in &keys {
        assert_eq!(row_state(&world, key), Some(CredState::Revoked), "{key}");
    }
    let mut evicted = world.evicted();
    evicted.sort_by_key(|p| p.key());
    assert_eq!(evicted, vec![principal(SIBLING), principal(P)]);
    // Eviction happened before the spec write.
    let evict_at = world
        .log
        .iter()
        .position(|e| matches!(e, cotal_core::machine::Effect::Evict(_)))
        .unwrap();
    let spec_at = world
        .log
        .iter()
        .position(|e| matches!(e, cotal_core::machine::Effect::Kv(req) if req.is_write() && req.key() == spec_key()))
        .unwrap();
    assert!(evict_at < spec_at);
}

#[test]
fn f68_unverified_eviction_leaves_the_gate_frozen_and_a_retry_resumes_from_the_cursor() {
    let (mut world, r, keys) = registered_with_credentials();
    let spec_before = spec_record(&world).unwrap();
    // The sibling holder cannot be verified gone.
    world.set_evictor(Box::new(|holders| {
        holders
            .iter()
            .map(|h| h.actor().as_str() != "goalw")
            .collect()
    }));
    let retry = RegisterInstance { op_id: op(2), ..r };
    let err = register(&mut world, &retry).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("left frozen"), "{err}");
    assert!(err.message.contains("1 completed, 1 remaining"), "{err}");
    assert_eq!(
        fixture_gate(&world).state(),
        GateState::Frozen,
        "E4: never reopened"
    );
    assert_eq!(
        spec_record(&world).unwrap(),
        spec_before,
        "the spec was not written"
    );
    for key in &keys {
        assert_eq!(
            row_state(&world, key),
            Some(CredState::Revoked),
            "revocations stay"
        );
    }
    // The same operation resumes its own freeze and evicts only the holder still owed.
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    world.log.clear();
    let done = register(&mut world, &retry).unwrap();
    assert_eq!(world.evicted(), vec![principal(SIBLING)]);
    assert_eq!((done.process_epoch.0, done.generation.0), (1, 2));
    let g = gate_ref();
    let cursor = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| load_cursor(cx, &g)),
    )
    .unwrap();
    assert!(cursor.is_none(), "the cursor is cleared after the reopen");
}

// ---- Phase 3 ambiguity and resume --------------------------------------------------------------

#[test]
fn ambiguous_spec_write_that_committed_is_proven_by_read_back_and_completes() {
    let (mut world, r) = ceremony();
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::CreateStrict, spec_key()),
        Fault::AmbiguousApplied,
    );
    let done = register(&mut world, &r).unwrap();
    assert_eq!(done.registration_revision.0, spec_record(&world).unwrap().1);
    assert_eq!(fixture_gate(&world).state(), GateState::Open);
}

#[test]
fn unresolved_spec_write_leaves_the_gate_frozen_and_the_same_op_completes_it_from_the_spec() {
    let (mut world, r) = ceremony();
    // Phase 1's read of the spec key succeeds; the write commits but its ack is lost; every
    // read-back after it fails.
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::Get, spec_key()),
        Fault::After(Box::new(|_| {})),
    );
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::CreateStrict, spec_key()),
        Fault::AmbiguousApplied,
    );
    for _ in 0..8 {
        world.kv.inject(
            Trigger::new(Store::Records, KvOp::Get, spec_key()),
            Fault::Unavailable,
        );
    }
    let err = register(&mut world, &r).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(
        err.message.contains("spec-write outcome is ambiguous"),
        "{err}"
    );
    assert_eq!(
        fixture_gate(&world).state(),
        GateState::Frozen,
        "never reopened at the old coordinate"
    );
    let committed = spec_record(&world).unwrap().1;
    // A restart with the same op id resumes its own freeze and completes from the spec.
    world.kv.clear_faults();
    let done = register(&mut world, &r).unwrap();
    assert_eq!(done.registration_revision.0, committed);
    assert_eq!(
        (done.process_epoch.0, done.generation.0),
        (0, 1),
        "first registration keeps epoch 0"
    );
    assert!(head(&mut world).provisional.is_none());
}

#[test]
fn a_failed_promote_leaves_the_gate_frozen_and_the_same_op_completes_it() {
    let (mut world, r) = ceremony();
    let govern = keys::govern(&gate_ref().endpoint);
    // Slot-take (create) succeeds; the promote's pinned update is refused, and its read-back
    // shows the merge did not land.
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::Update, govern.clone()),
        Fault::Unavailable,
    );
    let err = register(&mut world, &r).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(
        err.message.contains("governance promote did not complete"),
        "{err}"
    );
    assert_eq!(fixture_gate(&world).state(), GateState::Frozen);
    assert!(
        head(&mut world).provisional.is_some(),
        "the slot is still held"
    );
    let done = register(&mut world, &r).unwrap();
    assert_eq!(done.generation.0, 1);
    let head = head(&mut world);
    assert!(head.provisional.is_none());
    assert_eq!(head.commands.to_json(), r#"{"ping":["ai.cotal.guarded"]}"#);
}

#[test]
fn a_lost_completing_reopen_leaves_the_gate_frozen() {
    let (mut world, r) = ceremony();
    // The freeze (first gate update) goes through; the completing reopen is refused unsent.
    fault_the_completing_reopen(&mut world, Fault::Unavailable);
    let err = register(&mut world, &r).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("reopen did not complete"), "{err}");
    assert_eq!(fixture_gate(&world).state(), GateState::Frozen);
    // Resume completes from the committed spec.
    let done = register(&mut world, &r).unwrap();
    assert_eq!((done.process_epoch.0, done.generation.0), (0, 1));
}

#[test]
fn an_ambiguous_completing_reopen_is_settled_by_its_successor() {
    let (mut world, r) = ceremony();
    fault_the_completing_reopen(&mut world, Fault::AmbiguousApplied);
    let done = register(&mut world, &r).unwrap();
    assert_eq!(
        fixture_gate(&world).coordinates(),
        coords(1, 0, done.registration_revision.0, 0)
    );
}

#[test]
fn f64_an_ambiguous_slot_take_aborts_and_the_reopen_orphans_the_slot() {
    let (mut world, r) = ceremony();
    let govern = keys::govern(&gate_ref().endpoint);
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::CreateStrict, govern),
        Fault::AmbiguousApplied,
    );
    let err = register(&mut world, &r).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    let gate = fixture_gate(&world);
    assert_eq!(
        (gate.state(), gate.generation().0),
        (GateState::Open, 1),
        "abort-reopened"
    );
    let slot = head(&mut world).provisional.unwrap();
    assert_eq!(
        slot.generation.0, 0,
        "stamped behind the live generation: an own orphan"
    );
    // The next registration replaces its own orphan.
    let done = register(&mut world, &RegisterInstance { op_id: op(2), ..r }).unwrap();
    assert_eq!(done.generation.0, 2);
    assert!(head(&mut world).provisional.is_none());
}

// ---- Governance across instances (F64, F65) --------------------------------------------------

fn second_instance(
    world: &mut ModelWorld,
    r: &RegisterInstance,
    spec: ServiceSpec,
) -> RegisterInstance {
    provision_for(world, "throwaway", IID_B);
    RegisterInstance {
        instance: InstanceId::parse(IID_B).unwrap(),
        spec,
        op_id: op(3),
        ..r.clone()
    }
}

#[test]
fn f65_a_second_instance_cannot_strip_a_governed_trait() {
    let (mut world, r) = ceremony();
    register(&mut world, &r).unwrap();
    let stripped = publish(
        &mut world,
        document("com.acme.ping", vec![command("ping", "ephemeral", &[])]),
    );
    let b = second_instance(&mut world, &r, spec_for("throwaway", OWNER, &[stripped]));
    let err = register(&mut world, &b).unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
    assert!(err.message.contains("ai.cotal.guarded"), "{err}");
    let gate_b = gate_of(&world, &gate_for("throwaway", IID_B));
    assert_eq!(
        (gate_b.state(), gate_b.generation().0),
        (GateState::Open, 1),
        "abort-reopened"
    );
    // Removing the command entirely is allowed; the binding keeps its tombstone.
    let removed = publish(
        &mut world,
        document("com.acme.ping", vec![command("pong", "ephemeral", &[])]),
    );
    let b = RegisterInstance {
        spec: spec_for("throwaway", OWNER, &[removed]),
        op_id: op(4),
        ..b
    };
    register(&mut world, &b).unwrap();
    assert_eq!(
        head(&mut world).commands.to_json(),
        r#"{"ping":["ai.cotal.guarded"]}"#
    );
}

#[test]
fn f66_a_virtual_endpoint_serves_only_journal_commands_and_a_command_is_declared_once() {
    let (mut world, r) = ceremony();
    let closure = r.spec.cluster_digests()[0];
    let mut value = r.spec.value().clone();
    value["activation"] = serde_json::json!({"mode": "on-demand", "capacity": 1});
    let endpoint = gate_ref().endpoint;
    let virtual_spec = ServiceSpec::from_value(value, &endpoint).unwrap();
    let err = register(
        &mut world,
        &RegisterInstance {
            spec: virtual_spec,
            ..r.clone()
        },
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::FailedPrecondition);
    let twice = spec_for("throwaway", OWNER, &[closure, closure]);
    let err = register(
        &mut world,
        &RegisterInstance {
            spec: twice,
            op_id: op(2),
            ..r
        },
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::FailedPrecondition);
    assert_eq!(
        fixture_gate(&world).generation().0,
        2,
        "each refusal abort-reopened"
    );
}

#[test]
fn an_unpublished_closure_is_failed_precondition_under_the_freeze() {
    let (mut world, r) = ceremony();
    let missing = cotal_core::canon::Digest::of(b"nothing here");
    let spec = spec_for("throwaway", OWNER, &[missing]);
    let err = register(&mut world, &RegisterInstance { spec, ..r }).unwrap_err();
    assert_eq!(err.code, ErrorCode::FailedPrecondition);
    assert_eq!(fixture_gate(&world).state(), GateState::Open);
}

#[test]
fn f64_an_in_flight_foreign_slot_blocks_until_its_holder_is_reconciled() {
    let (mut world, r) = ceremony();
    // Instance A dies after taking the slot: its promote never lands, its gate stays frozen.
    let govern = keys::govern(&gate_ref().endpoint);
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::Update, govern),
        Fault::Unavailable,
    );
    register(&mut world, &r).unwrap_err();
    assert_eq!(fixture_gate(&world).state(), GateState::Frozen);
    let b = second_instance(&mut world, &r, r.spec.clone());
    let err = register(&mut world, &b).unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    assert!(err.message.contains("IN FLIGHT"), "{err}");
    assert_eq!(
        cotal_core::govern::ForeignSlotCondition::of(&err),
        Some(cotal_core::govern::ForeignSlotCondition::InFlight)
    );
    // The operator reconciles A (its holder is gone): A completes from its committed spec,
    // which releases its slot; B then registers.
    world.set_prober(Box::new(|_| cotal_core::machine::Liveness::Gone));
    let report = run(
        &mut world,
        cotal_core::reconcile::ReconcileGate { gate: gate_ref() },
    )
    .unwrap();
    assert!(report.completed_registration);
    let done = register(&mut world, &RegisterInstance { op_id: op(5), ..b }).unwrap();
    assert_eq!(done.generation.0, 2, "B aborted once, then completed");
}

// ---- Round trips (DESIGN §5.4) ------------------------------------------------------------------

/// KV requests (contract reads included) one registration costs on the model.
fn requests_of(world: &mut ModelWorld, r: &RegisterInstance) -> u64 {
    let before = world.kv.requests_served();
    register(world, r).unwrap();
    world.kv.requests_served() - before
}

#[test]
fn registration_round_trips_stay_below_the_references() {
    // First registration, empty family: observe 1, freeze 1, spec read 1, head read 1, closure
    // 2, slot-take 1, family list 1, freeze re-check 1, spec write 1, promote 2, reopen 2,
    // release 2 = 16. The reference spends 20 here (a re-read before the freeze and the reopen's
    // CAS, and a repair cursor written and deleted even for an empty family).
    let (mut world, r) = ceremony();
    assert_eq!(requests_of(&mut world, &r), 16);
    // Re-registration over a family of 3 active rows held by 2 principals: + 3 row reads,
    // + 3 × (read + revoke), + cursor load, save, verified save and delete = 16 + 3 + 6 + 4.
    let (mut world, r, _) = registered_with_credentials();
    assert_eq!(
        requests_of(&mut world, &RegisterInstance { op_id: op(2), ..r }),
        29
    );
}
