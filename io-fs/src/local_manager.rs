//! The workspace's own manager's persisted identity, read only:
//! `<root>/auth/manager-instance.<hex>.json` — `{"instanceId","serveIdentity":{"id","seed"}}` as
//! the reference's manager writes it, which makes that instance a manager-caller candidate
//! (§3.10).

use std::path::{Path, PathBuf};

use cotal_core::manager::LocalManager;
use cotal_core::names::SpaceName;

use crate::files::{self, Unreadable};
use crate::trust;

/// No manager identity is near this; a larger file is not one.
const MAX_IDENTITY_BYTES: u64 = 64 * 1024;

/// Where the workspace's own manager persists its identity for `space` (the reference's
/// `manager-instance.<hex(space)>.json` in the auth dir).
pub fn path(root: &Path, space: &SpaceName) -> PathBuf {
    // The space's hex spelling, as its state-dir segment `space.<hex>` carries it.
    let segment = trust::space_segment(space);
    let hex = segment.strip_prefix("space.").unwrap_or(&segment);
    root.join("auth")
        .join(format!("manager-instance.{hex}.json"))
}

/// The workspace's own manager, when its identity file exists: its instance id and the gate
/// principal `local.<serve nkey>`. The seed the file also holds is not kept. A file that is a
/// symlink, not a regular file, or malformed is an error naming it, never "no local manager":
/// the reference refuses to mint over a malformed identity, and so does a selection here.
pub fn load(path: &Path) -> Result<Option<LocalManager>, String> {
    let shown = path.display();
    let refused = |why| match why {
        Unreadable::Symlink | Unreadable::NotRegular => {
            format!("the local manager identity {shown} is not a regular file; refusing it")
        }
        Unreadable::TooLarge(len) => format!(
            "the local manager identity {shown} is {len} bytes, larger than any identity; \
             refusing it"
        ),
        Unreadable::Io(e) => format!("the local manager identity {shown} is unreadable: {e}"),
    };
    let Some(file) = files::open_regular(path).map_err(refused)? else {
        return Ok(None);
    };
    let bytes = file.read(MAX_IDENTITY_BYTES).map_err(refused)?;
    LocalManager::from_identity(&bytes)
        .map(Some)
        .map_err(|why| format!("the local manager identity {shown} is malformed: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn the_local_manager_identity_is_read_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let space = SpaceName::parse("demo").unwrap();
        let path = path(dir.path(), &space);
        assert!(path.ends_with("auth/manager-instance.64656d6f.json"));
        assert_eq!(load(&path).unwrap(), None);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let serve = "U".to_owned() + &"A".repeat(55);
        let doc = serde_json::json!({"instanceId": "llllllllllllllllllllllllll",
            "serveIdentity": {"id": serve, "seed": "SU..."}});
        fs::write(&path, doc.to_string()).unwrap();
        let local = load(&path).unwrap().unwrap();
        assert_eq!(local.instance.as_str(), "llllllllllllllllllllllllll");
        assert_eq!(local.serve.to_string(), format!("local.{serve}"));
        fs::write(&path, "{\"instanceId\": \"x\"}").unwrap();
        let e = load(&path).unwrap_err();
        assert!(e.contains("is malformed"), "{e}");
        fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        fs::write(&elsewhere, doc.to_string()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let e = load(&path).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
