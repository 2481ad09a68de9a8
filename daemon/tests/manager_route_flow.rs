//! The manager route end to end (issue 12): `POST /manager-service-authority` on the running
//! daemon over real HTTP, against a manager instance registered on the space's own
//! operator-mode server — `prepare`, the instance's registration, `activate`, `renew`,
//! `renewStandingBundle` and `renewRunDriver`, each answer's credentials verified against the
//! data account and connected to the real server, the proofs each answer returns carried into
//! the next request (the order of `core/tests/renewal_cells.rs`, now on the plane's restricted
//! remote-manager issuer connection).
//!
//! What is real: the IdP token, the grant ledger, the plane and its issuer connection, every
//! KV row the route reads and writes, the contract publication (on the connection of the
//! supervisor credential `prepare` issued), the instance's own registration over the executor
//! credential `prepare` issued (its gate provision, barrier, ledger and records writes on a real
//! server, eviction through the plane's maintenance door, verified by the servers' own
//! connection listing and the system account's kick), and every connect.
//!
//! What stands in for a missing piece, marked `STAND-IN` where it happens (in the fixture this
//! test shares with `benches/renewal.rs`, `common/manager.rs`): the hosted run a
//! `renewRunDriver` renews is written by the admin connection (the run driver's write).
//!
//! Regressions this flow found on the real server (the model has no grants): the issuer
//! connection could not write the renewal cleanup intent `renewclean.manager.<iid>`, so every
//! `activate` stalled on an unacknowledged write, and it bound no contract store, so every
//! `renewStandingBundle` was refused reading the registered closures
//! (`plane_grants::remote_manager_issuer` rows 18–20).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::manager::*;
use common::{POLL, READY_TIMEOUT, SPACE};
use cotal_core::gate::GateState;
use cotal_core::jwt::Claims;
use cotal_core::names::CredentialId;
use cotal_io_nats::async_nats;
use nkeys::{KeyPair, KeyPairType};
use serde_json::json;
use sha2::{Digest as _, Sha256};

const STANDING_SECS: u64 = 86_400;
const EXECUTOR_SECS: u64 = 300;

/// The family row key of an issued endpoint-family JWT: `epcred.manager.<iid>.sha256-<hex>`,
/// the credential id being the JWT's digest (reference §4.4).
fn row_key(token: &str) -> String {
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    format!(
        "{}{}",
        manager_gate().family_prefix(),
        CredentialId::from_sha256_hex(&digest)
    )
}

/// The sorted, deduplicated row keys of `tokens`.
fn row_keys<'a>(tokens: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let mut keys: Vec<String> = tokens.into_iter().map(|t| row_key(t)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The whole flow on a real server: prepare → the manager registers its instance → activate
/// → renew → renewStandingBundle → renewRunDriver, each answer 200 with exactly its closed
/// credential set, every JWT verified against the data account and admitted by the server,
/// each proof the next request presents the one the previous answer returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_route_flow_prepare_activate_and_renewals_on_a_real_server() {
    let f = Flow::new().await;

    // prepare: the supervisor (standing) and executor (300 s) remote-manager pair, no proof,
    // nothing written.
    let prepared = f.granted(&f.envelope("prepare", "prepare00000000000000001"));
    assert_eq!(Flow::names(&prepared), ["executor", "supervisor"]);
    assert_eq!(prepared["operation"], "prepare");
    assert_eq!(prepared["owner"], f.owner.as_str());
    assert!(
        prepared.get("nextRegistrationProof").is_none(),
        "{prepared}"
    );
    let (supervisor_jwt, supervisor) = f.credential(&prepared, "supervisor", &f.keys[0]);
    let (executor_jwt, executor) = f.credential(&prepared, "executor", &f.keys[1]);
    assert_eq!(supervisor.name, "remote-manager");
    assert_eq!(executor.name, "remote-manager");
    let lifetime = |c: &Claims| c.exp.unwrap().0 - c.iat.0;
    assert_eq!(lifetime(&supervisor), STANDING_SECS);
    assert_eq!(lifetime(&executor), EXECUTOR_SECS);
    assert_eq!(
        prepared["expiresAt"].as_u64(),
        Some(executor.exp.unwrap().0 * 1000)
    );
    assert!(f.family().await.is_empty(), "prepare writes nothing");

    // The manager connects with both, and publishes its contract on the supervisor's
    // connection; the supervisor holds no row of the auth bucket (F98): its gate write is a
    // permission violation.
    let mut supervisor = f.connect(&supervisor_jwt, &f.keys[0]).await;
    let mut executor = f.connect(&executor_jwt, &f.keys[1]).await;
    assert!(executor.violations().await.is_empty());
    let closure = f.publish_contract(&supervisor).await;
    assert!(supervisor.violations().await.is_empty());
    supervisor
        .client
        .publish(
            format!("$KV.cotal_auth_{SPACE}.epgate.manager.{IID}"),
            "{}".into(),
        )
        .await
        .unwrap();
    let violations = supervisor.violations().await;
    assert!(
        violations
            .iter()
            .any(|v| v.to_lowercase().contains("permissions violation")),
        "{violations:?}"
    );

    // The instance registers itself over the executor credential, as the reference manager
    // does (see the fixture's module doc).
    let registered = f.register(&closure, 1).await;
    let gate = f.gate().await;
    assert_eq!(gate.state(), GateState::Open);
    assert_eq!(gate.process_epoch().0, 0);
    assert_eq!(
        gate.registration_revision(),
        registered.registration_revision
    );
    assert_eq!(
        gate.principal().to_string(),
        format!("{}.manager_serve_{IID}", f.owner)
    );

    // activate: the endpoint family released through the fence, the next proof returned.
    let activated = f.granted(&f.activate_request("activate000000000000001"));
    assert_eq!(
        Flow::names(&activated),
        ["goalWriter", "serve", "sessionLedger"]
    );
    let next = activated["nextRegistrationProof"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(next, f.current_proof().await);
    let (serve_jwt, serve) = f.credential(&activated, "serve", &f.keys[2]);
    let (goal_jwt, goal) = f.credential(&activated, "goalWriter", &f.keys[3]);
    let (session_jwt, session) = f.credential(&activated, "sessionLedger", &f.keys[4]);
    assert_eq!(serve.name, "endpoint-serve");
    assert_eq!(goal.name, "goal-writer");
    assert_eq!(session.name, "session-ledger");
    let activation = [serve_jwt.clone(), goal_jwt.clone(), session_jwt.clone()];
    assert_eq!(f.active().await, row_keys(&activation));
    let mut holders: Vec<String> = f.family().await.into_iter().map(|(_, a, _)| a).collect();
    holders.sort_unstable();
    assert_eq!(
        holders,
        [
            format!("manager_goal_{IID}"),
            format!("manager_serve_{IID}"),
            format!("manager_session_{IID}"),
        ]
    );

    // The serve credential connects and serves its own instance's command rails.
    let mut serving = f.connect(&serve_jwt, &f.keys[2]).await;
    for command in COMMANDS {
        let rail = format!("cotal.{SPACE}.ep.inst.manager.{IID}.{command}.>");
        let subs = &serve.user().unwrap().permissions.subscribe.allow;
        assert!(subs.contains(&rail), "{rail} not in {subs:?}");
        let _sub = serving.client.subscribe(rail).await.unwrap();
    }
    assert!(serving.violations().await.is_empty());
    for (token, holder) in [(&goal_jwt, &f.keys[3]), (&session_jwt, &f.keys[4])] {
        let mut h = f.connect(token, holder).await;
        assert!(h.violations().await.is_empty());
    }

    // renew: the supervisor/executor pair again, for the current registration only.
    let mut renew = f.envelope("renew", "renew000000000000000001");
    renew["registrationProof"] = json!(next);
    let renewed = f.granted(&renew);
    assert_eq!(Flow::names(&renewed), ["executor", "supervisor"]);
    let (renewed_supervisor, _) = f.credential(&renewed, "supervisor", &f.keys[0]);
    f.credential(&renewed, "executor", &f.keys[1]);
    f.connect(&renewed_supervisor, &f.keys[0]).await;
    assert_eq!(
        f.active().await,
        row_keys(&activation),
        "renew releases no family row"
    );

    // renewStandingBundle at the registered epoch with the activation's proof: exactly the five
    // duties, the serve grant re-derived from the registered spec, three fresh family rows.
    let standing =
        f.granted(&f.renewal("renewStandingBundle", "standing0000000000000001", &next, 0));
    assert_eq!(
        Flow::names(&standing),
        [
            "executor",
            "goalWriter",
            "serve",
            "sessionLedger",
            "supervisor"
        ]
    );
    assert_eq!(standing["processEpoch"], 0);
    assert_eq!(standing["accountPublicKey"], f.material.data_account());
    for (name, holder) in [
        ("supervisor", &f.keys[0]),
        ("executor", &f.keys[1]),
        ("serve", &f.keys[2]),
        ("goalWriter", &f.keys[3]),
        ("sessionLedger", &f.keys[4]),
    ] {
        let (token, _) = f.credential(&standing, name, holder);
        let mut h = f.connect(&token, holder).await;
        assert!(h.violations().await.is_empty(), "{name}");
    }
    let (renewed_serve_jwt, renewed_serve) = f.credential(&standing, "serve", &f.keys[2]);
    let subs = &renewed_serve.user().unwrap().permissions.subscribe.allow;
    for command in COMMANDS {
        assert!(subs.contains(&format!("cotal.{SPACE}.ep.inst.manager.{IID}.{command}.>")));
    }
    assert!(
        subs.iter()
            .filter(|s| s.contains(".ep.inst."))
            .all(|s| s.contains(&format!(".manager.{IID}."))),
        "{subs:?}"
    );
    // The renewal's family rows are active beside the activation's: fresh rows, or the very
    // same rows where a renewal signed in the activation's second reproduced a JWT byte for
    // byte (reference §4.6 `reused`).
    let (renewed_goal, _) = f.credential(&standing, "goalWriter", &f.keys[3]);
    let (renewed_session, _) = f.credential(&standing, "sessionLedger", &f.keys[4]);
    let both: Vec<String> = activation
        .iter()
        .cloned()
        .chain([renewed_serve_jwt, renewed_goal, renewed_session])
        .collect();
    assert_eq!(f.active().await, row_keys(&both));

    // renewRunDriver for a run recorded running on this instance: exactly the driver pair for
    // the requested nkeys, echoing the run.
    let fence = f.run_fence();
    f.record_run(&fence).await;
    let driven = f.granted(&f.run_request(&next, 0, &fence));
    assert_eq!(Flow::names(&driven), ["runDriver", "runMediator"]);
    assert_eq!(driven["run"]["runId"], RUN);
    let (driver_jwt, driver) = f.credential(&driven, "runDriver", &f.driver);
    let (mediator_jwt, mediator) = f.credential(&driven, "runMediator", &f.mediator);
    assert_eq!(driver.name, "run-driver");
    assert_eq!(mediator.name, "run-mediator");
    f.connect(&driver_jwt, &f.driver).await;
    f.connect(&mediator_jwt, &f.mediator).await;
    assert_eq!(
        f.active().await,
        row_keys(&both),
        "a run renewal releases no family row"
    );
}

/// The refusals the model covers, over HTTP on the real server: a forged proof on every
/// proven operation, a stale serve epoch, a foreign account, a swapped nkey, an unrecorded or
/// moved run — each a 403 with its sentence, and none releases a family row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_route_flow_refusals_are_403_and_release_nothing() {
    let f = Flow::new().await;
    let (_supervisor, _) = f.prepared_and_registered().await;
    let forged = format!("sha256:{}", "1".repeat(64));

    let mut activate = f.activate_request("activate000000000000001");
    activate["registrationProof"] = json!(forged);
    f.refused(&activate, "registration proof does not match");
    assert!(f.family().await.is_empty());

    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let next = activated["nextRegistrationProof"]
        .as_str()
        .unwrap()
        .to_owned();
    let released = f.active().await;
    assert_eq!(released.len(), 3);

    let mut renew = f.envelope("renew", "renew000000000000000001");
    renew["registrationProof"] = json!(forged);
    f.refused(&renew, "proof does not match current host registration");

    let standing = |proof: &str, epoch| {
        f.renewal(
            "renewStandingBundle",
            "standing0000000000000001",
            proof,
            epoch,
        )
    };
    f.refused(
        &standing(&forged, 0),
        "proof does not match the current registration",
    );
    f.refused(&standing(&next, 1), "processEpoch is stale");
    let mut foreign = standing(&next, 0);
    foreign["accountPublicKey"] = json!(KeyPair::new_from_raw(KeyPairType::Account, [77; 32])
        .unwrap()
        .public_key());
    f.refused(&foreign, "account");
    let mut swapped = standing(&next, 0);
    swapped["identities"]["serve"]["id"] = json!(key(99).public_key());
    f.refused(&swapped, "proof does not match the current registration");

    let fence = f.run_fence();
    f.refused(
        &f.run_request(&next, 0, &fence),
        "does not hold the activated run and takeover fence",
    );
    f.record_run(&fence).await;
    let moved = RunFence {
        token: fence.token - 1,
        ..f.run_fence()
    };
    f.refused(
        &f.run_request(&next, 0, &moved),
        "does not hold the activated run and takeover fence",
    );
    f.refused(&f.run_request(&forged, 0, &fence), "proof does not match");
    f.refused(&f.run_request(&next, 1, &fence), "processEpoch is stale");

    assert_eq!(f.active().await, released, "no refusal released a row");
}

/// A re-registration advances the process epoch (F69) and evicts the activation's live serve
/// connection; the proofs and epochs of the first registration are then refused (F91), and a
/// fresh activation at the new epoch returns the proof the renewals need there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_route_flow_reregistration_fences_the_previous_epoch() {
    let f = Flow::new().await;
    let (_supervisor, closure) = f.prepared_and_registered().await;
    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let first = activated["nextRegistrationProof"]
        .as_str()
        .unwrap()
        .to_owned();
    let (serve_jwt, _) = f.credential(&activated, "serve", &f.keys[2]);
    let serving = f.connect(&serve_jwt, &f.keys[2]).await;
    serving.client.flush().await.unwrap();

    let registered = f.register(&closure, 2).await;
    assert_eq!(registered.process_epoch.0, 1);
    let gate = f.gate().await;
    assert_eq!((gate.state(), gate.process_epoch().0), (GateState::Open, 1));
    // The ceremony's verified eviction kicked the serve holder off the real server.
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    while serving.client.connection_state() == async_nats::connection::State::Connected {
        assert!(
            std::time::Instant::now() < deadline,
            "the previous serve holder was not evicted"
        );
        tokio::time::sleep(POLL).await;
    }
    assert!(
        f.active().await.is_empty(),
        "the re-registration revoked the whole family"
    );

    let standing = |proof: &str, epoch| {
        f.renewal(
            "renewStandingBundle",
            "standing0000000000000001",
            proof,
            epoch,
        )
    };
    f.refused(&standing(&first, 0), "processEpoch is stale");
    f.refused(
        &standing(&first, 1),
        "proof does not match the current registration",
    );
    let mut renew = f.envelope("renew", "renew000000000000000001");
    renew["registrationProof"] = json!(first);
    f.refused(&renew, "proof does not match current host registration");

    // Credential ids are JWT digests, and the goal-writer and session-ledger JWTs carry no
    // gate coordinate: signed in the first activation's second they would reproduce the ids
    // of its rows the re-registration revoked, which staging refuses (F29: "a staged name
    // never re-binds"; the model refuses the same). A restarted manager re-activates in a
    // later second; so does this test.
    let (_, first_goal) = f.credential(&activated, "goalWriter", &f.keys[3]);
    while now_secs() <= first_goal.iat.0 {
        tokio::time::sleep(POLL).await;
    }
    let again = f.granted(&f.activate_request("activate000000000000002"));
    let second = again["nextRegistrationProof"].as_str().unwrap().to_owned();
    assert_ne!(second, first, "the proof binds the new epoch and revision");
    assert_eq!(second, f.current_proof().await);
    let (serve2, _) = f.credential(&again, "serve", &f.keys[2]);
    let (goal2, _) = f.credential(&again, "goalWriter", &f.keys[3]);
    let (session2, _) = f.credential(&again, "sessionLedger", &f.keys[4]);
    assert_eq!(f.active().await, row_keys(&[serve2, goal2, session2]));
    let renewed = f.granted(&standing(&second, 1));
    assert_eq!(renewed["processEpoch"], 1);
    let (token, _) = f.credential(&renewed, "serve", &f.keys[2]);
    f.connect(&token, &f.keys[2]).await;
    renew["registrationProof"] = json!(second);
    f.granted(&renew);
}

/// Two restarts of one manager instance race, each over its own executor credential with its
/// own op id: exactly one commits the next epoch, the other is refused, and the gate ends open
/// at that one epoch — never two live epochs (F69, F11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_restarts_of_one_manager_leave_one_epoch() {
    let f = Flow::new().await;
    let (_supervisor, closure) = f.prepared_and_registered().await;
    let (a, b) = tokio::join!(f.try_register(&closure, 2), f.try_register(&closure, 3));
    let epochs: Vec<u64> = [&a, &b]
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|r| r.process_epoch.0))
        .collect();
    assert_eq!(epochs, [1], "a: {a:?}\nb: {b:?}");
    let gate = f.gate().await;
    assert_eq!((gate.state(), gate.process_epoch().0), (GateState::Open, 1));
}

/// A restart after the instance activated: its family has live holders, which the barrier has
/// the plane evict through `manager-service-maintenance` (verified gone by the servers'
/// listing) before the epoch advances; the door refuses a principal outside that family.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_over_a_live_family_evicts_through_the_maintenance_door() {
    let f = Flow::new().await;
    let (_supervisor, closure) = f.prepared_and_registered().await;
    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let (goal_jwt, _) = f.credential(&activated, "goalWriter", &f.keys[3]);
    let goal = f.connect(&goal_jwt, &f.keys[3]).await;
    goal.client.flush().await.unwrap();
    let holder = format!("{}.manager_goal_{IID}", f.owner);

    let mut outside = f.maintenance("evict-family-principal", "maintain00000000000000002");
    outside["principals"] = json!([holder, format!("{}.someone_else", f.owner)]);
    f.refused(&outside, "outside that family");
    assert_eq!(
        goal.client.connection_state(),
        async_nats::connection::State::Connected,
        "a refused eviction kicks nobody"
    );

    let mut inside = outside.clone();
    inside["principals"] = json!([holder]);
    let answer = f.granted(&inside);
    assert_eq!(answer["owner"], json!(f.owner));
    assert_eq!(answer["evictions"][0]["principal"], json!(holder));
    assert_eq!(answer["evictions"][0]["verifiedGone"], json!(true));
    assert_eq!(answer["evictions"][0]["scanComplete"], json!(true));
    assert_eq!(answer["evictions"][0]["remaining"], json!(0));
    assert!(
        answer["evictions"][0]["kicked"].as_u64().unwrap() >= 1,
        "{answer}"
    );

    let registered = f.register(&closure, 2).await;
    assert_eq!(registered.process_epoch.0, 1);
    assert!(
        f.active().await.is_empty(),
        "the restart revoked the family"
    );
}

/// `reconcile-registration` through the door: a frozen registration whose freeze holder is
/// live is refused and left frozen (F52); once the holder is gone it is reopened at the next
/// generation with the reference's report, and the manager registers again over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_registration_is_reconciled_through_the_maintenance_door() {
    let f = Flow::new().await;
    let (_supervisor, closure) = f.prepared_and_registered().await;
    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let (serve_jwt, _) = f.credential(&activated, "serve", &f.keys[2]);
    let serving = f.connect(&serve_jwt, &f.keys[2]).await;
    serving.client.flush().await.unwrap();

    f.die_mid_barrier(&closure, 2).await;
    f.refused(
        &f.maintenance("reconcile-registration", "reconcile00000000000000001"),
        "ALIVE",
    );
    assert_eq!(f.gate().await.state(), GateState::Frozen);

    serving.client.drain().await.unwrap();
    let before = f.gate().await.generation().0;
    let answer = f.granted(&f.maintenance("reconcile-registration", "reconcile00000000000000002"));
    let r = &answer["reconciliation"];
    assert_eq!(r["liveness"]["state"], "gone", "{answer}");
    assert_eq!(r["instanceId"], IID);
    assert_eq!(r["after"]["generation"], json!(before + 1));
    assert_eq!(r["holdersRemaining"], json!([]));
    assert_eq!(f.gate().await.state(), GateState::Open);
    assert!(f.active().await.is_empty(), "the family was revoked");

    let registered = f.register(&closure, 3).await;
    assert_eq!(registered.process_epoch.0, 1);
}

/// A remote manager's life end to end, built only from what the plane hands out — the executor
/// `prepare` issues and the doors it serves: prepare → its own registration (epoch 0) →
/// activate → renew → a restart over its live family (eviction through the maintenance door,
/// epoch 1) → renew at epoch 1 → retire. After each step the credential it returned connects
/// to the real server; the restart kicks the previous serve connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_manager_registers_activates_renews_restarts_and_retires() {
    let f = Flow::new().await;
    let (_supervisor, closure) = f.prepared_and_registered().await;
    assert_eq!(f.gate().await.process_epoch().0, 0);

    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let proof0 = activated["nextRegistrationProof"]
        .as_str()
        .unwrap()
        .to_owned();
    let (serve, _) = f.credential(&activated, "serve", &f.keys[2]);
    let serving = f.connect(&serve, &f.keys[2]).await;
    serving.client.flush().await.unwrap();

    let renewed = f.granted(&f.renewal(
        "renewStandingBundle",
        "standing0000000000000001",
        &proof0,
        0,
    ));
    let (serve, _) = f.credential(&renewed, "serve", &f.keys[2]);
    f.connect(&serve, &f.keys[2]).await;

    // The restart: the family's holders (the serve connections above) are evicted through the
    // maintenance door before the epoch advances.
    let registered = f.register(&closure, 2).await;
    assert_eq!(registered.process_epoch.0, 1);
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    while serving.client.connection_state() == async_nats::connection::State::Connected {
        assert!(
            std::time::Instant::now() < deadline,
            "the restart did not evict the previous serve connection"
        );
        tokio::time::sleep(POLL).await;
    }

    // Re-activate in a later second (the goal-writer and session-ledger ids are JWT digests).
    let (_, first_goal) = f.credential(&activated, "goalWriter", &f.keys[3]);
    while now_secs() <= first_goal.iat.0 {
        tokio::time::sleep(POLL).await;
    }
    let again = f.granted(&f.activate_request("activate000000000000002"));
    let proof1 = again["nextRegistrationProof"].as_str().unwrap().to_owned();
    let renewed = f.granted(&f.renewal(
        "renewStandingBundle",
        "standing0000000000000002",
        &proof1,
        1,
    ));
    assert_eq!(renewed["processEpoch"], 1);
    let (serve, _) = f.credential(&renewed, "serve", &f.keys[2]);
    f.connect(&serve, &f.keys[2]).await;

    // retire: the retirement requester for one of the owner's lifecycles, at serve epoch 1.
    let requester = key(21);
    let target_uid = cotal_core::names::LifecycleUid::parse("tttttttttttttttttttttttttt").unwrap();
    let mut retire = f.envelope("retire", "retire000000000000000001");
    retire["retirement"] = json!({
        "id": requester.public_key(),
        "target": {"owner": f.owner, "actor": "worker", "lifecycleUid": target_uid.as_str()},
        "opId": cotal_core::lifecycle::managed_retirement_op_id(&target_uid).unwrap().as_str(),
        "serveEpoch": 1,
    });
    retire["registrationProof"] = json!(format!("sha256:{}", "0".repeat(64)));
    let parsed = cotal_core::manager::ManagerAuthorityRequest::parse(&retire).unwrap();
    let proof = cotal_core::manager::registration_proof(&f.owner_token(), &parsed).unwrap();
    retire["registrationProof"] = json!(proof.as_str());
    let retired = f.granted(&retire);
    assert_eq!(Flow::names(&retired), ["retirementRequester"]);
    let (token, _) = f.credential(&retired, "retirementRequester", &requester);
    f.connect(&token, &requester).await;
}

/// The executor's reach, on the real server: the one `prepare` issued for instance A cannot
/// write instance B's gate (nothing is written), and an executor past its five minutes is
/// refused by the server (signed here with the same profile, dated 301 s back, since a test
/// does not wait five minutes), while one about to expire is disconnected when it does and
/// writes nothing after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_reaches_only_its_instance_and_only_for_its_lifetime() {
    use cotal_core::gate::EndpointGate;
    use cotal_core::jwt::{Creds, UnixSeconds};
    use cotal_core::kv::{KvOutcome, KvRequest, Store};
    use cotal_core::names::{InstanceId, OwnerToken, Principal};
    use cotal_core::profiles::{remote_manager, ConnId, ManagerRole, RemoteManagerBinding};
    use cotal_io_nats::{SpaceOptions, StoreSet};

    let f = Flow::new().await;
    let other = "bbbbbbbbbbbbbbbbbbbbbbbbbb";
    let executor = f.executor("prepareexecutor000000001").await;
    let bound = cotal_io_nats::Space::bind(
        executor.client.clone(),
        space_name(),
        SpaceOptions::participant(StoreSet::of(&[Store::Auth])),
    )
    .await
    .unwrap();
    let foreign = EndpointGate::provisioned(
        Principal::parse(&format!("{}.manager_serve_{other}", f.owner)).unwrap(),
    )
    .unwrap();
    let written = bound
        .execute(&KvRequest::Create {
            store: Store::Auth,
            key: format!("epgate.manager.{other}"),
            value: foreign.to_bytes(),
        })
        .await;
    assert!(!matches!(written, KvOutcome::Written(_)), "{written:?}");
    let admin = f.admin.space().unwrap();
    let read = admin
        .execute(&KvRequest::Get {
            store: Store::Auth,
            key: format!("epgate.manager.{other}"),
        })
        .await;
    assert!(matches!(read, KvOutcome::Entry(None)), "{read:?}");
    executor.client.drain().await.unwrap();

    let key = key(13);
    let profile = remote_manager(&RemoteManagerBinding {
        space: space_name(),
        owner: OwnerToken::parse(&f.owner).unwrap(),
        instance: InstanceId::parse(IID).unwrap(),
        conn: ConnId::parse(&key.public_key()).unwrap(),
        role: ManagerRole::Executor,
    })
    .unwrap();
    let creds_at = |issued: u64| {
        let issued = profile
            .sign_for(
                f.material.data_signing_key(),
                f.material.data_account(),
                &key.public_key(),
                UnixSeconds(issued),
            )
            .unwrap();
        Creds {
            jwt: issued.jwt,
            seed: key.seed().unwrap(),
        }
        .text()
    };
    let stale = async_nats::ConnectOptions::with_credentials(&creds_at(now_secs() - 301))
        .unwrap()
        .custom_inbox_prefix(format!("_INBOX_{}", key.public_key()))
        .max_reconnects(Some(1))
        .connect(&f.server)
        .await;
    assert!(stale.is_err(), "an expired executor connected");

    let expiring = async_nats::ConnectOptions::with_credentials(&creds_at(now_secs() - 298))
        .unwrap()
        .custom_inbox_prefix(format!("_INBOX_{}", key.public_key()))
        .max_reconnects(Some(1))
        .connect(&f.server)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while expiring.connection_state() == async_nats::connection::State::Connected {
        assert!(
            std::time::Instant::now() < deadline,
            "the server kept an expired executor connected"
        );
        tokio::time::sleep(POLL).await;
    }
    let late = cotal_io_nats::Space::bind(
        expiring.clone(),
        space_name(),
        SpaceOptions::participant(StoreSet::of(&[Store::Auth])),
    )
    .await
    .unwrap();
    let written = late
        .execute(&KvRequest::Create {
            store: Store::Auth,
            key: manager_gate().key(),
            value: foreign.to_bytes(),
        })
        .await;
    assert!(!matches!(written, KvOutcome::Written(_)), "{written:?}");
    let read = admin
        .execute(&KvRequest::Get {
            store: Store::Auth,
            key: manager_gate().key(),
        })
        .await;
    assert!(matches!(read, KvOutcome::Entry(None)), "{read:?}");
}

/// A foreign in-flight slot, repaired the way the reference manager repairs it: instance A's
/// restart dies mid-barrier (its holders never verified gone), leaving its gate frozen and the
/// endpoint's governance slot held in flight; once A's process is gone, a new instance B of the
/// owner registers — refused by A's slot, it asks `reconcile-registration` of A through the
/// maintenance door once (A reopened at the next generation), then registers at epoch 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_in_flight_slot_is_reconciled_through_the_door_and_the_new_instance_registers() {
    let f = Flow::new().await;
    let (_supervisor, closure) = f.prepared_and_registered().await;
    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let (serve_jwt, _) = f.credential(&activated, "serve", &f.keys[2]);
    let serving = f.connect(&serve_jwt, &f.keys[2]).await;
    serving.client.flush().await.unwrap();

    f.die_mid_barrier(&closure, 2).await;
    let before = f.gate().await;
    assert_eq!(before.state(), GateState::Frozen);
    serving.client.drain().await.unwrap();

    let b = "nnnnnnnnnnnnnnnnnnnnnnnnnn";
    let executor_b = f.executor_for(b, "prepareexecutorb00000001").await;
    let registered = f
        .register_instance_on(b, &executor_b, &closure, 3)
        .await
        .unwrap();
    assert_eq!(registered.process_epoch.0, 0);
    let after = f.gate().await;
    assert_eq!(after.state(), GateState::Open);
    assert_eq!(after.generation().0, before.generation().0 + 1);
    executor_b.client.drain().await.unwrap();
}
