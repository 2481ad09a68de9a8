//! The plane's files beside its trust root: the persisted instance identity and the discovery
//! file. Directories are 0700 and files 0600: the serve seed is a credential, and the instance
//! id is what makes a restart re-register the *same* instance (and so fence its predecessor).
//!
//! * `<root>/space.<hex>/auth-instance.json` — `{"ver":1,"instanceId","serveIdentity":{"id",
//!   "seed"}}`, the reference's CLI layout (reference-auth-service §9.1). Created once, by a
//!   create-only link, so two first starts converge on one identity.
//! * `<root>/auth/space.<hex>/auth-service.json` — the discovery file of a ready plane:
//!   `{"ver":1,"pid","url","cap","space","server","instanceId","processEpoch","generation",
//!   "registrationRevision","publicUrl"?}`, `cap` being the loopback face's capability.
//! * `<root>/space.<hex>/auth-registration.json` — `{"ver":1,"opId","pid"}`, the operation a
//!   start is registering under, recorded durably before its freeze and removed once the
//!   registration completes, so a start after a crash resumes it instead of finding its own
//!   freeze in the way (crash-safe self-registration).
//! * `<root>/space.<hex>/high-water.json` — `{"ver":1,"gates":{"<gate key>":{"revision",
//!   "processEpoch","generation"}}}`, the highest coordinates this state dir saw of its gate,
//!   so a start notices a store that rolled back underneath it (`cotal_core::rollback`).
//! * `<root>/auth/manager-instance.<hex>.json` — read only: the workspace's own manager's
//!   persisted identity `{"instanceId","serveIdentity":{"id","seed"}}` as the reference's
//!   manager writes it, which makes that instance a manager-caller candidate (§3.10).
//! * `<root>/space.<hex>/auth-registration.lock` — held (`flock`) by the one start registering:
//!   while a start holds it, the recorded operation has a live executor and nobody else runs it;
//!   the kernel drops it when that process dies, which is the proof a resume needs.

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cotal_core::kv::Revision;
use cotal_core::manager::LocalManager;
use cotal_core::names::{InstanceId, OpId, SpaceName};
use cotal_core::rollback::Mark;
use cotal_io_fs::trust;
use nkeys::KeyPair;
use rustix::fs::{flock, FlockOperation, OFlags};
use rustix::io::Errno;
use serde_json::{json, Value};

/// The discovery file a ready plane writes and every exit removes.
pub const DISCOVERY_FILE: &str = "auth-service.json";
/// The plane's instance identity, beside the space's other per-root state.
const INSTANCE_FILE: &str = "auth-instance.json";
/// The operation a start registers under, until it completes.
const REGISTRATION_RECORD_FILE: &str = "auth-registration.json";
/// The rollback high-water marks.
const HIGH_WATER_FILE: &str = "high-water.json";
/// Held by the one start registering the instance.
const REGISTRATION_LOCK_FILE: &str = "auth-registration.lock";
/// The one version of every file here this build writes and reads.
const VERSION: u64 = 1;

/// What a plane is across restarts.
#[derive(Debug)]
pub struct Identity {
    pub instance: InstanceId,
    /// The serve identity's public nkey (`U…`): the actor of the gate principal.
    pub serve_key: String,
}

/// Creates `dir` (and parents) and forces it to 0700.
pub fn ensure_dir(dir: &Path) -> Result<(), String> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create the state dir {}: {e}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private (0700): {e}", dir.display()))
}

/// A fresh 0600 temp file beside `path` holding `bytes`, synced.
fn write_temp(path: &Path, bytes: &[u8]) -> Result<PathBuf, String> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    Ok(tmp)
}

/// Writes `bytes` to `path` atomically (a synced 0600 temp file renamed over it).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = write_temp(path, bytes)?;
    fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Publishes `bytes` at `path` only if nothing is there: a synced temp file hard-linked into
/// place (the link fails when `path` exists). Returns whether this call created it.
pub(crate) fn create_private(path: &Path, bytes: &[u8]) -> Result<bool, String> {
    let tmp = write_temp(path, bytes)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}

/// Reads a regular file, refusing a symlink or anything else in its place; `None` when absent.
pub(crate) fn read_regular(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        Ok(m) if !m.file_type().is_file() => {
            return Err(format!(
                "{} is not a regular file (a symlink or another kind of entry); refusing to \
                 read through it",
                path.display()
            ))
        }
        Ok(_) => {}
    }
    fs::read(path)
        .map(Some)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// 20 bytes from the kernel's CSPRNG (what an id mints from).
pub fn entropy() -> Result<[u8; 20], String> {
    random_bytes()
}

/// `N` bytes from the kernel's CSPRNG.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut buf = [0u8; N];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(buf)
}

/// A fresh operation id.
pub fn fresh_op_id() -> Result<OpId, String> {
    Ok(OpId::mint(entropy()?))
}

/// How long a start waits for another start of the same instance to finish registering.
const REGISTRATION_LOCK_WAIT: Duration = Duration::from_secs(30);
const REGISTRATION_LOCK_POLL: Duration = Duration::from_millis(20);

/// The registration lock of one instance, held until dropped.
#[derive(Debug)]
pub struct RegistrationLock {
    _file: File,
}

/// Takes the registration lock of `space`'s instance, waiting while another start holds it
/// (its registration takes milliseconds; a stopped or hung one is refused after a bound).
pub async fn lock_registration(root: &Path, space: &SpaceName) -> Result<RegistrationLock, String> {
    let dir = root.join(trust::space_segment(space));
    ensure_dir(&dir)?;
    let path = dir.join(REGISTRATION_LOCK_FILE);
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
    let waited = std::time::Instant::now();
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(RegistrationLock { _file: file }),
            Err(Errno::WOULDBLOCK) if waited.elapsed() < REGISTRATION_LOCK_WAIT => {
                tokio::time::sleep(REGISTRATION_LOCK_POLL).await;
            }
            Err(Errno::WOULDBLOCK) => {
                return Err(format!(
                    "another start of this auth instance has been registering for {}s and still \
                     holds {}; stop it (a stopped or hung `cotal-authd up`) and start again",
                    REGISTRATION_LOCK_WAIT.as_secs(),
                    path.display()
                ))
            }
            Err(e) => return Err(format!("cannot lock {}: {e}", path.display())),
        }
    }
}

/// Where the registration record of `space`'s instance lives.
pub fn registration_record_path(root: &Path, space: &SpaceName) -> PathBuf {
    root.join(trust::space_segment(space))
        .join(REGISTRATION_RECORD_FILE)
}

/// The op id a start recorded before its freeze; `None` when there is no record. A record this
/// build cannot read is refused: guessing would either resume the wrong operation or abandon a
/// freeze.
pub fn load_registration(path: &Path) -> Result<Option<OpId>, String> {
    let Some(bytes) = read_regular(path)? else {
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

/// Records `op_id` durably (synced temp file, rename, synced directory) before the freeze it
/// names is attempted.
pub fn record_registration(path: &Path, op_id: &OpId) -> Result<(), String> {
    let doc = json!({"ver": VERSION, "opId": op_id.as_str(), "pid": std::process::id()});
    write_private(path, format!("{doc:#}\n").as_bytes())?;
    sync_parent(path)
}

/// Removes the record once its registration completed, durably.
pub fn clear_registration(path: &Path) -> Result<(), String> {
    match fs::remove_file(path) {
        Ok(()) => sync_parent(path),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot remove {}: {e}", path.display())),
    }
}

/// Where the high-water marks of `space`'s instance live.
pub fn high_water_path(root: &Path, space: &SpaceName) -> PathBuf {
    root.join(trust::space_segment(space)).join(HIGH_WATER_FILE)
}

/// Everything the rollback check remembers of the stores: per gate its [`Mark`], per stream the
/// highest last sequence seen (`high-water.json`: `{ver, gates: {key: {revision, processEpoch,
/// generation}}, streams: {name: lastSeq}}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HighWater {
    pub gates: BTreeMap<String, Mark>,
    pub streams: BTreeMap<String, u64>,
}

impl HighWater {
    /// Raises the mark of `gate_key` to `seen` (never lowers it).
    pub fn raise_gate(&mut self, gate_key: &str, seen: Mark) {
        let mark = match self.gates.get(gate_key) {
            Some(before) => before.max(seen),
            None => seen,
        };
        self.gates.insert(gate_key.to_owned(), mark);
    }

    /// Raises the mark of `stream` to `last_seq` (never lowers it).
    pub fn raise_stream(&mut self, stream: &str, last_seq: u64) {
        let mark = self.streams.entry(stream.to_owned()).or_insert(0);
        *mark = (*mark).max(last_seq);
    }
}

/// The marks recorded at `path`; empty when none were recorded yet. A file this build cannot
/// read is refused: silently dropping a mark would blind the rollback check.
pub fn load_marks(path: &Path) -> Result<HighWater, String> {
    let Some(bytes) = read_regular(path)? else {
        return Ok(HighWater::default());
    };
    let corrupt = || {
        format!(
            "{} is not a high-water file this build reads; restore it, or remove it deliberately \
             (the rollback check then starts over from the store as it is)",
            path.display()
        )
    };
    let doc: Value = serde_json::from_slice(&bytes).map_err(|_| corrupt())?;
    if doc.get("ver").and_then(Value::as_u64) != Some(VERSION) {
        return Err(corrupt());
    }
    let mut marks = HighWater::default();
    if let Some(gates) = doc.get("gates") {
        for (key, entry) in gates.as_object().ok_or_else(corrupt)? {
            let number = |name: &str| entry.get(name).and_then(Value::as_u64).ok_or_else(corrupt);
            marks.gates.insert(
                key.clone(),
                Mark {
                    revision: Revision(number("revision")?),
                    process_epoch: number("processEpoch")?,
                    generation: number("generation")?,
                },
            );
        }
    }
    if let Some(streams) = doc.get("streams") {
        for (name, seq) in streams.as_object().ok_or_else(corrupt)? {
            marks
                .streams
                .insert(name.clone(), seq.as_u64().ok_or_else(corrupt)?);
        }
    }
    Ok(marks)
}

/// Records `marks` durably (synced temp file, rename, synced directory).
pub fn save_marks(path: &Path, marks: &HighWater) -> Result<(), String> {
    let gates: serde_json::Map<String, Value> = marks
        .gates
        .iter()
        .map(|(key, mark)| {
            (
                key.clone(),
                json!({
                    "revision": mark.revision.0,
                    "processEpoch": mark.process_epoch,
                    "generation": mark.generation,
                }),
            )
        })
        .collect();
    let doc = json!({"ver": VERSION, "gates": gates, "streams": marks.streams});
    write_private(path, format!("{doc:#}\n").as_bytes())?;
    sync_parent(path)
}

fn sync_parent(path: &Path) -> Result<(), String> {
    let dir = path
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", path.display()))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

/// Where the plane's instance identity for `space` lives.
pub fn instance_path(root: &Path, space: &SpaceName) -> PathBuf {
    root.join(trust::space_segment(space)).join(INSTANCE_FILE)
}

/// Loads the plane's instance identity for `space`, creating it on first start. Two first
/// starts at once converge on the one that linked its file first.
pub fn load_or_create(root: &Path, space: &SpaceName) -> Result<Identity, String> {
    let path = instance_path(root, space);
    if let Some(bytes) = read_regular(&path)? {
        return parse_identity(&path, &bytes);
    }
    let dir = path
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", path.display()))?;
    ensure_dir(dir)?;
    let seed = KeyPair::new_user()
        .seed()
        .map_err(|e| format!("cannot encode a new serve nkey: {e}"))?;
    let pair =
        KeyPair::from_seed(&seed).map_err(|e| format!("cannot decode the new serve nkey: {e}"))?;
    let doc = json!({
        "ver": VERSION,
        "instanceId": InstanceId::mint(entropy()?).as_str(),
        "serveIdentity": {"id": pair.public_key(), "seed": seed},
    });
    create_private(&path, format!("{doc:#}\n").as_bytes())?;
    let bytes = read_regular(&path)?
        .ok_or_else(|| format!("{} vanished right after it was created", path.display()))?;
    parse_identity(&path, &bytes)
}

fn parse_identity(path: &Path, bytes: &[u8]) -> Result<Identity, String> {
    let corrupt = |why: &str| {
        format!(
            "{} is not a valid auth instance identity ({why}); restore it from backup, since a \
             new one registers a fresh instance that never fences this one",
            path.display()
        )
    };
    let doc: Value = serde_json::from_slice(bytes).map_err(|_| corrupt("not JSON"))?;
    match doc.get("ver").and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(other) => {
            return Err(format!(
                "{} has version {other}; this build reads version {VERSION}",
                path.display()
            ))
        }
        None => return Err(corrupt("no version")),
    }
    let instance = doc
        .get("instanceId")
        .and_then(Value::as_str)
        .and_then(|s| InstanceId::parse(s).ok())
        .ok_or_else(|| corrupt("no valid instanceId"))?;
    let serve = doc.get("serveIdentity");
    let id = serve
        .and_then(|s| s.get("id"))
        .and_then(Value::as_str)
        .ok_or_else(|| corrupt("no serveIdentity.id"))?;
    let pair = serve
        .and_then(|s| s.get("seed"))
        .and_then(Value::as_str)
        .and_then(|seed| KeyPair::from_seed(seed).ok())
        .filter(|p| p.public_key().starts_with('U'))
        .ok_or_else(|| corrupt("serveIdentity.seed is not a user nkey seed"))?;
    if pair.public_key() != id {
        return Err(corrupt(
            "serveIdentity.seed does not match serveIdentity.id",
        ));
    }
    Ok(Identity {
        instance,
        serve_key: id.to_owned(),
    })
}

/// What a ready plane says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    pub pid: u32,
    /// The loopback face's URL.
    pub url: String,
    /// The loopback capability (which is why the file is 0600).
    pub cap: String,
    /// The public face's URL, when it is open.
    pub public_url: Option<String>,
    /// The server it serves on, without any userinfo.
    pub server: String,
    pub instance: String,
    pub process_epoch: u64,
    pub generation: u64,
    pub registration_revision: u64,
}

/// Where the discovery file of `space` lives.
pub fn discovery_path(root: &Path, space: &SpaceName) -> PathBuf {
    discovery_in(&trust::space_dir(root, space))
}

/// The discovery file in a space's trust-root directory (which is also its actor ledger's).
pub fn discovery_in(space_dir: &Path) -> PathBuf {
    space_dir.join(DISCOVERY_FILE)
}

/// Writes the discovery file (atomically, 0600).
pub fn write_discovery(path: &Path, space: &SpaceName, d: &Discovery) -> Result<(), String> {
    let mut doc = json!({
        "ver": VERSION,
        "pid": d.pid,
        "url": d.url,
        "cap": d.cap,
        "space": space.as_str(),
        "server": d.server,
        "instanceId": d.instance,
        "processEpoch": d.process_epoch,
        "generation": d.generation,
        "registrationRevision": d.registration_revision,
    });
    if let (Some(url), Some(map)) = (&d.public_url, doc.as_object_mut()) {
        map.insert("publicUrl".into(), url.clone().into());
    }
    write_private(path, format!("{doc:#}\n").as_bytes())
}

/// Reads a discovery file; `None` when there is none.
pub fn read_discovery(path: &Path) -> Result<Option<Discovery>, String> {
    let Some(bytes) = read_regular(path)? else {
        return Ok(None);
    };
    let corrupt = || {
        format!(
            "{} is not a discovery file this build reads",
            path.display()
        )
    };
    let doc: Value = serde_json::from_slice(&bytes).map_err(|_| corrupt())?;
    if doc.get("ver").and_then(Value::as_u64) != Some(VERSION) {
        return Err(corrupt());
    }
    let text = |name: &str| {
        doc.get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(corrupt)
    };
    let number = |name: &str| doc.get(name).and_then(Value::as_u64).ok_or_else(corrupt);
    Ok(Some(Discovery {
        pid: u32::try_from(number("pid")?).map_err(|_| corrupt())?,
        url: text("url")?,
        cap: text("cap")?,
        public_url: doc
            .get("publicUrl")
            .and_then(Value::as_str)
            .map(str::to_owned),
        server: text("server")?,
        instance: text("instanceId")?,
        process_epoch: number("processEpoch")?,
        generation: number("generation")?,
        registration_revision: number("registrationRevision")?,
    }))
}

/// True while process `pid` runs.
pub fn pid_alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

/// Removes a discovery file whose plane no longer runs (a `kill -9` leaves one behind).
pub fn remove_discovery_if_dead(path: &Path) {
    let dead = matches!(read_discovery(path), Ok(Some(d)) if !pid_alive(d.pid));
    if dead {
        let _ = fs::remove_file(path);
    }
}

/// Removes the discovery file if it is this process's: a successor on the same state dir may
/// already have written its own, which must stay.
pub fn remove_discovery_if_ours(path: &Path) {
    let ours = matches!(read_discovery(path), Ok(Some(d)) if d.pid == std::process::id());
    if ours {
        let _ = fs::remove_file(path);
    }
}

/// `url` without userinfo, for files and logs: a server URL may carry credentials.
pub fn redacted(url: &str) -> String {
    url.split(',')
        .map(|one| match one.split_once("://") {
            Some((scheme, rest)) => match rest.split_once('@') {
                Some((_, host)) => format!("{scheme}://{host}"),
                None => one.to_owned(),
            },
            None => one.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the workspace's own manager persists its identity for `space` (the reference's
/// `manager-instance.<hex(space)>.json` in the auth dir).
pub fn local_manager_path(root: &Path, space: &SpaceName) -> PathBuf {
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
pub fn load_local_manager(path: &Path) -> Result<Option<LocalManager>, String> {
    let shown = path.display();
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "the local manager identity {shown} is unreadable: {e}"
            ))
        }
    };
    if !meta.file_type().is_file() {
        return Err(format!(
            "the local manager identity {shown} is not a regular file; refusing it"
        ));
    }
    let bytes = fs::read(path)
        .map_err(|e| format!("the local manager identity {shown} is unreadable: {e}"))?;
    LocalManager::from_identity(&bytes)
        .map(Some)
        .map_err(|why| format!("the local manager identity {shown} is malformed: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_drops_userinfo_from_every_url() {
        assert_eq!(
            redacted("nats://u:p@a:4222,nats://b:4222"),
            "nats://a:4222,nats://b:4222"
        );
        assert_eq!(redacted("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }

    #[test]
    fn the_local_manager_identity_is_read_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let space = SpaceName::parse("demo").unwrap();
        let path = local_manager_path(dir.path(), &space);
        assert!(path.ends_with("auth/manager-instance.64656d6f.json"));
        assert_eq!(load_local_manager(&path).unwrap(), None);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let serve = "U".to_owned() + &"A".repeat(55);
        let doc = serde_json::json!({"instanceId": "llllllllllllllllllllllllll",
            "serveIdentity": {"id": serve, "seed": "SU..."}});
        fs::write(&path, doc.to_string()).unwrap();
        let local = load_local_manager(&path).unwrap().unwrap();
        assert_eq!(local.instance.as_str(), "llllllllllllllllllllllllll");
        assert_eq!(local.serve.to_string(), format!("local.{serve}"));
        fs::write(&path, "{\"instanceId\": \"x\"}").unwrap();
        let e = load_local_manager(&path).unwrap_err();
        assert!(e.contains("is malformed"), "{e}");
        fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        fs::write(&elsewhere, doc.to_string()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let e = load_local_manager(&path).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
