//! The file-backed actor ledger.
//!
//! Durability and atomicity: a row is written to a fresh `0600` temp file beside it, fsynced,
//! renamed over the row, and the directory fsynced, so after a crash a reader sees the old row
//! or the new one, never a torn one (a leftover temp file is never read). Directories are
//! created `0700`.
//!
//! Fail-closed reads: a row space that is not a real directory, a row that is a symlink or not
//! a regular file (opened without following a symlink and checked on the opened descriptor, so
//! nothing swapped in slips by), unparseable bytes, a foreign principal, a bad grammar — each is a
//! sentence naming the file, and the actor is denied.
//!
//! The alias lock is an exclusive `flock` on `locks/<owner>.<actor>.lock`. `flock` locks belong
//! to open file descriptions, and every acquisition opens the file anew, so two threads of one
//! process exclude each other exactly as two processes sharing the directory do.
//!
//! The serving lock ([`FileActors::serve`]) is an exclusive `flock` on `locks/served.lock`, held
//! by the plane that serves this ledger for as long as it does. It is the one witness a standby
//! can trust that the ledger it is about to serve is the live plane's own: the kernel drops it
//! with its holder, a copied directory carries the file but never the lock, and a lock taken on
//! another host is not seen here ([`FileActors::is_served`]).

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use cotal_core::actors::row::{file_name, principal_of_file};
use cotal_core::actors::store::{execute, RowStore, StoreError};
use cotal_core::actors::{ActorLedger, ActorsOutcome, ActorsRequest, AliasGuard, RowSpace};
use cotal_core::names::Principal;

use crate::files::{self, Unreadable, TEMP_SUFFIX};

/// Rows larger than this are not rows (a hostile or corrupted file must not exhaust memory).
const MAX_ROW_BYTES: u64 = 64 * 1024;
const LOCK_DIR: &str = "locks";
/// The serving lock's file under [`LOCK_DIR`]; no alias key ends in `served` alone, so it never
/// shares a file with an alias lock.
const SERVED_LOCK: &str = "served.lock";
/// The file a lookup of a missing row reads instead (`Files::read_decoy`), beside the row
/// directories and never inside one, so no listing takes it for a grant.
const DECOY_FILE: &str = "decoy-row";
/// The decoy's size: a managed row's, give or take.
const DECOY_BYTES: usize = 320;

/// The actor ledger in a directory (the plane's state dir for its space).
#[derive(Debug, Clone)]
pub struct FileActors {
    root: PathBuf,
}

impl FileActors {
    /// A ledger rooted at `root`. Nothing is created until the first write or lock.
    pub fn new(root: impl Into<PathBuf>) -> FileActors {
        FileActors { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file a row lives in.
    pub fn row_path(&self, space: RowSpace, principal: &Principal) -> PathBuf {
        self.root.join(space.dir()).join(file_name(principal))
    }

    /// Takes the serving lock if no other process holds it: `None` while another plane on this
    /// host serves the ledger. Held until the guard drops (or its process ends).
    pub fn serve(&self) -> Result<Option<ServingLock>, String> {
        let file = self.open_lock(SERVED_LOCK)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(ServingLock { _held: Some(file) })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(format!(
                "{}: cannot take the serving lock: {e}",
                self.served_path().display()
            )),
        }
    }

    /// True while a plane on this host holds the serving lock. Asked with a shared lock, which
    /// two askers can hold at once, so a question never answers another question.
    pub fn is_served(&self) -> Result<bool, String> {
        let file = self.open_lock(SERVED_LOCK)?;
        match file.try_lock_shared() {
            // Dropping the file releases the shared lock at once.
            Ok(()) => Ok(false),
            Err(TryLockError::WouldBlock) => Ok(true),
            Err(TryLockError::Error(e)) => Err(format!(
                "{}: cannot ask the serving lock: {e}",
                self.served_path().display()
            )),
        }
    }

    fn served_path(&self) -> PathBuf {
        self.root.join(LOCK_DIR).join(SERVED_LOCK)
    }

    fn lock_file(&self, alias: &Principal) -> Result<File, String> {
        self.open_lock(&format!("{}.lock", alias.key()))
    }

    fn open_lock(&self, name: &str) -> Result<File, String> {
        let dir = self.root.join(LOCK_DIR);
        ensure_dir(&self.root).and_then(|()| ensure_dir(&dir))?;
        let path = dir.join(name);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("{}: cannot open the lock: {e}", path.display()))
    }
}

/// The serving lock of a ledger, held while this value lives.
#[derive(Debug)]
pub struct ServingLock {
    /// `None` for a replicated ledger, which no host lock can guard: every plane of the space
    /// serves the same rows, and the plane claim alone says which one writes.
    _held: Option<File>,
}

impl ServingLock {
    /// The serving "lock" of a replicated ledger: nothing to hold.
    pub fn replicated() -> ServingLock {
        ServingLock { _held: None }
    }
}

/// Creates `dir` `0700` if missing; refuses a symlink or non-directory in its place.
fn ensure_dir(dir: &Path) -> Result<(), String> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "{}: actor ledger directory must be a real directory, not a symlink or file",
            dir.display()
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            files::create_dir(dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))
        }
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

struct Files<'a>(&'a FileActors);

impl Files<'_> {
    /// The space directory if it exists; a symlink or non-directory there is corruption.
    fn space_dir(&self, space: RowSpace) -> Result<Option<PathBuf>, StoreError> {
        let dir = self.0.root.join(space.dir());
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => Ok(Some(dir)),
            Ok(_) => Err(StoreError::Corrupt(format!(
                "{}: actor row space must be a real directory, not a symlink or non-directory",
                dir.display()
            ))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Unavailable(format!("{}: {e}", dir.display()))),
        }
    }
}

impl Files<'_> {
    /// Reads the decoy in place of a missing row: the open, stat and read a present row costs,
    /// so the time of a lookup does not tell whether its row exists (the agent exchange's
    /// equal-time refusals, core's `authorize_agent_exchange`, whose `agent_refusal` bench
    /// measured a missing row's cheaper `ENOENT` as the one difference left). Written at the
    /// first miss; a failure changes only the timing, never an answer, so it is ignored.
    fn read_decoy(&self) {
        let path = self.0.root.join(DECOY_FILE);
        match files::open_regular(&path) {
            Ok(Some(decoy)) => {
                let _ = std::hint::black_box(decoy.read(MAX_ROW_BYTES));
            }
            Ok(None) => {
                let _ = files::create_private(&path, &[b' '; DECOY_BYTES]);
            }
            Err(_) => {}
        }
    }
}

impl RowStore for Files<'_> {
    fn load(
        &mut self,
        space: RowSpace,
        principal: &Principal,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        if self.space_dir(space)?.is_none() {
            self.read_decoy();
            return Ok(None);
        }
        let path = self.0.row_path(space, principal);
        let shown = path.display();
        let not_regular = || {
            StoreError::Corrupt(format!(
                "{shown}: actor grant must be a regular non-symlink file - fix or remove the row; \
                 a broken row denies its actor"
            ))
        };
        let unreadable = |why| match why {
            Unreadable::Symlink | Unreadable::NotRegular => not_regular(),
            Unreadable::TooLarge(len) => StoreError::Corrupt(format!(
                "{shown}: actor grant is {len} bytes, larger than any row ({MAX_ROW_BYTES})"
            )),
            Unreadable::Io(e) => StoreError::Unavailable(format!("{shown}: {e}")),
        };
        match files::open_regular(&path).map_err(unreadable)? {
            None => {
                self.read_decoy();
                Ok(None)
            }
            Some(row) => row.read(MAX_ROW_BYTES).map(Some).map_err(unreadable),
        }
    }

    fn store(
        &mut self,
        space: RowSpace,
        principal: &Principal,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let dir = self.0.root.join(space.dir());
        ensure_dir(&self.0.root)
            .and_then(|()| ensure_dir(&dir))
            .map_err(StoreError::Unavailable)?;
        let path = self.0.row_path(space, principal);
        files::write_private(&path, bytes).map_err(StoreError::Unavailable)
    }

    fn remove(&mut self, space: RowSpace, principal: &Principal) -> Result<bool, StoreError> {
        let Some(dir) = self.space_dir(space)? else {
            return Ok(false);
        };
        let path = self.0.row_path(space, principal);
        match fs::remove_file(&path) {
            Ok(()) => files::sync_dir(&dir)
                .map(|()| true)
                .map_err(|e| StoreError::Unavailable(format!("{}: {e}", dir.display()))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StoreError::Unavailable(format!("{}: {e}", path.display()))),
        }
    }

    fn principals(
        &mut self,
        space: RowSpace,
    ) -> Result<Vec<Result<Principal, String>>, StoreError> {
        let Some(dir) = self.space_dir(space)? else {
            return Ok(Vec::new());
        };
        let unavailable =
            |e: std::io::Error| StoreError::Unavailable(format!("{}: {e}", dir.display()));
        let mut names = Vec::new();
        for entry in fs::read_dir(&dir).map_err(unavailable)? {
            names.push(entry.map_err(unavailable)?.file_name());
        }
        names.sort();
        Ok(names
            .into_iter()
            // A writer's temp file is never a row: it is renamed into place or removed.
            .filter(|name| !name.to_string_lossy().ends_with(TEMP_SUFFIX))
            .map(|name| {
                let shown = name.to_string_lossy();
                principal_of_file(&shown).ok_or_else(|| {
                    format!(
                        "{}: not an actor grant file (<owner>.<actor>.json) - remove it",
                        dir.join(&name).display()
                    )
                })
            })
            .collect())
    }

    fn describe(&self, space: RowSpace, principal: &Principal) -> String {
        self.0.row_path(space, principal).display().to_string()
    }
}

impl ActorLedger for FileActors {
    fn execute(&self, request: &ActorsRequest) -> ActorsOutcome {
        execute(&mut Files(self), request)
    }

    fn lock_alias(&self, alias: &Principal) -> Result<AliasGuard, String> {
        let file = self.lock_file(alias)?;
        file.lock()
            .map_err(|e| format!("cannot lock alias {}: {e}", alias.key()))?;
        Ok(AliasGuard::new(alias.clone(), Box::new(file)))
    }

    fn try_lock_alias(&self, alias: &Principal) -> Result<Option<AliasGuard>, String> {
        let file = self.lock_file(alias)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(AliasGuard::new(alias.clone(), Box::new(file)))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(format!("cannot lock alias {}: {e}", alias.key())),
        }
    }
}
