//! Manager-service operations on a real `nats-server` (reference manager-standing-renewal and
//! manager-renewal-compensation, live): register a manager instance, activate it, renew its
//! standing bundle, refuse a stale epoch after a re-registration, and check that every renewed
//! JWT decodes to the exact rows of its profile, for the held nkey, in the data account.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cotal_core::authority::SelfAuthority;
use cotal_core::contract::publish_cluster;
use cotal_core::gate::{EndpointGate, ProcessEpoch};
use cotal_core::issuance::{observe_gate, GateRef, ServeGrant};
use cotal_core::jwt;
use cotal_core::kv::Store;
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::{Ctx, Halt, Replay, Script};
use cotal_core::manager::{
    current_registration_proof, registration_proof, AccountKey, AgentOnboarding,
    ManagerAuthorityRequest, ManagerHost, ProofSecret, Supervisor,
};
use cotal_core::names::{
    ActorToken, CommandToken, EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName,
};
use cotal_core::profiles::{
    self, ConnId, GoalWriterBinding, ManagerRole, RemoteManagerBinding, ServeBinding,
    SessionLedgerBinding, StandingTtl,
};
use cotal_core::registration::{RegisterInstance, EVICT_PRINCIPALS_MAX};
use cotal_core::renewal::{CredentialName as C, ManagerAuthority, RemoteManagerAuthorityMaterial};
use cotal_core::service::ServiceSpec;
use cotal_core::{EpError, ErrorCode};
use cotal_io_nats::{NatsWorld, Space, SpaceOptions};
use cotal_tests::nats::{NatsServer, ServerOptions};
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};

const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";
const UID: &str = "llllllllllllllllllllllllll";
const OWNER: &str = "u_cccccccccccccccccccccccccc";
const COMMANDS: [&str; 3] = ["spawn", "status", "turn"];
const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";
const T0: u64 = 1_700_000_000_000;

static SPACES: AtomicU32 = AtomicU32::new(0);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

struct Proc<F>(F);

impl<T, F: Fn(&mut Ctx<'_>) -> Result<T, Halt>> Script for Proc<F> {
    type Output = T;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<T, Halt> {
        (self.0)(cx)
    }
}

async fn run<S: Script>(world: &mut NatsWorld<'_>, script: S) -> Result<S::Output, EpError> {
    world.run(&mut Replay::new(script)).await
}

fn key(kind: KeyPairType, n: u8) -> KeyPair {
    KeyPair::new_from_raw(kind, [n; 32]).unwrap()
}

fn ids() -> Vec<String> {
    (1..=5)
        .map(|n| key(KeyPairType::User, n).public_key())
        .collect()
}

fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}

fn host(space: &SpaceName) -> ManagerHost {
    ManagerHost {
        space: space.clone(),
        account: AccountKey::parse(&key(KeyPairType::Account, 40).public_key()).unwrap(),
        signer: Arc::new(key(KeyPairType::Account, 41)),
        proof_secret: ProofSecret::new("SAAHOSTSECRETFORTHETESTSONLY"),
        standing_ttl: StandingTtl::DEFAULT,
        agents: AgentOnboarding {
            sentinel_creds: String::new(),
            agent_bearer_exchange_url: String::new(),
        },
    }
}

fn gate(space: &SpaceName) -> GateRef {
    GateRef::new(
        space.clone(),
        EndpointName::parse("manager").unwrap(),
        InstanceId::parse(IID).unwrap(),
    )
}

fn manager_document() -> Value {
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|c| {
            json!({"name": c, "class": "ephemeral", "targeted": false,
                   "capability": format!("x.{c}"), "inputDigest": VOID, "outputDigest": VOID,
                   "traits": []})
        })
        .collect();
    json!({"urn": "ai.cotal.manager", "revision": 1, "attributes": [], "events": [],
           "commands": commands})
}

fn envelope(space: &SpaceName, operation: &str, rid: &str) -> Value {
    let ids = ids();
    json!({
        "v": 1, "kind": "manager-service-authority", "operation": operation,
        "space": space.as_str(), "actor": "cli", "instanceId": IID, "managerLifecycleUid": UID,
        "requestId": rid,
        "identities": {
            "supervisor": {"id": ids[0]}, "executor": {"id": ids[1]}, "serve": {"id": ids[2]},
            "goalWriter": {"id": ids[3]}, "sessionLedger": {"id": ids[4]},
        },
    })
}

fn call(space: &SpaceName, raw: &Value, now_ms: u64) -> ManagerAuthority {
    ManagerAuthority::new(
        host(space),
        Supervisor::human(
            cotal_core::names::DerivedOwner::parse(OWNER).unwrap(),
            vec!["supervise".into()],
        ),
        ManagerAuthorityRequest::parse(raw).unwrap(),
        now_ms,
    )
}

async fn register(world: &mut NatsWorld<'_>, space: &SpaceName, closure_doc: &Value, op: u8) {
    let doc = closure_doc.clone();
    let closure = run(
        world,
        Proc(move |cx: &mut Ctx<'_>| publish_cluster(cx, &doc)),
    )
    .await
    .unwrap();
    let spec = ServiceSpec::from_value(
        json!({"endpoint": "manager", "owner": OWNER, "clusterDigests": [closure.to_prefixed()],
               "protocol": {"v": 1}}),
        &EndpointName::parse("manager").unwrap(),
    )
    .unwrap();
    run(
        world,
        RegisterInstance {
            space: space.clone(),
            registrant: owner(),
            spec,
            instance: InstanceId::parse(IID).unwrap(),
            authority: Arc::new(SelfAuthority {
                name: EndpointName::parse("manager").unwrap(),
                owner: owner(),
            }),
            op_id: OpId::mint([op; 20]),
            evict_max: EVICT_PRINCIPALS_MAX,
        },
    )
    .await
    .unwrap();
}

async fn current(world: &mut NatsWorld<'_>, space: &SpaceName) -> EndpointGate {
    let g = gate(space);
    run(world, Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &g)))
        .await
        .unwrap()
        .unwrap()
        .gate
}

fn renewal_raw(space: &SpaceName, proof: &str, epoch: u64) -> Value {
    let mut raw = envelope(space, "renewStandingBundle", "standing0000000000000001");
    raw["registrationProof"] = json!(proof);
    raw["accountPublicKey"] = json!(key(KeyPairType::Account, 40).public_key());
    raw["processEpoch"] = json!(epoch);
    raw
}

fn proof_for(space: &SpaceName, gate: &EndpointGate) -> String {
    let request = ManagerAuthorityRequest::parse(&renewal_raw(
        space,
        &format!("sha256:{}", "0".repeat(64)),
        0,
    ))
    .unwrap();
    current_registration_proof(
        &host(space).proof_secret,
        &owner(),
        &request.envelope,
        gate.registration_revision(),
        gate.process_epoch(),
    )
    .as_str()
    .to_owned()
}

/// The exact profile each renewed duty must carry, rebuilt independently from its binding.
fn expected_profiles(
    space: &SpaceName,
    gate: &EndpointGate,
) -> Vec<(C, String, profiles::Profile)> {
    let ids = ids();
    let iid = InstanceId::parse(IID).unwrap();
    let conn = |n: usize| ConnId::parse(&ids[n]).unwrap();
    let principal = |a: String| Principal::new(owner(), ActorToken::parse(&a).unwrap());
    let ttl = StandingTtl::DEFAULT;
    let manager = |role, n| {
        profiles::remote_manager(&RemoteManagerBinding {
            space: space.clone(),
            owner: owner(),
            instance: iid.clone(),
            conn: conn(n),
            role,
        })
        .unwrap()
    };
    let c = gate.coordinates();
    vec![
        (
            C::Supervisor,
            ids[0].clone(),
            manager(ManagerRole::Supervisor(ttl), 0),
        ),
        (
            C::Executor,
            ids[1].clone(),
            manager(ManagerRole::Executor, 1),
        ),
        (
            C::Serve,
            ids[2].clone(),
            profiles::endpoint_serve(&ServeBinding {
                grant: ServeGrant {
                    space: space.clone(),
                    endpoint: EndpointName::parse("manager").unwrap(),
                    instance: iid.clone(),
                    owner: owner(),
                    epoch: c.process_epoch,
                    registration_revision: c.registration_revision,
                    name_authority_revision: c.name_authority_revision,
                },
                actor: ActorToken::parse(&format!("manager_serve_{IID}")).unwrap(),
                conn: conn(2),
                rail_commands: COMMANDS
                    .iter()
                    .map(|c| CommandToken::parse(c).unwrap())
                    .collect(),
                journal_class: false,
                pools: Vec::new(),
                ttl,
            })
            .unwrap(),
        ),
        (
            C::GoalWriter,
            ids[3].clone(),
            profiles::goal_writer(&GoalWriterBinding {
                space: space.clone(),
                principal: principal(format!("manager_goal_{IID}")),
                conn: conn(3),
                endpoint: EndpointName::parse("manager").unwrap(),
                ttl,
            })
            .unwrap(),
        ),
        (
            C::SessionLedger,
            ids[4].clone(),
            profiles::session_ledger(&SessionLedgerBinding {
                space: space.clone(),
                principal: principal(format!("manager_session_{IID}")),
                conn: conn(4),
                ttl,
            })
            .unwrap(),
        ),
    ]
}

fn active_count(rows: &[(String, CredState)]) -> usize {
    rows.iter().filter(|(_, s)| *s == CredState::Active).count()
}

async fn rows(world: &mut NatsWorld<'_>, space: &SpaceName) -> Vec<(String, CredState)> {
    let prefix = gate(space).family_prefix();
    let keys = run(
        world,
        Proc(move |cx: &mut Ctx<'_>| {
            match cx.kv(cotal_core::kv::KvRequest::Keys {
                store: Store::Auth,
                prefix: prefix.clone(),
            })? {
                cotal_core::kv::KvOutcome::Keys(keys) => Ok(keys),
                other => Err(EpError::internal(format!("{other:?}")).into()),
            }
        }),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    for k in keys {
        let key = k.clone();
        let entry = run(
            world,
            Proc(move |cx: &mut Ctx<'_>| cotal_core::ledger::read(cx, Store::Auth, &key)),
        )
        .await
        .unwrap()
        .unwrap();
        out.push((
            k.clone(),
            LedgerRow::parse(&entry.value, &k).unwrap().state(),
        ));
    }
    out
}

fn check_renewed(out: &RemoteManagerAuthorityMaterial, space: &SpaceName, gate: &EndpointGate) {
    let mut names = out.names();
    names.sort_unstable();
    assert_eq!(
        names,
        vec![
            C::Supervisor,
            C::Executor,
            C::Serve,
            C::GoalWriter,
            C::SessionLedger
        ]
    );
    let account = key(KeyPairType::Account, 40).public_key();
    let signer = key(KeyPairType::Account, 41).public_key();
    let now = cotal_core::jwt::UnixSeconds(T0 / 1000 + 1);
    for (name, nkey, profile) in expected_profiles(space, gate) {
        let credential = out.credential(name).unwrap();
        let claims = jwt::verify(&credential.jwt, jwt::ClaimType::User, &signer, now).unwrap();
        assert_eq!(claims.sub, nkey, "{name}");
        assert_eq!(claims.user_account(), Some(account.as_str()), "{name}");
        assert_eq!(claims.name, profile.name, "{name}");
        let user = claims.user().unwrap();
        assert_eq!(user.permissions, profile.permissions, "{name}: exact rows");
        assert_eq!(user.tags, profile.tags, "{name}");
        assert_eq!(claims.exp.unwrap().0, credential.exp, "{name}");
        assert_eq!(credential.exp, now.0 + profile.ttl_seconds, "{name}");
    }
    assert!(!out.to_json().contains("seed"));
}

/// Register → activate → renew the standing bundle → re-register → the stale renewal is
/// refused `conflict` and releases nothing; the renewed JWTs decode to their exact rows.
#[test]
fn manager_standing_renewal_on_a_real_server() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let name =
            SpaceName::parse(&format!("renew{}", SPACES.fetch_add(1, Ordering::Relaxed))).unwrap();
        let options = SpaceOptions {
            request_timeout: Duration::from_secs(5),
            ..SpaceOptions::default()
        };
        let space = Space::connect(&server.url(), name.clone(), options)
            .await
            .unwrap();
        let mut world = NatsWorld::new(&space);
        world.set_evictor(Box::new(|holders| {
            Box::pin(async move { vec![true; holders.len()] })
        }));

        run(
            &mut world,
            cotal_core::issuance::ProvisionGate {
                gate: gate(&name),
                principal: Principal::parse(&format!("{OWNER}.manager_serve_{IID}")).unwrap(),
            },
        )
        .await
        .unwrap();
        register(&mut world, &name, &manager_document(), 1).await;

        // activate
        let mut raw = envelope(&name, "activate", "activate000000000000001");
        raw["contractArtifacts"] = json!([manager_document()]);
        raw["registrationProof"] = json!(format!("sha256:{}", "0".repeat(64)));
        let proof =
            registration_proof(&owner(), &ManagerAuthorityRequest::parse(&raw).unwrap()).unwrap();
        raw["registrationProof"] = json!(proof.as_str());
        let activated = run(&mut world, call(&name, &raw, T0)).await.unwrap();
        let gate0 = current(&mut world, &name).await;
        let next = activated.next_registration_proof.clone().unwrap();
        assert_eq!(next.as_str(), proof_for(&name, &gate0));
        assert_eq!(active_count(&rows(&mut world, &name).await), 3);

        // renew the standing bundle one second later
        let renewed = run(
            &mut world,
            call(&name, &renewal_raw(&name, next.as_str(), 0), T0 + 1_000),
        )
        .await
        .unwrap();
        check_renewed(&renewed, &name, &gate0);
        assert_eq!(active_count(&rows(&mut world, &name).await), 6);

        // a re-registration advances the epoch (and revokes the family); the old epoch is stale
        register(&mut world, &name, &manager_document(), 2).await;
        let gate1 = current(&mut world, &name).await;
        assert_eq!(gate1.process_epoch(), ProcessEpoch(1));
        let before = rows(&mut world, &name).await;
        let stale = run(
            &mut world,
            call(
                &name,
                &renewal_raw(&name, &proof_for(&name, &gate1), 0),
                T0 + 2_000,
            ),
        )
        .await
        .unwrap_err();
        assert_eq!(stale.code, ErrorCode::Conflict, "{stale}");
        assert!(stale.message.contains("processEpoch is stale"), "{stale}");
        assert_eq!(rows(&mut world, &name).await, before, "nothing written");
        assert_eq!(
            active_count(&before),
            0,
            "the re-registration revoked the family"
        );

        // the current epoch renews again
        let again = run(
            &mut world,
            call(
                &name,
                &renewal_raw(&name, &proof_for(&name, &gate1), 1),
                T0 + 3_000,
            ),
        )
        .await
        .unwrap();
        assert_eq!(
            again.host_fence.map(|f| f.process_epoch),
            Some(ProcessEpoch(1))
        );
        assert_eq!(active_count(&rows(&mut world, &name).await), 3);
    });
}
