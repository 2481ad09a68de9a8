//! The hosted run status record (`run.<endpoint>.<runId>.status`) and the run check of a
//! run-driver renewal (reference-auth-service §4.5 step 7; the run rows of the
//! `manager-standing-renewal` and `remote-run-renewal` cells).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{run, Proc};
use cotal_core::driver::ModelWorld;
use cotal_core::journal::{FencingToken, RunEpoch, RunHolder, RunId, TakeoverId};
use cotal_core::kv::{Revision, Store};
use cotal_core::machine::Ctx;
use cotal_core::manager::UserKey;
use cotal_core::names::{EndpointName, InstanceId};
use cotal_core::run::{
    observe_hosted_run, run_holds_fence, write_run_status, HostedRunStatus, RunState,
};
use cotal_core::ErrorCode;

const SUPERVISOR: &str = "UAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const FOREIGN: &str = "UBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
const TAKEOVER: &str = "cccccccccccccccc";

fn manager() -> EndpointName {
    EndpointName::parse("manager").unwrap()
}
fn run_id() -> RunId {
    RunId::parse(&format!("run-{}", "d".repeat(32))).unwrap()
}
fn iid() -> InstanceId {
    InstanceId::parse(common::IID).unwrap()
}
fn supervisor() -> UserKey {
    UserKey::parse(SUPERVISOR).unwrap()
}
fn takeover() -> TakeoverId {
    TakeoverId::parse(TAKEOVER).unwrap()
}

fn status(prefix: &str, state: RunState, epoch: u64, token: u64) -> HostedRunStatus {
    HostedRunStatus {
        observed_spec_revision: 1,
        state,
        holder: RunHolder::parse(&format!("{prefix}.{TAKEOVER}")).unwrap(),
        epoch: RunEpoch(epoch),
        fencing_token: FencingToken(token),
        journal_high: 1,
        at: 1_700_000_000_000,
    }
}

fn write(world: &mut ModelWorld, s: &HostedRunStatus, expected: Option<Revision>) -> Revision {
    let s = s.clone();
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| write_run_status(cx, &manager(), &run_id(), &s, expected)),
    )
    .unwrap()
}

fn observe(world: &mut ModelWorld) -> Result<Option<HostedRunStatus>, cotal_core::EpError> {
    run(
        world,
        Proc(|cx: &mut Ctx<'_>| observe_hosted_run(cx, &manager(), &run_id())),
    )
}

fn holds(s: Option<&HostedRunStatus>, epoch: u64, token: u64) -> Result<(), cotal_core::EpError> {
    let holder = RunHolder::parse(&format!("{SUPERVISOR}.{TAKEOVER}")).unwrap();
    run_holds_fence(
        s,
        &supervisor(),
        &iid(),
        &holder,
        &takeover(),
        RunEpoch(epoch),
        FencingToken(token),
    )
}

/// Golden bytes: the reference's `writeRunStatus` value in `JSON.stringify` order, at the key
/// its record-kind grammar builds.
#[test]
fn the_status_record_is_byte_compatible_and_round_trips() {
    let s = status(SUPERVISOR, RunState::Running, 2, 5);
    let expected = format!(
        r#"{{"v":1,"observedSpecRevision":1,"state":"running","holder":"{SUPERVISOR}.{TAKEOVER}","epoch":2,"fencingToken":5,"journalHigh":1,"at":1700000000000}}"#
    );
    assert_eq!(String::from_utf8(s.to_bytes()).unwrap(), expected);
    assert_eq!(
        cotal_core::names::keys::run_status(&manager(), &run_id()),
        format!("run.manager.{}.status", run_id().as_str())
    );
    let mut world = ModelWorld::default();
    assert_eq!(observe(&mut world).unwrap(), None);
    let rev = write(&mut world, &s, None);
    assert_eq!(observe(&mut world).unwrap(), Some(s.clone()));
    let moved = status(SUPERVISOR, RunState::Running, 2, 6);
    write(&mut world, &moved, Some(rev));
    assert_eq!(observe(&mut world).unwrap(), Some(moved));
}

#[test]
fn a_garbled_or_open_status_is_internal_and_a_marker_is_failed_precondition() {
    let key = cotal_core::names::keys::run_status(&manager(), &run_id());
    let good = String::from_utf8(status(SUPERVISOR, RunState::Running, 1, 1).to_bytes()).unwrap();
    for bad in [
        "nope".to_owned(),
        "[]".to_owned(),
        good.replace("\"state\":\"running\"", "\"state\":\"paused\""),
        good.replace("\"v\":1", "\"v\":2"),
        good.replace("\"at\":", "\"extra\":1,\"at\":"),
        good.replace("\"epoch\":1", "\"epoch\":-1"),
        good.replace(&format!("{SUPERVISOR}.{TAKEOVER}"), "bad holder"),
    ] {
        let mut world = ModelWorld::default();
        world.kv.put(Store::Records, &key, bad.as_bytes());
        let e = observe(&mut world).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "{bad}: {e}");
    }
    let mut world = ModelWorld::default();
    world.kv.put(Store::Records, &key, good.as_bytes());
    world.kv.delete_unpinned(Store::Records, &key);
    let e = observe(&mut world).unwrap_err();
    assert_eq!(e.code, ErrorCode::FailedPrecondition, "{e}");
}

/// `manager-standing-renewal`: "run renewal on a recorded running run" passes; "foreign holder /
/// stale takeover / stale fencing token / unrecorded run / stale epoch → conflict".
#[test]
fn a_run_renewal_holds_the_fence_only_for_the_exact_activated_attempt() {
    let held = status(SUPERVISOR, RunState::Running, 2, 5);
    assert!(holds(Some(&held), 2, 5).is_ok());
    let refusals = [
        (None, 2, 5),
        (Some(held.clone()), 2, 4),
        (Some(held.clone()), 2, 6),
        (Some(held.clone()), 1, 5),
        (Some(status(SUPERVISOR, RunState::Released, 2, 5)), 2, 5),
        (Some(status(SUPERVISOR, RunState::Completed, 2, 5)), 2, 5),
        (Some(status(FOREIGN, RunState::Running, 2, 5)), 2, 5),
        (
            Some(HostedRunStatus {
                holder: RunHolder::parse(&format!("{SUPERVISOR}.dddddddddddddddd")).unwrap(),
                ..held.clone()
            }),
            2,
            5,
        ),
    ];
    for (s, epoch, token) in refusals {
        let e = holds(s.as_ref(), epoch, token).unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(
            e.message
                .contains("does not hold the activated run and takeover fence"),
            "{e}"
        );
    }
}

/// `remote-run-renewal`: "a holder under an unregistered supervisor prefix binds no instance",
/// and "a registered caller claiming another manager's holder binds no instance": holder,
/// takeover and fence all match the record, only the registered-prefix binding refuses.
#[test]
fn a_holder_under_another_supervisor_binds_no_instance() {
    let foreign = status(FOREIGN, RunState::Running, 2, 5);
    assert_eq!(foreign.hosted_on(&supervisor(), &iid()), None);
    assert_eq!(foreign.takeover(), Some(TAKEOVER));
    let claimant = UserKey::parse(FOREIGN).unwrap();
    let holder = foreign.holder.clone();
    // The claimant's own request names the record's exact holder, but it is registered under
    // `SUPERVISOR`'s instance only if its supervisor nkey is the one the proof bound.
    assert!(run_holds_fence(
        Some(&foreign),
        &supervisor(),
        &iid(),
        &holder,
        &takeover(),
        RunEpoch(2),
        FencingToken(5)
    )
    .is_err());
    assert!(run_holds_fence(
        Some(&foreign),
        &claimant,
        &iid(),
        &holder,
        &takeover(),
        RunEpoch(2),
        FencingToken(5)
    )
    .is_ok());
}
