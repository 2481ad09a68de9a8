//! The embedded `nats-server`: what a plane started without `--server` runs on, in operator mode
//! from exactly the configuration `cotal-authd broker-config` prints for the space: the pinned
//! binary located, a live server adopted, a new one spawned in its own process group, stopped.
//!
//! The server belongs to its directory, not to one process: its pid, URL and config path are
//! recorded in `<dir>/server.json`. A start finds a recorded server still alive (a
//! predecessor that was `kill -9`ed, or one still running) and adopts it, so a successor
//! re-registers on the same store and fences the predecessor there. A plane that exits on a
//! signal stops the server; a fenced plane leaves it to the successor that fenced it.
//!
//! The directory's files (the config, the record) are written by the caller's private-file
//! writer (the daemon passes io-fs's 0600 atomic write): this crate keeps no file kit of its own.

use std::fs::{self, OpenOptions};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cotal_core::trust::ServerTls;
use rustix::process::{kill_process, test_kill_process, Pid, Signal};
use serde_json::{json, Value};

use crate::dial::TlsSettings;

const START_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(50);

/// The embedded server's own TLS: `up --tlscert F --tlskey F` without `--server` (nats-server's
/// flag names), as absolute paths, since the server reads them from its own directory; `None`
/// without a certificate. The flags are checked first ([`TlsSettings::check`]).
pub fn server_tls(tls: &TlsSettings) -> Result<Option<ServerTls>, String> {
    let absolute = |flag: &str, path: &Path| {
        fs::canonicalize(path)
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| format!("{flag} {} cannot be read: {e}", path.display()))
    };
    tls.check()?;
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Ok(Some(ServerTls {
            cert: absolute("--tlscert", cert)?,
            key: absolute("--tlskey", key)?,
            ca: None,
            verify: false,
        })),
        _ => Ok(None),
    }
}

/// How the plane dials its own embedded server: it verifies a TLS one as any client would,
/// against `--tlsca`, with no client certificate (the embedded server does not ask for one); a
/// plaintext one is dialed plainly, whatever `NATS_CA` the environment carries.
pub fn client_tls(tls: &TlsSettings, serving_tls: bool) -> TlsSettings {
    TlsSettings {
        ca: tls.ca.clone().filter(|_| serving_tls),
        ..TlsSettings::default()
    }
}

/// A running embedded server.
#[derive(Debug)]
pub struct Embedded {
    pub url: String,
    pid: i32,
    /// Set when this process spawned it (so it can be reaped).
    child: Option<Child>,
    record: PathBuf,
}

/// The pinned binary: `COTAL_NATS_SERVER`, else `.tools/venv/bin/nats-server` under the current
/// dir, else under this crate's workspace (for `cargo run` / `cargo test` from anywhere).
fn locate() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("COTAL_NATS_SERVER") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "COTAL_NATS_SERVER names {}, which does not exist; install the pinned server \
                 with scripts/nats-server.sh",
                path.display()
            ))
        };
    }
    let candidates = [
        PathBuf::from(".tools/venv/bin/nats-server"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/venv/bin/nats-server"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            "no nats-server binary found in .tools/venv/bin; install the pinned one with \
             scripts/nats-server.sh, or pass --server URL"
                .to_owned()
        })
}

fn alive(pid: i32) -> bool {
    Pid::from_raw(pid).is_some_and(|p| test_kill_process(p).is_ok())
}

fn answers(url: &str) -> bool {
    url.strip_prefix("nats://")
        .or_else(|| url.strip_prefix("tls://"))
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
}

/// True when `pid` is a process started with `config` (guards against pid reuse).
fn runs_config(pid: i32, config: &Path) -> bool {
    fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmd| {
        let config = config.to_string_lossy();
        cmd.split(|b| *b == 0).any(|arg| arg == config.as_bytes())
    })
}

impl Embedded {
    /// Adopts the live server recorded under `dir` (which the caller made private) or starts
    /// a new one from the configuration `config_for(listen, store_dir)` renders (the space's
    /// `broker-config`), and returns once its client port answers; `write_private` writes the
    /// config and the record. With `tls` the configuration serves TLS and the URL is `tls://`;
    /// a live server recorded with the other scheme is refused rather than adopted (one store,
    /// one server: a second one cannot start beside it).
    pub fn start(
        dir: &Path,
        tls: bool,
        config_for: impl FnOnce(&str, &str) -> Result<String, String>,
        write_private: fn(&Path, &[u8]) -> Result<(), String>,
    ) -> Result<Embedded, String> {
        let config = fs::canonicalize(dir)
            .map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?
            .join("nats.conf");
        let record = dir.join("server.json");
        let scheme = if tls { "tls://" } else { "nats://" };
        if let Some(adopted) = Self::adopt(&record, &config) {
            if !adopted.url.starts_with(scheme) {
                return Err(format!(
                    "the embedded nats-server under {} is running {} TLS, started by an earlier \
                     plane; stop that plane (or its server, pid {}) before starting {} TLS",
                    dir.display(),
                    if tls { "without" } else { "with" },
                    adopted.pid,
                    if tls { "with" } else { "without" }
                ));
            }
            return Ok(adopted);
        }
        let binary = locate()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free loopback port: {e}"))?
            .port();
        let store = config.with_file_name("store");
        let text = config_for(&format!("127.0.0.1:{port}"), &store.to_string_lossy())?;
        write_private(&config, text.as_bytes())?;
        let log_path = config.with_file_name("server.log");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let mut child = Command::new(&binary)
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Its own process group: a terminal's Ctrl-C (or a supervisor signalling the
            // plane's group) reaches the plane alone, which closes its connections and only then
            // stops the server, instead of the server dying under the plane's close.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let pid = i32::try_from(child.id()).unwrap_or(0);
        let url = format!("{scheme}127.0.0.1:{port}");
        let deadline = Instant::now() + START_TIMEOUT;
        while !answers(&url) {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "the embedded nats-server exited ({status}) before it listened; see {}",
                    log_path.display()
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the embedded nats-server did not listen on {url} within {}s; see {}",
                    START_TIMEOUT.as_secs(),
                    log_path.display()
                ));
            }
            std::thread::sleep(POLL);
        }
        let rec = json!({"pid": pid, "url": url, "config": config.to_string_lossy()});
        write_private(&record, rec.to_string().as_bytes())?;
        Ok(Embedded {
            url,
            pid,
            child: Some(child),
            record,
        })
    }

    fn adopt(record: &Path, config: &Path) -> Option<Embedded> {
        let rec: Value = serde_json::from_slice(&fs::read(record).ok()?).ok()?;
        let pid = i32::try_from(rec.get("pid")?.as_i64()?).ok()?;
        let url = rec.get("url")?.as_str()?.to_owned();
        (alive(pid) && runs_config(pid, config) && answers(&url)).then(|| Embedded {
            url,
            pid,
            child: None,
            record: record.to_owned(),
        })
    }

    /// Whether this process spawned the server (rather than adopting it).
    pub fn spawned(&self) -> bool {
        self.child.is_some()
    }

    /// Stops the server (SIGTERM, then SIGKILL after a bound) and forgets its record.
    pub fn stop(mut self) {
        let _ = fs::remove_file(&self.record);
        if let Some(pid) = Pid::from_raw(self.pid) {
            let _ = kill_process(pid, Signal::TERM);
            let deadline = Instant::now() + STOP_TIMEOUT;
            loop {
                let gone = match self.child.as_mut() {
                    Some(child) => !matches!(child.try_wait(), Ok(None)),
                    None => !alive(self.pid),
                };
                if gone {
                    return;
                }
                if Instant::now() > deadline {
                    let _ = kill_process(pid, Signal::KILL);
                    if let Some(child) = self.child.as_mut() {
                        let _ = child.wait();
                    }
                    return;
                }
                std::thread::sleep(POLL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_servers_tls_needs_both_halves_and_its_client_trusts_only_the_ca() {
        assert_eq!(server_tls(&TlsSettings::default()), Ok(None));
        let half = TlsSettings {
            cert: Some(PathBuf::from("/nonexistent/cert.pem")),
            ..TlsSettings::default()
        };
        assert_eq!(
            server_tls(&half),
            Err("--tlscert needs --tlskey (NATS_KEY)".to_owned())
        );
        let given = TlsSettings {
            ca: Some(PathBuf::from("ca.pem")),
            cert: Some(PathBuf::from("cert.pem")),
            key: Some(PathBuf::from("key.pem")),
        };
        let ca_only = TlsSettings {
            ca: Some(PathBuf::from("ca.pem")),
            ..TlsSettings::default()
        };
        assert_eq!(client_tls(&given, true), ca_only);
        assert_eq!(client_tls(&given, false), TlsSettings::default());
    }
}
