//! The liveness oracle and the verified evictor on a real server: [`cotal_core::liveness`]'s
//! sweep, driven over the plane's own system-account user (`system-user.json`).
//!
//! Every call opens its own short connection (the system user is never a standing connection
//! of the plane: nothing idles with the power to kick) and closes it when done. A connection
//! that cannot be made, a request that is refused and a server that stays silent all end as an
//! incomplete sweep, so a probe answers `unknown` and an eviction is unverified: nothing here
//! ever turns silence into `gone`.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::{Client, ConnectOptions};
use cotal_core::liveness::{
    connz_request, kick_outcome, kick_request, server_connz, server_kick, EvictionEvidence, Listed,
    Listing, Sweep, Topology, CONNZ_PING, JSZ_PING, SYSTEM_INBOX_PREFIX,
};
use cotal_core::machine::Liveness;
use cotal_core::names::{Principal, SpaceName};
use cotal_core::plane_claim::{PlaneQuery, PlaneVerdict};
use cotal_core::plane_grants::PlaneConnection;
use cotal_core::trust::DaemonMaterial;
use futures::StreamExt;
use tokio::time::{timeout, Instant};
use tracing::{info, warn};

use crate::dial::Dial;
use crate::driver::{Evictor, PlaneProber, Prober};

/// How long a ping waits for every expected server, and a single request for its reply.
pub const SWEEP_WAIT: Duration = Duration::from_secs(2);
/// Re-sweeps after the kicks before an eviction counts as unverified.
pub const VERIFY_ROUNDS: usize = 3;
/// Pause between a round of kicks and its verifying sweep.
const VERIFY_PAUSE: Duration = Duration::from_millis(100);

/// Where and as whom the oracle connects, and what it has found so far.
pub struct Oracle {
    dial: Dial,
    creds: String,
    /// The data account whose connections are listed.
    account: String,
    label: String,
    wait: Duration,
    /// The user nkeys of the asking plane's own connections: never kicked, never counted as
    /// a holder's remaining connection ([`Oracle::sparing`]).
    spared: BTreeSet<String>,
    /// One line per probe or eviction, for the operator's report.
    findings: Mutex<Vec<String>>,
}

impl fmt::Debug for Oracle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The creds hold a seed: never printed.
        f.debug_struct("Oracle")
            .field("label", &self.label)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// One verdict and the sweep it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub liveness: Liveness,
    pub listing: Listing,
}

impl Oracle {
    /// An oracle over the servers at `servers` (comma-separated URLs), connecting with the
    /// system user's `creds` as `label`, listing `account`'s connections.
    pub fn new(servers: impl Into<Dial>, creds: &str, account: &str, label: String) -> Oracle {
        Oracle {
            dial: servers.into(),
            creds: creds.to_owned(),
            account: account.to_owned(),
            label,
            wait: SWEEP_WAIT,
            spared: BTreeSet::new(),
            findings: Mutex::new(Vec::new()),
        }
    }

    /// The servers' own listing and the system account's kick of `space`, as its plane's system
    /// user (`cotal:plane-system:<space>`) from the trust root's `material`.
    pub fn of_system(
        servers: impl Into<Dial>,
        material: &DaemonMaterial,
        space: &SpaceName,
    ) -> Oracle {
        Oracle::new(
            servers,
            material.system_user().creds(),
            material.data_account(),
            PlaneConnection::PlaneSystem.label(space),
        )
    }

    /// Spares the connections of these user nkeys from every eviction: the evicting plane's
    /// own. They carry the plane's gate principal in their tags, so a family row that names
    /// that principal (a peer may mint a credential for it) would otherwise have the plane
    /// kick itself and then wait in vain for its own connections to go. The holder's other
    /// connections are still kicked and verified gone one by one.
    pub fn sparing(mut self, nkeys: impl IntoIterator<Item = String>) -> Oracle {
        self.spared.extend(nkeys);
        self
    }

    /// Waits at most `wait` per ping and request (tests shorten it).
    pub fn with_wait(mut self, wait: Duration) -> Oracle {
        self.wait = wait;
        self
    }

    /// What every probe and eviction found, in order.
    pub fn findings(&self) -> Vec<String> {
        self.findings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn note(&self, line: String) {
        info!(connection = %self.label, "{line}");
        self.findings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }

    async fn connect(&self) -> Result<Client, String> {
        let options = ConnectOptions::new()
            .credentials(&self.creds)
            .map_err(|_| "the plane's system user is not a valid creds file".to_owned())?;
        self.dial
            .apply(options)
            .name(&self.label)
            .custom_inbox_prefix(SYSTEM_INBOX_PREFIX)
            // One attempt at most after a drop: a sweep is short and is simply incomplete
            // when its connection goes.
            .max_reconnects(1)
            .connection_timeout(self.wait)
            .request_timeout(Some(self.wait))
            .connect(self.dial.urls())
            .await
            .map_err(|e| {
                format!(
                    "the system user cannot connect to {}: {}",
                    self.dial.servers(),
                    self.dial.describe(&e)
                )
            })
    }

    /// Publishes one ping and gathers replies until `enough` says so or the wait ends.
    async fn gather(
        &self,
        client: &Client,
        subject: &str,
        payload: Vec<u8>,
        mut enough: impl FnMut(&[Vec<u8>]) -> bool,
    ) -> Result<Vec<Vec<u8>>, String> {
        let inbox = client.new_inbox();
        let mut replies = client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| format!("cannot subscribe to the reply inbox: {e}"))?;
        client
            .publish_with_reply(subject.to_owned(), inbox, payload.into())
            .await
            .map_err(|e| format!("cannot send {subject}: {e}"))?;
        client
            .flush()
            .await
            .map_err(|e| format!("cannot send {subject}: {e}"))?;
        let deadline = Instant::now() + self.wait;
        let mut got = Vec::new();
        while !enough(&got) {
            match timeout(
                deadline.saturating_duration_since(Instant::now()),
                replies.next(),
            )
            .await
            {
                Ok(Some(message)) => got.push(message.payload.to_vec()),
                Ok(None) | Err(_) => break,
            }
        }
        let _ = replies.unsubscribe().await;
        Ok(got)
    }

    /// The servers' own account of who the cluster is: replies until every member they name
    /// has answered, or the wait ends.
    async fn topology(&self, client: &Client) -> Result<Topology, String> {
        let replies = self
            .gather(client, JSZ_PING, b"{}".to_vec(), |got| {
                Topology::from_jsz(got).is_ok_and(|t| t.names().len() == got.len())
            })
            .await?;
        Topology::from_jsz(&replies)
    }

    /// One sweep of the data account's connections on `client`, as far as the servers
    /// answered; `Err` when not even the cluster's membership could be read.
    async fn sweep_on(&self, client: &Client) -> Result<Sweep, String> {
        let mut sweep = Sweep::new(self.topology(client).await?);
        let first = self
            .gather(client, CONNZ_PING, connz_request(&self.account, 0), |got| {
                let mut probe = sweep.clone();
                got.iter().for_each(|reply| probe.add(reply));
                probe.heard_from_the_answering()
            })
            .await?;
        first.iter().for_each(|reply| sweep.add(reply));
        loop {
            let pages = sweep.next_pages();
            if pages.is_empty() {
                break;
            }
            for (server, offset) in pages {
                let reply = client
                    .request(
                        server_connz(&server),
                        connz_request(&self.account, offset).into(),
                    )
                    .await
                    .map_err(|e| format!("server {server} did not list page {offset}: {e}"))?;
                sweep.add(&reply.payload);
            }
        }
        Ok(sweep)
    }

    /// [`Oracle::sweep_on`]'s listing.
    async fn listing_on(&self, client: &Client) -> Listing {
        self.sweep_on(client)
            .await
            .map_or_else(Listing::Incomplete, |sweep| sweep.listing())
    }

    /// A fresh sweep on a connection of its own.
    async fn fresh_sweep(&self) -> Result<Sweep, String> {
        let client = self.connect().await?;
        let sweep = self.sweep_on(&client).await;
        let _ = client.drain().await;
        sweep
    }

    /// A fresh sweep's listing: complete, or why nothing can be concluded from absence.
    pub async fn sweep(&self) -> Listing {
        self.fresh_sweep()
            .await
            .map_or_else(Listing::Incomplete, |sweep| sweep.listing())
    }

    /// Whether `holder` has a live connection: `live`, `gone` under a complete sweep, else
    /// `unknown` (F52).
    pub async fn probe(&self, holder: &Principal) -> Probe {
        let listing = self.sweep().await;
        let liveness = listing.liveness(holder);
        self.note(match &listing {
            Listing::Complete(conns) => format!(
                "liveness of {holder}: {} ({} of its connections among {} listed; every server \
                 answered)",
                liveness.as_str(),
                listing.held_by(holder).count(),
                conns.len()
            ),
            Listing::Incomplete(why) => {
                format!("liveness of {holder}: unknown (the sweep is incomplete: {why})")
            }
        });
        Probe { liveness, listing }
    }

    /// The plane claim's question (reference §2.10): are a held claim's two scanner
    /// connections still connected? One fresh sweep answers both, as
    /// [`Sweep::plane_verdict`] reads it (servers that departed the cluster's majority
    /// included).
    pub async fn probe_plane(&self, query: &PlaneQuery) -> PlaneVerdict {
        let verdict = match self.fresh_sweep().await {
            Ok(sweep) => sweep.plane_verdict(query),
            Err(why) => PlaneVerdict::unknown(why),
        };
        self.note(format!(
            "the previous plane's scanners: auth-ledger {:?}, records {:?}{}",
            verdict.ledger,
            verdict.records,
            verdict
                .note
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ));
        verdict
    }

    /// Kicks one connection on the server that holds it; the caller verifies by a sweep.
    pub async fn kick(&self, server_id: &str, cid: u64) -> Result<(), String> {
        let client = self.connect().await?;
        let kicked = client
            .request(server_kick(server_id), kick_request(cid).into())
            .await
            .map_err(|e| e.to_string())
            .and_then(|reply| kick_outcome(&reply.payload));
        let _ = client.drain().await;
        kicked
    }

    /// Kicks every connection of `holders` and verifies by fresh sweeps that none remains:
    /// one verdict per holder, `true` = verified gone. An incomplete first sweep kicks nothing.
    pub async fn evict(&self, holders: &[Principal]) -> Vec<bool> {
        self.evict_with_evidence(holders)
            .await
            .iter()
            .map(|e| e.verified_gone)
            .collect()
    }

    /// [`Oracle::evict`] with what it found per holder, in `holders` order: connections kicked,
    /// connections the last sweep still lists, and whether that sweep was complete.
    pub async fn evict_with_evidence(&self, holders: &[Principal]) -> Vec<EvictionEvidence> {
        let client = match self.connect().await {
            Ok(client) => client,
            Err(why) => {
                self.note(format!("eviction unverified: {why}"));
                return holders
                    .iter()
                    .map(|h| EvictionEvidence::unknown(h.clone(), 0, &why))
                    .collect();
            }
        };
        let evidence = self.evict_on(&client, holders).await;
        let _ = client.drain().await;
        evidence
    }

    async fn evict_on(&self, client: &Client, holders: &[Principal]) -> Vec<EvictionEvidence> {
        let mut listing = self.listing_on(client).await;
        let mut kicked = vec![0u64; holders.len()];
        for round in 0..=VERIFY_ROUNDS {
            if let Listing::Incomplete(why) = &listing {
                self.note(format!(
                    "eviction of {} unverified: the sweep is incomplete ({why})",
                    names(holders)
                ));
                return holders
                    .iter()
                    .zip(&kicked)
                    .map(|(h, k)| EvictionEvidence::unknown(h.clone(), *k, why))
                    .collect();
            }
            let targets: Vec<(usize, String, u64)> = holders
                .iter()
                .enumerate()
                .flat_map(|(i, h)| {
                    self.remaining(&listing, h)
                        .map(move |c| (i, c.server.id.clone(), c.cid))
                })
                .collect();
            if targets.is_empty() {
                self.note(format!(
                    "evicted {}: {} connection(s) kicked, none left (verified by a complete \
                     sweep)",
                    names(holders),
                    kicked.iter().sum::<u64>()
                ));
                return holders
                    .iter()
                    .zip(&kicked)
                    .map(|(h, k)| EvictionEvidence::gone(h.clone(), *k))
                    .collect();
            }
            if round == VERIFY_ROUNDS {
                break;
            }
            for (i, server, cid) in targets {
                match client
                    .request(server_kick(&server), kick_request(cid).into())
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|reply| kick_outcome(&reply.payload))
                {
                    Ok(()) => {
                        if let Some(k) = kicked.get_mut(i) {
                            *k += 1;
                        }
                    }
                    Err(why) => {
                        warn!(connection = %self.label, "kicking connection {cid} on {server} failed: {why}")
                    }
                }
            }
            tokio::time::sleep(VERIFY_PAUSE).await;
            listing = self.listing_on(client).await;
        }
        self.note(format!(
            "eviction of {} unverified: connections remain after {VERIFY_ROUNDS} rounds of kicks",
            names(holders)
        ));
        holders
            .iter()
            .zip(&kicked)
            .map(|(h, k)| {
                let left = self.remaining(&listing, h).count() as u64;
                EvictionEvidence::remaining(h.clone(), *k, left)
            })
            .collect()
    }

    /// `holder`'s listed connections but the spared ones.
    fn remaining<'a>(
        &'a self,
        listing: &'a Listing,
        holder: &'a Principal,
    ) -> impl Iterator<Item = &'a Listed> {
        listing
            .held_by(holder)
            .filter(|c| !c.user.as_ref().is_some_and(|u| self.spared.contains(u)))
    }

    /// The oracle as a driver prober.
    pub fn prober(self: &Arc<Self>) -> Prober {
        let oracle = Arc::clone(self);
        Box::new(move |holder| {
            let oracle = Arc::clone(&oracle);
            Box::pin(async move { oracle.probe(&holder).await.liveness })
        })
    }

    /// The oracle as a driver plane prober.
    pub fn plane_prober(self: &Arc<Self>) -> PlaneProber {
        let oracle = Arc::clone(self);
        Box::new(move |query| {
            let oracle = Arc::clone(&oracle);
            Box::pin(async move { oracle.probe_plane(&query).await })
        })
    }

    /// The oracle as a driver evictor.
    pub fn evictor(self: &Arc<Self>) -> Evictor {
        let oracle = Arc::clone(self);
        Box::new(move |holders| {
            let oracle = Arc::clone(&oracle);
            Box::pin(async move { oracle.evict(&holders).await })
        })
    }
}

fn names(holders: &[Principal]) -> String {
    holders
        .iter()
        .map(Principal::key)
        .collect::<Vec<_>>()
        .join(", ")
}
