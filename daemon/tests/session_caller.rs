//! The `session-caller` view end to end on the running daemon (issue 15, reference §3.5, §8.4,
//! SPEC §13.6): a remote manager registers, serves and is activated; its real `session-ledger`
//! credential redeems a session for `alice/cli` in the sessions store (create-only `issuing`,
//! then `active`, F72); alice exchanges the grant for a `session-caller` bearer, connects
//! through the auth callout with a standard NATS client, and her connection holds exactly that
//! session's caller rails. Closing the session (F73) refuses the next exchange and the next
//! connect.
//!
//! Real: the IdP token, the ledger, the plane, the manager's registration and activation on the
//! space's own operator-mode server, its session-ledger credential, the callout. STAND-INs: the
//! fixture's (`common/manager.rs`); the grant's signature (the manager signs grants with a key
//! this plane never sees, and the plane only compares it with the row's); and the serving side
//! of the rails, a data-account user minted here in place of the manager's `session-serving`
//! connection.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::Duration;

use common::manager::*;
use common::signin::{claims, connect, post, refused};
use common::SPACE;
use cotal_core::jwt::{user_creds, UnixSeconds, UserNats, Validity};
use cotal_io_nats::async_nats::{self, jetstream, Client, HeaderMap};
use futures::StreamExt as _;
use serde_json::{json, Value};

const SID: &str = "sessAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const SIG: &str = "c2lnbmF0dXJlLW9mLXRoZS1ncmFudA";

fn exchange(flow: &Flow, subject: &str, grant: &Value) -> (u16, Value) {
    post(
        flow.d["url"].as_str().unwrap(),
        flow.d["cap"].as_str(),
        &json!({
            "idpToken": flow.space.idp_token(subject), "actor": "cli",
            "view": "session-caller", "sessionGrant": grant,
        }),
    )
}

/// The grant the manager's attach would answer, for a session served at `epoch`.
fn grant(holder: &str, uid: &str, epoch: u64, exp_ms: u64, sig: &str) -> Value {
    json!({
        "v": 1, "sessionId": SID, "space": SPACE, "endpoint": "manager",
        "subjects": {"in": rail(epoch, "in"), "out": rail(epoch, "out")},
        "holder": {"id": holder, "lifecycleUid": uid, "processEpoch": 0},
        "serving": {"instanceId": IID, "epoch": epoch}, "window": 64,
        "iat": now_secs() * 1000, "exp": exp_ms, "nonce": "nonce-0001",
        "issuer": {"keyId": "manager-key"}, "sig": sig,
    })
}

fn rail(epoch: u64, dir: &str) -> String {
    format!("cotal.{SPACE}.eps.manager.{SID}.{epoch}.{dir}")
}

/// The session row as the manager's redemption writes it.
fn session_row(holder: &str, uid: &str, epoch: u64, exp_ms: u64, state: &str) -> Vec<u8> {
    json!({
        "sessionId": SID, "endpoint": "manager",
        "serving": {"instanceId": IID, "epoch": epoch},
        "holder": {"principal": holder, "lifecycleUid": uid},
        "grantSig": SIG, "credCaller": format!("{SID}.c"), "credServing": format!("{SID}.s"),
        "revoked": {"caller": false, "serving": false}, "state": state, "exp": exp_ms,
    })
    .to_string()
    .into_bytes()
}

/// Writes `session.<SID>` over the manager's session-ledger connection, pinned to `last`
/// (0 = create-only), and returns the new revision.
async fn write_row(ledger: &Client, bytes: Vec<u8>, last: u64) -> u64 {
    let mut headers = HeaderMap::new();
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence",
        last.to_string().as_str(),
    );
    let ack = jetstream::new(ledger.clone())
        .publish_with_headers(
            format!("$KV.cotal_sessions_{SPACE}.session.{SID}"),
            headers,
            bytes.into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    ack.sequence
}

/// STAND-IN for the manager's `session-serving` connection: a data-account user.
async fn serving_side(flow: &Flow) -> Client {
    let user = nkeys::KeyPair::new_user();
    let creds = user_creds(
        flow.material.data_signing_key(),
        flow.material.data_account(),
        &user,
        "session-serving-stand-in",
        &UserNats::default(),
        Validity {
            issued_at: UnixSeconds(now_secs()),
            expires_at: Some(UnixSeconds(now_secs() + 600)),
        },
    )
    .unwrap()
    .text();
    async_nats::ConnectOptions::with_credentials(&creds)
        .unwrap()
        .connect(&flow.server)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_redeemed_session_exchanges_for_holder_session_caller_bearer() {
    let flow = Flow::new().await;
    flow.space.grant_lists("cli", "bob", "", "", "");
    let prepared = flow.granted(&flow.envelope("prepare", "prepare00000000000000001"));
    let (jwt, _) = flow.credential(&prepared, "supervisor", &flow.keys[0]);
    let supervisor = flow.connect(&jwt, &flow.keys[0]).await;
    let closure = flow.publish_contract(&supervisor).await;
    let registered = flow.register(&closure, 1).await;
    let epoch = registered.process_epoch.0;
    let activated = flow.granted(&flow.activate_request("activate000000000000001"));
    let (ledger_jwt, ledger_claims) = flow.credential(&activated, "sessionLedger", &flow.keys[4]);
    assert_eq!(ledger_claims.name, "session-ledger");
    let ledger = flow.connect(&ledger_jwt, &flow.keys[4]).await;

    // alice/cli's lifecycle, from a plain bearer.
    let (status, plain) = post(
        flow.d["url"].as_str().unwrap(),
        flow.d["cap"].as_str(),
        &json!({"idpToken": flow.space.idp_token("alice"), "actor": "cli"}),
    );
    assert_eq!(status, 200, "{plain}");
    let uid = claims(plain["token"].as_str().unwrap())["act"]["lifecycleUid"]
        .as_str()
        .unwrap()
        .to_owned();
    let holder = format!("{}.cli", flow.owner);
    let exp_ms = (now_secs() + 300) * 1000 + 789;
    let the_grant = grant(&holder, &uid, epoch, exp_ms, SIG);

    // F72: the redemption's create-only `issuing` row confers nothing; `active` does.
    let issuing = write_row(
        &ledger.client,
        session_row(&holder, &uid, epoch, exp_ms, "issuing"),
        0,
    )
    .await;
    let (status, body) = exchange(&flow, "alice", &the_grant);
    assert_eq!(status, 401, "{body}");
    assert!(error(&body).contains("\"issuing\", not active"), "{body}");
    let active = write_row(
        &ledger.client,
        session_row(&holder, &uid, epoch, exp_ms, "active"),
        issuing,
    )
    .await;

    let (status, body) = exchange(&flow, "alice", &the_grant);
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap().to_owned();
    let c = claims(&token);
    assert_eq!(c["act"]["view"], "session-caller");
    assert_eq!(
        c["act"]["session"],
        json!({"endpoint": "manager", "sessionId": SID, "epoch": epoch, "exp": exp_ms / 1000})
    );
    assert!(
        c["exp"].as_u64().unwrap() <= exp_ms / 1000,
        "the bearer never outlives its session"
    );

    // The caller's rails, and nothing else.
    let serving = serving_side(&flow).await;
    let mut inbound = serving.subscribe(rail(epoch, "in")).await.unwrap();
    serving.flush().await.unwrap();
    let nonce = "scnonce0000000000000000001";
    let (caller, mut errors) = connect(&flow.space, &flow.server, &token, nonce)
        .await
        .unwrap();
    let mut outbound = caller.subscribe(rail(epoch, "out")).await.unwrap();
    caller.flush().await.unwrap();
    caller
        .publish(rail(epoch, "in"), "keystrokes".into())
        .await
        .unwrap();
    caller.flush().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), inbound.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got.payload[..], b"keystrokes");
    serving
        .publish(rail(epoch, "out"), "output".into())
        .await
        .unwrap();
    serving.flush().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), outbound.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got.payload[..], b"output");
    caller
        .publish(rail(epoch, "out"), "forged output".into())
        .await
        .unwrap();
    caller.flush().await.unwrap();
    let violation = tokio::time::timeout(Duration::from_secs(5), errors.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        violation.to_lowercase().contains("permissions violation"),
        "{violation}"
    );

    // Other owner cannot redeem held participant terminal authority.
    let (status, body) = exchange(&flow, "bob", &the_grant);
    assert_eq!(status, 401, "{body}");
    assert!(error(&body).contains("was issued to"), "{body}");
    // A grant the session was not redeemed with.
    let (status, body) = exchange(
        &flow,
        "alice",
        &grant(&holder, &uid, epoch, exp_ms, "forged"),
    );
    assert_eq!(status, 401, "{body}");
    assert!(error(&body).contains("not the one this session"), "{body}");

    // F73: the manager closes the session; the next exchange and the next connect are refused.
    write_row(
        &ledger.client,
        session_row(&holder, &uid, epoch, exp_ms, "closed"),
        active,
    )
    .await;
    let (status, body) = exchange(&flow, "alice", &the_grant);
    assert_eq!(status, 401, "{body}");
    assert!(error(&body).contains("\"closed\", not active"), "{body}");
    refused(
        connect(
            &flow.space,
            &flow.server,
            &token,
            "scnonce0000000000000000002",
        )
        .await,
    );
    drop((supervisor, caller));
}
