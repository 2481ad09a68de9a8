//! The sign-in bundle `cotal-authd login` writes: what a standard NATS client connects with.
//!
//! Under `<root>/login/space.<hex>/<actor>/` (0700): `sentinel.creds` (the space's deny-all
//! sentinel user), `bearer` (the token alone, no newline) and `login.json`
//! (`{"ver":1,"space","server","owner","actor","exp","creds","bearer"}`, the two paths absolute,
//! and a `tls` member naming the client's TLS files when it has any), each 0600.

use std::path::{Path, PathBuf};

use cotal_core::actors::row::rfc3339_secs;
use cotal_core::names::{ActorToken, SpaceName};
use serde_json::{json, Map, Value};

use crate::{files, trust};

const CREDS_FILE: &str = "sentinel.creds";
const BEARER_FILE: &str = "bearer";
const RECORD_FILE: &str = "login.json";

/// A bundle's place, judged before the exchange so that a refused place spends no bearer.
#[derive(Debug)]
pub struct Bundle {
    creds: PathBuf,
    bearer: PathBuf,
    record: PathBuf,
}

/// What `login.json` records besides the two files' paths.
#[derive(Debug)]
pub struct LoginRecord<'a> {
    pub space: &'a SpaceName,
    pub server: &'a str,
    pub owner: &'a str,
    pub actor: &'a ActorToken,
    /// The bearer's expiry, unix seconds.
    pub exp: u64,
    /// The client's TLS files by role (`ca`, `cert`, `key`), each when given.
    pub tls: [(&'a str, Option<&'a Path>); 3],
}

impl Bundle {
    /// Makes the bundle dir of `actor` in `space` (0700) and names its files, refusing a
    /// symlinked dir on the way below the state root or a symlink at a bundle file (the bundle
    /// holds a bearer and creds, which must not land where a link points), and removing the
    /// temp files a killed earlier login left in it.
    pub fn prepare(root: &Path, space: &SpaceName, actor: &ActorToken) -> Result<Bundle, String> {
        let dir = root
            .join("login")
            .join(trust::space_segment(space))
            .join(actor.as_str());
        files::ensure_private_dir_under(root, &dir)?;
        files::remove_stale_temps(&dir, files::STALE_TEMP_AFTER);
        let bundle = Bundle {
            creds: dir.join(CREDS_FILE),
            bearer: dir.join(BEARER_FILE),
            record: dir.join(RECORD_FILE),
        };
        for path in [&bundle.creds, &bundle.bearer, &bundle.record] {
            files::check_replaceable(path)?;
        }
        Ok(bundle)
    }

    pub fn creds(&self) -> &Path {
        &self.creds
    }

    pub fn bearer(&self) -> &Path {
        &self.bearer
    }

    /// What `login` tells the user once the bundle of `record` is written: who is signed in
    /// until when, and what a standard client connects with.
    pub fn signed_in(&self, record: &LoginRecord) -> String {
        format!(
            "signed in as actor {} (owner {}) in space {} until {}; connect to {} with the creds \
             {} and the auth token in {} (and a connection name that is your inbox nonce, with \
             inbox prefix _INBOX_<nonce>)",
            record.actor,
            record.owner,
            record.space,
            rfc3339_secs(record.exp),
            record.server,
            self.creds.display(),
            self.bearer.display()
        )
    }

    /// Writes the sentinel creds, the bearer, then the record naming both (each atomically).
    pub fn write(
        &self,
        sentinel_creds: &str,
        token: &str,
        record: &LoginRecord,
    ) -> Result<(), String> {
        files::write_private(&self.creds, sentinel_creds.as_bytes())?;
        files::write_private(&self.bearer, token.as_bytes())?;
        let mut json = json!({
            "ver": 1,
            "space": record.space.as_str(),
            "server": record.server,
            "owner": record.owner,
            "actor": record.actor.as_str(),
            "exp": record.exp,
            "creds": absolute(&self.creds),
            "bearer": absolute(&self.bearer),
        });
        let tls: Map<String, Value> = record
            .tls
            .iter()
            .filter_map(|(role, path)| Some(((*role).to_owned(), absolute(path.as_ref()?).into())))
            .collect();
        if let (false, Some(map)) = (tls.is_empty(), json.as_object_mut()) {
            map.insert("tls".into(), tls.into());
        }
        files::write_private(&self.record, format!("{json:#}\n").as_bytes())
    }
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `login`'s sentence names the actor, owner, space and expiry, the server and the two
    /// files a client connects with.
    #[test]
    fn the_signed_in_sentence_names_what_a_client_connects_with() {
        let tmp = tempfile::tempdir().unwrap();
        let (space, actor) = (
            SpaceName::parse("demo").unwrap(),
            ActorToken::parse("alice").unwrap(),
        );
        let bundle = Bundle::prepare(tmp.path(), &space, &actor).unwrap();
        let record = LoginRecord {
            space: &space,
            server: "nats://127.0.0.1:4222",
            owner: "u_aaaaaaaaaaaaaaaaaaaaaaaaaa",
            actor: &actor,
            exp: 1_796_441_610,
            tls: [("ca", None), ("cert", None), ("key", None)],
        };
        assert_eq!(
            bundle.signed_in(&record),
            format!(
                "signed in as actor alice (owner u_aaaaaaaaaaaaaaaaaaaaaaaaaa) in space demo \
                 until 2026-12-05T03:33:30Z; connect to nats://127.0.0.1:4222 with the creds {} \
                 and the auth token in {} (and a connection name that is your inbox nonce, with \
                 inbox prefix _INBOX_<nonce>)",
                bundle.creds().display(),
                bundle.bearer().display()
            )
        );
    }
}
