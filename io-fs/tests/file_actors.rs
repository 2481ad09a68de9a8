//! The file-backed actor ledger: permissions, atomic writes, fail-closed reads, and the alias
//! lock across threads and across ledger handles.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cotal_core::actors::{
    ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, Held, MemoryActors, RowSpace, TokenHash,
};
use cotal_core::names::{ActorToken, LifecycleUid, OwnerToken, Principal};
use cotal_io_fs::FileActors;

const OWNER: &str = "u_cccccccccccccccccccccccccc";

fn principal(actor: &str) -> Principal {
    Principal::new(
        OwnerToken::parse(OWNER).unwrap(),
        ActorToken::parse(actor).unwrap(),
    )
}

fn interactive(actor: &str) -> ActorRow {
    ActorRow {
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: ActorToken::parse(actor).unwrap(),
        scope: vec!["spawn".into()],
        allow_subscribe: vec![">".into()],
        allow_publish: vec![">".into()],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(LifecycleUid::mint([1; 20])),
        granted_at: "2023-11-14T22:13:20.000Z".into(),
    }
}

fn managed(actor: &str) -> ActorRow {
    ActorRow {
        scope: vec![],
        allow_subscribe: vec!["general".into()],
        allow_publish: vec![],
        parent: Some(principal("cli")),
        token_hash: Some(TokenHash::parse(&"a".repeat(64)).unwrap()),
        lifecycle_uid: Some(LifecycleUid::mint([2; 20])),
        ..interactive(actor)
    }
}

fn find(l: &dyn ActorLedger, space: RowSpace, actor: &str) -> ActorsOutcome {
    l.execute(&ActorsRequest::Find {
        space,
        principal: principal(actor),
    })
}

fn corrupt(o: ActorsOutcome) -> String {
    match o {
        ActorsOutcome::Corrupt(why) => why,
        other => panic!("expected a fail-closed refusal, got {other:?}"),
    }
}

fn ledger() -> (tempfile::TempDir, FileActors) {
    let dir = tempfile::tempdir().unwrap();
    let l = FileActors::new(dir.path().join("state"));
    (dir, l)
}

#[test]
fn rows_are_0600_files_in_0700_dirs_with_the_reference_bytes() {
    let (_d, l) = ledger();
    assert!(matches!(
        l.execute(&ActorsRequest::GrantInteractive(interactive("cli"))),
        ActorsOutcome::Granted(_)
    ));
    assert!(matches!(
        l.execute(&ActorsRequest::GrantManaged(managed("worker"))),
        ActorsOutcome::Granted(_)
    ));
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(l.root()), 0o700);
    assert_eq!(mode(&l.root().join("actors")), 0o700);
    assert_eq!(mode(&l.root().join("managed-actors")), 0o700);
    let path = l.row_path(RowSpace::Managed, &principal("worker"));
    assert!(path.ends_with("managed-actors/u_cccccccccccccccccccccccccc.worker.json"));
    assert_eq!(mode(&path), 0o600);
    assert_eq!(fs::read(&path).unwrap(), managed("worker").to_file_bytes());
    assert_eq!(
        find(&l, RowSpace::Managed, "worker"),
        ActorsOutcome::Found(Some(Held {
            space: RowSpace::Managed,
            row: managed("worker")
        }))
    );
}

/// The file ledger and the in-memory twin answer the same requests alike.
#[test]
fn the_file_ledger_and_the_memory_twin_agree() {
    let (_d, f) = ledger();
    let m = MemoryActors::new();
    let mut shadow = interactive("worker");
    shadow.lifecycle_uid = Some(LifecycleUid::mint([3; 20]));
    let requests = vec![
        ActorsRequest::GrantManaged(managed("worker")),
        ActorsRequest::GrantInteractive(interactive("cli")),
        ActorsRequest::GrantManaged(managed("worker")),
        ActorsRequest::GrantInteractive(shadow),
        ActorsRequest::FindUnified {
            principal: principal("worker"),
        },
        ActorsRequest::RevokeManagedAt {
            principal: principal("worker"),
            lifecycle_uid: LifecycleUid::mint([9; 20]),
        },
        ActorsRequest::RevokeManagedAt {
            principal: principal("worker"),
            lifecycle_uid: LifecycleUid::mint([2; 20]),
        },
        ActorsRequest::Find {
            space: RowSpace::Managed,
            principal: principal("worker"),
        },
    ];
    for r in &requests {
        let (a, b) = (f.execute(r), m.execute(r));
        // Refusals name their store (a path vs a memory key), so only their kind must agree.
        assert_eq!(
            std::mem::discriminant(&a),
            std::mem::discriminant(&b),
            "{r:?}: {a:?} vs {b:?}"
        );
        if !matches!(a, ActorsOutcome::Refused(_) | ActorsOutcome::Corrupt(_)) {
            assert_eq!(a, b, "{r:?}");
        }
    }
}

#[test]
fn a_symlinked_row_is_refused_naming_the_file() {
    let (d, l) = ledger();
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    let target = d.path().join("elsewhere.json");
    fs::write(&target, interactive("worker").to_file_bytes()).unwrap();
    let path = l.row_path(RowSpace::Interactive, &principal("worker"));
    symlink(&target, &path).unwrap();
    let why = corrupt(find(&l, RowSpace::Interactive, "worker"));
    assert!(why.starts_with(&path.display().to_string()), "{why}");
    assert!(why.contains("must be a regular non-symlink file"), "{why}");
}

#[test]
fn a_non_regular_row_and_a_symlinked_space_are_refused() {
    let (d, l) = ledger();
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    fs::create_dir(l.row_path(RowSpace::Interactive, &principal("worker"))).unwrap();
    assert!(corrupt(find(&l, RowSpace::Interactive, "worker")).contains("regular non-symlink file"));
    let real = d.path().join("real-managed");
    fs::create_dir(&real).unwrap();
    symlink(&real, l.root().join("managed-actors")).unwrap();
    assert!(corrupt(find(&l, RowSpace::Managed, "worker")).contains("must be a real directory"));
}

#[test]
fn a_row_naming_another_principal_is_refused() {
    let (_d, l) = ledger();
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    // Copy cli's row under worker's name.
    let from = l.row_path(RowSpace::Interactive, &principal("cli"));
    fs::copy(
        &from,
        l.row_path(RowSpace::Interactive, &principal("worker")),
    )
    .unwrap();
    let why = corrupt(find(&l, RowSpace::Interactive, "worker"));
    assert!(why.contains("u_cccccccccccccccccccccccccc.worker.json: actor grant principal \"u_cccccccccccccccccccccccccc.cli\" does not match"), "{why}");
}

#[test]
fn bad_grammar_version_and_token_hash_rules_are_refused() {
    let (_d, l) = ledger();
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    let path = l.row_path(RowSpace::Interactive, &principal("cli"));
    let row = String::from_utf8(fs::read(&path).unwrap()).unwrap();
    for (bytes, needle) in [
        ("not json".to_owned(), "unreadable actor grant"),
        (
            row.replace("\"ver\": 1", "\"ver\": 2"),
            "unknown actor-grant version 2",
        ),
        (row.replace("\"scope\"", "\"scopes\""), "unknown field"),
        (
            row.replace(
                "\"grantedAt\"",
                &format!("\"tokenHash\": \"{}\",\n  \"grantedAt\"", "a".repeat(64)),
            ),
            "must not carry an agent token hash",
        ),
        (row.replace(OWNER, "u_nope"), "not a derived owner"),
    ] {
        fs::write(&path, bytes).unwrap();
        let why = corrupt(find(&l, RowSpace::Interactive, "cli"));
        assert!(
            why.starts_with(&path.display().to_string()) && why.contains(needle),
            "wanted {needle:?}: {why}"
        );
    }
    let mpath = l.row_path(RowSpace::Managed, &principal("worker"));
    fs::create_dir_all(mpath.parent().unwrap()).unwrap();
    let without_hash = String::from_utf8(managed("worker").to_file_bytes())
        .unwrap()
        .replace(&"a".repeat(64), "NOTHEX");
    fs::write(&mpath, without_hash).unwrap();
    assert!(
        corrupt(find(&l, RowSpace::Managed, "worker")).contains("missing/corrupted secret hash")
    );
}

/// Crash safety: a writer that died before its rename leaves only a temp file, which no reader
/// ever reads; the row stays the old one, and the next write replaces it whole.
#[test]
fn a_crashed_write_leaves_the_old_row_intact() {
    let (_d, l) = ledger();
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    let path = l.row_path(RowSpace::Interactive, &principal("cli"));
    let torn = path.with_file_name("u_cccccccccccccccccccccccccc.cli.json.4242.0.tmp");
    fs::write(&torn, b"{\"ver\": 1, \"owner\": \"u_ccc").unwrap();
    assert!(
        matches!(find(&l, RowSpace::Interactive, "cli"), ActorsOutcome::Found(Some(Held { ref row, .. })) if *row == interactive("cli"))
    );
    let mut narrowed = interactive("cli");
    narrowed.scope = vec![];
    assert!(matches!(
        l.execute(&ActorsRequest::GrantInteractive(narrowed.clone())),
        ActorsOutcome::Granted(_)
    ));
    assert_eq!(fs::read(&path).unwrap(), narrowed.to_file_bytes());
    let leftovers: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "the row and the dead writer's temp file only: {leftovers:?}"
    );
}

#[test]
fn revoke_at_removes_only_the_named_lifecycle() {
    let (_d, l) = ledger();
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    l.execute(&ActorsRequest::GrantManaged(managed("worker")));
    let at = |n| ActorsRequest::RevokeManagedAt {
        principal: principal("worker"),
        lifecycle_uid: LifecycleUid::mint([n; 20]),
    };
    assert_eq!(l.execute(&at(9)), ActorsOutcome::Revoked(false));
    assert_eq!(l.execute(&at(2)), ActorsOutcome::Revoked(true));
    assert!(!l.row_path(RowSpace::Managed, &principal("worker")).exists());
    assert_eq!(l.execute(&at(2)), ActorsOutcome::Revoked(false));
}

/// The alias lock excludes threads holding their own handles and separate ledger handles over one
/// directory (flock: one open file description per acquisition).
#[test]
fn the_alias_lock_excludes_threads_and_handles_over_one_directory() {
    let (_d, l) = ledger();
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            // Each thread its own FileActors over the same directory, like separate planes.
            let (l, inside) = (FileActors::new(l.root()), Arc::clone(&inside));
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let _g = l.lock_alias(&principal("worker")).unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    std::thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let held = l
        .try_lock_alias(&principal("worker"))
        .unwrap()
        .expect("free after all threads");
    let other_handle = FileActors::new(l.root());
    assert!(
        other_handle
            .try_lock_alias(&principal("worker"))
            .unwrap()
            .is_none(),
        "held by another handle"
    );
    assert!(
        other_handle
            .try_lock_alias(&principal("other"))
            .unwrap()
            .is_some(),
        "another alias is free"
    );
    drop(held);
    assert!(other_handle
        .try_lock_alias(&principal("worker"))
        .unwrap()
        .is_some());
}

/// `actor ls` reads every row as a connect would: rows in principal order, a stray file named
/// as such, a writer's temp file skipped, and each space listed on its own.
#[test]
fn listing_reads_every_row_and_names_stray_files() {
    let (_d, l) = ledger();
    for actor in ["zed", "cli", "amy"] {
        l.execute(&ActorsRequest::GrantInteractive(interactive(actor)));
    }
    assert!(matches!(
        l.execute(&ActorsRequest::GrantManaged(managed("worker"))),
        ActorsOutcome::Granted(_)
    ));
    let dir = l.root().join(RowSpace::Interactive.dir());
    fs::write(dir.join("notes.txt"), "x").unwrap();
    fs::write(dir.join(format!("{OWNER}.amy.json.1.2.tmp")), "partial").unwrap();
    let ActorsOutcome::Listed(rows) = l.execute(&ActorsRequest::List {
        space: RowSpace::Interactive,
    }) else {
        panic!("expected a listing");
    };
    let actors: Vec<_> = rows
        .iter()
        .map(|r| match r {
            Ok(row) => row.actor.as_str().to_owned(),
            Err(why) => why.clone(),
        })
        .collect();
    assert_eq!(actors.len(), 4, "{actors:?}");
    assert!(actors[0].contains("notes.txt") && actors[0].contains("not an actor grant file"));
    assert_eq!(&actors[1..], ["amy", "cli", "zed"]);
    let managed_rows = l.execute(&ActorsRequest::List {
        space: RowSpace::Managed,
    });
    assert!(matches!(managed_rows, ActorsOutcome::Listed(rows) if rows.len() == 1));
}

/// The operator's revoke removes an interactive row, reports a second revoke as nothing to
/// remove, and refuses to touch a managed agent's row.
#[test]
fn interactive_revoke_never_removes_a_managed_row() {
    let (_d, l) = ledger();
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    let revoke = |actor| ActorsRequest::RevokeInteractive {
        principal: principal(actor),
    };
    assert_eq!(l.execute(&revoke("cli")), ActorsOutcome::Revoked(true));
    assert_eq!(l.execute(&revoke("cli")), ActorsOutcome::Revoked(false));
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    l.execute(&ActorsRequest::GrantManaged(managed("worker")));
    match l.execute(&revoke("worker")) {
        ActorsOutcome::Refused(why) => assert!(why.contains("managed agent"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(matches!(
        find(&l, RowSpace::Managed, "worker"),
        ActorsOutcome::Found(Some(_))
    ));
}

/// The serving lock: one server at a time, seen by every other handle over the directory, gone
/// with its holder, and never carried by a copy of the directory (a copied ledger is not the
/// one its plane serves).
#[test]
fn the_serving_lock_is_held_by_one_server_and_never_by_a_copy() {
    let (d, l) = ledger();
    l.execute(&ActorsRequest::GrantInteractive(interactive("cli")));
    let other = FileActors::new(l.root());
    assert!(!other.is_served().unwrap(), "nobody serves a fresh ledger");
    let serving = l.serve().unwrap().expect("the first server takes it");
    assert!(other.is_served().unwrap());
    assert!(
        other.serve().unwrap().is_none(),
        "a second server is refused"
    );
    // Asking twice at once never makes the ledger look unserved to either asker.
    assert!(other.is_served().unwrap() && l.is_served().unwrap());

    let copy = d.path().join("copy");
    copy_tree(l.root(), &copy);
    let copied = FileActors::new(&copy);
    assert!(
        copied.root().join("locks/served.lock").exists(),
        "the copy carries the lock file"
    );
    assert!(!copied.is_served().unwrap(), "but not the lock");

    drop(serving);
    assert!(!other.is_served().unwrap(), "the lock goes with its holder");
    assert!(other.serve().unwrap().is_some());
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}
