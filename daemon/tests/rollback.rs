//! Rollback detection on a real server (ecosystem §8): the plane keeps a durable high-water
//! mark of its gate, so a start over a store restored from an older copy — its gate at an
//! earlier revision, epoch and generation than this state dir saw — refuses loudly instead of
//! registering at a superseded epoch.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Starts the plane, waits until it is ready at `epoch`, and stops it cleanly (which stops its
/// embedded server too, so the store on disk is quiet).
fn serve_once(state: &Path, reaper: &mut Reaper, epoch: u64) {
    reaper.0.push(up(state));
    let found = ready(state, reaper.0.last_mut().unwrap());
    assert_eq!(found["processEpoch"], epoch);
    signal(reaper.0.last().unwrap(), Signal::TERM);
    assert_eq!(
        exits(reaper.0.last_mut().unwrap(), EXIT_TIMEOUT).code(),
        Some(0)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while server_record(state).exists() {
        assert!(
            Instant::now() < deadline,
            "the embedded server did not stop"
        );
        std::thread::sleep(POLL);
    }
}

#[test]
fn a_start_over_a_store_restored_from_an_older_copy_refuses_as_a_rollback() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);
    serve_once(&state, &mut reaper, 0);
    let store = state.join("nats").join(SEGMENT).join("store");
    let snapshot = dir.path().join("snapshot");
    copy_dir(&store, &snapshot);
    serve_once(&state, &mut reaper, 1);

    // The store goes back to the older copy underneath the plane's state dir.
    fs::remove_dir_all(&store).unwrap();
    copy_dir(&snapshot, &store);
    let refused = command()
        .args(["up", "--space", SPACE, "--state-dir"])
        .arg(&state)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for said in [
        "went backwards",
        "rolled back",
        "process epoch is 0, below the 1",
    ] {
        assert!(err.contains(said), "{said}: {err}");
    }
    assert!(discovery(&state).is_none());
}

/// Per-store stream marks: the plane records each authority stream's last sequence after its
/// registration and again at a clean stop, and a start over a stream that ends below its mark
/// (writes the plane saw acknowledged are gone — a revoked credential may be live again)
/// refuses loudly, though the gate itself looks current. The lost writes are stood in for by a
/// mark above the store's end.
#[test]
fn a_start_over_a_stream_that_lost_acknowledged_writes_refuses_as_a_rollback() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);
    serve_once(&state, &mut reaper, 0);
    let marks_path = state.join(SEGMENT).join("high-water.json");
    let mut marks: serde_json::Value =
        serde_json::from_slice(&fs::read(&marks_path).unwrap()).unwrap();
    let records = format!("KV_cotal_records_{SPACE}");
    let auth = format!("KV_cotal_auth_{SPACE}");
    let seen = marks["streams"][&records].as_u64().unwrap();
    assert!(
        seen > 0 && marks["streams"][&auth].as_u64().unwrap() > 0,
        "{marks}"
    );
    marks["streams"][&records] = serde_json::json!(seen + 5);
    fs::write(&marks_path, marks.to_string()).unwrap();
    let refused = command()
        .args(["up", "--space", SPACE, "--state-dir"])
        .arg(&state)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    for said in [
        format!("stream {records} went backwards"),
        format!("below the {}", seen + 5),
        "rolled back".to_owned(),
    ] {
        assert!(err.contains(&said), "{said}: {err}");
    }
    assert!(discovery(&state).is_none());
}
