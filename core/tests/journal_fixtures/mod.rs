//! Golden run-journal and checkpoint-status records, byte for byte as the reference writes them
//! (`JSON.stringify` of its object literals, in their key order), shared by the model tests
//! (`core/tests/run_checkpoint_read.rs`) and the real-server test
//! (`tests/tests/nats_journal_checkpoint.rs`).
//!
//! The run is driven the way the reference drives one: the activation the first takeover
//! appends (`run-journal.ts` `activateRun`: `{v, kind, run, n, holder, fencingToken, epoch,
//! replayedTo, at}`), then the language's step entries each wrapped as `{v, kind: "step", run,
//! n, at, entry}`: the checkpoint's `begin` (`{v, seq, run, scope, kind, name, occurrence,
//! inputHash, requestId, attempt, state: "pending", startedAt}`), its `bind` (the same entry,
//! `external` appended) and its `settle` (`state` flips in place; `status`, `endedAt`, `result`
//! appended). The request ids are the language's `requestId`: base64url SHA-256 over the
//! RFC 8785 form of `[runId, stepKey, inputHash, attempt]`; the input hashes are `digest` of the
//! step's input. The `external` and `result` contents are illustrative: the plane reads only
//! `external.askToken`.
//!
//! Status rows follow `endpoint-checkpoint.ts`: the mint's `waiting` row `{state,
//! deadlineGeneration, deadline, observedSpecRevision}` and the settlement's row, which adds
//! `settledGeneration`, `settledHolder` (resumed only), `settledTs` and, last (its place in the
//! newest writer is not stored), `settledAnswerId`.
#![allow(dead_code)]

use cotal_core::run::JournalMessage;

pub const RUN: &str = "run-0123456789abcdef0123456789abcdef";
/// A root-level checkpoint named `approve`, its first occurrence.
pub const STEP: &str = "/checkpoint:approve#0";
/// `requestId(RUN, STEP, CHECKPOINT_INPUT_HASH, 0)`.
pub const TOKEN: &str = "f5RGxj8ECvfh4OjpoO31TFhSiRCQoXV5E3R4SCxBilA";
/// The same step's attempt-1 request id (an escalation's `reissueAs`).
pub const REISSUED: &str = "9MSHOVjt2jclFrxxXOIT8u1qr7V08E0Uq68SVtSvtns";
/// A content-derived answer id (43 id-token characters, as `checkpointAnswerId` mints).
pub const ANSWER: &str = "uPApbEJ-HKoQ_QNxBONRbRV3qEd2ul7_TZEx_zVne80";
/// An `ask` named `reviewer`, first occurrence.
pub const ASK_STEP: &str = "/ask:reviewer#0";
/// `requestId(RUN, ASK_STEP, ASK_INPUT_HASH, 0)`: the ask's attempt 1 is the request id itself.
pub const ASK_TOKEN: &str = "FvEsS_ojOWnEiP63iFAKaCkaaFcUEMCXGTdHoEIZhus";
/// The ask's second attempt token, riding its pending entry as `external.askToken`.
pub const ASK_RETRY_TOKEN: &str = "mKk3e1wPPJXadO8x6Wr572UDSREKqDgjfPEDYNVkp-I";

/// Record 0: the first takeover's activation, replaying nothing.
pub const ACTIVATION: &str = concat!(
    r#"{"v":1,"kind":"activation","run":"run-0123456789abcdef0123456789abcdef","n":0,"#,
    r#""holder":"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4.0123456789abcdef","#,
    r#""fencingToken":1,"epoch":1,"replayedTo":0,"at":1700000000000}"#
);

/// Record 1: the checkpoint's `begin`, pending under its request id.
pub const CHECKPOINT_BEGIN: &str = concat!(
    r#"{"v":1,"kind":"step","run":"run-0123456789abcdef0123456789abcdef","n":1,"at":1700000000100,"#,
    r#""entry":{"v":1,"seq":0,"run":"run-0123456789abcdef0123456789abcdef","scope":"","#,
    r#""kind":"checkpoint","name":"approve","occurrence":0,"#,
    r#""inputHash":"sha256:281c77cf1c8a2d61fe809c034eec025f516f3b1943e9bc0d5d8b33c18fd211c8","#,
    r#""requestId":"f5RGxj8ECvfh4OjpoO31TFhSiRCQoXV5E3R4SCxBilA","attempt":0,"#,
    r#""state":"pending","startedAt":1700000000100}}"#
);

/// Record 2: the checkpoint's `bind`: still pending, now naming what it asks.
pub const CHECKPOINT_BOUND: &str = concat!(
    r#"{"v":1,"kind":"step","run":"run-0123456789abcdef0123456789abcdef","n":2,"at":1700000000110,"#,
    r#""entry":{"v":1,"seq":0,"run":"run-0123456789abcdef0123456789abcdef","scope":"","#,
    r#""kind":"checkpoint","name":"approve","occurrence":0,"#,
    r#""inputHash":"sha256:281c77cf1c8a2d61fe809c034eec025f516f3b1943e9bc0d5d8b33c18fd211c8","#,
    r#""requestId":"f5RGxj8ECvfh4OjpoO31TFhSiRCQoXV5E3R4SCxBilA","attempt":0,"#,
    r#""state":"pending","startedAt":1700000000100,"#,
    r#""external":{"asks":"Ship it?","deadlineAt":1700003600100}}}"#
);

/// Record 3: the checkpoint's `settle` after its answer was accepted.
pub const CHECKPOINT_SETTLED: &str = concat!(
    r#"{"v":1,"kind":"step","run":"run-0123456789abcdef0123456789abcdef","n":3,"at":1700000000900,"#,
    r#""entry":{"v":1,"seq":0,"run":"run-0123456789abcdef0123456789abcdef","scope":"","#,
    r#""kind":"checkpoint","name":"approve","occurrence":0,"#,
    r#""inputHash":"sha256:281c77cf1c8a2d61fe809c034eec025f516f3b1943e9bc0d5d8b33c18fd211c8","#,
    r#""requestId":"f5RGxj8ECvfh4OjpoO31TFhSiRCQoXV5E3R4SCxBilA","attempt":0,"#,
    r#""state":"settled","startedAt":1700000000100,"#,
    r#""external":{"asks":"Ship it?","deadlineAt":1700003600100},"status":"ok","endedAt":1700000000900,"#,
    r#""result":{"outcome":"resolved","answerId":"uPApbEJ-HKoQ_QNxBONRbRV3qEd2ul7_TZEx_zVne80","#,
    r#""value":{"ship":true},"by":"david","at":1700000000850}}}"#
);

/// Record 1 of an ask run: the ask's `begin`.
pub const ASK_BEGIN: &str = concat!(
    r#"{"v":1,"kind":"step","run":"run-0123456789abcdef0123456789abcdef","n":1,"at":1700000000100,"#,
    r#""entry":{"v":1,"seq":0,"run":"run-0123456789abcdef0123456789abcdef","scope":"","#,
    r#""kind":"ask","name":"reviewer","occurrence":0,"#,
    r#""inputHash":"sha256:a3485502c9b1612b64f3a834410ea166c6f0f4fcf2502da528bf53d7c63b07b0","#,
    r#""requestId":"FvEsS_ojOWnEiP63iFAKaCkaaFcUEMCXGTdHoEIZhus","attempt":0,"#,
    r#""state":"pending","startedAt":1700000000100}}"#
);

/// Record 2 of an ask run: its second attempt, the token riding `external.askToken`.
pub const ASK_RETRIED: &str = concat!(
    r#"{"v":1,"kind":"step","run":"run-0123456789abcdef0123456789abcdef","n":2,"at":1700000000500,"#,
    r#""entry":{"v":1,"seq":0,"run":"run-0123456789abcdef0123456789abcdef","scope":"","#,
    r#""kind":"ask","name":"reviewer","occurrence":0,"#,
    r#""inputHash":"sha256:a3485502c9b1612b64f3a834410ea166c6f0f4fcf2502da528bf53d7c63b07b0","#,
    r#""requestId":"FvEsS_ojOWnEiP63iFAKaCkaaFcUEMCXGTdHoEIZhus","attempt":0,"#,
    r#""state":"pending","startedAt":1700000000100,"#,
    r#""external":{"asks":"Which reviewer?","askToken":"mKk3e1wPPJXadO8x6Wr572UDSREKqDgjfPEDYNVkp-I","attempt":2}}}"#
);

/// The mint's status row: waiting at generation 1.
pub const STATUS_WAITING: &str = concat!(
    r#"{"state":"waiting","deadlineGeneration":1,"deadline":1700003600100,"#,
    r#""observedSpecRevision":7}"#
);

/// The settlement's row after a resume that accepted [`ANSWER`].
pub const STATUS_RESUMED: &str = concat!(
    r#"{"state":"resumed","deadlineGeneration":1,"deadline":1700003600100,"#,
    r#""observedSpecRevision":7,"settledGeneration":1,"#,
    r#""settledHolder":{"id":"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4","lifecycleUid":"lllllllllllllllllllllllllll"},"#,
    r#""settledTs":1700000000850,"settledAnswerId":"uPApbEJ-HKoQ_QNxBONRbRV3qEd2ul7_TZEx_zVne80"}"#
);

/// The settlement's row after the deadline fired: no holder, no answer.
pub const STATUS_EXPIRED: &str = concat!(
    r#"{"state":"expired","deadlineGeneration":1,"deadline":1700003600100,"#,
    r#""observedSpecRevision":7,"settledGeneration":1,"settledTs":1700003600200}"#
);

/// `records` as the journal subject holds them, at stream sequences 1, 2, ….
pub fn messages(records: &[&str]) -> Vec<JournalMessage> {
    records
        .iter()
        .zip(1..)
        .map(|(record, seq)| JournalMessage {
            seq,
            data: record.as_bytes().to_vec(),
        })
        .collect()
}
