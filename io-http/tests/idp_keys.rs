//! The pinned IdP's key set fetched over real HTTP from the development IdP: the first
//! verification fetches `/jwks`; a token whose kid the cache lacks refetches, but at most once
//! per interval; an IdP that is down before the first fetch is `unavailable`, and one that goes
//! down later leaves the held keys in use.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cotal_core::error::ErrorCode;
use cotal_core::jwt::UnixSeconds;
use cotal_io_http::dev_idp::{self, DevIdp};
use cotal_io_http::idp_keys::{IdpKeys, IdpSource};

fn now() -> UnixSeconds {
    UnixSeconds(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn source(idp: &DevIdp) -> IdpSource {
    IdpSource {
        issuer: idp.origin().to_owned(),
        audience: idp.origin().to_owned(),
        jwks_uri: format!("{}/jwks", idp.origin()),
    }
}

#[tokio::test]
async fn the_key_set_is_fetched_once_and_refetched_for_a_new_kid_only_after_the_interval() {
    let port = free_port();
    let first = DevIdp::new(port, &[1; 32]).unwrap();
    let rotated = DevIdp::new(port, &[2; 32]).unwrap();
    let server = dev_idp::serve(first.clone(), port).await.unwrap();
    let keys = IdpKeys::with_refetch_interval(source(&first), Duration::from_millis(300));
    let who = keys
        .verify(&first.token("alice", 60, now()).unwrap(), now())
        .await
        .unwrap();
    assert_eq!(who.subject, "alice");

    // The IdP rotates its key: a token under the new kid is refused until the interval passed,
    // then the refetch picks the new key up.
    server.stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let server = dev_idp::serve(rotated.clone(), port).await.unwrap();
    let token = rotated.token("bob", 60, now()).unwrap();
    let early = keys.verify(&token, now()).await.unwrap_err();
    assert_eq!(early.code, ErrorCode::PermissionDenied, "{early:?}");
    assert!(early.message.contains("no key with kid"), "{early:?}");
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(keys.verify(&token, now()).await.unwrap().subject, "bob");

    // The IdP goes away: the keys held keep verifying.
    server.stop();
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(keys.verify(&token, now()).await.unwrap().subject, "bob");
}

#[tokio::test]
async fn an_idp_that_cannot_be_reached_before_the_first_fetch_is_unavailable() {
    let idp = DevIdp::new(free_port(), &[3; 32]).unwrap();
    let keys = IdpKeys::new(source(&idp));
    let err = keys
        .verify(&idp.token("alice", 60, now()).unwrap(), now())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err:?}");
    assert!(
        err.message
            .contains("cannot fetch the pinned IdP's key set"),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_development_idp_labels_itself_and_serves_only_its_two_documents() {
    let port = free_port();
    let idp = DevIdp::new(port, &[4; 32]).unwrap();
    let server = dev_idp::serve(idp.clone(), port).await.unwrap();
    let wait = Duration::from_secs(5);
    let conf = cotal_io_http::fetch::get_json(
        &format!("{}/.well-known/openid-configuration", idp.origin()),
        wait,
        4096,
    )
    .await
    .unwrap();
    assert_eq!(conf["issuer"], idp.origin());
    assert!(conf["description"]
        .as_str()
        .unwrap()
        .contains("DEVELOPMENT"));
    let missing =
        cotal_io_http::fetch::get_json(&format!("{}/token", idp.origin()), wait, 4096).await;
    assert!(missing.unwrap_err().contains("404"));
    assert!(idp.token("", 60, now()).is_err());
    assert!(idp.token("alice", 3601, now()).is_err());
    server.stop();
}

/// A JWKS endpoint that accepts connections and never answers, counting them; each accepted
/// socket is held open until the test ends.
async fn hanging_endpoint(
    port: u16,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            let _ = tx.send(());
        }
    });
    (rx, task)
}

/// A hanging IdP stalls no one who holds keys: while one caller's refetch (for a made-up kid)
/// waits on an IdP that never answers, a token of a held kid verifies at once — it finishes
/// before the hanging fetch does, without waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_idp_refetch_never_holds_up_a_token_of_a_held_kid() {
    let port = free_port();
    let idp = DevIdp::new(port, &[5; 32]).unwrap();
    let server = dev_idp::serve(idp.clone(), port).await.unwrap();
    let keys = std::sync::Arc::new(IdpKeys::with_refetch_interval(
        source(&idp),
        Duration::from_millis(10),
    ));
    keys.verify(&idp.token("alice", 60, now()).unwrap(), now())
        .await
        .unwrap();
    server.stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (mut accepted, hanging) = hanging_endpoint(port).await;

    let other = DevIdp::new(port, &[6; 32]).unwrap();
    let made_up = other.token("mallory", 60, now()).unwrap();
    let refetch = tokio::spawn({
        let keys = keys.clone();
        async move { keys.verify(&made_up, now()).await }
    });
    accepted.recv().await.expect("the refetch reached the IdP");
    let known = idp.token("alice", 60, now()).unwrap();
    tokio::select! {
        verified = keys.verify(&known, now()) => {
            assert_eq!(verified.unwrap().subject, "alice");
        }
        ended = refetch => panic!("the hanging refetch ended first: {ended:?}"),
    }
    hanging.abort();
}

/// An IdP that is down before the first fetch: every exchange is `unavailable` (not a refusal
/// of its token), and the key set is asked for at most once per interval however many tokens
/// arrive; once the interval passed, the next token asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idp_outage_is_unavailable_and_fetched_at_most_once_per_interval() {
    let port = free_port();
    let idp = DevIdp::new(port, &[7; 32]).unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (tx, mut accepted) = tokio::sync::mpsc::unbounded_channel();
    // Every connection is closed at once: a failing IdP.
    let failing = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
            let _ = tx.send(());
        }
    });
    let keys = IdpKeys::with_refetch_interval(source(&idp), Duration::from_millis(400));
    let token = idp.token("alice", 60, now()).unwrap();
    for _ in 0..20 {
        let err = keys.verify(&token, now()).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable, "{err:?}");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut asked = 0;
    while accepted.try_recv().is_ok() {
        asked += 1;
    }
    assert_eq!(
        asked, 1,
        "20 tokens within the interval asked the IdP {asked} times"
    );
    tokio::time::sleep(Duration::from_millis(450)).await;
    let err = keys.verify(&token, now()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(accepted.try_recv().is_ok(), "the due refetch did not ask");
    failing.abort();
}
