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
