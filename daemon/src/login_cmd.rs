//! `cotal-authd login --actor A (--idp-token T | --dev-subject S)`: the exchange a signed-in
//! human performs, from the command line. It asks the space's running plane (found through its
//! discovery file, over the loopback face with the capability) for a bearer, and writes a 0600
//! bundle a standard NATS client connects with: the space's deny-all sentinel creds plus the
//! bearer as the auth token ([`login_bundle`](cotal_io_fs::login_bundle)). The server admits that connect through the
//! plane's auth callout.

use std::path::PathBuf;
use std::time::Duration;

use cotal_core::names::{ActorToken, SpaceName};
use cotal_io_fs::login_bundle::{Bundle, LoginRecord};
use cotal_io_fs::{discovery, trust};
use serde_json::{json, Value};

use crate::dev_idp_cmd;

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
    let actor = ActorToken::parse(&args.actor)
        .map_err(|e| format!("actor {:?}: {}", args.actor, e.message))?;
    args.tls.check()?;
    let discovery = discovery::read(&discovery::path(&args.root, space))?.ok_or_else(|| {
        format!(
            "the plane of space {space} is not up under {}; start it with `cotal-authd up \
                 --space {space}`",
            args.root.display()
        )
    })?;
    // The bundle's place is judged before the exchange, so a refused place spends no bearer.
    let bundle = Bundle::prepare(&args.root, space, &actor)?;
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
    let tls = &args.tls;
    let record = LoginRecord {
        space,
        server: &discovery.server,
        owner: &owner,
        actor: &actor,
        exp,
        tls: [
            ("ca", tls.ca.as_deref()),
            ("cert", tls.cert.as_deref()),
            ("key", tls.key.as_deref()),
        ],
    };
    bundle.write(material.sentinel_creds(), &token, &record)?;
    Ok(format!(
        "signed in as actor {} (owner {owner}) in space {space} until {}; connect to {} with \
         the creds {} and the auth token in {} (and a connection name that is your inbox \
         nonce, with inbox prefix _INBOX_<nonce>)",
        args.actor,
        crate::clock::rfc3339_secs(exp),
        discovery.server,
        bundle.creds().display(),
        bundle.bearer().display()
    ))
}
