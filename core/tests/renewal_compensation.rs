//! Renewal compensation on the KV model: the reference's manager-renewal-compensation cells
//! (same-second fault after serve finalize, lost gate CAS with created vs reused rows, cleanup
//! debt that survives and is settled by the next renewal), F92 named tests, the ambiguous
//! branches of every write the compensation makes, the intent's byte layout, and a property:
//! no credential is released at a stale epoch.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod renewal_support;

use cotal_core::driver::{drive, ModelWorld};
use cotal_core::gate::EndpointGate;
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::ledger::CredState;
use cotal_core::machine::{Machine, Observation, Replay, Step};
use cotal_core::manager::current_registration_proof;
use cotal_core::names::InstanceId;
use cotal_core::renewal::{CleanupIntent, RenewalFault};
use cotal_core::{EpError, ErrorCode};
use renewal_support::*;

use common::{row_state, IID};

fn proof(world: &ModelWorld) -> String {
    let gate = EndpointGate::parse(
        &world
            .kv
            .get(Store::Auth, &manager_gate(IID).key())
            .unwrap()
            .value,
    )
    .unwrap();
    let request = standing_request(
        "standing0000000000000000",
        &format!("sha256:{}", "0".repeat(64)),
        0,
    );
    current_registration_proof(
        &host().proof_secret,
        &owner(),
        &request.envelope,
        gate.registration_revision(),
        gate.process_epoch(),
    )
    .as_str()
    .to_owned()
}

fn renewal(world: &ModelWorld, n: u8, now_ms: u64) -> cotal_core::renewal::ManagerAuthority {
    let epoch = EndpointGate::parse(
        &world
            .kv
            .get(Store::Auth, &manager_gate(IID).key())
            .unwrap()
            .value,
    )
    .unwrap()
    .process_epoch()
    .0;
    call(
        standing_request(
            &format!("standing00000000000000{n:02}"),
            &proof(world),
            epoch,
        ),
        now_ms,
    )
}

fn renew_at(
    world: &mut ModelWorld,
    n: u8,
    now_ms: u64,
    fault: Option<RenewalFault>,
) -> Result<cotal_core::renewal::RemoteManagerAuthorityMaterial, EpError> {
    let mut c = renewal(world, n, now_ms);
    c.fault = fault;
    issue(world, c)
}

fn intent(world: &ModelWorld) -> CleanupIntent {
    let key = cotal_core::names::keys::renewal_intent(&InstanceId::parse(IID).unwrap());
    CleanupIntent::parse(&world.kv.get(Store::Auth, &key).unwrap().value, &key).unwrap()
}

fn activated() -> (ModelWorld, Vec<String>) {
    let (mut world, _) = registered();
    activate(&mut world, T0);
    let prior = active(&world, IID);
    assert_eq!(prior.len(), 3);
    (world, prior)
}

/// Cell "a renewal faulted `after-serve-finalize` in the same second creates no new row and
/// leaves all three prior rows active": the same-second serve JWT is byte-identical, so its
/// stage reuses the activation's row, and compensation must not revoke it.
#[test]
fn f92_same_second_fault_after_serve_finalize_keeps_the_prior_family() {
    let (mut world, prior) = activated();
    let before = family(&world, IID);
    let err = renew_at(&mut world, 1, T0, Some(RenewalFault::AfterServeFinalize)).unwrap_err();
    assert!(err.message.contains("after-serve-finalize"), "{err}");
    assert_eq!(family(&world, IID), before, "no new row, no state change");
    assert_eq!(active(&world, IID), prior);
    let settled = intent(&world);
    assert_eq!(settled.state, cotal_core::renewal::IntentState::Complete);
    assert_eq!(
        settled.participants[0].ownership,
        cotal_core::renewal::Ownership::Reused
    );
}

/// Cells "after-goal-finalize / after-session-finalize / before-response: retains exactly its
/// finalized rows, revoked; preserves the prior generation" (a fresh second each).
#[test]
fn f92_a_failed_renewal_revokes_only_the_rows_it_created() {
    let (mut world, prior) = activated();
    for (n, (fault, fresh)) in [
        (RenewalFault::AfterServeFinalize, 1),
        (RenewalFault::AfterGoalFinalize, 2),
        (RenewalFault::AfterSessionFinalize, 3),
        (RenewalFault::BeforeResponse, 3),
    ]
    .into_iter()
    .enumerate()
    {
        let before = family(&world, IID);
        let now = T0 + 1_000 * (n as u64 + 1);
        let err = renew_at(&mut world, n as u8, now, Some(fault)).unwrap_err();
        assert!(err.message.contains(fault.as_str()), "{err}");
        let after = family(&world, IID);
        let new: Vec<_> = after.iter().filter(|r| !before.contains(r)).collect();
        assert_eq!(new.len(), fresh, "{fault:?}");
        assert!(
            new.iter().all(|(_, _, s)| *s == CredState::Revoked),
            "{fault:?}"
        );
        assert_eq!(
            active(&world, IID),
            prior,
            "{fault:?}: the prior family stays active"
        );
    }
    // A later renewal proceeds (the intents were all completed) and adds one active family.
    let out = renew_at(&mut world, 9, T0 + 10_000, None).unwrap();
    assert_eq!(out.names().len(), 5);
    assert_eq!(active(&world, IID).len(), 6);
}

/// Moves the manager gate (a bare reopen at the next generation) right after the first family
/// row create the model serves, so that member's gate touch loses its CAS.
fn move_gate_after_first_row(world: &mut ModelWorld) {
    let gate_key = manager_gate(IID).key();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, manager_gate(IID).family_prefix()),
        Fault::After(Box::new(move |kv| {
            let entry = kv.get(Store::Auth, &gate_key).unwrap();
            let gate = EndpointGate::parse(&entry.value).unwrap();
            let mut c = gate.coordinates();
            c.generation.0 += 1;
            let frozen = gate
                .frozen(cotal_core::gate::GateOp::registration(common::op(7)))
                .unwrap();
            let reopened = frozen.reopened(&common::op(7), c).unwrap();
            kv.put(Store::Auth, &gate_key, &reopened.to_bytes());
        })),
    );
}

/// Cell "on a lost gate CAS a `reused` row is not revoked": same second as the activation.
#[test]
fn f92_lost_gate_cas_keeps_a_reused_row() {
    let (mut world, prior) = activated();
    move_gate_after_first_row(&mut world);
    let err = renew_at(&mut world, 1, T0, None).unwrap_err();
    assert_eq!(err.code, ErrorCode::Expired, "{err}");
    assert_eq!(active(&world, IID), prior);
    assert_eq!(family(&world, IID).len(), 3);
}

/// Cell "on a lost gate CAS a `created` row is revoked": a fresh second.
#[test]
fn f92_lost_gate_cas_revokes_a_created_row() {
    let (mut world, prior) = activated();
    move_gate_after_first_row(&mut world);
    let err = renew_at(&mut world, 1, T0 + 1_000, None).unwrap_err();
    assert_eq!(err.code, ErrorCode::Expired, "{err}");
    let rows = family(&world, IID);
    assert_eq!(rows.len(), 4);
    assert_eq!(active(&world, IID), prior);
    assert_eq!(
        rows.iter()
            .filter(|(_, _, s)| *s == CredState::Revoked)
            .count(),
        1
    );
}

/// Cell "cleanup debt: primary error names the failed role; survives; blocks every new row;
/// the next renewal reconciles the same failed rows before minting".
#[test]
fn cleanup_debt_blocks_then_the_next_renewal_settles_it() {
    let (mut world, prior) = activated();
    // The first row update (the compensation revokes newest first: sessionLedger) fails
    // before it is sent.
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, manager_gate(IID).family_prefix()),
        Fault::Unavailable,
    );
    let err = renew_at(
        &mut world,
        1,
        T0 + 1_000,
        Some(RenewalFault::AfterSessionFinalize),
    )
    .unwrap_err();
    assert!(
        err.message
            .contains("ALSO renewal compensation revoke failed for 1 role (sessionLedger)"),
        "{err}"
    );
    assert_eq!(
        intent(&world).state,
        cotal_core::renewal::IntentState::Pending
    );
    assert_eq!(active(&world, IID).len(), 4, "the debt row is still active");

    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, manager_gate(IID).family_prefix()),
        Fault::Unavailable,
    );
    let before = family(&world, IID);
    let blocked = renew_at(&mut world, 2, T0 + 2_000, None).unwrap_err();
    assert_eq!(blocked.code, ErrorCode::FailedPrecondition);
    assert!(
        blocked
            .message
            .contains("prior manager renewal has unresolved cleanup debt"),
        "{blocked}"
    );
    assert_eq!(family(&world, IID), before, "blocked before minting");

    world.kv.clear_faults();
    let out = renew_at(&mut world, 3, T0 + 3_000, None).unwrap();
    assert_eq!(out.names().len(), 5);
    let now_active = active(&world, IID);
    assert_eq!(
        now_active.len(),
        6,
        "the debt row was revoked, a fresh family added"
    );
    assert!(prior.iter().all(|k| now_active.contains(k)));
}

// ---- ambiguity --------------------------------------------------------------------------------

/// Every intent write that is applied but unanswered is recognised by its own bytes.
#[test]
fn an_ambiguous_applied_intent_write_is_settled_by_read_back() {
    let (mut world, _) = activated();
    let key = cotal_core::names::keys::renewal_intent(&InstanceId::parse(IID).unwrap());
    for _ in 0..4 {
        world.kv.inject(
            Trigger::new(Store::Auth, KvOp::Update, key.clone()),
            Fault::AmbiguousApplied,
        );
    }
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, key.clone()),
        Fault::AmbiguousApplied,
    );
    let out = renew_at(&mut world, 1, T0 + 1_000, None).unwrap();
    assert_eq!(out.names().len(), 5);
    assert_eq!(
        intent(&world).state,
        cotal_core::renewal::IntentState::Complete
    );
}

#[test]
fn an_ambiguous_unapplied_intent_write_is_resent() {
    let (mut world, _) = activated();
    let key = cotal_core::names::keys::renewal_intent(&InstanceId::parse(IID).unwrap());
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, key.clone()),
        Fault::AmbiguousNotApplied,
    );
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, key),
        Fault::AmbiguousNotApplied,
    );
    let out = renew_at(&mut world, 1, T0 + 1_000, None).unwrap();
    assert_eq!(out.names().len(), 5);
}

/// An ambiguous row create that landed is attributed to this request by revision, so a later
/// failure revokes it; one that did not land is re-sent.
#[test]
fn an_ambiguous_row_create_is_attributed_by_revision() {
    let (mut world, prior) = activated();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, manager_gate(IID).family_prefix()),
        Fault::AmbiguousApplied,
    );
    let err = renew_at(
        &mut world,
        1,
        T0 + 1_000,
        Some(RenewalFault::AfterServeFinalize),
    )
    .unwrap_err();
    assert!(err.message.contains("after-serve-finalize"));
    assert_eq!(
        intent(&world).participants[0].ownership,
        cotal_core::renewal::Ownership::Created
    );
    assert_eq!(
        active(&world, IID),
        prior,
        "the created serve row was revoked"
    );

    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, manager_gate(IID).family_prefix()),
        Fault::AmbiguousNotApplied,
    );
    renew_at(&mut world, 2, T0 + 2_000, None).unwrap();
    assert_eq!(active(&world, IID).len(), 6);
}

/// The same-second reuse stays `reused` even when its create came back ambiguous.
#[test]
fn an_ambiguous_create_over_a_prior_row_is_a_reuse() {
    let (mut world, prior) = activated();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Create, manager_gate(IID).family_prefix()),
        Fault::AmbiguousNotApplied,
    );
    let err = renew_at(&mut world, 1, T0, Some(RenewalFault::AfterServeFinalize)).unwrap_err();
    assert!(err.message.contains("after-serve-finalize"));
    assert_eq!(active(&world, IID), prior);
}

/// An unanswered gate touch cannot be settled (identical bytes): fail closed, revoke the
/// created row, release nothing.
#[test]
fn an_ambiguous_gate_touch_fails_closed_and_revokes_the_created_row() {
    let (mut world, prior) = activated();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, manager_gate(IID).key()),
        Fault::AmbiguousApplied,
    );
    let err = renew_at(&mut world, 1, T0 + 1_000, None).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err}");
    assert_eq!(active(&world, IID), prior);
    assert_eq!(family(&world, IID).len(), 4);
}

// ---- the intent row ---------------------------------------------------------------------------

/// The intent's bytes follow the reference's field order at every level, and round-trip.
#[test]
fn the_cleanup_intent_is_byte_compatible_and_closed() {
    let (mut world, _) = activated();
    renew_at(&mut world, 1, T0 + 1_000, None).unwrap();
    let key = cotal_core::names::keys::renewal_intent(&InstanceId::parse(IID).unwrap());
    let bytes = world.kv.get(Store::Auth, &key).unwrap().value;
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        text.starts_with(r#"{"v":1,"kind":"manager-renewal-cleanup","requestId":"standing0000000000000001","state":"complete","participants":[{"role":"serve","ownership":"created","state":"finalized","row":{"credentialId":"sha256-"#),
        "{text}"
    );
    assert!(
        text.contains(r#""sourceChain":["root"],"state":"active","exp":"#),
        "{text}"
    );
    assert!(
        text.contains(r#","generation":1,"processEpoch":0,"registrationRevision":"#),
        "{text}"
    );
    let parsed = CleanupIntent::parse(&bytes, &key).unwrap();
    assert_eq!(parsed.to_bytes(), bytes);
    let extra = text.replacen(r#"{"v":1,"#, r#"{"v":1,"x":1,"#, 1);
    assert_eq!(
        CleanupIntent::parse(extra.as_bytes(), &key)
            .unwrap_err()
            .code,
        ErrorCode::Internal
    );
    let unresolved_final = text.replacen(
        r#""ownership":"created","state":"finalized""#,
        r#""ownership":"unresolved","state":"finalized""#,
        1,
    );
    assert!(CleanupIntent::parse(unresolved_final.as_bytes(), &key).is_err());
    assert!(CleanupIntent::parse(&bytes, "renewclean.manager.x").is_err());
}

// ---- property ---------------------------------------------------------------------------------

/// Property: no credential is released at a stale epoch. For every point k of a standing
/// renewal's effect sequence, a re-registration (which advances the process epoch and revokes
/// the family) runs to completion before effect k is answered. The renewal may succeed only if
/// the re-registration came after its last gate touch; whenever it fails, none of the rows it
/// created stays active.
#[test]
fn property_no_credential_is_released_at_a_stale_epoch() {
    let (mut probe_world, _) = registered();
    activate(&mut probe_world, T0);
    let mut probe = Replay::new(renewal(&probe_world, 1, T0 + 1_000));
    drive(&mut probe, &mut probe_world).unwrap();
    let total = probe.history().len();
    let last_touch = probe
        .history()
        .iter()
        .rposition(|(e, _)| matches!(e, cotal_core::machine::Effect::Kv(r) if r.key() == manager_gate(IID).key() && r.is_write()))
        .unwrap();
    for k in 0..=total {
        let (mut world, _) = registered();
        activate(&mut world, T0);
        let prior = active(&world, IID);
        let mut m = Replay::new(renewal(&world, 1, T0 + 1_000));
        let mut obs: Option<Observation> = None;
        let mut step = 0;
        let outcome: Result<_, EpError> = loop {
            match m.step(obs.take()) {
                Step::Done(r) => break r,
                Step::Effect(effect) => {
                    if step == k {
                        register(&mut world, IID, 2);
                    }
                    step += 1;
                    obs = Some(cotal_core::driver::World::perform(&mut world, &effect));
                }
            }
        };
        if k == total {
            register(&mut world, IID, 2);
        }
        match outcome {
            Ok(out) => {
                assert!(
                    k > last_touch,
                    "k={k}: released although the epoch moved before the last touch"
                );
                assert_eq!(out.host_fence.unwrap().process_epoch.0, 0);
            }
            Err(_) => {
                let now_active = active(&world, IID);
                assert!(
                    now_active.iter().all(|key| prior.contains(key)),
                    "k={k}: a refused renewal left a row active: {now_active:?}"
                );
            }
        }
        assert_eq!(epoch_of(&mut world).0, 1);
    }
}

/// Runs a renewal until its first ledger-row create has been performed, then drops it: the
/// request crashed between recording its serve participant and checkpointing the stage.
fn crash_after_first_stage(world: &mut ModelWorld, n: u8, now_ms: u64) {
    let mut m = Replay::new(renewal(world, n, now_ms));
    let mut obs: Option<Observation> = None;
    loop {
        match m.step(obs.take()) {
            Step::Done(r) => panic!("the renewal finished before staging: {r:?}"),
            Step::Effect(effect) => {
                let stage = matches!(&effect, cotal_core::machine::Effect::Kv(r)
                    if r.op() == KvOp::Create && r.key().starts_with(&manager_gate(IID).family_prefix()));
                obs = Some(cotal_core::driver::World::perform(world, &effect));
                if stage {
                    return;
                }
            }
        }
    }
}

/// A crash between the participant record and its ownership checkpoint leaves an unresolved
/// participant. The next renewal resolves it from durable facts (the row was written above the
/// intent's last revision, so the crashed request created it), revokes it and goes on — one
/// crash never blocks renewals for good (F92), and the prior family stays active.
#[test]
fn f92_an_unresolved_participant_is_settled_from_durable_facts() {
    let (mut world, prior) = activated();
    crash_after_first_stage(&mut world, 1, T0 + 1_000);
    let pending = intent(&world);
    assert_eq!(pending.state, cotal_core::renewal::IntentState::Pending);
    assert_eq!(
        pending.participants[0].ownership,
        cotal_core::renewal::Ownership::Unresolved
    );
    let stray: Vec<String> = active(&world, IID)
        .into_iter()
        .filter(|k| !prior.contains(k))
        .collect();
    assert_eq!(stray.len(), 1, "the crashed request staged one row");
    let renewed = renew_at(&mut world, 2, T0 + 2_000, None).unwrap();
    assert_eq!(renewed.names().len(), 5);
    assert_eq!(row_state(&world, &stray[0]), Some(CredState::Revoked));
    for key in &prior {
        assert_eq!(row_state(&world, key), Some(CredState::Active), "{key}");
    }
}

/// The same crash in the same second as the activation: the staged row is byte-identical to the
/// activation's (written below the intent's record), so it is a reuse and is never revoked.
#[test]
fn f92_an_unresolved_reuse_is_never_revoked() {
    let (mut world, prior) = activated();
    crash_after_first_stage(&mut world, 1, T0);
    assert_eq!(active(&world, IID), prior, "the stage reused the serve row");
    renew_at(&mut world, 2, T0 + 2_000, None).unwrap();
    for key in &prior {
        assert_eq!(row_state(&world, key), Some(CredState::Active), "{key}");
    }
}
