//! One plane per space, on a real operator-mode server (reference-auth-service §2.10, the
//! plane-claim cells of §11.2 and the hot-standby item): a second plane of the space is refused
//! as a live peer while the first lives and reclaims the claim once it is `kill -9`ed; killing a
//! plane's ledger scanner connection fences it (exit 3, "STOPPED scanning"); a standby takes
//! over within 5 s of a `kill -9` of the active plane and at once on a clean stop.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;
use cotal_core::liveness::Listing;
use cotal_core::names::SpaceName;
use cotal_core::plane_grants::PlaneConnection;
use cotal_io_nats::liveness::Oracle;
use rustix::process::Signal;

fn exits_within(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(POLL);
    }
    None
}

/// The first plane on the embedded server, ready; returns its server URL.
fn first_plane(state: &Path, reaper: &mut Reaper) -> String {
    init(state);
    reaper.0.push(up(state));
    ready(state, reaper.0.last_mut().unwrap());
    server_url(state)
}

#[test]
fn a_second_plane_is_refused_as_a_live_peer_and_reclaims_from_a_dead_one() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a");
    let mut reaper = Reaper(Vec::new(), state.clone());
    let url = first_plane(&state, &mut reaper);
    let other = sibling(&state, "b");

    let refused = command()
        .args(["up", "--space", SPACE, "--server", &url, "--state-dir"])
        .arg(&other)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("another auth plane already owns space \"t1\""),
        "{err}"
    );
    assert!(err.contains("Stop the other auth service process"), "{err}");

    // kill -9: no release; the claim stays held by a plane whose scanners are gone.
    let first = reaper.0.last_mut().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let log = dir.path().join("b.log");
    reaper.0.push(up_on(&other, &url, &[], &log));
    ready(&other, reaper.0.last_mut().unwrap());
    assert!(
        text(&log).contains("reclaimed from a dead plane"),
        "{}",
        text(&log)
    );

    // A clean stop releases it: the next plane takes it without asking the oracle.
    signal(reaper.0.last().unwrap(), Signal::TERM);
    assert_eq!(
        exits(reaper.0.last_mut().unwrap(), EXIT_TIMEOUT).code(),
        Some(0)
    );
    assert!(
        text(&log).contains("released the plane claim"),
        "{}",
        text(&log)
    );
    let log = dir.path().join("a.log");
    reaper.0.push(up_on(&state, &url, &[], &log));
    ready(&state, reaper.0.last_mut().unwrap());
    let said = text(&log);
    assert!(said.contains("holds the plane claim"), "{said}");
    assert!(!said.contains("reclaimed from a dead plane"), "{said}");
}

/// Regression for the daemon fault campaign's seed 3 (`tests/fault_campaign.rs`): in a
/// cluster, losing the one node a sealed scanner is on cuts that connection alone, exactly as
/// this kick does. The plane must stop serving, but as a failure a supervisor restarts (exit 1),
/// never as a fence (exit 3), since nothing succeeded it.
#[test]
fn killing_the_ledger_scanner_stops_the_plane_for_a_restart() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a");
    let mut reaper = Reaper(Vec::new(), state.clone());
    let url = first_plane(&state, &mut reaper);
    // Restart it on --server with its log captured (the embedded server stays up).
    let first = reaper.0.last_mut().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let log = dir.path().join("a.log");
    reaper.0.push(up_on(&state, &url, &[], &log));
    ready(&state, reaper.0.last_mut().unwrap());

    let space = SpaceName::parse(SPACE).unwrap();
    let material = cotal_io_fs::trust::load_daemon(&state, &space).unwrap();
    let oracle = Oracle::new(
        &url,
        material.system_user().creds(),
        material.data_account(),
        PlaneConnection::PlaneSystem.label(&space),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scanner = PlaneConnection::AuthScan.label(&space);
    let Listing::Complete(conns) = rt.block_on(oracle.sweep()) else {
        panic!("the sweep is incomplete")
    };
    let target = conns.iter().find(|c| c.name == scanner).unwrap();
    let kicked = Instant::now();
    rt.block_on(oracle.kick(&target.server.id, target.cid))
        .unwrap();
    let status = exits_within(reaper.0.last_mut().unwrap(), Duration::from_secs(3))
        .expect("the plane did not stop within 3 s of losing its scanner");
    eprintln!("stopped {:?} after the kick", kicked.elapsed());
    // A failure (restart it), not a fence: no successor holds the gate.
    assert_eq!(status.code(), Some(1));
    let said = text(&log);
    assert!(said.contains("STOPPED scanning"), "{said}");
    assert!(said.contains("restart the auth service"), "{said}");
    assert!(
        discovery(&state).is_none(),
        "a stopped plane leaves no discovery file"
    );
}

#[test]
fn a_standby_takes_over_within_5s_of_a_kill_and_at_once_on_a_clean_stop() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a");
    let mut reaper = Reaper(Vec::new(), state.clone());
    let url = first_plane(&state, &mut reaper);
    let other = sibling(&state, "b");
    let log = dir.path().join("b.log");
    let active_root = state.to_str().unwrap();
    reaper.0.push(up_on(
        &other,
        &url,
        &["--standby", "--ledger-dir", active_root],
        &log,
    ));
    wait_for_line(&log, "standby:");
    assert!(discovery(&other).is_none(), "a standby is not ready");

    let active = &mut reaper.0[0];
    let killed = Instant::now();
    active.kill().unwrap();
    active.wait().unwrap();
    ready(&other, reaper.0.last_mut().unwrap());
    let takeover = killed.elapsed();
    eprintln!("standby took over {takeover:?} after kill -9 of the active plane");
    assert!(takeover < Duration::from_secs(5), "{takeover:?}");

    // The old active comes back as the standby; a clean stop hands over at once.
    let log = dir.path().join("a.log");
    reaper.0.push(up_on(&state, &url, &["--standby"], &log));
    wait_for_line(&log, "standby:");
    let stopped = Instant::now();
    signal(&reaper.0[1], Signal::TERM);
    ready(&state, reaper.0.last_mut().unwrap());
    let handover = stopped.elapsed();
    eprintln!("standby took over {handover:?} after a clean stop of the active plane");
    assert_eq!(exits(&mut reaper.0[1], EXIT_TIMEOUT).code(), Some(0));
    let said = text(&log);
    assert!(said.contains("holds the plane claim"), "{said}");
    assert!(
        !said.contains("reclaimed from a dead plane"),
        "a released claim needs no oracle: {said}"
    );
}

/// A start that fails after taking the claim releases it on the way out (reference §2.4 step
/// 12: a busy loopback port → the claim row is `released`), so the next plane takes it at once.
#[test]
fn a_start_that_cannot_bind_its_face_releases_the_claim() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a");
    let mut reaper = Reaper(Vec::new(), state.clone());
    let url = first_plane(&state, &mut reaper);
    let first = reaper.0.last_mut().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let other = sibling(&state, "b");
    let log = dir.path().join("b.log");
    let mut refused = up_on(&other, &url, &["--port", &port], &log);
    let status = exits(&mut refused, EXIT_TIMEOUT);
    let said = text(&log);
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(said.contains("cannot bind the loopback face"), "{said}");
    assert!(said.contains("released the plane claim"), "{said}");

    // Released, so the next start takes it without asking about the dead plane.
    drop(busy);
    let log = dir.path().join("b2.log");
    reaper.0.push(up_on(&other, &url, &[], &log));
    ready(&other, reaper.0.last_mut().unwrap());
    assert!(
        !text(&log).contains("reclaimed from a dead plane"),
        "{}",
        text(&log)
    );
}
