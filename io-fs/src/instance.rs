//! The plane's instance identity: `<root>/space.<hex>/auth-instance.json` —
//! `{"ver":1,"instanceId","serveIdentity":{"id","seed"}}`, the reference's CLI layout
//! (reference-auth-service §9.1). The serve seed is a credential (0600), and the instance id is
//! what makes a restart re-register the *same* instance (and so fence its predecessor). Created
//! once, by a create-only link, so two first starts converge on one identity.

use std::path::{Path, PathBuf};

use cotal_core::names::{InstanceId, SpaceName};
use nkeys::KeyPair;
use serde_json::{json, Value};

use crate::{files, random, trust};

const INSTANCE_FILE: &str = "auth-instance.json";
/// The one version of the file this build writes and reads.
const VERSION: u64 = 1;

/// What a plane is across restarts.
#[derive(Debug)]
pub struct Identity {
    pub instance: InstanceId,
    /// The serve identity's public nkey (`U…`): the actor of the gate principal.
    pub serve_key: String,
}

/// Where the plane's instance identity for `space` lives.
pub fn path(root: &Path, space: &SpaceName) -> PathBuf {
    root.join(trust::space_segment(space)).join(INSTANCE_FILE)
}

/// Loads the plane's instance identity for `space`, creating it on first start. Two first
/// starts at once converge on the one that linked its file first.
pub fn load_or_create(root: &Path, space: &SpaceName) -> Result<Identity, String> {
    let path = path(root, space);
    if let Some(bytes) = files::read_regular(&path)? {
        return parse(&path, &bytes);
    }
    let dir = path
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", path.display()))?;
    files::ensure_private_dir(dir)?;
    let seed = KeyPair::new_user()
        .seed()
        .map_err(|e| format!("cannot encode a new serve nkey: {e}"))?;
    let pair =
        KeyPair::from_seed(&seed).map_err(|e| format!("cannot decode the new serve nkey: {e}"))?;
    let doc = json!({
        "ver": VERSION,
        "instanceId": InstanceId::mint(random::entropy()?).as_str(),
        "serveIdentity": {"id": pair.public_key(), "seed": seed},
    });
    files::create_private(&path, format!("{doc:#}\n").as_bytes())?;
    let bytes = files::read_regular(&path)?
        .ok_or_else(|| format!("{} vanished right after it was created", path.display()))?;
    parse(&path, &bytes)
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Identity, String> {
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
