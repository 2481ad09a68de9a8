//! The plane's own connections on a real operator-mode `nats-server` 2.15.1 (issue 14, part
//! 3): every connection is self-minted from the data account's signing key with its
//! `cotal_core::plane_grants` grant, named by its label, bound over the stores its grant
//! covers, and renewed at half-life on a fresh connection without failing work in flight.
//!
//! Enforcement is proven twice: through [`AuthorityClient`] (what the plane does fails or
//! succeeds as its grant says) and with the raw test client holding a JWT minted from the same
//! builder (the exact `Permissions Violation` the server answers).
//!
//! The clock: the server checks `exp` against its wall clock, so JWTs are dated from it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use cotal_core::gate::ProcessEpoch;
use cotal_core::host::{
    confirm_registration, AwaitHostFence, FenceEnd, PrepareSelfAuthorized, SelfAuthorizedInstance,
    SelfContract, AUTH_ENDPOINT,
};
use cotal_core::issuance::GateRef;
use cotal_core::jwt::{self, Permissions, UnixSeconds, UserNats, Validity};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::machine::{script, Replay};
use cotal_core::names::{
    ActorToken, EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName,
};
use cotal_core::plane_grants::{
    auth_barrier, auth_mint, auth_reader, auth_registration, auth_scan, records_scan,
    remote_manager_issuer, PlaneConnection,
};
use cotal_core::profiles::ConnId;
use cotal_core::serving::RegisterServing;
use cotal_core::EpError;
use cotal_io_nats::authority::connect_with_creds;
use cotal_io_nats::host::{hold_fence, hold_fence_pushed};
use cotal_io_nats::{drive, AuthorityClient, DataAccountSigner, NatsWorld, SpaceOptions, StoreSet};
use cotal_tests::nats::client::{ClientError, JwtAuth, NatsClient};
use cotal_tests::nats::operator::OperatorServer;
use cotal_tests::nats::wall_clock;
use nkeys::KeyPair;

const SPACE: &str = "plane";
const IID: &str = "0123456789abcdefghijklmnop";
const OTHER_IID: &str = "zyxwvutsrqponmlkjihgfedcba";
const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
const TTL: Duration = Duration::from_secs(900);

fn space() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn instance() -> InstanceId {
    InstanceId::parse(IID).unwrap()
}

fn start() -> OperatorServer {
    OperatorServer::start(wall_clock()).unwrap()
}

fn signer(live: &OperatorServer) -> DataAccountSigner {
    DataAccountSigner {
        account: live.account.public_key(),
        signer: Arc::new(KeyPair::from_seed(&live.signing.seed().unwrap()).unwrap()),
    }
}

fn options(stores: &[Store], create_missing: bool) -> SpaceOptions {
    SpaceOptions {
        request_timeout: Duration::from_secs(2),
        create_missing,
        stores: StoreSet::of(stores),
        ..SpaceOptions::default()
    }
}

type Grant = fn(&SpaceName, &ConnId) -> Result<Permissions, EpError>;

fn registration_grant(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    auth_registration(space, conn, &instance())
}

fn reader_watching_grant(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    cotal_core::plane_grants::auth_reader_watching(space, conn, &auth_gate())
}

fn admin_grant(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    cotal_core::plane_grants::auth_admin(space, conn, &instance(), ProcessEpoch(0))
}

/// The self-minted connections: role, grant, the stores it binds, whether it creates them.
fn plane_connections() -> [(PlaneConnection, Grant, &'static [Store], bool); 8] {
    use Store::*;
    [
        (
            PlaneConnection::AuthMint,
            auth_mint,
            &[Auth, Records, Admission, Contracts],
            true,
        ),
        (
            PlaneConnection::AuthRegistration,
            registration_grant,
            &[Auth, Records, Contracts],
            false,
        ),
        (
            PlaneConnection::AuthReader,
            auth_reader,
            &[Auth, Records],
            false,
        ),
        (
            PlaneConnection::RemoteManagerIssuer,
            remote_manager_issuer,
            &[Auth, Records, Contracts],
            false,
        ),
        (
            PlaneConnection::AuthBarrier,
            auth_barrier,
            &[Auth, Records],
            false,
        ),
        (PlaneConnection::AuthScan, auth_scan, &[Auth], false),
        (
            PlaneConnection::RecordsScan,
            records_scan,
            &[Records],
            false,
        ),
        (PlaneConnection::AuthAdmin, admin_grant, &[], false),
    ]
}

async fn open_with(
    live: &OperatorServer,
    role: PlaneConnection,
    grant: Grant,
    stores: &[Store],
    create: bool,
    ttl: Duration,
) -> Result<AuthorityClient, EpError> {
    AuthorityClient::open(
        &live.server.url(),
        role.label(&space()),
        signer(live),
        |conn| grant(&space(), conn).map(Into::into),
        ttl,
        space(),
        options(stores, create),
    )
    .await
}

/// The mint writer first (it ensures the stores), then `role`.
async fn open(live: &OperatorServer, role: PlaneConnection) -> AuthorityClient {
    let (_, grant, stores, create) = plane_connections()
        .into_iter()
        .find(|(r, ..)| *r == role)
        .unwrap();
    open_with(live, role, grant, stores, create, TTL)
        .await
        .unwrap_or_else(|e| panic!("{role}: {}\n{}", e.message, live.server.log_tail()))
}

/// A raw client holding a JWT minted from `grant` for a fresh nkey, as the plane would.
fn raw(live: &OperatorServer, grant: Grant) -> NatsClient {
    let key = KeyPair::new_user();
    let conn = ConnId::parse(&key.public_key()).unwrap();
    let now = wall_clock();
    let jwt = jwt::user_jwt(
        &live.signing,
        &live.account.public_key(),
        &key.public_key(),
        "raw",
        &UserNats {
            permissions: grant(&space(), &conn).unwrap(),
            ..UserNats::default()
        },
        Validity {
            issued_at: now,
            expires_at: Some(UnixSeconds(now.0 + 600)),
        },
    )
    .unwrap();
    NatsClient::connect(
        live.server.port(),
        "raw",
        Some(JwtAuth {
            jwt: &jwt,
            key: &key,
        }),
    )
    .unwrap()
}

fn publish_refused(client: &mut NatsClient, subject: &str) {
    let want = format!("Permissions Violation for Publish to \"{subject}\"");
    match client.publish(subject, None, b"{}") {
        Err(ClientError::Refused(e)) if e == want => {}
        other => panic!("publish to {subject:?}: expected -ERR '{want}', got {other:?}"),
    }
}

fn put(key: &str) -> KvRequest {
    put_value(key, b"{}")
}

fn put_value(key: &str, value: &[u8]) -> KvRequest {
    KvRequest::CreateStrict {
        store: Store::Auth,
        key: key.to_owned(),
        value: value.to_vec(),
    }
}

/// Runs the plane's own `auth` registration ceremony (daemon `register_and_serve`) on
/// `client`'s binding.
async fn register(client: &AuthorityClient) -> Result<ProcessEpoch, EpError> {
    let space = client.space()?;
    let gate = GateRef::new(
        self::space(),
        EndpointName::parse(AUTH_ENDPOINT).unwrap(),
        instance(),
    );
    let owner = OwnerToken::parse(OWNER).unwrap();
    let ceremony = SelfAuthorizedInstance {
        gate: gate.clone(),
        owner: owner.clone(),
        principal: Principal::new(owner, ActorToken::parse("auth_service").unwrap()),
        contract: SelfContract::auth()?,
        op_id: OpId::mint(*b"plane-connections-op"),
    };
    drive(&mut Replay::new(PrepareSelfAuthorized(&ceremony)), &space).await?;
    let register = RegisterServing {
        register: ceremony.registration()?,
        status: serde_json::Map::new(),
    };
    let serving = NatsWorld::new(&space)
        .run(&mut Replay::new(register))
        .await?;
    let reg = serving.registered;
    drive(
        &mut Replay::new(script(|cx| confirm_registration(cx, &gate, &reg))),
        &space,
    )
    .await?;
    Ok(reg.process_epoch)
}

fn auth_gate() -> GateRef {
    GateRef::new(
        space(),
        EndpointName::parse(AUTH_ENDPOINT).unwrap(),
        instance(),
    )
}

/// How many connections CONNZ shows under `label`.
fn connections_named(live: &OperatorServer, label: &str) -> usize {
    let connz = live.server.monitor("/connz?limit=1024").unwrap();
    connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str() == Some(label))
        .count()
}

#[tokio::test]
async fn every_plane_connection_binds_under_its_grant_and_is_named_by_its_label() {
    let live = start();
    let mut clients = Vec::new();
    for (role, ..) in plane_connections() {
        clients.push(open(&live, role).await);
    }
    let creds = jwt::user_creds(
        &live.signing,
        &live.account.public_key(),
        &KeyPair::new_user(),
        "callout",
        &UserNats::default(),
        Validity {
            issued_at: wall_clock(),
            expires_at: None,
        },
    )
    .unwrap();
    let callout_label = PlaneConnection::AuthService.label(&space());
    let callout = connect_with_creds(&live.server.url(), &callout_label, &creds.text())
        .await
        .unwrap();
    let connz = live.server.monitor("/connz?limit=1024").unwrap();
    let names: Vec<&str> = connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    for role in PlaneConnection::ALL {
        let label = role.label(&space());
        assert!(
            names.contains(&label.as_str()),
            "{label} not in CONNZ {names:?}"
        );
    }
    // Each label names the connection of that client's own user nkey.
    let connz = live.server.monitor("/connz?limit=1024&auth=true").unwrap();
    for client in &clients {
        let entry = connz["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"].as_str() == Some(client.label()))
            .unwrap();
        assert_eq!(
            entry["authorized_user"].as_str(),
            Some(client.conn_id().as_str()),
            "{entry}"
        );
    }
    callout.drain().await.unwrap();
    for client in clients {
        client.close().await.unwrap();
    }
}

#[tokio::test]
async fn the_reader_cannot_write_a_kv_row_and_an_unbound_store_is_unavailable() {
    let live = start();
    let mint = open(&live, PlaneConnection::AuthMint).await;
    let reader = open(&live, PlaneConnection::AuthReader).await;
    let key = "gate.reader-probe";
    let outcome = reader.space().unwrap().execute(&put(key)).await;
    assert!(!matches!(outcome, KvOutcome::Written(_)), "{outcome:?}");
    let read = KvRequest::Get {
        store: Store::Auth,
        key: key.to_owned(),
    };
    assert_eq!(
        reader.space().unwrap().execute(&read).await,
        KvOutcome::Entry(None)
    );
    assert_eq!(
        mint.space().unwrap().execute(&read).await,
        KvOutcome::Entry(None)
    );
    let admission = KvRequest::Get {
        store: Store::Admission,
        key: "admission.v1.x.y".to_owned(),
    };
    match reader.space().unwrap().execute(&admission).await {
        KvOutcome::Unavailable(why) => {
            assert!(
                why.contains("cotal_admission_plane") && why.contains("not bound"),
                "{why}"
            )
        }
        other => panic!("an unbound store must be unavailable, got {other:?}"),
    }
    // The raw form: the server names the refused subject.
    let mut raw = raw(&live, auth_reader);
    publish_refused(&mut raw, &format!("$KV.cotal_auth_{SPACE}.gate.x"));
    reader.close().await.unwrap();
    mint.close().await.unwrap();
}

#[tokio::test]
async fn the_registration_client_registers_its_own_instance_but_cannot_touch_another_instances_gate(
) {
    let live = start();
    let mint = open(&live, PlaneConnection::AuthMint).await;
    let registration = open(&live, PlaneConnection::AuthRegistration).await;
    let before = registration.space().unwrap().round_trips();
    register(&registration)
        .await
        .unwrap_or_else(|e| panic!("{}\n{}", e.message, live.server.log_tail()));
    let took = registration.space().unwrap().round_trips() - before;
    eprintln!("registration ceremony on the restricted connection: {took} round trips");
    let own = KvRequest::Get {
        store: Store::Auth,
        key: format!("epgate.auth.{IID}"),
    };
    assert!(matches!(
        mint.space().unwrap().execute(&own).await,
        KvOutcome::Entry(Some(_))
    ));
    let other = format!("epgate.auth.{OTHER_IID}");
    let outcome = registration.space().unwrap().execute(&put(&other)).await;
    assert!(!matches!(outcome, KvOutcome::Written(_)), "{outcome:?}");
    let read = KvRequest::Get {
        store: Store::Auth,
        key: other.clone(),
    };
    assert_eq!(
        mint.space().unwrap().execute(&read).await,
        KvOutcome::Entry(None)
    );
    let mut raw = raw(&live, registration_grant);
    publish_refused(&mut raw, &format!("$KV.cotal_auth_{SPACE}.{other}"));
    registration.close().await.unwrap();
    mint.close().await.unwrap();
}

#[test]
fn no_plane_connection_can_create_a_consumer_on_the_auth_stream() {
    let live = start();
    let stream = format!("KV_cotal_auth_{SPACE}");
    for (role, grant, ..) in plane_connections() {
        let mut raw = raw(&live, grant);
        for subject in [
            format!("$JS.API.CONSUMER.CREATE.{stream}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.scan.$KV.cotal_auth_{SPACE}.>"),
            format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.scan"),
        ] {
            eprintln!("{role}: {subject}");
            publish_refused(&mut raw, &subject);
        }
    }
}

#[test]
fn an_unauthenticated_client_is_refused() {
    let live = start();
    match NatsClient::connect(live.server.port(), "anonymous", None) {
        Err(ClientError::Refused(e)) if e == "Authorization Violation" => {}
        other => panic!(
            "expected Authorization Violation, got {:?}",
            other.map(|_| ())
        ),
    }
}

#[tokio::test]
async fn a_jwt_signed_by_a_key_that_is_not_the_data_accounts_signing_key_is_refused() {
    let live = start();
    let forged = DataAccountSigner {
        account: live.account.public_key(),
        signer: Arc::new(KeyPair::new_account()),
    };
    let refused = AuthorityClient::open(
        &live.server.url(),
        PlaneConnection::AuthReader.label(&space()),
        forged,
        |conn| auth_reader(&space(), conn).map(Into::into),
        TTL,
        space(),
        options(&[Store::Auth, Store::Records], false),
    )
    .await
    .unwrap_err();
    assert!(
        refused.message.contains("cannot connect"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn renewal_swaps_connections_without_failing_work_in_flight_or_after_the_first_exp() {
    let live = start();
    let ttl = Duration::from_secs(4);
    let (role, grant, stores, create) = plane_connections()[0];
    let mint = open_with(&live, role, grant, stores, create, ttl)
        .await
        .unwrap();
    let started = Instant::now();
    // Work that takes its binding before the first swap (at ~2 s) and keeps using it after.
    let held = mint.space().unwrap();
    let first_conn = held.client().server_info().client_id;
    let mut ops = 0u32;
    let mut in_flight_checked = false;
    while started.elapsed() < Duration::from_secs(9) {
        let space = mint.space().unwrap_or_else(|e| panic!("{}", e.message));
        let key = format!("gate.loop-{ops}");
        let value = ops.to_string().into_bytes();
        match space.execute(&put_value(&key, &value)).await {
            KvOutcome::Written(_) => {}
            other => panic!("write {ops} at {:?} failed: {other:?}", started.elapsed()),
        }
        let read = KvRequest::Get {
            store: Store::Auth,
            key,
        };
        match space.execute(&read).await {
            KvOutcome::Entry(Some(e)) => assert_eq!(e.value, value),
            other => panic!("read {ops} at {:?} failed: {other:?}", started.elapsed()),
        }
        drop(space);
        if !in_flight_checked && mint.swaps() >= 1 {
            // Swapped while `held` was taken: the old connection must still serve it.
            let probe = KvRequest::Get {
                store: Store::Auth,
                key: "gate.loop-0".to_owned(),
            };
            assert!(matches!(held.execute(&probe).await, KvOutcome::Entry(_)));
            assert_ne!(
                mint.space().unwrap().client().server_info().client_id,
                first_conn
            );
            in_flight_checked = true;
        }
        ops += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(in_flight_checked, "no swap in 9 s");
    drop(held);
    eprintln!(
        "{ops} write+read pairs over 9 s across {} swaps; last swap took {:?}",
        mint.swaps(),
        mint.last_renewal()
    );
    assert!(mint.swaps() >= 3, "{} swaps", mint.swaps());
    mint.close().await.unwrap();
}

/// A follower of the connection (the control rail, the run request observation, the gate push)
/// is woken by each swap itself: the renewed connection is already current when it wakes, and
/// the follower ends once the client is gone.
#[tokio::test]
async fn renewals_wake_a_follower_at_each_swap_with_the_fresh_connection_current() {
    let live = start();
    let ttl = Duration::from_secs(4);
    let (role, grant, stores, create) = plane_connections()[0];
    let mint = open_with(&live, role, grant, stores, create, ttl)
        .await
        .unwrap();
    let mut renewals = mint.renewals();
    let first = mint.space().unwrap().client().server_info().client_id;
    for swap in 1..=2u64 {
        tokio::time::timeout(Duration::from_secs(6), renewals.changed())
            .await
            .expect("no renewal woke the follower")
            .unwrap();
        assert_eq!(*renewals.borrow_and_update(), swap);
        assert_eq!(mint.swaps(), swap);
        let now = mint.space().unwrap().client().server_info().client_id;
        assert_ne!(now, first, "the woken follower sees the renewed connection");
    }
    mint.close().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while renewals.changed().await.is_ok() {}
    })
    .await
    .expect("the follower outlived its client");
}

#[tokio::test]
async fn a_fence_watch_over_the_reader_reads_through_each_renewed_binding_and_sees_the_fence() {
    let live = start();
    let mint = open(&live, PlaneConnection::AuthMint).await;
    let registration = open(&live, PlaneConnection::AuthRegistration).await;
    let first = register(&registration).await.unwrap();
    let (role, grant, stores, create) = plane_connections()[2];
    let reader = open_with(&live, role, grant, stores, create, Duration::from_secs(4))
        .await
        .unwrap();
    let fence = AwaitHostFence::new(auth_gate(), first).unwrap();
    let started = Instant::now();
    let successor = async {
        // Past the reader's first exp (4 s) and two renewals, a later start fences `first`.
        tokio::time::sleep(Duration::from_secs(5)).await;
        register(&registration).await.unwrap()
    };
    let (seen, second) = tokio::join!(
        hold_fence(&reader, fence, Duration::from_secs(30)),
        successor
    );
    // The fence resolves at the successor's first move (its registration freezes the gate).
    let end = seen.unwrap();
    assert!(
        matches!(end, FenceEnd::Held(_) | FenceEnd::Superseded(_)),
        "{end:?}"
    );
    assert!(second > first);
    assert!(started.elapsed() >= Duration::from_secs(5));
    assert!(reader.swaps() >= 2, "{} swaps", reader.swaps());
    eprintln!(
        "fence seen {:?} after the watch began, across {} reader swaps",
        started.elapsed(),
        reader.swaps()
    );
    // The replaced connections are gone: only the current one carries the label.
    assert_eq!(connections_named(&live, reader.label()), 1);
    reader.close().await.unwrap();
    registration.close().await.unwrap();
    mint.close().await.unwrap();
}

/// Push, not poll (issue 13): a write of the gate by another writer (a successor's
/// registration on its own connection) wakes the fence through the reader's subscription on the
/// gate key's subject, across the reader's renewals, with the poll set to an hour; each wake is
/// confirmed by a leader read. No consumer is created (F98): the reader's grant holds none.
#[tokio::test]
async fn a_foreign_gate_write_is_pushed_to_the_fence_across_renewals() {
    let live = start();
    let mint = open(&live, PlaneConnection::AuthMint).await;
    let registration = open(&live, PlaneConnection::AuthRegistration).await;
    let first = register(&registration).await.unwrap();
    let reader = open_with(
        &live,
        PlaneConnection::AuthReader,
        reader_watching_grant,
        &[Store::Auth, Store::Records],
        false,
        Duration::from_secs(4),
    )
    .await
    .unwrap();
    let fence = AwaitHostFence::new(auth_gate(), first)
        .unwrap()
        .with_poll(Duration::from_secs(3600));
    let successor = async {
        // Past the reader's first renewal, another writer fences `first`.
        tokio::time::sleep(Duration::from_secs(5)).await;
        register(&registration).await.unwrap()
    };
    let watched = hold_fence_pushed(&reader, fence, Duration::from_secs(30));
    let (seen, second) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(watched, successor)
    })
    .await
    .expect("the fence was not woken by the push (its poll is an hour)");
    let end = seen.unwrap();
    assert!(
        matches!(end, FenceEnd::Held(_) | FenceEnd::Superseded(_)),
        "{end:?}"
    );
    assert!(second > first);
    assert!(reader.swaps() >= 1, "{} swaps", reader.swaps());
    reader.close().await.unwrap();
    registration.close().await.unwrap();
    mint.close().await.unwrap();
}

#[tokio::test]
async fn a_renewal_that_cannot_reconnect_fails_the_client_closed_before_its_credential_expires() {
    let mut live = start();
    let (role, grant, stores, create) = plane_connections()[0];
    let mint = open_with(&live, role, grant, stores, create, Duration::from_secs(4))
        .await
        .unwrap();
    let started = Instant::now();
    live.server.stop().unwrap();
    let failure = tokio::time::timeout(Duration::from_secs(6), mint.failed())
        .await
        .expect("the failed renewal must be reported before the credential expires");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(failure.message.contains("FAILED"), "{}", failure.message);
    let refused = mint.space().unwrap_err();
    assert!(
        refused.message.contains("cotal:auth-mint:plane"),
        "{}",
        refused.message
    );
    eprintln!(
        "renewal failure reported after {:?}: {}",
        started.elapsed(),
        failure.message
    );
}
