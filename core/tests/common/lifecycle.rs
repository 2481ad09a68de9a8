//! Fixtures for the agent-lifecycle tests on the KV model: one alias (`u_a…a/agent`), its
//! incarnations made live by [`EnsureRootCredential`], its managed retirement, the stored rows
//! read back, and a crash right before a machine's `n`th durable step.

use cotal_core::driver::{ModelWorld, World};
use cotal_core::gate::{GateState, OpKind};
use cotal_core::kv::Store;
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::lifecycle::{
    managed_retirement_op_id, AgentGate, EnsureRootCredential, HeadState, LifecycleHead,
    RetireLifecycle, RootEntropy,
};
use cotal_core::machine::{Effect, Machine, Step};
use cotal_core::names::{
    keys, ActorToken, LifecycleUid, ManagerInstance, OpId, OwnerToken, Principal,
};

use super::run;

pub const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
pub const ACTOR: &str = "agent";
pub const UID: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
pub const UID2: &str = "vvvvvvvvvvvvvvvvvvvvvvvvvv";
pub const MGR: &str = "auth-service:s1";
pub const NOW: u64 = 1_780_000_000_000;

pub fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}
pub fn actor() -> ActorToken {
    ActorToken::parse(ACTOR).unwrap()
}
pub fn uid(s: &str) -> LifecycleUid {
    LifecycleUid::parse(s).unwrap()
}
pub fn holder() -> Principal {
    Principal::new(owner(), actor())
}

/// A world whose evictor verifies every holder gone.
pub fn world() -> ModelWorld {
    let mut world = ModelWorld::default();
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    world
}

/// The root-credential ensure of the alias at `at`.
pub fn ensure(at: &str, entropy: u8) -> EnsureRootCredential {
    ensure_for(actor(), at, entropy)
}

/// The root-credential ensure of `u_a…a/<actor>` at `at`.
pub fn ensure_for(actor: ActorToken, at: &str, entropy: u8) -> EnsureRootCredential {
    EnsureRootCredential {
        owner: owner(),
        actor,
        lifecycle_uid: uid(at),
        manager_instance: ManagerInstance::parse(MGR).unwrap(),
        now_ms: NOW,
        entropy: RootEntropy {
            op: [entropy; 20],
            credentials: [[entropy; 20], [entropy + 1; 20], [entropy + 2; 20]],
        },
        known: None,
    }
}

/// A live incarnation at `at` with its stamped root credential.
pub fn live(world: &mut ModelWorld, at: &str, entropy: u8) {
    run(world, ensure(at, entropy)).unwrap();
}

/// The managed retirement of the alias at `at`, unguarded.
pub fn retire(at: &str) -> RetireLifecycle {
    retire_as(at, managed_retirement_op_id(&uid(at)).unwrap())
}

pub fn retire_as(at: &str, op_id: OpId) -> RetireLifecycle {
    RetireLifecycle {
        owner: owner(),
        actor: actor(),
        lifecycle_uid: uid(at),
        op_id,
        guard: None,
    }
}

pub fn gate_row(world: &ModelWorld, at: &str) -> AgentGate {
    let key = keys::agent_gate(&uid(at));
    AgentGate::parse(&world.kv.get(Store::Auth, &key).unwrap().value, &uid(at)).unwrap()
}

pub fn head_row(world: &ModelWorld) -> LifecycleHead {
    let key = keys::lifecycle_head(&owner(), &actor());
    LifecycleHead::parse(
        &world.kv.get(Store::Records, &key).unwrap().value,
        &owner(),
        &actor(),
    )
    .unwrap()
}

pub fn family(world: &ModelWorld, at: &str) -> Vec<LedgerRow> {
    let prefix = keys::cred_family_prefix(&uid(at));
    world
        .kv
        .keys(Store::Auth, &prefix)
        .into_iter()
        .map(|k| LedgerRow::parse(&world.kv.get(Store::Auth, &k).unwrap().value, &k).unwrap())
        .collect()
}

/// The end state of a completed retirement of `at` under `managedRetirementOpId(at)`.
pub fn assert_retired(world: &ModelWorld, at: &str) {
    let op = managed_retirement_op_id(&uid(at)).unwrap();
    let gate = gate_row(world, at);
    assert_eq!(gate.state(), GateState::Retired);
    assert_eq!(gate.op().unwrap().op_id(), &op);
    assert_eq!(gate.op().unwrap().kind(), OpKind::Retirement);
    let head = head_row(world);
    assert_eq!(head.state(), HeadState::Retired);
    assert_eq!(head.lifecycle_uid(), &uid(at));
    assert_eq!(head.retirement_op(), None);
    let rows = family(world, at);
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r.state() == CredState::Revoked));
    let frontier = world
        .kv
        .get(Store::Records, &keys::frontier(&uid(at)))
        .unwrap();
    assert_eq!(
        String::from_utf8(frontier.value).unwrap(),
        format!(r#"{{"lifecycleUid":"{at}","opId":"{op}","streams":{{}}}}"#)
    );
}

/// Whether `effect` is one of a barrier's durable steps: a write or an eviction.
pub fn is_step(effect: &Effect) -> bool {
    matches!(effect, Effect::Kv(r) if r.is_write()) || matches!(effect, Effect::Evict(_))
}

/// Runs `machine` until it is about to perform its `n`th step (0-based), then drops it: a crash
/// right before that step. False when the machine finished with fewer steps.
pub fn crash_before<M: Machine>(machine: &mut M, world: &mut ModelWorld, n: usize) -> bool {
    let mut seen = 0;
    let mut step = machine.step(None);
    while let Step::Effect(effect) = step {
        if is_step(&effect) {
            if seen == n {
                return true;
            }
            seen += 1;
        }
        let observed = World::perform(world, &effect);
        step = machine.step(Some(observed));
    }
    false
}

/// Every store's last sequence: equal before and after means nothing was written.
pub fn sequences(world: &ModelWorld) -> [cotal_core::kv::Revision; 4] {
    [
        Store::Auth,
        Store::Records,
        Store::Admission,
        Store::Contracts,
    ]
    .map(|store| world.kv.last_sequence(store))
}
