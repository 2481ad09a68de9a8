//! Issued authority (SPEC §13.15, F77–F81): binding an invocation to an immutable,
//! issuer-accepted permission ceiling, separate from who the caller is.
//!
//! The issuer chooses a fresh generation, persists the evidence (the reference, the sources it
//! depends on, the exact ceiling it signs) and a `prepared` attempt row create-only, releases by
//! CASing the attempt row to `active`, and only then returns material. A consumer acts on an
//! issuance only after [`ResolveIssued`]: evidence present, attempt `active`, unexpired, every
//! source live, and the attempt unmoved across the check.

mod caller;
mod ceiling;
mod rows;
mod store;

pub use caller::IssueManagerCaller;
pub(crate) use ceiling::{closed, text, ShapeError};
pub use ceiling::{
    subject_matches, IssuedEvidence, IssuedGeneration, IssuedRef, SubjectAllow, SubjectPermission,
    SubjectPermissions,
};
pub use rows::{
    accepted_row, attempt_key, evidence_key, parse_accepted_row, source_index_key, AcceptedToken,
    AttemptRow, AttemptState, Evidence, IssuedSource, SourceKind,
};
pub use store::{
    ConfirmIssued, IssueGeneration, ReadAccepted, ResolveIssued, RetireIssued, RetireSource,
};
