//! `cotal-authd dev-idp`: the **development** IdP of a state root (`cotal_io_http::dev_idp`),
//! for walk-throughs and tests only — it signs in anyone who asks. Its key and origin live in
//! `<root>/dev-idp/dev-idp.json` (`{"ver":1,"note","url","seed"}`, 0600 in a 0700 dir), made
//! by the first `dev-idp --port N`; `dev-idp token` signs with the same key, so it needs no
//! running server. The origin is fixed once made: the space pins it, and another port would be
//! another issuer, re-keying every owner signed in through it.

use std::path::{Path, PathBuf};

use cotal_core::jwt::UnixSeconds;
use cotal_io_fs::{files, random};
use cotal_io_http::dev_idp::{self, DevIdp, DEV_IDP_LABEL};
use data_encoding::HEXLOWER;
use serde_json::{json, Value};

const DIR: &str = "dev-idp";
const FILE: &str = "dev-idp.json";

fn file(root: &Path) -> PathBuf {
    root.join(DIR).join(FILE)
}

/// The development IdP of `root`, made at `port` if there is none yet. `port` `None` takes the
/// one already made.
fn load_or_create(root: &Path, port: Option<u16>) -> Result<DevIdp, String> {
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
        return DevIdp::new(made_port, &seed).map_err(|e| e.message);
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
        "note": DEV_IDP_LABEL,
        "url": format!("http://127.0.0.1:{port}"),
        "seed": HEXLOWER.encode(&seed),
    });
    files::ensure_private_dir(&root.join(DIR))?;
    // Two first starts converge on whichever file landed.
    files::create_private(&path, doc.to_string().as_bytes())?;
    load_or_create(root, Some(port))
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

/// `cotal-authd dev-idp --port N`: serves the development IdP until a signal.
pub async fn serve(root: &Path, port: u16) -> Result<(), String> {
    let idp = load_or_create(root, Some(port))?;
    let origin = idp.origin().to_owned();
    let server = dev_idp::serve(idp, port)
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    tracing::warn!("{DEV_IDP_LABEL}");
    println!(
        "development IdP at {origin} (JWKS {origin}/jwks); pin it with `cotal-authd init --idp \
         {origin}`; mint a token with `cotal-authd dev-idp token --subject NAME`"
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    server.stop();
    Ok(())
}

/// `cotal-authd dev-idp token --subject S`: an ID token from the development IdP of `root`.
pub fn token(root: &Path, subject: &str, ttl_secs: u64) -> Result<String, String> {
    let idp = load_or_create(root, None)?;
    idp.token(subject, ttl_secs, UnixSeconds(crate::clock::now_secs()))
        .map_err(|e| e.message)
}
