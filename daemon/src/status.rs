//! `cotal-authd status`: where a space's plane is and whether it serves. The discovery file a
//! ready plane writes (and every exit removes) says where; its loopback `/health` says the
//! readiness state (reference §2.8). A file whose pid no longer runs is a plane that died
//! without cleaning up (`kill -9`), so it is reported as not up, never as up; a plane whose face
//! does not answer, or answers anything but `ready`, is not counted as up either.

use std::path::Path;
use std::time::Duration;

use cotal_core::names::SpaceName;
use cotal_io_fs::discovery::{self, Discovery};
use cotal_io_http::face::probe;
use serde_json::{json, Value};

/// How long `status` waits for a plane's `/health`.
const HEALTH_WAIT: Duration = Duration::from_secs(2);

/// What `status` found about one space.
struct Found {
    line: String,
    json: Value,
    up: bool,
}

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
        return Ok((
            format!(
                "no space has a trust root under {}; create one with `cotal-authd init --space S \
                 --idp URL`",
                root.display()
            ),
            false,
        ));
    }
    let mut found = Vec::with_capacity(spaces.len());
    for space in &spaces {
        found.push(one(root, space).await?);
    }
    let all_up = !found.is_empty() && found.iter().all(|f| f.up);
    let text = if as_json {
        format!(
            "{:#}",
            Value::Array(found.into_iter().map(|f| f.json).collect())
        )
    } else {
        found
            .into_iter()
            .map(|f| f.line)
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok((text, all_up))
}

async fn one(root: &Path, space: &SpaceName) -> Result<Found, String> {
    let path = discovery::path(root, space);
    let not_up = |why: String| Found {
        line: format!("space {space}: not up ({why})"),
        json: json!({"space": space.as_str(), "up": false, "why": why}),
        up: false,
    };
    let Some(d) = discovery::read(&path)? else {
        return Ok(not_up(format!("no discovery file at {}", path.display())));
    };
    if !discovery::pid_alive(d.pid) {
        return Ok(not_up(format!(
            "the discovery file at {} names pid {}, which is not running: a plane that died \
             without cleaning up",
            path.display(),
            d.pid
        )));
    }
    let (state, cause) = match probe::health(&d.url, HEALTH_WAIT).await {
        Ok(health) => (
            health
                .get("state")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_owned(),
            health
                .get("cause")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
        Err(why) => ("unreachable".to_owned(), Some(why)),
    };
    let up = state == "ready";
    Ok(Found {
        line: describe(space, &d, &state, cause.as_deref()),
        json: json!({
            "space": space.as_str(),
            "up": up,
            "state": state,
            "cause": cause,
            "pid": d.pid,
            "url": d.url,
            "server": d.server,
            "instanceId": d.instance,
            "processEpoch": d.process_epoch,
            "generation": d.generation,
            "registrationRevision": d.registration_revision,
        }),
        up,
    })
}

fn describe(space: &SpaceName, d: &Discovery, state: &str, cause: Option<&str>) -> String {
    let up = if state == "ready" { "up" } else { "not up" };
    let cause = cause.map(|c| format!(": {c}")).unwrap_or_default();
    format!(
        "space {space}: {up} ({state}{cause}), pid {}, serving {}, server {}, auth instance {} at \
         epoch {} (generation {}, registration revision {})",
        d.pid, d.url, d.server, d.instance, d.process_epoch, d.generation, d.registration_revision
    )
}
