//! The three current-registration doors a restarted remote manager knocks on (reference-auth-
//! service §4.7), on the KV model: `manager-admin-authorization`, `manager-goal-index-scan` and
//! `manager-retained-agent-validation`. Their closed parsers and bounds, every refusal of the
//! one door with its exact sentence (bad shape, no `supervise`, another owner, stale epoch,
//! wrong proof, a frozen, retired or absent gate), the reference smokes' cells by name, and
//! each answer's exact shape.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod enrollment_common;
mod manager_fixture;
mod renewal_support;

use cotal_core::actors::authorize::token_digest;
use cotal_core::actors::{
    ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, RowSpace, TokenHash,
};
use cotal_core::driver::{ModelWorld, World};
use cotal_core::kv::Store;
use cotal_core::machine::{Effect, Machine, Replay, Step};
use cotal_core::manager::{
    AdminAuthorization, AdminAuthorizationRequest, AuthorizeGoalIndexScan, AuthorizeManagerAdmin,
    GoalIndexScan, GoalIndexScanRequest, RetainedAgentValidation, RetainedValidationRequest,
    ScanGoalIndex, Supervisor, ValidateRetainedAgent,
};
use cotal_core::names::{ActorToken, DerivedOwner, LifecycleUid, OwnerToken, Principal};
use cotal_core::{EpError, ErrorCode};
use enrollment_common::{
    cli_row, grant_cli, host, identities, proof_for, world, ABSENT_IID, EPOCH, FOREIGN_IID,
    FROZEN_IID, IID, MUID, OTHER_OWNER, OWNER, REVISION, SPACE, TARGET_UID,
};
use manager_fixture::Gate;
use serde_json::{json, Value};

use common::run;

/// A manager instance whose gate was retired (26 × `r`).
const RETIRED_IID: &str = "rrrrrrrrrrrrrrrrrrrrrrrrrr";
/// The user a manager asks about, and its lifecycle.
const OPERATOR_UID: &str = "oooooooooooooooooooooooooo";
/// The retained agent's standing token and the space's sentinel credentials (the fixture host's).
const TOKEN: &str = "actor-secret";
const SENTINEL: &str = "-----BEGIN NATS USER JWT-----sentinel";

fn supervise() -> Supervisor {
    holder(&["supervise"])
}

fn holder(scope: &[&str]) -> Supervisor {
    Supervisor::human(
        DerivedOwner::parse(OWNER).unwrap(),
        scope.iter().map(|s| s.to_string()).collect(),
    )
}

/// The current-registration envelope of `kind` for instance `iid`, with the proof the host
/// issued for the fixture's registration (revision 9, epoch 4).
fn envelope(kind: &str, iid: &str) -> Value {
    json!({
        "v": 1, "kind": kind, "space": SPACE, "actor": "cli", "instanceId": iid,
        "managerLifecycleUid": MUID, "requestId": "doors0000000000000000000001",
        "registrationProof": proof_for(iid, REVISION, EPOCH, OWNER), "serveEpoch": EPOCH,
        "identities": identities(),
    })
}

fn with(mut raw: Value, key: &str, value: Value) -> Value {
    raw[key] = value;
    raw
}

fn without(mut raw: Value, key: &str) -> Value {
    raw.as_object_mut().unwrap().remove(key);
    raw
}

fn refused_with(e: &EpError, code: ErrorCode, message: &str) {
    assert_eq!(e.code, code, "{e}");
    assert_eq!(e.message, message);
}

fn keys_of(answer: &Value) -> Vec<&str> {
    answer
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// A world with the fixture's gates plus a retired one.
fn doors_world() -> ModelWorld {
    let mut world = world();
    manager_fixture::put_gate(&mut world, RETIRED_IID, OWNER, REVISION, Gate::Retired);
    world
}

/// The door refusals every current-registration door shares, for requests of `kind` built by
/// `request(iid)` and run by `knock`: `name` leads each sentence.
fn the_door_refuses_as_the_reference(
    name: &str,
    request: impl Fn(&str) -> Value,
    knock: impl Fn(&mut ModelWorld, Supervisor, &Value) -> Result<(), EpError>,
) {
    let mut world = doors_world();
    let no_gate =
        |iid: &str| format!("{name} found no current open manager gate for instance {iid}");
    for iid in [ABSENT_IID, FROZEN_IID, RETIRED_IID] {
        let e = knock(&mut world, supervise(), &request(iid)).unwrap_err();
        refused_with(&e, ErrorCode::FailedPrecondition, &no_gate(iid));
    }
    let e = knock(
        &mut world,
        supervise(),
        &with(request(IID), "serveEpoch", json!(EPOCH - 1)),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::Conflict,
        &format!(
            "{name} serve epoch {} is stale; current is {EPOCH}",
            EPOCH - 1
        ),
    );
    // A proof for a superseded registration revision, and a forged one.
    for proof in [
        proof_for(IID, REVISION - 1, EPOCH, OWNER),
        format!("sha256:{}", "f".repeat(64)),
    ] {
        let e = knock(
            &mut world,
            supervise(),
            &with(request(IID), "registrationProof", json!(proof)),
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
        assert!(e
            .message
            .starts_with(&format!("{name} proof does not match")));
    }
    // Identity drift: the proof binds the held nkeys.
    let mut drift = request(IID);
    drift["identities"]["serve"]["id"] = json!(format!("U{}", "Z".repeat(55)));
    let e = knock(&mut world, supervise(), &drift).unwrap_err();
    assert!(e
        .message
        .starts_with(&format!("{name} proof does not match")));
}

// ---- manager-admin-authorization -------------------------------------------------------------

fn admin_raw(caller: Value) -> Value {
    with(
        envelope("manager-admin-authorization", IID),
        "caller",
        caller,
    )
}

fn operator(owner: &str, uid: &str) -> Value {
    json!({"owner": owner, "actor": "operator", "lifecycleUid": uid})
}

fn admin_for(iid: &str) -> Value {
    with(
        envelope("manager-admin-authorization", iid),
        "caller",
        operator(OWNER, OPERATOR_UID),
    )
}

fn admin(
    world: &mut ModelWorld,
    holder: Supervisor,
    raw: &Value,
) -> Result<AdminAuthorization, EpError> {
    run(
        world,
        AuthorizeManagerAdmin {
            host: host(),
            holder,
            request: AdminAuthorizationRequest::parse(raw)?,
        },
    )
}

/// Grants `<OWNER>.operator` `scope` at lifecycle `uid` (an operator's interactive grant).
fn grant_operator(world: &ModelWorld, scope: &[&str], uid: &str) {
    let mut row = cli_row(scope, &[], &[]);
    row.actor = ActorToken::parse("operator").unwrap();
    row.lifecycle_uid = Some(LifecycleUid::parse(uid).unwrap());
    grant_cli(world, row);
}

fn operator_principal() -> Principal {
    Principal::parse(&format!("{OWNER}.operator")).unwrap()
}

fn authorized(world: &mut ModelWorld, raw: &Value) -> bool {
    admin(world, supervise(), raw).unwrap().authorized
}

/// Reference cell "parser refuses unknown request and caller fields", with the parser's other
/// sentences.
#[test]
fn parser_refuses_unknown_request_and_caller_fields() {
    let refused = |raw: &Value| {
        let e = AdminAuthorizationRequest::parse(raw).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
        e.message
    };
    let ok = admin_raw(operator(OWNER, OPERATOR_UID));
    assert_eq!(
        refused(&with(ok.clone(), "extra", json!(true))),
        "manager admin authorization request carries unknown field \"extra\" (the protocol is \
         closed)"
    );
    let mut extra = ok.clone();
    extra["caller"]["extra"] = json!(true);
    assert_eq!(
        refused(&extra),
        "manager admin authorization request caller must contain exactly owner, actor, \
         lifecycleUid"
    );
    assert_eq!(
        refused(&with(ok.clone(), "kind", json!("manager-goal-index-scan"))),
        "manager admin authorization request must carry { v: 1, kind: \
         \"manager-admin-authorization\" }"
    );
    assert_eq!(
        refused(&without(ok.clone(), "caller")),
        "manager admin authorization request requires caller"
    );
    assert_eq!(
        refused(&without(ok.clone(), "serveEpoch")),
        "manager admin authorization request serveEpoch must be a non-negative safe integer"
    );
    assert_eq!(
        refused(&with(ok.clone(), "registrationProof", json!("sha256:nope"))),
        "manager admin authorization request requires a sha256 registrationProof"
    );
    assert_eq!(
        refused(&with(ok.clone(), "caller", operator(OWNER, ""))),
        "manager admin authorization request requires non-empty caller.lifecycleUid"
    );
    assert!(
        refused(&with(ok.clone(), "caller", operator("local", OPERATOR_UID)))
            .starts_with("manager admin authorization request derived owner \"local\" is refused")
    );
    assert!(refused(&with(ok, "caller", operator(OWNER, "NOT-A-UID")))
        .starts_with("manager admin authorization request lifecycle uid"));
}

/// Reference cell "current same-owner same-lifecycle admin row returns only authorized true":
/// the answer is the request echoed, the owner, and the boolean, nothing more.
#[test]
fn current_same_owner_same_lifecycle_admin_row_returns_only_authorized_true() {
    let mut world = doors_world();
    grant_operator(&world, &["spawn", "admin"], OPERATOR_UID);
    let raw = admin_for(IID);
    let answer = admin(&mut world, supervise(), &raw).unwrap();
    assert!(answer.authorized);
    let wire: Value = serde_json::from_str(&answer.to_json()).unwrap();
    assert_eq!(
        keys_of(&wire),
        [
            "v",
            "kind",
            "space",
            "actor",
            "instanceId",
            "managerLifecycleUid",
            "requestId",
            "registrationProof",
            "serveEpoch",
            "identities",
            "caller",
            "owner",
            "authorized"
        ]
    );
    let mut expected = raw.clone();
    expected["owner"] = json!(OWNER);
    expected["authorized"] = json!(true);
    assert_eq!(wire, expected);
}

/// Reference cell "narrowing and revoking are observed fresh on the next call".
#[test]
fn narrowing_and_revoking_are_observed_fresh_on_the_next_call() {
    let mut world = doors_world();
    let raw = admin_for(IID);
    grant_operator(&world, &["spawn"], OPERATOR_UID);
    assert!(!authorized(&mut world, &raw));
    grant_operator(&world, &["admin"], OPERATOR_UID);
    assert!(authorized(&mut world, &raw));
    let revoked = world.actors.execute(&ActorsRequest::RevokeInteractive {
        principal: operator_principal(),
    });
    assert_eq!(revoked, ActorsOutcome::Revoked(true));
    assert!(!authorized(&mut world, &raw));
}

/// Reference cell "absent, wrong-owner, and stale-lifecycle callers share false without a
/// reason"; a caller of another owner is answered without reading the ledger.
#[test]
fn absent_wrong_owner_and_stale_lifecycle_callers_share_false_without_a_reason() {
    let mut world = doors_world();
    grant_operator(&world, &["admin"], OPERATOR_UID);
    let absent = json!({"owner": OWNER, "actor": "absent", "lifecycleUid": OPERATOR_UID});
    let stale = operator(OWNER, &"s".repeat(26));
    let answers: Vec<String> = [absent, operator(OTHER_OWNER, OPERATOR_UID), stale]
        .into_iter()
        .map(|caller| {
            let raw = admin_raw(caller);
            let answer = admin(&mut world, supervise(), &raw).unwrap();
            assert!(!answer.authorized);
            let wire: Value = serde_json::from_str(&answer.to_json()).unwrap();
            assert_eq!(wire["authorized"], json!(false));
            assert_eq!(keys_of(&wire).len(), 13, "no reason member: {wire}");
            answer.to_json()
        })
        .collect();
    assert_eq!(answers.len(), 3);
    let before = world.actors.requests_served();
    admin(
        &mut world,
        supervise(),
        &admin_raw(operator(OTHER_OWNER, OPERATOR_UID)),
    )
    .unwrap();
    assert_eq!(world.actors.requests_served(), before, "no ledger read");
}

/// Reference cell "closed gate, stale epoch, gate principal drift, proof drift, identity drift,
/// and missing supervise throw", with the exact sentences and the space check.
#[test]
fn closed_gate_stale_epoch_gate_principal_drift_proof_drift_identity_drift_and_missing_supervise_throw(
) {
    let knock = |world: &mut ModelWorld, holder: Supervisor, raw: &Value| {
        admin(world, holder, raw).map(|_| ())
    };
    the_door_refuses_as_the_reference("manager admin authorization", admin_for, knock);
    let mut world = doors_world();
    let e = admin(&mut world, supervise(), &admin_for(FOREIGN_IID)).unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        &format!(
            "manager admin authorization gate belongs to {OTHER_OWNER}.manager_serve_{FOREIGN_IID}, \
             not {OWNER}.manager_serve_{FOREIGN_IID}"
        ),
    );
    let e = admin(
        &mut world,
        supervise(),
        &with(
            admin_for(IID),
            "registrationProof",
            json!(format!("sha256:{}", "f".repeat(64))),
        ),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        "manager admin authorization proof does not match the current host registration",
    );
    for scope in [&[][..], &["spawn", "admin"][..]] {
        let e = admin(&mut world, holder(scope), &admin_for(IID)).unwrap_err();
        refused_with(
            &e,
            ErrorCode::PermissionDenied,
            "manager admin authorization needs manager scope \"supervise\"",
        );
    }
    let e = admin(
        &mut world,
        supervise(),
        &with(admin_for(IID), "space", json!("elsewhere")),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        &format!("manager admin authorization names space elsewhere, not this host space {SPACE}"),
    );
}

/// Reference cell "corrupt and unavailable authoritative ledger state throw" (the model's
/// ledger cannot be made unreadable; the file ledger's unavailable arm is the same mapping).
#[test]
fn corrupt_and_unavailable_authoritative_ledger_state_throw() {
    let mut world = doors_world();
    world
        .actors
        .put_raw(RowSpace::Interactive, &operator_principal(), b"not-json");
    let e = admin(&mut world, supervise(), &admin_for(IID)).unwrap_err();
    assert_eq!(e.code, ErrorCode::Internal, "{e}");
    // A principal granted in both spaces is a broken ledger: refused, never `false`.
    let mut both = doors_world();
    grant_operator(&both, &["admin"], OPERATOR_UID);
    let mut managed = cli_row(&[], &[], &[]);
    managed.actor = ActorToken::parse("operator").unwrap();
    managed.token_hash = Some(TokenHash::parse(&"a".repeat(64)).unwrap());
    both.actors.put_raw(
        RowSpace::Managed,
        &operator_principal(),
        &managed.to_file_bytes(),
    );
    assert_eq!(
        admin(&mut both, supervise(), &admin_for(IID))
            .unwrap_err()
            .code,
        ErrorCode::Internal
    );
}

// ---- manager-goal-index-scan -----------------------------------------------------------------

fn scan_for(iid: &str) -> Value {
    envelope("manager-goal-index-scan", iid)
}

fn scan(world: &mut ModelWorld, caller: Supervisor, raw: &Value) -> Result<GoalIndexScan, EpError> {
    let request = GoalIndexScanRequest::parse(raw)?;
    let owner = caller.owner().clone();
    run(
        world,
        AuthorizeGoalIndexScan {
            host: host(),
            caller,
            request: request.clone(),
        },
    )?;
    run(world, ScanGoalIndex { owner, request })
}

/// An index entry of `owner`'s `cli` caller for goal `goal`, as the goal writer writes it.
fn entry(owner: &str, goal: &str) -> Value {
    json!({
        "v": 1, "endpoint": "manager", "owner": owner, "actor": "cli",
        "uid": "cccccccccccccccccccccccccc", "goalId": goal, "iid": IID,
    })
}

fn entry_key(owner: &str, goal: &str) -> String {
    format!("goalidx.manager.{owner}.cli.cccccccccccccccccccccccccc.{goal}")
}

fn put_entry(world: &mut ModelWorld, key: &str, row: &Value) {
    world
        .kv
        .put(Store::Records, key, &serde_json::to_vec(row).unwrap());
}

#[test]
fn the_goal_index_scan_parser_is_closed() {
    let e = GoalIndexScanRequest::parse(&with(scan_for(IID), "filter", json!("goalidx.>")))
        .unwrap_err();
    refused_with(
        &e,
        ErrorCode::BadRequest,
        "manager goal-index scan request carries unknown field \"filter\" (the protocol is \
         closed)",
    );
    let e = GoalIndexScanRequest::parse(&without(scan_for(IID), "identities")).unwrap_err();
    refused_with(
        &e,
        ErrorCode::BadRequest,
        "manager goal-index scan request requires identities",
    );
    let e = GoalIndexScanRequest::parse(&with(scan_for(IID), "serveEpoch", json!(-1))).unwrap_err();
    refused_with(
        &e,
        ErrorCode::BadRequest,
        "manager goal-index scan request serveEpoch must be a non-negative safe integer",
    );
}

/// The reference smoke's refusals: `spawn` alone, another space, a stale epoch, a foreign gate
/// principal, a forged proof; and the door's shared ones.
#[test]
fn the_goal_index_scan_door_refuses_as_the_reference() {
    the_door_refuses_as_the_reference("manager goal-index scan", scan_for, |w, h, raw| {
        scan(w, h, raw).map(|_| ())
    });
    let mut world = doors_world();
    let e = scan(&mut world, holder(&["spawn"]), &scan_for(IID)).unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        "manager goal-index scan needs scope \"supervise\"",
    );
    let e = scan(
        &mut world,
        supervise(),
        &with(scan_for(IID), "space", json!("other")),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        &format!("manager goal-index scan names space other, not this host space {SPACE}"),
    );
    let e = scan(&mut world, supervise(), &scan_for(FOREIGN_IID)).unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        &format!(
            "manager goal-index scan gate belongs to another owner: \
             {OTHER_OWNER}.manager_serve_{FOREIGN_IID} is not serve principal \
             {OWNER}.manager_serve_{FOREIGN_IID}"
        ),
    );
    let e = scan(
        &mut world,
        supervise(),
        &with(
            scan_for(IID),
            "registrationProof",
            json!(format!("sha256:{}", "f".repeat(64))),
        ),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        "manager goal-index scan proof does not match current host registration",
    );
}

/// Reference cell "own scan succeeds despite valid and malformed foreign owners": only the
/// authenticated owner's entries are listed, each answered as written; the answer echoes the
/// request without its identities.
#[test]
fn own_scan_succeeds_despite_valid_and_malformed_foreign_owners() {
    let mut world = doors_world();
    let own = entry(OWNER, "goal1");
    let mut floored = entry(OWNER, "goal2");
    floored["allocated"] =
        json!({"name": "w1", "actor": "worker", "uid": "x", "readinessDeadlineMs": 5});
    put_entry(&mut world, &entry_key(OWNER, "goal1"), &own);
    put_entry(&mut world, &entry_key(OWNER, "goal2"), &floored);
    put_entry(
        &mut world,
        &entry_key(OTHER_OWNER, "goal1"),
        &entry(OTHER_OWNER, "goal1"),
    );
    world.kv.put(
        Store::Records,
        &entry_key(OTHER_OWNER, "goal9"),
        b"not-json",
    );
    // An owner whose token merely starts with this one's is not this owner.
    put_entry(
        &mut world,
        &format!("goalidx.manager.{OWNER}x.cli.cccccccccccccccccccccccccc.goal1"),
        &json!("not an entry"),
    );
    let answer = scan(&mut world, supervise(), &scan_for(IID)).unwrap();
    let wire: Value = serde_json::from_str(&answer.to_json()).unwrap();
    assert_eq!(
        keys_of(&wire),
        [
            "v",
            "kind",
            "space",
            "owner",
            "actor",
            "instanceId",
            "managerLifecycleUid",
            "requestId",
            "registrationProof",
            "serveEpoch",
            "entries"
        ]
    );
    let sent = scan_for(IID);
    for k in keys_of(&wire) {
        if !["owner", "entries"].contains(&k) {
            assert_eq!(wire[k], sent[k], "{k}");
        }
    }
    assert_eq!(wire["owner"], OWNER);
    assert_eq!(wire["entries"], json!([own, floored]));
    // Each entry is written back byte for byte as the goal writer wrote it.
    assert_eq!(
        answer.entries[0].to_json(),
        serde_json::to_string(&own).unwrap()
    );
}

/// Reference cell (completion): a row naming another owner or another endpoint than its key is
/// never answered; a garbled row fails the scan.
#[test]
fn a_foreign_endpoint_or_owner_or_a_garbled_row_fails_the_scan() {
    let cases = [
        // The body names another owner than the key it was listed under.
        (entry(OTHER_OWNER, "goal1"), "does not match key"),
        (
            with(entry(OWNER, "goal1"), "endpoint", json!("other")),
            "does not match key",
        ),
        (
            with(entry(OWNER, "goal1"), "goalId", json!("goal2")),
            "does not match key",
        ),
        (
            with(entry(OWNER, "goal1"), "extra", json!(1)),
            "unknown field \"extra\"",
        ),
        (with(entry(OWNER, "goal1"), "v", json!(2)), "is malformed"),
        (
            with(
                entry(OWNER, "goal1"),
                "allocated",
                json!({"name": "", "actor": "a", "uid": "u"}),
            ),
            "acceptance floor with an empty component",
        ),
        (
            with(
                entry(OWNER, "goal1"),
                "allocated",
                json!({"name": "n", "actor": "a", "uid": "u", "readinessDeadlineMs": 0}),
            ),
            "invalid readiness deadline",
        ),
    ];
    for (row, says) in cases {
        let mut world = doors_world();
        put_entry(&mut world, &entry_key(OWNER, "goal1"), &row);
        let e = scan(&mut world, supervise(), &scan_for(IID)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "{e}");
        assert!(e.message.contains(says), "{says:?} not in {e}");
    }
}

/// A DEL marker is the goal writer's own clear at the goal's terminal: skipped, so an owner
/// with finished goals still gets a scan. A PURGE marker, which no protocol writer leaves, is
/// refused as the reference refuses every marker.
#[test]
fn a_cleared_entry_is_skipped_and_a_purged_one_refused() {
    let mut world = doors_world();
    put_entry(
        &mut world,
        &entry_key(OWNER, "goal1"),
        &entry(OWNER, "goal1"),
    );
    put_entry(
        &mut world,
        &entry_key(OWNER, "goal2"),
        &entry(OWNER, "goal2"),
    );
    world
        .kv
        .delete_unpinned(Store::Records, &entry_key(OWNER, "goal1"));
    let answer = scan(&mut world, supervise(), &scan_for(IID)).unwrap();
    assert_eq!(answer.entries.len(), 1);
    assert_eq!(answer.entries[0].goal_id.as_str(), "goal2");
    world.kv.purge(Store::Records, &entry_key(OWNER, "goal2"));
    let e = scan(&mut world, supervise(), &scan_for(IID)).unwrap_err();
    refused_with(
        &e,
        ErrorCode::FailedPrecondition,
        &format!(
            "manager goal-index entry {} carries a PURGE marker; a deletion is never a live \
             index row",
            entry_key(OWNER, "goal2")
        ),
    );
}

// ---- manager-retained-agent-validation -------------------------------------------------------

fn target(owner: &str, uid: &str) -> Value {
    json!({"owner": owner, "actor": "worker", "lifecycleUid": uid})
}

fn retained_for(iid: &str) -> Value {
    let mut raw = envelope("manager-retained-agent-validation", iid);
    raw["target"] = target(OWNER, TARGET_UID);
    raw["actorToken"] = json!(TOKEN);
    raw["sentinelCreds"] = json!(SENTINEL);
    raw
}

/// The managed row enrollment writes for `worker` at `uid`, opened by `token`.
fn worker_row(uid: &str, token: &str) -> ActorRow {
    ActorRow {
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: ActorToken::parse("worker").unwrap(),
        scope: vec!["role:worker".into()],
        allow_subscribe: vec!["general".into()],
        allow_publish: vec!["general".into()],
        role: Some("worker".into()),
        parent: Some(Principal::parse(&format!("{OWNER}.cli")).unwrap()),
        label: None,
        token_hash: Some(TokenHash::parse(&token_digest(token)).unwrap()),
        lifecycle_uid: Some(LifecycleUid::parse(uid).unwrap()),
        granted_at: "2023-11-14T22:13:20.000Z".into(),
    }
}

fn enrolled(uid: &str) -> ModelWorld {
    let world = doors_world();
    let granted = world
        .actors
        .execute(&ActorsRequest::GrantManaged(worker_row(uid, TOKEN)));
    assert!(matches!(granted, ActorsOutcome::Granted(_)), "{granted:?}");
    world
}

fn validation(caller: Supervisor, raw: &Value) -> Result<ValidateRetainedAgent, EpError> {
    Ok(ValidateRetainedAgent {
        host: host(),
        caller,
        request: RetainedValidationRequest::parse(raw)?,
    })
}

fn validate(
    world: &mut ModelWorld,
    caller: Supervisor,
    raw: &Value,
) -> Result<RetainedAgentValidation, EpError> {
    run(world, validation(caller, raw)?)
}

fn parse_refusal(raw: &Value) -> String {
    let e = RetainedValidationRequest::parse(raw).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    e.message
}

/// Reference cell "closed parser refuses unknown fields".
#[test]
fn closed_parser_refuses_unknown_fields() {
    assert_eq!(
        parse_refusal(&with(retained_for(IID), "profile", json!("provisioner"))),
        "manager retained-agent validation request carries unknown field \"profile\" (the \
         protocol is closed)"
    );
    assert_eq!(
        parse_refusal(&without(retained_for(IID), "actorToken")),
        "manager retained-agent validation request requires non-empty actorToken"
    );
    assert_eq!(
        parse_refusal(&with(retained_for(IID), "sentinelCreds", json!(""))),
        "manager retained-agent validation request requires non-empty sentinelCreds"
    );
}

/// Reference cell "closed parser refuses extra target fields".
#[test]
fn closed_parser_refuses_extra_target_fields() {
    let mut extra = retained_for(IID);
    extra["target"]["profile"] = json!("admin");
    assert_eq!(
        parse_refusal(&extra),
        "manager retained-agent validation request target must be exactly { owner, actor, \
         lifecycleUid }"
    );
    let mut number = retained_for(IID);
    number["target"]["actor"] = json!(7);
    assert_eq!(
        parse_refusal(&number),
        "manager retained-agent validation request target must contain string owner, actor, and \
         lifecycleUid"
    );
    assert!(parse_refusal(&with(
        retained_for(IID),
        "target",
        target("local", TARGET_UID)
    ))
    .contains("target owner \"local\" is not a derived owner"));
}

/// Reference cell "secret-bearing request is size bounded": the bounds are inclusive, counted
/// in UTF-16 units, and no refusal quotes a secret.
#[test]
fn secret_bearing_request_is_size_bounded() {
    let bound = "manager retained-agent validation request secret material exceeds its bounded \
                 wire size";
    let long_token = "x".repeat(4097);
    assert_eq!(
        parse_refusal(&with(retained_for(IID), "actorToken", json!(long_token))),
        bound
    );
    assert_eq!(
        parse_refusal(&with(
            retained_for(IID),
            "sentinelCreds",
            json!("s".repeat(16 * 1024 + 1))
        )),
        bound
    );
    // 2,049 astral characters are 4,098 UTF-16 units: over the bound at 2,049 chars.
    assert_eq!(
        parse_refusal(&with(
            retained_for(IID),
            "actorToken",
            json!("😀".repeat(2049))
        )),
        bound
    );
    let at_bounds = with(
        with(retained_for(IID), "actorToken", json!("x".repeat(4096))),
        "sentinelCreds",
        json!("s".repeat(16 * 1024)),
    );
    let parsed = RetainedValidationRequest::parse(&at_bounds).unwrap();
    assert!(
        !format!("{parsed:?}").contains("xxxx"),
        "secrets never printed"
    );
}

/// Reference cells "spawn without supervise cannot validate", "another owner cannot be
/// targeted", "another host space cannot be targeted".
#[test]
fn spawn_without_supervise_another_owner_and_another_host_space_are_refused() {
    let mut world = enrolled(TARGET_UID);
    let e = validate(&mut world, holder(&["spawn"]), &retained_for(IID)).unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        "manager retained-agent validation needs scope \"supervise\"; spawn/admin do not imply it",
    );
    let e = validate(
        &mut world,
        supervise(),
        &with(retained_for(IID), "target", target(OTHER_OWNER, TARGET_UID)),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        &format!(
            "manager retained-agent validation may target only its authenticated owner {OWNER}, \
             not {OTHER_OWNER}"
        ),
    );
    let e = validate(
        &mut world,
        supervise(),
        &with(retained_for(IID), "space", json!("other")),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        &format!(
            "manager retained-agent validation request names space other, not this host space \
             {SPACE}"
        ),
    );
}

/// Reference cells "a stale registration proof is refused", "a superseded registration revision
/// is refused", "a missing current gate is refused", "a foreign gate principal is refused", "a
/// stale serve epoch is refused"; a frozen and a retired gate are as missing.
#[test]
fn stale_proof_superseded_revision_missing_gate_foreign_principal_and_stale_epoch_are_refused() {
    the_door_refuses_as_the_reference(
        "manager retained-agent validation",
        retained_for,
        |w, h, raw| {
            w.actors
                .execute(&ActorsRequest::GrantManaged(worker_row(TARGET_UID, TOKEN)));
            validate(w, h, raw).map(|_| ())
        },
    );
    let mut world = enrolled(TARGET_UID);
    let e = validate(&mut world, supervise(), &retained_for(FOREIGN_IID)).unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        &format!(
            "manager retained-agent validation gate belongs to another owner: \
             {OTHER_OWNER}.manager_serve_{FOREIGN_IID} is not serve principal \
             {OWNER}.manager_serve_{FOREIGN_IID}"
        ),
    );
    let e = validate(
        &mut world,
        supervise(),
        &with(
            retained_for(IID),
            "registrationProof",
            json!(format!("sha256:{}", "f".repeat(64))),
        ),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        "manager retained-agent validation proof does not match current host registration",
    );
}

/// Reference cell "host completion cannot return a replacement lifecycle": the row was
/// re-enrolled at another uid since the manager retained its agent.
#[test]
fn host_completion_cannot_return_a_replacement_lifecycle() {
    let mut world = enrolled("nnnnnnnnnnnnnnnnnnnnnnnnnn");
    let e = validate(&mut world, supervise(), &retained_for(IID)).unwrap_err();
    refused_with(
        &e,
        ErrorCode::Conflict,
        "manager retained-agent validation host returned a replacement principal or lifecycle",
    );
}

/// Reference cell "valid host validation returns only bound coordinates and non-secret
/// authority" (and the provider cell "existing token + sentinel reuse the same principal and
/// ledger authority"): nothing is written, no secret is answered.
#[test]
fn valid_host_validation_returns_only_bound_coordinates_and_non_secret_authority() {
    let mut world = enrolled(TARGET_UID);
    let principal = Principal::parse(&format!("{OWNER}.worker")).unwrap();
    let before = world.actors.raw(RowSpace::Managed, &principal);
    let sent = retained_for(IID);
    let answer = validate(&mut world, supervise(), &sent).unwrap();
    assert_eq!(world.actors.raw(RowSpace::Managed, &principal), before);
    let text = answer.to_json();
    assert!(!text.contains(TOKEN) && !text.contains(SENTINEL), "{text}");
    let wire: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        keys_of(&wire),
        [
            "v",
            "kind",
            "space",
            "owner",
            "actor",
            "instanceId",
            "managerLifecycleUid",
            "requestId",
            "registrationProof",
            "serveEpoch",
            "target",
            "authority"
        ]
    );
    for k in keys_of(&wire) {
        if !["owner", "authority"].contains(&k) {
            assert_eq!(wire[k], sent[k], "{k}");
        }
    }
    assert_eq!(wire["owner"], OWNER);
    assert_eq!(
        wire["authority"],
        json!({
            "owner": OWNER, "actor": "worker", "lifecycleUid": TARGET_UID,
            "scope": ["role:worker"], "allowSubscribe": ["general"], "allowPublish": ["general"],
            "role": "worker", "parent": format!("{OWNER}.cli"),
        })
    );
}

/// Provider cells "a wrong retained agent token is refused without rotation" and "a foreign
/// retained sentinel is refused"; an agent the ledger does not hold is refused too.
#[test]
fn a_wrong_token_a_foreign_sentinel_and_an_unknown_agent_are_refused_without_rotation() {
    let mut world = enrolled(TARGET_UID);
    let principal = Principal::parse(&format!("{OWNER}.worker")).unwrap();
    let before = world.actors.raw(RowSpace::Managed, &principal);
    let e = validate(
        &mut world,
        supervise(),
        &with(retained_for(IID), "actorToken", json!("wrong")),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(e.message.contains("wrong secret"), "{e}");
    let e = validate(
        &mut world,
        supervise(),
        &with(retained_for(IID), "sentinelCreds", json!("wrong")),
    )
    .unwrap_err();
    refused_with(
        &e,
        ErrorCode::PermissionDenied,
        &format!(
            "retained sentinel credential for {OWNER}.worker does not match space \"{SPACE}\""
        ),
    );
    assert_eq!(world.actors.raw(RowSpace::Managed, &principal), before);
    let mut empty = doors_world();
    let e = validate(&mut empty, supervise(), &retained_for(IID)).unwrap_err();
    refused_with(
        &e,
        ErrorCode::FailedPrecondition,
        &format!("retained agent {OWNER}.worker does not have a managed row"),
    );
}

/// The delegation envelope is re-walked at validation: a spawner narrowed since the spawn
/// refuses the retained agent, as its next bearer exchange would.
#[test]
fn a_narrowed_spawner_refuses_the_retained_agent() {
    let mut world = enrolled(TARGET_UID);
    grant_cli(&world, cli_row(&["supervise"], &["general"], &["general"]));
    let e = validate(&mut world, supervise(), &retained_for(IID)).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(e.message.contains("CURRENT grant"), "{e}");
}

/// A row replaced between the validation's first read and its re-read (here: re-granted with
/// another publish list under the same token and lifecycle) is refused, never answered stale.
#[test]
fn a_row_replaced_during_the_validation_is_refused() {
    let mut world = enrolled(TARGET_UID);
    let mut machine = Replay::new(validation(supervise(), &retained_for(IID)).unwrap());
    let mut observation = None;
    let mut finds = 0;
    let outcome = loop {
        match machine.step(observation.take()) {
            Step::Done(outcome) => break outcome,
            Step::Effect(effect) => {
                if let Effect::Actors(request) = &effect {
                    if matches!(**request, ActorsRequest::Find { .. }) {
                        finds += 1;
                        if finds == 2 {
                            let mut regranted = worker_row(TARGET_UID, TOKEN);
                            regranted.allow_publish = vec![];
                            world
                                .actors
                                .execute(&ActorsRequest::GrantManaged(regranted));
                        }
                    }
                }
                observation = Some(world.perform(&effect));
            }
        }
    };
    let e = outcome.unwrap_err();
    refused_with(
        &e,
        ErrorCode::Conflict,
        &format!("retained agent {OWNER}.worker changed during retained validation"),
    );
}
