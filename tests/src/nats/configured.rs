//! A `nats-server` run from a complete config the caller rendered (the trust root's broker
//! config, or any production-shaped file), rather than the harness's own: the harness only
//! picks the port, hands the caller a private store dir, and appends a unique `server_name`
//! so readiness (our `INFO` on the port) cannot be fooled by another process.

use super::wire;
use super::{locate, unique_name, HarnessError, LOG_TAIL_LINES, POLL_INTERVAL, START_TIMEOUT};
use serde_json::Value;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::Instant;
use tempfile::TempDir;

/// A server started from a caller's config. Dropping it SIGKILLs and reaps the process and
/// removes its temp dir.
#[derive(Debug)]
pub struct ConfiguredServer {
    child: Option<Child>,
    port: u16,
    log_path: PathBuf,
    dir: TempDir,
}

/// `nats-server -t -c <config>`: the server's parse check (it does not validate operator
/// mode or the preloaded JWTs — only a boot does, callout-operator-mode G1). The error
/// carries the server's output.
pub fn check_config(config: &str) -> Result<(), HarnessError> {
    let binary = locate(None)?;
    let dir = temp_dir()?;
    let path = dir.path().join("nats.conf");
    fs::write(&path, config).map_err(|e| HarnessError::new(format!("write config: {e}")))?;
    let out = Command::new(&binary)
        .arg("-t")
        .arg("-c")
        .arg(&path)
        .output()
        .map_err(|e| HarnessError::new(format!("cannot run {}: {e}", binary.display())))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::new(format!(
            "nats-server -t refused the config ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

fn temp_dir() -> Result<TempDir, HarnessError> {
    tempfile::Builder::new()
        .prefix("cotal-nats-conf-")
        .tempdir()
        .map_err(|e| HarnessError::new(format!("cannot create a temp dir: {e}")))
}

impl ConfiguredServer {
    /// Renders the config with `render(listen, store_dir)` (`listen` is `127.0.0.1:<free
    /// port>`, `store_dir` a fresh private dir), starts the server on it, and returns once the
    /// port answers with its `INFO`.
    pub fn start(render: impl FnOnce(&str, &Path) -> String) -> Result<Self, HarnessError> {
        let binary = locate(None)?;
        let dir = temp_dir()?;
        let port = *wire::free_ports(1)
            .map_err(HarnessError::new)?
            .first()
            .ok_or_else(|| HarnessError::new("free_ports returned no port"))?;
        let name = unique_name("configured");
        let mut config = render(&format!("{}:{port}", wire::HOST), &dir.path().join("store"));
        config.push_str(&format!("\nserver_name: {}\n", Value::from(name.as_str())));
        let config_path = dir.path().join("nats.conf");
        let log_path = dir.path().join("server.log");
        let io = |what: &str, e: std::io::Error| HarnessError::new(format!("{what}: {e}"));
        fs::write(&config_path, config).map_err(|e| io("write config", e))?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| io("open log", e))?;
        let stdout = log.try_clone().map_err(|e| io("clone log handle", e))?;
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .map_err(|e| io(&format!("spawn {}", binary.display()), e))?;
        let mut server = ConfiguredServer {
            child: Some(child),
            port,
            log_path,
            dir,
        };
        server.await_ready(&name)?;
        Ok(server)
    }

    fn await_ready(&mut self, name: &str) -> Result<(), HarnessError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(HarnessError::new(format!(
                    "nats-server exited ({status}) before answering. Log tail:\n{}",
                    self.log_tail()
                )));
            }
            if let Ok(info) = wire::read_info((wire::HOST, self.port).into()) {
                if info.get("server_name").and_then(Value::as_str) == Some(name) {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "nats-server did not answer on port {} within {START_TIMEOUT:?}. Log \
                     tail:\n{}",
                    self.port,
                    self.log_tail()
                )));
            }
            sleep(POLL_INTERVAL);
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temp dir holding the config, the log and the store.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last [`LOG_TAIL_LINES`] lines of the server's output.
    pub fn log_tail(&self) -> String {
        let text = fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines
            .get(lines.len().saturating_sub(LOG_TAIL_LINES)..)
            .unwrap_or_default()
            .join("\n")
    }
}

impl Drop for ConfiguredServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
