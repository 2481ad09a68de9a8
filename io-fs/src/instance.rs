//! The plane's instance identity: `<root>/space.<hex>/auth-instance.json` —
//! `{"ver":1,"instanceId","serveIdentity":{"id","seed"}}`, the reference's CLI layout
//! (reference-auth-service §9.1). The serve seed is a credential (0600), and the instance id is
//! what makes a restart re-register the *same* instance (and so fence its predecessor). Created
//! once, by a create-only link, so two first starts converge on one identity.
//!
//! A hosted plane keeps the same document in its secret store instead
//! ([`load_or_create_in`]), since the serve seed is a private key and the hosted state dir is
//! not a place for one.

use std::path::{Path, PathBuf};

use cotal_core::names::{InstanceId, SpaceName};
use nkeys::KeyPair;
use serde_json::{json, Value};

use crate::secrets::{describe, SecretKey, SecretStore};
use crate::{files, random, trust};

const INSTANCE_FILE: &str = "auth-instance.json";
/// The hosted identity's file name under the space's secret keys (the reference's store key
/// `auth/space.<hex>/instance.json`).
const STORE_INSTANCE_FILE: &str = "instance.json";
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
        return parse(&path.display().to_string(), &bytes);
    }
    let dir = path
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", path.display()))?;
    files::ensure_private_dir(dir)?;
    files::create_private(&path, &mint()?)?;
    let bytes = files::read_regular(&path)?
        .ok_or_else(|| format!("{} vanished right after it was created", path.display()))?;
    parse(&path.display().to_string(), &bytes)
}

/// A hosted plane's instance identity, kept in `store` under `auth/space.<hex>/instance.json`
/// (its serve seed is a private key, so it never lives in the hosted state dir): loaded, or
/// minted and published create-only, so of two concurrent first calls exactly one creates it
/// and the other adopts the winner's. The same document as the file identity.
pub fn load_or_create_in(store: &dyn SecretStore, space: &SpaceName) -> Result<Identity, String> {
    let key = SecretKey::of(space, STORE_INSTANCE_FILE);
    let label = describe(store, &key);
    if let Some(bytes) = store.get(&key)? {
        return parse(&label, &bytes);
    }
    store.create(&key, &mint()?)?;
    let bytes = store
        .get(&key)?
        .ok_or_else(|| format!("{label} vanished right after it was created"))?;
    parse(&label, &bytes)
}

/// A fresh identity document: a new instance id and a new serve user nkey.
fn mint() -> Result<Vec<u8>, String> {
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
    Ok(format!("{doc:#}\n").into_bytes())
}

/// Parses an identity document; `label` names where it was read (a path or a secret key).
fn parse(label: &str, bytes: &[u8]) -> Result<Identity, String> {
    let corrupt = |why: &str| {
        format!(
            "{label} is not a valid auth instance identity ({why}); restore it from backup, \
             since a new one registers a fresh instance that never fences this one"
        )
    };
    let doc: Value = serde_json::from_slice(bytes).map_err(|_| corrupt("not JSON"))?;
    match doc.get("ver").and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(other) => {
            return Err(format!(
                "{label} has version {other}; this build reads version {VERSION}"
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
