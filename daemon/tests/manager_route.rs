//! `POST /manager-service-authority` on the running daemon over real HTTP (reference §3.7 and
//! the manager-route cells of §11.3/§11.4): the IdP token verified against the pinned IdP, the
//! owner derived, the caller's interactive grant read fresh, the operation dispatched; every
//! refusal a 403 with its sentence.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::signin::{post_to, Space};
use common::*;
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};

const IID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";
const UID: &str = "llllllllllllllllllllllllll";

fn request(operation: &str) -> Value {
    let id = |n: u8| json!({"id": KeyPair::new_from_raw(KeyPairType::User, [n; 32]).unwrap().public_key()});
    json!({
        "v": 1, "kind": "manager-service-authority", "operation": operation,
        "space": SPACE, "actor": "cli", "instanceId": IID, "managerLifecycleUid": UID,
        "requestId": "request-000000000000000001",
        "identities": {
            "supervisor": id(1), "executor": id(2), "serve": id(3),
            "goalWriter": id(4), "sessionLedger": id(5),
        },
    })
}

fn post(url: &str, cap: Option<&str>, body: &Value) -> (u16, Value) {
    post_to(url, "/manager-service-authority", cap, body)
}

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

#[test]
fn manager_service_authority_prepare_with_supervise_issues_the_supervisor() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "supervise", "", "");
    let d = space.up(&["--exchange-public-port", "0"]);
    let (loopback, cap) = (d["url"].as_str().unwrap(), d["cap"].as_str().unwrap());
    let public = d["publicUrl"].as_str().unwrap();
    let ask = json!({"idpToken": space.idp_token("alice"), "request": request("prepare")});
    // Both faces serve it: the public face without the capability.
    for (url, cap) in [(loopback, Some(cap)), (public, None)] {
        let (status, body) = post(url, cap, &ask);
        assert_eq!(status, 200, "{body}");
        assert!(body["credentials"]["supervisor"].is_object(), "{body}");
    }
}

#[test]
fn manager_service_authority_refusals_are_403_with_their_sentence() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "spawn,admin", "", "");
    let d = space.up(&[]);
    let (url, cap) = (d["url"].as_str().unwrap(), Some(d["cap"].as_str().unwrap()));
    let token = space.idp_token("alice");

    let (status, body) = post(url, cap, &json!({"request": request("prepare")}));
    assert_eq!(
        (status, error(&body)),
        (400, "manager-service authority needs { idpToken, request }")
    );
    let (status, _) = post(
        url,
        None,
        &json!({"idpToken": token, "request": request("prepare")}),
    );
    assert_eq!(status, 401, "the loopback face needs the capability");

    // spawn and admin do not imply supervise.
    let (status, body) = post(
        url,
        cap,
        &json!({"idpToken": token, "request": request("prepare")}),
    );
    assert_eq!(status, 403, "{body}");
    assert!(error(&body).contains("scope \"supervise\""), "{body}");

    let mut other = request("prepare");
    other["actor"] = json!("ops");
    let (status, body) = post(url, cap, &json!({"idpToken": token, "request": other}));
    assert_eq!(status, 403);
    assert!(error(&body).contains("not granted"), "{body}");

    let (status, body) = post(url, cap, &json!({"idpToken": token, "request": [1]}));
    assert_eq!(status, 403);
    assert!(error(&body).contains("must be an object"), "{body}");

    let mut runtime = request("prepare");
    runtime["kind"] = json!("manager-managed-agent-runtime-create");
    let (status, body) = post(url, cap, &json!({"idpToken": token, "request": runtime}));
    assert_eq!(status, 403);
    assert!(
        error(&body).contains("host platform interception"),
        "{body}"
    );

    let (status, body) = post(
        url,
        cap,
        &json!({"idpToken": "not.a.token", "request": request("prepare")}),
    );
    assert_eq!(status, 403, "{body}");
}
