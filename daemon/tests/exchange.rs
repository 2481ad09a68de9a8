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

use std::fs;
use std::net::TcpListener;
use std::process::{Child, Stdio};
use std::thread::sleep;
use std::time::Instant;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use common::*;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A state root with a development IdP serving, the space's trust root pinned to it, and the
/// processes a failed test must not leak.
struct Space {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    reaper: Reaper,
}

impl Space {
    fn new() -> Space {
        require_server();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let port = free_port();
        let idp = command()
            .args(["dev-idp", "--port", &port.to_string(), "--state-dir"])
            .arg(&root)
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + READY_TIMEOUT;
        while http(&url, "GET", "/jwks", &[], "").map(|a| a.0).ok() != Some(200) {
            assert!(
                Instant::now() < deadline,
                "the development IdP did not serve"
            );
            sleep(POLL);
        }
        let out = command()
            .args(["init", "--space", SPACE, "--idp", &url, "--state-dir"])
            .arg(&root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Space {
            reaper: Reaper(vec![idp], root.clone()),
            root,
            _dir: dir,
        }
    }

    fn authd(&self, args: &[&str]) -> String {
        let out = command()
            .args(args)
            .args(["--state-dir"])
            .arg(&self.root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn grant(&self, actor: &str, subject: &str, extra: &[&str]) {
        let mut args = vec![
            "actor",
            "grant",
            actor,
            "--space",
            SPACE,
            "--idp-subject",
            subject,
        ];
        args.extend_from_slice(if extra.is_empty() { &["--full"] } else { extra });
        self.authd(&args);
    }

    fn owner(&self, subject: &str) -> String {
        self.authd(&["owner", "--space", SPACE, "--idp-subject", subject])
    }

    fn idp_token(&self, subject: &str) -> String {
        self.authd(&["dev-idp", "token", "--subject", subject, "--ttl", "120"])
    }

    fn up(&mut self, extra: &[&str]) -> Value {
        let mut child: Child = command()
            .args(["up", "--space", SPACE, "--state-dir"])
            .arg(&self.root)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let found = ready(&self.root, &mut child);
        self.reaper.0.push(child);
        found
    }

    fn row(&self, subject: &str, actor: &str) -> Value {
        let path = space_dir(&self.root)
            .join("actors")
            .join(format!("{}.{actor}.json", self.owner(subject)));
        serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
    }

    /// A managed agent row spawned by `parent` (what enrollment writes), with `secret`.
    fn spawn_agent(&self, subject: &str, parent: &str, actor: &str, secret: &str, uid: &str) {
        let owner = self.owner(subject);
        let dir = space_dir(&self.root).join("managed-actors");
        fs::create_dir_all(&dir).unwrap();
        let digest: String = Sha256::digest(secret.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let row = json!({
            "ver": 1, "owner": owner, "actor": actor, "scope": [],
            "allowSubscribe": ["team.>"], "allowPublish": ["team.a"],
            "parent": format!("{owner}.{parent}"), "tokenHash": digest,
            "lifecycleUid": uid, "grantedAt": "2026-12-01T00:00:00.000Z",
        });
        let path = dir.join(format!("{owner}.{actor}.json"));
        fs::write(&path, serde_json::to_vec_pretty(&row).unwrap()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    }
}

fn post(url: &str, cap: Option<&str>, body: &Value) -> (u16, Value) {
    let auth = cap.map(|c| format!("Bearer {c}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth));
    }
    let (status, _, text) = http(url, "POST", "/exchange", &headers, &body.to_string()).unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

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
    space.grant(
        "viewer",
        "alice",
        &[
            "--scope",
            "",
            "--allow-subscribe",
            "news",
            "--allow-publish",
            "",
        ],
    );
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
fn deny_new_a_revoked_grant_refuses_and_a_regrant_at_a_new_uid_is_a_takeover() {
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
    // The re-grant rotates the uid while the previous incarnation's head is live: the plane
    // runs no takeover barrier, so it refuses rather than hand out a second live root.
    space.grant("cli", "alice", &[]);
    let (status, body) = post(u, c, &ask(&space));
    assert_eq!(status, 401);
    assert!(
        body["error"].as_str().unwrap().contains("takeover"),
        "{body}"
    );
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
