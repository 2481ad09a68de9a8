//! The platform control door (reference §7.3), on the KV model: the closed envelope, every
//! refusal in the reference's order with its sentence (each before any write), the derived `p_`
//! owner, and the platform holder the inner operation runs under, including the maintenance
//! guard that keeps a platform holder on its own instance.
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
use cotal_core::manager::{
    AccountKey, AssignmentState, AuthorizeMaintenance, MaintenanceRequest, PlatformAssignment,
    Supervisor,
};
use cotal_core::names::{platform_control_owner, InstanceId, LifecycleUid, SpaceName};
use cotal_core::platform_control::{AuthorizePlatformControl, PlatformControlRequest};
use cotal_core::{EpError, ErrorCode};
use manager_fixture::{put_gate, put_manager, Gate};
use renewal_support::{host, SPACE};
use serde_json::{json, Value};

use common::run;

const IID: &str = "pppppppppppppppppppppppppp";
const MUID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";
const PREDECESSOR: &str = "qqqqqqqqqqqqqqqqqqqqqqqqqq";
const SECRET: [u8; 32] = [9; 32];

fn account() -> AccountKey {
    host().account
}

fn owner() -> cotal_core::names::OwnerToken {
    platform_control_owner(
        &SECRET,
        &SpaceName::parse(SPACE).unwrap(),
        account().as_str(),
    )
}

fn assignment() -> PlatformAssignment {
    PlatformAssignment {
        space: SpaceName::parse(SPACE).unwrap(),
        account_public_key: account(),
        instance_id: InstanceId::parse(IID).unwrap(),
        lifecycle_uid: LifecycleUid::parse(MUID).unwrap(),
        predecessor_instance_id: None,
        assignment_revision: 3,
        state: AssignmentState::Assigned,
    }
}

fn inner(operation: &str) -> Value {
    json!({
        "v": 1, "kind": "manager-service-authority", "operation": operation, "space": SPACE,
        "actor": "cli", "instanceId": IID, "managerLifecycleUid": MUID,
        "requestId": "platform0000000000000001",
    })
}

fn envelope(request: Value) -> Value {
    json!({
        "v": 1, "kind": "platform-control-authority", "space": SPACE,
        "accountPublicKey": account().as_str(), "assignmentRevision": 3, "request": request,
    })
}

fn door(
    raw: &Value,
    assignment: Result<Option<PlatformAssignment>, String>,
) -> AuthorizePlatformControl {
    AuthorizePlatformControl {
        space: SpaceName::parse(SPACE).unwrap(),
        account: account(),
        owner: owner(),
        request: PlatformControlRequest::parse(raw).unwrap(),
        assignment,
    }
}

fn refused(world: &mut ModelWorld, door: AuthorizePlatformControl) -> EpError {
    run(world, door).unwrap_err()
}

#[test]
fn platform_owner_is_derived_per_space_and_account_and_disjoint_from_user_owners() {
    let a = owner();
    assert!(
        a.as_str().starts_with("p_") && a.as_str().len() == 28,
        "{a}"
    );
    assert!(a.is_real_owner());
    assert!(a.as_derived().is_none());
    let other_space = platform_control_owner(
        &SECRET,
        &SpaceName::parse("s2").unwrap(),
        account().as_str(),
    );
    assert_ne!(a, other_space);
    assert_eq!(a, owner(), "deterministic");
}

#[test]
fn the_envelope_is_closed() {
    let bad = |raw: Value| PlatformControlRequest::parse(&raw).unwrap_err();
    let mut with_token = envelope(inner("prepare"));
    with_token["idpToken"] = json!("x");
    let e = bad(with_token);
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("unknown field \"idpToken\""), "{e:?}");
    let mut v2 = envelope(inner("prepare"));
    v2["v"] = json!(2);
    assert!(bad(v2).message.contains("v: 1"));
    let mut revision = envelope(inner("prepare"));
    revision["assignmentRevision"] = json!(-1);
    assert!(bad(revision).message.contains("assignmentRevision"));
    let mut actor = inner("prepare");
    actor["actor"] = json!("mgr");
    assert!(bad(envelope(actor)).message.contains("\"cli\""));
    let mut session = inner("session");
    session["session"] = json!({"id": "x", "endpoint": "e", "sessionId": "s", "epoch": 0});
    assert!(bad(envelope(session))
        .message
        .contains("inner session must be exactly"));
    let managed = bad(envelope(
        json!({"kind": "manager-managed-agent-enrollment"}),
    ));
    assert_eq!(managed.code, ErrorCode::Unimplemented);
    let unknown = bad(envelope(
        json!({"kind": "delegated-user-intent", "actor": "cli"}),
    ));
    assert!(
        unknown.message.contains("unknown inner kind"),
        "{unknown:?}"
    );
}

#[test]
fn every_refusal_comes_in_the_reference_order_before_any_write() {
    let mut world = ModelWorld::default();
    let raw = envelope(inner("prepare"));

    let mut other = raw.clone();
    other["space"] = json!("s2");
    let e = refused(&mut world, door(&other, Ok(Some(assignment()))));
    assert!(e
        .message
        .contains("another space or account than this authority context"));

    let e = refused(&mut world, door(&raw, Err("backend down".into())));
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert!(e.message.contains("assignment is unreadable: backend down"));
    for none in [
        None,
        Some(PlatformAssignment {
            state: AssignmentState::Revoked,
            ..assignment()
        }),
    ] {
        let e = refused(&mut world, door(&raw, Ok(none)));
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        assert!(e.message.contains("no current assignment"), "{e:?}");
    }

    let moved = PlatformAssignment {
        assignment_revision: 4,
        ..assignment()
    };
    let e = refused(&mut world, door(&raw, Ok(Some(moved))));
    assert!(e.message.contains("account or revision"), "{e:?}");

    let elsewhere = PlatformAssignment {
        instance_id: InstanceId::parse(PREDECESSOR).unwrap(),
        ..assignment()
    };
    let e = refused(&mut world, door(&raw, Ok(Some(elsewhere))));
    assert!(e.message.contains("instance or lifecycle"), "{e:?}");

    let mut inner_space = inner("prepare");
    inner_space["space"] = json!("s2");
    let e = refused(
        &mut world,
        door(&envelope(inner_space), Ok(Some(assignment()))),
    );
    assert!(
        e.message.contains("inner request names another space"),
        "{e:?}"
    );

    // The assigned instance registered by a human owner.
    put_gate(
        &mut world,
        IID,
        "u_cccccccccccccccccccccccccc",
        1,
        Gate::Open,
    );
    let e = refused(&mut world, door(&raw, Ok(Some(assignment()))));
    assert!(
        e.message.contains("registered to another principal"),
        "{e:?}"
    );
    let before = world.kv.last_sequence(cotal_core::kv::Store::Auth);
    let e = refused(&mut world, door(&raw, Ok(Some(assignment()))));
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert_eq!(
        world.kv.last_sequence(cotal_core::kv::Store::Auth),
        before,
        "a refusal writes nothing"
    );
}

#[test]
fn a_predecessor_still_registered_or_frozen_blocks_prepare_and_activate_only() {
    let mut world = ModelWorld::default();
    let with_predecessor = PlatformAssignment {
        predecessor_instance_id: Some(InstanceId::parse(PREDECESSOR).unwrap()),
        ..assignment()
    };
    put_manager(
        &mut world,
        PREDECESSOR,
        "u_cccccccccccccccccccccccccc",
        Gate::Open,
    );
    for operation in ["prepare", "activate"] {
        let raw = envelope(inner(operation));
        let e = refused(&mut world, door(&raw, Ok(Some(with_predecessor.clone()))));
        assert_eq!(e.code, ErrorCode::FailedPrecondition, "{operation}");
        assert!(e.message.contains("still registered or frozen"), "{e:?}");
    }
    let renew = envelope(inner("renew"));
    let holder = run(&mut world, door(&renew, Ok(Some(with_predecessor)))).unwrap();
    assert_eq!(holder.owner(), &owner());
}

#[test]
fn the_platform_holder_supervises_under_its_assignment_and_repairs_only_its_own_instance() {
    let mut world = ModelWorld::default();
    let holder = run(
        &mut world,
        door(&envelope(inner("prepare")), Ok(Some(assignment()))),
    )
    .unwrap();
    assert!(holder.supervises());
    assert_eq!(holder.platform_assignment(), Some(&assignment()));
    assert!(Supervisor::platform(
        cotal_core::names::OwnerToken::parse("u_cccccccccccccccccccccccccc").unwrap(),
        assignment()
    )
    .is_err());

    // Reconciling another instance's gate: refused for the platform holder before any read.
    let mut raw = renewal_support::envelope("prepare", "maint0000000000000000001", IID);
    let map = raw.as_object_mut().unwrap();
    map.insert("kind".into(), json!("manager-service-maintenance"));
    map.insert("operation".into(), json!("reconcile-registration"));
    map.insert("managerLifecycleUid".into(), json!(MUID));
    map.insert("targetInstanceId".into(), json!(PREDECESSOR));
    let reconcile = MaintenanceRequest::parse(&raw).unwrap();
    let e = run(
        &mut world,
        AuthorizeMaintenance {
            host: host(),
            caller: holder,
            request: reconcile,
        },
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(
        e.message.contains("may target only caller instance"),
        "{e:?}"
    );
}
