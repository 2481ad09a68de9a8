//! A **development** identity provider, never a production one: it signs in whoever asks.
//! It exists so a newcomer can walk the sign-in path (grant → IdP token → exchange → NATS)
//! on one machine without an IdP account. It serves, on loopback only, the two documents an
//! OpenID relying party reads (`/.well-known/openid-configuration` and `/jwks`), and mints
//! EdDSA ID tokens for any subject through [`DevIdp::token`] (the `cotal-authd dev-idp token`
//! command signs with the same key, read from the same 0600 file).

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use cotal_core::jwt::UnixSeconds;
use cotal_core::EpError;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use jsonwebtoken::{Algorithm, Header};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::bearer::SigningKey;

/// What every document and log line of the development IdP says it is.
pub const DEV_IDP_LABEL: &str =
    "DEVELOPMENT IdP - signs in anyone who asks; never use it in production";
/// The longest ID token it mints: enough for a walk-through, short enough to matter.
pub const MAX_DEV_TOKEN_TTL_SECS: u64 = 3600;

/// The development IdP: its origin (issuer and audience alike, as the space's pin derives them)
/// and its one signing key.
#[derive(Debug, Clone)]
pub struct DevIdp {
    origin: String,
    key: SigningKey,
}

impl DevIdp {
    /// The IdP at `http://127.0.0.1:<port>` signing with the key of `seed`.
    pub fn new(port: u16, seed: &[u8; 32]) -> Result<Self, EpError> {
        Ok(DevIdp {
            origin: format!("http://127.0.0.1:{port}"),
            key: SigningKey::from_seed(seed)?,
        })
    }

    /// `http://127.0.0.1:<port>`: the URL `cotal-authd init --idp` pins.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// An ID token for `subject`, issued at `now` for `ttl_secs` (at most an hour), with `iss`
    /// and `aud` both the origin (as the pin expects).
    pub fn token(&self, subject: &str, ttl_secs: u64, now: UnixSeconds) -> Result<String, EpError> {
        if subject.is_empty() {
            return Err(EpError::bad_request(
                "a development ID token needs a non-empty subject",
            ));
        }
        if ttl_secs == 0 || ttl_secs > MAX_DEV_TOKEN_TTL_SECS {
            return Err(EpError::bad_request(format!(
                "a development ID token lives 1..={MAX_DEV_TOKEN_TTL_SECS} s, not {ttl_secs}"
            )));
        }
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.key.kid().to_owned());
        let claims = json!({
            "iss": self.origin,
            "aud": self.origin,
            "sub": subject,
            "iat": now.0,
            "exp": now.0.saturating_add(ttl_secs),
        });
        jsonwebtoken::encode(&header, &claims, self.key.encoding())
            .map_err(|e| EpError::internal(format!("signing a development ID token failed: {e}")))
    }

    /// The published key set.
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.key.public_jwk()]})
    }

    /// The OpenID discovery document.
    pub fn configuration(&self) -> Value {
        json!({
            "issuer": self.origin,
            "jwks_uri": format!("{}/jwks", self.origin),
            "id_token_signing_alg_values_supported": ["EdDSA"],
            "subject_types_supported": ["public"],
            "description": DEV_IDP_LABEL,
        })
    }
}

/// A served development IdP; dropping the handle leaves it serving, [`DevIdpServer::stop`]
/// ends it.
#[derive(Debug)]
pub struct DevIdpServer {
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

impl DevIdpServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn stop(self) {
        self.task.abort();
    }

    /// Waits until the server ends (it ends only when stopped or when accepting fails).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Serves `idp` on `127.0.0.1:<its port>`.
pub async fn serve(idp: DevIdp, port: u16) -> std::io::Result<DevIdpServer> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
    let local_addr = listener.local_addr()?;
    let idp = Arc::new(idp);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let idp = idp.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| answer(idp.clone(), req));
                // A client that hangs up mid-request is its own business.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(DevIdpServer { local_addr, task })
}

async fn answer(
    idp: Arc<DevIdp>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/jwks") => (StatusCode::OK, idp.jwks()),
        (&Method::GET, "/.well-known/openid-configuration") => {
            (StatusCode::OK, idp.configuration())
        }
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            json!({"error": "not found: this development IdP serves /jwks and /.well-known/openid-configuration"}),
        ),
        _ => (StatusCode::METHOD_NOT_ALLOWED, json!({"error": "GET only"})),
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
