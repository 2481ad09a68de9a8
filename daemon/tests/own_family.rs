//! F68 over a family that names the plane's own principal (issue 25, item 5), on a real
//! operator-mode server: a peer may mint a credential of the plane's `auth` instance for the
//! plane's own gate principal `local.<serve nkey>`, which every connection of the plane carries
//! in its tags. A restart's re-registration must revoke that row and verify-evict its holder's
//! connections one by one, leaving the restarting plane's own connections alone and not
//! counting them as remaining, so the plane comes up (before, it kicked itself, never saw the
//! family gone, exited 1 and left its gate frozen) — and so does every later restart.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::signin::Space;
use common::*;
use cotal_core::jwt::{self, UnixSeconds, UserNats, Validity};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::names::SpaceName;
use cotal_core::names::{CredentialId, EndpointName, InstanceId, Principal, SourceMember};
use cotal_core::profiles::principal_tags;
use cotal_io_nats::async_nats::connection::State;
use cotal_io_nats::async_nats::ConnectOptions;
use rustix::process::Signal;
use serde_json::Value;

/// The plane's gate principal, `local.<serve nkey>`.
fn own_principal(root: &std::path::Path) -> Principal {
    let doc: Value =
        serde_json::from_slice(&fs::read(root.join(SEGMENT).join("auth-instance.json")).unwrap())
            .unwrap();
    let serve = doc["serveIdentity"]["id"].as_str().unwrap();
    Principal::parse(&format!("local.{serve}")).unwrap()
}

fn space_name() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn stop_last(space: &mut Space) {
    signal(space.reaper.0.last().unwrap(), Signal::TERM);
    assert_eq!(
        exits(space.reaper.0.last_mut().unwrap(), EXIT_TIMEOUT).code(),
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f68_a_family_row_naming_the_planes_own_principal_is_evicted_around_the_plane() {
    let mut space = Space::new();
    let server = space.serve_broker();
    let first = space.up(&["--server", &server]);
    stop_last(&mut space);

    // A peer mints a serve credential of the plane's instance for the plane's own principal,
    // and holds a connection under it.
    let owner = own_principal(&space.root);
    let instance = InstanceId::parse(&instance(&space.root)).unwrap();
    let row = LedgerRow::endpoint_active(
        EndpointName::parse("auth").unwrap(),
        &instance,
        CredentialId::parse(&format!("sha256-{}", "ab".repeat(32))).unwrap(),
        owner.clone(),
        vec![SourceMember::parse("session.peer").unwrap()],
        4_000_000_000,
    )
    .unwrap();
    let admin = space.admin(&server).await;
    let bound = admin.space().unwrap();
    let created = bound
        .execute(&KvRequest::Create {
            store: Store::Auth,
            key: row.key(),
            value: row.to_bytes(),
        })
        .await;
    assert!(matches!(created, KvOutcome::Written(_)), "{created:?}");
    let material = cotal_io_fs::trust::load_daemon(&space.root, &space_name()).unwrap();
    let creds = jwt::user_creds(
        material.data_signing_key(),
        material.data_account(),
        &nkeys::KeyPair::new_user(),
        "peer-holder",
        &UserNats {
            tags: principal_tags(&owner),
            ..UserNats::default()
        },
        Validity {
            issued_at: UnixSeconds(now_secs()),
            expires_at: Some(UnixSeconds(now_secs() + 120)),
        },
    )
    .unwrap();
    // A kicked holder stays gone, as a verified eviction needs: async-nats asks the delay
    // callback before the first connect too, so the first attempt is immediate and any later
    // one waits past the test.
    let attempts = AtomicUsize::new(0);
    let peer = ConnectOptions::with_credentials(&creds.text())
        .unwrap()
        .max_reconnects(Some(1))
        .reconnect_delay_callback(move |_| {
            if attempts.fetch_add(1, Ordering::Relaxed) == 0 {
                Duration::ZERO
            } else {
                Duration::from_secs(3600)
            }
        })
        .connect(&server)
        .await
        .unwrap();
    assert_eq!(peer.connection_state(), State::Connected);

    // The restart registers over that family: the holder's peer connection is kicked and
    // verified gone, the row revoked, and the plane serves at the next epoch.
    let log = space.root.join("restart.log");
    let second = space.up_with(&["--server", &server], &[], Some(&log));
    assert_eq!(
        second["processEpoch"].as_u64().unwrap(),
        first["processEpoch"].as_u64().unwrap() + 1,
        "{}",
        text(&log)
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while peer.connection_state() == State::Connected {
        assert!(
            Instant::now() < deadline,
            "the holder's connection was not evicted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let KvOutcome::Entry(Some(entry)) = bound
        .execute(&KvRequest::Get {
            store: Store::Auth,
            key: row.key(),
        })
        .await
    else {
        panic!("the family row is unreadable")
    };
    assert_eq!(
        LedgerRow::parse(&entry.value, &row.key()).unwrap().state(),
        CredState::Revoked
    );
    let said = text(&log);
    assert!(
        said.contains("none left (verified by a complete sweep)"),
        "{said}"
    );

    // The plane's own connections survived its eviction: it serves, and a later restart over
    // the same (now revoked) family comes up too.
    let health = http(second["url"].as_str().unwrap(), "GET", "/health", &[], "").unwrap();
    assert_eq!(health.0, 200, "{}", health.2);
    assert!(health.2.contains("\"ready\""), "{}", health.2);
    stop_last(&mut space);
    let third = space.up(&["--server", &server]);
    assert_eq!(
        third["processEpoch"].as_u64().unwrap(),
        second["processEpoch"].as_u64().unwrap() + 1
    );
    admin.close().await.unwrap();
}
