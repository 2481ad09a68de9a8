//! The `session-caller` check on the KV model (reference §3.5, §8.4; SPEC §13.6, F72–F74): a
//! redeemed session row in the sessions store, selected by a signed grant's coordinates, confers
//! its caller rails only while it is active, held by the bearer's holder at the bearer's
//! lifecycle, at the claim's endpoint and serving epoch, unexpired, and served by a manager that
//! is a candidate of the holder's owner at the row's epoch. Cells named after the reference's
//! native-participant cells keep their names.
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
use cotal_core::gate::ProcessEpoch;
use cotal_core::jwt::UnixSeconds;
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::names::{ActorToken, LifecycleUid, Principal, SessionId};
use cotal_core::profiles::{session_caller, ConnId, ConnectTtl, SessionCallerBinding, ViewBinding};
use cotal_core::session::{RedeemedSession, SessionCoordinates, SessionRow, VerifySession};
use cotal_core::{EpError, ErrorCode};
use serde_json::{json, Value};

use common::run;
use manager_fixture::{put_manager, space, world, Gate, EPOCH};
use renewal_support::{FOREIGN_OWNER, OWNER};

const IID: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";
const SID: &str = "sessAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const UID: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
const SIG: &str = "c2lnbmF0dXJlLW9mLXRoZS1ncmFudA";
const NOW_MS: u64 = 1_780_000_000_000;
const EXP_MS: u64 = NOW_MS + 600_000 + 789;

fn holder() -> Principal {
    Principal::new(
        manager_fixture::owner_token(OWNER),
        ActorToken::parse("cli").unwrap(),
    )
}

fn uid() -> LifecycleUid {
    LifecycleUid::parse(UID).unwrap()
}

fn sid() -> SessionId {
    SessionId::parse(SID).unwrap()
}

/// The row as the manager's redemption writes it (its member order), `active`.
fn row() -> Value {
    json!({
        "sessionId": SID,
        "endpoint": "manager",
        "serving": {"instanceId": IID, "epoch": EPOCH},
        "holder": {"principal": holder().key(), "lifecycleUid": UID},
        "grantSig": SIG,
        "credCaller": format!("{SID}.c"),
        "credServing": "serving-cred",
        "revoked": {"caller": false, "serving": false},
        "state": "active",
        "exp": EXP_MS,
    })
}

fn put_row(world: &mut ModelWorld, row: &Value) {
    world.kv.put(
        Store::Sessions,
        &format!("session.{SID}"),
        &serde_json::to_vec(row).unwrap(),
    );
}

/// The grant the manager's attach answered: more than the coordinates, which is all it is.
fn grant() -> Value {
    json!({
        "v": 1, "sessionId": SID, "space": "s1", "endpoint": "manager",
        "subjects": {"in": "x", "out": "y"},
        "holder": {"id": holder().key(), "lifecycleUid": UID, "processEpoch": 0},
        "serving": {"instanceId": IID, "epoch": EPOCH}, "window": 64,
        "iat": NOW_MS, "exp": EXP_MS, "nonce": "nonce-0001", "issuer": {"keyId": "k"},
        "sig": SIG,
    })
}

/// A served manager and its active session.
fn served() -> ModelWorld {
    let mut world = world();
    put_manager(&mut world, IID, OWNER, Gate::Open);
    put_row(&mut world, &row());
    world
}

fn verify_as(
    world: &mut ModelWorld,
    who: Principal,
    claim: SessionCoordinates,
    now_ms: u64,
) -> Result<RedeemedSession, EpError> {
    run(
        world,
        VerifySession {
            space: space(),
            holder: who,
            lifecycle_uid: uid(),
            claim,
            now_ms,
        },
    )
}

fn verify(world: &mut ModelWorld) -> Result<RedeemedSession, EpError> {
    let claim = SessionCoordinates::from_grant(&grant()).unwrap();
    verify_as(world, holder(), claim, NOW_MS)
}

fn refused(result: Result<RedeemedSession, EpError>, code: ErrorCode, words: &[&str]) {
    let e = result.unwrap_err();
    assert_eq!(e.code, code, "{e}");
    for w in words {
        assert!(e.message.contains(w), "{w:?} missing from: {e}");
    }
}

fn denied(result: Result<RedeemedSession, EpError>, words: &[&str]) {
    let mut all = vec!["session redemption refused: "];
    all.extend_from_slice(words);
    refused(result, ErrorCode::PermissionDenied, &all);
}

// ---- the holder's session -------------------------------------------------------------------

#[test]
fn real_redeemed_session_exchanges_for_holder_session_caller_bearer() {
    let mut world = served();
    let held = verify(&mut world).unwrap();
    assert_eq!(held.session_id, sid());
    assert_eq!(held.endpoint.as_str(), "manager");
    assert_eq!(held.epoch, ProcessEpoch(EPOCH));
    assert_eq!(
        held.exp_secs,
        EXP_MS / 1000,
        "the row's expiry, rounded down"
    );
    // The callout's re-check carries no grant: the same session, from the bearer's claim.
    let claim = SessionCoordinates::from_claim("manager", SID, EPOCH).unwrap();
    assert_eq!(
        verify_as(&mut world, holder(), claim, NOW_MS).unwrap(),
        held
    );
}

#[test]
fn other_owner_cannot_redeem_held_participant_terminal_authority() {
    let mut world = served();
    let other = Principal::new(
        manager_fixture::owner_token(FOREIGN_OWNER),
        ActorToken::parse("cli").unwrap(),
    );
    let claim = SessionCoordinates::from_grant(&grant()).unwrap();
    denied(
        verify_as(&mut world, other, claim, NOW_MS),
        &["was issued to", &holder().key()],
    );
}

#[test]
fn f72_an_issuing_row_confers_nothing() {
    let mut world = served();
    let mut issuing = row();
    issuing["state"] = json!("issuing");
    put_row(&mut world, &issuing);
    denied(verify(&mut world), &["\"issuing\", not active"]);
}

#[test]
fn f73_a_terminal_row_confers_nothing_again() {
    for state in ["closed", "expired", "superseded", "retired"] {
        let mut world = served();
        let mut ended = row();
        ended["state"] = json!(state);
        put_row(&mut world, &ended);
        denied(verify(&mut world), &[state, "not active"]);
    }
}

#[test]
fn a_grant_the_session_was_not_redeemed_with_is_refused() {
    let mut world = served();
    let mut forged = grant();
    forged["sig"] = json!("another-signature");
    let claim = SessionCoordinates::from_grant(&forged).unwrap();
    denied(
        verify_as(&mut world, holder(), claim, NOW_MS),
        &["not the one this session was redeemed with"],
    );
}

#[test]
fn a_successor_lifecycle_holds_nothing_of_its_predecessors_session() {
    let mut world = served();
    let claim = SessionCoordinates::from_grant(&grant()).unwrap();
    let result = run(
        &mut world,
        VerifySession {
            space: space(),
            holder: holder(),
            lifecycle_uid: LifecycleUid::parse("vvvvvvvvvvvvvvvvvvvvvvvvvv").unwrap(),
            claim,
            now_ms: NOW_MS,
        },
    );
    denied(result, &["lifecycle is not the session holder's"]);
}

#[test]
fn another_endpoint_or_serving_epoch_is_refused() {
    let mut world = served();
    let claim = SessionCoordinates::from_claim("deploy", SID, EPOCH).unwrap();
    denied(
        verify_as(&mut world, holder(), claim, NOW_MS),
        &["on endpoint manager, not deploy"],
    );
    let claim = SessionCoordinates::from_claim("manager", SID, EPOCH + 1).unwrap();
    denied(
        verify_as(&mut world, holder(), claim, NOW_MS),
        &["pinned to serving epoch 2, not 3"],
    );
}

#[test]
fn f74_an_expired_session_is_refused() {
    let mut world = served();
    let claim = SessionCoordinates::from_grant(&grant()).unwrap();
    denied(
        verify_as(&mut world, holder(), claim.clone(), EXP_MS),
        &["expired at"],
    );
    assert!(verify_as(&mut world, holder(), claim, EXP_MS - 1).is_ok());
}

#[test]
fn a_session_of_a_fenced_manager_confers_nothing() {
    let mut world = world();
    put_manager(&mut world, IID, OWNER, Gate::Frozen);
    put_row(&mut world, &row());
    denied(verify(&mut world), &["serving manager", IID, "not open"]);
}

#[test]
fn f73_a_session_dies_with_its_serving_epoch() {
    // The manager restarted: its gate and status run at EPOCH, the session was redeemed at an
    // earlier epoch, and the claim names that earlier epoch consistently.
    let mut world = served();
    let mut earlier = row();
    earlier["serving"]["epoch"] = json!(EPOCH - 1);
    put_row(&mut world, &earlier);
    let claim = SessionCoordinates::from_claim("manager", SID, EPOCH - 1).unwrap();
    denied(
        verify_as(&mut world, holder(), claim, NOW_MS),
        &["serving manager's epoch is 2, not the session's 1"],
    );
}

#[test]
fn a_session_served_by_another_owners_manager_is_refused() {
    let mut world = world();
    put_manager(&mut world, IID, FOREIGN_OWNER, Gate::Open);
    put_row(&mut world, &row());
    denied(verify(&mut world), &["not this owner's"]);
}

#[test]
fn a_session_of_an_endpoint_other_than_the_manager_is_refused() {
    let mut world = served();
    let mut elsewhere = row();
    elsewhere["endpoint"] = json!("deploy");
    put_row(&mut world, &elsewhere);
    let claim = SessionCoordinates::from_claim("deploy", SID, EPOCH).unwrap();
    denied(
        verify_as(&mut world, holder(), claim, NOW_MS),
        &["manager's sessions only"],
    );
}

// ---- absence, markers, reads ----------------------------------------------------------------

#[test]
fn no_row_or_a_deleted_one_is_refused() {
    let mut world = world();
    put_manager(&mut world, IID, OWNER, Gate::Open);
    denied(verify(&mut world), &["no session row for", SID]);
    put_row(&mut world, &row());
    world
        .kv
        .delete_unpinned(Store::Sessions, &format!("session.{SID}"));
    denied(verify(&mut world), &["is deleted"]);
}

#[test]
fn an_unanswered_read_fails_closed() {
    let mut world = served();
    world.kv.inject(
        Trigger::new(Store::Sessions, KvOp::Get, "session."),
        Fault::Unavailable,
    );
    refused(
        verify(&mut world),
        ErrorCode::Unavailable,
        &["fails closed"],
    );
    assert!(verify(&mut world).is_ok());
}

// ---- the row and the grant ------------------------------------------------------------------

#[test]
fn the_row_schema_is_closed_and_names_its_own_key() {
    let bytes = |v: &Value| serde_json::to_vec(v).unwrap();
    let parsed = SessionRow::parse(&bytes(&row()), &sid()).unwrap();
    assert_eq!(parsed.holder, holder());
    assert_eq!(parsed.exp_ms, EXP_MS);
    let mut extra = row();
    extra["grantedTo"] = json!("someone");
    assert!(SessionRow::parse(&bytes(&extra), &sid())
        .unwrap_err()
        .message
        .contains("unknown field"));
    let elsewhere = SessionId::parse("sessBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB").unwrap();
    assert!(SessionRow::parse(&bytes(&row()), &elsewhere)
        .unwrap_err()
        .message
        .contains("points at another key"));
    for (field, bad) in [
        ("state", json!("paused")),
        ("exp", json!(-1)),
        ("revoked", json!({"caller": "no", "serving": false})),
        ("serving", json!({"instanceId": IID})),
    ] {
        let mut broken = row();
        broken[field] = bad;
        assert_eq!(
            SessionRow::parse(&bytes(&broken), &sid()).unwrap_err().code,
            ErrorCode::Internal,
            "{field}"
        );
    }
}

#[test]
fn a_grant_without_its_coordinates_is_not_a_session_grant() {
    let claim = SessionCoordinates::from_grant(&grant()).unwrap();
    assert_eq!(claim.session_id, sid());
    assert_eq!(claim.grant_sig.as_deref(), Some(SIG));
    for broken in [
        json!("a string"),
        json!({"sessionId": SID, "endpoint": "manager", "serving": {"epoch": 1}}),
        json!({"sessionId": SID, "endpoint": "manager", "sig": SIG}),
        json!({"sessionId": "short", "endpoint": "manager", "serving": {"epoch": 1}, "sig": SIG}),
    ] {
        let e = SessionCoordinates::from_grant(&broken).unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        assert!(
            e.message.starts_with("sessionGrant is not a session grant"),
            "{e}"
        );
    }
    assert!(SessionCoordinates::from_claim("manager", "short", 1).is_err());
}

// ---- the profile ----------------------------------------------------------------------------

#[test]
fn session_caller_rails_are_the_one_sessions_in_and_out() {
    let held = verify(&mut served()).unwrap();
    let profile = session_caller(&SessionCallerBinding {
        view: ViewBinding {
            space: space(),
            principal: holder(),
            conn_nonce: ConnId::parse("nonce123").unwrap(),
            ttl: ConnectTtl::until(UnixSeconds(100), UnixSeconds(400)).unwrap(),
        },
        endpoint: held.endpoint,
        session: held.session_id,
        epoch: held.epoch,
    })
    .unwrap();
    let rail = format!("cotal.s1.eps.manager.{SID}.{EPOCH}");
    assert_eq!(profile.name, "session-caller");
    assert_eq!(profile.ttl_seconds, 300);
    assert_eq!(profile.permissions.publish.allow, [format!("{rail}.in")]);
    assert_eq!(
        profile.permissions.subscribe.allow,
        [format!("{rail}.out"), "_INBOX_nonce123.>".to_owned()]
    );
}
