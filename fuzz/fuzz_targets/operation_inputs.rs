//! Everything the authority operations read from callers or from stores, from
//! arbitrary bytes: the closed request parsers (manager-service authority, run admission and
//! attempt, managed-agent enrollment and prepare-retirement) and request subjects never panic;
//! the stored rows (renewal cleanup intent, run admission, hosted run status, actor-ledger rows)
//! never panic, and a row they accept re-serializes to bytes that parse back to the same row.
#![no_main]

use cotal_core::actors::{ActorRow, RowSpace};
use cotal_core::enrollment::{EnrollmentRequest, PrepareRetirementRequest};
use cotal_core::manager::ManagerAuthorityRequest;
use cotal_core::renewal::CleanupIntent;
use cotal_core::run::{
    parse_request_subject, parse_run_admission_request, parse_run_attempt_request,
    HostedRunStatus, RunAdmission,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_request_subject(text);
    }
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        let _ = ManagerAuthorityRequest::parse(&value);
        let _ = ManagerAuthorityRequest::parse_for_platform(&value);
        let _ = parse_run_admission_request(&value);
        let _ = parse_run_attempt_request(&value);
        let _ = EnrollmentRequest::parse(&value);
        let _ = PrepareRetirementRequest::parse(&value);
        if let Ok(admission) = RunAdmission::from_value(&value) {
            let bytes = admission.to_bytes().expect("an accepted admission serializes");
            let again: Value = serde_json::from_slice(&bytes).expect("its bytes are JSON");
            assert_eq!(RunAdmission::from_value(&again).ok(), Some(admission));
        }
    }
    let key = "renewclean.manager.iiiiiiiiiiiiiiiiiiiiiiiiii";
    if let Ok(intent) = CleanupIntent::parse(data, key) {
        let bytes = intent.to_bytes();
        assert_eq!(CleanupIntent::parse(&bytes, key).ok(), Some(intent));
    }
    if let Ok(status) = HostedRunStatus::parse(data) {
        let bytes = status.to_bytes();
        assert_eq!(HostedRunStatus::parse(&bytes).ok(), Some(status));
    }
    for space in [RowSpace::Interactive, RowSpace::Managed] {
        if let Ok(row) = ActorRow::from_file_bytes(data, space) {
            let bytes = row.to_file_bytes();
            assert_eq!(ActorRow::from_file_bytes(&bytes, space).ok(), Some(row));
        }
    }
});
