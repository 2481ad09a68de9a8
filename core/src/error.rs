//! The one error type of the plane, with the spec's §13.3 catalog codes.
//!
//! Every refusal in the core is an [`EpError`]. Messages say what was refused, why, and what to
//! do next; `details` carries machine-readable detail objects (the reference's `details[]`).

use std::fmt;

/// The catalog codes of SPEC §13.3 that this plane emits (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    BadRequest,
    /// An endpoint request whose `v` is not 1 (§13.3).
    UnsupportedVersion,
    /// An endpoint request whose `op` disagrees with its subject.
    OpMismatch,
    /// An endpoint request whose `class` is not its command's.
    ClassMismatch,
    /// An endpoint request whose `target` disagrees with its subject's target tokens.
    TargetMismatch,
    /// An endpoint request whose `from.id` is not its subject's sender.
    SenderMismatch,
    PermissionDenied,
    NotFound,
    AlreadyExists,
    Conflict,
    /// An endpoint request whose contract digests are missing or not the served contract's.
    ContractMismatch,
    ContractInvalid,
    FailedPrecondition,
    DeadlineExceeded,
    Expired,
    Unavailable,
    Unimplemented,
    Internal,
}

impl ErrorCode {
    /// Every code, in catalog order.
    pub const ALL: [ErrorCode; 18] = [
        ErrorCode::BadRequest,
        ErrorCode::UnsupportedVersion,
        ErrorCode::OpMismatch,
        ErrorCode::ClassMismatch,
        ErrorCode::TargetMismatch,
        ErrorCode::SenderMismatch,
        ErrorCode::PermissionDenied,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::Conflict,
        ErrorCode::ContractMismatch,
        ErrorCode::ContractInvalid,
        ErrorCode::FailedPrecondition,
        ErrorCode::DeadlineExceeded,
        ErrorCode::Expired,
        ErrorCode::Unavailable,
        ErrorCode::Unimplemented,
        ErrorCode::Internal,
    ];

    /// The wire spelling of the code.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad-request",
            ErrorCode::UnsupportedVersion => "unsupported-version",
            ErrorCode::OpMismatch => "op-mismatch",
            ErrorCode::ClassMismatch => "class-mismatch",
            ErrorCode::TargetMismatch => "target-mismatch",
            ErrorCode::SenderMismatch => "sender-mismatch",
            ErrorCode::PermissionDenied => "permission-denied",
            ErrorCode::NotFound => "not-found",
            ErrorCode::AlreadyExists => "already-exists",
            ErrorCode::Conflict => "conflict",
            ErrorCode::ContractMismatch => "contract-mismatch",
            ErrorCode::ContractInvalid => "contract-invalid",
            ErrorCode::FailedPrecondition => "failed-precondition",
            ErrorCode::DeadlineExceeded => "deadline-exceeded",
            ErrorCode::Expired => "expired",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unimplemented => "unimplemented",
            ErrorCode::Internal => "internal",
        }
    }

    /// Parses the wire spelling; `None` for anything outside the catalog.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal or failure with its catalog code.
#[derive(Debug, Clone, PartialEq)]
pub struct EpError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Vec<serde_json::Value>,
}

impl EpError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        EpError {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// Attaches one machine-readable detail object.
    #[must_use]
    pub fn with_detail(mut self, detail: serde_json::Value) -> Self {
        self.details.push(detail);
        self
    }

    /// Appends a sentence to the message (e.g. a revoke failure that becomes reconciliation debt).
    #[must_use]
    pub fn with_note(mut self, note: impl AsRef<str>) -> Self {
        self.message.push_str("; ");
        self.message.push_str(note.as_ref());
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PermissionDenied, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }
    pub fn contract_invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ContractInvalid, message)
    }
    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::FailedPrecondition, message)
    }
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Expired, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// Re-labels a grammar refusal met while reading *stored* bytes: corrupt storage is
    /// `internal`, not the caller's `bad-request`.
    #[must_use]
    pub fn stored(self) -> Self {
        EpError {
            code: ErrorCode::Internal,
            ..self
        }
    }
}

impl fmt::Display for EpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for EpError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_their_wire_spelling() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::parse("aborted"), None);
    }

    #[test]
    fn display_leads_with_the_code() {
        let e = EpError::expired("gate advanced").with_note("revoke failed");
        assert_eq!(e.to_string(), "expired: gate advanced; revoke failed");
        assert_eq!(EpError::bad_request("x").stored().code, ErrorCode::Internal);
    }
}
