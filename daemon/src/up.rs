//! `cotal-authd up`: bring the plane up in a space as its own `auth` endpoint instance, then
//! hold that registration until a signal or a successor fences it.
//!
//! Order: (embedded server) → bind and verify the stores → the shared self-authorized ceremony
//! ([`SelfAuthorizedInstance`], reference §7.1): publish the `auth` cluster, observe the gate and
//! provision it only on absence, then register under the self-authority with a fresh op id, here
//! in its serving variant (register → serve grant → READY), then the confirming read →
//! discovery file + banner → the fence watcher.
//!
//! Eviction: the plane has no connection-level evictor yet, so the driver keeps its fail-closed
//! default (nothing is ever verified evicted). That is honest today because the plane mints no
//! credentials for its own instance: the `epcred` family is empty, and an empty family needs no
//! eviction (F68). Should a family ever be non-empty, the re-registration fails after its
//! freeze and the gate stays frozen for reconciliation rather than fencing unverified holders.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cotal_core::gate::ProcessEpoch;
use cotal_core::host::{
    confirm_registration, AwaitHostFence, PrepareSelfAuthorized, SelfAuthorizedInstance,
    SelfContract, AUTH_ENDPOINT,
};
use cotal_core::issuance::GateRef;
use cotal_core::machine::{script, Replay};
use cotal_core::names::{ActorToken, EndpointName, Principal, SpaceName};
use cotal_core::serving::RegisterServing;
use cotal_io_nats::host::hold_fence;
use cotal_io_nats::{drive, NatsWorld, Replicas, Space, SpaceOptions};
use serde_json::json;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::{info, info_span, warn, Instrument};

use crate::embedded::Embedded;
use crate::state;

/// The actor half of the plane's principal.
const ACTOR: &str = "authd";
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
/// Validated `up` flags.
#[derive(Debug)]
pub struct UpArgs {
    pub space: SpaceName,
    pub server: Option<String>,
    pub state_dir: PathBuf,
    pub replicas: Replicas,
}

/// Runs `up`. Errors before readiness are one sentence for the caller to print.
pub async fn up(args: UpArgs) -> Result<ExitCode, String> {
    state::ensure_dir(&args.state_dir)?;
    let identity = state::load_or_create(&args.state_dir)?;
    let (url, embedded) = match &args.server {
        Some(url) => (url.clone(), None),
        None => {
            let embedded = Embedded::start(&args.state_dir)?;
            (embedded.url.clone(), Some(embedded))
        }
    };
    let span = info_span!("up", space = %args.space, instance = %identity.instance);
    match register_and_serve(&args, &identity, &url)
        .instrument(span)
        .await
    {
        Ok((outcome, space)) => {
            let _ = space.client().drain().await;
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

async fn register_and_serve(
    args: &UpArgs,
    identity: &state::Identity,
    url: &str,
) -> Result<(Outcome, Space), String> {
    let options = SpaceOptions {
        replicas: args.replicas,
        ..SpaceOptions::default()
    };
    let space = Space::connect(url, args.space.clone(), options)
        .await
        .map_err(|e| e.message.clone())?;
    let endpoint = EndpointName::parse(AUTH_ENDPOINT).map_err(|e| e.message.clone())?;
    let gate = GateRef::new(args.space.clone(), endpoint, identity.instance.clone());
    let actor = ActorToken::parse(ACTOR).map_err(|e| e.message.clone())?;
    let principal = Principal::new(identity.owner.clone(), actor);

    let op_id = state::fresh_op_id()?;
    let ceremony = SelfAuthorizedInstance {
        gate: gate.clone(),
        owner: identity.owner.clone(),
        principal,
        contract: SelfContract::auth().map_err(|e| e.message.clone())?,
        op_id: op_id.clone(),
    };
    let provisioned = drive(&mut Replay::new(PrepareSelfAuthorized(&ceremony)), &space)
        .await
        .map_err(|e| format!("publishing the auth cluster or provisioning the gate failed: {e}"))?;
    if provisioned {
        info!(gate = %gate.key(), "provisioned the gate");
    }

    let register = RegisterServing {
        register: ceremony.registration().map_err(|e| e.message.clone())?,
        status: serde_json::Map::new(),
    };
    let before = space.round_trips();
    let serving = NatsWorld::new(&space)
        .run(&mut Replay::new(register))
        .await
        .map_err(|e| format!("registering the auth instance failed: {e}"))?;
    let reg = serving.registered;
    // The confirming read after the serving ceremony.
    let confirm = script(|cx| confirm_registration(cx, &gate, &reg));
    drive(&mut Replay::new(confirm), &space)
        .await
        .map_err(|e| format!("registering the auth instance failed: {e}"))?;
    let round_trips = space.round_trips() - before;
    info!(
        op_id = %op_id,
        epoch = reg.process_epoch.0,
        generation = reg.generation.0,
        registration_revision = reg.registration_revision.0,
        round_trips,
        "registered the auth instance"
    );

    let discovery = state::discovery_path(&args.state_dir);
    let doc = json!({
        "pid": std::process::id(),
        "server": url,
        "space": args.space.as_str(),
        "endpoint": AUTH_ENDPOINT,
        "instanceId": identity.instance.as_str(),
        "owner": identity.owner.as_str(),
        "serveKey": identity.serve_key,
        "processEpoch": reg.process_epoch.0,
        "generation": reg.generation.0,
        "registrationRevision": reg.registration_revision.0,
        "registrationRoundTrips": round_trips,
        "startupRoundTrips": space.round_trips(),
    });
    // Handlers go in before the discovery file: whoever finds the file may signal at once.
    let signals = Signals {
        term: signal(SignalKind::terminate()).map_err(|e| format!("signals: {e}"))?,
        int: signal(SignalKind::interrupt()).map_err(|e| format!("signals: {e}"))?,
    };
    state::write_private(&discovery, format!("{doc:#}\n").as_bytes())?;
    println!(
        "cotal-authd: auth instance {} ready in space {} on {url} at epoch {} (generation {}, \
         registration revision {}); discovery file {}",
        identity.instance,
        args.space,
        reg.process_epoch,
        reg.generation,
        reg.registration_revision,
        discovery.display()
    );

    let outcome = watch(&space, &gate, reg.process_epoch, signals).await;
    // The discovery file goes first: nobody may find a plane that is on its way out.
    state::remove_discovery_if_ours(&discovery);
    outcome.map(|o| (o, space))
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
    space: &Space,
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
        fenced = hold_fence(space, fence, UNREACHABLE_LIMIT) => fenced,
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
