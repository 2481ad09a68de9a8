//! Standing renewals per second over the KV model, reported as ratios against baselines run in
//! the same process (never as thresholds):
//!
//! * signing: the bytes of the five user JWTs a renewal issues, signed directly with the
//!   account key — the irreducible crypto;
//! * signing + raw KV: those signatures plus as many raw leader reads on the model as the
//!   renewal makes round trips — the cost of the machine beyond its I/O and crypto.
//!
//! Run with `cargo bench -p cotal-tests --bench renewal`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cotal_core::driver::drive;
use cotal_core::kv::{KvRequest, Store};
use cotal_core::machine::Replay;
use cotal_tests::ops::{activated_manager, fixture_signer};

const RENEWALS: u32 = 2_000;

fn main() -> Result<(), String> {
    let (mut world, renewal) = activated_manager()?;
    let t0 = 1_700_000_000_000u64;

    let before = world.kv.requests_served();
    let first =
        drive(&mut Replay::new(renewal(0, t0 + 1_000)?), &mut world).map_err(|e| e.to_string())?;
    // The exact bytes a renewal signs: each JWT's header.payload.
    let inputs: Vec<String> = first
        .credentials
        .iter()
        .filter_map(|(_, c)| c.jwt.rsplit_once('.').map(|(input, _)| input.to_owned()))
        .collect();
    let trips = world.kv.requests_served() - before;

    // Requests are built up front: deriving the fixture's keys is not the renewal's cost.
    let calls = (1..=RENEWALS)
        .map(|n| renewal(n, t0 + 1_000 * (u64::from(n) + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    for call in calls {
        black_box(drive(&mut Replay::new(call), &mut world).map_err(|e| e.to_string())?);
    }
    let renew = start.elapsed();

    let signer = fixture_signer()?;
    let start = Instant::now();
    for _ in 0..RENEWALS {
        for input in &inputs {
            black_box(signer.sign(input.as_bytes()).map_err(|e| e.to_string())?);
        }
    }
    let sign = start.elapsed();

    let gate_key = world
        .kv
        .keys(Store::Auth, "epgate.")
        .into_iter()
        .next()
        .ok_or("no gate")?;
    let start = Instant::now();
    for _ in 0..RENEWALS {
        for _ in 0..trips {
            black_box(world.kv.execute(&KvRequest::Get {
                store: Store::Auth,
                key: gate_key.clone(),
            }));
        }
    }
    let raw = start.elapsed();

    let per = |d: Duration| d.as_secs_f64() / f64::from(RENEWALS);
    println!(
        "standing renewal: {:.0}/s ({trips} KV round trips each, {:.1} µs per renewal)",
        1.0 / per(renew),
        per(renew) * 1e6
    );
    println!(
        "  vs signing its 5 JWTs' bytes alone:    {:.2}x the time",
        renew.as_secs_f64() / sign.as_secs_f64()
    );
    println!(
        "  vs signing + {trips} raw KV reads: {:.2}x the time",
        renew.as_secs_f64() / (sign + raw).as_secs_f64()
    );
    Ok(())
}
