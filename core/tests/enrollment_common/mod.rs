//! The managed-agent enrollment fixture, after the reference smoke: one host space, a manager
//! registered at epoch 4 / registration revision 9, a frozen instance, a foreign-owner instance,
//! an absent instance, and the interactive `cli` row that authenticates the manager.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_core::actors::{
    ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, AliasScript, RowSpace, Serialized,
};
use cotal_core::driver::{drive, ModelWorld};
use cotal_core::enrollment::{
    EnrollManagedAgent, EnrollmentRequest, EnrollmentResult, PrepareManagedRetirement,
    PrepareRetirementRequest, PrepareRetirementResult,
};
use cotal_core::gate::{EndpointGate, GateOp, ProcessEpoch, RegistrationRevision};
use cotal_core::kv::Store;
use cotal_core::lifecycle::managed_retirement_op_id;
use cotal_core::manager::{
    current_registration_proof, AccountKey, AgentOnboarding, ManagerAuthorityRequest, ManagerHost,
    ProofSecret, Supervisor,
};
use cotal_core::names::DerivedOwner;
use cotal_core::names::{
    keys, ActorToken, EndpointName, InstanceId, LifecycleUid, OwnerToken, Principal, SpaceName,
};
use cotal_core::profiles::StandingTtl;
use cotal_core::EpError;
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};

use crate::common::{coords, op};

pub const SPACE: &str = "s1";
pub const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";
pub const FROZEN_IID: &str = "ffffffffffffffffffffffffff";
pub const FOREIGN_IID: &str = "gggggggggggggggggggggggggg";
pub const ABSENT_IID: &str = "hhhhhhhhhhhhhhhhhhhhhhhhhh";
pub const MUID: &str = "llllllllllllllllllllllllll";
pub const OWNER: &str = "u_cccccccccccccccccccccccccc";
pub const OTHER_OWNER: &str = "u_dddddddddddddddddddddddddd";
pub const SECRET: &str = "SAAFAKESEEDFORTESTSONLY";
pub const EPOCH: u64 = 4;
pub const REVISION: u64 = 9;
pub const TARGET_UID: &str = "tttttttttttttttttttttttttt";
/// 2023-11-14T22:13:20.000Z
pub const NOW_MS: u64 = 1_700_000_000_000;

pub fn nkey(c: char) -> String {
    format!("U{}", c.to_string().repeat(55))
}

pub fn identities() -> Value {
    json!({
        "supervisor": {"id": nkey('A')},
        "executor": {"id": nkey('B')},
        "serve": {"id": nkey('C')},
        "goalWriter": {"id": nkey('D')},
        "sessionLedger": {"id": nkey('E')},
    })
}

pub fn hash(c: char) -> String {
    c.to_string().repeat(64)
}

pub fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}

pub fn alias(actor: &str) -> Principal {
    Principal::new(owner(), ActorToken::parse(actor).unwrap())
}

/// The host-issued proof for a registration of `iid` (as the reference's `proofFor`).
pub fn proof_for(iid: &str, reg: u64, epoch: u64, owner: &str) -> String {
    let envelope = ManagerAuthorityRequest::parse(&json!({
        "v": 1, "kind": "manager-service-authority", "operation": "prepare", "space": SPACE,
        "actor": "cli", "instanceId": iid, "managerLifecycleUid": MUID,
        "requestId": "req0000000000000000000000", "identities": identities(),
    }))
    .unwrap()
    .envelope;
    current_registration_proof(
        &ProofSecret::new(SECRET),
        &OwnerToken::parse(owner).unwrap(),
        &envelope,
        RegistrationRevision(reg),
        ProcessEpoch(epoch),
    )
    .as_str()
    .to_owned()
}

pub fn proof() -> String {
    proof_for(IID, REVISION, EPOCH, OWNER)
}

/// A well-formed enrollment of `worker` with token hash `hash`.
pub fn enrollment_with(token_hash: &str) -> Value {
    json!({
        "v": 1,
        "kind": "manager-managed-agent-enrollment",
        "space": SPACE,
        "actor": "cli",
        "instanceId": IID,
        "managerLifecycleUid": MUID,
        "requestId": "enroll00000000000000000000",
        "registrationProof": proof(),
        "serveEpoch": EPOCH,
        "target": {
            "actor": "worker",
            "tokenHash": token_hash,
            "role": "worker",
            "label": "smoke worker",
            "capabilities": ["run"],
            "subscribe": ["general"],
            "allowSubscribe": ["general"],
            "allowPublish": ["general"],
        },
        "identities": identities(),
    })
}

pub fn enrollment() -> Value {
    enrollment_with(&hash('a'))
}

/// A well-formed prepare-retirement of `worker` at `uid`.
pub fn prepare_for(uid: &str) -> Value {
    let uid_token = LifecycleUid::parse(uid).unwrap();
    json!({
        "v": 1,
        "kind": "manager-managed-agent-prepare-retirement",
        "space": SPACE,
        "actor": "cli",
        "instanceId": IID,
        "managerLifecycleUid": MUID,
        "requestId": "prepare0000000000000000000",
        "registrationProof": proof(),
        "serveEpoch": EPOCH,
        "target": {"owner": OWNER, "actor": "worker", "lifecycleUid": uid},
        "opId": managed_retirement_op_id(&uid_token).unwrap().as_str(),
        "identities": identities(),
    })
}

pub fn prepare() -> Value {
    prepare_for(TARGET_UID)
}

/// A well-formed host-platform runtime request of `kind` (`…-runtime-create` or
/// `…-runtime-status`) for `worker` at `uid`: the prepare-retirement envelope and target, no
/// `opId`.
pub fn runtime_for(kind: &str, uid: &str) -> Value {
    json!({
        "v": 1,
        "kind": kind,
        "space": SPACE,
        "actor": "cli",
        "instanceId": IID,
        "managerLifecycleUid": MUID,
        "requestId": "runtime0000000000000000000",
        "registrationProof": proof(),
        "serveEpoch": EPOCH,
        "target": {"owner": OWNER, "actor": "worker", "lifecycleUid": uid},
        "identities": identities(),
    })
}

/// Replaces `path` in `v` (`None` removes it).
pub fn edit(mut v: Value, path: &[&str], value: Option<Value>) -> Value {
    let (last, init) = path.split_last().unwrap();
    let mut at = &mut v;
    for key in init {
        at = at.get_mut(*key).unwrap();
    }
    let map = at.as_object_mut().unwrap();
    match value {
        Some(value) => {
            map.insert((*last).to_owned(), value);
        }
        None => {
            map.remove(*last);
        }
    }
    v
}

fn put_gate(world: &mut ModelWorld, iid: &str, gate_owner: &str, frozen: bool) {
    let serve = format!("{gate_owner}.manager_serve_{iid}");
    let mut gate = EndpointGate::provisioned(Principal::parse(&serve).unwrap()).unwrap();
    for step in 1..=EPOCH {
        let op_id = op(u8::try_from(step).unwrap());
        gate = gate.frozen(GateOp::registration(op_id.clone())).unwrap();
        gate = gate
            .reopened(&op_id, coords(step, step, REVISION, 0))
            .unwrap();
    }
    if frozen {
        gate = gate.frozen(GateOp::registration(op(200))).unwrap();
    }
    let key = keys::epgate(
        &EndpointName::parse("manager").unwrap(),
        &InstanceId::parse(iid).unwrap(),
    );
    world.kv.put(Store::Auth, &key, &gate.to_bytes());
}

/// The interactive spawner row `<OWNER>.cli`: an operator grant (parentless) whose scope and ACLs
/// bound everything the manager enrolls.
pub fn cli_row(scope: &[&str], sub: &[&str], publ: &[&str]) -> ActorRow {
    ActorRow {
        owner: owner(),
        actor: ActorToken::parse("cli").unwrap(),
        scope: scope.iter().map(|s| s.to_string()).collect(),
        allow_subscribe: sub.iter().map(|s| s.to_string()).collect(),
        allow_publish: publ.iter().map(|s| s.to_string()).collect(),
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(LifecycleUid::mint([7; 20])),
        granted_at: "2023-11-14T22:00:00.000Z".into(),
    }
}

pub fn grant_cli(world: &ModelWorld, row: ActorRow) {
    let outcome = world.actors.execute(&ActorsRequest::GrantInteractive(row));
    assert!(matches!(outcome, ActorsOutcome::Granted(_)), "{outcome:?}");
}

/// The reference fixture's world.
pub fn world() -> ModelWorld {
    let mut world = ModelWorld::default();
    put_gate(&mut world, IID, OWNER, false);
    put_gate(&mut world, FROZEN_IID, OWNER, true);
    put_gate(&mut world, FOREIGN_IID, OTHER_OWNER, false);
    grant_cli(
        &world,
        cli_row(
            &["spawn", "supervise", "run", "role:worker"],
            &["general", "team.>"],
            &["general"],
        ),
    );
    world
}

pub fn host() -> ManagerHost {
    let account = KeyPair::new_from_raw(KeyPairType::Account, [40; 32]).unwrap();
    ManagerHost {
        space: SpaceName::parse(SPACE).unwrap(),
        account: AccountKey::parse(&account.public_key()).unwrap(),
        signer: std::sync::Arc::new(KeyPair::new_from_raw(KeyPairType::Account, [41; 32]).unwrap()),
        proof_secret: ProofSecret::new(SECRET),
        standing_ttl: StandingTtl::DEFAULT,
        agents: AgentOnboarding {
            sentinel_creds: "-----BEGIN NATS USER JWT-----sentinel".into(),
            agent_bearer_exchange_url: "https://auth.example/exchange".into(),
        },
    }
}

pub fn caller(scope: &[&str]) -> Supervisor {
    Supervisor::human(
        DerivedOwner::parse(OWNER).unwrap(),
        scope.iter().map(|s| s.to_string()).collect(),
    )
}

pub fn enroll_machine(raw: &Value, scope: &[&str], entropy: u8) -> EnrollManagedAgent {
    EnrollManagedAgent {
        host: host(),
        caller: caller(scope),
        request: EnrollmentRequest::parse(raw).unwrap(),
        fresh_uid_entropy: [entropy; 20],
        now_ms: NOW_MS,
    }
}

pub fn prepare_machine(raw: &Value, scope: &[&str], owner: &str) -> PrepareManagedRetirement {
    PrepareManagedRetirement {
        host: host(),
        caller: Supervisor::human(
            DerivedOwner::parse(owner).unwrap(),
            scope.iter().map(|s| s.to_string()).collect(),
        ),
        request: PrepareRetirementRequest::parse(raw).unwrap(),
    }
}

/// Enrolls under the alias lock, as a driver must.
pub fn enroll_as(
    world: &mut ModelWorld,
    raw: &Value,
    scope: &[&str],
    entropy: u8,
) -> Result<EnrollmentResult, EpError> {
    let machine = enroll_machine(raw, scope, entropy);
    drive(&mut locked(world, machine), world)
}

/// `script` under the world ledger's lock on its alias.
pub fn locked<S: AliasScript>(world: &ModelWorld, script: S) -> Serialized<S> {
    let guard = world.actors.lock_alias(&script.alias()).unwrap();
    Serialized::new(script, guard).unwrap()
}

pub fn enroll(world: &mut ModelWorld, raw: &Value) -> Result<EnrollmentResult, EpError> {
    enroll_as(world, raw, &["supervise"], 1)
}

/// Prepares retirement under the alias lock.
pub fn release_as(
    world: &mut ModelWorld,
    raw: &Value,
    scope: &[&str],
    owner: &str,
) -> Result<PrepareRetirementResult, EpError> {
    let machine = prepare_machine(raw, scope, owner);
    drive(&mut locked(world, machine), world)
}

pub fn release(world: &mut ModelWorld, raw: &Value) -> Result<PrepareRetirementResult, EpError> {
    release_as(world, raw, &["supervise"], OWNER)
}

pub fn managed_row(world: &ModelWorld, actor: &str) -> Option<ActorRow> {
    world.actors.row(RowSpace::Managed, &alias(actor))
}

pub fn refused<T: std::fmt::Debug>(
    result: Result<T, EpError>,
    code: cotal_core::ErrorCode,
    needle: &str,
) -> EpError {
    let e = result.expect_err(needle);
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
    e
}
