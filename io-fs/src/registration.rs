//! Crash-safe self-registration of the plane's instance.
//!
//! * `<root>/space.<hex>/auth-registration.json` — `{"ver":1,"opId","pid"}`, the operation a
//!   start is registering under, recorded durably before its freeze and removed once the
//!   registration completes, so a start after a crash resumes it instead of finding its own
//!   freeze in the way.
//! * `<root>/space.<hex>/auth-registration.lock` — held (`flock`) by the one start registering:
//!   while a start holds it, the recorded operation has a live executor and nobody else runs it;
//!   the kernel drops it when that process dies, which is the proof a resume needs.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cotal_core::names::{OpId, SpaceName};
use rustix::fs::OFlags;
use serde_json::{json, Value};

use crate::files;
use crate::trust;

/// The operation a start registers under, until it completes.
const RECORD_FILE: &str = "auth-registration.json";
/// Held by the one start registering the instance.
const LOCK_FILE: &str = "auth-registration.lock";
/// The one version of the record this build writes and reads.
const VERSION: u64 = 1;

/// Where the registration record of `space`'s instance lives.
pub fn record_path(root: &Path, space: &SpaceName) -> PathBuf {
    root.join(trust::space_segment(space)).join(RECORD_FILE)
}

/// The op id a start recorded before its freeze; `None` when there is no record. A record this
/// build cannot read is refused: guessing would either resume the wrong operation or abandon a
/// freeze.
pub fn load(path: &Path) -> Result<Option<OpId>, String> {
    let Some(bytes) = files::read_regular(path)? else {
        return Ok(None);
    };
    let corrupt = |why: &str| {
        format!(
            "{} is not a registration record this build reads ({why}); if no `cotal-authd up` \
             of this instance is running, remove it and reconcile the gate with `cotal-authd \
             gate reconcile`",
            path.display()
        )
    };
    let doc: Value = serde_json::from_slice(&bytes).map_err(|_| corrupt("not JSON"))?;
    if doc.get("ver").and_then(Value::as_u64) != Some(VERSION) {
        return Err(corrupt("unknown version"));
    }
    doc.get("opId")
        .and_then(Value::as_str)
        .and_then(|s| OpId::parse(s).ok())
        .map(Some)
        .ok_or_else(|| corrupt("no valid opId"))
}

/// Records `op_id` durably before the freeze it names is attempted.
pub fn record(path: &Path, op_id: &OpId) -> Result<(), String> {
    let doc = json!({"ver": VERSION, "opId": op_id.as_str(), "pid": std::process::id()});
    files::write_private(path, format!("{doc:#}\n").as_bytes())
}

/// Removes the record once its registration completed, durably.
pub fn clear(path: &Path) -> Result<(), String> {
    match fs::remove_file(path) {
        Ok(()) => files::sync_parent(path),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot remove {}: {e}", path.display())),
    }
}

/// The registration lock's file of one instance, open but not held.
#[derive(Debug)]
pub struct LockFile {
    file: File,
    path: PathBuf,
}

/// The registration lock of one instance, held until dropped.
#[derive(Debug)]
pub struct RegistrationLock {
    _held: File,
}

/// What one attempt at the lock found.
#[derive(Debug)]
pub enum Attempt {
    Held(RegistrationLock),
    /// Another start holds it; the file is handed back for the next attempt.
    Busy(LockFile),
}

impl LockFile {
    /// Opens (creating it 0600) the registration lock of `space`'s instance.
    pub fn open(root: &Path, space: &SpaceName) -> Result<LockFile, String> {
        let dir = root.join(trust::space_segment(space));
        files::ensure_private_dir(&dir)?;
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            // A symlink planted in its place is refused.
            .custom_flags(OFlags::NOFOLLOW.bits().cast_signed())
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        Ok(LockFile { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock unless another start holds it. Never blocks: a caller bounds its wait.
    pub fn try_lock(self) -> Result<Attempt, String> {
        match self.file.try_lock() {
            Ok(()) => Ok(Attempt::Held(RegistrationLock { _held: self.file })),
            Err(TryLockError::WouldBlock) => Ok(Attempt::Busy(self)),
            Err(TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", self.path.display())),
        }
    }
}

/// Takes the registration lock of `space`'s instance, waiting while another start holds it
/// (its registration takes milliseconds): one attempt every `poll`, and a refusal naming the
/// lock once `wait` has passed (a stopped or hung start). Blocks its thread between attempts:
/// an async caller runs it on its blocking pool.
pub fn lock_within(
    root: &Path,
    space: &SpaceName,
    wait: Duration,
    poll: Duration,
) -> Result<RegistrationLock, String> {
    let mut file = LockFile::open(root, space)?;
    let waited = Instant::now();
    loop {
        file = match file.try_lock()? {
            Attempt::Held(lock) => return Ok(lock),
            Attempt::Busy(file) if waited.elapsed() < wait => file,
            Attempt::Busy(file) => {
                return Err(format!(
                    "another start of this auth instance has been registering for {}s and still \
                     holds {}; stop it (a stopped or hung `cotal-authd up`) and start again",
                    wait.as_secs(),
                    file.path().display()
                ))
            }
        };
        std::thread::sleep(poll);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_waited_for_then_refused_by_name() {
        let root = tempfile::tempdir().unwrap();
        let space = SpaceName::parse("s1").unwrap();
        let (wait, poll) = (Duration::from_millis(60), Duration::from_millis(10));
        let held = lock_within(root.path(), &space, wait, poll).unwrap();
        let e = lock_within(root.path(), &space, wait, poll).unwrap_err();
        assert!(
            e.starts_with("another start of this auth instance has been registering for 0s"),
            "{e}"
        );
        assert!(e.contains(LOCK_FILE), "{e}");
        drop(held);
        assert!(lock_within(root.path(), &space, wait, poll).is_ok());
    }
}
