//! `cotal-authd issuer rotate|prune`: the operator's rotation of the space's bearer-issuer key
//! (reference §10.2). `rotate` adds a fresh Ed25519 key to `issuer.json` and makes it the
//! signer; every key already there stays published at `/jwks` and accepted by the exchange's
//! verifier and the callout. `prune` removes every key but the signer once no bearer a previous
//! key signed can still be live: [`KEY_RETENTION_SECS`] after the last rotation (one JWKS cache
//! lifetime plus the longest bearer), or at once with `--force`. A running plane adopts either
//! within seconds, without a restart (it re-reads its issuer keys). The rules of the key set are
//! `cotal_core::trust::IssuerKeys`'; this module reads, writes and says.

use std::path::Path;

use cotal_core::names::SpaceName;
use cotal_core::trust::{IssuerKey, IssuerKeys, ISSUER_FILE};
use cotal_io_fs::secrets::{FileSecretStore, SecretKey, SecretStore};
use cotal_io_fs::{files, random, trust};
use cotal_io_http::bearer::KEY_RETENTION_SECS;
use serde_json::{json, Value};

/// The last rotation of a space's issuer, beside its trust root: when the keys it replaced may
/// stop being published.
const ROTATION_FILE: &str = "issuer-rotation.json";

/// The issuer keys and where they live.
struct Issuer {
    store: FileSecretStore,
    key: SecretKey,
    keys: IssuerKeys,
}

fn load(root: &Path, space: &SpaceName) -> Result<Issuer, String> {
    // The whole daemon material first: a rotation of a broken trust root is refused as `up`
    // refuses it.
    let keys = trust::load_daemon(root, space)?.issuer().clone();
    Ok(Issuer {
        store: FileSecretStore::new(root),
        key: SecretKey::of(space, ISSUER_FILE),
        keys,
    })
}

fn rotation_path(root: &Path, space: &SpaceName) -> std::path::PathBuf {
    trust::space_dir(root, space).join(ROTATION_FILE)
}

/// `cotal-authd issuer rotate`: a fresh key signs from now on.
pub fn rotate(root: &Path, space: &SpaceName, now: u64) -> Result<String, String> {
    let issuer = load(root, space)?;
    let next = IssuerKey::from_seed(random::random_bytes()?).map_err(|e| e.message)?;
    let rotated = issuer.keys.rotated(next).map_err(|e| e.message)?;
    // The rotation time first: a crash between the two writes leaves a record that only makes
    // a later prune wait, never one that lets it cut a key early.
    let record = json!({"ver": 1, "rotatedAt": now, "kid": rotated.active().kid()});
    files::write_private(&rotation_path(root, space), record.to_string().as_bytes())?;
    issuer.store.put(&issuer.key, &rotated.to_bytes())?;
    let previous: Vec<&str> = rotated.published().map(IssuerKey::kid).collect();
    Ok(format!(
        "rotated the bearer issuer of space {space}: key {} signs from now on; {} stay \
         published and accepted ({}); prune them with `cotal-authd issuer prune --space {space}` \
         from {} on (a running plane adopts the new key within seconds)",
        rotated.active().kid(),
        previous.len(),
        previous.join(", "),
        crate::clock::rfc3339_secs(now.saturating_add(KEY_RETENTION_SECS))
    ))
}

/// `cotal-authd issuer prune`: only the signer stays.
pub fn prune(root: &Path, space: &SpaceName, now: u64, force: bool) -> Result<String, String> {
    let issuer = load(root, space)?;
    let gone: Vec<String> = issuer
        .keys
        .published()
        .map(|k| k.kid().to_owned())
        .collect();
    if gone.is_empty() {
        return Ok(format!(
            "the bearer issuer of space {space} publishes only its signing key {}; nothing to \
             prune",
            issuer.keys.active().kid()
        ));
    }
    if !force {
        let safe_from = last_rotation(root, space)?.saturating_add(KEY_RETENTION_SECS);
        if now < safe_from {
            return Err(format!(
                "a bearer signed by {} may still be live until {} ({KEY_RETENTION_SECS} s after \
                 the last rotation); prune from then on, or pass --force to refuse those bearers \
                 now",
                gone.join(", "),
                crate::clock::rfc3339_secs(safe_from)
            ));
        }
    }
    issuer
        .store
        .put(&issuer.key, &issuer.keys.pruned().to_bytes())?;
    Ok(format!(
        "pruned {} from the bearer issuer of space {space}: only {} is published and accepted \
         (a running plane adopts it within seconds)",
        gone.join(", "),
        issuer.keys.active().kid()
    ))
}

/// When the keys were last rotated. A trust root with no record (its extra keys came from
/// elsewhere) cannot tell when they stopped signing: its prune needs `--force`.
fn last_rotation(root: &Path, space: &SpaceName) -> Result<u64, String> {
    let path = rotation_path(root, space);
    let Some(bytes) = files::read_regular(&path)? else {
        return Err(format!(
            "no rotation is recorded at {}, so when the other keys stopped signing is unknown; \
             prune with --force once no bearer they signed can be live",
            path.display()
        ));
    };
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v.get("rotatedAt").and_then(Value::as_u64))
        .ok_or_else(|| format!("{} is not a rotation record", path.display()))
}
