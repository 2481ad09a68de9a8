//! The operator packaging under `deploy/`, checked without a network or an image registry:
//!
//! * the systemd unit passes `systemd-analyze verify` (pointed at the binary this build made,
//!   through a temp copy of the unit, since verify requires the `ExecStart` binary to exist), its
//!   restart policy keeps a fenced plane down (`RestartPreventExitStatus` = the exit status `up`
//!   uses for "fenced"), it carries the hardening options, and its command lines are accepted by
//!   the real CLI;
//! * the OCI build file is parsed as a linter would: a builder stage building this package in
//!   release mode, a runtime stage that is not the toolchain image, copies exactly that binary
//!   and the nats-server its `up` embeds, runs as a non-root user, and whose `CMD` the real CLI
//!   accepts. No image is pulled or built (the registries are not reachable from CI).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::BIN;

const UNIT: &str = include_str!("../../deploy/cotal-authd.service");
const CONTAINERFILE: &str = include_str!("../../deploy/Containerfile");
const DOCKERIGNORE: &str = include_str!("../../deploy/Containerfile.dockerignore");
const SYSUSERS: &str = include_str!("../../deploy/cotal-authd.sysusers");
const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";
/// Where the unit and the image install the binary.
const INSTALLED_BIN: &str = "/usr/local/bin/cotal-authd";

/// `(section, key) → values` of a unit file, in order (a key may repeat).
fn unit_keys(text: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut section = String::new();
    let mut keys: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line.split_once('=').expect("a unit line is key=value");
        keys.entry((section.clone(), key.trim().to_owned()))
            .or_default()
            .push(value.trim().to_owned());
    }
    keys
}

fn one<'a>(keys: &'a BTreeMap<(String, String), Vec<String>>, section: &str, key: &str) -> &'a str {
    let values = keys
        .get(&(section.to_owned(), key.to_owned()))
        .unwrap_or_else(|| panic!("[{section}] {key}= is missing"));
    assert_eq!(values.len(), 1, "[{section}] {key}= is set more than once");
    &values[0]
}

/// A unit command line as systemd would run it with `env`: `${NAME}` replaced in a word,
/// `$NAME` as a whole word split into zero or more words; `state` stands in for `state_dir`.
fn exec_argv(line: &str, env: &[(&str, &str)], state_dir: &str, state: &Path) -> Vec<String> {
    let lookup = |name: &str| {
        env.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("the unit uses ${name}, which the test does not know"))
    };
    let mut argv = Vec::new();
    for word in line.split_whitespace() {
        if let Some(name) = word.strip_prefix('$').filter(|n| !n.starts_with('{')) {
            argv.extend(lookup(name).split_whitespace().map(str::to_owned));
            continue;
        }
        let mut word = word.to_owned();
        while let Some(start) = word.find("${") {
            let end = start + word[start..].find('}').expect("a closed ${…}");
            let value = lookup(&word[start + 2..end]);
            word.replace_range(start..=end, value);
        }
        argv.push(if word == state_dir {
            state.to_str().unwrap().to_owned()
        } else {
            word
        });
    }
    argv
}

/// Runs the built binary with `argv` (its first word, the installed path, dropped).
fn run_installed(argv: &[String]) -> std::process::Output {
    assert_eq!(argv[0], INSTALLED_BIN, "{argv:?}");
    Command::new(BIN)
        .args(&argv[1..])
        .env_remove("NATS_URL")
        .output()
        .unwrap()
}

fn empty_state_root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).unwrap();
    (dir, state)
}

/// `up` on a state root without a trust root: the command line parsed (not a usage error,
/// exit 2) and the start refused in the sentence naming `init`.
fn assert_up_parses(argv: &[String]) {
    let out = run_installed(argv);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{argv:?}: {stderr}");
    assert!(
        stderr.contains("cotal-authd init --space"),
        "{argv:?}: {stderr}"
    );
}

#[test]
fn the_systemd_unit_verifies_hardens_and_keeps_a_fenced_plane_down() {
    let keys = unit_keys(UNIT);
    let service = "Service";

    // A fenced plane must not be restarted: that would fence its successor in turn.
    assert_eq!(
        one(&keys, service, "RestartPreventExitStatus"),
        cotal_authd::up::EXIT_FENCED.to_string()
    );
    assert_eq!(one(&keys, service, "Restart"), "on-failure");
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("CapabilityBoundingSet", ""),
        ("StateDirectory", "cotal-authd"),
        ("StateDirectoryMode", "0700"),
        ("UMask", "0077"),
    ] {
        assert_eq!(one(&keys, service, key), value, "{key}");
    }
    // `up` refuses a symlinked state root, which DynamicUser= would make.
    assert!(!keys.contains_key(&(service.to_owned(), "DynamicUser".to_owned())));
    assert_eq!(one(&keys, service, "User"), "cotal-authd");
    assert!(SYSUSERS
        .lines()
        .any(|l| l.split_whitespace().take(2).eq(["u", "cotal-authd"])));

    // systemd's own checker, on a copy pointing at this build's binary; it reports unknown
    // keys and unparsable values on stderr (with exit 0), so stderr must be empty too.
    assert!(
        Path::new(SYSTEMD_ANALYZE).is_file(),
        "{SYSTEMD_ANALYZE} is missing: install systemd to check deploy/cotal-authd.service"
    );
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cotal-authd.service");
    fs::write(&copy, UNIT.replace(INSTALLED_BIN, BIN)).unwrap();
    let verify = Command::new(SYSTEMD_ANALYZE)
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success(), "systemd-analyze verify: {said}");
    assert!(said.trim().is_empty(), "systemd-analyze verify: {said}");

    // The command lines, as systemd expands them, are accepted by the real CLI: `up` before
    // any trust root refuses naming `init`; `init` creates it, then keeps it.
    let state_dir = format!("/var/lib/{}", one(&keys, service, "StateDirectory"));
    let env = [
        ("COTAL_SPACE", "t1"),
        ("COTAL_IDP_URL", "https://idp.example.com"),
        ("COTAL_UP_ARGS", ""),
    ];
    let (_dir, state) = empty_state_root();
    let up = exec_argv(one(&keys, service, "ExecStart"), &env, &state_dir, &state);
    assert_eq!(up[1], "up", "{up:?}");
    assert!(
        up.iter().any(|w| w == state.to_str().unwrap()),
        "ExecStart runs on the StateDirectory: {up:?}"
    );
    assert_up_parses(&up);
    let init = exec_argv(
        one(&keys, service, "ExecStartPre"),
        &env,
        &state_dir,
        &state,
    );
    for expected in ["created the trust root", "kept the trust root"] {
        let out = run_installed(&init);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(expected),
            "{init:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// One build stage: its name (`AS …`), its base image, and its instructions after `FROM`.
#[derive(Debug)]
struct Stage {
    name: Option<String>,
    from: String,
    instructions: Vec<(String, String)>,
}

impl Stage {
    fn all(&self, keyword: &str) -> impl Iterator<Item = &str> {
        let keyword = keyword.to_owned();
        self.instructions
            .iter()
            .filter(move |(k, _)| *k == keyword)
            .map(|(_, v)| v.as_str())
    }
}

/// The stages of a Dockerfile: comments dropped, `\` continuations joined.
fn stages(text: &str) -> Vec<Stage> {
    let mut logical = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                logical.push(std::mem::take(&mut pending));
            }
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    for line in logical {
        let (keyword, rest) = line.split_once(' ').unwrap_or((&line, ""));
        let keyword = keyword.to_ascii_uppercase();
        if keyword == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some((*name).to_owned()),
                [_] => None,
                _ => panic!("an unreadable FROM: {line}"),
            };
            stages.push(Stage {
                name,
                from: words[0].to_owned(),
                instructions: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.instructions.push((keyword, rest.trim().to_owned()));
        } else {
            assert_eq!(
                keyword, "ARG",
                "only ARG may precede the first FROM: {line}"
            );
        }
    }
    stages
}

fn json_words(value: &str) -> Vec<String> {
    serde_json::from_str(value).unwrap_or_else(|e| panic!("{value} is not an exec-form array: {e}"))
}

#[test]
fn the_image_builds_this_package_and_runs_it_as_an_unprivileged_user() {
    let stages = stages(CONTAINERFILE);
    assert!(stages.len() >= 2, "a multi-stage build: {stages:?}");
    let package = env!("CARGO_PKG_NAME");
    let binary = Path::new(BIN).file_name().unwrap().to_str().unwrap();

    // The builder stage compiles exactly this package, in release mode, against the lock file.
    let builder = stages
        .iter()
        .find(|s| s.all("RUN").any(|r| r.contains("cargo build")))
        .expect("a stage runs cargo build");
    let builder_name = builder.name.as_deref().expect("the builder stage is named");
    let build = builder
        .all("RUN")
        .find(|r| r.contains("cargo build"))
        .unwrap();
    let words: Vec<&str> = build.split_whitespace().collect();
    assert!(
        words.contains(&"--release") && words.contains(&"--locked"),
        "{build}"
    );
    assert!(words.windows(2).any(|w| w == ["-p", package]), "{build}");

    // The runtime stage: the last one, not the toolchain image.
    let runtime = stages.last().unwrap();
    assert!(
        !std::ptr::eq(runtime, builder),
        "the binary runs outside the builder"
    );
    assert!(!runtime.from.contains("rust"), "{}", runtime.from);
    assert!(
        runtime.from.contains("slim"),
        "a slim runtime base: {}",
        runtime.from
    );
    let copies: Vec<Vec<&str>> = runtime
        .all("COPY")
        .map(|c| c.split_whitespace().collect())
        .collect();
    let from_builder = format!("--from={builder_name}");
    let installed = copies
        .iter()
        .find(|c| c.first() == Some(&from_builder.as_str()))
        .expect("the runtime copies from the builder");
    assert_eq!(
        installed[1..],
        [
            &format!("/src/target/release/{binary}") as &str,
            INSTALLED_BIN
        ]
    );

    // `up` runs the nats-server named by COTAL_NATS_SERVER, which the image carries.
    let server = runtime
        .all("ENV")
        .find_map(|e| e.strip_prefix("COTAL_NATS_SERVER="))
        .expect("ENV COTAL_NATS_SERVER");
    assert!(
        copies.iter().any(|c| c.last() == Some(&server)),
        "{server} is copied in"
    );

    // Never root: the last USER names neither root nor uid 0.
    let user = runtime.all("USER").last().expect("the runtime sets a USER");
    let name = user.split(':').next().unwrap();
    assert!(name != "root" && name != "0", "USER {user}");

    // ENTRYPOINT is the copied binary; CMD is an `up` the real CLI accepts.
    let entrypoint = json_words(runtime.all("ENTRYPOINT").last().unwrap());
    assert_eq!(entrypoint, [INSTALLED_BIN]);
    let cmd = json_words(runtime.all("CMD").last().unwrap());
    assert_eq!(cmd[0], "up");
    let state_at = cmd.iter().position(|w| w == "--state-dir").unwrap() + 1;
    let volume = json_words(runtime.all("VOLUME").last().unwrap());
    assert_eq!(
        volume,
        [cmd[state_at].as_str()],
        "the state root is the volume"
    );
    let (_dir, state) = empty_state_root();
    let mut argv = vec![INSTALLED_BIN.to_owned()];
    argv.extend(cmd.iter().cloned());
    argv[state_at + 1] = state.to_str().unwrap().to_owned();
    assert_up_parses(&argv);

    // The build context leaves the build outputs behind.
    assert!(DOCKERIGNORE.lines().any(|l| l.trim() == "target"));
}
