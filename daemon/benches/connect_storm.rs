//! Connect storms on the running daemon, measured (issue 27 item 2), each figure beside its floor
//! run in the same process against the same server (never a threshold):
//!
//! * **callout connects at concurrency 16, 64 and 256** — `STORM_N` standard clients (async-nats)
//!   connecting with the sentinel creds, a bearer and a fresh inbox nonce as the connection name
//!   (so each connect binds its nonce), the server asking the plane over the auth callout, at
//!   most that many connects in flight at once; against the floor: the same number of plain
//!   connects with a static user JWT of the data account (no callout: the NATS handshake
//!   alone), on the same server. The two alternate in rounds (callout first, then plain first),
//!   so load drift hits both; per concurrency: connects/s over the wall time, p50 and p99 of
//!   each connect, failures, and the CPU time the daemon and the nats-server spent per connect
//!   (`/proc/<pid>/stat`), which is where a callout connect's extra cost shows;
//! * **the bare callout** — before the plane starts, the same connects answered by a responder
//!   in the bench process that admits every request at once and reads nothing (the trust
//!   root's own callout keys, `cotal_io_nats::callout::serve`), alternated with plain connects:
//!   what the auth callout itself costs the server on this machine, the ceiling any plane's
//!   callout can reach; the plane's rate is then also judged against it;
//! * **a reconnect storm** — `STORM_CLIENTS` callout clients and as many plain clients
//!   connected at once, then the nats-server restarted (SIGTERM, then the same config and store
//!   again, as an operator restarts the service): how long until every client is connected
//!   again, how many reconnects were refused (`authorization violation` events: an auth timeout,
//!   the callout's answer not arriving within the server's 2 s `authorization { timeout }`, or
//!   a plane denial, which its decision counters tell apart) and whether the plane is still up.
//!
//! The plane runs `up --server` against the space's own `broker-config` nats-server, which the
//! bench owns (a restart of the embedded server would end the plane with it). Run with
//! `cargo bench -p cotal-authd --bench connect_storm` (`STORM_N`, default 1000 connects of each
//! kind per concurrency; `STORM_CLIENTS`, default 2000; `STORM_LEVELS`, default `16,64,256`).
//! Needs the pinned nats-server (`scripts/nats-server.sh`) and about 2 × `STORM_CLIENTS` + 100
//! open files (the clients' sockets). The `BENCH` lines are the summary `scripts/bench.sh`
//! collects.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/proc_cpu.rs"]
mod proc_cpu;

use std::collections::BTreeMap;
use std::fs;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::signin::{self, Space};
use common::SPACE;
use cotal_core::callout::{Admit, ConnectRequest};
use cotal_core::jwt::{Permissions, UnixSeconds, UserNats, Validity};
use cotal_core::names::SpaceName;
use cotal_core::profiles::CONNECT_LIMITS;
use cotal_io_nats::async_nats::connection::State;
use cotal_io_nats::async_nats::{self, ClientError, ConnectOptions, Event};
use cotal_io_nats::authority::connect_with_creds;
use cotal_io_nats::callout::{serve, Authorize, AuthorizeFuture, CalloutKeys};
use proc_cpu::cpu;
use serde_json::json;

/// Connects of each kind per concurrency, alternating in this many rounds.
const ROUNDS: usize = 4;
/// How long a reconnect storm may take before the clients still away are counted as not back.
const STORM_DEADLINE: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The server's `authorization { timeout }`: the broker config leaves it at the default.
const AUTH_TIMEOUT: Duration = Duration::from_secs(2);

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now() -> UnixSeconds {
    UnixSeconds(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `q` quantile of sorted latencies.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len().max(1) as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// How a client authenticates.
#[derive(Clone)]
enum Kind {
    /// The sentinel creds and a bearer, under a fresh inbox nonce: answered by the callout.
    Callout { sentinel: String, bearer: String },
    /// A static user JWT of the data account: the handshake alone.
    Plain { creds: String },
}

impl Kind {
    /// The options of one client, `nonce` naming a callout client's inbox.
    fn options(&self, nonce: &str) -> ConnectOptions {
        let options = match self {
            Kind::Callout { sentinel, bearer } => ConnectOptions::new()
                .credentials(sentinel)
                .unwrap()
                .token(bearer.clone())
                .name(nonce)
                .custom_inbox_prefix(format!("_INBOX_{nonce}")),
            Kind::Plain { creds } => ConnectOptions::new().credentials(creds).unwrap(),
        };
        options.connection_timeout(CONNECT_TIMEOUT)
    }
}

/// The outcome of connects of one kind at one concurrency, summed over the rounds.
#[derive(Default)]
struct Tally {
    took: Vec<Duration>,
    failed: BTreeMap<String, usize>,
    wall: Duration,
    daemon_cpu: Duration,
    server_cpu: Duration,
}

impl Tally {
    fn failures(&self) -> usize {
        self.failed.values().sum()
    }

    /// Connects per second over the wall time the phases took.
    fn rate(&self) -> f64 {
        self.took.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut sorted = self.took.clone();
        sorted.sort();
        sorted
    }

    fn per_connect(&self, cpu: Duration) -> f64 {
        ms(cpu) / (self.took.len() + self.failures()).max(1) as f64
    }

    fn line(&self, concurrency: usize, kind: &str) -> String {
        let sorted = self.sorted();
        format!(
            "| {concurrency} | {kind} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.2} |",
            self.rate(),
            ms(quantile(&sorted, 0.5)),
            ms(quantile(&sorted, 0.99)),
            ms(sorted.last().copied().unwrap_or_default()),
            self.failures(),
            self.per_connect(self.daemon_cpu),
            self.per_connect(self.server_cpu),
        )
    }
}

/// The processes whose CPU time is read around each phase.
#[derive(Clone, Copy)]
struct Watched {
    /// The plane; `None` while the bare responder (in this process) answers.
    daemon: Option<u32>,
    server: u32,
}

/// `count` connects of `kind` to `server`, at most `concurrency` in flight, each client closed
/// once connected; nonces are `<tag><i>`.
async fn phase(
    server: &str,
    kind: &Kind,
    count: usize,
    concurrency: usize,
    tag: &str,
    watched: Watched,
    tally: &mut Tally,
) {
    let next = Arc::new(AtomicUsize::new(0));
    let daemon_cpu = || watched.daemon.map_or(Duration::ZERO, cpu);
    let (daemon_before, server_before) = (daemon_cpu(), cpu(watched.server));
    let start = Instant::now();
    let workers: Vec<_> = (0..concurrency.min(count))
        .map(|_| {
            let (next, kind, server, tag) = (
                Arc::clone(&next),
                kind.clone(),
                server.to_owned(),
                tag.to_owned(),
            );
            tokio::spawn(async move {
                let mut took = Vec::new();
                let mut failed = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    let options = kind
                        .options(&format!("{tag}{i:08}"))
                        .max_reconnects(Some(0));
                    let begun = Instant::now();
                    match options.connect(server.as_str()).await {
                        Ok(client) => {
                            took.push(begun.elapsed());
                            drop(client);
                        }
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (took, failed)
            })
        })
        .collect();
    for worker in workers {
        let (took, failed) = worker.await.unwrap();
        tally.took.extend(took);
        for e in failed {
            *tally.failed.entry(e).or_default() += 1;
        }
    }
    tally.wall += start.elapsed();
    tally.daemon_cpu += daemon_cpu() - daemon_before;
    tally.server_cpu += cpu(watched.server) - server_before;
}

/// What the clients of a reconnect storm saw, counted by their event callbacks.
struct Seen {
    disconnected: AtomicUsize,
    connected: AtomicUsize,
    /// Reconnects the server refused with `authorization violation` while no plane served the
    /// callout (the plane restarting).
    refused_unserved: AtomicUsize,
    /// The same once the restarted plane serves: a plane denial or an auth timeout.
    refused: AtomicUsize,
    /// Every other client error (a reconnect that found the server still down among them).
    other: AtomicUsize,
    /// When each `authorization violation` came, to tell the attempts that began before the
    /// plane served (refused one auth timeout later, when it may already serve) from the rest.
    refused_at: std::sync::Mutex<Vec<Instant>>,
    /// Whether a plane serves the callout right now (set by the bench).
    serving: Arc<AtomicBool>,
}

impl Seen {
    fn new(serving: &Arc<AtomicBool>) -> Seen {
        Seen {
            disconnected: AtomicUsize::new(0),
            connected: AtomicUsize::new(0),
            refused_unserved: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            other: AtomicUsize::new(0),
            refused_at: std::sync::Mutex::new(Vec::new()),
            serving: Arc::clone(serving),
        }
    }
}

/// `count` clients of `kind` that stay connected and reconnect without limit; the ones that
/// could not connect are counted, not kept.
async fn fleet(
    server: &str,
    kind: &Kind,
    count: usize,
    tag: &str,
    seen: &Arc<Seen>,
) -> (Vec<async_nats::Client>, BTreeMap<String, usize>) {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..64)
        .map(|_| {
            let (next, kind, server, tag, seen) = (
                Arc::clone(&next),
                kind.clone(),
                server.to_owned(),
                tag.to_owned(),
                Arc::clone(seen),
            );
            tokio::spawn(async move {
                let mut clients = Vec::new();
                let mut failed = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    let seen = Arc::clone(&seen);
                    let options = kind
                        .options(&format!("{tag}{i:08}"))
                        .max_reconnects(None)
                        .event_callback(move |event| {
                            let seen = Arc::clone(&seen);
                            async move {
                                let counter = match event {
                                    Event::Disconnected => &seen.disconnected,
                                    Event::Connected => &seen.connected,
                                    Event::ClientError(ClientError::Other(e))
                                        if e.contains("authorization violation") =>
                                    {
                                        seen.refused_at.lock().unwrap().push(Instant::now());
                                        if seen.serving.load(Ordering::Relaxed) {
                                            &seen.refused
                                        } else {
                                            &seen.refused_unserved
                                        }
                                    }
                                    Event::ClientError(_) => &seen.other,
                                    _ => return,
                                };
                                counter.fetch_add(1, Ordering::Relaxed);
                            }
                        });
                    match options.connect(server.as_str()).await {
                        Ok(client) => clients.push(client),
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (clients, failed)
            })
        })
        .collect();
    let mut clients = Vec::with_capacity(count);
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    for worker in workers {
        let (some, errors) = worker.await.unwrap();
        clients.extend(some);
        for e in errors {
            *failed.entry(e).or_default() += 1;
        }
    }
    (clients, failed)
}

fn connected(clients: &[async_nats::Client]) -> usize {
    clients
        .iter()
        .filter(|c| c.connection_state() == State::Connected)
        .count()
}

/// How many lost servers the plane has ridden out, from its `/metrics` (0 when it does not
/// answer).
fn servers_regained(url: &str) -> f64 {
    let Ok((_, _, text)) = common::http(url, "GET", "/metrics", &[], "") else {
        return 0.0;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("cotal_plane_servers_regained_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The plane's connect decisions so far from its `/metrics`: granted, and refused by code.
fn connect_decisions(url: &str) -> BTreeMap<String, f64> {
    let Ok((_, _, text)) = common::http(url, "GET", "/metrics", &[], "") else {
        return BTreeMap::new();
    };
    let mut found = BTreeMap::new();
    for line in text.lines().filter(|l| {
        l.starts_with("cotal_authority_decisions_total") && l.contains("operation=\"connect\"")
    }) {
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let code = line
            .split("code=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default();
        let key = if code.is_empty() {
            "granted".to_owned()
        } else {
            format!("refused {code}")
        };
        *found.entry(key).or_default() += value;
    }
    found
}

fn nats_server_bin() -> std::path::PathBuf {
    std::env::var_os("COTAL_NATS_SERVER").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/venv/bin/nats-server"),
        std::path::PathBuf::from,
    )
}

/// The space's nats-server again, on the config and store `Space::serve_broker` wrote.
fn restart_broker(space: &Space) -> Child {
    std::process::Command::new(nats_server_bin())
        .arg("-c")
        .arg(space.root.join("server.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The plane again on the same state root and server, as a service manager restarts it.
fn restart_plane(space: &Space, server: &str) -> Child {
    common::command()
        .args(["up", "--space", SPACE, "--server", server, "--state-dir"])
        .arg(&space.root)
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Admits every connect at once and reads nothing: the auth callout's own cost (the server's
/// request and its sealing, the answer's user JWT) with no decision behind it.
struct AdmitAll;

impl Authorize for AdmitAll {
    fn authorize(&self, _request: ConnectRequest) -> AuthorizeFuture<'_> {
        Box::pin(async move {
            Ok(Admit {
                name: "bench-bare".to_owned(),
                permissions: Permissions::default(),
                tags: Vec::new(),
                limits: CONNECT_LIMITS,
                expires_at: UnixSeconds(now().0 + 600),
            })
        })
    }
}

/// The bare callout beside plain connects, per concurrency, before any plane serves: the
/// trust root's callout keys answered by [`AdmitAll`] in this process, alternated with plain
/// connects in rounds as the plane's are. Returns `(concurrency, bare, plain)` tallies.
async fn bare_callout(
    server: &str,
    material: &cotal_core::trust::DaemonMaterial,
    space: &Space,
    plain: &Kind,
    n: usize,
    levels: &[usize],
    broker: u32,
) -> Vec<(usize, Tally, Tally)> {
    let client = connect_with_creds(server, "bench:bare-callout", material.callout_creds())
        .await
        .unwrap();
    let service = serve(
        client,
        CalloutKeys::from_material(material).unwrap(),
        Arc::new(AdmitAll),
    )
    .await
    .unwrap();
    let bare = Kind::Callout {
        sentinel: signin::sentinel(space),
        bearer: "bare-callout-bench".to_owned(),
    };
    let watched = Watched {
        daemon: None,
        server: broker,
    };
    let mut warm = Tally::default();
    for kind in [&bare, plain] {
        phase(server, kind, 50, 4, "barewarm", watched, &mut warm).await;
    }
    assert_eq!(warm.failures(), 0, "bare warm-up failed: {:?}", warm.failed);
    let chunk = (n / ROUNDS).max(1);
    let mut results = Vec::new();
    for &concurrency in levels {
        let (mut by_bare, mut by_plain) = (Tally::default(), Tally::default());
        for round in 0..ROUNDS {
            let tag = format!("bare{concurrency}x{round}x");
            let order: [(&Kind, &mut Tally); 2] = if round % 2 == 0 {
                [(&bare, &mut by_bare), (plain, &mut by_plain)]
            } else {
                [(plain, &mut by_plain), (&bare, &mut by_bare)]
            };
            for (kind, tally) in order {
                phase(server, kind, chunk, concurrency, &tag, watched, tally).await;
            }
        }
        results.push((concurrency, by_bare, by_plain));
    }
    service.close().await.unwrap();
    results
}

fn main() {
    let n = knob("STORM_N", 1000);
    let clients = knob("STORM_CLIENTS", 2000);
    let levels: Vec<usize> = std::env::var("STORM_LEVELS")
        .unwrap_or_else(|_| "16,64,256".to_owned())
        .split(',')
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(bench(n, clients, &levels));
}

async fn bench(n: usize, clients: usize, levels: &[usize]) {
    let mut space = Space::new();
    space.grant_lists("cli", "alice", "", "team", "team");
    let server = space.serve_broker();
    // The nats-server serve_broker started is the reaper's last child: the storm restarts it.
    let broker_slot = space.reaper.0.len() - 1;
    let material =
        cotal_io_fs::trust::load_daemon(&space.root, &SpaceName::parse(SPACE).unwrap()).unwrap();
    let plain = Kind::Plain {
        creds: cotal_core::jwt::user_creds(
            material.data_signing_key(),
            material.data_account(),
            &nkeys::KeyPair::new_user(),
            "bench-plain",
            &UserNats::default(),
            Validity {
                issued_at: now(),
                expires_at: Some(UnixSeconds(now().0 + 3600)),
            },
        )
        .unwrap()
        .text(),
    };
    let broker = space.reaper.0[broker_slot].id();
    let bare = bare_callout(&server, &material, &space, &plain, n, levels, broker).await;

    let d = space.up_with(&["--server", &server], &[("RUST_LOG", "error")], None);
    // The plane is the reaper's last child now: the reconnect storm watches it exit.
    let plane_slot = space.reaper.0.len() - 1;
    let url = d["url"].as_str().unwrap().to_owned();
    let cap = d["cap"].as_str().unwrap().to_owned();
    let daemon = u32::try_from(d["pid"].as_u64().unwrap()).unwrap();
    let bearer = || {
        let idp_token = space.idp_token("alice");
        let (status, body) = signin::post(
            &url,
            Some(&cap),
            &json!({"idpToken": idp_token, "actor": "cli", "ttlSec": 600}),
        );
        assert_eq!(status, 200, "the exchange failed: {body}");
        body["token"].as_str().unwrap().to_owned()
    };
    let callout = Kind::Callout {
        sentinel: signin::sentinel(&space),
        bearer: bearer(),
    };
    let watched = Watched {
        daemon: Some(daemon),
        server: broker,
    };

    // Unmeasured: the first connects of each kind (the plane's connections warm, the server's
    // account lookups cached).
    let mut warm = Tally::default();
    for kind in [&callout, &plain] {
        phase(&server, kind, 50, 4, "stormwarm", watched, &mut warm).await;
    }
    assert_eq!(warm.failures(), 0, "warm-up failed: {:?}", warm.failed);

    let chunk = (n / ROUNDS).max(1);
    let mut results = Vec::new();
    for &concurrency in levels {
        let (mut by_callout, mut by_plain) = (Tally::default(), Tally::default());
        for round in 0..ROUNDS {
            let tag = format!("storm{concurrency}x{round}x");
            let order: [(&Kind, &mut Tally); 2] = if round % 2 == 0 {
                [(&callout, &mut by_callout), (&plain, &mut by_plain)]
            } else {
                [(&plain, &mut by_plain), (&callout, &mut by_callout)]
            };
            for (kind, tally) in order {
                phase(&server, kind, chunk, concurrency, &tag, watched, tally).await;
            }
        }
        results.push((concurrency, by_callout, by_plain));
    }

    // The reconnect storm: both fleets up, then the server restarted under them. The plane
    // rides it out: it serves again, under its re-taken claim, once its connections are back
    // (its `servers_regained` counter says when). Should it exit instead, the bench restarts it
    // as a service manager would (`Restart=on-failure`): `up` again on the same state and
    // server.
    let storm_callout = Kind::Callout {
        sentinel: signin::sentinel(&space),
        bearer: bearer(),
    };
    let serving = Arc::new(AtomicBool::new(true));
    let seen_callout = Arc::new(Seen::new(&serving));
    let seen_plain = Arc::new(Seen::new(&serving));
    let setup = Instant::now();
    let (callout_fleet, callout_setup_failed) = fleet(
        &server,
        &storm_callout,
        clients,
        "stormfleet",
        &seen_callout,
    )
    .await;
    let (plain_fleet, plain_setup_failed) = fleet(&server, &plain, clients, "", &seen_plain).await;
    let setup_took = setup.elapsed();
    // The plane's decisions so far, which the storm's are counted from.
    let decided_before = connect_decisions(&url);
    let old = &mut space.reaper.0[broker_slot];
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(old.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    old.wait().unwrap();
    serving.store(false, Ordering::Relaxed);
    let gone = Instant::now();
    while (connected(&callout_fleet) > 0 || connected(&plain_fleet) > 0)
        && gone.elapsed() < STORM_DEADLINE
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let noticed = gone.elapsed();
    let restarted = Instant::now();
    space.reaper.0[broker_slot] = restart_broker(&space);
    let (mut callout_back, mut plain_back) = (None, None);
    let (mut callout_half, mut plain_half) = (None, None);
    let (mut plane_exited, mut plane_ready) = (None, None);
    let mut successor: Option<Child> = None;
    while restarted.elapsed() < STORM_DEADLINE && (callout_back.is_none() || plain_back.is_none()) {
        let at = restarted.elapsed();
        if plane_exited.is_none() && space.reaper.0[plane_slot].try_wait().unwrap().is_some() {
            plane_exited = Some(at);
            successor = Some(restart_plane(&space, &server));
        }
        if plane_ready.is_none() {
            let ready = match &successor {
                Some(plane) => {
                    common::discovery(&space.root).is_some_and(|d| d["pid"] == plane.id())
                }
                None => servers_regained(&url) >= 1.0,
            };
            if ready {
                plane_ready = Some(at);
                serving.store(true, Ordering::Relaxed);
            }
        }
        for (fleet, half, back) in [
            (&callout_fleet, &mut callout_half, &mut callout_back),
            (&plain_fleet, &mut plain_half, &mut plain_back),
        ] {
            let up = connected(fleet);
            if half.is_none() && up * 2 >= fleet.len() {
                *half = Some(at);
            }
            if back.is_none() && up == fleet.len() {
                *back = Some(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (callout_up, plain_up) = (connected(&callout_fleet), connected(&plain_fleet));
    // Let the last answers' counters settle before the plane's decisions are read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (plane_url, plane_pid) = match common::discovery(&space.root) {
        Some(d) => (
            d["url"].as_str().unwrap_or_default().to_owned(),
            d["pid"].as_u64().unwrap_or(0),
        ),
        None => (url.clone(), u64::from(daemon)),
    };
    // A successor's counters start at its start; the plane that rode the storm out counts it
    // on top of what it decided before.
    let mut decisions = connect_decisions(&plane_url);
    if successor.is_none() {
        for (key, before) in &decided_before {
            if let Some(now) = decisions.get_mut(key) {
                *now -= before;
            }
        }
    }
    let plane_alive = fs::metadata(format!("/proc/{plane_pid}/status")).is_ok_and(|_| {
        !fs::read_to_string(format!("/proc/{plane_pid}/stat"))
            .unwrap_or_default()
            .contains(") Z")
    });
    if let Some(plane) = successor {
        space.reaper.0.push(plane);
    }
    drop(callout_fleet);
    drop(plain_fleet);

    println!(
        "connect storms on the running daemon ({n} connects of each kind per concurrency in \
         {ROUNDS} alternating rounds; loopback, the space's broker-config nats-server)"
    );
    println!(
        "| concurrency | connect | per second | p50 ms | p99 ms | max ms | failures | daemon \
         CPU ms/connect | server CPU ms/connect |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (concurrency, by_callout, by_plain) in &results {
        println!("{}", by_callout.line(*concurrency, "callout"));
        println!("{}", by_plain.line(*concurrency, "plain"));
    }
    println!(
        "the bare callout (a responder in the bench process admitting every request, reading \
         nothing; its CPU is the bench's, not separated), before the plane started:"
    );
    for (concurrency, by_bare, by_plain) in &bare {
        println!("{}", by_bare.line(*concurrency, "bare callout"));
        println!("{}", by_plain.line(*concurrency, "plain"));
    }
    for (concurrency, by_callout, by_plain) in &results {
        for (kind, tally) in [("callout", by_callout), ("plain", by_plain)] {
            for (e, count) in &tally.failed {
                println!("FAILED at concurrency {concurrency}, {kind}: {count} × {e}");
            }
        }
    }
    let show = |failed: &BTreeMap<String, usize>| {
        if failed.is_empty() {
            return "none".to_owned();
        }
        failed
            .iter()
            .map(|(e, count)| format!("{count} × {e}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let secs = |d: Option<Duration>| {
        d.map_or("not within the deadline".to_owned(), |d| {
            format!("{:.2} s", d.as_secs_f64())
        })
    };
    let count = |key: &str| decisions.get(key).copied().unwrap_or(0.0);
    // Counted from zero (an empty sum of floats is -0).
    let denied: f64 = decisions
        .iter()
        .filter(|(k, _)| k.starts_with("refused"))
        .fold(0.0, |sum, (_, v)| sum + v);
    let refused = seen_callout.refused.load(Ordering::Relaxed);
    // A refusal once the plane serves that the plane did not decide is one whose answer did
    // not reach the server in time: the server's auth timeout.
    let timed_out = refused.saturating_sub(denied as usize);
    // An attempt the server put to the callout while no plane was subscribed waits out the
    // whole auth timeout (nothing answers "no responders" to the server's own request), so it
    // is refused up to AUTH_TIMEOUT after the plane began to serve: those are the plane's
    // absence, the rest (past that window) attempts the serving plane did not answer in time.
    let began_served = plane_ready.map_or(0, |ready| {
        let window_end = restarted + ready + AUTH_TIMEOUT;
        seen_callout
            .refused_at
            .lock()
            .unwrap()
            .iter()
            .filter(|&&at| at >= window_end)
            .count()
    });
    let timed_out_served = began_served.saturating_sub(denied as usize);
    let plane_end = match plane_exited {
        None => format!(
            "the plane rode it out and served again {} after the restart",
            secs(plane_ready)
        ),
        Some(_) => format!(
            "the plane exited {} after the restart, its successor served {} after it",
            secs(plane_exited),
            secs(plane_ready)
        ),
    };
    println!(
        "reconnect storm: {} callout and {} plain clients connected in {:.1} s (setup failures: \
         callout {}, plain {}); nats-server stopped (SIGTERM), every client saw it down after \
         {:.2} s, restarted on the same config and store; {plane_end}",
        fleet_len(clients, &callout_setup_failed),
        fleet_len(clients, &plain_setup_failed),
        setup_took.as_secs_f64(),
        show(&callout_setup_failed),
        show(&plain_setup_failed),
        noticed.as_secs_f64(),
    );
    println!(
        "| fleet | half back | all back | connected at the end | refused while no plane served \
         | refused once it served | other client errors |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (what, seen, half, back, up, failed) in [
        (
            "callout",
            &seen_callout,
            callout_half,
            callout_back,
            callout_up,
            &callout_setup_failed,
        ),
        (
            "plain",
            &seen_plain,
            plain_half,
            plain_back,
            plain_up,
            &plain_setup_failed,
        ),
    ] {
        println!(
            "| {what} | {} | {} | {up} of {} | {} | {} | {} |",
            secs(half),
            secs(back),
            fleet_len(clients, failed),
            seen.refused_unserved.load(Ordering::Relaxed),
            seen.refused.load(Ordering::Relaxed),
            seen.other.load(Ordering::Relaxed),
        );
    }
    println!(
        "the serving plane's connect decisions (since its start): {} granted, {denied} refused \
         ({}); refused by the server's auth timeout once it served (refusals it did not \
         decide): {timed_out}, of which {} within {} s of its start (attempts put to the \
         callout while no plane was subscribed) and {timed_out_served} later (attempts the \
         serving plane did not answer in time); that plane {}",
        count("granted"),
        decisions
            .iter()
            .filter(|(k, _)| k.starts_with("refused"))
            .map(|(k, v)| format!("{v} × {k}"))
            .collect::<Vec<_>>()
            .join(", "),
        timed_out.saturating_sub(timed_out_served),
        AUTH_TIMEOUT.as_secs(),
        if plane_alive { "is running" } else { "EXITED" },
    );

    for (concurrency, by_callout, by_plain) in &results {
        let (c, p) = (by_callout.sorted(), by_plain.sorted());
        let (c99, p99) = (quantile(&c, 0.99), quantile(&p, 0.99));
        let goal = if *concurrency == 64 {
            ">= 0.8 of plain at concurrency 64, p99 <= 1.5x plain's, zero failures"
        } else {
            "zero failures at every concurrency"
        };
        println!(
            "BENCH\tcallout connects/s at concurrency {concurrency} (p50 {:.2} ms, p99 {:.2} ms \
             = {:.2}x plain's {:.2} ms; failures {} callout, {} plain)\t{:.0}\t{:.0}\t{:.2}\t{goal}",
            ms(quantile(&c, 0.5)),
            ms(c99),
            c99.as_secs_f64() / p99.as_secs_f64().max(1e-9),
            ms(p99),
            by_callout.failures(),
            by_plain.failures(),
            by_callout.rate(),
            by_plain.rate(),
            by_callout.rate() / by_plain.rate().max(1e-9),
        );
    }
    // The auth callout's own ceiling on this machine, and the plane against it.
    for ((concurrency, by_bare, by_plain), (_, by_callout, _)) in bare.iter().zip(&results) {
        if *concurrency != 64 {
            continue;
        }
        println!(
            "BENCH\tbare callout connects/s at concurrency 64 (a responder that reads nothing: \
             the callout's own cost; server CPU {:.2} ms/connect vs plain's {:.2})\t{:.0}\t{:.0}\t\
             {:.2}\t— (the ceiling of any callout here)",
            by_bare.per_connect(by_bare.server_cpu),
            by_plain.per_connect(by_plain.server_cpu),
            by_bare.rate(),
            by_plain.rate(),
            by_bare.rate() / by_plain.rate().max(1e-9),
        );
        println!(
            "BENCH\tcallout connects/s at concurrency 64 against the bare callout (the plane's \
             decision: ledger, credential, head, inbox binding)\t{:.0}\t{:.0}\t{:.2}\t—",
            by_callout.rate(),
            by_bare.rate(),
            by_callout.rate() / by_bare.rate().max(1e-9),
        );
    }
    let all_back = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    println!(
        "BENCH\treconnect storm, {clients} callout clients: all back after a server restart (s; \
         {callout_up} back, {timed_out} refused by an auth timeout, {timed_out_served} of them \
         begun once the restarted plane served; plain clients beside them as the floor)\t{:.2}\t{:.2}\t{:.2}\tall back, none refused by an auth timeout",
        all_back(callout_back),
        all_back(plain_back),
        all_back(plain_back) / all_back(callout_back),
    );
}

/// How many of `wanted` clients a fleet holds, given its setup failures.
fn fleet_len(wanted: usize, failed: &BTreeMap<String, usize>) -> usize {
    wanted - failed.values().sum::<usize>()
}
