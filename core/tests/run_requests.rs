//! The run request parsers (reference-auth-service §5.2, §5.4), the request subject grammar and
//! the observed run requests (§5.1).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod run_fixtures;

use cotal_core::run::{
    parse_request_subject, parse_run_admission_request, parse_run_attempt_request, AttemptBody,
    ObservedRunRequest, ObservedRunRequests, Route, RunRequestOperation,
    OBSERVED_RUN_REQUEST_WINDOW_MS,
};
use cotal_core::ErrorCode;
use run_fixtures::*;
use serde_json::{json, Value};

fn bad(raw: &Value, needle: &str, attempt: bool) {
    let e = if attempt {
        parse_run_attempt_request(raw).unwrap_err()
    } else {
        parse_run_admission_request(raw).unwrap_err()
    };
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert!(
        e.message.starts_with("manager run admission request "),
        "{e}"
    );
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
}

/// remote-run-admission: "`ceiling` field refusal" — the protocol is closed (F90).
#[test]
fn f90_admission_request_is_closed_and_names_no_ceiling() {
    let good = admission_request('d', &start_subject(OWNER, GEN));
    let r = parse_run_admission_request(&good).unwrap();
    assert_eq!(r.run_id, rid('d'));
    bad(
        &with(good.clone(), "ceiling", json!({})),
        "has unknown field ceiling",
        false,
    );
    bad(
        &without(good.clone(), "accountPublicKey"),
        "requires an account public key",
        false,
    );
    bad(
        &with(good.clone(), "processEpoch", json!(-1)),
        "requires a non-negative processEpoch",
        false,
    );
    bad(
        &without(good.clone(), "registrationProof"),
        "registrationProof",
        false,
    );
    for run in [
        json!({"runId": "run-x", "subject": "s"}),
        json!({"runId": run_id('d')}),
        json!({"runId": run_id('d'), "subject": "s", "x": 1}),
    ] {
        bad(
            &with(good.clone(), "run", run),
            "requires exactly run.runId (host-minted) and run.subject",
            false,
        );
    }
    bad(&json!([]), "must be an object", false);
}

/// remote-run-attempt-route: "both-or-neither → exactly one"; attempt and operator shapes.
#[test]
fn attempt_request_carries_exactly_one_of_attempt_or_operator() {
    let good = attempt_request('d', 1, 1);
    assert!(matches!(
        parse_run_attempt_request(&good).unwrap().body,
        AttemptBody::Attempt(_)
    ));
    bad(
        &with(good.clone(), "kind", json!("manager-run-admission")),
        "must be v1 manager-run-attempt",
        true,
    );
    bad(
        &with(good.clone(), "operator", json!({})),
        "carries exactly one of attempt or operator",
        true,
    );
    bad(
        &without(good.clone(), "attempt"),
        "carries exactly one of attempt or operator",
        true,
    );
    bad(
        &with(good.clone(), "run", json!({})),
        "has unknown field run",
        true,
    );
    let mut same = good.clone();
    same["attempt"]["mediatorId"] = same["attempt"]["driverId"].clone();
    bad(&same, "distinct driver/mediator nkeys", true);
    let mut zero = good.clone();
    zero["attempt"]["epoch"] = json!(0);
    bad(&zero, "positive epoch/fencingToken", true);
    let mut extra = good.clone();
    extra["attempt"]["x"] = json!(1);
    bad(&extra, "attempt/operator must carry exactly", true);
    let op = |o: Value| with(without(good.clone(), "attempt"), "operator", o);
    assert!(parse_run_attempt_request(&op(json!({"id": nkey('H'), "takeoverId": "t1"}))).is_ok());
    bad(
        &op(json!({"id": nkey('H'), "takeoverId": "t1", "served": "x"})),
        "only an answering operator carries one",
        true,
    );
    bad(
        &op(
            json!({"id": nkey('H'), "takeoverId": "t1", "runId": run_id('d'), "answers": {"runId": run_id('d'), "stepKey": "k"}}),
        ),
        "no outer run id",
        true,
    );
    bad(
        &op(
            json!({"id": nkey('H'), "takeoverId": "t1", "answers": {"runId": run_id('d'), "stepKey": "k", "amend": false}}),
        ),
        "optional amend: true",
        true,
    );
}

#[test]
fn request_subjects_parse_with_exact_arity() {
    let s = parse_request_subject(&start_subject(OWNER, GEN)).unwrap();
    assert!(s.v1 && s.target.is_none() && s.route == Route::One);
    assert_eq!(
        (s.command.as_str(), s.generation.unwrap().as_str()),
        ("run-start", GEN)
    );
    let legacy = format!(
        "cotal.s1.ep.inst.manager.{IID}.run-answer.self.{OWNER}.alice.{CALLER_UID}.{NONCE}"
    );
    let l = parse_request_subject(&legacy).unwrap();
    assert!(!l.v1 && l.target.as_deref() == Some("self") && l.generation.is_none());
    for bad in [
        format!("{}.extra", start_subject(OWNER, GEN)),
        start_subject(OWNER, GEN).replace(&format!(".{NONCE}"), ""),
        start_subject(OWNER, GEN).replace("cotal.", "kotal."),
        start_subject(OWNER, GEN).replace(".one.", ".reply."),
    ] {
        assert_eq!(parse_request_subject(&bad), None, "{bad}");
    }
}

fn start() -> ObservedRunRequest {
    ObservedRunRequest {
        operation: RunRequestOperation::Start,
        envelope: json!({}),
    }
}

/// §5.1: each observation is consumed once, within the 5-minute window; expired entries are
/// pruned on insert; a repeat re-inserts with a fresh window.
#[test]
fn observed_run_requests_are_taken_once_within_the_window() {
    let mut seen = ObservedRunRequests::new();
    seen.record("a", start(), 1_000);
    assert_eq!(
        seen.take("a", 1_000 + OBSERVED_RUN_REQUEST_WINDOW_MS - 1),
        Some(start())
    );
    assert_eq!(seen.take("a", 1_001), None, "consumed once");
    seen.record("b", start(), 0);
    assert_eq!(
        seen.take("b", OBSERVED_RUN_REQUEST_WINDOW_MS),
        None,
        "expired"
    );
    seen.record("c", start(), 0);
    seen.record("c", start(), 100_000);
    assert!(
        seen.take("c", OBSERVED_RUN_REQUEST_WINDOW_MS + 1).is_some(),
        "re-insert renews"
    );
    seen.record("d", start(), 0);
    seen.record("e", start(), OBSERVED_RUN_REQUEST_WINDOW_MS + 5);
    assert_eq!(seen.len(), 1, "d pruned from the front");
}
