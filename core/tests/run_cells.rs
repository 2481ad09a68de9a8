//! Run admission and run attempts on the KV model: the reference's `remote-run-admission` and
//! `remote-run-attempt-route` cells (reference-auth-service §11.5, HTTP-only cells left to the
//! HTTP face), F88 named tests, and the admission create's ambiguity settled by read-back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod run_fixtures;

use cotal_core::driver::ModelWorld;
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::machine::Ctx;
use cotal_core::profiles::StandingTtl;
use cotal_core::run::{
    read_run_admission, sign_attempt, AttemptGrant, Provenance, RevokeRun, RunAdmission,
    RunAttempt, RunRevocation, RunState,
};
use cotal_core::{EpError, ErrorCode};
use run_fixtures::*;
use serde_json::{json, Value};

fn refused<T: std::fmt::Debug>(r: Result<T, EpError>, code: ErrorCode, needle: &str) {
    let e = r.expect_err(needle);
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
}

fn admissions(world: &ModelWorld) -> Vec<String> {
    world.kv.keys(Store::Admission, "")
}

fn admit_with(
    world: &mut ModelWorld,
    subject: &str,
    evidence: Result<cotal_core::run::IssuedEvidence, EpError>,
) -> Result<cotal_core::run::AdmissionOutcome, EpError> {
    admit(
        world,
        &admission_request('d', subject),
        host(),
        started(),
        evidence,
        1_700_000_000_000,
    )
}

// ---- remote-run-admission -------------------------------------------------------------------

/// remote-run-admission: "admission written with issued provenance and the caller's ceiling".
/// Also the golden bytes: RFC 8785 canonical JSON (sorted keys) at `admission.v1.manager.<run>`.
#[test]
fn f88_admission_is_written_create_only_with_issued_provenance_and_the_callers_ceiling() {
    let mut world = manager_world(OWNER, false);
    let out = admit_standard(&mut world, 'd');
    assert!(out.created);
    let key = cotal_core::names::keys::run_admission(&manager(), &rid('d'));
    assert_eq!(key, format!("admission.v1.manager.{}", run_id('d')));
    let stored = world.kv.get(Store::Admission, &key).unwrap();
    assert_eq!(stored.revision, out.revision);
    let expected = format!(
        concat!(
            r#"{{"admittedAt":1700000000000,"caller":{{"actor":"alice","generation":"{g}","owner":"{o}","uid":"{u}"}},"#,
            r#""ceiling":{{"publish":{{"allow":{{"mode":"patterns","patterns":["cotal.s1.ep.v1.*.manager.run-start.>"]}},"deny":[]}},"#,
            r#""subscribe":{{"allow":{{"mode":"none"}},"deny":[]}}}},"endpoint":"manager","instanceId":"{i}","#,
            r#""provenance":{{"kind":"issued","ref":{{"actor":"alice","generation":"{g}","owner":"{o}","space":"s1","uid":"{u}"}},"resolvedRevision":4}},"#,
            r#""runId":"{r}","space":"s1","version":1}}"#
        ),
        g = GEN,
        o = OWNER,
        u = CALLER_UID,
        i = IID,
        r = run_id('d')
    );
    assert_eq!(String::from_utf8(stored.value.clone()).unwrap(), expected);
    let back = RunAdmission::from_value(&serde_json::from_slice(&stored.value).unwrap()).unwrap();
    assert_eq!(back, out.admission);
    assert!(matches!(
        back.provenance(),
        Provenance::Issued {
            resolved_revision: 4,
            ..
        }
    ));
}

/// remote-run-admission: "exact retry idempotent (same revision/admittedAt)".
#[test]
fn f88_an_exact_retry_returns_the_admission_already_written() {
    let mut world = manager_world(OWNER, false);
    let first = admit_standard(&mut world, 'd');
    let retry = admit(
        &mut world,
        &admission_request('d', &start_subject(OWNER, GEN)),
        host(),
        started(),
        Ok(evidence(OWNER, GEN)),
        1_700_000_999_999,
    )
    .unwrap();
    assert!(!retry.created);
    assert_eq!(retry.revision, first.revision);
    assert_eq!(retry.admission.admitted_at(), 1_700_000_000_000);
    assert_eq!(
        world
            .kv
            .history(
                Store::Admission,
                &cotal_core::names::keys::run_admission(&manager(), &rid('d'))
            )
            .len(),
        1
    );
}

/// remote-run-admission: "other caller or other generation → already admitted for another
/// caller"; the admission is never overwritten (create-only).
#[test]
fn f88_create_only_another_caller_or_generation_is_conflict() {
    let mut world = manager_world(OWNER, false);
    admit_standard(&mut world, 'd');
    let key = cotal_core::names::keys::run_admission(&manager(), &rid('d'));
    let before = world.kv.get(Store::Admission, &key).unwrap();
    refused(
        admit_with(
            &mut world,
            &start_subject(OWNER, OTHER_GEN),
            Ok(evidence(OWNER, OTHER_GEN)),
        ),
        ErrorCode::Conflict,
        "is already admitted for another caller or instance",
    );
    let other_caller = start_subject(OWNER, GEN).replace(".alice.", ".bob.");
    let mut ev = evidence(OWNER, GEN);
    ev.reference.actor = cotal_core::names::ActorToken::parse("bob").unwrap();
    refused(
        admit_with(&mut world, &other_caller, Ok(ev)),
        ErrorCode::Conflict,
        "already admitted for another caller",
    );
    assert_eq!(world.kv.get(Store::Admission, &key).unwrap(), before);
}

/// remote-run-admission: "forged/revoked/dead-source → refused and nothing written" — the issued
/// store's refusals come in from the adapter and stop the admission before the create.
#[test]
fn adapter_evidence_refusals_write_nothing() {
    for (why, code) in [
        (
            "no issued evidence for this generation",
            ErrorCode::PermissionDenied,
        ),
        ("the issuance was revoked", ErrorCode::PermissionDenied),
        (
            "the issuance's source is no longer live",
            ErrorCode::PermissionDenied,
        ),
    ] {
        let mut world = manager_world(OWNER, false);
        refused(
            admit_with(
                &mut world,
                &start_subject(OWNER, GEN),
                Err(EpError::new(code, why)),
            ),
            code,
            why,
        );
        assert!(admissions(&world).is_empty());
    }
}

/// remote-run-admission: "narrow-ceiling → refused"; evidence naming another reference too.
#[test]
fn a_ceiling_that_does_not_permit_the_subject_or_foreign_evidence_refuses() {
    let mut world = manager_world(OWNER, false);
    let mut narrow = evidence(OWNER, GEN);
    narrow.permissions = ceiling(&["cotal.s1.ep.v1.one.manager.run-status.>"]);
    refused(
        admit_with(&mut world, &start_subject(OWNER, GEN), Ok(narrow)),
        ErrorCode::PermissionDenied,
        "does not permit this run-start subject",
    );
    let mut denied = evidence(OWNER, GEN);
    denied.permissions.publish.deny = vec!["cotal.s1.ep.v1.one.>".into()];
    refused(
        admit_with(&mut world, &start_subject(OWNER, GEN), Ok(denied)),
        ErrorCode::PermissionDenied,
        "does not permit",
    );
    refused(
        admit_with(
            &mut world,
            &start_subject(OWNER, GEN),
            Ok(evidence(OWNER, OTHER_GEN)),
        ),
        ErrorCode::PermissionDenied,
        "evidence names another issued reference",
    );
    assert!(admissions(&world).is_empty());
}

/// remote-run-admission: "legacy / foreign space / instance / command → refused and nothing
/// written" (HTTP cell: foreign space → "served v1 run-start subject").
#[test]
fn only_the_served_v1_run_start_of_this_space_endpoint_and_instance_is_admitted() {
    let good = start_subject(OWNER, GEN);
    let legacy = format!("cotal.s1.ep.one.manager.run-start.{OWNER}.alice.{CALLER_UID}.{NONCE}");
    let bad = [
        legacy,
        good.replace("cotal.s1.", "cotal.s2."),
        good.replace(".run-start.", ".run-status."),
        good.replace(".manager.", ".delivery."),
        good.replace(
            ".v1.one.manager.",
            &format!(".v1.inst.manager.{OTHER_IID}."),
        ),
        good.replace(".run-start.", ".run-start.self."),
        good.replace(GEN, "nothex"),
        "not a subject".to_owned(),
    ];
    for subject in bad {
        let mut world = manager_world(OWNER, false);
        refused(
            admit_with(&mut world, &subject, Ok(evidence(OWNER, GEN))),
            ErrorCode::PermissionDenied,
            "needs the served v1 run-start subject of this space, endpoint and instance with an issued caller",
        );
        assert!(admissions(&world).is_empty(), "{subject}");
    }
    // This instance's own instance-routed form is admitted.
    let mut world = manager_world(OWNER, false);
    let inst = good.replace(".v1.one.manager.", &format!(".v1.inst.manager.{IID}."));
    let mut ev = evidence(OWNER, GEN);
    ev.permissions = ceiling(&[">"]);
    assert!(admit_with(&mut world, &inst, Ok(ev)).unwrap().created);
}

/// remote-run-admission: account/epoch/gate/owner/proof refusals, and `nosupervise`.
#[test]
fn the_registered_manager_is_authenticated_before_anything_else() {
    let subject = start_subject(OWNER, GEN);
    let req = admission_request('d', &subject);
    let cases: Vec<(ModelWorld, Value, RunHost, ErrorCode, &str)> = vec![
        (
            manager_world(OWNER, false),
            with(
                req.clone(),
                "accountPublicKey",
                json!(format!("A{}", "R".repeat(55))),
            ),
            host(),
            ErrorCode::PermissionDenied,
            "bound to the host-assigned space and account",
        ),
        (
            manager_world(OWNER, false),
            with(req.clone(), "processEpoch", json!(2)),
            host(),
            ErrorCode::Conflict,
            "processEpoch is stale",
        ),
        (
            ModelWorld::default(),
            req.clone(),
            host(),
            ErrorCode::FailedPrecondition,
            "has no open registration gate",
        ),
        (
            manager_world(OWNER, true),
            req.clone(),
            host(),
            ErrorCode::FailedPrecondition,
            "has no open registration gate",
        ),
        (
            manager_world(OTHER_OWNER, false),
            req.clone(),
            host(),
            ErrorCode::PermissionDenied,
            "gate belongs to another owner",
        ),
        (
            manager_world(OWNER, false),
            with(
                req.clone(),
                "registrationProof",
                json!(format!("sha256:{}", "b".repeat(64))),
            ),
            host(),
            ErrorCode::PermissionDenied,
            "proof does not match the current registration",
        ),
        (
            manager_world(OWNER, false),
            req.clone(),
            host_without_supervise(),
            ErrorCode::PermissionDenied,
            "manager run admission needs scope \"supervise\"; spawn/admin do not imply it",
        ),
    ];
    for (mut world, request, host, code, needle) in cases {
        refused(
            admit(
                &mut world,
                &request,
                host,
                started(),
                Ok(evidence(OWNER, GEN)),
                1,
            ),
            code,
            needle,
        );
        assert!(admissions(&world).is_empty(), "{needle}");
    }
}

/// SPEC 14.8: the host must have observed the run-start, and each observation admits once.
#[test]
fn an_unobserved_forward_is_refused() {
    let mut world = manager_world(OWNER, false);
    refused(
        admit(
            &mut world,
            &admission_request('d', &start_subject(OWNER, GEN)),
            host(),
            None,
            Ok(evidence(OWNER, GEN)),
            1,
        ),
        ErrorCode::PermissionDenied,
        "did not observe this run-start request, or already admitted a forward of it",
    );
    assert!(admissions(&world).is_empty());
}

/// §5.3 item 4: a derived user's run is admitted only on the manager that user registered.
#[test]
fn a_users_run_is_admitted_only_on_its_own_participant_manager() {
    let mut world = manager_world(OWNER, false);
    refused(
        admit_with(
            &mut world,
            &start_subject(OTHER_OWNER, GEN),
            Ok(evidence(OTHER_OWNER, GEN)),
        ),
        ErrorCode::PermissionDenied,
        "admitted only on the participant manager that user registered",
    );
    assert!(admissions(&world).is_empty());
    // A non-derived (platform) caller owner is not bound to the manager's owner.
    let platform = format!("p_{}", "e".repeat(26));
    assert!(
        admit_with(
            &mut world,
            &start_subject(&platform, GEN),
            Ok(evidence(&platform, GEN))
        )
        .unwrap()
        .created
    );
}

/// Ambiguity of the admission create, settled by leader read-back: applied → the read-back sees
/// our own bytes and returns them as created; not applied → nothing there, re-sent, created.
#[test]
fn an_ambiguous_admission_create_is_settled_by_read_back() {
    for fault in [Fault::AmbiguousApplied, Fault::AmbiguousNotApplied] {
        let mut world = manager_world(OWNER, false);
        world.kv.inject(
            Trigger::new(Store::Admission, KvOp::CreateStrict, "admission."),
            fault,
        );
        let out = admit_standard(&mut world, 'd');
        assert!(out.created);
        let key = cotal_core::names::keys::run_admission(&manager(), &rid('d'));
        let history = world.kv.history(Store::Admission, &key);
        assert_eq!(history.len(), 1, "exactly one admission committed");
        assert_eq!(history[0].0, out.revision);
        assert_eq!(world.kv.pending_faults(), 0);
    }
}

/// An ambiguous create whose read-back finds another caller's admission (a racing writer won) is
/// that caller's, never ours: conflict.
#[test]
fn an_ambiguous_create_that_lost_to_another_caller_is_conflict() {
    let mut world = manager_world(OWNER, false);
    admit_with(
        &mut world,
        &start_subject(OWNER, OTHER_GEN),
        Ok(evidence(OWNER, OTHER_GEN)),
    )
    .unwrap();
    world.kv.inject(
        Trigger::new(Store::Admission, KvOp::CreateStrict, "admission."),
        Fault::AmbiguousNotApplied,
    );
    refused(
        admit_with(
            &mut world,
            &start_subject(OWNER, GEN),
            Ok(evidence(OWNER, GEN)),
        ),
        ErrorCode::Conflict,
        "already admitted for another caller",
    );
}

// ---- read_run_admission and revocation -------------------------------------------------------

fn read(world: &mut ModelWorld, c: char) -> Result<cotal_core::run::AdmissionView, EpError> {
    run_script(
        world,
        Proc(move |cx: &mut Ctx<'_>| read_run_admission(cx, &space(), &manager(), &rid(c))),
    )
}

fn revoke(world: &mut ModelWorld, c: char, by: &str) -> Result<(), EpError> {
    run_script(
        world,
        RevokeRun {
            endpoint: manager(),
            revocation: RunRevocation {
                run_id: rid(c),
                reason: "operator stop".into(),
                by: by.into(),
                revoked_at: 1_700_000_000_500,
            },
        },
    )
}

/// reference-gate-impl §3.22 `readRunAdmission`: absent → permission-denied; marker →
/// failed-precondition; garbled → permission-denied; coordinate mismatch → permission-denied.
#[test]
fn f88_missing_unreadable_or_mismatched_admission_never_continues() {
    let mut world = manager_world(OWNER, false);
    refused(
        read(&mut world, 'd'),
        ErrorCode::PermissionDenied,
        "has no admission record on endpoint manager",
    );
    admit_standard(&mut world, 'd');
    let view = read(&mut world, 'd').unwrap();
    assert_eq!(view.revoked, None);
    let key = cotal_core::names::keys::run_admission(&manager(), &rid('d'));
    let good = world.kv.get(Store::Admission, &key).unwrap().value;

    let mut garbled = manager_world(OWNER, false);
    garbled.kv.put(Store::Admission, &key, b"{\"version\":1}");
    refused(
        read(&mut garbled, 'd'),
        ErrorCode::PermissionDenied,
        "admission record is unreadable",
    );

    let mut moved = manager_world(OWNER, false);
    let other_key = cotal_core::names::keys::run_admission(&manager(), &rid('e'));
    moved.kv.put(Store::Admission, &other_key, &good);
    refused(
        read(&mut moved, 'e'),
        ErrorCode::PermissionDenied,
        "names other coordinates",
    );

    let mut deleted = manager_world(OWNER, false);
    deleted.kv.put(Store::Admission, &key, &good);
    deleted.kv.delete_unpinned(Store::Admission, &key);
    refused(
        read(&mut deleted, 'd'),
        ErrorCode::FailedPrecondition,
        "a deletion is never absence",
    );
}

/// F88: revocation is a create-only marker, idempotent (a second revoke, even by someone else,
/// succeeds and leaves the first marker), and an ambiguous marker write settles by read-back.
#[test]
fn f88_revocation_is_create_only_and_idempotent() {
    let mut world = manager_world(OWNER, false);
    admit_standard(&mut world, 'd');
    revoke(&mut world, 'd', "ops").unwrap();
    revoke(&mut world, 'd', "someone-else").unwrap();
    let key = cotal_core::names::keys::run_revocation(&manager(), &rid('d'));
    assert_eq!(key, format!("revoked.v1.manager.{}", run_id('d')));
    assert_eq!(world.kv.history(Store::Admission, &key).len(), 1);
    let view = read(&mut world, 'd').unwrap();
    assert_eq!(view.revoked.unwrap().by, "ops");
    for fault in [Fault::AmbiguousApplied, Fault::AmbiguousNotApplied] {
        let mut w = manager_world(OWNER, false);
        w.kv.inject(
            Trigger::new(Store::Admission, KvOp::CreateStrict, "revoked."),
            fault,
        );
        revoke(&mut w, 'd', "ops").unwrap();
        assert_eq!(w.kv.history(Store::Admission, &key).len(), 1);
    }
}

// ---- remote-run-attempt-route ---------------------------------------------------------------

fn attempt(
    world: &mut ModelWorld,
    request: &Value,
    host: RunHost,
) -> Result<cotal_core::run::AttemptDecision, EpError> {
    let request = cotal_core::run::parse_run_attempt_request(request)?;
    run_script(
        world,
        RunAttempt {
            request,
            host: host.host,
            holder: host.holder,
            endpoint: manager(),
        },
    )
}

fn admitted_world() -> ModelWorld {
    let mut world = manager_world(OWNER, false);
    admit_standard(&mut world, 'd');
    world
}

fn keys_of(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// remote-run-attempt-route: "first attempt (no run record, epoch/fence 1/1) → 200 with the
/// closed key set and credentials {driver, mediator}, no seed". Round trips: gate, admission,
/// revocation marker, run status = 4.
#[test]
// Caller-held keys drawn fresh, as a caller would; core's purity rules bind the machines, not
// the test harness.
#[allow(clippy::disallowed_methods)]
fn the_first_attempt_is_one_one_and_gets_exactly_a_driver_and_a_mediator() {
    let mut world = admitted_world();
    // Real keys: the response is signed by the data account for caller-held user nkeys.
    let signer = nkeys::KeyPair::new_account();
    let (driver_key, mediator_key) = (nkeys::KeyPair::new_user(), nkeys::KeyPair::new_user());
    let mut request = attempt_request('d', 1, 1);
    request["accountPublicKey"] = json!(signer.public_key());
    request["attempt"]["driverId"] = json!(driver_key.public_key());
    request["attempt"]["mediatorId"] = json!(mediator_key.public_key());
    let host =
        host_with_account(cotal_core::manager::AccountKey::parse(&signer.public_key()).unwrap());
    let before = world.kv.requests_served();
    let decision = attempt(&mut world, &request, host).unwrap();
    assert_eq!(world.kv.requests_served() - before, 4);
    let AttemptGrant::Pair { driver, mediator } = &decision.grant else {
        panic!("a pair")
    };
    assert_eq!((driver.name, mediator.name), ("run-driver", "run-mediator"));
    assert_eq!(driver.ttl_seconds, StandingTtl::DEFAULT.seconds());
    let response = sign_attempt(
        &parse_attempt(&request),
        &owner(),
        &decision,
        &signer,
        cotal_core::jwt::UnixSeconds(1_700_000_000),
    )
    .unwrap();
    assert_eq!(
        keys_of(&response),
        [
            "accountPublicKey",
            "actor",
            "attempt",
            "credentials",
            "identities",
            "instanceId",
            "kind",
            "managerLifecycleUid",
            "owner",
            "processEpoch",
            "registrationProof",
            "requestId",
            "space",
            "v"
        ]
    );
    assert_eq!(keys_of(&response["credentials"]), ["driver", "mediator"]);
    assert_no_seed(&response);
    assert_eq!(
        response["credentials"]["driver"]["exp"],
        json!(1_700_000_000 + StandingTtl::DEFAULT.seconds())
    );
    let jwt = response["credentials"]["driver"]["jwt"].as_str().unwrap();
    assert_eq!(jwt.split('.').count(), 3);
}

/// remote-run-attempt-route: "after status 1/1, attempt 2/2 → 200; 1/1 and 9/9 → 403 next
/// recorded epoch". F84: the attempt carries exactly the next epoch AND fencing token.
#[test]
fn f84_an_attempt_must_carry_the_next_recorded_epoch_and_fencing_token() {
    let mut world = admitted_world();
    put_status(
        &mut world,
        &rid('d'),
        &status(RunState::Running, 1, 1),
        None,
    )
    .unwrap();
    assert!(attempt(&mut world, &attempt_request('d', 2, 2), host()).is_ok());
    for (e, t) in [(1, 1), (9, 9), (2, 3), (3, 2)] {
        refused(
            attempt(&mut world, &attempt_request('d', e, t), host()),
            ErrorCode::Conflict,
            "attempt must be the next recorded epoch/fencing token",
        );
    }
    // With no record, only 1/1.
    let mut fresh = admitted_world();
    refused(
        attempt(&mut fresh, &attempt_request('d', 2, 2), host()),
        ErrorCode::Conflict,
        "next recorded epoch",
    );
}

/// remote-run-attempt-route: "completed run → terminal run gets no new attempt".
#[test]
fn a_terminal_run_gets_no_new_attempt() {
    for state in [RunState::Completed, RunState::Failed] {
        let mut world = admitted_world();
        put_status(&mut world, &rid('d'), &status(state, 1, 1), None).unwrap();
        refused(
            attempt(&mut world, &attempt_request('d', 2, 2), host()),
            ErrorCode::FailedPrecondition,
            "a terminal run gets no new attempt",
        );
    }
    // Released is not terminal: the next attempt may take it over.
    let mut world = admitted_world();
    put_status(
        &mut world,
        &rid('d'),
        &status(RunState::Released, 1, 1),
        None,
    )
    .unwrap();
    assert!(attempt(&mut world, &attempt_request('d', 2, 2), host()).is_ok());
}

/// F88 + remote-run-attempt-route "revoked → 403": a revoked run is issued nothing.
#[test]
fn f88_a_revoked_run_is_issued_nothing() {
    let mut world = admitted_world();
    revoke(&mut world, 'd', "ops").unwrap();
    refused(
        attempt(&mut world, &attempt_request('d', 1, 1), host()),
        ErrorCode::PermissionDenied,
        "was revoked; a revoked run is issued nothing (SPEC 14.8)",
    );
    let op = with(
        registered("manager-run-attempt"),
        "operator",
        json!({"id": nkey('H'), "takeoverId": "cccccccccccccccc", "runId": run_id('d')}),
    );
    refused(
        attempt(&mut world, &op, host()),
        ErrorCode::PermissionDenied,
        "was revoked",
    );
}

/// remote-run-attempt-route: "read operator → 200 {operator}"; an unscoped read operator
/// needs no admission; an answering operator is refused until run journals are read.
#[test]
fn a_read_operator_gets_one_sixty_second_run_operator() {
    let mut world = admitted_world();
    for body in [
        json!({"id": nkey('H'), "takeoverId": "cccccccccccccccc", "runId": run_id('d')}),
        json!({"id": nkey('H'), "takeoverId": "cccccccccccccccc"}),
    ] {
        let op = with(registered("manager-run-attempt"), "operator", body);
        let decision = attempt(&mut world, &op, host()).unwrap();
        let AttemptGrant::Operator(profile) = decision.grant else {
            panic!("an operator")
        };
        assert_eq!((profile.name, profile.ttl_seconds), ("run-operator", 60));
    }
    let answering = with(
        registered("manager-run-attempt"),
        "operator",
        json!({"id": nkey('H'), "takeoverId": "cccccccccccccccc",
               "answers": {"runId": run_id('d'), "stepKey": "s1"}, "served": "cotal.s1.ep.one.manager.run-answer.x"}),
    );
    refused(
        attempt(&mut world, &answering, host()),
        ErrorCode::Unimplemented,
        "open checkpoint",
    );
}

/// remote-run-attempt-route: nosupervise, stale epoch, bad proof, foreign account, missing gate,
/// no admission, admitted elsewhere, both-or-neither → refused.
#[test]
fn attempt_refusals() {
    let base = attempt_request('d', 1, 1);
    let cases: Vec<(ModelWorld, Value, RunHost, ErrorCode, &str)> = vec![
        (
            admitted_world(),
            base.clone(),
            host_without_supervise(),
            ErrorCode::PermissionDenied,
            "manager run attempt needs scope \"supervise\"",
        ),
        (
            admitted_world(),
            with(base.clone(), "processEpoch", json!(2)),
            host(),
            ErrorCode::Conflict,
            "processEpoch is stale",
        ),
        (
            admitted_world(),
            with(
                base.clone(),
                "registrationProof",
                json!(format!("sha256:{}", "b".repeat(64))),
            ),
            host(),
            ErrorCode::PermissionDenied,
            "proof does not match the current registration",
        ),
        (
            admitted_world(),
            with(
                base.clone(),
                "accountPublicKey",
                json!(format!("A{}", "R".repeat(55))),
            ),
            host(),
            ErrorCode::PermissionDenied,
            "host-assigned space and account",
        ),
        (
            ModelWorld::default(),
            base.clone(),
            host(),
            ErrorCode::FailedPrecondition,
            "no open registration gate",
        ),
        (
            manager_world(OWNER, false),
            base.clone(),
            host(),
            ErrorCode::PermissionDenied,
            "no admission record",
        ),
    ];
    for (mut world, request, host, code, needle) in cases {
        refused(attempt(&mut world, &request, host), code, needle);
    }
    // Admitted on another instance: the record names OTHER_IID.
    let mut world = manager_world(OWNER, false);
    let key = cotal_core::names::keys::run_admission(&manager(), &rid('d'));
    let bytes = admitted_world()
        .kv
        .get(Store::Admission, &key)
        .unwrap()
        .value;
    let moved = String::from_utf8(bytes).unwrap().replace(IID, OTHER_IID);
    world.kv.put(Store::Admission, &key, moved.as_bytes());
    refused(
        attempt(&mut world, &base, host()),
        ErrorCode::PermissionDenied,
        "admitted on another manager instance or endpoint",
    );
    let both = with(
        base.clone(),
        "operator",
        json!({"id": nkey('H'), "takeoverId": "x"}),
    );
    refused(
        attempt(&mut world, &both, host()),
        ErrorCode::BadRequest,
        "exactly one of attempt or operator",
    );
    let neither = without(base, "attempt");
    refused(
        attempt(&mut world, &neither, host()),
        ErrorCode::BadRequest,
        "exactly one",
    );
}

/// No string anywhere in `value` is an nkey seed: an answer never carries a secret. (Checked by
/// decoding, not by looking for the letters "seed", which a random key may contain.)
fn assert_no_seed(value: &Value) {
    match value {
        Value::String(s) => assert!(
            nkeys::KeyPair::from_seed(s).is_err(),
            "an answer carries an nkey seed"
        ),
        Value::Array(items) => items.iter().for_each(assert_no_seed),
        Value::Object(members) => {
            for (name, member) in members {
                assert!(!name.to_lowercase().contains("seed"), "member {name:?}");
                assert_no_seed(member);
            }
        }
        _ => {}
    }
}
