//! `cotal-authd init` and `cotal-authd broker-config`: the space's trust root, created and
//! read and said through `cotal-io-fs` (`trust`), rendered by `cotal-core`
//! (`trust::broker_config`).

use std::path::Path;

use cotal_core::names::{actors_bucket, SpaceName};
use cotal_io_fs::ledger_home;
use cotal_io_fs::trust;

/// Creates the trust root of `space` (or keeps the one there) and says which; with
/// `replicated`, records that the space keeps its actor ledger in its replicated bucket.
pub fn init(root: &Path, space: &SpaceName, idp: &str, replicated: bool) -> Result<String, String> {
    let said = trust::init(root, space, idp)?.said(space, idp);
    if !replicated {
        return Ok(said);
    }
    ledger_home::record_replicated(root, space)?;
    Ok(format!(
        "{said}; its actor ledger is replicated in bucket {} on the space's servers",
        actors_bucket(space)
    ))
}

/// The space's nats-server configuration: listening on `listen`, its JetStream store at
/// `store_dir` (default: the root's `nats/space.<hex>/store`), serving TLS and routes as
/// `serving` says, from a trust root `up` would start on.
pub fn broker_config(
    root: &Path,
    space: &SpaceName,
    listen: &str,
    store_dir: Option<&Path>,
    serving: &cotal_core::trust::Serving,
) -> Result<String, String> {
    // The trust root is read as `up` reads it, through the same fail-closed reader: a root `up`
    // would refuse (a symlinked `idp.json`, a widened `callout.json`) is refused here in the
    // same sentence, rather than configuring a server for a plane that cannot start on it.
    trust::load_daemon(root, space)?;
    let broker = trust::load_broker(root, space)?;
    let store = match store_dir {
        Some(dir) => dir.to_path_buf(),
        None => embedded_dir(root, space).join("store"),
    };
    cotal_core::trust::broker_config_with(&broker, listen, &store.to_string_lossy(), serving)
        .map_err(|e| e.message)
}

/// Where the embedded server of `space` keeps its config, log and store.
pub use cotal_io_fs::trust::embedded_dir;
