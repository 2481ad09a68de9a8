//! `cotal-authd up`: bring the plane up in a space as its own `auth` endpoint instance, on
//! authenticated, labelled connections, then hold that registration until a signal or a
//! successor fences it.
//!
//! Order: the trust root (refused, listing what is missing, before anything else happens) →
//! the instance identity → the server (the embedded one from exactly `broker-config`'s
//! configuration, or an operator's, which must trust this space's operator) → the mint writer
//! (`cotal:auth-mint:<space>`: store ensure and shape proof) → the shared self-authorized
//! ceremony (reference §7.1) on the short-lived `cotal:auth-registration:<space>` connection,
//! scoped to this one instance: publish the `auth` closure, provision the gate on first sight,
//! register (serving variant), confirm → the reader (`cotal:auth-reader:<space>`) that the fence
//! watch reads over, the remote-manager issuer, the barrier executor and the callout connection
//! (`cotal:auth-service:<space>`, the stored callout creds) → discovery file + banner → the watch.
//! Every self-minted connection carries a 15-minute JWT re-minted in process at half-life.
//!
//! Crash safety: the registration's op id is recorded durably before the freeze and resumed by
//! the next start (see [`Plane::operation`]); no `kill -9` leaves the gate frozen for good.
//!
//! Eviction: the registration's evictor is the servers' own listing and the system account's
//! kick ([`Oracle`]), as `gate reconcile` uses. The plane mints no credentials for its own
//! instance, so its `epcred` family is empty and nothing is evicted today (F68); should a family
//! ever hold rows, their holders are kicked and verified gone before the reopen.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cotal_core::gate::ProcessEpoch;
use cotal_core::host::{
    auth_instance, auth_principal, confirm_registration, resumed_op, AwaitHostFence,
    PrepareSelfAuthorized, AUTH_ENDPOINT,
};
use cotal_core::issuance::{observe_gate, GateRef};
use cotal_core::jwt::{Permissions, UserNats};
use cotal_core::kv::Store;
use cotal_core::machine::{script, Replay};
use cotal_core::names::{EndpointName, OpId, Principal, SpaceName};
use cotal_core::plane_claim::{
    scanner_death_copy, AcquirePlaneClaim, ClaimHold, ClaimRefusal, ConnTuple, ReleasePlaneClaim,
};
use cotal_core::plane_grants::{self, PlaneConnection, AUTHORITY_CLIENT_TTL_SECS};
use cotal_core::profiles::{principal_tags, ConnId};
use cotal_core::serving::RegisterServing;
use cotal_core::trust::DaemonMaterial;
use cotal_core::EpError;
use cotal_io_fs::trust;
use cotal_io_nats::authority::{connect_with_creds, AuthorityClient, DataAccountSigner};
use cotal_io_nats::host::hold_fence;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{
    drive, NatsWorld, Replicas, SendHook, SendPhase, Space, SpaceOptions, StoreSet,
};
use nkeys::KeyPair;
use rustix::process::{getpid, kill_process, Signal as KillSignal};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::{error, info, info_span, warn, Instrument};

use crate::embedded::Embedded;
use crate::state::{self, Discovery};
use crate::trust_cmd::embedded_dir;

/// How often a running plane re-reads its own gate (F6: only a fresh read can tell): how late,
/// at most, it notices a successor on another process.
pub const FENCE_POLL: Duration = Duration::from_millis(250);
/// How long the gate may stay unreadable before the plane gives up: it can no longer tell
/// whether it has been fenced, so it stops claiming to serve.
const UNREACHABLE_LIMIT: Duration = Duration::from_secs(10);
/// The exit status of a plane a successor fenced (or whose gate a barrier took): distinct from
/// a failure (1) so a supervisor can leave it stopped (systemd `RestartPreventExitStatus=3`)
/// instead of restarting it to fence its successor in turn.
pub const EXIT_FENCED: u8 = 3;
/// How often a standby re-tries the plane claim: how late, at most, it notices that the active
/// plane died or released it (plus one listing).
pub const STANDBY_POLL: Duration = Duration::from_millis(250);
/// Validated `up` flags.
#[derive(Debug)]
pub struct UpArgs {
    pub space: SpaceName,
    pub server: Option<String>,
    pub root: PathBuf,
    pub replicas: Replicas,
    /// Wait on a live plane's claim instead of refusing, and take over when it dies.
    pub standby: bool,
}

/// Runs `up`. Errors before readiness are one sentence for the caller to print.
pub async fn up(args: UpArgs) -> Result<ExitCode, String> {
    let material = trust::load_daemon(&args.root, &args.space)?;
    let identity = state::load_or_create(&args.root, &args.space)?;
    let (url, embedded) = match &args.server {
        Some(url) => (url.clone(), None),
        None => {
            let broker = trust::load_broker(&args.root, &args.space)?;
            let dir = embedded_dir(&args.root, &args.space);
            let embedded = Embedded::start(&dir, |listen, store| {
                cotal_core::trust::broker_config(&broker, listen, store).map_err(|e| e.message)
            })?;
            (embedded.url.clone(), Some(embedded))
        }
    };
    let span = info_span!("up", space = %args.space, instance = %identity.instance);
    let holder = auth_principal(&identity.serve_key).map_err(|e| e.message)?;
    let plane = Plane {
        args: &args,
        identity: &identity,
        material: &material,
        url: &url,
        holder,
    };
    match plane.serve().instrument(span).await {
        Ok(outcome) => {
            match (outcome, embedded) {
                (Outcome::Stopped, Some(e)) => e.stop(),
                // Fenced: the successor that fenced us runs on this server; leave it running.
                (Outcome::Fenced, Some(_)) | (_, None) => {}
            }
            Ok(match outcome {
                Outcome::Stopped => ExitCode::SUCCESS,
                Outcome::Fenced => ExitCode::from(EXIT_FENCED),
            })
        }
        Err(why) => {
            if let Some(e) = embedded.filter(Embedded::spawned) {
                e.stop();
            }
            Err(why)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Stopped,
    Fenced,
}

/// What one start of the plane works from.
struct Plane<'a> {
    args: &'a UpArgs,
    identity: &'a state::Identity,
    material: &'a DaemonMaterial,
    url: &'a str,
    /// The gate principal, `local.<serve nkey>`.
    holder: Principal,
}

/// The plane's long-lived connections, closed in the reverse of their opening (SPEC 13.13):
/// the scanners before the claim is released, the callout connection last.
struct Connections {
    mint: AuthorityClient,
    reader: AuthorityClient,
    issuer: AuthorityClient,
    barrier: AuthorityClient,
    scanners: Scanners,
    hold: ClaimHold,
    callout: cotal_io_nats::async_nats::Client,
}

/// The two sealed scanner connections the plane claim pins.
struct Scanners {
    ledger: AuthorityClient,
    records: AuthorityClient,
}

impl Scanners {
    /// Resolves with the operator copy once either scanner's connection dropped: the claim
    /// pins their exact connections, so the plane fences itself rather than go on with one
    /// that is not the one its claim names (reference §2.6).
    async fn died(&self, space: &SpaceName) -> String {
        let role = tokio::select! {
            why = self.ledger.lost() => { warn!("{why}"); "auth-ledger" }
            why = self.records.lost() => { warn!("{why}"); "records" }
        };
        scanner_death_copy(space, role)
    }

    async fn close(self) {
        for (label, client) in [("auth-scan", self.ledger), ("records-scan", self.records)] {
            if let Err(e) = client.close().await {
                warn!(connection = label, "closing failed: {e}");
            }
        }
    }
}

impl Connections {
    /// Resolves when any self-minted connection fails closed (its renewal failed).
    async fn failed(&self) -> EpError {
        tokio::select! {
            e = self.mint.failed() => e,
            e = self.reader.failed() => e,
            e = self.issuer.failed() => e,
            e = self.barrier.failed() => e,
            e = self.scanners.ledger.failed() => e,
            e = self.scanners.records.failed() => e,
        }
    }

    /// Closes in order (reference §2.9): the reader, the scanners, then the claim is released
    /// over the barrier connection (never while a scanner could still act), then the barrier,
    /// issuer and mint connections, and the callout connection last. A release that failed is
    /// returned after everything is closed.
    async fn close(self) -> Result<(), String> {
        let Connections {
            mint,
            reader,
            issuer,
            barrier,
            scanners,
            hold,
            callout,
        } = self;
        if let Err(e) = reader.close().await {
            warn!(connection = "reader", "closing failed: {e}");
        }
        scanners.close().await;
        let released = match barrier.space() {
            Ok(bound) => drive(&mut Replay::new(ReleasePlaneClaim { hold }), &bound)
                .await
                .map_err(|e| e.message),
            Err(e) => Err(e.message),
        };
        match &released {
            Ok(()) => info!("released the plane claim"),
            Err(why) => error!("{why}"),
        }
        for (label, client) in [("barrier", barrier), ("issuer", issuer), ("mint", mint)] {
            if let Err(e) = client.close().await {
                warn!(connection = label, "closing failed: {e}");
            }
        }
        let _ = callout.drain().await;
        released
    }
}

impl Plane<'_> {
    fn space(&self) -> &SpaceName {
        &self.args.space
    }

    fn signer(&self) -> DataAccountSigner {
        DataAccountSigner {
            account: self.material.data_account().to_owned(),
            signer: Arc::new(self.material.data_signing_key().clone()),
        }
    }

    fn options(&self, stores: &[Store], create_missing: bool) -> SpaceOptions {
        SpaceOptions {
            replicas: self.args.replicas,
            stores: StoreSet::of(stores),
            create_missing,
            ..SpaceOptions::default()
        }
    }

    /// Opens one self-minted connection of `role`, refusing in one sentence a server this
    /// space's trust root does not govern.
    async fn open(
        &self,
        role: PlaneConnection,
        grants: impl FnOnce(&ConnId) -> Result<Permissions, EpError>,
        options: SpaceOptions,
    ) -> Result<AuthorityClient, String> {
        // Every connection carries the gate principal's tags, so the servers' own listing
        // attributes it to this plane: a reconcile of a frozen `auth` gate then sees the plane
        // that froze it as live for as long as it runs (F24, F52).
        let tags = principal_tags(&self.holder);
        AuthorityClient::open(
            self.url,
            role.label(self.space()),
            self.signer(),
            move |conn| {
                Ok(UserNats {
                    permissions: grants(conn)?,
                    tags,
                    ..UserNats::default()
                })
            },
            Duration::from_secs(AUTHORITY_CLIENT_TTL_SECS),
            self.space().clone(),
            options,
        )
        .await
        .map_err(|e| self.refusal(&e.message))
    }

    /// A refused credential means the server does not trust this space's operator (or lacks
    /// its accounts); anything else (unreachable, timed out) is said as it is.
    fn refusal(&self, why: &str) -> String {
        if why.to_ascii_lowercase().contains("authorization") {
            self.not_ours(why)
        } else {
            why.to_owned()
        }
    }

    /// The one sentence for a server that refused or ignored this space's credentials.
    fn not_ours(&self, why: &str) -> String {
        format!(
            "the NATS server at {} is not serving space {} from its trust root ({why}); run it \
             from `cotal-authd broker-config --space {}`, or start `up` without --server",
            state::redacted(self.url),
            self.space(),
            self.space()
        )
    }

    async fn serve(&self) -> Result<Outcome, String> {
        let space = self.space().clone();
        let all = [
            Store::Auth,
            Store::Records,
            Store::Admission,
            Store::Contracts,
        ];
        let mint = {
            let space = space.clone();
            self.open(
                PlaneConnection::AuthMint,
                move |conn| plane_grants::auth_mint(&space, conn),
                self.options(&all, true),
            )
            .await?
        };
        let open_to_all = !mint
            .space()
            .map_err(|e| e.message.clone())?
            .client()
            .server_info()
            .auth_required;
        if open_to_all {
            let _ = mint.close().await;
            return Err(self.not_ours("it lets clients in without credentials"));
        }
        let registered = self.register().await?;
        let reader = {
            let space = space.clone();
            self.open(
                PlaneConnection::AuthReader,
                move |conn| plane_grants::auth_reader(&space, conn),
                self.options(&[Store::Auth, Store::Records], false),
            )
            .await?
        };
        let issuer = {
            let space = space.clone();
            self.open(
                PlaneConnection::RemoteManagerIssuer,
                move |conn| plane_grants::remote_manager_issuer(&space, conn),
                self.options(&[Store::Auth, Store::Records], false),
            )
            .await?
        };
        let barrier = {
            let space = space.clone();
            self.open(
                PlaneConnection::AuthBarrier,
                move |conn| plane_grants::auth_barrier(&space, conn),
                self.options(&[Store::Auth, Store::Records], false),
            )
            .await?
        };
        let scanners = Scanners {
            ledger: {
                let space = space.clone();
                self.open(
                    PlaneConnection::AuthScan,
                    move |conn| plane_grants::auth_scan(&space, conn),
                    self.options(&[Store::Auth], false),
                )
                .await?
            },
            records: {
                let space = space.clone();
                self.open(
                    PlaneConnection::RecordsScan,
                    move |conn| plane_grants::records_scan(&space, conn),
                    self.options(&[Store::Records], false),
                )
                .await?
            },
        };
        // Handlers go in before the claim wait and the discovery file: a standby stops on a
        // signal, and whoever finds the file may signal at once.
        let mut signals = Signals {
            term: signal(SignalKind::terminate()).map_err(|e| format!("signals: {e}"))?,
            int: signal(SignalKind::interrupt()).map_err(|e| format!("signals: {e}"))?,
        };
        let Some(hold) = self.claim(&barrier, &scanners, &mut signals).await? else {
            scanners.close().await;
            for client in [barrier, issuer, reader, mint] {
                let _ = client.close().await;
            }
            return Ok(Outcome::Stopped);
        };
        let callout = connect_with_creds(
            self.url,
            &PlaneConnection::AuthService.label(&space),
            self.material.callout_creds(),
        )
        .await
        .map_err(|e| self.refusal(&e.message))?;
        let connections = Connections {
            mint,
            reader,
            issuer,
            barrier,
            scanners,
            hold,
            callout,
        };

        let discovery = state::discovery_path(&self.args.root, &space);
        let server = state::redacted(self.url);
        state::write_discovery(
            &discovery,
            &space,
            &Discovery {
                pid: std::process::id(),
                server: server.clone(),
                instance: self.identity.instance.to_string(),
                process_epoch: registered.process_epoch.0,
                generation: registered.generation.0,
                registration_revision: registered.registration_revision.0,
            },
        )?;
        println!(
            "cotal-authd: auth instance {} ready in space {space} on {server} at epoch {} \
             (generation {}, registration revision {}); discovery file {}",
            self.identity.instance,
            registered.process_epoch,
            registered.generation,
            registered.registration_revision,
            discovery.display()
        );
        let gate = GateRef::new(
            space.clone(),
            registered.gate.endpoint.clone(),
            self.identity.instance.clone(),
        );
        let outcome = watch(&connections, &gate, registered.process_epoch, signals).await;
        // The discovery file goes first: nobody may find a plane that is on its way out.
        state::remove_discovery_if_ours(&discovery);
        let released = connections.close().await;
        match (outcome, released) {
            (Ok(outcome), Ok(())) => Ok(outcome),
            (Ok(Outcome::Stopped), Err(why)) => Err(format!("stopped, but {why}")),
            (outcome, _) => outcome,
        }
    }

    /// Acquires the plane claim over the barrier connection with the scanners' connections
    /// (reference §2.5 step 5, §2.10), the servers' own listing adjudicating a held row. A
    /// standby (`--standby`) waits on a live or unknown holder instead of refusing, re-trying
    /// every [`STANDBY_POLL`], and takes over as soon as the holder is gone or released the
    /// claim. `None`: a signal stopped the wait.
    async fn claim(
        &self,
        barrier: &AuthorityClient,
        scanners: &Scanners,
        signals: &mut Signals,
    ) -> Result<Option<ClaimHold>, String> {
        let tuple = |client: &AuthorityClient| {
            let (server, cid) = client.server_connection();
            ConnTuple::new(&server, cid, client.conn_id().as_str()).map_err(|e| e.message)
        };
        let oracle = Arc::new(self.oracle());
        let acquire = AcquirePlaneClaim {
            space: self.space().clone(),
            claim_id: KeyPair::new_user().public_key(),
            ledger: tuple(&scanners.ledger)?,
            records: tuple(&scanners.records)?,
            now_ms: 0,
        };
        let mut waiting = false;
        loop {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_err(|_| "the system clock is before 1970".to_owned())?
                .as_millis();
            let attempt = AcquirePlaneClaim {
                now_ms: u64::try_from(now_ms).unwrap_or(u64::MAX),
                ..acquire.clone()
            };
            let bound = barrier.space().map_err(|e| e.message.clone())?;
            let mut world = NatsWorld::new(&bound);
            world.set_plane_prober(oracle.plane_prober());
            let refusal = match world.run(&mut Replay::new(attempt)).await {
                Ok(hold) => {
                    info!(
                        generation = hold.generation,
                        reclaimed = hold.reclaimed,
                        "{}",
                        if hold.reclaimed {
                            "holds the plane claim, reclaimed from a dead plane"
                        } else {
                            "holds the plane claim"
                        }
                    );
                    return Ok(Some(hold));
                }
                Err(e) => e,
            };
            let wait = self.args.standby
                && matches!(
                    ClaimRefusal::of(&refusal),
                    Some(ClaimRefusal::LivePeer | ClaimRefusal::Unknown | ClaimRefusal::Concurrent)
                );
            if !wait {
                return Err(refusal.message);
            }
            if !waiting {
                info!("standby: {}; waiting to take over", refusal.message);
                waiting = true;
            }
            tokio::select! {
                _ = signals.term.recv() => { info!("SIGTERM: stopping the standby"); return Ok(None) }
                _ = signals.int.recv() => { info!("SIGINT: stopping the standby"); return Ok(None) }
                () = tokio::time::sleep(STANDBY_POLL) => {}
            }
        }
    }

    /// The servers' own listing and the system account's kick, as this plane's system user.
    fn oracle(&self) -> Oracle {
        Oracle::new(
            self.url,
            self.material.system_user().creds(),
            self.material.data_account(),
            PlaneConnection::PlaneSystem.label(self.space()),
        )
    }

    /// The registration ceremony on its own short-lived connection, scoped to this instance's
    /// keys (reference §2.5 step 2); the connection closes when the ceremony ends.
    async fn register(&self) -> Result<Registered, String> {
        let space = self.space().clone();
        let instance = self.identity.instance.clone();
        let client = {
            let (space, instance) = (space.clone(), instance.clone());
            self.open(
                PlaneConnection::AuthRegistration,
                move |conn| plane_grants::auth_registration(&space, conn, &instance),
                self.options(&[Store::Auth, Store::Records, Store::Contracts], false),
            )
            .await?
        };
        // One start registers this instance at a time; the lock dies with its holder, which is
        // what lets the next start resume a recorded operation as its only executor.
        let lock = state::lock_registration(&self.args.root, &space).await;
        let result = async {
            let _lock = lock?;
            let bound = client.space().map_err(|e| e.message.clone())?;
            let record = state::registration_record_path(&self.args.root, &space);
            let op_id = self.operation(&bound, &record).await?;
            let ceremony =
                auth_instance(&space, &instance, &self.identity.serve_key, op_id.clone())
                    .map_err(|e| e.message.clone())?;
            let kill = KillPoint::from_env()?;
            let oracle = Arc::new(self.oracle());
            let world = || {
                let mut world = NatsWorld::new(&bound);
                world.set_send_hook(kill.as_ref().map(KillPoint::hook));
                world.set_evictor(oracle.evictor());
                world.set_prober(oracle.prober());
                world
            };
            let provisioned = world()
                .run(&mut Replay::new(PrepareSelfAuthorized(&ceremony)))
                .await
                .map_err(|e| {
                    format!("publishing the auth cluster or provisioning the gate failed: {e}")
                })?;
            if provisioned {
                info!(gate = %ceremony.gate.key(), "provisioned the gate");
            }
            let register = RegisterServing {
                register: ceremony.registration().map_err(|e| e.message.clone())?,
                status: serde_json::Map::new(),
            };
            let serving = world()
                .run(&mut Replay::new(register))
                .await
                .map_err(|e| format!("registering the auth instance failed: {e}"))?;
            let reg = serving.registered;
            let gate = ceremony.gate.clone();
            let confirm = script(|cx| confirm_registration(cx, &gate, &reg));
            drive(&mut Replay::new(confirm), &bound)
                .await
                .map_err(|e| format!("registering the auth instance failed: {e}"))?;
            state::clear_registration(&record)?;
            info!(
                op_id = %op_id,
                epoch = reg.process_epoch.0,
                generation = reg.generation.0,
                registration_revision = reg.registration_revision.0,
                "registered the auth instance"
            );
            Ok(Registered {
                gate: ceremony.gate.clone(),
                process_epoch: reg.process_epoch,
                generation: reg.generation,
                registration_revision: reg.registration_revision,
            })
        }
        .await;
        if let Err(e) = client.close().await {
            warn!("closing the registration connection failed: {e}");
        }
        result
    }
}

impl Plane<'_> {
    /// The operation this start registers under (crash-safe self-registration): the one an
    /// earlier start recorded, when the gate is still frozen by it ([`resumed_op`]: that start
    /// crashed mid-ceremony, and the registration lock this start holds proves it gone), else a
    /// fresh one, recorded durably before the ceremony freezes the gate.
    async fn operation(&self, bound: &Space, record: &Path) -> Result<OpId, String> {
        let recorded = state::load_registration(record)?;
        let gate = GateRef::new(
            self.space().clone(),
            EndpointName::parse(AUTH_ENDPOINT).map_err(|e| e.message)?,
            self.identity.instance.clone(),
        );
        let observed = drive(
            &mut Replay::new(script(|cx| observe_gate(cx, &gate))),
            bound,
        )
        .await
        .map_err(|e| format!("reading the plane's gate failed: {e}"))?;
        if let Some(op_id) = resumed_op(observed.as_ref().map(|o| &o.gate), recorded.as_ref()) {
            warn!(
                op_id = %op_id,
                gate = %gate.key(),
                "resuming the registration a previous start left frozen (it crashed mid-ceremony)"
            );
            return Ok(op_id);
        }
        let op_id = state::fresh_op_id()?;
        state::record_registration(record, &op_id)?;
        Ok(op_id)
    }
}

/// The crash-test hook (`COTAL_AUTHD_KILL_AT=<before|after>:<n>[:stop]`): this process sends
/// itself SIGKILL right before, or just after, the n-th KV write of its registration (counted
/// from 1 across the ceremony), so a test can crash a real start at every write boundary.
/// "After" waits a moment first, so the write reaches the server and only its reply goes unread:
/// the ambiguous case. With `:stop` it sends SIGSTOP instead: a holder that is alive (its
/// connections open) but makes no progress. Unset in production; a malformed value is refused
/// rather than ignored.
#[derive(Debug, Clone)]
struct KillPoint {
    phase: SendPhase,
    write: usize,
    signal: KillSignal,
    seen: Arc<AtomicUsize>,
}

const KILL_AT_ENV: &str = "COTAL_AUTHD_KILL_AT";

impl KillPoint {
    fn from_env() -> Result<Option<KillPoint>, String> {
        let Some(value) = std::env::var_os(KILL_AT_ENV) else {
            return Ok(None);
        };
        let bad = || {
            format!("{KILL_AT_ENV} must be before:<n> or after:<n>, n >= 1, optionally then :stop")
        };
        let value = value.into_string().map_err(|_| bad())?;
        let mut fields = value.split(':');
        let phase = match fields.next() {
            Some("before") => SendPhase::Before,
            Some("after") => SendPhase::After,
            _ => return Err(bad()),
        };
        let write: usize = fields
            .next()
            .and_then(|n| n.parse().ok())
            .filter(|n| *n >= 1)
            .ok_or_else(bad)?;
        let signal = match (fields.next(), fields.next()) {
            (None, _) => KillSignal::KILL,
            (Some("stop"), None) => KillSignal::STOP,
            _ => return Err(bad()),
        };
        Ok(Some(KillPoint {
            phase,
            write,
            signal,
            seen: Arc::default(),
        }))
    }

    fn hook(&self) -> SendHook {
        let point = self.clone();
        Box::new(move |phase, _request| {
            let nth = if phase == SendPhase::Before {
                point.seen.fetch_add(1, Ordering::SeqCst) + 1
            } else {
                point.seen.load(Ordering::SeqCst)
            };
            let kill = phase == point.phase && nth == point.write;
            let signal = point.signal;
            Box::pin(async move {
                if kill {
                    if phase == SendPhase::After {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let _ = kill_process(getpid(), signal);
                }
            })
        })
    }
}

/// What the registration committed, for the banner, the discovery file and the watch.
struct Registered {
    gate: GateRef,
    process_epoch: ProcessEpoch,
    generation: cotal_core::gate::Generation,
    registration_revision: cotal_core::gate::RegistrationRevision,
}

/// The stop signals the plane answers with an orderly exit.
struct Signals {
    term: Signal,
    int: Signal,
}

/// Holds the registration until a SIGINT/SIGTERM (stopped) or until the core's host fence
/// resolves (fenced), driven by [`hold_fence`]: one leader read of the gate every
/// [`FENCE_POLL`], or at once when this plane writes it, and a stop with an error once no read
/// has succeeded for [`UNREACHABLE_LIMIT`].
///
/// Fenced means what [`host_fenced`](cotal_core::host::host_fenced) says: the gate is gone, at
/// another epoch, or not `open`. A frozen gate at this plane's own epoch counts: a barrier won
/// the gate (F21: a successor's registration of this instance, a retirement, or a reconciler),
/// nothing is minted at this plane's coordinate while it stands (F22), and none of them reopens
/// it at this registration again (a re-registration reopens at the next epoch, F69; an
/// abort-reopen at the next generation, F52), so a plane that waited would only claim to serve
/// what it no longer can. The watch is armed only after the confirming read saw the gate open
/// at this start's committed epoch and registration revision, so it never sees this start's
/// own freeze.
async fn watch(
    connections: &Connections,
    gate: &GateRef,
    epoch: ProcessEpoch,
    mut signals: Signals,
) -> Result<Outcome, String> {
    let fence = AwaitHostFence::new(gate.clone(), epoch)
        .map_err(|e| e.message.clone())?
        .with_poll(FENCE_POLL);
    let fenced = tokio::select! {
        _ = signals.term.recv() => { info!("SIGTERM: stopping"); return Ok(Outcome::Stopped) }
        _ = signals.int.recv() => { info!("SIGINT: stopping"); return Ok(Outcome::Stopped) }
        fenced = hold_fence(&connections.reader, fence, UNREACHABLE_LIMIT) => fenced,
        copy = connections.scanners.died(&gate.space) => {
            error!("fenced: {copy}");
            return Ok(Outcome::Fenced);
        }
        // A connection whose credential could not be renewed fails closed: the plane stops
        // rather than serve on authority it can no longer hold.
        e = connections.failed() => return Err(format!("stopping: {}", e.message)),
    };
    match fenced {
        Ok(Some(seen)) if seen.gate.process_epoch() != epoch => warn!(
            gate = %gate.key(),
            epoch = seen.gate.process_epoch().0,
            generation = seen.gate.generation().0,
            state = seen.gate.state().as_str(),
            "fenced: the gate moved from epoch {epoch}; a successor registered, exiting"
        ),
        Ok(Some(seen)) => warn!(
            gate = %gate.key(),
            generation = seen.gate.generation().0,
            state = seen.gate.state().as_str(),
            op = seen.gate.op().map(|op| format!("{}:{}", op.kind().as_str(), op.op_id())),
            "fenced: the gate is not open at this plane's epoch {epoch}; a barrier holds it, \
             exiting"
        ),
        Ok(None) => warn!(gate = %gate.key(), "fenced: the gate is gone, exiting"),
        Err(e) => {
            return Err(format!(
                "cannot read gate {} for {}s ({e}); stopping, since a fence can no longer be \
                 noticed",
                gate.key(),
                UNREACHABLE_LIMIT.as_secs()
            ))
        }
    }
    Ok(Outcome::Fenced)
}
