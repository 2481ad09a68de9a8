//! `POST /manager-service-authority/verify-enrollment` on the running daemon over real HTTP
//! (reference §3.8): a host platform asks the plane for its decision on a managed-agent
//! request; the plane reads the manager's gate on a real operator-mode server and answers with
//! the door's status table, writing nothing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::signin::{manager_identities, post_to, Space};
use common::*;
use cotal_core::lifecycle::managed_retirement_op_id;
use cotal_core::names::LifecycleUid;
use serde_json::{json, Value};

const IID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";
const MUID: &str = "llllllllllllllllllllllllll";
const TARGET_UID: &str = "tttttttttttttttttttttttttt";

/// A space whose `alice/cli` holds `scope`, its plane on the space's own server, and the
/// manager instance [`IID`] registered for alice (gate open at epoch 0, revision 0).
struct Fixture {
    space: Space,
    d: Value,
    owner: String,
    /// The host's current-registration proof of [`IID`].
    proof: String,
}

impl Fixture {
    async fn new(scope: &str) -> Fixture {
        let mut space = Space::new();
        space.grant(
            "cli",
            "alice",
            &[
                "--scope",
                scope,
                "--allow-subscribe",
                "",
                "--allow-publish",
                "",
            ],
        );
        let server = space.serve_broker();
        let d = space.up(&["--server", &server]);
        let owner = space.owner("alice");
        let proof = space.register_manager(&server, &owner, IID, MUID).await;
        Fixture {
            space,
            d,
            owner,
            proof,
        }
    }

    fn ask(&self, body: &Value) -> (u16, Value) {
        post_to(
            self.d["url"].as_str().unwrap(),
            "/manager-service-authority/verify-enrollment",
            self.d["cap"].as_str(),
            body,
        )
    }

    /// A managed-agent request of `kind` with the host's proof at epoch 0.
    fn request(&self, kind: &str) -> Value {
        let mut r = json!({
            "v": 1, "kind": kind, "space": SPACE, "actor": "cli", "instanceId": IID,
            "managerLifecycleUid": MUID, "requestId": "verify0000000000000000000001",
            "registrationProof": self.proof, "serveEpoch": 0, "identities": manager_identities(),
        });
        let target = json!({"owner": self.owner, "actor": "worker", "lifecycleUid": TARGET_UID});
        match kind {
            "manager-managed-agent-enrollment" => {
                r["target"] = json!({"actor": "worker", "tokenHash": "a".repeat(64)});
            }
            "manager-managed-agent-prepare-retirement" => {
                r["target"] = target;
                r["opId"] = json!(managed_retirement_op_id(
                    &LifecycleUid::parse(TARGET_UID).unwrap()
                )
                .unwrap()
                .as_str());
            }
            _ => r["target"] = target,
        }
        r
    }
}

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// Each of the four kinds is authorized against the registered manager, with the reference's
/// answer shape; the door wrote nothing (the managed row space stays empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_enrollment_authorizes_each_kind_against_the_registered_manager() {
    let f = Fixture::new("supervise").await;
    let owner = f.owner.clone();
    for kind in [
        "manager-managed-agent-enrollment",
        "manager-managed-agent-prepare-retirement",
    ] {
        let (status, body) = f.ask(&json!({"owner": owner, "request": f.request(kind)}));
        assert_eq!(status, 200, "{kind}: {body}");
        assert_eq!(
            body,
            json!({"authorized": true, "owner": owner, "actor": "worker",
                   "instanceId": IID, "serveEpoch": 0}),
            "{kind}"
        );
    }
    for kind in [
        "manager-managed-agent-runtime-create",
        "manager-managed-agent-runtime-status",
    ] {
        let (status, body) = f.ask(&json!({"owner": owner, "request": f.request(kind)}));
        assert_eq!(status, 200, "{kind}: {body}");
        assert_eq!(
            body,
            json!({"authorized": true, "owner": owner, "instanceId": IID, "actor": "cli",
                   "target": {"owner": owner, "actor": "worker", "lifecycleUid": TARGET_UID}}),
            "{kind}"
        );
    }
    assert!(
        !space_dir(&f.space.root).join("managed-actors").exists()
            || std::fs::read_dir(space_dir(&f.space.root).join("managed-actors"))
                .unwrap()
                .next()
                .is_none(),
        "the decision wrote a managed row"
    );
}

/// The door's status table (reference §3.8): shape errors 400, an ungranted caller or a scope
/// without `supervise` 403, a stale serve epoch 409, no registered manager 412, a forged proof
/// 403, and the capability 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_enrollment_refusals_follow_its_status_table() {
    let f = Fixture::new("supervise").await;
    let owner = f.owner.clone();
    let enrollment = f.request("manager-managed-agent-enrollment");
    let (status, body) = f.ask(&json!({"owner": owner, "request": enrollment, "scope": ["x"]}));
    assert_eq!((status, error(&body)), (400, "unknown field \"scope\""));
    let (status, _) = f.ask(&json!({"owner": owner, "request": [1]}));
    assert_eq!(status, 400);
    let mut other = enrollment.clone();
    other["kind"] = json!("manager-run-admission");
    let (status, body) = f.ask(&json!({"owner": owner, "request": other}));
    assert_eq!(status, 400);
    assert!(
        error(&body).contains("manager-managed-agent-runtime-status"),
        "{body}"
    );
    let mut anonymous = enrollment.clone();
    anonymous.as_object_mut().unwrap().remove("actor");
    assert_eq!(f.ask(&json!({"owner": owner, "request": anonymous})).0, 400);
    assert_eq!(
        f.ask(&json!({"owner": "nobody", "request": enrollment})).0,
        400
    );
    let (status, _, _) = http(
        f.d["url"].as_str().unwrap(),
        "POST",
        "/manager-service-authority/verify-enrollment",
        &[("content-type", "application/json")],
        &json!({"owner": owner, "request": enrollment}).to_string(),
    )
    .unwrap();
    assert_eq!(status, 401, "the door needs the capability");

    let mut ungranted = enrollment.clone();
    ungranted["actor"] = json!("ops");
    let (status, body) = f.ask(&json!({"owner": owner, "request": ungranted}));
    assert_eq!(status, 403, "{body}");
    assert!(error(&body).contains("not granted"), "{body}");

    let mut stale = enrollment.clone();
    stale["serveEpoch"] = json!(3);
    let (status, body) = f.ask(&json!({"owner": owner, "request": stale}));
    assert_eq!(status, 409, "{body}");
    let mut absent = enrollment.clone();
    absent["instanceId"] = json!("zzzzzzzzzzzzzzzzzzzzzzzzzz");
    let (status, body) = f.ask(&json!({"owner": owner, "request": absent}));
    assert_eq!(status, 412, "{body}");
    let mut forged = enrollment.clone();
    forged["registrationProof"] = json!(format!("sha256:{}", "0".repeat(64)));
    let (status, body) = f.ask(&json!({"owner": owner, "request": forged}));
    assert_eq!(status, 403, "{body}");
}

/// `spawn` and `admin` do not imply `supervise`: the caller's scope is read from this plane's
/// ledger, never taken from the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_enrollment_reads_the_scope_from_the_ledger() {
    let f = Fixture::new("spawn,admin").await;
    let (status, body) = f.ask(&json!({
        "owner": f.owner,
        "request": f.request("manager-managed-agent-enrollment"),
    }));
    assert_eq!(status, 403, "{body}");
    assert!(error(&body).contains("scope \"supervise\""), "{body}");
}
