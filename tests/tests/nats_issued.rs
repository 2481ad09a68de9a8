//! The issued-authority store (SPEC §13.15) on a real `nats-server`, mirroring
//! `core/tests/issued_authority.rs` on the KV model: the two stores are created with their
//! shape and proven at every bind, an issuance leaves the bytes and revisions the model leaves,
//! resolution and renewal answer alike, the broker refuses a purge of the append-only store, a
//! later message on an immutable key stays inert, and an activation whose acknowledgement is
//! lost — committed or not — is settled by the leader read-back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cotal_core::actors::{ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, MemoryActors};
use cotal_core::driver::{drive, ModelWorld};
use cotal_core::issued::{
    attempt_key, evidence_key, source_index_key, AcceptedToken, ConfirmIssued, Evidence,
    IssueGeneration, IssuedGeneration, IssuedRef, IssuedSource, ReadAccepted, ResolveIssued,
    RetireIssued, SubjectAllow, SubjectPermission, SubjectPermissions,
};
use cotal_core::kv::model::KvModel;
use cotal_core::kv::{KvOutcome, KvRequest, Store, WriteOutcome};
use cotal_core::lifecycle::LifecycleHead;
use cotal_core::machine::{script, Effect, Replay, Script};
use cotal_core::names::{keys, ActorToken, LifecycleUid, ManagerInstance, OwnerToken, SpaceName};
use cotal_core::{EpError, ErrorCode};
use cotal_io_nats::async_nats::connection::State;
use cotal_io_nats::{NatsWorld, SendPhase, Space, SpaceOptions};
use cotal_tests::nats::{NatsServer, ServerOptions};
use futures::future::BoxFuture;

const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
const UID: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
const GEN: &str = "0123456789abcdef0123456789abcdef";
const GEN2: &str = "fedcba9876543210fedcba9876543210";
const NOW: u64 = 1_780_000_000;

fn space_name() -> SpaceName {
    SpaceName::parse("iss").unwrap()
}
fn reference(generation: &str) -> IssuedRef {
    IssuedRef {
        space: space_name(),
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: ActorToken::parse("cli").unwrap(),
        uid: LifecycleUid::parse(UID).unwrap(),
        generation: IssuedGeneration::parse(generation).unwrap(),
    }
}
fn source() -> IssuedSource {
    let r = reference(GEN);
    IssuedSource::actor_ledger(&r.space, &r.owner, &r.actor, &r.uid)
}
fn ceiling(publish: &str) -> SubjectPermissions {
    SubjectPermissions {
        publish: SubjectPermission {
            allow: SubjectAllow::Patterns(vec![publish.to_owned()]),
            deny: vec![],
        },
        subscribe: SubjectPermission {
            allow: SubjectAllow::All,
            deny: vec![],
        },
    }
}
fn token() -> AcceptedToken {
    AcceptedToken::for_connection("nonce-abcdefghijklmnopqrstu")
}
fn issue(generation: &str, accepted: bool) -> IssueGeneration {
    IssueGeneration {
        evidence: Evidence::new(reference(generation), vec![source()], ceiling("a.b"), None)
            .unwrap(),
        accepted: accepted.then(token),
    }
}
fn resolve(generation: &str) -> ResolveIssued {
    ResolveIssued {
        reference: reference(generation),
        now_secs: NOW,
    }
}

/// A ledger granting the issued actor at [`UID`].
fn ledger() -> MemoryActors {
    let actors = MemoryActors::new();
    let row = ActorRow {
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: ActorToken::parse("cli").unwrap(),
        scope: vec![],
        allow_subscribe: vec![],
        allow_publish: vec![],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(LifecycleUid::parse(UID).unwrap()),
        granted_at: "2026-12-01T00:00:00.000Z".into(),
    };
    assert!(matches!(
        actors.execute(&ActorsRequest::GrantInteractive(row)),
        ActorsOutcome::Granted(_)
    ));
    actors
}

fn refused<T: std::fmt::Debug>(r: Result<T, EpError>, code: ErrorCode, word: &str) {
    let e = r.unwrap_err();
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(word), "{word:?} missing from {e}");
}

trait Runner {
    fn go<S: Script>(&mut self, script: S) -> Result<S::Output, EpError>;
}

struct OnModel(ModelWorld);
impl Runner for OnModel {
    fn go<S: Script>(&mut self, script: S) -> Result<S::Output, EpError> {
        drive(&mut Replay::new(script), &mut self.0)
    }
}

struct OnServer<'s> {
    rt: &'s tokio::runtime::Runtime,
    world: NatsWorld<'s>,
}
impl Runner for OnServer<'_> {
    fn go<S: Script>(&mut self, script: S) -> Result<S::Output, EpError> {
        self.rt.block_on(self.world.run(&mut Replay::new(script)))
    }
}

/// The actor's lifecycle head, active at [`UID`], as its first exchange writes it: an
/// actor-ledger source is live only while the incarnation is.
fn activate(r: &mut impl Runner) {
    let head = LifecycleHead::activated(
        OwnerToken::parse(OWNER).unwrap(),
        ActorToken::parse("cli").unwrap(),
        LifecycleUid::parse(UID).unwrap(),
        ManagerInstance::parse("auth-service:iss").unwrap(),
    );
    let key = keys::lifecycle_head(&head.owner().clone(), &head.actor().clone());
    let bytes = head.to_bytes();
    let written = r
        .go(script(move |cx| {
            cx.create_strict(Store::Records, key.clone(), bytes.clone())
        }))
        .unwrap();
    assert!(matches!(written, WriteOutcome::Written(_)), "{written:?}");
}

/// The scenario both worlds run, asserting each outcome.
fn scenario(r: &mut impl Runner) {
    activate(r);
    assert_eq!(r.go(issue(GEN, true)).unwrap(), reference(GEN));
    refused(r.go(issue(GEN, false)), ErrorCode::Conflict, "never reused");
    assert_eq!(
        r.go(ReadAccepted { token: token() }).unwrap(),
        Some(reference(GEN))
    );
    let resolved = r.go(resolve(GEN)).unwrap();
    assert_eq!(resolved.permissions, ceiling("a.b"));
    r.go(ConfirmIssued {
        reference: reference(GEN),
        permissions: ceiling("a.b"),
    })
    .unwrap();
    refused(
        r.go(ConfirmIssued {
            reference: reference(GEN),
            permissions: ceiling("a.c"),
        }),
        ErrorCode::FailedPrecondition,
        "different ceiling",
    );
    refused(
        r.go(resolve(GEN2)),
        ErrorCode::PermissionDenied,
        "no issued evidence",
    );
    r.go(issue(GEN2, false)).unwrap();
    r.go(RetireIssued {
        reference: reference(GEN2),
    })
    .unwrap();
    refused(r.go(resolve(GEN2)), ErrorCode::PermissionDenied, "revoked");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn options(timeout: Duration) -> SpaceOptions {
    SpaceOptions {
        request_timeout: timeout,
        ..SpaceOptions::default()
    }
}

fn leader_read(rt: &tokio::runtime::Runtime, space: &Space, store: Store, key: &str) -> KvOutcome {
    rt.block_on(space.execute(&KvRequest::Get {
        store,
        key: key.to_owned(),
    }))
}

#[test]
fn f78_f79_issuance_on_a_real_server_leaves_the_models_bytes_and_revisions() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    let space = rt
        .block_on(Space::connect(
            &server.url(),
            space_name(),
            options(Duration::from_secs(5)),
        ))
        .unwrap();
    let mut model = OnModel(ModelWorld::new(KvModel::new()));
    model.0.actors = ledger();
    scenario(&mut model);
    let mut real = OnServer {
        rt: &rt,
        world: NatsWorld::new(&space).with_actors(Arc::new(ledger())),
    };
    scenario(&mut real);

    let r = reference(GEN);
    for (store, key) in [
        (Store::Issued, evidence_key(&r)),
        (Store::Issued, attempt_key(&r)),
        (Store::Issued, source_index_key(&source(), &r)),
        (Store::Issued, attempt_key(&reference(GEN2))),
        (Store::Accepted, token().key()),
    ] {
        let KvOutcome::Entry(on_server) = leader_read(&rt, &space, store, &key) else {
            panic!("leader read of {key} failed");
        };
        assert!(on_server.is_some(), "{key} was written");
        assert_eq!(on_server, model.0.kv.get(store, &key), "{key}");
    }
    let history = rt
        .block_on(space.history(Store::Issued, &attempt_key(&r)))
        .unwrap();
    assert_eq!(history.len(), 2, "prepared, then active, both kept");

    // A second bind proves both stores' shape (F10), as every plane connection does.
    rt.block_on(Space::connect(
        &server.url(),
        space_name(),
        SpaceOptions {
            create_missing: false,
            ..options(Duration::from_secs(5))
        },
    ))
    .unwrap();
}

#[test]
fn the_append_only_store_refuses_a_purge_and_a_later_message_on_evidence_is_inert() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    let space = rt
        .block_on(Space::connect(
            &server.url(),
            space_name(),
            options(Duration::from_secs(5)),
        ))
        .unwrap();
    let mut real = OnServer {
        rt: &rt,
        world: NatsWorld::new(&space).with_actors(Arc::new(ledger())),
    };
    activate(&mut real);
    real.go(issue(GEN, true)).unwrap();
    let client = space.client().clone();
    let key = evidence_key(&reference(GEN));
    rt.block_on(async {
        // A raw put on the evidence key, with no expected-sequence header: the store appends it.
        let js = cotal_io_nats::async_nats::jetstream::new(client.clone());
        js.publish(
            format!("$KV.cotal_issued_iss.{key}"),
            br#"{"forged":true}"#.to_vec().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
        let purge = client
            .request(
                "$JS.API.STREAM.PURGE.KV_cotal_issued_iss",
                br#"{"filter":"$KV.cotal_issued_iss.>"}"#.to_vec().into(),
            )
            .await
            .unwrap();
        let answer = String::from_utf8_lossy(&purge.payload).into_owned();
        assert!(answer.contains("error"), "deny_purge refuses: {answer}");
    });
    let resolved = real.go(resolve(GEN)).unwrap();
    assert_eq!(
        resolved.permissions,
        ceiling("a.b"),
        "the first message is the row"
    );
}

/// Waits until the space's client is connected again after the server came back.
async fn reconnected(space: &Space) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while space.client().connection_state() != State::Connected {
        assert!(Instant::now() < deadline, "the client did not reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The activation CAS loses its acknowledgement: the server is stopped before the publish and
/// killed after it (`crash_after_flush` = false: the publish is never answered), or the publish
/// is flushed to the server and the server killed right after (true: whichever way the race
/// between its ack and the kill goes). Either way the issuance ends active, exactly once.
fn lost_activation_ack(crash_after_flush: bool) {
    let server = Arc::new(Mutex::new(
        NatsServer::start(ServerOptions::default()).unwrap(),
    ));
    let rt = runtime();
    let url = server.lock().unwrap().url();
    let space = rt
        .block_on(Space::connect(
            &url,
            space_name(),
            options(Duration::from_millis(750)),
        ))
        .unwrap();
    let space = Arc::new(space);
    activate(&mut OnServer {
        rt: &rt,
        world: NatsWorld::new(&space),
    });
    let mut world = NatsWorld::new(&space).with_actors(Arc::new(ledger()));
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let target = attempt_key(&reference(GEN));
    let (hook_server, hook_space) = (Arc::clone(&server), Arc::clone(&space));
    world.set_send_hook(Some(Box::new(move |phase, request| {
        let fire = matches!(request, KvRequest::Update { key, .. } if *key == target)
            && armed.load(std::sync::atomic::Ordering::SeqCst);
        if fire && phase == SendPhase::After {
            armed.store(false, std::sync::atomic::Ordering::SeqCst);
        }
        let (server, space) = (Arc::clone(&hook_server), Arc::clone(&hook_space));
        let work: BoxFuture<'static, ()> = Box::pin(async move {
            if !fire {
                return;
            }
            match (phase, crash_after_flush) {
                (SendPhase::Before, false) => {
                    tokio::task::spawn_blocking(move || server.lock().unwrap().pause().unwrap())
                        .await
                        .unwrap();
                }
                (SendPhase::Before, true) => {}
                (SendPhase::After, flushed) => {
                    if flushed {
                        space.client().flush().await.unwrap();
                    }
                    tokio::task::spawn_blocking(move || {
                        let mut s = server.lock().unwrap();
                        s.kill().unwrap();
                        s.restart().unwrap();
                    })
                    .await
                    .unwrap();
                    reconnected(&space).await;
                }
            }
        });
        work
    })));
    let issued = rt.block_on(world.run(&mut Replay::new(issue(GEN, true))));
    assert_eq!(issued.unwrap(), reference(GEN));
    // A server paused before the publish cannot answer it: that acknowledgement is lost for
    // certain, and a leader read-back of the attempt row (which a clean activation never makes)
    // settled it. After a flush the race is real — the ack may beat the kill — so that run
    // asserts only the outcome.
    let key = attempt_key(&reference(GEN));
    let sent = world
        .log
        .iter()
        .position(|e| matches!(e, Effect::Kv(KvRequest::Update { key: k, .. }) if *k == key))
        .unwrap();
    let settled = world.log[sent..]
        .iter()
        .any(|e| matches!(e, Effect::Kv(KvRequest::Get { key: k, .. }) if *k == key));
    assert!(
        settled || crash_after_flush,
        "the activation was settled by a read-back"
    );
    world.set_send_hook(None);
    let resolved = rt.block_on(world.run(&mut Replay::new(resolve(GEN))));
    assert_eq!(resolved.unwrap().permissions, ceiling("a.b"));
    let history = rt
        .block_on(space.history(Store::Issued, &attempt_key(&reference(GEN))))
        .unwrap();
    assert_eq!(history.len(), 2, "prepared, then active exactly once");
}

#[test]
fn f78_an_activation_whose_ack_is_lost_before_it_commits_is_sent_again() {
    lost_activation_ack(false);
}

#[test]
fn f78_a_crash_right_after_the_activation_reached_the_server_ends_active_exactly_once() {
    lost_activation_ack(true);
}
