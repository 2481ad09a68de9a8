//! The standby's ledger witness (issue 28): a standby waits only on a live plane it saw serving
//! the very actor ledger it will serve, within the grace of first waiting on that plane; each
//! new live plane needs a witness of its own, and a refusal that names no plane keeps the last.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;

use cotal_core::plane_claim::{ConnTuple, PlaneQuery};
use cotal_core::standby::{refusal, LedgerWitness, Witnessed, WITNESS_GRACE_MS};

fn plane(cid: u64) -> PlaneQuery {
    let nkey = format!("U{}", "A".repeat(55));
    PlaneQuery {
        ledger: ConnTuple::new("server-1", cid, &nkey).unwrap(),
        records: ConnTuple::new("server-1", cid + 1, &nkey).unwrap(),
    }
}

fn look(w: &mut LedgerWitness, holder: Option<u64>, now: u64, served: bool) -> Witnessed {
    w.look(holder.map(plane), now, || Ok::<_, Infallible>(served))
        .unwrap()
}

#[test]
fn a_standby_waits_on_a_plane_seen_serving_its_ledger_and_says_so_once() {
    let mut w = LedgerWitness::new(0);
    assert_eq!(look(&mut w, Some(1), 10, true), Witnessed::Now);
    // Once seen, the lock is not asked again for that plane, however long the wait.
    let asked = w
        .look(
            Some(plane(1)),
            10 * WITNESS_GRACE_MS,
            || -> Result<bool, ()> { panic!("asked again") },
        )
        .unwrap();
    assert_eq!(asked, Witnessed::Waiting);
    assert_eq!(
        look(&mut w, None, 20 * WITNESS_GRACE_MS, false),
        Witnessed::Waiting
    );
}

#[test]
fn a_standby_over_a_ledger_nobody_serves_is_refused_once_the_grace_passed() {
    let mut w = LedgerWitness::new(0);
    assert_eq!(look(&mut w, Some(1), 0, false), Witnessed::Waiting);
    assert_eq!(
        look(&mut w, Some(1), WITNESS_GRACE_MS - 1, false),
        Witnessed::Waiting,
        "the instant between a plane's claim and its lock"
    );
    assert_eq!(
        look(&mut w, Some(1), WITNESS_GRACE_MS, false),
        Witnessed::Refused
    );
    // A listing that cannot name the plane is no witness either.
    let mut w = LedgerWitness::new(0);
    assert_eq!(
        look(&mut w, None, WITNESS_GRACE_MS, false),
        Witnessed::Refused
    );
}

#[test]
fn a_lock_taken_within_the_grace_is_a_witness() {
    let mut w = LedgerWitness::new(0);
    assert_eq!(look(&mut w, Some(1), 0, false), Witnessed::Waiting);
    assert_eq!(look(&mut w, Some(1), 300, true), Witnessed::Now);
    assert_eq!(
        look(&mut w, Some(1), 5 * WITNESS_GRACE_MS, false),
        Witnessed::Waiting
    );
}

#[test]
fn every_new_live_plane_needs_a_witness_of_its_own() {
    let mut w = LedgerWitness::new(0);
    assert_eq!(look(&mut w, Some(1), 0, true), Witnessed::Now);
    // Another plane won the claim meanwhile: its grace starts at its first sight.
    let later = 10 * WITNESS_GRACE_MS;
    assert_eq!(look(&mut w, Some(7), later, false), Witnessed::Waiting);
    assert_eq!(
        look(&mut w, Some(7), later + WITNESS_GRACE_MS, false),
        Witnessed::Refused,
        "a plane that serves another ledger is never waited on"
    );
    let mut w = LedgerWitness::new(0);
    assert_eq!(look(&mut w, Some(1), 0, true), Witnessed::Now);
    assert_eq!(look(&mut w, Some(7), later, true), Witnessed::Now);
}

#[test]
fn the_lock_question_failing_fails_the_look() {
    let mut w = LedgerWitness::new(0);
    let failed = w.look(Some(plane(1)), 0, || Err("cannot open the lock"));
    assert_eq!(failed, Err("cannot open the lock"));
}

#[test]
fn the_refusal_says_how_to_point_the_standby_at_the_active_ledger() {
    let said = refusal("/srv/b/auth/space.7431");
    assert!(said.starts_with("standby refused: no plane on this host serves the actor ledger under /srv/b/auth/space.7431"));
    assert!(said.ends_with("--ledger-dir set to the active plane's --state-dir"));
    assert_eq!(said.matches(". ").count(), 0, "one sentence: {said}");
}
