//! The rollback high-water mark on the KV model (ecosystem §8): a gate observation below the
//! mark — an older revision, epoch or generation, or the gate gone — is refused; the mark only
//! rises.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{op, run, Proc, IID};
use cotal_core::barrier;
use cotal_core::driver::ModelWorld;
use cotal_core::gate::Coordinates;
use cotal_core::issuance::{observe_gate, GateObservation, GateRef, ProvisionGate};
use cotal_core::machine::Ctx;
use cotal_core::names::{EndpointName, InstanceId, Principal, SpaceName};
use cotal_core::rollback::{check, Mark, ROLLBACK_DETECTED};
use cotal_core::ErrorCode;

fn gate() -> GateRef {
    GateRef::new(
        SpaceName::parse("s1").unwrap(),
        EndpointName::parse("auth").unwrap(),
        InstanceId::parse(IID).unwrap(),
    )
}

fn observe(world: &mut ModelWorld) -> GateObservation {
    let g = gate();
    run(world, Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &g)))
        .unwrap()
        .unwrap()
}

/// Freezes and reopens the gate at the next generation and `epoch`.
fn advance(world: &mut ModelWorld, n: u8, epoch: u64) {
    let g = gate();
    let seen = observe(world);
    let op_id = op(n);
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| {
            let token = barrier::freeze(cx, &g, &op_id, &seen)?.unwrap();
            let mut at: Coordinates = seen.gate.coordinates();
            at.generation = at.generation.next()?;
            at.process_epoch = cotal_core::gate::ProcessEpoch(epoch);
            barrier::reopen(cx, &g, &op_id, token, at)
        }),
    )
    .unwrap();
}

#[test]
fn a_gate_below_its_high_water_mark_is_a_rollback_and_the_mark_only_rises() {
    let mut world = ModelWorld::default();
    run(
        &mut world,
        ProvisionGate {
            gate: gate(),
            principal: Principal::parse("local.plane").unwrap(),
        },
    )
    .unwrap();
    let first = observe(&mut world);
    let mark = Mark::of(&first);
    check(&gate().key(), &mark, Some(&first)).unwrap();

    advance(&mut world, 1, 1);
    let later = observe(&mut world);
    check(&gate().key(), &mark, Some(&later)).unwrap();
    let risen = mark.max(Mark::of(&later));
    assert_eq!(risen, Mark::of(&later));
    assert_eq!(risen.max(mark), risen, "the mark never falls");

    // The store handed back the older state: revision, epoch and generation all fell.
    let refused = check(&gate().key(), &risen, Some(&first)).unwrap_err();
    assert_eq!(refused.code, ErrorCode::FailedPrecondition);
    assert_eq!(refused.details[0]["kind"], ROLLBACK_DETECTED);
    for fell in ["revision", "process epoch", "generation", "rolled back"] {
        assert!(refused.message.contains(fell), "{fell}: {refused}");
    }
    // A gate gone entirely is a rollback too.
    let gone = check(&gate().key(), &risen, None).unwrap_err();
    assert!(gone.message.contains("is gone"), "{gone}");
}

/// The fence armed with a floor resolves on a gate read below it, even with the gate open at the
/// owner's epoch: a rolled-back store is no ground to go on serving.
#[test]
fn the_host_fence_resolves_on_a_gate_below_its_floor() {
    use cotal_core::host::AwaitHostFence;
    use cotal_core::kv::Revision;
    use cotal_core::machine::{Effect, Machine, Step};

    let mut world = ModelWorld::default();
    run(
        &mut world,
        ProvisionGate {
            gate: gate(),
            principal: Principal::parse("local.plane").unwrap(),
        },
    )
    .unwrap();
    let seen = observe(&mut world);
    let epoch = seen.gate.process_epoch();
    let step = |fence: &mut AwaitHostFence, world: &mut ModelWorld| {
        let mut observation = None;
        loop {
            match fence.step(observation.take()) {
                Step::Effect(Effect::Sleep(_)) => return None,
                Step::Effect(effect) => {
                    observation = Some(cotal_core::driver::World::perform(world, &effect));
                }
                Step::Done(result) => return Some(result.unwrap()),
            }
        }
    };
    // At its own revision the gate holds: the fence sleeps.
    let mut held = AwaitHostFence::new(gate(), epoch)
        .unwrap()
        .with_floor(seen.revision);
    assert!(step(&mut held, &mut world).is_none());
    // Armed above what the store now shows: resolved at once, with the gate as read.
    let mut rolled = AwaitHostFence::new(gate(), epoch)
        .unwrap()
        .with_floor(Revision(seen.revision.0 + 5));
    let resolved = step(&mut rolled, &mut world).expect("a gate below the floor fences");
    let cotal_core::host::FenceEnd::RolledBack {
        seen: resolved,
        floor,
    } = resolved
    else {
        panic!("a read below the floor is a rollback: {resolved:?}");
    };
    assert_eq!(resolved.revision, seen.revision);
    assert_eq!(floor, Revision(seen.revision.0 + 5));
    // A re-armed fence keeps its floor.
    let mut again = rolled.rearmed();
    assert!(step(&mut again, &mut world).is_some());
}

/// A stream ending below the highest last sequence the plane saw lost acknowledged writes: it is
/// refused naming both, with the rollback detail; at or above the mark it passes.
#[test]
fn a_stream_below_its_mark_is_a_rollback() {
    use cotal_core::rollback::check_stream;
    assert!(check_stream("KV_cotal_auth_s1", 40, 40).is_ok());
    assert!(check_stream("KV_cotal_auth_s1", 40, 41).is_ok());
    let e = check_stream("KV_cotal_auth_s1", 40, 39).unwrap_err();
    assert_eq!(e.code, ErrorCode::FailedPrecondition);
    assert!(
        e.message.contains(
            "stream KV_cotal_auth_s1 went backwards: its last sequence is 39, below the 40"
        ),
        "{e}"
    );
    assert!(e.message.contains("rolled back"), "{e}");
    assert_eq!(e.details[0]["kind"], ROLLBACK_DETECTED);
    assert_eq!(e.details[0]["lastSeq"], 40);
}
