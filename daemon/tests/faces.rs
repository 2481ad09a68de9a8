//! The running daemon's loopback face, driven over real HTTP: the discovery file names its URL
//! and capability, `/health` reports the readiness state and the issuer, `/jwks` serves the
//! trust root's issuer key with `cache-control: max-age=300`, a door without the capability is
//! refused, `/metrics` counts the requests and names the plane's coordinates, and after SIGTERM
//! nothing listens any more; `--log-format json` writes one JSON
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
    assert_ne!(status, 200, "{body}");
    assert!(body.contains("not served by this plane yet"), "{body}");
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
        "cotal_http_requests_total{face=\"loopback\",route=\"/exchange\",status=\"401\"} 2",
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

    signal(reaper.0.last().unwrap(), Signal::TERM);
    assert_eq!(
        exits(reaper.0.last_mut().unwrap(), EXIT_TIMEOUT).code(),
        Some(0)
    );
    assert!(
        http(&url, "GET", "/health", &[], "").is_err(),
        "the face still answers"
    );
}
