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

use std::time::Duration;

use common::manager::*;
use common::signin::{connect, post};
use common::SPACE;
use cotal_core::issued::AcceptedToken;
use cotal_io_nats::async_nats::Client;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// The bearer of a `manager-caller` exchange, or the refusal (every refused exchange is a 401,
/// reference §3.11).
fn exchange(flow: &Flow, instance: Option<&str>) -> (u16, Value) {
    let mut body = json!({
        "idpToken": flow.space.idp_token("alice"), "actor": "cli", "view": "manager-caller",
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

fn claims(token: &str) -> Value {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

/// The accepted row this connection's nonce names, read over its own per-key grant.
async fn accepted(client: &Client, nonce: &str) -> Value {
    let token = AcceptedToken::for_connection(nonce);
    let bucket = format!("cotal_accepted_{SPACE}");
    let reply = client
        .request(
            format!(
                "$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.{}",
                token.key()
            ),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_caller_selects_the_live_instance_and_connects_as_an_issuance() {
    let flow = Flow::new().await;
    let (status, body) = exchange(&flow, None);
    assert_eq!(status, 401, "{body}");
    assert!(
        error(&body).contains("found no manager candidate"),
        "{body}"
    );

    let (supervisor, closure) = {
        let prepared = flow.granted(&flow.envelope("prepare", "prepare00000000000000001"));
        let (jwt, _) = flow.credential(&prepared, "supervisor", &flow.keys[0]);
        let supervisor = flow.connect(&jwt, &flow.keys[0]).await;
        let closure = flow.publish_contract(&supervisor).await;
        (supervisor, closure)
    };
    flow.provision().await;
    let registered = flow.register(&closure, 1).await;
    let (status, body) = exchange(&flow, Some(IID));
    assert_eq!(status, 401, "{body}");
    assert!(error(&body).contains("is not registered"), "{body}");
    flow.report_ready(&registered).await;

    let (status, body) = exchange(&flow, Some("nnnnnnnnnnnnnnnnnnnnnnnnnn"));
    assert_eq!(status, 401, "{body}");
    assert!(error(&body).contains("is unknown"), "{body}");
    let (status, body) = exchange(&flow, None);
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap().to_owned();
    let act = &claims(&token)["act"];
    assert_eq!(act["view"], "manager-caller");
    assert_eq!(act["managerInstanceId"], IID, "the one live instance");

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
    let bucket = format!("cotal_accepted_{SPACE}");
    let foreign = client
        .request(
            format!(
                "$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.{}",
                other.key()
            ),
            Vec::new().into(),
        )
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
