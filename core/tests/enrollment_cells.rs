//! The reference's managed-agent-enrollment smoke (35 cells, reference-auth-service §11.6),
//! ported cell for cell onto the KV model: A. the closed parsers, B. enrollment authorization,
//! C. prepare-retirement authorization, D. the no-host-storage refusal (F97).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod enrollment_common;

use cotal_core::enrollment::{
    refuse_without_host_storage, EnrollmentRequest, PrepareRetirementRequest,
};
use cotal_core::lifecycle::managed_retirement_op_id;
use cotal_core::names::LifecycleUid;
use cotal_core::ErrorCode;
use enrollment_common::*;
use serde_json::{json, Value};

fn parse_refused(raw: &Value, needle: &str) {
    let e = EnrollmentRequest::parse(raw).expect_err(needle);
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert!(
        e.message.starts_with("managed agent enrollment request "),
        "{e}"
    );
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
}

fn prepare_refused(raw: &Value, needle: &str) {
    let e = PrepareRetirementRequest::parse(raw).expect_err(needle);
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert!(
        e.message
            .starts_with("managed agent prepare-retirement request "),
        "{e}"
    );
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
}

// ---- A. the closed parsers ----------------------------------------------------------------------

/// Cell A1 "enrollment refuses an unknown top-level field" (the field is `lifecycleUid`, F95).
#[test]
fn enrollment_refuses_an_unknown_top_level_field() {
    parse_refused(
        &edit(enrollment(), &["lifecycleUid"], Some(json!(TARGET_UID))),
        "carries unknown field \"lifecycleUid\" (the protocol is closed)",
    );
}

/// Cell A2 "enrollment refuses an unknown target field" (a plaintext `actorToken`).
#[test]
fn enrollment_refuses_an_unknown_target_field() {
    parse_refused(
        &edit(
            enrollment(),
            &["target", "actorToken"],
            Some(json!("plaintext-secret")),
        ),
        "target carries unknown field \"actorToken\"",
    );
}

/// Cell A3 "enrollment refuses a target with no token digest".
#[test]
fn enrollment_refuses_a_target_with_no_token_digest() {
    parse_refused(
        &edit(enrollment(), &["target"], Some(json!({"actor": "worker"}))),
        "tokenHash must be a lowercase hex sha256",
    );
}

/// Cell A4 "enrollment refuses a non-digest tokenHash (a plaintext token never passes as one)":
/// a 32-byte base64url actor token, and an uppercase digest.
#[test]
fn enrollment_refuses_a_non_digest_token_hash() {
    let plaintext = "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmE";
    for bad in [plaintext.to_owned(), "A".repeat(64), "a".repeat(63)] {
        parse_refused(
            &edit(
                enrollment(),
                &["target"],
                Some(json!({"actor": "worker", "tokenHash": bad})),
            ),
            "tokenHash must be a lowercase hex sha256",
        );
    }
}

/// Cell A5 "enrollment refuses an out-of-grammar channel pattern".
#[test]
fn enrollment_refuses_an_out_of_grammar_channel_pattern() {
    parse_refused(
        &edit(
            enrollment(),
            &["target", "allowSubscribe"],
            Some(json!(["general..bad"])),
        ),
        "empty segment",
    );
    parse_refused(
        &edit(
            enrollment(),
            &["target", "subscribe"],
            Some(json!(["a.>.b"])),
        ),
        "'>' is only valid as the last segment",
    );
}

/// Cell A6 "enrollment bounds each ACL list".
#[test]
fn enrollment_bounds_each_acl_list() {
    let wide: Vec<String> = (0..65).map(|i| format!("c{i}")).collect();
    parse_refused(
        &edit(enrollment(), &["target", "allowPublish"], Some(json!(wide))),
        "65 entries, more than the 64-entry bound",
    );
    let caps: Vec<String> = (0..65).map(|i| format!("c{i}")).collect();
    parse_refused(
        &edit(enrollment(), &["target", "capabilities"], Some(json!(caps))),
        "65 entries, more than the 64-entry bound",
    );
    let exact: Vec<String> = (0..64).map(|i| format!("c{i}")).collect();
    assert!(EnrollmentRequest::parse(&edit(
        enrollment(),
        &["target", "allowPublish"],
        Some(json!(exact))
    ))
    .is_ok());
}

/// Cell A7 "enrollment refuses a request whose kind is the other operation".
#[test]
fn enrollment_refuses_a_request_whose_kind_is_the_other_operation() {
    parse_refused(
        &edit(
            enrollment(),
            &["kind"],
            Some(json!("manager-managed-agent-prepare-retirement")),
        ),
        "must carry { v: 1, kind",
    );
}

/// Cell A8 "prepare-retirement refuses an unknown field".
#[test]
fn prepare_retirement_refuses_an_unknown_field() {
    prepare_refused(
        &edit(prepare(), &["extra"], Some(json!(true))),
        "unknown field \"extra\"",
    );
}

/// Cell A9 "prepare-retirement refuses a partial target".
#[test]
fn prepare_retirement_refuses_a_partial_target() {
    prepare_refused(
        &edit(
            prepare(),
            &["target"],
            Some(json!({"owner": OWNER, "actor": "worker"})),
        ),
        "target must be exactly",
    );
}

/// Cell A10 "prepare-retirement refuses a second valid opId for one lifecycle" (F96).
#[test]
fn prepare_retirement_refuses_a_second_valid_op_id_for_one_lifecycle() {
    let other = managed_retirement_op_id(&LifecycleUid::mint([9; 20])).unwrap();
    prepare_refused(
        &edit(prepare(), &["opId"], Some(json!(other.as_str()))),
        "derived terminal operation id",
    );
}

/// Cell A11 "POSITIVE CONTROL: a well-formed enrollment parses and retains only closed fields":
/// the parsed request is a closed struct, so what it retains is exactly its fields; each equals
/// the input.
#[test]
fn positive_control_a_well_formed_enrollment_parses_and_retains_only_closed_fields() {
    let r = EnrollmentRequest::parse(&enrollment()).unwrap();
    let e = &r.envelope;
    assert_eq!(e.manager.space.as_str(), SPACE);
    assert_eq!(e.manager.actor.as_str(), "cli");
    assert_eq!(e.manager.instance_id.as_str(), IID);
    assert_eq!(e.manager.manager_lifecycle_uid.as_str(), MUID);
    assert_eq!(e.manager.request_id.as_str(), "enroll00000000000000000000");
    assert_eq!(e.registration_proof.as_str(), proof());
    assert_eq!(e.serve_epoch.0, EPOCH);
    assert_eq!(e.manager.identities.serve.as_str(), nkey('C'));
    let t = &r.target;
    assert_eq!(t.actor.as_str(), "worker");
    assert_eq!(t.token_hash.as_str(), hash('a'));
    assert_eq!(t.role.as_deref(), Some("worker"));
    assert_eq!(t.label.as_deref(), Some("smoke worker"));
    assert_eq!(t.capabilities, Some(vec!["run".to_owned()]));
    assert_eq!(t.subscribe, Some(vec!["general".to_owned()]));
    assert_eq!(t.allow_subscribe, Some(vec!["general".to_owned()]));
    assert_eq!(t.allow_publish, Some(vec!["general".to_owned()]));
    // Optional parts stay absent when absent, never defaulted by the parser.
    let bare = EnrollmentRequest::parse(&edit(
        enrollment(),
        &["target"],
        Some(json!({"actor": "worker", "tokenHash": hash('a')})),
    ))
    .unwrap();
    assert_eq!(
        (
            bare.target.role,
            bare.target.capabilities,
            bare.target.allow_publish
        ),
        (None, None, None)
    );
}

/// Cell A12 "POSITIVE CONTROL: a well-formed prepare-retirement parses with its derived opId
/// intact".
#[test]
fn positive_control_a_well_formed_prepare_retirement_parses_with_its_derived_op_id_intact() {
    let r = PrepareRetirementRequest::parse(&prepare()).unwrap();
    let uid = LifecycleUid::parse(TARGET_UID).unwrap();
    assert_eq!(r.op_id(), &managed_retirement_op_id(&uid).unwrap());
    assert_eq!(r.target.lifecycle_uid, uid);
    assert_eq!(r.target.owner.as_str(), OWNER);
}

// ---- B. enrollment authorization ----------------------------------------------------------------

/// Cell B1 "POSITIVE CONTROL: a current registration with supervise authorizes the enrollment".
#[test]
fn positive_control_a_current_registration_with_supervise_authorizes_the_enrollment() {
    let mut w = world();
    let r = enroll(&mut w, &enrollment()).unwrap();
    assert_eq!(r.material.actor.as_str(), "worker");
    assert_eq!(r.envelope.manager.instance_id.as_str(), IID);
}

/// Cell B2 "enrollment: a request naming another host space is refused".
#[test]
fn enrollment_a_request_naming_another_host_space_is_refused() {
    let mut w = world();
    refused(
        enroll(
            &mut w,
            &edit(enrollment(), &["space"], Some(json!("other"))),
        ),
        ErrorCode::PermissionDenied,
        "not host space",
    );
    assert!(managed_row(&w, "worker").is_none());
}

/// Cell B3 "a row without "supervise" is refused even holding spawn and admin" (F94).
#[test]
fn a_row_without_supervise_is_refused_even_holding_spawn_and_admin() {
    let mut w = world();
    refused(
        enroll_as(&mut w, &enrollment(), &["spawn", "admin"], 1),
        ErrorCode::PermissionDenied,
        "scope \"supervise\"",
    );
}

/// Cell B4 "enrollment: an instance with no gate at all is refused".
#[test]
fn enrollment_an_instance_with_no_gate_at_all_is_refused() {
    let mut w = world();
    let raw = edit(
        edit(enrollment(), &["instanceId"], Some(json!(ABSENT_IID))),
        &["registrationProof"],
        Some(json!(proof_for(ABSENT_IID, REVISION, EPOCH, OWNER))),
    );
    refused(
        enroll(&mut w, &raw),
        ErrorCode::FailedPrecondition,
        "no current open manager gate",
    );
}

/// Cell B5 "enrollment: a FROZEN gate is refused (a takeover in flight is not a registration)".
#[test]
fn enrollment_a_frozen_gate_is_refused() {
    let mut w = world();
    let raw = edit(
        edit(enrollment(), &["instanceId"], Some(json!(FROZEN_IID))),
        &["registrationProof"],
        Some(json!(proof_for(FROZEN_IID, REVISION, EPOCH, OWNER))),
    );
    refused(
        enroll(&mut w, &raw),
        ErrorCode::FailedPrecondition,
        "no current open manager gate",
    );
}

/// Cell B6 "enrollment: a gate held by another owner's serve principal is refused".
#[test]
fn enrollment_a_gate_held_by_another_owners_serve_principal_is_refused() {
    let mut w = world();
    let raw = edit(
        edit(enrollment(), &["instanceId"], Some(json!(FOREIGN_IID))),
        &["registrationProof"],
        Some(json!(proof_for(FOREIGN_IID, REVISION, EPOCH, OWNER))),
    );
    refused(
        enroll(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "not serve principal",
    );
}

/// Cell B7 "enrollment: a stale serve epoch is refused as a conflict".
#[test]
fn enrollment_a_stale_serve_epoch_is_refused_as_a_conflict() {
    let mut w = world();
    let raw = edit(
        edit(enrollment(), &["serveEpoch"], Some(json!(EPOCH - 1))),
        &["registrationProof"],
        Some(json!(proof_for(IID, REVISION, EPOCH - 1, OWNER))),
    );
    refused(
        enroll(&mut w, &raw),
        ErrorCode::Conflict,
        "epoch 3 is stale; current is 4",
    );
}

/// Cell B8 "enrollment: a forged registration proof is refused".
#[test]
fn enrollment_a_forged_registration_proof_is_refused() {
    let mut w = world();
    let raw = edit(
        enrollment(),
        &["registrationProof"],
        Some(json!(format!("sha256:{}", "f".repeat(64)))),
    );
    refused(
        enroll(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "does not match current host registration",
    );
}

/// Cell B9 "enrollment: a proof computed for a superseded registration revision is refused".
#[test]
fn enrollment_a_proof_for_a_superseded_registration_revision_is_refused() {
    let mut w = world();
    let raw = edit(
        enrollment(),
        &["registrationProof"],
        Some(json!(proof_for(IID, REVISION - 1, EPOCH, OWNER))),
    );
    refused(
        enroll(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "does not match current host registration",
    );
}

/// Cell B10 "enrollment: a proof computed under another owner is refused".
#[test]
fn enrollment_a_proof_computed_under_another_owner_is_refused() {
    let mut w = world();
    let raw = edit(
        enrollment(),
        &["registrationProof"],
        Some(json!(proof_for(IID, REVISION, EPOCH, OTHER_OWNER))),
    );
    refused(
        enroll(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "does not match current host registration",
    );
    assert!(
        managed_row(&w, "worker").is_none(),
        "a refused enrollment writes nothing"
    );
    assert!(w.durables.requests().is_empty());
}

// ---- C. prepare-retirement authorization --------------------------------------------------------

/// Cell C1 "POSITIVE CONTROL: a current registration with supervise authorizes the release
/// preparation".
#[test]
fn positive_control_a_current_registration_with_supervise_authorizes_the_release_preparation() {
    let mut w = world();
    let r = release(&mut w, &prepare()).unwrap();
    assert_eq!(r.target.lifecycle_uid.as_str(), TARGET_UID);
    assert_eq!(
        r.op_id,
        managed_retirement_op_id(&r.target.lifecycle_uid).unwrap()
    );
}

/// Cell C2 "release: a target owner that is not the authenticated owner is refused" (F96).
#[test]
fn release_a_target_owner_that_is_not_the_authenticated_owner_is_refused() {
    let mut w = world();
    let raw = edit(prepare(), &["target", "owner"], Some(json!(OTHER_OWNER)));
    refused(
        release(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "does not match authenticated owner",
    );
}

/// Cell C3 "release: an opId derived for another lifecycle is refused" — by the parser, the only
/// way to build a request (its `op_id` is private), so no machine ever sees one (F96).
#[test]
fn release_an_op_id_derived_for_another_lifecycle_is_refused() {
    let other = managed_retirement_op_id(&LifecycleUid::mint([9; 20])).unwrap();
    prepare_refused(
        &edit(prepare(), &["opId"], Some(json!(other.as_str()))),
        "derived terminal operation id",
    );
    let parsed = PrepareRetirementRequest::parse(&prepare()).unwrap();
    assert_ne!(parsed.op_id(), &other);
}

/// Cell C4 "prepare-retirement without "supervise" is refused".
#[test]
fn prepare_retirement_without_supervise_is_refused() {
    let mut w = world();
    refused(
        release_as(&mut w, &prepare(), &["spawn", "admin"], OWNER),
        ErrorCode::PermissionDenied,
        "scope \"supervise\"",
    );
}

/// Cell C5 "release: a request naming another host space is refused".
#[test]
fn release_a_request_naming_another_host_space_is_refused() {
    let mut w = world();
    refused(
        release(&mut w, &edit(prepare(), &["space"], Some(json!("other")))),
        ErrorCode::PermissionDenied,
        "not host space",
    );
}

/// Cell C6 "release: an absent gate is refused".
#[test]
fn release_an_absent_gate_is_refused() {
    let mut w = world();
    let raw = edit(
        edit(prepare(), &["instanceId"], Some(json!(ABSENT_IID))),
        &["registrationProof"],
        Some(json!(proof_for(ABSENT_IID, REVISION, EPOCH, OWNER))),
    );
    refused(
        release(&mut w, &raw),
        ErrorCode::FailedPrecondition,
        "no current open manager gate",
    );
}

/// Cell C7 "release: a FROZEN gate is refused".
#[test]
fn release_a_frozen_gate_is_refused() {
    let mut w = world();
    let raw = edit(
        edit(prepare(), &["instanceId"], Some(json!(FROZEN_IID))),
        &["registrationProof"],
        Some(json!(proof_for(FROZEN_IID, REVISION, EPOCH, OWNER))),
    );
    refused(
        release(&mut w, &raw),
        ErrorCode::FailedPrecondition,
        "no current open manager gate",
    );
}

/// Cell C8 "release: a foreign gate principal is refused".
#[test]
fn release_a_foreign_gate_principal_is_refused() {
    let mut w = world();
    let raw = edit(
        edit(prepare(), &["instanceId"], Some(json!(FOREIGN_IID))),
        &["registrationProof"],
        Some(json!(proof_for(FOREIGN_IID, REVISION, EPOCH, OWNER))),
    );
    refused(
        release(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "not serve principal",
    );
}

/// Cell C9 "release: a stale serve epoch is refused as a conflict".
#[test]
fn release_a_stale_serve_epoch_is_refused_as_a_conflict() {
    let mut w = world();
    let raw = edit(
        edit(prepare(), &["serveEpoch"], Some(json!(EPOCH + 1))),
        &["registrationProof"],
        Some(json!(proof_for(IID, REVISION, EPOCH + 1, OWNER))),
    );
    refused(
        release(&mut w, &raw),
        ErrorCode::Conflict,
        "epoch 5 is stale; current is 4",
    );
}

/// Cell C10 "release: a forged registration proof is refused".
#[test]
fn release_a_forged_registration_proof_is_refused() {
    let mut w = world();
    let raw = edit(
        prepare(),
        &["registrationProof"],
        Some(json!(format!("sha256:{}", "f".repeat(64)))),
    );
    refused(
        release(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "does not match current host registration",
    );
}

// ---- D. no host storage (F97) -------------------------------------------------------------------

/// Cell D1 "dispatch refuses an enrollment request with unimplemented" (F97: a plane without
/// host storage).
#[test]
fn f97_dispatch_refuses_an_enrollment_request_with_unimplemented() {
    let e = refuse_without_host_storage("manager-managed-agent-enrollment").unwrap();
    assert_eq!(e.code, ErrorCode::Unimplemented);
    assert!(
        e.message
            .contains("must be handled by host platform interception"),
        "{e}"
    );
}

/// Cell D2 "dispatch refuses a prepare-retirement request with unimplemented" (F97).
#[test]
fn f97_dispatch_refuses_a_prepare_retirement_request_with_unimplemented() {
    let e = refuse_without_host_storage("manager-managed-agent-prepare-retirement").unwrap();
    assert_eq!(e.code, ErrorCode::Unimplemented);
    assert!(
        e.message
            .contains("must be handled by host platform interception"),
        "{e}"
    );
}

/// Cell D3 "NEGATIVE CONTROL: an ordinary manager-authority request still reaches its
/// dispatcher arm".
#[test]
fn negative_control_an_ordinary_manager_authority_request_still_reaches_its_arm() {
    assert!(refuse_without_host_storage("manager-service-authority").is_none());
}
