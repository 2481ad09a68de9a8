//! `cotal-authd init`, `broker-config` and `up --server` against a server this space does not
//! govern, as a user runs them: the built binary, the pinned nats-server (a missing binary
//! fails loudly and names `scripts/nats-server.sh`). Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cotal-authd");
const IDP: &str = "http://127.0.0.1:4190";

fn nats_server() -> PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/venv/bin/nats-server");
    let bin = std::env::var_os("COTAL_NATS_SERVER").map_or(bin, PathBuf::from);
    assert!(
        bin.is_file(),
        "no nats-server at {}; install it with scripts/nats-server.sh",
        bin.display()
    );
    bin
}

/// A free loopback port.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A nats-server with `args`, once it listens on `port`; killed on drop.
struct Running(std::process::Child);

impl Running {
    fn start(args: &[&std::ffi::OsStr], port: u16) -> Running {
        let child = Command::new(nats_server())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let running = Running(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {port}"
            );
            sleep(Duration::from_millis(20));
        }
        running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `up --space s1 --server <url>` on `root`, with logs off: its outcome.
fn up_on(url: &str, root: &Path) -> Output {
    Command::new(BIN)
        .args(["up", "--space", "s1", "--server", url, "--state-dir"])
        .arg(root)
        .env("RUST_LOG", "off")
        .output()
        .unwrap()
}

fn authd(args: &[&str], root: &Path) -> Output {
    Command::new(BIN)
        .env_remove("NATS_URL")
        .args(args)
        .arg("--state-dir")
        .arg(root)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `dir` with its bytes, in path order.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = fs::read(&path).unwrap();
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn init_twice_at_once_converges_and_a_rerun_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let spawn = || {
        Command::new(BIN)
            .args(["init", "--space", "s1", "--idp", IDP, "--state-dir"])
            .arg(root.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success(), "{}", stderr(&a));
    assert!(b.status.success(), "{}", stderr(&b));
    let said = [a, b].map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    assert_eq!(
        said.iter().filter(|s| s.starts_with("created")).count(),
        1,
        "{said:?}"
    );
    let dir = root.path().join("auth/space.7331");
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    let before = snapshot(&dir);
    assert_eq!(before.len(), 8, "{before:?}");
    for (path, _) in &before {
        assert_eq!(mode(path), 0o600, "{}", path.display());
    }
    let again = authd(&["init", "--space", "s1", "--idp", IDP], root.path());
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(String::from_utf8_lossy(&again.stdout).starts_with("kept"));
    assert_eq!(snapshot(&dir), before, "a second init changed material");

    let repointed = authd(
        &["init", "--space", "s1", "--idp", "https://idp.example"],
        root.path(),
    );
    let err = stderr(&repointed);
    assert_eq!(repointed.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("re-key every owner"), "{err}");
    assert_eq!(snapshot(&dir), before);
}

#[test]
fn degenerate_spaces_and_bad_idp_urls_are_refused_before_any_file_is_touched() {
    let root = tempfile::tempdir().unwrap();
    for (space, idp, code) in [
        ("..", IDP, 2),
        (".", IDP, 2),
        ("", IDP, 2),
        ("s1", "http://idp.example", 1),
        ("s1", "https://idp.example/?q=1", 1),
        ("s1", "https://user:pw@idp.example", 1),
    ] {
        let out = authd(&["init", "--space", space, "--idp", idp], root.path());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{space:?} {idp}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!err.contains("pw@"), "the refusal echoed userinfo: {err}");
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0, "{space:?}");
    }
}

#[test]
fn broker_config_passes_nats_server_t() {
    let root = tempfile::tempdir().unwrap();
    authd(&["init", "--space", "s1", "--idp", IDP], root.path());
    let out = authd(&["broker-config", "--space", "s1"], root.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    for part in [
        "operator:",
        "system_account:",
        "resolver_preload",
        "max_control_line",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    let file = root.path().join("nats.conf");
    fs::write(&file, &text).unwrap();
    let checked = Command::new(nats_server())
        .arg("-t")
        .arg("-c")
        .arg(&file)
        .output()
        .unwrap();
    assert!(checked.status.success(), "{}", stderr(&checked));
    let missing = authd(&["broker-config", "--space", "other"], root.path());
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("cotal-authd init"),
        "{}",
        stderr(&missing)
    );
}

/// A server that lets anyone in is not this space's: `up --server` refuses it in one sentence
/// naming `broker-config`, and serves nothing.
#[test]
fn up_refuses_a_server_that_needs_no_credentials() {
    let root = tempfile::tempdir().unwrap();
    authd(&["init", "--space", "s1", "--idp", IDP], root.path());
    let port = free_port();
    let store = root.path().join("open-store");
    let port_arg = port.to_string();
    let args: [&std::ffi::OsStr; 7] = [
        "-a".as_ref(),
        "127.0.0.1".as_ref(),
        "-p".as_ref(),
        port_arg.as_ref(),
        "-js".as_ref(),
        "-sd".as_ref(),
        store.as_os_str(),
    ];
    let open = Running::start(&args, port);
    let out = up_on(&format!("nats://127.0.0.1:{port}"), root.path());
    drop(open);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("broker-config"), "{err}");
    assert!(err.contains("without credentials"), "{err}");
    assert!(!root
        .path()
        .join("auth/space.7331/auth-service.json")
        .exists());
}

/// A server that trusts another operator refuses the plane's credentials: `up --server` says so
/// in one sentence naming `broker-config`.
#[test]
fn up_refuses_a_server_of_another_operator() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    authd(&["init", "--space", "s1", "--idp", IDP], ours.path());
    authd(&["init", "--space", "s1", "--idp", IDP], theirs.path());
    let port = free_port();
    let store = theirs.path().join("store");
    let store = store.to_str().unwrap();
    let listen = format!("127.0.0.1:{port}");
    let config = authd(
        &[
            "broker-config",
            "--space",
            "s1",
            "--listen",
            &listen,
            "--store-dir",
            store,
        ],
        theirs.path(),
    );
    assert!(config.status.success(), "{}", stderr(&config));
    let file = theirs.path().join("nats.conf");
    fs::write(&file, &config.stdout).unwrap();
    let server = Running::start(&["-c".as_ref(), file.as_os_str()], port);
    let out = up_on(&format!("nats://{listen}"), ours.path());
    drop(server);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("broker-config --space s1"), "{err}");
    assert!(err.contains("authorization violation"), "{err}");
}

/// `broker-config` reads the trust root through the reader `up` uses: a symlinked `idp.json`
/// and a `callout.json` widened to 0644, which `up` refuses, are refused by `broker-config` in
/// the same sentence, and the config it prints once they are fixed is the one before.
#[test]
fn broker_config_refuses_what_up_refuses_in_the_same_sentence() {
    let root = tempfile::tempdir().unwrap();
    authd(&["init", "--space", "s1", "--idp", IDP], root.path());
    let config = authd(&["broker-config", "--space", "s1"], root.path());
    assert!(config.status.success(), "{}", stderr(&config));
    let dir = root.path().join("auth/space.7331");
    // `up` refuses before it dials the server: a port nothing listens on is enough.
    let dead_server = format!("nats://127.0.0.1:{}", free_port());
    let sentences = || {
        let up = up_on(&dead_server, root.path());
        let broker = authd(&["broker-config", "--space", "s1"], root.path());
        assert_eq!(up.status.code(), Some(1), "{}", stderr(&up));
        assert_eq!(broker.status.code(), Some(1), "{}", stderr(&broker));
        assert!(broker.stdout.is_empty(), "no config is printed");
        let up = stderr(&up);
        let broker = stderr(&broker);
        assert_eq!(up.trim_end().lines().count(), 1, "{up}");
        let up = up.strip_prefix("cotal-authd up: ").unwrap().to_owned();
        let broker = broker
            .strip_prefix("cotal-authd broker-config: ")
            .unwrap()
            .to_owned();
        assert_eq!(broker, up);
        up
    };

    let pin = dir.join("idp.json");
    let moved = root.path().join("idp-elsewhere.json");
    fs::rename(&pin, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &pin).unwrap();
    let said = sentences();
    assert!(
        said.contains(&format!("{} is a symlink", pin.display())),
        "{said}"
    );
    fs::remove_file(&pin).unwrap();
    fs::rename(&moved, &pin).unwrap();

    let callout = dir.join("callout.json");
    fs::set_permissions(&callout, fs::Permissions::from_mode(0o644)).unwrap();
    let said = sentences();
    assert!(
        said.contains(&format!("{} has mode 0644", callout.display())),
        "{said}"
    );
    fs::set_permissions(&callout, fs::Permissions::from_mode(0o600)).unwrap();

    let again = authd(&["broker-config", "--space", "s1"], root.path());
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(again.stdout, config.stdout);
}

/// `up` refuses a state root other users can write (0777, 0770) or a symlinked one, in one
/// sentence naming the path and the fix, before it touches anything under it.
#[test]
fn up_refuses_a_state_root_open_to_others_or_symlinked() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("state");
    authd(&["init", "--space", "s1", "--idp", IDP], &root);
    let before = snapshot(&root);
    let dead_server = format!("nats://127.0.0.1:{}", free_port());
    for mode in [0o777, 0o770] {
        fs::set_permissions(&root, fs::Permissions::from_mode(mode)).unwrap();
        let out = up_on(&dead_server, &root);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{mode:o}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!(
                "the state root {} has mode {mode:04o}",
                root.display()
            )),
            "{err}"
        );
        assert!(
            err.contains(&format!("`chmod go-w {}`", root.display())),
            "{err}"
        );
        assert_eq!(snapshot(&root), before, "a refused up wrote under the root");
    }
    let link = parent.path().join("link");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&root, &link).unwrap();
    let out = up_on(&dead_server, &link);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("the state root {} is a symlink", link.display())),
        "{err}"
    );
    assert_eq!(snapshot(&root), before, "a refused up wrote under the root");
    // A private root passes the check: this start fails later, at the server nobody runs.
    let out = up_on(&dead_server, &root);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("the state root"), "{err}");
}
