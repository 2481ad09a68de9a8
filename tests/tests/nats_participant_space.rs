//! A participant's [`Space`] ([`Bind::Participant`]) on a real operator-mode `nats-server`,
//! over exactly the credential a remote manager registers itself with: the `remote-manager`
//! executor profile (`cotal_core::profiles::remote_manager`, [`ManagerRole::Executor`]), which
//! holds no `STREAM.INFO` on the auth, records or contract stores, reads by `STREAM.MSG.GET`
//! and Direct Get, writes key-pinned publishes, and lists only its own credential family with a
//! consumer created in the filter-subject form.
//!
//! Shown here: the bind makes no request; the manager's gate, its family rows, their listing,
//! reads and a CAS update all go through; the same credential's listing of another instance's
//! family, its write of another instance's gate and a consumer over the whole auth bucket are
//! refused by the server, with nothing written; the listing reports a DEL marker exactly as the
//! plane's own listing does; and the full registration ceremony runs over it, twice (a restart
//! advances the process epoch).
//!
//! The clock: the server checks `exp` against its wall clock, so JWTs are dated from it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::Duration;

use cotal_core::authority::SelfAuthority;
use cotal_core::contract::publish_cluster;
use cotal_core::gate::{EndpointGate, GateState, ProcessEpoch};
use cotal_core::issuance::{observe_gate, GateRef, ProvisionGate};
use cotal_core::jwt::{self, UnixSeconds, UserNats, Validity};
use cotal_core::kv::{Entry, KvOutcome, KvRequest, Operation, Store};
use cotal_core::ledger::LedgerRow;
use cotal_core::machine::{script, Replay};
use cotal_core::names::{
    keys, ActorToken, CredentialId, EndpointName, InstanceId, OpId, OwnerToken, Principal,
    SourceMember, SpaceName,
};
use cotal_core::profiles::{self, ConnId, ManagerRole, RemoteManagerBinding};
use cotal_core::registration::{RegisterInstance, Registered, EVICT_PRINCIPALS_MAX};
use cotal_core::service::ServiceSpec;
use cotal_io_nats::async_nats::{self, ConnectOptions};
use cotal_io_nats::{drive, Bind, NatsWorld, Space, SpaceOptions, StoreSet};
use cotal_tests::nats::client::{ClientError, JwtAuth, NatsClient};
use cotal_tests::nats::operator::OperatorServer;
use cotal_tests::nats::wall_clock;
use futures::future::BoxFuture;
use nkeys::KeyPair;
use serde_json::{json, Value};
use tokio::sync::mpsc;

const SPACE: &str = "participant";
/// The manager instance the credential is for.
const IID_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";
/// Another instance of the same owner, which the credential must not touch.
const IID_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbb";
const OWNER: &str = "u_cccccccccccccccccccccccccc";
const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";
/// Bounds every request of both connections; a refused request costs at most this.
const TIMEOUT: Duration = Duration::from_secs(2);

fn space() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}

fn manager() -> EndpointName {
    EndpointName::parse("manager").unwrap()
}

fn instance(iid: &str) -> InstanceId {
    InstanceId::parse(iid).unwrap()
}

fn gate(iid: &str) -> GateRef {
    GateRef::new(space(), manager(), instance(iid))
}

fn principal(actor: &str) -> Principal {
    Principal::new(owner(), ActorToken::parse(actor).unwrap())
}

/// The data account's signing key (the data account's JWT lists it), as the plane signs.
fn signing(live: &OperatorServer) -> KeyPair {
    KeyPair::from_seed(&live.signing.seed().unwrap()).unwrap()
}

/// An unrestricted connection of the data account, bound with every store (it creates them):
/// the side channel that shows what the participant did and did not write.
async fn admin(live: &OperatorServer) -> Space {
    let now = wall_clock();
    let creds = jwt::user_creds(
        &signing(live),
        &live.account.public_key(),
        &KeyPair::new_user(),
        "test-admin",
        &UserNats::default(),
        Validity {
            issued_at: now,
            expires_at: Some(UnixSeconds(now.0 + 600)),
        },
    )
    .unwrap();
    let client = ConnectOptions::with_credentials(&creds.text())
        .unwrap()
        .connect(live.server.url())
        .await
        .unwrap();
    Space::bind(
        client,
        space(),
        SpaceOptions {
            request_timeout: TIMEOUT,
            ..SpaceOptions::default()
        },
    )
    .await
    .unwrap()
}

/// The remote manager's executor credential for instance `iid`, exactly the profile's rows.
struct Executor {
    key: KeyPair,
    jwt: String,
}

fn executor(live: &OperatorServer, iid: &str) -> Executor {
    let key = KeyPair::new_user();
    let profile = profiles::remote_manager(&RemoteManagerBinding {
        space: space(),
        owner: owner(),
        instance: instance(iid),
        conn: ConnId::parse(&key.public_key()).unwrap(),
        role: ManagerRole::Executor,
    })
    .unwrap();
    let (nats, validity) = profile.claims(wall_clock()).unwrap();
    let jwt = jwt::user_jwt(
        &signing(live),
        &live.account.public_key(),
        &key.public_key(),
        profile.name,
        &nats,
        validity,
    )
    .unwrap();
    Executor { key, jwt }
}

/// The executor's participant space (auth, records, contracts) on its own connection-scoped
/// inbox, the only subscribe row it holds, and the server errors that connection reports.
async fn participant(
    live: &OperatorServer,
    cred: &Executor,
) -> (Space, mpsc::UnboundedReceiver<String>) {
    let creds = jwt::Creds {
        jwt: cred.jwt.clone(),
        seed: cred.key.seed().unwrap(),
    };
    let (tx, errors) = mpsc::unbounded_channel();
    let client = ConnectOptions::with_credentials(&creds.text())
        .unwrap()
        .custom_inbox_prefix(format!("_INBOX_{}", cred.key.public_key()))
        .connection_timeout(TIMEOUT)
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    let _ = tx.send(e.to_string());
                }
            }
        })
        .connect(live.server.url())
        .await
        .unwrap_or_else(|e| panic!("the server refused the executor credential: {e}"));
    let options = SpaceOptions {
        request_timeout: TIMEOUT,
        ..SpaceOptions::participant(StoreSet::of(&[
            Store::Auth,
            Store::Records,
            Store::Contracts,
        ]))
    };
    assert_eq!(options.bind, Bind::Participant);
    let space = Space::bind(client, space(), options)
        .await
        .unwrap_or_else(|e| panic!("the participant bind failed: {e}"));
    (space, errors)
}

/// Every server error the connection reported so far.
fn reported(errors: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(e) = errors.try_recv() {
        out.push(e);
    }
    out
}

async fn keys_of(space: &Space, prefix: &str) -> KvOutcome {
    space
        .execute(&KvRequest::Keys {
            store: Store::Auth,
            prefix: prefix.to_owned(),
        })
        .await
}

async fn get(space: &Space, store: Store, key: &str) -> Option<Entry> {
    match space
        .execute(&KvRequest::Get {
            store,
            key: key.to_owned(),
        })
        .await
    {
        KvOutcome::Entry(entry) => entry,
        other => panic!("reading {key}: {other:?}"),
    }
}

/// The consumers on the auth stream, as the unrestricted connection lists them.
async fn auth_consumers(admin: &Space) -> Vec<String> {
    use futures::StreamExt as _;
    let js = async_nats::jetstream::new(admin.client().clone());
    let stream = js
        .get_stream(&admin.layout(Store::Auth).stream)
        .await
        .unwrap();
    let mut names = Vec::new();
    let mut listed = stream.consumer_names();
    while let Some(name) = listed.next().await {
        names.push(name.unwrap());
    }
    names
}

/// An active row of instance `iid`'s family for a fresh credential id.
fn family_row(iid: &str, n: u8) -> LedgerRow {
    LedgerRow::endpoint_active(
        manager(),
        &instance(iid),
        CredentialId::parse(&format!("sha256-{}", format!("{n:02x}").repeat(32))).unwrap(),
        principal(&format!("manager_serve_{iid}")),
        vec![SourceMember::parse("session.peer").unwrap()],
        4_000_000_000,
    )
    .unwrap()
}

async fn create(space: &Space, key: &str, value: &[u8]) -> KvOutcome {
    space
        .execute(&KvRequest::Create {
            store: Store::Auth,
            key: key.to_owned(),
            value: value.to_vec(),
        })
        .await
}

fn manager_document() -> Value {
    let commands: Vec<Value> = ["spawn", "status"]
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

/// The registration ceremony of manager/A under op `op`, over the participant space alone:
/// the contract published on it (create-only, read back by Direct Get when already there), a
/// static name authority binding `manager` to the owner, and an evictor that reports every
/// holder gone (the eviction is the plane's door, proven by its own tests).
async fn register(space: &Space, op: u8) -> (Registered, Vec<Principal>) {
    let mut world = NatsWorld::new(space);
    world.set_evictor(Box::new(|holders: Vec<Principal>| {
        let gone = vec![true; holders.len()];
        Box::pin(async move { gone }) as BoxFuture<'static, Vec<bool>>
    }));
    let doc = manager_document();
    let closure = world
        .run(&mut Replay::new(script(move |cx| {
            publish_cluster(cx, &doc)
        })))
        .await
        .unwrap_or_else(|e| panic!("publishing the manager's contract failed: {e}"));
    let spec = ServiceSpec::from_value(
        json!({"endpoint": "manager", "owner": OWNER, "clusterDigests": [closure.to_prefixed()],
               "protocol": {"v": 1}}),
        &manager(),
    )
    .unwrap();
    let registered = world
        .run(&mut Replay::new(RegisterInstance {
            space: space.space().clone(),
            registrant: owner(),
            spec,
            instance: instance(IID_A),
            authority: Arc::new(SelfAuthority {
                name: manager(),
                owner: owner(),
            }),
            op_id: OpId::mint([op; 20]),
            evict_max: EVICT_PRINCIPALS_MAX,
        }))
        .await
        .unwrap_or_else(|e| panic!("the registration over the participant space failed: {e}"));
    (registered, world.evicted())
}

async fn current_gate(admin: &Space, iid: &str) -> Option<EndpointGate> {
    let g = gate(iid);
    drive(
        &mut Replay::new(script(move |cx| observe_gate(cx, &g))),
        admin,
    )
    .await
    .unwrap()
    .map(|o| o.gate)
}

#[tokio::test]
async fn a_remote_manager_executor_registers_over_a_participant_space() {
    let live = OperatorServer::start(wall_clock()).unwrap();
    let admin = admin(&live).await;
    let cred = executor(&live, IID_A);
    let (space, mut errors) = participant(&live, &cred).await;
    assert_eq!(space.round_trips(), 0, "a participant's bind sends nothing");

    // The manager gate, provisioned over the executor's own `epgate.manager.<A>` row.
    let serve = principal(&format!("manager_serve_{IID_A}"));
    drive(
        &mut ProvisionGate::machine(gate(IID_A), serve.clone()),
        &space,
    )
    .await
    .unwrap_or_else(|e| panic!("provisioning the gate failed: {e}"));
    let provisioned = current_gate(&admin, IID_A).await.unwrap();
    assert_eq!(provisioned.state(), GateState::Open);

    // Two family rows, listed by the participant's consumer listing, read and updated.
    let family = gate(IID_A).family_prefix();
    let rows = [family_row(IID_A, 1), family_row(IID_A, 2)];
    for row in &rows {
        let created = create(&space, &row.key(), &row.to_bytes()).await;
        assert!(matches!(created, KvOutcome::Written(_)), "{created:?}");
    }
    let mut expected: Vec<String> = rows.iter().map(LedgerRow::key).collect();
    expected.sort();
    let before = space.round_trips();
    assert_eq!(
        keys_of(&space, &family).await,
        KvOutcome::Keys(expected.clone())
    );
    assert_eq!(
        space.round_trips() - before,
        2,
        "a participant's listing is one consumer create and one delete"
    );
    let mut revisions = Vec::new();
    for row in &rows {
        let entry = get(&space, Store::Auth, &row.key()).await.unwrap();
        assert_eq!(entry.operation, Operation::Put);
        assert_eq!(LedgerRow::parse(&entry.value, &row.key()).unwrap(), *row);
        revisions.push(entry.revision);
    }
    let updated = space
        .execute(&KvRequest::Update {
            store: Store::Auth,
            key: rows[0].key(),
            value: rows[0].to_bytes(),
            expected: revisions[0],
        })
        .await;
    assert!(matches!(updated, KvOutcome::Written(_)), "{updated:?}");
    // A stale pin loses: the server fences the participant's write.
    let stale = space
        .execute(&KvRequest::Update {
            store: Store::Auth,
            key: rows[0].key(),
            value: rows[0].to_bytes(),
            expected: revisions[0],
        })
        .await;
    assert_eq!(stale, KvOutcome::CasLost);
    // Two messages on one subject: the listing still names each key once, and ends.
    assert_eq!(
        keys_of(&space, &family).await,
        KvOutcome::Keys(expected.clone())
    );
    // A prefix inside the family matches keys, not tokens; an empty family lists nothing.
    let one = rows[1].key();
    assert_eq!(
        keys_of(&space, &one[..one.len() - 10]).await,
        KvOutcome::Keys(vec![one.clone()])
    );
    assert_eq!(
        keys_of(&space, &format!("{family}zzz")).await,
        KvOutcome::Keys(Vec::new())
    );
    assert_eq!(
        auth_consumers(&admin).await,
        Vec::<String>::new(),
        "every listing deleted its consumer"
    );
    assert!(reported(&mut errors).is_empty());

    // Refused by the server: instance B's family listing, B's gate, a bucket-wide consumer.
    let other_family = gate(IID_B).family_prefix();
    let listed = keys_of(&space, &other_family).await;
    assert!(matches!(listed, KvOutcome::Unavailable(_)), "{listed:?}");
    let b_gate = EndpointGate::provisioned(principal(&format!("manager_serve_{IID_B}"))).unwrap();
    let written = create(&space, &gate(IID_B).key(), &b_gate.to_bytes()).await;
    assert!(
        matches!(written, KvOutcome::Unavailable(_) | KvOutcome::Ambiguous(_)),
        "{written:?}"
    );
    assert_eq!(
        current_gate(&admin, IID_B).await,
        None,
        "nothing was written"
    );
    assert_eq!(
        keys_of(&admin, &other_family).await,
        KvOutcome::Keys(Vec::new())
    );
    assert_eq!(auth_consumers(&admin).await, Vec::<String>::new());
    let violations = reported(&mut errors);
    let auth = &admin.layout(Store::Auth);
    for subject in [
        format!(".{}{other_family}>", auth.subject_prefix),
        format!("{}{}", auth.subject_prefix, gate(IID_B).key()),
    ] {
        assert!(
            violations
                .iter()
                .any(|v| v.contains("Permissions Violation for Publish") && v.contains(&subject)),
            "no violation naming {subject}: {violations:?}"
        );
    }
    let mut raw = NatsClient::connect(
        live.server.port(),
        "raw-executor",
        Some(JwtAuth {
            jwt: &cred.jwt,
            key: &cred.key,
        }),
    )
    .unwrap();
    let bucket_wide = format!(
        "$JS.API.CONSUMER.CREATE.{}.x.{}>",
        auth.stream, auth.subject_prefix
    );
    let want = format!("Permissions Violation for Publish to \"{bucket_wide}\"");
    match raw.publish(&bucket_wide, None, b"{}") {
        Err(ClientError::Refused(e)) if e == want => {}
        other => {
            panic!("consumer create over the whole bucket: expected -ERR '{want}', got {other:?}")
        }
    }

    // The registration ceremony over the participant space: the family's active rows are
    // evicted and revoked, the gate reopens at epoch 0 with the spec's revision.
    let (first, evicted) = register(&space, 1).await;
    assert!(evicted.contains(&serve), "{evicted:?}");
    let registered = current_gate(&admin, IID_A).await.unwrap();
    assert_eq!(registered.state(), GateState::Open);
    assert_eq!(registered.process_epoch(), ProcessEpoch(0));
    assert_eq!(first.process_epoch, ProcessEpoch(0));
    assert_eq!(
        registered.registration_revision(),
        first.registration_revision
    );
    let spec = get(
        &admin,
        Store::Records,
        &keys::svc_spec(&manager(), &instance(IID_A)),
    )
    .await
    .expect("the spec record is written");
    assert_eq!(
        spec.revision.0, first.registration_revision.0,
        "the gate pins the spec's revision"
    );

    // A restart: the family has rows, the epoch advances.
    let (second, _) = register(&space, 2).await;
    let restarted = current_gate(&admin, IID_A).await.unwrap();
    assert_eq!(restarted.state(), GateState::Open);
    assert_eq!(restarted.process_epoch(), ProcessEpoch(1));
    assert_eq!(second.process_epoch, ProcessEpoch(1));
    assert!(second.generation > first.generation);
    assert_eq!(auth_consumers(&admin).await, Vec::<String>::new());

    // A DEL marker is listed as the plane's own listing lists it (Q-18: the reader refuses
    // it; the listing never hides it).
    let doomed = family_row(IID_A, 3);
    let KvOutcome::Written(at) = create(&space, &doomed.key(), &doomed.to_bytes()).await else {
        panic!("creating {} failed", doomed.key());
    };
    let deleted = space
        .execute(&KvRequest::Delete {
            store: Store::Auth,
            key: doomed.key(),
            expected: at,
        })
        .await;
    assert!(matches!(deleted, KvOutcome::Written(_)), "{deleted:?}");
    let KvOutcome::Keys(listed) = keys_of(&space, &family).await else {
        panic!("the family listing failed");
    };
    assert!(listed.contains(&doomed.key()), "{listed:?}");
    assert_eq!(keys_of(&admin, &family).await, KvOutcome::Keys(listed));
    let marker = get(&space, Store::Auth, &doomed.key()).await.unwrap();
    assert_eq!(marker.operation, Operation::Delete);
    assert!(reported(&mut errors).is_empty());
}
