//! The issuing host's run request observer on a real `nats-server` (SPEC §14.8,
//! reference-auth-service §5.1): what a caller publishes on the served run request subjects is
//! takeable once, at once after the manager received it, and nothing else is recorded.
//!
//! Each request is carried the way a forward is: a caller publishes it and a manager's
//! subscription receives it, so the broker has delivered it everywhere before the take. No test
//! sleeps before a take: the observer's round trip is what makes the take exact.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::Duration;

use cotal_core::journal::RunId;
use cotal_core::names::SpaceName;
use cotal_core::run::RunRequestOperation;
use cotal_io_nats::async_nats::{self, Client, ConnectOptions, Subscriber};
use cotal_io_nats::RunRequestObserver;
use cotal_tests::nats::{NatsServer, ServerOptions};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::time::timeout;

const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";
const SENDER: &str = "u_cccccccccccccccccccccccccc.alice";
const CALLER_UID: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";
const GEN: &str = "0123456789abcdef0123456789abcdef";
const RUN: &str = "run-dddddddddddddddddddddddddddddddd";
/// How long the manager waits for a request it expects.
const CARRY_WAIT: Duration = Duration::from_secs(5);
/// How long the observer's runtime is driven between two rounds of requests: ample for it to
/// read 3 small deliveries and drain them (its drain waits at most 25 ms at a time).
const ROUND_PAUSE: Duration = Duration::from_millis(100);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn space() -> SpaceName {
    SpaceName::parse("s1").unwrap()
}

/// `cotal.s1.<rail>.<route…>.<command>[.<target>].<caller>[.<gen>].<nonce>`: `route` is the
/// route's tokens (`one.manager`, `inst.manager.<iid>`), `nonce` a distinguishing suffix.
fn subject(v1: bool, route: &str, command: &str, target: &str, nonce: &str) -> String {
    let (rail, generation) = if v1 {
        ("ep.v1", format!(".{GEN}"))
    } else {
        ("ep", String::new())
    };
    format!(
        "cotal.s1.{rail}.{route}.{command}{target}.{SENDER}.{CALLER_UID}{generation}.nonce_{nonce:0>18}"
    )
}

fn envelope(command: &str, args: Value) -> Value {
    json!({
        "v": 1, "id": "req_0123456789", "class": "ephemeral",
        "op": {
            "endpoint": "manager", "command": command,
            "inputDigest": format!("sha256:{}", "1".repeat(64)),
            "outputDigest": format!("sha256:{}", "2".repeat(64)),
        },
        "from": {"id": SENDER}, "replyExpected": true, "args": args,
    })
}

async fn connect(server: &NatsServer) -> Client {
    async_nats::connect(server.url()).await.unwrap()
}

/// The manager's view of the whole request plane.
async fn manager(server: &NatsServer) -> (Client, Subscriber) {
    manager_of(server, "cotal.s1.ep.>").await
}

/// A manager subscribed to `pattern`, registered at the server before it returns: a message of
/// its own on a separate probe subscription comes back after the server processed the SUB.
async fn manager_of(server: &NatsServer, pattern: &str) -> (Client, Subscriber) {
    let client = connect(server).await;
    let plane = client.subscribe(pattern.to_owned()).await.unwrap();
    let inbox = client.new_inbox();
    let mut probe = client.subscribe(inbox.clone()).await.unwrap();
    client.publish(inbox, "".into()).await.unwrap();
    client.flush().await.unwrap();
    timeout(CARRY_WAIT, probe.next()).await.unwrap().unwrap();
    (client, plane)
}

/// The caller publishes `body` on `subject` and the manager receives it.
async fn carry(caller: &Client, manager: &mut Subscriber, subject: &str, body: &Value) {
    caller
        .publish(subject.to_owned(), body.to_string().into())
        .await
        .unwrap();
    caller.flush().await.unwrap();
    let got = timeout(CARRY_WAIT, manager.next())
        .await
        .unwrap_or_else(|_| panic!("the manager did not receive {subject}"))
        .unwrap();
    assert_eq!(got.subject.as_str(), subject);
}

/// A run-start published as soon as the observer has started, and received by the manager, is
/// takeable at once with its operation and envelope; a second take of the same subject finds
/// nothing: one forward per observed request.
#[test]
fn a_received_run_start_is_taken_at_once_and_only_once() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let caller = connect(&server).await;
        let (_m, mut plane) = manager(&server).await;
        let observer = RunRequestObserver::start(connect(&server).await, space())
            .await
            .unwrap();
        let start = subject(true, "one.manager", "run-start", "", "start");
        carry(
            &caller,
            &mut plane,
            &start,
            &envelope("run-start", json!({})),
        )
        .await;

        let seen = observer.take(&start).await.expect("observed");
        assert_eq!(seen.operation, RunRequestOperation::Start);
        assert_eq!(seen.envelope["class"], "ephemeral");
        assert_eq!(seen.envelope["op"]["command"], "run-start");
        assert_eq!(observer.take(&start).await, None, "taken once");
    });
}

/// Another command on the same rail and a run-start whose envelope disagrees with its subject
/// are carried to the manager but never recorded; a good run-start carried after them is.
#[test]
fn other_commands_and_disagreeing_envelopes_are_never_recorded() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let observer = RunRequestObserver::start(connect(&server).await, space())
            .await
            .unwrap();
        let caller = connect(&server).await;
        let (_m, mut plane) = manager(&server).await;

        let status = subject(true, "one.manager", "run-status", "", "status");
        let body = envelope("run-status", json!({"runId": RUN}));
        carry(&caller, &mut plane, &status, &body).await;
        assert_eq!(observer.take(&status).await, None, "run-status");

        let forged = subject(true, "one.manager", "run-start", "", "forged");
        let mut body = envelope("run-start", json!({}));
        body["from"]["id"] = json!("u_dddddddddddddddddddddddddd.alice");
        carry(&caller, &mut plane, &forged, &body).await;
        assert_eq!(observer.take(&forged).await, None, "from.id disagrees");

        let start = subject(true, "all.manager", "run-start", "", "good");
        carry(
            &caller,
            &mut plane,
            &start,
            &envelope("run-start", json!({})),
        )
        .await;
        assert!(
            observer.take(&start).await.is_some(),
            "the observer is live"
        );
    });
}

/// Legacy-rail requests are observed too: a resume names its run, and an instance-routed,
/// self-targeted answer its endpoint, run, step and amendment.
#[test]
fn legacy_rail_resume_and_answer_are_recorded_with_their_operation() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    runtime().block_on(async {
        let observer = RunRequestObserver::start(connect(&server).await, space())
            .await
            .unwrap();
        let caller = connect(&server).await;
        let (_m, mut plane) = manager(&server).await;
        let run_id = RunId::parse(RUN).unwrap();

        let resume = subject(false, "one.manager", "run-resume", "", "resume");
        let body = envelope("run-resume", json!({"runId": RUN}));
        carry(&caller, &mut plane, &resume, &body).await;

        let answer = subject(
            false,
            &format!("inst.manager.{IID}"),
            "run-answer",
            ".self",
            "answer",
        );
        let args = json!({"runId": RUN, "stepKey": "ask", "amend": true, "answer": "yes"});
        carry(&caller, &mut plane, &answer, &envelope("run-answer", args)).await;

        assert_eq!(
            observer.take(&resume).await.expect("resume").operation,
            RunRequestOperation::Resume {
                run_id: run_id.clone()
            }
        );
        assert_eq!(
            observer.take(&answer).await.expect("answer").operation,
            RunRequestOperation::Answer {
                endpoint: "manager".into(),
                run_id,
                step_key: "ask".into(),
                amend: true,
            }
        );
    });
}

/// With subscriber channels of 4, many more requests than that arrive between takes and every
/// one is still takeable afterwards: the background drain empties the channels, where the
/// client would drop deliveries as a slow consumer. The observer runs on a runtime of its own,
/// driven only between rounds, so each round reaches it as one burst of 3 (a single burst
/// larger than a channel is dropped however fast anything drains).
#[test]
fn requests_between_takes_are_drained_so_no_channel_overflows() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let (host, net) = (runtime(), runtime());
    let observer = host.block_on(async {
        let small = ConnectOptions::new()
            .subscription_capacity(4)
            .connect(server.url())
            .await
            .unwrap();
        RunRequestObserver::start(small, space()).await.unwrap()
    });
    let (caller, (_m, mut plane)) =
        net.block_on(async { (connect(&server).await, manager(&server).await) });
    let starts: Vec<String> = (0..24)
        .map(|n| subject(true, "one.manager", "run-start", "", &n.to_string()))
        .collect();
    for round in starts.chunks(3) {
        net.block_on(async {
            for start in round {
                carry(
                    &caller,
                    &mut plane,
                    start,
                    &envelope("run-start", json!({})),
                )
                .await;
            }
        });
        // The observer reads the round, and its drain records it.
        host.block_on(async { tokio::time::sleep(ROUND_PAUSE).await });
    }
    host.block_on(async {
        for start in &starts {
            assert!(observer.take(start).await.is_some(), "{start}");
        }
    });
}

/// A take right after the manager received a request finds it even while most of what the
/// server sent the observer before it is still on the way: 32 MiB of run-starts ahead of the
/// target, more than the socket buffers hold, sent while the observer's runtime is not driven
/// (so its connection reads nothing until the take). The take's round trip comes back behind
/// all of it; a socket flush alone would look before the target is read.
#[test]
fn a_take_waits_for_deliveries_still_in_flight_to_the_observer() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let (host, net) = (runtime(), runtime());
    let observer = host.block_on(async {
        RunRequestObserver::start(connect(&server).await, space())
            .await
            .unwrap()
    });
    let target = subject(true, "one.manager", "run-start", "", "target");
    net.block_on(async {
        let caller = connect(&server).await;
        let (_m, mut plane) = manager_of(&server, &target).await;
        let bulky = envelope("run-start", json!({"input": "x".repeat(64 * 1024)}));
        for n in 0..512 {
            let backlog = subject(true, "one.manager", "run-start", "", &format!("b{n}"));
            caller
                .publish(backlog, bulky.to_string().into())
                .await
                .unwrap();
        }
        carry(
            &caller,
            &mut plane,
            &target,
            &envelope("run-start", json!({})),
        )
        .await;
    });
    assert!(host.block_on(observer.take(&target)).is_some());
}
