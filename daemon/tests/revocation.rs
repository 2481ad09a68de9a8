//! Revocation that reaches the live layer (issue 26 item 4; spec §4.0 kill-live, F47 (4), F59,
//! F60): `actor revoke`, `revoke --credential`, a re-grant and a retirement kick the affected
//! live connections and verify them gone through the running plane or the servers' own
//! listing; every order of revoke, grant and retire leaves the actor able to exchange and
//! connect after a final grant; and each retire door refuses the other kind's alias (F49).
//! Real servers and real clients: the plane `up` runs, a standard NATS client connects
//! through the auth callout.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::{Duration, Instant};

use common::signin::{connect, post, post_to, refused, Space};
use common::*;
use cotal_io_nats::async_nats::{self, Client};
use serde_json::{json, Value};

const HUMAN: &str = "alice";

fn exchange(space: &Space, d: &Value, actor: &str) -> (u16, Value) {
    post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token(HUMAN), "actor": actor, "ttlSec": 300}),
    )
}

fn bearer(space: &Space, d: &Value, actor: &str) -> String {
    match exchange(space, d, actor) {
        (200, body) => body["token"].as_str().unwrap().to_owned(),
        other => panic!("the exchange of {actor} was refused: {other:?}"),
    }
}

/// The verb with the actor's owner and space, and its one-line outcome (success or not).
fn verb(space: &Space, args: &[&str]) -> (bool, String) {
    let out = command()
        .args(args)
        .args(["--space", SPACE, "--idp-subject", HUMAN, "--state-dir"])
        .arg(&space.root)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let text = if out.status.success() {
        out.stdout
    } else {
        out.stderr
    };
    let said = String::from_utf8(text).unwrap().trim().to_owned();
    assert_eq!(said.lines().count(), 1, "one sentence: {said}");
    (out.status.success(), said)
}

/// The verb, which must succeed, and its sentence.
fn said(space: &Space, args: &[&str]) -> String {
    let (ok, said) = verb(space, args);
    assert!(ok, "{args:?}: {said}");
    said
}

fn uid(space: &Space, actor: &str) -> String {
    space.row(HUMAN, actor)["lifecycleUid"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits (bounded) for the server to close `client`'s connection.
async fn closed(client: &Client, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.connection_state() == async_nats::connection::State::Connected {
        assert!(
            Instant::now() < deadline,
            "{what}: the connection stayed up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The servers' own listing holds no connection of `actor`'s principal.
async fn none_listed(space: &Space, server: &str, actor: &str) {
    let space_name = cotal_core::names::SpaceName::parse(SPACE).unwrap();
    let material = cotal_io_fs::trust::load_daemon(&space.root, &space_name).unwrap();
    let oracle = cotal_io_nats::liveness::Oracle::new(
        server,
        material.system_user().creds(),
        material.data_account(),
        "test-sweep".to_owned(),
    );
    let cotal_core::liveness::Listing::Complete(conns) = oracle.sweep().await else {
        panic!("the sweep is incomplete")
    };
    let principal = format!("{}.{actor}", space.owner(HUMAN));
    assert!(
        conns
            .iter()
            .all(|c| c.principal.as_ref().map(|p| p.key()) != Some(principal.clone())),
        "{principal} is still listed: {conns:?}"
    );
}

/// A live publisher of `actor`: connected through the callout, its publish flushed.
async fn publisher(space: &Space, server: &str, token: &str, nonce: &str) -> Client {
    let (client, _) = connect(space, server, token, nonce).await.unwrap();
    client
        .publish(format!("cotal.{SPACE}.chat.x"), "hello".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    client
}

/// `actor revoke`, `revoke --credential` and a re-grant each close the live publisher's
/// connection through the plane (verified gone by the servers' own listing), and its bearer
/// cannot connect again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_live_revoke_credential_revoke_and_regrant_close_a_live_publisher() {
    let mut space = Space::new();
    for actor in ["rv", "cr", "rg"] {
        space.grant(actor, HUMAN, &[]);
    }
    let d = space.up(&[]);
    let server = server_url(&space.root);

    // revoke: the incarnation retired through the plane, its connection kicked.
    let token = bearer(&space, &d, "rv");
    let live = publisher(&space, &server, &token, "ibxrevoke0001").await;
    let u = uid(&space, "rv");
    let s = said(&space, &["actor", "revoke", "rv"]);
    assert!(
        s.contains(&format!(
            "its lifecycle {u} is retired and its live connections closed and verified gone"
        )),
        "{s}"
    );
    closed(&live, "revoke").await;
    none_listed(&space, &server, "rv").await;
    refused(connect(&space, &server, &token, "ibxrevoke0002").await);

    // revoke --credential: the root row revoked, the connection kicked by the servers' kick.
    let token = bearer(&space, &d, "cr");
    let live = publisher(&space, &server, &token, "ibxrevoke0003").await;
    let s = said(&space, &["actor", "revoke", "cr", "--credential"]);
    assert!(s.contains("revoked the root credential cred."), "{s}");
    assert!(
        s.contains("1 live connection(s) of it were closed and verified gone"),
        "{s}"
    );
    closed(&live, "revoke --credential").await;
    none_listed(&space, &server, "cr").await;
    refused(connect(&space, &server, &token, "ibxrevoke0004").await);
    let s = said(&space, &["actor", "revoke", "cr", "--credential"]);
    assert!(s.contains("already revoked"), "{s}");
    assert!(s.contains("0 live connection(s)"), "{s}");

    // A re-grant: the previous incarnation retired, its connection kicked, the fresh uid
    // exchanges and connects.
    let token = bearer(&space, &d, "rg");
    let live = publisher(&space, &server, &token, "ibxrevoke0005").await;
    let previous = uid(&space, "rg");
    let s = said(&space, &["actor", "grant", "rg", "--full"]);
    assert!(
        s.contains(&format!(
            "its previous lifecycle {previous} is retired and its live connections closed and \
             verified gone"
        )),
        "{s}"
    );
    closed(&live, "re-grant").await;
    none_listed(&space, &server, "rg").await;
    refused(connect(&space, &server, &token, "ibxrevoke0006").await);
    let fresh = bearer(&space, &d, "rg");
    connect(&space, &server, &fresh, "ibxrevoke0007")
        .await
        .unwrap();
}

/// The expected sentence fragment of each step, from the actor's state before it: whether a
/// grant row exists, and what the lifecycle head is relative to the row's uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Active at the row's uid with a live connection.
    Live,
    /// Retired at the row's uid.
    Retired,
    /// Nowhere at the row's uid (retired at another one).
    Elsewhere,
}

/// Every order of revoke, grant and retire from a live, connected incarnation: each step says
/// what it did in one sentence (checked), the live connection is gone after the first step,
/// and after a final grant the actor exchanges and connects. This is the wedge of issue 26
/// item 4 (revoke → grant left the alias held by a live head no door would retire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_order_of_revoke_grant_and_retire_leaves_the_actor_usable() {
    const ORDERS: [[&str; 3]; 6] = [
        ["revoke", "grant", "retire"],
        ["revoke", "retire", "grant"],
        ["grant", "revoke", "retire"],
        ["grant", "retire", "revoke"],
        ["retire", "revoke", "grant"],
        ["retire", "grant", "revoke"],
    ];
    let mut space = Space::new();
    for n in 0..ORDERS.len() {
        space.grant(&format!("ord{n}"), HUMAN, &[]);
    }
    let d = space.up(&[]);
    let server = server_url(&space.root);
    for (n, order) in ORDERS.iter().enumerate() {
        let actor = format!("ord{n}");
        let token = bearer(&space, &d, &actor);
        let live = publisher(&space, &server, &token, &format!("ibxorder{n:05}")).await;
        let mut row = Some(uid(&space, &actor));
        let mut head = Head::Live;
        for (step, &v) in order.iter().enumerate() {
            let s = match v {
                "revoke" => said(&space, &["actor", "revoke", &actor]),
                "grant" => said(&space, &["actor", "grant", &actor, "--full"]),
                _ => said(&space, &["actor", "retire", &actor]),
            };
            let want = match (v, &row, head) {
                ("revoke", Some(u), Head::Live) => format!(
                    "its lifecycle {u} is retired and its live connections closed and verified \
                     gone, and its next connect and exchange are refused"
                ),
                ("revoke", Some(u), Head::Retired) => format!(
                    "its lifecycle {u} was already retired, and its next connect and exchange \
                     are refused"
                ),
                ("revoke", Some(u), Head::Elsewhere) => format!(
                    "its lifecycle {u} never started, and its next connect and exchange are \
                     refused"
                ),
                ("grant", Some(u), Head::Live) => format!(
                    "its previous lifecycle {u} is retired and its live connections closed and \
                     verified gone"
                ),
                ("grant", Some(u), Head::Retired) => {
                    format!("its previous lifecycle {u} was already retired")
                }
                ("grant", Some(u), Head::Elsewhere) => {
                    format!("its previous lifecycle {u} never started")
                }
                ("grant", None, _) => "granted actor".to_owned(),
                ("retire", Some(u), Head::Live) => format!(
                    "retired actor {actor}'s lifecycle {u}: its credentials are revoked and its \
                     live connections closed and verified gone; re-grant it to sign in again"
                ),
                ("retire", Some(u), Head::Retired) => {
                    format!("actor {actor}'s lifecycle {u} was already retired")
                }
                ("retire", Some(u), Head::Elsewhere) => {
                    format!("actor {actor}'s lifecycle {u} never started: nothing to retire")
                }
                ("retire", None, _) => "has no interactive grant in space t1, so no current \
                                        lifecycle to retire"
                    .to_owned(),
                other => panic!("order {order:?} step {step}: no state {other:?}"),
            };
            assert!(
                s.contains(&want),
                "order {order:?} step {step} ({v}): wanted {want:?} in {s:?}"
            );
            // The state after the step: a revoke or re-grant ends a live incarnation as a
            // retirement does, and a grant's fresh uid has nothing at it yet.
            match v {
                "revoke" => {
                    row = None;
                    head = Head::Retired;
                }
                "grant" => {
                    row = Some(uid(&space, &actor));
                    head = Head::Elsewhere;
                }
                _ if row.is_some() && head == Head::Live => head = Head::Retired,
                _ => {}
            }
            if step == 0 {
                closed(&live, &format!("order {order:?} step {v}")).await;
                none_listed(&space, &server, &actor).await;
                refused(connect(&space, &server, &token, &format!("ibxorderr{n:04}")).await);
            }
        }
        let s = said(&space, &["actor", "grant", &actor, "--full"]);
        assert!(s.starts_with("granted actor"), "{s}");
        let fresh = bearer(&space, &d, &actor);
        connect(&space, &server, &fresh, &format!("ibxorderf{n:04}"))
            .await
            .unwrap();
    }
}

/// Each retire door refuses the other kind's alias (F49): the managed door an interactive
/// actor's live incarnation, the interactive door a managed agent's; both incarnations stay
/// usable, and their own doors retire them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_retire_door_refuses_the_other_kinds_incarnation() {
    let mut space = Space::new();
    space.grant("cli", HUMAN, &[]);
    let agent_uid = "wwwwwwwwwwwwwwwwwwwwwwwwww";
    space.spawn_agent(HUMAN, "cli", "worker", "the-agent-secret", agent_uid);
    let d = space.up(&[]);
    let (url, cap) = (d["url"].as_str().unwrap(), d["cap"].as_str());
    let owner = space.owner(HUMAN);
    let human_uid = uid(&space, "cli");
    bearer(&space, &d, "cli");
    let agent = json!({"owner": owner, "actor": "worker", "actorToken": "the-agent-secret"});
    assert_eq!(post(url, cap, &agent).0, 200);

    let at = |actor: &str, uid: &str| json!({"owner": owner, "actor": actor, "lifecycleUid": uid});
    let (status, body) = post_to(
        url,
        "/managed-lifecycle/retire",
        cap,
        &at("cli", &human_uid),
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("is an interactive actor"),
        "{body}"
    );
    let (status, body) = post_to(
        url,
        "/interactive-lifecycle/retire",
        cap,
        &at("worker", agent_uid),
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("is a managed agent"),
        "{body}"
    );
    // Neither refusal touched an incarnation.
    bearer(&space, &d, "cli");
    assert_eq!(post(url, cap, &agent).0, 200);

    // Their own doors: the interactive one retires the human's incarnation; the managed one
    // still refuses while the managed grant is at its uid.
    let (status, body) = post_to(
        url,
        "/interactive-lifecycle/retire",
        cap,
        &at("cli", &human_uid),
    );
    assert_eq!(
        (status, body["retired"].clone()),
        (200, json!(true)),
        "{body}"
    );
    let (status, body) = post_to(
        url,
        "/managed-lifecycle/retire",
        cap,
        &at("worker", agent_uid),
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("revoke the grant"),
        "{body}"
    );
}

/// The finding itself, step by step: revoke → grant left the alias held by the revoked
/// incarnation's live head, so the exchange refused "takeover", `actor retire` failed and the
/// interactive door answered 409 to both lifecycle ids. Now the revoke retires the
/// incarnation, the fresh grant exchanges, `actor retire` retires it, and the door answers 200
/// for both ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_then_grant_is_not_wedged() {
    let mut space = Space::new();
    space.grant("cli", HUMAN, &[]);
    let d = space.up(&[]);
    let (url, cap) = (d["url"].as_str().unwrap(), d["cap"].as_str());
    let owner = space.owner(HUMAN);
    bearer(&space, &d, "cli");
    let revoked = uid(&space, "cli");
    verb(&space, &["actor", "revoke", "cli"]);
    verb(&space, &["actor", "grant", "cli", "--full"]);
    let granted = uid(&space, "cli");
    let (status, body) = exchange(&space, &d, "cli");
    assert_eq!(status, 200, "the fresh grant exchanges: {body}");
    let (ok, s) = verb(&space, &["actor", "retire", "cli"]);
    assert!(ok, "{s}");
    // The retired grant's lifecycle answers as retired; the revoked one's head has moved on.
    for (uid, answered) in [(revoked, "notStarted"), (granted, "alreadyRetired")] {
        let (status, body) = post_to(
            url,
            "/interactive-lifecycle/retire",
            cap,
            &json!({"owner": owner, "actor": "cli", "lifecycleUid": uid}),
        );
        assert_eq!(
            (status, body[answered].clone()),
            (200, json!(true)),
            "{body}"
        );
    }
}

/// With the plane down, a revoke and a re-grant still change the ledger and say that the
/// incarnation they end is not retired, naming the `actor retire --lifecycle-uid` to run; the
/// exchange of the re-granted actor names it too ("takeover"), and once the plane is up that
/// retirement kicks the live connection and frees the alias.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_plane_down_the_sentences_name_the_retirement_that_frees_the_alias() {
    let mut space = Space::new();
    for actor in ["rv", "rg"] {
        space.grant(actor, HUMAN, &[]);
    }
    let server = space.serve_broker();
    let d = space.up(&["--server", &server]);
    let mut live = Vec::new();
    for (n, actor) in ["rv", "rg"].into_iter().enumerate() {
        let token = bearer(&space, &d, actor);
        live.push(publisher(&space, &server, &token, &format!("ibxplanedn{n:03}")).await);
    }
    let (revoked, previous) = (uid(&space, "rv"), uid(&space, "rg"));
    let mut plane = space.reaper.0.pop().unwrap();
    signal(&plane, rustix::process::Signal::TERM);
    assert!(exits(&mut plane, EXIT_TIMEOUT).success());

    let s = said(&space, &["actor", "revoke", "rv"]);
    assert!(
        s.contains("its next connect and exchange are refused, but the plane of space t1")
            && s.contains(&format!("lifecycle {revoked} is not retired"))
            && s.contains(&format!("--lifecycle-uid {revoked}`")),
        "{s}"
    );
    let s = said(&space, &["actor", "grant", "rg", "--full"]);
    assert!(
        s.contains(&format!("its previous lifecycle {previous} is not retired"))
            && s.contains(&format!("--lifecycle-uid {previous}`")),
        "{s}"
    );

    for client in &live {
        assert_eq!(
            client.connection_state(),
            async_nats::connection::State::Connected,
            "nothing kicks while the plane is down"
        );
    }

    let d = space.up(&["--server", &server]);
    let (status, body) = exchange(&space, &d, "rg");
    assert_eq!(status, 401, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("takeover")
            && error.contains(&format!("actor retire rg --lifecycle-uid {previous}")),
        "{body}"
    );
    let s = said(
        &space,
        &["actor", "retire", "rg", "--lifecycle-uid", &previous],
    );
    assert!(
        s.contains(&format!(
            "retired actor rg's lifecycle {previous}: its credentials are revoked and its live \
             connections closed and verified gone; its grant at lifecycle {} exchanges now",
            uid(&space, "rg")
        )),
        "{s}"
    );
    let s = said(
        &space,
        &["actor", "retire", "rv", "--lifecycle-uid", &revoked],
    );
    assert!(
        s.contains(&format!("retired actor rv's lifecycle {revoked}")),
        "{s}"
    );
    for client in &live {
        closed(client, "the retirement after the plane came back").await;
    }
    space.grant("rv", HUMAN, &[]);
    for (n, actor) in ["rv", "rg"].into_iter().enumerate() {
        let token = bearer(&space, &d, actor);
        connect(&space, &server, &token, &format!("ibxplaneup{n:03}"))
            .await
            .unwrap();
    }
}

/// A client of `actor`'s bearer that stays connected and reconnects on its own, as the space's
/// agents do: through the callout again after its server comes back.
async fn reconnecting(space: &Space, server: &str, token: &str, nonce: &str) -> Client {
    let client = common::signin::callout_client(space, token, nonce)
        .connect(server)
        .await
        .unwrap();
    client.flush().await.unwrap();
    client
}

/// A restart of the space's nats-server under a running plane (SIGTERM, then the same config
/// and store, as an operator restarts the service): the plane rides it out in the same process
/// — it re-takes its plane claim on its scanners' reconnected connections and serves again —
/// and the grants and revokes hold across it. A client that stays connected comes back through
/// the callout, a bearer from before the restart still connects, and a revoke after it retires
/// the incarnation through the plane (a sealed scan guarded by the re-taken claim), closing its
/// live connection and refusing its bearer (F47 (4), F59).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plane_rides_out_a_restart_of_its_server_and_keeps_every_revoke() {
    let mut space = Space::new();
    for actor in ["cli", "rv"] {
        space.grant(actor, HUMAN, &[]);
    }
    let port = space.serve_broker_with("", &[], "");
    let broker = space.reaper.0.len() - 1;
    let server = format!("nats://127.0.0.1:{port}");
    let d = space.up(&["--server", &server]);
    let plane = space.reaper.0.len() - 1;
    let (cli, rv) = (bearer(&space, &d, "cli"), bearer(&space, &d, "rv"));
    let staying = reconnecting(&space, &server, &cli, "ibxrestart0001").await;
    let live = reconnecting(&space, &server, &rv, "ibxrestart0002").await;

    space.restart_broker(broker, "", port);

    let url = d["url"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let health = cotal_io_http::face::probe::health(url, Duration::from_secs(2)).await;
        let state = health.as_ref().map(|h| h["state"].clone());
        let back = [&staying, &live]
            .iter()
            .all(|c| c.connection_state() == async_nats::connection::State::Connected);
        // What an operator's scrape shows once the plane served again after the loss (its
        // health alone may still be the "ready" of before it noticed).
        let (_, _, metrics) = http(url, "GET", "/metrics", &[], "").unwrap();
        let regained = metrics.contains("cotal_plane_servers_regained_total 1\n");
        if state == Ok(json!("ready")) && back && regained {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the plane did not serve again within 30 s of its server's restart: {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        space.reaper.0[plane].try_wait().unwrap().is_none(),
        "the plane exited"
    );
    assert_eq!(discovery(&space.root).unwrap()["pid"], d["pid"]);

    staying.flush().await.unwrap();
    drop(publisher(&space, &server, &cli, "ibxrestart0003").await);

    // Both clients came back through the callout; the revoke through the re-claimed plane
    // closes the revoked one and refuses its bearer.
    let u = uid(&space, "rv");
    let s = said(&space, &["actor", "revoke", "rv"]);
    assert!(
        s.contains(&format!(
            "its lifecycle {u} is retired and its live connections closed and verified gone"
        )),
        "{s}"
    );
    closed(&live, "the revoked publisher").await;
    refused(connect(&space, &server, &rv, "ibxrestart0004").await);
    none_listed(&space, &server, "rv").await;
}
