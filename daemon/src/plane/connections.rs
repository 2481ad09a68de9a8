//! The plane's connections: how each is opened (self-minted, labelled, attributed to the gate
//! principal), the plane claim they are pinned to, the actor ledger's serving lock taken with
//! the claim, and their close order.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use cotal_core::kv::Store;
use cotal_core::names::{Principal, SpaceName};
use cotal_core::plane_claim::{
    scanner_death_copy, AcquirePlaneClaim, ClaimHold, ClaimRefusal, ReleasePlaneClaim,
    RetakePlaneClaim, PLANE_CLAIM_KEY,
};
use cotal_core::readiness::DRAINING_AGENT_COPY;
use cotal_core::standby::{self, ClaimWait, NextAttempt};
use cotal_core::EpError;
use cotal_io_fs::{discovery, ServingLock};
use cotal_io_nats::authority::{AuthorityClient, DataAccountSigner, PlaneDialer};
use cotal_io_nats::follow::{KeyWrites, Source};
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::NatsWorld;
use nkeys::KeyPair;
use tracing::{error, info, warn};

use super::{PlaneInputs, Start, PREDECESSOR_WAIT, STANDBY_POLL};
use crate::audit;

/// The plane's long-lived connections, closed in the reverse of their opening (SPEC 13.13):
/// the scanners before the claim is released, the callout connection last.
pub(super) struct Connections {
    pub(super) mint: AuthorityClient,
    pub(super) reader: AuthorityClient,
    pub(super) issuer: AuthorityClient,
    pub(super) barrier: AuthorityClient,
    pub(super) scanners: Scanners,
    /// The plane claim as this plane holds it: re-taken, naming the scanners' reconnected
    /// connections, when its server came back ([`Connections::retake_claim`]).
    pub(super) hold: std::sync::Mutex<ClaimHold>,
    /// The actor ledger's serving lock, held from the claim until after its release.
    pub(super) serving: ServingLock,
    /// The auth control rail listener's connection (`cotal:auth-admin:<space>`).
    pub(super) admin: AuthorityClient,
    pub(super) callout: cotal_io_nats::async_nats::Client,
}

/// The plane's connections as its doors and its callout hold them: weakly, so the plane's own
/// handle stays the only owner and its ordered close (which consumes them) never waits on a
/// face or a callout task that is still winding down.
#[derive(Clone, Debug)]
pub(super) struct PlaneLink(std::sync::Weak<Connections>);

impl PlaneLink {
    pub(super) fn to(connections: &Arc<Connections>) -> PlaneLink {
        PlaneLink(Arc::downgrade(connections))
    }

    /// The connections, while the plane has not closed them.
    pub(super) fn get(&self) -> Result<Arc<Connections>, EpError> {
        self.0
            .upgrade()
            .ok_or_else(|| EpError::unavailable(DRAINING_AGENT_COPY))
    }
}

/// The issuing connection, current across its renewals, as long as the plane holds it: where
/// the run request observation follows it.
pub(super) struct Issuing(pub(super) PlaneLink);

impl Source for Issuing {
    fn current(
        &self,
    ) -> Result<(Arc<cotal_io_nats::Space>, tokio::sync::watch::Receiver<u64>), EpError> {
        let connections = self.0.get()?;
        (&connections.issuer).current()
    }
}

/// The two sealed scanner connections the plane claim pins.
pub(super) struct Scanners {
    pub(super) ledger: AuthorityClient,
    pub(super) records: AuthorityClient,
}

impl Scanners {
    /// Resolves with the operator copy once either scanner's connection dropped: the claim
    /// pins their exact connections, so the plane fences itself rather than go on with one
    /// that is not the one its claim names (reference §2.6).
    pub(super) async fn died(&self, space: &SpaceName) -> String {
        let role = tokio::select! {
            why = self.ledger.lost() => { warn!("{why}"); "auth-ledger" }
            why = self.records.lost() => { warn!("{why}"); "records" }
        };
        scanner_death_copy(space, role)
    }

    pub(super) async fn close(self) {
        close_said("auth-scan", self.ledger).await;
        close_said("records-scan", self.records).await;
    }
}

/// Closes `client`, saying so in the log (as `label`) when that fails.
async fn close_said(label: &str, client: AuthorityClient) {
    if let Err(e) = client.close().await {
        warn!(connection = label, "closing failed: {e}");
    }
}

impl Connections {
    /// The plane claim as held now: the guard of every sealed scan.
    pub(super) fn hold(&self) -> ClaimHold {
        self.hold
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether the connections a connect decision and a door's ledger read ride are connected
    /// (none reconnecting or closed): the callout's, the reader, the issuing connection and the
    /// mint writer (the replicated ledger's).
    pub(super) fn deciding_connected(&self) -> bool {
        [&self.reader, &self.issuer, &self.mint]
            .iter()
            .all(|client| client.is_connected())
            && self.callout.connection_state()
                == cotal_io_nats::async_nats::connection::State::Connected
    }

    /// Whether the connections the plane claim rides are connected: the barrier connection,
    /// which writes it, and the two scanners, which it names.
    pub(super) fn claiming_connected(&self) -> bool {
        [&self.barrier, &self.scanners.ledger, &self.scanners.records]
            .iter()
            .all(|client| client.is_connected())
    }

    /// Re-takes the plane claim once every connection is back after a lost server
    /// ([`RetakePlaneClaim`]): the row still names the scanners' dropped connections, so it is
    /// rewritten at the next generation under a fresh claim id, naming the scanners'
    /// connections as they are now — only while it is still exactly this plane's hold. A plane
    /// that took the claim meanwhile (a standby) wins: the refusal says so, and this plane
    /// stops. Each scanner's drop is cleared before its tuple is read, so a drop after the read
    /// is seen by the next [`Scanners::died`].
    pub(super) async fn retake_claim(&self) -> Result<(), EpError> {
        self.scanners.ledger.clear_lost();
        self.scanners.records.clear_lost();
        let hold = self.hold();
        let open = AcquirePlaneClaim {
            space: hold.space.clone(),
            claim_id: KeyPair::new_user().public_key(),
            ledger: self.scanners.ledger.conn_tuple()?,
            records: self.scanners.records.conn_tuple()?,
            now_ms: crate::clock::now_ms(),
        };
        let retake = RetakePlaneClaim { hold, open };
        let hold = match self.barrier.run_on(retake, |world| world).await {
            Ok(hold) => hold,
            Err(e) => {
                audit::refused("plane", "retake", PLANE_CLAIM_KEY, &e);
                return Err(e);
            }
        };
        let at = audit::At {
            generation: Some(hold.generation),
            epoch: None,
        };
        audit::granted("plane", "retake", PLANE_CLAIM_KEY, at);
        info!(
            generation = hold.generation,
            "the NATS server is back: re-took the plane claim"
        );
        *self
            .hold
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = hold;
        Ok(())
    }

    /// The user nkeys of the plane's self-minted connections, as the servers list them: the
    /// connections every eviction it runs spares.
    pub(super) fn nkeys(&self) -> Vec<String> {
        self.minted()
            .map(|client| client.conn_id().as_str().to_owned())
            .to_vec()
    }

    /// Resolves when any self-minted connection fails closed (its renewal failed).
    pub(super) async fn failed(&self) -> EpError {
        let failed = self.minted().map(|client| Box::pin(client.failed()));
        futures::future::select_all(failed).await.0
    }

    /// The self-minted connections (the callout's is not: it rides the stored creds).
    fn minted(&self) -> [&AuthorityClient; 7] {
        [
            &self.mint,
            &self.reader,
            &self.issuer,
            &self.barrier,
            &self.scanners.ledger,
            &self.scanners.records,
            &self.admin,
        ]
    }

    /// Closes in order (reference §2.9): the control rail listener, the reader, the scanners,
    /// then the claim is released over the barrier connection (never while a scanner could
    /// still act), then the barrier, issuer and mint connections, and the callout connection
    /// last. A release the servers did not answer (`release-unreachable`) keeps what a retry
    /// needs — the hold, the barrier connection and the ledger's serving lock — and returns it
    /// with the sentence, after everything else is closed; any other failed release is only
    /// said.
    pub(super) async fn close(self) -> Result<(), (Option<Unreleased>, String)> {
        let Connections {
            mint,
            reader,
            issuer,
            barrier,
            scanners,
            hold,
            serving,
            admin,
            callout,
        } = self;
        close_said("auth-admin", admin).await;
        close_said("reader", reader).await;
        scanners.close().await;
        let kept = Unreleased {
            barrier,
            hold: hold
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            serving,
        };
        let released = kept.release().await;
        close_said("issuer", issuer).await;
        close_said("mint", mint).await;
        let _ = callout.drain().await;
        released
    }
}

/// A claim a close could not release because the servers did not answer: what the next close
/// needs to release it. The serving lock stays held with it, since only once no claim names
/// this plane may a standby on this host take the ledger over.
pub(super) struct Unreleased {
    barrier: AuthorityClient,
    hold: ClaimHold,
    serving: ServingLock,
}

impl Unreleased {
    /// Releases the claim; on success (or a refusal a retry cannot change) lets the serving
    /// lock and the barrier connection go, else hands itself back for the next try.
    pub(super) async fn release(self) -> Result<(), (Option<Unreleased>, String)> {
        let outcome = release_claim(&self.barrier, self.hold.clone()).await;
        if let Err(e) = &outcome {
            if ClaimRefusal::of(e) == Some(ClaimRefusal::ReleaseUnreachable) {
                return Err((Some(self), e.message.clone()));
            }
        }
        let Unreleased {
            barrier, serving, ..
        } = self;
        drop(serving);
        close_said("barrier", barrier).await;
        outcome.map_err(|e| (None, e.message))
    }
}

/// Releases the plane claim over the barrier connection, audited and logged.
async fn release_claim(barrier: &AuthorityClient, hold: ClaimHold) -> Result<(), EpError> {
    let at = audit::At {
        generation: Some(hold.generation),
        epoch: None,
    };
    let released = barrier
        .run_on(ReleasePlaneClaim { hold }, |world| world)
        .await;
    match released {
        Ok(()) => {
            audit::granted("plane", "release", PLANE_CLAIM_KEY, at);
            info!("released the plane claim");
            Ok(())
        }
        Err(e) => {
            audit::refused("plane", "release", PLANE_CLAIM_KEY, &e);
            error!("{}", e.message);
            Err(e)
        }
    }
}

/// The dialer of the plane `inputs` start, its connections tagged with `holder`, the gate
/// principal.
pub(super) fn dialer(inputs: &PlaneInputs, holder: &Principal) -> PlaneDialer {
    PlaneDialer::new(
        inputs.server.clone(),
        discovery::redacted(inputs.server.servers()),
        inputs.space.clone(),
        DataAccountSigner::of(&inputs.material),
        inputs.replicas,
        holder,
    )
}

impl Start<'_> {
    pub(super) fn space(&self) -> &SpaceName {
        &self.inputs.space
    }

    /// Acquires the plane claim over the barrier connection with the scanners' connections
    /// (reference §2.5 step 5, §2.10), the servers' own listing adjudicating a held row. A
    /// standby (`--standby`) waits on a live or unknown holder instead of refusing, re-trying
    /// every [`STANDBY_POLL`], and takes over as soon as the holder is gone or released the
    /// claim; dropping the future ends the wait. It waits only on a plane that serves its own
    /// actor ledger ([`LedgerWitness`](cotal_core::standby::LedgerWitness)), and a won claim
    /// comes with that ledger's serving lock
    /// ([`Start::serve_ledger`]).
    pub(super) async fn claim(
        &self,
        barrier: &AuthorityClient,
        scanners: &Scanners,
    ) -> Result<(ClaimHold, ServingLock), String> {
        let oracle = Arc::new(self.oracle());
        // One claim id per open, whatever the number of attempts.
        let claim_id = KeyPair::new_user().public_key();
        let tuple = |client: &AuthorityClient| client.conn_tuple().map_err(|e| e.message);
        let (ledger, records) = (tuple(&scanners.ledger)?, tuple(&scanners.records)?);
        let mut plan = ClaimWait::new(self.inputs.standby);
        let waited = std::time::Instant::now();
        // A write of the claim row (a release, a reclaim) wakes a waiting start at once; the
        // poll covers a holder that dies without writing it, whose end only the oracle sees.
        let mut claim_writes = KeyWrites::listen(
            barrier,
            Store::Auth,
            self.space(),
            PLANE_CLAIM_KEY,
            "claim wait",
        )
        .await;
        loop {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_err(|_| "the system clock is before 1970".to_owned())?
                .as_millis();
            let attempt = AcquirePlaneClaim {
                space: self.space().clone(),
                claim_id: claim_id.clone(),
                ledger: ledger.clone(),
                records: records.clone(),
                now_ms: u64::try_from(now_ms).unwrap_or(u64::MAX),
            };
            let bound = barrier.space().map_err(|e| e.message.clone())?;
            let mut world = NatsWorld::new(&bound).probing_planes(&oracle);
            let refusal = match world.run_script(attempt).await {
                Ok(hold) => {
                    audit::granted(
                        "plane",
                        hold.action(),
                        PLANE_CLAIM_KEY,
                        audit::At {
                            generation: Some(hold.generation),
                            epoch: None,
                        },
                    );
                    info!(
                        generation = hold.generation,
                        reclaimed = hold.reclaimed,
                        "{}",
                        hold.held_copy()
                    );
                    return self.serve_ledger(barrier, hold).await;
                }
                Err(e) => e,
            };
            // A live peer is looked up in the servers' listing: this instance's own fenced
            // predecessor is waited on for a while, any other live plane goes to the rule.
            let own = match ClaimWait::predecessor_query(&refusal, elapsed_ms(waited)) {
                Some(query) => {
                    ClaimWait::own_predecessor(&query, &oracle.sweep().await, &self.holder)
                }
                None => false,
            };
            let ledger = &self.inputs.ledger;
            match plan.next(&refusal, own, elapsed_ms(waited), || ledger.is_served())? {
                NextAttempt::Predecessor { first } => {
                    if first {
                        info!(
                            "waiting for this instance's predecessor, which this start's \
                             registration fenced, to release the plane claim"
                        );
                    }
                }
                NextAttempt::Retry => {
                    warn!("standby: {}; retrying", refusal.message);
                    tokio::time::sleep(STANDBY_POLL).await;
                    continue;
                }
                NextAttempt::Refuse => {
                    audit::refused("plane", "claim", PLANE_CLAIM_KEY, &refusal);
                    return Err(refusal.message);
                }
                NextAttempt::Unserved => return Err(standby::refusal(&ledger.describe())),
                NextAttempt::Wait { witnessed, first } => {
                    if witnessed {
                        info!(
                            ledger = %ledger.describe(),
                            "standby: the active plane serves this standby's actor ledger"
                        );
                    }
                    if first {
                        info!("standby: {}; waiting to take over", refusal.message);
                    }
                }
            }
            claim_writes.within(STANDBY_POLL).await;
        }
    }

    /// Takes the actor ledger's serving lock for a won claim, waiting [`PREDECESSOR_WAIT`] at
    /// most for a plane on this host still holding it (this instance's fenced predecessor on its
    /// way out). Two planes never serve one ledger at once; a start that cannot take it
    /// releases the claim and refuses.
    async fn serve_ledger(
        &self,
        barrier: &AuthorityClient,
        hold: ClaimHold,
    ) -> Result<(ClaimHold, ServingLock), String> {
        let ledger = &self.inputs.ledger;
        let deadline = Instant::now() + PREDECESSOR_WAIT;
        let why = loop {
            match ledger.serve() {
                Ok(Some(lock)) => return Ok((hold, lock)),
                Ok(None) if Instant::now() < deadline => tokio::time::sleep(STANDBY_POLL).await,
                Ok(None) => break standby::ledger_still_served(&ledger.describe()),
                Err(why) => break why,
            }
        };
        let _ = release_claim(barrier, hold).await;
        Err(why)
    }

    /// The servers' own listing and the system account's kick, as this plane's system user.
    pub(super) fn oracle(&self) -> Oracle {
        Oracle::of_system(&self.inputs.server, &self.inputs.material, self.space())
    }
}

/// Milliseconds since `since`, as core's monotonic inputs take them.
fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}
