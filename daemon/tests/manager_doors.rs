//! The doors a restarted remote manager knocks on, end to end (reference-auth-service §4.7):
//! `manager-admin-authorization`, `manager-goal-index-scan` and
//! `manager-retained-agent-validation` over `POST /manager-service-authority` on the running
//! daemon, against a manager that prepared, registered itself and activated on the space's own
//! operator-mode server. Each answers its reference shape and refuses with its sentence.
//!
//! What is real: the IdP token, the actor ledger files the plane reads fresh at every call, the
//! manager gate the door checks (on the issuer connection), and the goal index, written by the
//! test's admin connection as the goal writer writes it and enumerated by the plane's sealed
//! records scanner.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::manager::*;
use common::signin::sentinel;
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use serde_json::{json, Value};

/// A manager activated at the gate's current registration: its current-registration proof and
/// serve epoch.
async fn activated(f: &Flow) -> (String, u64) {
    f.prepared_and_registered().await;
    f.granted(&f.activate_request("activate000000000000001"));
    (f.current_proof().await, f.gate().await.process_epoch().0)
}

/// A door request of `kind` presenting `proof` at serve epoch `epoch`.
fn door(f: &Flow, kind: &str, proof: &str, epoch: u64) -> Value {
    let mut raw = f.envelope("prepare", "doors000000000000000001");
    let o = raw.as_object_mut().unwrap();
    o.remove("operation");
    o.insert("kind".into(), json!(kind));
    o.insert("registrationProof".into(), json!(proof));
    o.insert("serveEpoch".into(), json!(epoch));
    raw
}

fn keys_of(answer: &Value) -> Vec<&str> {
    answer
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// Admin authorization answers one boolean read fresh from the ledger: `true` for a user whose
/// current grant holds `admin` at the asked lifecycle, `false` for another lifecycle and after
/// a revoke; a stale serve epoch is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_authorization_answers_one_fresh_boolean() {
    let f = Flow::new().await;
    let (proof, epoch) = activated(&f).await;
    f.space.grant_lists("operator", "alice", "admin", "", "");
    let uid = f.space.row("alice", "operator")["lifecycleUid"]
        .as_str()
        .unwrap()
        .to_owned();
    let ask = |uid: &str| {
        let mut raw = door(&f, "manager-admin-authorization", &proof, epoch);
        raw["caller"] = json!({"owner": f.owner, "actor": "operator", "lifecycleUid": uid});
        raw
    };

    let request = ask(&uid);
    let answer = f.granted(&request);
    assert_eq!(answer["authorized"], json!(true), "{answer}");
    assert_eq!(answer["owner"], f.owner.as_str());
    let mut echo = request.clone();
    echo["owner"] = json!(f.owner);
    echo["authorized"] = json!(true);
    assert_eq!(
        answer, echo,
        "the request echoed, the owner and the boolean"
    );

    let stale = "ssssssssssssssssssssssssss";
    assert_eq!(f.granted(&ask(stale))["authorized"], json!(false));
    f.space.authd(&[
        "actor",
        "revoke",
        "operator",
        "--space",
        common::SPACE,
        "--idp-subject",
        "alice",
    ]);
    assert_eq!(f.granted(&ask(&uid))["authorized"], json!(false));

    let mut old = ask(&uid);
    old["serveEpoch"] = json!(epoch + 1);
    f.refused(
        &old,
        &format!(
            "manager admin authorization serve epoch {} is stale; current is {epoch}",
            epoch + 1
        ),
    );
}

/// The goal-index scan lists only the authenticated owner's entries, on the sealed records
/// scanner, skips an entry its goal writer cleared, and answers each as written; a forged proof
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_goal_index_scan_answers_the_owners_entries_only() {
    let f = Flow::new().await;
    let (proof, epoch) = activated(&f).await;
    let records = f.admin.space().unwrap();
    let uid = "cccccccccccccccccccccccccc";
    let entry = |owner: &str, goal: &str| {
        json!({
            "v": 1, "endpoint": "manager", "owner": owner, "actor": "cli", "uid": uid,
            "goalId": goal, "iid": IID,
        })
    };
    let other = format!("u_{}", "d".repeat(26));
    for (owner, goal) in [
        (f.owner.as_str(), "goal1"),
        (f.owner.as_str(), "goal2"),
        (other.as_str(), "goal1"),
    ] {
        let created = records
            .execute(&KvRequest::Create {
                store: Store::Records,
                key: format!("goalidx.manager.{owner}.cli.{uid}.{goal}"),
                value: serde_json::to_vec(&entry(owner, goal)).unwrap(),
            })
            .await;
        assert!(matches!(created, KvOutcome::Written(_)), "{created:?}");
    }
    // goal2 reached its terminal: the goal writer cleared its entry (a DEL marker).
    let cleared = format!("goalidx.manager.{}.cli.{uid}.goal2", f.owner);
    let KvOutcome::Entry(Some(row)) = records
        .execute(&KvRequest::Get {
            store: Store::Records,
            key: cleared.clone(),
        })
        .await
    else {
        panic!("{cleared} is unreadable");
    };
    let deleted = records
        .execute(&KvRequest::Delete {
            store: Store::Records,
            key: cleared,
            expected: row.revision,
        })
        .await;
    assert!(matches!(deleted, KvOutcome::Written(_)), "{deleted:?}");

    let request = door(&f, "manager-goal-index-scan", &proof, epoch);
    let answer = f.granted(&request);
    assert_eq!(
        keys_of(&answer),
        [
            "v",
            "kind",
            "space",
            "owner",
            "actor",
            "instanceId",
            "managerLifecycleUid",
            "requestId",
            "registrationProof",
            "serveEpoch",
            "entries"
        ]
    );
    assert_eq!(answer["owner"], f.owner.as_str());
    assert_eq!(answer["entries"], json!([entry(&f.owner, "goal1")]));

    let mut forged = request;
    forged["registrationProof"] = json!(format!("sha256:{}", "f".repeat(64)));
    f.refused(
        &forged,
        "manager goal-index scan proof does not match current host registration",
    );
}

/// Retained-agent validation answers the retained agent's authority for the exact target and
/// no secret; a wrong token and a target at another lifecycle are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_agent_validation_answers_the_agents_authority() {
    let f = Flow::new().await;
    let (proof, epoch) = activated(&f).await;
    // The agent's spawner holds what the agent holds; the manager then retained the agent.
    f.space
        .grant_lists("cli", "alice", "supervise", "team.>", "team.a");
    let uid = "wwwwwwwwwwwwwwwwwwwwwwwwww";
    let secret = "the-retained-actor-token";
    f.space.spawn_agent("alice", "cli", "worker", secret, uid);
    let sentinel_creds = sentinel(&f.space);
    let ask = |token: &str, uid: &str| {
        let mut raw = door(&f, "manager-retained-agent-validation", &proof, epoch);
        raw["target"] = json!({"owner": f.owner, "actor": "worker", "lifecycleUid": uid});
        raw["actorToken"] = json!(token);
        raw["sentinelCreds"] = json!(sentinel_creds);
        raw
    };

    let request = ask(secret, uid);
    let answer = f.granted(&request);
    let text = answer.to_string();
    assert!(!text.contains(secret) && !text.contains(&sentinel_creds));
    assert_eq!(answer["owner"], f.owner.as_str());
    assert_eq!(answer["target"], request["target"]);
    assert_eq!(
        answer["authority"],
        json!({
            "owner": f.owner, "actor": "worker", "lifecycleUid": uid, "scope": [],
            "allowSubscribe": ["team.>"], "allowPublish": ["team.a"],
            "parent": format!("{}.cli", f.owner),
        })
    );

    f.refused(&ask("not-the-token", uid), "wrong secret");
    f.refused(
        &ask(secret, "nnnnnnnnnnnnnnnnnnnnnnnnnn"),
        "manager retained-agent validation host returned a replacement principal or lifecycle",
    );
}
