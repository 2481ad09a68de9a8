//! What the plane's retirement flights decide and say (reference §2.5 steps 7–8, §2.11): one
//! in-process flight per op id (F49: one process never runs one retirement twice at once),
//! shared by the retire doors, the auth control rail and the boot's crash-resume. The adapter
//! owns the tasks and the wait; the entry labels, the flight's coordinates, its refusals and the
//! boot resume's sentences are written here, once.

use std::time::Duration;

use crate::error::EpError;
use crate::names::{LifecycleUid, OpId, Principal};

use super::resume::OpenOperations;
use super::retire::{RetireLifecycle, Retirement};

/// Who asked for a retirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetireEntry {
    /// A loopback retire door.
    Door,
    /// The auth control rail's `retire-lifecycle`.
    Rail,
    /// The boot's crash-resume.
    Boot,
}

impl RetireEntry {
    /// The entry's label on the plane's flight metric.
    pub fn as_str(self) -> &'static str {
        match self {
            RetireEntry::Door => "door",
            RetireEntry::Rail => "rail",
            RetireEntry::Boot => "boot",
        }
    }
}

/// What one barrier run did.
#[derive(Debug, Clone)]
pub struct Ran {
    pub retirement: Retirement,
    /// Every principal the run evicted (and verified gone).
    pub evicted: Vec<Principal>,
}

impl RetireLifecycle {
    /// The coordinates a flight is bound to: the alias and the uid. One op id names one
    /// lifecycle's retirement (F49), so a flight joined under other coordinates is a conflict.
    pub fn coordinates(&self) -> String {
        format!("{}/{} {}", self.owner, self.actor, self.lifecycle_uid)
    }
}

/// The refusal of a retirement whose op id is in flight for `other` coordinates: `conflict`,
/// and nothing changed (F49).
pub fn flight_conflict(op_id: &OpId, other: &str, target: &str) -> EpError {
    EpError::conflict(format!(
        "operation {op_id} is already in flight for another lifecycle ({other}); this \
         retirement of {target} was a full no-op - nothing was retired"
    ))
}

/// The answer of a caller that waited `wait` for its flight: `unavailable`; the flight goes
/// on, and asking again joins or resumes it (F47, F48).
pub fn flight_timed_out(wait: Duration) -> EpError {
    EpError::unavailable(format!(
        "the retirement did not finish within {wait:?}; it goes on, and \
             asking again joins it or resumes it"
    ))
}

/// The boot's crash-resume (reference §2.11), as sentences: loud on every failure, never
/// failing the boot; a retirement that cannot finish leaves its gate frozen, so nothing mints
/// for that alias until a later resume (or a retire request) succeeds (fail-closed, F47, F48).
#[derive(Debug, Clone, Copy)]
pub struct BootResume;

impl BootResume {
    /// The boot could not reach its connections to start.
    pub fn unstarted(why: &str) -> String {
        format!("auth-barrier: the boot resume could not start: {why}")
    }

    /// The listing of the open operations failed.
    pub fn listing_failed(why: &str) -> String {
        format!(
            "auth-barrier: listing the open operations FAILED ({why}) - any retirement a \
             crash interrupted stays frozen until a later start or a retire request \
             resumes it (fail-closed)"
        )
    }

    /// One sentence per gate the listing could not examine: each stays as it is.
    pub fn unexamined(open: &OpenOperations) -> Vec<String> {
        open.unexamined
            .iter()
            .map(|e| {
                format!(
                    "auth-barrier: a lifecycle gate could not be examined for resume ({}) - it \
                     stays as it is (fail-closed)",
                    e.message
                )
            })
            .collect()
    }

    /// The row a resume is audited over: the gate of its uid.
    pub fn row(uid: &LifecycleUid) -> String {
        format!("gate.{uid}")
    }

    /// A resumed retirement that finished.
    pub fn finished(op: &OpId, uid: &LifecycleUid, evicted: usize) -> String {
        format!(
            "auth-barrier: resumed retirement {op} for {uid}: finished, {evicted} \
             principal(s) evicted"
        )
    }

    /// A resumed retirement that failed: its gate stays frozen.
    pub fn failed(op: &OpId, uid: &LifecycleUid, why: &str) -> String {
        format!(
            "auth-barrier: resuming retirement {op} for {uid} FAILED ({why}) - the gate \
             stays frozen and nothing mints for this alias until a resume succeeds \
             (fail-closed)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::names::{ActorToken, OwnerToken};

    fn barrier() -> RetireLifecycle {
        RetireLifecycle {
            owner: OwnerToken::parse("local").unwrap(),
            actor: ActorToken::parse("alice").unwrap(),
            lifecycle_uid: LifecycleUid::parse("aaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap(),
            op_id: OpId::parse("bbbbbbbbbbbbbbbbbbbbbbbbbb").unwrap(),
            guard: None,
        }
    }

    #[test]
    fn entries_are_the_flight_metrics_labels() {
        let labels =
            [RetireEntry::Door, RetireEntry::Rail, RetireEntry::Boot].map(RetireEntry::as_str);
        assert_eq!(labels, ["door", "rail", "boot"]);
    }

    #[test]
    fn a_flight_is_bound_to_its_alias_and_uid() {
        assert_eq!(
            barrier().coordinates(),
            "local/alice aaaaaaaaaaaaaaaaaaaaaaaaaa"
        );
    }

    #[test]
    fn an_op_id_in_flight_elsewhere_is_a_conflict_that_changed_nothing() {
        let b = barrier();
        let e = flight_conflict(&b.op_id, "local/bob x", &b.coordinates());
        assert_eq!(e.code, ErrorCode::Conflict);
        assert_eq!(
            e.message,
            "operation bbbbbbbbbbbbbbbbbbbbbbbbbb is already in flight for another lifecycle \
             (local/bob x); this retirement of local/alice aaaaaaaaaaaaaaaaaaaaaaaaaa was a full \
             no-op - nothing was retired"
        );
    }

    #[test]
    fn a_caller_that_stops_waiting_is_told_the_flight_goes_on() {
        let e = flight_timed_out(Duration::from_secs(30));
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert_eq!(
            e.message,
            "the retirement did not finish within 30s; it goes on, and asking again joins it or \
             resumes it"
        );
    }

    #[test]
    fn the_boot_resume_says_each_outcome_and_stays_fail_closed() {
        let b = barrier();
        assert_eq!(
            BootResume::row(&b.lifecycle_uid),
            "gate.aaaaaaaaaaaaaaaaaaaaaaaaaa"
        );
        assert_eq!(
            BootResume::finished(&b.op_id, &b.lifecycle_uid, 2),
            "auth-barrier: resumed retirement bbbbbbbbbbbbbbbbbbbbbbbbbb for \
             aaaaaaaaaaaaaaaaaaaaaaaaaa: finished, 2 principal(s) evicted"
        );
        let failed = BootResume::failed(&b.op_id, &b.lifecycle_uid, "down");
        assert!(
            failed.contains("FAILED (down) - the gate stays frozen"),
            "{failed}"
        );
        assert!(BootResume::listing_failed("down").ends_with("resumes it (fail-closed)"));
        assert_eq!(
            BootResume::unstarted("closing"),
            "auth-barrier: the boot resume could not start: closing"
        );
        let open = OpenOperations {
            retirements: Vec::new(),
            unexamined: vec![EpError::unavailable("gate.x unreadable")],
        };
        assert_eq!(
            BootResume::unexamined(&open),
            [
                "auth-barrier: a lifecycle gate could not be examined for resume (gate.x \
              unreadable) - it stays as it is (fail-closed)"
            ]
        );
    }
}
