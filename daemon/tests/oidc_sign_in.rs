//! The human arm against a real OpenID provider (issue 15): panva's `oidc-provider` from npm
//! (pinned by `scripts/oidc-provider.sh`, run by `tests/oidc/provider.mjs`) signs an EdDSA ID
//! token through its own authorization-code flow; the space pins it as its IdP, and the plane
//! fetches its JWKS and exchanges the token for a bearer (that bearer's connect through the
//! callout is `sign_in.rs`'s cell). Nothing of the IdP side is this project's code. Needs
//! Node.js and npm: when they or the package are missing the test fails and names the install
//! command, never skips.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::signin::{post, Space};
use common::*;
use serde_json::json;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn install() {
    let out = Command::new("bash")
        .arg(repo().join("scripts/oidc-provider.sh"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/oidc-provider.sh failed (it needs node and npm): {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

#[test]
fn a_real_openid_provider_signs_the_human_in_at_the_exchange() {
    install();
    let mut space = Space::with_idp(|_, port| {
        Command::new("node")
            .arg(repo().join("tests/oidc/provider.mjs"))
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run node ({e}); install Node.js 20+ and npm"))
    });
    space.grant("cli", "alice", &[]);
    let d = space.up(&[]);
    let (status, _, id_token) =
        http(&space.idp_url(), "GET", "/test/id-token?sub=alice", &[], "").unwrap();
    assert_eq!(status, 200, "the provider's code flow failed: {id_token}");
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": id_token.trim(), "actor": "cli"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["owner"], space.owner("alice").as_str());

    // A token the provider issued to another client (another audience) is refused.
    let (_, _, other) = http(
        &space.idp_url(),
        "GET",
        "/test/id-token?sub=alice&client=other",
        &[],
        "",
    )
    .unwrap();
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": other.trim(), "actor": "cli"}),
    );
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("audience"),
        "{body}"
    );
}
