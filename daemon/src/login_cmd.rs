//! `cotal-authd login --actor A (--idp-token T | --dev-subject S)`: the exchange a signed-in
//! human performs, from the command line. It asks the space's running plane (found through its
//! discovery file, over the loopback face with the capability) for a bearer, and writes a 0600
//! bundle a standard NATS client connects with: the space's deny-all sentinel creds plus the
//! bearer as the auth token. The server admits that connect through the plane's auth callout.
//!
//! Bundle, under `<root>/login/space.<hex>/<actor>/` (0700): `sentinel.creds`, `bearer` (the
//! token alone, no newline), and `login.json` (`{"ver":1,"space","server","owner","actor",
//! "exp","creds","bearer"}`, the two paths absolute), each 0600.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cotal_core::names::{ActorToken, SpaceName};
use cotal_io_fs::{discovery, files, trust};
use serde_json::{json, Value};

use crate::dev_idp_cmd;

/// The bundle's files.
const CREDS_FILE: &str = "sentinel.creds";
const BEARER_FILE: &str = "bearer";
const RECORD_FILE: &str = "login.json";

/// How long an exchange may take.
const EXCHANGE_WAIT: Duration = Duration::from_secs(15);
/// The largest exchange answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// A development token lives as long as the longest bearer it may buy.
const DEV_TOKEN_TTL_SECS: u64 = 900;

/// How the human proves who they are.
#[derive(Debug, Clone)]
pub enum Proof {
    IdpToken(String),
    /// Signed in at this state root's development IdP.
    DevSubject(String),
}

#[derive(Debug)]
pub struct LoginArgs {
    pub root: PathBuf,
    pub space: SpaceName,
    pub actor: String,
    pub proof: Proof,
    pub ttl_secs: Option<u64>,
    /// The TLS a client of the bundle dials the server with, recorded in `login.json`.
    pub tls: cotal_io_nats::TlsSettings,
}

/// Performs the exchange and writes the bundle; returns what to tell the user.
pub async fn login(args: LoginArgs) -> Result<String, String> {
    let space = &args.space;
    // The actor names a directory below: only a plain token may.
    ActorToken::parse(&args.actor).map_err(|e| format!("actor {:?}: {}", args.actor, e.message))?;
    args.tls.check()?;
    let discovery = discovery::read(&discovery::path(&args.root, space))?.ok_or_else(|| {
        format!(
            "the plane of space {space} is not up under {}; start it with `cotal-authd up \
                 --space {space}`",
            args.root.display()
        )
    })?;
    // The bundle's place is judged before the exchange, so a refused place spends no bearer.
    let dir = bundle_dir(&args.root, space, &args.actor);
    let (creds, bearer, record_path) = prepare_bundle(&args.root, &dir)?;
    let idp_token = match &args.proof {
        Proof::IdpToken(token) => token.clone(),
        Proof::DevSubject(subject) => dev_idp_cmd::token(&args.root, subject, DEV_TOKEN_TTL_SECS)?,
    };
    let mut ask = json!({"idpToken": idp_token, "actor": args.actor});
    if let (Some(ttl), Some(map)) = (args.ttl_secs, ask.as_object_mut()) {
        map.insert("ttlSec".into(), ttl.into());
    }
    let authorization = format!("Bearer {}", discovery.cap);
    let (status, answer) = cotal_io_http::fetch::post_json(
        &format!("{}/exchange", discovery.url),
        &[("authorization", &authorization)],
        &ask,
        EXCHANGE_WAIT,
        MAX_ANSWER_BYTES,
    )
    .await?;
    let field = |name: &str| answer.get(name).and_then(Value::as_str).map(str::to_owned);
    if !status.is_success() {
        return Err(format!(
            "the exchange was refused ({status}): {}",
            field("error").unwrap_or_else(|| answer.to_string())
        ));
    }
    let (Some(token), Some(owner), Some(exp)) = (
        field("token"),
        field("owner"),
        answer.get("exp").and_then(Value::as_u64),
    ) else {
        return Err(format!(
            "the exchange answered 200 without a bearer: {answer}"
        ));
    };
    let material = trust::load_daemon(&args.root, space)?;
    files::write_private(&creds, material.sentinel_creds().as_bytes())?;
    files::write_private(&bearer, token.as_bytes())?;
    let record = json!({
        "ver": 1,
        "space": space.as_str(),
        "server": discovery.server,
        "owner": owner,
        "actor": args.actor,
        "exp": exp,
        "creds": absolute(&creds),
        "bearer": absolute(&bearer),
    });
    let record = with_tls(record, &args.tls);
    files::write_private(&record_path, format!("{record:#}\n").as_bytes())?;
    Ok(format!(
        "signed in as actor {} (owner {owner}) in space {space} until {}; connect to {} with \
         the creds {} and the auth token in {} (and a connection name that is your inbox \
         nonce, with inbox prefix _INBOX_<nonce>)",
        args.actor,
        crate::clock::rfc3339_secs(exp),
        discovery.server,
        creds.display(),
        bearer.display()
    ))
}

/// Makes the bundle dir (0700) and returns its three files' paths, refusing a symlinked dir
/// on the way below the state root or a symlink at a bundle file (the bundle holds a bearer and
/// creds, which must not land where a link points), and removing the temp files a killed
/// earlier login left in it.
fn prepare_bundle(root: &Path, dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    files::ensure_private_dir_under(root, dir)?;
    files::remove_stale_temps(dir, files::STALE_TEMP_AFTER);
    let paths = (
        dir.join(CREDS_FILE),
        dir.join(BEARER_FILE),
        dir.join(RECORD_FILE),
    );
    for path in [&paths.0, &paths.1, &paths.2] {
        files::check_replaceable(path)?;
    }
    Ok(paths)
}

fn bundle_dir(root: &Path, space: &SpaceName, actor: &str) -> PathBuf {
    root.join("login")
        .join(trust::space_segment(space))
        .join(actor)
}

/// The record with a `tls` member naming the bundle's TLS files (absolute), when any is given.
fn with_tls(mut record: Value, tls: &cotal_io_nats::TlsSettings) -> Value {
    let files: serde_json::Map<String, Value> =
        [("ca", &tls.ca), ("cert", &tls.cert), ("key", &tls.key)]
            .into_iter()
            .filter_map(|(name, path)| Some((name.to_owned(), absolute(path.as_ref()?).into())))
            .collect();
    if let (false, Some(map)) = (files.is_empty(), record.as_object_mut()) {
        map.insert("tls".into(), files.into());
    }
    record
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
