//! `cotal-authd up`: the [`Plane`] of one space in a process of its own, until a signal or its
//! end. Order: the state root (a symlink, or one writable by group or others, is refused) →
//! the trust root (refused, listing what is missing, before anything else happens)
//! → the instance identity → the server (the embedded one from exactly `broker-config`'s
//! configuration, or an operator's, which must trust this space's operator) → [`Plane::start`]
//! (a standby waits there, stopping on a signal) → discovery file + banner → a signal (stopped,
//! exit 0) or the plane's end (fenced: exit 3; failed: 1) → the discovery file goes, then the
//! plane closes in order.
//!
//! Crash safety: the plane's registration records its op id durably before the freeze and the
//! next start resumes it; no `kill -9` leaves the gate frozen for good.

use std::process::ExitCode;

use cotal_core::names::SpaceName;
use cotal_io_fs::discovery::{self, Discovery};
use cotal_io_fs::{files, instance, trust};
use cotal_io_http::face::PublicFaceSettings;
use cotal_io_nats::{Dial, Replicas, TlsSettings};
use std::path::PathBuf;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::{error, info, info_span, Instrument};

use crate::embedded::{self, Embedded};
use crate::plane::{Ended, Plane, PlaneInputs};
use crate::trust_cmd::embedded_dir;
use cotal_core::trust::Serving;
use cotal_io_fs::ledger_home;

/// The exit status of a plane a successor fenced (or whose gate a barrier took): distinct from
/// a failure (1) so a supervisor can leave it stopped (systemd `RestartPreventExitStatus=3`)
/// instead of restarting it to fence its successor in turn.
pub const EXIT_FENCED: u8 = 3;

/// Validated `up` flags.
#[derive(Debug)]
pub struct UpArgs {
    pub space: SpaceName,
    pub server: Option<String>,
    /// The client TLS material every connection applies; with the embedded server, its
    /// `cert`/`key` are the embedded server's own certificate instead (see [`Embedded`]).
    pub tls: TlsSettings,
    pub root: PathBuf,
    pub replicas: Replicas,
    /// Wait on a live plane's claim instead of refusing, and take over when it dies.
    pub standby: bool,
    /// The state root whose actor ledger the plane serves, when not its own
    /// ([`ledger_home::for_plane`]).
    pub ledger_dir: Option<PathBuf>,
    /// The loopback face's port (0: a free one).
    pub port: u16,
    /// The public face, when opened.
    pub public: Option<PublicFaceSettings>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Stopped,
    Fenced,
}

/// The stop signals the plane answers with an orderly exit.
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn install() -> Result<Signals, String> {
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(|e| format!("signals: {e}"))?,
            int: signal(SignalKind::interrupt()).map_err(|e| format!("signals: {e}"))?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => info!("SIGTERM: stopping"),
            _ = self.int.recv() => info!("SIGINT: stopping"),
        }
    }
}

/// Runs `up`. Errors before readiness are one sentence for the caller to print.
pub async fn up(args: UpArgs) -> Result<ExitCode, String> {
    // A crash test's request is refused before anything touches the state dir or starts a
    // server, rather than ignored by a build without the hooks.
    #[cfg(not(feature = "kill-points"))]
    crate::plane::refuse_requested_kill_points()?;
    // The root first: whoever can write there can plant every file read below it.
    files::check_state_root(&args.root)?;
    let material = trust::load_daemon(&args.root, &args.space)?;
    let ledger = ledger_home::for_plane(
        &args.root,
        &args.space,
        args.ledger_dir.as_deref(),
        &material,
    )?;
    let identity = instance::load_or_create(&args.root, &args.space)?;
    let (dial, embedded) = match &args.server {
        Some(url) => (Dial::new(url, args.tls.clone())?, None),
        None => {
            let broker = trust::load_broker(&args.root, &args.space)?;
            let dir = embedded_dir(&args.root, &args.space);
            let serving = Serving {
                tls: embedded::server_tls(&args.tls)?,
                cluster: None,
            };
            let embedded = embedded::start(&dir, serving.tls.is_some(), |listen, store| {
                cotal_core::trust::broker_config_with(&broker, listen, store, &serving)
                    .map_err(|e| e.message)
            })?;
            let client = embedded::client_tls(&args.tls, serving.tls.is_some());
            (Dial::new(&embedded.url, client)?, Some(embedded))
        }
    };
    let span = info_span!("up", space = %args.space, instance = %identity.instance);
    let inputs = PlaneInputs {
        space: args.space.clone(),
        server: dial,
        root: args.root.clone(),
        replicas: args.replicas,
        standby: args.standby,
        ledger,
        material,
        identity,
        port: args.port,
        public: args.public.clone(),
        standing_ttl: cotal_core::profiles::StandingTtl::DEFAULT,
        composition: crate::plane::Composition::Cli,
        secrets: std::sync::Arc::new(cotal_io_fs::FileSecretStore::new(&args.root)),
    };
    match serve(&inputs).instrument(span).await {
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

async fn serve(inputs: &PlaneInputs) -> Result<Outcome, String> {
    // Handlers go in before the start: a standby stops on a signal, and whoever finds the
    // discovery file may signal at once.
    let mut signals = Signals::install()?;
    // The plane's own discovery file, and one beside the actor ledger it serves when that is
    // another state root's ([`discovery::paths_for`]).
    let own_discovery = discovery::path(&inputs.root, &inputs.space);
    let discoveries = discovery::paths_for(&inputs.root, &inputs.space, &inputs.ledger);
    // A discovery file left by a plane that died without cleaning up names nothing that
    // serves: it goes before this start, so nobody finds it meanwhile.
    for path in &discoveries {
        discovery::remove_if_dead(path);
    }
    let plane = tokio::select! {
        plane = Plane::start(inputs) => plane?,
        () = signals.recv() => return Ok(Outcome::Stopped),
    };
    let registered = plane.registered().clone();
    let space = &inputs.space;
    let server = discovery::redacted(inputs.server.servers());
    let found = Discovery {
        pid: std::process::id(),
        url: plane.loopback_url(),
        cap: plane.capability().to_owned(),
        public_url: plane.public_url(),
        server: server.clone(),
        instance: inputs.identity.instance.to_string(),
        process_epoch: registered.process_epoch.0,
        generation: registered.generation.0,
        registration_revision: registered.registration_revision.0,
    };
    if let Err(why) = discovery::write_all(&discoveries, space, &found) {
        let _ = plane.close().await;
        return Err(why);
    }
    println!(
        "cotal-authd: auth instance {} ready in space {space} on {server} at epoch {} \
             (generation {}, registration revision {}), serving {}; discovery file {}",
        inputs.identity.instance,
        registered.process_epoch,
        registered.generation,
        registered.registration_revision,
        plane.loopback_url(),
        own_discovery.display()
    );
    let outcome = tokio::select! {
        () = signals.recv() => Ok(Outcome::Stopped),
        ended = plane.ended() => match ended {
            Ended::Fenced(why) => {
                error!("fenced: {why}; exiting");
                Ok(Outcome::Fenced)
            }
            Ended::Failed(why) => Err(why),
        },
    };
    // The discovery file goes first: nobody may find a plane that is on its way out.
    discovery::remove_all_if_ours(&discoveries);
    let released = plane.close().await;
    match (outcome, released) {
        (Ok(outcome), Ok(())) => Ok(outcome),
        (Ok(Outcome::Stopped), Err(why)) => Err(format!("stopped, but {why}")),
        (outcome, _) => outcome,
    }
}
