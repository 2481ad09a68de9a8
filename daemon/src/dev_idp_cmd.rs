//! `cotal-authd dev-idp`: the **development** IdP of a state root (`cotal_io_http::dev_idp`),
//! for walk-throughs and tests only — it signs in anyone who asks. Its key and origin live in
//! `<root>/dev-idp/dev-idp.json` (`cotal_io_fs::dev_idp`), made by the first `dev-idp --port
//! N`; `dev-idp token` signs with the same key, so it needs no running server. The origin is
//! fixed once made: the space pins it, and another port would be another issuer, re-keying
//! every owner signed in through it.

use std::path::Path;

use cotal_core::jwt::UnixSeconds;
use cotal_io_http::dev_idp::{self, DevIdp, DEV_IDP_LABEL};

/// The development IdP of `root`, made at `port` if there is none yet
/// ([`cotal_io_fs::dev_idp::load_or_create`]). `port` `None` takes the one already made.
fn load_or_create(root: &Path, port: Option<u16>) -> Result<DevIdp, String> {
    let (port, seed) = cotal_io_fs::dev_idp::load_or_create(root, port, DEV_IDP_LABEL)?;
    DevIdp::new(port, &seed).map_err(|e| e.message)
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
