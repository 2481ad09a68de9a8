//! The service's doors raced against each other (issue 24 item 6; scenario and invariants in
//! `cotal_tests::service`): exchanges, connects, revokes, re-grants, grant revokes, retirements
//! and plane restarts of one actor, under ambiguous writes, lost requests, unavailable reads and
//! crashes.
//!
//! `SIM_SEEDS=<n>` runs a longer campaign (default 2,000 seeds); `SIM_SEED=<s>` replays one.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::Instant;

use cotal_tests::service::{service_race, Connect, ServiceStats};

fn seeds() -> Vec<u64> {
    cotal_tests::campaign_seeds("SIM_SEED", "SIM_SEEDS", 2_000).unwrap()
}

/// F26/F37 (a revoke denies every later connect), F49 and §3.9 (a retirement leaves nothing
/// usable), §6.5 (a re-grant kills the predecessor's bearers), and every refusal documented.
#[test]
fn service_doors_racing_revokes_regrants_retirements_and_restarts() {
    let started = Instant::now();
    let mut total = ServiceStats::default();
    for seed in seeds() {
        match service_race(seed, Connect::Decided) {
            Ok(stats) => total.merge(&stats),
            Err(failure) => panic!("replay with SIM_SEED={seed}: {failure}"),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "service_race: {total:?}; {:.0} seeds/s",
        total.seeds as f64 / secs.max(1e-9)
    );
    // The campaign must actually race: every door succeeds and refuses, and crashes happen.
    assert!(
        total.bearers > 0
            && total.admitted > 0
            && total.refused > 0
            && total.revokes > 0
            && total.retirements > 0
            && total.crashes > 0
            && total.restarts > 0,
        "{total:?}"
    );
}

/// Teeth: a connect door without the live-credential check admits a revoked or retired
/// credential, and the campaign says so with a replayable seed.
#[test]
fn teeth_a_connect_without_the_credential_check_is_caught() {
    let caught = (0..2_000u64).find_map(|seed| service_race(seed, Connect::Unchecked).err());
    let failure = caught.expect("the unchecked connect door was never caught");
    assert!(
        failure.contains("revoked before it began") || failure.contains("ended before it began"),
        "{failure}"
    );
}
