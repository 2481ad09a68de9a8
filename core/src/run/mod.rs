//! Workflow runs (SPEC §14, reference-auth-service §5): the hosted run status record and the run
//! check of a run-driver renewal, run admission and revocation, the run request parsers, the
//! observed run requests, the served-caller check, the journal checkpoint an answer settles and
//! its reader, and the admission and attempt machines.

mod admission;
mod admit;
mod attempt;
mod caller;
mod checkpoint;
mod journal_read;
mod observed;
mod request;
mod served;
mod status;
mod subject;

pub use crate::issued::{
    subject_matches, IssuedEvidence, IssuedGeneration, IssuedRef, SubjectAllow, SubjectPermission,
    SubjectPermissions,
};
pub use admission::{
    read_run_admission, AdmissionParts, AdmissionView, Provenance, RevokeRun, RunAdmission,
    RunCaller, RunRevocation,
};
pub use admit::{AdmissionOutcome, AdmitRun, AuthorizeRunAdmission, AuthorizedAdmission};
pub use attempt::{
    sign_attempt, AnsweringAttempt, AttemptDecision, AttemptGrant, AuthorizeRunAttempt,
    AuthorizedAttempt, IssueRunAttempt, PlainAttempt, RunAttempt, ServedAttempt, ServedInputs,
};
pub use caller::{run_endpoint, RUN_ENDPOINT};
pub use checkpoint::{pause_token, AnswerId, CheckpointState, JournalCheckpoint};
pub use journal_read::{
    checkpoint_status_key, journal_checkpoint_rows, journal_pause, journal_stream, journal_subject,
    JournalMessage, JournalPause, ReadJournalCheckpoint, MAX_JOURNAL_RECORDS,
};
pub use observed::{
    served_run_request_subjects, EnvelopeFacts, ObservedRunRequest, ObservedRunRequests,
    RequestBind, RunRequestOperation, OBSERVED_RUN_REQUEST_WINDOW_MS,
};
pub use request::{
    parse_run_admission_request, parse_run_attempt_request, AttemptBody, AttemptSpec,
    OperatorAnswers, OperatorAsk, OperatorSpec, RegisteredRun, RunAdmissionRequest,
    RunAttemptRequest, MAX_SERVED_SUBJECT_BYTES, MAX_STEP_KEY_CHARS,
};
pub use served::{
    authorize_served_caller, registered_run_command, RegisteredRunCommand, ServedCall,
    ServedCommand, EP_UNBOUND_CALLER_AUTHORITY,
};
pub use status::{
    observe_hosted_run, run_holds_fence, write_run_status, HostedRunStatus, RunState,
};
pub use subject::{parse_request_subject, RequestSubject, Route, MAX_EP_SUBJECT_BYTES};
