//! Manager-service operations on the KV model: the reference's manager-service-authority cells
//! (closed credential sets, `expiresAt`, `renew`, nkey reuse, scope) and manager-standing-renewal
//! cells (exact five duties, JWT subjects and accounts, the renewed serve grant, stale epoch,
//! foreign account/owner, swapped nkey, run renewals), plus F91 named tests and round-trip counts.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod renewal_support;

use cotal_core::driver::ModelWorld;
use cotal_core::journal::{FencingToken, RunEpoch, RunHolder, RunId};
use cotal_core::jwt;
use cotal_core::ledger::CredState;
use cotal_core::manager::{current_registration_proof, ManagerOperation};
use cotal_core::names::EndpointName;
use cotal_core::renewal::{
    check_credential_set, expires_at_ms, CredentialName as C, IssuedCredential, ManagerAuthority,
};
use cotal_core::run::{write_run_status, HostedRunStatus, RunState};
use cotal_core::ErrorCode;
use nkeys::KeyPairType;
use renewal_support::*;
use serde_json::json;

use common::{run, Proc};

fn proof_at(world: &mut ModelWorld) -> String {
    let gate = cotal_core::gate::EndpointGate::parse(
        &world
            .kv
            .get(
                cotal_core::kv::Store::Auth,
                &manager_gate(common::IID).key(),
            )
            .unwrap()
            .value,
    )
    .unwrap();
    let request = standing_request(
        "standing0000000000000001",
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

fn code(r: Result<impl std::fmt::Debug, cotal_core::EpError>) -> (ErrorCode, String) {
    let e = r.unwrap_err();
    (e.code, e.message)
}

// ---- pure checks -----------------------------------------------------------------------------

/// Cell "partial bundle → required credential serve", "extra credential → outside its closed
/// profile set", "run renewal returns exactly [runDriver, runMediator]".
#[test]
fn credential_sets_are_closed_per_operation() {
    let partial = check_credential_set(
        ManagerOperation::RenewStandingBundle,
        &[C::Supervisor, C::Executor, C::GoalWriter, C::SessionLedger],
    )
    .unwrap_err();
    assert_eq!(partial.code, ErrorCode::Internal);
    assert!(
        partial
            .message
            .contains("did not issue required credential serve"),
        "{partial}"
    );

    let extra = check_credential_set(
        ManagerOperation::RenewRunDriver,
        &[C::RunDriver, C::RunMediator, C::Supervisor],
    )
    .unwrap_err();
    assert_eq!(extra.code, ErrorCode::Internal);
    assert!(
        extra.message.contains("outside its closed profile set"),
        "{extra}"
    );

    let doubled = check_credential_set(
        ManagerOperation::RenewRunDriver,
        &[C::RunDriver, C::RunMediator, C::RunDriver],
    );
    assert!(doubled.is_err(), "a repeated name is outside the exact set");

    check_credential_set(
        ManagerOperation::RenewRunDriver,
        &[C::RunMediator, C::RunDriver],
    )
    .unwrap();
    check_credential_set(
        ManagerOperation::RenewStandingBundle,
        &[
            C::Supervisor,
            C::Executor,
            C::Serve,
            C::GoalWriter,
            C::SessionLedger,
        ],
    )
    .unwrap();
    // Only the renewals are exact; a non-renewal with an extra name passes the set check.
    check_credential_set(
        ManagerOperation::Prepare,
        &[C::Supervisor, C::Executor, C::Serve],
    )
    .unwrap();
    let missing = check_credential_set(ManagerOperation::Activate, &[C::Serve]).unwrap_err();
    assert!(
        missing.message.contains("required credential goalWriter"),
        "{missing}"
    );
}

/// Cell "`expiresAt` = min exp × 1000 (150 000 for exps 200/150)".
#[test]
fn expires_at_is_the_earliest_expiry_in_millis() {
    let c = |exp| IssuedCredential {
        jwt: String::new(),
        exp,
    };
    assert_eq!(
        expires_at_ms(&[(C::Supervisor, c(200)), (C::Executor, c(150))]).unwrap(),
        150_000
    );
    assert_eq!(expires_at_ms(&[]).unwrap_err().code, ErrorCode::Internal);
}

// ---- prepare / renew / scope / distinct --------------------------------------------------------

#[test]
fn prepare_issues_the_supervisor_and_executor_and_writes_nothing() {
    let (mut world, _) = registered();
    let (out, trips) = counted(
        &mut world,
        call(prepare_request("prepare00000000000000001"), T0),
    );
    let out = out.unwrap();
    assert_eq!(trips, 0);
    assert_eq!(out.names(), vec![C::Supervisor, C::Executor]);
    let now = T0 / 1000;
    assert_eq!(out.credential(C::Supervisor).unwrap().exp, now + 86_400);
    assert_eq!(out.credential(C::Executor).unwrap().exp, now + 300);
    assert_eq!(out.expires_at, (now + 300) * 1000);
    assert!(!out.to_json().contains("seed"));
    assert!(out
        .to_json()
        .starts_with(r#"{"v":1,"kind":"manager-service-authority","operation":"prepare""#));
}

/// Cell "`renew` returns [supervisor, executor]"; F91: renew re-checks the current gate.
#[test]
fn f91_renew_returns_supervisor_and_executor_for_the_current_registration_only() {
    let (mut world, _) = registered();
    activate(&mut world, T0);
    let proof = proof_at(&mut world);
    let mut raw = envelope("renew", "renew000000000000000001", common::IID);
    raw["registrationProof"] = json!(proof);
    let (out, trips) = counted(&mut world, call(parse(&raw), T0 + 5_000));
    assert_eq!(out.unwrap().names(), vec![C::Supervisor, C::Executor]);
    assert_eq!(trips, 1);

    raw["registrationProof"] = json!(format!("sha256:{}", "1".repeat(64)));
    let (c, m) = code(issue(&mut world, call(parse(&raw), T0)));
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert!(
        m.contains("proof does not match current host registration"),
        "{m}"
    );
}

/// Cell "`spawn`-only or `admin`-only → scope \"supervise\"".
#[test]
fn f90_spawn_or_admin_never_imply_supervise() {
    let (mut world, _) = registered();
    for scope in [vec!["spawn"], vec!["admin"], vec!["spawn", "admin"], vec![]] {
        let mut c = call(prepare_request("prepare00000000000000001"), T0);
        c.holder = cotal_core::manager::Supervisor::human(
            cotal_core::names::DerivedOwner::parse(c.holder.owner().as_str()).unwrap(),
            scope.iter().map(|s| (*s).to_owned()).collect(),
        );
        let (code, m) = code(issue(&mut world, c));
        assert_eq!(code, ErrorCode::PermissionDenied);
        assert!(m.contains("scope \"supervise\""), "{m}");
    }
}

/// Cell "nkey reuse → identities must be distinct" (across the five identities and a run's
/// driver/mediator).
#[test]
fn nkey_reuse_is_refused_before_anything_is_read() {
    let (mut world, _) = registered();
    let mut raw = envelope("prepare", "prepare00000000000000001", common::IID);
    raw["identities"]["executor"] = raw["identities"]["supervisor"].clone();
    let (c, m) = code(issue(&mut world, call(parse(&raw), T0)));
    assert_eq!(c, ErrorCode::BadRequest);
    assert!(m.contains("identities must be distinct"), "{m}");

    let mut raw = run_raw(&proof_at(&mut world), 0, &run_fence());
    raw["run"]["driverId"] = raw["identities"]["serve"]["id"].clone();
    let (out, trips) = counted(&mut world, call(parse(&raw), T0));
    assert!(out
        .unwrap_err()
        .message
        .contains("identities must be distinct"));
    assert_eq!(trips, 0);
}

// ---- activate ---------------------------------------------------------------------------------

#[test]
fn activate_releases_the_endpoint_family_and_returns_the_next_proof() {
    let (mut world, _) = registered();
    let (out, trips) = counted(
        &mut world,
        call(activate_request("activate000000000000001", common::IID), T0),
    );
    let out = out.unwrap();
    assert_eq!(out.names(), vec![C::Serve, C::GoalWriter, C::SessionLedger]);
    assert_eq!(trips, 16);
    let next = out.next_registration_proof.clone().unwrap();
    assert_eq!(next.as_str(), proof_at(&mut world));
    let rows = family(&world, common::IID);
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|(_, _, s)| *s == CredState::Active));
    let mut actors: Vec<&str> = rows.iter().map(|(_, a, _)| a.as_str()).collect();
    actors.sort_unstable();
    let iid = common::IID;
    assert_eq!(
        actors,
        vec![
            format!("manager_goal_{iid}"),
            format!("manager_serve_{iid}"),
            format!("manager_session_{iid}")
        ]
    );
}

#[test]
fn activate_refuses_a_foreign_proof_and_a_missing_gate() {
    let (mut world, _) = registered();
    let mut raw = envelope("activate", "activate000000000000001", common::IID);
    raw["contractArtifacts"] = json!([manager_document()]);
    raw["registrationProof"] = json!(format!("sha256:{}", "2".repeat(64)));
    let (c, m) = code(issue(&mut world, call(parse(&raw), T0)));
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert!(m.contains("registration proof does not match"), "{m}");

    let other = "jjjjjjjjjjjjjjjjjjjjjjjjjj";
    let (c, m) = code(issue(
        &mut world,
        call(activate_request("activate000000000000002", other), T0),
    ));
    assert_eq!(c, ErrorCode::FailedPrecondition);
    assert!(m.contains("activation found no issuance gate"), "{m}");
    assert!(family(&world, other).is_empty());
}

// ---- standing renewal -------------------------------------------------------------------------

/// Cells "renewal issues exactly the five duties, each JWT's `sub` = held nkey and
/// `issuer_account` = data account" and "renewed serve grant subscribes
/// `cotal.<space>.ep.inst.manager.<iid>.<command>.>` for every registered command and no other
/// instance".
#[test]
fn standing_renewal_issues_exactly_the_five_duties_to_the_held_keys() {
    let (mut world, _) = registered();
    activate(&mut world, T0);
    let proof = proof_at(&mut world);
    let (out, trips) = counted(
        &mut world,
        call(
            standing_request("standing0000000000000001", &proof, 0),
            T0 + 1_000,
        ),
    );
    let out = out.unwrap();
    assert_eq!(trips, 18 + 2, "one closure: two artifact reads");
    let mut names = out.names();
    names.sort_unstable();
    assert_eq!(
        names,
        vec![
            C::Supervisor,
            C::Executor,
            C::Serve,
            C::GoalWriter,
            C::SessionLedger
        ]
    );
    let ids: Vec<String> = identities().iter().map(|k| k.public_key()).collect();
    let held = [
        C::Supervisor,
        C::Executor,
        C::Serve,
        C::GoalWriter,
        C::SessionLedger,
    ];
    for (name, id) in held.iter().zip(&ids) {
        let claims = jwt::decode(&out.credential(*name).unwrap().jwt).unwrap();
        assert_eq!(&claims.sub, id, "{name}");
        assert_eq!(
            claims.user_account(),
            Some(account().public_key().as_str()),
            "{name}"
        );
        assert_ne!(
            claims.iss,
            account().public_key(),
            "signed by the signing key"
        );
    }
    let serve = jwt::decode(&out.credential(C::Serve).unwrap().jwt).unwrap();
    let subs = &serve.user().unwrap().permissions.subscribe.allow;
    let iid = common::IID;
    for command in COMMANDS {
        assert!(subs.contains(&format!("cotal.{SPACE}.ep.inst.manager.{iid}.{command}.>")));
    }
    let inst: Vec<&String> = subs.iter().filter(|s| s.contains(".ep.inst.")).collect();
    assert!(
        inst.iter().all(|s| s.contains(&format!(".manager.{iid}."))),
        "{inst:?}"
    );
    // Three fresh active rows beside the activation's three.
    assert_eq!(active(&world, iid).len(), 6);
}

/// F91: a renewal at a superseded process epoch is refused `conflict` and releases nothing.
#[test]
fn f91_renew_refuses_stale_epoch() {
    let (mut world, _) = registered();
    activate(&mut world, T0);
    register(&mut world, common::IID, 2);
    assert_eq!(epoch_of(&mut world).0, 1);
    let proof = proof_at(&mut world);
    let before = world.kv.last_sequence(cotal_core::kv::Store::Auth);
    let (c, m) = code(issue(
        &mut world,
        call(
            standing_request("standing0000000000000001", &proof, 0),
            T0 + 1_000,
        ),
    ));
    assert_eq!(c, ErrorCode::Conflict);
    assert!(m.contains("processEpoch is stale"), "{m}");
    assert_eq!(
        world.kv.last_sequence(cotal_core::kv::Store::Auth),
        before,
        "nothing written"
    );
}

/// Cells "foreign account/owner → permission-denied" and "swapped nkey → permission-denied".
#[test]
fn f91_renewal_refuses_foreign_account_owner_and_swapped_nkey() {
    let (mut world, _) = registered();
    activate(&mut world, T0);
    let proof = proof_at(&mut world);

    let mut raw = renewal_raw("renewStandingBundle", "standing0000000000000001", &proof, 0);
    raw["accountPublicKey"] = json!(key(KeyPairType::Account, 77).public_key());
    let (c, m) = code(issue(&mut world, call(parse(&raw), T0)));
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert!(m.contains("account"), "{m}");

    let mut foreign = call(standing_request("standing0000000000000001", &proof, 0), T0);
    foreign.holder = cotal_core::manager::Supervisor::human(
        cotal_core::names::DerivedOwner::parse(FOREIGN_OWNER).unwrap(),
        vec!["supervise".into()],
    );
    let (c, m) = code(issue(&mut world, foreign));
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert!(m.contains("owner"), "{m}");

    let mut raw = renewal_raw("renewStandingBundle", "standing0000000000000001", &proof, 0);
    raw["identities"]["serve"]["id"] = json!(key(KeyPairType::User, 99).public_key());
    let (c, m) = code(issue(&mut world, call(parse(&raw), T0)));
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert!(
        m.contains("proof does not match the current registration"),
        "{m}"
    );

    let (c, _) = code(issue(
        &mut world,
        call(
            parse(&renewal_raw(
                "renewStandingBundle",
                "standing0000000000000001",
                &proof,
                0,
            )),
            T0,
        )
        .tap_space("s2"),
    ));
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert_eq!(
        active(&world, common::IID).len(),
        3,
        "no refusal released a row"
    );
}

trait TapSpace {
    fn tap_space(self, space: &str) -> Self;
}

impl TapSpace for ManagerAuthority {
    fn tap_space(mut self, space: &str) -> Self {
        self.host.space = cotal_core::names::SpaceName::parse(space).unwrap();
        self
    }
}

/// A frozen gate refuses the renewal before anything is signed or written.
#[test]
fn a_frozen_gate_refuses_the_renewal() {
    let (mut world, _) = registered();
    activate(&mut world, T0);
    let proof = proof_at(&mut world);
    let gate = manager_gate(common::IID);
    let observed = run(
        &mut world,
        Proc(move |cx: &mut cotal_core::machine::Ctx<'_>| {
            cotal_core::issuance::observe_gate(cx, &gate)
        }),
    )
    .unwrap()
    .unwrap();
    let g = manager_gate(common::IID);
    run(
        &mut world,
        Proc(move |cx: &mut cotal_core::machine::Ctx<'_>| {
            cotal_core::barrier::freeze(cx, &g, &common::op(9), &observed)
        }),
    )
    .unwrap()
    .unwrap();
    let (c, m) = code(issue(
        &mut world,
        call(
            standing_request("standing0000000000000001", &proof, 0),
            T0 + 1_000,
        ),
    ));
    assert_eq!(c, ErrorCode::FailedPrecondition);
    assert!(m.contains("no open registration gate"), "{m}");
}

// ---- run renewal ------------------------------------------------------------------------------

const RUN: &str = "run-0123456789abcdef0123456789abcdef";
const TAKEOVER: &str = "00112233aabbccdd";

struct RunFenceFx {
    holder: String,
    takeover: &'static str,
    epoch: u64,
    token: u64,
}

fn run_fence() -> RunFenceFx {
    RunFenceFx {
        holder: format!("{}.{TAKEOVER}", identities()[0].public_key()),
        takeover: TAKEOVER,
        epoch: 2,
        token: 7,
    }
}

fn run_raw(proof: &str, epoch: u64, f: &RunFenceFx) -> serde_json::Value {
    let mut raw = renewal_raw("renewRunDriver", "rundriver000000000000001", proof, epoch);
    raw["run"] = json!({
        "runId": RUN, "holder": f.holder, "takeoverId": f.takeover, "epoch": f.epoch,
        "fencingToken": f.token, "driverId": key(KeyPairType::User, 11).public_key(),
        "mediatorId": key(KeyPairType::User, 12).public_key(),
    });
    raw
}

fn record_run(world: &mut ModelWorld, state: RunState, f: &RunFenceFx) {
    let status = HostedRunStatus {
        observed_spec_revision: 1,
        state,
        holder: RunHolder::parse(&f.holder).unwrap(),
        epoch: RunEpoch(f.epoch),
        fencing_token: FencingToken(f.token),
        journal_high: 3,
        at: T0,
    };
    run(
        world,
        Proc(move |cx: &mut cotal_core::machine::Ctx<'_>| {
            write_run_status(
                cx,
                &EndpointName::parse("manager").unwrap(),
                &RunId::parse(RUN).unwrap(),
                &status,
                None,
            )
        }),
    )
    .unwrap();
}

/// Cell "run renewal on a recorded running run → exactly runDriver + runMediator for the
/// requested nkeys" (and it echoes `run`).
#[test]
fn run_renewal_issues_exactly_the_driver_pair_for_the_requested_keys() {
    let (mut world, _) = registered();
    activate(&mut world, T0);
    record_run(&mut world, RunState::Running, &run_fence());
    let proof = proof_at(&mut world);
    let (out, trips) = counted(
        &mut world,
        call(parse(&run_raw(&proof, 0, &run_fence())), T0),
    );
    let out = out.unwrap();
    assert_eq!(trips, 4);
    assert_eq!(out.names(), vec![C::RunDriver, C::RunMediator]);
    assert_eq!(out.run.as_ref().unwrap().run_id.as_str(), RUN);
    assert!(out
        .to_json()
        .contains(&format!(r#""run":{{"runId":"{RUN}""#)));
    let driver = jwt::decode(&out.credential(C::RunDriver).unwrap().jwt).unwrap();
    let mediator = jwt::decode(&out.credential(C::RunMediator).unwrap().jwt).unwrap();
    assert_eq!(driver.sub, key(KeyPairType::User, 11).public_key());
    assert_eq!(mediator.sub, key(KeyPairType::User, 12).public_key());
    assert_eq!(driver.name, "run-driver");
    assert_eq!(mediator.name, "run-mediator");
}

/// Cells "foreign holder / stale takeover / stale fencing token / unrecorded run / stale epoch
/// → conflict".
#[test]
fn run_renewal_refuses_every_moved_fence_with_conflict() {
    let (mut world, _) = registered();
    activate(&mut world, T0);
    let proof = proof_at(&mut world);
    let (c, m) = code(issue(
        &mut world,
        call(parse(&run_raw(&proof, 0, &run_fence())), T0),
    ));
    assert_eq!(c, ErrorCode::Conflict, "unrecorded run");
    assert!(
        m.contains("does not hold the activated run and takeover fence"),
        "{m}"
    );

    record_run(&mut world, RunState::Running, &run_fence());
    let foreign = RunFenceFx {
        holder: format!("{}.{TAKEOVER}", key(KeyPairType::User, 50).public_key()),
        ..run_fence()
    };
    let stale_takeover = RunFenceFx {
        holder: format!("{}.ffffffffffffffff", identities()[0].public_key()),
        takeover: "ffffffffffffffff",
        ..run_fence()
    };
    let stale_token = RunFenceFx {
        token: 6,
        ..run_fence()
    };
    let stale_epoch = RunFenceFx {
        epoch: 1,
        ..run_fence()
    };
    for (what, fence) in [
        ("foreign holder", foreign),
        ("stale takeover", stale_takeover),
        ("stale fencing token", stale_token),
        ("stale run epoch", stale_epoch),
    ] {
        let (c, _) = code(issue(
            &mut world,
            call(parse(&run_raw(&proof, 0, &fence)), T0),
        ));
        assert_eq!(c, ErrorCode::Conflict, "{what}");
    }
    let (c, m) = code(issue(
        &mut world,
        call(parse(&run_raw(&proof, 3, &run_fence())), T0),
    ));
    assert_eq!(c, ErrorCode::Conflict, "stale serve epoch");
    assert!(m.contains("processEpoch is stale"), "{m}");
}
