//! The one outbound HTTP client of the plane: a bounded `GET` of a JSON document over plain
//! HTTP (loopback URLs: `status`' health probe, a development IdP) or HTTPS with the system's
//! trust roots (a production IdP's JWKS). One request per connection; no redirects are
//! followed (a JWKS that moved is a configuration change, not something to chase), and the
//! body is capped so a hostile endpoint cannot make the plane buffer without bound.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use url::Url;

/// `GET url` → the JSON body of a 200, or one sentence saying why there is none. Waits at most
/// `wait` in all and reads at most `max_bytes` of body.
pub async fn get_json(url: &str, wait: Duration, max_bytes: usize) -> Result<Value, String> {
    let (status, body) = send(url, None, &[], wait, max_bytes).await?;
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    Ok(body)
}

/// `POST url` with the JSON `body` and extra `headers` → the status and the JSON body, whatever
/// the status (a refusal's `{"error"}` is the answer the caller shows).
pub async fn post_json(
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
    wait: Duration,
    max_bytes: usize,
) -> Result<(StatusCode, Value), String> {
    send(url, Some(body.to_string()), headers, wait, max_bytes).await
}

async fn send(
    url: &str,
    body: Option<String>,
    headers: &[(&str, &str)],
    wait: Duration,
    max_bytes: usize,
) -> Result<(StatusCode, Value), String> {
    let call = Call {
        url,
        body,
        headers,
        max_bytes,
    };
    tokio::time::timeout(wait, call.send())
        .await
        .map_err(|_| format!("{url} did not answer within {wait:?}"))?
}

/// One request: where, what, and how much answer to read.
struct Call<'a> {
    url: &'a str,
    body: Option<String>,
    headers: &'a [(&'a str, &'a str)],
    max_bytes: usize,
}

impl Call<'_> {
    async fn send(&self) -> Result<(StatusCode, Value), String> {
        let url = self.url;
        let parsed = Url::parse(url).map_err(|e| format!("{url} is not a URL: {e}"))?;
        let host = parsed
            .host_str()
            .ok_or_else(|| format!("{url} names no host"))?
            .to_owned();
        let port = parsed
            .port_or_known_default()
            .ok_or_else(|| format!("{url} names no port"))?;
        let path = match parsed.query() {
            Some(q) => format!("{}?{q}", parsed.path()),
            None => parsed.path().to_owned(),
        };
        let authority = match parsed.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        // An IPv6 literal keeps its brackets in the authority but not in the socket address.
        let dial = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tcp = TcpStream::connect((dial.as_str(), port))
            .await
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        match parsed.scheme() {
            "http" => self.over(tcp, &authority, &path).await,
            "https" => {
                let name = ServerName::try_from(dial)
                    .map_err(|e| format!("{url}: not a TLS server name: {e}"))?;
                let tls = tokio_rustls::TlsConnector::from(tls_config()?)
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS to {url} failed: {e}"))?;
                self.over(tls, &authority, &path).await
            }
            other => Err(format!(
                "{url}: the scheme {other}: is neither http nor https"
            )),
        }
    }

    async fn over<S>(
        &self,
        stream: S,
        authority: &str,
        path: &str,
    ) -> Result<(StatusCode, Value), String>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let url = self.url;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let driver = tokio::spawn(connection);
        let method = if self.body.is_some() {
            Method::POST
        } else {
            Method::GET
        };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", authority)
            .header("accept", "application/json");
        if self.body.is_some() {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in self.headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(
                self.body.clone().unwrap_or_default(),
            )))
            .map_err(|e| format!("{url}: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        let max_bytes = self.max_bytes;
        let body = Limited::new(response.into_body(), max_bytes)
            .collect()
            .await
            .map_err(|e| format!("{url}: the body failed or exceeds {max_bytes} bytes: {e}"))?
            .to_bytes();
        driver.abort();
        let json = serde_json::from_slice(&body)
            .map_err(|e| format!("{url} answered {status}, not JSON: {e}"))?;
        Ok((status, json))
    }
}

/// The client TLS configuration: the system's trust roots, rustls' safe defaults. Loaded once;
/// a system without a single usable root is an error, never an unverified connection.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A certificate the store cannot use is skipped, as every TLS client does.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(format!(
                    "no usable TLS trust root on this system ({} load errors); install the \
                     ca-certificates package",
                    found.errors.len()
                ));
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
                .map_err(|e| format!("cannot build the TLS client: {e}"))
        })
        .clone()
}
