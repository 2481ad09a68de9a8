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
//! * A write below a state root ([`ensure_private_dir_under`], [`check_replaceable`]) refuses
//!   a symlinked directory on the way or a symlink at the file, so nothing is written through
//!   a link planted into the tree; [`remove_stale_temps`] clears what a killed writer left.
//! * A state root ([`check_state_root`]) that is a symlink or writable by group or others is
//!   refused: anyone who can write there can plant the files every check above guards.

use std::fs::{self, DirBuilder, File, Metadata, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// How every temp file's name ends, so a directory listing can tell one from a real entry (a
/// leftover of a crashed writer is never read, only clutter).
pub const TEMP_SUFFIX: &str = ".tmp";

/// Age past which a temp file cannot belong to a running write (one takes milliseconds), so
/// [`remove_stale_temps`] removes it whatever pid its name carries.
pub const STALE_TEMP_AFTER: Duration = Duration::from_secs(3600);

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

/// Creates `dir` below `base` one component at a time (each new one 0700) and forces `dir` to
/// 0700, refusing a component that is a symlink or not a directory: a link planted anywhere
/// in the tree would otherwise carry the write (a credential) to wherever it points. `dir`
/// must be `base` joined with plain names; `base` itself is the caller's to judge (see
/// [`check_state_root`]). The components below `base` are 0700 and ours, so no other user can
/// swap one between this check and the write.
pub fn ensure_private_dir_under(base: &Path, dir: &Path) -> Result<(), String> {
    let below = dir.strip_prefix(base).map_err(|_| {
        format!(
            "{} is not below {}; refusing to write there",
            dir.display(),
            base.display()
        )
    })?;
    let mut at = base.to_path_buf();
    for component in below.components() {
        let Component::Normal(name) = component else {
            return Err(format!(
                "{} is not a plain path below {}; refusing to write there",
                dir.display(),
                base.display()
            ));
        };
        at.push(name);
        create_dir(&at).or_else(|e| match e.kind() {
            // Something that is not a directory is there: judged just below.
            ErrorKind::AlreadyExists => Ok(()),
            _ => Err(format!("cannot create {}: {e}", at.display())),
        })?;
        let meta = fs::symlink_metadata(&at)
            .map_err(|e| format!("{} cannot be inspected: {e}", at.display()))?;
        if meta.file_type().is_symlink() {
            return Err(write_through(&at));
        }
        if !meta.is_dir() {
            return Err(format!(
                "{} is not a directory; refusing to write below it",
                at.display()
            ));
        }
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private (0700): {e}", dir.display()))
}

/// Refuses a symlink or another non-regular entry at `path` before a write replaces it; an
/// absent path passes. A replacing write would swap a planted link for a regular file without
/// anyone noticing; the caller says so instead.
pub fn check_replaceable(path: &Path) -> Result<(), String> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(write_through(path)),
        Ok(meta) if !meta.is_file() => Err(format!(
            "{} is not a regular file; refusing to replace it",
            path.display()
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{} cannot be inspected: {e}", path.display())),
    }
}

/// The refusal of a write that would go through the symlink at `path`.
fn write_through(path: &Path) -> String {
    format!(
        "{} is a symlink; refusing to write through it (remove it, and check who planted it)",
        path.display()
    )
}

/// Refuses a state root that is a symlink or writable by group or others; an absent root
/// passes (whoever reads from it refuses the missing material in its own words). Everything
/// below the root is 0700 and checked on its own, but a root others can write lets them
/// rename those dirs away and plant their own, and a symlinked root is a tree someone else
/// may control.
pub fn check_state_root(root: &Path) -> Result<(), String> {
    // Rebuilt from its components: a trailing slash would make the lookup follow a symlink.
    let root: PathBuf = root.components().collect();
    match fs::symlink_metadata(&root) {
        Ok(meta) if meta.file_type().is_symlink() => Err(format!(
            "the state root {} is a symlink; pass the directory it points to as --state-dir \
             (check who made the link first)",
            root.display()
        )),
        Ok(meta) if !meta.is_dir() => Err(format!(
            "the state root {} is not a directory",
            root.display()
        )),
        Ok(meta) if meta.mode() & 0o022 != 0 => Err(format!(
            "the state root {} has mode {:04o}, writable by other users who could plant the \
             plane's files there; check who changed it, then `chmod go-w {}`",
            root.display(),
            meta.mode() & 0o7777,
            root.display()
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "the state root {} cannot be inspected: {e}",
            root.display()
        )),
    }
}

/// True while process `pid` runs (or runs as another user, which signalling may not reach).
pub fn pid_alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|p| match rustix::process::test_kill_process(p) {
            Ok(()) | Err(Errno::PERM) => true,
            Err(_) => false,
        })
}

/// The pid in a temp file's name (`<name>.<pid>.<seq>`[`TEMP_SUFFIX`]), when it is one.
fn temp_pid(name: &str) -> Option<u32> {
    let mut parts = name.strip_suffix(TEMP_SUFFIX)?.rsplitn(3, '.');
    let seq = parts.next()?;
    let pid = parts.next()?;
    let base = parts.next()?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if base.is_empty() || !numeric(seq) {
        return None;
    }
    pid.parse().ok().filter(|_| numeric(pid))
}

/// Removes the temp files a killed writer left in `dir` (a writer killed between its temp file
/// and the rename leaves one holding what it was writing, a credential included): those whose
/// pid no longer runs, and those older than `older_than`, which no write takes (the pid may
/// have been reused). A live writer's temp file is kept. Returns what it removed; best effort,
/// since a leftover is never read and clearing it must not block the write that follows.
pub fn remove_stale_temps(dir: &Path, older_than: Duration) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_pid) else {
            continue;
        };
        // `DirEntry::metadata` does not follow a symlink: only regular files are ours.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > older_than);
        if meta.is_file() && (old || !pid_alive(pid)) && fs::remove_file(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
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

    #[test]
    fn a_write_below_a_root_refuses_symlinked_components() {
        let base = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let root = base.path();
        ensure_private_dir_under(root, &root.join("a/b")).unwrap();
        let mode = fs::metadata(root.join("a/b")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::os::unix::fs::symlink(elsewhere.path(), root.join("a/link")).unwrap();
        let refused = ensure_private_dir_under(root, &root.join("a/link/c")).unwrap_err();
        assert!(refused.contains("a/link is a symlink"), "{refused}");
        assert_eq!(fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        fs::write(root.join("a/file"), b"x").unwrap();
        let refused = ensure_private_dir_under(root, &root.join("a/file/c")).unwrap_err();
        assert!(refused.contains("is not a directory"), "{refused}");
        assert!(ensure_private_dir_under(root, &root.join("a/../x")).is_err());
        let target = root.join("a/b/target");
        std::os::unix::fs::symlink(root.join("a/file"), &target).unwrap();
        assert!(check_replaceable(&target)
            .unwrap_err()
            .contains("is a symlink"));
        assert!(check_replaceable(&root.join("a/file")).is_ok());
        assert!(check_replaceable(&root.join("a/absent")).is_ok());
        assert!(check_replaceable(&root.join("a/b"))
            .unwrap_err()
            .contains("not a regular file"));
    }

    #[test]
    fn a_state_root_must_be_a_real_dir_no_one_else_writes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        assert!(check_state_root(&root).is_ok(), "absent passes");
        fs::create_dir(&root).unwrap();
        for (mode, ok) in [
            (0o700, true),
            (0o755, true),
            (0o770, false),
            (0o777, false),
            (0o702, false),
        ] {
            fs::set_permissions(&root, fs::Permissions::from_mode(mode)).unwrap();
            match check_state_root(&root) {
                Ok(()) => assert!(ok, "{mode:o}"),
                Err(why) => {
                    assert!(!ok, "{mode:o}: {why}");
                    assert!(
                        why.contains(&format!("`chmod go-w {}`", root.display())),
                        "{why}"
                    );
                }
            }
        }
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let mut slashed = link.clone().into_os_string();
        slashed.push("/");
        for path in [link.clone(), PathBuf::from(slashed)] {
            let refused = check_state_root(&path).unwrap_err();
            assert!(refused.contains("is a symlink"), "{refused}");
        }
    }

    #[test]
    fn stale_temps_are_removed_and_a_live_writers_kept() {
        let dir = tempfile::tempdir().unwrap();
        let live = format!("bearer.{}.0{TEMP_SUFFIX}", std::process::id());
        // No process has pid i32::MAX (the kernel's limit is far below it).
        let dead = format!("bearer.{}.3{TEMP_SUFFIX}", i32::MAX);
        for name in [&live, &dead, &"bearer".to_owned(), &"x.tmp".to_owned()] {
            fs::write(dir.path().join(name), b"secret").unwrap();
        }
        let removed = remove_stale_temps(dir.path(), Duration::from_secs(3600));
        assert_eq!(removed, vec![dir.path().join(&dead)]);
        // Past the bound, even a live pid's temp file is a leftover (the pid was reused).
        let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
        File::options()
            .write(true)
            .open(dir.path().join(&live))
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();
        let removed = remove_stale_temps(dir.path(), Duration::from_secs(3600));
        assert_eq!(removed, vec![dir.path().join(&live)]);
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["bearer", "x.tmp"]);
        assert_eq!(temp_pid("login.json.12.7.tmp"), Some(12));
        assert_eq!(temp_pid(".12.7.tmp"), None);
        assert_eq!(temp_pid("a.+12.7.tmp"), None);
        assert_eq!(temp_pid("a.12.x.tmp"), None);
    }
}
