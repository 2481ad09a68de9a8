//! Holder liveness and verified eviction on real operator-mode servers, through the plane's own
//! system-account user from a provisioned trust root (io-nats `liveness::Oracle` over
//! `core::liveness`): a standalone server and a 3-node cluster.
//!
//! * F52: `live` while a connection attributed to the holder exists on any server; `gone` only
//!   when every server of the cluster answered and none lists it; `unknown` when a server is
//!   down or the sweep is denied — and the reconcile then leaves the gate frozen, until every
//!   server answers again.
//! * SPEC 13.13: the plane claim is reclaimed only when every member answers and the prior
//!   scanners are gone.
//! * F68: eviction kicks the holder's connections on the server that lists them and counts only
//!   when a fresh complete listing shows none.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use cotal_core::barrier;
use cotal_core::gate::GateState;
use cotal_core::issuance::{observe_gate, GateRef, ProvisionGate};
use cotal_core::jwt::{self, Permission, Permissions, UserNats, Validity};
use cotal_core::kv::Store;
use cotal_core::liveness::Listing;
use cotal_core::machine::{script, Liveness, Replay};
use cotal_core::names::{EndpointName, InstanceId, OpId, Principal, SpaceName};
use cotal_core::plane_claim::{AcquirePlaneClaim, ClaimRefusal, ConnTuple};
use cotal_core::plane_grants::{self, PlaneConnection};
use cotal_core::profiles::principal_tags;
use cotal_core::reconcile::{ReconcileCondition, ReconcileGate};
use cotal_core::trust::{provision, BrokerMaterial, IdpPin, ProvisionSeeds, TrustRoot};
use cotal_core::ErrorCode;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{
    drive, AuthorityClient, DataAccountSigner, NatsWorld, Replicas, SpaceOptions, StoreSet,
};
use cotal_tests::nats::client::{JwtAuth, NatsClient};
use cotal_tests::nats::{wall_clock, NatsCluster, NatsServer, ServerOptions};
use nkeys::KeyPair;

const SPACE: &str = "live";
const HOLDER: &str = "local.holder";
const WAIT: Duration = Duration::from_millis(1500);

fn space() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn holder() -> Principal {
    Principal::parse(HOLDER).unwrap()
}

/// A trust root from seeded entropy: every key distinct, the same keys for the same seed.
fn trust(seed: u64) -> TrustRoot {
    let mut entropy = [0u8; ProvisionSeeds::ENTROPY_BYTES];
    let mut state = seed;
    for chunk in entropy.chunks_mut(8) {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes()[..chunk.len()]);
    }
    provision(
        &space(),
        IdpPin::from_url("http://127.0.0.1:4190").unwrap(),
        &ProvisionSeeds::from_entropy(&entropy),
        wall_clock(),
    )
    .unwrap()
}

/// The trust root's operator, accounts and resolver preload, appended to the harness config.
fn operator_config(broker: &BrokerMaterial) -> String {
    let preload = [
        broker.system_account(),
        broker.data_account(),
        broker.callout_account(),
    ]
    .iter()
    .map(|a| format!("  \"{}\": \"{}\"\n", a.public_key, a.jwt))
    .collect::<String>();
    format!(
        "operator: \"{}\"\nsystem_account: \"{}\"\nresolver: MEMORY\nresolver_preload: {{\n{preload}}}\n",
        broker.operator_jwt(),
        broker.system_account().public_key,
    )
}

fn options(root: &TrustRoot) -> ServerOptions {
    ServerOptions {
        binary: None,
        extra_config: operator_config(&root.broker),
    }
}

fn oracle_of(root: &TrustRoot, urls: &str) -> Oracle {
    Oracle::new(
        urls,
        root.daemon.system_user().creds(),
        root.daemon.data_account(),
        PlaneConnection::PlaneSystem.label(&space()),
    )
    .with_wait(WAIT)
}

/// A plain (never reconnecting) data-account connection attributed to `holder`.
fn holder_connection(root: &TrustRoot, port: u16, holder: &Principal) -> NatsClient {
    let user = KeyPair::new_user();
    let now = wall_clock();
    let jwt = jwt::user_jwt(
        root.daemon.data_signing_key(),
        root.daemon.data_account(),
        &user.public_key(),
        "holder",
        &UserNats {
            permissions: Permissions {
                publish: Permission {
                    allow: vec!["nothing".into()],
                    deny: Vec::new(),
                },
                subscribe: Permission {
                    allow: vec!["_INBOX.>".into()],
                    deny: Vec::new(),
                },
                response: None,
            },
            tags: principal_tags(holder),
            ..UserNats::default()
        },
        Validity {
            issued_at: now,
            expires_at: Some(jwt::UnixSeconds(now.0 + 600)),
        },
    )
    .unwrap();
    NatsClient::connect(
        port,
        "holder",
        Some(JwtAuth {
            jwt: &jwt,
            key: &user,
        }),
    )
    .unwrap_or_else(|e| panic!("the holder cannot connect: {e:?}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A standalone server: live, then gone once the holder closes; an eviction of a connected
/// holder kicks it and verifies it gone; another trust root's system user sees nothing, which
/// is unknown, never gone.
#[test]
fn f52_f68_standalone_live_gone_kick_and_a_blind_observer() {
    let root = trust(1);
    let server = NatsServer::start(options(&root)).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let oracle = oracle_of(&root, &server.url());
        let connection = holder_connection(&root, server.port(), &holder());
        let probe = oracle.probe(&holder()).await;
        assert_eq!(probe.liveness, Liveness::Live, "{:?}", probe.listing);
        assert_eq!(
            oracle
                .probe(&Principal::parse("local.nobody").unwrap())
                .await
                .liveness,
            Liveness::Gone
        );
        drop(connection);
        let deadline = Instant::now() + Duration::from_secs(5);
        while oracle.probe(&holder()).await.liveness != Liveness::Gone {
            assert!(Instant::now() < deadline, "the closed holder stayed listed");
        }

        // Kill-live: a connected holder is kicked on its server and verified gone.
        let mut victim = holder_connection(&root, server.port(), &holder());
        assert_eq!(oracle.evict(&[holder()]).await, [true]);
        assert!(victim.flush().is_err(), "the kicked connection is closed");
        assert_eq!(oracle.probe(&holder()).await.liveness, Liveness::Gone);
        let said = oracle.findings().join("\n");
        assert!(said.contains("1 connection(s) kicked, none left"), "{said}");

        // A system user of another trust root is refused by this server: nothing is listed,
        // and nothing is concluded from that.
        let blind = oracle_of(&trust(2), &server.url());
        let _still = holder_connection(&root, server.port(), &Principal::parse("local.x").unwrap());
        let probe = blind.probe(&holder()).await;
        assert_eq!(probe.liveness, Liveness::Unknown, "{:?}", probe.listing);
        assert!(matches!(probe.listing, Listing::Incomplete(_)));
        assert_eq!(blind.evict(&[holder()]).await, [false]);
    });
}

fn gate() -> GateRef {
    GateRef::new(
        space(),
        EndpointName::parse("worker").unwrap(),
        InstanceId::parse("iiiiiiiiiiiiiiiiiiiiiiiiii").unwrap(),
    )
}

/// A 3-node cluster: the expected members come from the servers (the JetStream meta group),
/// so a holder on another node is live, and with one node down nothing is gone: the reconcile
/// of a frozen registration gate answers unknown and leaves it frozen, and once the node is
/// back the same reconcile reopens it.
#[test]
fn f52_cluster_a_silent_member_makes_liveness_unknown_and_reconcile_waits_for_it() {
    let root = trust(3);
    let mut cluster = NatsCluster::start_with(3, options(&root)).unwrap();
    let urls = cluster.urls().join(",");
    let rt = runtime();
    rt.block_on(async {
        let oracle = Arc::new(oracle_of(&root, &cluster.node(0).unwrap().url()));
        let on_other_node = holder_connection(&root, cluster.node(2).unwrap().port(), &holder());
        let probe = oracle.probe(&holder()).await;
        assert_eq!(probe.liveness, Liveness::Live, "{:?}", probe.listing);
        drop(on_other_node);
        let deadline = Instant::now() + Duration::from_secs(5);
        while oracle.probe(&holder()).await.liveness != Liveness::Gone {
            assert!(Instant::now() < deadline, "the closed holder stayed listed");
        }

        // A frozen registration gate whose holder is gone.
        let signer = DataAccountSigner {
            account: root.daemon.data_account().to_owned(),
            signer: Arc::new(root.daemon.data_signing_key().clone()),
        };
        let stores = |create_missing| SpaceOptions {
            replicas: Replicas::Three,
            create_missing,
            stores: StoreSet::of(&[Store::Auth, Store::Records]),
            ..SpaceOptions::default()
        };
        // The mint writer creates the stores; the reconcile connection (the CLI's grant, scoped
        // to this one gate) does the rest.
        let mint = AuthorityClient::open(
            &urls,
            PlaneConnection::AuthMint.label(&space()),
            signer.clone(),
            |conn| plane_grants::auth_mint(&space(), conn).map(Into::into),
            Duration::from_secs(60),
            space(),
            stores(true),
        )
        .await
        .unwrap();
        mint.close().await.unwrap();
        let writer = AuthorityClient::open(
            &urls,
            PlaneConnection::GateReconcile.label(&space()),
            signer,
            |conn| {
                plane_grants::gate_reconcile(&space(), conn, &gate().endpoint, &gate().instance)
                    .map(Into::into)
            },
            Duration::from_secs(60),
            space(),
            stores(false),
        )
        .await
        .unwrap();
        let bound = writer.space().unwrap();
        let g = gate();
        drive(
            &mut Replay::new(ProvisionGate {
                gate: g.clone(),
                principal: holder(),
            }),
            &bound,
        )
        .await
        .unwrap();
        let op = OpId::mint([7; 20]);
        drive(
            &mut Replay::new(script(|cx| {
                let observed = observe_gate(cx, &g)?.unwrap();
                barrier::freeze(cx, &g, &op, &observed)
            })),
            &bound,
        )
        .await
        .unwrap()
        .unwrap();

        cluster.kill_node(2).unwrap();
        let reconcile = |oracle: Arc<Oracle>| {
            let bound = Arc::clone(&bound);
            async move {
                let mut world = NatsWorld::new(&bound);
                world.set_prober(oracle.prober());
                world.set_evictor(oracle.evictor());
                world
                    .run(&mut Replay::new(ReconcileGate { gate: gate() }))
                    .await
            }
        };
        // The stores stay readable with one member down once their leaders settle (a leader on
        // the killed node is re-elected): until then a read times out, which is `unavailable`
        // and leaves the gate as frozen as the verdict does.
        let settle = Instant::now() + Duration::from_secs(20);
        let refused = loop {
            let refused = reconcile(Arc::clone(&oracle)).await.unwrap_err();
            match ReconcileCondition::of(&refused) {
                None if refused.code == ErrorCode::Unavailable && Instant::now() < settle => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => break refused,
            }
        };
        assert_eq!(
            ReconcileCondition::of(&refused),
            Some(ReconcileCondition::HolderUnknown),
            "{refused}"
        );
        let said = oracle.findings().join("\n");
        assert!(said.contains("1 of 3 servers did not answer"), "{said}");
        let still = drive(&mut Replay::new(script(|cx| observe_gate(cx, &g))), &bound)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(still.gate.state(), GateState::Frozen);

        cluster.restart_node(2).unwrap();
        cluster.wait_formed().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let report = loop {
            match reconcile(Arc::clone(&oracle)).await {
                Ok(report) => break report,
                Err(e) if Instant::now() < deadline => {
                    // Unknown while the member rejoins, or a read timing out meanwhile.
                    let transient = ReconcileCondition::of(&e)
                        == Some(ReconcileCondition::HolderUnknown)
                        || (ReconcileCondition::of(&e).is_none()
                            && e.code == ErrorCode::Unavailable);
                    assert!(transient, "{e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("the reconcile never completed once the node was back: {e}"),
            }
        };
        assert_eq!(report.liveness, Liveness::Gone);
        assert_eq!(report.after.generation.0, report.before.generation.0 + 1);
        drop(bound);
        writer.close().await.unwrap();

        plane_claim_on_the_cluster(&root, &mut cluster, &oracle).await;
    });
}

/// The plane claim on the same cluster (§2.10): a held claim whose scanners live refuses a
/// second plane; once they are closed without a release and a member is lost, the two members
/// that still answer (a majority) list the scanners nowhere and the claim is reclaimed.
async fn plane_claim_on_the_cluster(
    root: &TrustRoot,
    cluster: &mut NatsCluster,
    oracle: &Arc<Oracle>,
) {
    let urls = cluster.urls().join(",");
    let signer = DataAccountSigner {
        account: root.daemon.data_account().to_owned(),
        signer: Arc::new(root.daemon.data_signing_key().clone()),
    };
    let open = |role: PlaneConnection, store: Store| {
        let (urls, signer) = (urls.clone(), signer.clone());
        async move {
            AuthorityClient::open(
                &urls,
                role.label(&space()),
                signer,
                move |conn| {
                    match role {
                        PlaneConnection::AuthScan => plane_grants::auth_scan(&space(), conn),
                        PlaneConnection::RecordsScan => plane_grants::records_scan(&space(), conn),
                        _ => plane_grants::auth_barrier(&space(), conn),
                    }
                    .map(Into::into)
                },
                Duration::from_secs(60),
                space(),
                SpaceOptions {
                    replicas: Replicas::Three,
                    create_missing: false,
                    stores: StoreSet::of(&[store]),
                    ..SpaceOptions::default()
                },
            )
            .await
            .unwrap()
        }
    };
    let tuple = |c: &AuthorityClient| {
        let (server, cid) = c.server_connection();
        ConnTuple::new(&server, cid, c.conn_id().as_str()).unwrap()
    };
    let barrier = open(PlaneConnection::AuthBarrier, Store::Auth).await;
    let acquire = |ledger: &AuthorityClient, records: &AuthorityClient, n: u64| AcquirePlaneClaim {
        space: space(),
        claim_id: format!("claim{n}"),
        ledger: tuple(ledger),
        records: tuple(records),
        now_ms: 1_780_000_000_000 + n,
    };
    let run = |acquire: AcquirePlaneClaim| {
        let bound = barrier.space().unwrap();
        let oracle = Arc::clone(oracle);
        async move {
            let mut world = NatsWorld::new(&bound);
            world.set_plane_prober(oracle.plane_prober());
            world.run(&mut Replay::new(acquire)).await
        }
    };
    let (ledger, records) = (
        open(PlaneConnection::AuthScan, Store::Auth).await,
        open(PlaneConnection::RecordsScan, Store::Records).await,
    );
    let first = run(acquire(&ledger, &records, 1)).await.unwrap();
    assert_eq!(first.generation, 1);
    let (ledger2, records2) = (
        open(PlaneConnection::AuthScan, Store::Auth).await,
        open(PlaneConnection::RecordsScan, Store::Records).await,
    );
    let refused = run(acquire(&ledger2, &records2, 2)).await.unwrap_err();
    assert_eq!(
        ClaimRefusal::of(&refused),
        Some(ClaimRefusal::LivePeer),
        "{refused}"
    );

    // The first plane dies without releasing, and one member of the three is lost with it.
    // The two that answer are a majority of the meta group: the lost one has departed the
    // cluster (it can commit nothing), so scanners listed on neither answering server are gone
    // and the claim is reclaimed without waiting for the member (the deviation in
    // `Sweep::plane_verdict`; the reference waits). Reads may time out meanwhile, while a
    // leader on the killed node is re-elected.
    ledger.close().await.unwrap();
    records.close().await.unwrap();
    cluster.kill_node(1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let hold = loop {
        match run(acquire(&ledger2, &records2, 2)).await {
            Ok(hold) => break hold,
            Err(e) if Instant::now() < deadline => {
                let transient = ClaimRefusal::of(&e) == Some(ClaimRefusal::Unknown)
                    || (ClaimRefusal::of(&e).is_none() && e.code == ErrorCode::Unavailable);
                assert!(transient, "{e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the claim was never reclaimed with a majority answering: {e}"),
        }
    };
    cluster.restart_node(1).unwrap();
    cluster.wait_formed().unwrap();
    assert_eq!((hold.generation, hold.reclaimed), (2, true));
    for client in [ledger2, records2, barrier] {
        client.close().await.unwrap();
    }
}
