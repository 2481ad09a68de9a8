//! Served run requests on the KV model (reference-auth-service §5.5 items 3–4, §5.6, SPEC 14.8):
//! a forwarded run-resume attempt and an answering run operator, split into
//! `AuthorizeRunAttempt` → the adapter takes the observation, resolves the caller's evidence and
//! reads the journal checkpoint → `IssueRunAttempt`. Ports the `remote-run-attempt-route` cells
//! "answer operator for a journal-recorded waiting checkpoint with an observed served subject →
//! 200" and "absent step → 403 'has no open checkpoint'" (§11.5).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod run_fixtures;

use cotal_core::driver::ModelWorld;
use cotal_core::profiles::CheckpointToken;
use cotal_core::run::{
    parse_run_attempt_request, AnswerId, AttemptDecision, AttemptGrant, AuthorizeRunAttempt,
    AuthorizedAttempt, CheckpointState, IssuedEvidence, JournalCheckpoint, ObservedRunRequest,
    ObservedRunRequests, RunAttempt, RunRequestOperation, RunState, ServedInputs,
    EP_UNBOUND_CALLER_AUTHORITY,
};
use cotal_core::{EpError, ErrorCode};
use run_fixtures::*;
use serde_json::{json, Value};

const NOW: u64 = 1_700_000_000_000;
const STEP: &str = "approve-deploy";
const TOKEN: &str = "cp_journal_token_0001";

fn refused<T: std::fmt::Debug>(r: Result<T, EpError>, code: ErrorCode, needle: &str) -> EpError {
    let e = r.expect_err(needle);
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
    e
}

/// Both phases as the adapter runs them: phase one, then (only then) the observation of the
/// served subject is taken from `seen`, and phase two decides.
fn drive_served(
    world: &mut ModelWorld,
    request: &Value,
    seen: &mut ObservedRunRequests,
    evidence: Result<IssuedEvidence, EpError>,
    checkpoint: Option<Result<Option<JournalCheckpoint>, EpError>>,
) -> Result<AttemptDecision, EpError> {
    let authorized = run_script(
        world,
        AuthorizeRunAttempt {
            request: parse_run_attempt_request(request)?,
            host: host().host,
            holder: host().holder,
            endpoint: manager(),
        },
    )?;
    let issue = match authorized {
        AuthorizedAttempt::Plain(plain) => plain.issue(),
        AuthorizedAttempt::Served(served) => {
            let inputs = ServedInputs {
                observed: seen.take(served.call().served(), NOW),
                evidence,
            };
            served.issue(inputs)
        }
        AuthorizedAttempt::Answering(answering) => {
            let inputs = ServedInputs {
                observed: seen.take(answering.call().served(), NOW),
                evidence,
            };
            answering.issue(
                inputs,
                checkpoint.expect("an answer is decided with its checkpoint"),
            )
        }
    };
    run_script(world, issue)
}

fn resume_subject() -> String {
    served_subject("run-resume", "", OWNER, GEN)
}

fn resume_request(subject: &str) -> Value {
    let mut r = attempt_request('d', 1, 1);
    r["attempt"]["served"] = json!(subject);
    r
}

fn seen_with(subject: &str, observed: ObservedRunRequest) -> ObservedRunRequests {
    let mut seen = ObservedRunRequests::new();
    seen.record(subject, observed, NOW - 1);
    seen
}

/// A served resume of run `d` with `observed` recorded on the standard subject.
fn resume_with(
    world: &mut ModelWorld,
    observed: ObservedRunRequest,
    evidence: Result<IssuedEvidence, EpError>,
) -> Result<AttemptDecision, EpError> {
    let subject = resume_subject();
    let mut seen = seen_with(&subject, observed);
    drive_served(world, &resume_request(&subject), &mut seen, evidence, None)
}

// ---- served run-resume attempt ----------------------------------------------------------------

/// F88 / SPEC 14.8: a served run-resume of an admitted run, observed by the host on exactly that
/// subject, from the run owner's issued caller whose ceiling permits it, gets the next attempt's
/// driver and mediator. Round trips: gate, admission, revocation marker, spec, 2 artifact reads
/// (one closure), status = 7. The observation is consumed.
#[test]
fn f88_a_served_resume_with_a_matching_observation_gets_the_next_attempt() {
    let mut world = served_world();
    put_status(
        &mut world,
        &rid('d'),
        &status(RunState::Released, 1, 1),
        None,
    )
    .unwrap();
    let subject = resume_subject();
    let mut seen = seen_with(&subject, observed_resume('d'));
    let mut request = resume_request(&subject);
    request["attempt"]["epoch"] = json!(2);
    request["attempt"]["fencingToken"] = json!(2);
    let before = world.kv.requests_served();
    let decision = drive_served(
        &mut world,
        &request,
        &mut seen,
        Ok(served_evidence(OWNER, GEN)),
        None,
    )
    .unwrap();
    assert_eq!(world.kv.requests_served() - before, 7);
    let AttemptGrant::Pair { driver, mediator } = decision.grant else {
        panic!("a pair")
    };
    assert_eq!((driver.name, mediator.name), ("run-driver", "run-mediator"));
    assert!(seen.is_empty(), "the observation was consumed");
}

/// SPEC 14.8: each observation is consumed once; a second forward of the same request, or a
/// forward the host never observed, is refused and nothing is issued.
#[test]
fn f88_a_served_observation_admits_one_forward_and_none_without_it() {
    let mut world = served_world();
    let subject = resume_subject();
    let mut seen = seen_with(&subject, observed_resume('d'));
    let request = resume_request(&subject);
    let evidence = Ok(served_evidence(OWNER, GEN));
    drive_served(&mut world, &request, &mut seen, evidence.clone(), None).unwrap();
    refused(
        drive_served(&mut world, &request, &mut seen, evidence.clone(), None),
        ErrorCode::PermissionDenied,
        "did not observe this run-resume request, or already accepted a forward of it",
    );
    let mut nothing = ObservedRunRequests::new();
    refused(
        drive_served(&mut world, &request, &mut nothing, evidence, None),
        ErrorCode::PermissionDenied,
        "did not observe this run-resume request",
    );
}

/// §5.6: the forwarded operation must be the observed one — another run, or an answer observed
/// on the subject, is refused.
#[test]
fn the_forward_must_name_the_observed_operation() {
    for observed in [
        observed_resume('e'),
        ObservedRunRequest {
            operation: RunRequestOperation::Start,
            envelope: served_envelope("run-resume", None),
        },
        ObservedRunRequest {
            envelope: served_envelope("run-resume", None),
            ..observed_answer('d', STEP, false)
        },
    ] {
        let mut world = served_world();
        refused(
            resume_with(&mut world, observed, Ok(served_evidence(OWNER, GEN))),
            ErrorCode::PermissionDenied,
            "names another run, step, endpoint or amendment than the request the issuing host observed",
        );
    }
}

/// F44 via §5.6: an observed `bind` must name this instance at the gate's process epoch; the
/// bound incarnation itself is accepted.
#[test]
fn f44_an_observed_bind_must_name_this_instance_and_process_epoch() {
    for bind in [(OTHER_IID, EPOCH), (IID, EPOCH - 1), (IID, EPOCH + 1)] {
        let mut world = served_world();
        let observed = ObservedRunRequest {
            envelope: served_envelope("run-resume", Some(bind)),
            ..observed_resume('d')
        };
        refused(
            resume_with(&mut world, observed, Ok(served_evidence(OWNER, GEN))),
            ErrorCode::PermissionDenied,
            "bound to another manager instance or epoch than the registered one",
        );
    }
    let mut world = served_world();
    let observed = ObservedRunRequest {
        envelope: served_envelope("run-resume", Some((IID, EPOCH))),
        ..observed_resume('d')
    };
    resume_with(&mut world, observed, Ok(served_evidence(OWNER, GEN))).unwrap();
}

/// SPEC 13.7 via §5.6: the observed class and pinned digests must be what the registered
/// manager cluster declares for run-resume at the gate's registration revision.
#[test]
fn the_observed_class_and_contract_must_be_the_registered_ones() {
    let answer_env = served_envelope("run-answer", None);
    let mut journal = served_envelope("run-resume", None);
    journal["class"] = json!("journal");
    let mut output = served_envelope("run-resume", None);
    output["op"]["outputDigest"] = answer_env["op"]["outputDigest"].clone();
    let mut garbled = served_envelope("run-resume", None);
    garbled["op"]["inputDigest"] = json!("not a digest");
    for envelope in [answer_env, journal, output, garbled, json!({})] {
        let mut world = served_world();
        let observed = ObservedRunRequest {
            envelope,
            ..observed_resume('d')
        };
        refused(
            resume_with(&mut world, observed, Ok(served_evidence(OWNER, GEN))),
            ErrorCode::PermissionDenied,
            "declares another class or pins another contract than the registered manager serves",
        );
    }
}

/// The declaration is read at the gate's registration revision: a spec rewritten since (or
/// never written) is not the registration the gate fences; a spec of another owner refuses.
#[test]
fn the_registered_declaration_is_read_at_the_gates_registration_revision() {
    let mut moved = manager_world(OWNER, false);
    admit_standard(&mut moved, 'd');
    register_manager_spec(&mut moved, OWNER, REG + 1);
    refused(
        resume_with(
            &mut moved,
            observed_resume('d'),
            Ok(served_evidence(OWNER, GEN)),
        ),
        ErrorCode::FailedPrecondition,
        "no longer holds svc.manager.",
    );
    let mut foreign = manager_world(OWNER, false);
    admit_standard(&mut foreign, 'd');
    register_manager_spec(&mut foreign, OTHER_OWNER, REG);
    refused(
        resume_with(
            &mut foreign,
            observed_resume('d'),
            Ok(served_evidence(OWNER, GEN)),
        ),
        ErrorCode::PermissionDenied,
        "the registered manager spec belongs to",
    );
}

/// §5.6: a derived `u_` caller resumes only a run admitted for that user; a platform caller is
/// not bound to the run owner.
#[test]
fn a_user_resumes_only_its_own_run() {
    let mut world = served_world();
    let subject = served_subject("run-resume", "", OTHER_OWNER, GEN);
    let mut seen = seen_with(&subject, observed_resume('d'));
    refused(
        drive_served(
            &mut world,
            &resume_request(&subject),
            &mut seen,
            Ok(served_evidence(OTHER_OWNER, GEN)),
            None,
        ),
        ErrorCode::PermissionDenied,
        "a user resumes only a run admitted for that user",
    );
    let platform = format!("p_{}", "e".repeat(26));
    let subject = served_subject("run-resume", "", &platform, GEN);
    let mut seen = seen_with(&subject, observed_resume('d'));
    drive_served(
        &mut world,
        &resume_request(&subject),
        &mut seen,
        Ok(served_evidence(&platform, GEN)),
        None,
    )
    .unwrap();
}

/// §5.6: the issued store's refusals (forged, revoked, dead source) pass through; evidence of
/// another reference and a ceiling that does not permit the subject are refused.
#[test]
fn the_callers_issued_evidence_must_be_live_and_permit_the_subject() {
    for why in [
        "no issued evidence for this generation",
        "the issuance was revoked",
        "the issuance's source is no longer live",
    ] {
        let mut world = served_world();
        refused(
            resume_with(
                &mut world,
                observed_resume('d'),
                Err(EpError::permission_denied(why)),
            ),
            ErrorCode::PermissionDenied,
            why,
        );
    }
    let mut world = served_world();
    refused(
        resume_with(
            &mut world,
            observed_resume('d'),
            Ok(served_evidence(OWNER, OTHER_GEN)),
        ),
        ErrorCode::PermissionDenied,
        "evidence names another issued reference",
    );
    // The fixture's run-start-only ceiling does not reach run-resume; a deny wins too.
    refused(
        resume_with(&mut world, observed_resume('d'), Ok(evidence(OWNER, GEN))),
        ErrorCode::PermissionDenied,
        "does not permit this run-resume subject",
    );
    let mut denied = served_evidence(OWNER, GEN);
    denied.permissions.publish.deny = vec!["cotal.s1.ep.v1.one.manager.run-resume.>".into()];
    refused(
        resume_with(&mut world, observed_resume('d'), Ok(denied)),
        ErrorCode::PermissionDenied,
        "does not permit",
    );
}

/// §5.6: a legacy-rail caller has no issued authority to bind; the reference's managed-seat
/// fallback is not accepted here, so it is refused with the unbound-caller detail.
#[test]
fn a_legacy_rail_caller_is_unbound_caller_authority() {
    let mut world = served_world();
    let subject =
        format!("cotal.s1.ep.one.manager.run-resume.{OWNER}.{CALLER_ACTOR}.{CALLER_UID}.{NONCE}");
    let mut seen = seen_with(&subject, observed_resume('d'));
    let e = refused(
        drive_served(
            &mut world,
            &resume_request(&subject),
            &mut seen,
            Ok(served_evidence(OWNER, GEN)),
            None,
        ),
        ErrorCode::PermissionDenied,
        "rides the versioned rail with an issued caller",
    );
    assert_eq!(
        e.details,
        vec![json!({
            "kind": EP_UNBOUND_CALLER_AUTHORITY,
            "owner": OWNER, "actor": CALLER_ACTOR, "uid": CALLER_UID,
        })]
    );
}

/// §5.6 first clause: a targeted subject (other than `self`), another space, command or
/// instance is refused before the observation is taken — it stays takeable.
#[test]
fn a_served_resume_must_name_this_space_endpoint_instance_and_command_untargeted() {
    let good = resume_subject();
    let bad = [
        served_subject("run-resume", &format!(".owner.{OWNER}"), OWNER, GEN),
        good.replace("cotal.s1.", "cotal.s2."),
        good.replace(".run-resume.", ".run-answer."),
        good.replace(".manager.", ".delivery."),
        good.replace(
            ".v1.one.manager.",
            &format!(".v1.inst.manager.{OTHER_IID}."),
        ),
        "not a subject".to_owned(),
    ];
    for subject in bad {
        let mut world = served_world();
        let mut seen = seen_with(&subject, observed_resume('d'));
        refused(
            drive_served(
                &mut world,
                &resume_request(&subject),
                &mut seen,
                Ok(served_evidence(OWNER, GEN)),
                None,
            ),
            ErrorCode::PermissionDenied,
            "a served run-resume must name this space, endpoint and instance, untargeted or self-targeted",
        );
        assert_eq!(seen.len(), 1, "{subject}: not consumed");
    }
    // This instance's own instance-routed form, and the self target, pass.
    for subject in [
        good.replace(".v1.one.manager.", &format!(".v1.inst.manager.{IID}.")),
        served_subject("run-resume", ".self", OWNER, GEN),
    ] {
        let mut world = served_world();
        let mut seen = seen_with(&subject, observed_resume('d'));
        drive_served(
            &mut world,
            &resume_request(&subject),
            &mut seen,
            Ok(served_evidence(OWNER, GEN)),
            None,
        )
        .unwrap();
    }
}

/// F84 still holds for a served resume: the next epoch/fencing token exactly.
#[test]
fn f84_a_served_resume_still_carries_the_next_epoch_and_fencing_token() {
    let mut world = served_world();
    put_status(
        &mut world,
        &rid('d'),
        &status(RunState::Running, 1, 1),
        None,
    )
    .unwrap();
    refused(
        resume_with(
            &mut world,
            observed_resume('d'),
            Ok(served_evidence(OWNER, GEN)),
        ),
        ErrorCode::Conflict,
        "attempt must be the next recorded epoch/fencing token",
    );
}

/// The one-shot door keeps refusing served requests (it cannot take an observation).
#[test]
fn the_one_shot_door_refuses_served_requests() {
    let mut world = served_world();
    let request = parse_run_attempt_request(&resume_request(&resume_subject())).unwrap();
    refused(
        run_script(
            &mut world,
            RunAttempt {
                request,
                host: host().host,
                holder: host().holder,
                endpoint: manager(),
            },
        ),
        ErrorCode::Unimplemented,
        "AuthorizeRunAttempt / IssueRunAttempt",
    );
}

// ---- answering run operator -------------------------------------------------------------------

fn answer_subject() -> String {
    served_subject("run-answer", ".self", OWNER, GEN)
}

fn answer_request(amend: bool, served: Option<&str>) -> Value {
    let mut answers = json!({"runId": run_id('d'), "stepKey": STEP});
    if amend {
        answers["amend"] = json!(true);
    }
    let mut op = json!({"id": nkey('H'), "takeoverId": "cccccccccccccccc", "answers": answers});
    if let Some(s) = served {
        op["served"] = json!(s);
    }
    with(registered("manager-run-attempt"), "operator", op)
}

fn checkpoint(state: CheckpointState) -> Option<Result<Option<JournalCheckpoint>, EpError>> {
    Some(Ok(Some(JournalCheckpoint {
        step_key: STEP.into(),
        token: CheckpointToken::parse(TOKEN).unwrap(),
        state,
    })))
}

fn settled() -> CheckpointState {
    CheckpointState::Resumed {
        answer_id: Some(AnswerId::parse("ans_01").unwrap()),
    }
}

fn answer(
    world: &mut ModelWorld,
    amend: bool,
    view: Option<Result<Option<JournalCheckpoint>, EpError>>,
) -> Result<AttemptDecision, EpError> {
    let subject = answer_subject();
    let mut seen = seen_with(&subject, observed_answer('d', STEP, amend));
    drive_served(
        world,
        &answer_request(amend, Some(&subject)),
        &mut seen,
        Ok(served_evidence(OWNER, GEN)),
        view,
    )
}

fn operator_rows(decision: AttemptDecision) -> Vec<String> {
    let AttemptGrant::Operator(profile) = decision.grant else {
        panic!("an operator")
    };
    assert_eq!((profile.name, profile.ttl_seconds), ("run-operator", 60));
    profile.permissions.publish.allow
}

/// remote-run-attempt-route: "answer operator for a journal-recorded waiting checkpoint with an
/// observed served subject → 200". The grant is scoped to the journal's token (never the
/// request's). Round trips: gate, admission, revocation marker, spec, 2 artifact reads = 6.
#[test]
fn an_answer_operator_for_a_waiting_checkpoint_is_granted_with_the_journals_token() {
    let mut world = served_world();
    let before = world.kv.requests_served();
    let rows =
        operator_rows(answer(&mut world, false, checkpoint(CheckpointState::Waiting)).unwrap());
    assert_eq!(world.kv.requests_served() - before, 6);
    assert!(
        rows.contains(&format!("$KV.cotal_records_s1.cp.manager.{TOKEN}.>")),
        "{rows:?}"
    );
    assert!(
        rows.contains(&format!("cotal.s1.epf.manager.cp.{TOKEN}")),
        "{rows:?}"
    );
}

/// remote-run-attempt-route: "absent step → 403 'has no open checkpoint'"; a settled step has
/// none open either.
#[test]
fn an_answer_for_an_absent_or_settled_step_has_no_open_checkpoint() {
    for view in [Some(Ok(None)), checkpoint(settled())] {
        let mut world = served_world();
        refused(
            answer(&mut world, false, view),
            ErrorCode::FailedPrecondition,
            "has no open checkpoint",
        );
    }
}

/// §5.5 item 4: an amendment settles only a checkpoint resumed with an accepted answer.
#[test]
fn an_amendment_needs_a_settled_answered_checkpoint() {
    let mut world = served_world();
    let rows = operator_rows(answer(&mut world, true, checkpoint(settled())).unwrap());
    assert!(rows.contains(&format!("$KV.cotal_records_s1.answer.manager.{TOKEN}.>")));
    for view in [
        checkpoint(CheckpointState::Waiting),
        checkpoint(CheckpointState::Resumed { answer_id: None }),
        Some(Ok(None)),
    ] {
        let mut world = served_world();
        refused(
            answer(&mut world, true, view),
            ErrorCode::FailedPrecondition,
            "is not amendable",
        );
    }
}

/// §5.5 item 4: `served` is mandatory for an answer; a journal read failure passes through; an
/// answer observed for another step or without the amend flag is not this forward.
#[test]
fn an_answer_needs_its_served_subject_journal_and_matching_observation() {
    let mut world = served_world();
    let mut seen = ObservedRunRequests::new();
    refused(
        drive_served(
            &mut world,
            &answer_request(false, None),
            &mut seen,
            Ok(served_evidence(OWNER, GEN)),
            checkpoint(CheckpointState::Waiting),
        ),
        ErrorCode::PermissionDenied,
        "an answering run operator carries the served run-answer subject",
    );
    refused(
        answer(
            &mut world,
            false,
            Some(Err(EpError::unavailable(
                "the run journal could not be read",
            ))),
        ),
        ErrorCode::Unavailable,
        "the run journal could not be read",
    );
    for observed in [
        observed_answer('d', "another-step", false),
        observed_answer('d', STEP, true),
        observed_answer('e', STEP, false),
    ] {
        let subject = answer_subject();
        let mut seen = seen_with(&subject, observed);
        refused(
            drive_served(
                &mut world,
                &answer_request(false, Some(&subject)),
                &mut seen,
                Ok(served_evidence(OWNER, GEN)),
                checkpoint(CheckpointState::Waiting),
            ),
            ErrorCode::PermissionDenied,
            "names another run, step, endpoint or amendment",
        );
    }
}

/// §5.5 item 4: an answer's run owner is the manager's registered owner.
#[test]
fn a_user_answers_only_on_its_own_participant_manager() {
    let mut world = served_world();
    let subject = served_subject("run-answer", ".self", OTHER_OWNER, GEN);
    let mut seen = seen_with(&subject, observed_answer('d', STEP, false));
    refused(
        drive_served(
            &mut world,
            &answer_request(false, Some(&subject)),
            &mut seen,
            Ok(served_evidence(OTHER_OWNER, GEN)),
            checkpoint(CheckpointState::Waiting),
        ),
        ErrorCode::PermissionDenied,
        "answers only on the participant manager that user registered",
    );
}

/// Phase one says what phase two needs, as a type: a served resume authorizes as
/// [`AuthorizedAttempt::Served`] (observation and evidence), an answering operator as
/// [`AuthorizedAttempt::Answering`] (also the checkpoint), a plain attempt as
/// [`AuthorizedAttempt::Plain`] (nothing). Inputs that do not match cannot be handed over.
#[test]
fn phase_two_takes_exactly_the_inputs_phase_one_asked_for() {
    let mut world = served_world();
    let authorize = |world: &mut ModelWorld, request: &Value| {
        run_script(
            world,
            AuthorizeRunAttempt {
                request: parse_run_attempt_request(request).unwrap(),
                host: host().host,
                holder: host().holder,
                endpoint: manager(),
            },
        )
        .unwrap()
    };
    let resume = authorize(&mut world, &resume_request(&resume_subject()));
    let AuthorizedAttempt::Served(served) = resume else {
        panic!("a served resume needs its observation and evidence: {resume:?}")
    };
    assert_eq!(served.call().served(), resume_subject());
    let subject = answer_subject();
    let answering = authorize(&mut world, &answer_request(false, Some(&subject)));
    let AuthorizedAttempt::Answering(answering) = answering else {
        panic!("an answer needs its checkpoint too: {answering:?}")
    };
    assert_eq!(answering.answers().step_key, STEP);
    let plain = authorize(&mut world, &attempt_request('d', 1, 1));
    assert!(matches!(plain, AuthorizedAttempt::Plain(_)), "{plain:?}");
}
