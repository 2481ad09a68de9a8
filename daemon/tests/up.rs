//! `cotal-authd up` and `gate ls|show` as a user runs them: the built binary on its embedded
//! `nats-server` (the pinned one from `scripts/nats-server.sh`; a missing binary fails loudly).
//! Every wait is bounded.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use rustix::process::{kill_process, Pid, Signal};
use serde_json::Value;

/// A read-only creds file of the space's data account, as an operator would hold one: the
/// reader's rows, replies on the client's default inbox.
fn reader_creds(state: &Path) -> String {
    use cotal_core::jwt::{self, Permission, Permissions, UserNats, Validity};
    let space = cotal_core::names::SpaceName::parse(SPACE).unwrap();
    let material = cotal_io_fs::trust::load_daemon(state, &space).unwrap();
    let conn = cotal_core::profiles::ConnId::parse("viewer_connection").unwrap();
    let reader = cotal_core::plane_grants::auth_reader(&space, &conn).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    jwt::user_creds(
        material.data_signing_key(),
        material.data_account(),
        &nkeys::KeyPair::new_user(),
        "viewer",
        &UserNats {
            permissions: Permissions {
                publish: reader.publish,
                subscribe: Permission {
                    allow: vec!["_INBOX.>".into()],
                    deny: Vec::new(),
                },
                response: None,
            },
            ..UserNats::default()
        },
        Validity {
            issued_at: jwt::UnixSeconds(now),
            expires_at: Some(jwt::UnixSeconds(now + 600)),
        },
    )
    .unwrap()
    .text()
}

#[test]
fn bad_flags_and_unreachable_servers_fail_in_one_sentence() {
    for (args, code) in [
        (vec!["up"], 2),
        (vec!["up", "--space", "s", "--replicas", "2"], 2),
        (vec!["up", "--space", "s", "--workers", "0"], 2),
        (vec!["up", "--space", "s", "--workers", "65"], 2),
        (vec!["up", "--space", "a b"], 2),
        (vec!["up", "--space", "s", "--bogus"], 2),
        (vec!["up", "--space", "s", "--space", "t"], 2),
        (vec!["gate"], 2),
        (vec!["bogus"], 2),
        (vec!["gate", "ls", "--space", "s"], 2),
        (
            vec![
                "gate",
                "show",
                "--space",
                "s",
                "--server",
                "nats://127.0.0.1:1",
            ],
            2,
        ),
        (
            vec![
                "up",
                "--space",
                "s",
                "--server",
                "nats://127.0.0.1:1",
                "--state-dir",
            ],
            2,
        ),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    // Nothing runs without a trust root: one sentence naming every missing kind and `init`.
    let bare = tempfile::tempdir().unwrap();
    let out = command()
        .args(["up", "--space", "s", "--state-dir"])
        .arg(bare.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("cotal-authd init"), "{err}");
    assert!(!bare.path().join("auth").exists(), "up wrote material");
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap();
    command()
        .args([
            "init",
            "--space",
            "s",
            "--idp",
            IDP,
            "--state-dir",
            state_dir,
        ])
        .output()
        .unwrap();
    // `NATS_URL` stands in for `--server`.
    let out = command()
        .args(["gate", "ls", "--space", "s", "--state-dir", state_dir])
        .env("NATS_URL", "nats://127.0.0.1:1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
    for args in [
        vec![
            "up",
            "--space",
            "s",
            "--server",
            "nats://127.0.0.1:1",
            "--state-dir",
            state_dir,
        ],
        vec![
            "gate",
            "ls",
            "--space",
            "s",
            "--server",
            "nats://127.0.0.1:1",
            "--state-dir",
            state_dir,
        ],
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("cannot connect"), "{args:?}: {err}");
    }
}

/// The whole life of a plane on one state dir: first registration at epoch 0; a successor
/// started beside it re-registers the same instance (epoch +1, generation +1) and the
/// predecessor exits 3 (fenced) with its discovery file gone; after a `kill -9` the next start adopts
/// the embedded server and re-registers again; SIGTERM exits 0 and cleans up.
#[test]
fn successor_fences_predecessor_and_sigterm_exits_clean() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);

    reaper.0.push(up(&state));
    let first = ready(&state, &mut reaper.0[0]);
    assert_eq!(first["processEpoch"], 0);
    assert_eq!(first["generation"], 1);
    assert_eq!(first["space"], "t1");
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for d in [space_dir(&state), state.join(SEGMENT)] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    for f in [
        space_dir(&state).join("auth-service.json"),
        state.join(SEGMENT).join("auth-instance.json"),
    ] {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    let server = first["server"].as_str().unwrap().to_owned();
    let status = run(&[
        "status",
        "--space",
        SPACE,
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("up (ready), pid {}", reaper.0[0].id())),
        "{said}"
    );
    assert!(said.contains("epoch 0 (generation 1"), "{said}");
    let as_json = run(&[
        "status",
        "--space",
        SPACE,
        "--json",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(as_json.status.code(), Some(0));
    let listed: Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(listed[0]["state"], "ready", "{listed}");
    assert_eq!(listed[0]["up"], true);
    assert_eq!(listed[0]["processEpoch"], 0);

    reaper.0.push(up(&state));
    let second = ready(&state, &mut reaper.0[1]);
    let reopened = Instant::now();
    assert_eq!(second["instanceId"], first["instanceId"]);
    assert_eq!(second["processEpoch"], 1);
    assert_eq!(second["generation"], 2);
    let status = exits(&mut reaper.0[0], Duration::from_secs(3));
    eprintln!(
        "predecessor exited {:?} after the successor's discovery file appeared",
        reopened.elapsed()
    );
    assert_eq!(status.code(), Some(3), "fenced by a successor exits 3");
    assert_eq!(discovery(&state).unwrap()["pid"], reaper.0[1].id());

    let root = state.to_str().unwrap();
    let ls = run(&[
        "gate",
        "ls",
        "--space",
        "t1",
        "--server",
        &server,
        "--json",
        "--state-dir",
        root,
    ]);
    assert!(
        ls.status.success(),
        "{}",
        String::from_utf8_lossy(&ls.stderr)
    );
    let gates: Value = serde_json::from_slice(&ls.stdout).unwrap();
    // The same view with an operator's creds file (NATS_CREDS) and no trust root at hand.
    let creds = dir.path().join("reader.creds");
    fs::write(&creds, reader_creds(&state)).unwrap();
    let elsewhere = dir.path().join("no-trust-root");
    let with_creds = command()
        .args(["gate", "ls", "--space", "t1", "--server", &server, "--json"])
        .arg("--state-dir")
        .arg(&elsewhere)
        .env("NATS_CREDS", &creds)
        .output()
        .unwrap();
    assert!(
        with_creds.status.success(),
        "{}",
        String::from_utf8_lossy(&with_creds.stderr)
    );
    let via_creds: Value = serde_json::from_slice(&with_creds.stdout).unwrap();
    assert_eq!(via_creds, gates);
    let gate = &gates.as_array().unwrap()[0];
    assert_eq!(gate["endpoint"], "auth");
    assert_eq!(gate["instance"], first["instanceId"]);
    assert_eq!(gate["state"], "open");
    assert_eq!(gate["processEpoch"], 1);
    assert_eq!(gate["registrationRevision"], second["registrationRevision"]);
    let table = run(&[
        "gate",
        "ls",
        "--space",
        "t1",
        "--server",
        &server,
        "--state-dir",
        root,
    ]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.starts_with("ENDPOINT"), "{table}");
    assert!(
        table.contains(first["instanceId"].as_str().unwrap()),
        "{table}"
    );
    let show = run(&[
        "gate",
        "show",
        "--space",
        "t1",
        "--server",
        &server,
        "--endpoint",
        "auth",
        "--instance",
        first["instanceId"].as_str().unwrap(),
        "--json",
        "--state-dir",
        root,
    ]);
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["generation"], 2);

    // A store of the wrong shape is refused at bind, naming the setting; nothing serves.
    let refused = command()
        .args([
            "up",
            "--space",
            "t1",
            "--server",
            &server,
            "--replicas",
            "3",
        ])
        .args(["--state-dir", root])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("num_replicas"), "{err}");
    assert_eq!(discovery(&state).unwrap()["pid"], reaper.0[1].id());

    // kill -9: no cleanup at all; the next start adopts the still-running embedded server.
    reaper.0[1].kill().unwrap();
    reaper.0[1].wait().unwrap();
    assert_eq!(
        discovery(&state).unwrap()["pid"],
        reaper.0[1].id(),
        "left behind"
    );
    // Any next start removes a discovery file whose plane is dead, even one that then fails.
    let failed = command()
        .args(["up", "--space", "t1", "--server", "nats://127.0.0.1:1"])
        .args(["--state-dir", root])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1));
    assert!(
        discovery(&state).is_none(),
        "a dead plane's discovery file survived a start"
    );
    reaper.0.push(up(&state));
    let third = ready(&state, &mut reaper.0[2]);
    assert_eq!(third["server"], server.as_str());
    assert_eq!(third["processEpoch"], 2);
    assert_eq!(third["generation"], 3);

    signal(&reaper.0[2], Signal::TERM);
    let status = exits(&mut reaper.0[2], EXIT_TIMEOUT);
    assert_eq!(status.code(), Some(0));
    assert!(discovery(&state).is_none());
    assert!(
        !server_record(&state).exists(),
        "embedded server not stopped"
    );
    let status = run(&["status", "--space", SPACE, "--state-dir", root]);
    assert_eq!(status.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&status.stdout).contains("not up"));
}

#[test]
fn help_and_version_print_to_stdout_and_exit_0() {
    for args in [
        vec![],
        vec!["--help"],
        vec!["help"],
        vec!["up", "--help"],
        vec!["gate", "ls", "--help"],
        vec!["gate", "show", "-h"],
    ] {
        let out = run(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(text.contains("Usage: cotal-authd"), "{args:?}: {text}");
        assert!(text.contains("3  fenced"), "{args:?}: {text}");
    }
    let up = String::from_utf8_lossy(&run(&["up", "--help"]).stdout).into_owned();
    for flag in [
        "--space",
        "--server",
        "--state-dir",
        "--replicas",
        "NATS_URL",
        "RUST_LOG",
    ] {
        assert!(up.contains(flag), "{flag}: {up}");
    }
    let version = run(&["--version"]);
    assert_eq!(version.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("cotal-authd "));
}

/// A plane whose server does not come back stops claiming to serve: with its embedded server
/// killed, every connection drops at once (its sealed scanners included), which is a broker
/// loss, not a fence. The plane waits for the server (a restart would be ridden out), and once
/// the gate has been unreadable for 10 s it exits 1 (a supervisor restarts it) with one
/// sentence, and its discovery file is gone. (A fence would exit 3 and stay down.)
#[test]
fn a_plane_that_loses_its_server_exits_1() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);
    reaper.0.push(
        command()
            .args(["up", "--space", "t1", "--state-dir"])
            .arg(&state)
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    ready(&state, &mut reaper.0[0]);
    let record: Value = serde_json::from_slice(&fs::read(server_record(&state)).unwrap()).unwrap();
    let server = Pid::from_raw(record["pid"].as_i64().unwrap() as i32).unwrap();
    kill_process(server, Signal::KILL).unwrap();
    let killed = Instant::now();

    let status = exits(&mut reaper.0[0], Duration::from_secs(30));
    eprintln!(
        "the plane stopped {:?} after its server died",
        killed.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    let mut err = String::new();
    std::io::Read::read_to_string(reaper.0[0].stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("lost the connection to the NATS server and it did not come back within 10s"),
        "{err}"
    );
    assert!(discovery(&state).is_none());
}
