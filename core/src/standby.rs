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
use crate::liveness::Listing;
use crate::names::Principal;
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

/// The refusal of a start that won the claim while another process on this host still
/// serves its actor ledger (`ledger`, as the operator should find it) [`PREDECESSOR_WAIT_MS`]
/// later: two planes never serve one ledger at once.
pub fn ledger_still_served(ledger: &str) -> String {
    format!(
        "another process on this host still serves the actor ledger under {ledger} {}s after \
         this plane took the claim; stop it and start again",
        PREDECESSOR_WAIT_MS / 1000
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

/// How long a start waits for this very instance's predecessor, which its registration just
/// fenced, to release the plane claim.
pub const PREDECESSOR_WAIT_MS: u64 = 10_000;

/// What a start does after one refused attempt at the plane claim ([`ClaimWait::next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAttempt {
    /// This instance's own predecessor holds the claim and releases it as it exits: wait for
    /// the claim to move. `first`: the start begins waiting now (say so once).
    Predecessor { first: bool },
    /// A standby's unserved read: try again shortly ([`on_claim_refusal`]).
    Retry,
    /// Stop with the refusal.
    Refuse,
    /// Stop: no plane on this host serves the standby's ledger ([`refusal`]).
    Unserved,
    /// A standby waits for the claim to move. `witnessed`: the active plane was seen serving
    /// this standby's ledger at this look; `first`: the standby begins waiting now.
    Wait { witnessed: bool, first: bool },
}

/// A start's wait on the plane claim (reference §2.5 step 5, §2.10): the rule for each refused
/// attempt, in order. A `live-peer` holder whose scanner connections all carry this instance's
/// own gate principal is its fenced predecessor, waited on for [`PREDECESSOR_WAIT_MS`] at most;
/// anything else goes to the standby's rule ([`on_claim_refusal`]) and, for a standby that
/// waits, to the ledger witness ([`LedgerWitness`]).
#[derive(Debug, Clone)]
pub struct ClaimWait {
    standby: bool,
    waiting: bool,
    witness: LedgerWitness,
}

impl ClaimWait {
    /// Before the first attempt; `standby` waits on a live plane instead of refusing.
    pub fn new(standby: bool) -> ClaimWait {
        ClaimWait {
            standby,
            waiting: false,
            witness: LedgerWitness::new(0),
        }
    }

    /// The held row's scanner connections to look up in the servers' listing before
    /// [`ClaimWait::next`], when the refusal is `live-peer` and the start has waited less than
    /// [`PREDECESSOR_WAIT_MS`] (`waited_ms` since its first attempt); `None` otherwise.
    pub fn predecessor_query(refusal: &EpError, waited_ms: u64) -> Option<PlaneQuery> {
        let query = ClaimRefusal::live_peer(refusal)?;
        (waited_ms < PREDECESSOR_WAIT_MS).then_some(query)
    }

    /// True when the listing shows the held row's scanner connections and every one of them
    /// carries `holder`, this instance's gate principal: its own predecessor, which this start's
    /// registration just fenced. An incomplete listing shows nothing, so it is never one.
    pub fn own_predecessor(query: &PlaneQuery, listing: &Listing, holder: &Principal) -> bool {
        let mut held = listing
            .of_tuple(&query.ledger)
            .chain(listing.of_tuple(&query.records))
            .peekable();
        held.peek().is_some() && held.all(|c| c.principal.as_ref() == Some(holder))
    }

    /// The rule for one refused attempt: `own_predecessor` from
    /// [`ClaimWait::own_predecessor`], `waited_ms` since the first attempt, `served` asks
    /// whether the standby's ledger is served now (see [`LedgerWitness::look`]).
    pub fn next<E>(
        &mut self,
        refusal: &EpError,
        own_predecessor: bool,
        waited_ms: u64,
        served: impl FnOnce() -> Result<bool, E>,
    ) -> Result<NextAttempt, E> {
        if own_predecessor {
            return Ok(NextAttempt::Predecessor {
                first: self.begin_waiting(),
            });
        }
        match on_claim_refusal(refusal, self.standby, self.waiting) {
            OnRefusal::Wait => {}
            OnRefusal::Retry => return Ok(NextAttempt::Retry),
            OnRefusal::Refuse => return Ok(NextAttempt::Refuse),
        }
        let witnessed =
            match self
                .witness
                .look(ClaimRefusal::live_peer(refusal), waited_ms, served)?
            {
                Witnessed::Now => true,
                Witnessed::Waiting => false,
                Witnessed::Refused => return Ok(NextAttempt::Unserved),
            };
        Ok(NextAttempt::Wait {
            witnessed,
            first: self.begin_waiting(),
        })
    }

    /// Marks the start as waiting; true the first time.
    fn begin_waiting(&mut self) -> bool {
        !std::mem::replace(&mut self.waiting, true)
    }
}

#[cfg(test)]
mod claim_wait_tests {
    use super::*;
    use crate::liveness::{Listed, ServerRef};
    use crate::plane_probe::ConnTuple;

    const NKEY_A: &str = "UAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    const NKEY_B: &str = "UBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";

    fn query() -> PlaneQuery {
        PlaneQuery {
            ledger: ConnTuple::new("S1", 1, NKEY_A).unwrap(),
            records: ConnTuple::new("S1", 2, NKEY_B).unwrap(),
        }
    }

    fn listed(cid: u64, user: &str, principal: Option<&Principal>) -> Listed {
        Listed {
            server: ServerRef {
                name: "n1".into(),
                id: "S1".into(),
            },
            cid,
            principal: principal.cloned(),
            name: "cotal:auth-scan:s".into(),
            user: Some(user.into()),
        }
    }

    fn live_peer() -> EpError {
        let q = query();
        EpError::conflict("a live plane holds the claim").with_detail(serde_json::json!({
                "kind": crate::plane_claim::PLANE_CLAIM_REFUSED,
                "reason": "live-peer",
                "ledger": q.ledger.to_json(),
                "records": q.records.to_json(),
        }))
    }

    #[test]
    fn a_live_peer_is_looked_up_only_within_the_predecessor_wait() {
        let refusal = live_peer();
        assert_eq!(ClaimWait::predecessor_query(&refusal, 0), Some(query()));
        assert_eq!(
            ClaimWait::predecessor_query(&refusal, PREDECESSOR_WAIT_MS),
            None
        );
        let unknown = EpError::unavailable("cannot read the plane claim");
        assert_eq!(ClaimWait::predecessor_query(&unknown, 0), None);
    }

    #[test]
    fn a_holder_is_the_own_predecessor_only_when_every_listed_scanner_carries_this_principal() {
        let own = Principal::parse("local.own").unwrap();
        let other = Principal::parse("local.other").unwrap();
        let both = |p: Option<&Principal>, q: Option<&Principal>| {
            Listing::Complete(vec![listed(1, NKEY_A, p), listed(2, NKEY_B, q)])
        };
        assert!(ClaimWait::own_predecessor(
            &query(),
            &both(Some(&own), Some(&own)),
            &own
        ));
        assert!(!ClaimWait::own_predecessor(
            &query(),
            &both(Some(&own), Some(&other)),
            &own
        ));
        assert!(!ClaimWait::own_predecessor(
            &query(),
            &both(Some(&own), None),
            &own
        ));
        // Nothing listed (gone, or a listing that could not decide): not this instance's.
        assert!(!ClaimWait::own_predecessor(
            &query(),
            &Listing::Complete(vec![]),
            &own
        ));
        assert!(!ClaimWait::own_predecessor(
            &query(),
            &Listing::Incomplete("a server did not answer".into()),
            &own
        ));
    }

    #[test]
    fn a_start_waits_on_its_predecessor_and_says_so_once() {
        let mut wait = ClaimWait::new(false);
        let refusal = live_peer();
        let never = || -> Result<bool, ()> { unreachable!("no witness for a predecessor") };
        assert_eq!(
            wait.next(&refusal, true, 0, never),
            Ok(NextAttempt::Predecessor { first: true })
        );
        assert_eq!(
            wait.next(&refusal, true, 10, never),
            Ok(NextAttempt::Predecessor { first: false })
        );
        // Another live plane: a start that is not a standby refuses.
        assert_eq!(
            wait.next(&refusal, false, 20, || Ok::<_, ()>(true)),
            Ok(NextAttempt::Refuse)
        );
    }

    #[test]
    fn a_standby_witnesses_the_ledger_then_waits_and_is_refused_when_nothing_serves_it() {
        let refusal = live_peer();
        let mut wait = ClaimWait::new(true);
        assert_eq!(
            wait.next(&refusal, false, 0, || Ok::<_, ()>(true)),
            Ok(NextAttempt::Wait {
                witnessed: true,
                first: true
            })
        );
        assert_eq!(
            wait.next(&refusal, false, 50, || Ok::<_, ()>(false)),
            Ok(NextAttempt::Wait {
                witnessed: false,
                first: false
            })
        );
        // Waiting, an unserved read is retried.
        let unavailable = EpError::unavailable("cannot read the plane claim");
        assert_eq!(
            wait.next(&unavailable, false, 60, || Ok::<_, ()>(true)),
            Ok(NextAttempt::Retry)
        );

        let mut unserved = ClaimWait::new(true);
        assert_eq!(
            unserved.next(&refusal, false, 0, || Ok::<_, ()>(false)),
            Ok(NextAttempt::Wait {
                witnessed: false,
                first: true
            })
        );
        assert_eq!(
            unserved.next(&refusal, false, WITNESS_GRACE_MS, || Ok::<_, ()>(false)),
            Ok(NextAttempt::Unserved)
        );
        // The adapter's failure to answer is the caller's error.
        assert_eq!(
            ClaimWait::new(true).next(&refusal, false, 0, || Err("unreadable")),
            Err("unreadable")
        );
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

    #[test]
    fn a_ledger_still_served_after_the_wait_is_refused_naming_it_and_the_wait() {
        assert_eq!(
            ledger_still_served("/srv/a/actors"),
            "another process on this host still serves the actor ledger under /srv/a/actors 10s \
             after this plane took the claim; stop it and start again"
        );
    }
}
