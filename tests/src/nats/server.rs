//! One `nats-server` process with its own temp dir (config, log, JetStream store), its ports
//! fixed at first start so `restart` comes back at the same address with the same store.

use super::wire::{self, HOST};
use super::{
    locate, unique_name, HarnessError, LOG_TAIL_LINES, POLL_INTERVAL, PORT_ATTEMPTS,
    RESTART_PORT_TIMEOUT, START_TIMEOUT, STOP_TIMEOUT,
};
use rustix::process::{kill_process, Pid, Signal};
use serde_json::Value;
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::Instant;
use tempfile::TempDir;

/// How to start a server. `Default` is the pinned binary with the harness's own config only.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// The binary to run, ahead of `COTAL_NATS_SERVER` and the project-local install (a test
    /// can point it at a missing path without touching the process environment).
    pub binary: Option<PathBuf>,
    /// Config text appended verbatim after the generated config (operator mode, accounts,
    /// resolver preload, ...).
    pub extra_config: String,
}

/// A cluster node's route settings.
#[derive(Debug, Clone)]
pub(super) struct ClusterPlan {
    pub(super) name: String,
    pub(super) port: u16,
    /// The other nodes' cluster addresses.
    pub(super) routes: Vec<SocketAddr>,
}

/// Why a launch failed: a port was taken (worth retrying) or anything else.
#[derive(Debug)]
pub(super) enum LaunchError {
    PortTaken(HarnessError),
    Failed(HarnessError),
}

impl From<HarnessError> for LaunchError {
    fn from(e: HarnessError) -> Self {
        Self::Failed(e)
    }
}

impl LaunchError {
    pub(super) fn into_inner(self) -> HarnessError {
        match self {
            Self::PortTaken(e) | Self::Failed(e) => e,
        }
    }
}

/// A `nats-server` on loopback with JetStream (`sync_interval: always`) and a temp store.
///
/// Dropping it SIGKILLs the process, reaps it and removes the temp dir.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    binary: PathBuf,
    name: String,
    /// The address every listener binds: loopback, or the node's own address inside its
    /// network namespace.
    host: Ipv4Addr,
    /// The network namespace the process runs in (`ip netns exec`), if not the caller's.
    netns: Option<String>,
    client_port: u16,
    monitor_port: u16,
    cluster: Option<ClusterPlan>,
    extra_config: String,
    store_dir: PathBuf,
    config_path: PathBuf,
    log_path: PathBuf,
    /// Length of the log before the latest spawn: that launch's output starts here.
    log_mark: u64,
    /// Removed when the fields drop, i.e. after `Drop::drop` has reaped the process.
    dir: TempDir,
}

impl NatsServer {
    /// Starts a single server on free loopback ports (client and monitoring), retrying with
    /// fresh ports when one was taken before the server bound it, and returns once its client
    /// port answers with its own `INFO`.
    pub fn start(opts: ServerOptions) -> Result<Self, HarnessError> {
        let binary = locate(opts.binary.as_deref())?;
        let mut server = Self::unstarted(binary, unique_name("server"), opts.extra_config)?;
        let mut last = HarnessError::new("no start attempted");
        for _ in 0..PORT_ATTEMPTS {
            let ports = wire::free_ports(2).map_err(HarnessError::new)?;
            let &[client, monitor] = ports.as_slice() else {
                return Err(HarnessError::new("free_ports returned the wrong count"));
            };
            server.set_ports(client, monitor, None);
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(LaunchError::PortTaken(e)) => last = e,
                Err(LaunchError::Failed(e)) => return Err(e),
            }
        }
        Err(HarnessError::new(format!(
            "no free port set after {PORT_ATTEMPTS} attempts; last: {last}"
        )))
    }

    /// A server with its temp dir made but no ports and no process yet (for [`Self::start`]
    /// and the cluster, which chooses every node's ports before starting any).
    pub(super) fn unstarted(
        binary: PathBuf,
        name: String,
        extra_config: String,
    ) -> Result<Self, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("cotal-nats-")
            .tempdir()
            .map_err(|e| HarnessError::new(format!("cannot create a temp dir: {e}")))?;
        let root = dir.path();
        Ok(Self {
            child: None,
            binary,
            name,
            host: HOST,
            netns: None,
            client_port: 0,
            monitor_port: 0,
            cluster: None,
            extra_config,
            store_dir: root.join("store"),
            config_path: root.join("nats.conf"),
            log_path: root.join("server.log"),
            log_mark: 0,
            dir,
        })
    }

    /// Runs the process inside network namespace `netns`, listening on `host` there.
    pub(super) fn place(&mut self, netns: String, host: Ipv4Addr) {
        self.netns = Some(netns);
        self.host = host;
    }

    pub(super) fn set_ports(&mut self, client: u16, monitor: u16, cluster: Option<ClusterPlan>) {
        self.client_port = client;
        self.monitor_port = monitor;
        self.cluster = cluster;
    }

    /// The client URL, `nats://127.0.0.1:<port>` (or the node's namespace address).
    pub fn url(&self) -> String {
        format!("nats://{}:{}", self.host, self.client_port)
    }

    /// The address the client, monitoring and cluster listeners bind.
    pub fn host(&self) -> Ipv4Addr {
        self.host
    }

    /// The client port (unchanged across restarts).
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// The HTTP monitoring port (`/varz`, `/jsz`, `/routez`, ...).
    pub fn monitor_port(&self) -> u16 {
        self.monitor_port
    }

    /// The JetStream store dir (unchanged across restarts; removed on drop).
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// The temp dir holding the config, the log and the store.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The configured `server_name` (a cluster's JetStream peer name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the harness started the process and has not stopped or killed it since.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The `INFO` a fresh client connection receives.
    pub fn info(&self) -> Result<Value, HarnessError> {
        wire::read_info((self.host, self.client_port).into()).map_err(HarnessError::new)
    }

    /// A monitoring endpoint's JSON, e.g. `monitor("/jsz")`.
    pub fn monitor(&self, path: &str) -> Result<Value, HarnessError> {
        wire::get_json((self.host, self.monitor_port).into(), path).map_err(HarnessError::new)
    }

    /// Graceful shutdown: SIGTERM, then waits up to [`STOP_TIMEOUT`] (SIGKILL and an error
    /// past it). A server that is not running is left alone.
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // ESRCH only means it already exited; the wait below reaps it either way. A paused
        // server only acts on the SIGTERM once it runs again.
        let _ = kill_process(Pid::from_child(&child), Signal::TERM);
        let _ = kill_process(Pid::from_child(&child), Signal::CONT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => sleep(POLL_INTERVAL),
                outcome => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(HarnessError::new(format!(
                        "nats-server {} did not exit within {STOP_TIMEOUT:?} of SIGTERM ({outcome:?}); \
                         killed it. Log tail:\n{}",
                        self.name,
                        self.log_tail()
                    )));
                }
            }
        }
    }

    /// Crash: SIGKILL and reap. A server that is not running is left alone.
    pub fn kill(&mut self) -> Result<(), HarnessError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // A child that already exited makes `kill` fail harmlessly; `wait` is what matters.
        let _ = child.kill();
        child
            .wait()
            .map(drop)
            .map_err(|e| HarnessError::new(format!("cannot reap nats-server {}: {e}", self.name)))
    }

    /// Freezes the process (SIGSTOP): its sockets stay open and nothing answers, as on a host
    /// that hangs. Returns once every thread has stopped: a group stop completes
    /// asynchronously, and a thread still running could read what the caller means to lose. A
    /// server that is not running is left alone.
    pub fn pause(&self) -> Result<(), HarnessError> {
        self.signal(Signal::STOP)?;
        let Some(child) = &self.child else {
            return Ok(());
        };
        let tasks = format!("/proc/{}/task", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let threads = std::fs::read_dir(&tasks)
                .map_err(|e| HarnessError::new(format!("cannot list {tasks}: {e}")))?;
            let all_stopped = threads.flatten().all(|t| {
                let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                // The state follows the parenthesised command name.
                let state = stat
                    .rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next());
                matches!(state, Some("T" | "t"))
            });
            if all_stopped {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "nats-server {} did not stop within 5 s of SIGSTOP",
                    self.name
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) -> Result<(), HarnessError> {
        self.signal(Signal::CONT)
    }

    fn signal(&self, signal: Signal) -> Result<(), HarnessError> {
        let Some(child) = &self.child else {
            return Ok(());
        };
        kill_process(Pid::from_child(child), signal)
            .map_err(|e| HarnessError::new(format!("cannot signal nats-server {}: {e}", self.name)))
    }

    /// Stops the server if it runs (gracefully), then starts it again on the same ports with
    /// the same config and store dir, and waits for its `INFO`. Retries for up to
    /// [`RESTART_PORT_TIMEOUT`] while one of its ports is held by someone else.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop()?;
        let deadline = Instant::now() + RESTART_PORT_TIMEOUT;
        loop {
            match self.launch() {
                Ok(()) => return Ok(()),
                Err(LaunchError::PortTaken(_)) if Instant::now() < deadline => {
                    sleep(POLL_INTERVAL);
                }
                Err(e) => return Err(e.into_inner()),
            }
        }
    }

    fn launch(&mut self) -> Result<(), LaunchError> {
        self.spawn()?;
        self.await_ready(Instant::now() + START_TIMEOUT)
    }

    /// Writes the config and spawns the process with stdout and stderr appended to the log.
    pub(super) fn spawn(&mut self) -> Result<(), HarnessError> {
        let io = |what: &str, e: std::io::Error| {
            HarnessError::new(format!("nats-server {}: {what}: {e}", self.name))
        };
        fs::write(&self.config_path, self.config()).map_err(|e| io("write config", e))?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| io("open log", e))?;
        self.log_mark = log.metadata().map_err(|e| io("stat log", e))?.len();
        let stdout = log.try_clone().map_err(|e| io("clone log handle", e))?;
        let mut command = match &self.netns {
            Some(netns) => {
                // `ip netns exec` execs in place, so the child's pid is the server's own and
                // SIGKILL / SIGSTOP reach it directly.
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns]).arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        };
        let child = command
            .arg("-c")
            .arg(&self.config_path)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .map_err(|e| io(&format!("spawn {}", self.binary.display()), e))?;
        self.child = Some(child);
        Ok(())
    }

    /// Polls the client port until it answers with this server's `INFO`. On exit before that,
    /// or at `deadline` (the process is then killed), the error carries this launch's log tail;
    /// an exit on "address already in use" is [`LaunchError::PortTaken`].
    pub(super) fn await_ready(&mut self, deadline: Instant) -> Result<(), LaunchError> {
        loop {
            let exited = match self.child.as_mut().map(Child::try_wait) {
                None => Some("was not started".to_owned()),
                Some(Ok(Some(status))) => Some(format!("exited ({status})")),
                Some(Ok(None)) => None,
                Some(Err(e)) => Some(format!("cannot be polled: {e}")),
            };
            if let Some(how) = exited {
                self.child = None;
                let tail = self.log_since(self.log_mark);
                let error = HarnessError::new(format!(
                    "nats-server {} {how} before answering on {}. Log tail:\n{tail}",
                    self.name,
                    self.url()
                ));
                return Err(if tail.contains("address already in use") {
                    LaunchError::PortTaken(error)
                } else {
                    LaunchError::Failed(error)
                });
            }
            let probe = match wire::read_info((self.host, self.client_port).into()) {
                Ok(info) => match info.get("server_name").and_then(Value::as_str) {
                    Some(name) if name == self.name => return Ok(()),
                    other => format!("the port answers as server {other:?}"),
                },
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                let _ = self.kill();
                return Err(LaunchError::Failed(HarnessError::new(format!(
                    "nats-server {} did not answer on {} within {START_TIMEOUT:?} (last probe: \
                     {probe}); killed it. Log tail:\n{}",
                    self.name,
                    self.url(),
                    self.log_since(self.log_mark)
                ))));
            }
            sleep(POLL_INTERVAL);
        }
    }

    /// The last [`LOG_TAIL_LINES`] lines of the server's log (stdout and stderr of every run),
    /// for a failing test's message.
    pub fn log_tail(&self) -> String {
        self.log_since(0)
    }

    /// The last [`LOG_TAIL_LINES`] lines of the log written since byte `from`.
    fn log_since(&self, from: u64) -> String {
        let mut text = String::new();
        let read = fs::File::open(&self.log_path).and_then(|mut f| {
            f.seek(SeekFrom::Start(from))?;
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            text = String::from_utf8_lossy(&bytes).into_owned();
            Ok(())
        });
        if let Err(e) = read {
            return format!("(log {} unreadable: {e})", self.log_path.display());
        }
        let lines: Vec<&str> = text.lines().collect();
        lines
            .get(lines.len().saturating_sub(LOG_TAIL_LINES)..)
            .unwrap_or_default()
            .join("\n")
    }

    fn config(&self) -> String {
        let quote = |s: &str| Value::from(s).to_string();
        let mut config = format!(
            "# Generated by the cotal test harness (tests/src/nats).\n\
             server_name: {name}\n\
             listen: \"{host}:{client}\"\n\
             http: \"{host}:{monitor}\"\n\
             jetstream {{\n  store_dir: {store}\n  sync_interval: always\n}}\n",
            name = quote(&self.name),
            host = self.host,
            client = self.client_port,
            monitor = self.monitor_port,
            store = quote(&self.store_dir.to_string_lossy()),
        );
        if let Some(cluster) = &self.cluster {
            let routes: Vec<String> = cluster
                .routes
                .iter()
                .map(|addr| quote(&format!("nats-route://{addr}")))
                .collect();
            config.push_str(&format!(
                "cluster {{\n  name: {}\n  listen: \"{}:{}\"\n  routes: [{}]\n}}\n",
                quote(&cluster.name),
                self.host,
                cluster.port,
                routes.join(", ")
            ));
        }
        config.push_str(&self.extra_config);
        config.push('\n');
        config
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
