//! The run journal's checkpoint reader on the KV model (reference-auth-service §5.5 item 4):
//! the journal fold to one step's pause over golden records in the reference's bytes, the
//! pause's status read off the records store, how the two combine, the refusals (a garbled
//! record is never "no checkpoint"), and the result fed to `pause_token` as the issue step does.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod journal_fixtures;

use cotal_core::driver::{drive, ModelWorld};
use cotal_core::journal::RunId;
use cotal_core::kv::Store;
use cotal_core::machine::Replay;
use cotal_core::names::{EndpointName, SpaceName};
use cotal_core::profiles::CheckpointToken;
use cotal_core::run::{
    checkpoint_status_key, journal_checkpoint_rows, journal_pause, journal_stream, journal_subject,
    pause_token, AnswerId, CheckpointState, JournalCheckpoint, JournalMessage, JournalPause,
    OperatorAnswers, ReadJournalCheckpoint,
};
use cotal_core::{EpError, ErrorCode};
use journal_fixtures::*;

fn run_id() -> RunId {
    RunId::parse(RUN).unwrap()
}

fn manager() -> EndpointName {
    EndpointName::parse("manager").unwrap()
}

fn token(s: &str) -> CheckpointToken {
    CheckpointToken::parse(s).unwrap()
}

fn status_key(t: &str) -> String {
    checkpoint_status_key(&manager(), &token(t))
}

fn answers(step: &str, amend: bool) -> OperatorAnswers {
    OperatorAnswers {
        run_id: run_id(),
        step_key: step.to_owned(),
        amend,
    }
}

/// A world whose records store holds `status` (if any) for `t`.
fn world_with(t: &str, status: Option<&str>) -> ModelWorld {
    let mut world = ModelWorld::default();
    if let Some(status) = status {
        world
            .kv
            .put(Store::Records, &status_key(t), status.as_bytes());
    }
    world
}

/// The reader for `step`; returns its answer and the KV round trips it took.
fn read(
    world: &mut ModelWorld,
    step: &str,
    journal: Vec<JournalMessage>,
) -> (Result<Option<JournalCheckpoint>, EpError>, u64) {
    let before = world.kv.requests_served();
    let script = ReadJournalCheckpoint::for_answers(manager(), &answers(step, false), journal);
    let out = drive(&mut Replay::new(script), world);
    (out, world.kv.requests_served() - before)
}

fn refused<T: std::fmt::Debug>(r: Result<T, EpError>, code: ErrorCode, needle: &str) {
    let e = r.expect_err(needle);
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
}

fn waiting_journal() -> Vec<JournalMessage> {
    messages(&[ACTIVATION, CHECKPOINT_BEGIN, CHECKPOINT_BOUND])
}

fn answered_journal() -> Vec<JournalMessage> {
    messages(&[
        ACTIVATION,
        CHECKPOINT_BEGIN,
        CHECKPOINT_BOUND,
        CHECKPOINT_SETTLED,
    ])
}

// ---- names and grants -----------------------------------------------------------------------

/// The journal lives on `WFJ_<space>`, one subject per run (`endpoint-binding.ts`); the pause's
/// status is the records key `cp.<endpointToken>.<token>.status` (`endpoint-records.ts`); the
/// reading connection needs exactly the two leader-read rows.
#[test]
fn the_journal_status_key_and_grant_rows_are_the_references() {
    let space = SpaceName::parse("s1").unwrap();
    assert_eq!(journal_stream(&space), "WFJ_s1");
    assert_eq!(
        journal_subject(&space, &run_id()),
        format!("cotal.s1.wfj.{RUN}")
    );
    assert_eq!(status_key(TOKEN), format!("cp.manager.{TOKEN}.status"));
    let dotted = EndpointName::parse("com.acme.deploy").unwrap();
    assert_eq!(
        checkpoint_status_key(&dotted, &token(TOKEN)),
        format!("cp.com_acme_deploy.{TOKEN}.status")
    );
    assert_eq!(
        journal_checkpoint_rows(&space),
        [
            "$JS.API.STREAM.MSG.GET.WFJ_s1".to_owned(),
            "$JS.API.STREAM.MSG.GET.KV_cotal_records_s1".to_owned(),
        ]
    );
}

// ---- the journal fold -----------------------------------------------------------------------

/// The step's latest record is where it stands: begin and bind are pending, the settle settles.
#[test]
fn the_latest_record_at_the_step_decides_open_or_settled() {
    let run = run_id();
    assert_eq!(
        journal_pause(&run, STEP, &waiting_journal()).unwrap(),
        Some(JournalPause::Open(token(TOKEN)))
    );
    assert_eq!(
        journal_pause(&run, STEP, &answered_journal()).unwrap(),
        Some(JournalPause::Settled(token(TOKEN)))
    );
    // An escalation re-issues the open entry under its next attempt's id: that is the pause.
    let reissued = CHECKPOINT_BOUND
        .replace(r#""n":2"#, r#""n":3"#)
        .replace(TOKEN, REISSUED)
        .replace(r#""attempt":0"#, r#""attempt":1"#);
    let journal = messages(&[ACTIVATION, CHECKPOINT_BEGIN, CHECKPOINT_BOUND, &reissued]);
    assert_eq!(
        journal_pause(&run, STEP, &journal).unwrap(),
        Some(JournalPause::Open(token(REISSUED)))
    );
}

/// A step is addressed by `<scope>/<kind>[:<name>]#<occurrence>`, the scope as stored.
#[test]
fn the_step_key_is_rebuilt_from_scope_kind_name_and_occurrence() {
    let run = run_id();
    let scoped = CHECKPOINT_BEGIN.replace(r#""scope":"""#, r#""scope":"/parallel:p#0/b:0""#);
    let journal = messages(&[ACTIVATION, &scoped]);
    assert_eq!(journal_pause(&run, STEP, &journal).unwrap(), None);
    assert_eq!(
        journal_pause(&run, "/parallel:p#0/b:0/checkpoint:approve#0", &journal).unwrap(),
        Some(JournalPause::Open(token(TOKEN)))
    );
    let unnamed = CHECKPOINT_BEGIN
        .replace(r#""name":"approve""#, r#""name":"""#)
        .replace(r#""occurrence":0"#, r#""occurrence":2"#);
    let journal = messages(&[ACTIVATION, &unnamed]);
    assert_eq!(
        journal_pause(&run, "/checkpoint#2", &journal).unwrap(),
        Some(JournalPause::Open(token(TOKEN)))
    );
}

/// An ask parks one pause per attempt; the current attempt's token rides `external.askToken`.
#[test]
fn an_ask_reads_at_its_current_attempts_token() {
    let run = run_id();
    let first = messages(&[ACTIVATION, ASK_BEGIN]);
    assert_eq!(
        journal_pause(&run, ASK_STEP, &first).unwrap(),
        Some(JournalPause::Open(token(ASK_TOKEN)))
    );
    let retried = messages(&[ACTIVATION, ASK_BEGIN, ASK_RETRIED]);
    assert_eq!(
        journal_pause(&run, ASK_STEP, &retried).unwrap(),
        Some(JournalPause::Open(token(ASK_RETRY_TOKEN)))
    );
    // Only a string is a token: any other `askToken` leaves the request id.
    let odd = ASK_RETRIED.replace(
        &format!(r#""askToken":"{ASK_RETRY_TOKEN}""#),
        r#""askToken":7"#,
    );
    assert_eq!(
        journal_pause(&run, ASK_STEP, &messages(&[ACTIVATION, ASK_BEGIN, &odd])).unwrap(),
        Some(JournalPause::Open(token(ASK_TOKEN)))
    );
    // The attempt token names nothing once the latest record carries no request id.
    let anonymous = ASK_RETRIED.replace(&format!(r#""requestId":"{ASK_TOKEN}","attempt":0,"#), "");
    refused(
        journal_pause(
            &run,
            ASK_STEP,
            &messages(&[ACTIVATION, ASK_BEGIN, &anonymous]),
        ),
        ErrorCode::FailedPrecondition,
        "carries no request id",
    );
}

/// "absent step → has no open checkpoint": no record under the key is `None`, and so is an
/// empty journal (a run never started); nothing else is.
#[test]
fn an_absent_step_or_an_empty_journal_is_none() {
    let run = run_id();
    assert_eq!(
        journal_pause(&run, "/checkpoint:other#0", &answered_journal()).unwrap(),
        None
    );
    assert_eq!(journal_pause(&run, STEP, &[]).unwrap(), None);
    assert_eq!(
        journal_pause(&run, STEP, &messages(&[ACTIVATION])).unwrap(),
        None
    );
}

/// `CheckpointNotOpen` / `CheckpointNotAmendable`: a step that is no pause, one whose pending
/// record names no request id, and a held step (whose token derivation the plane does not
/// have) are refused `failed-precondition`, never `None`.
#[test]
fn a_step_that_names_no_pause_is_refused() {
    let run = run_id();
    let turn = CHECKPOINT_BEGIN.replace(r#""kind":"checkpoint""#, r#""kind":"turn""#);
    refused(
        journal_pause(&run, "/turn:approve#0", &messages(&[ACTIVATION, &turn])),
        ErrorCode::FailedPrecondition,
        "that step is neither a checkpoint nor an ask",
    );
    let anonymous = CHECKPOINT_BEGIN.replace(&format!(r#""requestId":"{TOKEN}","attempt":0,"#), "");
    refused(
        journal_pause(&run, STEP, &messages(&[ACTIVATION, &anonymous])),
        ErrorCode::FailedPrecondition,
        "carries no request id",
    );
    let held =
        CHECKPOINT_BOUND.replace(r#""external":{"#, r#""hold":{"asks":"Hold?"},"external":{"#);
    let r = journal_pause(
        &run,
        STEP,
        &messages(&[ACTIVATION, CHECKPOINT_BEGIN, &held]),
    );
    refused(r.clone(), ErrorCode::FailedPrecondition, "held");
    let e = r.unwrap_err();
    assert!(e.message.contains("has no open checkpoint"), "{e}");
    assert!(e.message.contains("is not amendable"), "{e}");
    // A held step of any kind is refused the same way (its kind no longer decides).
    let held_turn = held.replace(r#""kind":"checkpoint""#, r#""kind":"turn""#);
    refused(
        journal_pause(
            &run,
            "/turn:approve#0",
            &messages(&[ACTIVATION, CHECKPOINT_BEGIN, &held_turn]),
        ),
        ErrorCode::FailedPrecondition,
        "held",
    );
}

/// A garbled record is a refusal (`internal`), never `None`: wherever it sits (at another
/// step too), whatever is broken: bytes, closed envelopes and entries, another run's record,
/// a broken chain, a beheaded journal.
#[test]
fn a_garbled_journal_is_refused_never_none() {
    let run = run_id();
    let garbles: Vec<(&str, Vec<String>)> = vec![
        (
            "not valid JSON",
            vec![ACTIVATION.into(), "{\"v\":1,".into()],
        ),
        ("not a JSON object", vec![ACTIVATION.into(), "[1]".into()]),
        (
            "unknown field",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.replace(r#""at":"#, r#""x":1,"at":"#),
            ],
        ),
        (
            "its entry carries the unknown field",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.replace(r#""scope":"#, r#""extra":1,"scope":"#),
            ],
        ),
        (
            "does not name this run",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.replacen(RUN, "run-ffffffffffffffffffffffffffffffff", 1),
            ],
        ),
        (
            "its entry does not name this run",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.replace(
                    &format!(r#""seq":0,"run":"{RUN}""#),
                    r#""seq":0,"run":"run-ffffffffffffffffffffffffffffffff""#,
                ),
            ],
        ),
        (
            "where entry 1 was expected",
            vec![ACTIVATION.into(), CHECKPOINT_BOUND.into()],
        ),
        (
            "does not begin with an activation",
            vec![CHECKPOINT_BEGIN.replace(r#""n":1"#, r#""n":0"#)],
        ),
        (
            "does not begin with an activation",
            vec![ACTIVATION.replace(r#""replayedTo":0"#, r#""replayedTo":3"#)],
        ),
        (
            "must carry v: 1",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.replacen(r#""v":1"#, r#""v":2"#, 1),
            ],
        ),
        (
            "neither activation nor step",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.replace(r#""kind":"step""#, r#""kind":"note""#),
            ],
        ),
        (
            "neither pending nor settled",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.replace(r#""state":"pending""#, r#""state":"open""#),
            ],
        ),
        (
            "fencingToken must be at least 1",
            vec![ACTIVATION.replace(r#""fencingToken":1"#, r#""fencingToken":0"#)],
        ),
        (
            "its holder",
            vec![ACTIVATION.replace(".0123456789abcdef\"", " x\"")],
        ),
        (
            "malformed \"external\"",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.into(),
                CHECKPOINT_BOUND.replace(
                    r#""external":{"asks":"Ship it?","deadlineAt":1700003600100}"#,
                    r#""external":"x""#,
                ),
            ],
        ),
        (
            "not a safe unsigned integer",
            vec![
                ACTIVATION.into(),
                CHECKPOINT_BEGIN.replace(r#""n":1"#, r#""n":-1"#),
            ],
        ),
    ];
    for (needle, records) in garbles {
        let records: Vec<&str> = records.iter().map(String::as_str).collect();
        for step in [STEP, "/checkpoint:elsewhere#0"] {
            refused(
                journal_pause(&run, step, &messages(&records)),
                ErrorCode::Internal,
                needle,
            );
        }
    }
    // The token grammar is checked where a token is taken: at the asked step.
    let odd = CHECKPOINT_BEGIN.replace(TOKEN, "not a token");
    refused(
        journal_pause(&run, STEP, &messages(&[ACTIVATION, &odd])),
        ErrorCode::Internal,
        "not a checkpoint token",
    );
}

/// Stored bytes never panic the fold: every truncation and every single-byte substitution of
/// the golden records is an answer (a pause, `None`, or a refusal).
#[test]
fn no_stored_bytes_panic_the_fold() {
    let run = run_id();
    let golden = [
        ACTIVATION,
        CHECKPOINT_BEGIN,
        CHECKPOINT_BOUND,
        CHECKPOINT_SETTLED,
    ];
    for (i, record) in golden.iter().enumerate() {
        let bytes = record.as_bytes();
        let mut variants: Vec<Vec<u8>> = (0..bytes.len()).map(|n| bytes[..n].to_vec()).collect();
        for at in 0..bytes.len() {
            for b in [b'"', b'{', b'}', b'0', b'\\', 0xff, b'-', b':'] {
                let mut v = bytes.to_vec();
                v[at] = b;
                variants.push(v);
            }
        }
        for variant in variants {
            let mut journal = messages(&golden);
            journal[i].data = variant;
            let _ = journal_pause(&run, STEP, &journal);
        }
    }
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut journal = messages(&[ACTIVATION]);
    journal[0].data = deep.into_bytes();
    refused(
        journal_pause(&run, STEP, &journal),
        ErrorCode::Internal,
        "not valid JSON",
    );
}

// ---- the reader: the journal and the pause's status -----------------------------------------

/// remote-run-attempt-route "answer operator for a journal-recorded waiting checkpoint": the
/// open pause with a waiting status reads `Waiting` with the journal's token, in one KV read.
#[test]
fn a_waiting_checkpoint_reads_waiting_with_the_journals_token() {
    let mut world = world_with(TOKEN, Some(STATUS_WAITING));
    let (out, trips) = read(&mut world, STEP, waiting_journal());
    assert_eq!(
        out.unwrap(),
        Some(JournalCheckpoint {
            step_key: STEP.into(),
            token: token(TOKEN),
            state: CheckpointState::Waiting,
        })
    );
    assert_eq!(trips, 1);
}

/// The settled pause its resume accepted an answer for reads `Resumed` naming that answer;
/// an expired one reads `Expired`; a resume that named no answer reads `Resumed` without one.
#[test]
fn an_answered_checkpoint_reads_resumed_with_the_answer_id() {
    let mut world = world_with(TOKEN, Some(STATUS_RESUMED));
    let (out, trips) = read(&mut world, STEP, answered_journal());
    assert_eq!(
        out.unwrap().unwrap().state,
        CheckpointState::Resumed {
            answer_id: Some(AnswerId::parse(ANSWER).unwrap())
        }
    );
    assert_eq!(trips, 1);
    let unnamed = STATUS_RESUMED.replace(&format!(r#","settledAnswerId":"{ANSWER}""#), "");
    let mut world = world_with(TOKEN, Some(&unnamed));
    assert_eq!(
        read(&mut world, STEP, answered_journal())
            .0
            .unwrap()
            .unwrap()
            .state,
        CheckpointState::Resumed { answer_id: None }
    );
    let mut world = world_with(TOKEN, Some(STATUS_EXPIRED));
    assert_eq!(
        read(&mut world, STEP, answered_journal())
            .0
            .unwrap()
            .unwrap()
            .state,
        CheckpointState::Expired
    );
}

/// An absent step reads `None` without touching the store.
#[test]
fn an_absent_step_reads_none_without_a_store_read() {
    let mut world = world_with(TOKEN, Some(STATUS_WAITING));
    let (out, trips) = read(&mut world, "/checkpoint:other#0", waiting_journal());
    assert_eq!(out.unwrap(), None);
    assert_eq!(trips, 0);
    let (out, trips) = read(&mut world, STEP, Vec::new());
    assert_eq!(out.unwrap(), None);
    assert_eq!(trips, 0);
}

/// The journal and the status disagree (the status is the arbiter, the journal lags it, or a
/// step settled without its pause): the reference refuses each for an answer and an amendment
/// alike, and so does the reader, `failed-precondition` naming both refusals.
#[test]
fn a_journal_and_status_that_disagree_are_refused() {
    let cases: [(Vec<JournalMessage>, Option<&str>, &str); 5] = [
        (waiting_journal(), None, "not yet the status"),
        (
            waiting_journal(),
            Some(STATUS_RESUMED),
            "already settled (resumed)",
        ),
        (
            waiting_journal(),
            Some(STATUS_EXPIRED),
            "already settled (expired)",
        ),
        (answered_journal(), Some(STATUS_WAITING), "is still waiting"),
        (answered_journal(), None, "has no status"),
    ];
    for (journal, status, needle) in cases {
        let mut world = world_with(TOKEN, status);
        let (out, trips) = read(&mut world, STEP, journal);
        refused(out.clone(), ErrorCode::FailedPrecondition, needle);
        let e = out.unwrap_err();
        assert!(e.message.contains("has no open checkpoint"), "{e}");
        assert!(e.message.contains("is not amendable"), "{e}");
        assert_eq!(trips, 1);
    }
}

/// A deletion marker on the status never reads as absence; a garbled status is `internal`,
/// closed and per-variant as the reference's `parseCpStatus`.
#[test]
fn a_deleted_or_garbled_status_is_refused() {
    let mut world = world_with(TOKEN, Some(STATUS_WAITING));
    world.kv.delete_unpinned(Store::Records, &status_key(TOKEN));
    refused(
        read(&mut world, STEP, waiting_journal()).0,
        ErrorCode::FailedPrecondition,
        "carries a DEL marker",
    );
    let garbles = [
        ("not valid JSON", "{".to_owned()),
        (
            "unknown field",
            STATUS_WAITING.replace(r#""state""#, r#""x":1,"state""#),
        ),
        (
            "is not waiting, resumed or expired",
            STATUS_WAITING.replace("waiting", "paused"),
        ),
        (
            "at least 1",
            STATUS_WAITING.replace(r#""deadlineGeneration":1"#, r#""deadlineGeneration":0"#),
        ),
        (
            "waiting but carries settlement",
            STATUS_WAITING.replace(
                r#""observedSpecRevision":7"#,
                r#""observedSpecRevision":7,"settledTs":1"#,
            ),
        ),
        (
            "another generation",
            STATUS_RESUMED.replace(r#""settledGeneration":1"#, r#""settledGeneration":2"#),
        ),
        (
            "without a closed {id, lifecycleUid} settledHolder",
            STATUS_RESUMED.replace(r#","lifecycleUid":"lllllllllllllllllllllllllll""#, ""),
        ),
        (
            "not an id token",
            STATUS_RESUMED.replace(ANSWER, "not an id"),
        ),
        (
            "an expiry accepts none",
            STATUS_EXPIRED.replace(
                r#""settledTs""#,
                &format!(r#""settledAnswerId":"{ANSWER}","settledTs""#),
            ),
        ),
        (
            "\"settledTs\"",
            STATUS_EXPIRED.replace(r#","settledTs":1700003600200"#, ""),
        ),
    ];
    // The status parses before it is paired with the journal, so any pause at the step will do.
    for (needle, status) in garbles {
        let mut world = world_with(TOKEN, Some(&status));
        refused(
            read(&mut world, STEP, waiting_journal()).0,
            ErrorCode::Internal,
            needle,
        );
    }
}

// ---- the issue step's decision --------------------------------------------------------------

/// What the reader returns is what `pause_token` decides on (the issue step's first check): an
/// answer takes the waiting pause's token, an amendment the answered one's; each refuses the
/// other's pause, and an expired pause is amendable by nobody.
#[test]
fn the_reader_feeds_the_issue_steps_pause_token() {
    let decide = |journal: Vec<JournalMessage>, status: &str, amend: bool| {
        let mut world = world_with(TOKEN, Some(status));
        let view = read(&mut world, STEP, journal).0;
        pause_token(&view, &answers(STEP, amend))
    };
    assert_eq!(
        decide(waiting_journal(), STATUS_WAITING, false).unwrap(),
        token(TOKEN)
    );
    assert_eq!(
        decide(answered_journal(), STATUS_RESUMED, true).unwrap(),
        token(TOKEN)
    );
    refused(
        decide(answered_journal(), STATUS_RESUMED, false),
        ErrorCode::FailedPrecondition,
        "has no open checkpoint",
    );
    refused(
        decide(waiting_journal(), STATUS_WAITING, true),
        ErrorCode::FailedPrecondition,
        "is not amendable",
    );
    refused(
        decide(answered_journal(), STATUS_EXPIRED, true),
        ErrorCode::FailedPrecondition,
        "an expiry accepts no answer",
    );
    refused(
        decide(answered_journal(), STATUS_EXPIRED, false),
        ErrorCode::FailedPrecondition,
        "has no open checkpoint",
    );
    // A garbled journal stays a refusal through the decision, never "no open checkpoint".
    let mut garbled = waiting_journal();
    garbled[1].data = b"{".to_vec();
    let mut world = world_with(TOKEN, Some(STATUS_WAITING));
    let view = read(&mut world, STEP, garbled).0;
    refused(
        pause_token(&view, &answers(STEP, false)),
        ErrorCode::Internal,
        "not valid JSON",
    );
}
