//! The replicated actor ledger on a real operator-mode `nats-server` (issue 27): `KvActors`
//! over the `cotal:actor-ledger:<space>` connection's grant, which creates and proves its own
//! store; every plane of the space reads the same rows fresh per call, so a second plane (a
//! standby on another host) sees a grant and a revoke the moment the first one acknowledged
//! them; a row the grammar refuses fails closed; a request over a closed connection is
//! `unavailable`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::Duration;

use cotal_core::actors::kv_rows::row_key;
use cotal_core::actors::{ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, Held, RowSpace};
use cotal_core::kv::{KvRequest, Store};
use cotal_core::names::{ActorToken, LifecycleUid, OwnerToken, Principal, SpaceName};
use cotal_core::plane_grants::{actor_ledger, PlaneConnection};
use cotal_core::EpError;
use cotal_io_nats::driver::ask_ledger;
use cotal_io_nats::{AuthorityClient, DataAccountSigner, KvActors, SpaceOptions, StoreSet};
use cotal_tests::nats::operator::OperatorServer;
use cotal_tests::nats::wall_clock;
use nkeys::KeyPair;

const SPACE: &str = "ledger";
const OWNER: &str = "u_cccccccccccccccccccccccccc";

fn space() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn principal(a: &str) -> Principal {
    Principal::new(
        OwnerToken::parse(OWNER).unwrap(),
        ActorToken::parse(a).unwrap(),
    )
}

fn row(a: &str, uid: u8) -> ActorRow {
    ActorRow {
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: ActorToken::parse(a).unwrap(),
        scope: vec![],
        allow_subscribe: vec!["team.>".into()],
        allow_publish: vec!["team.>".into()],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(LifecycleUid::mint([uid; 20])),
        granted_at: "2023-11-14T22:13:20.000Z".into(),
    }
}

/// One plane's ledger: its own `actor-ledger` connection, creating the store if missing.
async fn plane(live: &OperatorServer) -> (Arc<AuthorityClient>, Arc<dyn ActorLedger>) {
    let client = AuthorityClient::open(
        &live.server.url(),
        PlaneConnection::ActorLedger.label(&space()),
        DataAccountSigner {
            account: live.account.public_key(),
            signer: Arc::new(KeyPair::from_seed(&live.signing.seed().unwrap()).unwrap()),
        },
        |conn| actor_ledger(&space(), conn).map(Into::into),
        Duration::from_secs(900),
        space(),
        SpaceOptions {
            request_timeout: Duration::from_secs(2),
            create_missing: true,
            stores: StoreSet::of(&[Store::Actors]),
            ..SpaceOptions::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}\n{}", e.message, live.server.log_tail()));
    let client = Arc::new(client);
    // The ledger holds the connection weakly, as the plane's does (the plane closes its
    // connections in order; a request after that finds none).
    let current = {
        let client = Arc::downgrade(&client);
        Arc::new(move || {
            client
                .upgrade()
                .ok_or_else(|| EpError::unavailable("the ledger's connection is closed"))?
                .space()
        })
    };
    let ledger = KvActors::new(&space(), current, tokio::runtime::Handle::current());
    (client, Arc::new(ledger))
}

async fn ask(ledger: &Arc<dyn ActorLedger>, request: ActorsRequest) -> ActorsOutcome {
    ask_ledger(ledger, &request).await
}

#[tokio::test]
async fn two_planes_serve_the_same_rows_fresh_per_call() {
    let live = OperatorServer::start(wall_clock()).unwrap();
    let (_a_conn, active) = plane(&live).await;
    let (_b_conn, standby) = plane(&live).await;

    let alice = row("alice", 1);
    assert_eq!(
        ask(&active, ActorsRequest::GrantInteractive(alice.clone())).await,
        ActorsOutcome::Granted(alice.clone())
    );
    // The standby sees the grant the active acknowledged, at once.
    let find = || ActorsRequest::FindUnified {
        principal: principal("alice"),
    };
    assert_eq!(
        ask(&standby, find()).await,
        ActorsOutcome::Found(Some(Held {
            space: RowSpace::Interactive,
            row: alice,
        }))
    );
    // And the revoke.
    assert_eq!(
        ask(
            &active,
            ActorsRequest::RevokeInteractive {
                principal: principal("alice")
            }
        )
        .await,
        ActorsOutcome::Revoked(true)
    );
    assert_eq!(ask(&standby, find()).await, ActorsOutcome::Found(None));
    // A re-grant by the standby (after a takeover) writes over the marker.
    let again = row("alice", 2);
    assert_eq!(
        ask(&standby, ActorsRequest::GrantInteractive(again.clone())).await,
        ActorsOutcome::Granted(again.clone())
    );
    assert_eq!(
        ask(
            &active,
            ActorsRequest::List {
                space: RowSpace::Interactive
            }
        )
        .await,
        ActorsOutcome::Listed(vec![Ok(again)])
    );
}

#[tokio::test]
async fn a_broken_row_fails_closed_and_a_closed_connection_is_unavailable() {
    let live = OperatorServer::start(wall_clock()).unwrap();
    let (conn, ledger) = plane(&live).await;
    let key = row_key(RowSpace::Interactive, &principal("mallory"));
    conn.space()
        .unwrap()
        .execute(&KvRequest::CreateStrict {
            store: Store::Actors,
            key: key.clone(),
            value: b"{\"ver\":1}".to_vec(),
        })
        .await;
    let ActorsOutcome::Corrupt(why) = ask(
        &ledger,
        ActorsRequest::FindUnified {
            principal: principal("mallory"),
        },
    )
    .await
    else {
        panic!("a broken row was read as one")
    };
    assert!(
        why.starts_with(&format!("cotal_actors_{SPACE} key {key}: ")),
        "{why}"
    );

    Arc::try_unwrap(conn).ok().unwrap().close().await.unwrap();
    let ActorsOutcome::Unavailable(why) = ask(
        &ledger,
        ActorsRequest::FindUnified {
            principal: principal("alice"),
        },
    )
    .await
    else {
        panic!("a closed ledger connection answered")
    };
    assert!(why.contains("cannot be reached"), "{why}");
}
