//! An inbox reachable only by its principal (issue 26 item 1), on real servers with real
//! clients: alice connects under her inbox nonce and pulls her DM mailbox through it; bob, who
//! read the nonce off her reply subjects, connects under the same name and is refused, and
//! cannot subscribe to her inbox from a connection of his own; alice's reconnects under the
//! nonce, and her pulls, keep working, also across a restart of the plane. Two first connects
//! of different principals racing on one fresh nonce: exactly one is admitted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::Duration;

use common::signin::{connect, post, refused, Space};
use common::*;
use cotal_io_nats::async_nats::jetstream::{self, consumer, stream};
use cotal_io_nats::async_nats::Client;
use futures::StreamExt as _;
use rustix::process::Signal;
use serde_json::{json, Value};

/// Alice's inbox nonce: a standard client's, chosen by the client and reused on reconnect.
const NONCE: &str = "ibxalice00000000000001";
/// Bob's own nonce.
const BOB_NONCE: &str = "ibxbob0000000000000001";

fn exchange(space: &Space, d: &Value, subject: &str) -> String {
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token(subject), "actor": "cli", "ttlSec": 300}),
    );
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

/// What `cotal up` would provision: the DM stream, and alice's lifecycle-keyed DM mailbox (a
/// pull consumer on her principal's DM subjects).
async fn provision_dm(space: &Space, server: &str, owner: &str, uid: &str) -> String {
    let admin = space.admin(server).await;
    let js = jetstream::new(admin.space().unwrap().client().clone());
    js.create_stream(stream::Config {
        name: format!("DM_{SPACE}"),
        subjects: vec![format!("cotal.{SPACE}.inst.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    let durable = format!("dm_{owner}-cli-{uid}");
    js.create_consumer_on_stream(
        consumer::pull::Config {
            durable_name: Some(durable.clone()),
            filter_subject: format!("cotal.{SPACE}.inst.{owner}.cli.>"),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        },
        format!("DM_{SPACE}"),
    )
    .await
    .unwrap();
    admin.close().await.unwrap();
    durable
}

/// One pull of alice's DM mailbox as a client makes it: the request's reply subject is under
/// her inbox, the delivered message lands there, and she acknowledges it.
async fn pull_one(client: &Client, durable: &str, reply: &str) -> String {
    let mut inbox = client.subscribe(reply.to_owned()).await.unwrap();
    client.flush().await.unwrap();
    client
        .publish_with_reply(
            format!("$JS.API.CONSUMER.MSG.NEXT.DM_{SPACE}.{durable}"),
            reply.to_owned(),
            json!({"batch": 1, "expires": 10_000_000_000u64})
                .to_string()
                .into(),
        )
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), inbox.next())
        .await
        .expect("the pull delivers")
        .unwrap();
    let ack = got
        .reply
        .clone()
        .expect("a pulled message carries its ack subject");
    client.publish(ack, "+ACK".into()).await.unwrap();
    client.flush().await.unwrap();
    String::from_utf8(got.payload.to_vec()).unwrap()
}

/// Bob sends alice a DM on his own connection (his grant: `inst.*.*.<bob>`).
async fn dm(bob: &Client, alice_owner: &str, bob_owner: &str, body: &str) {
    bob.publish(
        format!("cotal.{SPACE}.inst.{alice_owner}.cli.{bob_owner}.cli"),
        body.to_owned().into(),
    )
    .await
    .unwrap();
    bob.flush().await.unwrap();
}

fn refusals(d: &Value) -> u64 {
    let (_, _, metrics) = http(d["url"].as_str().unwrap(), "GET", "/metrics", &[], "").unwrap();
    metrics
        .lines()
        .find(|l| {
            l.starts_with(
                r#"cotal_authority_decisions_total{operation="connect",outcome="refused",code="permission-denied"}"#,
            )
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_nonce_admits_only_its_principal() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    space.grant_lists("cli", "bob", "", "team", "team");
    let server = space.serve_broker();
    let d = space.up(&["--server", &server]);
    let (alice_owner, bob_owner) = (space.owner("alice"), space.owner("bob"));
    let alice_token = exchange(&space, &d, "alice");
    let bob_token = exchange(&space, &d, "bob");
    let uid = space.row("alice", "cli")["lifecycleUid"]
        .as_str()
        .unwrap()
        .to_owned();
    let durable = provision_dm(&space, &server, &alice_owner, &uid).await;

    // Alice connects under her nonce and pulls a DM through her inbox.
    let (alice, _) = connect(&space, &server, &alice_token, NONCE).await.unwrap();
    let (bob, mut bob_errors) = connect(&space, &server, &bob_token, BOB_NONCE)
        .await
        .unwrap();
    dm(&bob, &alice_owner, &bob_owner, "for alice 1").await;
    let reply = format!("_INBOX_{NONCE}.pull1");
    assert_eq!(pull_one(&alice, &durable, &reply).await, "for alice 1");

    // Bob learned the nonce from that reply subject. Connecting under it is refused (before
    // this rule the server admitted him with `_INBOX_<nonce>.>` and delivered alice's next
    // pull to him), and counted as a permission-denied connect.
    let before = refusals(&d);
    refused(connect(&space, &server, &bob_token, NONCE).await);
    assert_eq!(refusals(&d), before + 1);
    // Nor can his own connection reach her inbox: the server refuses the subscription.
    let _denied = bob.subscribe(format!("_INBOX_{NONCE}.>")).await.unwrap();
    bob.flush().await.unwrap();
    let violation = tokio::time::timeout(Duration::from_secs(5), bob_errors.recv())
        .await
        .expect("a permissions violation")
        .unwrap();
    assert!(
        violation.to_lowercase().contains("permissions violation"),
        "{violation}"
    );

    // Alice's reconnect under the same nonce (beside her live connection, then alone) is
    // admitted, and her pulls keep arriving.
    dm(&bob, &alice_owner, &bob_owner, "for alice 2").await;
    let (again, _) = connect(&space, &server, &alice_token, NONCE).await.unwrap();
    alice.drain().await.unwrap();
    let reply = format!("_INBOX_{NONCE}.pull2");
    assert_eq!(pull_one(&again, &durable, &reply).await, "for alice 2");
    again.drain().await.unwrap();

    // The binding is on the store, not in the plane: a restarted plane keeps it.
    let mut plane = space.reaper.0.pop().unwrap();
    signal(&plane, Signal::TERM);
    assert!(exits(&mut plane, EXIT_TIMEOUT).success());
    let d = space.up(&["--server", &server]);
    refused(connect(&space, &server, &bob_token, NONCE).await);
    dm(&bob, &alice_owner, &bob_owner, "for alice 3").await;
    let (after, _) = connect(&space, &server, &alice_token, NONCE).await.unwrap();
    let reply = format!("_INBOX_{NONCE}.pull3");
    assert_eq!(pull_one(&after, &durable, &reply).await, "for alice 3");
    assert_eq!(refusals(&d), 1, "the restarted plane refused bob once");
}

/// Two first connects of different principals on one fresh nonce, at once: the store's
/// create-only write decides, exactly one is admitted, and from then on only its principal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_connects_bind_exactly_one_principal() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    space.grant_lists("cli", "bob", "", "team", "team");
    let d = space.up(&[]);
    let server = server_url(&space.root);
    let alice_token = exchange(&space, &d, "alice");
    let bob_token = exchange(&space, &d, "bob");
    for round in 0..5 {
        let nonce = format!("ibxrace{round:016}");
        let (a, b) = tokio::join!(
            connect(&space, &server, &alice_token, &nonce),
            connect(&space, &server, &bob_token, &nonce),
        );
        let (winner, loser) = match (a.is_ok(), b.is_ok()) {
            (true, false) => (&alice_token, &bob_token),
            (false, true) => (&bob_token, &alice_token),
            (x, y) => panic!("round {round}: alice admitted {x}, bob admitted {y}"),
        };
        refused(connect(&space, &server, loser, &nonce).await);
        connect(&space, &server, winner, &nonce).await.unwrap();
    }
}
