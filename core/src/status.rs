//! Where a space's plane is and whether it serves, as the operator's `cotal-authd status`
//! reports it (reference §2.8): the record a ready plane publishes about itself ([`Discovery`],
//! written and read by `cotal-io-fs`), its `/health` state, and the line or JSON object said of
//! each space. A record whose pid no longer runs is a plane that died without cleaning up
//! (`kill -9`), so it is reported as not up, never as up; a plane whose face does not answer,
//! or answers anything but `ready`, is not counted as up either.

use serde_json::{json, Value};

use crate::names::SpaceName;

/// What a ready plane says about itself (its discovery file).
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

/// What `status` found about one space: its line, its JSON object, and whether it is up.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceStatus {
    pub line: String,
    pub json: Value,
    pub up: bool,
}

impl SpaceStatus {
    /// The plane of `space` is not up, for `why`.
    fn not_up(space: &SpaceName, why: String) -> SpaceStatus {
        SpaceStatus {
            line: format!("space {space}: not up ({why})"),
            json: json!({"space": space.as_str(), "up": false, "why": why}),
            up: false,
        }
    }

    /// No discovery file at `path` (as shown): no plane of `space` is up here.
    pub fn no_file(space: &SpaceName, path: &str) -> SpaceStatus {
        SpaceStatus::not_up(space, format!("no discovery file at {path}"))
    }

    /// The discovery file at `path` (as shown) names a pid that is not running.
    pub fn died(space: &SpaceName, path: &str, pid: u32) -> SpaceStatus {
        SpaceStatus::not_up(
            space,
            format!(
                "the discovery file at {path} names pid {pid}, which is not running: a plane that \
                 died without cleaning up"
            ),
        )
    }

    /// The running plane `d` of `space`, as its `/health` answered (`Err`: why it did not):
    /// up only when its state is `ready`.
    pub fn probed(space: &SpaceName, d: &Discovery, health: Result<Value, String>) -> SpaceStatus {
        let (state, cause) = match health {
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
        SpaceStatus {
            line: describe(space, d, &state, cause.as_deref()),
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
        }
    }
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

/// `status` printed: one line (or one JSON object) per space, and whether every space asked
/// about is up (none asked about is not up).
pub fn report(found: Vec<SpaceStatus>, as_json: bool) -> (String, bool) {
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
    (text, all_up)
}

/// `status` (as text) under a state root `root` (as shown) with no space's trust root.
pub fn no_spaces(root: &str) -> String {
    format!(
        "no space has a trust root under {root}; create one with `cotal-authd init --space S \
         --idp URL`"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn space() -> SpaceName {
        SpaceName::parse("demo").unwrap()
    }

    fn found() -> Discovery {
        Discovery {
            pid: 42,
            url: "http://127.0.0.1:7001".into(),
            cap: "00".into(),
            public_url: None,
            server: "nats://127.0.0.1:4222".into(),
            instance: "i".into(),
            process_epoch: 3,
            generation: 2,
            registration_revision: 1,
        }
    }

    const SERVING: &str = "pid 42, serving http://127.0.0.1:7001, server nats://127.0.0.1:4222, \
                           auth instance i at epoch 3 (generation 2, registration revision 1)";

    /// Only a plane whose `/health` says `ready` is up; its cause, or why it did not answer,
    /// rides the line and the object.
    #[test]
    fn only_a_ready_plane_is_up() {
        let ready = SpaceStatus::probed(&space(), &found(), Ok(json!({"state": "ready"})));
        assert!(ready.up);
        assert_eq!(ready.line, format!("space demo: up (ready), {SERVING}"));
        assert_eq!(ready.json["cause"], Value::Null);
        assert_eq!(ready.json["instanceId"], "i");
        let fenced = json!({"state": "unavailable", "cause": "fenced"});
        let fenced = SpaceStatus::probed(&space(), &found(), Ok(fenced));
        assert!(!fenced.up);
        assert_eq!(
            fenced.line,
            format!("space demo: not up (unavailable: fenced), {SERVING}")
        );
        let gone = SpaceStatus::probed(&space(), &found(), Err("refused".into()));
        assert_eq!(
            gone.line,
            format!("space demo: not up (unreachable: refused), {SERVING}")
        );
        let odd = SpaceStatus::probed(&space(), &found(), Ok(json!({})));
        assert_eq!(odd.json["state"], "unknown");
        assert!(!odd.up);
    }

    /// A missing file or a dead pid is not up, never up; every space must be up for the
    /// report to be, and no space is not up.
    #[test]
    fn a_missing_or_dead_plane_is_not_up_and_the_report_needs_all() {
        let none = SpaceStatus::no_file(&space(), "/r/f.json");
        assert_eq!(
            none.line,
            "space demo: not up (no discovery file at /r/f.json)"
        );
        assert_eq!(
            none.json,
            json!({"space": "demo", "up": false, "why": "no discovery file at /r/f.json"})
        );
        let died = SpaceStatus::died(&space(), "/r/f.json", 9);
        assert_eq!(
            died.line,
            "space demo: not up (the discovery file at /r/f.json names pid 9, which is not \
             running: a plane that died without cleaning up)"
        );
        let ready = SpaceStatus::probed(&space(), &found(), Ok(json!({"state": "ready"})));
        assert_eq!(
            report(vec![ready.clone()], false),
            (ready.line.clone(), true)
        );
        let (text, up) = report(vec![ready.clone(), died.clone()], false);
        assert_eq!(text, format!("{}\n{}", ready.line, died.line));
        assert!(!up);
        let (text, up) = report(vec![died.clone()], true);
        assert_eq!(text, format!("{:#}", json!([died.json])));
        assert!(!up);
        assert_eq!(report(Vec::new(), true), ("[]".to_owned(), false));
        assert_eq!(
            no_spaces("/r"),
            "no space has a trust root under /r; create one with `cotal-authd init --space S \
             --idp URL`"
        );
    }
}
