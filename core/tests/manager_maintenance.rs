//! `manager-service-maintenance` on the KV model (reference-auth-service §4.7): the closed
//! parser's sentences, the door's refusals in the reference's order, the reference's two
//! maintenance cells, and the answer's exact echo.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod manager_fixture;
mod renewal_support;

use cotal_core::driver::ModelWorld;
use cotal_core::kv::Store;
use cotal_core::ledger::LedgerRow;
use cotal_core::liveness::EvictionEvidence;
use cotal_core::manager::{
    AuthorizeMaintenance, Maintenance, MaintenancePlan, MaintenanceRequest, Supervisor,
};
use cotal_core::names::{
    CredentialId, DerivedOwner, EndpointName, InstanceId, Principal, SourceMember,
};
use cotal_core::{EpError, ErrorCode};
use manager_fixture::{put_gate, Gate};
use renewal_support::*;
use serde_json::{json, Value};

use common::{run, IID};

const OTHER: &str = "oooooooooooooooooooooooooo";

fn goal_holder() -> String {
    format!("{OWNER}.manager_goal_{IID}")
}

/// A maintenance request of `operation` from instance [`IID`] targeting `target`.
fn raw(operation: &str, target: &str, principals: Option<Value>) -> Value {
    let mut r = envelope("prepare", "maintain00000000000000001", IID);
    let o = r.as_object_mut().unwrap();
    o.insert("kind".into(), json!("manager-service-maintenance"));
    o.insert("operation".into(), json!(operation));
    o.insert("targetInstanceId".into(), json!(target));
    if let Some(p) = principals {
        o.insert("principals".into(), p);
    }
    r
}

fn evict(principals: &[&str]) -> Value {
    raw("evict-family-principal", IID, Some(json!(principals)))
}

fn refused(raw: &Value) -> String {
    let e = MaintenanceRequest::parse(raw).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    e.message
}

/// A world whose manager [`IID`] is open for [`OWNER`] with one active family row held by its
/// goal writer.
fn world_with_family(state: Gate) -> ModelWorld {
    let mut world = ModelWorld::default();
    put_gate(&mut world, IID, OWNER, 1, state);
    let row = LedgerRow::endpoint_active(
        EndpointName::parse("manager").unwrap(),
        &InstanceId::parse(IID).unwrap(),
        CredentialId::parse(&format!("sha256-{}", "a".repeat(64))).unwrap(),
        Principal::parse(&goal_holder()).unwrap(),
        vec![SourceMember::parse("root").unwrap()],
        4_000_000_000,
    )
    .unwrap();
    world.kv.put(Store::Auth, &row.key(), &row.to_bytes());
    world
}

fn authorize(
    world: &mut ModelWorld,
    caller: Supervisor,
    raw: &Value,
) -> Result<MaintenancePlan, EpError> {
    let request = MaintenanceRequest::parse(raw).unwrap();
    run(
        world,
        AuthorizeMaintenance {
            host: host(),
            caller,
            request,
        },
    )
}

#[test]
fn the_parser_is_closed_and_words_every_refusal_as_the_reference() {
    let mut with_proof = evict(&["a.b"]);
    with_proof["registrationProof"] = json!(format!("sha256:{}", "0".repeat(64)));
    assert_eq!(
        refused(&with_proof),
        "manager-service maintenance request carries unknown field \"registrationProof\" (the \
         protocol is closed)"
    );
    assert_eq!(
        refused(&raw("evict", IID, Some(json!(["a.b"])))),
        "manager-service maintenance request operation must be \"evict-family-principal\" or \
         \"reconcile-registration\""
    );
    let mut wrong_kind = evict(&["a.b"]);
    wrong_kind["kind"] = json!("manager-service-authority");
    assert_eq!(
        refused(&wrong_kind),
        "manager-service maintenance request must carry { v: 1, kind: \
         \"manager-service-maintenance\" }"
    );
    let bound = "manager-service maintenance request evict-family-principal requires 1 to 256 \
                 distinct non-empty principals";
    assert_eq!(refused(&evict(&[])), bound);
    assert_eq!(refused(&evict(&["a.b", "a.b"])), bound);
    assert_eq!(refused(&evict(&[""])), bound);
    let many: Vec<String> = (0..257).map(|n| format!("o.a{n}")).collect();
    assert_eq!(
        refused(&raw("evict-family-principal", IID, Some(json!(many)))),
        bound
    );
    assert_eq!(refused(&raw("evict-family-principal", IID, None)), bound);
    assert_eq!(
        refused(&raw("reconcile-registration", OTHER, Some(json!(["a.b"])))),
        "manager-service maintenance request reconcile-registration must not carry principals"
    );
    assert_eq!(
        refused(&raw("reconcile-registration", "", None)),
        "manager-service maintenance request requires non-empty targetInstanceId"
    );
    assert!(refused(&raw("reconcile-registration", "NOT-A-TOKEN", None))
        .contains("targetInstanceId must be a lifecycle token"));
    let full: Vec<String> = (0..256).map(|n| format!("o.a{n}")).collect();
    let parsed =
        MaintenanceRequest::parse(&raw("evict-family-principal", IID, Some(json!(full)))).unwrap();
    assert!(matches!(parsed.maintenance, Maintenance::Evict(p) if p.len() == 256));
    let reconcile = MaintenanceRequest::parse(&raw("reconcile-registration", OTHER, None)).unwrap();
    assert_eq!(reconcile.maintenance, Maintenance::Reconcile);
    assert_eq!(reconcile.target.as_str(), OTHER);
}

/// Reference cell "host maintenance admits an enumerated holder in the caller instance family".
#[test]
fn host_maintenance_admits_an_enumerated_holder_in_the_caller_instance_family() {
    let mut world = world_with_family(Gate::Open);
    let plan = authorize(&mut world, supervise(), &evict(&[&goal_holder()])).unwrap();
    assert_eq!(
        plan,
        MaintenancePlan::Evict(vec![Principal::parse(&goal_holder()).unwrap()])
    );
    // A frozen gate (a registration barrier in flight, the very caller) is admitted too.
    let mut frozen = world_with_family(Gate::Frozen);
    assert!(authorize(&mut frozen, supervise(), &evict(&[&goal_holder()])).is_ok());
}

/// Reference cell "host maintenance refuses a principal outside the caller instance family".
#[test]
fn host_maintenance_refuses_a_principal_outside_the_caller_instance_family() {
    let mut world = world_with_family(Gate::Open);
    let foreign = format!("{OWNER}.foreign");
    let e = authorize(&mut world, supervise(), &evict(&[&goal_holder(), &foreign])).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert_eq!(
        e.message,
        format!(
            "manager maintenance may evict only holders enumerated in epcred.manager.{IID}; \
             outside that family: {foreign}"
        )
    );
}

#[test]
fn the_door_refuses_in_the_reference_order() {
    let mut world = world_with_family(Gate::Open);
    let mut other_space = evict(&[&goal_holder()]);
    other_space["space"] = json!("elsewhere");
    let e = authorize(&mut world, supervise(), &other_space).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert_eq!(
        e.message,
        format!("manager maintenance request names space elsewhere, not this host space {SPACE}")
    );

    let owner = DerivedOwner::parse(supervise().owner().as_str()).unwrap();
    let spawn_only = Supervisor::human(owner, vec!["spawn".into(), "admin".into()]);
    let e = authorize(&mut world, spawn_only, &evict(&[&goal_holder()])).unwrap_err();
    assert_eq!(
        e.message,
        "manager maintenance needs scope \"supervise\"; spawn/admin do not imply it"
    );

    let e = authorize(
        &mut world,
        supervise(),
        &raw(
            "evict-family-principal",
            OTHER,
            Some(json!([goal_holder()])),
        ),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert_eq!(
        e.message,
        format!("manager maintenance eviction may target only caller instance {IID}, not {OTHER}")
    );

    let mut empty = ModelWorld::default();
    let e = authorize(&mut empty, supervise(), &evict(&[&goal_holder()])).unwrap_err();
    assert_eq!(e.code, ErrorCode::FailedPrecondition);
    assert_eq!(
        e.message,
        format!("manager maintenance found no live registration gate for instance {IID}")
    );
    let mut retired = world_with_family(Gate::Retired);
    let e = authorize(&mut retired, supervise(), &evict(&[&goal_holder()])).unwrap_err();
    assert_eq!(e.code, ErrorCode::FailedPrecondition);

    // Another owner's gate for this instance id: the caller cannot evict its holders.
    let mut foreign = ModelWorld::default();
    put_gate(&mut foreign, IID, FOREIGN_OWNER, 1, Gate::Open);
    let e = authorize(&mut foreign, supervise(), &evict(&[&goal_holder()])).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert_eq!(
        e.message,
        format!(
            "manager maintenance gate belongs to {FOREIGN_OWNER}.manager_serve_{IID}, not the \
             caller's server-derived serve principal {OWNER}.manager_serve_{IID}"
        )
    );

    // A reconciliation may name another instance of the space; it needs only the gate.
    let mut frozen_other = ModelWorld::default();
    put_gate(&mut frozen_other, OTHER, FOREIGN_OWNER, 1, Gate::Frozen);
    let plan = authorize(
        &mut frozen_other,
        supervise(),
        &raw("reconcile-registration", OTHER, None),
    )
    .unwrap();
    assert!(matches!(plan, MaintenancePlan::Reconcile(g) if g.instance.as_str() == OTHER));
}

#[test]
fn the_answer_echoes_the_request_then_one_result_per_principal_in_request_order() {
    let holder = goal_holder();
    let other = format!("{OWNER}.manager_session_{IID}");
    let request = MaintenanceRequest::parse(&evict(&[&holder, &other])).unwrap();
    let evidence = [
        EvictionEvidence::gone(Principal::parse(&holder).unwrap(), 2),
        EvictionEvidence::unknown(
            Principal::parse(&other).unwrap(),
            0,
            "a server did not answer",
        ),
    ];
    let text = request.eviction_answer(&owner(), &evidence).unwrap();
    let answer: Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<&str> = answer
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "v",
            "kind",
            "operation",
            "space",
            "actor",
            "instanceId",
            "managerLifecycleUid",
            "requestId",
            "identities",
            "targetInstanceId",
            "principals",
            "owner",
            "evictions"
        ]
    );
    let sent = evict(&[&holder, &other]);
    for (k, v) in sent.as_object().unwrap() {
        assert_eq!(&answer[k], v, "{k}");
    }
    assert_eq!(answer["owner"], OWNER);
    assert_eq!(
        answer["evictions"],
        json!([
            {"principal": holder, "kicked": 2, "remaining": 0, "verifiedGone": true,
             "scanComplete": true},
            {"principal": other, "kicked": 0, "remaining": 0, "verifiedGone": false,
             "scanComplete": false, "note": "eviction is unknown: a server did not answer"},
        ])
    );
    // Evidence for other principals than the request named is never answered.
    let swapped = [evidence[1].clone(), evidence[0].clone()];
    assert_eq!(
        request
            .eviction_answer(&owner(), &swapped)
            .unwrap_err()
            .code,
        ErrorCode::Internal
    );
}

/// `reconcile-registration`'s answer: the echo, then the reconcile report in the reference's
/// `GateReconcileReport` shape (a frozen registration whose holder is gone, reopened at the
/// next generation, its active row revoked and both holders verified gone).
#[test]
fn a_reconcile_answer_carries_the_reference_report() {
    let mut world = world_with_family(Gate::Frozen);
    world.set_prober(Box::new(|_| cotal_core::machine::Liveness::Gone));
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    let raw = raw("reconcile-registration", IID, None);
    let request = MaintenanceRequest::parse(&raw).unwrap();
    let MaintenancePlan::Reconcile(gate) = authorize(&mut world, supervise(), &raw).unwrap() else {
        panic!("a reconcile plan")
    };
    let report = run(&mut world, cotal_core::reconcile::ReconcileGate { gate }).unwrap();
    let answer: Value =
        serde_json::from_str(&request.reconcile_answer(&owner(), &report.to_reference_json()))
            .unwrap();
    assert_eq!(answer["owner"], OWNER);
    assert_eq!(answer["targetInstanceId"], IID);
    assert!(answer.get("principals").is_none());
    let r = &answer["reconciliation"];
    let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "endpoint",
            "instanceId",
            "holderPrincipal",
            "opId",
            "freezeToken",
            "before",
            "after",
            "liveness",
            "familyRows",
            "revoked",
            "evicted",
            "holders",
            "holdersVerifiedBeforeAttempt",
            "holdersVerifiedThisAttempt",
            "holdersRemaining",
            "repairCursorCleanup",
            "reopenedAtGeneration"
        ]
    );
    assert_eq!(r["endpoint"], "manager");
    assert_eq!(r["instanceId"], IID);
    assert_eq!(r["holderPrincipal"], format!("{OWNER}.manager_serve_{IID}"));
    assert_eq!(r["liveness"]["state"], "gone");
    assert_eq!(r["familyRows"], 1);
    assert_eq!(r["revoked"], json!([format!("sha256-{}", "a".repeat(64))]));
    assert_eq!(
        r["holders"],
        json!([goal_holder(), format!("{OWNER}.manager_serve_{IID}")])
    );
    assert_eq!(r["evicted"], r["holdersVerifiedThisAttempt"]);
    assert_eq!(r["holdersRemaining"], json!([]));
    assert_eq!(r["repairCursorCleanup"], "deleted");
    let before = r["before"]["generation"].as_u64().unwrap();
    assert_eq!(r["after"]["generation"].as_u64().unwrap(), before + 1);
    assert_eq!(r["reopenedAtGeneration"], r["after"]["generation"]);
}
