//! Host incarnations on the KV model (reference-auth-service §7.1–§7.2): the reverse-DNS rule,
//! register-host-incarnation's epochs and its confirming read, ambiguity on its writes, and the
//! host fence.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::ceremony::{command, document};
use common::{op, run, IID};
use cotal_core::barrier;
use cotal_core::canon::Digest;
use cotal_core::driver::{drive, ModelWorld, World};
use cotal_core::gate::{GateOp, GateState, ProcessEpoch};
use cotal_core::host::{
    broker_awaited_copy, broker_lost_copy, gate_unreadable_copy, host_principal, observe_host_gate,
    AwaitHostFence, FenceEnd, HostConfig, HostEndpoint, HostIncarnation, RegisterHostIncarnation,
    SelfContract, HOST_FENCE_POLL,
};
use cotal_core::issuance::{observe_gate, GateObservation, GateRef};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::{KvOp, KvOutcome, KvRequest, Store};
use cotal_core::machine::{Ctx, Effect, Machine, Observation, Step};
use cotal_core::names::{keys, InstanceId, OpId, SpaceName};
use cotal_core::service::ServiceSpec;
use cotal_core::{EpError, ErrorCode};
use serde_json::{json, Value};

const HOST: &str = "com.example.host";

fn host() -> HostConfig {
    let doc = document(HOST, vec![command("work", "ephemeral", &[])]);
    HostConfig {
        space: SpaceName::parse("s1").unwrap(),
        endpoint: HostEndpoint::parse(HOST).unwrap(),
        contract: SelfContract::from_cluster(&doc).unwrap(),
    }
}

fn instance() -> InstanceId {
    InstanceId::parse(IID).unwrap()
}

fn gate() -> GateRef {
    host().gate(&instance())
}

fn start(op_id: OpId) -> RegisterHostIncarnation {
    RegisterHostIncarnation {
        host: host(),
        instance: instance(),
        op_id,
    }
}

fn register(world: &mut ModelWorld, n: u8) -> Result<HostIncarnation, EpError> {
    run(world, start(op(n)))
}

fn read_gate(world: &mut ModelWorld) -> Option<GateObservation> {
    let gate = gate();
    run(
        world,
        common::Proc(move |cx: &mut Ctx<'_>| observe_host_gate(cx, &gate)),
    )
    .unwrap()
}

/// A model mutation for `Fault::After`: another start of the host instance, run to completion.
fn interposed_start(n: u8) -> Fault {
    Fault::After(Box::new(move |kv: &mut KvModel| {
        let mut world = ModelWorld::new(std::mem::replace(kv, KvModel::new()));
        register(&mut world, n).unwrap();
        *kv = world.kv;
    }))
}

/// Lets the gate's next update (the ceremony's freeze) through and applies `fault` to the one
/// after it (the completing reopen).
fn fault_the_reopen(world: &mut ModelWorld, fault: Fault) {
    let key = gate().key();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, key.clone()),
        Fault::After(Box::new(|_| {})),
    );
    world
        .kv
        .inject(Trigger::new(Store::Auth, KvOp::Update, key), fault);
}

// ---- the reverse-DNS rule ---------------------------------------------------------------------

#[test]
fn f61_host_endpoint_refuses_single_label_and_malformed_names() {
    for name in ["auth", "manager", "host", "example"] {
        let e = HostEndpoint::parse(name).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{name}");
        assert!(e.message.contains("single-label"), "{name}: {e}");
        assert!(e.message.contains("SPEC 13.2"), "{name}: {e}");
    }
    for name in [
        "",
        "com..host",
        ".com.host",
        "com.host.",
        "Com.Example.Host",
        "com.EXAMPLE",
        "com_example.host",
        "com.-host",
        "com.host-",
        "com.ex ample",
        &format!("com.{}", "a".repeat(61)),
    ] {
        let e = HostEndpoint::parse(name).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{name:?}");
        assert!(e.message.contains("SPEC 13.2"), "{name:?}: {e}");
    }
    for name in ["com.example", "com.example.host", "io.x-1.a0", "a.b"] {
        assert_eq!(HostEndpoint::parse(name).unwrap().name().as_str(), name);
    }
}

#[test]
fn host_gate_principal_is_local_host_serve_instance() {
    assert_eq!(
        host_principal(&instance()).unwrap().to_string(),
        format!("local.host_serve_{IID}")
    );
}

// ---- register-host-incarnation ----------------------------------------------------------------

/// Reference §7.1 steps 2–6 on a virgin space: artifacts published, gate provisioned open for
/// the host principal, spec owned by `local`, epoch 0 (the first registration keeps it).
#[test]
fn f69_first_host_start_commits_epoch_zero() {
    let mut world = ModelWorld::default();
    let before = world.kv.requests_served();
    let first = register(&mut world, 1).unwrap();
    let trips = world.kv.requests_served() - before;
    assert_eq!(first.instance, instance());
    assert_eq!(first.process_epoch, ProcessEpoch(0));

    let seen = read_gate(&mut world).unwrap();
    assert_eq!(seen.gate.state(), GateState::Open);
    assert_eq!(seen.gate.process_epoch(), ProcessEpoch(0));
    assert_eq!(seen.gate.generation().0, 1);
    assert_eq!(
        seen.gate.registration_revision(),
        first.registration_revision
    );
    assert_eq!(seen.gate.principal(), &host_principal(&instance()).unwrap());

    let spec = world.kv.apply(&KvRequest::Get {
        store: Store::Records,
        key: keys::svc_spec(&gate().endpoint, &instance()),
    });
    let KvOutcome::Entry(Some(entry)) = spec else {
        panic!("no spec: {spec:?}")
    };
    let spec = ServiceSpec::parse(&entry.value, &gate().endpoint).unwrap();
    assert_eq!(spec.owner().as_str(), "local");
    assert_eq!(
        spec.cluster_digests().to_vec(),
        vec![host().contract.cluster_digest]
    );
    for artifact in &host().contract.artifacts {
        let stored = world.kv.apply(&KvRequest::Get {
            store: Store::Contracts,
            key: Digest::of(artifact).hex(),
        });
        assert!(
            matches!(stored, KvOutcome::Entry(Some(ref e)) if &e.value == artifact),
            "{stored:?}"
        );
    }
    println!("register-host-incarnation, first start: {trips} KV round trips");
}

/// A later start of the same instance commits previous + 1 and fences the predecessor: the
/// predecessor's fence resolves with the new gate.
#[test]
fn f69_second_host_start_advances_the_epoch_and_fences_the_first() {
    let mut world = ModelWorld::default();
    let first = register(&mut world, 1).unwrap();
    let before = world.kv.requests_served();
    let second = register(&mut world, 2).unwrap();
    let trips = world.kv.requests_served() - before;
    assert_eq!(second.process_epoch, ProcessEpoch(1));
    assert!(second.registration_revision.0 > first.registration_revision.0);

    let FenceEnd::Superseded(fenced) = drive(
        &mut AwaitHostFence::new(gate(), first.process_epoch).unwrap(),
        &mut world,
    )
    .unwrap() else {
        panic!("the second start supersedes the first");
    };
    assert_eq!(fenced.gate.state(), GateState::Open);
    assert_eq!(fenced.gate.process_epoch(), ProcessEpoch(1));

    let third = register(&mut world, 3).unwrap();
    assert_eq!(third.process_epoch, ProcessEpoch(2));
    println!("register-host-incarnation, later start: {trips} KV round trips");
}

/// Reference §7.1 step 6: a later start registering between this start's reopen and its
/// confirming read fences this one; it answers `conflict`, never the stale epoch.
#[test]
fn f6_a_start_fenced_before_its_confirming_read_is_conflict() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    fault_the_reopen(&mut world, interposed_start(3));
    let e = register(&mut world, 2).unwrap_err();
    assert_eq!(e.code, ErrorCode::Conflict, "{e}");
    assert!(
        e.message.contains("is no longer open at this registration"),
        "{e}"
    );
    assert!(e.message.contains("SPEC 13.1"), "{e}");
    // The interposed start (epoch 2) holds the gate.
    let seen = read_gate(&mut world).unwrap();
    assert_eq!(seen.gate.process_epoch(), ProcessEpoch(2));
    assert_eq!(seen.gate.state(), GateState::Open);
}

/// The confirming read also refuses a gate a later barrier froze at this very epoch.
#[test]
fn f6_a_start_whose_gate_a_later_barrier_froze_is_conflict() {
    let mut world = ModelWorld::default();
    fault_the_reopen(
        &mut world,
        Fault::After(Box::new(|kv: &mut KvModel| {
            let key = gate().key();
            let KvOutcome::Entry(Some(entry)) = kv.apply(&KvRequest::Get {
                store: Store::Auth,
                key: key.clone(),
            }) else {
                panic!("no gate")
            };
            let gate = cotal_core::gate::EndpointGate::parse(&entry.value).unwrap();
            let frozen = gate.frozen(GateOp::registration(op(9))).unwrap();
            let written = kv.apply(&KvRequest::Update {
                store: Store::Auth,
                key,
                value: frozen.to_bytes(),
                expected: entry.revision,
            });
            assert!(matches!(written, KvOutcome::Written(_)), "{written:?}");
        })),
    );
    let e = register(&mut world, 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::Conflict, "{e}");
    assert!(e.message.contains("it is frozen at epoch 0"), "{e}");
}

// ---- ambiguity on the registration writes -------------------------------------------------------

/// Every write of the first start answered ambiguously (committed or not): the machines settle
/// each by read-back and the start completes at epoch 0 with the gate open.
#[test]
fn ambiguous_first_start_writes_are_settled_by_read_back() {
    let writes = [
        (Store::Contracts, KvOp::CreateStrict, String::new()),
        (Store::Auth, KvOp::Create, gate().key()),
        (Store::Auth, KvOp::Update, gate().key()),
        (Store::Records, KvOp::CreateStrict, "svc.".to_owned()),
    ];
    for (store, kv_op, prefix) in writes {
        for applied in [true, false] {
            let mut world = ModelWorld::default();
            let fault = if applied {
                Fault::AmbiguousApplied
            } else {
                Fault::AmbiguousNotApplied
            };
            world
                .kv
                .inject(Trigger::new(store, kv_op, prefix.clone()), fault);
            let outcome = register(&mut world, 1);
            let what = format!("{store:?} {kv_op:?} {prefix} applied={applied}");
            assert_eq!(
                world.kv.pending_faults(),
                0,
                "{what}: the fault never fired"
            );
            assert_eq!(outcome.unwrap().process_epoch, ProcessEpoch(0), "{what}");
            let seen = read_gate(&mut world).unwrap();
            assert_eq!(seen.gate.state(), GateState::Open, "{what}");
        }
    }
}

/// The completing reopen answered ambiguously but committed: the read-back finds the exact
/// successor and the later start completes at epoch 1.
#[test]
fn ambiguous_applied_reopen_of_a_later_start_completes() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    fault_the_reopen(&mut world, Fault::AmbiguousApplied);
    assert_eq!(
        register(&mut world, 2).unwrap().process_epoch,
        ProcessEpoch(1)
    );
    assert_eq!(world.kv.pending_faults(), 0);
}

/// The completing reopen answered ambiguously and did not commit: the read-back finds the gate
/// still frozen under this op at the freeze token, so the same pinned reopen is sent again and
/// the start completes at epoch 1.
#[test]
fn ambiguous_not_applied_reopen_is_settled_and_retried() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    fault_the_reopen(&mut world, Fault::AmbiguousNotApplied);
    assert_eq!(
        register(&mut world, 2).unwrap().process_epoch,
        ProcessEpoch(1)
    );
    assert_eq!(world.kv.pending_faults(), 0);
}

/// The completing reopen could not be sent: the start is `unavailable` and the gate stays frozen
/// under its op (never reopened at the old coordinate, E4), which already fences the epoch-0
/// incarnation. A fresh op id is refused by the frozen gate; the same op id resumes its own
/// freeze and completes at epoch 1.
#[test]
fn a_lost_reopen_leaves_the_gate_frozen_until_the_same_op_resumes() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    fault_the_reopen(&mut world, Fault::Unavailable);
    let e = register(&mut world, 2).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
    let frozen = read_gate(&mut world).unwrap();
    assert_eq!(frozen.gate.state(), GateState::Frozen);
    assert_eq!(frozen.gate.process_epoch(), ProcessEpoch(0));

    // The epoch-0 incarnation is fenced: its gate left `open`.
    let FenceEnd::Held(fenced) = drive(
        &mut AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap(),
        &mut world,
    )
    .unwrap() else {
        panic!("a frozen gate at the epoch holds it");
    };
    assert_eq!(fenced.gate.state(), GateState::Frozen);

    assert_eq!(
        register(&mut world, 3).unwrap_err().code,
        ErrorCode::Conflict
    );
    assert_eq!(
        register(&mut world, 2).unwrap().process_epoch,
        ProcessEpoch(1)
    );
}

/// A deleted host gate is refused at the next start (gates are never deleted, F9), not
/// recreated at epoch 0 where a predecessor's epoch could repeat.
#[test]
fn f9_a_start_over_a_deleted_gate_is_refused() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    delete_gate(&mut world);
    let e = register(&mut world, 2).unwrap_err();
    assert_eq!(e.code, ErrorCode::FailedPrecondition, "{e}");
}

// ---- the host fence -------------------------------------------------------------------------

fn delete_gate(world: &mut ModelWorld) {
    let revision = read_gate(world).unwrap().revision;
    let deleted = world.kv.apply(&KvRequest::Delete {
        store: Store::Auth,
        key: gate().key(),
        expected: revision,
    });
    assert!(matches!(deleted, KvOutcome::Written(_)), "{deleted:?}");
}

#[test]
fn await_host_fence_refuses_an_epoch_that_is_not_a_non_negative_safe_integer() {
    for bad in [
        json!(-1),
        json!(1.5),
        json!(9_007_199_254_740_992_u64),
        json!("0"),
        Value::Null,
        json!(true),
    ] {
        let e = AwaitHostFence::from_json(gate(), &bad).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{bad}");
        assert_eq!(
            e.message,
            format!("processEpoch must be a non-negative integer, got {bad}")
        );
    }
    let e = AwaitHostFence::new(gate(), ProcessEpoch(1 << 53)).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    for good in [
        json!(0),
        json!(7),
        json!(2.0),
        json!(9_007_199_254_740_991_u64),
    ] {
        AwaitHostFence::from_json(gate(), &good).unwrap();
    }
}

#[test]
fn await_host_fence_resolves_none_when_the_gate_is_absent() {
    let mut world = ModelWorld::default();
    let mut fence = AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap();
    assert_eq!(drive(&mut fence, &mut world).unwrap(), FenceEnd::Gone);
    assert_eq!(world.log.len(), 1, "one read: {:?}", world.log);
}

#[test]
fn await_host_fence_resolves_none_when_the_gate_is_deleted() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    delete_gate(&mut world);
    let mut fence = AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap();
    assert_eq!(drive(&mut fence, &mut world).unwrap(), FenceEnd::Gone);
}

#[test]
fn await_host_fence_at_a_stale_epoch_resolves_at_once() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    register(&mut world, 2).unwrap();
    world.log.clear();
    let FenceEnd::Superseded(seen) = drive(
        &mut AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap(),
        &mut world,
    )
    .unwrap() else {
        panic!("a later epoch supersedes");
    };
    assert_eq!(seen.gate.process_epoch(), ProcessEpoch(1));
    assert!(world.log.iter().all(|e| matches!(e, Effect::Kv(_))));
    assert_eq!(world.log.len(), 1);
    // An epoch the gate never reached is "another epoch" too.
    let FenceEnd::Superseded(ahead) = drive(
        &mut AwaitHostFence::new(gate(), ProcessEpoch(5)).unwrap(),
        &mut world,
    )
    .unwrap() else {
        panic!("another epoch supersedes");
    };
    assert_eq!(ahead.gate.process_epoch(), ProcessEpoch(1));
}

/// The current incarnation's fence polls (read, sleep 1 s, read …) while the gate stands, and
/// resolves with the successor's gate on the first read after a later start.
#[test]
fn await_host_fence_polls_until_a_later_start_fences_the_incarnation() {
    let mut world = ModelWorld::default();
    let current = register(&mut world, 1).unwrap();
    let mut fence = AwaitHostFence::new(gate(), current.process_epoch).unwrap();
    let mut observation = None;
    let mut sleeps = 0;
    let resolved = loop {
        match fence.step(observation.take()) {
            Step::Done(result) => break result.unwrap(),
            Step::Effect(Effect::Sleep(period)) => {
                assert_eq!(period, HOST_FENCE_POLL);
                sleeps += 1;
                if sleeps == 3 {
                    register(&mut world, 2).unwrap();
                }
                observation = Some(Observation::Slept);
            }
            Step::Effect(effect) => {
                assert!(
                    matches!(effect, Effect::Kv(KvRequest::Get { .. })),
                    "{effect:?}"
                );
                observation = Some(world.perform(&effect));
            }
        }
    };
    assert_eq!(sleeps, 3);
    let FenceEnd::Superseded(resolved) = resolved else {
        panic!("the later start supersedes: {resolved:?}");
    };
    assert_eq!(resolved.gate.process_epoch(), ProcessEpoch(1));
    // Stepping a resolved fence is a driver bug.
    assert!(matches!(fence.step(None), Step::Done(Err(e)) if e.code == ErrorCode::Internal));
}

/// A registration barrier that freezes the gate at the same epoch fences it too (not `open`).
#[test]
fn await_host_fence_resolves_when_the_gate_freezes_at_its_epoch() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    let g = gate();
    let observed = run(
        &mut world,
        common::Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &g)),
    )
    .unwrap()
    .unwrap();
    let g = gate();
    run(
        &mut world,
        common::Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &g, &op(7), &observed)),
    )
    .unwrap()
    .unwrap();
    let FenceEnd::Held(seen) = drive(
        &mut AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap(),
        &mut world,
    )
    .unwrap() else {
        panic!("a freeze at the epoch holds the gate");
    };
    assert_eq!(seen.gate.state(), GateState::Frozen);
    assert_eq!(seen.gate.process_epoch(), ProcessEpoch(0));
}

#[test]
fn await_host_fence_rejects_when_a_read_fails() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, gate().key()),
        Fault::Unavailable,
    );
    let e = drive(
        &mut AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap(),
        &mut world,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
}

/// A driver answering the fence's read with anything but a KV outcome is a bug: `internal`.
#[test]
fn await_host_fence_answers_a_wrong_observation_with_internal() {
    let mut fence = AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap();
    assert!(matches!(fence.step(None), Step::Effect(Effect::Kv(_))));
    let done = fence.step(Some(Observation::Slept));
    assert!(matches!(done, Step::Done(Err(e)) if e.code == ErrorCode::Internal));
}

/// The plane's sentence for each way its fence ends, and the rollback refusal it audits only
/// for a rolled-back gate (F21, F22, F69; ecosystem §8).
#[test]
fn a_fence_end_says_why_the_plane_stopped() {
    let mut world = ModelWorld::default();
    let first = register(&mut world, 1).unwrap();
    register(&mut world, 2).unwrap();
    let superseded = drive(
        &mut AwaitHostFence::new(gate(), first.process_epoch).unwrap(),
        &mut world,
    )
    .unwrap();
    let FenceEnd::Superseded(seen) = &superseded else {
        panic!("the second start supersedes the first");
    };
    let copy = superseded.plane_copy(&gate(), ProcessEpoch(0));
    assert_eq!(
        copy,
        format!(
            "the gate moved from epoch 0 to 1 (generation {}, open); a successor registered",
            seen.gate.generation()
        )
    );
    assert!(superseded.rollback_refusal(&gate(), &copy).is_none());

    let rolled = FenceEnd::RolledBack {
        seen: seen.clone(),
        floor: cotal_core::kv::Revision(seen.revision.0 + 5),
    };
    let copy = rolled.plane_copy(&gate(), ProcessEpoch(1));
    assert_eq!(
        copy,
        format!(
            "gate {} is at revision {}, below the {} it stood at after this plane's \
             registration: the store rolled back (an acknowledged write was lost), so nothing \
             it says can be trusted; investigate before starting again",
            gate().key(),
            seen.revision.0,
            seen.revision.0 + 5
        )
    );
    let refusal = rolled.rollback_refusal(&gate(), &copy).unwrap();
    assert_eq!(refusal.code, ErrorCode::FailedPrecondition);
    assert_eq!(refusal.message, copy);
    assert_eq!(
        refusal.details,
        vec![json!({"kind": cotal_core::rollback::ROLLBACK_DETECTED, "gate": gate().key()})]
    );

    assert_eq!(
        FenceEnd::Gone.plane_copy(&gate(), ProcessEpoch(0)),
        format!("gate {} is gone", gate().key())
    );
}

/// A frozen gate at the plane's own epoch: a barrier holds it, named with its op.
#[test]
fn a_held_fence_end_names_the_barrier_op() {
    let mut world = ModelWorld::default();
    register(&mut world, 1).unwrap();
    fault_the_reopen(&mut world, Fault::Unavailable);
    register(&mut world, 2).unwrap_err();
    let held = drive(
        &mut AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap(),
        &mut world,
    )
    .unwrap();
    let FenceEnd::Held(seen) = &held else {
        panic!("a frozen gate at the epoch holds it");
    };
    let op = seen.gate.op().unwrap();
    assert_eq!(
        held.plane_copy(&gate(), ProcessEpoch(0)),
        format!(
            "the gate is frozen at generation {} ({}:{}), not open at this plane's epoch 0; a \
             barrier holds it",
            seen.gate.generation(),
            op.kind().as_str(),
            op.op_id()
        )
    );
}

/// A plane that cannot read its gate, or lost its server for good, stops with a sentence that
/// says why; while it waits for its server, its cause says how long it waits.
#[test]
fn an_unreadable_gate_and_a_lost_server_are_said() {
    assert_eq!(
        gate_unreadable_copy(&gate(), 10, "timed out"),
        format!(
            "cannot read gate {} for 10s (timed out); stopping, since a fence can no longer be \
             noticed",
            gate().key()
        )
    );
    assert_eq!(
        broker_lost_copy(10),
        "lost the connection to the NATS server and it did not come back within 10s; stopping \
         (start again once it is back)"
    );
    assert_eq!(
        broker_awaited_copy(10),
        "lost the connection to the NATS server; waiting up to 10s for it to come back"
    );
}

/// A platform host's configuration: its endpoint checked, its contract named when it refuses.
#[test]
fn a_platform_host_is_configured_from_its_endpoint_and_its_contract() {
    let doc = document(HOST, vec![command("work", "ephemeral", &[])]);
    let space = SpaceName::parse("s1").unwrap();
    let host = HostConfig::of_platform(&space, HOST, &doc, &[]).unwrap();
    assert_eq!(host.gate(&instance()), self::host().gate(&instance()));
    let e = HostConfig::of_platform(&space, "not reverse dns", &doc, &[]).unwrap_err();
    assert_eq!(
        e,
        HostEndpoint::parse("not reverse dns").unwrap_err().message
    );
    let e = HostConfig::of_platform(&space, HOST, &json!({}), &[]).unwrap_err();
    assert!(e.starts_with("the platform host's contract: "), "{e}");
}
