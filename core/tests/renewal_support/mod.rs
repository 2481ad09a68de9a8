//! A registered manager instance on the KV model and request builders for the manager-service
//! operation tests: endpoint `manager`, owner `u_c…c`, serve principal
//! `<owner>.manager_serve_<iid>`, a published `ai.cotal.manager` cluster, a data account with a
//! separate signing key.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;

use cotal_core::driver::ModelWorld;
use cotal_core::gate::ProcessEpoch;
use cotal_core::issuance::{GateRef, ProvisionGate};
use cotal_core::kv::Store;
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::Script;
use cotal_core::manager::{
    registration_proof, AccountKey, AgentOnboarding, ManagerAuthorityRequest, ManagerHost,
    ProofSecret, Supervisor,
};
use cotal_core::names::{
    DerivedOwner, EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName,
};
use cotal_core::profiles::StandingTtl;
use cotal_core::registration::Registered;
use cotal_core::renewal::{ManagerAuthority, RemoteManagerAuthorityMaterial, RenewalFault};
use cotal_core::EpError;
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};

use crate::common::ceremony::{command, document, publish, registrar, spec_for, TableAuthority};
use crate::common::{run, IID};

pub const OWNER: &str = "u_cccccccccccccccccccccccccc";
pub const FOREIGN_OWNER: &str = "u_dddddddddddddddddddddddddd";
pub const UID: &str = "llllllllllllllllllllllllll";
pub const SPACE: &str = "s1";
/// The manager's registered commands.
pub const COMMANDS: [&str; 3] = ["spawn", "status", "turn"];
/// 2023-11-14T22:13:20Z.
pub const T0: u64 = 1_700_000_000_000;

pub fn key(kind: KeyPairType, n: u8) -> KeyPair {
    KeyPair::new_from_raw(kind, [n; 32]).unwrap()
}

/// The five held identities, in wire order (supervisor, executor, serve, goalWriter,
/// sessionLedger).
pub fn identities() -> Vec<KeyPair> {
    (1..=5).map(|n| key(KeyPairType::User, n)).collect()
}

pub fn account() -> KeyPair {
    key(KeyPairType::Account, 40)
}

pub fn host() -> ManagerHost {
    ManagerHost {
        space: SpaceName::parse(SPACE).unwrap(),
        account: AccountKey::parse(&account().public_key()).unwrap(),
        signer: Arc::new(key(KeyPairType::Account, 41)),
        proof_secret: ProofSecret::new("SAAHOSTSECRETFORTHETESTSONLY"),
        standing_ttl: StandingTtl::DEFAULT,
        agents: AgentOnboarding {
            sentinel_creds: "-----BEGIN NATS USER JWT-----sentinel".into(),
            agent_bearer_exchange_url: "https://auth.example/exchange".into(),
        },
    }
}

pub fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}

pub fn serve_principal(iid: &str) -> Principal {
    Principal::parse(&format!("{OWNER}.manager_serve_{iid}")).unwrap()
}

pub fn manager_gate(iid: &str) -> GateRef {
    GateRef::new(
        SpaceName::parse(SPACE).unwrap(),
        EndpointName::parse("manager").unwrap(),
        InstanceId::parse(iid).unwrap(),
    )
}

pub fn manager_document() -> Value {
    document(
        "ai.cotal.manager",
        COMMANDS
            .iter()
            .map(|c| command(c, "ephemeral", &[]))
            .collect(),
    )
}

/// Provisions and registers manager instance `iid` (op `op_n`); returns the registration.
pub fn register(world: &mut ModelWorld, iid: &str, op_n: u8) -> Registered {
    let gate = manager_gate(iid);
    if cotal_core::kv::model::KvModel::get(&world.kv, Store::Auth, &gate.key()).is_none() {
        run(
            world,
            ProvisionGate {
                gate,
                principal: serve_principal(iid),
            },
        )
        .unwrap();
    }
    let closure = publish(world, manager_document());
    let spec = spec_for("manager", OWNER, &[closure]);
    let r = registrar(
        spec,
        iid,
        TableAuthority::with("manager", OWNER, 0),
        OpId::mint([op_n; 20]),
    );
    run(world, r).unwrap()
}

/// A world with manager instance [`IID`] registered once (epoch 0).
pub fn registered() -> (ModelWorld, Registered) {
    let mut world = ModelWorld::default();
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    let registered = register(&mut world, IID, 1);
    (world, registered)
}

/// The request envelope of `operation` for instance `iid`.
pub fn envelope(operation: &str, request_id: &str, iid: &str) -> Value {
    let ids: Vec<String> = identities().iter().map(KeyPair::public_key).collect();
    json!({
        "v": 1, "kind": "manager-service-authority", "operation": operation, "space": SPACE,
        "actor": "cli", "instanceId": iid, "managerLifecycleUid": UID, "requestId": request_id,
        "identities": {
            "supervisor": {"id": ids[0]}, "executor": {"id": ids[1]}, "serve": {"id": ids[2]},
            "goalWriter": {"id": ids[3]}, "sessionLedger": {"id": ids[4]},
        },
    })
}

pub fn parse(raw: &Value) -> ManagerAuthorityRequest {
    ManagerAuthorityRequest::parse(raw).unwrap()
}

pub fn supervise() -> Supervisor {
    Supervisor::human(
        DerivedOwner::parse(OWNER).unwrap(),
        vec!["supervise".into()],
    )
}

pub fn call(request: ManagerAuthorityRequest, now_ms: u64) -> ManagerAuthority {
    ManagerAuthority::new(host(), supervise(), request, now_ms)
}

pub fn prepare_request(rid: &str) -> ManagerAuthorityRequest {
    parse(&envelope("prepare", rid, IID))
}

/// An `activate` request carrying the manager document with its deterministic proof.
pub fn activate_request(rid: &str, iid: &str) -> ManagerAuthorityRequest {
    let mut raw = envelope("activate", rid, iid);
    raw["contractArtifacts"] = json!([manager_document()]);
    raw["registrationProof"] = json!(format!("sha256:{}", "0".repeat(64)));
    let proof = registration_proof(&owner(), &parse(&raw)).unwrap();
    raw["registrationProof"] = json!(proof.as_str());
    parse(&raw)
}

pub fn renewal_raw(operation: &str, rid: &str, proof: &str, epoch: u64) -> Value {
    let mut raw = envelope(operation, rid, IID);
    raw["registrationProof"] = json!(proof);
    raw["accountPublicKey"] = json!(account().public_key());
    raw["processEpoch"] = json!(epoch);
    raw
}

pub fn standing_request(rid: &str, proof: &str, epoch: u64) -> ManagerAuthorityRequest {
    parse(&renewal_raw("renewStandingBundle", rid, proof, epoch))
}

pub fn issue(
    world: &mut ModelWorld,
    call: ManagerAuthority,
) -> Result<RemoteManagerAuthorityMaterial, EpError> {
    run(world, call)
}

pub fn issue_with_fault(
    world: &mut ModelWorld,
    mut call: ManagerAuthority,
    fault: RenewalFault,
) -> Result<RemoteManagerAuthorityMaterial, EpError> {
    call.fault = Some(fault);
    run(world, call)
}

/// Activates instance [`IID`] at `now_ms`; returns the result (with its next proof).
pub fn activate(world: &mut ModelWorld, now_ms: u64) -> RemoteManagerAuthorityMaterial {
    issue(
        world,
        call(activate_request("activate000000000000001", IID), now_ms),
    )
    .unwrap()
}

/// Every row of the manager family of `iid`: (key, holder actor, state), sorted by key.
pub fn family(world: &ModelWorld, iid: &str) -> Vec<(String, String, CredState)> {
    let prefix = manager_gate(iid).family_prefix();
    world
        .kv
        .keys(Store::Auth, &prefix)
        .into_iter()
        .map(|k| {
            let entry = world.kv.get(Store::Auth, &k).unwrap();
            let row = LedgerRow::parse(&entry.value, &k).unwrap();
            (
                k,
                row.holder_principal().actor().as_str().to_owned(),
                row.state(),
            )
        })
        .collect()
}

pub fn active(world: &ModelWorld, iid: &str) -> Vec<String> {
    family(world, iid)
        .into_iter()
        .filter(|(_, _, s)| *s == CredState::Active)
        .map(|(k, _, _)| k)
        .collect()
}

pub fn epoch_of(world: &mut ModelWorld) -> ProcessEpoch {
    let gate = manager_gate(IID);
    let entry = world.kv.get(Store::Auth, &gate.key()).unwrap();
    cotal_core::gate::EndpointGate::parse(&entry.value)
        .unwrap()
        .process_epoch()
}

/// Runs `script` and counts the KV round trips it made (artifact reads included).
pub fn counted<S: Script>(world: &mut ModelWorld, script: S) -> (Result<S::Output, EpError>, u64) {
    let before = world.kv.requests_served();
    let out = run(world, script);
    (out, world.kv.requests_served() - before)
}

/// A request of `operation` with its deterministic registration proof, after `extend` added the
/// operation's own object (the proof is computed over the finished request, as a caller would).
pub fn proven_request(
    operation: &str,
    rid: &str,
    iid: &str,
    extend: impl FnOnce(&mut Value),
) -> ManagerAuthorityRequest {
    let mut raw = envelope(operation, rid, iid);
    extend(&mut raw);
    raw["registrationProof"] = json!(format!("sha256:{}", "0".repeat(64)));
    let proof = registration_proof(&owner(), &parse(&raw)).unwrap();
    raw["registrationProof"] = json!(proof.as_str());
    parse(&raw)
}

/// The caller-held session-serving nkey.
pub fn session_key() -> KeyPair {
    key(KeyPairType::User, 50)
}

/// The caller-held retirement-requester nkey.
pub fn requester_key() -> KeyPair {
    key(KeyPairType::User, 51)
}

/// A `session` request for session `sid` at `epoch`, expiring at `exp` (unix seconds).
pub fn session_request(rid: &str, sid: &str, epoch: u64, exp: u64) -> ManagerAuthorityRequest {
    proven_request("session", rid, IID, |raw| {
        raw["session"] = json!({
            "id": session_key().public_key(), "endpoint": "manager", "sessionId": sid,
            "epoch": epoch, "exp": exp,
        });
    })
}

/// The managed worker a `retire` targets: actor `worker` at lifecycle 26 × `w`.
pub const TARGET_UID: &str = "wwwwwwwwwwwwwwwwwwwwwwwwww";

/// The `retirement` object for `target_owner`'s worker at `serve_epoch`.
pub fn retirement(target_owner: &str, serve_epoch: u64) -> Value {
    let op_id = cotal_core::lifecycle::managed_retirement_op_id(
        &cotal_core::names::LifecycleUid::parse(TARGET_UID).unwrap(),
    )
    .unwrap();
    json!({
        "id": requester_key().public_key(),
        "target": {"owner": target_owner, "actor": "worker", "lifecycleUid": TARGET_UID},
        "opId": op_id.as_str(),
        "serveEpoch": serve_epoch,
    })
}

/// A `retire` request on instance `iid` carrying `retirement`.
pub fn retire_request(rid: &str, iid: &str, retirement: Value) -> ManagerAuthorityRequest {
    proven_request("retire", rid, iid, |raw| raw["retirement"] = retirement)
}
