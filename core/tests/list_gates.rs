//! `registry::ListGates` on the KV model: every `epgate.` key of the space, in key order, each
//! read leader-served; a DEL/PURGE marker, bad bytes or a failed read is an error row that hides
//! no other gate (Q-18, F9); a failed listing fails the whole view.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use cotal_core::driver::{drive, ModelWorld};
use cotal_core::gate::{GateState, Generation};
use cotal_core::issuance::{GateRef, ProvisionGate};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::machine::Replay;
use cotal_core::names::{EndpointName, InstanceId, Principal, SpaceName};
use cotal_core::registry::{ListGates, ListedGate};
use cotal_core::{EpError, ErrorCode};

const P: &str = "u_cccccccccccccccccccccccccc.term";

fn gate(endpoint: &str, n: u8) -> GateRef {
    GateRef::new(
        SpaceName::parse("s1").unwrap(),
        EndpointName::parse(endpoint).unwrap(),
        InstanceId::mint([n; 20]),
    )
}

fn provision(world: &mut ModelWorld, gate: &GateRef) {
    drive(
        &mut ProvisionGate::machine(gate.clone(), Principal::parse(P).unwrap()),
        world,
    )
    .unwrap();
}

fn list(world: &mut ModelWorld) -> Result<Vec<ListedGate>, EpError> {
    drive(
        &mut Replay::new(ListGates {
            space: SpaceName::parse("s1").unwrap(),
        }),
        world,
    )
}

/// `(key, Ok(state) | Err(code))` per row, in listing order.
fn summary(rows: &[ListedGate]) -> Vec<(String, Result<GateState, ErrorCode>)> {
    rows.iter()
        .map(|row| {
            let outcome = match row {
                ListedGate::Read { seen, .. } => Ok(seen.gate.state()),
                ListedGate::Unreadable { error, .. } => Err(error.code),
            };
            (row.gate().key(), outcome)
        })
        .collect()
}

#[test]
fn an_empty_space_lists_no_gates() {
    assert_eq!(list(&mut ModelWorld::default()).unwrap(), vec![]);
}

#[test]
fn q18_a_marker_is_an_error_row_and_hides_no_other_gate() {
    let mut world = ModelWorld::default();
    let (a, b, c) = (gate("auth", 1), gate("com.acme.deploy", 2), gate("auth", 3));
    for g in [&a, &b, &c] {
        provision(&mut world, g);
    }
    world.kv.delete_unpinned(Store::Auth, &b.key());
    world.kv.purge(Store::Auth, &c.key());

    let rows = list(&mut world).unwrap();
    let mut expected = vec![
        (a.key(), Ok(GateState::Open)),
        (b.key(), Err(ErrorCode::FailedPrecondition)),
        (c.key(), Err(ErrorCode::FailedPrecondition)),
    ];
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(summary(&rows), expected);
    for row in &rows {
        if let ListedGate::Unreadable { error, .. } = row {
            assert!(error.message.contains("marker"), "{error}");
            assert!(error.message.contains("F9"), "{error}");
        }
    }
    let ListedGate::Read { gate, seen } = rows.iter().find(|r| r.gate() == &a).unwrap() else {
        panic!("{rows:?}");
    };
    assert_eq!(gate, &a);
    assert_eq!(seen.gate.generation(), Generation(0));
}

#[test]
fn bad_bytes_and_a_failed_read_are_error_rows_too() {
    let mut world = ModelWorld::default();
    let (good, bad, flaky) = (gate("auth", 1), gate("auth", 2), gate("auth", 3));
    for g in [&good, &flaky] {
        provision(&mut world, g);
    }
    world.kv.put(Store::Auth, &bad.key(), b"not a gate");
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, flaky.key()),
        Fault::Unavailable,
    );

    let rows = list(&mut world).unwrap();
    let mut expected = vec![
        (good.key(), Ok(GateState::Open)),
        (bad.key(), Err(ErrorCode::Internal)),
        (flaky.key(), Err(ErrorCode::Unavailable)),
    ];
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(summary(&rows), expected);
}

#[test]
fn a_failed_listing_fails_the_view() {
    let mut world = ModelWorld::default();
    provision(&mut world, &gate("auth", 1));
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Keys, "epgate."),
        Fault::Unavailable,
    );
    let e = list(&mut world).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert!(e.message.contains("listing the gates of space s1"), "{e}");
}

#[test]
fn a_listed_key_that_is_not_a_gate_key_fails_the_listing() {
    let mut world = ModelWorld::default();
    provision(&mut world, &gate("auth", 1));
    world.kv.put(Store::Auth, "epgate.auth", b"{}");
    assert!(list(&mut world).is_err());
}
