//! Enrollment races the reference never tested (issue 6): two machines interleaved step by step
//! over one ModelWorld ledger, with and without the per-alias lock (§6.6).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod enrollment_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cotal_core::actors::{ActorLedger, AliasGuard, AliasScript, MemoryActors, Serialized};
use cotal_core::driver::{ModelWorld, World};
use cotal_core::enrollment::{EnrollManagedAgent, EnrollmentResult};
use cotal_core::machine::{Effect, Machine, Observation, Step};
use cotal_core::ErrorCode;
use enrollment_common::*;

/// One machine driven by hand: `advance` performs effects until `stop` says to pause before one.
/// The tests take and release the ledger's alias locks themselves, at the points they race, so
/// the guard the machine is built with holds nothing of its own.
struct Stepper<S: AliasScript> {
    run: Serialized<S>,
    next: Option<Observation>,
    pending: Option<Effect>,
}

impl<S: AliasScript> Stepper<S> {
    fn new(script: S) -> Self {
        let guard = AliasGuard::new(script.alias(), Box::new(()));
        Stepper {
            run: Serialized::new(script, guard).unwrap(),
            next: None,
            pending: None,
        }
    }

    /// Runs until the next effect satisfying `pause_before` is due (returned, not performed) or
    /// the machine finishes.
    fn advance(
        &mut self,
        w: &mut ModelWorld,
        pause_before: impl Fn(&Effect) -> bool,
    ) -> Option<Result<S::Output, cotal_core::EpError>> {
        loop {
            let effect = match self.pending.take() {
                Some(e) => e,
                None => match self.run.step(self.next.take()) {
                    Step::Done(r) => return Some(r),
                    Step::Effect(e) => e,
                },
            };
            if pause_before(&effect) {
                self.pending = Some(effect);
                return None;
            }
            self.next = Some(w.perform(&effect));
        }
    }
}

fn is_grant(e: &Effect) -> bool {
    matches!(
        e,
        Effect::Actors(r) if matches!(**r, cotal_core::actors::ActorsRequest::GrantManaged(_))
    )
}

fn finish<S: AliasScript>(
    s: &mut Stepper<S>,
    w: &mut ModelWorld,
) -> Result<S::Output, cotal_core::EpError> {
    s.advance(w, |_| false).unwrap()
}

fn machine(hash_char: char, entropy: u8) -> EnrollManagedAgent {
    enroll_machine(&enrollment_with(&hash(hash_char)), &["supervise"], entropy)
}

/// Teeth: without the alias lock, two enrollments with different hashes interleaved at the read
/// both "win" with different uids — the outcome the lock exists to prevent.
#[test]
fn without_the_alias_lock_two_hashes_would_both_win() {
    let mut w = world();
    let mut a = Stepper::new(machine('a', 1));
    let mut b = Stepper::new(machine('b', 2));
    assert!(a.advance(&mut w, is_grant).is_none());
    assert!(b.advance(&mut w, is_grant).is_none());
    let ra: EnrollmentResult = finish(&mut a, &mut w).unwrap();
    let rb: EnrollmentResult = finish(&mut b, &mut w).unwrap();
    assert_ne!(ra.material.lifecycle_uid, rb.material.lifecycle_uid);
    assert_eq!(
        w.durables.provisioned().len(),
        2,
        "two lifecycles provisioned for one alias"
    );
}

/// Two enrollments with the same hash at once: under the lock the second waits, then retries
/// onto the first's uid — one uid, one footprint.
#[test]
fn two_enrollments_with_the_same_hash_at_once_get_one_uid() {
    let mut w = world();
    let (ma, mb) = (machine('a', 1), machine('a', 2));
    let ledger = w.actors.clone();
    let guard_a = ledger.try_lock_alias(&ma.alias()).unwrap().expect("free");
    let mut a = Stepper::new(ma);
    assert!(
        a.advance(&mut w, is_grant).is_none(),
        "a paused before its grant"
    );
    assert!(
        ledger.try_lock_alias(&mb.alias()).unwrap().is_none(),
        "b must wait for a"
    );
    let ra = finish(&mut a, &mut w).unwrap();
    drop(guard_a);
    let _guard_b = ledger
        .try_lock_alias(&mb.alias())
        .unwrap()
        .expect("free after a");
    let rb = finish(&mut Stepper::new(mb), &mut w).unwrap();
    assert_eq!(ra.material.lifecycle_uid, rb.material.lifecycle_uid);
    assert!(ra.first && !rb.first);
    assert_eq!(w.durables.provisioned().len(), 1);
}

/// Different hashes at once: exactly one wins, the other is `conflict` naming the winner's uid.
#[test]
fn two_enrollments_with_different_hashes_at_once_exactly_one_wins() {
    for a_first in [true, false] {
        let mut w = world();
        let (ma, mb) = (machine('a', 1), machine('b', 2));
        let ledger = w.actors.clone();
        let (first, second) = if a_first { (ma, mb) } else { (mb, ma) };
        let guard = ledger.try_lock_alias(&first.alias()).unwrap().unwrap();
        let mut f = Stepper::new(first);
        assert!(f.advance(&mut w, is_grant).is_none());
        assert!(ledger.try_lock_alias(&second.alias()).unwrap().is_none());
        let winner = finish(&mut f, &mut w).unwrap();
        drop(guard);
        let _g = ledger.try_lock_alias(&second.alias()).unwrap().unwrap();
        let loser = finish(&mut Stepper::new(second), &mut w).expect_err("conflict");
        assert_eq!(loser.code, ErrorCode::Conflict);
        assert!(
            loser
                .message
                .contains(winner.material.lifecycle_uid.as_str()),
            "{loser}"
        );
        assert_eq!(w.durables.provisioned().len(), 1);
    }
}

/// Enrollment racing retirement preparation of the enrolled lifecycle, in both lock orders:
/// never two uids active for the alias, and the retired uid never comes back.
#[test]
fn enrollment_racing_retirement_preparation_never_revives_a_retired_uid() {
    for prepare_first in [true, false] {
        let mut w = world();
        let old = enroll(&mut w, &enrollment())
            .unwrap()
            .material
            .lifecycle_uid;
        let successor = machine('b', 9);
        let prep = prepare_machine(&prepare_for(old.as_str()), &["supervise"], OWNER);
        assert_eq!(successor.alias(), prep.alias(), "one alias, one lock");
        let ledger = w.actors.clone();
        let held = ledger.try_lock_alias(&prep.alias()).unwrap().unwrap();
        let enrolled = if prepare_first {
            let mut p = Stepper::new(prep);
            assert!(p
                .advance(&mut w, |e| matches!(
                    e,
                    Effect::Actors(r) if matches!(**r, cotal_core::actors::ActorsRequest::RevokeManagedAt { .. })
                ))
                .is_none());
            assert!(ledger.try_lock_alias(&successor.alias()).unwrap().is_none());
            assert!(finish(&mut p, &mut w).unwrap().released);
            drop(held);
            let _g = ledger.lock_alias(&successor.alias()).unwrap();
            finish(&mut Stepper::new(successor), &mut w)
        } else {
            drop(held);
            let g = ledger.lock_alias(&successor.alias()).unwrap();
            let r = finish(&mut Stepper::new(successor), &mut w);
            drop(g);
            let _g = ledger.lock_alias(&prep.alias()).unwrap();
            assert!(finish(&mut Stepper::new(prep), &mut w).unwrap().released);
            r
        };
        match enrolled {
            Ok(r) => {
                assert!(prepare_first);
                assert_ne!(r.material.lifecycle_uid, old);
            }
            Err(e) => {
                assert!(!prepare_first);
                assert_eq!(e.code, ErrorCode::Conflict, "{e}");
            }
        }
        let active = w.durables.provisioned();
        assert!(active.len() <= 1, "{active:?}");
        assert!(
            active.iter().all(|(_, uid)| *uid != old),
            "the retired uid never returns"
        );
    }
}

/// The in-memory lock serializes threads: never two holders of one alias at once, while another
/// alias stays free.
#[test]
fn the_memory_alias_lock_excludes_threads() {
    let ledger = MemoryActors::new();
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (ledger, inside) = (ledger.clone(), Arc::clone(&inside));
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let _g = ledger.lock_alias(&alias("worker")).unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    std::thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let _other = ledger.try_lock_alias(&alias("other")).unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert!(!ledger.is_locked(&alias("worker")));
    assert!(ledger.is_locked(&alias("other")));
}
