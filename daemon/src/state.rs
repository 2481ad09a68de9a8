//! The plane's state dir: its persisted identity (serve nkey, instance id) and the discovery
//! file. The dir is 0700 and every file 0600: the seed is a credential, and the instance id is
//! what makes a restart re-register the *same* instance (and so fence its predecessor).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cotal_core::names::{DerivedOwner, InstanceId, OpId, OwnerToken};
use nkeys::KeyPair;

/// The discovery file a ready plane writes and every exit removes.
pub const DISCOVERY_FILE: &str = "auth-service.json";
const SEED_FILE: &str = "serve.nk";
const INSTANCE_FILE: &str = "instance-id";

/// What a plane is across restarts.
#[derive(Debug)]
pub struct Identity {
    /// The serve identity's public nkey (`U…`).
    pub serve_key: String,
    pub instance: InstanceId,
    /// `u_` + 26 base32 of a hash of the serve key: stable for as long as the seed is.
    pub owner: OwnerToken,
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

/// Writes `bytes` to `path` atomically (a 0600 temp file renamed over it).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn read_private(path: &Path) -> Result<Option<String>, String> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// 20 bytes from the kernel's CSPRNG.
pub fn entropy() -> Result<[u8; 20], String> {
    let mut buf = [0u8; 20];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(buf)
}

/// A fresh operation id: every start is a new operation, never a resumed one, because a
/// restart cannot prove its predecessor dead (one live executor per op id).
pub fn fresh_op_id() -> Result<OpId, String> {
    Ok(OpId::mint(entropy()?))
}

/// Loads the identity persisted in `dir`, creating what is missing.
pub fn load_or_create(dir: &Path) -> Result<Identity, String> {
    let seed_path = dir.join(SEED_FILE);
    let seed = match read_private(&seed_path)? {
        Some(seed) => seed,
        None => {
            let seed = KeyPair::new_user()
                .seed()
                .map_err(|e| format!("cannot encode a new serve nkey: {e}"))?;
            write_private(&seed_path, seed.as_bytes())?;
            seed
        }
    };
    let pair = KeyPair::from_seed(&seed)
        .map_err(|e| format!("{} does not hold an nkey seed: {e}", seed_path.display()))?;
    let instance_path = dir.join(INSTANCE_FILE);
    let instance = match read_private(&instance_path)? {
        Some(id) => InstanceId::parse(&id)
            .map_err(|e| format!("{} is corrupt: {e}", instance_path.display()))?,
        None => {
            let id = InstanceId::mint(entropy()?);
            write_private(&instance_path, id.as_str().as_bytes())?;
            id
        }
    };
    let serve_key = pair.public_key();
    let owner = DerivedOwner::derive_from_user_key(&serve_key).into_owner();
    Ok(Identity {
        serve_key,
        instance,
        owner,
    })
}

/// Where the discovery file of `dir` lives.
pub fn discovery_path(dir: &Path) -> PathBuf {
    dir.join(DISCOVERY_FILE)
}

/// Removes the discovery file if it is this process's: a successor on the same state dir may
/// already have written its own, which must stay.
pub fn remove_discovery_if_ours(path: &Path) {
    let ours = fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("pid").and_then(serde_json::Value::as_u64))
        == Some(u64::from(std::process::id()));
    if ours {
        let _ = fs::remove_file(path);
    }
}
