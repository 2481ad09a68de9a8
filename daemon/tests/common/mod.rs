//! What the daemon's CLI tests share: the built binary, the test space, bounded waits, and a
//! reaper that kills every process a failed test leaves behind.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_cotal-authd");
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
pub const POLL: Duration = Duration::from_millis(10);

pub fn require_server() {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/venv/bin/nats-server");
    assert!(
        std::env::var_os("COTAL_NATS_SERVER").is_some() || bin.is_file(),
        "no nats-server at {}; install it with scripts/nats-server.sh",
        bin.display()
    );
}

/// The binary with no `NATS_URL` from the caller's environment: `--server` defaults to it, and
/// these tests choose the server themselves.
pub fn command() -> Command {
    let mut command = Command::new(BIN);
    command.env_remove("NATS_URL");
    command
}

pub fn run(args: &[&str]) -> Output {
    command().args(args).output().unwrap()
}

/// The space every test here works in, and its path segment (`space.<hex>`).
pub const SPACE: &str = "t1";
pub const SEGMENT: &str = "space.7431";
pub const IDP: &str = "http://127.0.0.1:4190";

pub fn space_dir(root: &Path) -> PathBuf {
    root.join("auth").join(SEGMENT)
}

pub fn server_record(root: &Path) -> PathBuf {
    root.join("nats").join(SEGMENT).join("server.json")
}

/// `init` of the test space under `root`, which must succeed.
pub fn init(root: &Path) -> Output {
    let out = command()
        .args(["init", "--space", SPACE, "--idp", IDP, "--state-dir"])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn up(state: &Path) -> Child {
    command()
        .args(["up", "--space", "t1", "--state-dir"])
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

pub fn discovery(state: &Path) -> Option<Value> {
    serde_json::from_slice(&fs::read(space_dir(state).join("auth-service.json")).ok()?).ok()
}

/// Waits until the discovery file is `child`'s.
pub fn ready(state: &Path, child: &mut Child) -> Value {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(d) = discovery(state).filter(|d| d["pid"] == child.id()) {
            return d;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("cotal-authd exited ({status}) before it was ready");
        }
        assert!(
            Instant::now() < deadline,
            "cotal-authd was not ready in time"
        );
        sleep(POLL);
    }
}

pub fn exits(child: &mut Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cotal-authd did not exit within {within:?}");
        }
        sleep(POLL);
    }
}

pub fn signal(child: &Child, signal: Signal) {
    kill_process(Pid::from_raw(child.id() as i32).unwrap(), signal).unwrap();
}

/// Kills whatever is still running on drop (a failed assertion must not leak processes).
pub struct Reaper(pub Vec<Child>, pub PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
        let record = server_record(&self.1);
        if let Some(pid) = fs::read(&record)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v["pid"].as_i64())
        {
            let _ = kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::KILL);
        }
    }
}
