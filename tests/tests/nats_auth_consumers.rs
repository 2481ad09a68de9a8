//! F98 on a real operator-mode `nats-server` 2.15.1: the one credential that may create a
//! consumer on `KV_cotal_auth_<space>` — a remote manager's five-minute executor, for the
//! reference barrier's `kv.keys` — tries to plant an exporter. The filter-subject create form
//! its grant pins admits only its own instance's family (a wider filter is a permissions
//! violation; a body whose filter differs from the subject's is refused by the server), and the
//! plane's reaper, on the sealed auth scanner's grant, deletes every consumer on the stream
//! older than the executor's lifetime, so a planted one never outlives its creator.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cotal_core::jwt::Creds;
use cotal_core::kv::Store;
use cotal_core::names::{InstanceId, OwnerToken, SpaceName};
use cotal_core::plane_grants::{auth_mint, auth_scan, PlaneConnection};
use cotal_core::profiles::{remote_manager, ConnId, ManagerRole, RemoteManagerBinding};
use cotal_io_nats::async_nats;
use cotal_io_nats::async_nats::jetstream::{self, consumer};
use cotal_io_nats::reaper::{reap_auth_consumers, MAX_CONSUMER_AGE};
use cotal_io_nats::{AuthorityClient, DataAccountSigner, SpaceOptions, StoreSet};
use cotal_tests::nats::operator::OperatorServer;
use cotal_tests::nats::wall_clock;
use futures::TryStreamExt;
use nkeys::KeyPair;
use serde_json::{json, Value};

const SPACE: &str = "reap";
const IID: &str = "0123456789abcdefghijklmnop";
const OTHER_IID: &str = "zyxwvutsrqponmlkjihgfedcba";
const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
const STREAM: &str = "KV_cotal_auth_reap";

fn space() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn family(iid: &str) -> String {
    format!("$KV.cotal_auth_{SPACE}.epcred.manager.{iid}.>")
}

async fn plane_connection(
    live: &OperatorServer,
    role: PlaneConnection,
    grant: fn(&SpaceName, &ConnId) -> Result<cotal_core::jwt::Permissions, cotal_core::EpError>,
    create: bool,
) -> AuthorityClient {
    AuthorityClient::open(
        &live.server.url(),
        role.label(&space()),
        DataAccountSigner {
            account: live.account.public_key(),
            signer: Arc::new(KeyPair::from_seed(&live.signing.seed().unwrap()).unwrap()),
        },
        move |conn| grant(&space(), conn).map(Into::into),
        Duration::from_secs(600),
        space(),
        SpaceOptions {
            request_timeout: Duration::from_secs(2),
            create_missing: create,
            stores: StoreSet::of(&[Store::Auth]),
            ..SpaceOptions::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{role}: {}", e.message))
}

/// A connection holding the executor credential the plane issues for manager [`IID`].
async fn executor(live: &OperatorServer) -> async_nats::Client {
    let key = KeyPair::new_user();
    let profile = remote_manager(&RemoteManagerBinding {
        space: space(),
        owner: OwnerToken::parse(OWNER).unwrap(),
        instance: InstanceId::parse(IID).unwrap(),
        conn: ConnId::parse(&key.public_key()).unwrap(),
        role: ManagerRole::Executor,
    })
    .unwrap();
    let issued = profile
        .sign_for(
            &live.signing,
            &live.account.public_key(),
            &key.public_key(),
            wall_clock(),
        )
        .unwrap();
    let creds = Creds {
        jwt: issued.jwt,
        seed: key.seed().unwrap(),
    };
    async_nats::ConnectOptions::with_credentials(&creds.text())
        .unwrap()
        .custom_inbox_prefix(format!("_INBOX_{}", key.public_key()))
        .connect(live.server.url())
        .await
        .unwrap()
}

/// A push consumer config named `name`, durable, delivering `filter` to `deliver`.
fn exporter(name: &str, filter: &str, deliver: &str) -> consumer::push::Config {
    consumer::push::Config {
        name: Some(name.to_owned()),
        durable_name: Some(name.to_owned()),
        deliver_subject: deliver.to_owned(),
        filter_subject: filter.to_owned(),
        ..Default::default()
    }
}

async fn consumer_names(scan: &AuthorityClient) -> Vec<String> {
    let js = jetstream::new(scan.space().unwrap().client().clone());
    let stream = js.get_stream_no_info(STREAM).await.unwrap();
    let mut names: Vec<String> = stream
        .consumers()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn f98_an_executors_planted_auth_consumer_is_pinned_to_its_family_and_reaped() {
    let live = OperatorServer::start(wall_clock()).unwrap();
    let mint = plane_connection(&live, PlaneConnection::AuthMint, auth_mint, true).await;
    let scan = plane_connection(&live, PlaneConnection::AuthScan, auth_scan, false).await;
    let client = executor(&live).await;
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(client.clone());

    // A durable push exporter over its own family, delivering to a subject of its choosing:
    // the grant admits it (the reference barrier's listing uses the same create form).
    js.create_consumer_on_stream(exporter("planted", &family(IID), "elsewhere.x"), STREAM)
        .await
        .expect("the executor may list its own family");

    // The whole bucket, or another instance's family: the server refuses the publish, so no
    // reply comes and nothing is created.
    for filter in [format!("$KV.cotal_auth_{SPACE}.>"), family(OTHER_IID)] {
        let wide = js
            .create_consumer_on_stream(exporter("wide", &filter, "elsewhere.y"), STREAM)
            .await;
        assert!(wide.is_err(), "{filter}: {wide:?}");
    }

    // The pinned subject with a wider filter in the body: the server checks one against the
    // other (10131).
    let subject = format!("CONSUMER.CREATE.{STREAM}.sneaky.{}", family(IID));
    let body = json!({"stream_name": STREAM, "config": {
        "name": "sneaky", "durable_name": "sneaky", "deliver_subject": "elsewhere.z",
        "filter_subject": format!("$KV.cotal_auth_{SPACE}.>"), "ack_policy": "none"}});
    let answer: Value = js.request(subject, &body).await.unwrap();
    assert_eq!(answer["error"]["err_code"], 10131, "{answer}");

    assert_eq!(consumer_names(&scan).await, ["planted"]);

    // The reaper keeps a consumer younger than the executor's lifetime and deletes one that
    // outlived it (here: judged at a clock past that lifetime).
    let bound = scan.space().unwrap();
    let young = reap_auth_consumers(
        bound.client(),
        &space(),
        MAX_CONSUMER_AGE,
        SystemTime::now(),
    )
    .await
    .unwrap();
    assert_eq!((young.deleted.len(), young.kept), (0, 1));
    let later = SystemTime::now() + MAX_CONSUMER_AGE + Duration::from_secs(1);
    let old = reap_auth_consumers(bound.client(), &space(), MAX_CONSUMER_AGE, later)
        .await
        .unwrap();
    assert_eq!(old.deleted, ["planted"]);
    assert!(consumer_names(&scan).await.is_empty());

    client.drain().await.unwrap();
    scan.close().await.unwrap();
    mint.close().await.unwrap();
}
