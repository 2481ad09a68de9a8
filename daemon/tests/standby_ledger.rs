//! A failover never loses an acknowledged ledger change (issue 28), on a real operator-mode
//! server with real planes: the standby serves the active plane's own actor ledger (named with
//! `--ledger-dir`, never a copy), so after a `kill -9` or a clean stop of the active it refuses
//! every actor the active revoked or retired and admits every one it granted or re-granted, at
//! the exchange and at connect with bearers minted before the failover. A standby over a copied
//! ledger, an unreadable or foreign one is refused in one sentence; an `actor` verb aimed at a
//! standby's own state dir is refused, naming the ledger's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;

use common::signin::{connect, post, refused, Space};
use common::*;
use cotal_tests::nats::{NetnsCluster, ServerOptions};
use rustix::process::Signal;
use serde_json::{json, Value};

const HUMAN: &str = "alice";
/// The line a standby logs once it saw the active plane serving its ledger.
const WITNESSED: &str = "standby: the active plane serves this standby's actor ledger";

/// `up --standby --ledger-dir <active root>` on `state`, logging at info to `log`.
fn standby(state: &Path, active: &Path, server: &str, log: &Path) -> Child {
    let ledger = ["--standby", "--ledger-dir", active.to_str().unwrap()];
    up_on(state, server, &ledger, log)
}

/// The exchange of `actor`'s bearer on the plane `d` names: its status and its answer.
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

fn refused_exchange(space: &Space, d: &Value, actor: &str) {
    let (status, body) = exchange(space, d, actor);
    assert_eq!(status, 401, "{actor} was exchanged: {body}");
}

/// The ledger changes made on the active while the standby waits, each acknowledged: `gone`
/// revoked, `fresh` granted, `again` retired and re-granted (a fresh lifecycle), and `retiree`
/// retired through the active's own door.
fn change_the_ledger(space: &Space, a: &Value) {
    verb(space, &["actor", "revoke", "gone"]);
    space.grant("fresh", HUMAN, &[]);
    for actor in ["again", "retiree"] {
        let said = verb(space, &["actor", "retire", actor]);
        assert!(said.contains("retired"), "{said}");
    }
    space.grant("again", HUMAN, &[]);
    refused_exchange(space, a, "gone");
    refused_exchange(space, a, "retiree");
}

fn verb(space: &Space, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--space", SPACE, "--idp-subject", HUMAN]);
    space.authd(&all)
}

/// A second state root of the space in `peers` (a copy of the trust root and so of the
/// ledger as it is now), its own plane instance.
fn peer(space: &Space, peers: &tempfile::TempDir, name: &str) -> PathBuf {
    let root = peers.path().join(name);
    copy_dir(&space.root.join("auth"), &root.join("auth"));
    root
}

/// The active plane (on `space.root`, against the space's own broker) and its discovery file.
fn active(space: &mut Space, server: &str) -> Value {
    space.up(&["--server", server])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_that_takes_over_after_a_kill_serves_every_change_the_active_acknowledged() {
    let mut space = Space::new();
    let server = space.serve_broker();
    for actor in ["keep", "gone", "retiree", "again"] {
        space.grant(actor, HUMAN, &[]);
    }
    let a = active(&mut space, &server);
    let before: Vec<String> = ["keep", "gone", "retiree", "again"]
        .iter()
        .map(|actor| bearer(&space, &a, actor))
        .collect();

    // The standby, on a second state dir holding a copy of the trust root (and of the ledger
    // as it is now, which it must not serve), reads the active's ledger itself.
    let peers = tempfile::tempdir().unwrap();
    let b = peer(&space, &peers, "b");
    let log = b.with_extension("log");
    space.reaper.0.push(standby(&b, &space.root, &server, &log));
    wait_for_line(&log, WITNESSED);

    change_the_ledger(&space, &a);
    // A verb aimed at the standby's own state dir would land in a ledger nobody serves.
    let grant = [
        "actor",
        "grant",
        "lost",
        "--space",
        SPACE,
        "--idp-subject",
        HUMAN,
        "--full",
    ];
    let err = refused_on(&b, &grant);
    let active_root = fs::canonicalize(&space.root).unwrap();
    let redirect = format!("run this verb with --state-dir {}", active_root.display());
    assert!(err.contains(&redirect), "{err}");

    let active_plane = space.reaper.0.len() - 2;
    space.reaper.0[active_plane].kill().unwrap();
    space.reaper.0[active_plane].wait().unwrap();
    let d = ready(&b, space.reaper.0.last_mut().unwrap());
    let taken = takeover_checks(&space, &server, &d, &before).await;

    // The ledger is still one after the failover: the operator's verbs on the active's state
    // dir reach the plane that serves it now (its discovery file sits beside the ledger).
    let said = verb(&space, &["actor", "retire", "keep"]);
    assert!(said.contains("retired"), "{said}");
    refused_exchange(&space, &d, "keep");
    refused(connect(&space, &server, &taken, "ibxstandby0009").await);
}

/// What a standby that took over must serve: the active's every acknowledged change, at the
/// exchange and at connect with the bearers the active minted (`before`: keep, gone, retiree,
/// again). Returns a fresh bearer of `keep`.
async fn takeover_checks(space: &Space, server: &str, d: &Value, before: &[String]) -> String {
    refused_exchange(space, d, "gone");
    refused_exchange(space, d, "retiree");
    let fresh = bearer(space, d, "fresh");
    let again = bearer(space, d, "again");
    let keep = bearer(space, d, "keep");

    connect(space, server, &before[0], "ibxstandby0001")
        .await
        .expect("a bearer the active minted for a granted actor connects");
    refused(connect(space, server, &before[1], "ibxstandby0002").await);
    refused(connect(space, server, &before[2], "ibxstandby0003").await);
    refused(connect(space, server, &before[3], "ibxstandby0004").await);
    for (token, nonce) in [(&fresh, "ibxstandby0005"), (&again, "ibxstandby0006")] {
        connect(space, server, token, nonce).await.unwrap();
    }
    keep
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_started_before_any_grant_takes_over_at_a_clean_stop_with_every_change() {
    let mut space = Space::new();
    let server = space.serve_broker();
    let a = active(&mut space, &server);
    let peers = tempfile::tempdir().unwrap();
    let b = peer(&space, &peers, "b");
    let log = b.with_extension("log");
    space.reaper.0.push(standby(&b, &space.root, &server, &log));
    wait_for_line(&log, WITNESSED);

    for actor in ["keep", "gone", "retiree", "again"] {
        space.grant(actor, HUMAN, &[]);
    }
    let before: Vec<String> = ["keep", "gone", "retiree", "again"]
        .iter()
        .map(|actor| bearer(&space, &a, actor))
        .collect();
    change_the_ledger(&space, &a);

    let active_plane = space.reaper.0.len() - 2;
    signal(&space.reaper.0[active_plane], Signal::TERM);
    assert_eq!(
        exits(&mut space.reaper.0[active_plane], EXIT_TIMEOUT).code(),
        Some(0)
    );
    let d = ready(&b, space.reaper.0.last_mut().unwrap());
    takeover_checks(&space, &server, &d, &before).await;
}

/// `cotal-authd <args> --state-dir <state>`, expected to refuse: its one-line sentence.
fn refused_on(state: &Path, args: &[&str]) -> String {
    let out = command()
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    err
}

/// `up` on `state` with `args`, expected to refuse.
fn refusal(state: &Path, args: &[&str]) -> String {
    refused_on(state, &[&["up", "--space", SPACE], args].concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_over_a_copied_unreadable_or_foreign_ledger_is_refused() {
    let mut space = Space::new();
    let server = space.serve_broker();
    let a = active(&mut space, &server);
    space.grant("keep", HUMAN, &[]);
    bearer(&space, &a, "keep");
    let peers = tempfile::tempdir().unwrap();
    let b = peer(&space, &peers, "b");

    // Its own copy: nothing on this host serves it.
    let err = refusal(&b, &["--server", &server, "--standby"]);
    assert!(
        err.contains("standby refused: no plane on this host serves"),
        "{err}"
    );
    assert!(
        err.contains("--ledger-dir set to the active plane's --state-dir"),
        "{err}"
    );
    // Another copy, named explicitly, is no better.
    let c = peer(&space, &peers, "c");
    let err = refusal(
        &b,
        &[
            "--server",
            &server,
            "--standby",
            "--ledger-dir",
            c.to_str().unwrap(),
        ],
    );
    assert!(err.contains("standby refused"), "{err}");
    // An unreadable path, and the state dir of another trust root of the space.
    let missing = peers.path().join("nowhere");
    let err = refusal(
        &b,
        &["--standby", "--ledger-dir", missing.to_str().unwrap()],
    );
    assert!(err.contains("cannot be read"), "{err}");
    let foreign = peers.path().join("foreign");
    init(&foreign);
    let err = refusal(
        &b,
        &["--standby", "--ledger-dir", foreign.to_str().unwrap()],
    );
    assert!(err.contains("holds another trust root of space"), "{err}");

    // The active's own state dir: the standby waits. Stopped, its state dir remembers which
    // ledger it serves, so neither a bare `up` nor an `actor` verb on it touches its copy.
    let log = b.with_extension("log");
    space.reaper.0.push(standby(&b, &space.root, &server, &log));
    wait_for_line(&log, WITNESSED);
    signal(space.reaper.0.last().unwrap(), Signal::TERM);
    assert_eq!(
        exits(space.reaper.0.last_mut().unwrap(), EXIT_TIMEOUT).code(),
        Some(0)
    );
    let err = refusal(&b, &["--server", &server]);
    assert!(err.contains("start it with --ledger-dir"), "{err}");
    let err = refused_on(&b, &["actor", "ls", "--space", SPACE]);
    assert!(err.contains("run this verb with --state-dir"), "{err}");
}

/// The space's ledger replicated (`init --ledger kv`, issue 27): the standby, on a state dir
/// holding only a copy of the trust root, serves the same bucket as the active (no
/// `--ledger-dir`, nothing read from the active's files), so after a `kill -9` of the active
/// it refuses every actor the active revoked or retired and admits every one it granted or
/// re-granted; and the operator's verbs reach the ledger from either state dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_of_a_replicated_ledger_takes_over_with_every_change_from_its_own_state_dir() {
    let mut space = Space::new();
    let said = space.authd(&[
        "init",
        "--space",
        SPACE,
        "--idp",
        &space.idp_url(),
        "--ledger",
        "kv",
    ]);
    assert!(
        said.contains("its actor ledger is replicated in bucket cotal_actors_t1"),
        "{said}"
    );
    let server = space.serve_broker();
    let a = active(&mut space, &server);
    // The verbs reach the replicated ledger through the running plane's server.
    for actor in ["keep", "gone", "retiree", "again"] {
        space.grant(actor, HUMAN, &[]);
    }
    assert!(
        !space_dir(&space.root).join("actors").exists(),
        "a replicated grant was written to the host's files"
    );
    let before: Vec<String> = ["keep", "gone", "retiree", "again"]
        .iter()
        .map(|actor| bearer(&space, &a, actor))
        .collect();

    let peers = tempfile::tempdir().unwrap();
    let b = peer(&space, &peers, "b");
    let log = b.with_extension("log");
    space
        .reaper
        .0
        .push(up_on(&b, &server, &["--standby"], &log));
    wait_for_line(&log, WITNESSED);
    change_the_ledger(&space, &a);
    // The standby's own state dir names the same ledger: a verb there needs only the server.
    let listed = command()
        .args([
            "actor",
            "ls",
            "--space",
            SPACE,
            "--json",
            "--server",
            &server,
            "--state-dir",
        ])
        .arg(&b)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let mut actors: Vec<&str> = listed["actors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["actor"].as_str().unwrap())
        .collect();
    actors.sort_unstable();
    assert_eq!(actors, ["again", "fresh", "keep", "retiree"]);

    let active_plane = space.reaper.0.len() - 2;
    space.reaper.0[active_plane].kill().unwrap();
    space.reaper.0[active_plane].wait().unwrap();
    let d = ready(&b, space.reaper.0.last_mut().unwrap());
    let taken = takeover_checks(&space, &server, &d, &before).await;

    // After the takeover a revoke from the standby's state dir reaches the plane serving it.
    let said = command()
        .args([
            "actor",
            "revoke",
            "keep",
            "--space",
            SPACE,
            "--idp-subject",
            HUMAN,
        ])
        .arg("--state-dir")
        .arg(&b)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&said.stdout);
    assert!(
        said.status.success(),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    assert!(
        text.contains("its live connections closed and verified gone"),
        "{text}"
    );
    refused_exchange(&space, &d, "keep");
    refused(connect(&space, &server, &taken, "ibxstandby0010").await);
}

/// A state dir whose files already hold grants is not made replicated, and a replicated
/// space's standby refuses `--ledger-dir`, each in one sentence.
#[test]
fn a_replicated_ledger_is_chosen_once_and_needs_no_ledger_dir() {
    let space = Space::new();
    space.grant("keep", HUMAN, &[]);
    let err = refused_on(
        &space.root,
        &[
            "init",
            "--space",
            SPACE,
            "--idp",
            &space.idp_url(),
            "--ledger",
            "kv",
        ],
    );
    assert!(err.contains("already holds actor rows in files"), "{err}");

    let fresh = Space::new();
    fresh.authd(&[
        "init",
        "--space",
        SPACE,
        "--idp",
        &fresh.idp_url(),
        "--ledger",
        "kv",
    ]);
    let err = refusal(
        &fresh.root,
        &["--standby", "--ledger-dir", fresh.root.to_str().unwrap()],
    );
    assert!(err.contains("so a standby needs no --ledger-dir"), "{err}");
}

/// The standby on another host (issue 27): a 3-node cluster whose nodes are separate hosts in
/// network namespaces, the space's ledger replicated (R3), the active plane on host A (node 0)
/// and `--standby` on host B (node 1) over a copy of the trust root alone. A grant and a revoke
/// (and a retirement and a re-grant) made on the active; then host A is lost — its plane and
/// its node `kill -9`ed. The standby takes over on the surviving majority and serves every
/// change the active acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_on_another_host_takes_over_when_the_active_host_is_lost() {
    let mut space = Space::new();
    space.authd(&[
        "init",
        "--space",
        SPACE,
        "--idp",
        &space.idp_url(),
        "--ledger",
        "kv",
    ]);
    let mut net = NetnsCluster::start_with(
        3,
        ServerOptions {
            extra_config: space.node_config(),
            ..ServerOptions::default()
        },
    )
    .unwrap();
    let urls = net.urls();
    let (host_a, host_b) = (urls[0].clone(), urls[1].clone());
    let a = space.up(&["--server", &host_a, "--replicas", "3"]);
    for actor in ["keep", "gone", "retiree", "again"] {
        space.grant(actor, HUMAN, &[]);
    }
    let before: Vec<String> = ["keep", "gone", "retiree", "again"]
        .iter()
        .map(|actor| bearer(&space, &a, actor))
        .collect();

    let peers = tempfile::tempdir().unwrap();
    let b = peer(&space, &peers, "b");
    let log = b.with_extension("log");
    space
        .reaper
        .0
        .push(up_on(&b, &host_b, &["--standby", "--replicas", "3"], &log));
    wait_for_line(&log, WITNESSED);
    change_the_ledger(&space, &a);

    // Host A is lost: its plane and its node.
    let lost = std::time::Instant::now();
    let active_plane = space.reaper.0.len() - 2;
    space.reaper.0[active_plane].kill().unwrap();
    net.cluster_mut().kill_node(0).unwrap();
    space.reaper.0[active_plane].wait().unwrap();
    let d = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ready(&b, space.reaper.0.last_mut().unwrap())
    }))
    .unwrap_or_else(|_| panic!("the standby never served; its log:\n{}", text(&log)));
    // Until JetStream has elected new leaders for the streams the lost node led, a read of
    // them is unavailable (503, fail closed): the standby serves once they answer again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match exchange(&space, &d, "fresh") {
            (200, _) => break,
            (503, _) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            other => panic!("the standby did not serve: {other:?}\n{}", text(&log)),
        }
    }
    // The same for the stores a connect reads (its credential, head and inbox binding): until
    // they answer, every connect is refused (fail closed), a granted one included.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while connect(&space, &host_b, &before[0], "ibxstandbyprobe")
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the standby never admitted a granted actor's connect\n{}",
            text(&log)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    println!(
        "the standby on host B served exchanges and connects {:.2} s after host A was lost",
        lost.elapsed().as_secs_f64()
    );
    takeover_checks(&space, &host_b, &d, &before).await;
}
