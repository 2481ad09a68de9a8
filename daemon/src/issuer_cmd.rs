//! `cotal-authd issuer rotate|prune`: the operator's rotation of the space's bearer-issuer key
//! (reference §10.2). `rotate` adds a fresh Ed25519 key to `issuer.json` and makes it the
//! signer; every key already there stays published at `/jwks` and accepted by the exchange's
//! verifier and the callout. `prune` removes every key but the signer once no bearer a previous
//! key signed can still be live: [`KEY_RETENTION_SECS`] after the last rotation (one JWKS cache
//! lifetime plus the longest bearer), or at once with `--force`. A running plane adopts either
//! within seconds, without a restart (it re-reads its issuer keys). The rules of the key set are
//! `cotal_core::trust::IssuerKeys`', what the verbs say and when a prune may run
//! `cotal_core::trust::rotation`'s; the files are `cotal_io_fs::trust`'s. This module wires them.

use std::path::Path;

use cotal_core::names::SpaceName;
use cotal_core::trust::rotation;
use cotal_core::trust::{IssuerKey, IssuerKeys};
use cotal_io_fs::{random, trust};
use cotal_io_http::bearer::KEY_RETENTION_SECS;

/// The issuer keys of `space`, read with the whole daemon material first: a rotation of a
/// broken trust root is refused as `up` refuses it.
fn load(root: &Path, space: &SpaceName) -> Result<IssuerKeys, String> {
    Ok(trust::load_daemon(root, space)?.issuer().clone())
}

/// `cotal-authd issuer rotate`: a fresh key signs from now on.
pub fn rotate(root: &Path, space: &SpaceName, now: u64) -> Result<String, String> {
    let keys = load(root, space)?;
    let next = IssuerKey::from_seed(random::random_bytes()?).map_err(|e| e.message)?;
    let rotated = keys.rotated(next).map_err(|e| e.message)?;
    // The rotation time first: a crash between the two writes leaves a record that only makes
    // a later prune wait, never one that lets it cut a key early.
    trust::record_rotation(root, space, now, rotated.active().kid())?;
    trust::write_issuer_keys(root, space, &rotated)?;
    Ok(rotation::rotated(space, &rotated, now, KEY_RETENTION_SECS))
}

/// `cotal-authd issuer prune`: only the signer stays.
pub fn prune(root: &Path, space: &SpaceName, now: u64, force: bool) -> Result<String, String> {
    let keys = load(root, space)?;
    if let Some(nothing) = rotation::nothing_to_prune(space, &keys) {
        return Ok(nothing);
    }
    if !force {
        let rotated_at = trust::last_rotation(root, space)?;
        rotation::may_prune(&keys, now, rotated_at, KEY_RETENTION_SECS)?;
    }
    trust::write_issuer_keys(root, space, &keys.pruned())?;
    Ok(rotation::pruned(space, &keys))
}
