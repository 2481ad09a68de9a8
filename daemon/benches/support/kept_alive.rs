//! One HTTP/1.1 connection to a plane's face, kept alive across requests, as the reference's
//! clients keep theirs: what the exchange and renewal benches judge their HTTP figures on (a
//! fresh TCP connection per request is reported beside it). Shared by `benches/sign_in.rs` and
//! `benches/renewal.rs` (by `#[path]`).

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use serde_json::Value;

/// A kept-alive connection and the headers every request on it carries.
pub struct KeptAlive {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
    authorization: Option<String>,
}

impl KeptAlive {
    /// Connects to `base` (`http://host:port`); `authorization` is sent with every request
    /// when given (the loopback face's capability).
    pub async fn open(base: &str, authorization: Option<String>) -> Result<KeptAlive, String> {
        let authority = base
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let tcp = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        Ok(KeptAlive {
            sender,
            authority,
            authorization,
        })
    }

    /// `POST path` with `body` as JSON on this connection: the status and the JSON answer.
    pub async fn post(&mut self, path: &str, body: &Value) -> Result<(u16, Value), String> {
        let mut request = hyper::Request::post(path)
            .header("host", &self.authority)
            .header("content-type", "application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let body = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        Ok((status, body))
    }
}
