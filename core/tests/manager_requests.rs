//! Manager-service authority requests (reference-auth-service §4.1–§4.2, cells of §11.4 and the
//! registration checks of §11.6): the closed envelope parser, both proofs byte-for-byte against
//! vectors computed independently with Node (`JSON.stringify`, `createHmac`) and Python
//! (`hmac`/`hashlib`), HMAC-SHA256 against RFC 4231, and the shared current-registration check
//! on the KV model.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{coords, op, principal, run};
use cotal_core::driver::ModelWorld;
use cotal_core::gate::{EndpointGate, GateOp, ProcessEpoch, RegistrationRevision};
use cotal_core::kv::Store;
use cotal_core::lifecycle::managed_retirement_op_id;
use cotal_core::machine::script;
use cotal_core::manager::door::{self, check_registered, Knock, Presented};
use cotal_core::manager::{
    constant_time_eq, current_registration_proof, hmac_sha256, registration_proof, AccountKey,
    AgentOnboarding, ManagerAuthorityRequest, ManagerHost, ManagerOperation, ProofSecret,
    RegistrationProof, CURRENT_REGISTRATION_DOMAIN,
};
use cotal_core::names::{LifecycleUid, OwnerToken};
use cotal_core::{EpError, ErrorCode};
use serde_json::{json, Value};

const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";
const LUID: &str = "llllllllllllllllllllllllll";
const OWNER: &str = "u_cccccccccccccccccccccccccc";
const OTHER_OWNER: &str = "u_dddddddddddddddddddddddddd";
const SECRET: &str = "SAAFAKESEEDFORTESTSONLY";
const TARGET_UID: &str = "tttttttttttttttttttttttttt";

// Computed independently, and in agreement, by Node (`JSON.parse` of the same artifact text, then
// `JSON.stringify`, `createHash`, `createHmac("sha256", SECRET).update(DOMAIN).update(payload)`)
// and by Python (`json.dumps` with the same key order, `hashlib`, `hmac`).
const REGISTRATION_PROOF_VECTOR: &str =
    "sha256:7ebfb9007ef244713499cb8cec8b78b627ea72d5808bb32d6acafe1e882b52d8";
const CURRENT_PROOF_VECTOR: &str =
    "sha256:97996bfa4f7bad2ff33cabb073b39ac4966f6947a965524960308a961fdb55cb";
const RETIRE_OP_VECTOR: &str = "5c93a0bee0b47fca7c85e29475";

fn nkey(c: char) -> String {
    format!("U{}", c.to_string().repeat(55))
}

fn account() -> String {
    format!("A{}", "Q".repeat(55))
}

fn identities() -> Value {
    json!({
        "supervisor": {"id": nkey('A')},
        "executor": {"id": nkey('B')},
        "serve": {"id": nkey('C')},
        "goalWriter": {"id": nkey('D')},
        "sessionLedger": {"id": nkey('E')},
    })
}

fn artifact() -> Value {
    serde_json::from_str(
        r#"{"urn":"ai.cotal.manager","b":[1.0,2.5,"x\u2028\n\u0001é"],"10":true,"2":null,"n":1e21}"#,
    )
    .unwrap()
}

fn proof() -> String {
    format!("sha256:{}", "a".repeat(64))
}

/// A well-formed request of `operation`.
fn request(operation: &str) -> Value {
    let mut r = json!({
        "v": 1,
        "kind": "manager-service-authority",
        "operation": operation,
        "space": "s1",
        "actor": "cli",
        "instanceId": IID,
        "managerLifecycleUid": LUID,
        "requestId": "req_0123456789abcdefghij",
        "identities": identities(),
    });
    let o = r.as_object_mut().unwrap();
    if operation != "prepare" {
        o.insert("registrationProof".into(), json!(proof()));
    }
    match operation {
        "activate" => {
            o.insert("contractArtifacts".into(), json!([artifact()]));
        }
        "renewStandingBundle" | "renewRunDriver" => {
            o.insert("accountPublicKey".into(), json!(account()));
            o.insert("processEpoch".into(), json!(3));
        }
        "session" => {
            o.insert(
                "session".into(),
                json!({"id": nkey('S'), "endpoint": "manager", "sessionId": "sess-1", "epoch": 0, "exp": 1_900_000_000u64}),
            );
        }
        "retire" => {
            o.insert(
                "retirement".into(),
                json!({
                    "id": nkey('R'),
                    "target": {"owner": OWNER, "actor": "agent1", "lifecycleUid": TARGET_UID},
                    "opId": RETIRE_OP_VECTOR,
                    "serveEpoch": 3,
                }),
            );
        }
        _ => {}
    }
    if operation == "renewRunDriver" {
        o.insert(
            "run".into(),
            json!({
                "runId": format!("run-{}", "0".repeat(32)),
                "holder": "u_cccccccccccccccccccccccccc.manager.0123456789abcdef",
                "takeoverId": "0123456789abcdef",
                "epoch": 2,
                "fencingToken": 5,
                "driverId": nkey('F'),
                "mediatorId": nkey('G'),
            }),
        );
    }
    r
}

fn with(mut r: Value, key: &str, value: Value) -> Value {
    r.as_object_mut().unwrap().insert(key.into(), value);
    r
}

fn without(mut r: Value, key: &str) -> Value {
    r.as_object_mut().unwrap().remove(key);
    r
}

fn edit(mut r: Value, path: &[&str], value: Option<Value>) -> Value {
    let (last, parents) = path.split_last().unwrap();
    let mut at = &mut r;
    for p in parents {
        at = at.get_mut(*p).unwrap();
    }
    let o = at.as_object_mut().unwrap();
    match value {
        Some(v) => {
            o.insert((*last).into(), v);
        }
        None => {
            o.remove(*last);
        }
    }
    r
}

fn refused(raw: &Value, needle: &str) {
    let e = ManagerAuthorityRequest::parse(raw).expect_err(needle);
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert!(
        e.message.starts_with("manager-service authority request "),
        "{e}"
    );
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
}

fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}

// ---- HMAC and comparison ---------------------------------------------------------------------

#[test]
fn hmac_sha256_matches_rfc_4231() {
    let long_key = vec![0xaa; 131];
    let key4: Vec<u8> = (1..=25).collect();
    let cases: [(&[u8], &[u8], &str); 6] = [
        (&[0x0b; 20], b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (b"Jefe", b"what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        (&[0xaa; 20], &[0xdd; 50], "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
        (&key4, &[0xcd; 50], "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        (&long_key, b"Test Using Larger Than Block-Size Key - Hash Key First", "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        (&long_key, b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.", "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
    ];
    for (key, data, want) in cases {
        let mac = hmac_sha256(key, &[data]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, want);
        // The message may arrive in parts (domain prefix, payload): same MAC.
        let (a, b) = data.split_at(data.len() / 2);
        assert_eq!(hmac_sha256(key, &[a, b]), mac);
    }
}

#[test]
fn constant_time_eq_is_plain_equality_and_length_mismatch_is_unequal() {
    assert!(constant_time_eq(b"", b""));
    assert!(constant_time_eq(b"sha256:ab", b"sha256:ab"));
    assert!(!constant_time_eq(b"sha256:ab", b"sha256:ac"));
    assert!(!constant_time_eq(b"xha256:ab", b"sha256:ab"));
    assert!(!constant_time_eq(b"sha256:ab", b"sha256:abc"));
    assert!(!constant_time_eq(b"", b"a"));
}

// ---- Parser: round trips ---------------------------------------------------------------------

#[test]
fn every_operation_parses_with_only_its_own_parts() {
    for op in ManagerOperation::ALL {
        let r = ManagerAuthorityRequest::parse(&request(op.as_str())).unwrap();
        assert_eq!(r.operation(), op);
        assert_eq!(
            r.registration_proof().is_some(),
            op != ManagerOperation::Prepare
        );
        assert_eq!(
            r.contract_artifacts().len(),
            usize::from(op == ManagerOperation::Activate)
        );
        assert_eq!(r.renewal().is_some(), op.is_renewal());
        assert_eq!(r.run().is_some(), op == ManagerOperation::RenewRunDriver);
        assert_eq!(r.session().is_some(), op == ManagerOperation::Session);
        assert_eq!(r.retirement().is_some(), op == ManagerOperation::Retire);
        assert_eq!(r.envelope.identities.keys()[2].as_str(), nkey('C'));
    }
}

#[test]
fn renewal_parse_round_trips_its_fences() {
    let r = ManagerAuthorityRequest::parse(&request("renewRunDriver")).unwrap();
    let renewal = r.renewal().unwrap();
    assert_eq!(renewal.account_public_key.as_str(), account());
    assert_eq!(renewal.process_epoch, ProcessEpoch(3));
    let run = r.run().unwrap();
    assert_eq!((run.epoch.0, run.fencing_token.0), (2, 5));
    assert_eq!(run.takeover_id.as_str(), "0123456789abcdef");
    // An integral double is the same JavaScript number.
    let r = ManagerAuthorityRequest::parse(&with(
        request("renewStandingBundle"),
        "processEpoch",
        json!(3.0),
    ))
    .unwrap();
    assert_eq!(r.renewal().unwrap().process_epoch, ProcessEpoch(3));
}

// ---- Parser: refusals, in the reference's order ----------------------------------------------

#[test]
fn non_objects_are_refused() {
    for raw in [json!(null), json!([]), json!("x"), json!(1)] {
        refused(&raw, "must be an object");
    }
}

#[test]
fn f90_profile_field_is_an_unknown_field_of_a_closed_protocol() {
    refused(
        &with(request("renew"), "profile", json!("remote-manager")),
        "carries unknown field \"profile\" (the protocol is closed)",
    );
    // Unknown fields are found before anything else is judged.
    refused(
        &with(json!({}), "permissions", json!({})),
        "unknown field \"permissions\"",
    );
    refused(
        &with(request("prepare"), "transferReader", json!({})),
        "unknown field \"transferReader\"",
    );
}

#[test]
fn version_kind_and_operation_are_fixed() {
    refused(&with(request("renew"), "v", json!(2)), "must carry { v: 1");
    refused(
        &with(request("renew"), "v", json!("1")),
        "must carry { v: 1",
    );
    refused(
        &with(request("renew"), "kind", json!("manager-run-attempt")),
        "must carry { v: 1",
    );
    refused(
        &with(request("renew"), "operation", json!("mint")),
        "operation must",
    );
    refused(
        &with(request("renew"), "operation", json!("transferReader")),
        "operation must",
    );
    refused(&without(request("renew"), "operation"), "operation must");
}

#[test]
fn envelope_coordinates_are_required_and_well_formed() {
    for key in [
        "space",
        "actor",
        "instanceId",
        "managerLifecycleUid",
        "requestId",
    ] {
        refused(
            &without(request("renew"), key),
            &format!("requires non-empty {key}"),
        );
        refused(
            &with(request("renew"), key, json!("")),
            &format!("requires non-empty {key}"),
        );
    }
    refused(
        &with(request("renew"), "instanceId", json!("SHOUT")),
        "instanceId must be a lifecycle token",
    );
    refused(
        &with(request("renew"), "managerLifecycleUid", json!("short")),
        "managerLifecycleUid must",
    );
    refused(
        &with(request("renew"), "actor", json!("bad.actor")),
        "actor must",
    );
    refused(
        &with(request("renew"), "requestId", json!("tooshort")),
        "22-64 character idempotency token",
    );
    refused(
        &with(request("renew"), "requestId", json!("x".repeat(65))),
        "idempotency token",
    );
}

#[test]
fn proof_presence_follows_the_operation() {
    refused(
        &with(request("prepare"), "registrationProof", json!(proof())),
        "prepare must not carry registrationProof or contractArtifacts",
    );
    // A JSON null is a present key, not an absent one.
    refused(
        &with(request("prepare"), "registrationProof", Value::Null),
        "prepare must not carry",
    );
    refused(
        &with(request("prepare"), "contractArtifacts", json!([artifact()])),
        "prepare must not carry",
    );
    for op in [
        "activate",
        "renew",
        "session",
        "retire",
        "renewStandingBundle",
        "renewRunDriver",
    ] {
        refused(
            &without(request(op), "registrationProof"),
            &format!("{op} requires a sha256 registrationProof"),
        );
    }
    refused(
        &with(
            request("renew"),
            "registrationProof",
            json!(format!("sha256:{}", "A".repeat(64))),
        ),
        "requires a sha256",
    );
    refused(
        &with(
            request("renew"),
            "registrationProof",
            json!(format!("sha256:{}", "a".repeat(63))),
        ),
        "requires a sha256",
    );
}

#[test]
fn contract_artifacts_belong_to_activate_only() {
    refused(
        &without(request("activate"), "contractArtifacts"),
        "activate requires 1-64",
    );
    refused(
        &with(request("activate"), "contractArtifacts", json!([])),
        "activate requires 1-64",
    );
    refused(
        &with(request("activate"), "contractArtifacts", json!({})),
        "activate requires 1-64",
    );
    let many: Vec<Value> = (0..65).map(|_| artifact()).collect();
    refused(
        &with(request("activate"), "contractArtifacts", json!(many)),
        "activate requires 1-64",
    );
    let max: Vec<Value> = (0..64).map(|_| artifact()).collect();
    assert!(ManagerAuthorityRequest::parse(&with(
        request("activate"),
        "contractArtifacts",
        json!(max)
    ))
    .is_ok());
    refused(
        &with(request("renew"), "contractArtifacts", json!([artifact()])),
        "renew must not carry contractArtifacts",
    );
}

#[test]
fn missing_process_epoch_and_account_are_rejected_by_name() {
    for op in ["renewStandingBundle", "renewRunDriver"] {
        refused(
            &without(request(op), "accountPublicKey"),
            &format!("{op} requires an accountPublicKey"),
        );
        refused(
            &with(request(op), "accountPublicKey", json!(nkey('A'))),
            "requires an accountPublicKey",
        );
        refused(
            &without(request(op), "processEpoch"),
            &format!("{op} requires a non-negative processEpoch"),
        );
        refused(
            &with(request(op), "processEpoch", json!(-1)),
            "non-negative processEpoch",
        );
        refused(
            &with(request(op), "processEpoch", json!(1.5)),
            "non-negative processEpoch",
        );
        refused(
            &with(request(op), "processEpoch", json!(9_007_199_254_740_992u64)),
            "non-negative processEpoch",
        );
    }
    refused(
        &with(request("renew"), "processEpoch", json!(3)),
        "renew must not carry accountPublicKey or processEpoch",
    );
    refused(
        &with(request("activate"), "accountPublicKey", json!(account())),
        "must not carry accountPublicKey",
    );
}

#[test]
fn run_renewal_requires_exactly_its_run_fence() {
    let rr = || request("renewRunDriver");
    refused(
        &without(rr(), "run"),
        "renewRunDriver requires exactly runId",
    );
    for missing in ["fencingToken", "mediatorId", "takeoverId"] {
        refused(&edit(rr(), &["run", missing], None), missing);
    }
    refused(
        &edit(rr(), &["run", "extra"], Some(json!(1))),
        "requires exactly",
    );
    refused(&with(rr(), "run", json!("run")), "requires exactly");
    let invalid = "renewRunDriver requires valid runId";
    refused(
        &edit(rr(), &["run", "runId"], Some(json!("run-XYZ"))),
        invalid,
    );
    refused(&edit(rr(), &["run", "epoch"], Some(json!(0))), invalid);
    refused(
        &edit(rr(), &["run", "fencingToken"], Some(json!(0))),
        invalid,
    );
    refused(
        &edit(
            rr(),
            &["run", "takeoverId"],
            Some(json!("0123456789abcdeF")),
        ),
        invalid,
    );
    refused(
        &edit(rr(), &["run", "mediatorId"], Some(json!(nkey('F')))),
        invalid,
    );
    // The holder must end with `.<takeoverId>`: a bare suffix without the dot is not enough.
    refused(
        &edit(
            rr(),
            &["run", "holder"],
            Some(json!("u_x.other.fedcba9876543210")),
        ),
        invalid,
    );
    refused(
        &edit(rr(), &["run", "holder"], Some(json!("u_x0123456789abcdef"))),
        invalid,
    );
    refused(
        &edit(
            rr(),
            &["run", "holder"],
            Some(json!("bad holder.0123456789abcdef")),
        ),
        invalid,
    );
}

#[test]
fn renewal_with_run_on_a_standing_op_must_not_carry_run() {
    let run = request("renewRunDriver")["run"].clone();
    refused(
        &with(request("renewStandingBundle"), "run", run.clone()),
        "renewStandingBundle must not carry run",
    );
    refused(
        &with(request("renew"), "run", run),
        "renew must not carry run",
    );
}

#[test]
fn session_requires_its_exact_coordinates() {
    let needle = "session requires { id, endpoint:\"manager\", sessionId, epoch, exp }";
    refused(&without(request("session"), "session"), needle);
    refused(
        &edit(
            request("session"),
            &["session", "endpoint"],
            Some(json!("other")),
        ),
        needle,
    );
    refused(
        &edit(request("session"), &["session", "exp"], Some(json!(0))),
        needle,
    );
    refused(
        &edit(request("session"), &["session", "epoch"], Some(json!(-1))),
        needle,
    );
    refused(
        &edit(
            request("session"),
            &["session", "sessionId"],
            Some(json!("")),
        ),
        needle,
    );
    refused(
        &edit(
            request("session"),
            &["session", "id"],
            Some(json!(account())),
        ),
        needle,
    );
    // Closed here (the reference passes extra members through): see the module docs.
    refused(
        &edit(
            request("session"),
            &["session", "profile"],
            Some(json!("x")),
        ),
        needle,
    );
    refused(
        &with(request("renew"), "session", json!({})),
        "renew must not carry session",
    );
}

#[test]
fn retire_parse_errors() {
    let rt = || request("retire");
    refused(
        &without(rt(), "retirement"),
        "retire requires retirement exactly { id, target, opId, serveEpoch }",
    );
    refused(
        &edit(rt(), &["retirement", "extra"], Some(json!(1))),
        "retirement exactly",
    );
    let invalid = "retire requires a requester user nkey";
    refused(
        &edit(rt(), &["retirement", "serveEpoch"], Some(json!(-1))),
        invalid,
    );
    refused(
        &edit(rt(), &["retirement", "target", "role"], Some(json!("x"))),
        invalid,
    );
    refused(
        &edit(rt(), &["retirement", "target", "owner"], None),
        invalid,
    );
    refused(
        &edit(rt(), &["retirement", "id"], Some(json!("nope"))),
        invalid,
    );
    refused(
        &edit(rt(), &["retirement", "opId"], Some(json!("NOT-AN-OP"))),
        "opId must be a lifecycle token",
    );
    let other =
        managed_retirement_op_id(&LifecycleUid::parse("uuuuuuuuuuuuuuuuuuuuuuuuuu").unwrap())
            .unwrap();
    refused(
        &edit(rt(), &["retirement", "opId"], Some(json!(other.as_str()))),
        "derived terminal operation id",
    );
    refused(
        &edit(
            rt(),
            &["retirement", "target", "owner"],
            Some(json!("local")),
        ),
        "derived owner",
    );
    refused(
        &edit(
            rt(),
            &["retirement", "target", "actor"],
            Some(json!("bad.actor")),
        ),
        "single NATS-safe token",
    );
    refused(
        &with(request("renew"), "retirement", json!({})),
        "renew must not carry retirement",
    );
}

#[test]
fn a_platform_retirement_target_is_admitted_only_for_the_platform_holder() {
    let platform = edit(
        request("retire"),
        &["retirement", "target", "owner"],
        Some(json!("p_cccccccccccccccccccccccccc")),
    );
    refused(&platform, "derived owner");
    let r = ManagerAuthorityRequest::parse_for_platform(&platform).unwrap();
    assert_eq!(
        r.retirement().unwrap().target.owner.as_str(),
        "p_cccccccccccccccccccccccccc"
    );
}

#[test]
fn identities_are_exactly_five_user_nkeys() {
    refused(
        &without(request("renew"), "identities"),
        "requires identities",
    );
    refused(
        &with(request("renew"), "identities", json!([])),
        "requires identities",
    );
    refused(
        &edit(request("renew"), &["identities", "goalWriter"], None),
        "identities must contain exactly supervisor, executor, serve, goalWriter, sessionLedger",
    );
    refused(
        &edit(
            request("renew"),
            &["identities", "spare"],
            Some(json!({"id": nkey('Z')})),
        ),
        "identities must contain exactly",
    );
    refused(
        &edit(
            request("renew"),
            &["identities", "serve"],
            Some(json!({"id": nkey('C'), "seed": "S"})),
        ),
        "identities.serve must be exactly { id }",
    );
    refused(
        &edit(
            request("renew"),
            &["identities", "serve"],
            Some(json!({"id": account()})),
        ),
        "identities.serve.id must be a user nkey",
    );
    refused(
        &edit(
            request("renew"),
            &["identities", "serve"],
            Some(json!({"id": format!("U{}", "1".repeat(55))})),
        ),
        "identities.serve.id must be a user nkey",
    );
}

#[test]
fn every_refusal_is_bad_request() {
    // Spot-check across the families above: the code never varies.
    for raw in [
        json!(null),
        without(request("renew"), "identities"),
        with(request("renew"), "x", json!(1)),
    ] {
        assert_eq!(
            ManagerAuthorityRequest::parse(&raw).unwrap_err().code,
            ErrorCode::BadRequest
        );
    }
}

// ---- Proofs: byte compatibility --------------------------------------------------------------

#[test]
fn registration_proof_matches_the_reference_bytes() {
    let r = ManagerAuthorityRequest::parse(&request("activate")).unwrap();
    let p = registration_proof(&owner(), &r).unwrap();
    assert_eq!(p.as_str(), REGISTRATION_PROOF_VECTOR);
    // Identities are hashed in the canonical order whatever order they were sent in.
    let mut reordered = request("activate");
    let ids = identities();
    let rev: serde_json::Map<String, Value> = ids
        .as_object()
        .unwrap()
        .iter()
        .rev()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    reordered["identities"] = Value::Object(rev);
    let r2 = ManagerAuthorityRequest::parse(&reordered).unwrap();
    assert_eq!(registration_proof(&owner(), &r2).unwrap(), p);
    // The owner and the artifacts are bound.
    let other = OwnerToken::parse(OTHER_OWNER).unwrap();
    assert_ne!(registration_proof(&other, &r).unwrap(), p);
    let r3 = ManagerAuthorityRequest::parse(&with(
        request("activate"),
        "contractArtifacts",
        json!([{"urn": "x"}]),
    ))
    .unwrap();
    assert_ne!(registration_proof(&owner(), &r3).unwrap(), p);
}

#[test]
fn current_registration_proof_matches_the_reference_bytes() {
    let r = ManagerAuthorityRequest::parse(&request("renew")).unwrap();
    let secret = ProofSecret::new(SECRET);
    let p = current_registration_proof(
        &secret,
        &owner(),
        &r.envelope,
        RegistrationRevision(7),
        ProcessEpoch(3),
    );
    assert_eq!(p.as_str(), CURRENT_PROOF_VECTOR);
    assert_eq!(
        CURRENT_REGISTRATION_DOMAIN,
        b"cotal/manager-current-registration/v1\0"
    );
    assert!(
        !format!("{secret:?}").contains(SECRET),
        "the secret is never printed"
    );
}

#[test]
fn managed_retirement_op_id_matches_the_reference() {
    let uid = LifecycleUid::parse(TARGET_UID).unwrap();
    assert_eq!(
        managed_retirement_op_id(&uid).unwrap().as_str(),
        RETIRE_OP_VECTOR
    );
}

// ---- The shared current-registration check on the KV model -----------------------------------

fn serve_principal(owner: &str) -> String {
    format!("{owner}.manager_serve_{IID}")
}

/// A world whose manager gate records `gate_owner`'s serve principal, open at `(reg, epoch)`,
/// or frozen after that when `frozen`.
fn manager_world(gate_owner: &str, reg: u64, epoch: u64, frozen: bool) -> ModelWorld {
    let r = ManagerAuthorityRequest::parse(&request("renew")).unwrap();
    let key = r.envelope.gate().unwrap().key();
    assert_eq!(key, format!("epgate.manager.{IID}"));
    let mut gate = EndpointGate::provisioned(principal(&serve_principal(gate_owner))).unwrap();
    // Reopens advance the epoch by at most one (Q-5): walk up to it.
    for step in 1..=epoch.max(1) {
        let op_id = op(u8::try_from(step).unwrap());
        gate = gate.frozen(GateOp::registration(op_id.clone())).unwrap();
        gate = gate
            .reopened(&op_id, coords(step, step.min(epoch), reg, 0))
            .unwrap();
    }
    if frozen {
        gate = gate.frozen(GateOp::registration(op(200))).unwrap();
    }
    let mut world = ModelWorld::default();
    world.kv.put(Store::Auth, &key, &gate.to_bytes());
    world
}

/// A host whose proof secret is [`SECRET`].
fn door_host() -> ManagerHost {
    let key = |n| nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::Account, [n; 32]).unwrap();
    ManagerHost {
        space: cotal_core::names::SpaceName::parse("s1").unwrap(),
        account: AccountKey::parse(&key(40).public_key()).unwrap(),
        signer: std::sync::Arc::new(key(41)),
        proof_secret: ProofSecret::new(SECRET),
        standing_ttl: cotal_core::profiles::StandingTtl::DEFAULT,
        agents: AgentOnboarding {
            sentinel_creds: String::new(),
            agent_bearer_exchange_url: String::new(),
        },
    }
}

fn check(
    world: &mut ModelWorld,
    presented: &str,
    epoch: Option<u64>,
    envelope_from: Value,
) -> Result<(u64, u64), EpError> {
    let r = ManagerAuthorityRequest::parse(&envelope_from).unwrap();
    let proof = RegistrationProof::parse(presented).unwrap();
    let observed = run(
        world,
        script(|cx| {
            let knock = Knock {
                envelope: &r.envelope,
                owner: &owner(),
                account: None,
                epoch: epoch.map(ProcessEpoch),
                proof: Presented::Current(&proof),
            };
            check_registered(cx, &door::RENEW, &door_host(), &knock)
        }),
    )?;
    Ok((
        observed.gate.registration_revision().0,
        observed.gate.process_epoch().0,
    ))
}

fn assert_refused(result: Result<(u64, u64), EpError>, code: ErrorCode, needle: &str) {
    let e = result.expect_err(needle);
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.starts_with("manager-service renew "), "{e}");
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
}

#[test]
fn f91_the_current_proof_at_the_current_epoch_passes() {
    let mut world = manager_world(OWNER, 7, 3, false);
    assert_eq!(
        check(&mut world, CURRENT_PROOF_VECTOR, Some(3), request("renew")),
        Ok((7, 3))
    );
    // `renew` carries no epoch: the proof binds it.
    assert_eq!(
        check(&mut world, CURRENT_PROOF_VECTOR, None, request("renew")),
        Ok((7, 3))
    );
}

#[test]
fn absent_and_frozen_gates_are_failed_precondition() {
    let mut empty = ModelWorld::default();
    assert_refused(
        check(&mut empty, CURRENT_PROOF_VECTOR, Some(3), request("renew")),
        ErrorCode::FailedPrecondition,
        &format!("found no current open manager gate for instance {IID}"),
    );
    let mut frozen = manager_world(OWNER, 7, 3, true);
    assert_refused(
        check(&mut frozen, CURRENT_PROOF_VECTOR, Some(3), request("renew")),
        ErrorCode::FailedPrecondition,
        "found no current open manager gate",
    );
}

#[test]
fn f91_a_foreign_principal_is_not_the_serve_principal() {
    let mut world = manager_world(OTHER_OWNER, 7, 3, false);
    assert_refused(
        check(&mut world, CURRENT_PROOF_VECTOR, Some(3), request("renew")),
        ErrorCode::PermissionDenied,
        &format!(
            "gate belongs to another owner: {} is not serve principal {}",
            serve_principal(OTHER_OWNER),
            serve_principal(OWNER)
        ),
    );
}

#[test]
fn f91_a_stale_epoch_is_a_conflict_naming_both() {
    let mut world = manager_world(OWNER, 7, 4, false);
    assert_refused(
        check(&mut world, CURRENT_PROOF_VECTOR, Some(3), request("renew")),
        ErrorCode::Conflict,
        "serve epoch 3 is stale; current is 4",
    );
    // Without an epoch the same staleness is caught by the proof, which binds it.
    assert_refused(
        check(&mut world, CURRENT_PROOF_VECTOR, None, request("renew")),
        ErrorCode::PermissionDenied,
        "proof does not match current host registration",
    );
}

#[test]
fn f91_forged_superseded_foreign_owner_and_swapped_nkey_proofs_are_permission_denied() {
    let needle = "proof does not match current host registration";
    // Forged.
    let mut world = manager_world(OWNER, 7, 3, false);
    assert_refused(
        check(&mut world, &proof(), Some(3), request("renew")),
        ErrorCode::PermissionDenied,
        needle,
    );
    let envelope = ManagerAuthorityRequest::parse(&request("renew"))
        .unwrap()
        .envelope;
    let secret = ProofSecret::new(SECRET);
    // For a superseded registration revision.
    let superseded = current_registration_proof(
        &secret,
        &owner(),
        &envelope,
        RegistrationRevision(6),
        ProcessEpoch(3),
    );
    assert_refused(
        check(&mut world, superseded.as_str(), Some(3), request("renew")),
        ErrorCode::PermissionDenied,
        needle,
    );
    // Under another owner (the gate itself is ours).
    let other = OwnerToken::parse(OTHER_OWNER).unwrap();
    let foreign = current_registration_proof(
        &secret,
        &other,
        &envelope,
        RegistrationRevision(7),
        ProcessEpoch(3),
    );
    assert_refused(
        check(&mut world, foreign.as_str(), Some(3), request("renew")),
        ErrorCode::PermissionDenied,
        needle,
    );
    // Under another host secret.
    let wrong = current_registration_proof(
        &ProofSecret::new("other"),
        &owner(),
        &envelope,
        RegistrationRevision(7),
        ProcessEpoch(3),
    );
    assert_refused(
        check(&mut world, wrong.as_str(), Some(3), request("renew")),
        ErrorCode::PermissionDenied,
        needle,
    );
    // A swapped nkey: the proof was minted for the registered identities.
    let swapped = edit(
        request("renew"),
        &["identities", "serve", "id"],
        Some(json!(nkey('X'))),
    );
    assert_refused(
        check(&mut world, CURRENT_PROOF_VECTOR, Some(3), swapped),
        ErrorCode::PermissionDenied,
        needle,
    );
    // Another request actor or lifecycle.
    let actor = with(request("renew"), "actor", json!("admin"));
    assert_refused(
        check(&mut world, CURRENT_PROOF_VECTOR, Some(3), actor),
        ErrorCode::PermissionDenied,
        needle,
    );
}

#[test]
fn checks_run_in_order_gate_principal_epoch_proof() {
    // Frozen, foreign and stale at once: the gate state speaks first.
    let mut world = manager_world(OTHER_OWNER, 7, 4, true);
    assert_refused(
        check(&mut world, &proof(), Some(3), request("renew")),
        ErrorCode::FailedPrecondition,
        "no current open",
    );
    // Foreign and stale: the principal speaks before the epoch.
    let mut world = manager_world(OTHER_OWNER, 7, 4, false);
    assert_refused(
        check(&mut world, &proof(), Some(3), request("renew")),
        ErrorCode::PermissionDenied,
        "not serve principal",
    );
    // Stale with a forged proof: the epoch speaks before the proof.
    let mut world = manager_world(OWNER, 7, 4, false);
    assert_refused(
        check(&mut world, &proof(), Some(3), request("renew")),
        ErrorCode::Conflict,
        "is stale",
    );
}

#[test]
fn the_check_is_a_procedure_too() {
    let mut world = manager_world(OWNER, 7, 3, false);
    let envelope = ManagerAuthorityRequest::parse(&request("renew"))
        .unwrap()
        .envelope;
    let presented = RegistrationProof::parse(CURRENT_PROOF_VECTOR).unwrap();
    let observed = run(
        &mut world,
        common::Proc(move |cx: &mut cotal_core::machine::Ctx<'_>| {
            let knock = Knock {
                envelope: &envelope,
                owner: &owner(),
                account: None,
                epoch: Some(ProcessEpoch(3)),
                proof: Presented::Current(&presented),
            };
            check_registered(cx, &door::RENEW, &door_host(), &knock)
        }),
    )
    .unwrap();
    assert_eq!(observed.gate.process_epoch(), ProcessEpoch(3));
    // One KV read: the check costs exactly one round trip.
    assert_eq!(world.log.len(), 1);
}
