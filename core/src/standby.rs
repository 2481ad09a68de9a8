//! Which live plane a standby may wait on: one it has seen serving the very actor ledger the
//! standby will serve once it takes over.
//!
//! A standby that takes the space over serves the actor ledger from then on, so a takeover
//! keeps the active plane's acknowledged grants, revokes, re-grants and retirements only if the
//! standby's ledger *is* the active's: a copy of it diverges at the active's next revoke, and a
//! failover onto the copy silently undoes that revoke. The serving plane holds its ledger's
//! serving lock for as long as it holds the plane claim; the adapter answers whether that lock
//! is held (by another process, on this host) when [`LedgerWitness`] asks.
//!
//! The rule: for every live plane a claim refusal names, the lock must be seen held within
//! [`WITNESS_GRACE_MS`] of the standby first waiting on that plane; a refusal that names no
//! plane (a listing that could not decide) keeps the one last waited on. The grace covers only
//! the instant between a plane's claim and its lock, which it takes right after.

use crate::error::{EpError, ErrorCode};
use crate::plane_claim::ClaimRefusal;
use crate::plane_probe::PlaneQuery;

/// How long, from the first sight of a live plane, a standby waits to see its ledger served.
pub const WITNESS_GRACE_MS: u64 = 2_000;

/// What one look at the ledger found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Witnessed {
    /// The plane waited on was seen serving the ledger, at this look: say so once.
    Now,
    /// It was seen before (or the grace has not passed yet): go on waiting.
    Waiting,
    /// The grace passed and nothing on this host serves the ledger: refuse the standby.
    Refused,
}

/// The standby's record of the plane it waits on.
#[derive(Debug, Clone)]
pub struct LedgerWitness {
    holder: Option<PlaneQuery>,
    since_ms: u64,
    seen: bool,
}

impl LedgerWitness {
    /// Before the first wait, at `now_ms` (any monotonic clock in milliseconds).
    pub fn new(now_ms: u64) -> LedgerWitness {
        LedgerWitness {
            holder: None,
            since_ms: now_ms,
            seen: false,
        }
    }

    /// One wait on the claim: `holder` is the live plane the refusal named (none when the
    /// listing could not decide), `served` asks the adapter whether the ledger's serving lock
    /// is held now (asked only while the plane has not been seen serving it). A new holder
    /// starts a new grace.
    pub fn look<E>(
        &mut self,
        holder: Option<PlaneQuery>,
        now_ms: u64,
        served: impl FnOnce() -> Result<bool, E>,
    ) -> Result<Witnessed, E> {
        if let Some(holder) = holder {
            if self.holder.as_ref() != Some(&holder) {
                *self = LedgerWitness {
                    holder: Some(holder),
                    ..LedgerWitness::new(now_ms)
                };
            }
        }
        if self.seen {
            return Ok(Witnessed::Waiting);
        }
        if served()? {
            self.seen = true;
            return Ok(Witnessed::Now);
        }
        Ok(if now_ms.saturating_sub(self.since_ms) < WITNESS_GRACE_MS {
            Witnessed::Waiting
        } else {
            Witnessed::Refused
        })
    }
}

/// The refusal of a standby whose ledger (`ledger`, as the operator should find it) no plane
/// serves.
pub fn refusal(ledger: &str) -> String {
    format!(
        "standby refused: no plane on this host serves the actor ledger under {ledger}, so it is \
         not the active plane's (a copy, or another state dir's) and a takeover would undo the \
         active's revocations; start the standby on the active's host with --ledger-dir set to \
         the active plane's --state-dir"
    )
}

/// What a standby does with one refused attempt at the plane claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRefusal {
    /// Another plane holds the claim, or whether it does is not known yet: wait for the claim
    /// to move (a release, or its holder seen gone).
    Wait,
    /// The claim could not be read: try again shortly.
    Retry,
    /// Stop with the refusal.
    Refuse,
}

/// The standby's rule for a refused claim attempt. A live, unknown or concurrent holder is
/// waited on. An unserved read is retried once the standby is already waiting: losing the
/// active's host can take the claim stream's leader with it, and the election that follows is
/// exactly when the standby is needed; at its first attempt it refuses, so a space that is not
/// reachable at all is said at once. A plane that is not a standby never waits.
pub fn on_claim_refusal(refusal: &EpError, standby: bool, waiting: bool) -> OnRefusal {
    if !standby {
        return OnRefusal::Refuse;
    }
    match ClaimRefusal::of(refusal) {
        Some(ClaimRefusal::LivePeer | ClaimRefusal::Unknown | ClaimRefusal::Concurrent) => {
            OnRefusal::Wait
        }
        None if waiting && refusal.code == ErrorCode::Unavailable => OnRefusal::Retry,
        _ => OnRefusal::Refuse,
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;

    #[test]
    fn a_standby_waits_on_a_holder_retries_an_unserved_read_once_waiting_and_refuses_the_rest() {
        let unavailable = EpError::unavailable("cannot read the plane claim");
        assert_eq!(on_claim_refusal(&unavailable, true, true), OnRefusal::Retry);
        assert_eq!(
            on_claim_refusal(&unavailable, true, false),
            OnRefusal::Refuse
        );
        assert_eq!(
            on_claim_refusal(&unavailable, false, true),
            OnRefusal::Refuse
        );
        assert_eq!(
            on_claim_refusal(&EpError::internal("garbled"), true, true),
            OnRefusal::Refuse
        );
    }
}
