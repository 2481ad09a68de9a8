//! The plane claim on the KV model (reference-auth-service §2.10, the plane-claim cells of
//! §11.2): the closed row parser, acquire / reclaim / release, every refusal reason with its
//! operator copy, the guard around a sealed scan, a corrupt row never overwritten, ambiguous
//! writes settled by read-back, and two simultaneous virgin opens with one winner.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::run;
use cotal_core::driver::{ModelWorld, World};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::machine::{Machine, Replay, Step};
use cotal_core::names::SpaceName;
use cotal_core::plane_claim::{
    check_held, scanner_death_copy, AcquirePlaneClaim, AssertHeld, ClaimHold, ClaimRefusal,
    ClaimRow, ClaimState, ConnTuple, PlaneVerdict, ReleasePlaneClaim, RetakePlaneClaim, ScanPhase,
    TupleLiveness, PLANE_CLAIM_KEY,
};
use cotal_core::{EpError, ErrorCode};
use serde_json::{json, Value};

const NOW: u64 = 1_780_000_000_123;

fn space() -> SpaceName {
    SpaceName::parse("claims").unwrap()
}

fn nkey(c: char) -> String {
    format!("U{}", c.to_string().repeat(55))
}

fn tuple(server: &str, cid: u64, c: char) -> ConnTuple {
    ConnTuple::new(server, cid, &nkey(c)).unwrap()
}

fn open(n: u8) -> AcquirePlaneClaim {
    AcquirePlaneClaim {
        space: space(),
        claim_id: format!("claim{n}"),
        ledger: tuple("NSERVER", u64::from(n) * 10 + 1, 'A'),
        records: tuple("NSERVER", u64::from(n) * 10 + 2, 'B'),
        now_ms: NOW,
    }
}

fn row(world: &ModelWorld) -> Option<ClaimRow> {
    world
        .kv
        .get(Store::Auth, PLANE_CLAIM_KEY)
        .map(|e| ClaimRow::parse(&e.value).unwrap())
}

fn oracle(world: &mut ModelWorld, ledger: TupleLiveness, records: TupleLiveness) {
    world.set_plane_prober(Box::new(move |_| PlaneVerdict {
        ledger,
        records,
        note: (ledger == TupleLiveness::Unknown || records == TupleLiveness::Unknown)
            .then(|| "1 of 3 servers did not answer".to_owned()),
    }));
}

fn refused(e: &EpError, reason: ClaimRefusal, code: ErrorCode, fragments: &[&str]) {
    assert_eq!(ClaimRefusal::of(e), Some(reason), "{e}");
    assert_eq!(e.code, code, "{e}");
    for f in fragments {
        assert!(e.message.contains(f), "{e} lacks {f:?}");
    }
}

fn probes(world: &ModelWorld) -> usize {
    world
        .log
        .iter()
        .filter(|e| matches!(e, cotal_core::machine::Effect::ProbePlane(_)))
        .count()
}

#[test]
fn the_row_parse_is_closed_and_its_bytes_are_the_references() {
    let good = json!({
        "v": 1, "generation": 3, "claimId": "claim1", "state": "held",
        "ledger": {"serverId": "NSERVER", "cid": 11, "userNkey": nkey('A')},
        "records": {"serverId": "NSERVER", "cid": 12, "userNkey": nkey('B')},
        "openedAt": "2026-05-28T20:26:40.123Z",
    });
    let parsed = ClaimRow::parse(good.to_string().as_bytes()).unwrap();
    assert_eq!(parsed.generation, 3);
    assert_eq!(
        String::from_utf8(parsed.to_bytes()).unwrap(),
        format!(
            "{{\"v\":1,\"generation\":3,\"claimId\":\"claim1\",\"state\":\"held\",\"ledger\":\
             {{\"serverId\":\"NSERVER\",\"cid\":11,\"userNkey\":\"{a}\"}},\"records\":\
             {{\"serverId\":\"NSERVER\",\"cid\":12,\"userNkey\":\"{b}\"}},\"openedAt\":\
             \"2026-05-28T20:26:40.123Z\"}}",
            a = nkey('A'),
            b = nkey('B')
        )
    );
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        v.to_string().into_bytes()
    };
    for bad in [
        b"garbled{".to_vec(),
        edit(&|v| v["v"] = json!(2)),
        edit(&|v| v["generation"] = json!(0)),
        edit(&|v| v["state"] = json!("leased")),
        edit(&|v| v["ledger"]["cid"] = json!(-1)),
        edit(&|v| v["records"]["userNkey"] = json!("UBAD")),
        edit(&|v| v["extra"] = json!(true)),
        edit(&|v| v["ledger"]["extra"] = json!(1)),
        edit(&|v| v["claimId"] = json!("")),
        edit(&|v| v["openedAt"] = json!("x".repeat(65))),
    ] {
        assert!(
            ClaimRow::parse(&bad).is_none(),
            "{}",
            String::from_utf8_lossy(&bad)
        );
    }
}

#[test]
fn a_virgin_open_creates_generation_1_without_the_oracle_and_a_release_needs_none_next() {
    let mut world = ModelWorld::default();
    let hold = run(&mut world, open(1)).unwrap();
    assert_eq!((hold.generation, hold.reclaimed), (1, false));
    assert_eq!(probes(&world), 0, "a virgin space never asks the oracle");
    let stored = row(&world).unwrap();
    assert_eq!(stored.state, ClaimState::Held);
    assert_eq!(stored.opened_at, "2026-05-28T20:26:40.123Z");
    run(
        &mut world,
        AssertHeld {
            hold: hold.clone(),
            phase: ScanPhase::Before,
        },
    )
    .unwrap();

    run(&mut world, ReleasePlaneClaim { hold: hold.clone() }).unwrap();
    let released = row(&world).unwrap();
    assert_eq!(released.state, ClaimState::Released);
    assert_eq!(released.claim_id, "claim1");
    // Idempotent: released by us is success.
    run(&mut world, ReleasePlaneClaim { hold }).unwrap();

    let next = run(&mut world, open(2)).unwrap();
    assert_eq!((next.generation, next.reclaimed), (2, false));
    assert_eq!(
        probes(&world),
        0,
        "a released row is taken without the oracle"
    );
}

#[test]
fn a_held_row_refuses_a_live_peer_and_an_unknown_answer_with_distinct_copies() {
    let mut world = ModelWorld::default();
    run(&mut world, open(1)).unwrap();
    let before = world.kv.get(Store::Auth, PLANE_CLAIM_KEY).unwrap();

    oracle(&mut world, TupleLiveness::Live, TupleLiveness::Live);
    let e = run(&mut world, open(2)).unwrap_err();
    refused(
        &e,
        ClaimRefusal::LivePeer,
        ErrorCode::FailedPrecondition,
        &[
            "another auth plane already owns",
            "connection 11",
            "Stop the other auth service process",
        ],
    );
    // One scanner live is enough.
    oracle(&mut world, TupleLiveness::Gone, TupleLiveness::Live);
    let e = run(&mut world, open(2)).unwrap_err();
    refused(
        &e,
        ClaimRefusal::LivePeer,
        ErrorCode::FailedPrecondition,
        &["connection 12"],
    );

    for (l, r) in [
        (TupleLiveness::Unknown, TupleLiveness::Unknown),
        (TupleLiveness::Gone, TupleLiveness::Unknown),
    ] {
        oracle(&mut world, l, r);
        let e = run(&mut world, open(2)).unwrap_err();
        refused(
            &e,
            ClaimRefusal::Unknown,
            ErrorCode::Unavailable,
            &[
                "cannot confirm the previous auth plane",
                "FAIL-SAFE",
                "did not answer",
            ],
        );
        assert!(!e.message.contains("top the other"), "{e}");
    }
    // The default world has no oracle at all: unknown, never gone.
    let mut blind = ModelWorld::new(std::mem::take(&mut world.kv));
    let e = run(&mut blind, open(2)).unwrap_err();
    refused(
        &e,
        ClaimRefusal::Unknown,
        ErrorCode::Unavailable,
        &["no plane oracle"],
    );
    assert_eq!(
        blind.kv.get(Store::Auth, PLANE_CLAIM_KEY).unwrap(),
        before,
        "a refused open changes nothing"
    );
}

#[test]
fn a_dead_plane_is_reclaimed_and_its_old_guard_and_release_refuse() {
    let mut world = ModelWorld::default();
    let old = run(&mut world, open(1)).unwrap();
    oracle(&mut world, TupleLiveness::Gone, TupleLiveness::Gone);
    let new = run(&mut world, open(2)).unwrap();
    assert_eq!((new.generation, new.reclaimed), (2, true));
    assert_eq!(probes(&world), 1);

    let e = run(
        &mut world,
        AssertHeld {
            hold: old.clone(),
            phase: ScanPhase::Before,
        },
    )
    .unwrap_err();
    refused(
        &e,
        ClaimRefusal::Lost,
        ErrorCode::FailedPrecondition,
        &["refusing to enumerate", "no longer held"],
    );
    let e = run(&mut world, ReleasePlaneClaim { hold: old }).unwrap_err();
    refused(
        &e,
        ClaimRefusal::Lost,
        ErrorCode::FailedPrecondition,
        &["NOT releasing"],
    );
    assert_eq!(
        row(&world).unwrap().claim_id,
        "claim2",
        "the loser's release left it alone"
    );
}

#[test]
fn the_guard_discards_a_scan_whose_claim_was_stolen_and_refuses_when_fenced_or_releasing() {
    let mut world = ModelWorld::default();
    let hold = run(&mut world, open(1)).unwrap();
    let current = row(&world);
    check_held(&hold, current.as_ref(), None, false, ScanPhase::Before).unwrap();
    // Stolen mid-scan: the after-check discards the enumeration.
    oracle(&mut world, TupleLiveness::Gone, TupleLiveness::Gone);
    run(&mut world, open(2)).unwrap();
    let stolen = row(&world);
    let e = check_held(&hold, stolen.as_ref(), None, false, ScanPhase::After).unwrap_err();
    refused(
        &e,
        ClaimRefusal::Lost,
        ErrorCode::FailedPrecondition,
        &["DISCARDING"],
    );

    let copy = scanner_death_copy(&space(), "auth-ledger");
    assert!(copy.contains("STOPPED scanning") && copy.contains("restart the auth service"));
    let e = check_held(
        &hold,
        current.as_ref(),
        Some(&copy),
        false,
        ScanPhase::Before,
    )
    .unwrap_err();
    refused(
        &e,
        ClaimRefusal::Fenced,
        ErrorCode::FailedPrecondition,
        &["refusing to enumerate", "STOPPED scanning"],
    );
    let e = check_held(&hold, current.as_ref(), None, true, ScanPhase::Before).unwrap_err();
    refused(
        &e,
        ClaimRefusal::Released,
        ErrorCode::FailedPrecondition,
        &["being released"],
    );
}

#[test]
fn a_tuple_only_rewrite_is_a_lost_claim_and_is_not_released() {
    let mut world = ModelWorld::default();
    let hold = run(&mut world, open(1)).unwrap();
    let mut rewritten = row(&world).unwrap();
    rewritten.records = tuple("NOTHER", 99, 'C');
    let revision = world.kv.get(Store::Auth, PLANE_CLAIM_KEY).unwrap().revision;
    world.kv.apply(&cotal_core::kv::KvRequest::Update {
        store: Store::Auth,
        key: PLANE_CLAIM_KEY.into(),
        value: rewritten.to_bytes(),
        expected: revision,
    });
    let e = check_held(&hold, Some(&rewritten), None, false, ScanPhase::Before).unwrap_err();
    refused(
        &e,
        ClaimRefusal::Lost,
        ErrorCode::FailedPrecondition,
        &["scanner tuples no longer match"],
    );
    let e = run(&mut world, ReleasePlaneClaim { hold }).unwrap_err();
    refused(
        &e,
        ClaimRefusal::Lost,
        ErrorCode::FailedPrecondition,
        &["NOT releasing"],
    );
    assert_eq!(row(&world).unwrap().state, ClaimState::Held, "left held");
}

#[test]
fn a_corrupt_row_is_refused_and_never_overwritten() {
    let mut world = ModelWorld::default();
    world.kv.apply(&cotal_core::kv::KvRequest::Create {
        store: Store::Auth,
        key: PLANE_CLAIM_KEY.into(),
        value: b"{\"v\":1,\"garbled".to_vec(),
    });
    let before = world.kv.get(Store::Auth, PLANE_CLAIM_KEY).unwrap();
    oracle(&mut world, TupleLiveness::Gone, TupleLiveness::Gone);
    let e = run(&mut world, open(1)).unwrap_err();
    refused(
        &e,
        ClaimRefusal::Corrupt,
        ErrorCode::FailedPrecondition,
        &["not a valid v1 claim"],
    );
    assert_eq!(world.kv.get(Store::Auth, PLANE_CLAIM_KEY).unwrap(), before);
    assert_eq!(probes(&world), 0);
}

#[test]
fn ambiguous_claim_writes_are_settled_by_reading_the_row_back() {
    for fault in [Fault::AmbiguousApplied, Fault::AmbiguousNotApplied] {
        let mut world = ModelWorld::default();
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::CreateStrict, PLANE_CLAIM_KEY),
            fault,
        );
        let hold = run(&mut world, open(1)).unwrap();
        assert_eq!(hold.generation, 1);
        assert_eq!(row(&world).unwrap().claim_id, "claim1");
    }
    // An unanswered release whose write landed is settled as released.
    let mut world = ModelWorld::default();
    let hold = run(&mut world, open(1)).unwrap();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, PLANE_CLAIM_KEY),
        Fault::AmbiguousApplied,
    );
    run(&mut world, ReleasePlaneClaim { hold: hold.clone() }).unwrap();
    assert_eq!(row(&world).unwrap().state, ClaimState::Released);
    // A release the store does not answer is retryable, and the row stays held.
    let mut world = ModelWorld::default();
    let hold = run(&mut world, open(1)).unwrap();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, PLANE_CLAIM_KEY),
        Fault::Unavailable,
    );
    let e = run(&mut world, ReleasePlaneClaim { hold: hold.clone() }).unwrap_err();
    refused(
        &e,
        ClaimRefusal::ReleaseUnreachable,
        ErrorCode::Unavailable,
        &["closing again"],
    );
    assert_eq!(row(&world).unwrap().state, ClaimState::Held);
    run(&mut world, ReleasePlaneClaim { hold }).unwrap();
}

/// Two opens of a virgin space at once: A reads "absent", B opens in full, then A's create
/// loses, A re-reads, finds B live and refuses. Exactly one winner.
#[test]
fn two_simultaneous_virgin_opens_have_exactly_one_winner() {
    let mut world = ModelWorld::default();
    oracle(&mut world, TupleLiveness::Live, TupleLiveness::Live);
    let mut a = Replay::new(open(1));
    let Step::Effect(read) = a.step(None) else {
        panic!("A starts with its read")
    };
    let absent = World::perform(&mut world, &read);
    let b = run(&mut world, open(2)).unwrap();
    assert_eq!(b.generation, 1);
    let mut step = a.step(Some(absent));
    let a = loop {
        match step {
            Step::Effect(effect) => {
                let observed = World::perform(&mut world, &effect);
                step = a.step(Some(observed));
            }
            Step::Done(result) => break result,
        }
    };
    let loser = a.unwrap_err();
    refused(
        &loser,
        ClaimRefusal::LivePeer,
        ErrorCode::FailedPrecondition,
        &["already owns"],
    );
    assert_eq!(row(&world).unwrap().claim_id, "claim2");
}

#[test]
fn every_refusal_reason_round_trips_with_its_code() {
    for reason in ClaimRefusal::ALL {
        let code = reason.code();
        let unavailable = matches!(
            reason,
            ClaimRefusal::Unknown | ClaimRefusal::ReleaseUnreachable
        );
        assert_eq!(
            code == ErrorCode::Unavailable,
            unavailable,
            "{}",
            reason.as_str()
        );
    }
    let hold = held();
    let e = check_held(&hold, None, None, false, ScanPhase::Before).unwrap_err();
    assert_eq!(ClaimRefusal::of(&e), Some(ClaimRefusal::Lost));
    assert!(ConnTuple::new("", 1, &nkey('A')).is_err());
    assert!(ConnTuple::new("N", 0, &nkey('A')).is_err());
    assert!(ConnTuple::new("N", 1, "UABC").is_err());
}

/// A hold won as a claim (not a reclaim) on two sealed scanners of one server.
fn held() -> ClaimHold {
    ClaimHold {
        space: space(),
        claim_id: "c".into(),
        generation: 1,
        ledger: tuple("N", 1, 'A'),
        records: tuple("N", 2, 'B'),
        reclaimed: false,
    }
}

/// How a won hold is audited and said: a reclaim over a dead holder apart from a claim.
#[test]
fn a_hold_names_a_reclaim_apart_from_a_claim() {
    let mut hold = held();
    assert_eq!(hold.action(), "claim");
    assert_eq!(hold.held_copy(), "holds the plane claim");
    hold.reclaimed = true;
    assert_eq!(hold.action(), "reclaim");
    assert_eq!(
        hold.held_copy(),
        "holds the plane claim, reclaimed from a dead plane"
    );
}

/// The holder whose server came back, its scanners reconnected under new connection ids.
fn retake(hold: &ClaimHold) -> RetakePlaneClaim {
    RetakePlaneClaim {
        hold: hold.clone(),
        open: AcquirePlaneClaim {
            space: space(),
            claim_id: "claim1-retaken".into(),
            ledger: tuple("NRESTARTED", 1, 'A'),
            records: tuple("NRESTARTED", 2, 'B'),
            now_ms: NOW + 5_000,
        },
    }
}

/// A plane whose server came back re-takes its own row without the oracle: generation + 1, a
/// fresh claim id, its scanners' reconnected tuples; its old hold no longer guards a scan and
/// the new one does, and the new one is what a close releases.
#[test]
fn the_holder_whose_server_came_back_retakes_its_own_row() {
    let mut world = ModelWorld::default();
    let old = run(&mut world, open(1)).unwrap();
    let new = run(&mut world, retake(&old)).unwrap();
    assert_eq!(
        (new.generation, new.claim_id.as_str()),
        (2, "claim1-retaken")
    );
    assert_eq!(probes(&world), 0, "its own row needs no liveness question");
    let row = row(&world).unwrap();
    assert_eq!(
        (row.state, row.ledger.clone(), row.opened_at.as_str()),
        (
            ClaimState::Held,
            tuple("NRESTARTED", 1, 'A'),
            "2026-05-28T20:26:45.123Z"
        )
    );
    let guard = |hold: &ClaimHold| AssertHeld {
        hold: hold.clone(),
        phase: ScanPhase::Before,
    };
    assert_eq!(
        ClaimRefusal::of(&run(&mut world, guard(&old)).unwrap_err()),
        Some(ClaimRefusal::Lost)
    );
    run(&mut world, guard(&new)).unwrap();
    run(&mut world, ReleasePlaneClaim { hold: new }).unwrap();
}

/// A row someone else wrote while the server was away (a standby that reclaimed it, or a
/// release) is lost: the re-take writes nothing and the plane stops. An ambiguous re-take
/// write is settled by reading the row back, and a second send of the same re-take is its own.
#[test]
fn a_retake_over_a_row_another_plane_took_is_lost_and_an_ambiguous_one_is_settled() {
    let mut world = ModelWorld::default();
    let old = run(&mut world, open(1)).unwrap();
    oracle(&mut world, TupleLiveness::Gone, TupleLiveness::Gone);
    let standby = run(&mut world, open(2)).unwrap();
    let e = run(&mut world, retake(&old)).unwrap_err();
    refused(
        &e,
        ClaimRefusal::Lost,
        ErrorCode::FailedPrecondition,
        &["no longer held by this plane", "this one stops"],
    );
    assert_eq!(row(&world).unwrap().claim_id, standby.claim_id);

    for fault in [Fault::AmbiguousApplied, Fault::AmbiguousNotApplied] {
        let mut world = ModelWorld::default();
        let old = run(&mut world, open(1)).unwrap();
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Update, PLANE_CLAIM_KEY),
            fault,
        );
        let new = run(&mut world, retake(&old)).unwrap();
        assert_eq!(new.generation, 2);
        assert_eq!(run(&mut world, retake(&old)).unwrap(), new);
    }
}
