//! The auth control rail's `retire-lifecycle` on the KV model (reference-auth-service §2.5 step
//! 9, SPEC §13.2–§13.3): the request subject of both triple modes and the instance form, the
//! reply subject derived from it (never from a transport reply target), the envelope checked in
//! the catalog's order, the closed `args` (F49: the target's one retirement op id), the
//! serve-time admission against the caller's serve registration and the target's head and gate
//! (a refusal writes nothing), the barrier it runs and its closed output, and the reply bytes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::lifecycle::{
    actor, assert_retired, crash_before, ensure_for, gate_row, head_row, holder, live, owner,
    retire, retire_as, sequences, uid, world, ACTOR, OWNER, UID, UID2,
};
use common::run;
use cotal_core::control_rail::{check_op_id, AdmitRetireCall, RailAdmission, RetireCall};
use cotal_core::driver::ModelWorld;
use cotal_core::endpoint_rail::{
    reply_error, reply_ok, retire_lifecycle_served, Outcome, ServedCommand, TargetedRequest,
    TargetedSubject,
};
use cotal_core::gate::{EndpointGate, GateState, OpKind, ProcessEpoch};
use cotal_core::host::retire_lifecycle_digests;
use cotal_core::kv::Store;
use cotal_core::lifecycle::{interactive_retirement_op_id, managed_retirement_op_id};
use cotal_core::machine::Replay;
use cotal_core::names::{
    keys, ActorToken, EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName,
};
use cotal_core::profiles::RailCaller;
use cotal_core::{EpError, ErrorCode};
use serde_json::{json, Value};

/// The plane's own `auth` instance and the epoch its registration committed.
const AUTH_IID: &str = "authauthauthauthauthauthau";
const EPOCH: u64 = 2;
/// The requesting manager: its caller triple and its serve registration.
const M_OWNER: &str = "u_mmmmmmmmmmmmmmmmmmmmmmmmmm";
const M_ACTOR: &str = "mgr";
const M_UID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";
const M_ENDPOINT: &str = "cotal.manager";
const M_IID: &str = "nnnnnnnnnnnnnnnnnnnnnnnnnn";
const M_EPOCH: u64 = 3;
const NONCE: &str = "Nonce_0123456789-abcdefgh";

fn space() -> SpaceName {
    SpaceName::parse("s1").unwrap()
}

fn served() -> ServedCommand {
    retire_lifecycle_served(
        &space(),
        &InstanceId::parse(AUTH_IID).unwrap(),
        ProcessEpoch(EPOCH),
    )
    .unwrap()
}

fn triple(o: &str, a: &str, u: &str) -> RailCaller {
    RailCaller {
        owner: OwnerToken::parse(o).unwrap(),
        actor: ActorToken::parse(a).unwrap(),
        uid: uid(u),
    }
}

fn manager() -> RailCaller {
    triple(M_OWNER, M_ACTOR, M_UID)
}

fn manager_principal() -> Principal {
    Principal::parse(&format!("{M_OWNER}.{M_ACTOR}")).unwrap()
}

/// The tail every request subject shares: mode, target triple, caller triple, nonce.
fn tail(mode: &str, target_uid: &str, nonce: &str) -> String {
    format!("{mode}.{OWNER}.{ACTOR}.{target_uid}.{M_OWNER}.{M_ACTOR}.{M_UID}.{nonce}")
}

/// The class-rail request subject (`exact` mode) of a call on `target_uid`.
fn class_subject(target_uid: &str) -> String {
    format!(
        "cotal.s1.ep.one.auth.retire-lifecycle.{}",
        tail("exact", target_uid, NONCE)
    )
}

fn subject(target_uid: &str) -> TargetedSubject {
    served().subject(&class_subject(target_uid)).unwrap()
}

fn digests() -> (String, String) {
    let (input, output) = retire_lifecycle_digests().unwrap();
    (input.to_prefixed(), output.to_prefixed())
}

fn args_for(target_uid: &str) -> Value {
    json!({
        "opId": managed_retirement_op_id(&uid(target_uid)).unwrap().as_str(),
        "serveEndpoint": M_ENDPOINT,
        "serveInstanceId": M_IID,
        "serveEpoch": M_EPOCH,
    })
}

/// A valid envelope of a call on the target at [`UID`].
fn envelope() -> Value {
    let (input, output) = digests();
    json!({
        "v": 1,
        "id": "req-1_A",
        "op": {
            "endpoint": "auth", "command": "retire-lifecycle",
            "inputDigest": input, "outputDigest": output,
        },
        "class": "ephemeral",
        "target": {"owner": OWNER, "actor": ACTOR, "lifecycleUid": UID},
        "from": {"id": format!("{M_OWNER}.{M_ACTOR}")},
        "bind": {"instanceId": AUTH_IID, "epoch": EPOCH},
        "replyExpected": true,
        "args": args_for(UID),
    })
}

fn check(body: &Value) -> Result<TargetedRequest, (Option<String>, EpError)> {
    served().request(subject(UID), body.to_string().as_bytes())
}

/// One edit of an envelope.
type Edit<'a> = dyn Fn(&mut Value) + 'a;

fn edited(f: impl Fn(&mut Value)) -> Value {
    let mut v = envelope();
    f(&mut v);
    v
}

fn refused(e: &EpError, code: ErrorCode, words: &[&str]) {
    assert_eq!(e.code, code, "{e}");
    for w in words {
        assert!(e.message.contains(w), "{w:?} missing from: {e}");
    }
}

/// The envelope refusal of `body`: asserts its code and the echoed id.
fn envelope_refused(body: &Value, code: ErrorCode, id: Option<&str>) -> EpError {
    let (echoed, e) = check(body).unwrap_err();
    assert_eq!(e.code, code, "{e}");
    assert_eq!(echoed.as_deref(), id, "{e}");
    e
}

/// The call a checked request on `target_uid` with `args` makes.
fn call_with(target_uid: &str, args: Value) -> Result<RetireCall, EpError> {
    let mut body = envelope();
    body["target"]["lifecycleUid"] = json!(target_uid);
    body["args"] = args;
    let request = served()
        .request(subject(target_uid), body.to_string().as_bytes())
        .unwrap();
    RetireCall::from_request(&space(), &request)
}

fn call() -> RetireCall {
    call_with(UID, args_for(UID)).unwrap()
}

// ---- fixtures on the model -------------------------------------------------------------------

/// The manager's `epgate.cotal_manager.<M_IID>`, written as `json` (validated by the gate's
/// closed parser first).
fn put_serve_gate(world: &mut ModelWorld, json: &str) {
    let gate = EndpointGate::parse(json.as_bytes()).unwrap();
    let key = keys::epgate(
        &EndpointName::parse(M_ENDPOINT).unwrap(),
        &InstanceId::parse(M_IID).unwrap(),
    );
    assert_eq!(key, format!("epgate.cotal_manager.{M_IID}"));
    world.kv.put(Store::Auth, &key, &gate.to_bytes());
}

fn serve_gate_json(state: &str, epoch: u64, principal: &str) -> String {
    let op = match state {
        "open" => String::new(),
        "frozen" => format!(
            r#","op":{{"opId":"{}","kind":"registration"}}"#,
            OpId::mint([9; 20])
        ),
        _ => format!(
            r#","op":{{"opId":"{}","kind":"retirement"}}"#,
            OpId::mint([9; 20])
        ),
    };
    format!(
        r#"{{"state":"{state}","generation":4,"processEpoch":{epoch},"registrationRevision":7,"nameAuthorityRevision":1,"principal":"{principal}"{op}}}"#
    )
}

/// A world where the manager holds a current serve registration at [`M_EPOCH`] and the target
/// is live at [`UID`].
fn admitted_world() -> ModelWorld {
    let mut world = world();
    put_serve_gate(
        &mut world,
        &serve_gate_json("open", M_EPOCH, &manager_principal().key()),
    );
    live(&mut world, UID, 1);
    world
}

/// Runs the admission of `call` and asserts a refusal wrote nothing and evicted no one.
fn admit(world: &mut ModelWorld, call: RetireCall) -> Result<RailAdmission, EpError> {
    let before = sequences(world);
    let evicted = world.evicted().len();
    let admitted = run(world, AdmitRetireCall { call });
    assert_eq!(sequences(world), before, "an admission writes nothing");
    assert_eq!(world.evicted().len(), evicted, "an admission evicts no one");
    admitted
}

// ---- the subjects ----------------------------------------------------------------------------

#[test]
fn the_served_command_listens_on_its_class_rail_and_its_own_instance_rail() {
    assert_eq!(
        served().subscriptions(),
        [
            "cotal.s1.ep.one.auth.retire-lifecycle.>".to_owned(),
            format!("cotal.s1.ep.inst.auth.{AUTH_IID}.retire-lifecycle.>"),
        ]
    );
}

#[test]
fn both_triple_modes_and_the_instance_form_parse_the_target_caller_and_nonce() {
    let served = served();
    let expected = TargetedSubject {
        target: triple(OWNER, ACTOR, UID),
        caller: manager(),
        nonce: NONCE.to_owned(),
    };
    for mode in ["handle", "exact"] {
        let class = format!(
            "cotal.s1.ep.one.auth.retire-lifecycle.{}",
            tail(mode, UID, NONCE)
        );
        assert_eq!(served.subject(&class), Some(expected.clone()), "{class}");
        let inst = format!(
            "cotal.s1.ep.inst.auth.{AUTH_IID}.retire-lifecycle.{}",
            tail(mode, UID, NONCE)
        );
        assert_eq!(served.subject(&inst), Some(expected.clone()), "{inst}");
    }
    // The nonce's bounds: 22 and 64 characters of [A-Za-z0-9_-].
    for nonce in ["a".repeat(22), "Z-_9".repeat(16)] {
        let s = format!(
            "cotal.s1.ep.one.auth.retire-lifecycle.{}",
            tail("exact", UID, &nonce)
        );
        assert_eq!(served.subject(&s).unwrap().nonce, nonce);
    }
}

#[test]
fn a_subject_outside_the_served_command_or_its_grammar_does_not_parse() {
    let served = served();
    let good = tail("exact", UID, NONCE);
    let short_nonce = tail("exact", UID, &"a".repeat(21));
    let long_nonce = tail("exact", UID, &"a".repeat(65));
    let star_nonce = tail("exact", UID, "aaaaaaaaaaaaaaaaaaaaa*");
    let bad_owner = format!("exact.bad-owner.{ACTOR}.{UID}.{M_OWNER}.{M_ACTOR}.{M_UID}.{NONCE}");
    let bad_caller = format!("exact.{OWNER}.{ACTOR}.{UID}.{M_OWNER}.{M_ACTOR}.short.{NONCE}");
    let other = "otherotherotherotherotherot";
    for subject in [
        // wrong endpoint, command, instance, space, mode
        format!("cotal.s1.ep.one.mint.retire-lifecycle.{good}"),
        format!("cotal.s1.ep.one.auth.revoke-credential.{good}"),
        format!("cotal.s1.ep.inst.auth.{other}.retire-lifecycle.{good}"),
        format!("cotal.s2.ep.one.auth.retire-lifecycle.{good}"),
        format!("cotal.s1x.ep.one.auth.retire-lifecycle.{good}"),
        format!("cotal.s1.ep.one.auth.retire-lifecycle.{}", tail("any", UID, NONCE)),
        format!("cotal.s1.ep.call.auth.retire-lifecycle.{good}"),
        // nonce out of grammar
        format!("cotal.s1.ep.one.auth.retire-lifecycle.{short_nonce}"),
        format!("cotal.s1.ep.one.auth.retire-lifecycle.{long_nonce}"),
        format!("cotal.s1.ep.one.auth.retire-lifecycle.{star_nonce}"),
        // a triple token out of grammar
        format!("cotal.s1.ep.one.auth.retire-lifecycle.{bad_owner}"),
        format!("cotal.s1.ep.one.auth.retire-lifecycle.{bad_caller}"),
        // wrong token count
        format!("cotal.s1.ep.one.auth.retire-lifecycle.{good}.extra"),
        format!("cotal.s1.ep.one.auth.retire-lifecycle.exact.{OWNER}.{ACTOR}.{UID}.{M_OWNER}.{M_ACTOR}.{M_UID}"),
        format!("cotal.s1.ep.inst.auth.retire-lifecycle.{good}"),
        "cotal.s1".to_owned(),
        String::new(),
    ] {
        assert_eq!(served.subject(&subject), None, "{subject}");
    }
}

#[test]
fn the_reply_subject_is_this_instance_and_epoch_then_the_callers_triple_and_nonce() {
    let served = served();
    let expected =
        format!("cotal.s1.ep.reply.auth.{AUTH_IID}.{EPOCH}.{M_OWNER}.{M_ACTOR}.{M_UID}.{NONCE}");
    assert_eq!(served.reply_subject(&subject(UID)), expected);
    // The instance form answers on the same reply rail.
    let inst = served
        .subject(&format!(
            "cotal.s1.ep.inst.auth.{AUTH_IID}.retire-lifecycle.{}",
            tail("handle", UID, NONCE)
        ))
        .unwrap();
    assert_eq!(served.reply_subject(&inst), expected);
}

// ---- the envelope ----------------------------------------------------------------------------

#[test]
fn a_valid_envelope_passes_and_carries_its_id_cast_flag_and_args() {
    let request = check(&envelope()).unwrap();
    assert_eq!(request.subject, subject(UID));
    assert_eq!(request.id, "req-1_A");
    assert!(request.reply_expected);
    assert_eq!(request.args, args_for(UID));
    // A cast, no bind, no args: still a request (the args are the command's to check).
    let cast = edited(|v| {
        v["replyExpected"] = json!(false);
        let map = v.as_object_mut().unwrap();
        map.remove("bind");
        map.remove("args");
    });
    let request = check(&cast).unwrap();
    assert!(!request.reply_expected);
    assert_eq!(request.args, Value::Null);
}

#[test]
fn unknown_top_level_envelope_fields_are_ignored() {
    let body = edited(|v| {
        v["trace"] = json!({"span": "abc"});
        v["deadlineMs"] = json!(5000);
        v["x-future"] = json!([1, 2, 3]);
    });
    assert_eq!(check(&body).unwrap(), check(&envelope()).unwrap());
}

#[test]
fn a_body_that_is_not_a_json_object_is_bad_request_without_an_id() {
    for body in [&b"not json"[..], b"[1,2]", b"\"req-1\"", b"null", b""] {
        let (id, e) = served().request(subject(UID), body).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
        assert_eq!(id, None);
    }
}

#[test]
fn an_id_outside_its_grammar_is_bad_request_without_an_id() {
    for id in [
        json!(null),
        json!(""),
        json!("x".repeat(65)),
        json!("req.1"),
        json!("req 1"),
        json!(7),
    ] {
        let e = envelope_refused(
            &edited(|v| v["id"] = id.clone()),
            ErrorCode::BadRequest,
            None,
        );
        refused(&e, ErrorCode::BadRequest, &["id"]);
    }
    let e = envelope_refused(
        &edited(|v| {
            v.as_object_mut().unwrap().remove("id");
        }),
        ErrorCode::BadRequest,
        None,
    );
    refused(&e, ErrorCode::BadRequest, &["id"]);
    // 64 characters is still an id.
    let long = "y".repeat(64);
    assert_eq!(check(&edited(|v| v["id"] = json!(long))).unwrap().id, long);
}

#[test]
fn a_version_other_than_1_is_unsupported_version() {
    for version in [json!(2), json!(0), json!("1"), json!(null)] {
        envelope_refused(
            &edited(|v| v["v"] = version.clone()),
            ErrorCode::UnsupportedVersion,
            Some("req-1_A"),
        );
    }
    let e = envelope_refused(
        &edited(|v| {
            v.as_object_mut().unwrap().remove("v");
        }),
        ErrorCode::UnsupportedVersion,
        Some("req-1_A"),
    );
    refused(&e, ErrorCode::UnsupportedVersion, &["version 1"]);
}

#[test]
fn an_op_naming_another_endpoint_or_command_is_op_mismatch() {
    for edit in [
        &(|v: &mut Value| v["op"]["endpoint"] = json!("mint")) as &Edit<'_>,
        &|v| v["op"]["command"] = json!("retire"),
        &|v| {
            v["op"].as_object_mut().unwrap().remove("command");
        },
        &|v| v["op"] = json!("auth/retire-lifecycle"),
    ] {
        envelope_refused(&edited(edit), ErrorCode::OpMismatch, Some("req-1_A"));
    }
}

#[test]
fn op_digests_other_than_the_served_contracts_are_contract_mismatch() {
    let (input, output) = digests();
    let other = cotal_core::canon::Digest::of(b"another schema").to_prefixed();
    for edit in [
        &(|v: &mut Value| v["op"]["inputDigest"] = json!(other)) as &Edit<'_>,
        &|v| v["op"]["outputDigest"] = json!(other),
        // swapped
        &|v| {
            v["op"]["inputDigest"] = json!(output);
            v["op"]["outputDigest"] = json!(input);
        },
        &|v| {
            v["op"].as_object_mut().unwrap().remove("inputDigest");
        },
        &|v| v["op"]["outputDigest"] = json!(output.trim_start_matches("sha256:")),
    ] {
        let e = envelope_refused(&edited(edit), ErrorCode::ContractMismatch, Some("req-1_A"));
        refused(&e, ErrorCode::ContractMismatch, &[&input, &output]);
    }
}

#[test]
fn a_class_other_than_ephemeral_is_class_mismatch() {
    for class in [json!("journal"), json!("Ephemeral"), json!(null)] {
        envelope_refused(
            &edited(|v| v["class"] = class.clone()),
            ErrorCode::ClassMismatch,
            Some("req-1_A"),
        );
    }
}

#[test]
fn a_target_other_than_the_subjects_is_target_mismatch() {
    for edit in [
        &(|v: &mut Value| v["target"]["owner"] = json!(M_OWNER)) as &Edit<'_>,
        &|v| v["target"]["actor"] = json!("other"),
        &|v| v["target"]["lifecycleUid"] = json!(UID2),
        &|v| {
            v.as_object_mut().unwrap().remove("target");
        },
    ] {
        let e = envelope_refused(&edited(edit), ErrorCode::TargetMismatch, Some("req-1_A"));
        refused(&e, ErrorCode::TargetMismatch, &[OWNER, UID]);
    }
}

#[test]
fn a_from_id_other_than_the_subjects_sender_is_sender_mismatch() {
    for from in [
        json!({"id": format!("{OWNER}.{ACTOR}")}),
        json!({"id": format!("{M_OWNER}.{M_ACTOR}.{M_UID}")}),
        json!({}),
        json!(format!("{M_OWNER}.{M_ACTOR}")),
    ] {
        let e = envelope_refused(
            &edited(|v| v["from"] = from.clone()),
            ErrorCode::SenderMismatch,
            Some("req-1_A"),
        );
        refused(
            &e,
            ErrorCode::SenderMismatch,
            &[&format!("{M_OWNER}.{M_ACTOR}")],
        );
    }
}

#[test]
fn a_bind_to_another_instance_is_failed_precondition_and_to_another_epoch_expired() {
    let kind = json!({"kind": "ai.cotal.ep.bind-refused"});
    let other = "otherotherotherotherotherot";
    let e = envelope_refused(
        &edited(|v| v["bind"] = json!({"instanceId": other, "epoch": EPOCH})),
        ErrorCode::FailedPrecondition,
        Some("req-1_A"),
    );
    refused(&e, ErrorCode::FailedPrecondition, &[other, AUTH_IID]);
    assert_eq!(e.details, vec![kind.clone()]);
    let e = envelope_refused(
        &edited(|v| v["bind"] = json!({"instanceId": AUTH_IID, "epoch": EPOCH + 1})),
        ErrorCode::Expired,
        Some("req-1_A"),
    );
    refused(&e, ErrorCode::Expired, &["epoch 3", "epoch 2"]);
    assert_eq!(e.details, vec![kind]);
    // A malformed bind is the caller's bad request.
    for bind in [
        json!({"instanceId": AUTH_IID}),
        json!({"epoch": EPOCH}),
        json!({"instanceId": AUTH_IID, "epoch": -1}),
        json!(null),
    ] {
        envelope_refused(
            &edited(|v| v["bind"] = bind.clone()),
            ErrorCode::BadRequest,
            Some("req-1_A"),
        );
    }
}

#[test]
fn a_reply_expected_that_is_not_a_boolean_is_bad_request() {
    for expected in [json!("true"), json!(1), json!(null)] {
        let e = envelope_refused(
            &edited(|v| v["replyExpected"] = expected.clone()),
            ErrorCode::BadRequest,
            Some("req-1_A"),
        );
        refused(&e, ErrorCode::BadRequest, &["replyExpected"]);
    }
    envelope_refused(
        &edited(|v| {
            v.as_object_mut().unwrap().remove("replyExpected");
        }),
        ErrorCode::BadRequest,
        Some("req-1_A"),
    );
}

#[test]
fn the_envelope_checks_run_in_the_catalogs_order() {
    // Everything wrong at once: each fix uncovers the next code in the catalog's order.
    let mut body = json!({"v": 2, "id": "ord", "op": {}, "class": "journal",
        "target": {}, "from": {}, "bind": {"instanceId": "x", "epoch": 0}, "replyExpected": 1});
    let (input, output) = digests();
    let fixes: [(ErrorCode, &Edit<'_>); 9] = [
        (ErrorCode::UnsupportedVersion, &|v| v["v"] = json!(1)),
        (ErrorCode::OpMismatch, &|v| {
            v["op"] = json!({"endpoint": "auth", "command": "retire-lifecycle"});
        }),
        (ErrorCode::ContractMismatch, &|v| {
            v["op"]["inputDigest"] = json!(input);
            v["op"]["outputDigest"] = json!(output);
        }),
        (ErrorCode::ClassMismatch, &|v| {
            v["class"] = json!("ephemeral")
        }),
        (ErrorCode::TargetMismatch, &|v| {
            v["target"] = json!({"owner": OWNER, "actor": ACTOR, "lifecycleUid": UID});
        }),
        (ErrorCode::SenderMismatch, &|v| {
            v["from"] = json!({"id": format!("{M_OWNER}.{M_ACTOR}")});
        }),
        (ErrorCode::FailedPrecondition, &|v| {
            v["bind"]["instanceId"] = json!(AUTH_IID);
        }),
        (ErrorCode::Expired, &|v| v["bind"]["epoch"] = json!(EPOCH)),
        (ErrorCode::BadRequest, &|v| v["replyExpected"] = json!(true)),
    ];
    for (code, fix) in fixes {
        envelope_refused(&body, code, Some("ord"));
        fix(&mut body);
    }
    check(&body).unwrap();
}

// ---- the args --------------------------------------------------------------------------------

#[test]
fn valid_args_make_the_call_from_the_subjects_triples() {
    let call = call();
    assert_eq!(
        call,
        RetireCall {
            space: space(),
            caller: manager(),
            target: triple(OWNER, ACTOR, UID),
            nonce: NONCE.to_owned(),
            op_id: managed_retirement_op_id(&uid(UID)).unwrap(),
            serve_endpoint: EndpointName::parse(M_ENDPOINT).unwrap(),
            serve_instance: InstanceId::parse(M_IID).unwrap(),
            serve_epoch: ProcessEpoch(M_EPOCH),
        }
    );
}

#[test]
fn args_with_an_unknown_member_are_bad_request_naming_it() {
    let mut args = args_for(UID);
    args["lifecycleUid"] = json!(UID);
    let e = call_with(UID, args).unwrap_err();
    refused(
        &e,
        ErrorCode::BadRequest,
        &["unknown member", "\"lifecycleUid\""],
    );
}

#[test]
fn args_missing_a_member_or_not_an_object_are_bad_request() {
    for member in ["opId", "serveEndpoint", "serveInstanceId", "serveEpoch"] {
        let mut args = args_for(UID);
        args.as_object_mut().unwrap().remove(member);
        let e = call_with(UID, args).unwrap_err();
        refused(&e, ErrorCode::BadRequest, &[member]);
    }
    for args in [json!(null), json!([]), json!("args")] {
        let e = call_with(UID, args).unwrap_err();
        refused(&e, ErrorCode::BadRequest, &["args must be"]);
    }
    // A member outside its grammar is the caller's bad request too, whatever code the grammar
    // uses.
    for (member, value) in [
        ("serveEndpoint", json!("Cotal_Manager")),
        ("serveInstanceId", json!("short")),
        ("opId", json!("not an op id")),
        ("opId", json!(7)),
    ] {
        let mut args = args_for(UID);
        args[member] = value;
        let e = call_with(UID, args).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{member}: {e}");
    }
}

#[test]
fn f49_an_op_id_other_than_the_targets_managed_retirement_op_id_is_bad_request() {
    let interactive = interactive_retirement_op_id(&uid(UID)).unwrap();
    let others = [
        interactive.clone(),
        managed_retirement_op_id(&uid(UID2)).unwrap(),
        OpId::mint([4; 20]),
    ];
    for op in others {
        let mut args = args_for(UID);
        args["opId"] = json!(op.as_str());
        let e = call_with(UID, args).unwrap_err();
        refused(&e, ErrorCode::BadRequest, &["F49", op.as_str(), UID]);
    }
    // The admission re-checks it before any read.
    let mut forged = call();
    forged.op_id = interactive.clone();
    let e = check_op_id(&forged.target, &forged.op_id).unwrap_err();
    refused(&e, ErrorCode::BadRequest, &["F49"]);
    let mut world = ModelWorld::default();
    let e = admit(&mut world, forged).unwrap_err();
    refused(&e, ErrorCode::BadRequest, &["F49"]);
    assert_eq!(world.kv.requests_served(), 0, "refused before any read");
}

#[test]
fn a_serve_epoch_that_is_not_a_non_negative_integer_is_bad_request() {
    for epoch in [
        json!(-1),
        json!(1.5),
        json!("3"),
        json!(null),
        json!(9.1e15),
    ] {
        let mut args = args_for(UID);
        args["serveEpoch"] = epoch.clone();
        let e = call_with(UID, args).unwrap_err();
        refused(&e, ErrorCode::BadRequest, &["serveEpoch"]);
    }
    // An integral double is the integer (as any I-JSON peer reads it).
    let mut args = args_for(UID);
    args["serveEpoch"] = json!(3.0);
    assert_eq!(
        call_with(UID, args).unwrap().serve_epoch,
        ProcessEpoch(M_EPOCH)
    );
}

// ---- the admission ---------------------------------------------------------------------------

#[test]
fn f94_no_serve_registration_of_the_callers_manager_instance_is_a_full_no_op() {
    // Absent.
    let mut world = world();
    live(&mut world, UID, 1);
    let e = admit(&mut world, call()).unwrap_err();
    refused(
        &e,
        ErrorCode::FailedPrecondition,
        &[
            "no manager instance currently holds a serve registration",
            "FULL no-op",
            "unregistered",
            M_IID,
            "\"s1\"",
            "u_aaaaaaaaaaaaaaaaaaaaaaaaaa/agent",
        ],
    );
    // Retired.
    put_serve_gate(
        &mut world,
        &serve_gate_json("retired", M_EPOCH, &manager_principal().key()),
    );
    let e = admit(&mut world, call()).unwrap_err();
    refused(
        &e,
        ErrorCode::FailedPrecondition,
        &[
            "no manager instance currently holds a serve registration",
            "FULL no-op",
            "is retired",
        ],
    );
    assert_eq!(gate_row(&world, UID).state(), GateState::Open);
    assert!(head_row(&world).is_active_at(&uid(UID)));
}

#[test]
fn f94_a_frozen_serve_registration_at_the_declared_epoch_still_admits() {
    // A registration barrier in flight freezes the gate without superseding the epoch.
    let mut world = admitted_world();
    put_serve_gate(
        &mut world,
        &serve_gate_json("frozen", M_EPOCH, &manager_principal().key()),
    );
    assert_eq!(admit(&mut world, call()), Ok(RailAdmission::Retire));
}

#[test]
fn f94_a_serve_registration_of_another_principal_is_permission_denied() {
    let mut world = admitted_world();
    let other = "u_dddddddddddddddddddddddddd.mgr";
    put_serve_gate(&mut world, &serve_gate_json("open", M_EPOCH, other));
    let e = admit(&mut world, call()).unwrap_err();
    refused(
        &e,
        ErrorCode::PermissionDenied,
        &[other, &manager_principal().key(), "FULL no-op", M_IID],
    );
}

#[test]
fn f94_a_superseded_manager_epoch_is_conflict() {
    for stored in [M_EPOCH + 1, M_EPOCH - 1] {
        let mut world = admitted_world();
        put_serve_gate(
            &mut world,
            &serve_gate_json("open", stored, &manager_principal().key()),
        );
        let e = admit(&mut world, call()).unwrap_err();
        refused(
            &e,
            ErrorCode::Conflict,
            &[
                "SUPERSEDED",
                &format!("epoch {M_EPOCH}"),
                &format!("epoch {stored}"),
                "FULL no-op",
            ],
        );
    }
}

#[test]
fn a_target_without_a_lifecycle_is_failed_precondition() {
    let mut world = world();
    put_serve_gate(
        &mut world,
        &serve_gate_json("open", M_EPOCH, &manager_principal().key()),
    );
    let e = admit(&mut world, call()).unwrap_err();
    refused(
        &e,
        ErrorCode::FailedPrecondition,
        &["no lifecycle exists", "u_aaaaaaaaaaaaaaaaaaaaaaaaaa/agent"],
    );
    assert_eq!(world.kv.keys(Store::Records, ""), Vec::<String>::new());
}

#[test]
fn a_stale_incarnation_is_conflict() {
    // The call names UID2 while the head is live at UID ...
    let mut world = admitted_world();
    let e = admit(&mut world, call_with(UID2, args_for(UID2)).unwrap()).unwrap_err();
    refused(&e, ErrorCode::Conflict, &["stale incarnation", UID2, UID]);
    assert!(head_row(&world).is_active_at(&uid(UID)));
    // ... and names UID after the alias moved on to UID2.
    run(&mut world, retire(UID)).unwrap();
    live(&mut world, UID2, 9);
    let e = admit(&mut world, call()).unwrap_err();
    refused(&e, ErrorCode::Conflict, &["stale incarnation", UID, UID2]);
    assert!(head_row(&world).is_active_at(&uid(UID2)));
}

#[test]
fn a_target_already_retired_at_its_uid_is_already_retired_and_writes_nothing() {
    let mut world = admitted_world();
    run(&mut world, retire(UID)).unwrap();
    assert_retired(&world, UID);
    assert_eq!(admit(&mut world, call()), Ok(RailAdmission::AlreadyRetired));
}

#[test]
fn f14_a_gate_frozen_by_another_operation_is_conflict() {
    // An interactive retirement crashed after its freeze, after its head step, and after its
    // gate terminal but before its head's (the gate retired by it, the head still retiring).
    for n in [1, 2, 6] {
        let mut world = admitted_world();
        let interactive = interactive_retirement_op_id(&uid(UID)).unwrap();
        let mut first = Replay::new(retire_as(UID, interactive.clone()));
        assert!(crash_before(&mut first, &mut world, n));
        let e = admit(&mut world, call()).unwrap_err();
        refused(
            &e,
            ErrorCode::Conflict,
            &["another operation", "retirement", interactive.as_str()],
        );
    }
    // An activation frozen mid-way (crashed before its reopen) at the target's uid.
    let mut world = world();
    put_serve_gate(
        &mut world,
        &serve_gate_json("open", M_EPOCH, &manager_principal().key()),
    );
    let mut activation = Replay::new(ensure_for(actor(), UID, 1));
    assert!(crash_before(&mut activation, &mut world, 3));
    let gate = gate_row(&world, UID);
    assert_eq!(gate.state(), GateState::Frozen);
    assert_eq!(gate.op().unwrap().kind(), OpKind::Activation);
    let e = admit(&mut world, call()).unwrap_err();
    refused(
        &e,
        ErrorCode::Conflict,
        &["another operation", "activation"],
    );
}

#[test]
fn a_live_target_is_admitted_and_a_crashed_run_of_its_own_op_resumes() {
    let mut world = admitted_world();
    assert_eq!(admit(&mut world, call()), Ok(RailAdmission::Retire));
    // The same op crashed after its freeze: the gate is frozen by this call's op, admitted.
    let mut first = Replay::new(call().barrier());
    assert!(crash_before(&mut first, &mut world, 1));
    assert_eq!(admit(&mut world, call()), Ok(RailAdmission::Retire));
}

#[test]
fn the_admitted_barrier_retires_the_target_and_its_output_is_closed() {
    let mut world = admitted_world();
    let call = call();
    assert_eq!(admit(&mut world, call.clone()), Ok(RailAdmission::Retire));
    let barrier = call.barrier();
    assert_eq!(
        (&barrier.owner, &barrier.actor, &barrier.lifecycle_uid),
        (&owner(), &actor(), &uid(UID))
    );
    assert_eq!(barrier.op_id, managed_retirement_op_id(&uid(UID)).unwrap());
    assert!(barrier.guard.is_none());
    let done = run(&mut world, barrier).unwrap();
    assert!(done.retired && !done.not_started && !done.already_retired);
    assert_retired(&world, UID);
    let evicted = world.evicted();
    assert_eq!(evicted, vec![holder()]);
    let output = call.output(&evicted);
    assert_eq!(
        output.to_string(),
        format!(
            r#"{{"retired":true,"lifecycleUid":"{UID}","opId":"{}","evictedPrincipals":["{OWNER}.{ACTOR}"]}}"#,
            call.op_id
        )
    );
    // The next call finds it retired: success with nobody evicted.
    assert_eq!(
        admit(&mut world, call.clone()),
        Ok(RailAdmission::AlreadyRetired)
    );
    assert_eq!(
        call.output(&[])["evictedPrincipals"],
        json!([]),
        "{}",
        call.output(&[])
    );
}

/// The plane's decision on the model as the rail makes it: the admission, then the barrier
/// when admitted, then the output.
fn decide(world: &mut ModelWorld, call: &RetireCall) -> Result<Value, EpError> {
    match run(world, AdmitRetireCall { call: call.clone() })? {
        RailAdmission::AlreadyRetired => Ok(call.output(&[])),
        RailAdmission::Retire => {
            let evicted = world.evicted().len();
            let done = run(world, call.barrier())?;
            assert!(done.retired, "{done:?}");
            Ok(call.output(&world.evicted()[evicted..]))
        }
    }
}

#[test]
fn f49_a_despawn_inside_another_retirements_head_terminal_is_conflict_and_writes_nothing() {
    // An interactive retirement crashed between its gate terminal (G8) and its head's (H5).
    let mut world = admitted_world();
    let interactive = interactive_retirement_op_id(&uid(UID)).unwrap();
    let mut first = Replay::new(retire_as(UID, interactive.clone()));
    assert!(crash_before(&mut first, &mut world, 6));
    let (before, evicted) = (sequences(&world), world.evicted().len());
    let e = decide(&mut world, &call()).unwrap_err();
    refused(&e, ErrorCode::Conflict, &[interactive.as_str()]);
    assert_eq!(
        sequences(&world),
        before,
        "a refused despawn writes nothing"
    );
    assert_eq!(world.evicted().len(), evicted);
    // Once that operation finishes, the despawn succeeds with nobody evicted.
    run(&mut world, retire_as(UID, interactive)).unwrap();
    let output = decide(&mut world, &call()).unwrap();
    assert_eq!(output["retired"], true);
    assert_eq!(output["evictedPrincipals"], json!([]));
}

#[test]
fn a_despawn_retried_after_success_is_the_same_success_with_nobody_evicted() {
    let mut world = admitted_world();
    let first = decide(&mut world, &call()).unwrap();
    assert_eq!(
        first["evictedPrincipals"],
        json!([format!("{OWNER}.{ACTOR}")])
    );
    let before = sequences(&world);
    let again = decide(&mut world, &call()).unwrap();
    assert_eq!(sequences(&world), before);
    assert_eq!(
        again,
        json!({"retired": true, "lifecycleUid": UID, "opId": call().op_id.as_str(),
            "evictedPrincipals": []})
    );
    assert_eq!(world.evicted().len(), 1);
}

// ---- the reply -------------------------------------------------------------------------------

#[test]
fn the_reply_bodies_are_byte_exact() {
    assert_eq!(
        String::from_utf8(reply_ok("req-1", json!({"retired": true}))).unwrap(),
        r#"{"v":1,"id":"req-1","ok":true,"data":{"retired":true}}"#
    );
    let plain = EpError::conflict("the head moved");
    assert_eq!(
        String::from_utf8(reply_error("req-2", &plain, Outcome::NotExecuted)).unwrap(),
        r#"{"v":1,"id":"req-2","ok":false,"error":{"code":"conflict","message":"the head moved","outcome":"not-executed"}}"#
    );
    let detailed = EpError::new(ErrorCode::Expired, "bound to epoch 3")
        .with_detail(json!({"kind": "ai.cotal.ep.bind-refused"}));
    assert_eq!(
        String::from_utf8(reply_error("req-3", &detailed, Outcome::Executed)).unwrap(),
        r#"{"v":1,"id":"req-3","ok":false,"error":{"code":"expired","message":"bound to epoch 3","details":[{"kind":"ai.cotal.ep.bind-refused"}],"outcome":"executed"}}"#
    );
}

#[test]
fn an_envelope_refusal_replies_with_its_echoed_id_and_not_executed() {
    let body = edited(|v| v["bind"]["epoch"] = json!(EPOCH + 1));
    let (id, e) = check(&body).unwrap_err();
    let reply: Value =
        serde_json::from_slice(&reply_error(&id.unwrap(), &e, Outcome::NotExecuted)).unwrap();
    assert_eq!(reply["id"], "req-1_A");
    assert_eq!(reply["ok"], false);
    assert_eq!(reply["error"]["code"], "expired");
    assert_eq!(reply["error"]["outcome"], "not-executed");
    assert_eq!(
        reply["error"]["details"],
        json!([{"kind": "ai.cotal.ep.bind-refused"}])
    );
}
