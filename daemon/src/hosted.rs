//! The hosted entry point (reference §2.1, §2.3, §7.2): a platform embeds one plane per context
//! it assigned, the way the reference's hosts embed `startAuthService`.
//!
//! [`start`] validates the inputs in the reference's order and sentences, reads the secret
//! material through the injected [`SecretStore`] (never the files of a CLI root: the state dir
//! holds only what is not secret — the IdP pin, the actor ledger, the registration record and
//! the high-water marks), checks the store against the assigned context, and returns only once
//! the authority plane, the callout subscription and the loopback listener are bound. It installs
//! no signal handler, never exits the process, never resolves anything from the working
//! directory and has no local manager; a failed start releases what it acquired (the plane
//! claim among it). A fence, or a broker that stays away, ends only this context: it becomes
//! `unavailable` with the cause and closes itself, while every other context in the process
//! keeps serving. A broker restart is ridden out: `unavailable` with the cause until its
//! connections are back and its plane claim re-taken, then `ready` again.
//!
//! With platform control ([`PlatformControl`]) the handle serves the platform's service door
//! ([`HostedHandle::platform_control_authority`]), and with its host endpoint ([`HostInput`])
//! registers host incarnations, reads their gates and awaits their fences
//! ([`HostedHandle::register_host_incarnation`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use cotal_core::error::EpError;
use cotal_core::host::{FenceEnd, HostConfig, HostIncarnation};
use cotal_core::issuance::GateObservation;
use cotal_core::lifecycle::Activated;
use cotal_core::names::{ActorToken, DerivedOwner, InstanceId, LifecycleUid, SpaceName};
use cotal_core::profiles::StandingTtl;
use cotal_io_fs::secrets::{SecretStore, StoreIdentity};
use cotal_io_fs::trust::{self, Composition as Material};
use cotal_io_fs::{instance, ledger_home};
use cotal_io_http::face::{check_public_face, PublicFaceFlags};
use cotal_io_nats::Replicas;
use serde_json::Value;

use crate::plane::{Composition, Ended, HostedContext, OwnedConnection, Plane, PlaneInputs};
pub use crate::plane::{ObserveAssignment, Observed};
pub use cotal_core::readiness::HostedReadiness;

/// What a platform gives one hosted context.
#[derive(Debug)]
pub struct HostedInputs {
    /// The data account the platform assigned this context (`A…`).
    pub account_public_key: String,
    /// The lifecycle uid of the assignment.
    pub lifecycle_uid: String,
    pub space: String,
    /// The NATS server URL(s) of the space (comma-separated).
    pub servers: String,
    /// The TLS every connection of the context dials `servers` with (empty: none beyond what a
    /// `tls://` URL asks).
    pub tls: cotal_io_nats::TlsSettings,
    /// Where the non-secret state lives (the IdP pin, the actor ledger, the registration
    /// record); laid out as a CLI state root is.
    pub state_dir: PathBuf,
    /// Where the secret material lives.
    pub store: Arc<dyn SecretStore>,
    /// The identity the platform assigned the store; the store must declare exactly it.
    pub store_identity: StoreIdentity,
    /// The loopback face's port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The public face, as `up`'s flags would give it.
    pub public_face: Option<PublicFaceFlags>,
    /// Present only in a platform composition: the service door and the host hooks.
    pub platform_control: Option<PlatformControl>,
    /// The lifetime of the standing credentials the manager route issues; only a trusted host
    /// sets it (reference §2.3 step 0). `None` is the default (86,400 s).
    pub standing_ttl_secs: Option<u64>,
    pub replicas: Replicas,
}

/// What a platform composition adds (reference §7.3): its assignments, read fresh on every
/// platform control call, and optionally its own host endpoint.
#[derive(Debug, Clone)]
pub struct PlatformControl {
    pub observe_assignment: Arc<dyn ObserveAssignment>,
    /// The platform's own host endpoint, when it registers host incarnations.
    pub host: Option<HostInput>,
}

/// A platform host's endpoint: its reverse-DNS name and the contract it registers under.
#[derive(Debug, Clone)]
pub struct HostInput {
    pub endpoint: String,
    /// The host's cluster document.
    pub cluster: Value,
    /// The schema artifacts its commands' digests name.
    pub artifacts: Vec<Value>,
}

/// One running hosted context.
#[derive(Debug)]
pub struct HostedHandle {
    plane: Arc<Plane>,
    context: HostedContext,
    host: Option<HostConfig>,
    /// The platform's assignments, when the context was started with platform control.
    assignments: Option<Arc<dyn ObserveAssignment>>,
    /// Closes the plane once it ends on its own (fenced, broker lost).
    watcher: tokio::task::JoinHandle<()>,
    /// This context's place among the process's live contexts, given up once it is closed.
    live: Arc<Mutex<Option<Live>>>,
}

/// The contexts live in this process, by state dir and space. A second start of a live context
/// is a platform's mistake: it is refused, as the reference refuses it, rather than let the
/// plane's restart semantics fence the live one (a restart of the same instance registers at
/// the next epoch and takes the plane over; across processes that is how a restart works).
static LIVE: Mutex<BTreeSet<(PathBuf, String)>> = Mutex::new(BTreeSet::new());

/// A context's entry in [`LIVE`], removed when dropped.
#[derive(Debug)]
struct Live((PathBuf, String));

impl Live {
    fn enter(state_dir: &Path, space: &SpaceName) -> Result<Live, String> {
        let key = (state_dir.to_path_buf(), space.as_str().to_owned());
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        if !live.insert(key.clone()) {
            let shown = state_dir.display().to_string();
            return Err(HostedContext::already_live(space, &shown));
        }
        Ok(Live(key))
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.0);
    }
}

/// Validates `inputs` in the reference's order (§2.3) and starts the context's plane.
pub async fn start(inputs: HostedInputs) -> Result<HostedHandle, String> {
    let checked = check(&inputs)?;
    let space = checked.space;
    let live = Live::enter(&inputs.state_dir, &space)?;
    let material = trust::load_daemon_from(
        inputs.store.as_ref(),
        &inputs.state_dir,
        &space,
        Material::Hosted,
    )?;
    checked.context.check_account(material.data_account())?;
    let identity = instance::load_or_create_in(inputs.store.as_ref(), &space)?;
    let ledger = ledger_home::for_plane(&inputs.state_dir, &space, None, &material)?;
    let plane_inputs = PlaneInputs {
        space,
        server: cotal_io_nats::Dial::new(&inputs.servers, inputs.tls.clone())?,
        root: inputs.state_dir.clone(),
        replicas: inputs.replicas,
        standby: false,
        ledger,
        material,
        identity,
        port: inputs.port,
        public: checked.public,
        standing_ttl: checked.standing_ttl,
        composition: Composition::Hosted(checked.context.clone()),
        secrets: Arc::clone(&inputs.store),
    };
    let plane = Arc::new(Plane::start(&plane_inputs).await?);
    let live = Arc::new(Mutex::new(Some(live)));
    let (watched, leaving) = (Arc::clone(&plane), Arc::clone(&live));
    let watcher = tokio::spawn(async move {
        let end = watched.ended().await;
        tracing::error!(context = ?end, "the hosted context ended; closing it");
        match watched.close().await {
            Ok(()) => leave(&leaving),
            Err(e) => tracing::warn!("closing the ended hosted context: {e}"),
        }
    });
    Ok(HostedHandle {
        plane,
        context: checked.context,
        host: checked.host,
        assignments: inputs.platform_control.map(|p| p.observe_assignment),
        watcher,
        live,
    })
}

/// Gives up a context's place among the live ones.
fn leave(live: &Mutex<Option<Live>>) {
    live.lock().unwrap_or_else(PoisonError::into_inner).take();
}

/// What the validation hands the start.
struct Checked {
    space: SpaceName,
    context: HostedContext,
    host: Option<HostConfig>,
    public: Option<cotal_io_http::face::PublicFaceSettings>,
    standing_ttl: StandingTtl,
}

/// The reference's checks, in its order: every input present; the store declares an identity,
/// and it is the injected one assigned; the host endpoint is reverse-DNS; the public face's
/// settings; the standing lifetime's bounds.
fn check(inputs: &HostedInputs) -> Result<Checked, String> {
    let (space, context) = HostedContext::check(
        &inputs.account_public_key,
        &inputs.lifecycle_uid,
        &inputs.space,
        &inputs.servers,
        !inputs.state_dir.as_os_str().is_empty(),
    )?;
    inputs
        .store_identity
        .check_assigned(inputs.store.as_ref())?;
    if !inputs.state_dir.is_absolute() {
        let shown = inputs.state_dir.display().to_string();
        return Err(HostedContext::relative_state_dir(&shown));
    }
    let host = match inputs
        .platform_control
        .as_ref()
        .and_then(|p| p.host.as_ref())
    {
        None => None,
        Some(host) => Some(HostConfig::of_platform(
            &space,
            &host.endpoint,
            &host.cluster,
            &host.artifacts,
        )?),
    };
    let public = match &inputs.public_face {
        None => None,
        Some(flags) => check_public_face(flags).map_err(|e| e.message().to_owned())?,
    };
    let standing_ttl = StandingTtl::given(inputs.standing_ttl_secs).map_err(|e| e.message)?;
    Ok(Checked {
        context,
        space,
        host,
        public,
        standing_ttl,
    })
}

impl HostedHandle {
    /// `{state, context, cause?}`: `ready`, `draining` once a close began, or `unavailable`
    /// with the cause once the context ended on its own.
    pub fn readiness(&self) -> HostedReadiness {
        HostedReadiness::of(&self.plane.readiness(), self.context.clone())
    }

    /// The loopback face's URL.
    pub fn loopback_url(&self) -> String {
        self.plane.loopback_url()
    }

    /// The loopback capability, for the host process only (never written anywhere).
    pub fn capability(&self) -> &str {
        self.plane.capability()
    }

    /// The public face's URL, when open.
    pub fn public_url(&self) -> Option<String> {
        self.plane.public_url()
    }

    /// Every connection the context owns, with whether it has ended.
    pub async fn connections(&self) -> Vec<OwnedConnection> {
        self.plane.connections().await
    }

    /// Resolves once the context stopped serving on its own (fenced, or its broker lost).
    pub async fn ended(&self) -> Ended {
        self.plane.ended().await
    }

    /// Takes the context down in order (reference §2.9); idempotent. An error names what could
    /// not be released (the plane claim when the broker is unreachable); a later close retries.
    pub async fn close(&self) -> Result<(), String> {
        self.plane.close().await?;
        leave(&self.live);
        Ok(())
    }

    /// The platform control door (reference §7.3): one manager-service request of the
    /// platform's assigned control manager, under its derived `p_` owner; see
    /// [`Plane::platform_control_authority`].
    pub async fn platform_control_authority(&self, request: &Value) -> Result<Value, EpError> {
        let assignments = self.assignments.as_ref().ok_or_else(|| {
            EpError::failed_precondition(
                "this hosted context was started without platform control, so it has no service \
                 door",
            )
        })?;
        self.plane
            .platform_control_authority(request, assignments.as_ref())
            .await
    }

    /// A manager instance's gate, `None` when there is none: how a platform reads its control
    /// manager's gate over the context's own connection.
    pub async fn observe_manager_gate(
        &self,
        instance_id: &str,
    ) -> Result<Option<GateObservation>, EpError> {
        let instance = InstanceId::parse(instance_id)?;
        self.plane.observe_manager_gate(&instance).await
    }

    /// Activates a delegated launch's lifecycle at its pinned uid before any row or durable
    /// exists, minting nothing (reference §7.3); see [`Plane::activate_managed_lifecycle`].
    /// Only a platform composition has it.
    pub async fn activate_managed_lifecycle(
        &self,
        owner: &str,
        actor: &str,
        lifecycle_uid: &str,
    ) -> Result<Activated, EpError> {
        if self.assignments.is_none() {
            return Err(EpError::failed_precondition(
                "this hosted context was started without platform control, so it activates no \
                 delegated launch",
            ));
        }
        let owner = DerivedOwner::parse(owner).map_err(|e| EpError::bad_request(e.message))?;
        let actor = ActorToken::parse(actor).map_err(|e| EpError::bad_request(e.message))?;
        let uid =
            LifecycleUid::parse(lifecycle_uid).map_err(|e| EpError::bad_request(e.message))?;
        self.plane
            .activate_managed_lifecycle(&owner, &actor, &uid)
            .await
    }

    fn host(&self) -> Result<&HostConfig, EpError> {
        self.host.as_ref().ok_or_else(|| {
            EpError::failed_precondition(
                "this hosted context was started without a platform host, so it registers no \
                 host incarnation",
            )
        })
    }

    /// Registers one incarnation of the platform host at `instance_id`; see
    /// [`Plane::register_host_incarnation`].
    pub async fn register_host_incarnation(
        &self,
        instance_id: &str,
    ) -> Result<HostIncarnation, EpError> {
        let host = self.host()?;
        let instance = InstanceId::parse(instance_id)?;
        self.plane.register_host_incarnation(host, &instance).await
    }

    /// The host instance's gate, `None` when there is none.
    pub async fn observe_host_gate(
        &self,
        instance_id: &str,
    ) -> Result<Option<GateObservation>, EpError> {
        let host = self.host()?;
        let instance = InstanceId::parse(instance_id)?;
        self.plane.observe_host_gate(host, &instance).await
    }

    /// Resolves once the incarnation at `process_epoch` is fenced; `bad-request` for an epoch
    /// that is not a non-negative safe integer, `unavailable` unless the context is ready.
    pub async fn await_host_fence(
        &self,
        instance_id: &str,
        process_epoch: &Value,
    ) -> Result<FenceEnd, EpError> {
        let host = self.host()?;
        let instance = InstanceId::parse(instance_id)?;
        self.plane
            .await_host_fence(host, &instance, process_epoch)
            .await
    }
}

impl Drop for HostedHandle {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}
