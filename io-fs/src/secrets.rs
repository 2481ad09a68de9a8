//! The `SecretStore` seam (reference §9.2): where the plane's secret material lives. The plane
//! reads its keys through it and never learns where they are kept: under the CLI the
//! [`FileSecretStore`] rooted at the state root (so every key is the file the trust root has
//! always had, read by the same fail-closed reader), under a hosted platform whatever store it
//! injects (a KMS, a vault, or a [`MemorySecretStore`] it fills at start).
//!
//! A key is the CLI layout's relative path, `auth/space.<hex>/<file>`, so the filesystem store
//! needs no mapping and a platform can provision its store by copying files one-to-one
//! ([`crate::trust::copy_secrets`]).

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use cotal_core::names::SpaceName;

use crate::{files, trust};

/// Where a store keeps its material, as its identity declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// Files under a state root ([`FileSecretStore`]).
    Filesystem,
    /// A store a hosted platform injects; the hosted entry accepts only this kind.
    Injected,
}

/// What a store declares itself to be. The hosted entry compares it with the identity the
/// platform assigned, so a plane never starts on another tenant's store by mistake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreIdentity {
    kind: StoreKind,
    id: String,
}

/// Longest injected store id accepted: an id names a store, it does not carry data.
const MAX_ID_CHARS: usize = 256;

impl StoreIdentity {
    /// An injected store's identity: a non-empty id (≤ 256 chars, no control characters), else
    /// a one-sentence refusal. The bound and the character rule keep the id safe to log and to
    /// compare.
    pub fn injected(id: &str) -> Result<StoreIdentity, String> {
        if id.is_empty() {
            return Err("a secret store's identity must not be empty".to_owned());
        }
        if id.chars().count() > MAX_ID_CHARS {
            return Err(format!(
                "a secret store's identity must be at most {MAX_ID_CHARS} characters"
            ));
        }
        if id.chars().any(char::is_control) {
            return Err("a secret store's identity must not contain control characters".to_owned());
        }
        Ok(StoreIdentity {
            kind: StoreKind::Injected,
            id: id.to_owned(),
        })
    }

    /// Refuses, in one sentence, a store that declares no identity (a hosted context never
    /// adopts a store it cannot tell from another) or one other than this injected identity,
    /// which a platform assigned: so a plane never starts on another tenant's store by mistake.
    pub fn check_assigned(&self, store: &dyn SecretStore) -> Result<(), String> {
        let declared = store.identity().ok_or_else(|| {
            "the secret store must declare a stable identity; a hosted context never adopts a \
             store it cannot tell from another"
                .to_owned()
        })?;
        if declared.kind() != StoreKind::Injected || declared != *self {
            return Err(format!(
                "the secret store's identity does not match the assigned one (it declares {:?} \
                 {:?})",
                declared.kind(),
                declared.id()
            ));
        }
        Ok(())
    }

    pub fn kind(&self) -> StoreKind {
        self.kind.clone()
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A secret's key: `auth/space.<hex>/<file>`, the CLI layout's path relative to the state
/// root. Never absolute and without `..`, so the filesystem store cannot be led outside its
/// root (it re-checks every key anyway, see [`FileSecretStore`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretKey(String);

impl SecretKey {
    /// The key of `file` (a file name of the trust-root layout, such as `issuer.json`) in
    /// `space`'s trust root.
    pub fn of(space: &SpaceName, file: &str) -> SecretKey {
        SecretKey(format!("auth/{}/{file}", trust::space_segment(space)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the plane's secret material lives.
///
/// Synchronous on purpose: the plane reads its material once, at start, before it serves
/// anything, and writes only on first use (its instance identity) or when a platform
/// provisions the store; nothing on a request path touches it. An async trait would force a
/// runtime on the CLI's file store and on every caller for no gain, while a platform whose
/// store is async implements this over its own runtime (blocking on the call) or over a
/// snapshot it loaded before starting the plane.
///
/// Every method answers with a one-sentence error naming the key; an implementation never
/// puts a value into an error or into its `Debug` output.
pub trait SecretStore: Send + Sync + std::fmt::Debug {
    /// The identity the store declares; `None` for a store that declares none (the hosted
    /// entry refuses it).
    fn identity(&self) -> Option<StoreIdentity>;
    /// The value at `key`, `None` when the key holds none.
    fn get(&self, key: &SecretKey) -> Result<Option<Vec<u8>>, String>;
    /// Whole-value atomic replace: a reader sees the old value or the new one, never a mix.
    fn put(&self, key: &SecretKey, value: &[u8]) -> Result<(), String>;
    /// Create-only: `Ok(true)` if this call created it, `Ok(false)` if the key already held a
    /// value (left untouched). Of two concurrent creators exactly one gets `Ok(true)`, which is
    /// how first starts converge on one generated secret.
    fn create(&self, key: &SecretKey, value: &[u8]) -> Result<bool, String>;
    /// `Ok(true)` if something was deleted.
    fn delete(&self, key: &SecretKey) -> Result<bool, String>;
}

/// How errors and parse refusals name `key` of `store`: a filesystem store's key by its path,
/// as the trust root's files have always been named, any other store's as `secret <key>`.
pub(crate) fn describe(store: &dyn SecretStore, key: &SecretKey) -> String {
    match store.identity() {
        Some(identity) if identity.kind == StoreKind::Filesystem => Path::new(&identity.id)
            .join(key.as_str())
            .display()
            .to_string(),
        _ => format!("secret {key}"),
    }
}

/// The filesystem store rooted at a state root: key `K` is the file `<root>/K`, so under the
/// CLI the keys are the trust root's files, byte for byte.
///
/// Reads go through the trust root's fail-closed reader: the key's directory must be a real
/// directory no wider than 0700, the file is opened without following a symlink and must be a
/// regular file with no group/other permission bit and of bounded size; anything else is
/// refused with a sentence naming the path, never read through or repaired. Writes are atomic
/// and durable, 0600 files in 0700 directories ([`files::write_private`],
/// [`files::create_private`]).
///
/// The CLI only reads through it (its trust root is published whole by `init`); writing a key
/// into a space that has no trust root yet leaves a space dir `init` refuses as incomplete, so
/// a store written to is a platform's own root, not a CLI state root.
#[derive(Debug, Clone)]
pub struct FileSecretStore {
    root: PathBuf,
}

impl FileSecretStore {
    pub fn new(root: &Path) -> FileSecretStore {
        FileSecretStore {
            root: root.to_path_buf(),
        }
    }

    /// The file of `key`, refusing a key that could leave the root (only plain path segments
    /// are accepted).
    fn path(&self, key: &SecretKey) -> Result<PathBuf, String> {
        let relative = Path::new(key.as_str());
        let plain = relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if key.as_str().is_empty() || !plain {
            return Err(format!(
                "secret key {key} is not a relative path inside the store"
            ));
        }
        Ok(self.root.join(relative))
    }

    /// The directory `path` is in.
    fn dir_of(path: &Path) -> Result<&Path, String> {
        path.parent()
            .ok_or_else(|| format!("{} has no parent directory", path.display()))
    }

    /// Creates the directories from the root down to `key`'s (0700; existing ones are left as
    /// they are) and refuses to write into one the trust root would refuse to read.
    fn prepare(&self, key: &SecretKey, path: &Path) -> Result<(), String> {
        let create = |dir: &Path| {
            files::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
        };
        let mut at = self.root.clone();
        create(&at)?;
        for part in Path::new(key.as_str())
            .parent()
            .into_iter()
            .flat_map(Path::components)
        {
            at.push(part);
            create(&at)?;
        }
        trust::check_dir(Self::dir_of(path)?).map(|_| ())
    }
}

impl SecretStore for FileSecretStore {
    fn identity(&self) -> Option<StoreIdentity> {
        Some(StoreIdentity {
            kind: StoreKind::Filesystem,
            id: self.root.display().to_string(),
        })
    }

    fn get(&self, key: &SecretKey) -> Result<Option<Vec<u8>>, String> {
        let path = self.path(key)?;
        if !trust::check_dir(Self::dir_of(&path)?)? {
            return Ok(None);
        }
        trust::read_private(&path)
    }

    fn put(&self, key: &SecretKey, value: &[u8]) -> Result<(), String> {
        let path = self.path(key)?;
        self.prepare(key, &path)?;
        files::write_private(&path, value)
    }

    fn create(&self, key: &SecretKey, value: &[u8]) -> Result<bool, String> {
        let path = self.path(key)?;
        self.prepare(key, &path)?;
        files::create_private(&path, value)
    }

    fn delete(&self, key: &SecretKey) -> Result<bool, String> {
        let path = self.path(key)?;
        if !trust::check_dir(Self::dir_of(&path)?)? {
            return Ok(false);
        }
        match fs::remove_file(&path) {
            Ok(()) => files::sync_parent(&path).map(|()| true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!("cannot delete {}: {e}", path.display())),
        }
    }
}

/// An in-memory store: for tests and examples, and for a platform that keeps its secrets
/// elsewhere and hands them over at start (filling this before it starts the plane).
pub struct MemorySecretStore {
    identity: Option<StoreIdentity>,
    values: Mutex<BTreeMap<SecretKey, Vec<u8>>>,
}

impl MemorySecretStore {
    pub fn new(identity: Option<StoreIdentity>) -> MemorySecretStore {
        MemorySecretStore {
            identity,
            values: Mutex::new(BTreeMap::new()),
        }
    }

    /// Runs `f` on the map; a poisoned lock (a panic while holding it) is refused rather than
    /// trusted, since the map may be half-updated.
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<SecretKey, Vec<u8>>) -> T) -> Result<T, String> {
        let mut values = self
            .values
            .lock()
            .map_err(|_| "the in-memory secret store is poisoned by an earlier panic".to_owned())?;
        Ok(f(&mut values))
    }
}

/// Names the identity and the keys it holds, never a value.
impl std::fmt::Debug for MemorySecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<SecretKey> = self
            .values
            .lock()
            .map(|values| values.keys().cloned().collect())
            .unwrap_or_default();
        f.debug_struct("MemorySecretStore")
            .field("identity", &self.identity)
            .field("keys", &keys)
            .finish()
    }
}

impl SecretStore for MemorySecretStore {
    fn identity(&self) -> Option<StoreIdentity> {
        self.identity.clone()
    }

    fn get(&self, key: &SecretKey) -> Result<Option<Vec<u8>>, String> {
        self.with(|values| values.get(key).cloned())
    }

    fn put(&self, key: &SecretKey, value: &[u8]) -> Result<(), String> {
        self.with(|values| {
            values.insert(key.clone(), value.to_vec());
        })
    }

    fn create(&self, key: &SecretKey, value: &[u8]) -> Result<bool, String> {
        self.with(|values| {
            if values.contains_key(key) {
                false
            } else {
                values.insert(key.clone(), value.to_vec());
                true
            }
        })
    }

    fn delete(&self, key: &SecretKey) -> Result<bool, String> {
        self.with(|values| values.remove(key).is_some())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn space() -> SpaceName {
        SpaceName::parse("main").unwrap()
    }

    fn key() -> SecretKey {
        SecretKey::of(&space(), "issuer.json")
    }

    #[test]
    fn a_hosted_context_takes_only_the_injected_store_it_was_assigned() {
        let assigned = StoreIdentity::injected("tenant-a").unwrap();
        assert_eq!(
            assigned.check_assigned(&MemorySecretStore::new(Some(assigned.clone()))),
            Ok(())
        );
        assert_eq!(
            assigned.check_assigned(&MemorySecretStore::new(None)),
            Err(
                "the secret store must declare a stable identity; a hosted context never adopts \
                 a store it cannot tell from another"
                    .to_owned()
            )
        );
        let other = StoreIdentity::injected("tenant-b").unwrap();
        assert_eq!(
            assigned.check_assigned(&MemorySecretStore::new(Some(other))),
            Err(
                "the secret store's identity does not match the assigned one (it declares \
                 Injected \"tenant-b\")"
                    .to_owned()
            )
        );
        let files = tempfile::tempdir().unwrap();
        let refused = assigned.check_assigned(&FileSecretStore::new(files.path()));
        assert!(refused.unwrap_err().contains("declares Filesystem"));
    }

    #[test]
    fn a_key_is_the_cli_layouts_relative_path() {
        assert_eq!(key().as_str(), "auth/space.6d61696e/issuer.json");
        assert_eq!(key().to_string(), "auth/space.6d61696e/issuer.json");
    }

    #[test]
    fn the_file_store_round_trips_at_the_trust_roots_paths_with_private_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("state");
        let store = FileSecretStore::new(&root);
        assert_eq!(store.get(&key()).unwrap(), None);
        assert!(!store.delete(&key()).unwrap());

        store.put(&key(), b"one").unwrap();
        let path = root.join("auth/space.6d61696e/issuer.json");
        assert_eq!(fs::read(&path).unwrap(), b"one");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        for dir in [
            root.clone(),
            root.join("auth"),
            root.join("auth/space.6d61696e"),
        ] {
            let mode = fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        }
        store.put(&key(), b"two").unwrap();
        assert_eq!(store.get(&key()).unwrap().unwrap(), b"two");

        assert!(!store.create(&key(), b"three").unwrap());
        assert_eq!(store.get(&key()).unwrap().unwrap(), b"two");
        assert!(store.delete(&key()).unwrap());
        assert_eq!(store.get(&key()).unwrap(), None);
        assert!(store.create(&key(), b"first").unwrap());
        assert!(!store.create(&key(), b"second").unwrap());
        assert_eq!(store.get(&key()).unwrap().unwrap(), b"first");

        let identity = store.identity().unwrap();
        assert_eq!(identity.kind(), StoreKind::Filesystem);
        assert_eq!(identity.id(), root.display().to_string());
        assert_eq!(describe(&store, &key()), path.display().to_string());
    }

    #[test]
    fn the_file_store_refuses_what_the_trust_root_refuses() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FileSecretStore::new(tmp.path());
        store.put(&key(), b"secret").unwrap();
        let path = tmp.path().join(key().as_str());
        let dir = path.parent().unwrap().to_path_buf();

        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let e = store.get(&key()).unwrap_err();
        assert!(
            e.starts_with(&format!("{} has mode 0644", path.display())),
            "{e}"
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();

        let elsewhere = tmp.path().join("elsewhere");
        fs::write(&elsewhere, b"planted").unwrap();
        fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o600)).unwrap();
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(
            store.get(&key()).unwrap_err(),
            format!(
                "{} is a symlink; trust-root files must be regular files",
                path.display()
            )
        );
        fs::remove_file(&path).unwrap();

        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let e = store.get(&key()).unwrap_err();
        assert!(
            e.starts_with(&format!("{} has mode 0755", dir.display())),
            "{e}"
        );
        assert!(store
            .put(&key(), b"x")
            .unwrap_err()
            .contains("has mode 0755"));
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();

        let moved = tmp.path().join("moved");
        fs::rename(&dir, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &dir).unwrap();
        let e = store.get(&key()).unwrap_err();
        assert!(
            e.starts_with(&format!("{} is a symlink", dir.display())),
            "{e}"
        );
        assert!(store
            .create(&key(), b"x")
            .unwrap_err()
            .contains("is a symlink"));
        assert!(store.delete(&key()).unwrap_err().contains("is a symlink"));
    }

    #[test]
    fn the_file_store_refuses_a_key_that_leaves_its_root() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FileSecretStore::new(tmp.path());
        let escaping = SecretKey::of(&space(), "../../../escape.json");
        let e = store.put(&escaping, b"x").unwrap_err();
        assert!(e.contains("is not a relative path inside the store"), "{e}");
        assert!(store.get(&escaping).is_err());
        assert!(store.delete(&escaping).is_err());
        assert!(!tmp.path().join("escape.json").exists());
    }

    #[test]
    fn the_memory_store_is_create_only_and_declares_its_identity() {
        let identity = StoreIdentity::injected("vault:tenant-7").unwrap();
        let store = MemorySecretStore::new(Some(identity.clone()));
        assert_eq!(store.identity(), Some(identity));
        assert_eq!(store.identity().unwrap().kind(), StoreKind::Injected);
        assert_eq!(describe(&store, &key()), format!("secret {}", key()));

        assert_eq!(store.get(&key()).unwrap(), None);
        assert!(store.create(&key(), b"first").unwrap());
        assert!(!store.create(&key(), b"second").unwrap());
        assert_eq!(store.get(&key()).unwrap().unwrap(), b"first");
        store.put(&key(), b"replaced").unwrap();
        assert_eq!(store.get(&key()).unwrap().unwrap(), b"replaced");
        assert!(store.delete(&key()).unwrap());
        assert!(!store.delete(&key()).unwrap());
        assert_eq!(store.get(&key()).unwrap(), None);

        store.put(&key(), b"do-not-print").unwrap();
        let shown = format!("{store:?}");
        assert!(shown.contains("auth/space.6d61696e/issuer.json"), "{shown}");
        assert!(!shown.contains("do-not-print"), "{shown}");

        assert_eq!(MemorySecretStore::new(None).identity(), None);
    }

    #[test]
    fn of_concurrent_creators_exactly_one_wins() {
        let store = MemorySecretStore::new(None);
        let wins: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u8)
                .map(|i| {
                    let store = &store;
                    s.spawn(move || store.create(&key(), &[i]).unwrap())
                })
                .collect();
            handles
                .into_iter()
                .map(|h| usize::from(h.join().unwrap()))
                .sum()
        });
        assert_eq!(wins, 1);
    }

    #[test]
    fn an_injected_identity_is_bounded_and_printable() {
        assert_eq!(
            StoreIdentity::injected("").unwrap_err(),
            "a secret store's identity must not be empty"
        );
        assert!(StoreIdentity::injected(&"x".repeat(256)).is_ok());
        assert!(StoreIdentity::injected(&"x".repeat(257))
            .unwrap_err()
            .contains("at most 256 characters"));
        assert!(StoreIdentity::injected("a\nb")
            .unwrap_err()
            .contains("control characters"));
        let identity = StoreIdentity::injected("kms:eu-1/plane").unwrap();
        assert_eq!(identity.id(), "kms:eu-1/plane");
        assert_eq!(identity.kind(), StoreKind::Injected);
    }
}
