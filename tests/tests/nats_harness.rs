//! Self-tests of the real-`nats-server` harness (`cotal_tests::nats`): a single server speaks
//! the protocol with JetStream and `sync_interval: always`, restarts and crashes keep its port
//! and store, drop cleans up, a 3-node cluster forms and survives losing its meta leader, the
//! same cluster with each node in its own network namespace is partitioned and healed, and a
//! missing or wrong binary is a loud error naming `scripts/nats-server.sh`.
//!
//! The protocol is spoken over a raw `TcpStream` on purpose: the harness must not depend on a
//! NATS client.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_tests::nats::{NatsCluster, NatsServer, NetnsCluster, ServerOptions, INSTALL_COMMAND};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

/// A bare NATS protocol connection: `CONNECT` sent, `INFO` kept.
struct Raw {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    info: Value,
}

impl Raw {
    fn open(port: u16) -> Raw {
        Raw::open_at(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    fn open_at(addr: SocketAddr) -> Raw {
        let writer = TcpStream::connect(addr).unwrap();
        writer
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut raw = Raw {
            reader: BufReader::new(writer.try_clone().unwrap()),
            writer,
            info: Value::Null,
        };
        let greeting = raw.line();
        let json = greeting.strip_prefix("INFO ").expect("INFO first");
        raw.info = serde_json::from_str(json).unwrap();
        raw.send("CONNECT {\"verbose\":false,\"pedantic\":false}\r\n");
        raw
    }

    fn send(&mut self, text: &str) {
        self.writer.write_all(text.as_bytes()).unwrap();
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line.trim_end().to_owned()
    }

    fn ping(&mut self) {
        self.send("PING\r\n");
        assert_eq!(self.line(), "PONG");
    }

    /// One request/reply over a private inbox; returns the reply's JSON.
    fn request(&mut self, subject: &str, payload: &str) -> Value {
        self.send(&format!(
            "SUB _INBOX.harness 1\r\nPUB {subject} _INBOX.harness {}\r\n{payload}\r\n",
            payload.len()
        ));
        loop {
            let line = self.line();
            if line == "PING" {
                self.send("PONG\r\n");
            } else if line.starts_with("MSG _INBOX.harness 1 ") {
                let reply = self.line();
                self.send("UNSUB 1\r\n");
                return serde_json::from_str(&reply).unwrap();
            } else {
                panic!("unexpected {line:?} while waiting for the reply to {subject}");
            }
        }
    }

    /// Creates a file-backed stream `name` on `<name>.>` with `replicas`. A formed cluster's
    /// meta leader places replicas only on peers whose first statistics it has received, which
    /// nothing outside the server shows and which can trail the election by seconds: "no
    /// suitable peers for placement" (10005) is retried for up to 10 s, as the plane's own bind
    /// does.
    fn create_stream(&mut self, name: &str, replicas: u8) {
        let config = format!(
            r#"{{"name":"{name}","subjects":["{name}.>"],"storage":"file","num_replicas":{replicas}}}"#
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let reply = self.request(&format!("$JS.API.STREAM.CREATE.{name}"), &config);
            let unplaceable = reply.pointer("/error/err_code") == Some(&Value::from(10005));
            if unplaceable && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
            assert!(reply.get("error").is_none(), "stream create: {reply}");
            return;
        }
    }
}

fn stream_count(server: &NatsServer) -> u64 {
    server.monitor("/jsz").unwrap()["streams"].as_u64().unwrap()
}

fn route_peers(server: &NatsServer) -> Vec<String> {
    let routez = server.monitor("/routez").unwrap();
    let mut peers: Vec<String> = routez["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["remote_name"].as_str().unwrap().to_owned())
        .collect();
    peers.sort();
    peers.dedup();
    peers
}

#[test]
fn single_server_speaks_nats_with_jetstream_and_sync_always() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    assert_eq!(server.url(), format!("nats://127.0.0.1:{}", server.port()));

    let mut raw = Raw::open(server.port());
    assert_eq!(raw.info["jetstream"], true, "INFO: {}", raw.info);
    assert_eq!(raw.info["version"], "2.15.1");
    assert_eq!(raw.info["server_name"], server.name());
    raw.ping();

    let varz = server.monitor("/varz").unwrap();
    assert_eq!(varz["jetstream"]["config"]["sync_always"], true, "{varz}");
    let store = varz["jetstream"]["config"]["store_dir"].as_str().unwrap();
    assert!(PathBuf::from(store).starts_with(server.store_dir()));
    assert!(server.store_dir().join("jetstream").is_dir());
    assert!(server.store_dir().starts_with(server.dir()));

    raw.create_stream("HARNESS", 1);
    assert_eq!(stream_count(&server), 1);
    assert!(server.log_tail().contains("Server is ready"));
}

#[test]
fn extra_config_is_appended() {
    let opts = ServerOptions {
        extra_config: "max_payload: 65536".into(),
        ..ServerOptions::default()
    };
    let server = NatsServer::start(opts).unwrap();
    assert_eq!(server.info().unwrap()["max_payload"], 65536);
}

#[test]
fn a_server_that_exits_at_start_reports_its_log() {
    let opts = ServerOptions {
        extra_config: "no_such_option_anywhere: 1".into(),
        ..ServerOptions::default()
    };
    let error = NatsServer::start(opts).unwrap_err().to_string();
    assert!(error.contains("exited"), "{error}");
    assert!(error.contains("no_such_option_anywhere"), "{error}");
}

#[test]
fn restart_keeps_port_and_store_dir() {
    let mut server = NatsServer::start(ServerOptions::default()).unwrap();
    let (port, store) = (server.port(), server.store_dir().to_path_buf());
    Raw::open(port).create_stream("KEPT", 1);

    server.restart().unwrap();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(server.store_dir(), store);
    assert_eq!(
        stream_count(&server),
        1,
        "the stream survives a graceful restart"
    );
    Raw::open(port).ping();
}

#[test]
fn kill_then_restart_recovers_the_store() {
    let mut server = NatsServer::start(ServerOptions::default()).unwrap();
    let port = server.port();
    Raw::open(port).create_stream("CRASHED", 1);

    server.kill().unwrap();
    assert!(!server.is_running());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "killed");
    server.kill().unwrap(); // idempotent

    server.restart().unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(stream_count(&server), 1, "sync_interval: always kept it");
    Raw::open(port).ping();

    server.stop().unwrap();
    assert!(!server.is_running());
    server.stop().unwrap(); // idempotent
}

#[test]
fn drop_kills_the_server_and_removes_its_temp_dir() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let (dir, port) = (server.dir().to_path_buf(), server.port());
    assert!(dir.join("nats.conf").is_file());
    drop(server);
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn cluster_of_three_forms_and_survives_losing_its_meta_leader() {
    let mut cluster = NatsCluster::start(3).unwrap();
    assert_eq!(cluster.size(), 3);
    assert_eq!(cluster.urls().len(), 3);
    let names: Vec<String> = (0..3)
        .map(|i| cluster.node(i).unwrap().name().to_owned())
        .collect();
    for (i, name) in names.iter().enumerate() {
        let node = cluster.node(i).unwrap();
        let others: Vec<String> = names.iter().filter(|n| *n != name).cloned().collect();
        assert_eq!(route_peers(node), others, "node {i} routes");
        assert_ne!(
            node.store_dir(),
            cluster.node((i + 1) % 3).unwrap().store_dir()
        );
    }
    assert!(cluster.node(3).is_err());
    Raw::open(cluster.node(0).unwrap().port()).create_stream("R3", 3);

    let leader = cluster.meta_leader().unwrap();
    cluster.kill_node(leader).unwrap();
    cluster.wait_formed().unwrap();
    let successor = cluster.meta_leader().unwrap();
    assert_ne!(successor, leader, "a surviving node took over");
    for i in (0..3).filter(|&i| i != leader) {
        let node = cluster.node(i).unwrap();
        assert_eq!(
            route_peers(node).len(),
            1,
            "node {i} routes to the other survivor"
        );
        Raw::open(node.port()).ping();
    }

    cluster.restart_node(leader).unwrap();
    for i in 0..3 {
        assert_eq!(route_peers(cluster.node(i).unwrap()).len(), 2, "node {i}");
    }

    // A graceful stop of a follower keeps the meta leader; the node rejoins on restart.
    let follower = (0..3).find(|&i| i != successor).unwrap();
    cluster.stop_node(follower).unwrap();
    assert_eq!(cluster.meta_leader().unwrap(), successor);
    cluster.restart_node(follower).unwrap();
    assert_eq!(route_peers(cluster.node(follower).unwrap()).len(), 2);
}

/// The namespace names this process's namespaced clusters use.
fn fault_namespaces() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("cotal-fault-"))
        .map(str::to_owned)
        .collect()
}

/// Until `check` holds, for up to 20 s (a route to a blackholed peer dies on the route's ping
/// timeout, `ping_interval` 1 s here).
fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn namespaced_cluster_partitions_one_way_and_both_ways_and_heals() {
    let before = fault_namespaces();
    let opts = ServerOptions {
        extra_config: "ping_interval: \"1s\"\nping_max: 2\n".into(),
        ..ServerOptions::default()
    };
    let mut net = NetnsCluster::start_with(3, opts).unwrap();
    let ours: Vec<String> = fault_namespaces()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert_eq!(ours.len(), 3, "one namespace per node: {ours:?}");
    let hosts: Vec<_> = (0..3)
        .map(|i| net.cluster().node(i).unwrap().host())
        .collect();
    assert_eq!(
        hosts
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3
    );
    assert!(hosts.iter().all(|h| !h.is_loopback()), "{hosts:?}");
    let node = |i: usize| SocketAddr::from((hosts[i], 4222));
    Raw::open_at(node(0)).create_stream("NS3", 3);

    // One way: node 2 can no longer send to node 0; a cut is a route, listed until healed.
    net.drop_one_way(2, 0).unwrap();
    assert_eq!(net.cuts(), vec![(2, hosts[0])]);
    net.heal().unwrap();
    assert!(net.cuts().is_empty());

    // Node 0 isolated: the other two drop their routes to it and keep a meta leader; the
    // caller cannot reach it either.
    net.isolate(0).unwrap();
    let name0 = net.cluster().node(0).unwrap().name().to_owned();
    for i in [1, 2] {
        eventually("the majority drops its routes to the isolated node", || {
            !route_peers(net.cluster().node(i).unwrap()).contains(&name0)
        });
    }
    assert!(
        TcpStream::connect_timeout(&node(0), Duration::from_millis(500)).is_err(),
        "the isolated node is unreachable from the caller"
    );
    Raw::open_at(node(1)).ping();

    net.heal().unwrap();
    net.cluster().wait_formed().unwrap();
    Raw::open_at(node(0)).ping();

    // A paused node stays a member on restart: SIGSTOP, SIGCONT, kill -9, relaunch.
    net.cluster().pause_node(1).unwrap();
    net.cluster().resume_node(1).unwrap();
    net.cluster_mut().kill_node(1).unwrap();
    net.cluster_mut().restart_node(1).unwrap();
    assert_eq!(route_peers(net.cluster().node(1).unwrap()).len(), 2);

    drop(net);
    let left: Vec<String> = fault_namespaces()
        .into_iter()
        .filter(|n| ours.contains(n))
        .collect();
    assert!(left.is_empty(), "drop removes the namespaces: {left:?}");
}

#[test]
fn missing_binary_fails_loudly_with_the_install_command() {
    let opts = ServerOptions {
        binary: Some(PathBuf::from("/nonexistent/cotal/nats-server")),
        ..ServerOptions::default()
    };
    let error = NatsServer::start(opts.clone()).unwrap_err().to_string();
    assert!(error.contains(INSTALL_COMMAND), "{error}");
    assert!(error.contains("scripts/nats-server.sh"), "{error}");
    assert!(error.contains("/nonexistent/cotal/nats-server"), "{error}");

    let error = NatsCluster::start_with(3, opts).unwrap_err().to_string();
    assert!(error.contains("scripts/nats-server.sh"), "{error}");
}

#[test]
fn wrong_binary_fails_loudly_with_the_install_command() {
    let opts = ServerOptions {
        binary: Some(PathBuf::from("/bin/true")),
        ..ServerOptions::default()
    };
    let error = NatsServer::start(opts).unwrap_err().to_string();
    assert!(error.contains("not nats-server v2.15.1"), "{error}");
    assert!(error.contains("scripts/nats-server.sh"), "{error}");
}
