//! Equal-time refusals on the agent exchange arm (issue 26), measured on the running daemon: a
//! known agent with a wrong secret and an unknown agent, interleaved over real HTTP on the
//! public face, each answered with the same 401 sentence. The figure is the ratio of their p50
//! latencies (known-wrong over unknown); ~1.00 means the answer's time tells a prober nothing
//! the sentence does not. Beside it, the same two refusals in this process straight on the file
//! ledger (`authorize_agent_exchange`), which shows any difference left without the transport
//! (the ledger's read of an existing row against a missing one was the last: a missing row now
//! reads the ledger's decoy file).
//!
//! The public face throttles a peer after 30 refusals a minute (429 instead of the sentence), so
//! the plane runs with `--exchange-trusted-proxy` and every request names its own peer in
//! `X-Forwarded-For`, as an operator's reverse proxy would for distinct clients: each request is
//! a first refusal of its peer and gets the real 401. Every answer is checked to be that 401 with
//! the refusal sentence; anything else stops the bench.
//!
//! Run with `cargo bench -p cotal-authd --bench agent_refusal` (`AGENT_REFUSAL_N` sets the
//! number of requests of each kind, default 300). Needs the pinned nats-server
//! (`scripts/nats-server.sh`). The `BENCH` line is the summary `scripts/bench.sh` collects.

use std::time::{Duration, Instant};

use cotal_core::actors::authorize::{authorize_agent_exchange, AGENT_EXCHANGE_REFUSED};
use cotal_io_fs::FileActors;
use serde_json::{json, Value};

// The tests' shared fixture (the development IdP, the space, `up`, the managed agent row), with
// the lint allowance their JSON reads need.
#[path = "../tests/common/mod.rs"]
#[allow(clippy::indexing_slicing)]
mod common;

const SECRET: &str = "the-agent-secret";
const LIFECYCLE: &str = "wwwwwwwwwwwwwwwwwwwwwwwwww";

fn p50(mut took: Vec<Duration>) -> Duration {
    took.sort();
    took.get(took.len() / 2).copied().unwrap_or_default()
}

/// One refused exchange from its own peer: the time to the answer, which must be the 401 with
/// the refusal sentence.
fn refused(public: &str, peer: &str, body: &str) -> Result<Duration, String> {
    let headers = [
        ("content-type", "application/json"),
        ("x-forwarded-for", peer),
    ];
    let start = Instant::now();
    let (status, _, text) = common::http(public, "POST", "/exchange", &headers, body)
        .map_err(|e| format!("the exchange request failed: {e}"))?;
    let took = start.elapsed();
    if status != 401 || !text.contains("unknown agent or wrong secret") {
        return Err(format!("expected the 401 refusal, got {status}: {text}"));
    }
    Ok(took)
}

fn main() -> Result<(), String> {
    let n: usize = std::env::var("AGENT_REFUSAL_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut space = common::signin::Space::new();
    space.grant("cli", "alice", &[]);
    space.spawn_agent("alice", "cli", "worker", SECRET, LIFECYCLE);
    // Each refusal is logged at warn; the plane's log stays out of the report.
    let d = space.up_with(
        &["--exchange-public-port", "0", "--exchange-trusted-proxy"],
        &[("RUST_LOG", "error")],
        None,
    );
    let public = d
        .get("publicUrl")
        .and_then(Value::as_str)
        .ok_or("the plane advertised no public face")?
        .to_owned();
    let owner = space.owner("alice");
    let known_wrong =
        json!({"owner": owner, "actor": "worker", "actorToken": "a-wrong-guess"}).to_string();
    let unknown = json!({"owner": owner, "actor": "ghost", "actorToken": SECRET}).to_string();

    // Warm-up (connections, caches, the page cache of the row), then the measured pairs; each
    // pair alternates which kind goes first so neither always follows the other.
    let mut peer = 0u32;
    let mut next_peer = || {
        peer += 1;
        format!("10.{}.{}.{}", peer >> 16 & 255, peer >> 8 & 255, peer & 255)
    };
    for _ in 0..20 {
        refused(&public, &next_peer(), &known_wrong)?;
        refused(&public, &next_peer(), &unknown)?;
    }
    let (mut known, mut ghost) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        if i % 2 == 0 {
            known.push(refused(&public, &next_peer(), &known_wrong)?);
            ghost.push(refused(&public, &next_peer(), &unknown)?);
        } else {
            ghost.push(refused(&public, &next_peer(), &unknown)?);
            known.push(refused(&public, &next_peer(), &known_wrong)?);
        }
    }
    let (k50, u50) = (p50(known), p50(ghost));
    let ratio = k50.as_secs_f64() / u50.as_secs_f64();

    // The same two refusals in this process, on the file ledger the plane reads.
    let space_name = cotal_core::names::SpaceName::parse(common::SPACE).map_err(|e| e.message)?;
    let ledger = FileActors::new(cotal_io_fs::trust::space_dir(&space.root, &space_name));
    let (mut lk, mut lu) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..=n {
        for (actor, secret, into) in [
            ("worker", "a-wrong-guess", &mut lk),
            ("ghost", SECRET, &mut lu),
        ] {
            let start = Instant::now();
            let answer = authorize_agent_exchange(&mut &ledger, &owner, actor, secret);
            into.push(start.elapsed());
            match answer {
                Err(e) if e.message == AGENT_EXCHANGE_REFUSED => {}
                other => return Err(format!("expected the refusal in process, got {other:?}")),
            }
        }
    }
    let (lk50, lu50) = (p50(lk), p50(lu));

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "agent exchange refusals, {n} of each kind interleaved, each from its own peer \
         (public face, --exchange-trusted-proxy, one connection per request)"
    );
    println!("| refusal | HTTP p50 ms | in-process p50 µs |");
    println!("|---|---|---|");
    println!(
        "| known agent, wrong secret | {:.3} | {:.1} |",
        ms(k50),
        us(lk50)
    );
    println!("| unknown agent | {:.3} | {:.1} |", ms(u50), us(lu50));
    println!(
        "in process (file ledger, no transport): known-wrong / unknown p50 = {:.2}",
        lk50.as_secs_f64() / lu50.as_secs_f64()
    );
    println!(
        "BENCH\tagent refusal p50 ms, known agent + wrong secret (floor: unknown agent; ratio = known-wrong / unknown)\t{:.3}\t{:.3}\t{ratio:.2}\t~1.00: equal-time refusal (issue 26)",
        ms(k50),
        ms(u50)
    );
    drop(space);
    Ok(())
}
