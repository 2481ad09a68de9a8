//! The trust root on disk (`cotal_io_fs::trust`): layout and modes, idempotent and concurrent
//! `init` (threads and processes), and every refusal with its sentence.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use cotal_core::names::SpaceName;
use cotal_io_fs::trust::{init, load_broker, load_daemon, space_dir, InitOutcome};

const IDP: &str = "https://idp.example.com";
/// Set in a child process of [`concurrent_processes_converge_on_one_trust_root`]: the root to
/// run `init` in.
const CHILD_ROOT_ENV: &str = "COTAL_TRUST_TEST_CHILD_ROOT";

fn space() -> SpaceName {
    SpaceName::parse("main").unwrap()
}

const FILES: [&str; 8] = [
    "service-keys.json",
    "callout.json",
    "issuer.json",
    "owner-secret.json",
    "system-user.json",
    "idp.json",
    "operator/operator.json",
    "operator/broker.json",
];

/// Every file's bytes and mtime.
fn snapshot(dir: &Path) -> Vec<(Vec<u8>, i64, i64)> {
    snapshot_of(dir, &FILES)
}

fn snapshot_of(dir: &Path, files: &[&str]) -> Vec<(Vec<u8>, i64, i64)> {
    files
        .iter()
        .map(|f| {
            let p = dir.join(f);
            let m = fs::metadata(&p).unwrap();
            (fs::read(&p).unwrap(), m.mtime(), m.mtime_nsec())
        })
        .collect()
}

fn created(root: &Path) -> PathBuf {
    match init(root, &space(), IDP).unwrap() {
        InitOutcome::Created { dir } => dir,
        other => panic!("expected Created, got {other:?}"),
    }
}

#[test]
fn init_lays_out_the_space_dir_with_private_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = created(tmp.path());
    assert_eq!(dir, tmp.path().join("auth/space.6d61696e"));
    assert_eq!(dir, space_dir(tmp.path(), &space()));
    for d in [dir.clone(), dir.join("operator")] {
        let m = fs::symlink_metadata(&d).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o777, 0o700, "{}", d.display());
    }
    for f in FILES {
        let m = fs::symlink_metadata(dir.join(f)).unwrap();
        assert!(m.is_file());
        assert_eq!(m.mode() & 0o777, 0o600, "{f}");
    }
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "callout.json",
            "idp.json",
            "issuer.json",
            "operator",
            "owner-secret.json",
            "service-keys.json",
            "system-user.json"
        ]
    );
    // No temp dir is left behind.
    assert_eq!(fs::read_dir(tmp.path().join("auth")).unwrap().count(), 1);

    let daemon = load_daemon(tmp.path(), &space()).unwrap();
    let broker = load_broker(tmp.path(), &space()).unwrap();
    daemon.check_broker(&broker).unwrap();
    assert_eq!(daemon.idp().url(), IDP);
    assert_eq!(daemon.issuer().issuer(), "urn:cotal:auth:main");
}

#[test]
fn a_second_init_keeps_everything_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = created(tmp.path());
    let before = snapshot(&dir);
    match init(tmp.path(), &space(), "https://idp.example.com/").unwrap() {
        InitOutcome::Kept {
            dir: kept_dir,
            kept,
            added,
        } => {
            assert_eq!(kept_dir, dir);
            assert_eq!(kept.len(), 8);
            assert!(kept.contains(&"operator/broker.json".to_owned()));
            assert!(added.is_empty());
        }
        other => panic!("expected Kept, got {other:?}"),
    }
    assert_eq!(snapshot(&dir), before);
}

#[test]
fn init_adds_the_plane_system_user_to_a_root_made_before_it_and_changes_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = created(tmp.path());
    std::fs::remove_file(dir.join("system-user.json")).unwrap();
    let others: Vec<&str> = FILES
        .into_iter()
        .filter(|f| *f != "system-user.json")
        .collect();
    let before = snapshot_of(&dir, &others);
    let refused = load_daemon(tmp.path(), &space()).unwrap_err();
    assert!(refused.contains("plane system user"), "{refused}");
    match init(tmp.path(), &space(), "https://idp.example.com/").unwrap() {
        InitOutcome::Kept { kept, added, .. } => {
            assert_eq!(added, ["system-user.json"]);
            assert_eq!(kept.len(), 7);
        }
        other => panic!("expected Kept, got {other:?}"),
    }
    assert_eq!(snapshot_of(&dir, &others), before, "nothing else changed");
    let mode = std::fs::metadata(dir.join("system-user.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let daemon = load_daemon(tmp.path(), &space()).unwrap();
    let broker = load_broker(tmp.path(), &space()).unwrap();
    daemon.check_broker(&broker).unwrap();
}

#[test]
fn concurrent_threads_converge_on_one_trust_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let barrier = std::sync::Barrier::new(4);
    let outcomes: Vec<InitOutcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    init(&root, &space(), IDP).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners = outcomes
        .iter()
        .filter(|o| matches!(o, InitOutcome::Created { .. }))
        .count();
    assert_eq!(winners, 1, "{outcomes:?}");
    assert_eq!(fs::read_dir(root.join("auth")).unwrap().count(), 1);
    load_daemon(&root, &space()).unwrap();
}

/// The child half of the process test: runs `init` in the root its parent names.
#[test]
fn child_init_when_asked() {
    if let Some(root) = std::env::var_os(CHILD_ROOT_ENV) {
        let outcome = init(Path::new(&root), &space(), IDP).unwrap();
        println!(
            "CHILD-OUTCOME {}",
            matches!(outcome, InitOutcome::Created { .. })
        );
    }
}

#[test]
fn concurrent_processes_converge_on_one_trust_root() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "child_init_when_asked", "--nocapture"])
                .env(CHILD_ROOT_ENV, tmp.path())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut created = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("CHILD-OUTCOME"), "{text}");
        created += usize::from(text.contains("CHILD-OUTCOME true"));
    }
    assert_eq!(created, 1);
    load_daemon(tmp.path(), &space()).unwrap();
}

#[test]
fn init_refuses_to_re_point_the_idp_and_validates_the_url_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = created(tmp.path());
    let e = init(tmp.path(), &space(), "https://other.example").unwrap_err();
    assert_eq!(
        e,
        format!(
            "space main is pinned to IdP https://idp.example.com; re-pointing it to \
             https://other.example would re-key every owner, so init refuses (remove {} to \
             start over)",
            dir.display()
        )
    );
    let fresh = tempfile::tempdir().unwrap();
    let e = init(fresh.path(), &space(), "http://idp.example.com").unwrap_err();
    assert!(e.contains("not a loopback address literal"), "{e}");
    assert_eq!(
        fs::read_dir(fresh.path()).unwrap().count(),
        0,
        "touched the root"
    );
}

#[test]
fn missing_material_is_one_sentence_and_an_incomplete_dir_is_never_regenerated() {
    let tmp = tempfile::tempdir().unwrap();
    let e = load_daemon(tmp.path(), &space()).unwrap_err();
    assert_eq!(
        e,
        format!(
            "the trust root of space main is missing (service keys, callout account, issuer \
             keys, owner secret, plane system user, IdP pin under {}); create it with `cotal-authd init --space \
             main --idp URL`",
            space_dir(tmp.path(), &space()).display()
        )
    );
    assert!(load_broker(tmp.path(), &space())
        .unwrap_err()
        .contains("broker JWTs of space main are missing"));

    let dir = created(tmp.path());
    fs::remove_file(dir.join("owner-secret.json")).unwrap();
    fs::remove_file(dir.join("operator/broker.json")).unwrap();
    let e = load_daemon(tmp.path(), &space()).unwrap_err();
    assert!(
        e.starts_with("the trust root of space main is missing (owner secret under"),
        "{e}"
    );
    let e = init(tmp.path(), &space(), IDP).unwrap_err();
    assert!(
        e.contains("is incomplete (missing owner secret, broker JWTs); init never regenerates"),
        "{e}"
    );
    assert!(!dir.join("owner-secret.json").exists());
}

#[test]
fn corrupt_versioned_symlinked_and_widened_files_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = created(tmp.path());
    let issuer = dir.join("issuer.json");
    let good = fs::read(&issuer).unwrap();
    let rewrite = |path: &Path, bytes: &[u8]| {
        fs::remove_file(path).unwrap();
        fs::write(path, bytes).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
    };

    rewrite(&issuer, b"{\"ver\":1,");
    let e = load_daemon(tmp.path(), &space()).unwrap_err();
    assert!(
        e.starts_with(&format!("{} is not valid JSON", issuer.display())),
        "{e}"
    );
    assert!(init(tmp.path(), &space(), IDP)
        .unwrap_err()
        .contains("is not valid JSON"));

    let v2 = String::from_utf8(good.clone())
        .unwrap()
        .replacen("\"ver\": 1", "\"ver\": 2", 1);
    rewrite(&issuer, v2.as_bytes());
    assert_eq!(
        load_daemon(tmp.path(), &space()).unwrap_err(),
        format!(
            "{} has unknown version 2; this build reads version 1",
            issuer.display()
        )
    );

    rewrite(&issuer, &good);
    fs::set_permissions(&issuer, fs::Permissions::from_mode(0o644)).unwrap();
    let e = load_daemon(tmp.path(), &space()).unwrap_err();
    assert!(
        e.starts_with(&format!("{} has mode 0644", issuer.display())),
        "{e}"
    );

    rewrite(&issuer, &good);
    let elsewhere = tmp.path().join("elsewhere.json");
    fs::write(&elsewhere, &good).unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(&issuer).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &issuer).unwrap();
    let e = load_daemon(tmp.path(), &space()).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{} is a symlink; trust-root files must be regular files",
            issuer.display()
        )
    );
    fs::remove_file(&issuer).unwrap();
    fs::create_dir(&issuer).unwrap();
    fs::set_permissions(&issuer, fs::Permissions::from_mode(0o600)).unwrap();
    let e = load_daemon(tmp.path(), &space()).unwrap_err();
    assert!(e.contains("is not a regular file"), "{e}");
    fs::remove_dir(&issuer).unwrap();
    fs::write(&issuer, &good).unwrap();
    fs::set_permissions(&issuer, fs::Permissions::from_mode(0o600)).unwrap();
    load_daemon(tmp.path(), &space()).unwrap();

    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let e = load_daemon(tmp.path(), &space()).unwrap_err();
    assert!(
        e.starts_with(&format!("{} has mode 0755", dir.display())),
        "{e}"
    );
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();

    let moved = tmp.path().join("moved");
    fs::rename(&dir, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &dir).unwrap();
    let e = load_daemon(tmp.path(), &space()).unwrap_err();
    assert!(
        e.starts_with(&format!("{} is a symlink", dir.display())),
        "{e}"
    );
    assert!(init(tmp.path(), &space(), IDP)
        .unwrap_err()
        .contains("is a symlink"));
}

#[test]
fn a_space_dir_from_another_space_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    created(tmp.path());
    let other = SpaceName::parse("other").unwrap();
    let from = space_dir(tmp.path(), &space());
    let to = space_dir(tmp.path(), &other);
    fs::rename(&from, &to).unwrap();
    let e = load_daemon(tmp.path(), &other).unwrap_err();
    assert!(e.contains("belongs to a different space"), "{e}");
    assert!(load_broker(tmp.path(), &other)
        .unwrap_err()
        .contains("belongs to a different space (main), not other"));
}

/// `issuer rotate|prune`'s files: the keys written are the keys a plane re-reads, and the
/// rotation record says when the last rotation was, or why that is unknown.
#[test]
fn the_issuer_keys_and_the_rotation_record_round_trip() {
    use cotal_core::trust::IssuerKey;
    use cotal_io_fs::secrets::FileSecretStore;
    use cotal_io_fs::trust::{last_rotation, read_issuer_keys, record_rotation, write_issuer_keys};

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = created(root);
    let keys = load_daemon(root, &space()).unwrap().issuer().clone();
    let rotated = keys
        .rotated(IssuerKey::from_seed([9; 32]).unwrap())
        .unwrap();
    write_issuer_keys(root, &space(), &rotated).unwrap();
    let store = FileSecretStore::new(root);
    assert_eq!(
        read_issuer_keys(&store, &space()).unwrap().to_bytes(),
        rotated.to_bytes()
    );
    let record = dir.join("issuer-rotation.json");
    assert_eq!(
        last_rotation(root, &space()).unwrap_err(),
        format!(
            "no rotation is recorded at {}, so when the other keys stopped signing is unknown; \
             prune with --force once no bearer they signed can be live",
            record.display()
        )
    );
    record_rotation(root, &space(), 1_796_441_610, rotated.active().kid()).unwrap();
    assert_eq!(last_rotation(root, &space()).unwrap(), 1_796_441_610);
    assert_eq!(fs::metadata(&record).unwrap().mode() & 0o777, 0o600);
    fs::write(&record, b"{}").unwrap();
    assert_eq!(
        last_rotation(root, &space()).unwrap_err(),
        format!("{} is not a rotation record", record.display())
    );
}

/// What `init` says: created, kept unchanged, or kept with what this version added.
#[test]
fn init_says_what_it_did() {
    let dir = PathBuf::from("/r/auth/space.6d61696e");
    let created = InitOutcome::Created { dir: dir.clone() };
    assert_eq!(
        created.said(&space(), IDP),
        "created the trust root of space main under /r/auth/space.6d61696e (IdP \
         https://idp.example.com)"
    );
    let kept = |added: Vec<String>| InitOutcome::Kept {
        dir: dir.clone(),
        kept: vec!["idp.json".into(), "issuer.json".into()],
        added,
    };
    assert_eq!(
        kept(Vec::new()).said(&space(), IDP),
        "kept the trust root of space main under /r/auth/space.6d61696e (idp.json, \
         issuer.json): it exists and verifies, so nothing changed"
    );
    assert_eq!(
        kept(vec!["system-user.json".into()]).said(&space(), IDP),
        "kept the trust root of space main under /r/auth/space.6d61696e (idp.json, \
         issuer.json) and added what this version needs (system-user.json)"
    );
}
