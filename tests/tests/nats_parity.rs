//! Parity of the NATS adapter (`cotal_io_nats::Space`) with the core KV model on a real
//! `nats-server` 2.15.1: ONE list of KV scenarios runs against both, and every outcome, every
//! final entry and every retained history must agree exactly. Each scenario gets a fresh space
//! (fresh streams), so absolute revisions match, not just relative ones.
//!
//! Also here: the adapter's own contract on the real server — the store shapes it creates and
//! refuses at bind (naming the setting), the round trips each request costs, the artifact read's
//! shadow fallback — and a printed loopback latency measurement of a leader get and a CAS
//! (a measurement, never a timed assertion).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use cotal_core::canon::Digest;
use cotal_core::kv::model::KvModel;
use cotal_core::kv::{Entry, KvOutcome, KvRequest, Operation, Revision, Store};
use cotal_core::machine::Observation;
use cotal_core::names::SpaceName;
use cotal_core::ErrorCode;
use cotal_io_nats::async_nats::{self, jetstream};
use cotal_io_nats::shape::{desired_config, AUTH_HISTORY};
use cotal_io_nats::{Replicas, Space, SpaceOptions, StoreLayout, StoreSet};
use cotal_tests::nats::{NatsServer, ServerOptions};

// ---- the scenario language -------------------------------------------------------------------

/// One step: a core request (its outcome is compared) or a raw writer outside the fence
/// discipline (setup; the model's unpinned `purge`, the server's `KV-Operation: PURGE` publish).
#[derive(Debug, Clone)]
enum Step {
    Req(KvRequest),
    Purge(Store, &'static str),
}

fn v(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}
fn get(store: Store, key: &str) -> Step {
    Step::Req(KvRequest::Get {
        store,
        key: key.into(),
    })
}
fn create(store: Store, key: &str, value: &str) -> Step {
    Step::Req(KvRequest::Create {
        store,
        key: key.into(),
        value: v(value),
    })
}
fn strict(store: Store, key: &str, value: &str) -> Step {
    Step::Req(KvRequest::CreateStrict {
        store,
        key: key.into(),
        value: v(value),
    })
}
fn update(store: Store, key: &str, value: &str, expected: u64) -> Step {
    Step::Req(KvRequest::Update {
        store,
        key: key.into(),
        value: v(value),
        expected: Revision(expected),
    })
}
fn delete(store: Store, key: &str, expected: u64) -> Step {
    Step::Req(KvRequest::Delete {
        store,
        key: key.into(),
        expected: Revision(expected),
    })
}
fn first(store: Store, key: &str) -> Step {
    Step::Req(KvRequest::GetFirst {
        store,
        key: key.into(),
    })
}
fn keys(store: Store, prefix: &str) -> Step {
    Step::Req(KvRequest::Keys {
        store,
        prefix: prefix.into(),
    })
}

use Store::{Accepted, Actors, Admission, Auth, Contracts, Issued, Records, Sessions};

/// Messages per subject each real store keeps (the model of each store is built with it).
fn history_of(store: Store) -> usize {
    match store {
        Auth => AUTH_HISTORY as usize,
        Records | Admission | Contracts | Accepted | Sessions | Actors => 1,
        Issued => usize::MAX,
    }
}

/// The scenarios, each with the outcomes the model gives (asserted too, so the list documents
/// the semantics it pins).
fn scenarios() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        (
            "create_over_a_tombstone_recreates_the_key",
            vec![
                create(Auth, "k", "1"),
                create(Auth, "k", "again"),
                delete(Auth, "k", 1),
                get(Auth, "k"),
                create(Auth, "k", "2"),
                get(Auth, "k"),
            ],
        ),
        (
            "create_over_a_purge_marker_recreates_the_key",
            vec![
                create(Records, "r", "1"),
                Step::Purge(Records, "r"),
                get(Records, "r"),
                create(Records, "r", "2"),
                get(Records, "r"),
            ],
        ),
        (
            "create_strict_refuses_a_tombstone_and_a_purge_marker",
            vec![
                strict(Records, "svc.a", "1"),
                strict(Records, "svc.a", "1"),
                delete(Records, "svc.a", 1),
                strict(Records, "svc.a", "2"),
                get(Records, "svc.a"),
                strict(Records, "svc.b", "1"),
                Step::Purge(Records, "svc.b"),
                strict(Records, "svc.b", "2"),
                strict(Records, "svc.c", "1"),
            ],
        ),
        (
            "a_stale_update_loses_its_pin",
            vec![
                create(Auth, "k", "1"),
                update(Auth, "k", "2", 1),
                update(Auth, "k", "3", 1),
                update(Auth, "k", "3", 3),
                update(Auth, "never", "x", 7),
                update(Auth, "never", "x", 0),
                get(Auth, "k"),
            ],
        ),
        (
            "a_stale_delete_loses_its_pin_and_a_marker_is_updatable",
            vec![
                create(Auth, "k", "1"),
                update(Auth, "k", "2", 1),
                delete(Auth, "k", 1),
                delete(Auth, "k", 2),
                delete(Auth, "k", 3),
                update(Auth, "k", "4", 3),
                get(Auth, "k"),
            ],
        ),
        (
            "revisions_are_shared_across_keys_and_separate_across_stores",
            vec![
                create(Auth, "a", "1"),
                create(Auth, "b", "1"),
                update(Auth, "a", "2", 1),
                update(Auth, "b", "2", 1),
                update(Auth, "b", "2", 2),
                create(Records, "a", "1"),
                strict(Contracts, "aa", "{}"),
                get(Auth, "a"),
                get(Records, "a"),
            ],
        ),
        (
            "keys_list_markers_by_prefix",
            vec![
                create(Auth, "p.a", "1"),
                create(Auth, "p.b", "1"),
                create(Auth, "p.ab", "1"),
                create(Auth, "q.c", "1"),
                create(Auth, "p.x.y", "1"),
                delete(Auth, "p.b", 2),
                keys(Auth, "p."),
                keys(Auth, "p.a"),
                keys(Auth, "p"),
                keys(Auth, ""),
                keys(Auth, "zz."),
                create(Records, "r.x", "1"),
                Step::Purge(Records, "r.x"),
                keys(Records, "r."),
                keys(Records, "none."),
            ],
        ),
        (
            "history_limit_keeps_the_newest_messages",
            (0..12)
                .map(|i| update(Auth, "k", &format!("v{i}"), if i == 0 { 0 } else { i }))
                .chain([
                    create(Records, "r", "0"),
                    update(Records, "r", "1", 1),
                    update(Records, "r", "2", 2),
                    get(Auth, "k"),
                    get(Records, "r"),
                ])
                .collect(),
        ),
        (
            "purge_leaves_a_marker_that_pins_like_any_message",
            vec![
                create(Records, "k", "1"),
                update(Records, "k", "2", 1),
                Step::Purge(Records, "k"),
                get(Records, "k"),
                update(Records, "k", "3", 2),
                delete(Records, "k", 2),
                update(Records, "k", "3", 3),
                get(Records, "k"),
            ],
        ),
        (
            "contracts_and_admissions_are_create_only",
            vec![
                strict(Contracts, "d1", "{\"a\":1}"),
                strict(Contracts, "d1", "{\"a\":1}"),
                create(Contracts, "d1", "{\"a\":1}"),
                get(Contracts, "d1"),
                keys(Contracts, ""),
                strict(Admission, "admission.v1.e.r1", "{}"),
                strict(Admission, "admission.v1.e.r1", "{}"),
                create(Admission, "admission.v1.e.r1", "{}"),
                keys(Admission, "admission.v1."),
            ],
        ),
        (
            "issued_keeps_every_message_and_accepted_is_write_once",
            vec![
                first(Issued, "v1.o.a.u.g"),
                strict(Issued, "v1.o.a.u.g", "{\"e\":1}"),
                strict(Issued, "attempt.v1.o.a.u.g", "{\"s\":\"prepared\"}"),
                update(Issued, "attempt.v1.o.a.u.g", "{\"s\":\"active\"}", 2),
                update(Issued, "attempt.v1.o.a.u.g", "{\"s\":\"revoked\"}", 3),
                first(Issued, "attempt.v1.o.a.u.g"),
                get(Issued, "attempt.v1.o.a.u.g"),
                first(Issued, "v1.o.a.u.g"),
                strict(Accepted, "accepted.v1.t", "{\"r\":1}"),
                strict(Accepted, "accepted.v1.t", "{\"r\":2}"),
                create(Accepted, "accepted.v1.t", "{\"r\":2}"),
                first(Accepted, "accepted.v1.t"),
            ],
        ),
        (
            "a_session_row_is_created_once_and_advanced_by_cas",
            vec![
                strict(Sessions, "session.s", "{\"state\":\"issuing\"}"),
                strict(Sessions, "session.s", "{\"state\":\"again\"}"),
                update(Sessions, "session.s", "{\"state\":\"active\"}", 1),
                update(Sessions, "session.s", "{\"state\":\"closed\"}", 1),
                get(Sessions, "session.s"),
            ],
        ),
        (
            "an_actor_row_is_rewritten_pinned_and_revoked_by_a_marker_it_is_regranted_over",
            vec![
                strict(Actors, "interactive.o.a", "{\"r\":1}"),
                update(Actors, "interactive.o.a", "{\"r\":2}", 1),
                update(Actors, "interactive.o.a", "{\"r\":3}", 1),
                delete(Actors, "interactive.o.a", 2),
                get(Actors, "interactive.o.a"),
                strict(Actors, "interactive.o.a", "{\"r\":4}"),
                update(Actors, "interactive.o.a", "{\"r\":4}", 3),
                keys(Actors, "interactive."),
                keys(Actors, "managed."),
            ],
        ),
    ]
}

/// The model side: one KV model per store, each with the real store's history depth.
struct Models(BTreeMap<Store, KvModel>);

impl Models {
    fn new() -> Models {
        Models(
            [
                Auth, Records, Admission, Contracts, Issued, Accepted, Sessions, Actors,
            ]
            .into_iter()
            .map(|s| (s, KvModel::with_history(history_of(s))))
            .collect(),
        )
    }
    fn of(&mut self, store: Store) -> &mut KvModel {
        self.0.get_mut(&store).unwrap()
    }
}

/// Outcomes compared without the free-text reasons of `Unavailable`/`Ambiguous`.
fn normalized(o: KvOutcome) -> KvOutcome {
    match o {
        KvOutcome::Unavailable(_) => KvOutcome::Unavailable(String::new()),
        KvOutcome::Ambiguous(_) => KvOutcome::Ambiguous(String::new()),
        other => other,
    }
}

/// A PURGE marker written raw (no rollup: the stores refuse rollup headers, F10); on the
/// history-1 records store it leaves exactly what the model's purge leaves.
async fn purge_raw(space: &Space, store: Store, key: &str) {
    let js = jetstream::new(space.client().clone());
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("KV-Operation", "PURGE");
    js.publish_with_headers(
        space.layout(store).subject(key),
        headers,
        Default::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

static SPACES: AtomicU32 = AtomicU32::new(0);

fn fresh_space(tag: &str) -> SpaceName {
    let n = SPACES.fetch_add(1, Ordering::Relaxed);
    SpaceName::parse(&format!("{tag}{n}")).unwrap()
}

fn options() -> SpaceOptions {
    SpaceOptions {
        request_timeout: Duration::from_secs(5),
        ..SpaceOptions::default()
    }
}

/// Every store, the replicated actor ledger's included: the scenarios cover them all.
fn every_store() -> SpaceOptions {
    SpaceOptions {
        stores: StoreSet::of(&[
            Auth, Records, Admission, Contracts, Issued, Accepted, Sessions, Actors,
        ]),
        ..options()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn touched(steps: &[Step]) -> Vec<(Store, String)> {
    let mut out: Vec<(Store, String)> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Req(KvRequest::Keys { .. }) => None,
            Step::Req(r) => Some((r.store(), r.key().to_owned())),
            Step::Purge(store, key) => Some((*store, (*key).to_owned())),
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn kv_scenarios_agree_with_the_model_on_a_real_server() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    let mut mismatches = Vec::new();
    for (name, steps) in scenarios() {
        let space = rt
            .block_on(Space::connect(
                &server.url(),
                fresh_space("par"),
                every_store(),
            ))
            .unwrap();
        let mut models = Models::new();
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Purge(store, key) => {
                    models.of(*store).purge(*store, key);
                    rt.block_on(purge_raw(&space, *store, key));
                }
                Step::Req(request) => {
                    let model = normalized(models.of(request.store()).execute(request));
                    let real = normalized(rt.block_on(space.execute(request)));
                    if model != real {
                        mismatches.push(format!(
                            "{name} step {i} {request:?}: model {model:?}, server {real:?}"
                        ));
                    }
                }
            }
        }
        for (store, key) in touched(&steps) {
            let model: Vec<(Revision, Operation, Vec<u8>)> = models.of(store).history(store, &key);
            let real: Vec<(Revision, Operation, Vec<u8>)> = rt
                .block_on(space.history(store, &key))
                .unwrap()
                .into_iter()
                .map(|e| (e.revision, e.operation, e.value))
                .collect();
            if model != real {
                mismatches.push(format!(
                    "{name} history of {store:?}/{key}: model {model:?}, server {real:?}"
                ));
            }
        }
        println!("parity: {name}: {} steps", steps.len());
    }
    assert!(
        mismatches.is_empty(),
        "the adapter disagrees with the model:\n{}",
        mismatches.join("\n")
    );
}

/// The outcomes the scenarios pin, asserted on the model alone, so a reader sees the semantics
/// the parity run holds the server to.
#[test]
fn the_scenarios_pin_the_documented_semantics() {
    let run = |name: &str| -> Vec<KvOutcome> {
        let (_, steps) = scenarios().into_iter().find(|(n, _)| *n == name).unwrap();
        let mut models = Models::new();
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Req(r) => Some(models.of(r.store()).execute(r)),
                Step::Purge(store, key) => {
                    models.of(*store).purge(*store, key);
                    None
                }
            })
            .collect()
    };
    let w = |r| KvOutcome::Written(Revision(r));
    let tomb = run("create_over_a_tombstone_recreates_the_key");
    assert_eq!(tomb[1], KvOutcome::CasLost);
    assert_eq!(tomb[4], w(3));
    let strict = run("create_strict_refuses_a_tombstone_and_a_purge_marker");
    assert_eq!(strict[3], KvOutcome::CasLost);
    assert_eq!(strict[6], KvOutcome::CasLost);
    let stale = run("a_stale_update_loses_its_pin");
    assert_eq!(stale[2], KvOutcome::CasLost);
    assert_eq!(stale[4], KvOutcome::CasLost);
    assert_eq!(stale[3], KvOutcome::CasLost);
    assert_eq!(
        stale[5],
        w(3),
        "expected revision 0 on an empty subject writes"
    );
    let listed = run("keys_list_markers_by_prefix");
    assert_eq!(
        listed[6],
        KvOutcome::Keys(vec![
            "p.a".into(),
            "p.ab".into(),
            "p.b".into(),
            "p.x.y".into()
        ])
    );
    assert_eq!(
        listed[7],
        KvOutcome::Keys(vec!["p.a".into(), "p.ab".into()])
    );
    let issued = run("issued_keeps_every_message_and_accepted_is_write_once");
    assert_eq!(issued[0], KvOutcome::Entry(None));
    let first_attempt = |o: &KvOutcome| match o {
        KvOutcome::Entry(Some(e)) => e.value.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(first_attempt(&issued[5]), b"{\"s\":\"prepared\"}".to_vec());
    assert_eq!(first_attempt(&issued[6]), b"{\"s\":\"revoked\"}".to_vec());
    assert_eq!(issued[9], KvOutcome::CasLost, "write-once");
    assert_eq!(issued[10], KvOutcome::CasLost, "write-once");
}

// ---- the adapter's own contract --------------------------------------------------------------

#[test]
fn stores_are_created_with_the_shape_and_refused_when_a_setting_differs() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        // A fresh space: 7 STREAM.INFO + 7 STREAM.CREATE; a second bind reuses: 7 STREAM.INFO.
        let name = fresh_space("shape");
        let space = Space::connect(&server.url(), name.clone(), options())
            .await
            .unwrap();
        assert_eq!(space.round_trips(), 14);
        let again = Space::connect(&server.url(), name.clone(), options())
            .await
            .unwrap();
        assert_eq!(again.round_trips(), 7);
        again.verify_shapes().await.unwrap();
        assert_eq!(again.round_trips(), 14);

        let client = async_nats::connect(server.url()).await.unwrap();
        let js = jetstream::new(client);
        // The auth stream as created: leader reads only, no age, no limits, file, no rollup.
        let auth = js
            .get_stream(StoreLayout::of(Auth, &name).stream)
            .await
            .unwrap()
            .cached_info()
            .config
            .clone();
        assert!(!auth.allow_direct);
        assert!(auth.max_age.is_zero());
        assert_eq!((auth.max_messages, auth.max_bytes), (-1, -1));
        assert!(!auth.allow_rollup && auth.deny_delete);

        // One wrong setting per store, each refused by name; an R1 space bound as R3 too.
        type Tweak = fn(&mut jetstream::stream::Config);
        let cases: [(Store, &str, Tweak); 11] = [
            (Auth, "allow_direct", |c| c.allow_direct = true),
            (Auth, "max_age", |c| c.max_age = Duration::from_secs(3600)),
            (Auth, "max_bytes", |c| c.max_bytes = 1 << 20),
            (Auth, "storage", |c| {
                c.storage = jetstream::stream::StorageType::Memory
            }),
            (Records, "max_msgs_per_subject", |c| {
                c.max_messages_per_subject = 5
            }),
            // The server allows roll-ups only with the purge permission.
            (Admission, "allow_rollup_hdrs", |c| {
                c.allow_rollup = true;
                c.deny_purge = false;
            }),
            (Contracts, "deny_purge", |c| c.deny_purge = false),
            // The issued store keeps every message: a capped history would drop the first
            // message immutable rows are read as.
            (Issued, "max_msgs_per_subject", |c| {
                c.max_messages_per_subject = 8
            }),
            (Issued, "allow_direct", |c| c.allow_direct = true),
            (Accepted, "discard_new_per_subject", |c| {
                c.discard_new_per_subject = false
            }),
            // Session rows are read leader-served only, by the plane and the manager alike.
            (Sessions, "allow_direct", |c| c.allow_direct = true),
        ];
        for (store, setting, tweak) in cases {
            let bad = fresh_space("bad");
            let mut config = desired_config(&StoreLayout::of(store, &bad), Replicas::One);
            tweak(&mut config);
            js.create_stream(config).await.unwrap();
            let refused = Space::connect(&server.url(), bad, options())
                .await
                .unwrap_err();
            assert_eq!(refused.code, ErrorCode::FailedPrecondition);
            assert!(
                refused.message.contains(setting),
                "{setting}: {}",
                refused.message
            );
            assert_eq!(refused.details[0]["setting"], setting);
        }
        let r3 = SpaceOptions {
            replicas: Replicas::Three,
            ..options()
        };
        let refused = Space::connect(&server.url(), name.clone(), r3)
            .await
            .unwrap_err();
        assert!(
            refused.message.contains("num_replicas"),
            "{}",
            refused.message
        );
        // A bind that never creates may take the replica count the stores were made with (the
        // views and the reconciler need not be told); the rest of the shape still binds it.
        let as_found = SpaceOptions {
            replicas: Replicas::Three,
            create_missing: false,
            replicas_as_found: true,
            ..options()
        };
        Space::connect(&server.url(), name, as_found).await.unwrap();

        // Without create_missing, a missing store is refused, not made.
        let strict = SpaceOptions {
            create_missing: false,
            ..options()
        };
        let missing = Space::connect(&server.url(), fresh_space("missing"), strict)
            .await
            .unwrap_err();
        assert_eq!(missing.code, ErrorCode::FailedPrecondition);
    });
}

#[test]
fn each_request_costs_its_documented_round_trips() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let space = Space::connect(&server.url(), fresh_space("rt"), options())
            .await
            .unwrap();
        let cost = |before: u64| space.round_trips() - before;
        let expect = |step: Step, trips: u64| {
            let request = step.into_request();
            let before = space.round_trips();
            let space = &space;
            async move {
                let outcome = space.execute(&request).await;
                assert_eq!(cost(before), trips, "{request:?} → {outcome:?}");
                outcome
            }
        };
        assert_eq!(
            expect(create(Auth, "k", "1"), 1).await,
            KvOutcome::Written(Revision(1))
        );
        expect(get(Auth, "k"), 1).await;
        expect(update(Auth, "k", "2", 1), 1).await;
        expect(update(Auth, "k", "2", 1), 1).await;
        expect(create(Auth, "k", "3"), 2).await; // lost: publish, then a read finds a value
        expect(delete(Auth, "k", 2), 1).await;
        expect(create(Auth, "k", "4"), 3).await; // over the marker: publish, read, pinned publish
        expect(strict(Auth, "k", "5"), 1).await;
        expect(keys(Auth, ""), 1).await;
        expect(get(Auth, "absent"), 1).await;
        expect(first(Auth, "k"), 1).await;
        // No hidden rebinds: the bind's 14 plus exactly the requests' own.
        assert_eq!(space.round_trips(), 14 + 14);
    });
}

#[test]
fn invalid_keys_are_refused_before_anything_is_sent() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let space = Space::connect(&server.url(), fresh_space("inv"), options())
            .await
            .unwrap();
        let before = space.round_trips();
        for key in ["a.*", "a.>", "", "a b", "a..b"] {
            let outcome = space
                .execute(&KvRequest::Create {
                    store: Auth,
                    key: key.into(),
                    value: v("x"),
                })
                .await;
            assert!(matches!(outcome, KvOutcome::Unavailable(_)), "{key:?}");
        }
        assert_eq!(space.round_trips(), before);
    });
}

#[test]
fn artifact_reads_verify_the_digest_and_fall_back_to_the_first_message() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let space = Space::connect(&server.url(), fresh_space("art"), options())
            .await
            .unwrap();
        let bytes = br#"{"a":1}"#.to_vec();
        let digest = Digest::of(&bytes);
        assert_eq!(
            space.read_artifact(&digest).await,
            Observation::Artifact(None)
        );
        let publish = KvRequest::CreateStrict {
            store: Contracts,
            key: digest.hex(),
            value: bytes.clone(),
        };
        assert!(matches!(
            space.execute(&publish).await,
            KvOutcome::Written(_)
        ));
        let before = space.round_trips();
        assert_eq!(
            space.read_artifact(&digest).await,
            Observation::Artifact(Some(bytes.clone()))
        );
        assert_eq!(space.round_trips() - before, 1);
        // A shadow append without the create-only header: the store's one-message-per-subject
        // shape refuses it outright (10077).
        let js = jetstream::new(space.client().clone());
        let shadow = js
            .publish(space.layout(Contracts).subject(&digest.hex()), "{}".into())
            .await
            .unwrap()
            .await;
        assert!(
            shadow.is_err(),
            "a second message on a digest subject is refused"
        );

        // Bytes that do not hash to their subject are handed over as they are (the core's
        // verification then fails loud); an absent artifact reads as None.
        let wrong = Digest::of(b"something else");
        let garbage = KvRequest::CreateStrict {
            store: Contracts,
            key: wrong.hex(),
            value: v("{\"b\":2}"),
        };
        assert!(matches!(
            space.execute(&garbage).await,
            KvOutcome::Written(_)
        ));
        let before = space.round_trips();
        assert_eq!(
            space.read_artifact(&wrong).await,
            Observation::Artifact(Some(v("{\"b\":2}")))
        );
        assert_eq!(
            space.round_trips() - before,
            2,
            "a miss on the last message reads the first"
        );
    });
}

#[test]
fn leader_reads_decode_markers() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let space = Space::connect(&server.url(), fresh_space("mark"), options())
            .await
            .unwrap();
        space
            .execute(&KvRequest::Create {
                store: Auth,
                key: "k".into(),
                value: v("1"),
            })
            .await;
        space
            .execute(&KvRequest::Delete {
                store: Auth,
                key: "k".into(),
                expected: Revision(1),
            })
            .await;
        let entry = space
            .execute(&KvRequest::Get {
                store: Auth,
                key: "k".into(),
            })
            .await;
        assert_eq!(
            entry,
            KvOutcome::Entry(Some(Entry {
                key: "k".into(),
                value: Vec::new(),
                revision: Revision(2),
                operation: Operation::Delete,
            }))
        );
    });
}

/// Loopback latency of a leader get and a CAS update (R1, `sync_interval: always`): printed,
/// never asserted (DESIGN §6).
#[test]
fn leader_get_and_cas_latency_on_loopback() {
    const N: usize = 400;
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let space = Space::connect(&server.url(), fresh_space("lat"), options())
            .await
            .unwrap();
        let KvOutcome::Written(mut revision) = space
            .execute(&KvRequest::Create {
                store: Auth,
                key: "g".into(),
                value: v("{}"),
            })
            .await
        else {
            panic!("create failed")
        };
        let mut gets = Vec::with_capacity(N);
        let mut cas_writes = Vec::with_capacity(N);
        for _ in 0..N {
            let t = Instant::now();
            let read = space
                .execute(&KvRequest::Get {
                    store: Auth,
                    key: "g".into(),
                })
                .await;
            gets.push(t.elapsed());
            assert!(matches!(read, KvOutcome::Entry(Some(_))));
            let t = Instant::now();
            let written = space
                .execute(&KvRequest::Update {
                    store: Auth,
                    key: "g".into(),
                    value: v("{}"),
                    expected: revision,
                })
                .await;
            cas_writes.push(t.elapsed());
            let KvOutcome::Written(next) = written else {
                panic!("{written:?}")
            };
            revision = next;
        }
        let pct = |xs: &mut Vec<Duration>, p: f64| {
            xs.sort();
            xs[((xs.len() as f64 * p) as usize).min(xs.len() - 1)]
        };
        println!(
            "loopback R1 sync_interval=always, {N} samples: leader get p50 {:?} p99 {:?}; CAS \
             update p50 {:?} p99 {:?}",
            pct(&mut gets, 0.50),
            pct(&mut gets, 0.99),
            pct(&mut cas_writes, 0.50),
            pct(&mut cas_writes, 0.99),
        );
    });
}

#[test]
fn a_request_while_disconnected_is_unavailable_and_sends_nothing() {
    let mut server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    let space = rt
        .block_on(Space::connect(
            &server.url(),
            fresh_space("down"),
            options(),
        ))
        .unwrap();
    let write = |expected| KvRequest::Update {
        store: Auth,
        key: "k".into(),
        value: v("x"),
        expected: Revision(expected),
    };
    assert_eq!(
        rt.block_on(space.execute(&write(0))),
        KvOutcome::Written(Revision(1))
    );
    server.kill().unwrap();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while space.client().connection_state() == async_nats::connection::State::Connected {
            assert!(
                Instant::now() < deadline,
                "the client never noticed the crash"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let before = space.round_trips();
        assert!(matches!(
            space.execute(&write(1)).await,
            KvOutcome::Unavailable(_)
        ));
        assert!(matches!(
            space.execute(&keys(Auth, "").into_request()).await,
            KvOutcome::Unavailable(_)
        ));
        assert!(matches!(
            space.read_artifact(&Digest::of(b"x")).await,
            Observation::ArtifactUnavailable(_)
        ));
        assert_eq!(space.round_trips(), before, "nothing was sent");
    });
    server.restart().unwrap();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(15);
        while space.client().connection_state() != async_nats::connection::State::Connected {
            assert!(Instant::now() < deadline, "the client never reconnected");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The refused write left no trace: the pin at revision 1 still holds.
        assert_eq!(
            space.execute(&write(1)).await,
            KvOutcome::Written(Revision(2))
        );
    });
}

/// A store that answers "no responders" for a moment (here: deleted, then created again, as a
/// new R3 stream's interest is still crossing the routes) costs a write a resend, not a refusal;
/// one that stays silent is `unavailable` after the bounded resends, and nothing was written.
#[test]
fn a_publish_that_finds_no_responders_is_sent_again_and_then_refused() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let space = Space::connect(&server.url(), fresh_space("noresp"), options())
            .await
            .unwrap();
        let js = jetstream::new(space.client().clone());
        let layout = space.layout(Records).clone();
        let write = |key: &str| KvRequest::Create {
            store: Records,
            key: key.into(),
            value: v("x"),
        };

        js.delete_stream(&layout.stream).await.unwrap();
        let recreate = {
            let js = js.clone();
            let config = desired_config(&layout, Replicas::One);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(150)).await;
                js.create_stream(config).await.unwrap();
            })
        };
        let before = space.round_trips();
        assert_eq!(
            space.execute(&write("back")).await,
            KvOutcome::Written(Revision(1))
        );
        assert!(
            space.round_trips() - before >= 2,
            "the write was sent again"
        );
        recreate.await.unwrap();

        js.delete_stream(&layout.stream).await.unwrap();
        let before = space.round_trips();
        match space.execute(&write("gone")).await {
            KvOutcome::Unavailable(why) => {
                assert!(why.contains("no responders, 4 sends"), "{why}")
            }
            other => panic!("a silent store must refuse the write, not {other:?}"),
        }
        assert_eq!(
            space.round_trips() - before,
            4,
            "four sends, then the refusal"
        );
        js.create_stream(desired_config(&layout, Replicas::One))
            .await
            .unwrap();
        assert_eq!(
            space.execute(&get(Records, "gone").into_request()).await,
            KvOutcome::Entry(None),
            "the refused sends stored nothing"
        );
    });
}

impl Step {
    fn into_request(self) -> KvRequest {
        match self {
            Step::Req(r) => r,
            Step::Purge(..) => unreachable!("not a request"),
        }
    }
}
