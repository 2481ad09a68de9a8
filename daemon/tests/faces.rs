//! The running daemon's loopback face, driven over real HTTP: the discovery file names its URL
//! and capability, `/health` reports the readiness state and the issuer, `/jwks` serves the
//! trust root's issuer key with `cache-control: max-age=300`, a door without the capability is
//! refused, `/metrics` counts the requests and names the plane's coordinates (read by a
//! Prometheus text-format parser), SIGTERM lets a request in flight finish before the exit, and
//! after it nothing listens any more; `--log-format json` writes one JSON
//! object per stderr line, none carrying the capability.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;

use common::*;
use rustix::process::Signal;
use serde_json::Value;

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn the_loopback_face_serves_health_and_jwks_and_guards_its_doors() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);
    let log = dir.path().join("up.log");
    reaper.0.push(
        command()
            .args([
                "up",
                "--space",
                SPACE,
                "--log-format",
                "json",
                "--state-dir",
            ])
            .arg(&state)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let found = ready(&state, reaper.0.last_mut().unwrap());
    let url = found["url"].as_str().unwrap().to_owned();
    let cap = found["cap"].as_str().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert_eq!(cap.len(), 64);
    assert!(cap
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));

    let (status, headers, body) = http(&url, "GET", "/health", &[], "").unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["ok"], true);
    assert_eq!(health["issuer"], "urn:cotal:auth:t1");
    assert_eq!(health["state"], "ready");

    let (status, headers, body) = http(&url, "GET", "/jwks", &[], "").unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "cache-control"), Some("max-age=300"));
    let jwks: Value = serde_json::from_str(&body).unwrap();
    let issuer: Value =
        serde_json::from_slice(&fs::read(space_dir(&state).join("issuer.json")).unwrap()).unwrap();
    assert_eq!(
        jwks["keys"][0]["kid"], issuer["activeKid"],
        "{jwks} / {issuer}"
    );
    assert!(
        !body.contains("\"d\""),
        "the JWKS never carries the private key: {body}"
    );

    let json = [("content-type", "application/json")];
    let (status, _, body) = http(&url, "POST", "/exchange", &json, "{}").unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(
        body.contains("missing/invalid exchange capability"),
        "{body}"
    );
    let bearer = format!("Bearer {cap}");
    let authorized = [
        ("content-type", "application/json"),
        ("authorization", bearer.as_str()),
    ];
    let (status, _, body) = http(&url, "POST", "/exchange", &authorized, "{}").unwrap();
    assert_eq!(
        status, 400,
        "past the capability, the exchange reads the body: {body}"
    );
    assert!(body.contains("exchange needs"), "{body}");
    let (status, _, body) = http(
        &url,
        "POST",
        "/interactive-lifecycle/retire",
        &authorized,
        "{}",
    )
    .unwrap();
    assert_eq!(status, 400, "the retire door reads its closed body: {body}");
    assert!(body.contains("owner must be a string"), "{body}");
    let (status, _, body) = http(
        &url,
        "POST",
        "/manager-service-authority/verify-enrollment",
        &authorized,
        "{}",
    )
    .unwrap();
    assert_eq!(
        status, 400,
        "the verify-enrollment door reads its closed body: {body}"
    );
    assert!(body.contains("owner must be a string"), "{body}");
    let (status, _, _) = http(&url, "GET", "/health?x=1", &[], "").unwrap();
    assert_eq!(status, 404);

    // /metrics: OpenMetrics text with the requests just made and the plane's coordinates.
    let (status, headers, text) = http(&url, "GET", "/metrics", &[], "").unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(
        header(&headers, "content-type")
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{headers:?}"
    );
    for sample in [
        "cotal_http_requests_total{face=\"loopback\",route=\"/health\",status=\"200\"} 1",
        "cotal_http_requests_total{face=\"loopback\",route=\"/exchange\",status=\"401\"} 1",
        "cotal_http_requests_total{face=\"loopback\",route=\"/exchange\",status=\"400\"} 1",
        "cotal_http_requests_total{face=\"loopback\",route=\"unknown\",status=\"404\"} 1",
        "cotal_plane_process_epoch 0",
        "cotal_plane_generation 1",
    ] {
        assert!(text.contains(sample), "{sample} not in\n{text}");
    }
    assert!(
        text.contains("# TYPE cotal_http_request_duration_seconds histogram"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(!text.contains(&cap));
    // The same text through a Prometheus text-format parser: every sample line reads.
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let health = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "cotal_http_requests_total"
                && s.labels.get("route") == Some("/health")
                && s.labels.get("status") == Some("200")
        })
        .unwrap_or_else(|| panic!("no /health sample in {:?}", scrape.samples));
    assert!(
        matches!(health.value, prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) if v == 1.0),
        "{:?}",
        health.value
    );
    assert!(scrape
        .samples
        .iter()
        .any(|s| s.metric == "cotal_plane_generation"));

    // SIGTERM with a request in flight (reference §2.9): its head and half its body are in
    // when the signal lands; the plane drains, the rest of the body arrives, the request is
    // answered in full, and only then does the process exit 0.
    let body = br#"{"idpToken":"not-a-token","actor":"alice"}"#;
    let mut inflight = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    let head = format!(
        "POST /exchange HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         authorization: Bearer {cap}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    use std::io::{Read as _, Write as _};
    inflight.write_all(head.as_bytes()).unwrap();
    inflight.write_all(&body[..10]).unwrap();
    inflight.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    signal(reaper.0.last().unwrap(), Signal::TERM);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        reaper.0.last_mut().unwrap().try_wait().unwrap().is_none(),
        "the plane exited with a request still in flight"
    );
    inflight.write_all(&body[10..]).unwrap();
    let mut answer = String::new();
    inflight.read_to_string(&mut answer).unwrap();
    // Draining, the plane is unavailable, not refusing the token: a 503 the client retries.
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("shutting down"), "{answer}");
    assert_eq!(
        exits(reaper.0.last_mut().unwrap(), EXIT_TIMEOUT).code(),
        Some(0)
    );
    assert!(
        http(&url, "GET", "/health", &[], "").is_err(),
        "the face still answers"
    );
}

/// The public face (reference §3.3): opened by `--exchange-public-port`, named in the
/// discovery file as `publicUrl`, serving its five paths only, and the discovery bundle built
/// from the plane's own configuration after the bind. Bad public-face flags are refused in one
/// sentence naming the flag, before anything starts.
#[test]
fn the_public_face_serves_the_bundle_and_refuses_what_is_loopback_only() {
    require_server();
    let bad = run(&[
        "up",
        "--space",
        SPACE,
        "--exchange-public-url",
        "http://exchange.test",
        "--exchange-public-port",
        "0",
    ]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(err.contains("--exchange-public-url"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);
    // A port free a moment ago: the public face binds it (its URL is the advertised one).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    reaper.0.push(
        command()
            .args(["up", "--space", SPACE, "--state-dir"])
            .arg(&state)
            .args([
                "--exchange-public-port",
                &port,
                "--exchange-public-url",
                "https://exchange.smoke.test/",
                "--exchange-trusted-proxy",
                "--advertised-server",
                "tls://nats.smoke.test:4222",
            ])
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let found = ready(&state, reaper.0.last_mut().unwrap());
    assert_eq!(found["publicUrl"], "https://exchange.smoke.test/");
    let loopback = found["url"].as_str().unwrap().to_owned();

    let public = format!("http://127.0.0.1:{port}");
    let (status, _, body) = http(&public, "GET", "/.well-known/cotal-mesh", &[], "").unwrap();
    assert_eq!(status, 200, "{body}");
    let bundle: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(bundle["space"], SPACE);
    assert_eq!(bundle["server"], "tls://nats.smoke.test:4222");
    assert_eq!(bundle["tlsRequired"], true);
    let auth = &bundle["userAuth"];
    assert_eq!(auth["provider"], "cotal");
    assert_eq!(auth["idp"]["url"], "http://127.0.0.1:4190");
    assert_eq!(auth["endpoints"]["url"], "https://exchange.smoke.test/");
    assert_eq!(
        auth["endpoints"]["managerAuthorityUrl"],
        "https://exchange.smoke.test/manager-service-authority"
    );
    assert!(bundle["sentinelCreds"]
        .as_str()
        .unwrap()
        .contains("BEGIN NATS USER JWT"));
    assert!(!body.contains(found["cap"].as_str().unwrap()));

    let (status, _, _) = http(&public, "GET", "/health", &[], "").unwrap();
    assert_eq!(status, 200);
    let (status, _, _) = http(&public, "POST", "/health", &[], "").unwrap();
    assert_eq!(status, 405);
    for loopback_only in ["/metrics", "/managed-lifecycle/retire"] {
        let (status, _, _) = http(&public, "GET", loopback_only, &[], "").unwrap();
        assert_eq!(status, 404, "{loopback_only}");
    }
    let (status, _, _) = http(&loopback, "GET", "/.well-known/cotal-mesh", &[], "").unwrap();
    assert_eq!(status, 404, "the bundle is not served on the loopback face");
}

/// A loopback caller that sends its headers and part of a body, then stalls, is answered at
/// the face's deadline (503, the public face's sentence, the connection closed) instead of
/// holding its request forever; meanwhile the face answers others. The wait is bounded well past
/// the deadline, and nothing is asserted about how fast.
#[test]
fn a_loopback_body_that_never_completes_is_cut_at_the_deadline() {
    use std::io::{Read, Write};
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    init(&state);
    reaper.0.push(quiet_up(&state));
    let found = ready(&state, reaper.0.last_mut().unwrap());
    let url = found["url"].as_str().unwrap().to_owned();
    let cap = found["cap"].as_str().unwrap().to_owned();
    let host = url.trim_start_matches("http://");
    let mut stalled = std::net::TcpStream::connect(host).unwrap();
    let head = format!(
        "POST /exchange HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         authorization: Bearer {cap}\r\ncontent-length: 100\r\n\r\n{{\"idpToken\":"
    );
    stalled.write_all(head.as_bytes()).unwrap();
    // Meanwhile the face answers others: a read, and a door that reads its whole body.
    let (status, _, _) = http(&url, "GET", "/health", &[], "").unwrap();
    assert_eq!(status, 200);
    let auth = format!("Bearer {cap}");
    let (status, _, body) = http(
        &url,
        "POST",
        "/exchange",
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        "{}",
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    stalled
        .set_read_timeout(Some(cotal_io_http::face::LOOPBACK_DEADLINE * 2))
        .unwrap();
    let mut answer = String::new();
    stalled.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    let body: Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(body["error"], "request deadline exceeded", "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    let (status, _, _) = http(&url, "GET", "/health", &[], "").unwrap();
    assert_eq!(status, 200);
}
