//! The two faces over real loopback HTTP: a started face, a real HTTP/1.1 client (hyper's
//! client connection, or raw TCP for what a well-behaved client would not send), and a stub
//! handler standing in for the plane. Reference §3.1–§3.4, §3.11 and the HTTP cells of §11.3.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cotal_core::EpError;
use cotal_io_http::face::{
    start_loopback, start_public, Answer, Capability, DoorRequest, Face, FaceHandle, FaceHandler,
    LoopbackConfig, ManualClock, PublicConfig,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Barrier;

const CAP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const LOOPBACK_404: &str = "unknown path - /health, /jwks, /exchange, /manager-service-authority, \
                            /manager-service-authority/verify-enrollment, \
                            /interactive-lifecycle/retire, /managed-lifecycle/retire, /metrics";
const PUBLIC_404: &str = "unknown path - /health, /jwks, /exchange, /manager-service-authority, \
                          /.well-known/cotal-mesh";
const TOO_MANY_REFUSALS: &str = "too many refused exchanges - wait a minute and retry";
const TOO_MANY_BAD_CAPS: &str = "too many invalid-capability attempts - wait a minute and retry";
const DOORS: [&str; 5] = [
    "/exchange",
    "/manager-service-authority",
    "/manager-service-authority/verify-enrollment",
    "/interactive-lifecycle/retire",
    "/managed-lifecycle/retire",
];

// ---------------------------------------------------------------------------------------------
// The stub plane.

/// Answers by the body's `answer` field: `ok`, `refuse` (a refusal with the door's §3.11
/// status), `shape` (a 400 shape error), `hang` (never), `block` (waits on the barriers);
/// anything else reaches the handler and is echoed as `{reached, padLen}`.
#[derive(Default)]
struct Stub {
    calls: AtomicUsize,
    barriers: Option<(Barrier, Barrier)>,
    /// Every `(path, status)` the face reported.
    observed: std::sync::Mutex<Vec<(&'static str, u16)>>,
}

impl Stub {
    fn new() -> Arc<Stub> {
        Arc::new(Stub::default())
    }

    /// A stub whose `block` answers wait for `parties - 1` handler calls plus the test.
    fn blocking(parties: usize) -> Arc<Stub> {
        Arc::new(Stub {
            calls: AtomicUsize::new(0),
            barriers: Some((Barrier::new(parties), Barrier::new(parties))),
            observed: std::sync::Mutex::default(),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    async fn entered(&self) {
        self.barriers.as_ref().unwrap().0.wait().await;
    }

    async fn release(&self) {
        self.barriers.as_ref().unwrap().1.wait().await;
    }
}

fn stub_refusal(door: &str) -> String {
    format!("stub refused at {door}")
}

impl FaceHandler for Stub {
    fn health(&self, face: Face) -> Value {
        json!({"ok": true, "issuer": "urn:cotal:auth:test", "face": face.name()})
    }

    fn jwks(&self) -> Value {
        json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1"}]})
    }

    fn mesh_bundle(&self) -> Value {
        json!({"space": "test", "tlsRequired": true})
    }

    fn metrics(&self) -> String {
        "# TYPE stub_up gauge\nstub_up 1\n# EOF\n".to_owned()
    }

    fn observed(&self, _face: Face, path: &'static str, status: StatusCode, _took: Duration) {
        self.observed.lock().unwrap().push((path, status.as_u16()));
    }

    async fn answer(&self, request: DoorRequest) -> Answer {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let door = request.door;
        match request.body.get("answer").and_then(Value::as_str) {
            Some("ok") => Answer::ok(json!({
                "door": door.path(),
                "face": request.face.name(),
                "peer": request.peer.as_str(),
            })),
            Some("refuse") => {
                Answer::refusal(door, &EpError::permission_denied(stub_refusal(door.path())))
            }
            Some("shape") => Answer::bad_request("exchange needs { idpToken: string }"),
            Some("hang") => std::future::pending().await,
            Some("block") => {
                self.entered().await;
                self.release().await;
                Answer::ok(json!({"unblocked": true}))
            }
            _ => Answer::ok(json!({
                "reached": true,
                "padLen": request.body.get("pad").and_then(Value::as_str).map(str::len),
            })),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Starting faces.

async fn loopback(stub: &Arc<Stub>) -> FaceHandle {
    let config = LoopbackConfig::new(0, Capability::from_hex(CAP).unwrap());
    start_loopback(config, Arc::clone(stub)).await.unwrap()
}

async fn loopback_with_clock(stub: &Arc<Stub>, clock: &Arc<ManualClock>) -> FaceHandle {
    let mut config = LoopbackConfig::new(0, Capability::from_hex(CAP).unwrap());
    config.clock = Arc::clone(clock) as _;
    start_loopback(config, Arc::clone(stub)).await.unwrap()
}

async fn public(stub: &Arc<Stub>, trusted_proxy: bool) -> FaceHandle {
    start_public(PublicConfig::new(0, trusted_proxy), Arc::clone(stub))
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The client.

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Reply {
    fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or_default()
    }
}

/// A connection to `addr` from `source` (any 127.0.0.0/8 address reaches the faces over
/// loopback, so each stands for a different peer).
async fn connect_from(source: Ipv4Addr, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// One request on a fresh connection. Every reply is checked for the faces' two invariants:
/// JSON content type, and no CORS header.
async fn send(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    send_from(Ipv4Addr::LOCALHOST, addr, method, path, headers, body).await
}

/// [`send`] from `source`.
async fn send_from(
    source: Ipv4Addr,
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    let stream = connect_from(source, addr).await;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(body.into())).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        headers["content-type"], "application/json",
        "{status} {path}"
    );
    assert!(
        headers
            .keys()
            .all(|k| !k.as_str().starts_with("access-control-")),
        "a CORS header on {path}: {headers:?}"
    );
    let body = serde_json::from_slice(&bytes).unwrap();
    Reply {
        status,
        headers,
        body,
    }
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    send(addr, Method::GET, path, &[], Bytes::new()).await
}

const JSON: (&str, &str) = ("content-type", "application/json");

fn cap_header() -> String {
    format!("Bearer {CAP}")
}

/// A JSON POST with the right capability.
async fn post_capped(addr: SocketAddr, path: &str, body: Value) -> Reply {
    let auth = cap_header();
    send(
        addr,
        Method::POST,
        path,
        &[JSON, ("authorization", &auth)],
        body.to_string(),
    )
    .await
}

/// A JSON POST with no capability, as a public caller sends it, from `peer` (the last
/// `X-Forwarded-For` hop behind a trusted proxy).
async fn post_as(addr: SocketAddr, path: &str, peer: &str, body: Value) -> Reply {
    let xff = format!("10.0.0.1, {peer}");
    send(
        addr,
        Method::POST,
        path,
        &[JSON, ("x-forwarded-for", &xff)],
        body.to_string(),
    )
    .await
}

/// Raw bytes on a fresh connection, read to EOF: status and JSON body.
async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    parse_raw(&response)
}

fn parse_raw(response: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(response);
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head
        .to_ascii_lowercase()
        .contains("content-type: application/json"));
    (status, serde_json::from_str(body).unwrap())
}

/// A JSON text of exactly `total` bytes: `{"pad":"xxx…"}`.
fn padded(total: usize) -> String {
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(total - 10));
    assert_eq!(body.len(), total);
    body
}

// ---------------------------------------------------------------------------------------------
// Route census.

#[tokio::test]
async fn loopback_route_census() {
    let stub = Stub::new();
    let face = loopback(&stub).await;
    let addr = face.local_addr();

    // /metrics: loopback only, GET only, the exposition as the handler writes it, and every
    // answer reported to the handler with its route and status.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut exposition = Vec::new();
    stream.read_to_end(&mut exposition).await.unwrap();
    let exposition = String::from_utf8(exposition).unwrap();
    assert!(exposition.starts_with("HTTP/1.1 200"), "{exposition}");
    assert!(
        exposition.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{exposition}"
    );
    assert!(exposition.ends_with("stub_up 1\n# EOF\n"), "{exposition}");
    let posted = send(addr, Method::POST, "/metrics", &[JSON], "{}").await;
    assert_eq!(posted.status, StatusCode::METHOD_NOT_ALLOWED);
    let _ = send(addr, Method::GET, "/nowhere", &[], "").await;
    let seen = stub.observed.lock().unwrap().clone();
    assert_eq!(
        seen[..3],
        [("/metrics", 200), ("/metrics", 405), ("unknown", 404)]
    );
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    assert_ne!(addr.port(), 0, "port 0 asks for an ephemeral port");

    for path in [
        "/",
        "/exchange/",
        "/manager-service-authority/",
        "/interactive-lifecycle/retire/",
        "/admin",
        "/views",
        "/actor",
        "/ledger",
        "/health/",
        "/jwks/",
        "/.well-known/",
        "/.well-known/cotal-mesh",
        "/..%2f",
        "/toString",
        "/constructor",
        "/__proto__",
        "/health?x=1",
        "/health?",
        "/jwks?cache=no",
        "/exchange?x=1",
        "/HEALTH",
    ] {
        for method in [Method::GET, Method::POST] {
            let reply = send(addr, method.clone(), path, &[JSON], "{}").await;
            assert_eq!(reply.status, StatusCode::NOT_FOUND, "{method} {path}");
            assert_eq!(reply.error(), LOOPBACK_404, "{method} {path}");
        }
    }
    // Absolute-form and asterisk-form targets are not paths of the table either.
    let (status, body) = raw(
        addr,
        b"GET http://127.0.0.1/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (404, LOOPBACK_404)
    );
    let (status, _) = raw(
        addr,
        b"OPTIONS * HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 404);

    // /health answers any method with the handler's body.
    for method in [Method::GET, Method::POST, Method::PUT, Method::DELETE] {
        let reply = send(addr, method.clone(), "/health", &[], Bytes::new()).await;
        assert_eq!(reply.status, StatusCode::OK, "{method} /health");
        assert_eq!(
            reply.body,
            json!({"ok": true, "issuer": "urn:cotal:auth:test", "face": "loopback"})
        );
    }
    // Method discipline.
    for door in DOORS {
        let reply = get(addr, door).await;
        assert_eq!(
            (reply.status, reply.error()),
            (StatusCode::METHOD_NOT_ALLOWED, "POST only")
        );
    }
    let reply = send(addr, Method::POST, "/jwks", &[JSON], "{}").await;
    assert_eq!(
        (reply.status, reply.error()),
        (StatusCode::METHOD_NOT_ALLOWED, "GET only")
    );
    assert_eq!(stub.calls(), 0, "nothing above reached a door");
    face.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn public_route_census() {
    let stub = Stub::new();
    let face = public(&stub, true).await;
    let addr = face.local_addr();
    // The fifteen paths of the reference cell (all three private host doors and the
    // prototype-chain probes included), plus query strings.
    for path in [
        "/",
        "/exchange/",
        "/manager-service-authority/",
        "/manager-service-authority/verify-enrollment",
        "/interactive-lifecycle/retire",
        "/managed-lifecycle/retire",
        "/admin",
        "/views",
        "/actor",
        "/ledger",
        "/health/",
        "/.well-known/",
        "/..%2f",
        "/toString",
        "/constructor",
        "/health?x=1",
        "/.well-known/cotal-mesh?",
    ] {
        let reply = get(addr, path).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "GET {path}");
        assert_eq!(reply.error(), PUBLIC_404, "GET {path}");
    }
    // A route table closed to one verb and open to another is not closed.
    for door in &DOORS[2..] {
        let reply = post_as(addr, door, "203.0.113.1", json!({"answer": "ok"})).await;
        assert_eq!(
            (reply.status, reply.error()),
            (StatusCode::NOT_FOUND, PUBLIC_404)
        );
    }
    let health = get(addr, "/health").await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body["face"], "public");
    let bundle = get(addr, "/.well-known/cotal-mesh").await;
    assert_eq!(bundle.status, StatusCode::OK);
    assert_eq!(bundle.body, json!({"space": "test", "tlsRequired": true}));
    for path in ["/health", "/jwks", "/.well-known/cotal-mesh"] {
        let reply = send(addr, Method::POST, path, &[JSON], "{}").await;
        assert_eq!(
            (reply.status, reply.error()),
            (StatusCode::METHOD_NOT_ALLOWED, "GET only")
        );
    }
    for door in &DOORS[..2] {
        let reply = get(addr, door).await;
        assert_eq!(
            (reply.status, reply.error()),
            (StatusCode::METHOD_NOT_ALLOWED, "POST only")
        );
    }
    assert_eq!(stub.calls(), 0);
    face.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn jwks_carries_the_cache_contract_on_both_faces() {
    let stub = Stub::new();
    let lo = loopback(&stub).await;
    let pu = public(&stub, false).await;
    for addr in [lo.local_addr(), pu.local_addr()] {
        let reply = get(addr, "/jwks").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.headers["cache-control"], "max-age=300");
        assert_eq!(reply.body["keys"][0]["kid"], "k1");
    }
    // Only /jwks is cacheable.
    assert!(get(lo.local_addr(), "/health")
        .await
        .headers
        .get("cache-control")
        .is_none());
    lo.close(Duration::from_secs(5)).await;
    pu.close(Duration::from_secs(5)).await;
}

// ---------------------------------------------------------------------------------------------
// Request guards.

#[tokio::test]
async fn a_browser_origin_is_refused_right_after_the_method() {
    let stub = Stub::new();
    let lo = loopback(&stub).await;
    let pu = public(&stub, false).await;
    let origin = ("origin", "https://evil.example");
    let auth = cap_header();
    let capped = ("authorization", auth.as_str());
    for door in DOORS {
        let reply = send(
            lo.local_addr(),
            Method::POST,
            door,
            &[JSON, capped, origin],
            "{}",
        )
        .await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{door}");
        assert_eq!(reply.error(), "browser-origin requests are not served here");
    }
    for door in &DOORS[..2] {
        let reply = send(pu.local_addr(), Method::POST, door, &[JSON, origin], "{}").await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{door}");
    }
    // After the method, before the content type and the capability.
    let lo_addr = lo.local_addr();
    let wrong_method = send(lo_addr, Method::GET, "/exchange", &[origin], Bytes::new()).await;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    let plain = ("content-type", "text/plain");
    let before_type = send(lo_addr, Method::POST, "/exchange", &[plain, origin], "{}").await;
    assert_eq!(before_type.status, StatusCode::FORBIDDEN);
    let before_cap = send(lo_addr, Method::POST, "/exchange", &[JSON, origin], "{}").await;
    assert_eq!(before_cap.status, StatusCode::FORBIDDEN);
    // Even an empty Origin marks a browser.
    let empty_origin = [JSON, capped, ("origin", "")];
    let empty = send(lo_addr, Method::POST, "/exchange", &empty_origin, "{}").await;
    assert_eq!(empty.status, StatusCode::FORBIDDEN);
    assert_eq!(stub.calls(), 0);
    lo.close(Duration::from_secs(5)).await;
    pu.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn only_application_json_reaches_a_door() {
    let stub = Stub::new();
    let lo = loopback(&stub).await;
    let pu = public(&stub, false).await;
    let auth = cap_header();
    let capped = ("authorization", auth.as_str());
    let body = json!({"answer": "ok"}).to_string();
    for content_type in ["text/plain", "application/jsonp", "Application/JSON", ""] {
        let headers = [("content-type", content_type), capped];
        let reply = send(
            lo.local_addr(),
            Method::POST,
            "/exchange",
            &headers,
            body.clone(),
        )
        .await;
        assert_eq!(
            reply.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
        assert_eq!(reply.error(), "content-type must be application/json");
    }
    let missing = send(
        lo.local_addr(),
        Method::POST,
        "/exchange",
        &[capped],
        body.clone(),
    )
    .await;
    assert_eq!(missing.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let public_plain = ("content-type", "text/plain");
    let reply = send(
        pu.local_addr(),
        Method::POST,
        "/exchange",
        &[public_plain],
        "{}",
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // The content type is checked before the capability.
    let uncapped = send(
        lo.local_addr(),
        Method::POST,
        "/exchange",
        &[public_plain],
        "{}",
    )
    .await;
    assert_eq!(uncapped.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(stub.calls(), 0);
    let charset = ("content-type", "application/json; charset=utf-8");
    let reply = send(
        lo.local_addr(),
        Method::POST,
        "/exchange",
        &[charset, capped],
        body,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(stub.calls(), 1);
    lo.close(Duration::from_secs(5)).await;
    pu.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn the_body_bound_is_65536_bytes() {
    let stub = Stub::new();
    let lo = loopback(&stub).await;
    let pu = public(&stub, false).await;
    let auth = cap_header();
    let capped = [JSON, ("authorization", auth.as_str())];
    for (addr, headers) in [
        (lo.local_addr(), &capped[..]),
        (pu.local_addr(), &capped[..1]),
    ] {
        let at_limit = send(addr, Method::POST, "/exchange", headers, padded(65_536)).await;
        assert_eq!(
            at_limit.status,
            StatusCode::OK,
            "exactly 64 KiB reaches the handler"
        );
        assert_eq!(at_limit.body, json!({"reached": true, "padLen": 65_526}));
        let over = send(addr, Method::POST, "/exchange", headers, padded(65_537)).await;
        assert_eq!(over.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(over.error(), "request body too large (maximum 65536 bytes)");
    }
    assert_eq!(
        stub.calls(),
        2,
        "only the at-limit bodies reached the handler"
    );
    // A chunked body over the limit is drained to its end and still gets the 413.
    let body = padded(200_000);
    let mut request = format!(
        "POST /exchange HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         authorization: {auth}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    .into_bytes();
    for chunk in body.as_bytes().chunks(8192) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let (status, body) = raw(lo.local_addr(), &request).await;
    assert_eq!(status, 413);
    assert_eq!(
        body["error"],
        "request body too large (maximum 65536 bytes)"
    );
    lo.close(Duration::from_secs(5)).await;
    pu.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_body_that_is_not_json_is_400() {
    let stub = Stub::new();
    let lo = loopback(&stub).await;
    let auth = cap_header();
    let capped = [JSON, ("authorization", auth.as_str())];
    for bad in ["", "{", "nope", "{\"answer\":\"ok\"} trailing"] {
        let reply = send(lo.local_addr(), Method::POST, "/exchange", &capped, bad).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(reply.error(), "request body is not valid JSON");
    }
    assert_eq!(stub.calls(), 0);
    // Any JSON value is a body; its shape is the handler's to judge.
    let reply = send(lo.local_addr(), Method::POST, "/exchange", &capped, "null").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(stub.calls(), 1);
    lo.close(Duration::from_secs(5)).await;
}

// ---------------------------------------------------------------------------------------------
// The capability.

#[tokio::test]
async fn a_missing_or_wrong_capability_is_401_with_the_door_sentence() {
    let stub = Stub::new();
    let clock = Arc::new(ManualClock::new());
    let lo = loopback_with_clock(&stub, &clock).await;
    let addr = lo.local_addr();
    let expected = [
        (
            "/exchange",
            "missing/invalid exchange capability - read it from the space's auth-service.json",
        ),
        (
            "/manager-service-authority",
            "missing/invalid exchange capability - manager-service authority requires the \
             operator exchange capability on this face",
        ),
        (
            "/manager-service-authority/verify-enrollment",
            "missing/invalid exchange capability - managed agent enrollment verification is a \
             loopback host action",
        ),
        (
            "/interactive-lifecycle/retire",
            "missing/invalid exchange capability - interactive lifecycle retirement is a \
             loopback operator action",
        ),
        (
            "/managed-lifecycle/retire",
            "missing/invalid exchange capability - managed lifecycle retirement is a loopback \
             host action",
        ),
    ];
    let body = json!({"answer": "ok"}).to_string();
    let near_miss = format!("Bearer {}0", &CAP[..63]);
    for (door, sentence) in expected {
        let missing = send(addr, Method::POST, door, &[JSON], body.clone()).await;
        assert_eq!(
            (missing.status, missing.error()),
            (StatusCode::UNAUTHORIZED, sentence)
        );
        let wrong = [JSON, ("authorization", near_miss.as_str())];
        let wrong = send(addr, Method::POST, door, &wrong, body.clone()).await;
        assert_eq!(
            (wrong.status, wrong.error()),
            (StatusCode::UNAUTHORIZED, sentence)
        );
        let bare = [JSON, ("authorization", CAP)];
        let bare = send(addr, Method::POST, door, &bare, body.clone()).await;
        assert_eq!(
            bare.status,
            StatusCode::UNAUTHORIZED,
            "the Bearer scheme is required"
        );
    }
    assert_eq!(stub.calls(), 0);
    // The real capability passes every door.
    for door in DOORS {
        let reply = post_capped(addr, door, json!({"answer": "ok"})).await;
        assert_eq!(reply.status, StatusCode::OK, "{door}");
        assert_eq!(reply.body["door"], door);
    }
    lo.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn invalid_capabilities_answer_429_past_30_a_minute_in_their_own_window() {
    let stub = Stub::new();
    let clock = Arc::new(ManualClock::new());
    let lo = loopback_with_clock(&stub, &clock).await;
    let addr = lo.local_addr();
    let body = json!({"answer": "refuse"}).to_string();
    // Thirty bad caps, spread over the doors (one shared window), all 401.
    for i in 0..30 {
        let reply = send(
            addr,
            Method::POST,
            DOORS[i % DOORS.len()],
            &[JSON],
            body.clone(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "attempt {}", i + 1);
    }
    for door in DOORS {
        let reply = send(addr, Method::POST, door, &[JSON], body.clone()).await;
        assert_eq!(
            (reply.status, reply.error()),
            (StatusCode::TOO_MANY_REQUESTS, TOO_MANY_BAD_CAPS)
        );
    }
    // A cap-less prober never consumes the refused budget of a real caller: a refused
    // exchange with the capability still gets its own sentence.
    let refused = post_capped(addr, "/exchange", json!({"answer": "refuse"})).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(refused.error(), stub_refusal("/exchange"));
    // The window rolls: a minute later a bad cap is a plain 401 again.
    clock.advance(Duration::from_secs(61));
    let reply = send(addr, Method::POST, "/exchange", &[JSON], body).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    lo.close(Duration::from_secs(5)).await;
}

// ---------------------------------------------------------------------------------------------
// Budgets.

#[tokio::test]
async fn the_loopback_refused_window_throttles_refusals_only() {
    let stub = Stub::new();
    let clock = Arc::new(ManualClock::new());
    let lo = loopback_with_clock(&stub, &clock).await;
    let addr = lo.local_addr();
    for i in 0..30 {
        let reply = post_capped(addr, "/exchange", json!({"answer": "refuse"})).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "refusal {}", i + 1);
        assert_eq!(reply.error(), stub_refusal("/exchange"));
    }
    let throttled = post_capped(addr, "/exchange", json!({"answer": "refuse"})).await;
    assert_eq!(
        (throttled.status, throttled.error()),
        (StatusCode::TOO_MANY_REQUESTS, TOO_MANY_REFUSALS)
    );
    // #802: a valid credential still gets its 200; a shape error is not a refusal.
    let valid = post_capped(addr, "/exchange", json!({"answer": "ok"})).await;
    assert_eq!(valid.status, StatusCode::OK);
    let shape = post_capped(addr, "/exchange", json!({"answer": "shape"})).await;
    assert_eq!(shape.status, StatusCode::BAD_REQUEST);
    // The manager route shares the face's refused budget (§3.4 "Newer").
    let manager = post_capped(
        addr,
        "/manager-service-authority",
        json!({"answer": "refuse"}),
    )
    .await;
    assert_eq!(
        (manager.status, manager.error()),
        (StatusCode::TOO_MANY_REQUESTS, TOO_MANY_REFUSALS)
    );
    // The host doors answer their decisions as they are, with their §3.11 statuses.
    let verify = post_capped(
        addr,
        "/manager-service-authority/verify-enrollment",
        json!({"answer": "refuse"}),
    )
    .await;
    assert_eq!(verify.status, StatusCode::FORBIDDEN);
    assert_eq!(
        verify.error(),
        stub_refusal("/manager-service-authority/verify-enrollment")
    );
    let managed = post_capped(
        addr,
        "/managed-lifecycle/retire",
        json!({"answer": "refuse"}),
    )
    .await;
    assert_eq!(managed.status, StatusCode::BAD_REQUEST);
    // The window rolls.
    clock.advance(Duration::from_secs(61));
    let reply = post_capped(addr, "/exchange", json!({"answer": "refuse"})).await;
    assert_eq!(
        (reply.status, reply.error()),
        (StatusCode::UNAUTHORIZED, stub_refusal("/exchange").as_str())
    );
    lo.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn public_budgets_are_per_peer_and_separate_from_loopback() {
    let stub = Stub::new();
    let lo = loopback(&stub).await;
    let pu = public(&stub, true).await;
    let addr = pu.local_addr();
    let peer_a = "203.0.113.7";
    let peer_b = "198.51.100.9";

    // Peer A floods refusals until throttled: 429 within 40.
    let mut throttled_at = None;
    for i in 1..=40 {
        let reply = post_as(addr, "/exchange", peer_a, json!({"answer": "refuse"})).await;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(reply.error(), TOO_MANY_REFUSALS);
            throttled_at = Some(i);
            break;
        }
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(
        throttled_at,
        Some(31),
        "the 31st refusal in a minute is throttled"
    );
    // Earlier hops are the client's to write: only the last one names the peer.
    let xff = format!("192.0.2.99, {peer_a}");
    let spoofed = send(
        addr,
        Method::POST,
        "/exchange",
        &[JSON, ("x-forwarded-for", &xff)],
        json!({"answer": "refuse"}).to_string(),
    )
    .await;
    assert_eq!(spoofed.status, StatusCode::TOO_MANY_REQUESTS);
    // Peer B still gets its own refusal sentence.
    let b = post_as(addr, "/exchange", peer_b, json!({"answer": "refuse"})).await;
    assert_eq!(
        (b.status, b.error()),
        (StatusCode::UNAUTHORIZED, stub_refusal("/exchange").as_str())
    );
    // The loopback face's budget is untouched by the public flood.
    let loopback_refusal =
        post_capped(lo.local_addr(), "/exchange", json!({"answer": "refuse"})).await;
    assert_eq!(loopback_refusal.status, StatusCode::UNAUTHORIZED);
    assert_eq!(loopback_refusal.error(), stub_refusal("/exchange"));
    // Successes are never throttled: 40 out of 40 from one peer.
    let mut successes = 0;
    for _ in 0..40 {
        let reply = post_as(addr, "/exchange", peer_b, json!({"answer": "ok"})).await;
        if reply.status == StatusCode::OK {
            assert_eq!(reply.body["peer"], peer_b);
            successes += 1;
        }
    }
    assert_eq!(successes, 40);
    // The flooded peer's valid request still passes; its refusal is a 429.
    let valid = post_as(addr, "/exchange", peer_a, json!({"answer": "ok"})).await;
    assert_eq!(valid.status, StatusCode::OK);
    let refused = post_as(addr, "/exchange", peer_a, json!({"answer": "refuse"})).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    // The manager route spends the same per-peer budget.
    let manager = post_as(
        addr,
        "/manager-service-authority",
        peer_a,
        json!({"answer": "refuse"}),
    )
    .await;
    assert_eq!(
        (manager.status, manager.error()),
        (StatusCode::TOO_MANY_REQUESTS, TOO_MANY_REFUSALS)
    );
    let manager_b = post_as(
        addr,
        "/manager-service-authority",
        peer_b,
        json!({"answer": "refuse"}),
    )
    .await;
    assert_eq!(manager_b.status, StatusCode::FORBIDDEN);
    lo.close(Duration::from_secs(5)).await;
    pu.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn without_a_trusted_proxy_the_socket_is_the_peer() {
    let stub = Stub::new();
    let pu = public(&stub, false).await;
    let addr = pu.local_addr();
    for _ in 0..30 {
        let reply = post_as(
            addr,
            "/exchange",
            "203.0.113.7",
            json!({"answer": "refuse"}),
        )
        .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    // A different forwarded hop changes nothing: the header is ignored.
    let other = post_as(
        addr,
        "/exchange",
        "198.51.100.9",
        json!({"answer": "refuse"}),
    )
    .await;
    assert_eq!(other.status, StatusCode::TOO_MANY_REQUESTS);
    let ok = post_as(addr, "/exchange", "198.51.100.9", json!({"answer": "ok"})).await;
    assert_eq!(ok.body["peer"], "127.0.0.1");
    pu.close(Duration::from_secs(5)).await;
}

// ---------------------------------------------------------------------------------------------
// Public admission control.

#[tokio::test]
async fn the_65th_concurrent_public_request_is_busy() {
    let stub = Stub::blocking(65);
    let pu = public(&stub, true).await;
    let addr = pu.local_addr();
    let mut in_flight = Vec::new();
    // 64 peers behind the proxy, one request each: every peer is within its own share, and
    // together they fill the face.
    for i in 0..64 {
        in_flight.push(tokio::spawn(async move {
            let peer = format!("203.0.113.{i}");
            post_as(addr, "/exchange", &peer, json!({"answer": "block"})).await
        }));
    }
    // All 64 are inside the handler, holding their slots.
    stub.entered().await;
    let busy = get(addr, "/health").await;
    assert_eq!(
        (busy.status, busy.error()),
        (StatusCode::SERVICE_UNAVAILABLE, "busy - retry shortly")
    );
    let busy_door = post_as(addr, "/exchange", "p", json!({"answer": "ok"})).await;
    assert_eq!(busy_door.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(stub.calls(), 64, "a busy answer admits nothing");
    stub.release().await;
    for request in in_flight {
        assert_eq!(request.await.unwrap().status, StatusCode::OK);
    }
    // Slots are handed back as each response completes; the face admits again.
    let mut admitted = false;
    for _ in 0..200 {
        if get(addr, "/health").await.status == StatusCode::OK {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted);
    pu.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_public_request_past_its_deadline_is_503() {
    let stub = Stub::new();
    let mut config = PublicConfig::new(0, false);
    config.deadline = Duration::from_millis(200);
    config.max_in_flight = 1;
    let pu = start_public(config, Arc::clone(&stub)).await.unwrap();
    let addr = pu.local_addr();
    // A handler that never answers.
    let hung = post_as(addr, "/exchange", "p", json!({"answer": "hang"})).await;
    assert_eq!(hung.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(hung.error(), "request deadline exceeded");
    assert_eq!(hung.headers["connection"], "close");
    // A body that never arrives.
    let (status, body) = raw(
        addr,
        b"POST /exchange HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"answer\":",
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (503, "request deadline exceeded")
    );
    // The single slot came back each time: the face still admits.
    let mut admitted = false;
    for _ in 0..200 {
        if get(addr, "/health").await.status == StatusCode::OK {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted);
    pu.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_loopback_body_that_never_completes_is_cut_at_the_deadline() {
    let stub = Stub::new();
    let mut config = LoopbackConfig::new(0, Capability::from_hex(CAP).unwrap());
    config.deadline = Duration::from_secs(2);
    config.max_in_flight = 2;
    let lo = start_loopback(config, Arc::clone(&stub)).await.unwrap();
    let addr = lo.local_addr();
    // A capable caller that sends its headers and part of a body, then stalls for good.
    let auth = cap_header();
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /exchange HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         authorization: {auth}\r\ncontent-length: 100\r\n\r\n{{\"answer\":"
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    // Meanwhile the face answers others.
    let ok = post_capped(addr, "/exchange", json!({"answer": "ok"})).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(get(addr, "/health").await.status, StatusCode::OK);
    // The stalled request is answered and its connection closed at the deadline; the wait is
    // bounded so a face without a deadline fails the test instead of hanging it.
    let mut response = Vec::new();
    let answered =
        tokio::time::timeout(Duration::from_secs(60), stalled.read_to_end(&mut response)).await;
    assert!(
        answered.is_ok(),
        "the stalled loopback request was never answered"
    );
    let (status, body) = parse_raw(&response);
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (503, "request deadline exceeded")
    );
    assert!(String::from_utf8_lossy(&response)
        .to_ascii_lowercase()
        .contains("connection: close"));
    assert_eq!(
        stub.calls(),
        1,
        "the stalled body never reached the handler"
    );
    // Its slot came back: the face still admits a request per slot.
    for _ in 0..2 {
        assert_eq!(get(addr, "/health").await.status, StatusCode::OK);
    }
    lo.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_full_loopback_face_is_busy() {
    let stub = Stub::blocking(2);
    let mut config = LoopbackConfig::new(0, Capability::from_hex(CAP).unwrap());
    config.max_in_flight = 1;
    let lo = start_loopback(config, Arc::clone(&stub)).await.unwrap();
    let addr = lo.local_addr();
    let in_flight =
        tokio::spawn(
            async move { post_capped(addr, "/exchange", json!({"answer": "block"})).await },
        );
    stub.entered().await;
    let busy = get(addr, "/health").await;
    assert_eq!(
        (busy.status, busy.error()),
        (StatusCode::SERVICE_UNAVAILABLE, "busy - retry shortly")
    );
    stub.release().await;
    assert_eq!(in_flight.await.unwrap().status, StatusCode::OK);
    let mut admitted = false;
    for _ in 0..200 {
        if get(addr, "/health").await.status == StatusCode::OK {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted);
    lo.close(Duration::from_secs(5)).await;
}

/// Reads whatever a connection the face refused at accept was sent, to its end: the face
/// writes one refusal and closes without reading, so the client must not write first.
async fn refused_at_accept(mut stream: TcpStream) -> (u16, Value) {
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    parse_raw(&response)
}

#[tokio::test]
async fn one_peer_dripping_bodies_holds_only_its_own_share_of_the_public_face() {
    let stub = Stub::new();
    // The production limits: 8 requests in flight and 64 connections per peer.
    let pu = public(&stub, false).await;
    let addr = pu.local_addr();
    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    // 70 sockets from one peer, each sending a door's headers and a body that never ends.
    let mut sockets = Vec::new();
    for _ in 0..70 {
        let mut stream = connect_from(attacker, addr).await;
        let _ = stream
            .write_all(
                b"POST /exchange HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                  content-length: 1000\r\n\r\n{\"answer\":",
            )
            .await;
        sockets.push(stream);
    }
    // Another peer is served at once, its door and /health alike.
    let other = Ipv4Addr::new(127, 0, 0, 3);
    let health = send_from(other, addr, Method::GET, "/health", &[], Bytes::new()).await;
    assert_eq!(health.status, StatusCode::OK);
    let door = send_from(
        other,
        addr,
        Method::POST,
        "/exchange",
        &[JSON],
        json!({"answer": "ok"}).to_string(),
    )
    .await;
    assert_eq!(
        (door.status, &door.body["peer"]),
        (StatusCode::OK, &json!("127.0.0.3"))
    );
    // The attacker's sockets: at most its share is held; every other one was answered with
    // its own refusal (over its in-flight share, or over its connection share) and closed.
    let mut held = 0;
    let mut refusals = std::collections::BTreeMap::<String, usize>::new();
    for mut stream in sockets {
        let mut response = Vec::new();
        match tokio::time::timeout(
            Duration::from_millis(300),
            stream.read_to_end(&mut response),
        )
        .await
        {
            Err(_) => held += 1,
            Ok(_) => {
                let (status, body) = parse_raw(&response);
                let what = format!("{status} {}", body["error"].as_str().unwrap());
                *refusals.entry(what).or_default() += 1;
            }
        }
    }
    assert!(held <= 8, "one peer held {held} requests in flight");
    assert!(
        refusals.keys().all(|what| what
            == "429 too many requests in flight from this peer - retry shortly"
            || what == "429 too many connections from this peer - retry shortly"),
        "{refusals:?}"
    );
    assert_eq!(stub.calls(), 1, "no dripped body reached the handler");
    pu.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn connections_over_a_peers_share_or_the_faces_cap_are_refused_at_accept() {
    let stub = Stub::new();
    let mut config = PublicConfig::new(0, false);
    config.peer_max_connections = 2;
    config.max_connections = 3;
    let pu = start_public(config, Arc::clone(&stub)).await.unwrap();
    let addr = pu.local_addr();
    let (a, b, c) = (
        Ipv4Addr::new(127, 0, 0, 2),
        Ipv4Addr::new(127, 0, 0, 3),
        Ipv4Addr::new(127, 0, 0, 4),
    );
    // Peer a holds its two idle connections; its third is refused with its own sentence.
    let idle = [connect_from(a, addr).await, connect_from(a, addr).await];
    assert_eq!(
        refused_at_accept(connect_from(a, addr).await).await,
        (
            429,
            json!({"error": "too many connections from this peer - retry shortly"})
        )
    );
    // Peer b takes the face's last connection; peer c, accepted after it, finds the face full;
    // b is served on its connection.
    let mut b_stream = connect_from(b, addr).await;
    assert_eq!(
        refused_at_accept(connect_from(c, addr).await).await,
        (
            503,
            json!({"error": "too many connections - retry shortly"})
        )
    );
    b_stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    b_stream.read_to_end(&mut response).await.unwrap();
    assert_eq!(parse_raw(&response).0, 200);
    // Closed connections give their shares back.
    drop(idle);
    let mut admitted = false;
    for _ in 0..200 {
        let mut stream = connect_from(c, addr).await;
        let _ = stream
            .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await;
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        if response.starts_with(b"HTTP/1.1 200") {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted);
    pu.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn the_loopback_face_caps_its_connections() {
    let stub = Stub::new();
    let mut config = LoopbackConfig::new(0, Capability::from_hex(CAP).unwrap());
    config.max_connections = 2;
    let lo = start_loopback(config, Arc::clone(&stub)).await.unwrap();
    let addr = lo.local_addr();
    let _idle = [
        TcpStream::connect(addr).await.unwrap(),
        TcpStream::connect(addr).await.unwrap(),
    ];
    assert_eq!(
        refused_at_accept(TcpStream::connect(addr).await.unwrap()).await,
        (
            503,
            json!({"error": "too many connections - retry shortly"})
        )
    );
    lo.close(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_in_flight_share_follows_the_forwarded_peer() {
    let stub = Stub::blocking(2);
    let mut config = PublicConfig::new(0, true);
    config.peer_max_in_flight = 1;
    // Every connection comes from the proxy's socket: a per-socket cap would cap the proxy.
    config.peer_max_connections = 1;
    let pu = start_public(config, Arc::clone(&stub)).await.unwrap();
    let addr = pu.local_addr();
    let held = tokio::spawn(async move {
        post_as(addr, "/exchange", "203.0.113.7", json!({"answer": "block"})).await
    });
    stub.entered().await;
    let second = post_as(addr, "/exchange", "203.0.113.7", json!({"answer": "ok"})).await;
    assert_eq!(
        (second.status, second.error()),
        (
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests in flight from this peer - retry shortly"
        )
    );
    let other = post_as(addr, "/exchange", "198.51.100.9", json!({"answer": "ok"})).await;
    assert_eq!(
        (other.status, &other.body["peer"]),
        (StatusCode::OK, &json!("198.51.100.9"))
    );
    stub.release().await;
    assert_eq!(held.await.unwrap().status, StatusCode::OK);
    pu.close(Duration::from_secs(5)).await;
}

#[test]
fn the_faces_connection_caps_stay_under_the_descriptor_limit() {
    use cotal_io_http::face::{connection_ceiling, RESERVED_FDS};
    let cap = CAP;
    let small = LoopbackConfig::new(0, Capability::from_hex(cap).unwrap()).within_fd_limit(1024);
    let public = PublicConfig::new(0, false).within_fd_limit(1024);
    assert_eq!(connection_ceiling(1024), 384);
    assert_eq!((small.max_connections, public.max_connections), (384, 384));
    assert!(small.max_connections + public.max_connections + RESERVED_FDS as usize <= 1024);
    // A generous limit leaves the production caps as they are.
    let roomy = PublicConfig::new(0, false).within_fd_limit(1 << 20);
    assert_eq!(
        (roomy.max_connections, roomy.peer_max_connections),
        (1024, 64)
    );
    // A limit below the reserve still admits one connection per face.
    assert_eq!(connection_ceiling(100), 1);
}

/// Both faces bound together; a public face that cannot bind (its port taken) closes the
/// loopback one and names the port.
#[tokio::test]
async fn start_faces_binds_both_or_closes_the_loopback_face_when_the_public_one_cannot_bind() {
    use cotal_io_http::face::start_faces;
    let stub = Stub::new();
    let capability = || Capability::from_hex(CAP).unwrap();
    let (lo, pu) = start_faces(
        LoopbackConfig::new(0, capability()),
        Some(PublicConfig::new(0, false)),
        Arc::clone(&stub),
    )
    .await
    .unwrap();
    let pu = pu.unwrap();
    assert_eq!(get(lo.local_addr(), "/health").await.status, StatusCode::OK);
    assert_eq!(get(pu.local_addr(), "/health").await.status, StatusCode::OK);

    let taken = pu.local_addr().port();
    let refused = start_faces(
        LoopbackConfig::new(0, capability()),
        Some(PublicConfig::new(taken, false)),
        Arc::clone(&stub),
    )
    .await
    .unwrap_err();
    assert!(
        refused.starts_with(&format!(
            "cannot bind the public face on 127.0.0.1:{taken}: "
        )),
        "{refused}"
    );
    let (alone, none) = start_faces(LoopbackConfig::new(0, capability()), None, stub)
        .await
        .unwrap();
    assert!(none.is_none());
    alone.close(Duration::from_secs(5)).await;
    lo.close(Duration::from_secs(5)).await;
    pu.close(Duration::from_secs(5)).await;
}

// ---------------------------------------------------------------------------------------------
// Graceful close.

#[tokio::test]
async fn close_lets_the_request_in_flight_finish_and_stops_admitting() {
    let stub = Stub::blocking(2);
    let lo = Arc::new(loopback(&stub).await);
    let addr = lo.local_addr();
    let in_flight =
        tokio::spawn(
            async move { post_capped(addr, "/exchange", json!({"answer": "block"})).await },
        );
    stub.entered().await;
    let closing = {
        let lo = Arc::clone(&lo);
        tokio::spawn(async move { lo.close(Duration::from_secs(30)).await })
    };
    // New connections are refused once the listener is gone.
    let mut refused = false;
    for _ in 0..500 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "the face stopped admitting");
    assert!(
        !closing.is_finished(),
        "close waits for the request in flight"
    );
    stub.release().await;
    let reply = in_flight.await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, json!({"unblocked": true}));
    closing.await.unwrap();
    // Idempotent: a second close returns at once.
    lo.close(Duration::from_secs(30)).await;
}

#[tokio::test]
async fn close_cuts_what_is_still_running_after_the_grace() {
    let stub = Stub::new();
    let lo = loopback(&stub).await;
    let addr = lo.local_addr();
    let auth = cap_header();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let body = json!({"answer": "hang"}).to_string();
    let request = format!(
        "POST /exchange HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         authorization: {auth}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // Wait until the request is in the handler.
    for _ in 0..500 {
        if stub.calls() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(stub.calls(), 1);
    lo.close(Duration::from_millis(100)).await;
    // The connection was cut without an answer.
    let mut rest = Vec::new();
    let read = stream.read_to_end(&mut rest).await;
    assert!(
        read.is_err() || rest.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
    lo.close(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn close_ends_idle_keep_alive_connections() {
    let stub = Stub::new();
    let pu = public(&stub, false).await;
    let addr = pu.local_addr();
    // A kept-alive client connection with one finished request on it.
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let request = Request::get("/health")
        .header("host", "x")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body().collect().await.unwrap();
    pu.close(Duration::from_secs(30)).await;
    // The server closed the idle connection, so the client's driver ends.
    driver.await.unwrap().unwrap();
}
