//! The plane of one space as a value: [`Plane::start`] brings it up and returns only once it
//! serves, [`Plane::ended`] resolves when it stops serving on its own (fenced, or a connection
//! that could not be renewed), and [`Plane::close`] takes it down in order. It installs no
//! signal handler and never exits the process: the `up` command wraps it.
//!
//! Start order: the mint writer (`cotal:auth-mint:<space>`: store ensure and shape proof) → the
//! shared self-authorized ceremony (reference §7.1) on the short-lived
//! `cotal:auth-registration:<space>` connection, scoped to this one instance, crash-safe
//! ([`register`]) → the reader (`cotal:auth-reader:<space>`) that the fence watch reads over,
//! the remote-manager issuer, the barrier executor → the two sealed scanners and the plane
//! claim over the barrier connection (a standby waits here, on a plane that serves the actor
//! ledger it will serve) → the ledger's serving lock → the callout connection
//! (`cotal:auth-service:<space>`, the stored callout creds) and the auth callout subscribed on
//! it ([`connect`]) → the loopback HTTP face on 127.0.0.1 (`/health` with the readiness state,
//! `/jwks`, the capability-guarded doors: [`exchange`], [`manager_route`], [`retire_doors`])
//! and, when asked, the public face. Every self-minted connection carries a 15-minute JWT
//! re-minted in process at half-life. A start that fails after the connections opened releases
//! them in reverse ([`Taken`]).
//!
//! Eviction: the registration's evictor is the servers' own listing and the system account's
//! kick ([`Oracle`](cotal_io_nats::liveness::Oracle)), as `gate reconcile` uses. The plane mints
//! no credentials for its own instance, so its `epcred` family is empty and nothing is evicted
//! today (F68); should a family ever hold rows, their holders are kicked and verified gone
//! before the reopen.

mod boot_resume;
mod connect;
mod connections;
mod decision;
mod exchange;
mod faces;
mod fence_watch;
mod high_water;
mod host;
mod kill_point;
#[cfg(not(feature = "kill-points"))]
pub use kill_point::refuse_requested as refuse_requested_kill_points;
mod maintenance;
mod manager_caller;
mod manager_ops;
mod manager_route;
mod platform;
pub use platform::{ObserveAssignment, Observed};
mod metrics;
mod rail;
mod register;
mod retire_doors;
mod retirement;
mod roots;
mod runs;
mod verify_door;

pub use cotal_core::readiness::{HostedContext, Readiness};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cotal_core::endpoint_rail::retire_lifecycle_served;
use cotal_core::gate::{Generation, ProcessEpoch, RegistrationRevision};
use cotal_core::host::auth_principal;
use cotal_core::issuance::GateRef;
use cotal_core::jwt::Permissions;
use cotal_core::kv::{Revision, Store};
use cotal_core::manager::ManagerHost;
use cotal_core::names::{Principal, SpaceName};
use cotal_core::plane_grants::{self, PlaneConnection};
use cotal_core::profiles::{ConnId, StandingTtl};
use cotal_core::trust::DaemonMaterial;
use cotal_io_fs::instance::Identity;
use cotal_io_fs::ledger_home::LedgerHome;
use cotal_io_fs::marks;
use cotal_io_fs::secrets::SecretStore;
use cotal_io_fs::trust::read_issuer_keys;
use cotal_io_http::bearer::{BearerIssuer, KeyRing};
use cotal_io_http::idp_keys::{IdpKeys, IdpSource};
use cotal_io_nats::authority::connect_with_creds;
use cotal_io_nats::authority::DataAccountSigner;
use cotal_io_nats::callout::{CalloutKeys, CalloutService};
use cotal_io_nats::durables::NatsDurables;
use cotal_io_nats::observed::RunRequestObserver;
use cotal_io_nats::reaper;
use cotal_io_nats::{AuthorityClient, Replicas};
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;
use tracing::{error, warn};

use crate::ledger::Ledger;
use connections::{Connections, Scanners};
use cotal_io_http::face::{
    start_faces, Capability, FaceHandle, LoopbackConfig, PublicConfig, PublicFaceSettings,
    CLOSE_GRACE,
};
use faces::PlaneFaces;
use metrics::PlaneMetrics;
use retirement::Retirements;

/// How long a start waits for this very instance's predecessor, which its registration just
/// fenced, to release the plane claim.
pub const PREDECESSOR_WAIT: Duration =
    Duration::from_millis(cotal_core::standby::PREDECESSOR_WAIT_MS);
/// How often a standby re-tries the plane claim: how late, at most, it notices that the active
/// plane died or released it (plus one listing).
pub const STANDBY_POLL: Duration = Duration::from_millis(250);

/// Everything one plane starts from, given explicitly.
#[derive(Debug)]
pub struct PlaneInputs {
    pub space: SpaceName,
    /// The NATS server URL(s) of the space and the TLS every connection dials them with.
    pub server: cotal_io_nats::Dial,
    /// The state root: the registration record and lock live under it.
    pub root: PathBuf,
    pub replicas: Replicas,
    /// Wait on a live plane's claim instead of refusing, and take over when it dies.
    pub standby: bool,
    /// The actor ledger the plane serves ([`cotal_io_fs::ledger_home`]): its own state root's
    /// files, the ones of the active plane a standby stands by on this host (held under their
    /// serving lock while the plane holds the claim; a standby waits only on a plane that holds
    /// it), or the space's replicated bucket, which every plane of the space serves alike.
    pub ledger: LedgerHome,
    pub material: DaemonMaterial,
    pub identity: Identity,
    /// The loopback face's port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The public face, when opened (validated by `check_public_face`).
    pub public: Option<PublicFaceSettings>,
    /// The lifetime of the standing credentials the manager route issues, within [5, 86400]
    /// seconds by construction. Only a trusted host sets it (reference §2.3 step 0): no CLI flag
    /// and no request field reaches it, so `up` passes [`StandingTtl::DEFAULT`].
    pub standing_ttl: StandingTtl,
    /// Who composes the plane (see [`Composition`]).
    pub composition: Composition,
    /// Where its secret material lives: the running plane re-reads its issuer keys there, so an
    /// `issuer rotate` or `issuer prune` takes effect without a restart.
    pub secrets: Arc<dyn SecretStore>,
}

/// Who composes a plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Composition {
    /// `cotal-authd up`: the workspace's own manager is read from the state root.
    Cli,
    /// A platform host ([`crate::hosted`]): no local manager, and `/health` names the context
    /// the platform assigned.
    Hosted(HostedContext),
}

impl Composition {
    /// The hosted context, if any.
    pub fn context(&self) -> Option<&HostedContext> {
        match self {
            Composition::Cli => None,
            Composition::Hosted(context) => Some(context),
        }
    }
}

/// What the registration committed.
#[derive(Debug, Clone)]
pub struct Registered {
    pub gate: GateRef,
    pub process_epoch: ProcessEpoch,
    pub generation: Generation,
    pub registration_revision: RegistrationRevision,
    /// The gate's KV revision right after the registration: no later read may show less.
    pub gate_revision: Revision,
}

/// One connection of a plane's inventory ([`Plane::connections`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedConnection {
    /// Its CONNZ name, `cotal:<role>:<space>`.
    pub label: String,
    pub ended: bool,
}

/// Why a plane stopped serving on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// A successor or a barrier fenced it (its gate moved on): the message says which.
    Fenced(String),
    /// It can no longer serve and should be started again: its server lost, a sealed scanner
    /// cut, its gate unreadable too long, a credential not renewed.
    Failed(String),
}

/// One start's working view of its inputs.
struct Start<'a> {
    inputs: &'a PlaneInputs,
    /// The gate principal, `local.<serve nkey>`.
    holder: Principal,
    dialer: cotal_io_nats::authority::PlaneDialer,
}

/// A serving plane.
pub struct Plane {
    registered: Registered,
    ended: watch::Receiver<Option<Ended>>,
    readiness: watch::Sender<Readiness>,
    monitor: Mutex<Option<JoinHandle<()>>>,
    /// The auth control rail listener's task, the retirements and the callout.
    taken: Mutex<Taken>,
    connections: Mutex<Option<Arc<Connections>>>,
    loopback: FaceHandle,
    public: Option<(FaceHandle, String)>,
    capability: Capability,
    /// The rollback check's high-water file.
    high_water: PathBuf,
    /// How the host incarnation handle opens its connections.
    dialer: cotal_io_nats::authority::PlaneDialer,
    /// A claim an earlier close could not release (the servers did not answer), for the next.
    unreleased: Mutex<Option<connections::Unreleased>>,
    /// Held for the whole of a close, so a second close waits for the first's outcome instead
    /// of finding its half-taken state.
    closing: Mutex<()>,
    /// The manager-service operations, which the platform control door dispatches to.
    manager_ops: Arc<manager_ops::ManagerOps>,
    recorder: decision::Recorder,
}

impl std::fmt::Debug for Plane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The capability is a credential: never printed.
        f.debug_struct("Plane")
            .field("registered", &self.registered)
            .field("loopback", &self.loopback.local_addr())
            .finish_non_exhaustive()
    }
}

impl Plane {
    /// Brings the plane up (see the module doc). Errors are one sentence. A standby's start
    /// waits on the plane claim until it takes over; drop the future to give up.
    pub async fn start(inputs: &PlaneInputs) -> Result<Plane, String> {
        // A host embedding the plane gets the same refusal `up` gives before it touches anything.
        #[cfg(not(feature = "kill-points"))]
        refuse_requested_kill_points()?;
        let holder = auth_principal(&inputs.identity.serve_key).map_err(|e| e.message)?;
        let start = Start {
            inputs,
            dialer: connections::dialer(inputs, &holder),
            holder,
        };
        let (connections, registered) = start.open_all().await?;
        let connections = Arc::new(connections);
        let mut taken = Taken::default();
        match start.serve(&connections, registered, &mut taken).await {
            Ok(plane) => Ok(plane),
            Err(why) => {
                taken.release(connections).await;
                Err(why)
            }
        }
    }

    /// Whether the plane serves now.
    pub fn readiness(&self) -> Readiness {
        self.readiness.borrow().clone()
    }

    /// What this start's registration committed.
    pub fn registered(&self) -> &Registered {
        &self.registered
    }

    /// The loopback face's URL.
    pub fn loopback_url(&self) -> String {
        format!("http://{}", self.loopback.local_addr())
    }

    /// The public face's URL (the advertised https:// one, else where it is bound), when open.
    pub fn public_url(&self) -> Option<String> {
        self.public.as_ref().map(|(_, url)| url.clone())
    }

    /// The per-start loopback capability (for the 0600 discovery file only).
    pub fn capability(&self) -> &str {
        self.capability.expose_hex()
    }

    /// Every connection the plane owns, in boot order, each with whether it has ended (the
    /// short registration connection ends during the start; the others when the plane closes).
    /// A detached snapshot: a host platform's inventory of what this plane holds open.
    pub async fn connections(&self) -> Vec<OwnedConnection> {
        let open = self.connections.lock().await.is_some();
        PlaneConnection::ALL
            .iter()
            .map(|role| OwnedConnection {
                label: role.label(&self.registered.gate.space),
                ended: !open || *role == PlaneConnection::AuthRegistration,
            })
            .collect()
    }

    /// Resolves once the plane stopped serving on its own; pending while it serves.
    pub async fn ended(&self) -> Ended {
        let mut ended = self.ended.clone();
        loop {
            if let Some(why) = ended.borrow_and_update().as_ref() {
                return why.clone();
            }
            if ended.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Takes the plane down in order (reference §2.9); idempotent. Returns a claim release that
    /// failed, after everything else is closed.
    pub async fn close(&self) -> Result<(), String> {
        let _closing = self.closing.lock().await;
        // Stop admitting first, and let requests in flight finish (reference §2.9).
        if !matches!(*self.readiness.borrow(), Readiness::Unavailable(_)) {
            self.readiness.send_replace(Readiness::Draining);
        }
        match &self.public {
            Some((public, _)) => {
                tokio::join!(self.loopback.close(CLOSE_GRACE), public.close(CLOSE_GRACE));
            }
            None => self.loopback.close(CLOSE_GRACE).await,
        }
        // The control rail stops answering next, then every retirement still in flight stops
        // (each resumes under its op id on the next request or start). The callout answers
        // until the faces are closed, then stops before its connection.
        if let Err(e) = self.taken.lock().await.stop().await {
            warn!("closing the auth callout failed: {}", e.message);
        }
        if let Some(monitor) = self.monitor.lock().await.take() {
            monitor.abort();
            let _ = monitor.await;
        }
        let Some(connections) = self.connections.lock().await.take() else {
            return self.release_again().await;
        };
        self.raise_stream_marks(&connections).await;
        let closed = match Arc::try_unwrap(connections) {
            Ok(connections) => connections.close().await,
            Err(_) => return Err("the plane's connections are still in use; not closed".to_owned()),
        };
        self.kept(closed).await
    }

    /// A close after one that could not release the claim: the release again, over the
    /// connection kept for it (reference §2.9: closing again once the servers answer releases
    /// the row).
    async fn release_again(&self) -> Result<(), String> {
        let Some(kept) = self.unreleased.lock().await.take() else {
            return Ok(());
        };
        let released = kept.release().await;
        self.kept(released).await
    }

    /// Keeps what a failed release hands back for the next close.
    async fn kept(
        &self,
        released: Result<(), (Option<connections::Unreleased>, String)>,
    ) -> Result<(), String> {
        match released {
            Ok(()) => Ok(()),
            Err((kept, why)) => {
                *self.unreleased.lock().await = kept;
                Err(why)
            }
        }
    }
}

impl Start<'_> {
    /// Everything after the connections, the registration and the claim: the control rail,
    /// the callout, the run request observation, the faces and the fence watch. What it takes
    /// goes into `taken`, which the caller releases when this fails.
    async fn serve(
        &self,
        connections: &Arc<Connections>,
        registered: Registered,
        taken: &mut Taken,
    ) -> Result<Plane, String> {
        let inputs = self.inputs;
        let (readiness, watched) = watch::channel(Readiness::Ready);
        let capability = Capability::generate().map_err(|e| e.to_string())?;
        let guard = Capability::from_hex(capability.expose_hex()).map_err(|e| e.to_string())?;
        let metrics = Arc::new(PlaneMetrics::new());
        // One bearer issuer for the exchange, the callout and /jwks: a rotation the plane
        // adopts is seen by all three at once.
        let bearers = BearerIssuer::of_issuer_keys(inputs.space.clone(), inputs.material.issuer())?;
        metrics.registered(registered.process_epoch.0, registered.generation.0);
        // Before the plane answers anything: finish what a crash interrupted (reference
        // §2.11), then open the control rail, whose retirements share these flights.
        let retirements = Retirements::new(
            connections::PlaneLink::to(connections),
            Arc::new(self.oracle().sparing(connections.nkeys())),
            Arc::clone(&metrics),
        )?;
        taken.retirements = Some(Arc::clone(&retirements));
        retirements.resume_open().await;
        let rail = start_rail(
            inputs,
            &registered,
            connections,
            &retirements,
            watched.clone(),
            &metrics,
        )
        .await?;
        taken.rail = Some(rail);
        let ledger = served_ledger(inputs, connections);
        let callout = serve_callout(
            inputs,
            &bearers,
            connections,
            ledger,
            watched.clone(),
            &metrics,
        );
        taken.callout = Some(callout.await?);
        // Confirmed by the server before anything reports ready (SPEC 14.8), and kept on the
        // issuing connection across its renewals.
        let issuing = connections::Issuing(connections::PlaneLink::to(connections));
        let observed = RunRequestObserver::follow(issuing, inputs.space.clone())
            .await
            .map_err(|e| e.message)?;
        let public_exchange = Arc::new(std::sync::OnceLock::new());
        let doors = doors(
            inputs,
            &bearers,
            connections,
            &retirements,
            &metrics,
            &public_exchange,
            observed,
        )?;
        let manager_ops = Arc::clone(&doors.manager.ops);
        let faces = Arc::new(PlaneFaces::new(
            &inputs.material,
            bearers.clone(),
            inputs.composition.context(),
            Box::new(doors),
            watched,
            Arc::clone(&metrics),
        )?);
        // TLS is required when the plane dials TLS, or when the server it reached says so in
        // its INFO (a nats:// URL the client upgraded).
        let server_tls =
            inputs.server.requires_tls() || connections.callout.server_info().tls_required;
        let (loopback, public) = bind_faces(inputs, &faces, guard, server_tls).await?;
        if let Some((_, url)) = &public {
            let _ = public_exchange.set(url.clone());
        }
        let (tx, ended) = watch::channel(None);
        let monitor = tokio::spawn({
            let connections = Arc::clone(connections);
            let readiness = readiness.clone();
            let metrics = Arc::clone(&metrics);
            let registered = registered.clone();
            let space = inputs.space.clone();
            let (secrets, followed) = (Arc::clone(&inputs.secrets), bearers.clone());
            async move {
                // The reaper and the key follower never end on their own: they stop with the
                // fence watch.
                let why = tokio::select! {
                    why = fence_watch::watch_fence(&connections, &registered, &readiness, &metrics) => why,
                    never = reaper::reap_every_period(
                        || connections.scanners.ledger.space(),
                        &space,
                    ) => match never {},
                    never = follow_issuer_keys(&secrets, &space, &followed) => match never {},
                };
                let (kind, cause) = match &why {
                    Ended::Fenced(why) => ("fenced", why.clone()),
                    Ended::Failed(why) => ("failed", why.clone()),
                };
                metrics.ended(kind);
                readiness.send_replace(Readiness::Unavailable(cause));
                tx.send_replace(Some(why));
            }
        });
        Ok(Plane {
            registered,
            ended,
            readiness,
            monitor: Mutex::new(Some(monitor)),
            taken: Mutex::new(std::mem::take(taken)),
            connections: Mutex::new(Some(Arc::clone(connections))),
            loopback,
            public,
            capability,
            high_water: marks::path(&inputs.root, &inputs.space),
            dialer: self.dialer.clone(),
            unreleased: Mutex::new(None),
            closing: Mutex::new(()),
            manager_ops,
            recorder: decision::Recorder::new(&metrics),
        })
    }
}

impl Plane {
    /// Raises the stream marks to what the stores hold as the plane stops, so the next start's
    /// rollback check covers every write this run made (root credentials, revocations,
    /// retirements), not only its registration. Best effort: a failure is logged, and the marks
    /// the start recorded stand.
    async fn raise_stream_marks(&self, connections: &Connections) {
        let raised = async {
            let mut high = marks::load(&self.high_water)?;
            let bound = connections.barrier.space().map_err(|e| e.message)?;
            high_water::raise_streams(&mut high, &bound).await?;
            marks::save(&self.high_water, &high)
        };
        if let Err(e) = raised.await {
            error!("recording the stores' high-water marks at close failed: {e}");
        }
    }
}

/// What a start took after its connections, released in reverse when a later step fails: the
/// callout, the control rail and its retirements, then the connections (the claim among them).
/// Best effort: the start's own error is what the caller reports. A serving plane keeps it and
/// stops it the same way when it closes.
#[derive(Default)]
struct Taken {
    retirements: Option<Arc<Retirements>>,
    rail: Option<JoinHandle<()>>,
    callout: Option<CalloutService>,
}

impl Taken {
    /// Stops the control rail, then the retirements in flight, then the callout; `Err` when
    /// the callout's close failed.
    async fn stop(&mut self) -> Result<(), cotal_core::EpError> {
        if let Some(rail) = self.rail.take() {
            rail.abort();
            let _ = rail.await;
        }
        if let Some(retirements) = &self.retirements {
            retirements.close().await;
        }
        match self.callout.take() {
            Some(callout) => callout.close().await,
            None => Ok(()),
        }
    }

    async fn release(mut self, connections: Arc<Connections>) {
        let _ = self.stop().await;
        if let Ok(connections) = Arc::try_unwrap(connections) {
            let _ = connections.close().await;
        }
    }
}

/// Subscribes the auth control rail: the plane's `auth` instance serving `retire-lifecycle` at
/// the epoch its registration committed.
async fn start_rail(
    inputs: &PlaneInputs,
    registered: &Registered,
    connections: &Arc<Connections>,
    retirements: &Arc<Retirements>,
    readiness: watch::Receiver<Readiness>,
    metrics: &Arc<PlaneMetrics>,
) -> Result<JoinHandle<()>, String> {
    let served = retire_lifecycle_served(
        &inputs.space,
        &registered.gate.instance,
        registered.process_epoch,
    )
    .map_err(|e| e.message)?;
    let rail = rail::Rail {
        space: inputs.space.clone(),
        retirements: Arc::clone(retirements),
        readiness,
        recorder: decision::Recorder::new(metrics),
    };
    rail.start(served, connections::PlaneLink::to(connections))
        .await
}

/// How often a running plane re-reads its issuer keys: how late, at most, it adopts an
/// `issuer rotate` or `issuer prune`.
const ISSUER_RELOAD: Duration = Duration::from_secs(2);

/// Re-reads the trust root's issuer keys every [`ISSUER_RELOAD`] and adopts them when they
/// changed (a rotation or a prune), for the exchange, the callout and `/jwks` at once
/// ([`BearerIssuer::follow`]: a read that fails keeps the keys in use).
async fn follow_issuer_keys(
    secrets: &Arc<dyn SecretStore>,
    space: &SpaceName,
    bearers: &BearerIssuer,
) -> std::convert::Infallible {
    let read = || {
        read_issuer_keys(secrets.as_ref(), space).and_then(|keys| KeyRing::of_issuer_keys(&keys))
    };
    bearers.follow(ISSUER_RELOAD, read).await
}

/// The plane's doors: the exchange (its root credentials minted on the mint connection) and
/// the manager-service authority route (on the issuer connection), sharing one cache of the
/// pinned IdP's keys.
fn doors(
    inputs: &PlaneInputs,
    bearers: &BearerIssuer,
    connections: &Arc<Connections>,
    retirements: &Arc<Retirements>,
    metrics: &Arc<PlaneMetrics>,
    public_exchange: &Arc<std::sync::OnceLock<String>>,
    observed: Arc<RunRequestObserver>,
) -> Result<faces::PlaneDoors, String> {
    let ledger = served_ledger(inputs, connections);
    let material = &inputs.material;
    let idp = Arc::new(IdpKeys::new(IdpSource::pinned(material.idp())));
    let host = ManagerHost::of_trust_root(inputs.space.clone(), material, inputs.standing_ttl)?;
    Ok(faces::PlaneDoors {
        exchange: exchange::Exchange {
            space: inputs.space.clone(),
            material: material.clone(),
            idp: Arc::clone(&idp),
            ledger: ledger.clone(),
            bearers: bearers.clone(),
            roots: roots::RootHints::new(&inputs.space)?,
            local: manager_caller::LocalManagerFile::new(inputs),
            connections: connections::PlaneLink::to(connections),
            recorder: decision::Recorder::new(metrics),
        },
        manager: manager_route::ManagerRoute {
            space: inputs.space.clone(),
            material: material.clone(),
            idp,
            ledger: ledger.clone(),
            ops: Arc::new(manager_ops::ManagerOps {
                material: material.clone(),
                ledger: ledger.clone(),
                host: host.clone(),
                public_exchange: Arc::clone(public_exchange),
                connections: connections::PlaneLink::to(connections),
                oracle: retirements.oracle(),
                server: inputs.server.clone(),
                durables: Arc::new(NatsDurables::new(
                    &inputs.server,
                    inputs.space.clone(),
                    DataAccountSigner::of(material),
                    auth_principal(&inputs.identity.serve_key).map_err(|e| e.message)?,
                )),
                runs: runs::Runs {
                    space: inputs.space.clone(),
                    material: material.clone(),
                    ledger: ledger.clone(),
                    connections: connections::PlaneLink::to(connections),
                    observed,
                },
            }),
            recorder: decision::Recorder::new(metrics),
        },
        retire: retire_doors::RetireDoors {
            ledger: ledger.clone(),
            retirements: Arc::clone(retirements),
            recorder: decision::Recorder::new(metrics),
        },
        verify: verify_door::VerifyDoor {
            space: inputs.space.clone(),
            ledger,
            host,
            connections: connections::PlaneLink::to(connections),
            recorder: decision::Recorder::new(metrics),
        },
    })
}

/// The ledger the doors and the callout ask: the files, or the replicated bucket over the
/// mint connection's current binding (its grant covers the ledger's store).
fn served_ledger(inputs: &PlaneInputs, connections: &Arc<Connections>) -> Ledger {
    match &inputs.ledger {
        LedgerHome::Files(files) => Ledger::Files(files.clone()),
        LedgerHome::Replicated => {
            let link = connections::PlaneLink::to(connections);
            Ledger::replicated(&inputs.space, Arc::new(move || link.get()?.mint.space()))
        }
    }
}

/// Subscribes the auth callout on the callout connection, flushed, before anything reports
/// ready (reference §2.4): connects are decided by [`connect::ConnectAuthorizer`].
async fn serve_callout(
    inputs: &PlaneInputs,
    bearers: &BearerIssuer,
    connections: &Arc<Connections>,
    ledger: Ledger,
    readiness: watch::Receiver<Readiness>,
    metrics: &Arc<PlaneMetrics>,
) -> Result<CalloutService, String> {
    let keys = CalloutKeys::from_material(&inputs.material).map_err(|e| e.message)?;
    let authorizer = connect::ConnectAuthorizer {
        space: inputs.space.clone(),
        bearers: bearers.clone(),
        local: manager_caller::LocalManagerFile::new(inputs),
        ledger,
        connections: connections::PlaneLink::to(connections),
        readiness,
        recorder: decision::Recorder::new(metrics),
        bindings: std::sync::Mutex::default(),
    };
    cotal_io_nats::callout::serve(connections.callout.clone(), keys, Arc::new(authorizer))
        .await
        .map_err(|e| e.message)
}

/// Binds the loopback face and, when asked, the public one, whose discovery bundle names where
/// it was bound and whether the server requires TLS (`server_tls`). A public face that cannot
/// bind closes the loopback one first.
async fn bind_faces(
    inputs: &PlaneInputs,
    faces: &Arc<PlaneFaces>,
    guard: Capability,
    server_tls: bool,
) -> Result<(FaceHandle, Option<(FaceHandle, String)>), String> {
    let loopback = LoopbackConfig::new(inputs.port, guard);
    let public = inputs
        .public
        .as_ref()
        .map(|s| PublicConfig::new(s.port, s.trusted_proxy));
    let (loopback, public) = start_faces(loopback, public, Arc::clone(faces)).await?;
    let (Some(settings), Some(public)) = (&inputs.public, public) else {
        return Ok((loopback, None));
    };
    let url = settings
        .url
        .clone()
        .unwrap_or_else(|| format!("http://{}", public.local_addr()));
    faces.publish_bundle(
        &inputs.space,
        inputs.server.servers(),
        server_tls,
        settings,
        &url,
    );
    Ok((loopback, Some((public, url))))
}

/// The seven stores of every space: what the mint writer ensures and the issuer binds.
const SPACE_STORES: [Store; 7] = [
    Store::Auth,
    Store::Records,
    Store::Admission,
    Store::Contracts,
    Store::Issued,
    Store::Accepted,
    Store::Sessions,
];

impl Start<'_> {
    /// Opens the self-minted connection of `role` over `stores`, granted by its builder
    /// `grants` of the space (only the mint creates a missing store).
    async fn open_granted(
        &self,
        role: PlaneConnection,
        grants: impl FnOnce(&SpaceName, &ConnId) -> Result<Permissions, cotal_core::EpError>,
        stores: &[Store],
    ) -> Result<AuthorityClient, String> {
        let space = self.space().clone();
        let options = self
            .dialer
            .options(stores, role == PlaneConnection::AuthMint);
        self.dialer
            .open(role, move |conn| grants(&space, conn), options)
            .await
    }

    /// Opens every connection in order, registers, and takes the claim.
    async fn open_all(&self) -> Result<(Connections, Registered), String> {
        let space = self.space().clone();
        let mut all = SPACE_STORES.to_vec();
        // A replicated ledger's store rides the mint connection, which creates it if missing.
        if matches!(self.inputs.ledger, LedgerHome::Replicated) {
            all.push(Store::Actors);
        }
        let mint = self
            .open_granted(PlaneConnection::AuthMint, plane_grants::auth_mint, &all)
            .await?;
        let mint = self.dialer.governed(mint).await?;
        let registered = self.register(&mint).await?;
        let gate = &registered.gate;
        let reader = self
            .open_granted(
                PlaneConnection::AuthReader,
                |space, conn| plane_grants::auth_reader_watching(space, conn, gate),
                &[Store::Auth, Store::Records],
            )
            .await?;
        let issuer = self
            .open_granted(
                PlaneConnection::RemoteManagerIssuer,
                plane_grants::remote_manager_issuer,
                &SPACE_STORES,
            )
            .await?;
        let barrier = self
            .open_granted(
                PlaneConnection::AuthBarrier,
                plane_grants::auth_barrier,
                &[Store::Auth, Store::Records],
            )
            .await?;
        let scanners = Scanners {
            ledger: self
                .open_granted(
                    PlaneConnection::AuthScan,
                    plane_grants::auth_scan,
                    &[Store::Auth],
                )
                .await?,
            records: self
                .open_granted(
                    PlaneConnection::RecordsScan,
                    plane_grants::records_scan,
                    &[Store::Records],
                )
                .await?,
        };
        let (hold, serving) = self.claim(&barrier, &scanners).await?;
        let (instance, epoch) = (&registered.gate.instance, registered.process_epoch);
        let admin = self
            .open_granted(
                PlaneConnection::AuthAdmin,
                |space, conn| plane_grants::auth_admin(space, conn, instance, epoch),
                &[],
            )
            .await?;
        let callout = connect_with_creds(
            &self.inputs.server,
            &PlaneConnection::AuthService.label(&space),
            self.inputs.material.callout_creds(),
        )
        .await
        .map_err(|e| self.dialer.refusal(&e.message))?;
        let connections = Connections {
            mint,
            reader,
            issuer,
            barrier,
            scanners,
            hold: std::sync::Mutex::new(hold),
            serving,
            admin,
            callout,
        };
        Ok((connections, registered))
    }
}
