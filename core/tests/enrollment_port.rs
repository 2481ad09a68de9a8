//! Enrollment and retirement preparation beyond the authorization cells: the port's enrollment
//! cells (reference-auth-service §11.6 "Enrollment races to add in the port"), F94–F96, the
//! envelope walk, ledger ambiguity settled by read-back, rollback, footprint-before-grant, the
//! result and row bytes, and the round trips per operation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod enrollment_common;

use cotal_core::actors::{ActorLedger, ActorsOutcome, ActorsRequest, DurablesRequest, RowSpace};
use cotal_core::driver::drive;
use cotal_core::kv::Store;
use cotal_core::machine::Effect;
use cotal_core::names::{LifecycleUid, Principal};
use cotal_core::ErrorCode;
use enrollment_common::*;
use serde_json::json;

fn uid_of(w: &cotal_core::driver::ModelWorld) -> LifecycleUid {
    managed_row(w, "worker").unwrap().lifecycle_uid.unwrap()
}

/// Port cell "retry with same tokenHash returns the same uid" (F95: the host's uid is kept).
#[test]
fn f95_retry_with_the_same_token_hash_returns_the_same_uid() {
    let mut w = world();
    let first = enroll_as(&mut w, &enrollment(), &["supervise"], 1).unwrap();
    let again = enroll_as(&mut w, &enrollment(), &["supervise"], 2).unwrap();
    assert!(first.first && !again.first);
    assert_eq!(first.material.lifecycle_uid, again.material.lifecycle_uid);
    assert_eq!(first.material.lifecycle_uid, LifecycleUid::mint([1; 20]));
    assert_eq!(
        w.durables.provisioned(),
        vec![(alias("worker"), first.material.lifecycle_uid)]
    );
}

/// Port cell "different tokenHash while held → conflict" naming the enrolled lifecycle.
#[test]
fn a_different_token_hash_while_held_is_a_conflict_naming_the_lifecycle() {
    let mut w = world();
    let first = enroll(&mut w, &enrollment()).unwrap();
    let uid = first.material.lifecycle_uid;
    let e = refused(
        enroll_as(&mut w, &enrollment_with(&hash('b')), &["supervise"], 2),
        ErrorCode::Conflict,
        &format!("managed agent \"worker\" is enrolled at lifecycle {uid}; prepare that lifecycle's retirement before enrolling a successor"),
    );
    assert_eq!(e.details, vec![json!({"lifecycleUid": uid.as_str()})]);
    assert_eq!(uid_of(&w), uid, "the enrolled row is untouched");
}

/// Port cell "provision failure on first enrollment leaves no row and no durables".
#[test]
fn a_provision_failure_on_a_first_enrollment_leaves_no_row_and_no_durables() {
    let mut w = world();
    w.durables.fail_next(1);
    refused(
        enroll(&mut w, &enrollment()),
        ErrorCode::Unavailable,
        "could not have its durables provisioned",
    );
    assert!(managed_row(&w, "worker").is_none());
    assert!(w.durables.provisioned().is_empty());
    let uid = LifecycleUid::mint([1; 20]);
    assert!(w
        .durables
        .requests()
        .contains(&DurablesRequest::Deprovision {
            principal: alias("worker"),
            lifecycle_uid: uid,
            member_channels: vec![],
        }));
}

/// A rollback whose own revoke fails keeps the original error and says what was left; the left
/// row is the same enrollment, so a retry with the same hash completes it.
#[test]
fn a_failed_rollback_is_noted_and_a_retry_completes_the_enrollment() {
    let mut w = world();
    w.durables.fail_next(1);
    // The grant succeeds; the revoke of the rollback fails (twice: the write and nothing else).
    let machine = enroll_machine(&enrollment(), &["supervise"], 1);
    let mut run = locked(&w, machine);
    let mut observation = None;
    let result = loop {
        match cotal_core::machine::Machine::step(&mut run, observation.take()) {
            cotal_core::machine::Step::Done(r) => break r,
            cotal_core::machine::Step::Effect(effect) => {
                if matches!(
                    &effect,
                    Effect::Actors(r) if matches!(**r, ActorsRequest::RevokeManagedAt { .. })
                ) {
                    w.actors.fail_next_writes(1);
                }
                observation = Some(cotal_core::driver::World::perform(&mut w, &effect));
            }
        }
    };
    let e = refused(
        result,
        ErrorCode::Unavailable,
        "could not have its durables provisioned",
    );
    assert!(
        e.message.contains("rolling back the grant failed too"),
        "{e}"
    );
    assert!(managed_row(&w, "worker").is_some());
    // The finished machine releases the alias lock when dropped; the retry takes it anew.
    drop(run);
    let retry = enroll_as(&mut w, &enrollment(), &["supervise"], 2).unwrap();
    assert_eq!(retry.material.lifecycle_uid, LifecycleUid::mint([1; 20]));
}

/// Port cell "provision failure on a retry keeps the row".
#[test]
fn a_provision_failure_on_a_retry_keeps_the_row() {
    let mut w = world();
    let first = enroll(&mut w, &enrollment()).unwrap();
    w.durables.fail_next(1);
    let e = refused(
        enroll_as(&mut w, &enrollment(), &["supervise"], 2),
        ErrorCode::Unavailable,
        "could not have its durables provisioned",
    );
    assert!(e.message.contains("the enrolled row is kept"), "{e}");
    assert_eq!(uid_of(&w), first.material.lifecycle_uid);
    assert!(!w
        .durables
        .requests()
        .iter()
        .any(|r| matches!(r, DurablesRequest::Deprovision { .. })));
}

/// Port cell "prepare then enroll → fresh uid"; the retired uid never returns (F95).
#[test]
fn f95_prepare_then_enroll_gets_a_fresh_uid() {
    let mut w = world();
    let first = enroll_as(&mut w, &enrollment(), &["supervise"], 1).unwrap();
    let old = first.material.lifecycle_uid;
    let prepared = release(&mut w, &prepare_for(old.as_str())).unwrap();
    assert!(prepared.released);
    assert!(managed_row(&w, "worker").is_none());
    assert!(w.durables.footprint(&alias("worker"), &old).is_none());
    let next = enroll_as(&mut w, &enrollment_with(&hash('b')), &["supervise"], 2).unwrap();
    assert!(next.first);
    assert_ne!(next.material.lifecycle_uid, old);
    assert_eq!(next.material.lifecycle_uid, LifecycleUid::mint([2; 20]));
}

/// Port cell "envelope refusal names what exceeds": the spawner `cli` lacks the scope, the read
/// pattern and the role; nothing is written and no durable exists.
#[test]
fn an_envelope_refusal_names_what_exceeds_and_the_widening_command() {
    let mut w = world();
    let raw = edit(
        edit(
            edit(
                enrollment(),
                &["target", "capabilities"],
                Some(json!(["run", "deploy"])),
            ),
            &["target", "allowSubscribe"],
            Some(json!(["general", "ops.>"])),
        ),
        &["target", "role"],
        Some(json!("ops")),
    );
    let e = refused(
        enroll(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "agent \"worker\" would exceed its spawner's grant - delegation only narrows: ",
    );
    for part in [
        "scope [deploy] beyond [spawn, supervise, run, role:worker]",
        "read [ops.>] beyond [general, team.>]",
        "role \"ops\" beyond scope",
        "`role:ops` capability",
        &format!("cotal actor grant cli --owner {OWNER} --scope 'spawn,supervise,run,role:worker,deploy,role:ops' --allow-subscribe 'general,team.>,ops.>' --allow-publish 'general'"),
        ", then respawn",
    ] {
        assert!(e.message.contains(part), "wanted {part:?} in {e}");
    }
    assert!(managed_row(&w, "worker").is_none());
    assert!(w.durables.requests().is_empty());
}

/// A retry re-walks the envelope: a spawner narrowed since the first enrollment refuses it.
#[test]
fn a_retry_rewalks_the_envelope_after_the_spawner_narrowed() {
    let mut w = world();
    enroll(&mut w, &enrollment()).unwrap();
    grant_cli(
        &w,
        cli_row(&["supervise", "role:worker"], &["general"], &["general"]),
    );
    refused(
        enroll(&mut w, &enrollment()),
        ErrorCode::PermissionDenied,
        "scope [run] beyond [supervise, role:worker]",
    );
}

/// The envelope walk's fail-closed branches: a missing spawner, a cycle, a cross-owner hop, and
/// an admin ancestor as an authority root.
#[test]
fn the_envelope_walk_denies_missing_cyclic_and_cross_owner_chains() {
    let w = world();
    let managed = |actor: &str, parent: &str| {
        let mut row = cli_row(&[], &[], &[]);
        row.actor = cotal_core::names::ActorToken::parse(actor).unwrap();
        row.parent = Some(Principal::parse(parent).unwrap());
        row.token_hash = Some(cotal_core::actors::TokenHash::parse(&hash('c')).unwrap());
        row
    };
    let grant = |row| w.actors.execute(&ActorsRequest::GrantManaged(row));
    let refusal = |o: ActorsOutcome| match o {
        ActorsOutcome::Refused(why) => why,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(refusal(grant(managed("a", &format!("{OWNER}.ghost"))))
        .contains("spawner \"u_cccccccccccccccccccccccccc.ghost\" has no grant in this space"));
    assert!(refusal(grant(managed("b", &format!("{OTHER_OWNER}.cli")))).contains("has no grant"));
    // a → b → a: written directly (the shape a tampered ledger has), then walked.
    let mut a = managed("a", &format!("{OWNER}.b"));
    a.lifecycle_uid = Some(LifecycleUid::mint([3; 20]));
    w.actors
        .put_raw(RowSpace::Managed, &alias("a"), &a.to_file_bytes());
    w.actors.put_raw(
        RowSpace::Managed,
        &alias("b"),
        &managed("b", &format!("{OWNER}.a")).to_file_bytes(),
    );
    let walk = w.actors.execute(&ActorsRequest::CheckEnvelope {
        row: managed("c", &format!("{OWNER}.a")),
        boundary: cotal_core::actors::Boundary::Exchange,
    });
    assert!(refusal(walk).contains("contains a cycle"));
    // Cross-owner: another owner's admin-less spawner.
    let mut foreign = cli_row(&["spawn"], &[">"], &[">"]);
    foreign.owner = cotal_core::names::OwnerToken::parse(OTHER_OWNER).unwrap();
    grant_cli(&w, foreign);
    assert!(refusal(grant(managed("d", &format!("{OTHER_OWNER}.cli"))))
        .contains("of a different owner"));
    // An admin spawner is a root: anything under it passes.
    let mut admin = cli_row(&["admin"], &[], &[]);
    admin.actor = cotal_core::names::ActorToken::parse("root").unwrap();
    grant_cli(&w, admin);
    let mut wide = managed("e", &format!("{OWNER}.root"));
    wide.scope = vec!["anything".into()];
    wide.allow_subscribe = vec![">".into()];
    assert!(matches!(grant(wide), ActorsOutcome::Granted(_)));
}

/// A managed agent never shadows an interactive row of the same name.
#[test]
fn enrollment_refuses_to_shadow_an_interactive_row() {
    let mut w = world();
    let mut interactive = cli_row(&[], &[], &[]);
    interactive.actor = cotal_core::names::ActorToken::parse("worker").unwrap();
    grant_cli(&w, interactive);
    refused(
        enroll(&mut w, &enrollment()),
        ErrorCode::PermissionDenied,
        "already has an interactive grant - a managed agent cannot shadow it",
    );
    assert!(managed_row(&w, "worker").is_none());
}

/// F94: the decision runs against the CURRENT gate: after a re-registration (epoch 5,
/// revision 10) the old proof and epoch are refused.
#[test]
fn f94_enrollment_is_authorized_only_against_the_current_registration() {
    let mut w = world();
    let gate_key = "epgate.manager.iiiiiiiiiiiiiiiiiiiiiiiiii";
    let gate =
        cotal_core::gate::EndpointGate::parse(&w.kv.get(Store::Auth, gate_key).unwrap().value)
            .unwrap();
    let op_id = common::op(100);
    let next = gate
        .frozen(cotal_core::gate::GateOp::registration(op_id.clone()))
        .unwrap()
        .reopened(
            &op_id,
            common::coords(EPOCH + 1, EPOCH + 1, REVISION + 1, 0),
        )
        .unwrap();
    w.kv.put(Store::Auth, gate_key, &next.to_bytes());
    refused(
        enroll(&mut w, &enrollment()),
        ErrorCode::Conflict,
        "epoch 4 is stale; current is 5",
    );
    let raw = edit(enrollment(), &["serveEpoch"], Some(json!(EPOCH + 1)));
    refused(
        enroll(&mut w, &raw),
        ErrorCode::PermissionDenied,
        "does not match current host registration",
    );
    let raw = edit(
        raw,
        &["registrationProof"],
        Some(json!(proof_for(IID, REVISION + 1, EPOCH + 1, OWNER))),
    );
    enroll(&mut w, &raw).unwrap();
}

/// F95: the uid comes from host entropy alone; the request cannot name it, and the parent is the
/// authenticating interactive actor.
#[test]
fn f95_the_host_picks_the_uid_and_the_row_records_its_parent() {
    let mut w = world();
    let r = enroll_as(&mut w, &enrollment(), &["supervise"], 42).unwrap();
    let row = managed_row(&w, "worker").unwrap();
    assert_eq!(row.lifecycle_uid, Some(LifecycleUid::mint([42; 20])));
    assert_eq!(r.material.lifecycle_uid, LifecycleUid::mint([42; 20]));
    assert_eq!(row.parent.unwrap().key(), format!("{OWNER}.cli"));
    assert_eq!(row.token_hash.unwrap().as_str(), hash('a'));
}

/// F96: the preparation releases only its own lifecycle: a successor's row (another uid) and an
/// absent row are no-ops.
#[test]
fn f96_prepare_retirement_at_another_uid_or_none_is_a_no_op() {
    let mut w = world();
    let r = enroll(&mut w, &enrollment()).unwrap();
    let prepared = release(&mut w, &prepare_for(TARGET_UID)).unwrap();
    assert!(!prepared.released);
    assert_eq!(uid_of(&w), r.material.lifecycle_uid);
    assert!(w
        .durables
        .footprint(&alias("worker"), &r.material.lifecycle_uid)
        .is_some());
    let uid = r.material.lifecycle_uid.as_str().to_owned();
    assert!(release(&mut w, &prepare_for(&uid)).unwrap().released);
    assert!(
        !release(&mut w, &prepare_for(&uid)).unwrap().released,
        "a retry after release is a no-op"
    );
}

/// Footprint before grant: a failed deprovision keeps the row, so a retry still knows what to
/// purge; the member channels are the row's concrete read entries.
#[test]
fn prepare_retirement_deprovisions_before_it_revokes() {
    let mut w = world();
    let raw = edit(
        enrollment(),
        &["target", "allowSubscribe"],
        Some(json!(["general", "team.>"])),
    );
    let r = enroll(&mut w, &raw).unwrap();
    let uid = r.material.lifecycle_uid.as_str().to_owned();
    w.durables.fail_next(1);
    refused(
        release(&mut w, &prepare_for(&uid)),
        ErrorCode::Unavailable,
        "the grant is kept so a retry knows what to purge",
    );
    assert!(managed_row(&w, "worker").is_some());
    assert!(release(&mut w, &prepare_for(&uid)).unwrap().released);
    let deprovisions: Vec<_> = w
        .durables
        .requests()
        .into_iter()
        .filter(|r| matches!(r, DurablesRequest::Deprovision { .. }))
        .collect();
    assert_eq!(deprovisions.len(), 2);
    assert!(deprovisions.iter().all(|d| matches!(d, DurablesRequest::Deprovision { member_channels, .. } if member_channels == &vec!["general".to_owned()])));
}

/// A ledger write that fails without landing refuses `unavailable` and leaves nothing.
#[test]
fn a_ledger_write_that_did_not_land_is_unavailable_and_leaves_no_row() {
    let mut w = world();
    w.actors.fail_next_writes(1);
    refused(
        enroll(&mut w, &enrollment()),
        ErrorCode::Unavailable,
        "the grant was not written",
    );
    assert!(managed_row(&w, "worker").is_none());
    assert!(
        w.durables.requests().is_empty(),
        "no durable before a grant"
    );
}

/// A ledger write reported failed that did land is settled by read-back as written, and the
/// enrollment completes.
#[test]
fn an_ambiguous_ledger_write_that_landed_is_settled_by_read_back() {
    let mut w = world();
    w.actors.ambiguous_next_writes(1);
    let r = enroll(&mut w, &enrollment()).unwrap();
    assert_eq!(uid_of(&w), r.material.lifecycle_uid);
}

/// A broken row for the alias denies, `internal`, naming the file.
#[test]
fn a_corrupt_managed_row_denies_with_internal() {
    let mut w = world();
    w.actors
        .put_raw(RowSpace::Managed, &alias("worker"), b"{\"ver\":2}");
    refused(
        enroll(&mut w, &enrollment()),
        ErrorCode::Internal,
        "managed-actors/u_cccccccccccccccccccccccccc.worker.json: unknown actor-grant version 2",
    );
    let mut foreign = cli_row(&[], &[], &[]);
    foreign.actor = cotal_core::names::ActorToken::parse("other").unwrap();
    foreign.token_hash = Some(cotal_core::actors::TokenHash::parse(&hash('c')).unwrap());
    w.actors.put_raw(
        RowSpace::Managed,
        &alias("worker"),
        &foreign.to_file_bytes(),
    );
    refused(
        enroll(&mut w, &enrollment()),
        ErrorCode::Internal,
        "does not match requested canonical principal",
    );
}

/// The row bytes are the reference's `JSON.stringify({ver: 1, ...row}, null, 2)`.
#[test]
fn the_managed_row_file_bytes_match_the_reference_layout() {
    let mut w = world();
    enroll_as(&mut w, &enrollment(), &["supervise"], 1).unwrap();
    let bytes = w.actors.raw(RowSpace::Managed, &alias("worker")).unwrap();
    let expected = format!(
        "{{\n  \"ver\": 1,\n  \"owner\": \"{OWNER}\",\n  \"actor\": \"worker\",\n  \"scope\": [\n    \"run\"\n  ],\n  \"allowSubscribe\": [\n    \"general\"\n  ],\n  \"allowPublish\": [\n    \"general\"\n  ],\n  \"role\": \"worker\",\n  \"parent\": \"{OWNER}.cli\",\n  \"label\": \"smoke worker\",\n  \"tokenHash\": \"{}\",\n  \"lifecycleUid\": \"{}\",\n  \"grantedAt\": \"2023-11-14T22:13:20.000Z\"\n}}",
        hash('a'),
        LifecycleUid::mint([1; 20])
    );
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);
}

/// The results carry the reference's keys in its order.
#[test]
fn the_results_have_the_reference_shape() {
    let mut w = world();
    let r = enroll(&mut w, &enrollment()).unwrap();
    let uid = r.material.lifecycle_uid.clone();
    assert_eq!(
        r.to_json(),
        format!(
            "{{\"v\":1,\"kind\":\"manager-managed-agent-enrollment\",\"space\":\"s1\",\"owner\":\"{OWNER}\",\"actor\":\"cli\",\"instanceId\":\"{IID}\",\"managerLifecycleUid\":\"{MUID}\",\"requestId\":\"enroll00000000000000000000\",\"registrationProof\":\"{}\",\"serveEpoch\":4,\"material\":{{\"owner\":\"{OWNER}\",\"actor\":\"worker\",\"lifecycleUid\":\"{uid}\",\"sentinelCreds\":\"-----BEGIN NATS USER JWT-----sentinel\",\"subscribe\":[\"general\"],\"allowSubscribe\":[\"general\"],\"allowPublish\":[\"general\"],\"agentBearerExchangeUrl\":\"https://auth.example/exchange\"}}}}",
            proof()
        )
    );
    let p = release(&mut w, &prepare_for(uid.as_str())).unwrap();
    let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "v",
            "kind",
            "space",
            "owner",
            "actor",
            "instanceId",
            "managerLifecycleUid",
            "requestId",
            "target",
            "opId",
            "prepared"
        ]
    );
    assert_eq!(v["prepared"], json!(true));
    assert_eq!(
        v["target"],
        json!({"owner": OWNER, "actor": "worker", "lifecycleUid": uid.as_str()})
    );
}

/// Round trips per operation, counted on the model (the module docs and the report quote them).
#[test]
fn round_trips_per_operation() {
    let count = |w: &cotal_core::driver::ModelWorld| {
        let kv = w.log.iter().filter(|e| matches!(e, Effect::Kv(_))).count();
        let ledger = w
            .log
            .iter()
            .filter(|e| matches!(e, Effect::Actors(_)))
            .count();
        let durables = w
            .log
            .iter()
            .filter(|e| matches!(e, Effect::Durables(_)))
            .count();
        (kv, ledger, durables)
    };
    let mut w = world();
    enroll(&mut w, &enrollment()).unwrap();
    assert_eq!(count(&w), (1, 2, 1), "first enrollment");
    w.log.clear();
    let r = enroll(&mut w, &enrollment()).unwrap();
    assert_eq!(count(&w), (1, 2, 1), "retry");
    w.log.clear();
    release(&mut w, &prepare_for(r.material.lifecycle_uid.as_str())).unwrap();
    assert_eq!(count(&w), (1, 2, 1), "prepare-retirement");
    w.log.clear();
    release(&mut w, &prepare()).unwrap();
    assert_eq!(
        count(&w),
        (1, 1, 0),
        "prepare-retirement with nothing to release"
    );
}

/// The machine is a pure function of its observations: re-driving the same inputs on a fresh
/// copy of the world takes the same path.
#[test]
fn enrollment_is_deterministic() {
    let mut a = world();
    let mut b = world();
    let ra = drive(
        &mut locked(&a, enroll_machine(&enrollment(), &["supervise"], 5)),
        &mut a,
    )
    .unwrap();
    let rb = drive(
        &mut locked(&b, enroll_machine(&enrollment(), &["supervise"], 5)),
        &mut b,
    )
    .unwrap();
    assert_eq!(ra, rb);
    assert_eq!(a.log, b.log);
}
