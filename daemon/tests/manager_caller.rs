//! The `manager-caller` view end to end on the running daemon (issue 15, reference §3.10, §8.4,
//! SPEC §13.15): a signed-in human exchanges for a bearer pinned to the one live remote manager
//! instance of their owner, connects through the auth callout with a standard NATS client, and
//! the connection is an issuance — the client reads its generation from its accepted row over
//! the one `DIRECT.GET` its credential holds, may publish a `run-start` on the `ep.v1` rail with
//! that generation and not on the legacy rail, and a reconnect under the same nonce keeps the
//! generation while a new nonce gets a fresh one.
//!
//! Real: the IdP token, the ledger, the plane, the manager's registration on the space's own
//! operator-mode server, the callout, the issued and accepted stores. STAND-INs are the
//! fixture's (`common/manager.rs`), plus the manager's own `ready` status report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
/// The reference's journal and checkpoint-status bytes for run [`RUN`].
#[path = "../../core/tests/journal_fixtures/mod.rs"]
mod journal;

use std::time::Duration;

use common::manager::*;
use common::signin::{claims, connect, post};
use common::SPACE;
use cotal_core::issued::AcceptedToken;
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::registration::Registered;
use cotal_core::run::RunState;
use cotal_io_nats::async_nats::Client;
use nkeys::KeyPair;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// The bearer of a `manager-caller` exchange, or the refusal (every refused exchange is a 401,
/// reference §3.11).
fn exchange(flow: &Flow, instance: Option<&str>) -> (u16, Value) {
    exchange_as(flow, "cli", instance)
}

fn exchange_as(flow: &Flow, actor: &str, instance: Option<&str>) -> (u16, Value) {
    let mut body = json!({
        "idpToken": flow.space.idp_token("alice"), "actor": actor, "view": "manager-caller",
    });
    if let Some(i) = instance {
        body["managerInstanceId"] = json!(i);
    }
    post(
        flow.d["url"].as_str().unwrap(),
        flow.d["cap"].as_str(),
        &body,
    )
}

/// The accepted row this connection's nonce names, read over its own per-key grant.
async fn accepted(client: &Client, nonce: &str) -> Value {
    let space = cotal_core::names::SpaceName::parse(SPACE).unwrap();
    let reply = client
        .request(
            AcceptedToken::for_connection(nonce).read_grant(&space),
            Vec::new().into(),
        )
        .await
        .unwrap();
    serde_json::from_slice(&reply.payload).unwrap_or_else(|_| {
        panic!(
            "no accepted row: {:?} {}",
            reply.headers,
            String::from_utf8_lossy(&reply.payload)
        )
    })
}

/// Publishes on `subject` and reports the permissions violation the server answers, if any.
async fn violation(
    client: &Client,
    errors: &mut mpsc::UnboundedReceiver<String>,
    subject: String,
) -> Option<String> {
    client.publish(subject, "{}".into()).await.unwrap();
    client.flush().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), errors.recv())
        .await
        .ok()
        .flatten()
}

/// prepare → contract → the serving registration (its READY status at the committed epoch, as
/// the reference manager's `registerServingInstance` writes it), checking the selection's
/// refusal before it: the instance is then the owner's one live candidate. Returns the
/// supervisor's connection (held open, as a running manager's) and the registration.
async fn live_manager(flow: &Flow) -> (Holder, Registered) {
    let (status, body) = exchange(flow, None);
    assert_eq!(status, 401, "{body}");
    assert!(
        error(&body).contains("found no manager candidate"),
        "{body}"
    );
    let prepared = flow.granted(&flow.envelope("prepare", "prepare00000000000000001"));
    let (jwt, _) = flow.credential(&prepared, "supervisor", &flow.keys[0]);
    let supervisor = flow.connect(&jwt, &flow.keys[0]).await;
    let closure = flow.publish_contract(&supervisor).await;
    let registered = flow.register(&closure, 1).await;
    (supervisor, registered)
}

/// A `manager-caller` bearer for `alice/<actor>`, and its connection under `nonce` with the
/// generation its accepted row names and the caller triple.
async fn issued_caller(
    flow: &Flow,
    actor: &str,
    nonce: &str,
) -> (Client, mpsc::UnboundedReceiver<String>, String, String) {
    let (status, body) = exchange_as(flow, actor, None);
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap();
    let (client, errors) = connect(&flow.space, &flow.server, token, nonce)
        .await
        .unwrap();
    let r = accepted(&client, nonce).await["ref"].clone();
    let caller = format!("{}.{actor}.{}", flow.owner, r["uid"].as_str().unwrap());
    (
        client,
        errors,
        r["generation"].as_str().unwrap().to_owned(),
        caller,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_caller_selects_the_live_instance_and_connects_as_an_issuance() {
    let flow = Flow::new().await;
    let (supervisor, _) = live_manager(&flow).await;

    let (status, body) = exchange(&flow, Some("nnnnnnnnnnnnnnnnnnnnnnnnnn"));
    assert_eq!(status, 401, "{body}");
    assert!(error(&body).contains("is unknown"), "{body}");
    let (status, body) = exchange(&flow, None);
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap().to_owned();
    let act = &claims(&token)["act"];
    assert_eq!(act["view"], "manager-caller");
    assert_eq!(act["managerInstanceId"], IID, "the one live instance");
    assert_eq!(body["managerInstanceId"], IID, "echoed to the caller");

    let nonce = "mcnonce0000000000000000001";
    let (client, mut errors) = connect(&flow.space, &flow.server, &token, nonce)
        .await
        .unwrap();
    let row = accepted(&client, nonce).await;
    let r = &row["ref"];
    assert_eq!(
        (r["owner"].as_str(), r["actor"].as_str()),
        (Some(flow.owner.as_str()), Some("cli"))
    );
    let generation = r["generation"].as_str().unwrap().to_owned();
    assert_eq!(generation.len(), 32);
    let uid = r["uid"].as_str().unwrap();
    let caller = format!("{}.cli.{uid}", flow.owner);
    let v1 = format!(
        "cotal.{SPACE}.ep.v1.inst.manager.{IID}.run-start.{caller}.{generation}.reqnonce000000000000001"
    );
    assert_eq!(
        violation(&client, &mut errors, v1).await,
        None,
        "F77: the v1 rail"
    );
    let legacy =
        format!("cotal.{SPACE}.ep.inst.manager.{IID}.run-start.{caller}.reqnonce000000000000002");
    let refused = violation(&client, &mut errors, legacy).await;
    assert!(
        refused.is_some_and(|e| e.to_lowercase().contains("permissions violation")),
        "F81: no legacy run-start"
    );
    let other = AcceptedToken::for_connection("someone-elses-nonce-000001");
    let space = cotal_core::names::SpaceName::parse(SPACE).unwrap();
    let foreign = client
        .request(other.read_grant(&space), Vec::new().into())
        .await;
    assert!(foreign.is_err(), "only its own accepted row is readable");
    client.drain().await.unwrap();

    // A reconnect under the same nonce renews the same generation; a new nonce is a new one.
    let (again, _) = connect(&flow.space, &flow.server, &token, nonce)
        .await
        .unwrap();
    assert_eq!(
        accepted(&again, nonce).await["ref"]["generation"],
        generation
    );
    let fresh_nonce = "mcnonce0000000000000000002";
    let (fresh, _) = connect(&flow.space, &flow.server, &token, fresh_nonce)
        .await
        .unwrap();
    let fresh_generation = accepted(&fresh, fresh_nonce).await["ref"]["generation"].clone();
    assert_ne!(fresh_generation, json!(generation), "F77: never reused");
    drop(supervisor);
}

/// A run request envelope as `cotal run` sends it: the caller's `from.id`, the manager's
/// `op` naming `command` (the contract digests are the test manager's, which declares no run
/// command, so only an admission, which does not compare them, may use it).
fn envelope(from: &str, command: &str, args: Value) -> Vec<u8> {
    json!({
        "v": 1, "id": "req-0001", "class": "ephemeral", "replyExpected": true,
        "op": {"endpoint": "manager", "command": command, "inputDigest": VOID, "outputDigest": VOID},
        "from": {"id": from},
        "args": args,
    })
    .to_string()
    .into_bytes()
}

/// The registered-manager fields every run request carries, for `kind`.
fn run_request(flow: &Flow, kind: &str, rid: &str, proof: &str, epoch: u64) -> Value {
    let mut raw = flow.renewal("x", rid, proof, epoch);
    let o = raw.as_object_mut().unwrap();
    o.remove("operation");
    o.insert("kind".into(), json!(kind));
    raw
}

fn admission(flow: &Flow, proof: &str, epoch: u64, run: &str, subject: &str) -> Value {
    let mut raw = run_request(
        flow,
        "manager-run-admission",
        "admit000000000000000001",
        proof,
        epoch,
    );
    raw["run"] = json!({"runId": run, "subject": subject});
    raw
}

fn attempt(flow: &Flow, proof: &str, epoch: u64, run: &str, n: u64) -> Value {
    let mut raw = run_request(
        flow,
        "manager-run-attempt",
        "attempt00000000000000001",
        proof,
        epoch,
    );
    raw["attempt"] = json!({
        "runId": run, "takeoverId": TAKEOVER, "epoch": n, "fencingToken": n,
        "driverId": flow.driver.public_key(), "mediatorId": flow.mediator.public_key(),
    });
    raw
}

/// STAND-IN (the run driver journals its run; none runs here): the admin connection creates
/// the space's journal stream, appends the reference's activation and a checkpoint's begin and
/// bind for [`RUN`] (each fenced on the subject's last sequence, as a driver appends), and
/// writes the pause's `waiting` status row.
async fn journal_with_waiting_checkpoint(flow: &Flow) {
    use cotal_io_nats::async_nats::header::HeaderMap;
    use cotal_io_nats::async_nats::jetstream::stream::{Config, RetentionPolicy, StorageType};
    let client = flow.admin.space().unwrap().client().clone();
    let js = cotal_io_nats::async_nats::jetstream::new(client);
    js.create_stream(Config {
        name: format!("WFJ_{SPACE}"),
        subjects: vec![format!("cotal.{SPACE}.wfj.*")],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        allow_direct: false,
        ..Config::default()
    })
    .await
    .unwrap();
    let mut head = 0;
    for record in [
        journal::ACTIVATION,
        journal::CHECKPOINT_BEGIN,
        journal::CHECKPOINT_BOUND,
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            head.to_string().as_str(),
        );
        head = js
            .publish_with_headers(
                format!("cotal.{SPACE}.wfj.{RUN}"),
                headers,
                record.as_bytes().to_vec().into(),
            )
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence;
    }
    let written = flow
        .admin
        .space()
        .unwrap()
        .execute(&KvRequest::CreateStrict {
            store: Store::Records,
            key: format!("cp.manager.{}.status", journal::TOKEN),
            value: journal::STATUS_WAITING.as_bytes().to_vec(),
        })
        .await;
    assert!(matches!(written, KvOutcome::Written(_)), "{written:?}");
}

/// §11.5 remote-run-admission and remote-run-attempt-route on the running daemon: the issued
/// caller publishes its `run-start` on the v1 rail, the plane observes it, and the registered
/// manager's forward is admitted with the caller's issuance as provenance and ceiling; the
/// refusals write nothing; then attempts for the admitted run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_admission_and_attempts_are_served_for_an_issued_caller() {
    let flow = Flow::new().await;
    let (_supervisor, registered) = live_manager(&flow).await;
    let epoch = registered.process_epoch.0;
    let proof = flow.current_proof().await;
    // The run's caller is a second interactive actor of alice's, so its grant can be revoked
    // while the manager's own (`alice/cli`, which authenticates the route) stays.
    flow.space.grant_lists("runner", "alice", "", "", "");
    let nonce = "runnonce000000000000000001";
    let (client, _errors, generation, caller) = issued_caller(&flow, "runner", nonce).await;
    let from = format!("{}.runner", flow.owner);
    let run = RUN;
    let start = |n: u32| {
        format!(
            "cotal.{SPACE}.ep.v1.inst.manager.{IID}.run-start.{caller}.{generation}.startnonce{n:012}0000"
        )
    };
    let publish = |subject: String| {
        let client = client.clone();
        let payload = envelope(&from, "run-start", json!({}));
        async move {
            client.publish(subject, payload.into()).await.unwrap();
            client.flush().await.unwrap();
        }
    };

    // A forward the plane never observed is refused, and writes nothing.
    flow.refused(
        &admission(&flow, &proof, epoch, run, &start(1)),
        "did not observe",
    );
    publish(start(1)).await;
    let admitted = flow.granted(&admission(&flow, &proof, epoch, run, &start(1)));
    assert_eq!(admitted["kind"], "manager-run-admission");
    assert_eq!(admitted["runId"], run);
    let a = &admitted["admission"];
    assert_eq!(a["caller"]["generation"], generation.as_str());
    assert_eq!(a["provenance"]["kind"], "issued");
    assert_eq!(a["provenance"]["ref"]["generation"], generation.as_str());
    assert!(a["ceiling"]["publish"]["allow"]["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p.as_str().unwrap().contains(".run-start.")));
    // The observation is consumed once: the same forward again is not observed.
    flow.refused(
        &admission(&flow, &proof, epoch, run, &start(1)),
        "did not observe",
    );
    // The caller publishing the same request again makes an exact retry: the same admission.
    publish(start(1)).await;
    let again = flow.granted(&admission(&flow, &proof, epoch, run, &start(1)));
    assert_eq!(again["revision"], admitted["revision"]);
    assert_eq!(again["admission"]["admittedAt"], a["admittedAt"]);

    // Forged generation, legacy rail, foreign space: refused before or at resolution. The
    // caller's own credential cannot even publish a generation it was not issued, so the forged
    // request comes from the test's unrestricted admin connection.
    let forged = start(2).replace(&generation, "ffffffffffffffffffffffffffffffff");
    let admin = flow.admin.space().unwrap().client().clone();
    admin
        .publish(
            forged.clone(),
            envelope(&from, "run-start", json!({})).into(),
        )
        .await
        .unwrap();
    admin.flush().await.unwrap();
    let other_run = "run-ffeeddccbbaa99887766554433221100";
    flow.refused(
        &admission(&flow, &proof, epoch, other_run, &forged),
        "no issued evidence",
    );
    let legacy = format!(
        "cotal.{SPACE}.ep.inst.manager.{IID}.run-start.{caller}.startnonce0000000000030000"
    );
    flow.refused(
        &admission(&flow, &proof, epoch, other_run, &legacy),
        "served v1 run-start subject",
    );
    let foreign = start(4).replace(&format!("cotal.{SPACE}."), "cotal.elsewhere.");
    flow.refused(
        &admission(&flow, &proof, epoch, other_run, &foreign),
        "served v1 run-start subject",
    );
    let wrong = format!("sha256:{}", "0".repeat(64));
    flow.refused(
        &admission(&flow, &wrong, epoch, other_run, &start(5)),
        "does not match the current registration",
    );
    flow.refused(
        &admission(&flow, &proof, epoch + 1, other_run, &start(5)),
        "stale",
    );

    // Attempts: the first is 1/1 with no run record; any other pair is refused.
    let first = flow.granted(&attempt(&flow, &proof, epoch, run, 1));
    assert_eq!(first["kind"], "manager-run-attempt");
    let (driver, _) = flow.credential(&first, "driver", &flow.driver);
    let (mediator, _) = flow.credential(&first, "mediator", &flow.mediator);
    flow.connect(&driver, &flow.driver).await;
    flow.connect(&mediator, &flow.mediator).await;
    flow.refused(
        &attempt(&flow, &proof, epoch, run, 9),
        "next recorded epoch",
    );
    flow.refused(
        &attempt(&flow, &proof, epoch, other_run, 1),
        "no admission record",
    );
    let fence = |n: u64| RunFence {
        holder: format!("{}.{TAKEOVER}", flow.keys[0].public_key()),
        epoch: n,
        token: n,
    };
    flow.record_run_status(run, RunState::Running, &fence(1))
        .await;
    flow.refused(
        &attempt(&flow, &proof, epoch, run, 1),
        "next recorded epoch",
    );
    flow.granted(&attempt(&flow, &proof, epoch, run, 2));

    // A caller-requested resume rides the v1 rail; the plane observed it, once.
    let resume = format!(
        "cotal.{SPACE}.ep.v1.inst.manager.{IID}.run-resume.{caller}.{generation}.resumenonce00000000001"
    );
    let mut served = attempt(&flow, &proof, epoch, run, 2);
    served["attempt"]["served"] = json!(resume);
    flow.refused(&served, "did not observe");
    client
        .publish(
            resume.clone(),
            envelope(&from, "run-resume", json!({"runId": run})).into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();
    let resumed = flow.granted(&served);
    flow.credential(&resumed, "driver", &flow.driver);

    // A read operator, and an answering one whose pause is read from the run's own journal.
    let operator = KeyPair::new_user();
    let mut read = run_request(
        &flow,
        "manager-run-attempt",
        "operator000000000000001",
        &proof,
        epoch,
    );
    read["operator"] = json!({"id": operator.public_key(), "takeoverId": TAKEOVER});
    let granted = flow.granted(&read);
    let (jwt, _) = flow.credential(&granted, "operator", &operator);
    flow.connect(&jwt, &operator).await;
    journal_with_waiting_checkpoint(&flow).await;
    let answer = format!(
        "cotal.{SPACE}.ep.v1.inst.manager.{IID}.run-answer.self.{caller}.{generation}.answernonce00000000001"
    );
    let answering = |step: &str| {
        let mut raw = read.clone();
        raw["operator"]["answers"] = json!({"runId": run, "stepKey": step});
        raw["operator"]["served"] = json!(answer);
        raw
    };
    flow.refused(&answering("/checkpoint:other#0"), "has no open checkpoint");
    client
        .publish(
            answer.clone(),
            envelope(
                &from,
                "run-answer",
                json!({"runId": run, "stepKey": journal::STEP}),
            )
            .into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();
    let answered = flow.granted(&answering(journal::STEP));
    flow.credential(&answered, "operator", &operator);

    // The route's refusals of an attempt (§11.5 remote-run-attempt-route), each a 403.
    let mut both = attempt(&flow, &proof, epoch, run, 3);
    both["operator"] = read["operator"].clone();
    flow.refused(&both, "exactly one");
    let mut unscoped = attempt(&flow, &proof, epoch, run, 3);
    unscoped["actor"] = json!("runner");
    flow.refused(&unscoped, "supervise");
    let mut foreign_account = attempt(&flow, &proof, epoch, run, 3);
    foreign_account["accountPublicKey"] = json!(KeyPair::new_account().public_key());
    flow.refused(&foreign_account, "host-assigned space and account");
    let mut foreign_instance = attempt(&flow, &proof, epoch, run, 3);
    foreign_instance["instanceId"] = json!("nnnnnnnnnnnnnnnnnnnnnnnnnn");
    flow.refused(&foreign_instance, "no open registration gate");
    flow.refused(
        &attempt(&flow, &wrong, epoch, run, 3),
        "does not match the current registration",
    );
    flow.refused(&attempt(&flow, &proof, epoch + 1, run, 3), "stale");

    flow.record_run_status(run, RunState::Completed, &fence(2))
        .await;
    flow.refused(&attempt(&flow, &proof, epoch, run, 3), "terminal run");

    // Retiring the caller's lifecycle ends its issuance, though its grant row stays until a
    // re-grant: the next admission is refused as dead (F79).
    publish(start(7)).await;
    let uid = caller.rsplit('.').next().unwrap();
    let (status, retired) = common::signin::post_to(
        flow.d["url"].as_str().unwrap(),
        "/interactive-lifecycle/retire",
        flow.d["cap"].as_str(),
        &json!({"owner": flow.owner, "actor": "runner", "lifecycleUid": uid}),
    );
    assert_eq!(status, 200, "{retired}");
    flow.refused(
        &admission(&flow, &proof, epoch, other_run, &start(7)),
        "no longer live",
    );

    // A revoked grant kills the issuance's source: the next admission is refused as dead. The
    // retirement kicked `runner`'s connection, so a second caller of alice's shows it.
    flow.space.grant_lists("runner2", "alice", "", "", "");
    let (second, _, generation2, caller2) =
        issued_caller(&flow, "runner2", "runnonce000000000000000002").await;
    let start2 = format!(
        "cotal.{SPACE}.ep.v1.inst.manager.{IID}.run-start.{caller2}.{generation2}.startnonce0000000000080000"
    );
    second
        .publish(
            start2.clone(),
            envelope(&format!("{}.runner2", flow.owner), "run-start", json!({})).into(),
        )
        .await
        .unwrap();
    second.flush().await.unwrap();
    flow.space.authd(&[
        "actor",
        "revoke",
        "runner2",
        "--space",
        SPACE,
        "--idp-subject",
        "alice",
    ]);
    flow.refused(
        &admission(&flow, &proof, epoch, other_run, &start2),
        "no longer live",
    );
}
