//! TLS to the broker, with certificates the tests make (rcgen): the space's own nats-server
//! rendered by `broker-config --tlscert --tlskey` (operator mode, the callout account), the
//! plane `up` over `tls://` with `--tlsca`, a sign-in's exchange and a real callout connect
//! over TLS, the views over TLS (flag and `NATS_CA`), the embedded server serving TLS, a
//! server whose certificate does not chain to the given CA refused before anything is
//! registered, and a 3-node cluster whose clients and routes are TLS.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::signin::{post, sentinel, Space};
use common::tls::{make, Pki};
use common::*;
use cotal_io_nats::async_nats::ConnectOptions;
use futures::StreamExt;
use serde_json::{json, Value};

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The space's nats-server serving clients over TLS with `pki`'s server certificate.
fn serve_tls(space: &mut Space, pki: &Pki) -> String {
    let port = space.serve_broker_with(
        "tls-server",
        &[
            "--tlscert",
            s(&pki.server_cert),
            "--tlskey",
            s(&pki.server_key),
        ],
        "",
    );
    format!("tls://127.0.0.1:{port}")
}

fn exchange(space: &Space, d: &Value) -> String {
    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token("alice"), "actor": "cli", "ttlSec": 120}),
    );
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

/// A standard client's connect over TLS (the sentinel creds plus the bearer): the server asks
/// the plane over the callout, which admits it; a publish inside the grant comes back to a
/// subscriber on the same connection.
async fn signed_in_round_trip(space: &Space, server: &str, ca: &Path, token: &str) {
    let nonce = "ibxtls0000001";
    let client = ConnectOptions::new()
        .credentials(&sentinel(space))
        .unwrap()
        .token(token.to_owned())
        .name(nonce)
        .custom_inbox_prefix(format!("_INBOX_{nonce}"))
        .add_root_certificates(ca.to_path_buf())
        .require_tls(true)
        .max_reconnects(Some(0))
        .connection_timeout(Duration::from_secs(5))
        .connect(server)
        .await
        .unwrap();
    let owner = space.owner("alice");
    let subject = format!("cotal.t1.chat.{owner}.cli.team");
    let mut live = client.subscribe("cotal.t1.chat.*.*.team").await.unwrap();
    client.flush().await.unwrap();
    client
        .publish(subject.clone(), "over tls".into())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), live.next())
        .await
        .expect("the permitted publish was delivered")
        .unwrap();
    assert_eq!(got.subject.as_str(), subject);
    assert_eq!(&got.payload[..], b"over tls");
    client.drain().await.unwrap();
}

/// The plane's own gate, read by `gate show` over TLS with `tls` (flags) and `env`.
fn gate_over_tls(space: &Space, server: &str, tls: &[&str], env: &[(&str, &str)]) -> Value {
    let out = command()
        .args(["gate", "show", "--space", SPACE, "--server", server])
        .args(["--endpoint", "auth", "--instance", &instance(&space.root)])
        .args(["--json", "--state-dir", s(&space.root)])
        .args(tls)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plane_serves_a_tls_broker_end_to_end() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    let pki = make(&space.root, "ca1");
    let server = serve_tls(&mut space, &pki);
    let public = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let d = space.up(&[
        "--server",
        &server,
        "--tlsca",
        s(&pki.ca),
        "--exchange-public-port",
        &public,
    ]);
    assert_eq!(d["server"], server.as_str());

    // The bundle advertises the URL the plane dials and says TLS is required.
    let (status, _, body) = http(
        &format!("http://127.0.0.1:{public}"),
        "GET",
        "/.well-known/cotal-mesh",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let bundle: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(bundle["server"], server.as_str());
    assert_eq!(bundle["tlsRequired"], true);

    let token = exchange(&space, &d);
    signed_in_round_trip(&space, &server, &pki.ca, &token).await;

    // The views dial TLS too: the CA by flag, or by NATS_CA as the nats CLI reads it.
    let by_flag = gate_over_tls(&space, &server, &["--tlsca", s(&pki.ca)], &[]);
    assert_eq!(by_flag["state"], "open", "{by_flag}");
    let by_env = gate_over_tls(&space, &server, &[], &[("NATS_CA", s(&pki.ca))]);
    assert_eq!(by_env, by_flag);
    // A plaintext client is not served: the server requires TLS.
    let plain = server.replace("tls://", "nats://");
    let refused = command()
        .args(["gate", "ls", "--space", SPACE, "--server", &plain])
        .args(["--state-dir", s(&space.root)])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("its TLS certificate does not verify against the system's roots"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_certificate_does_not_chain_to_the_ca_is_refused_before_registering() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    let (ca1, ca2) = (make(&space.root, "ca1"), make(&space.root, "ca2"));
    let server = serve_tls(&mut space, &ca1);

    let out = command()
        .args(["up", "--space", SPACE, "--state-dir", s(&space.root)])
        .args(["--server", &server, "--tlsca", s(&ca2.ca)])
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
    assert!(
        err.starts_with("cotal-authd up: ")
            && err.contains(&format!(
                "its TLS certificate does not verify against the CA in {}",
                ca2.ca.display()
            )),
        "{err}"
    );
    assert!(discovery(&space.root).is_none());

    // Nothing was registered: the space's stores were never made on the server.
    let material = cotal_io_fs::trust::load_daemon(
        &space.root,
        &cotal_core::names::SpaceName::parse(SPACE).unwrap(),
    )
    .unwrap();
    let dial = cotal_io_nats::Dial::new(
        &server,
        cotal_io_nats::TlsSettings {
            ca: Some(ca1.ca.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let bound = cotal_io_nats::AuthorityClient::open(
        &dial,
        "test-look".to_owned(),
        cotal_io_nats::DataAccountSigner {
            account: material.data_account().to_owned(),
            signer: std::sync::Arc::new(material.data_signing_key().clone()),
        },
        |_| Ok(cotal_core::jwt::UserNats::default()),
        Duration::from_secs(60),
        cotal_core::names::SpaceName::parse(SPACE).unwrap(),
        cotal_io_nats::SpaceOptions {
            stores: cotal_io_nats::StoreSet::of(&[cotal_core::kv::Store::Auth]),
            create_missing: false,
            ..cotal_io_nats::SpaceOptions::default()
        },
    )
    .await;
    let missing = bound.expect_err("the auth store does not exist").message;
    assert!(missing.contains("cannot bind its stores"), "{missing}");

    // The same plane with the CA that did sign the server's certificate comes up.
    let d = space.up(&["--server", &server, "--tlsca", s(&ca1.ca)]);
    assert_eq!(d["server"], server.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_server_serves_tls_with_ups_certificate_verified_against_tlsca() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    let pki = make(&space.root, "ca1");

    // Without --tlsca the plane could not verify its own server: refused before it starts one.
    let out = command()
        .args(["up", "--space", SPACE, "--state-dir", s(&space.root)])
        .args([
            "--tlscert",
            s(&pki.server_cert),
            "--tlskey",
            s(&pki.server_key),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("with --tlscert and --tlskey, and needs --tlsca (NATS_CA)"),
        "{err}"
    );

    let d = space.up(&[
        "--tlscert",
        s(&pki.server_cert),
        "--tlskey",
        s(&pki.server_key),
        "--tlsca",
        s(&pki.ca),
    ]);
    let server = server_url(&space.root);
    assert!(server.starts_with("tls://127.0.0.1:"), "{server}");
    assert_eq!(d["server"], server.as_str());
    let token = exchange(&space, &d);
    signed_in_round_trip(&space, &server, &pki.ca, &token).await;

    // A start without TLS finds the live TLS server of the state root and refuses to adopt it,
    // before it registers anything (the running plane keeps its gate).
    let out = command()
        .args(["up", "--space", SPACE, "--state-dir", s(&space.root)])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is running with TLS, started by an earlier plane; stop that plane"),
        "{err}"
    );
    assert_eq!(discovery(&space.root).unwrap()["pid"], d["pid"]);
}

#[test]
fn a_plaintext_plane_does_not_claim_tls_in_its_bundle() {
    let mut space = Space::new();
    let public = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    // A CA in the environment (for the nats CLI) does not turn the plaintext embedded server's
    // dial into TLS.
    let pki = make(&space.root, "ca1");
    space.up_with(
        &["--exchange-public-port", &public],
        &[("NATS_CA", s(&pki.ca))],
        None,
    );
    let (status, _, body) = http(
        &format!("http://127.0.0.1:{public}"),
        "GET",
        "/.well-known/cotal-mesh",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let bundle: Value = serde_json::from_str(&body).unwrap();
    assert!(
        bundle["server"].as_str().unwrap().starts_with("nats://"),
        "{bundle}"
    );
    assert_eq!(bundle["tlsRequired"], false);
}

/// Waits until every node's monitoring `/healthz` answers 200: JetStream is up and its meta
/// group has a leader, which the routes (over TLS) must carry.
fn await_healthy(monitors: &[u16]) {
    let deadline = Instant::now() + READY_TIMEOUT;
    for port in monitors {
        let url = format!("http://127.0.0.1:{port}");
        while http(&url, "GET", "/healthz", &[], "").map(|a| a.0).ok() != Some(200) {
            assert!(Instant::now() < deadline, "node {port} was not healthy");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One monitoring endpoint's JSON, over HTTP/1.0 (whole, never chunked).
fn monitor(port: u16, path: &str) -> Value {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (_, body) = raw.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap()
}

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plane_serves_a_three_node_tls_cluster() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    let pki = make(&space.root, "ca1");
    let (routes, monitors) = (free_ports(3), free_ports(3));
    let route_urls: Vec<String> = routes
        .iter()
        .map(|p| format!("nats-route://127.0.0.1:{p}"))
        .collect();
    let mut clients = Vec::new();
    for i in 0..3 {
        let others: Vec<&str> = (0..3)
            .filter(|&j| j != i)
            .map(|j| route_urls[j].as_str())
            .collect();
        let listen = format!("127.0.0.1:{}", routes[i]);
        let joined = others.join(",");
        let port = space.serve_broker_with(
            &format!("node{i}"),
            &[
                "--tlscert",
                s(&pki.server_cert),
                "--tlskey",
                s(&pki.server_key),
                "--tlscacert",
                s(&pki.ca),
                "--cluster",
                &listen,
                "--cluster_name",
                "cotal-tls",
                "--routes",
                &joined,
            ],
            &format!(
                "server_name: \"node{i}\"\nhttp: \"127.0.0.1:{}\"\n",
                monitors[i]
            ),
        );
        clients.push(format!("tls://127.0.0.1:{port}"));
    }
    await_healthy(&monitors);
    // The routes themselves are TLS, verified both ways.
    for port in &monitors {
        let varz = monitor(*port, "/varz");
        assert_eq!(varz["tls_required"], true, "{varz}");
        assert_eq!(varz["cluster"]["tls_required"], true, "{varz}");
        assert_eq!(varz["cluster"]["tls_verify"], true, "{varz}");
    }
    let servers = clients.join(",");
    let d = space.up(&[
        "--server",
        &servers,
        "--replicas",
        "3",
        "--tlsca",
        s(&pki.ca),
    ]);
    assert_eq!(d["server"], servers.as_str());
    let token = exchange(&space, &d);
    // A client on another node than the plane's connections: the callout request crosses a
    // TLS route.
    for client in &clients {
        signed_in_round_trip(&space, client, &pki.ca, &token).await;
    }
    let by_flag = gate_over_tls(&space, &servers, &["--tlsca", s(&pki.ca)], &[]);
    assert_eq!(by_flag["state"], "open", "{by_flag}");
}

/// A server that verifies its clients (`broker-config --tlsverify`): the plane presents its
/// client certificate on every connection (the callout's included, or nothing would be
/// admitted), a client without one is refused at the handshake, and `login` records the TLS
/// files in its bundle for the client that uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_verifies_clients_admits_the_plane_with_its_client_certificate() {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    let pki = make(&space.root, "ca1");
    let port = space.serve_broker_with(
        "verifying",
        &[
            "--tlscert",
            s(&pki.server_cert),
            "--tlskey",
            s(&pki.server_key),
            "--tlscacert",
            s(&pki.ca),
            "--tlsverify",
        ],
        "",
    );
    let server = format!("tls://127.0.0.1:{port}");
    // By the nats CLI's variables alone.
    let env = [
        ("NATS_CA", s(&pki.ca)),
        ("NATS_CERT", s(&pki.client_cert)),
        ("NATS_KEY", s(&pki.client_key)),
    ];
    let d = space.up_with(&["--server", &server], &env, None);
    let token = exchange(&space, &d);

    let without_cert = ConnectOptions::new()
        .credentials(&sentinel(&space))
        .unwrap()
        .token(token.clone())
        .add_root_certificates(pki.ca.clone())
        .max_reconnects(Some(0))
        .connection_timeout(Duration::from_secs(5))
        .connect(server.as_str())
        .await;
    assert!(without_cert.is_err(), "a client without a certificate");

    let nonce = "ibxtls0000002";
    let client = ConnectOptions::new()
        .credentials(&sentinel(&space))
        .unwrap()
        .token(token)
        .name(nonce)
        .custom_inbox_prefix(format!("_INBOX_{nonce}"))
        .add_root_certificates(pki.ca.clone())
        .add_client_certificate(pki.client_cert.clone(), pki.client_key.clone())
        .max_reconnects(Some(0))
        .connection_timeout(Duration::from_secs(5))
        .connect(server.as_str())
        .await
        .unwrap();
    client.flush().await.unwrap();
    client.drain().await.unwrap();

    let uncertified = command()
        .args(["gate", "ls", "--space", SPACE, "--server", &server])
        .args(["--state-dir", s(&space.root), "--tlsca", s(&pki.ca)])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&uncertified.stderr);
    assert_eq!(uncertified.status.code(), Some(1), "{said}");
    assert!(
        said.contains("the server requires a client certificate: pass --tlscert and --tlskey"),
        "{said}"
    );

    let stranger = make(&space.root, "ca2");
    let foreign = command()
        .args(["gate", "ls", "--space", SPACE, "--server", &server])
        .args(["--state-dir", s(&space.root), "--tlsca", s(&pki.ca)])
        .args(["--tlscert", s(&stranger.client_cert)])
        .args(["--tlskey", s(&stranger.client_key)])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&foreign.stderr);
    assert_eq!(foreign.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "the server refused this client's TLS certificate {}",
            stranger.client_cert.display()
        )),
        "{said}"
    );

    // Views present the certificate too.
    let tls = [
        "--tlsca",
        s(&pki.ca),
        "--tlscert",
        s(&pki.client_cert),
        "--tlskey",
        s(&pki.client_key),
    ];
    assert_eq!(gate_over_tls(&space, &server, &tls, &[])["state"], "open");

    let out = command()
        .args([
            "login",
            "--space",
            SPACE,
            "--actor",
            "cli",
            "--dev-subject",
            "alice",
        ])
        .args(["--state-dir", s(&space.root)])
        .args(tls)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record: Value = serde_json::from_slice(
        &std::fs::read(
            space
                .root
                .join("login")
                .join(SEGMENT)
                .join("cli/login.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(record["server"], server.as_str());
    assert_eq!(record["tls"]["ca"], s(&pki.ca));
    assert_eq!(record["tls"]["cert"], s(&pki.client_cert));
    assert_eq!(record["tls"]["key"], s(&pki.client_key));

    // The operator's credential revoke dials TLS with its certificate too, for the store and
    // for the system user's listing and kick.
    let out = command()
        .args([
            "actor",
            "revoke",
            "cli",
            "--space",
            SPACE,
            "--idp-subject",
            "alice",
        ])
        .args([
            "--credential",
            "--server",
            &server,
            "--state-dir",
            s(&space.root),
        ])
        .args(tls)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("verified gone"), "{said}");
}
