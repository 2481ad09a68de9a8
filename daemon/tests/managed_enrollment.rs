//! Managed-agent enrollment and retirement preparation through `/manager-service-authority` on
//! the running daemon and a real operator-mode server (reference §3.7, §6.3, §6.4): the agent's
//! managed row written at a host-chosen uid, its mailboxes created as real JetStream pull
//! consumers (`dm_`/`dlv_` keyed on the incarnation, the DM one after the stream's frontier,
//! `svc_<role>` shared) and its read ACL row; a retry keeps the uid and the frontier; the
//! preparation removes the incarnation's footprint and then its row.
//!
//! The space's streams (`DM_`, `DLV_`, `TASK_`) and the `cotal_acl_`/`cotal_members_` buckets
//! are made by the test: in a Cotal deployment `cotal up` provisions them, not the auth plane.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::signin::{manager_identities, post_to, Space};
use common::*;
use cotal_io_nats::async_nats::jetstream::{self, kv, stream};
use serde_json::{json, Value};

const IID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";
const MUID: &str = "llllllllllllllllllllllllll";

/// Makes what `cotal up` would: the mailbox streams and the ACL and membership buckets.
async fn provision_space(space: &Space, server: &str) -> jetstream::Context {
    let admin = space.admin(server).await;
    let js = jetstream::new(admin.space().unwrap().client().clone());
    for (name, subject) in [("DM", "inst"), ("DLV", "dlv"), ("TASK", "svc")] {
        js.create_stream(stream::Config {
            name: format!("{name}_{SPACE}"),
            subjects: vec![format!("cotal.{SPACE}.{subject}.>")],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    for bucket in ["acl", "members"] {
        js.create_key_value(kv::Config {
            bucket: format!("cotal_{bucket}_{SPACE}"),
            history: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    js
}

async fn consumer(js: &jetstream::Context, stream: &str, name: &str) -> Option<Value> {
    let answer: Value = js
        .request(format!("CONSUMER.INFO.{stream}.{name}"), &json!({}))
        .await
        .unwrap();
    answer.get("error").is_none().then_some(answer)
}

fn enrollment(proof: &str, token_hash: &str) -> Value {
    json!({
        "v": 1, "kind": "manager-managed-agent-enrollment", "space": SPACE, "actor": "cli",
        "instanceId": IID, "managerLifecycleUid": MUID,
        "requestId": "enroll0000000000000000000001", "registrationProof": proof,
        "serveEpoch": 0, "identities": manager_identities(),
        "target": {"actor": "worker", "tokenHash": token_hash, "role": "worker",
                   "subscribe": ["general"], "allowSubscribe": ["general", "team.>"]},
    })
}

/// Enrollment creates the incarnation's real footprint; a retry keeps its uid and the DM
/// mailbox's frontier even after the stream moved; another token hash while enrolled is a
/// conflict; preparing the retirement removes the footprint, then the row (F4, F51, F95).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrollment_creates_the_agents_mailboxes_and_preparation_removes_them() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    let server = space.serve_broker();
    let js = provision_space(&space, &server).await;
    // Earlier traffic on the DM stream: the new mailbox must start after it.
    for n in 0..3 {
        js.publish(format!("cotal.{SPACE}.inst.someone.else.{n}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let d = space.up(&["--server", &server, "--exchange-public-port", "0"]);
    let owner = space.owner("alice");
    let proof = space.register_manager(&server, &owner, IID, MUID).await;
    let url = d["url"].as_str().unwrap();
    let ask = |request: Value| {
        post_to(
            url,
            "/manager-service-authority",
            d["cap"].as_str(),
            &json!({"idpToken": space.idp_token("alice"), "request": request}),
        )
    };

    let (status, body) = ask(enrollment(&proof, &"a".repeat(64)));
    assert_eq!(status, 200, "{body}");
    let uid = body["material"]["lifecycleUid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(body["material"]["actor"], "worker");
    assert_eq!(
        body["material"]["allowSubscribe"],
        json!(["general", "team.>"])
    );
    let keyed = format!("{owner}-worker-{uid}");
    let dm = consumer(&js, &format!("DM_{SPACE}"), &format!("dm_{keyed}"))
        .await
        .expect("the DM mailbox exists");
    assert_eq!(
        dm["config"]["filter_subject"],
        format!("cotal.{SPACE}.inst.{owner}.worker.>")
    );
    assert_eq!(dm["config"]["deliver_policy"], "by_start_sequence");
    assert_eq!(
        dm["config"]["opt_start_seq"], 4,
        "after the 3 earlier messages"
    );
    assert_eq!(dm["config"]["ack_policy"], "explicit");
    assert!(
        dm["config"].get("deliver_subject").is_none(),
        "a pull consumer"
    );
    let dlv = consumer(&js, &format!("DLV_{SPACE}"), &format!("dlv_{keyed}"))
        .await
        .expect("the DLV mailbox exists");
    assert_eq!(
        dlv["config"]["filter_subject"],
        format!("cotal.{SPACE}.dlv.{owner}.worker.{uid}")
    );
    assert!(consumer(&js, &format!("TASK_{SPACE}"), "svc_worker")
        .await
        .is_some());
    let acl = js
        .get_key_value(format!("cotal_acl_{SPACE}"))
        .await
        .unwrap();
    let row = acl
        .get(format!("{owner}.worker.{uid}"))
        .await
        .unwrap()
        .expect("the ACL row exists");
    let row: Value = serde_json::from_slice(&row).unwrap();
    assert_eq!(row["allowSubscribe"], json!(["general", "team.>"]));
    assert_eq!(row["issuedAllowSubscribe"], json!(["general", "team.>"]));
    assert_eq!(row["revision"], 1);

    // The retry: the same uid; the DM mailbox keeps its frontier though the stream moved on.
    js.publish(format!("cotal.{SPACE}.inst.someone.else.9"), "x".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let (status, again) = ask(enrollment(&proof, &"a".repeat(64)));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["material"]["lifecycleUid"], uid.as_str());
    let dm = consumer(&js, &format!("DM_{SPACE}"), &format!("dm_{keyed}"))
        .await
        .unwrap();
    assert_eq!(dm["config"]["opt_start_seq"], 4);
    let (status, other) = ask(enrollment(&proof, &"b".repeat(64)));
    assert_eq!(status, 403, "{other}");

    // Preparation: footprint first, then the row; the role-shared queue stays.
    let prepare = json!({
        "v": 1, "kind": "manager-managed-agent-prepare-retirement", "space": SPACE,
        "actor": "cli", "instanceId": IID, "managerLifecycleUid": MUID,
        "requestId": "prepare000000000000000000001", "registrationProof": proof,
        "serveEpoch": 0, "identities": manager_identities(),
        "target": {"owner": owner, "actor": "worker", "lifecycleUid": uid},
        "opId": cotal_core::lifecycle::managed_retirement_op_id(
            &cotal_core::names::LifecycleUid::parse(&uid).unwrap()
        ).unwrap().as_str(),
    });
    let (status, body) = ask(prepare.clone());
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["prepared"], true, "{body}");
    assert!(
        consumer(&js, &format!("DM_{SPACE}"), &format!("dm_{keyed}"))
            .await
            .is_none()
    );
    assert!(
        consumer(&js, &format!("DLV_{SPACE}"), &format!("dlv_{keyed}"))
            .await
            .is_none()
    );
    assert!(consumer(&js, &format!("TASK_{SPACE}"), "svc_worker")
        .await
        .is_some());
    assert!(acl
        .get(format!("{owner}.worker.{uid}"))
        .await
        .unwrap()
        .is_none());
    assert!(
        !space_dir(&space.root)
            .join("managed-actors")
            .join(format!("{owner}.worker.json"))
            .exists(),
        "the managed row is released"
    );
    // Asked again, the preparation is a no-op success.
    let (status, _) = ask(prepare);
    assert_eq!(status, 200);
}

/// Enrollment through the route needs the public exchange face, where the enrolled agent
/// exchanges its secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrollment_without_the_public_face_is_refused() {
    let mut space = Space::new();
    space.grant("cli", "alice", &[]);
    let server = space.serve_broker();
    let d = space.up(&["--server", &server]);
    let owner = space.owner("alice");
    let proof = space.register_manager(&server, &owner, IID, MUID).await;
    let (status, body) = post_to(
        d["url"].as_str().unwrap(),
        "/manager-service-authority",
        d["cap"].as_str(),
        &json!({"idpToken": space.idp_token("alice"),
                "request": enrollment(&proof, &"a".repeat(64))}),
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("public exchange face"),
        "{body}"
    );
}
