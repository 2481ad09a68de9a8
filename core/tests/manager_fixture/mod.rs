//! A hand-made manager instance on the KV model: its gate `epgate.manager.<iid>` and `svc`
//! records, in every state the manager-caller verdict (§3.10) distinguishes. Shared by the
//! selection cells and the session-caller cells, whose serving manager must be a candidate.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cotal_core::canon::Digest;
use cotal_core::driver::ModelWorld;
use cotal_core::gate::{EndpointGate, GateOp};
use cotal_core::kv::{Revision, Store};
use cotal_core::names::{keys, EndpointName, InstanceId, OwnerToken, Principal, SpaceName};
use serde_json::json;

use crate::common::{coords, op};
use crate::renewal_support::{manager_gate, SPACE};

/// The epoch every hand-made manager runs at (a re-registered incarnation, not the first).
pub const EPOCH: u64 = 2;

pub fn iid(s: &str) -> InstanceId {
    InstanceId::parse(s).unwrap()
}

pub fn owner_token(owner: &str) -> OwnerToken {
    OwnerToken::parse(owner).unwrap()
}

pub fn space() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

pub fn endpoint() -> EndpointName {
    EndpointName::parse("manager").unwrap()
}

pub fn spec_key(instance: &str) -> String {
    keys::svc_spec(&endpoint(), &iid(instance))
}

pub fn status_key(instance: &str) -> String {
    keys::svc_status(&endpoint(), &iid(instance))
}

pub fn gate_key(instance: &str) -> String {
    manager_gate(instance).key()
}

// ---- a hand-made manager instance ------------------------------------------------------------

/// How a hand-made manager's gate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Open,
    Frozen,
    Retired,
}

/// Writes gate `epgate.manager.<instance>` recording `serve` (a full principal), open at
/// [`EPOCH`] and registration revision `reg` before `state` is applied.
pub fn put_gate_for(world: &mut ModelWorld, instance: &str, serve: &str, reg: u64, state: Gate) {
    let mut gate = EndpointGate::provisioned(Principal::parse(serve).unwrap()).unwrap();
    for step in 0..=EPOCH {
        let op_id = op(u8::try_from(step + 1).unwrap());
        gate = gate.frozen(GateOp::registration(op_id.clone())).unwrap();
        gate = gate
            .reopened(&op_id, coords(step + 1, step, reg, 0))
            .unwrap();
    }
    let bytes = match state {
        Gate::Open => gate.to_bytes(),
        Gate::Frozen => gate
            .frozen(GateOp::registration(op(200)))
            .unwrap()
            .to_bytes(),
        // The gate model writes no retired row (a retirement barrier terminalizes it on the
        // store); the row is a retirement freeze with its state moved to `retired`.
        Gate::Retired => {
            let frozen = gate.frozen(GateOp::retirement(op(201))).unwrap().to_json();
            let retired = frozen.replacen("\"state\":\"frozen\"", "\"state\":\"retired\"", 1);
            EndpointGate::parse(retired.as_bytes()).unwrap().to_bytes()
        }
    };
    world.kv.put(Store::Auth, &gate_key(instance), &bytes);
}

/// The gate of `owner`'s manager `instance`: it records `<owner>.manager_serve_<instance>`.
pub fn put_gate(world: &mut ModelWorld, instance: &str, owner: &str, reg: u64, state: Gate) {
    let serve = format!("{owner}.manager_serve_{instance}");
    put_gate_for(world, instance, &serve, reg, state);
}

/// Writes a valid manager spec owned by `owner`; returns its revision.
pub fn put_spec(world: &mut ModelWorld, instance: &str, owner: &str) -> Revision {
    let spec = json!({
        "endpoint": "manager", "owner": owner,
        "clusterDigests": [Digest::of(b"the manager closure").to_prefixed()],
        "protocol": {"v": 1},
    });
    let bytes = serde_json::to_vec(&spec).unwrap();
    world.kv.put(Store::Records, &spec_key(instance), &bytes)
}

pub fn put_status(world: &mut ModelWorld, instance: &str, epoch: u64, observed: u64) {
    let status = json!({"epoch": epoch, "state": "ready", "observedSpecRevision": observed});
    let bytes = serde_json::to_vec(&status).unwrap();
    world.kv.put(Store::Records, &status_key(instance), &bytes);
}

/// `owner`'s manager `instance`, registered at the gate's coordinates and serving them, with its
/// gate in `state`; returns the spec revision.
pub fn put_manager(world: &mut ModelWorld, instance: &str, owner: &str, state: Gate) -> Revision {
    let revision = put_spec(world, instance, owner);
    put_gate(world, instance, owner, revision.0, state);
    put_status(world, instance, EPOCH, revision.0);
    revision
}

pub fn world() -> ModelWorld {
    ModelWorld::default()
}
