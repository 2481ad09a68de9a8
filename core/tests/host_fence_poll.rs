//! `AwaitHostFence`'s poll and re-arm on the KV model: a fence sleeps the poll it was given, asks
//! for a sleep only after a read that saw its incarnation held, and a re-armed fence starts with
//! a fresh read for the same incarnation and poll.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use cotal_core::driver::{ModelWorld, World};
use cotal_core::gate::ProcessEpoch;
use cotal_core::host::{AwaitHostFence, HOST_FENCE_POLL};
use cotal_core::issuance::{GateRef, ProvisionGate};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::machine::{Effect, Machine, Step};
use cotal_core::names::{EndpointName, InstanceId, Principal, SpaceName};
use cotal_core::ErrorCode;

fn gate() -> GateRef {
    GateRef::new(
        SpaceName::parse("s1").unwrap(),
        EndpointName::parse("auth").unwrap(),
        InstanceId::mint([7; 20]),
    )
}

/// A world whose gate is provisioned open at epoch 0: held for a fence at epoch 0.
fn held() -> ModelWorld {
    let mut world = ModelWorld::default();
    let principal = Principal::parse("u_cccccccccccccccccccccccccc.authd").unwrap();
    cotal_core::driver::drive(&mut ProvisionGate::machine(gate(), principal), &mut world).unwrap();
    world
}

/// Steps `fence` until it asks for something other than a KV request; returns that step.
fn until_not_kv(fence: &mut AwaitHostFence, world: &mut ModelWorld) -> Step<()> {
    let mut observation = None;
    loop {
        match fence.step(observation.take()) {
            Step::Effect(effect @ Effect::Kv(_)) => observation = Some(world.perform(&effect)),
            Step::Effect(effect) => return Step::Effect(effect),
            Step::Done(result) => return Step::Done(result.map(|_| ())),
        }
    }
}

#[test]
fn a_fence_sleeps_the_default_poll_unless_told_otherwise() {
    let mut world = held();
    let mut fence = AwaitHostFence::new(gate(), ProcessEpoch(0)).unwrap();
    assert_eq!(fence.poll(), HOST_FENCE_POLL);
    assert!(matches!(
        until_not_kv(&mut fence, &mut world),
        Step::Effect(Effect::Sleep(d)) if d == HOST_FENCE_POLL
    ));

    let quick = Duration::from_millis(250);
    let mut fence = AwaitHostFence::new(gate(), ProcessEpoch(0))
        .unwrap()
        .with_poll(quick);
    assert_eq!(fence.poll(), quick);
    assert!(matches!(
        until_not_kv(&mut fence, &mut world),
        Step::Effect(Effect::Sleep(d)) if d == quick
    ));
    // Re-polling a sleep repeats it at the same poll.
    assert!(matches!(fence.step(None), Step::Effect(Effect::Sleep(d)) if d == quick));
}

#[test]
fn a_failed_read_fails_the_fence_without_a_sleep_and_a_rearmed_fence_reads_again() {
    let mut world = held();
    let quick = Duration::from_millis(250);
    let mut fence = AwaitHostFence::new(gate(), ProcessEpoch(0))
        .unwrap()
        .with_poll(quick);
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, gate().key()),
        Fault::Unavailable,
    );
    let failed = until_not_kv(&mut fence, &mut world);
    assert!(
        matches!(&failed, Step::Done(Err(e)) if e.code == ErrorCode::Unavailable),
        "{failed:?}"
    );

    let mut again = fence.rearmed();
    assert_eq!(again.gate(), &gate());
    assert_eq!(again.epoch(), ProcessEpoch(0));
    assert_eq!(again.poll(), quick);
    assert!(matches!(again.step(None), Step::Effect(Effect::Kv(_))));
    assert!(matches!(
        until_not_kv(&mut again, &mut world),
        Step::Effect(Effect::Sleep(d)) if d == quick
    ));
}
