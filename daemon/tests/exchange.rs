//! `POST /exchange` on the running daemon over real HTTP (reference §3.5, the remote-exchange
//! cells of §11.3 and the deny-new cells of §11.2): a development IdP the test starts signs the
//! human in, the operator's `actor grant` is the ledger, the plane mints the incarnation's root
//! credential on its server and signs the bearer.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use common::signin::{claims, post, Space};
use common::*;
use serde_json::{json, Value};

fn cap(d: &Value) -> &str {
    d["cap"].as_str().unwrap()
}

fn url(d: &Value) -> &str {
    d["url"].as_str().unwrap()
}

#[test]
fn remote_exchange_a_signed_in_human_gets_a_lifecycle_and_root_bound_bearer() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    let d = space.up(&[]);
    let (status, body) = post(
        url(&d),
        Some(cap(&d)),
        &json!({"idpToken": space.idp_token("alice"), "actor": "cli"}),
    );
    assert_eq!(status, 200, "{body}");
    let owner = space.owner("alice");
    assert_eq!(body["owner"], owner.as_str());
    let c = claims(body["token"].as_str().unwrap());
    assert_eq!(c["iss"], "urn:cotal:auth:t1");
    assert_eq!(c["aud"], "t1");
    assert_eq!(c["sub"], owner.as_str());
    assert_eq!(c["exp"], body["exp"]);
    assert_eq!(c["act"]["actor"], "cli");
    assert_eq!(
        c["act"]["lifecycleUid"],
        space.row("alice", "cli")["lifecycleUid"]
    );
    let credential = c["act"]["credentialId"].as_str().unwrap().to_owned();
    // The IdP token lives 120 s: the bearer never outlives it.
    assert!(c["exp"].as_u64().unwrap() - c["iat"].as_u64().unwrap() <= 120);
    // The bearer is signed by a key the plane publishes.
    let (_, _, jwks) = http(url(&d), "GET", "/jwks", &[], "").unwrap();
    let header: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(body["token"].as_str().unwrap().split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert!(jwks.contains(header["kid"].as_str().unwrap()));

    // deny-new `root credential idempotent`: every later exchange names the same root.
    let (_, again) = post(
        url(&d),
        Some(cap(&d)),
        &json!({"idpToken": space.idp_token("alice"), "actor": "cli", "ttlSec": 30}),
    );
    let c2 = claims(again["token"].as_str().unwrap());
    assert_eq!(c2["act"]["credentialId"], credential.as_str());
    assert!(c2["exp"].as_u64().unwrap() - c2["iat"].as_u64().unwrap() <= 30);
}

#[test]
fn remote_exchange_refusals_say_why_and_what_to_run() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    space.grant_lists("viewer", "alice", "", "news", "");
    let d = space.up(&[]);
    let (u, c) = (url(&d), Some(cap(&d)));
    let token = space.idp_token("alice");

    let (status, body) = post(u, None, &json!({"idpToken": token, "actor": "cli"}));
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("capability"),
        "{body}"
    );

    let (status, body) = post(u, c, &json!({"idpToken": token, "actor": "ops"}));
    assert_eq!(status, 401);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("cotal-authd actor grant ops --space t1"),
        "{body}"
    );

    let (status, body) = post(u, c, &json!({"idpToken": "not.a.jwt", "actor": "cli"}));
    assert_eq!(status, 401, "{body}");

    // A view needs its scope; the remedy re-grants the whole row.
    let (status, body) = post(
        u,
        c,
        &json!({"idpToken": token, "actor": "viewer", "view": "channel-writer"}),
    );
    assert_eq!(status, 401);
    assert!(
        body["error"].as_str().unwrap().contains("--scope 'admin'"),
        "{body}"
    );
    let (status, body) = post(
        u,
        c,
        &json!({"idpToken": token, "actor": "cli", "view": "channel-writer"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        claims(body["token"].as_str().unwrap())["act"]["view"],
        "channel-writer"
    );

    let (status, body) = post(
        u,
        c,
        &json!({"idpToken": token, "actorToken": "s", "actor": "cli"}),
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["error"],
        "exchange takes idpToken (human) OR owner+actorToken (agent), never both"
    );
}

#[test]
fn deny_new_a_revoked_grant_refuses_and_a_regrant_exchanges_at_a_fresh_uid() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    let d = space.up(&[]);
    let (u, c) = (url(&d), Some(cap(&d)));
    let ask = |space: &Space| json!({"idpToken": space.idp_token("alice"), "actor": "cli"});
    assert_eq!(post(u, c, &ask(&space)).0, 200);
    space.authd(&[
        "actor",
        "revoke",
        "cli",
        "--space",
        SPACE,
        "--idp-subject",
        "alice",
    ]);
    let (status, body) = post(u, c, &ask(&space));
    assert_eq!(status, 401);
    assert!(
        body["error"].as_str().unwrap().contains("not granted"),
        "{body}"
    );
    // The revoke retired the incarnation through the running plane, so the re-grant's fresh
    // uid activates over the retired head: no takeover barrier is needed (F60).
    space.grant("cli", "alice", &[]);
    let (status, body) = post(u, c, &ask(&space));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn remote_exchange_the_agent_arm_and_the_public_face() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    space.spawn_agent(
        "alice",
        "cli",
        "worker",
        "the-agent-secret",
        "wwwwwwwwwwwwwwwwwwwwwwwwww",
    );
    let d = space.up(&["--exchange-public-port", "0"]);
    let public = d["publicUrl"].as_str().unwrap().to_owned();
    let owner = space.owner("alice");
    let agent = |secret: &str, actor: &str| json!({"owner": owner, "actor": actor, "actorToken": secret, "ttlSec": 9999});

    // The matched pair: capless on the public face is served, capless on loopback is not.
    let (status, body) = post(&public, None, &agent("the-agent-secret", "worker"));
    assert_eq!(status, 200, "{body}");
    let c = claims(body["token"].as_str().unwrap());
    assert_eq!(c["act"]["lifecycleUid"], "wwwwwwwwwwwwwwwwwwwwwwwwww");
    assert!(
        c["exp"].as_u64().unwrap() - c["iat"].as_u64().unwrap() <= 300,
        "agent bearers live at most 300 s"
    );
    assert_eq!(
        post(url(&d), None, &agent("the-agent-secret", "worker")).0,
        401
    );
    assert_eq!(
        post(url(&d), Some(cap(&d)), &agent("the-agent-secret", "worker")).0,
        200
    );

    // Wrong secret and unknown agent: the identical sentence.
    let (s1, wrong) = post(&public, None, &agent("guess", "worker"));
    let (s2, unknown) = post(&public, None, &agent("the-agent-secret", "ghost"));
    assert_eq!((s1, s2), (401, 401));
    assert_eq!(wrong["error"], unknown["error"]);

    // Elevated views are a loopback surface.
    let human = json!({"idpToken": space.idp_token("alice"), "actor": "cli", "view": "purger"});
    let (status, body) = post(&public, None, &human);
    assert_eq!(status, 403);
    assert!(
        body["error"].as_str().unwrap().contains("loopback"),
        "{body}"
    );
    assert_ne!(post(url(&d), Some(cap(&d)), &human).0, 403);
}

/// The public face's refusal budgets with the real exchange behind them (reference §3.4 and the
/// budget cells of §11.3): a peer that floods refusals is throttled to 429 within 40, another
/// peer still hears its own sentence, the loopback face keeps its own budget, a throttled
/// peer's valid exchange is still served (the #802 rule), and successes are never throttled.
#[test]
fn remote_exchange_budgets_throttle_probing_never_a_valid_credential() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    space.spawn_agent(
        "alice",
        "cli",
        "worker",
        "the-agent-secret",
        "wwwwwwwwwwwwwwwwwwwwwwwwww",
    );
    let d = space.up(&["--exchange-public-port", "0", "--exchange-trusted-proxy"]);
    let public = d["publicUrl"].as_str().unwrap().to_owned();
    let owner = space.owner("alice");
    let agent =
        |secret: &str| json!({"owner": owner, "actor": "worker", "actorToken": secret}).to_string();
    let from = |peer: &str, body: &str| {
        let headers = [
            ("content-type", "application/json"),
            ("x-forwarded-for", peer),
        ];
        let (status, _, text) = http(&public, "POST", "/exchange", &headers, body).unwrap();
        (status, text)
    };
    let mut throttled_at = None;
    for i in 1..=40 {
        if from("10.0.0.1", &agent("guess")).0 == 429 {
            throttled_at = Some(i);
            break;
        }
    }
    assert!(
        throttled_at.is_some(),
        "a flooding peer is throttled within 40 refusals"
    );
    let (status, text) = from("10.0.0.2", &agent("guess"));
    assert_eq!(status, 401, "another peer keeps its own budget: {text}");
    assert!(text.contains("unknown agent or wrong secret"), "{text}");
    let (status, _) = post(
        url(&d),
        Some(cap(&d)),
        &serde_json::from_str(&agent("guess")).unwrap(),
    );
    assert_eq!(status, 401, "the loopback face's budget is its own");
    assert_eq!(
        from("10.0.0.1", &agent("the-agent-secret")).0,
        200,
        "#802: a valid credential is served"
    );
    assert_eq!(
        from("10.0.0.1", &agent("guess")).0,
        429,
        "its refusals stay throttled"
    );
    for _ in 0..40 {
        assert_eq!(
            from("10.0.0.3", &agent("the-agent-secret")).0,
            200,
            "successes are never throttled"
        );
    }
}

/// remote-exchange `refresh`: a one-second bearer expires; exchanging again gives a distinct
/// token with a later `exp`, under the same root credential.
#[test]
fn remote_exchange_refresh_gives_a_distinct_later_bearer() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    let d = space.up(&[]);
    let ask =
        |space: &Space| json!({"idpToken": space.idp_token("alice"), "actor": "cli", "ttlSec": 1});
    let (_, first) = post(url(&d), Some(cap(&d)), &ask(&space));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (status, second) = post(url(&d), Some(cap(&d)), &ask(&space));
    assert_eq!(status, 200, "{second}");
    assert_ne!(first["token"], second["token"]);
    assert!(second["exp"].as_u64() > first["exp"].as_u64());
    let (a, b) = (
        claims(first["token"].as_str().unwrap()),
        claims(second["token"].as_str().unwrap()),
    );
    assert_eq!(a["act"]["credentialId"], b["act"]["credentialId"]);
}
