//! Parsing what the issuing host observes on the served run request subjects (reference-auth-
//! service §5.1, SPEC §14.8): which deliveries become observations, what operation and envelope
//! they keep, and which subscription patterns carry them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod run_fixtures;

use cotal_core::names::SpaceName;
use cotal_core::run::{
    served_run_request_subjects, subject_matches, ObservedRunRequest, RunRequestOperation,
};
use run_fixtures::*;
use serde_json::{json, Value};

const SENDER: &str = "u_cccccccccccccccccccccccccc.alice";

/// `cotal.s1.ep[.v1].<route>.manager[.<iid>].<command>[.<target>].<caller>[.<gen>].<nonce>`,
/// the caller being [`SENDER`] at [`CALLER_UID`]. `route` is `one`, `all` or `inst`; `target`
/// is empty or a dot-led target form.
fn subject(v1: bool, route: &str, command: &str, target: &str) -> String {
    let rail = if v1 { "ep.v1" } else { "ep" };
    let route = match route {
        "inst" => format!("inst.manager.{IID}"),
        other => format!("{other}.manager"),
    };
    let generation = if v1 { format!(".{GEN}") } else { String::new() };
    format!("cotal.s1.{rail}.{route}.{command}{target}.{SENDER}.{CALLER_UID}{generation}.{NONCE}")
}

/// A well-formed endpoint request envelope for `command` with `args`, agreeing with
/// [`subject`]: the fields the observation keeps are the fixtures' [`served_envelope`].
fn envelope(command: &str, args: Value) -> Value {
    let mut env = served_envelope(command, None);
    env["v"] = json!(1);
    env["id"] = json!("req_0123456789");
    env["from"] = json!({"id": SENDER});
    env["replyExpected"] = json!(true);
    env["args"] = args;
    env
}

fn parse(subject: &str, envelope: &Value) -> Option<ObservedRunRequest> {
    ObservedRunRequest::parse(&space(), subject, envelope.to_string().as_bytes())
}

fn resume_args() -> Value {
    json!({"runId": run_id('d')})
}

fn answer_args() -> Value {
    json!({"runId": run_id('d'), "stepKey": "ask", "answer": {"ok": true}})
}

/// A v1 run-start becomes a `Start`, and of its envelope only `{class, op, bind}` is kept: the
/// caller's identity is the subject's, and its id, args and reply flag matter to no forward.
#[test]
fn v1_run_start_is_observed_keeping_class_op_and_bind() {
    let mut env = envelope("run-start", json!({"input": {"goal": "x"}}));
    env["bind"] = json!({"instanceId": IID, "epoch": EPOCH});
    let seen = parse(&subject(true, "one", "run-start", ""), &env).unwrap();
    assert_eq!(seen.operation, RunRequestOperation::Start);
    let mut kept = served_envelope("run-start", Some((IID, EPOCH)));
    assert_eq!(seen.envelope, kept);
    kept.as_object_mut().unwrap().remove("bind");
    let unbound = parse(
        &subject(true, "one", "run-start", ""),
        &envelope("run-start", json!({})),
    )
    .unwrap();
    assert_eq!(unbound.envelope, kept, "an absent bind stays absent");
    assert!(seen.facts().unwrap().bind.is_some());
}

/// A legacy-rail run-resume names its run: the observation the served-caller check expects.
#[test]
fn legacy_run_resume_is_observed_with_its_run() {
    let seen = parse(
        &subject(false, "one", "run-resume", ""),
        &envelope("run-resume", resume_args()),
    );
    assert_eq!(seen, Some(observed_resume('d')));
}

/// A run-answer without `endpoint` or `amend` answers on the subject's endpoint and does not
/// amend; here on the instance route, `self`-targeted as `cotal run answer` sends it.
#[test]
fn run_answer_defaults_its_endpoint_and_amend() {
    let seen = parse(
        &subject(true, "inst", "run-answer", ".self"),
        &envelope("run-answer", answer_args()),
    );
    assert_eq!(seen, Some(observed_answer('d', "ask", false)));
    let mut args = answer_args();
    args["endpoint"] = Value::Null;
    let seen = parse(
        &subject(false, "inst", "run-answer", ".self"),
        &envelope("run-answer", args),
    );
    assert_eq!(
        seen,
        Some(observed_answer('d', "ask", false)),
        "a null endpoint is an absent one"
    );
}

/// An explicit `endpoint` and `amend: true` are kept as the caller sent them, so a forward
/// naming another endpoint or amendment can be told apart.
#[test]
fn run_answer_keeps_an_explicit_endpoint_and_amend() {
    let mut args = answer_args();
    args["endpoint"] = json!("com.example.flows");
    args["amend"] = json!(true);
    let seen = parse(
        &subject(false, "all", "run-answer", ""),
        &envelope("run-answer", args),
    )
    .unwrap();
    assert_eq!(
        seen.operation,
        RunRequestOperation::Answer {
            endpoint: "com.example.flows".into(),
            run_id: rid('d'),
            step_key: "ask".into(),
            amend: true,
        }
    );
}

const TARGETS: [&str; 4] = [
    "",
    ".self",
    ".owner.u_dddddddddddddddddddddddddd",
    ".handle.u_dddddddddddddddddddddddddd.bob.bbbbbbbbbbbbbbbbbbbbbbbbbb",
];

/// Every sample subject: each run command on both rails, every route and target form.
fn run_samples() -> Vec<(String, &'static str)> {
    let mut samples = Vec::new();
    for v1 in [false, true] {
        for route in ["one", "all", "inst"] {
            for command in ["run-start", "run-resume", "run-answer"] {
                for target in TARGETS {
                    samples.push((subject(v1, route, command, target), command));
                }
            }
        }
    }
    samples
}

/// Rail, route and target do not decide whether a run request is observed.
#[test]
fn every_rail_route_and_target_form_is_observed() {
    for (subject, command) in run_samples() {
        let args = if command == "run-start" {
            json!({})
        } else {
            answer_args()
        };
        assert!(
            parse(&subject, &envelope(command, args)).is_some(),
            "{subject}"
        );
    }
}

/// Anything that is not a run request of this space's manager, or whose envelope disagrees
/// with its subject, is no observation.
#[test]
fn deliveries_that_are_not_agreeing_run_requests_are_ignored() {
    let start = subject(true, "one", "run-start", "");
    let good = envelope("run-start", json!({}));
    assert!(parse(&start, &good).is_some());

    // The subject: another command, endpoint or space, another plane, no shape at all.
    let mut status = envelope("run-start", json!({"runId": run_id('d')}));
    status["op"]["command"] = json!("run-status");
    assert_eq!(
        parse(&subject(true, "one", "run-status", ""), &status),
        None
    );
    let mut other = good.clone();
    other["op"]["endpoint"] = json!("delivery");
    assert_eq!(
        parse(&start.replace(".manager.", ".delivery."), &other),
        None
    );
    assert_eq!(
        ObservedRunRequest::parse(
            &SpaceName::parse("s2").unwrap(),
            &start,
            good.to_string().as_bytes()
        ),
        None,
        "another space's subject"
    );
    assert_eq!(parse(&start.replace(".one.", ".reply."), &good), None);
    assert_eq!(parse(&start.replace(&format!(".{NONCE}"), ""), &good), None);

    // The envelope against the subject.
    let refused = |field: &str, value: Value| {
        let mut env = good.clone();
        env[field] = value;
        env
    };
    for (why, env) in [
        ("op names another endpoint", {
            let mut e = good.clone();
            e["op"]["endpoint"] = json!("delivery");
            e
        }),
        ("op names another command", {
            let mut e = good.clone();
            e["op"]["command"] = json!("run-resume");
            e
        }),
        ("no op", refused("op", Value::Null)),
        (
            "from.id is another sender",
            refused("from", json!({"id": "u_dddddddddddddddddddddddddd.alice"})),
        ),
        ("no from", refused("from", Value::Null)),
        ("version 2", refused("v", json!(2))),
        ("no version", refused("v", Value::Null)),
        ("id outside its grammar", refused("id", json!("has space"))),
        ("empty id", refused("id", json!(""))),
        ("id too long", refused("id", json!("a".repeat(65)))),
    ] {
        assert_eq!(parse(&start, &env), None, "{why}");
    }
    for body in [&b"{not json"[..], b"[1,2]", b"\"run-start\"", b""] {
        assert_eq!(ObservedRunRequest::parse(&space(), &start, body), None);
    }
}

/// A resume or answer whose args do not say which run, step or amendment is no observation:
/// it could match no forward.
#[test]
fn run_operations_with_malformed_args_are_ignored() {
    let resume = subject(false, "one", "run-resume", "");
    let answer = subject(true, "one", "run-answer", ".self");
    let with = |mut args: Value, key: &str, value: Value| {
        args[key] = value;
        args
    };
    let without = |mut args: Value, key: &str| {
        args.as_object_mut().unwrap().remove(key);
        args
    };
    for (why, args) in [
        ("no runId", without(resume_args(), "runId")),
        ("a runId outside its grammar", json!({"runId": "run-XYZ"})),
        ("a numeric runId", json!({"runId": 7})),
        ("no args", Value::Null),
    ] {
        assert_eq!(
            parse(&resume, &envelope("run-resume", args)),
            None,
            "resume: {why}"
        );
    }
    for (why, args) in [
        ("no runId", without(answer_args(), "runId")),
        ("no stepKey", without(answer_args(), "stepKey")),
        (
            "a numeric stepKey",
            with(answer_args(), "stepKey", json!(3)),
        ),
        (
            "a string amend",
            with(answer_args(), "amend", json!("true")),
        ),
        ("a null amend", with(answer_args(), "amend", Value::Null)),
        ("a numeric amend", with(answer_args(), "amend", json!(1))),
        (
            "a numeric endpoint",
            with(answer_args(), "endpoint", json!(1)),
        ),
    ] {
        assert_eq!(
            parse(&answer, &envelope("run-answer", args)),
            None,
            "answer: {why}"
        );
    }
}

/// The subscription patterns carry every form of the three run commands, each through exactly
/// one pattern (so no delivery is recorded twice), every pattern carries some form, and no
/// other command, endpoint or space rides them.
#[test]
fn served_run_request_subjects_carry_exactly_the_run_commands() {
    let patterns = served_run_request_subjects(&space());
    assert_eq!(patterns.len(), 12, "{patterns:?}");
    let samples = run_samples();
    for (sample, _) in &samples {
        let carrying: Vec<_> = patterns
            .iter()
            .filter(|p| subject_matches(p, sample))
            .collect();
        assert_eq!(carrying.len(), 1, "{sample}: {carrying:?}");
    }
    for pattern in &patterns {
        assert!(
            samples.iter().any(|(s, _)| subject_matches(pattern, s)),
            "{pattern} carries no run request"
        );
    }
    let mut others = Vec::new();
    for v1 in [false, true] {
        for route in ["one", "all", "inst"] {
            for command in ["run-status", "run-cancel", "spawn", "run-starter", "run"] {
                others.push(subject(v1, route, command, ""));
            }
            let start = subject(v1, route, "run-start", "");
            others.push(start.replace(".manager.", ".delivery."));
            others.push(start.replace("cotal.s1.", "cotal.s2."));
        }
    }
    others.push(format!(
        "cotal.s1.ep.reply.manager.{IID}.3.{SENDER}.{CALLER_UID}.{NONCE}"
    ));
    for other in &others {
        assert!(
            !patterns.iter().any(|p| subject_matches(p, other)),
            "{other} is carried"
        );
    }
}
