//! `cotal-authd status`: where a space's plane is and whether it serves. The discovery file a
//! ready plane writes (and every exit removes) says where; its loopback `/health` says the
//! readiness state (reference §2.8). What counts as up, and what is said of each space, is
//! `cotal_core::status`.

use std::path::Path;
use std::time::Duration;

use cotal_core::names::SpaceName;
use cotal_core::status::{self, SpaceStatus};
use cotal_io_fs::discovery;
use cotal_io_http::face::probe;

/// How long `status` waits for a plane's `/health`.
const HEALTH_WAIT: Duration = Duration::from_secs(2);

/// One line (or one JSON object) per space, and whether every space asked about is up.
pub async fn status(
    root: &Path,
    space: Option<&SpaceName>,
    as_json: bool,
) -> Result<(String, bool), String> {
    let spaces = match space {
        Some(space) => vec![space.clone()],
        None => cotal_io_fs::trust::spaces(root)?,
    };
    if spaces.is_empty() && !as_json {
        return Ok((status::no_spaces(&root.display().to_string()), false));
    }
    let mut found = Vec::with_capacity(spaces.len());
    for space in &spaces {
        found.push(one(root, space).await?);
    }
    Ok(status::report(found, as_json))
}

async fn one(root: &Path, space: &SpaceName) -> Result<SpaceStatus, String> {
    let path = discovery::path(root, space);
    let shown = path.display().to_string();
    let Some(d) = discovery::read(&path)? else {
        return Ok(SpaceStatus::no_file(space, &shown));
    };
    if !discovery::pid_alive(d.pid) {
        return Ok(SpaceStatus::died(space, &shown, d.pid));
    }
    let health = probe::health(&d.url, HEALTH_WAIT).await;
    Ok(SpaceStatus::probed(space, &d, health))
}
