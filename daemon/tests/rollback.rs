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
use cotal_io_nats::async_nats::Client;
use futures::StreamExt;
use rustix::process::Signal;
use serde_json::Value;

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

/// A stream's snapshot as `$JS.API.STREAM.SNAPSHOT` hands it out: the stream's config and
/// state from the reply, then the archive's chunks in order (async-nats has no client for
/// this API, so the test speaks it: each chunk acknowledged on its reply subject, an empty
/// message closing the archive).
struct Snapshot {
    reply: Value,
    chunks: Vec<Vec<u8>>,
}

async fn snapshot(client: &Client, stream: &str) -> Snapshot {
    let inbox = client.new_inbox();
    let mut chunks_in = client.subscribe(inbox.clone()).await.unwrap();
    let ask =
        serde_json::json!({"deliver_subject": inbox, "no_consumers": true, "chunk_size": 65536});
    let reply = client
        .request(
            format!("$JS.API.STREAM.SNAPSHOT.{stream}"),
            ask.to_string().into(),
        )
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(reply.get("error").is_none(), "snapshot: {reply}");
    let mut chunks = Vec::new();
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(10), chunks_in.next())
            .await
            .expect("the snapshot stalled")
            .expect("the snapshot subscription closed");
        if chunk.payload.is_empty() {
            break;
        }
        chunks.push(chunk.payload.to_vec());
        if let Some(ack) = chunk.reply {
            client.publish(ack, Vec::new().into()).await.unwrap();
        }
    }
    assert!(!chunks.is_empty(), "an empty snapshot");
    Snapshot { reply, chunks }
}

/// Deletes `stream` and restores it from `snapshot` (`$JS.API.STREAM.RESTORE`: each chunk a
/// request the server acknowledges, an empty one to finish).
async fn restore(client: &Client, stream: &str, snapshot: &Snapshot) {
    let deleted = client
        .request(format!("$JS.API.STREAM.DELETE.{stream}"), Vec::new().into())
        .await
        .unwrap();
    let deleted: Value = serde_json::from_slice(&deleted.payload).unwrap();
    assert_eq!(deleted["success"], true, "delete: {deleted}");
    let ask = serde_json::json!({
        "config": snapshot.reply["config"],
        "state": snapshot.reply["state"],
    });
    let ready = client
        .request(
            format!("$JS.API.STREAM.RESTORE.{stream}"),
            ask.to_string().into(),
        )
        .await
        .unwrap();
    let ready: Value = serde_json::from_slice(&ready.payload).unwrap();
    let into = ready["deliver_subject"]
        .as_str()
        .unwrap_or_else(|| panic!("restore: {ready}"))
        .to_owned();
    for chunk in &snapshot.chunks {
        client
            .request(into.clone(), chunk.clone().into())
            .await
            .unwrap();
    }
    let done = client.request(into, Vec::new().into()).await.unwrap();
    let done: Value = serde_json::from_slice(&done.payload).unwrap();
    assert!(done.get("error").is_none(), "restore: {done}");
}

/// Issue 13 part 2 on a running plane: the space's auth store is restored, underneath a plane
/// that is serving, from a snapshot taken before that plane registered (an operator's restore
/// from backup, or the Jepsen loss of acknowledged writes). The plane's fence watch reads its
/// gate below the revision it stood at after its registration and fences itself as a
/// rollback, loudly: exit 3, the operator sentence, an audit line with the rollback kind. It
/// never "corrects" the gate.
#[test]
fn a_running_plane_fences_itself_when_its_store_is_restored_from_an_older_snapshot() {
    require_server();
    let mut space = signin::Space::new();
    let server = space.serve_broker();
    let first = space.up_with(&["--server", &server], &[], None);
    assert_eq!(first["processEpoch"], 0);
    let plane = space.reaper.0.pop().unwrap();
    signal(&plane, Signal::TERM);
    space.reaper.0.push(plane);
    assert_eq!(
        exits(space.reaper.0.last_mut().unwrap(), EXIT_TIMEOUT).code(),
        Some(0)
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let admin = runtime.block_on(space.admin(&server));
    let client = admin.space().unwrap().client().clone();
    let stream = format!("KV_cotal_auth_{SPACE}");
    let older = runtime.block_on(snapshot(&client, &stream));

    let log = space.root.join("second.log");
    let second = space.up_with(&["--server", &server], &[], Some(&log));
    assert_eq!(second["processEpoch"], 1);
    let plane = space.reaper.0.last().unwrap();
    // Held still while the store goes back, so the restore lands between two of its reads.
    signal(plane, Signal::STOP);
    runtime.block_on(restore(&client, &stream, &older));
    signal(space.reaper.0.last().unwrap(), Signal::CONT);

    let status = exits(space.reaper.0.last_mut().unwrap(), EXIT_TIMEOUT);
    let said = fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(3), "{said}");
    assert!(said.contains("the store rolled back"), "{said}");
    let audit = said
        .lines()
        .find(|l| l.contains("cotal::audit") && l.contains("fence-watch"))
        .unwrap_or_else(|| panic!("no audit line for the rollback: {said}"));
    assert!(
        audit.contains(cotal_core::rollback::ROLLBACK_DETECTED) || audit.contains("rolled back"),
        "{audit}"
    );
    assert!(
        discovery(&space.root).is_none(),
        "the discovery file is removed"
    );
}
