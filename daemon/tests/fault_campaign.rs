//! The fault campaign on the running daemon (issue 13, part 4): the space's own operator-mode
//! configuration (`broker-config`) on a 3-node cluster whose nodes are separate hosts in
//! network namespaces, the plane (`cotal-authd up --replicas 3` on all three) under a
//! supervisor that restarts it whenever it exits; signed-in humans that exchange at
//! `/exchange`, connect through the auth callout with a standard NATS client, and now and then
//! have the operator revoke their root credential (`actor revoke --credential`) and re-grant;
//! and a remote manager, registered and activated before the first fault
//! (`tests/common/manager.rs`), that renews through `/manager-service-authority` (`renew`, and
//! now and then `renewStandingBundle`, which releases fresh family rows through its gate).
//! Meanwhile the seeded schedule partitions the network (both ways, one way, a node isolated,
//! no quorum), `kill -9`s a node, the auth stream's leader or every node at once, SIGSTOPs a
//! node and restarts one; the supervisor also `kill -9`s the plane itself at random instants
//! (mid-registration included).
//!
//! After the last fault the plane must serve again, a client must get in and the manager
//! renew (liveness after the heal: a gate frozen for good fails here). Then the independent checker
//! (`cotal_tests::fault::checker`) judges the run from the auth stream's every message and the
//! clients' histories: the plane's gate only advances, no two of its registrations share an
//! epoch and none is lost, an acknowledged revoke stays revoked and shuts every later connect
//! of that credential, every refusal the planes audited is a documented code and none
//! `internal`, and no plane is fenced when nothing succeeded it.
//!
//! The default is one short history, for CI. A campaign:
//! `COTAL_FAULT_HISTORIES=10 COTAL_FAULT_SECONDS=60 cargo test -p cotal-authd --test
//! fault_campaign -- --nocapture` (`COTAL_FAULT_SEED` picks the first seed).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../../tests/tests/campaign/capture.rs"]
mod capture;
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::manager::Flow;
use common::signin::{connect, Space};
use common::*;
use cotal_tests::fault::checker::{self, Report};
use cotal_tests::fault::history::{Event, History};
use cotal_tests::fault::inject;
use cotal_tests::fault::schedule::{Fault, Plan};
use cotal_tests::nats::{NetnsCluster, ServerOptions};
use cotal_tests::sim::SplitMix64;
use rustix::process::Signal;
use serde_json::{json, Value};

/// Signed-in clients, one actor each.
const ACTORS: u32 = 2;
/// After the last fault: until the plane serves again and a client gets in.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(90);
/// A plane start killed -9 at a random instant of its first seconds, per mille.
const PLANE_KILL_PER_MILLE: u32 = 150;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The serving plane's loopback face (url, capability), for the clients; `None` between planes.
type Face = Mutex<Option<(String, String)>>;

/// What the supervisor saw of the planes.
#[derive(Debug, Default)]
struct Planes {
    started: usize,
    ready: usize,
    killed: usize,
    /// Exit statuses by code (`signal` for our own kill -9).
    exits: BTreeMap<String, usize>,
    /// The log's last lines of each plane that exited other than 0, 1 or by our kill.
    unexpected: Vec<String>,
    /// Why starts that never served exited 1 (their last log line, cut short), by reason.
    failed_starts: BTreeMap<String, usize>,
}

/// Keeps a plane running until `stop`: starts one, records its registration from the discovery
/// file once it is ready, and starts the next when it exits. While `chaos` holds, a start is
/// sometimes killed -9 at a random instant.
#[allow(clippy::too_many_arguments)]
fn supervise(
    root: &Path,
    urls: &str,
    seed: u64,
    first: (Child, u32),
    stop: &AtomicBool,
    chaos: &AtomicBool,
    face: &Face,
    history: &History,
) -> Planes {
    let mut rng = SplitMix64::new(seed);
    let mut planes = Planes::default();
    let (child, mut n) = first;
    let mut first = Some(child);
    while !stop.load(Ordering::Relaxed) {
        let mut child = match first.take() {
            Some(child) => child,
            None => {
                n += 1;
                start_plane(root, urls, n)
            }
        };
        planes.started += 1;
        let kill_at = (chaos.load(Ordering::Relaxed) && rng.chance(PLANE_KILL_PER_MILLE))
            .then(|| Instant::now() + Duration::from_millis(rng.below(3_000)));
        let mut ready = false;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if !ready {
                if let Some(d) = discovery(root).filter(|d| d["pid"] == child.id()) {
                    ready = true;
                    planes.ready += 1;
                    history.record(Event::Registered {
                        gate: format!("epgate.auth.{}", d["instanceId"].as_str().unwrap()),
                        worker: n,
                        epoch: d["processEpoch"].as_u64().unwrap(),
                        generation: d["generation"].as_u64().unwrap(),
                        registration_revision: d["registrationRevision"].as_u64().unwrap(),
                    });
                    let url = d["url"].as_str().unwrap().to_owned();
                    let cap = d["cap"].as_str().unwrap().to_owned();
                    *face.lock().unwrap() = Some((url, cap));
                }
            }
            if kill_at.is_some_and(|t| Instant::now() >= t) {
                child.kill().unwrap();
                planes.killed += 1;
                break child.wait().unwrap();
            }
            if stop.load(Ordering::Relaxed) {
                signal(&child, Signal::TERM);
                break exits(&mut child, Duration::from_secs(20));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        *face.lock().unwrap() = None;
        let code = status.code().map_or("signal".to_owned(), |c| c.to_string());
        if !matches!(code.as_str(), "0" | "1" | "signal") {
            planes.unexpected.push(format!(
                "plane {n} exited {code}; its log ends:\n{}",
                log_tail(&root.join(format!("plane-{n}.log")))
            ));
        }
        if code == "1" && !ready {
            let tail = log_tail(&root.join(format!("plane-{n}.log")));
            // `up` ends a failed start with one sentence, its last line.
            let last = tail.lines().rev().find(|l| !l.trim().is_empty());
            let why: String = last.unwrap_or("").trim().chars().take(110).collect();
            *planes.failed_starts.entry(why).or_default() += 1;
        }
        *planes.exits.entry(code).or_default() += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    planes
}

/// Starts plane `n` on the cluster, its log in `plane-<n>.log` under the state root.
fn start_plane(root: &Path, urls: &str, n: u32) -> Child {
    let log = std::fs::File::create(root.join(format!("plane-{n}.log"))).unwrap();
    command()
        .args(["up", "--space", SPACE, "--state-dir"])
        .arg(root)
        .args(["--server", urls, "--replicas", "3"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The first plane of a fresh space on a fresh cluster, started again while it fails (as a
/// supervisor would: a just-created R3 stream can refuse the first bind while its leader is
/// elected): the serving child, its discovery file, and how many starts it took.
fn first_plane(root: &Path, urls: &str) -> (Child, Value, u32) {
    for n in 1..=10 {
        let mut child = start_plane(root, urls, n);
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
            if let Some(d) = discovery(root).filter(|d| d["pid"] == child.id()) {
                return (child, d, n);
            }
            std::thread::sleep(POLL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!(
        "the first plane never served in 10 starts; the last one's log ends:\n{}",
        newest_log_tail(root)
    );
}

/// What the clients saw, by outcome.
type Tally = Mutex<BTreeMap<String, usize>>;

fn count(tally: &Tally, what: impl Into<String>) {
    *tally.lock().unwrap().entry(what.into()).or_default() += 1;
}

/// `POST /exchange`; `None` when the plane is not there to answer (it died mid-request).
fn exchange(face: &(String, String), token: &str, actor: &str) -> Option<(u16, Value)> {
    let body = json!({"idpToken": token, "actor": actor, "ttlSec": 120}).to_string();
    let auth = format!("Bearer {}", face.1);
    let headers = [
        ("content-type", "application/json"),
        ("authorization", auth.as_str()),
    ];
    let (status, _, text) = http(&face.0, "POST", "/exchange", &headers, &body).ok()?;
    Some((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// The root credential row a revoke names (`… cred.<uid>.<id> …`).
fn revoked_row(said: &str) -> Option<String> {
    said.split(|c: char| c.is_whitespace() || c == '\'' || c == '"' || c == '`')
        .map(|w| w.trim_end_matches(['.', ',', ';', ':']))
        .find(|w| w.starts_with("cred.") && w.matches('.').count() == 2)
        .map(str::to_owned)
}

/// One signed-in human: exchange, connect through the callout, and now and then have the
/// operator revoke the root credential, check that its bearer is shut out, and re-grant.
#[allow(clippy::too_many_arguments)]
fn client(
    space: &Space,
    urls: &[String],
    k: u32,
    seed: u64,
    stop: &AtomicBool,
    face: &Face,
    history: &History,
    tally: &Tally,
) {
    // A revoked root credential leaves its lifecycle active at its uid (a re-grant of the same
    // actor is refused as a takeover until the incarnation is retired), so after each revoke
    // the human moves on to a freshly granted actor.
    let mut revokes = 0u32;
    let mut revoke_owed = false;
    let mut bearer = String::new();
    let mut actor = format!("cli{k}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rng = SplitMix64::new(seed);
    let mut idp = (space.idp_token("alice"), Instant::now());
    let mut admitted: Vec<u64> = Vec::new();
    let mut n = 0u32;
    let attempt = |bearer: &str, n: &mut u32, rng: &mut SplitMix64| {
        *n += 1;
        let nonce = format!("ibxfault{k}x{n:06}");
        let server = &urls[rng.index(urls.len())];
        let started = history.now_ms();
        let outcome = runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                connect(space, server, bearer, &nonce),
            )
            .await
        });
        match outcome {
            Ok(Ok((client, _))) => {
                drop(client);
                Some(started)
            }
            _ => None,
        }
    };
    // The operator's `actor revoke --credential`; true once it is acknowledged, after which the
    // revoked bearer must be shut out.
    let revoke =
        |actor: &str, bearer: &str, admitted: &mut Vec<u64>, n: &mut u32, rng: &mut SplitMix64| {
            let out = command()
                .args(["actor", "revoke", actor, "--space", SPACE, "--idp-subject"])
                .args(["alice", "--credential", "--server", &urls.join(",")])
                .arg("--state-dir")
                .arg(&space.root)
                .env("RUST_LOG", "off")
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            let Some(row_key) = revoked_row(&said).filter(|_| out.status.success()) else {
                count(tally, "revoke failed");
                return false;
            };
            let acked_ms = history.now_ms();
            history.record(Event::Revoked {
                row_key: row_key.clone(),
                acked_ms,
            });
            for started_ms in admitted.drain(..) {
                history.record(Event::Admitted {
                    row_key: row_key.clone(),
                    started_ms,
                });
            }
            if let Some(started_ms) = attempt(bearer, n, rng) {
                history.record(Event::Admitted {
                    row_key,
                    started_ms,
                });
            }
            count(tally, "revoked");
            true
        };
    while !stop.load(Ordering::Relaxed) {
        // A revoke that failed may still have committed (its write timed out and the read-back
        // found no leader), so the operator runs it again until it is acknowledged (a revoke is
        // monotonic); only then does the human move on to a fresh actor.
        if revoke_owed {
            if !revoke(&actor, &bearer, &mut admitted, &mut n, &mut rng) {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            revoke_owed = false;
            revokes += 1;
            actor = format!("cli{k}r{revokes}");
            space.grant(&actor, "alice", &[]);
        }
        let Some(at) = face.lock().unwrap().clone() else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        if idp.1.elapsed() > Duration::from_secs(60) {
            idp = (space.idp_token("alice"), Instant::now());
        }
        bearer = match exchange(&at, &idp.0, &actor) {
            Some((200, body)) => body["token"].as_str().unwrap().to_owned(),
            Some((status, body)) => {
                let why = body["error"].as_str().unwrap_or_default();
                let why: String = why.chars().take(90).collect();
                count(tally, format!("exchange refused {status}: {why}"));
                std::thread::sleep(Duration::from_millis(100 + rng.below(200)));
                continue;
            }
            None => {
                count(tally, "exchange unanswered");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        count(tally, "exchange granted");
        match attempt(&bearer, &mut n, &mut rng) {
            Some(started) => {
                admitted.push(started);
                count(tally, "connect admitted");
            }
            None => count(tally, "connect refused"),
        }
        revoke_owed = rng.chance(120);
        std::thread::sleep(Duration::from_millis(rng.below(100)));
    }
}

/// The last lines of a plane's log, for a failure's message (the state root goes with the
/// test).
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// [`log_tail`] of the newest plane's log.
fn newest_log_tail(root: &Path) -> String {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("plane-"))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| log_tail(&e.path()))
        .unwrap_or_default()
}

/// The remote manager: renews its supervisor/executor pair through
/// `/manager-service-authority` on whichever plane serves, and now and then its whole standing
/// bundle (fresh family rows released through its gate's fence).
fn renewer(flow: &Flow, proof: &str, seed: u64, stop: &AtomicBool, face: &Face, tally: &Tally) {
    let mut rng = SplitMix64::new(seed);
    let mut idp = (flow.space.idp_token("alice"), Instant::now());
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let Some(at) = face.lock().unwrap().clone() else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        if idp.1.elapsed() > Duration::from_secs(60) {
            idp = (flow.space.idp_token("alice"), Instant::now());
        }
        n += 1;
        let (what, request) = if rng.chance(100) {
            let rid = format!("standing{n:016}");
            let request = flow.renewal("renewStandingBundle", &rid, proof, 0);
            ("renewStandingBundle", request)
        } else {
            let mut request = flow.envelope("renew", &format!("renew{n:018}"));
            request["registrationProof"] = json!(proof);
            ("renew", request)
        };
        match flow.ask_at(&at, &idp.0, &request) {
            Some((200, _)) => count(tally, format!("{what} granted")),
            Some((status, body)) => {
                let why = body["error"].as_str().unwrap_or_default();
                let why: String = why.chars().take(90).collect();
                count(tally, format!("{what} refused {status}: {why}"));
                std::thread::sleep(Duration::from_millis(100 + rng.below(200)));
            }
            None => {
                count(tally, format!("{what} unanswered"));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(100)));
    }
}

/// Every refusal the planes audited (`cotal::audit` lines with `outcome="refused"`), recorded
/// with its code for the checker's documented-codes rule: over HTTP an exchange refusal is a
/// 401 whatever its cause (reference §3.5), so the code is read where the plane wrote it.
fn refusals_from_audit(root: &Path, history: &History) {
    let logs = std::fs::read_dir(root).into_iter().flatten().flatten();
    for log in logs.filter(|e| e.file_name().to_string_lossy().starts_with("plane-")) {
        let text = std::fs::read_to_string(log.path()).unwrap_or_default();
        for line in text.lines() {
            if !(line.contains("cotal::audit") && line.contains("outcome=\"refused\"")) {
                continue;
            }
            let quoted = |field: &str| {
                let start = line.find(&format!("{field}=\""))? + field.len() + 2;
                let end = line[start..].find('"')? + start;
                Some(line[start..end].to_owned())
            };
            history.record(Event::Refused {
                op: "audited",
                code: quoted("code").unwrap_or_default(),
                message: line.chars().take(300).collect(),
            });
        }
    }
}

/// What one history did and what the checker found.
struct Outcome {
    report: Report,
    faults: Vec<Fault>,
    planes: Planes,
    tally: BTreeMap<String, usize>,
    messages: usize,
}

fn run_history(seed: u64, seconds: u64) -> Outcome {
    let space = Space::new();
    for k in 0..ACTORS {
        space.grant(&format!("cli{k}"), "alice", &[]);
    }
    Flow::grant_manager(&space);
    let opts = ServerOptions {
        extra_config: space.node_config(),
        ..ServerOptions::default()
    };
    let mut net = NetnsCluster::start_with(3, opts).unwrap();
    let urls = net.urls();
    let joined = urls.join(",");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stream = format!("KV_cotal_auth_{SPACE}");
    let prefix = format!("$KV.cotal_auth_{SPACE}.");
    let history = History::new();
    let (stop, chaos) = (AtomicBool::new(false), AtomicBool::new(true));
    let done = Arc::new(AtomicBool::new(false));
    let face: Face = Mutex::new(None);
    let tally: Tally = Mutex::new(BTreeMap::new());
    let mut faults = Vec::new();

    // The first plane creates the stores, and the remote manager registers and activates
    // through it before any fault; then the checker lifts the auth store's history limit and
    // starts reading.
    let (first, d, started) = first_plane(&space.root, &joined);
    let flow = runtime.block_on(Flow::attach(space, d, urls[0].clone(), &joined));
    let proof = runtime.block_on(async {
        let (supervisor, _) = flow.prepared_and_registered().await;
        drop(supervisor);
        let activated = flow.granted(&flow.activate_request("activate000000000000001"));
        activated["nextRegistrationProof"]
            .as_str()
            .unwrap()
            .to_owned()
    });
    let space = &flow.space;

    let (planes, captured) = std::thread::scope(|s| {
        let supervisor = s.spawn(|| {
            supervise(
                &space.root,
                &joined,
                seed,
                (first, started),
                &stop,
                &chaos,
                &face,
                &history,
            )
        });
        let deadline = Instant::now() + RECOVERY_TIMEOUT;
        while face.lock().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the first plane never served");
            std::thread::sleep(Duration::from_millis(50));
        }
        let admin = runtime.block_on(space.admin_for(&joined, Duration::from_secs(3_600)));
        let checker_client = admin.space().unwrap().client().clone();
        runtime.block_on(capture::keep_all_history(&checker_client, &stream));
        let recorder = runtime.spawn(capture::capture(
            checker_client.clone(),
            stream.clone(),
            prefix.clone(),
            done.clone(),
        ));
        let clients: Vec<_> = (0..ACTORS)
            .map(|k| {
                let (space, urls, stop, face, history, tally) =
                    (&space, &urls, &stop, &face, &history, &tally);
                let seed = seed.wrapping_mul(1000).wrapping_add(u64::from(k));
                s.spawn(move || client(space, urls, k, seed, stop, face, history, tally))
            })
            .collect();
        let manager = s.spawn(|| {
            let seed = seed.wrapping_mul(1000).wrapping_add(900);
            renewer(&flow, &proof, seed, &stop, &face, &tally)
        });

        let mut plan = Plan::new(seed, 3);
        let until = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < until {
            match inject::apply(&mut net, plan.next_step(), &stream) {
                Ok(fault) => faults.push(fault),
                Err(e) => panic!("seed {seed}: {e}"),
            }
        }

        // The heal: no more faults; the plane must serve again, a client get in and the
        // manager renew.
        chaos.store(false, Ordering::Relaxed);
        let recovered = Instant::now() + RECOVERY_TIMEOUT;
        let progress = || {
            let tally = tally.lock().unwrap();
            (
                tally.get("connect admitted").copied(),
                tally.get("renew granted").copied(),
            )
        };
        let before = progress();
        while face.lock().unwrap().is_none() || progress().0 == before.0 || progress().1 == before.1
        {
            if Instant::now() >= recovered {
                let tally = tally.lock().unwrap().clone();
                stop.store(true, Ordering::Relaxed);
                panic!(
                    "seed {seed}: after the last fault no client got in or no renewal was \
                     granted within {RECOVERY_TIMEOUT:?} (plane up: {}; clients so far: \
                     {tally:?}); the newest plane's log ends:\n{}",
                    face.lock().unwrap().is_some(),
                    newest_log_tail(&space.root)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            c.join().unwrap();
        }
        manager.join().unwrap();
        let planes = supervisor.join().unwrap();
        done.store(true, Ordering::Relaxed);
        let captured = runtime.block_on(recorder).unwrap();
        (planes, captured)
    });
    refusals_from_audit(&space.root, &history);
    let events = history.events();
    let finals = runtime.block_on(async {
        let admin = space.admin_for(&joined, Duration::from_secs(600)).await;
        let client = admin.space().unwrap().client().clone();
        capture::final_reads(client, &stream, &prefix, &events).await
    });
    let mut report = checker::check(&captured, &finals, &events);
    for unexpected in &planes.unexpected {
        report
            .violations
            .push(format!("plane-exits: no other plane ran, yet {unexpected}"));
    }
    Outcome {
        report,
        faults,
        planes,
        tally: tally.into_inner().unwrap(),
        messages: captured.len(),
    }
}

#[test]
fn fault_campaign_on_the_running_daemon_keeps_every_fence() {
    require_server();
    let histories = env_u64("COTAL_FAULT_HISTORIES", 1);
    let seconds = env_u64("COTAL_FAULT_SECONDS", 20);
    let first = env_u64("COTAL_FAULT_SEED", 1);
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut violations = Vec::new();
    for seed in first..first + histories {
        let outcome = run_history(seed, seconds);
        for fault in &outcome.faults {
            *by_kind.entry(fault.kind()).or_default() += 1;
        }
        println!(
            "seed {seed}: {} faults; planes {:?}; clients {:?}; {} stream messages; {} \
             registrations, {} connect checks judged; audited refusals {:?}; {} violations",
            outcome.faults.len(),
            outcome.planes,
            outcome.tally,
            outcome.messages,
            outcome.report.registrations,
            outcome.report.admissions,
            outcome.report.refusals,
            outcome.report.violations.len()
        );
        violations.extend(
            outcome
                .report
                .violations
                .into_iter()
                .map(|v| format!("seed {seed}: {v}")),
        );
    }
    println!("campaign: {histories} histories of {seconds} s; faults {by_kind:?}");
    assert!(
        violations.is_empty(),
        "violations:\n{}",
        violations.join("\n")
    );
}
