//! Issuer key rotation on a running plane (issue 26 item 7): `issuer rotate` makes a fresh key
//! the signer and keeps the previous one published and accepted, so bearers already in flight
//! keep connecting; `issuer prune` refuses while such a bearer may still be live, and once
//! forced, the previous key's bearers are refused at the callout and its key leaves `/jwks`.
//! The running plane adopts both without a restart.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::{Duration, Instant};

use common::signin::{claims_header, connect, post, refused, Space};
use common::*;
use serde_json::{json, Value};

fn exchange(space: &Space, d: &Value) -> String {
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token("alice"), "actor": "cli", "ttlSec": 600}),
    );
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

fn kids(url: &str) -> Vec<String> {
    let (status, _, body) = http(url, "GET", "/jwks", &[], "").unwrap();
    assert_eq!(status, 200);
    let jwks: Value = serde_json::from_str(&body).unwrap();
    jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits (bounded) until the plane publishes `n` keys.
fn published(url: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = kids(url);
        if now.len() == n {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the plane still publishes {now:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn issuer(space: &Space, args: &[&str]) -> std::process::Output {
    command()
        .args(["issuer"])
        .args(args)
        .args(["--space", SPACE, "--state-dir"])
        .arg(&space.root)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issuer_rotation_keeps_bearers_in_flight_until_the_prune() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    let d = space.up(&[]);
    let (url, server) = (
        d["url"].as_str().unwrap().to_owned(),
        server_url(&space.root),
    );
    let before = published(&url, 1);
    let old = exchange(&space, &d);
    assert_eq!(claims_header(&old)["kid"], before[0].as_str());

    let rotated = issuer(&space, &["rotate"]);
    let said = String::from_utf8_lossy(&rotated.stdout).into_owned();
    assert!(
        rotated.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    assert!(said.contains("signs from now on"), "{said}");
    assert!(is_rfc3339_utc(word_after(&said, "` from ")), "{said}");
    let now = published(&url, 2);
    assert!(
        now.contains(&before[0]),
        "the previous key stays published: {now:?}"
    );

    // The new key signs; the old bearer and the new one both connect.
    let new = exchange(&space, &d);
    let new_kid = claims_header(&new)["kid"].as_str().unwrap().to_owned();
    assert_ne!(new_kid, before[0]);
    assert!(now.contains(&new_kid));
    let (a, _) = connect(&space, &server, &old, "ibxrotate0001")
        .await
        .unwrap();
    a.flush().await.unwrap();
    let (b, _) = connect(&space, &server, &new, "ibxrotate0002")
        .await
        .unwrap();
    b.flush().await.unwrap();
    drop((a, b));

    // Too early to prune: a bearer the old key signed may still be live.
    let early = issuer(&space, &["prune"]);
    let why = String::from_utf8_lossy(&early.stderr).into_owned();
    assert!(!early.status.success());
    assert!(why.contains("may still be live until"), "{why}");
    assert!(is_rfc3339_utc(word_after(&why, " until ")), "{why}");
    assert_eq!(published(&url, 2).len(), 2);

    let forced = issuer(&space, &["prune", "--force"]);
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    assert_eq!(published(&url, 1), vec![new_kid]);
    refused(connect(&space, &server, &old, "ibxrotate0003").await);
    let (c, _) = connect(&space, &server, &new, "ibxrotate0004")
        .await
        .unwrap();
    c.flush().await.unwrap();
}

/// The word of `said` right after `marker`.
fn word_after<'a>(said: &'a str, marker: &str) -> &'a str {
    said.split_once(marker)
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or_default()
}

/// Human output gives times as RFC 3339 UTC seconds: `2026-12-05T01:33:30Z`.
fn is_rfc3339_utc(word: &str) -> bool {
    let shape = "dddd-dd-ddTdd:dd:ddZ";
    word.len() == shape.len()
        && word
            .chars()
            .zip(shape.chars())
            .all(|(c, s)| if s == 'd' { c.is_ascii_digit() } else { c == s })
}
