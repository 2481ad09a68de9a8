//! Manager-service renewals on the running daemon, measured (issue 12), each figure beside its
//! floor run in the same process against the same server (never a threshold):
//!
//! * **renewals/s** — `POST /manager-service-authority` over real HTTP on the loopback face
//!   (IdP token verified, owner derived, the caller's grant read fresh, the request parsed,
//!   `core::renewal::ManagerAuthority` run on the plane's remote-manager issuer connection, the
//!   answer serialized), sequential, for `renew` (the supervisor/executor pair: one gate read,
//!   two signatures) and `renewStandingBundle` (all five duties, the endpoint family released
//!   through the fence), against the floor: the same request parsed and the same
//!   `ManagerAuthority` run in this process on a `NatsWorld` over a connection with exactly the
//!   issuer's grants (`plane_grants::remote_manager_issuer`), its material serialized; the two
//!   interleaved request by request, so both see the same store;
//! * each HTTP figure twice: over one kept-alive connection (as the reference's clients keep
//!   theirs; the judged line, issue 27) and over a fresh connection per request, interleaved
//!   with the floor request by request;
//! * for reading the `renew` ratio: what the route adds to the floor piece by piece —
//!   `GET /health` (the transport alone, one connection per request), the IdP token's
//!   verification and the grant read (both in this process, as the route does them) — with the
//!   route's own mean from the daemon's latency histogram (`/metrics`) and the daemon's CPU time
//!   per request (`/proc/<pid>/stat`);
//! * the daemon's RSS idle, after the sequential runs, and its peak while 1,000 concurrent
//!   `renew` requests arrive at once, on the loopback face (no in-flight cap) and on the public
//!   face (its cap answers the excess 503 `busy`), sampled from `/proc/<pid>/status`.
//!
//! The manager instance is brought to activated by the shared fixture `tests/common/manager.rs`
//! (`prepare`, the manager's own registration over the issued executor, `activate`) on the
//! space's own `broker-config` server. Run with `cargo bench -p cotal-authd --bench renewal`
//! (`RENEWAL_N` sets the request count, default 300). Needs the pinned nats-server
//! (`scripts/nats-server.sh`). The `BENCH` lines are the summary `scripts/bench.sh` collects.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/kept_alive.rs"]
mod kept_alive;
#[path = "support/proc_cpu.rs"]
mod proc_cpu;

use std::collections::BTreeMap;
use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::manager::Flow;
use common::SPACE;
use cotal_core::actors::authorize::authorize_human_grant;
use cotal_core::error::EpError;
use cotal_core::jwt::UnixSeconds;
use cotal_core::kv::Store;
use cotal_core::machine::Replay;
use cotal_core::manager::{ManagerAuthorityRequest, ManagerHost, Supervisor};
use cotal_core::names::ActorToken;
use cotal_core::names::SpaceName;
use cotal_core::plane_grants;
use cotal_core::profiles::StandingTtl;
use cotal_core::renewal::ManagerAuthority;
use cotal_io_fs::FileActors;
use cotal_io_http::idp_keys::{IdpKeys, IdpSource};
use cotal_io_nats::{AuthorityClient, DataAccountSigner, NatsWorld, SpaceOptions, StoreSet};
use kept_alive::KeptAlive;
use proc_cpu::cpu;
use serde_json::{json, Value};

/// The concurrent burst the RSS figure is taken under.
const BURST: usize = 1000;
const WAIT: Duration = Duration::from_secs(60);
const MAX_ANSWER: usize = 256 * 1024;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Sorted latencies → (p50, p99, per second over their sum).
fn summary(mut took: Vec<Duration>) -> (Duration, Duration, f64) {
    took.sort();
    let at = |q: f64| {
        let i = ((took.len() as f64 - 1.0) * q).round() as usize;
        took.get(i).copied().unwrap_or_default()
    };
    let total: Duration = took.iter().sum();
    (at(0.5), at(0.99), took.len() as f64 / total.as_secs_f64())
}

/// Samples the daemon's RSS every millisecond on its own thread until stopped; the peak.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = rss_kib(pid);
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(1));
            }
            peak.max(rss_kib(pid))
        });
        Sampler { stop, thread }
    }

    fn peak(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// One face's door: where, and the loopback capability when it needs one.
#[derive(Clone)]
struct Door {
    url: String,
    authorization: Option<String>,
}

impl Door {
    /// `POST /manager-service-authority` with `request` under `idp_token`: the status and body.
    async fn ask(&self, idp_token: &str, request: &Value) -> Result<(u16, Value), String> {
        let headers: Vec<(&str, &str)> = self
            .authorization
            .as_deref()
            .map(|a| ("authorization", a))
            .into_iter()
            .collect();
        let (status, body) = cotal_io_http::fetch::post_json(
            &self.url,
            &headers,
            &json!({"idpToken": idp_token, "request": request}),
            WAIT,
            MAX_ANSWER,
        )
        .await?;
        Ok((status.as_u16(), body))
    }
}

/// Whether an answer is the 200 of `operation` with exactly its credential set.
fn succeeded(status: u16, body: &Value, names: &[&str]) -> bool {
    let mut got: Vec<&str> = body["credentials"]
        .as_object()
        .map(|c| c.keys().map(String::as_str).collect())
        .unwrap_or_default();
    got.sort_unstable();
    status == 200 && got == names
}

/// A request id unique to `tag` and `i` (22–64 characters).
fn rid(tag: &str, i: usize) -> String {
    format!("{tag}{i:020}")
}

/// The outcome of a sequential run: the latencies and the failures (status and sentence).
struct Run {
    took: Vec<Duration>,
    failed: Vec<String>,
}

impl Run {
    fn new(n: usize) -> Run {
        Run {
            took: Vec::with_capacity(n),
            failed: Vec::new(),
        }
    }

    /// Counts one HTTP answer (measured from the eleventh on): a success is the 200 of exactly
    /// `names`.
    fn record(
        &mut self,
        i: usize,
        took: Duration,
        answer: Result<(u16, Value), String>,
        names: &[&str],
    ) {
        match answer {
            Ok((status, body)) if succeeded(status, &body, names) => {}
            Ok((status, body)) => self.failed.push(format!("{status}: {body}")),
            Err(e) => self.failed.push(e),
        }
        if i >= 10 {
            self.took.push(took);
        }
    }

    fn line(&self, what: &str, floor: &Run) -> String {
        let (p50, p99, rate) = summary(self.took.clone());
        let (f50, f99, frate) = summary(floor.took.clone());
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        format!(
            "| {what} | {rate:.0} | {:.2} | {:.2} | {frate:.0} | {:.2} | {:.2} | {:.2} | {} |",
            ms(p50),
            ms(p99),
            ms(f50),
            ms(f99),
            rate / frate,
            self.failed.len() + floor.failed.len(),
        )
    }
}

fn main() {
    let n: usize = std::env::var("RENEWAL_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(bench(n));
}

async fn bench(n: usize) {
    let public_port = free_port().to_string();
    // The plane logs errors only (the public burst's 503s are each a warning line otherwise).
    let f = Flow::with_up(
        &["--exchange-public-port", &public_port],
        &[("RUST_LOG", "error")],
    )
    .await;
    let pid = u32::try_from(f.d["pid"].as_u64().unwrap()).unwrap();

    // To activated: prepare → the manager publishes its contract → the instance registers
    // (over the executor `prepare` issued, as a reference manager does) → activate, whose
    // answer carries the proof renewals present.
    let (_supervisor, _closure) = f.prepared_and_registered().await;
    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let proof = activated["nextRegistrationProof"]
        .as_str()
        .unwrap()
        .to_owned();
    let renew = |tag: &str, i: usize| {
        let mut raw = f.envelope("renew", &rid(&format!("renew{tag}"), i));
        raw["registrationProof"] = json!(proof);
        raw
    };
    let standing = |tag: &str, i: usize| {
        let id = rid(&format!("standing{tag}"), i);
        f.renewal("renewStandingBundle", &id, &proof, 0)
    };
    const PAIR: [&str; 2] = ["executor", "supervisor"];
    const FIVE: [&str; 5] = [
        "executor",
        "goalWriter",
        "serve",
        "sessionLedger",
        "supervisor",
    ];

    // One IdP token for the whole run (minting one is the IdP's work, not the plane's).
    let idp_token = cotal_authd::dev_idp_cmd::token(&f.space.root, "alice", 3600).unwrap();
    let loopback = Door {
        url: format!("{}/manager-service-authority", f.d["url"].as_str().unwrap()),
        authorization: f.d["cap"].as_str().map(|c| format!("Bearer {c}")),
    };
    let public = Door {
        url: format!("http://127.0.0.1:{public_port}/manager-service-authority"),
        authorization: None,
    };
    // The floor: the same operation in this process, on a connection with exactly the issuer's
    // grants, against the same server.
    let space = SpaceName::parse(SPACE).unwrap();
    let material = &f.material;
    let grant_space = space.clone();
    let issuer = AuthorityClient::open(
        &f.server,
        "bench-remote-manager-issuer".to_owned(),
        DataAccountSigner::of(material),
        move |conn| plane_grants::remote_manager_issuer(&grant_space, conn).map(Into::into),
        Duration::from_secs(600),
        space.clone(),
        SpaceOptions {
            create_missing: false,
            replicas_as_found: true,
            stores: StoreSet::of(&[Store::Auth, Store::Records, Store::Contracts]),
            ..SpaceOptions::default()
        },
    )
    .await
    .unwrap();
    let bound = issuer.space().unwrap();
    let host = ManagerHost::of_trust_root(space.clone(), material, StandingTtl::DEFAULT).unwrap();
    let holder = Supervisor::human(
        material.owner_for_idp_subject("alice").unwrap(),
        vec!["supervise".to_owned()],
    );
    let direct = |raw: &Value, names: &'static [&'static str]| {
        let (bound, host, holder) = (&bound, &host, &holder);
        let parsed = ManagerAuthorityRequest::parse(raw);
        // The parse runs when the caller calls this, inside its timed span, as the route's does.
        async move {
            let call = ManagerAuthority::new(host.clone(), holder.clone(), parsed?, now_ms());
            let text = NatsWorld::new(bound)
                .run(&mut Replay::new(call))
                .await?
                .to_json();
            let body: Value =
                serde_json::from_str(&text).map_err(|e| EpError::internal(e.to_string()))?;
            if !succeeded(200, &body, names) {
                return Err(EpError::internal(format!("not the closed set: {body}")));
            }
            Ok(())
        }
    };

    let idle_cpu = cpu(pid);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_cpu = cpu(pid) - idle_cpu;
    let idle_rss = rss_kib(pid);

    // Sequential, interleaved: each request over a fresh connection, then its twin over one
    // kept-alive connection (as the reference's clients keep theirs), then its floor twin, so
    // all three see the same store and the same drift. The first ten of each are not measured
    // (connection pools, caches).
    let paired = |make: &dyn Fn(&str, usize) -> Value, names: &'static [&'static str]| {
        let (door, idp_token, direct) = (&loopback, &idp_token, &direct);
        let requests: Vec<[Value; 3]> = (0..n + 10)
            .map(|i| [make("http", i), make("kept", i), make("floor", i)])
            .collect();
        async move {
            let mut http = Run::new(n);
            let mut kept = Run::new(n);
            let mut floor = Run::new(n);
            let mut connection = KeptAlive::open(&door.url, door.authorization.clone())
                .await
                .unwrap();
            let path = "/manager-service-authority";
            for (i, [over_http, over_kept, in_process]) in requests.iter().enumerate() {
                let start = Instant::now();
                let answer = door.ask(idp_token, over_http).await;
                http.record(i, start.elapsed(), answer, names);
                let body = json!({"idpToken": idp_token, "request": over_kept});
                let start = Instant::now();
                let answer = connection.post(path, &body).await;
                kept.record(i, start.elapsed(), answer, names);
                let start = Instant::now();
                let outcome = direct(in_process, names).await;
                let took = start.elapsed();
                if let Err(e) = outcome {
                    floor.failed.push(e.message);
                }
                if i >= 10 {
                    floor.took.push(took);
                }
            }
            (http, kept, floor)
        }
    };
    let base = f.d["url"].as_str().unwrap().to_owned();
    let before = common::route_latency(&base, "/manager-service-authority");
    let cpu_before = cpu(pid);
    let (http_renew, kept_renew, floor_renew) = paired(&renew, &PAIR).await;
    // Two HTTP renewals per pair: one on a fresh connection, one kept alive.
    let renew_cpu = (cpu(pid) - cpu_before) / u32::try_from(2 * (n + 10)).unwrap();
    let after = common::route_latency(&base, "/manager-service-authority");
    let served_renew_ms = (after.0 - before.0) / (after.1 - before.1).max(1.0) * 1e3;
    let (http_standing, kept_standing, floor_standing) = paired(&standing, &FIVE).await;
    let _ = issuer.close().await;

    // What the route adds to the floor, each piece alone, for reading the ratio: the HTTP
    // transport (`GET /health` on the same face, one connection per request, as above), the
    // IdP token's verification against the pinned key set, and the caller's grant read from
    // the ledger files, both in this process as the route does them.
    let mut transport = Vec::with_capacity(n);
    let health = loopback
        .url
        .replace("/manager-service-authority", "/health");
    for _ in 0..n {
        let start = Instant::now();
        cotal_io_http::fetch::get_json(&health, WAIT, MAX_ANSWER)
            .await
            .unwrap();
        transport.push(start.elapsed());
    }
    let idp = IdpKeys::new(IdpSource::pinned(material.idp()));
    idp.verify(&idp_token, UnixSeconds::from_millis(now_ms()))
        .await
        .unwrap();
    let mut verify = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        idp.verify(&idp_token, UnixSeconds::from_millis(now_ms()))
            .await
            .unwrap();
        verify.push(start.elapsed());
    }
    let ledger = FileActors::new(cotal_io_fs::trust::space_dir(&f.space.root, &space));
    let actor = ActorToken::parse("cli").unwrap();
    let mut grant = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let owner = cotal_core::names::DerivedOwner::parse(holder.owner().as_str()).unwrap();
        authorize_human_grant(&mut &ledger, &space, &owner, &actor, None).unwrap();
        grant.push(start.elapsed());
    }
    let after_rss = rss_kib(pid);

    // 1,000 concurrent renewals at once, one connection each, on each face.
    let burst = |door: &Door| {
        let requests: Vec<Value> = (0..BURST).map(|i| renew("burst", i)).collect();
        let (door, idp_token) = (door.clone(), idp_token.clone());
        async move {
            let sampler = Sampler::start(pid);
            let start = Instant::now();
            let tasks: Vec<_> = requests
                .into_iter()
                .map(|request| {
                    let (door, idp_token) = (door.clone(), idp_token.clone());
                    tokio::spawn(async move { door.ask(&idp_token, &request).await })
                })
                .collect();
            let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
            for task in tasks {
                let what = match task.await.unwrap() {
                    Ok((200, body)) if succeeded(200, &body, &PAIR) => "200 ok".to_owned(),
                    Ok((status, body)) => format!(
                        "{status} {}",
                        body["error"].as_str().unwrap_or("(no sentence)")
                    ),
                    Err(e) => format!("transport: {e}"),
                };
                *outcomes.entry(what).or_default() += 1;
            }
            let took = start.elapsed();
            (sampler.peak(), took, outcomes)
        }
    };
    let (loopback_peak, loopback_took, loopback_outcomes) = burst(&loopback).await;
    let (public_peak, public_took, public_outcomes) = burst(&public).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled_rss = rss_kib(pid);

    println!(
        "manager-service renewals on the running daemon, {n} sequential requests each after 10 \
         unmeasured (loopback face, broker-config nats-server)"
    );
    println!(
        "| operation | HTTP per second | p50 ms | p99 ms | floor per second | floor p50 ms | \
         floor p99 ms | ratio | failures |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "{}",
        kept_renew.line("renew, one kept-alive connection", &floor_renew)
    );
    println!(
        "{}",
        kept_standing.line(
            "renewStandingBundle, one kept-alive connection",
            &floor_standing
        )
    );
    println!(
        "{}",
        http_renew.line("renew, one connection per request", &floor_renew)
    );
    println!(
        "{}",
        http_standing.line(
            "renewStandingBundle, one connection per request",
            &floor_standing
        )
    );
    println!(
        "floor = the request parsed + the same ManagerAuthority run on a NatsWorld over a \
         connection with the issuer's grants + its material serialized, in this process"
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (t50, t99, trate) = summary(transport);
    let (v50, v99, vrate) = summary(verify);
    let (g50, g99, grate) = summary(grant);
    println!(
        "| (reference) GET /health, the transport alone | {trate:.0} | {:.2} | {:.2} | | | | | |",
        ms(t50),
        ms(t99)
    );
    println!(
        "| (reference) IdP token verify, in process | {vrate:.0} | {:.3} | {:.3} | | | | | |",
        ms(v50),
        ms(v99)
    );
    println!(
        "| (reference) grant ledger read, in process | {grate:.0} | {:.3} | {:.3} | | | | | |",
        ms(g50),
        ms(g99)
    );
    let (h50, _, _) = summary(http_renew.took.clone());
    let (f50, _, _) = summary(floor_renew.took.clone());
    println!(
        "renew p50: floor {:.2} + transport {:.2} + verify {:.3} + grant read {:.3} = {:.2} ms \
         against {:.2} ms over HTTP (one connection per request)",
        ms(f50),
        ms(t50),
        ms(v50),
        ms(g50),
        ms(f50 + t50 + v50 + g50),
        ms(h50),
    );
    // What a route that did no work of its own could reach on this transport: the goal is only
    // reachable where the floor dwarfs a loopback HTTP exchange.
    println!(
        "renew ceiling with no route work at all: floor / (floor + transport + verify + grant \
         read) at p50 = {:.2}",
        f50.as_secs_f64() / (f50 + t50 + v50 + g50).as_secs_f64(),
    );
    println!(
        "renew mean as the daemon's own latency histogram saw it (route to reply, no TCP): \
         {served_renew_ms:.2} ms; the daemon's CPU per HTTP renew {:.2} ms (idle: {:.1} ms/s)",
        ms(renew_cpu),
        ms(idle_cpu),
    );
    for (what, run) in [
        ("HTTP renew", &http_renew),
        ("HTTP renewStandingBundle", &http_standing),
        ("HTTP renew, kept alive", &kept_renew),
        ("HTTP renewStandingBundle, kept alive", &kept_standing),
        ("floor renew", &floor_renew),
        ("floor renewStandingBundle", &floor_standing),
    ] {
        if let Some(first) = run.failed.first() {
            println!(
                "FAILED {what}: {} of {}, first: {first}",
                run.failed.len(),
                n + 10
            );
        }
    }
    // Judged on the kept-alive connection (the reference's clients keep theirs); a fresh
    // connection per request is reported beside it.
    for (what, run, floor, goal) in [
        (
            "renew over HTTP, kept alive",
            &kept_renew,
            &floor_renew,
            ">= 0.8 of the in-process run (issues 12, 27)",
        ),
        (
            "renewStandingBundle over HTTP, kept alive",
            &kept_standing,
            &floor_standing,
            ">= 0.8 of the in-process run (issues 12, 27)",
        ),
        (
            "renew over HTTP, one connection per request",
            &http_renew,
            &floor_renew,
            "— (for reference: a fresh TCP connection per request)",
        ),
        (
            "renewStandingBundle over HTTP, one connection per request",
            &http_standing,
            &floor_standing,
            "— (for reference: a fresh TCP connection per request)",
        ),
    ] {
        let (p50, p99, rate) = summary(run.took.clone());
        let (_, _, floor_rate) = summary(floor.took.clone());
        println!(
            "BENCH\tmanager renewals/s ({what}; p50 {:.2} ms, p99 {:.2} ms)\t{rate:.0}\t\
             {floor_rate:.0}\t{:.2}\t{goal}",
            ms(p50),
            ms(p99),
            rate / floor_rate,
        );
    }
    println!(
        "BENCH\tdaemon RSS idle / peak at {BURST} concurrent renewals (MiB)\t{:.1} / {:.1}\t—\t—\t<= 64 MB",
        mib(idle_rss),
        mib(loopback_peak.max(public_peak)),
    );
    let show = |outcomes: &BTreeMap<String, usize>| {
        outcomes
            .iter()
            .map(|(what, count)| format!("{count} × {what}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "burst of {BURST} concurrent renew requests, one connection each: loopback face {:.0} ms \
         ({}); public face {:.0} ms ({})",
        loopback_took.as_secs_f64() * 1e3,
        show(&loopback_outcomes),
        public_took.as_secs_f64() * 1e3,
        show(&public_outcomes),
    );
    println!(
        "daemon RSS: {:.1} MiB idle (activated, before the runs), {:.1} MiB after the sequential \
         runs, peak {:.1} MiB during the loopback burst, peak {:.1} MiB during the public burst, \
         {:.1} MiB after",
        mib(idle_rss),
        mib(after_rss),
        mib(loopback_peak),
        mib(public_peak),
        mib(settled_rss),
    );
}
