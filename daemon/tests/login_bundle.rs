//! Where `cotal-authd login` writes its bundle, on a running plane: a symlinked directory below
//! the state root, or a symlink at a bundle file, is refused in one sentence before anything is
//! written through it; the temp files a killed earlier login left in the bundle dir are removed
//! by the next one, while a live writer's are kept.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

use common::signin::Space;
use common::*;

fn login(space: &Space) -> Output {
    command()
        .args([
            "login",
            "--space",
            SPACE,
            "--actor",
            "cli",
            "--dev-subject",
            "alice",
            "--state-dir",
        ])
        .arg(&space.root)
        .output()
        .unwrap()
}

/// Asserts `out` is the one-sentence refusal of writing through the symlink at `link`.
fn refused_through(out: &Output, link: &Path) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "{} is a symlink; refusing to write through it",
            link.display()
        )),
        "{err}"
    );
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// A space with alice granted the actor `cli`, and its plane up.
fn signed_up() -> Space {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    space.up(&[]);
    space
}

#[test]
fn login_refuses_a_symlinked_bundle_dir_or_file() {
    let space = signed_up();
    let elsewhere = tempfile::tempdir().unwrap();
    let login_dir = space.root.join("login");
    let space_segment = login_dir.join(SEGMENT);
    let bundle = space_segment.join("cli");

    // The space's segment of `login/` is a link to a directory outside the state root.
    fs::create_dir(&login_dir).unwrap();
    symlink(elsewhere.path(), &space_segment).unwrap();
    refused_through(&login(&space), &space_segment);
    assert!(
        names(elsewhere.path()).is_empty(),
        "written through the link"
    );
    fs::remove_file(&space_segment).unwrap();

    // The bundle dir itself is the link.
    fs::create_dir(&space_segment).unwrap();
    symlink(elsewhere.path(), &bundle).unwrap();
    refused_through(&login(&space), &bundle);
    assert!(
        names(elsewhere.path()).is_empty(),
        "written through the link"
    );
    fs::remove_file(&bundle).unwrap();

    // A bundle file is a link.
    fs::create_dir(&bundle).unwrap();
    let target = elsewhere.path().join("target");
    fs::write(&target, b"not yours").unwrap();
    let bearer = bundle.join("bearer");
    symlink(&target, &bearer).unwrap();
    refused_through(&login(&space), &bearer);
    assert_eq!(fs::read(&target).unwrap(), b"not yours");
    assert!(fs::symlink_metadata(&bearer)
        .unwrap()
        .file_type()
        .is_symlink());
    fs::remove_file(&bearer).unwrap();
    let out = login(&space);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn login_removes_the_temp_files_a_killed_login_left_and_keeps_a_live_writers() {
    let space = signed_up();
    let bundle = space.root.join("login").join(SEGMENT).join("cli");
    fs::create_dir_all(&bundle).unwrap();
    // A login killed between writing its temp file and renaming it left the bearer it held;
    // a live writer's temp file (this test's own pid) sits beside it.
    let mut killed = Command::new("sleep").arg("30").spawn().unwrap();
    let dead_pid = killed.id();
    killed.kill().unwrap();
    killed.wait().unwrap();
    let stale = format!("bearer.{dead_pid}.0.tmp");
    let live = format!("login.json.{}.0.tmp", std::process::id());
    fs::write(bundle.join(&stale), b"a killed login's bearer").unwrap();
    fs::write(bundle.join(&live), b"a live writer's record").unwrap();
    let out = login(&space);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        names(&bundle),
        ["bearer", "login.json", live.as_str(), "sentinel.creds"]
    );
}
