//! `cotal-authd actor grant|ls|revoke` and `owner` as an operator runs them (reference §6.5):
//! the built binary over a trust root made by `init`, rows checked on disk.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use common::*;
use serde_json::Value;

fn authd(root: &Path, args: &[&str]) -> Output {
    command()
        .args(args)
        .args(["--space", SPACE, "--state-dir"])
        .arg(root)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .trim()
        .to_owned()
}

fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
    err
}

fn rows(root: &Path) -> Vec<Value> {
    let listed: Value =
        serde_json::from_str(&stdout(&authd(root, &["actor", "ls", "--json"]))).unwrap();
    listed["actors"].as_array().unwrap().clone()
}

#[test]
fn a_grant_by_idp_subject_lands_at_the_derived_owner_and_a_regrant_rotates_the_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    init(root);
    let owner = stdout(&authd(root, &["owner", "--idp-subject", "alice"]));
    assert!(owner.starts_with("u_") && owner.len() == 28, "{owner}");
    // The same subject derives the same owner every time; another subject another one.
    assert_eq!(
        stdout(&authd(root, &["owner", "--idp-subject", "alice"])),
        owner
    );
    assert_ne!(
        stdout(&authd(root, &["owner", "--idp-subject", "bob"])),
        owner
    );

    let granted = stdout(&authd(
        root,
        &[
            "actor",
            "grant",
            "cli",
            "--idp-subject",
            "alice",
            "--scope",
            "spawn",
            "--allow-subscribe",
            "team.>,news",
            "--allow-publish",
            "",
        ],
    ));
    assert!(granted.contains(&owner), "{granted}");
    let first = rows(root);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["owner"], owner.as_str());
    assert_eq!(first[0]["kind"], "interactive");
    assert_eq!(
        first[0]["allowSubscribe"],
        serde_json::json!(["team.>", "news"])
    );
    assert_eq!(first[0]["allowPublish"], serde_json::json!([]));
    let file = space_dir(root)
        .join("actors")
        .join(format!("{owner}.cli.json"));
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    stdout(&authd(
        root,
        &["actor", "grant", "cli", "--owner", &owner, "--full"],
    ));
    let second = rows(root);
    assert_eq!(second.len(), 1);
    assert_eq!(
        second[0]["scope"],
        serde_json::json!(["admin", "spawn", "supervise", "role:default"])
    );
    assert_ne!(
        second[0]["lifecycleUid"], first[0]["lifecycleUid"],
        "a re-grant rotates the uid"
    );

    let table = stdout(&authd(root, &["actor", "ls"]));
    assert!(
        table.starts_with("KIND") && table.contains(&owner),
        "{table}"
    );
}

#[test]
fn grants_refuse_what_would_widen_or_guess_and_say_what_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    init(root);
    // Omitting a list never defaults it to everything.
    let missing = refused(&authd(
        root,
        &[
            "actor",
            "grant",
            "cli",
            "--idp-subject",
            "alice",
            "--scope",
            "spawn",
        ],
    ));
    assert!(
        missing.contains("--allow-subscribe, --allow-publish") && missing.contains("--full"),
        "{missing}"
    );
    let both = refused(&authd(
        root,
        &[
            "actor",
            "grant",
            "cli",
            "--idp-subject",
            "alice",
            "--full",
            "--scope",
            "spawn",
        ],
    ));
    assert!(both.contains("--full"), "{both}");
    let not_derived = refused(&authd(
        root,
        &["actor", "grant", "cli", "--owner", "alice", "--full"],
    ));
    assert!(not_derived.contains("cotal-authd owner"), "{not_derived}");
    let bad_channel = refused(&authd(
        root,
        &[
            "actor",
            "grant",
            "cli",
            "--idp-subject",
            "alice",
            "--scope",
            "",
            "--allow-subscribe",
            "a..b",
            "--allow-publish",
            "",
        ],
    ));
    assert!(bad_channel.contains("a..b"), "{bad_channel}");
    // Exactly one of --owner and --idp-subject: a usage error.
    let usage = authd(root, &["actor", "grant", "cli", "--full"]);
    assert_eq!(usage.status.code(), Some(2));
    assert!(rows(root).is_empty(), "nothing was written");
}

#[test]
fn revoke_removes_the_row_once_and_names_the_listing_after() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    init(root);
    stdout(&authd(
        root,
        &["actor", "grant", "cli", "--idp-subject", "alice", "--full"],
    ));
    let revoked = stdout(&authd(
        root,
        &["actor", "revoke", "cli", "--idp-subject", "alice"],
    ));
    assert!(revoked.contains("revoked actor cli"), "{revoked}");
    assert!(rows(root).is_empty());
    let again = refused(&authd(
        root,
        &["actor", "revoke", "cli", "--idp-subject", "alice"],
    ));
    assert!(again.contains("cotal-authd actor ls"), "{again}");
}

#[test]
fn a_corrupt_row_is_listed_with_its_sentence_and_fails_the_listing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    init(root);
    stdout(&authd(
        root,
        &["actor", "grant", "cli", "--idp-subject", "alice", "--full"],
    ));
    let actors = space_dir(root).join("actors");
    let file = fs::read_dir(&actors)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    fs::write(&file, b"{ not json").unwrap();
    let out = authd(root, &["actor", "ls"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("unreadable") && err.contains(&file.display().to_string()),
        "{err}"
    );
}
