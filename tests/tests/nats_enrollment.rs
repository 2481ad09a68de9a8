//! Managed-agent enrollment on a real `nats-server`: the manager gate lives in real JetStream KV,
//! the actor ledger is the file ledger in a temp dir (`FileActors`), both under the NATS driver.
//! Broker durables are the in-memory twin (`MemoryDurables`): no NATS durables adapter exists
//! yet. Enroll, re-enroll (same uid), prepare retirement, enroll again (fresh uid), and a
//! stale-epoch refusal, each driven under the alias lock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::Duration;

use cotal_core::actors::{
    ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, MemoryDurables, RowSpace,
};
use cotal_core::enrollment::{
    EnrollManagedAgent, EnrollmentRequest, PrepareManagedRetirement, PrepareRetirementRequest,
};
use cotal_core::gate::{
    Coordinates, EndpointGate, GateOp, Generation, NameAuthorityRevision, ProcessEpoch,
    RegistrationRevision,
};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::lifecycle::managed_retirement_op_id;
use cotal_core::machine::Effect;
use cotal_core::manager::{
    current_registration_proof, AccountKey, AgentOnboarding, ManagerAuthorityRequest, ManagerHost,
    ProofSecret, Supervisor,
};
use cotal_core::names::DerivedOwner;
use cotal_core::names::{
    keys, ActorToken, EndpointName, InstanceId, LifecycleUid, OpId, OwnerToken, Principal,
    SpaceName,
};
use cotal_core::profiles::StandingTtl;
use cotal_core::ErrorCode;
use cotal_io_fs::FileActors;
use cotal_io_nats::{NatsWorld, Space, SpaceOptions};
use cotal_tests::nats::{NatsServer, ServerOptions};
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};

const SPACE: &str = "enroll1";
const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";
const MUID: &str = "llllllllllllllllllllllllll";
const OWNER: &str = "u_cccccccccccccccccccccccccc";
const SECRET: &str = "SAAFAKESEEDFORTESTSONLY";
const EPOCH: u64 = 4;
const REVISION: u64 = 9;

fn identities() -> Value {
    let k = |c: char| json!({"id": format!("U{}", c.to_string().repeat(55))});
    json!({"supervisor": k('A'), "executor": k('B'), "serve": k('C'), "goalWriter": k('D'), "sessionLedger": k('E')})
}

fn proof(epoch: u64) -> String {
    let envelope = ManagerAuthorityRequest::parse(&json!({
        "v": 1, "kind": "manager-service-authority", "operation": "prepare", "space": SPACE,
        "actor": "cli", "instanceId": IID, "managerLifecycleUid": MUID,
        "requestId": "req0000000000000000000000", "identities": identities(),
    }))
    .unwrap()
    .envelope;
    current_registration_proof(
        &ProofSecret::new(SECRET),
        &OwnerToken::parse(OWNER).unwrap(),
        &envelope,
        RegistrationRevision(REVISION),
        ProcessEpoch(epoch),
    )
    .as_str()
    .to_owned()
}

fn envelope(kind: &str, epoch: u64) -> Value {
    json!({
        "v": 1, "kind": kind, "space": SPACE, "actor": "cli", "instanceId": IID,
        "managerLifecycleUid": MUID, "requestId": "request0000000000000000000",
        "registrationProof": proof(epoch), "serveEpoch": epoch, "identities": identities(),
    })
}

fn enrollment(token_hash: char, epoch: u64) -> Value {
    let mut v = envelope("manager-managed-agent-enrollment", epoch);
    v["target"] = json!({
        "actor": "worker", "tokenHash": token_hash.to_string().repeat(64), "capabilities": ["run"],
        "subscribe": ["general"], "allowSubscribe": ["general"], "allowPublish": ["general"],
    });
    v
}

fn prepare(uid: &LifecycleUid) -> Value {
    let mut v = envelope("manager-managed-agent-prepare-retirement", EPOCH);
    v["target"] = json!({"owner": OWNER, "actor": "worker", "lifecycleUid": uid.as_str()});
    v["opId"] = json!(managed_retirement_op_id(uid).unwrap().as_str());
    v
}

fn host() -> ManagerHost {
    let key = |n| KeyPair::new_from_raw(KeyPairType::Account, [n; 32]).unwrap();
    ManagerHost {
        space: SpaceName::parse(SPACE).unwrap(),
        account: AccountKey::parse(&key(40).public_key()).unwrap(),
        signer: std::sync::Arc::new(key(41)),
        proof_secret: ProofSecret::new(SECRET),
        standing_ttl: StandingTtl::DEFAULT,
        agents: AgentOnboarding {
            sentinel_creds: "sentinel".into(),
            agent_bearer_exchange_url: "https://auth.example/exchange".into(),
        },
    }
}

fn caller() -> Supervisor {
    Supervisor::human(
        DerivedOwner::parse(OWNER).unwrap(),
        vec!["supervise".into()],
    )
}

/// The manager gate open at epoch 4, registration revision 9, for `<OWNER>.manager_serve_<IID>`.
fn gate_bytes() -> Vec<u8> {
    let serve = Principal::parse(&format!("{OWNER}.manager_serve_{IID}")).unwrap();
    let mut gate = EndpointGate::provisioned(serve).unwrap();
    for step in 1..=EPOCH {
        let op_id = OpId::mint([u8::try_from(step).unwrap(); 20]);
        gate = gate.frozen(GateOp::registration(op_id.clone())).unwrap();
        let c = Coordinates {
            generation: Generation(step),
            process_epoch: ProcessEpoch(step),
            registration_revision: RegistrationRevision(REVISION),
            name_authority_revision: NameAuthorityRevision(0),
        };
        gate = gate.reopened(&op_id, c).unwrap();
    }
    gate.to_bytes()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn enrollment_lifecycle_on_a_real_server_with_the_file_ledger() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ledger = Arc::new(FileActors::new(dir.path().join("state")));
    let durables = Arc::new(MemoryDurables::new());
    let cli = ActorRow {
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: ActorToken::parse("cli").unwrap(),
        scope: vec!["spawn".into(), "supervise".into(), "run".into()],
        allow_subscribe: vec![">".into()],
        allow_publish: vec![">".into()],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(LifecycleUid::mint([7; 20])),
        granted_at: "2023-11-14T22:00:00.000Z".into(),
    };
    assert!(matches!(
        ledger.execute(&ActorsRequest::GrantInteractive(cli)),
        ActorsOutcome::Granted(_)
    ));
    runtime().block_on(async {
        let options = SpaceOptions {
            request_timeout: Duration::from_secs(5),
            ..SpaceOptions::default()
        };
        let space = Space::connect(&server.url(), SpaceName::parse(SPACE).unwrap(), options)
            .await
            .unwrap();
        let key = keys::epgate(
            &EndpointName::parse("manager").unwrap(),
            &InstanceId::parse(IID).unwrap(),
        );
        let created = space
            .execute(&KvRequest::Create {
                store: Store::Auth,
                key,
                value: gate_bytes(),
            })
            .await;
        assert!(matches!(created, KvOutcome::Written(_)), "{created:?}");

        let world = || {
            NatsWorld::new(&space)
                .with_actors(ledger.clone())
                .with_durables(durables.clone())
        };
        let enroll = |raw: Value, entropy: u8| EnrollManagedAgent {
            host: host(),
            caller: caller(),
            request: EnrollmentRequest::parse(&raw).unwrap(),
            fresh_uid_entropy: [entropy; 20],
            now_ms: 1_700_000_000_000,
        };

        // Enroll: the row lands in the file ledger, the durables at its uid.
        let machine = enroll(enrollment('a', EPOCH), 1);
        let mut w = world();
        let first = w.run_serialized(machine).await.unwrap();
        let uid = first.material.lifecycle_uid.clone();
        assert!(first.first);
        assert_eq!(uid, LifecycleUid::mint([1; 20]));
        let kv_trips = w.log.iter().filter(|e| matches!(e, Effect::Kv(_))).count();
        let ledger_ops = w
            .log
            .iter()
            .filter(|e| matches!(e, Effect::Actors(_)))
            .count();
        assert_eq!(
            (kv_trips, ledger_ops),
            (1, 2),
            "one gate read, find + grant"
        );
        let row_path = ledger.row_path(
            RowSpace::Managed,
            &Principal::parse(&format!("{OWNER}.worker")).unwrap(),
        );
        assert!(row_path.is_file());

        // Re-enroll with the same hash: the same uid, nothing rewritten.
        let bytes_before = std::fs::read(&row_path).unwrap();
        let machine = enroll(enrollment('a', EPOCH), 2);
        let again = world().run_serialized(machine).await.unwrap();
        assert_eq!(again.material.lifecycle_uid, uid);
        assert!(!again.first);
        assert_eq!(std::fs::read(&row_path).unwrap(), bytes_before);

        // Another hash while enrolled: conflict naming the lifecycle.
        let machine = enroll(enrollment('b', EPOCH), 3);
        let e = world().run_serialized(machine).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(e.message.contains(uid.as_str()), "{e}");

        // Prepare retirement: footprint, then the row.
        let machine = PrepareManagedRetirement {
            host: host(),
            caller: caller(),
            request: PrepareRetirementRequest::parse(&prepare(&uid)).unwrap(),
        };
        let prepared = world().run_serialized(machine).await.unwrap();
        assert!(prepared.released);
        assert!(!row_path.exists());
        assert!(durables.provisioned().is_empty());

        // Enroll again: a fresh uid from fresh host entropy.
        let machine = enroll(enrollment('b', EPOCH), 4);
        let next = world().run_serialized(machine).await.unwrap();
        assert_ne!(next.material.lifecycle_uid, uid);
        assert_eq!(next.material.lifecycle_uid, LifecycleUid::mint([4; 20]));

        // A stale serve epoch (with its own, then-valid proof) is refused, writing nothing.
        let machine = enroll(enrollment('c', EPOCH - 1), 5);
        let e = world().run_serialized(machine).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(e.message.contains("epoch 3 is stale; current is 4"), "{e}");
        assert_eq!(durables.provisioned().len(), 1);

        // Without a ledger attached the plane fails closed.
        let machine = enroll(enrollment('a', EPOCH), 6);
        let e = NatsWorld::new(&space)
            .run_serialized(machine)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.message.contains("no actor ledger is attached"), "{e}");
    });
}
