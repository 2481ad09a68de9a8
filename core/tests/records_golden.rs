//! Golden bytes and parser rules of the auth-bucket rows (reference-gate-impl §2.3, §3.19).
//! Idempotent creates compare raw bytes, so these strings are part of the wire contract.
// Test code: a failed unwrap is a failed test, which is the point.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::*;
use cotal_core::gate::{EndpointGate, GateOp, GateState, OpKind};
use cotal_core::ledger::LedgerRow;
use cotal_core::names::OpId;
use cotal_core::repair::RepairCursor;
use cotal_core::ErrorCode;

const PROVISIONED: &str = r#"{"state":"open","generation":0,"processEpoch":0,"registrationRevision":0,"nameAuthorityRevision":0,"principal":"u_cccccccccccccccccccccccccc.term"}"#;

fn op_id() -> OpId {
    OpId::parse("oooooooooooooooooooooooooo").unwrap()
}

#[test]
fn golden_provisioned_gate_bytes() {
    let gate = EndpointGate::provisioned(principal(P)).unwrap();
    assert_eq!(gate.to_json(), PROVISIONED);
    assert_eq!(EndpointGate::parse(PROVISIONED.as_bytes()).unwrap(), gate);
}

#[test]
fn golden_freeze_appends_op_last_and_reopen_drops_it() {
    let gate = EndpointGate::provisioned(principal(P)).unwrap();
    let frozen = gate.frozen(GateOp::registration(op_id())).unwrap();
    assert_eq!(
        frozen.to_json(),
        r#"{"state":"frozen","generation":0,"processEpoch":0,"registrationRevision":0,"nameAuthorityRevision":0,"principal":"u_cccccccccccccccccccccccccc.term","op":{"opId":"oooooooooooooooooooooooooo","kind":"registration"}}"#
    );
    let reopened = frozen.reopened(&op_id(), coords(1, 0, 7, 0)).unwrap();
    assert_eq!(
        reopened.to_json(),
        r#"{"state":"open","generation":1,"processEpoch":0,"registrationRevision":7,"nameAuthorityRevision":0,"principal":"u_cccccccccccccccccccccccccc.term"}"#
    );
    for g in [&frozen, &reopened] {
        assert_eq!(&EndpointGate::parse(&g.to_bytes()).unwrap(), g);
    }
}

#[test]
fn golden_successor_summary_sits_last_inside_op() {
    let op = GateOp::new(op_id(), OpKind::Takeover, Some("next".into())).unwrap();
    let frozen = EndpointGate::provisioned(principal(P))
        .unwrap()
        .frozen(op)
        .unwrap();
    assert!(frozen.to_json().ends_with(
        r#""op":{"opId":"oooooooooooooooooooooooooo","kind":"takeover","successor":"next"}}"#
    ));
}

#[test]
fn golden_ledger_row_field_order() {
    let gate = gate_ref();
    let row = LedgerRow::endpoint_active(
        gate.endpoint.clone(),
        &gate.instance,
        cotal_core::names::CredentialId::parse(
            "sha256-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        )
        .unwrap(),
        principal(P),
        vec![cotal_core::names::SourceMember::parse("session.abc").unwrap()],
        1_900_000_000,
    )
    .unwrap();
    let expected = r#"{"credentialId":"sha256-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","holderPrincipal":"u_cccccccccccccccccccccccccc.term","lifecycleUid":"iiiiiiiiiiiiiiiiiiiiiiiiii","endpoint":"throwaway","sourceChain":["session.abc"],"state":"active","exp":1900000000}"#;
    assert_eq!(row.to_json(), expected);
    assert_eq!(
        row.key(),
        "epcred.throwaway.iiiiiiiiiiiiiiiiiiiiiiiiii.sha256-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    );
    assert_eq!(
        LedgerRow::parse(expected.as_bytes(), &row.key()).unwrap(),
        row
    );
    assert_eq!(
        row.revoked().to_json(),
        expected.replace(r#""state":"active""#, r#""state":"revoked""#)
    );
}

#[test]
fn golden_reverse_dns_endpoint_is_tokenized_once_in_keys_and_kept_as_name_in_rows() {
    let gate = gate_ref_for("com.acme.deploy");
    assert_eq!(gate.key(), format!("epgate.com_acme_deploy.{IID}"));
    let row = LedgerRow::endpoint_active(
        gate.endpoint.clone(),
        &gate.instance,
        credential_id(1),
        principal(P),
        vec![cotal_core::names::SourceMember::Root],
        5,
    )
    .unwrap();
    assert!(row
        .key()
        .starts_with(&format!("epcred.com_acme_deploy.{IID}.sha256-")));
    assert!(row.to_json().contains(r#""endpoint":"com.acme.deploy""#));
    assert_eq!(LedgerRow::parse(&row.to_bytes(), &row.key()).unwrap(), row);
}

#[test]
fn golden_repair_cursor() {
    let cursor = RepairCursor::new(
        op_id(),
        5,
        vec![principal(OTHER), principal(P), principal(P)],
    )
    .unwrap();
    let text = r#"{"v":1,"opId":"oooooooooooooooooooooooooo","freezeToken":5,"holders":["u_cccccccccccccccccccccccccc.term","u_dddddddddddddddddddddddddd.term"],"verified":[]}"#;
    assert_eq!(cursor.to_json(), text);
    let key = format!("eprepair.throwaway.{IID}");
    assert_eq!(RepairCursor::parse(text.as_bytes(), &key).unwrap(), cursor);
    let progressed = cursor.with_verified(&[principal(P)]).unwrap();
    assert_eq!(
        RepairCursor::parse(&progressed.to_bytes(), &key).unwrap(),
        progressed
    );
    assert!(progressed.matches(&op_id(), 5, &[principal(P), principal(OTHER)]));
    assert!(!progressed.matches(&op_id(), 6, &[principal(P), principal(OTHER)]));
    assert!(!progressed.matches(&op_id(), 5, &[principal(P)]));
    assert_eq!(
        progressed.unverified().cloned().collect::<Vec<_>>(),
        vec![principal(OTHER)]
    );
}

fn gate_refusal(text: &str) {
    let err = EndpointGate::parse(text.as_bytes()).unwrap_err();
    assert_eq!(err.code, ErrorCode::Internal, "{text}: {err}");
}

#[test]
fn gate_parser_refuses_every_malformed_row_as_internal() {
    let p = r#""principal":"u_cccccccccccccccccccccccccc.term""#;
    let coords =
        r#""generation":0,"processEpoch":0,"registrationRevision":0,"nameAuthorityRevision":0"#;
    let op = r#""op":{"opId":"oooooooooooooooooooooooooo","kind":"registration"}"#;
    for bad in [
        "".to_string(),
        "not json".to_string(),
        "[]".to_string(),
        "null".to_string(),
        format!(r#"{{"state":"open",{coords},{p},"extra":1}}"#),
        format!(r#"{{"state":"ajar",{coords},{p}}}"#),
        format!(r#"{{{coords},{p}}}"#),
        format!(
            r#"{{"state":"open",{},{p}}}"#,
            coords.replace(r#""generation":0"#, r#""generation":-1"#)
        ),
        format!(
            r#"{{"state":"open",{},{p}}}"#,
            coords.replace(r#""generation":0"#, r#""generation":1.5"#)
        ),
        format!(
            r#"{{"state":"open",{},{p}}}"#,
            coords.replace(r#""generation":0"#, r#""generation":9007199254740992"#)
        ),
        format!(
            r#"{{"state":"open",{},{p}}}"#,
            coords.replace(r#""processEpoch":0"#, r#""processEpoch":"0""#)
        ),
        format!(r#"{{"state":"open",{coords},"principal":"alice.term"}}"#),
        format!(r#"{{"state":"open",{coords},"principal":"u_cccccccccccccccccccccccccc"}}"#),
        format!(r#"{{"state":"open",{coords},"principal":7}}"#),
        format!(r#"{{"state":"open",{coords},{p},{op}}}"#),
        format!(r#"{{"state":"frozen",{coords},{p}}}"#),
        format!(r#"{{"state":"retired",{coords},{p}}}"#),
        format!(r#"{{"state":"retired",{coords},{p},{}}}"#, op),
        format!(
            r#"{{"state":"frozen",{coords},{p},"op":{{"opId":"short","kind":"registration"}}}}"#
        ),
        format!(
            r#"{{"state":"frozen",{coords},{p},"op":{{"opId":"oooooooooooooooooooooooooo","kind":"rename"}}}}"#
        ),
        format!(
            r#"{{"state":"frozen",{coords},{p},"op":{{"opId":"oooooooooooooooooooooooooo","kind":"activation","successor":"x"}}}}"#
        ),
        format!(
            r#"{{"state":"frozen",{coords},{p},"op":{{"opId":"oooooooooooooooooooooooooo","kind":"takeover","successor":""}}}}"#
        ),
        format!(
            r#"{{"state":"frozen",{coords},{p},"op":{{"opId":"oooooooooooooooooooooooooo","kind":"takeover","extra":1}}}}"#
        ),
        format!(r#"{{"state":"frozen",{coords},{p},"op":"registration"}}"#),
    ] {
        gate_refusal(&bad);
    }
}

#[test]
fn gate_parser_accepts_integral_doubles_and_retired_terminal_kinds() {
    let text = PROVISIONED.replace(r#""generation":0"#, r#""generation":1.0"#);
    assert_eq!(
        EndpointGate::parse(text.as_bytes()).unwrap().generation().0,
        1
    );
    for kind in ["activation", "retirement"] {
        let text = PROVISIONED
            .replace(r#""state":"open""#, r#""state":"retired""#)
            .replace(
                "}",
                &format!(r#","op":{{"opId":"oooooooooooooooooooooooooo","kind":"{kind}"}}}}"#),
            );
        assert_eq!(
            EndpointGate::parse(text.as_bytes()).unwrap().state(),
            GateState::Retired
        );
    }
}

#[test]
fn ledger_parser_refuses_every_malformed_row_as_internal() {
    let row = sibling_row(1, P);
    let key = row.key();
    let good = row.to_json();
    let cases = [
        good.replace(r#""state":"active""#, r#""state":"expired""#),
        good.replace(r#","exp":1900000000"#, ""),
        good.replace(r#""exp":1900000000"#, r#""exp":1.5"#),
        good.replace(r#""sourceChain":["root"]"#, r#""sourceChain":[]"#),
        good.replace(r#""sourceChain":["root"]"#, r#""sourceChain":["branch"]"#),
        good.replace(r#""sourceChain":["root"]"#, r#""sourceChain":"root""#),
        good.replace(r#""endpoint":"throwaway","#, ""),
        good.replace(
            r#""holderPrincipal":"u_cccccccccccccccccccccccccc.term""#,
            r#""holderPrincipal":"alice.term""#,
        ),
        good.replace(
            r#""lifecycleUid":"iiiiiiiiiiiiiiiiiiiiiiiiii""#,
            r#""lifecycleUid":"jjjjjjjjjjjjjjjjjjjjjjjjjj""#,
        ),
        good.replace(r#""endpoint":"throwaway""#, r#""endpoint":"elsewhere""#),
        good.replace('}', r#","note":1}"#),
        "{}".to_string(),
        "[1]".to_string(),
    ];
    for bad in cases {
        let err = LedgerRow::parse(bad.as_bytes(), &key).unwrap_err();
        assert_eq!(err.code, ErrorCode::Internal, "{bad}: {err}");
    }
    // A well-formed row read from another key does not rebuild it.
    let other_key = key.replace(
        &credential_id(1).as_str().to_string(),
        credential_id(2).as_str(),
    );
    assert_eq!(
        LedgerRow::parse(good.as_bytes(), &other_key)
            .unwrap_err()
            .code,
        ErrorCode::Internal
    );
    // The agent family must not carry `endpoint`, and may not be read as epcred without it.
    let cred_key = format!("cred.{IID}.{}", credential_id(1).as_str());
    assert_eq!(
        LedgerRow::parse(good.as_bytes(), &cred_key)
            .unwrap_err()
            .code,
        ErrorCode::Internal
    );
    let agent = good.replace(r#""endpoint":"throwaway","#, "");
    let parsed = LedgerRow::parse(agent.as_bytes(), &cred_key).unwrap();
    assert_eq!(parsed.endpoint(), None);
    assert_eq!(parsed.to_json(), agent);
}

#[test]
fn repair_cursor_parser_refuses_every_malformed_cursor_as_internal() {
    let key = format!("eprepair.throwaway.{IID}");
    let good = r#"{"v":1,"opId":"oooooooooooooooooooooooooo","freezeToken":5,"holders":["u_cccccccccccccccccccccccccc.term","u_dddddddddddddddddddddddddd.term"],"verified":["u_cccccccccccccccccccccccccc.term"]}"#;
    RepairCursor::parse(good.as_bytes(), &key).unwrap();
    let cases = [
        good.replace(r#""v":1"#, r#""v":2"#),
        good.replace(r#""freezeToken":5"#, r#""freezeToken":0"#),
        good.replace(
            r#""holders":["u_cccccccccccccccccccccccccc.term","u_dddddddddddddddddddddddddd.term"]"#,
            r#""holders":["u_dddddddddddddddddddddddddd.term","u_cccccccccccccccccccccccccc.term"]"#,
        ),
        good.replace(
            r#""holders":["u_cccccccccccccccccccccccccc.term","u_dddddddddddddddddddddddddd.term"]"#,
            r#""holders":["u_cccccccccccccccccccccccccc.term","u_cccccccccccccccccccccccccc.term"]"#,
        ),
        good.replace(
            r#""verified":["u_cccccccccccccccccccccccccc.term"]"#,
            r#""verified":["u_eeeeeeeeeeeeeeeeeeeeeeeeee.term"]"#,
        ),
        good.replace(
            r#""holders":["u_cccccccccccccccccccccccccc.term","#,
            r#""holders":["alice.term","u_cccccccccccccccccccccccccc.term","#,
        ),
        good.replace('}', r#","x":1}"#),
    ];
    for bad in cases {
        let err = RepairCursor::parse(bad.as_bytes(), &key).unwrap_err();
        assert_eq!(err.code, ErrorCode::Internal, "{bad}: {err}");
    }
    for bad_key in [
        "eprepair.throwaway",
        "epgate.throwaway.x",
        "eprepair.throwaway.iiii.x",
    ] {
        assert_eq!(
            RepairCursor::parse(good.as_bytes(), bad_key)
                .unwrap_err()
                .code,
            ErrorCode::Internal
        );
    }
}
