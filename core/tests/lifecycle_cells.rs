//! Serving, deregistration and reconcile on the KV model: reference-gate-impl §6.2 (serve grant
//! and status fence cells), §6.9 (reconcile resume), §6.11 (deregistration gate read), the §6.15
//! extras, and the rules these keep (F6, F27, F42, F52, F53, F69, Q-19).

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
use cotal_core::deregistration::{Deregister, Deregistration, NotRemoved};
use cotal_core::driver::ModelWorld;
use cotal_core::gate::{EndpointGate, GateState, ProcessEpoch};
use cotal_core::issuance::{FinalizeServeMint, ServeCredential};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::ledger::CredState;
use cotal_core::machine::{Ctx, Liveness};
use cotal_core::names::{keys, ActorToken, OwnerToken, SourceMember};
use cotal_core::reconcile::{CursorCleanup, ReconcileCondition, ReconcileGate};
use cotal_core::registration::RegisterInstance;
use cotal_core::repair::load_cursor;
use cotal_core::service::WriteStatus;
use cotal_core::serving::{AuthorizeServeGrant, RegisterServing, Serving};
use cotal_core::ErrorCode;
use serde_json::json;

fn serve(world: &mut ModelWorld, r: &RegisterInstance) -> Serving {
    run(
        world,
        RegisterServing {
            register: r.clone(),
            status: serde_json::Map::new(),
        },
    )
    .unwrap()
}

fn gate_now(world: &ModelWorld) -> EndpointGate {
    stored_gate(&world.kv)
}

fn authorize(
    world: &mut ModelWorld,
    r: &RegisterInstance,
    epoch: u64,
    holder: &str,
) -> Result<cotal_core::serving::AuthorizedServe, cotal_core::EpError> {
    run(
        world,
        AuthorizeServeGrant {
            gate: gate_ref(),
            epoch: ProcessEpoch(epoch),
            holder: OwnerToken::parse(holder).unwrap(),
            authority: r.authority.clone(),
        },
    )
}

fn status_write(
    world: &mut ModelWorld,
    epoch: u64,
    observed: u64,
) -> Result<cotal_core::kv::Revision, cotal_core::EpError> {
    let gate = gate_ref();
    run(
        world,
        WriteStatus {
            endpoint: gate.endpoint.clone(),
            instance: gate.instance.clone(),
            gate,
            epoch: ProcessEpoch(epoch),
            status: json!({"epoch": epoch, "state": "ready", "observedSpecRevision": observed}),
            expected_status_revision: None,
            supervisor: false,
        },
    )
}

// ---- Serving ----------------------------------------------------------------------------------

#[test]
fn register_serving_grants_the_sorted_command_union_and_writes_ready_at_the_committed_epoch() {
    let (mut world, r) = ceremony();
    let second = publish(
        &mut world,
        document("com.acme.extra", vec![command("alpha", "journal", &[])]),
    );
    let spec = spec_for("throwaway", OWNER, &[r.spec.cluster_digests()[0], second]);
    let r = RegisterInstance { spec, ..r };
    let serving = serve(&mut world, &r);
    let names: Vec<&str> = serving.serve.commands.iter().map(|c| c.as_str()).collect();
    assert_eq!(names, vec!["alpha", "ping", "pong"]);
    assert!(serving.serve.journal_class);
    let grant = &serving.serve.grant;
    assert_eq!(grant.epoch, serving.registered.process_epoch);
    assert_eq!(
        grant.registration_revision,
        serving.registered.registration_revision
    );
    let status_key = keys::svc_status(&gate_ref().endpoint, &gate_ref().instance);
    let status: serde_json::Value =
        serde_json::from_slice(&world.kv.get(Store::Records, &status_key).unwrap().value).unwrap();
    assert_eq!(status["state"], "ready");
    assert_eq!(status["epoch"], 0);
    assert_eq!(
        status["observedSpecRevision"],
        grant.registration_revision.0
    );
    // The grant mints.
    let credential = ServeCredential {
        credential_id: credential_id(1),
        holder_actor: ActorToken::parse("term").unwrap(),
        source_chain: vec![SourceMember::Root],
        exp: 1_900_000_000,
    };
    run(
        &mut world,
        FinalizeServeMint {
            gate: gate_ref(),
            grant: grant.clone(),
            credential,
        },
    )
    .unwrap();
}

#[test]
fn f27_f42_a_successors_registration_fences_the_predecessors_grant_mint_and_status() {
    let (mut world, r) = ceremony();
    let old = serve(&mut world, &r);
    let new = serve(
        &mut world,
        &RegisterInstance {
            op_id: op(2),
            ..r.clone()
        },
    );
    assert_eq!(new.registered.process_epoch.0, 1);
    // The predecessor's mint at its grant's coordinates is expired ...
    let err = run(
        &mut world,
        FinalizeServeMint {
            gate: gate_ref(),
            grant: old.serve.grant.clone(),
            credential: serve_credential(9, "term"),
        },
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Expired);
    // ... as is a fresh grant or a status write at its epoch.
    assert_eq!(
        authorize(&mut world, &r, 0, OWNER).unwrap_err().code,
        ErrorCode::Expired
    );
    let observed = new.registered.registration_revision.0;
    assert_eq!(
        status_write(&mut world, 0, observed).unwrap_err().code,
        ErrorCode::Expired
    );
    status_write(&mut world, 1, observed).unwrap();
}

#[test]
fn serve_grant_refusals_name_what_is_missing() {
    let (mut world, r) = ceremony();
    // Unregistered instance.
    assert_eq!(
        authorize(&mut world, &r, 0, OWNER).unwrap_err().code,
        ErrorCode::FailedPrecondition
    );
    serve(&mut world, &r);
    // A foreign holder.
    assert_eq!(
        authorize(&mut world, &r, 0, "u_dddddddddddddddddddddddddd")
            .unwrap_err()
            .code,
        ErrorCode::PermissionDenied
    );
    // The authority no longer authorizes the owner.
    let revoked = RegisterInstance {
        authority: TableAuthority::with("throwaway", "u_eeeeeeeeeeeeeeeeeeeeeeeeee", 0),
        ..r.clone()
    };
    assert_eq!(
        authorize(&mut world, &revoked, 0, OWNER).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    // The epoch is not current.
    assert_eq!(
        authorize(&mut world, &r, 3, OWNER).unwrap_err().code,
        ErrorCode::Expired
    );
    // A missing manifest is failed-precondition; a tampered one is internal.
    let closure = r.spec.cluster_digests()[0];
    let manifest = world
        .kv
        .get(Store::Contracts, &closure.hex())
        .unwrap()
        .value;
    world.kv.put(Store::Contracts, &closure.hex(), b"{\"v\":1}");
    assert_eq!(
        authorize(&mut world, &r, 0, OWNER).unwrap_err().code,
        ErrorCode::Internal
    );
    world.kv.delete_unpinned(Store::Contracts, &closure.hex());
    assert_eq!(
        authorize(&mut world, &r, 0, OWNER).unwrap_err().code,
        ErrorCode::FailedPrecondition
    );
    world.kv.put(Store::Contracts, &closure.hex(), &manifest);
    // A contract store that cannot be read is unavailable, not absent.
    world.kv.inject(
        Trigger::new(Store::Contracts, KvOp::Get, closure.hex()),
        Fault::Unavailable,
    );
    assert_eq!(
        authorize(&mut world, &r, 0, OWNER).unwrap_err().code,
        ErrorCode::Unavailable
    );
    authorize(&mut world, &r, 0, OWNER).unwrap();
}

#[test]
fn f42_status_fence_cells() {
    let (mut world, r) = ceremony();
    // No spec yet: a status would be torn.
    assert_eq!(
        status_write(&mut world, 0, 0).unwrap_err().code,
        ErrorCode::FailedPrecondition
    );
    let done = serve(&mut world, &r).registered;
    let rev = done.registration_revision.0;
    // Observing a spec revision ahead of the spec.
    assert_eq!(
        status_write(&mut world, 0, rev + 1).unwrap_err().code,
        ErrorCode::FailedPrecondition
    );
    status_write(&mut world, 0, rev).unwrap();
    // Restart: epoch 1. The old epoch is expired; the new writes; the old, if it were current
    // again, would be below the stored epoch.
    let again = serve(&mut world, &RegisterInstance { op_id: op(2), ..r }).registered;
    assert_eq!(
        status_write(&mut world, 0, rev).unwrap_err().code,
        ErrorCode::Expired
    );
    status_write(&mut world, 1, again.registration_revision.0).unwrap();
}

// ---- Deregistration (Q-19) --------------------------------------------------------------------

fn deregister(world: &mut ModelWorld) -> Result<Deregistration, cotal_core::EpError> {
    run(world, Deregister { gate: gate_ref() })
}

#[test]
fn q19_deregistration_removes_status_then_spec_and_keeps_the_gate() {
    let (mut world, r) = ceremony();
    assert_eq!(
        deregister(&mut world).unwrap(),
        Deregistration::NotRemoved(NotRemoved::Absent)
    );
    serve(&mut world, &r);
    let gate_before = gate_now(&world);
    world.log.clear();
    let removed = deregister(&mut world).unwrap();
    assert!(matches!(
        removed,
        Deregistration::Removed {
            status_revision: Some(_),
            ..
        }
    ));
    let deletes: Vec<String> = world
        .log
        .iter()
        .filter_map(|e| match e {
            cotal_core::machine::Effect::Kv(req) if req.op() == KvOp::Delete => {
                Some(req.key().to_string())
            }
            _ => None,
        })
        .collect();
    let (e, i) = (gate_ref().endpoint, gate_ref().instance);
    assert_eq!(
        deletes,
        vec![keys::svc_status(&e, &i), keys::svc_spec(&e, &i)]
    );
    assert_eq!(gate_now(&world), gate_before, "the gate is not touched");
    assert_eq!(
        deregister(&mut world).unwrap(),
        Deregistration::NotRemoved(NotRemoved::Absent)
    );
}

#[test]
fn f69_re_registration_over_deregistration_tombstones_advances_the_epoch() {
    let (mut world, r) = ceremony();
    serve(&mut world, &r);
    deregister(&mut world).unwrap();
    let again = serve(&mut world, &RegisterInstance { op_id: op(2), ..r });
    assert_eq!(
        again.registered.process_epoch.0, 1,
        "a tombstone is a prior incarnation"
    );
}

#[test]
fn deregistration_refuses_while_this_instances_registration_holds_the_slot() {
    let (mut world, r) = ceremony();
    serve(&mut world, &r);
    // A re-registration dies after its spec write (its reopen is refused unsent), holding the
    // slot at its frozen generation.
    fault_the_completing_reopen(&mut world, Fault::Unavailable);
    let err = run(&mut world, RegisterInstance { op_id: op(2), ..r }).unwrap_err();
    assert!(err.message.contains("reopen did not complete"), "{err}");
    assert_eq!(
        deregister(&mut world).unwrap(),
        Deregistration::NotRemoved(NotRemoved::RegistrationInFlight)
    );
}

#[test]
fn deregistration_of_a_moved_record_is_superseded() {
    let (mut world, r) = ceremony();
    serve(&mut world, &r);
    let status_key = keys::svc_status(&gate_ref().endpoint, &gate_ref().instance);
    // Right after the deregistration reads the status, the instance rewrites it.
    let k = status_key.clone();
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::Get, status_key),
        Fault::After(Box::new(move |kv| {
            let v = kv.get(Store::Records, &k).unwrap().value;
            kv.put(Store::Records, &k, &v);
        })),
    );
    assert_eq!(
        deregister(&mut world).unwrap(),
        Deregistration::NotRemoved(NotRemoved::Superseded)
    );
}

#[test]
fn deregistration_gate_read_reports_the_del_marker() {
    // §6.11: slot forced to this instance at its live generation, then its gate row deleted.
    let (mut world, r) = ceremony();
    serve(&mut world, &r);
    let govern = keys::govern(&gate_ref().endpoint);
    let gate = gate_now(&world);
    let forced = format!(
        r#"{{"commands":{{"ping":["ai.cotal.guarded"]}},"provisional":{{"instanceId":"{IID}","generation":{},"commands":{{}}}}}}"#,
        gate.generation().0
    );
    world.kv.put(Store::Records, &govern, forced.as_bytes());
    world.kv.delete_unpinned(Store::Auth, &gate_ref().key());
    let err = deregister(&mut world).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("carries a DEL marker"), "{err}");
}

// ---- Reconcile (F52, F53; §6.9) ---------------------------------------------------------------

fn reconcile(
    world: &mut ModelWorld,
) -> Result<cotal_core::reconcile::ReconcileReport, cotal_core::EpError> {
    run(world, ReconcileGate { gate: gate_ref() })
}

fn condition(world: &mut ModelWorld) -> ReconcileCondition {
    ReconcileCondition::of(&reconcile(world).unwrap_err()).unwrap()
}

#[test]
fn f52_reconcile_refuses_unless_the_holder_is_proven_gone() {
    let mut world = ModelWorld::default();
    assert_eq!(condition(&mut world), ReconcileCondition::NoGate);
    let mut world = registered_world(7);
    assert_eq!(condition(&mut world), ReconcileCondition::NotFrozen);
    let token = freeze(&mut world, &op(2)).unwrap();
    let before = world.kv.last_sequence(Store::Auth);
    for (liveness, expected) in [
        (Liveness::Live, ReconcileCondition::HolderAlive),
        (Liveness::Unknown, ReconcileCondition::HolderUnknown),
        (
            Liveness::Unestablishable,
            ReconcileCondition::LivenessUnestablishable,
        ),
    ] {
        world.set_prober(Box::new(move |_| liveness));
        let err = reconcile(&mut world).unwrap_err();
        assert_eq!(ReconcileCondition::of(&err), Some(expected), "{err}");
    }
    assert_eq!(
        world.kv.last_sequence(Store::Auth),
        before,
        "nothing mutated before proof"
    );
    // Proven gone, eviction verified: abort-reopen at the unchanged coordinate.
    world.set_prober(Box::new(|_| Liveness::Gone));
    world.set_evictor(Box::new(|h| vec![true; h.len()]));
    let report = reconcile(&mut world).unwrap();
    assert_eq!(report.freeze_token, token);
    assert_eq!(report.after, coords(2, 0, 7, 0));
    assert!(!report.completed_registration);
    assert_eq!(
        report.holders,
        vec![principal(P)],
        "the freeze holder is evicted even with no rows"
    );
    assert_eq!(gate_now(&world).state(), GateState::Open);
}

#[test]
fn reconcile_refuses_a_non_registration_freeze() {
    let mut world = registered_world(7);
    let gate = gate_now(&world);
    let takeover = gate
        .frozen(
            cotal_core::gate::GateOp::new(op(2), cotal_core::gate::OpKind::Takeover, None).unwrap(),
        )
        .unwrap();
    world
        .kv
        .put(Store::Auth, &gate_ref().key(), &takeover.to_bytes());
    world.set_prober(Box::new(|_| Liveness::Gone));
    assert_eq!(condition(&mut world), ReconcileCondition::WrongOpKind);
}

#[test]
fn f53_reconcile_resumes_from_its_cursor_and_a_later_freeze_starts_from_zero() {
    // §6.9 A: three staged rows (holders h1..h3) plus the freeze holder.
    let mut world = registered_world(7);
    let holders = [
        "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.h1",
        "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.h2",
        "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.h3",
    ];
    for (n, h) in holders.iter().enumerate() {
        let observed = observe(&mut world).unwrap();
        commit_sibling(&mut world, observed, sibling_row(n as u8 + 1, h)).unwrap();
    }
    let token = freeze(&mut world, &op(2)).unwrap();
    world.set_prober(Box::new(|_| Liveness::Gone));
    world.set_evictor(Box::new(|hs| {
        hs.iter().map(|h| h.actor().as_str() == "h1").collect()
    }));
    let err = reconcile(&mut world).unwrap_err();
    assert_eq!(
        ReconcileCondition::of(&err),
        Some(ReconcileCondition::EvictionUnverified)
    );
    assert!(err.message.contains("1 completed, 3 remaining"), "{err}");
    assert_eq!(gate_now(&world).state(), GateState::Frozen);
    let g = gate_ref();
    let stored = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| load_cursor(cx, &g)),
    )
    .unwrap()
    .unwrap();
    assert_eq!(stored.cursor.freeze_token(), token.0 .0);
    assert_eq!(stored.cursor.op_id(), &op(2));
    assert_eq!(stored.cursor.verified(), &[principal(holders[0])]);
    for (key, state) in family(&world) {
        assert_eq!(state, CredState::Revoked, "{key}");
    }
    // Retry: the probe runs again; only the unverified holders are asked.
    world.set_evictor(Box::new(|h| vec![true; h.len()]));
    world.log.clear();
    let report = reconcile(&mut world).unwrap();
    let probes = world
        .log
        .iter()
        .filter(|e| matches!(e, cotal_core::machine::Effect::Probe(_)))
        .count();
    assert_eq!(probes, 1);
    let mut asked = world.evicted();
    asked.sort_by_key(|p| p.key());
    let mut expected = vec![principal(holders[1]), principal(holders[2]), principal(P)];
    expected.sort_by_key(|p| p.key());
    assert_eq!(asked, expected);
    assert_eq!(
        report.holders_verified_before_attempt,
        vec![principal(holders[0])]
    );
    assert_eq!(report.repair_cursor_cleanup, CursorCleanup::Deleted);
    assert_eq!(gate_now(&world).state(), GateState::Open);
}

#[test]
fn f53_a_retained_cursor_never_vouches_for_a_later_freeze() {
    // §6.9 B: the cleanup delete fails once; the next freeze re-verifies every holder.
    let mut world = registered_world(7);
    let observed = observe(&mut world).unwrap();
    commit_sibling(&mut world, observed, sibling_row(1, SIBLING)).unwrap();
    freeze(&mut world, &op(2)).unwrap();
    world.set_prober(Box::new(|_| Liveness::Gone));
    world.set_evictor(Box::new(|h| vec![true; h.len()]));
    let cursor_key = keys::eprepair(&gate_ref().endpoint, &gate_ref().instance);
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Delete, cursor_key),
        Fault::Unavailable,
    );
    let report = reconcile(&mut world).unwrap();
    assert_eq!(report.repair_cursor_cleanup, CursorCleanup::Retained);
    assert_eq!(gate_now(&world).state(), GateState::Open);
    freeze(&mut world, &op(3)).unwrap();
    world.log.clear();
    let report = reconcile(&mut world).unwrap();
    assert!(report.holders_verified_before_attempt.is_empty());
    assert_eq!(report.holders_verified_this_attempt.len(), 2);
}

#[test]
fn reconcile_completes_a_registration_whose_spec_committed() {
    let (mut world, r) = ceremony();
    serve(&mut world, &r);
    // The re-registration dies after its spec write (its reopen is refused unsent).
    fault_the_completing_reopen(&mut world, Fault::Unavailable);
    run(&mut world, RegisterInstance { op_id: op(2), ..r }).unwrap_err();
    world.set_prober(Box::new(|_| Liveness::Gone));
    let report = reconcile(&mut world).unwrap();
    assert!(report.completed_registration);
    assert_eq!(
        report.after.process_epoch.0, 1,
        "completion advances the epoch (F69)"
    );
    assert_eq!(gate_now(&world).coordinates(), report.after);
}

// ---- Registry readers (§6.2) -------------------------------------------------------------------

fn expected_set(
    world: &mut ModelWorld,
    endpoint: &str,
) -> Result<Vec<cotal_core::registry::ExpectedInstance>, cotal_core::EpError> {
    run(
        world,
        cotal_core::registry::FreezeExpectedSet {
            endpoint: cotal_core::names::EndpointName::parse(endpoint).unwrap(),
        },
    )
}

#[test]
fn the_expected_set_holds_serving_instances_at_their_current_spec() {
    let (mut world, r) = ceremony();
    // Unreadable and empty are different refusals.
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::Keys, "svc."),
        Fault::Unavailable,
    );
    let unreadable = expected_set(&mut world, "throwaway").unwrap_err();
    assert_eq!(unreadable.code, ErrorCode::FailedPrecondition);
    assert!(unreadable.message.contains("is unreadable"), "{unreadable}");
    let empty = expected_set(&mut world, "throwaway").unwrap_err();
    assert!(
        empty.message.contains("no live registered instances"),
        "{empty}"
    );

    let a = serve(&mut world, &r);
    let iid_b = "bbbbbbbbbbbbbbbbbbbbbbbbbb";
    provision_for(&mut world, "throwaway", iid_b);
    let rb = RegisterInstance {
        instance: cotal_core::names::InstanceId::parse(iid_b).unwrap(),
        op_id: op(3),
        ..r.clone()
    };
    let b = serve(&mut world, &rb);
    assert_eq!(
        b.registered.process_epoch.0, 0,
        "a fresh instance keeps epoch 0"
    );
    let set = expected_set(&mut world, "throwaway").unwrap();
    assert_eq!(set.len(), 2);
    let a_entry = set.iter().find(|e| e.instance.as_str() == IID).unwrap();
    assert_eq!(
        a_entry.registration_revision,
        a.registered.registration_revision
    );

    // B re-registers but its status still observes the old spec revision: B drops out.
    let b2 = run(
        &mut world,
        RegisterInstance {
            op_id: op(4),
            ..rb.clone()
        },
    )
    .unwrap();
    assert_eq!(b2.process_epoch.0, 1);
    let set = expected_set(&mut world, "throwaway").unwrap();
    assert_eq!(set.len(), 1);
    assert_eq!(set[0].instance.as_str(), IID);

    // A exits: it drops out too, and the set is empty.
    let gate = gate_ref();
    run(
        &mut world,
        WriteStatus {
            endpoint: gate.endpoint.clone(),
            instance: gate.instance.clone(),
            gate,
            epoch: ProcessEpoch(0),
            status: json!({"epoch": 0, "state": "exited", "observedSpecRevision": a.registered.registration_revision.0}),
            expected_status_revision: None,
            supervisor: false,
        },
    )
    .unwrap();
    assert!(expected_set(&mut world, "throwaway").is_err());
    // An unknown endpoint has no instances; a malformed spec is internal.
    assert_eq!(
        expected_set(&mut world, "ghost").unwrap_err().code,
        ErrorCode::FailedPrecondition
    );
    let spec_key = keys::svc_spec(&gate_ref().endpoint, &gate_ref().instance);
    world
        .kv
        .put(Store::Records, &spec_key, b"{\"endpoint\":\"throwaway\"}");
    assert_eq!(
        expected_set(&mut world, "throwaway").unwrap_err().code,
        ErrorCode::Internal
    );
}

#[test]
fn a_spec_write_conflict_whose_read_back_is_foreign_leaves_the_gate_frozen() {
    // §6.15: Phase 3's CAS loses to a foreign writer; the read-back shows other bytes.
    let (mut world, r) = ceremony();
    let spec_key = keys::svc_spec(&gate_ref().endpoint, &gate_ref().instance);
    let k = spec_key.clone();
    world.kv.inject(
        Trigger::new(Store::Records, KvOp::Get, spec_key),
        Fault::After(Box::new(move |kv| {
            kv.put(Store::Records, &k, b"{\"foreign\":true}");
        })),
    );
    let err = run(&mut world, r).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(
        err.message.contains("spec-write outcome is ambiguous"),
        "{err}"
    );
    assert_eq!(gate_now(&world).state(), GateState::Frozen);
}

// ---- Gaps the simulator found, now closed ---------------------------------------------------

#[test]
fn f42_an_instance_status_write_waits_while_a_barrier_holds_the_gate() {
    let (mut world, r) = ceremony();
    let rev = serve(&mut world, &r).registered.registration_revision.0;
    // A successor's registration froze the gate; the epoch advance rides its reopen, so the
    // old epoch still equals the gate's.
    freeze(&mut world, &op(7)).unwrap();
    let err = status_write(&mut world, 0, rev).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("frozen by a barrier"), "{err}");
    // The supervisor is not held up by a barrier.
    let gate = gate_ref();
    run(
        &mut world,
        WriteStatus {
            endpoint: gate.endpoint.clone(),
            instance: gate.instance.clone(),
            gate,
            epoch: ProcessEpoch(0),
            status: json!({"epoch": 0, "state": "escalated", "observedSpecRevision": rev, "retiredAt": 5}),
            expected_status_revision: None,
            supervisor: true,
        },
    )
    .unwrap();
}

#[test]
fn f52_a_reconcile_acts_only_on_the_freeze_that_still_stands_after_the_probe() {
    use cotal_core::machine::{Effect, Machine, Observation, Replay, Step};
    let mut world = registered_world(7);
    let observed = observe(&mut world).unwrap();
    let row = sibling_row(1, SIBLING);
    commit_sibling(&mut world, observed, row.clone()).unwrap();
    let token = freeze(&mut world, &op(2)).unwrap();
    // While the holder's liveness is probed, the freeze's own operation abort-reopens the gate
    // (and its holder dies after, so the probe truthfully answers gone).
    let mut machine = Replay::new(ReconcileGate { gate: gate_ref() });
    let mut obs = None;
    let result = loop {
        match machine.step(obs.take()) {
            Step::Done(r) => break r,
            Step::Effect(Effect::Probe(_)) => {
                assert!(reopen(&mut world, &op(2), token, coords(2, 0, 7, 0)).unwrap());
                obs = Some(Observation::Probed(Liveness::Gone));
            }
            Step::Effect(effect) => {
                obs = Some(cotal_core::driver::World::perform(&mut world, &effect))
            }
        }
    };
    let err = result.unwrap_err();
    assert_eq!(
        ReconcileCondition::of(&err),
        Some(ReconcileCondition::Raced),
        "{err}"
    );
    assert_eq!(
        row_state(&world, &row.key()),
        Some(CredState::Active),
        "nothing revoked"
    );
    assert_eq!(gate_now(&world).state(), GateState::Open);
}

#[test]
fn a_second_executor_of_the_same_op_reopening_the_gate_stops_the_spec_publish() {
    let (mut world, r) = ceremony();
    // Right after Phase 2 lists the family, another executor of the same op id abort-reopens.
    let prefix = gate_ref().family_prefix();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Keys, prefix),
        Fault::After(Box::new(|kv| {
            let key = gate_ref().key();
            let entry = kv.get(Store::Auth, &key).unwrap();
            let frozen = EndpointGate::parse(&entry.value).unwrap();
            let reopened = frozen.reopened(&op(1), coords(1, 0, 0, 0)).unwrap();
            kv.put(Store::Auth, &key, &reopened.to_bytes());
        })),
    );
    let err = run(&mut world, r).unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    assert!(err.message.contains("Nothing was published"), "{err}");
    let spec_key = keys::svc_spec(&gate_ref().endpoint, &gate_ref().instance);
    assert!(world.kv.get(Store::Records, &spec_key).is_none());
}
