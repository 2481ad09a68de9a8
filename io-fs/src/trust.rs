//! The space's trust root on disk (reference §9.1–§9.2): the secret store the daemon reads and
//! `init` creates.
//!
//! Layout under the state dir `root`:
//!
//! ```text
//! <root>/auth/space.<hex(utf8 space)>/        0700
//!     service-keys.json callout.json issuer.json owner-secret.json idp.json    0600
//!     operator/                               0700
//!         operator.json broker.json           0600
//! ```
//!
//! **Create-only, once.** `init` fills a fresh `<root>/auth/.init-<pid>-<random>` dir (every
//! file written, fsynced; the dirs fsynced) and publishes it with one
//! `renameat2(RENAME_NOREPLACE)` onto the space dir, so the space dir is either absent or
//! complete, and of two concurrent `init`s exactly one publishes; the other deletes its temp
//! dir and verifies the winner's material. Material is never regenerated: a new owner secret
//! would re-key every owner, so an incomplete space dir is refused, not repaired. A temp dir
//! left by a crashed `init` holds seeds that were never published; the next `init` removes
//! those older than [`STALE_INIT_SECS`] (younger ones may belong to an `init` still running).
//!
//! **Through the store.** The daemon reads its secret files through a [`SecretStore`] under
//! their [`SecretKey`]s (`auth/space.<hex>/<file>`, these very paths) and only the IdP pin from
//! the state dir ([`load_daemon_from`]); on a host that store is the [`FileSecretStore`] at
//! `root` ([`load_daemon`]), so the CLI's files, bytes and refusals are the ones below. A hosted
//! platform provisions its own store from `init`'s output with [`copy_secrets`].
//!
//! **Fail-closed reads.** Every file is opened with `O_NOFOLLOW` and checked on its
//! descriptor: a symlink, a non-regular file, a file with any group/other permission bit, a
//! directory wider than 0700, or a symlinked space dir is refused with a sentence naming it.
//! Permissions are never tightened silently: a widened mode means someone else touched the
//! store, which an operator should look at.

use std::fs::{self, DirBuilder};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cotal_core::jwt::UnixSeconds;
use cotal_core::names::SpaceName;
use cotal_core::trust::{
    provision, BrokerMaterial, CalloutMaterial, DaemonMaterial, IdpPin, IssuerKeys,
    OperatorMaterial, OwnerSecret, ProvisionSeeds, ServiceKeys, SystemUser, BROKER_FILE,
    CALLOUT_FILE, IDP_FILE, ISSUER_FILE, OPERATOR_DIR, OPERATOR_FILE, OWNER_SECRET_FILE,
    SERVICE_KEYS_FILE, SYSTEM_USER_FILE,
};
use rustix::fs::{RenameFlags, CWD};
use rustix::io::Errno;

use crate::files::{self, write_new, Unreadable};
use crate::secrets::{describe, FileSecretStore, SecretKey, SecretStore};

/// No trust-root file is near this; a larger one is not ours.
const MAX_FILE_BYTES: u64 = 256 * 1024;

/// Age past which an `.init-*` temp dir cannot belong to a running `init` (one takes
/// milliseconds) and is removed by the next `init`.
pub const STALE_INIT_SECS: u64 = 3600;

const INIT_PREFIX: &str = ".init-";

/// The daemon's secret files with the kind of material each holds, as refusals name them: what
/// a [`SecretStore`] holds for the plane.
const SECRET_FILES: [(&str, &str); 5] = [
    (SERVICE_KEYS_FILE, "service keys"),
    (CALLOUT_FILE, "callout account"),
    (ISSUER_FILE, "issuer keys"),
    (OWNER_SECRET_FILE, "owner secret"),
    (SYSTEM_USER_FILE, "plane system user"),
];

/// The names of the daemon's secret files: what a [`SecretStore`] holds for the plane, and what
/// a hosted state dir never keeps.
pub fn secret_files() -> [&'static str; 5] {
    SECRET_FILES.map(|(file, _)| file)
}

/// The daemon's one non-secret file, kept in the state dir whatever the store: the IdP pin.
const IDP_KIND: (&str, &str) = (IDP_FILE, "IdP pin");

/// The operator dir's files and their kinds.
const OPERATOR_FILES: [(&str, &str); 2] = [
    (OPERATOR_FILE, "operator keys"),
    (BROKER_FILE, "broker JWTs"),
];

/// What `init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// Fresh material was drawn and published at `dir`.
    Created { dir: PathBuf },
    /// The space already had a valid trust root pinned to the same IdP. `kept` lists its
    /// files, relative to `dir`; `added` the ones a root made by an earlier version lacked and
    /// this run derived from the operator material (nothing else is ever written).
    Kept {
        dir: PathBuf,
        kept: Vec<String>,
        added: Vec<String>,
    },
}

impl InitOutcome {
    /// What `cotal-authd init` says of it, for the trust root of `space` pinned to `idp`.
    pub fn said(&self, space: &SpaceName, idp: &str) -> String {
        match self {
            InitOutcome::Created { dir } => format!(
                "created the trust root of space {space} under {} (IdP {idp})",
                dir.display()
            ),
            InitOutcome::Kept { dir, kept, added } if added.is_empty() => format!(
                "kept the trust root of space {space} under {} ({}): it exists and verifies, so \
                 nothing changed",
                dir.display(),
                kept.join(", ")
            ),
            InitOutcome::Kept { dir, kept, added } => format!(
                "kept the trust root of space {space} under {} ({}) and added what this version \
                 needs ({})",
                dir.display(),
                kept.join(", "),
                added.join(", ")
            ),
        }
    }
}

/// Where the embedded server of `space` keeps its config, log and store:
/// `<root>/nats/space.<hex>`.
pub fn embedded_dir(root: &Path, space: &SpaceName) -> PathBuf {
    root.join("nats").join(space_segment(space))
}

/// `<root>/auth/space.<hex(utf8 space)>`: hex keeps every space a distinct, portable dir
/// name (case-differing spaces included).
pub fn space_dir(root: &Path, space: &SpaceName) -> PathBuf {
    root.join("auth").join(space_segment(space))
}

/// `space.<hex(utf8 space)>`: the one per-space path segment every space-keyed dir uses (the
/// trust root, the instance identity's dir, the embedded server's dir).
pub fn space_segment(space: &SpaceName) -> String {
    let hex: String = space.as_str().bytes().map(|b| format!("{b:02x}")).collect();
    format!("space.{hex}")
}

/// The space a [`space_segment`] names, if it is one.
fn space_of_segment(segment: &str) -> Option<SpaceName> {
    let hex = segment.strip_prefix("space.")?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let space = SpaceName::parse(std::str::from_utf8(&bytes).ok()?).ok()?;
    (space_segment(&space) == segment).then_some(space)
}

/// Every space with a trust-root dir under `root`, in name order (other entries are ignored).
pub fn spaces(root: &Path) -> Result<Vec<SpaceName>, String> {
    let dir = root.join("auth");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot list {}: {e}", shown(&dir))),
    };
    let mut spaces = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", shown(&dir)))?;
        if let Some(space) = entry.file_name().to_str().and_then(space_of_segment) {
            spaces.push(space);
        }
    }
    spaces.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    Ok(spaces)
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// Refuses a dir that is a symlink, not a dir, or open to group/other. `Ok(false)`: absent.
pub(crate) fn check_dir(dir: &Path) -> Result<bool, String> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => Err(format!(
            "{} is a symlink; the trust root must be a real directory",
            shown(dir)
        )),
        Ok(meta) if !meta.is_dir() => Err(format!("{} is not a directory", shown(dir))),
        Ok(meta) if meta.mode() & 0o077 != 0 => Err(format!(
            "{} has mode {:04o}, open to other users; the trust root must be 0700 (check who \
             changed it, then chmod 700 it)",
            shown(dir),
            meta.mode() & 0o7777
        )),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("{} cannot be inspected: {e}", shown(dir))),
    }
}

/// Whether `path` has a directory entry (of any type: a dangling symlink counts, and is then
/// refused by [`read_file`]).
fn present(path: &Path) -> Result<bool, String> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("{} cannot be inspected: {e}", shown(path))),
    }
}

/// Reads one trust-root file: no symlink (`O_NOFOLLOW`), a regular file, mode within 0600,
/// bounded size; `None` when nothing is there. The one fail-closed reader of the trust root's
/// files and of the [`FileSecretStore`]'s keys.
pub(crate) fn read_private(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let refused = |why| match why {
        Unreadable::Symlink => format!(
            "{} is a symlink; trust-root files must be regular files",
            shown(path)
        ),
        Unreadable::NotRegular => format!(
            "{} is not a regular file; trust-root files must be regular files",
            shown(path)
        ),
        Unreadable::TooLarge(len) => format!(
            "{} is {len} bytes, larger than any trust-root file",
            shown(path)
        ),
        Unreadable::Io(e) => format!("{} is unreadable: {e}", shown(path)),
    };
    let Some(file) = files::open_regular(path).map_err(refused)? else {
        return Ok(None);
    };
    let mode = file.metadata().mode();
    if mode & 0o177 != 0 {
        return Err(format!(
            "{} has mode {:04o}; a trust-root file must be 0600 (check who changed it, then \
             chmod 600 it)",
            shown(path),
            mode & 0o7777
        ));
    }
    file.read(MAX_FILE_BYTES).map(Some).map_err(refused)
}

/// [`read_private`] of a file whose presence the caller checked: one removed since is
/// unreadable like any I/O error.
fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    read_private(path)?.ok_or_else(|| {
        format!(
            "{} is unreadable: {}",
            shown(path),
            std::io::Error::from(Errno::NOENT)
        )
    })
}

/// Reads and parses one file, the parse naming the file by its path.
fn load<T>(
    path: &Path,
    parse: impl FnOnce(&[u8], &str) -> Result<T, cotal_core::EpError>,
) -> Result<T, String> {
    let bytes = read_file(path)?;
    parse(&bytes, &shown(path)).map_err(|e| e.message)
}

fn missing_kinds(dir: &Path, files: &[(&str, &'static str)]) -> Result<Vec<&'static str>, String> {
    let mut missing = Vec::new();
    for (name, kind) in files {
        if !present(&dir.join(name))? {
            missing.push(*kind);
        }
    }
    Ok(missing)
}

/// Which composition reads the material: it decides the remedy a missing-material refusal
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Composition {
    /// `cotal-authd` on a host: the material is the trust root `init` creates.
    Cli,
    /// A platform that injects its own secret store and provisions it.
    Hosted,
}

/// The daemon's read path on a host: [`load_daemon_from`] the [`FileSecretStore`] rooted at
/// `root`, so the files, bytes and refusals are the trust root's. Never opens
/// `operator/operator.json`.
pub fn load_daemon(root: &Path, space: &SpaceName) -> Result<DaemonMaterial, String> {
    load_daemon_from(&FileSecretStore::new(root), root, space, Composition::Cli)
}

/// One value the daemon reads: its kind (as a missing-material refusal names it), how a parse
/// refusal names it, and what the read found.
struct Fetched {
    kind: &'static str,
    label: String,
    value: Result<Option<Vec<u8>>, String>,
}

impl Fetched {
    /// Parses a value the missing-material check found present.
    fn parse<T>(
        self,
        parse: impl FnOnce(&[u8], &str) -> Result<T, cotal_core::EpError>,
    ) -> Result<T, String> {
        let bytes = self
            .value?
            .ok_or_else(|| format!("{} vanished while the plane was reading it", self.label))?;
        parse(&bytes, &self.label).map_err(|e| e.message)
    }
}

/// The issuer keys alone, as a running plane re-reads them from `store` to adopt an `issuer
/// rotate` or `issuer prune` without a restart; the error is one clause (`it is missing`, the
/// store's read error, or the parse refusal naming the key).
pub fn read_issuer_keys(store: &dyn SecretStore, space: &SpaceName) -> Result<IssuerKeys, String> {
    let key = SecretKey::of(space, ISSUER_FILE);
    let bytes = store.get(&key)?.ok_or_else(|| "it is missing".to_owned())?;
    IssuerKeys::parse(&bytes, space, key.as_str()).map_err(|e| e.message)
}

/// Writes the issuer keys of `space` to the secret store under `root` (`issuer rotate|prune`).
pub fn write_issuer_keys(root: &Path, space: &SpaceName, keys: &IssuerKeys) -> Result<(), String> {
    FileSecretStore::new(root).put(&SecretKey::of(space, ISSUER_FILE), &keys.to_bytes())
}

/// The last rotation of a space's issuer, beside its trust root: when the keys it replaced may
/// stop being published.
const ROTATION_FILE: &str = "issuer-rotation.json";

fn rotation_path(root: &Path, space: &SpaceName) -> PathBuf {
    space_dir(root, space).join(ROTATION_FILE)
}

/// Records that `kid` signs from `now` on (`{"ver":1,"rotatedAt","kid"}`, 0600). Written
/// before the keys: a crash between the two writes leaves a record that only makes a later
/// prune wait, never one that lets it cut a key early.
pub fn record_rotation(root: &Path, space: &SpaceName, now: u64, kid: &str) -> Result<(), String> {
    let record = serde_json::json!({"ver": 1, "rotatedAt": now, "kid": kid});
    files::write_private(&rotation_path(root, space), record.to_string().as_bytes())
}

/// When the keys were last rotated. A trust root with no record (its extra keys came from
/// elsewhere) cannot tell when they stopped signing: its prune needs `--force`.
pub fn last_rotation(root: &Path, space: &SpaceName) -> Result<u64, String> {
    let path = rotation_path(root, space);
    let Some(bytes) = files::read_regular(&path)? else {
        return Err(format!(
            "no rotation is recorded at {}, so when the other keys stopped signing is unknown; \
             prune with --force once no bearer they signed can be live",
            path.display()
        ));
    };
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("rotatedAt").and_then(serde_json::Value::as_u64))
        .ok_or_else(|| format!("{} is not a rotation record", path.display()))
}

/// The daemon's read path through a store: the secret files (service keys, callout, issuer,
/// owner secret, system user) from `store` under their [`SecretKey`]s, the non-secret IdP pin
/// (`idp.json`) from [`space_dir`]`(state_root, space)` through the fail-closed file reader,
/// checked to belong together. Never writes.
///
/// Everything is read before anything is judged, so missing material is one refusal listing
/// every missing kind, with the remedy of `composition`; then the first unreadable or
/// unparsable value, in file order, is refused by its name (a filesystem store's by its path).
pub fn load_daemon_from(
    store: &dyn SecretStore,
    state_root: &Path,
    space: &SpaceName,
    composition: Composition,
) -> Result<DaemonMaterial, String> {
    let dir = space_dir(state_root, space);
    let idp_path = dir.join(IDP_KIND.0);
    let [service_keys, callout, issuer, owner_secret, system_user] =
        SECRET_FILES.map(|(file, kind)| {
            let key = SecretKey::of(space, file);
            Fetched {
                kind,
                label: describe(store, &key),
                value: store.get(&key),
            }
        });
    let idp = Fetched {
        kind: IDP_KIND.1,
        label: shown(&idp_path),
        value: check_dir(&dir).and_then(|found| {
            if found {
                read_private(&idp_path)
            } else {
                Ok(None)
            }
        }),
    };
    let missing: Vec<&str> = [
        &service_keys,
        &callout,
        &issuer,
        &owner_secret,
        &system_user,
        &idp,
    ]
    .iter()
    .filter(|f| matches!(f.value, Ok(None)))
    .map(|f| f.kind)
    .collect();
    if !missing.is_empty() {
        return Err(missing_material(space, &dir, &missing, composition));
    }
    let service_keys = service_keys.parse(ServiceKeys::parse)?;
    let callout = callout.parse(|b, l| CalloutMaterial::parse(b, space, l))?;
    let issuer = issuer.parse(|b, l| IssuerKeys::parse(b, space, l))?;
    let owner_secret = owner_secret.parse(OwnerSecret::parse)?;
    let system_user = system_user.parse(SystemUser::parse)?;
    let idp = idp.parse(IdpPin::parse)?;
    DaemonMaterial::assemble(
        space,
        service_keys,
        callout,
        issuer,
        owner_secret,
        system_user,
        idp,
    )
    .map_err(|e| match composition {
        Composition::Cli => format!("{}: {}", shown(&dir), e.message),
        Composition::Hosted => format!("the secret store of space {space}: {}", e.message),
    })
}

/// The one refusal for missing material: the kinds, where they were looked for, and the remedy
/// of the composition (the CLI's sentence is the one `up` has always printed).
fn missing_material(
    space: &SpaceName,
    dir: &Path,
    missing: &[&str],
    composition: Composition,
) -> String {
    match composition {
        Composition::Cli => format!(
            "the trust root of space {space} is missing ({} under {}); create it with \
             `cotal-authd init --space {space} --idp URL`",
            missing.join(", "),
            shown(dir)
        ),
        Composition::Hosted => {
            let (pin, secrets): (Vec<&str>, Vec<&str>) =
                missing.iter().partition(|kind| **kind == IDP_KIND.1);
            let mut places = Vec::new();
            if !secrets.is_empty() {
                places.push(format!(
                    "{} in the secret store under auth/{}",
                    secrets.join(", "),
                    space_segment(space)
                ));
            }
            if !pin.is_empty() {
                places.push(format!("{} under {}", pin.join(", "), shown(dir)));
            }
            format!(
                "the trust root of space {space} is missing ({}); the hosted composition must \
                 provision the secret store before starting this plane",
                places.join("; ")
            )
        }
    }
}

/// Publishes a CLI trust root's secret files (service keys, callout, issuer, owner secret,
/// system user) into `store`, create-only, and returns the keys it created: how a platform
/// provisions an injected store from `cotal-authd init`'s output. The IdP pin is not a secret
/// and is not copied; the hosted state dir needs its own `idp.json`.
///
/// The root is loaded and cross-checked first, so a broken root is refused before anything is
/// published; then every key already in the store is compared before any is created. A key
/// the store holds with the same bytes is skipped (a rerun is a no-op); with other bytes the
/// copy is refused naming the key, never overwritten, since replacing an owner secret re-keys
/// every owner.
pub fn copy_secrets(
    root: &Path,
    space: &SpaceName,
    store: &dyn SecretStore,
) -> Result<Vec<SecretKey>, String> {
    load_daemon(root, space)?;
    let source = FileSecretStore::new(root);
    let mut wanted = Vec::new();
    for (file, _) in SECRET_FILES {
        let key = SecretKey::of(space, file);
        let bytes = source.get(&key)?.ok_or_else(|| {
            format!(
                "{} vanished while it was being copied",
                describe(&source, &key)
            )
        })?;
        wanted.push((key, bytes));
    }
    for (key, bytes) in &wanted {
        same_or_absent(store, key, bytes)?;
    }
    let mut created = Vec::new();
    for (key, bytes) in wanted {
        if store.create(&key, &bytes)? {
            created.push(key);
        } else {
            // Created concurrently since the comparison: it must still be the same bytes.
            same_or_absent(store, &key, &bytes)?;
        }
    }
    Ok(created)
}

/// Refuses a key `store` holds with other bytes than `bytes`.
fn same_or_absent(store: &dyn SecretStore, key: &SecretKey, bytes: &[u8]) -> Result<(), String> {
    match store.get(key)? {
        Some(held) if held != bytes => Err(format!(
            "{} holds other bytes than the trust root's copy; a secret is never overwritten \
             (delete it from the store first if the trust root's copy is the one to keep)",
            describe(store, key)
        )),
        _ => Ok(()),
    }
}

/// The broker's JWTs (`operator/broker.json` only), for rendering the server config.
pub fn load_broker(root: &Path, space: &SpaceName) -> Result<BrokerMaterial, String> {
    let dir = space_dir(root, space);
    let operator_dir = dir.join(OPERATOR_DIR);
    let path = operator_dir.join(BROKER_FILE);
    if !check_dir(&dir)? || !check_dir(&operator_dir)? || !present(&path)? {
        return Err(format!(
            "the broker JWTs of space {space} are missing ({}); create the trust root with \
             `cotal-authd init --space {space} --idp URL`",
            shown(&path)
        ));
    }
    load(&path, |b, l| BrokerMaterial::parse(b, space, l))
}

/// Loads and cross-checks every file of an existing space dir, and compares its IdP pin.
fn verify_existing(
    root: &Path,
    space: &SpaceName,
    requested: &IdpPin,
) -> Result<Vec<String>, String> {
    let dir = &space_dir(root, space);
    let operator_dir = dir.join(OPERATOR_DIR);
    let mut missing = missing_kinds(dir, &SECRET_FILES)?;
    missing.extend(missing_kinds(dir, &[IDP_KIND])?);
    if check_dir(&operator_dir)? {
        missing.extend(missing_kinds(&operator_dir, &OPERATOR_FILES)?);
    } else {
        missing.extend(OPERATOR_FILES.iter().map(|(_, kind)| *kind));
    }
    if !missing.is_empty() {
        return Err(format!(
            "the trust root of space {space} under {} is incomplete (missing {}); init never \
             regenerates material, since a new owner secret would re-key every owner: restore \
             the files, or remove {} to start over",
            shown(dir),
            missing.join(", "),
            shown(dir)
        ));
    }
    let daemon = load_daemon(root, space)?;
    let broker = load(&operator_dir.join(BROKER_FILE), |b, l| {
        BrokerMaterial::parse(b, space, l)
    })?;
    let operator = load(&operator_dir.join(OPERATOR_FILE), |b, l| {
        OperatorMaterial::parse(b, space, l)
    })?;
    daemon
        .check_broker(&broker)
        .map_err(|e| format!("{}: {}", shown(dir), e.message))?;
    if operator.system_account().public_key() != broker.system_account().public_key
        || operator.data_account().public_key() != broker.data_account().public_key
    {
        return Err(format!(
            "{}: {OPERATOR_FILE} and {BROKER_FILE} name different accounts; they come from \
             different trust roots",
            shown(&operator_dir)
        ));
    }
    let pinned = daemon.idp();
    if pinned != requested {
        return Err(format!(
            "space {space} is pinned to IdP {}; re-pointing it to {} would re-key every owner, \
             so init refuses (remove {} to start over)",
            pinned.url(),
            requested.url(),
            shown(dir)
        ));
    }
    let mut kept: Vec<String> = SECRET_FILES
        .iter()
        .chain([&IDP_KIND])
        .map(|(n, _)| (*n).to_owned())
        .collect();
    kept.extend(
        OPERATOR_FILES
            .iter()
            .map(|(n, _)| format!("{OPERATOR_DIR}/{n}")),
    );
    Ok(kept)
}

/// Upgrades a trust root made before the plane had its own system user: when `system-user.json`
/// is missing and the operator material is there, mints the user from the system account (a
/// fresh seed) and publishes it create-only, synced. Returns the files it added. Everything
/// else missing is left for [`verify_existing`] to refuse.
fn add_system_user(dir: &Path, space: &SpaceName) -> Result<Vec<String>, String> {
    let path = dir.join(SYSTEM_USER_FILE);
    let operator_path = dir.join(OPERATOR_DIR).join(OPERATOR_FILE);
    if present(&path)? || !check_dir(&dir.join(OPERATOR_DIR))? || !present(&operator_path)? {
        return Ok(Vec::new());
    }
    let operator = load(&operator_path, |b, l| OperatorMaterial::parse(b, space, l))?;
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| format!("cannot draw a key seed from the OS random source: {e}"))?;
    let user =
        cotal_core::trust::system_user_for(&operator, &seed, unix_now()?).map_err(|e| e.message)?;
    // Create-only: a concurrent init that added it first wins and this one keeps the winner's.
    if files::create_private(&path, &user.to_bytes())? {
        Ok(vec![SYSTEM_USER_FILE.to_owned()])
    } else {
        Ok(Vec::new())
    }
}

fn unix_now() -> Result<UnixSeconds, String> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| UnixSeconds(d.as_secs()))
        .map_err(|_| "the system clock is before 1970".to_owned())
}

/// Creates `dir` 0700 unless it exists (another `init` may create it meanwhile).
fn ensure_dir(dir: &Path) -> Result<(), String> {
    files::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", shown(dir)))
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    files::sync_dir(dir).map_err(|e| format!("cannot fsync {}: {e}", shown(dir)))
}

/// Removes `.init-*` dirs older than [`STALE_INIT_SECS`]; best effort, since they are never
/// read and a failure here must not block `init`.
fn remove_stale_temp_dirs(auth: &Path) {
    let Ok(entries) = fs::read_dir(auth) else {
        return;
    };
    let stale = Duration::from_secs(STALE_INIT_SECS);
    for entry in entries.flatten() {
        let is_temp = entry.file_name().to_string_lossy().starts_with(INIT_PREFIX);
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > stale);
        if is_temp && old {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Creates the space's trust root once (see the module doc), or verifies and keeps the one
/// there. The IdP URL is validated before anything is touched.
pub fn init(root: &Path, space: &SpaceName, idp_url: &str) -> Result<InitOutcome, String> {
    let pin = IdpPin::from_url(idp_url).map_err(|e| e.message)?;
    let dir = space_dir(root, space);
    let keep = |dir: PathBuf| {
        let added = add_system_user(&dir, space)?;
        let kept = verify_existing(root, space, &pin)?
            .into_iter()
            .filter(|f| !added.contains(f))
            .collect();
        Ok(InitOutcome::Kept { dir, kept, added })
    };
    if check_dir(&dir)? {
        return keep(dir);
    }
    let auth = root.join("auth");
    ensure_dir(root)?;
    ensure_dir(&auth)?;
    remove_stale_temp_dirs(&auth);

    let mut entropy = [0u8; ProvisionSeeds::ENTROPY_BYTES + 8];
    getrandom::fill(&mut entropy)
        .map_err(|e| format!("cannot draw key seeds from the OS random source: {e}"))?;
    let (seed_bytes, tag) = entropy.split_at(ProvisionSeeds::ENTROPY_BYTES);
    let seeds = seed_bytes
        .try_into()
        .map(ProvisionSeeds::from_entropy)
        .map_err(|_| "the seed buffer has the wrong length".to_owned())?;
    let material = provision(space, pin.clone(), &seeds, unix_now()?).map_err(|e| e.message)?;

    let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = auth.join(format!("{INIT_PREFIX}{}-{tag}", std::process::id()));
    let published = fill_and_publish(&tmp, &dir, &auth, &material);
    match published {
        Ok(true) => Ok(InitOutcome::Created { dir }),
        Ok(false) => {
            let _ = fs::remove_dir_all(&tmp);
            keep(dir)
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// Writes the material into `tmp` and renames it onto `dir` if `dir` does not exist yet.
/// `Ok(false)`: another `init` published first.
fn fill_and_publish(
    tmp: &Path,
    dir: &Path,
    auth: &Path,
    material: &cotal_core::trust::TrustRoot,
) -> Result<bool, String> {
    DirBuilder::new()
        .mode(0o700)
        .create(tmp)
        .map_err(|e| format!("cannot create {}: {e}", shown(tmp)))?;
    for (name, bytes) in material.daemon.files() {
        write_new(&tmp.join(name), &bytes)?;
    }
    let operator_dir = tmp.join(OPERATOR_DIR);
    DirBuilder::new()
        .mode(0o700)
        .create(&operator_dir)
        .map_err(|e| format!("cannot create {}: {e}", shown(&operator_dir)))?;
    write_new(
        &operator_dir.join(OPERATOR_FILE),
        &material.operator.to_bytes(),
    )?;
    write_new(&operator_dir.join(BROKER_FILE), &material.broker.to_bytes())?;
    sync_dir(&operator_dir)?;
    sync_dir(tmp)?;
    match rustix::fs::renameat_with(CWD, tmp, CWD, dir, RenameFlags::NOREPLACE) {
        Ok(()) => sync_dir(auth).map(|()| true),
        Err(Errno::EXIST | Errno::NOTEMPTY) => Ok(false),
        Err(e) => Err(format!(
            "cannot publish the trust root at {} (an atomic create-only rename): {e}",
            shown(dir)
        )),
    }
}
