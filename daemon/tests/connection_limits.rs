//! The per-connection limits of the plane's users, enforced by the real nats-server: a signed-in
//! client admitted through the auth callout holds exactly as many subscriptions as the data
//! account's per-connection ceiling ([`HOST_LIMITS`], written into the account JWT at `init`)
//! allows, and the server refuses the next one. That ceiling is what binds a callout-admitted
//! connection: nats-server (since 2.11) drops the callout-minted user JWT after reading its
//! permissions, so that JWT's own finite limits ([`CONNECT_LIMITS`], pinned by the core's
//! profile tests) are stated, not applied.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::Duration;

use common::signin::{connect, post, Space};
use common::*;
use cotal_core::profiles::{CONNECT_LIMITS, HOST_LIMITS};
use cotal_io_nats::async_nats;
use serde_json::json;

const NONCE: &str = "ibxlimits0001";

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    use futures::StreamExt as _;
    sub.next().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callout_admitted_connection_holds_the_accounts_subscription_ceiling_and_no_more() {
    const { assert!(CONNECT_LIMITS.subs <= HOST_LIMITS.subs) };
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    let d = space.up(&[]);
    let server = server_url(&space.root);
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token("alice"), "actor": "cli", "ttlSec": 300}),
    );
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap();
    let owner = space.owner("alice");
    let (client, mut errors) = connect(&space, &server, token, NONCE).await.unwrap();

    // Up to the ceiling, every subscription is live: the last one receives a publish.
    let subject = format!("cotal.t1.chat.{owner}.cli.team");
    let limit = usize::try_from(HOST_LIMITS.subs).unwrap();
    let mut subs = Vec::with_capacity(limit);
    for _ in 0..limit {
        subs.push(client.subscribe(subject.clone()).await.unwrap());
    }
    client.flush().await.unwrap();
    client.publish(subject.clone(), "in".into()).await.unwrap();
    let last = subs.last_mut().unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), next(last))
        .await
        .expect("the subscription at the ceiling is live");
    assert_eq!(&got.payload[..], b"in");

    // One more is refused by the server (its own `max_subs` is unlimited in the embedded
    // configuration, so the refusal is the account's limit).
    let _over = client.subscribe(subject.clone()).await.unwrap();
    client.flush().await.unwrap();
    let refusal = tokio::time::timeout(Duration::from_secs(30), errors.recv())
        .await
        .expect("the server refuses the subscription over the ceiling")
        .unwrap();
    assert!(
        refusal
            .to_lowercase()
            .contains("maximum subscriptions exceeded"),
        "{refusal}"
    );
}
