//! Fixtures shared by the core's integration tests: one space, one endpoint instance, one
//! serving principal, and helpers that run scripts on the KV model.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod ceremony;
pub mod lifecycle;

use cotal_core::barrier::{self, FreezeToken};
use cotal_core::driver::{drive, ModelWorld};
use cotal_core::gate::{
    Coordinates, Generation, NameAuthorityRevision, ProcessEpoch, RegistrationRevision,
};
use cotal_core::gate::{EndpointGate, GateOp, GateState};
use cotal_core::issuance::{
    observe_gate, GateObservation, GateRef, ProvisionGate, ServeCredential, ServeGrant,
};
use cotal_core::issuance::{CommitSibling, Release};
use cotal_core::kv::model::KvModel;
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::{Ctx, Halt, Replay, Script};
use cotal_core::names::{
    ActorToken, CredentialId, EndpointName, InstanceId, OpId, OwnerToken, Principal, SourceMember,
    SpaceName,
};
use cotal_core::EpError;

/// The reference smoke's instance id: 26 × `i`.
pub const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";
/// The reference smoke's serving principal: `u_` + 26 × `c`, actor `term`.
pub const P: &str = "u_cccccccccccccccccccccccccc.term";
/// Another real owner's principal.
pub const OTHER: &str = "u_dddddddddddddddddddddddddd.term";
/// A sibling credential's holder (goal-writer style).
pub const SIBLING: &str = "u_cccccccccccccccccccccccccc.goalw";

pub fn principal(s: &str) -> Principal {
    Principal::parse(s).unwrap()
}

pub fn op(n: u8) -> OpId {
    OpId::mint([n; 20])
}

pub fn gate_ref() -> GateRef {
    gate_ref_for("throwaway")
}

pub fn gate_ref_for(endpoint: &str) -> GateRef {
    GateRef::new(
        SpaceName::parse("s1").unwrap(),
        EndpointName::parse(endpoint).unwrap(),
        InstanceId::parse(IID).unwrap(),
    )
}

/// Runs one script to completion on the world.
pub fn run<S: Script>(world: &mut ModelWorld, script: S) -> Result<S::Output, EpError> {
    drive(&mut Replay::new(script), world)
}

/// A script from a closure, for composing core procedures in tests.
pub struct Proc<F>(pub F);

impl<T, F: Fn(&mut Ctx<'_>) -> Result<T, Halt>> Script for Proc<F> {
    type Output = T;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<T, Halt> {
        (self.0)(cx)
    }
}

pub fn observe(world: &mut ModelWorld) -> Option<GateObservation> {
    let gate = gate_ref();
    run(world, Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &gate))).unwrap()
}

pub fn provision(world: &mut ModelWorld) {
    run(
        world,
        ProvisionGate {
            gate: gate_ref(),
            principal: principal(P),
        },
    )
    .unwrap();
}

pub fn freeze(world: &mut ModelWorld, op_id: &OpId) -> Option<FreezeToken> {
    let observed = observe(world).unwrap();
    let (gate, op_id) = (gate_ref(), op_id.clone());
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| barrier::freeze(cx, &gate, &op_id, &observed)),
    )
    .unwrap()
}

pub fn reopen(
    world: &mut ModelWorld,
    op_id: &OpId,
    token: FreezeToken,
    successor: Coordinates,
) -> Result<bool, EpError> {
    let (gate, op_id) = (gate_ref(), op_id.clone());
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| barrier::reopen(cx, &gate, &op_id, token, successor)),
    )
}

pub fn coords(generation: u64, epoch: u64, reg: u64, nar: u64) -> Coordinates {
    Coordinates {
        generation: Generation(generation),
        process_epoch: ProcessEpoch(epoch),
        registration_revision: RegistrationRevision(reg),
        name_authority_revision: NameAuthorityRevision(nar),
    }
}

/// A world with the gate provisioned and registered once: open at generation 1, epoch 0,
/// registration revision `reg`.
pub fn registered_world(reg: u64) -> ModelWorld {
    let mut world = ModelWorld::default();
    provision(&mut world);
    let op_id = op(1);
    let token = freeze(&mut world, &op_id).unwrap();
    assert!(reopen(&mut world, &op_id, token, coords(1, 0, reg, 0)).unwrap());
    world
}

pub fn grant(epoch: u64, reg: u64, nar: u64) -> ServeGrant {
    let gate = gate_ref();
    ServeGrant {
        space: gate.space,
        endpoint: gate.endpoint,
        instance: gate.instance,
        owner: OwnerToken::parse("u_cccccccccccccccccccccccccc").unwrap(),
        epoch: ProcessEpoch(epoch),
        registration_revision: RegistrationRevision(reg),
        name_authority_revision: NameAuthorityRevision(nar),
    }
}

pub fn credential_id(n: u8) -> CredentialId {
    CredentialId::from_sha256_hex(&[n; 32])
}

pub fn serve_credential(n: u8, actor: &str) -> ServeCredential {
    ServeCredential {
        credential_id: credential_id(n),
        holder_actor: ActorToken::parse(actor).unwrap(),
        source_chain: vec![SourceMember::parse("session.abc").unwrap()],
        exp: 1_900_000_000,
    }
}

pub fn sibling_row(n: u8, holder: &str) -> LedgerRow {
    let gate = gate_ref();
    LedgerRow::endpoint_active(
        gate.endpoint,
        &gate.instance,
        credential_id(n),
        principal(holder),
        vec![SourceMember::Root],
        1_900_000_000,
    )
    .unwrap()
}

/// The stored state of a ledger row, or `None` when absent.
pub fn row_state(world: &ModelWorld, key: &str) -> Option<CredState> {
    let entry = world.kv.get(Store::Auth, key)?;
    Some(LedgerRow::parse(&entry.value, key).unwrap().state())
}

/// Every `epcred` row of the fixture gate with its state.
pub fn family(world: &ModelWorld) -> Vec<(String, CredState)> {
    let prefix = gate_ref().family_prefix();
    world
        .kv
        .keys(Store::Auth, &prefix)
        .into_iter()
        .map(|k| {
            let state = row_state(world, &k).unwrap();
            (k, state)
        })
        .collect()
}

/// Runs a sibling commit of `row` pinned to `observed`.
pub fn commit_sibling(
    world: &mut ModelWorld,
    observed: GateObservation,
    row: LedgerRow,
) -> Result<Release, EpError> {
    run(
        world,
        CommitSibling {
            gate: gate_ref(),
            observed,
            row,
        },
    )
}

/// The fixture gate as stored in `kv`.
pub fn stored_gate(kv: &KvModel) -> EndpointGate {
    EndpointGate::parse(&kv.get(Store::Auth, &gate_ref().key()).unwrap().value).unwrap()
}

/// A foreign barrier (op 9) freezes the gate if it is open; raw writes, outside any machine.
pub fn freeze_raw(kv: &mut KvModel) {
    let gate = stored_gate(kv);
    if gate.state() == GateState::Open {
        let frozen = gate.frozen(GateOp::registration(op(9))).unwrap();
        kv.put(Store::Auth, &gate_ref().key(), &frozen.to_bytes());
    }
}

/// A foreign barrier (op 9) freezes and reopens at generation + 1, coordinates otherwise kept.
pub fn supersede_raw(kv: &mut KvModel) {
    let gate = stored_gate(kv);
    let frozen = gate.frozen(GateOp::registration(op(9))).unwrap();
    kv.put(Store::Auth, &gate_ref().key(), &frozen.to_bytes());
    let mut next = gate.coordinates();
    next.generation.0 += 1;
    let reopened = frozen.reopened(&op(9), next).unwrap();
    kv.put(Store::Auth, &gate_ref().key(), &reopened.to_bytes());
}

/// A peer mint's commit: rewrite the gate's bytes pinned to its current revision.
pub fn touch_raw(kv: &mut KvModel) {
    let key = gate_ref().key();
    let entry = kv.get(Store::Auth, &key).unwrap();
    let outcome = kv.apply(&KvRequest::Update {
        store: Store::Auth,
        key,
        value: entry.value,
        expected: entry.revision,
    });
    assert!(matches!(outcome, KvOutcome::Written(_)));
}

/// An ambiguous write outcome, with the write applied or not.
pub fn ambiguous(applied: bool) -> cotal_core::kv::model::Fault {
    if applied {
        cotal_core::kv::model::Fault::AmbiguousApplied
    } else {
        cotal_core::kv::model::Fault::AmbiguousNotApplied
    }
}
