//! The private-file kit every file this crate keeps is written and read through: the trust
//! root, the actor ledger and the plane's state files beside them.
//!
//! * Directories are created 0700 and files 0600: most of them hold a credential (a seed, a
//!   capability), and the rest say which instance a restart is, so no other user may read or
//!   plant them.
//! * A replacing write ([`write_private`]) fills a fresh synced temp file beside its target,
//!   renames it over the target and syncs the directory, so after a crash a reader sees the
//!   old file or the new one, never a torn one, and a write that returned stays written.
//! * A first write ([`create_private`]) publishes a synced temp file with a hard link, which
//!   fails when something is there: of two concurrent creators exactly one wins.
//! * A read ([`open_regular`]) opens without following a symlink and checks the opened
//!   descriptor, so a symlink or another kind of entry planted at a path is refused rather
//!   than read through, and one swapped in between a check and the open cannot slip by.

use std::fs::{self, DirBuilder, File, Metadata, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// How every temp file's name ends, so a directory listing can tell one from a real entry (a
/// leftover of a crashed writer is never read, only clutter).
pub const TEMP_SUFFIX: &str = ".tmp";

/// Distinguishes temp files of concurrent writers within one process (the pid in the name
/// distinguishes processes).
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Creates `dir` and its parents, and forces `dir` to 0700: a state dir an operator created
/// wider beforehand is made private rather than written into as it is.
pub fn ensure_private_dir(dir: &Path) -> Result<(), String> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create the state dir {}: {e}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private (0700): {e}", dir.display()))
}

/// Creates the one directory `dir` 0700 unless a directory is already there (another writer
/// may create it meanwhile). An existing directory is never re-moded: the trust root refuses a
/// widened one instead, since someone else touched it.
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        done => done,
    }
}

/// Makes the entries of `dir` (a rename, a link, a removal) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// [`sync_dir`] of the directory `path` is in.
pub fn sync_parent(path: &Path) -> Result<(), String> {
    let dir = path
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", path.display()))?;
    sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

/// Writes `bytes` to a new 0600 file at `path` (refused when anything is there) and syncs it.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), String> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A fresh synced 0600 temp file beside `path` holding `bytes`:
/// `<name>.<pid>.<seq>`[`TEMP_SUFFIX`].
fn write_temp(path: &Path, bytes: &[u8]) -> Result<PathBuf, String> {
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} names no file", path.display()))?;
    let tmp = path.with_file_name(format!(
        "{}.{}.{}{TEMP_SUFFIX}",
        name.to_string_lossy(),
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    // Only a dead process that had this pid can have left one of this name.
    let _ = fs::remove_file(&tmp);
    write_new(&tmp, bytes).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })?;
    Ok(tmp)
}

/// Replaces `path` with `bytes` atomically and durably (see the module doc).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = write_temp(path, bytes)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    sync_parent(path)
}

/// Publishes `bytes` at `path` only if nothing is there (see the module doc). Returns whether
/// this call created it.
pub fn create_private(path: &Path, bytes: &[u8]) -> Result<bool, String> {
    let tmp = write_temp(path, bytes)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => sync_parent(path).map(|()| true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}

/// Why a file was not read; each caller words it for the file it reads.
#[derive(Debug)]
pub enum Unreadable {
    /// A symlink stands at the path.
    Symlink,
    /// Something other than a regular file stands at the path.
    NotRegular,
    /// The file is larger than the reader's bound (its size).
    TooLarge(u64),
    Io(std::io::Error),
}

/// A regular file opened for reading, with the metadata of the opened descriptor.
#[derive(Debug)]
pub struct Regular {
    file: File,
    meta: Metadata,
}

impl Regular {
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// The whole file, refused when it is larger than `max` bytes (a hostile or corrupted file
    /// must not exhaust memory).
    pub fn read(self, max: u64) -> Result<Vec<u8>, Unreadable> {
        if self.meta.len() > max {
            return Err(Unreadable::TooLarge(self.meta.len()));
        }
        let mut bytes = Vec::new();
        // Bounded again: the file may grow after the size was read.
        self.file
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(Unreadable::Io)?;
        if bytes.len() as u64 > max {
            return Err(Unreadable::TooLarge(bytes.len() as u64));
        }
        Ok(bytes)
    }
}

/// Opens the regular file at `path` without following a symlink; `None` when nothing is there.
pub fn open_regular(path: &Path) -> Result<Option<Regular>, Unreadable> {
    // NONBLOCK: opening a FIFO planted at the path must not hang the reader.
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(Unreadable::Symlink),
        Err(e) => return Err(Unreadable::Io(e.into())),
    };
    let file = File::from(fd);
    let meta = file.metadata().map_err(Unreadable::Io)?;
    if !meta.is_file() {
        return Err(Unreadable::NotRegular);
    }
    Ok(Some(Regular { file, meta }))
}

/// No state file is near this; a larger one is not ours.
const MAX_STATE_BYTES: u64 = 1024 * 1024;

/// Reads one of the plane's state files, refusing a symlink or anything else in its place;
/// `None` when absent.
pub fn read_regular(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let shown = path.display();
    let refused = |why: Unreadable| match why {
        Unreadable::Symlink | Unreadable::NotRegular => format!(
            "{shown} is not a regular file (a symlink or another kind of entry); refusing to \
             read through it"
        ),
        Unreadable::TooLarge(len) => {
            format!("{shown} is {len} bytes, larger than any state file; refusing to read it")
        }
        Unreadable::Io(e) => format!("cannot read {shown}: {e}"),
    };
    match open_regular(path).map_err(refused)? {
        None => Ok(None),
        Some(file) => file.read(MAX_STATE_BYTES).map(Some).map_err(refused),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_write_replaces_atomically_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_private(&path, b"one").unwrap();
        write_private(&path, b"two").unwrap();
        assert_eq!(read_regular(&path).unwrap().unwrap(), b"two");
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_private_create_keeps_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("id.json");
        assert!(create_private(&path, b"first").unwrap());
        assert!(!create_private(&path, b"second").unwrap());
        assert_eq!(read_regular(&path).unwrap().unwrap(), b"first");
    }

    #[test]
    fn a_read_refuses_symlinks_and_other_entries() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(read_regular(&link)
            .unwrap_err()
            .contains("is not a regular file"));
        assert!(read_regular(dir.path())
            .unwrap_err()
            .contains("is not a regular file"));
        assert_eq!(read_regular(&dir.path().join("absent")).unwrap(), None);
    }

    #[test]
    fn a_private_dir_is_forced_to_0700() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a/b");
        fs::create_dir_all(&state).unwrap();
        fs::set_permissions(&state, fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&state).unwrap();
        let mode = fs::metadata(&state).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
