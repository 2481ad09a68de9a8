//! Manager-caller instance selection on the KV model (reference-auth-service §3.10), named after
//! the reference's remote-exchange selection cells (§11.3): "no manager candidate", one live
//! remote picked, "2 live remote manager candidates", explicit selectors, "not this owner's",
//! "not registered" (each sub-case), frozen-only remote → "unavailable" + "managerInstanceId",
//! unknown instance; plus the callout's re-check at the permission mint (§8.4) and the rule
//! that an unanswered listing or read refuses instead of reading as "no candidate".
//!
//! The local-manager cells (local identity file, "one live remote beats local", local gate under
//! a foreign serve id) have no counterpart: this authority plane runs no co-located manager.
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
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Revision, Store};
use cotal_core::manager::{
    AuthorizeManagerCaller, LocalManager, ManagerCallerVerdict, SelectManagerInstance, Verdict,
    MANAGER_GATE_PREFIX,
};
use cotal_core::names::{InstanceId, Principal};
use cotal_core::service::WriteStatus;
use cotal_core::{EpError, ErrorCode};
use nkeys::KeyPairType;
use serde_json::json;

use common::run;
use manager_fixture::*;
use renewal_support::{key, manager_gate, register, FOREIGN_OWNER, OWNER};

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccc";

// ---- the scripts -----------------------------------------------------------------------------

fn verdict_of(world: &mut ModelWorld, instance: &str) -> Verdict {
    verdict_for(world, OWNER, instance).unwrap()
}

fn verdict_for(world: &mut ModelWorld, owner: &str, instance: &str) -> Result<Verdict, EpError> {
    run(
        world,
        ManagerCallerVerdict {
            space: space(),
            owner: owner_token(owner),
            local: None,
            instance: iid(instance),
        },
    )
}

fn select(world: &mut ModelWorld, requested: Option<&str>) -> Result<InstanceId, EpError> {
    run(
        world,
        SelectManagerInstance {
            space: space(),
            owner: owner_token(OWNER),
            local: None,
            requested: requested.map(iid),
        },
    )
}

fn authorize(world: &mut ModelWorld, instance: &str) -> Result<(), EpError> {
    run(
        world,
        AuthorizeManagerCaller {
            space: space(),
            owner: owner_token(OWNER),
            local: None,
            instance: iid(instance),
        },
    )
}

fn refused<T: std::fmt::Debug>(result: Result<T, EpError>) -> (ErrorCode, String) {
    let e = result.unwrap_err();
    (e.code, e.message)
}

// ---- verdict words ---------------------------------------------------------------------------

#[test]
fn verdicts_read_as_the_reference_words() {
    let words: Vec<String> = [
        Verdict::Unknown,
        Verdict::NotOpen,
        Verdict::NotThisOwners,
        Verdict::NotRegistered,
        Verdict::Candidate,
    ]
    .iter()
    .map(Verdict::to_string)
    .collect();
    assert_eq!(
        words,
        [
            "unknown",
            "not open",
            "not this owner's",
            "not registered",
            "a candidate"
        ]
    );
}

#[test]
fn the_listing_prefix_is_the_manager_gate_keys_prefix() {
    assert!(gate_key(A).starts_with(MANAGER_GATE_PREFIX));
    assert_eq!(format!("{MANAGER_GATE_PREFIX}{A}"), gate_key(A));
}

// ---- cell: "no manager candidate" ------------------------------------------------------------

/// Cell "no manager candidate": with no manager gate at all, and with only another owner's
/// live manager, the selection refuses "found no manager candidate for owner X" when no local
/// manager is persisted either.
#[test]
fn no_manager_candidate_for_an_owner_without_a_manager_gate() {
    let mut w = world();
    let (code, message) = refused(select(&mut w, None));
    assert_eq!(code, ErrorCode::FailedPrecondition, "{message}");
    assert!(
        message.contains(&format!("found no manager candidate for owner {OWNER}")),
        "{message}"
    );
    put_manager(&mut w, A, FOREIGN_OWNER, Gate::Open);
    let (_, message) = refused(select(&mut w, None));
    assert!(message.contains("found no manager candidate"), "{message}");
}

// ---- cell: one live remote picked ------------------------------------------------------------

/// Cell "one live remote beats local", here "one live remote is picked": this owner's one live
/// manager is selected past another owner's live manager and this owner's frozen and
/// unregistered ones.
#[test]
fn one_live_remote_manager_is_picked() {
    let mut w = world();
    put_manager(&mut w, A, FOREIGN_OWNER, Gate::Open);
    put_manager(&mut w, B, OWNER, Gate::Open);
    put_manager(&mut w, C, OWNER, Gate::Frozen);
    assert_eq!(select(&mut w, None).unwrap(), iid(B));
    put_status(&mut w, C, EPOCH - 1, 1);
    assert_eq!(select(&mut w, None).unwrap(), iid(B));
}

/// The realistic path: a manager registered through the whole ceremony is `not registered`
/// until it reports its status at the committed epoch, then it is the candidate.
#[test]
fn a_ceremony_registered_manager_is_a_candidate_once_it_reports_ready() {
    let mut w = world();
    w.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    let registered = register(&mut w, A, 1);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
    let epoch = registered.process_epoch.0;
    let status = json!({
        "epoch": epoch, "state": "ready",
        "observedSpecRevision": registered.registration_revision.0,
    });
    run(
        &mut w,
        WriteStatus {
            gate: manager_gate(A),
            endpoint: endpoint(),
            instance: iid(A),
            epoch: ProcessEpoch(epoch),
            status,
            expected_status_revision: None,
            supervisor: false,
        },
    )
    .unwrap();
    assert_eq!(verdict_of(&mut w, A), Verdict::Candidate);
    assert_eq!(select(&mut w, None).unwrap(), iid(A));
    authorize(&mut w, A).unwrap();
}

// ---- cell: "2 live remote manager candidates" ------------------------------------------------

#[test]
fn two_live_remote_manager_candidates_ask_for_a_manager_instance_id() {
    let mut w = world();
    put_manager(&mut w, A, OWNER, Gate::Open);
    put_manager(&mut w, B, OWNER, Gate::Open);
    let (code, message) = refused(select(&mut w, None));
    assert_eq!(code, ErrorCode::FailedPrecondition, "{message}");
    assert!(
        message.contains("2 live remote manager candidates"),
        "{message}"
    );
    assert!(message.contains("managerInstanceId"), "{message}");
    assert!(message.contains(A) && message.contains(B), "{message}");
}

// ---- cell: explicit selectors ----------------------------------------------------------------

/// Cell "explicit selectors": a requested candidate is selected even where the scan would
/// refuse, and without listing the gates at all.
#[test]
fn an_explicit_selector_picks_a_candidate_without_listing() {
    let mut w = world();
    put_manager(&mut w, A, OWNER, Gate::Open);
    put_manager(&mut w, B, OWNER, Gate::Open);
    // A listing would fail; the explicit selection never asks for one.
    w.kv.inject(
        Trigger::new(Store::Auth, KvOp::Keys, MANAGER_GATE_PREFIX),
        Fault::Unavailable,
    );
    assert_eq!(select(&mut w, Some(B)).unwrap(), iid(B));
    assert_eq!(w.kv.pending_faults(), 1);
}

/// An explicit selector that is not a candidate refuses "manager instance X is <verdict>",
/// never falling back to the scan.
#[test]
fn an_explicit_selector_that_is_no_candidate_refuses_with_its_verdict() {
    let mut w = world();
    put_manager(&mut w, A, OWNER, Gate::Open);
    put_manager(&mut w, B, OWNER, Gate::Frozen);
    put_manager(&mut w, C, FOREIGN_OWNER, Gate::Open);
    let cases = [
        (B, ErrorCode::FailedPrecondition, "not open"),
        (C, ErrorCode::PermissionDenied, "not this owner's"),
        (
            "dddddddddddddddddddddddddd",
            ErrorCode::PermissionDenied,
            "unknown",
        ),
    ];
    for (instance, code, verdict) in cases {
        let (got, message) = refused(select(&mut w, Some(instance)));
        assert_eq!(got, code, "{message}");
        assert!(
            message.starts_with(&format!("manager instance {instance} is {verdict} - ")),
            "{message}"
        );
    }
}

// ---- cell: "not this owner's" ----------------------------------------------------------------

/// Cell "not this owner's": another owner's gate (open or frozen: ownership is decided before
/// the state, so nothing of a foreign instance's state shows), and a gate of this owner
/// recording the serve principal of another instance id (the serve id must be the gate's own).
#[test]
fn a_gate_under_another_serve_principal_is_not_this_owners() {
    let mut w = world();
    put_manager(&mut w, A, FOREIGN_OWNER, Gate::Open);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotThisOwners);
    put_manager(&mut w, C, FOREIGN_OWNER, Gate::Frozen);
    assert_eq!(verdict_of(&mut w, C), Verdict::NotThisOwners);
    assert_eq!(
        verdict_for(&mut w, FOREIGN_OWNER, A).unwrap(),
        Verdict::Candidate
    );
    let revision = put_spec(&mut w, B, OWNER);
    put_gate_for(
        &mut w,
        B,
        &format!("{OWNER}.manager_serve_{C}"),
        revision.0,
        Gate::Open,
    );
    put_status(&mut w, B, EPOCH, revision.0);
    assert_eq!(verdict_of(&mut w, B), Verdict::NotThisOwners);
    // The scan does not count it as this owner's either.
    let (_, message) = refused(select(&mut w, None));
    assert!(message.contains("found no manager candidate"), "{message}");
}

// ---- cell: "not registered" ------------------------------------------------------------------

/// A live candidate `A` of this owner, for the sub-cases to break one check at a time.
fn candidate() -> (ModelWorld, Revision) {
    let mut w = world();
    let revision = put_manager(&mut w, A, OWNER, Gate::Open);
    assert_eq!(verdict_of(&mut w, A), Verdict::Candidate);
    (w, revision)
}

#[test]
fn not_registered_when_the_spec_is_missing() {
    let mut w = world();
    put_gate(&mut w, A, OWNER, 0, Gate::Open);
    put_status(&mut w, A, EPOCH, 0);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
}

#[test]
fn not_registered_when_the_spec_is_deleted() {
    let (mut w, _) = candidate();
    w.kv.delete_unpinned(Store::Records, &spec_key(A));
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
    let (mut w, _) = candidate();
    w.kv.purge(Store::Records, &spec_key(A));
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
}

#[test]
fn not_registered_when_the_spec_names_another_owner() {
    let mut w = world();
    // Every other check holds: the gate is this owner's at the spec's revision and epoch.
    let revision = put_spec(&mut w, A, FOREIGN_OWNER);
    put_gate(&mut w, A, OWNER, revision.0, Gate::Open);
    put_status(&mut w, A, EPOCH, revision.0);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
}

#[test]
fn not_registered_when_the_spec_sits_at_another_revision_than_the_gate() {
    let (mut w, _) = candidate();
    // A newer spec the gate has not reopened at (a registration under way) …
    let newer = put_spec(&mut w, A, OWNER);
    put_status(&mut w, A, EPOCH, newer.0);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
    // … and a gate ahead of its spec.
    put_gate(&mut w, A, OWNER, newer.0 + 1, Gate::Open);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
}

#[test]
fn not_registered_when_the_status_is_missing() {
    let mut w = world();
    let revision = put_spec(&mut w, A, OWNER);
    put_gate(&mut w, A, OWNER, revision.0, Gate::Open);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
    let (mut w, _) = candidate();
    w.kv.delete_unpinned(Store::Records, &status_key(A));
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
}

#[test]
fn not_registered_when_the_status_observes_an_older_spec() {
    let (mut w, revision) = candidate();
    put_status(&mut w, A, EPOCH, revision.0 - 1);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
    // Observing past the spec is still this registration serving.
    put_status(&mut w, A, EPOCH, revision.0 + 1);
    assert_eq!(verdict_of(&mut w, A), Verdict::Candidate);
}

#[test]
fn not_registered_when_the_status_runs_at_another_epoch_than_the_gate() {
    let (mut w, revision) = candidate();
    put_status(&mut w, A, EPOCH - 1, revision.0);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
    put_status(&mut w, A, EPOCH + 1, revision.0);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotRegistered);
}

#[test]
fn an_explicit_selector_that_is_not_registered_refuses_with_the_verdict() {
    let (mut w, revision) = candidate();
    put_status(&mut w, A, EPOCH - 1, revision.0);
    let (code, message) = refused(select(&mut w, Some(A)));
    assert_eq!(code, ErrorCode::FailedPrecondition, "{message}");
    assert!(
        message.starts_with(&format!("manager instance {A} is not registered")),
        "{message}"
    );
}

/// A corrupt spec is a loud `internal`, never a quiet "not registered".
#[test]
fn a_corrupt_spec_is_internal() {
    let (mut w, _) = candidate();
    w.kv.put(Store::Records, &spec_key(A), b"{\"endpoint\":\"manager\"}");
    assert_eq!(
        refused(verdict_for(&mut w, OWNER, A)).0,
        ErrorCode::Internal
    );
}

// ---- cell: frozen-only remote → unavailable --------------------------------------------------

/// Cell "frozen-only remote → unavailable + managerInstanceId": this owner's gates exist but
/// none is live, so the selection is `unavailable` and names the remedy; the same for a retired
/// or unregistered one.
#[test]
fn a_frozen_only_remote_is_unavailable_with_the_manager_instance_id_remedy() {
    let mut w = world();
    put_manager(&mut w, A, OWNER, Gate::Frozen);
    put_manager(&mut w, B, FOREIGN_OWNER, Gate::Open);
    let (code, message) = refused(select(&mut w, None));
    assert_eq!(code, ErrorCode::Unavailable, "{message}");
    assert!(message.contains("unavailable"), "{message}");
    assert!(message.contains("managerInstanceId"), "{message}");
    assert!(message.contains(A) && !message.contains(B), "{message}");

    let mut w = world();
    put_manager(&mut w, A, OWNER, Gate::Retired);
    assert_eq!(verdict_of(&mut w, A), Verdict::NotOpen);
    assert_eq!(refused(select(&mut w, None)).0, ErrorCode::Unavailable);

    let mut w = world();
    put_gate(&mut w, A, OWNER, 0, Gate::Open);
    assert_eq!(refused(select(&mut w, None)).0, ErrorCode::Unavailable);
}

// ---- cell: unknown instance ------------------------------------------------------------------

#[test]
fn an_instance_without_a_gate_is_unknown() {
    let mut w = world();
    put_manager(&mut w, A, OWNER, Gate::Open);
    assert_eq!(verdict_of(&mut w, B), Verdict::Unknown);
    let (code, message) = refused(authorize(&mut w, B));
    assert_eq!(code, ErrorCode::PermissionDenied, "{message}");
    assert!(
        message.starts_with(&format!(
            "manager instance {B} is unknown at the permission mint"
        )),
        "{message}"
    );
}

// ---- the callout's re-check ------------------------------------------------------------------

/// §8.4: the callout re-checks the verdict at the permission mint, so a bearer minted while
/// its instance was the candidate is refused once the gate froze or the incarnation moved on.
#[test]
fn the_permission_mint_re_checks_the_verdict_the_exchange_selected_on() {
    let (mut w, revision) = candidate();
    assert_eq!(select(&mut w, None).unwrap(), iid(A));
    authorize(&mut w, A).unwrap();

    put_gate(&mut w, A, OWNER, revision.0, Gate::Frozen);
    let (code, message) = refused(authorize(&mut w, A));
    assert_eq!(code, ErrorCode::FailedPrecondition, "{message}");
    assert!(
        message.starts_with(&format!(
            "manager instance {A} is not open at the permission mint"
        )),
        "{message}"
    );

    put_gate(&mut w, A, OWNER, revision.0, Gate::Open);
    put_status(&mut w, A, EPOCH + 1, revision.0);
    let (_, message) = refused(authorize(&mut w, A));
    assert!(
        message.contains("is not registered at the permission mint"),
        "{message}"
    );

    let (_, message) = refused(run(
        &mut w,
        AuthorizeManagerCaller {
            space: space(),
            owner: owner_token(FOREIGN_OWNER),
            local: None,
            instance: iid(A),
        },
    ));
    assert!(
        message.contains("is not this owner's at the permission mint"),
        "{message}"
    );
}

// ---- unanswered reads and corrupt listings refuse --------------------------------------------

/// An unanswered listing, gate read, spec read or status read refuses `unavailable`; none of
/// them reads as "no manager candidate".
#[test]
fn an_unanswered_listing_or_read_refuses_instead_of_finding_no_candidate() {
    let faults = [
        Trigger::new(Store::Auth, KvOp::Keys, MANAGER_GATE_PREFIX),
        Trigger::new(Store::Auth, KvOp::Get, gate_key(A)),
        Trigger::new(Store::Records, KvOp::Get, spec_key(A)),
        Trigger::new(Store::Records, KvOp::Get, status_key(A)),
    ];
    for trigger in faults {
        let (mut w, _) = candidate();
        w.kv.inject(trigger.clone(), Fault::Unavailable);
        let (code, message) = refused(select(&mut w, None));
        assert_eq!(code, ErrorCode::Unavailable, "{trigger:?}: {message}");
        assert!(!message.contains("no manager candidate"), "{message}");
        assert_eq!(w.kv.pending_faults(), 0, "{trigger:?} fired");
    }
}

#[test]
fn an_unanswered_read_refuses_the_verdict_and_the_permission_mint() {
    for trigger in [
        Trigger::new(Store::Auth, KvOp::Get, gate_key(A)),
        Trigger::new(Store::Records, KvOp::Get, status_key(A)),
    ] {
        let (mut w, _) = candidate();
        w.kv.inject(trigger.clone(), Fault::Unavailable);
        assert_eq!(
            refused(verdict_for(&mut w, OWNER, A)).0,
            ErrorCode::Unavailable
        );
        w.kv.inject(trigger, Fault::Unavailable);
        assert_eq!(refused(authorize(&mut w, A)).0, ErrorCode::Unavailable);
    }
}

/// A listed manager key that is not `epgate.manager.<iid>` is a row no writer makes: the
/// selection refuses `internal` rather than skip it.
#[test]
fn a_listed_key_that_is_not_a_manager_gate_key_refuses_the_selection() {
    let (mut w, _) = candidate();
    w.kv.put(
        Store::Auth,
        &format!("{MANAGER_GATE_PREFIX}{B}.extra"),
        b"{}",
    );
    let (code, message) = refused(select(&mut w, None));
    assert_eq!(code, ErrorCode::Internal, "{message}");
    assert!(
        message.contains("epgate.<endpointToken>.<instanceId>"),
        "{message}"
    );
}

/// A manager gate carrying a DEL marker is corruption (gates are never deleted, F9), whoever's
/// it was: the selection refuses rather than skip it.
#[test]
fn a_deleted_manager_gate_refuses_the_selection() {
    let (mut w, _) = candidate();
    put_manager(&mut w, B, FOREIGN_OWNER, Gate::Open);
    w.kv.delete_unpinned(Store::Auth, &gate_key(B));
    let (code, message) = refused(select(&mut w, None));
    assert_eq!(code, ErrorCode::FailedPrecondition, "{message}");
    assert!(message.contains("never deleted"), "{message}");
}

// ---- round trips -----------------------------------------------------------------------------

/// KV round trips: an explicit candidate costs the gate, spec and status reads; a scan costs
/// the listing, one read per listed gate, and the two record reads only for this owner's.
#[test]
fn round_trips_stay_at_the_documented_counts() {
    let (mut w, _) = candidate();
    put_manager(&mut w, B, FOREIGN_OWNER, Gate::Open);
    let served = w.kv.requests_served();
    select(&mut w, Some(A)).unwrap();
    assert_eq!(w.kv.requests_served() - served, 3);
    let served = w.kv.requests_served();
    select(&mut w, None).unwrap();
    assert_eq!(w.kv.requests_served() - served, 1 + 2 + 2);
}

// ---- the co-located local manager ------------------------------------------------------------

/// The workspace's own manager `instance`: its gate records `local.<serve nkey>`, its spec
/// names owner `local`, and it serves at the gate's coordinates.
fn put_local(world: &mut ModelWorld, instance: &str, state: Gate) -> LocalManager {
    let serve = format!("local.{}", key(KeyPairType::User, 77).public_key());
    let revision = put_spec(world, instance, "local");
    put_gate_for(world, instance, &serve, revision.0, state);
    put_status(world, instance, EPOCH, revision.0);
    LocalManager {
        instance: iid(instance),
        serve: Principal::parse(&serve).unwrap(),
    }
}

fn select_with(
    world: &mut ModelWorld,
    local: &LocalManager,
    requested: Option<&str>,
) -> Result<InstanceId, EpError> {
    run(
        world,
        SelectManagerInstance {
            space: space(),
            owner: owner_token(OWNER),
            local: Some(local.clone()),
            requested: requested.map(iid),
        },
    )
}

/// Reference cell "local manager fallback": an owner with no remote manager gate is given the
/// workspace's own serving manager, and the callout's re-check admits it.
#[test]
fn local_manager_fallback_for_an_owner_without_a_remote_manager() {
    let mut w = world();
    let local = put_local(&mut w, C, Gate::Open);
    assert_eq!(select_with(&mut w, &local, None).unwrap(), iid(C));
    assert_eq!(select_with(&mut w, &local, Some(C)).unwrap(), iid(C));
    run(
        &mut w,
        AuthorizeManagerCaller {
            space: space(),
            owner: owner_token(OWNER),
            local: Some(local.clone()),
            instance: iid(C),
        },
    )
    .unwrap();
    // Without the persisted identity the same gate is nobody's manager for this owner.
    let (code, message) = refused(select(&mut w, None));
    assert_eq!(code, ErrorCode::FailedPrecondition, "{message}");
    assert_eq!(verdict_of(&mut w, C), Verdict::NotThisOwners);
}

/// Reference cell "one live remote beats local": a live remote manager of the owner is chosen
/// over the local one; a remote mid-restart (frozen) refuses `unavailable` instead of falling
/// through to the local manager.
#[test]
fn one_live_remote_beats_local_and_a_restarting_remote_never_falls_through() {
    let mut w = world();
    let local = put_local(&mut w, C, Gate::Open);
    put_manager(&mut w, A, OWNER, Gate::Open);
    assert_eq!(select_with(&mut w, &local, None).unwrap(), iid(A));
    put_manager(&mut w, A, OWNER, Gate::Frozen);
    let (code, message) = refused(select_with(&mut w, &local, None));
    assert_eq!(code, ErrorCode::Unavailable, "{message}");
}

/// The local manager's records must name owner `local` and serve at its gate's coordinates: a
/// gate recording its serve principal over a spec of another owner is not registered, and a
/// frozen local gate is not open; neither is picked.
#[test]
fn a_local_manager_not_serving_its_registration_is_no_fallback() {
    let mut w = world();
    let local = put_local(&mut w, C, Gate::Open);
    put_spec(&mut w, C, OWNER);
    let (code, _) = refused(select_with(&mut w, &local, None));
    assert_eq!(code, ErrorCode::FailedPrecondition);
    let (_, message) = refused(select_with(&mut w, &local, Some(C)));
    assert!(message.contains("is not registered"), "{message}");

    let mut frozen = world();
    let local = put_local(&mut frozen, C, Gate::Frozen);
    let (_, message) = refused(select_with(&mut frozen, &local, Some(C)));
    assert!(message.contains("is not open"), "{message}");
}
