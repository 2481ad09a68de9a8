//! Face budgets on the running plane (issue 26 item 2): one peer's sockets exhaust only its
//! own share of the public face, and a plane whose faces are flooded up to the process's
//! file-descriptor limit still decides connects through the auth callout. Real servers and
//! real clients: the plane `up` runs, peers are distinct 127.0.0.0/8 source addresses, and a
//! standard NATS client connects through the callout.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use common::signin::{connect, post, refused, Space};
use common::*;
use serde_json::{json, Value};

const HUMAN: &str = "alice";

/// A connection to the face at `url` from the loopback address `source`.
fn connect_from(source: Ipv4Addr, url: &str) -> std::io::Result<TcpStream> {
    let addr: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((source, 0)).into())?;
    socket.connect(&addr.into())?;
    Ok(socket.into())
}

/// A POST `/exchange` whose headers promise a body that never comes.
fn drip(source: Ipv4Addr, url: &str) -> TcpStream {
    let mut stream = connect_from(source, url).unwrap();
    let _ = stream.write_all(
        b"POST /exchange HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 1000\r\n\r\n{\"idpToken\":",
    );
    stream
}

/// The exchange of `actor` for the human, on the face at `url` (no capability: public).
fn exchange(space: &Space, url: &str, cap: Option<&str>, actor: &str) -> (u16, Value) {
    post(
        url,
        cap,
        &json!({"idpToken": space.idp_token(HUMAN), "actor": actor, "ttlSec": 300}),
    )
}

/// 70 slow-body sockets from one peer on the plane's public face: that peer holds at most its
/// own share, and another peer's `/health` and exchange are answered at once.
#[test]
fn one_peer_with_70_slow_bodies_leaves_the_public_face_to_others() {
    let mut space = Space::new();
    space.grant("rv", HUMAN, &[]);
    let d = space.up(&["--exchange-public-port", "0"]);
    let public = d["publicUrl"].as_str().unwrap().to_owned();
    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    let sockets: Vec<TcpStream> = (0..70).map(|_| drip(attacker, &public)).collect();

    // The other peer (127.0.0.1) is served: /health and a real exchange.
    let (status, _, _) = http(&public, "GET", "/health", &[], "").unwrap();
    assert_eq!(status, 200);
    let (status, body) = exchange(&space, &public, None, "rv");
    assert_eq!(status, 200, "{body}");

    // The attacker holds at most its 8 in-flight requests; every other socket was refused
    // with its own sentence and closed.
    let mut held = 0;
    let mut refusals = std::collections::BTreeMap::<String, usize>::new();
    for mut stream in sockets {
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut response = String::new();
        match stream.read_to_string(&mut response) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => held += 1,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => held += 1,
            _ => {
                let status = response.split(' ').nth(1).unwrap_or("(none)").to_owned();
                let sentence = response
                    .split_once("\r\n\r\n")
                    .and_then(|(_, body)| serde_json::from_str::<Value>(body).ok())
                    .and_then(|body| body["error"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                *refusals.entry(format!("{status} {sentence}")).or_default() += 1;
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
}

/// A plane started under a limit of 512 file descriptors, both faces flooded from many peers
/// until they refuse connections at accept: the faces degrade, the callout still decides. A
/// bearer taken before the flood connects through the callout (which reads the ledger on
/// every decision), a revoked one is refused for its revocation, and once the flood ends the
/// faces serve again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plane_flooded_to_its_descriptor_limit_still_decides_connects() {
    let mut space = Space::new();
    space.grant("ok", HUMAN, &[]);
    space.grant("rv", HUMAN, &[]);
    let broker = space.serve_broker();
    let d = space.up_with_nofile(512, &["--server", &broker, "--exchange-public-port", "0"]);
    let loopback = d["url"].as_str().unwrap().to_owned();
    let cap = d["cap"].as_str().unwrap().to_owned();
    let public = d["publicUrl"].as_str().unwrap().to_owned();
    let bearer = |actor: &str| {
        let (status, body) = exchange(&space, &loopback, Some(&cap), actor);
        assert_eq!(status, 200, "{body}");
        body["token"].as_str().unwrap().to_owned()
    };
    let (ok, rv) = (bearer("ok"), bearer("rv"));
    let out = space.authd(&[
        "actor",
        "revoke",
        "rv",
        "--space",
        SPACE,
        "--idp-subject",
        HUMAN,
    ]);
    assert!(out.contains("revoked"), "{out}");

    // The flood: far more connections than the limit allows, from 12 peers on the public face
    // and from this host on the loopback one, each held open.
    let mut flood = Vec::new();
    for peer in 2..14u8 {
        for _ in 0..64 {
            if let Ok(stream) = connect_from(Ipv4Addr::new(127, 0, 0, peer), &public) {
                flood.push(stream);
            }
        }
    }
    for _ in 0..400 {
        if let Ok(stream) = connect_from(Ipv4Addr::LOCALHOST, &loopback) {
            flood.push(stream);
        }
    }
    // Both faces are full: a newcomer is refused at accept with the face's sentence.
    let mut newcomer = connect_from(Ipv4Addr::new(127, 0, 0, 20), &public).unwrap();
    newcomer
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut refusal = String::new();
    let _ = newcomer.read_to_string(&mut refusal);
    assert!(
        refusal.contains("too many connections - retry shortly"),
        "the flooded public face still admitted a newcomer: {refusal:?}"
    );

    // The callout decides as it would on a quiet plane.
    let admitted = connect(&space, &broker, &ok, "ibxflood00001").await;
    assert!(admitted.is_ok(), "{:?}", admitted.err());
    let said = refused(connect(&space, &broker, &rv, "ibxflood00002").await);
    assert!(!said.is_empty());

    // The flood ends; the faces serve again.
    drop(flood);
    let mut served = false;
    for _ in 0..200 {
        if matches!(http(&public, "GET", "/health", &[], ""), Ok((200, _, _))) {
            served = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(served, "the public face never served again");
    let (status, body) = exchange(&space, &loopback, Some(&cap), "ok");
    assert_eq!(status, 200, "{body}");
}
