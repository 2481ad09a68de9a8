//! Which actor ledger a state root's plane serves, and where the operator's `actor` verbs write.
//!
//! A plane serves the ledger of its own state root (`auth/space.<hex>/actors/` and
//! `managed-actors/`) unless `up --ledger-dir DIR` names the state root of the plane it stands
//! by on this host. The standby then reads the active's ledger files themselves, fresh per call,
//! so every grant, revoke, re-grant and retirement the active acknowledged is what the standby
//! serves when it takes over. A copy never is: it diverges at the active's next revoke, and a
//! failover would silently undo that revoke.
//!
//! The choice is recorded in the plane's own state root (`space.<hex>/actor-ledger.json`), so
//! that an `actor` verb aimed at that state root is refused with the one to use (its rows would
//! land in a ledger nobody serves), and a later `up` of it without the flag is refused rather
//! than quietly serving the stale rows beside it.
//!
//! A space created with `init --ledger kv` keeps its ledger in the replicated
//! `cotal_actors_<space>` bucket instead ([`LedgerHome::Replicated`]): every plane of the space,
//! on any host, serves the same rows. The trust root says so (`space.<hex>/ledger-kind.json`),
//! so a copy of it on a standby's host says so too.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::{files, trust, FileActors, ServingLock};
use cotal_core::actors::RowSpace;
use cotal_core::names::SpaceName;
use cotal_core::trust::DaemonMaterial;
use serde_json::{json, Map, Value};

/// The record's file, beside the instance identity.
const RECORD_FILE: &str = "actor-ledger.json";
/// The trust root's record of a replicated ledger; absent for the files of a state dir.
const KIND_FILE: &str = "ledger-kind.json";
/// Its one content.
const KIND_REPLICATED: &[u8] = b"{\"v\":1,\"ledger\":\"kv\"}\n";

/// Where a plane's actor ledger lives.
#[derive(Debug, Clone)]
pub enum LedgerHome {
    /// The files of a state dir on this host.
    Files(FileActors),
    /// The space's replicated `cotal_actors_<space>` bucket.
    Replicated,
}

impl LedgerHome {
    /// Takes the serving lock: the files' (`None` while another process on this host holds
    /// it), or nothing to hold for the replicated ledger.
    pub fn serve(&self) -> Result<Option<ServingLock>, String> {
        match self {
            LedgerHome::Files(files) => files.serve(),
            LedgerHome::Replicated => Ok(Some(ServingLock::replicated())),
        }
    }

    /// Whether a plane serves this ledger now, as a standby may trust it: the files' serving
    /// lock; for the replicated ledger always, since every plane serves the same rows.
    pub fn is_served(&self) -> Result<bool, String> {
        match self {
            LedgerHome::Files(files) => files.is_served(),
            LedgerHome::Replicated => Ok(true),
        }
    }

    /// Where the ledger is, for the operator.
    pub fn describe(&self) -> String {
        match self {
            LedgerHome::Files(files) => files.root().display().to_string(),
            LedgerHome::Replicated => "the space's replicated bucket".to_owned(),
        }
    }
}

/// Records in the trust root of `space` under `root` that its ledger is replicated
/// (`init --ledger kv`). Create-only: a space's ledger kind is chosen once, and a root whose
/// files already hold rows is refused (they would be left behind, unserved).
pub fn record_replicated(root: &Path, space: &SpaceName) -> Result<(), String> {
    if replicated(root, space)? {
        return Ok(());
    }
    let rows = own(root, space);
    let held = [RowSpace::Interactive, RowSpace::Managed]
        .into_iter()
        .any(|kind| {
            fs::read_dir(rows.root().join(kind.dir())).is_ok_and(|mut d| d.next().is_some())
        });
    if held {
        return Err(format!(
            "state dir {} already holds actor rows in files; a replicated ledger would leave              them unserved - grant them again after starting from a fresh state dir",
            root.display()
        ));
    }
    files::create_private(&kind_path(root, space), KIND_REPLICATED).map(|_| ())
}

/// Whether the trust root of `space` under `root` keeps the ledger replicated. A record that
/// is not the one this build writes is refused, naming the file.
pub fn replicated(root: &Path, space: &SpaceName) -> Result<bool, String> {
    let path = kind_path(root, space);
    match files::read_regular(&path)? {
        None => Ok(false),
        Some(bytes) if bytes == KIND_REPLICATED => Ok(true),
        Some(_) => Err(format!(
            "{} is not a ledger kind record (expected {}); fix it or delete it",
            path.display(),
            String::from_utf8_lossy(KIND_REPLICATED).trim_end()
        )),
    }
}

fn kind_path(root: &Path, space: &SpaceName) -> PathBuf {
    trust::space_dir(root, space).join(KIND_FILE)
}
/// The one version of the record this build writes and reads.
const VERSION: u64 = 1;

/// Where a state root records the ledger its plane serves.
pub fn record_path(root: &Path, space: &SpaceName) -> PathBuf {
    root.join(trust::space_segment(space)).join(RECORD_FILE)
}

/// The ledger the plane of `root` serves. `ledger_dir` is `up --ledger-dir`: the state root of
/// the active plane on this host, which must hold the same trust root as `root` (`material`)
/// and must not itself serve another's ledger. Naming it records it; naming `root` itself (or
/// nothing, on a root that never named another) serves `root`'s own ledger. Errors are one
/// sentence.
pub fn for_plane(
    root: &Path,
    space: &SpaceName,
    ledger_dir: Option<&Path>,
    material: &DaemonMaterial,
) -> Result<LedgerHome, String> {
    if replicated(root, space)? {
        return match ledger_dir {
            None => Ok(LedgerHome::Replicated),
            Some(_) => Err(format!(
                "space {space} keeps its actor ledger replicated ({}): every plane of it serves                  the same rows, so a standby needs no --ledger-dir",
                kind_path(root, space).display()
            )),
        };
    }
    files_for_plane(root, space, ledger_dir, material).map(LedgerHome::Files)
}

fn files_for_plane(
    root: &Path,
    space: &SpaceName,
    ledger_dir: Option<&Path>,
    material: &DaemonMaterial,
) -> Result<FileActors, String> {
    let record = record_path(root, space);
    let recorded = read_record(&record)?;
    let Some(dir) = ledger_dir else {
        return match recorded {
            None => Ok(own(root, space)),
            Some(other) => Err(format!(
                "state dir {} serves the actor ledger of state dir {} (recorded in {}); start \
                 it with --ledger-dir {}, or delete that file to serve its own ledger",
                root.display(),
                other.display(),
                record.display(),
                other.display()
            )),
        };
    };
    let canonical = |path: &Path| {
        fs::canonicalize(path).map_err(|e| {
            format!(
                "--ledger-dir {}: cannot be read ({e}); name the active plane's --state-dir",
                path.display()
            )
        })
    };
    let (dir, here) = (canonical(dir)?, canonical(root)?);
    if dir == here {
        remove_record(&record)?;
        return Ok(own(root, space));
    }
    let theirs = trust::load_daemon(&dir, space).map_err(|why| {
        format!(
            "--ledger-dir {} is not a state dir of space {space} ({why}); name the active \
             plane's --state-dir",
            dir.display()
        )
    })?;
    if theirs.data_account() != material.data_account() {
        return Err(format!(
            "--ledger-dir {} holds another trust root of space {space} (its data account is \
             {}, this state dir's is {}); name the --state-dir of the plane this one stands by",
            dir.display(),
            theirs.data_account(),
            material.data_account()
        ));
    }
    if let Some(further) = read_record(&record_path(&dir, space))? {
        return Err(format!(
            "--ledger-dir {} serves the actor ledger of state dir {} itself; name that one",
            dir.display(),
            further.display()
        ));
    }
    if recorded.as_deref() != Some(dir.as_path()) {
        let doc = json!({"v": VERSION, "ledgerDir": dir.to_string_lossy()});
        files::ensure_private_dir(record.parent().unwrap_or(root))?;
        files::write_private(&record, format!("{doc:#}\n").as_bytes())?;
    }
    Ok(own(&dir, space))
}

/// The ledger the operator's `actor` verbs on `root` write: the replicated one when the trust
/// root says so, else its own files, unless its plane serves another state root's, which is
/// refused naming that one.
pub fn for_verbs(root: &Path, space: &SpaceName) -> Result<LedgerHome, String> {
    if replicated(root, space)? {
        return Ok(LedgerHome::Replicated);
    }
    files_for_verbs(root, space).map(LedgerHome::Files)
}

fn files_for_verbs(root: &Path, space: &SpaceName) -> Result<FileActors, String> {
    let record = record_path(root, space);
    match read_record(&record)? {
        None => Ok(own(root, space)),
        Some(other) => Err(format!(
            "the plane of state dir {} serves the actor ledger of state dir {} (recorded in \
             {}); run this verb with --state-dir {}",
            root.display(),
            other.display(),
            record.display(),
            other.display()
        )),
    }
}

/// The ledger under `root`: the directory its trust root lives in.
fn own(root: &Path, space: &SpaceName) -> FileActors {
    FileActors::new(trust::space_dir(root, space))
}

/// The state root a record names; `None` when there is no record. A record that does not
/// parse is refused, naming the file: guessing which ledger to serve is never safe.
fn read_record(path: &Path) -> Result<Option<PathBuf>, String> {
    let Some(bytes) = files::read_regular(path)? else {
        return Ok(None);
    };
    let refused = || {
        format!(
            "{} is not a ledger record (expected {{\"v\":{VERSION},\"ledgerDir\":\"/abs/path\"}}); \
             fix it or delete it",
            path.display()
        )
    };
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| refused())?;
    let map: &Map<String, Value> = value.as_object().ok_or_else(refused)?;
    let dir = match (map.len(), map.get("v"), map.get("ledgerDir")) {
        (2, Some(v), Some(Value::String(dir))) if v.as_u64() == Some(VERSION) => dir,
        _ => return Err(refused()),
    };
    let dir = PathBuf::from(dir);
    if dir.is_absolute() {
        Ok(Some(dir))
    } else {
        Err(refused())
    }
}

fn remove_record(path: &Path) -> Result<(), String> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(format!("cannot remove {}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn space() -> SpaceName {
        SpaceName::parse("t1").unwrap()
    }

    fn record(root: &Path, bytes: &[u8]) -> PathBuf {
        let path = record_path(root, &space());
        files::ensure_private_dir(path.parent().unwrap()).unwrap();
        files::write_private(&path, bytes).unwrap();
        path
    }

    #[test]
    fn verbs_write_the_own_ledger_until_the_root_serves_another() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = files_for_verbs(dir.path(), &space()).unwrap();
        assert_eq!(ledger.root(), trust::space_dir(dir.path(), &space()));

        record(dir.path(), br#"{"v":1,"ledgerDir":"/srv/cotal/a"}"#);
        let refused = for_verbs(dir.path(), &space()).unwrap_err();
        assert!(
            refused.ends_with("run this verb with --state-dir /srv/cotal/a"),
            "{refused}"
        );
    }

    #[test]
    fn a_record_that_does_not_parse_is_refused_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        for bytes in [
            &b"not json"[..],
            br#"{"v":2,"ledgerDir":"/srv/a"}"#,
            br#"{"v":1,"ledgerDir":"relative/a"}"#,
            br#"{"v":1,"ledgerDir":"/srv/a","extra":true}"#,
            br#"{"v":1}"#,
        ] {
            let path = record(dir.path(), bytes);
            let refused = for_verbs(dir.path(), &space()).unwrap_err();
            assert!(
                refused.starts_with(&format!("{} is not a ledger record", path.display())),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_bare_up_of_a_root_that_serves_another_ledger_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        trust::init(dir.path(), &space(), "http://127.0.0.1:4190").unwrap();
        let material = trust::load_daemon(dir.path(), &space()).unwrap();
        record(dir.path(), br#"{"v":1,"ledgerDir":"/srv/cotal/a"}"#);
        let refused = for_plane(dir.path(), &space(), None, &material).unwrap_err();
        assert!(
            refused.contains("start it with --ledger-dir /srv/cotal/a"),
            "{refused}"
        );
        // Naming the root itself serves its own ledger again and forgets the other.
        let own = files_for_plane(dir.path(), &space(), Some(dir.path()), &material).unwrap();
        assert_eq!(own.root(), trust::space_dir(dir.path(), &space()));
        assert!(!record_path(dir.path(), &space()).exists());
        for_verbs(dir.path(), &space()).unwrap();
    }

    #[test]
    fn a_replicated_ledger_is_recorded_once_in_the_trust_root_and_needs_no_ledger_dir() {
        let dir = tempfile::tempdir().unwrap();
        trust::init(dir.path(), &space(), "http://127.0.0.1:4190").unwrap();
        let material = trust::load_daemon(dir.path(), &space()).unwrap();
        assert!(!replicated(dir.path(), &space()).unwrap());
        record_replicated(dir.path(), &space()).unwrap();
        record_replicated(dir.path(), &space()).unwrap();
        assert!(replicated(dir.path(), &space()).unwrap());
        assert!(matches!(
            for_verbs(dir.path(), &space()).unwrap(),
            LedgerHome::Replicated
        ));
        assert!(matches!(
            for_plane(dir.path(), &space(), None, &material).unwrap(),
            LedgerHome::Replicated
        ));
        let refused = for_plane(dir.path(), &space(), Some(dir.path()), &material).unwrap_err();
        assert!(
            refused.ends_with("so a standby needs no --ledger-dir"),
            "{refused}"
        );
        files::write_private(
            &kind_path(dir.path(), &space()),
            b"{\"v\":1,\"ledger\":\"files\"}",
        )
        .unwrap();
        assert!(replicated(dir.path(), &space())
            .unwrap_err()
            .contains("is not a ledger kind record"));
    }

    #[test]
    fn a_state_dir_whose_files_hold_rows_is_not_made_replicated() {
        let dir = tempfile::tempdir().unwrap();
        trust::init(dir.path(), &space(), "http://127.0.0.1:4190").unwrap();
        let rows = trust::space_dir(dir.path(), &space()).join("actors");
        files::ensure_private_dir(&rows).unwrap();
        files::write_private(&rows.join("u_a.b.json"), b"{}").unwrap();
        let refused = record_replicated(dir.path(), &space()).unwrap_err();
        assert!(
            refused.contains("already holds actor rows in files"),
            "{refused}"
        );
        assert!(!replicated(dir.path(), &space()).unwrap());
    }
}
