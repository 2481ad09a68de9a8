//! Shared test support.
//!
//! * [`fault`] — the fault campaign's seeded schedule, client histories and the independent
//!   checker of a run on a namespaced cluster.
//! * [`fence`] — the fence scenario model (one gate, minters, barriers, faults) and its
//!   invariant checker, shared by the proptest state machine, the regression tests and the
//!   `fence_ops` fuzz target.
//! * [`interleave`] — a seeded interleaver of any core machines over one KV model, with
//!   ambiguous writes, refusals, crashes and per-alias locks (the operations' race scenarios).
//! * [`ops`] — seeded race scenarios of the authority operations (renewals racing a
//!   re-registration, enrollments and retirements of one alias) over [`interleave`].
//! * [`service`] — the service's doors (exchange, connect, revoke, re-grant, retire, restart)
//!   raced over [`interleave`] with the KV model's faults.
//! * [`nats`] — the nats-server harness: a pinned server (or a 3-node cluster) on loopback.
//! * [`sim`] — the deterministic simulator: seeded histories of the registration ceremony
//!   with crashes, ambiguous writes and contention, checked against the fence rules after
//!   every step.

pub mod fault;
pub mod fence;
pub mod interleave;
pub mod nats;
pub mod ops;
pub mod service;
pub mod sim;

/// The seeds a seeded campaign runs: the one seed `one` names (a replay), else `0..n` where `many`
/// names `n`, else `0..default`. A variable that is not an integer is refused, never ignored.
pub fn campaign_seeds(one: &str, many: &str, default: u64) -> Result<Vec<u64>, String> {
    let read = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("{name} must be an integer, got {v:?}"))
            })
            .transpose()
    };
    if let Some(seed) = read(one)? {
        return Ok(vec![seed]);
    }
    Ok((0..read(many)?.unwrap_or(default)).collect())
}
