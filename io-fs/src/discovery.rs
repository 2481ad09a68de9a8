//! The discovery file of a ready plane: `<root>/auth/space.<hex>/auth-service.json` —
//! `{"ver":1,"pid","url","cap","space","server","instanceId","processEpoch","generation",
//! "registrationRevision","publicUrl"?}`, `cap` being the loopback face's capability (which is
//! why the file is 0600). The plane writes it when ready and every exit removes it; the
//! operator's verbs find the plane through it.

use std::fs;
use std::path::{Path, PathBuf};

use cotal_core::names::SpaceName;
use serde_json::{json, Value};

use crate::ledger_home::LedgerHome;
use crate::{files, trust};

/// Whether a discovery file's plane is still there.
pub use crate::files::pid_alive;

/// The discovery file's name in a space's trust-root directory.
pub const DISCOVERY_FILE: &str = "auth-service.json";
/// The one version of the file this build writes and reads.
const VERSION: u64 = 1;

/// What a ready plane says about itself; its server is without any userinfo ([`redacted`]).
pub use cotal_core::status::Discovery;

/// Where the discovery file of `space` lives.
pub fn path(root: &Path, space: &SpaceName) -> PathBuf {
    in_dir(&trust::space_dir(root, space))
}

/// The discovery file in a space's trust-root directory (which is also its actor ledger's).
pub fn in_dir(space_dir: &Path) -> PathBuf {
    space_dir.join(DISCOVERY_FILE)
}

/// Writes the discovery file (atomically, 0600).
pub fn write(path: &Path, space: &SpaceName, d: &Discovery) -> Result<(), String> {
    let mut doc = json!({
        "ver": VERSION,
        "pid": d.pid,
        "url": d.url,
        "cap": d.cap,
        "space": space.as_str(),
        "server": d.server,
        "instanceId": d.instance,
        "processEpoch": d.process_epoch,
        "generation": d.generation,
        "registrationRevision": d.registration_revision,
    });
    if let (Some(url), Some(map)) = (&d.public_url, doc.as_object_mut()) {
        map.insert("publicUrl".into(), url.clone().into());
    }
    files::write_private(path, format!("{doc:#}\n").as_bytes())
}

/// Where a plane publishes itself: its own discovery file under `root` first and, for a plane
/// serving another state root's actor ledger (`ledger`), one beside that ledger too, so the
/// operator's verbs aimed at the ledger's state dir (`actor retire`, `actor revoke
/// --credential`) reach the plane that serves it.
pub fn paths_for(root: &Path, space: &SpaceName, ledger: &LedgerHome) -> Vec<PathBuf> {
    let own = path(root, space);
    let mut paths = vec![own.clone()];
    if let LedgerHome::Files(files) = ledger {
        let beside_ledger = in_dir(files.root());
        if beside_ledger != own {
            paths.push(beside_ledger);
        }
    }
    paths
}

/// Writes `d` to every one of `paths`; when one fails, removes those this process wrote (so no
/// half-published plane is found) and says why.
pub fn write_all(paths: &[PathBuf], space: &SpaceName, d: &Discovery) -> Result<(), String> {
    let written = paths.iter().try_for_each(|path| write(path, space, d));
    if written.is_err() {
        remove_all_if_ours(paths);
    }
    written
}

/// Reads a discovery file; `None` when there is none.
pub fn read(path: &Path) -> Result<Option<Discovery>, String> {
    let Some(bytes) = files::read_regular(path)? else {
        return Ok(None);
    };
    let corrupt = || {
        format!(
            "{} is not a discovery file this build reads",
            path.display()
        )
    };
    let doc: Value = serde_json::from_slice(&bytes).map_err(|_| corrupt())?;
    if doc.get("ver").and_then(Value::as_u64) != Some(VERSION) {
        return Err(corrupt());
    }
    let text = |name: &str| {
        doc.get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(corrupt)
    };
    let number = |name: &str| doc.get(name).and_then(Value::as_u64).ok_or_else(corrupt);
    Ok(Some(Discovery {
        pid: u32::try_from(number("pid")?).map_err(|_| corrupt())?,
        url: text("url")?,
        cap: text("cap")?,
        public_url: doc
            .get("publicUrl")
            .and_then(Value::as_str)
            .map(str::to_owned),
        server: text("server")?,
        instance: text("instanceId")?,
        process_epoch: number("processEpoch")?,
        generation: number("generation")?,
        registration_revision: number("registrationRevision")?,
    }))
}

/// The running plane of `space` under `root` a verb talks to (`login`), or the sentence that
/// says to start it.
pub fn running(root: &Path, space: &SpaceName) -> Result<Discovery, String> {
    read(&path(root, space))?.ok_or_else(|| {
        format!(
            "the plane of space {space} is not up under {}; start it with `cotal-authd up \
             --space {space}`",
            root.display()
        )
    })
}

/// The server an operator's verb connects to: `server` as given, else the one the running
/// plane of `space` under `root` serves on, from its discovery file.
pub fn server_or_plane(
    root: &Path,
    space: &SpaceName,
    server: Option<String>,
) -> Result<String, String> {
    match server {
        Some(server) => Ok(server),
        None => read(&path(root, space))?.map(|d| d.server).ok_or_else(|| {
            format!(
                "the plane of space {space} is not up here to name its server; pass --server URL"
            )
        }),
    }
}

/// Removes a discovery file whose plane no longer runs (a `kill -9` leaves one behind).
pub fn remove_if_dead(path: &Path) {
    let dead = matches!(read(path), Ok(Some(d)) if !pid_alive(d.pid));
    if dead {
        let _ = fs::remove_file(path);
    }
}

/// Removes the discovery file if it is this process's: a successor on the same state dir may
/// already have written its own, which must stay.
pub fn remove_if_ours(path: &Path) {
    let ours = matches!(read(path), Ok(Some(d)) if d.pid == std::process::id());
    if ours {
        let _ = fs::remove_file(path);
    }
}

/// [`remove_if_ours`] for each of `paths`.
pub fn remove_all_if_ours(paths: &[PathBuf]) {
    paths.iter().for_each(|path| remove_if_ours(path));
}

/// `url` without userinfo, for the discovery file's `server` and for logs: a server URL may
/// carry credentials, and neither is a secret store.
pub fn redacted(url: &str) -> String {
    url.split(',')
        .map(|one| match one.split_once("://") {
            Some((scheme, rest)) => match rest.split_once('@') {
                Some((_, host)) => format!("{scheme}://{host}"),
                None => one.to_owned(),
            },
            None => one.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found() -> Discovery {
        Discovery {
            pid: std::process::id(),
            url: "http://127.0.0.1:1".into(),
            cap: "00".into(),
            public_url: None,
            server: "nats://127.0.0.1:4222".into(),
            instance: "i".into(),
            process_epoch: 0,
            generation: 0,
            registration_revision: 1,
        }
    }

    #[test]
    fn a_plane_serving_another_roots_ledger_publishes_beside_it_too() {
        let space = SpaceName::parse("disc").unwrap();
        let (root, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let own = path(root.path(), &space);
        assert_eq!(
            paths_for(root.path(), &space, &LedgerHome::Replicated),
            vec![own.clone()]
        );
        let own_ledger = LedgerHome::Files(crate::FileActors::new(trust::space_dir(
            root.path(),
            &space,
        )));
        assert_eq!(
            paths_for(root.path(), &space, &own_ledger),
            vec![own.clone()]
        );
        let beside = trust::space_dir(other.path(), &space);
        let served = LedgerHome::Files(crate::FileActors::new(&beside));
        let paths = paths_for(root.path(), &space, &served);
        assert_eq!(paths, vec![own, in_dir(&beside)]);

        for dir in [trust::space_dir(root.path(), &space), beside] {
            files::ensure_private_dir(&dir).unwrap();
        }
        write_all(&paths, &space, &found()).unwrap();
        assert!(paths.iter().all(|p| read(p).unwrap() == Some(found())));
        remove_all_if_ours(&paths);
        assert!(paths.iter().all(|p| read(p).unwrap().is_none()));
    }

    /// A verb's server: the one given, else the running plane's; with neither, one sentence.
    #[test]
    fn a_verbs_server_is_given_or_the_running_planes() {
        let space = SpaceName::parse("disc").unwrap();
        let root = tempfile::tempdir().unwrap();
        let given = Some("nats://h:1".to_owned());
        assert_eq!(
            server_or_plane(root.path(), &space, given).unwrap(),
            "nats://h:1"
        );
        assert_eq!(
            server_or_plane(root.path(), &space, None).unwrap_err(),
            "the plane of space disc is not up here to name its server; pass --server URL"
        );
        files::ensure_private_dir(&trust::space_dir(root.path(), &space)).unwrap();
        write(&path(root.path(), &space), &space, &found()).unwrap();
        assert_eq!(
            server_or_plane(root.path(), &space, None).unwrap(),
            "nats://127.0.0.1:4222"
        );
        assert_eq!(running(root.path(), &space).unwrap(), found());
    }

    #[test]
    fn redacted_drops_userinfo_from_every_url() {
        assert_eq!(
            redacted("nats://u:p@a:4222,nats://b:4222"),
            "nats://a:4222,nats://b:4222"
        );
        assert_eq!(redacted("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }
}
