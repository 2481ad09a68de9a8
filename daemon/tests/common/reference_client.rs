//! The reference-client harness shared by the tests that make the reference's own NATS JS
//! library calls against a real plane (`reference_manager_client.rs`, `reference_agent_watch.rs`):
//! the pinned libraries' install (`scripts/nats-js.sh`) and one script's run under `node`, its
//! config on the first stdin line, its step lines back as JSON, and each `need` line it prints
//! answered on stdin.
#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

use serde_json::Value;

/// The command that installs the pinned libraries, quoted in every "missing" failure.
pub const INSTALL_COMMAND: &str = "scripts/nats-js.sh";
pub const CLIENT_DIR: &str = "tests/reference-client";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Runs the install script (a no-op once the pinned versions are there); the libraries must
/// then be in place. Fails naming the script when node, npm or a package is missing.
pub fn install() {
    let out = Command::new("bash")
        .arg(repo_root().join(INSTALL_COMMAND))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {INSTALL_COMMAND} ({e}); bash is needed"));
    assert!(
        out.status.success(),
        "{INSTALL_COMMAND} failed (it needs node and npm; run it by hand to install the pinned \
         NATS JS client libraries into {CLIENT_DIR}/node_modules): {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let modules = repo_root().join(CLIENT_DIR).join("node_modules/@nats-io");
    for package in ["transport-node", "jetstream", "kv"] {
        assert!(
            modules.join(package).join("package.json").is_file(),
            "@nats-io/{package} is missing from {CLIENT_DIR}/node_modules; run {INSTALL_COMMAND}"
        );
    }
}

/// Runs `script` (a path under the repository root) to its end with `config`, answering what
/// it asks with `answer`; its step lines, exit and stderr.
pub fn run_script(
    script: &str,
    config: &Value,
    answer: impl Fn(&Value) -> Value,
) -> (ExitStatus, Vec<Value>, String) {
    let mut child = Command::new("node")
        .arg(repo_root().join(script))
        .current_dir(repo_root().join(CLIENT_DIR))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start node ({e}); install Node.js >= 20, then {INSTALL_COMMAND}")
        });
    let mut err_pipe = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut buf = String::new();
        let _ = err_pipe.read_to_string(&mut buf);
        buf
    });
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{config}").unwrap();
    let mut steps = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the script printed a line that is not JSON ({e}): {line}"));
        if value.get("need").is_some() {
            writeln!(stdin, "{}", answer(&value)).unwrap();
        } else {
            steps.push(value);
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    (status, steps, stderr.join().unwrap())
}
