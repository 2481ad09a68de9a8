//! Reading a running plane's `/health`, for `cotal-authd status`: one plain HTTP/1.1 GET over
//! loopback with a bounded wait.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// `GET <url>/health` (`url` = `http://host:port`, as the discovery file names it): the JSON
/// body of a 200, or why there is none. Waits at most `wait` in all.
pub async fn health(url: &str, wait: Duration) -> Result<Value, String> {
    tokio::time::timeout(wait, get(url, "/health"))
        .await
        .map_err(|_| format!("{url}/health did not answer within {wait:?}"))?
}

async fn get(url: &str, path: &str) -> Result<Value, String> {
    let authority = url
        .strip_prefix("http://")
        .filter(|a| !a.is_empty() && !a.contains('/'))
        .ok_or_else(|| format!("{url} is not an http://host:port URL"))?;
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let driver = tokio::spawn(connection);
    let request = Request::get(path)
        .header("host", authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("{url}{path}: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{url}{path}: {e}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{url}{path}: {e}"))?
        .to_bytes();
    driver.abort();
    if !status.is_success() {
        return Err(format!("{url}{path} answered {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{url}{path} is not JSON: {e}"))
}
