//! `cotal-authd status`: where a space's plane is, read from the discovery file a ready plane
//! writes and every exit removes. A file whose pid no longer runs is a plane that died without
//! cleaning up (`kill -9`), so it is reported as not up, never as up.

use std::path::Path;

use cotal_core::names::SpaceName;
use rustix::process::{test_kill_process, Pid};

use crate::state::{self, Discovery};

/// One line per space, and whether every space asked about is up.
pub fn status(root: &Path, space: Option<&SpaceName>) -> Result<(String, bool), String> {
    let spaces = match space {
        Some(space) => vec![space.clone()],
        None => cotal_io_fs::trust::spaces(root)?,
    };
    if spaces.is_empty() {
        return Ok((
            format!(
                "no space has a trust root under {}; create one with `cotal-authd init --space S \
                 --idp URL`",
                root.display()
            ),
            false,
        ));
    }
    let mut lines = Vec::with_capacity(spaces.len());
    let mut all_up = true;
    for space in &spaces {
        let (line, up) = one(root, space)?;
        all_up &= up;
        lines.push(line);
    }
    Ok((lines.join("\n"), all_up))
}

fn one(root: &Path, space: &SpaceName) -> Result<(String, bool), String> {
    let path = state::discovery_path(root, space);
    let Some(found) = state::read_discovery(&path)? else {
        return Ok((
            format!(
                "space {space}: not up (no discovery file at {})",
                path.display()
            ),
            false,
        ));
    };
    if !alive(found.pid) {
        return Ok((
            format!(
                "space {space}: not up (the discovery file at {} names pid {}, which is not \
                 running: a plane that died without cleaning up)",
                path.display(),
                found.pid
            ),
            false,
        ));
    }
    Ok((describe(space, &found), true))
}

fn describe(space: &SpaceName, d: &Discovery) -> String {
    format!(
        "space {space}: up, pid {}, serving {}, server {}, auth instance {} at epoch {} \
         (generation {}, registration revision {})",
        d.pid, d.url, d.server, d.instance, d.process_epoch, d.generation, d.registration_revision
    )
}

fn alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .is_some_and(|p| test_kill_process(p).is_ok())
}
