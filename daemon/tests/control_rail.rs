//! The auth control rail and the retirement flights on the running daemon and a real
//! operator-mode server (reference §2.5 steps 7–9, §2.11, the managed-retire-door cells of
//! §11.6): a manager's `retirement-requester` credential asks the plane's `auth` instance to
//! retire one managed incarnation over the `ep` rail; the managed door and the rail racing for
//! one uid run one barrier (F49); a retirement a crash interrupted is finished by the next boot
//! before the plane answers anything, and a boot that cannot finish one says so loudly and
//! serves anyway.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::time::Duration;

use common::signin::{connect, post, post_to, Space};
use common::*;
use cotal_core::gate::GateState;
use cotal_core::host::retire_lifecycle_digests;
use cotal_core::issuance::{GateRef, ProvisionGate};
use cotal_core::jwt::{Creds, UnixSeconds};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::lifecycle::rows::{read_gate, read_head};
use cotal_core::lifecycle::{
    managed_retirement_op_id, AgentGate, HeadState, LifecycleHead, RetireLifecycle,
};
use cotal_core::machine::{script, Replay};
use cotal_core::names::{
    ActorToken, EndpointName, InstanceId, LifecycleUid, OwnerToken, Principal, SpaceName,
};
use cotal_core::profiles::{retirement_requester, ConnId, RailCaller, RetirementRequesterBinding};
use cotal_io_nats::async_nats::{self, Client, ConnectOptions};
use cotal_io_nats::{drive, AuthorityClient, NatsWorld};
use futures::StreamExt;
use nkeys::KeyPair;
use serde_json::{json, Value};

/// The managed agent's incarnation.
const UID: &str = "wwwwwwwwwwwwwwwwwwwwwwwwww";
/// The manager instance whose serve registration authorizes the despawn.
const MIID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";
/// The manager's own lifecycle uid (the caller triple's uid).
const MUID: &str = "nnnnnnnnnnnnnnnnnnnnnnnnnn";
const SERVE_ACTOR: &str = "mgrserve";
const SECRET: &str = "the-agent-secret";

fn space_name() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

/// A plane over the space's own server with one live managed incarnation `alice/worker` at
/// [`UID`] (its holder connected through the callout) and the manager instance [`MIID`]
/// registered for `alice/mgrserve` at epoch 0.
struct Fixture {
    space: Space,
    d: Value,
    server: String,
    owner: String,
    admin: AuthorityClient,
    /// The agent's own connection, which a retirement evicts.
    agent: Client,
}

impl Fixture {
    async fn new() -> Fixture {
        Fixture::with_env(&[]).await
    }

    /// [`Fixture::new`] with extra environment for the plane.
    async fn with_env(env: &[(&str, &str)]) -> Fixture {
        let mut space = Space::new();
        space.grant("cli", "alice", &[]);
        space.spawn_agent("alice", "cli", "worker", SECRET, UID);
        let server = space.serve_broker();
        let d = space.up_with(&["--server", &server], env, None);
        Fixture::with_plane(space, d, server).await
    }

    async fn with_plane(space: Space, d: Value, server: String) -> Fixture {
        let owner = space.owner("alice");
        let token = agent_bearer(&d, &owner);
        let (agent, _) = connect(&space, &server, &token, "ibxcontrolrail01")
            .await
            .unwrap();
        agent.flush().await.unwrap();
        let admin = space.admin(&server).await;
        let manager = GateRef::new(
            space_name(),
            EndpointName::parse("manager").unwrap(),
            InstanceId::parse(MIID).unwrap(),
        );
        let serve = Principal::new(
            OwnerToken::parse(&owner).unwrap(),
            ActorToken::parse(SERVE_ACTOR).unwrap(),
        );
        drive(
            &mut ProvisionGate::machine(manager, serve),
            &admin.space().unwrap(),
        )
        .await
        .unwrap();
        Fixture {
            space,
            d,
            server,
            owner,
            admin,
            agent,
        }
    }

    /// The despawn's `retirement-requester` connection for `target_actor` at `target_uid`.
    async fn requester(&self, target_actor: &str, target_uid: &str) -> Requester {
        let material = cotal_io_fs::trust::load_daemon(&self.space.root, &space_name()).unwrap();
        let user = KeyPair::new_user();
        let conn = ConnId::parse(&user.public_key()).unwrap();
        let caller = RailCaller {
            owner: OwnerToken::parse(&self.owner).unwrap(),
            actor: ActorToken::parse(SERVE_ACTOR).unwrap(),
            uid: LifecycleUid::parse(MUID).unwrap(),
        };
        let profile = retirement_requester(&RetirementRequesterBinding {
            space: space_name(),
            caller: caller.clone(),
            conn: conn.clone(),
            target: RailCaller {
                owner: OwnerToken::parse(&self.owner).unwrap(),
                actor: ActorToken::parse(target_actor).unwrap(),
                uid: LifecycleUid::parse(target_uid).unwrap(),
            },
        })
        .unwrap();
        let issued = profile
            .sign_for(
                material.data_signing_key(),
                material.data_account(),
                &user.public_key(),
                UnixSeconds(now_secs()),
            )
            .unwrap();
        let creds = Creds {
            jwt: issued.jwt,
            seed: user.seed().unwrap(),
        };
        let (tx, errors) = tokio::sync::mpsc::unbounded_channel();
        let client = ConnectOptions::with_credentials(&creds.text())
            .unwrap()
            .custom_inbox_prefix(format!("_INBOX_{conn}"))
            .event_callback(move |event| {
                let tx = tx.clone();
                async move {
                    if let async_nats::Event::ServerError(e) = event {
                        let _ = tx.send(e.to_string());
                    }
                }
            })
            .connect(&self.server)
            .await
            .unwrap();
        Requester {
            client,
            caller: format!("{}.{SERVE_ACTOR}.{MUID}", self.owner),
            owner: self.owner.clone(),
            errors,
        }
    }

    /// The agent gate `gate.<UID>` as the store holds it (a leader read).
    async fn gate(&self) -> AgentGate {
        let uid = LifecycleUid::parse(UID).unwrap();
        let read = script(move |cx| read_gate(cx, &uid));
        drive(&mut Replay::new(read), &self.admin.space().unwrap())
            .await
            .unwrap()
            .expect("gate.<uid> is absent")
            .row
    }

    /// The head `lifecycle.<owner>.worker` as the store holds it (a leader read).
    async fn head(&self) -> LifecycleHead {
        let (owner, actor) = (
            OwnerToken::parse(&self.owner).unwrap(),
            ActorToken::parse("worker").unwrap(),
        );
        let read = script(move |cx| read_head(cx, &owner, &actor));
        drive(&mut Replay::new(read), &self.admin.space().unwrap())
            .await
            .unwrap()
            .expect("the head is absent")
            .row
    }

    /// Revokes the managed grant (the despawn's deprovision), which the managed door requires.
    fn deprovision(&self) {
        let row = space_dir(&self.space.root)
            .join("managed-actors")
            .join(format!("{}.worker.json", self.owner));
        fs::remove_file(row).unwrap();
    }

    /// Asks the managed retire door (blocking): its status, or `None` when the plane died
    /// before it answered.
    async fn door(&self) -> Option<(u16, Value)> {
        let (url, cap) = (
            self.d["url"].as_str().unwrap().to_owned(),
            self.d["cap"].as_str().unwrap().to_owned(),
        );
        let body = json!({"owner": self.owner, "actor": "worker", "lifecycleUid": UID});
        tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(|| {
                post_to(&url, "/managed-lifecycle/retire", Some(&cap), &body)
            })
            .ok()
        })
        .await
        .unwrap()
    }

    async fn evicted(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.agent.connection_state() == async_nats::connection::State::Connected {
            assert!(
                std::time::Instant::now() < deadline,
                "the retired holder was not evicted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The managed agent's bearer, from the agent arm of `/exchange`.
fn agent_bearer(d: &Value, owner: &str) -> String {
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        d["cap"].as_str(),
        &json!({"owner": owner, "actor": "worker", "actorToken": SECRET}),
    );
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

struct Requester {
    client: Client,
    caller: String,
    owner: String,
    errors: tokio::sync::mpsc::UnboundedReceiver<String>,
}

fn nonce(n: u8) -> String {
    format!("nonce-control-rail-{n:04}")
}

impl Requester {
    fn subject(&self, actor: &str, uid: &str, nonce: &str) -> String {
        format!(
            "cotal.{SPACE}.ep.one.auth.retire-lifecycle.handle.{}.{actor}.{uid}.{}.{nonce}",
            self.owner, self.caller
        )
    }

    /// The request envelope for `worker` at [`UID`], with `edit` applied.
    fn envelope(&self, id: &str, edit: impl FnOnce(&mut Value)) -> Value {
        let (input, output) = retire_lifecycle_digests().unwrap();
        let uid = LifecycleUid::parse(UID).unwrap();
        let mut envelope = json!({
            "v": 1, "id": id, "class": "ephemeral", "replyExpected": true,
            "op": {"endpoint": "auth", "command": "retire-lifecycle",
                   "inputDigest": input.to_prefixed(), "outputDigest": output.to_prefixed()},
            "target": {"owner": self.owner, "actor": "worker", "lifecycleUid": UID},
            "from": {"id": format!("{}.{SERVE_ACTOR}", self.owner)},
            "args": {"opId": managed_retirement_op_id(&uid).unwrap().as_str(),
                     "serveEndpoint": "manager", "serveInstanceId": MIID, "serveEpoch": 0},
        });
        edit(&mut envelope);
        envelope
    }

    /// One call: subscribes the exact reply subject, publishes, and waits for the reply.
    async fn call(&self, nonce: &str, envelope: &Value) -> Value {
        let reply = format!("cotal.{SPACE}.ep.reply.auth.*.*.{}.{nonce}", self.caller);
        let mut replies = self.client.subscribe(reply).await.unwrap();
        self.client.flush().await.unwrap();
        self.client
            .publish(
                self.subject("worker", UID, nonce),
                envelope.to_string().into(),
            )
            .await
            .unwrap();
        self.client.flush().await.unwrap();
        let message = tokio::time::timeout(Duration::from_secs(40), replies.next())
            .await
            .expect("the rail did not answer")
            .unwrap();
        serde_json::from_slice(&message.payload).unwrap()
    }
}

fn refusal<'a>(reply: &'a Value, code: &str) -> &'a str {
    assert_eq!(reply["ok"], false, "{reply}");
    assert_eq!(reply["error"]["code"], code, "{reply}");
    assert_eq!(reply["error"]["outcome"], "not-executed", "{reply}");
    reply["error"]["message"].as_str().unwrap()
}

/// The plane's `/metrics` value of `cotal_retirement_flights_total` for `entry` and `flight`.
fn flights(d: &Value, entry: &str, flight: &str) -> u64 {
    let (status, _, text) = http(
        d["url"].as_str().unwrap(),
        "GET",
        "/metrics",
        &[(
            "authorization",
            &format!("Bearer {}", d["cap"].as_str().unwrap()),
        )],
        "",
    )
    .unwrap();
    assert_eq!(status, 200);
    let series =
        format!("cotal_retirement_flights_total{{entry=\"{entry}\",flight=\"{flight}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The rail retires the managed incarnation: the gate retired under `managedRetirementOpId`,
/// the holder evicted and named in the output; asked again, it is already retired and nothing
/// more is evicted (F47, F49).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f49_the_rail_retires_a_managed_incarnation_once() {
    let f = Fixture::new().await;
    let r = f.requester("worker", UID).await;
    let reply = r.call(&nonce(1), &r.envelope("call-1", |_| {})).await;
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["v"], 1);
    assert_eq!(reply["id"], "call-1");
    let op = managed_retirement_op_id(&LifecycleUid::parse(UID).unwrap()).unwrap();
    assert_eq!(
        reply["data"],
        json!({"retired": true, "lifecycleUid": UID, "opId": op.as_str(),
               "evictedPrincipals": [format!("{}.worker", f.owner)]})
    );
    f.evicted().await;
    let gate = f.gate().await;
    assert_eq!(gate.state(), GateState::Retired);
    assert_eq!(gate.op().unwrap().op_id(), &op);
    let again = r.call(&nonce(2), &r.envelope("call-2", |_| {})).await;
    assert_eq!(again["ok"], true, "{again}");
    assert_eq!(again["data"]["evictedPrincipals"], json!([]));
    assert_eq!(flights(&f.d, "rail", "started"), 1);
}

/// Every refusal is a full no-op answered `not-executed`: a superseded manager epoch
/// (F94), another op id than the lifecycle's one (F49), a target that is not the subject's, an
/// unregistered manager instance; the holder stays connected and the gate open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rail_refusals_change_nothing() {
    let f = Fixture::new().await;
    let r = f.requester("worker", UID).await;
    let superseded = r
        .call(
            &nonce(1),
            &r.envelope("c1", |e| e["args"]["serveEpoch"] = json!(1)),
        )
        .await;
    assert!(refusal(&superseded, "conflict").contains("SUPERSEDED"));
    let foreign_op = r
        .call(
            &nonce(2),
            &r.envelope("c2", |e| {
                e["args"]["opId"] = json!("aaaaaaaaaaaaaaaaaaaaaaaaaa");
            }),
        )
        .await;
    assert!(refusal(&foreign_op, "bad-request").contains("F49"));
    let retarget = r
        .call(
            &nonce(3),
            &r.envelope("c3", |e| e["target"]["actor"] = json!("other")),
        )
        .await;
    refusal(&retarget, "target-mismatch");
    let unregistered = r
        .call(
            &nonce(4),
            &r.envelope("c4", |e| {
                e["args"]["serveInstanceId"] = json!("zzzzzzzzzzzzzzzzzzzzzzzzzz");
            }),
        )
        .await;
    assert!(refusal(&unregistered, "failed-precondition").contains("FULL no-op"));
    let undigested = r
        .call(
            &nonce(5),
            &r.envelope("c5", |e| e["op"]["inputDigest"] = json!("sha256:00")),
        )
        .await;
    refusal(&undigested, "contract-mismatch");
    assert_eq!(f.gate().await.state(), GateState::Open);
    assert_eq!(
        f.agent.connection_state(),
        async_nats::connection::State::Connected
    );
    assert_eq!(flights(&f.d, "rail", "started"), 0);
}

/// The requester reaches only its own target and its own reply rail (F4, broker-enforced), and
/// the plane answers on the reply subject derived from the request, never on a transport reply
/// target (SPEC §13.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rail_requester_is_confined_and_replies_follow_the_subject() {
    let f = Fixture::new().await;
    let mut r = f.requester("worker", UID).await;
    // Another target: the server refuses the publish; nothing is retired.
    r.client
        .publish(
            r.subject("other", UID, &nonce(1)),
            r.envelope("c1", |_| {}).to_string().into(),
        )
        .await
        .unwrap();
    r.client.flush().await.unwrap();
    let violation = tokio::time::timeout(Duration::from_secs(5), r.errors.recv())
        .await
        .expect("no permission violation was reported")
        .unwrap();
    assert!(
        violation.to_lowercase().contains("permissions violation"),
        "{violation}"
    );
    // A transport reply target is ignored: the inbox hears nothing, the derived subject does.
    let inbox = r.client.new_inbox();
    let mut ignored = r.client.subscribe(inbox.clone()).await.unwrap();
    let reply = format!("cotal.{SPACE}.ep.reply.auth.*.*.{}.{}", r.caller, nonce(2));
    let mut answered = r.client.subscribe(reply).await.unwrap();
    r.client.flush().await.unwrap();
    r.client
        .publish_with_reply(
            r.subject("worker", UID, &nonce(2)),
            inbox,
            r.envelope("c2", |e| e["args"]["serveEpoch"] = json!(7))
                .to_string()
                .into(),
        )
        .await
        .unwrap();
    let message = tokio::time::timeout(Duration::from_secs(10), answered.next())
        .await
        .expect("no reply on the derived subject")
        .unwrap();
    let body: Value = serde_json::from_slice(&message.payload).unwrap();
    refusal(&body, "conflict");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), ignored.next())
            .await
            .is_err(),
        "the transport reply target was answered"
    );
    assert_eq!(f.gate().await.state(), GateState::Open);
}

/// Managed-retire-door cell: the host's loopback door and the manager's rail racing for one uid
/// run one barrier (F49: one process never runs one retirement twice), and both succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_retire_door_and_rail_racing_for_one_uid_run_one_barrier() {
    let f = Fixture::new().await;
    // The grant is revoked first (the despawn's deprovision): a row still at this uid blocks
    // the door.
    f.deprovision();
    let r = f.requester("worker", UID).await;
    let (url, cap) = (
        f.d["url"].as_str().unwrap().to_owned(),
        f.d["cap"].as_str().unwrap().to_owned(),
    );
    let body = json!({"owner": f.owner, "actor": "worker", "lifecycleUid": UID});
    let door = tokio::task::spawn_blocking(move || {
        post_to(&url, "/managed-lifecycle/retire", Some(&cap), &body)
    });
    let (call_nonce, envelope) = (nonce(1), r.envelope("race", |_| {}));
    let rail = r.call(&call_nonce, &envelope);
    let (door, rail) = tokio::join!(door, rail);
    let (status, door) = door.unwrap();
    assert_eq!(status, 200, "{door}");
    assert_eq!(door["retired"], true, "{door}");
    assert_eq!(rail["ok"], true, "{rail}");
    f.evicted().await;
    let started = flights(&f.d, "door", "started") + flights(&f.d, "rail", "started");
    assert_eq!(started, 1, "two barrier runs for one op id");
    println!(
        "door started {}, rail joined {}",
        flights(&f.d, "door", "started"),
        flights(&f.d, "rail", "joined")
    );
}

/// Boot crash-resume (reference §2.11): a retirement that stopped after its freeze (here: its
/// eviction could not be verified, as after a crash mid-barrier) leaves the gate frozen; the
/// next start finishes it before it answers anything, and the holder is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_resume_finishes_a_retirement_a_crash_interrupted() {
    let f = Fixture::new().await;
    let Fixture {
        mut space,
        d: _,
        server,
        owner,
        admin,
        agent,
    } = f;
    let mut plane = space.reaper.0.pop().unwrap();
    signal(&plane, rustix::process::Signal::TERM);
    assert!(exits(&mut plane, EXIT_TIMEOUT).success());
    let uid = LifecycleUid::parse(UID).unwrap();
    let barrier = RetireLifecycle {
        owner: OwnerToken::parse(&owner).unwrap(),
        actor: ActorToken::parse("worker").unwrap(),
        lifecycle_uid: uid.clone(),
        op_id: managed_retirement_op_id(&uid).unwrap(),
        guard: None,
    };
    {
        let bound = admin.space().unwrap();
        // The default evictor verifies nothing: the run stops at its eviction step.
        let stopped = NatsWorld::new(&bound)
            .run(&mut Replay::new(barrier))
            .await
            .unwrap_err();
        assert!(stopped.message.contains("not verified"), "{stopped}");
    }
    let log = space.root.join("resume.log");
    let d = space.up_with(&["--server", &server], &[], Some(&log));
    let f = Fixture {
        space,
        d,
        server,
        owner,
        admin,
        agent,
    };
    assert_eq!(f.gate().await.state(), GateState::Retired);
    f.evicted().await;
    assert_eq!(flights(&f.d, "boot", "started"), 1);
    let said = fs::read_to_string(&log).unwrap();
    assert!(said.contains("resumed retirement"), "{said}");
}

/// A boot that cannot examine or finish an open operation says so loudly and serves anyway:
/// a gate frozen by a retirement whose uid was never reserved is corruption, left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_resume_failure_is_loud_and_never_fails_the_boot() {
    let mut space = Space::new();
    let server = space.serve_broker();
    let d = space.up(&["--server", &server]);
    let admin = space.admin(&server).await;
    let orphan = LifecycleUid::parse("oooooooooooooooooooooooooo").unwrap();
    let op = managed_retirement_op_id(&orphan).unwrap();
    let frozen = AgentGate::activation_frozen(orphan.clone(), op.clone())
        .reopened(&op)
        .unwrap()
        .retirement_frozen(&op)
        .unwrap();
    let written = admin
        .space()
        .unwrap()
        .execute(&KvRequest::Create {
            store: Store::Auth,
            key: frozen.key(),
            value: frozen.to_bytes(),
        })
        .await;
    assert!(matches!(written, KvOutcome::Written(_)), "{written:?}");
    let mut plane = space.reaper.0.pop().unwrap();
    signal(&plane, rustix::process::Signal::TERM);
    assert!(exits(&mut plane, EXIT_TIMEOUT).success());
    drop(d);
    let log = space.root.join("resume.log");
    let d = space.up_with(&["--server", &server], &[], Some(&log));
    let (status, _, health) = http(d["url"].as_str().unwrap(), "GET", "/health", &[], "").unwrap();
    assert_eq!(status, 200);
    assert!(health.contains("ready"), "{health}");
    let said = fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("could not be examined") && said.contains("fail-closed"),
        "{said}"
    );
}

/// Kill-anywhere for retirement: the plane SIGKILLs itself right before, or just after, each
/// write of a managed retirement barrier (`COTAL_AUTHD_RETIRE_KILL_AT`); the next start finishes
/// the retirement before it answers anything (reference §2.11, F47, F49), except a kill before
/// the first write, which froze nothing and owes nothing. Prints every outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_retirement_write_is_finished_by_the_next_start() {
    let mut outcomes = Vec::new();
    for phase in ["before", "after"] {
        for n in 1.. {
            let point = format!("{phase}:{n}");
            let mut f = Fixture::with_env(&[("COTAL_AUTHD_RETIRE_KILL_AT", point.as_str())]).await;
            f.deprovision();
            let answered = f.door().await;
            // A kill just after the last write may land after the answer: look a moment later.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut plane = f.space.reaper.0.pop().unwrap();
            if plane.try_wait().unwrap().is_none() {
                // The barrier has fewer writes than n: it finished, no kill fired.
                let (status, body) = answered.unwrap();
                assert_eq!(status, 200, "{point}: {body}");
                f.space.reaper.0.push(plane);
                outcomes.push(format!("{point}: no such write (the barrier finished)"));
                break;
            }
            let died = exits(&mut plane, EXIT_TIMEOUT);
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&died),
                Some(9),
                "{point}: {died}"
            );
            let frozen = f.gate().await;
            f.d = f.space.up(&["--server", &f.server]);
            let resumed = flights(&f.d, "boot", "started");
            let gate = f.gate().await;
            if point == "before:1" {
                assert_eq!(frozen.state(), GateState::Open, "{point}");
                assert_eq!((gate.state(), resumed), (GateState::Open, 0), "{point}");
                let (status, body) = f.door().await.unwrap();
                assert_eq!(status, 200, "{point}: {body}");
            }
            assert_eq!(f.gate().await.state(), GateState::Retired, "{point}");
            assert_eq!(f.head().await.state(), HeadState::Retired, "{point}");
            f.evicted().await;
            outcomes.push(format!(
                "{point}: gate {} after the kill, {} by the next start",
                frozen.state().as_str(),
                if resumed == 1 {
                    "resumed"
                } else {
                    "nothing owed"
                }
            ));
        }
    }
    println!("retirement kill points:\n  {}", outcomes.join("\n  "));
    assert!(outcomes.len() >= 10, "{outcomes:?}");
}
