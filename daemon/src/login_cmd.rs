//! `cotal-authd login --actor A (--idp-token T | --dev-subject S)`: the exchange a signed-in
//! human performs, from the command line. It asks the space's running plane (found through its
//! discovery file, over the loopback face with the capability: `cotal_io_http::loopback`) for
//! a bearer, and writes a 0600
//! bundle a standard NATS client connects with: the space's deny-all sentinel creds plus the
//! bearer as the auth token ([`login_bundle`](cotal_io_fs::login_bundle)). The server admits that connect through the
//! plane's auth callout.

use std::path::PathBuf;

use cotal_core::names::SpaceName;
use cotal_io_fs::login_bundle::{Bundle, LoginRecord};
use cotal_io_fs::{discovery, trust};
use cotal_io_http::loopback::Loopback;

use crate::dev_idp_cmd;

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
    let actor = cotal_core::actor_verbs::actor_arg(&args.actor)?;
    args.tls.check()?;
    let discovery = discovery::running(&args.root, space)?;
    // The bundle's place is judged before the exchange, so a refused place spends no bearer.
    let bundle = Bundle::prepare(&args.root, space, &actor)?;
    let idp_token = match &args.proof {
        Proof::IdpToken(token) => token.clone(),
        Proof::DevSubject(subject) => dev_idp_cmd::token(&args.root, subject, DEV_TOKEN_TTL_SECS)?,
    };
    let face = Loopback {
        url: &discovery.url,
        cap: &discovery.cap,
    };
    let granted = face
        .exchange(&idp_token, &args.actor, args.ttl_secs)
        .await?;
    let material = trust::load_daemon(&args.root, space)?;
    let tls = &args.tls;
    let record = LoginRecord {
        space,
        server: &discovery.server,
        owner: &granted.owner,
        actor: &actor,
        exp: granted.exp,
        tls: [
            ("ca", tls.ca.as_deref()),
            ("cert", tls.cert.as_deref()),
            ("key", tls.key.as_deref()),
        ],
    };
    bundle.write(material.sentinel_creds(), &granted.token, &record)?;
    Ok(bundle.signed_in(&record))
}
