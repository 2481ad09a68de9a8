//! Sign-in end to end on the running daemon (the auth-callout and deny-new cells of reference
//! §11.7 and §11.2): a human signs in at the development IdP, exchanges at `/exchange`, and a
//! standard NATS client (async-nats) connects with the space's deny-all sentinel creds plus the
//! bearer; the server asks the plane over the auth callout, which admits it with exactly its
//! grant — or, after a revoke, a re-grant or the bearer's expiry, refuses it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::time::Duration;

use common::signin::{connect, post, post_to, refused, Space};
use common::*;
use cotal_io_nats::async_nats::{self, ConnectOptions};
use serde_json::{json, Value};

const NONCE: &str = "ibxsignin0001";

fn exchange(space: &Space, d: &Value, ttl: u64) -> String {
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token("alice"), "actor": "cli", "ttlSec": ttl}),
    );
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

fn grant_team(space: &Space) {
    space.grant_lists("cli", "alice", "", "team", "team");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_callout_a_signed_in_human_connects_with_exactly_its_grant() {
    let mut space = Space::new();
    grant_team(&space);
    let d = space.up(&[]);
    let server = server_url(&space.root);
    let token = exchange(&space, &d, 120);
    let owner = space.owner("alice");

    let (client, mut errors) = connect(&space, &server, &token, NONCE).await.unwrap();
    let mut live = client.subscribe("cotal.t1.chat.*.*.team").await.unwrap();
    client.flush().await.unwrap();

    // The server lists the connection under the minted user JWT's name, the principal's dash
    // form as the reference names a callout user, and liveness attributes it to the principal.
    let space_name = cotal_core::names::SpaceName::parse(SPACE).unwrap();
    let material = cotal_io_fs::trust::load_daemon(&space.root, &space_name).unwrap();
    let oracle = cotal_io_nats::liveness::Oracle::new(
        &server,
        material.system_user().creds(),
        material.data_account(),
        "test-sweep".to_owned(),
    );
    let cotal_core::liveness::Listing::Complete(conns) = oracle.sweep().await else {
        panic!("the sweep is incomplete")
    };
    let ours = conns.iter().find(|c| c.name == NONCE).unwrap();
    assert_eq!(ours.user.as_deref(), Some(format!("{owner}-cli").as_str()));
    assert_eq!(
        ours.principal.as_ref().map(|p| p.key()),
        Some(format!("{owner}.cli"))
    );
    let permitted = format!("cotal.t1.chat.{owner}.cli.team");
    client
        .publish(permitted.clone(), "hello".into())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), futures_next(&mut live))
        .await
        .expect("the permitted publish was delivered");
    assert_eq!(got.subject.as_str(), permitted);
    assert_eq!(&got.payload[..], b"hello");

    // A channel outside the grant: the server refuses the publish.
    client
        .publish(format!("cotal.t1.chat.{owner}.cli.secret"), "no".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let violation = tokio::time::timeout(Duration::from_secs(5), errors.recv())
        .await
        .expect("a permissions violation")
        .unwrap();
    assert!(
        violation.to_lowercase().contains("permissions violation"),
        "{violation}"
    );

    // A wildcard or dotted nonce never keys an inbox.
    refused(connect(&space, &server, &token, ">").await);
    refused(connect(&space, &server, &token, "a.b.c.d.e.f").await);
    // A bearer this plane did not sign, or none at all.
    refused(connect(&space, &server, "junk.junk.junk", NONCE).await);
    refused(connect(&space, &server, "", NONCE).await);

    // Every decision is counted by operation, outcome and code.
    let (_, _, metrics) = http(d["url"].as_str().unwrap(), "GET", "/metrics", &[], "").unwrap();
    let count = |labels: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("cotal_authority_decisions_total{{{labels}}}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(
        count(r#"operation="connect",outcome="granted",code="""#),
        1,
        "{metrics}"
    );
    assert_eq!(
        count(r#"operation="exchange",outcome="granted",code="""#),
        1,
        "{metrics}"
    );
    assert_eq!(
        count(r#"operation="connect",outcome="refused",code="permission-denied""#),
        4,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_new_revoke_and_regrant_shut_the_next_connect() {
    let mut space = Space::new();
    grant_team(&space);
    let d = space.up(&[]);
    let server = server_url(&space.root);
    let token = exchange(&space, &d, 120);
    let (first, _) = connect(&space, &server, &token, NONCE).await.unwrap();
    first.flush().await.unwrap();

    // Revoked: the ledger row is gone, so the same bearer is refused at its next connect.
    space.authd(&[
        "actor",
        "revoke",
        "cli",
        "--space",
        SPACE,
        "--idp-subject",
        "alice",
    ]);
    refused(connect(&space, &server, &token, "ibxsignin0002").await);

    // Re-granted: a new lifecycle; the predecessor's bearer is refused.
    grant_team(&space);
    refused(connect(&space, &server, &token, "ibxsignin0003").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_callout_an_expired_bearer_is_refused() {
    let mut space = Space::new();
    grant_team(&space);
    let d = space.up(&[]);
    let server = server_url(&space.root);
    let token = exchange(&space, &d, 1);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    refused(connect(&space, &server, &token, NONCE).await);
}

async fn futures_next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    use futures::StreamExt as _;
    sub.next().await.unwrap()
}

/// `login` is the README's path: the bundle it writes (0600) is all a standard client needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_writes_a_bundle_a_standard_client_connects_with() {
    use std::os::unix::fs::PermissionsExt;
    let mut space = Space::new();
    grant_team(&space);
    space.up(&[]);
    let said = space.authd(&[
        "login",
        "--space",
        SPACE,
        "--actor",
        "cli",
        "--dev-subject",
        "alice",
    ]);
    assert!(said.contains("signed in as actor cli"), "{said}");
    let dir = space.root.join("login").join(SEGMENT).join("cli");
    let record: Value = serde_json::from_slice(&fs::read(dir.join("login.json")).unwrap()).unwrap();
    // The bearer's expiry, said as RFC 3339 UTC, not as unix seconds.
    let exp = record["exp"].as_u64().unwrap();
    let until = format!("until {};", cotal_authd::clock::rfc3339_secs(exp));
    assert!(said.contains(&until), "{said}");
    for file in ["login.json", "sentinel.creds", "bearer"] {
        let mode = fs::metadata(dir.join(file)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
    let creds = fs::read_to_string(record["creds"].as_str().unwrap()).unwrap();
    let token = fs::read_to_string(record["bearer"].as_str().unwrap()).unwrap();
    let client = ConnectOptions::new()
        .credentials(&creds)
        .unwrap()
        .token(token)
        .name(NONCE)
        .custom_inbox_prefix(format!("_INBOX_{NONCE}"))
        .max_reconnects(Some(0))
        .connect(record["server"].as_str().unwrap())
        .await
        .unwrap();
    client.flush().await.unwrap();
    // Without a grant, login says what to run.
    let out = command()
        .args([
            "login",
            "--space",
            SPACE,
            "--actor",
            "ops",
            "--dev-subject",
            "alice",
            "--state-dir",
        ])
        .arg(&space.root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cotal-authd actor grant ops"));
}

/// deny-new `revoked row → next connect denied and exchange refused ("barrier")`: the operator
/// revokes the incarnation's root credential on the server; the live bearer's next connect and
/// the next exchange are both refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_new_a_revoked_root_credential_denies_the_next_connect_and_the_exchange() {
    let mut space = Space::new();
    grant_team(&space);
    let d = space.up(&[]);
    let server = server_url(&space.root);
    let token = exchange(&space, &d, 120);
    connect(&space, &server, &token, NONCE).await.unwrap();
    let said = space.authd(&[
        "actor",
        "revoke",
        "cli",
        "--space",
        SPACE,
        "--idp-subject",
        "alice",
        "--credential",
    ]);
    assert!(said.contains("revoked the root credential cred."), "{said}");
    refused(connect(&space, &server, &token, "ibxsignin0004").await);
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token("alice"), "actor": "cli"}),
    );
    assert_eq!(status, 401);
    assert!(
        body["error"].as_str().unwrap().contains("barrier"),
        "{body}"
    );
    let again = space.authd(&[
        "actor",
        "revoke",
        "cli",
        "--space",
        SPACE,
        "--idp-subject",
        "alice",
        "--credential",
    ]);
    assert!(again.contains("already revoked"), "{again}");
}

/// deny-new `plane closed → valid bearer denied`: the space's server keeps running (started
/// here from `broker-config`), the plane stops, and nobody answers its callout any more, so
/// even a valid bearer is not admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_new_a_closed_plane_admits_no_bearer() {
    let mut space = Space::new();
    grant_team(&space);
    let server = space.serve_broker();
    let d = space.up(&["--server", &server]);
    let token = exchange(&space, &d, 120);
    connect(&space, &server, &token, NONCE).await.unwrap();
    let mut plane = space.reaper.0.pop().unwrap();
    signal(&plane, rustix::process::Signal::TERM);
    assert!(exits(&mut plane, EXIT_TIMEOUT).success());
    assert!(
        std::net::TcpStream::connect(server.trim_start_matches("nats://")).is_ok(),
        "the server still runs"
    );
    refused(connect(&space, &server, &token, "ibxsignin0005").await);
}

fn retire(d: &Value, body: &Value) -> (u16, Value) {
    post_to(
        d["url"].as_str().unwrap(),
        "/interactive-lifecycle/retire",
        d["cap"].as_str(),
        body,
    )
}

/// The interactive retire door (reference §3.9, the retirement barrier): the live incarnation's
/// rows are revoked and its connection kicked; afterwards only a re-grant (a fresh lifecycle)
/// exchanges again — the way out of the "takeover" refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_retire_door_retires_the_live_incarnation_and_a_regrant_exchanges_again() {
    let mut space = Space::new();
    grant_team(&space);
    let d = space.up(&[]);
    let server = server_url(&space.root);
    let token = exchange(&space, &d, 120);
    let (client, _) = connect(&space, &server, &token, NONCE).await.unwrap();
    client.flush().await.unwrap();
    let owner = space.owner("alice");
    let uid = space.row("alice", "cli")["lifecycleUid"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = json!({"owner": owner, "actor": "cli", "lifecycleUid": uid});

    let (status, answer) = retire(
        &d,
        &json!({"owner": owner, "actor": "cli", "lifecycleUid": uid, "x": 1}),
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("unknown field \"x\""),
        "{answer}"
    );
    let (status, _) = retire(
        &d,
        &json!({"owner": owner, "actor": "ops", "lifecycleUid": uid}),
    );
    assert_eq!(status, 404);

    let (status, answer) = retire(&d, &body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({"retired": true, "lifecycleUid": uid}));
    // Its connection was evicted, and its bearer admits nothing any more.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while client.connection_state() == async_nats::connection::State::Connected {
        assert!(
            std::time::Instant::now() < deadline,
            "the retired holder was not evicted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    refused(connect(&space, &server, &token, "ibxsignin0006").await);
    let (status, answer) = retire(&d, &body);
    assert_eq!(
        (status, answer["alreadyRetired"].clone()),
        (200, json!(true))
    );
    let said = space.authd(&[
        "actor",
        "retire",
        "cli",
        "--space",
        SPACE,
        "--idp-subject",
        "alice",
    ]);
    assert!(
        said.contains("already retired"),
        "the operator's verb asks the same door: {said}"
    );

    // The grant still names the retired uid: its exchange is refused; a re-grant exchanges.
    let (status, _) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token("alice"), "actor": "cli"}),
    );
    assert_eq!(status, 401);
    grant_team(&space);
    let (status, answer) = retire(&d, &body);
    assert_eq!(
        (status, answer["alreadyRetired"].clone()),
        (200, json!(true)),
        "a superseded incarnation is still the interactive door's to answer for"
    );
    let fresh = exchange(&space, &d, 120);
    connect(&space, &server, &fresh, "ibxsignin0007")
        .await
        .unwrap();
}
