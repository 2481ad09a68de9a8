//! The development IdP's key and origin of a state root (`cotal-authd dev-idp`, walk-throughs
//! and tests only): `<root>/dev-idp/dev-idp.json` (`{"ver":1,"note","url","seed"}`, 0600 in a
//! 0700 dir), made by the first `dev-idp --port N`; `dev-idp token` signs with the same key, so
//! it needs no running server. The origin is fixed once made: the space pins it, and another
//! port would be another issuer, re-keying every owner signed in through it. The IdP itself
//! (its documents and tokens) is `cotal-io-http`'s `dev_idp`.

use std::path::{Path, PathBuf};

use data_encoding::HEXLOWER;
use serde_json::{json, Value};

use crate::{files, random};

const DIR: &str = "dev-idp";
const FILE: &str = "dev-idp.json";

fn file(root: &Path) -> PathBuf {
    root.join(DIR).join(FILE)
}

/// The port and key seed of the development IdP of `root`, made at `port` (its file noting
/// `note`) if there is none yet. `port` `None` takes the one already made.
pub fn load_or_create(
    root: &Path,
    port: Option<u16>,
    note: &str,
) -> Result<(u16, [u8; 32]), String> {
    let path = file(root);
    if let Some(bytes) = files::read_regular(&path)? {
        let (made_port, seed) = parse(&bytes).ok_or_else(|| {
            format!(
                "{} is not a development IdP file; remove it to make a new development IdP",
                path.display()
            )
        })?;
        if port.is_some_and(|p| p != made_port) {
            return Err(format!(
                "the development IdP of {} serves port {made_port}; run it with --port \
                 {made_port} (the space pins that origin), or remove {} to make a new one",
                root.display(),
                path.display()
            ));
        }
        return Ok((made_port, seed));
    }
    let port = port.ok_or_else(|| {
        format!(
            "no development IdP under {} yet; start one with `cotal-authd dev-idp --port N`",
            root.display()
        )
    })?;
    if port == 0 {
        return Err("--port must name a port (the space pins the IdP's origin)".to_owned());
    }
    let seed: [u8; 32] = random::random_bytes()?;
    let doc = json!({
        "ver": 1,
        "note": note,
        "url": format!("http://127.0.0.1:{port}"),
        "seed": HEXLOWER.encode(&seed),
    });
    files::ensure_private_dir(&root.join(DIR))?;
    // Two first starts converge on whichever file landed.
    files::create_private(&path, doc.to_string().as_bytes())?;
    load_or_create(root, Some(port), note)
}

fn parse(bytes: &[u8]) -> Option<(u16, [u8; 32])> {
    let doc: Value = serde_json::from_slice(bytes).ok()?;
    (doc.get("ver")? == 1).then_some(())?;
    let port = doc
        .get("url")?
        .as_str()?
        .strip_prefix("http://127.0.0.1:")?
        .parse()
        .ok()?;
    let seed = HEXLOWER
        .decode(doc.get("seed")?.as_str()?.as_bytes())
        .ok()?
        .try_into()
        .ok()?;
    Some((port, seed))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The first start makes the file at its port; every later load, with that port or none,
    /// reads the same key; another port, a missing IdP, port 0 and a corrupt file are refused
    /// in one sentence each.
    #[test]
    fn the_first_start_fixes_the_origin_and_the_key() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        assert_eq!(
            load_or_create(root, None, "dev").unwrap_err(),
            format!(
                "no development IdP under {} yet; start one with `cotal-authd dev-idp --port N`",
                root.display()
            )
        );
        assert_eq!(
            load_or_create(root, Some(0), "dev").unwrap_err(),
            "--port must name a port (the space pins the IdP's origin)"
        );
        let (port, seed) = load_or_create(root, Some(9123), "dev").unwrap();
        assert_eq!(port, 9123);
        assert_eq!(load_or_create(root, None, "dev").unwrap(), (port, seed));
        assert_eq!(
            load_or_create(root, Some(9123), "dev").unwrap(),
            (port, seed)
        );
        let path = file(root);
        assert_eq!(
            load_or_create(root, Some(9124), "dev").unwrap_err(),
            format!(
                "the development IdP of {} serves port 9123; run it with --port 9123 (the space \
                 pins that origin), or remove {} to make a new one",
                root.display(),
                path.display()
            )
        );
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["note"], "dev");
        assert_eq!(doc["url"], "http://127.0.0.1:9123");
        files::write_private(&path, b"{\"ver\":2}").unwrap();
        assert_eq!(
            load_or_create(root, None, "dev").unwrap_err(),
            format!(
                "{} is not a development IdP file; remove it to make a new development IdP",
                path.display()
            )
        );
    }
}
