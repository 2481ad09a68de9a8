//! Seeded race scenarios of the authority operations (issue 6; scenarios and invariants in
//! `cotal_tests::ops`): renewals racing a re-registration, and enrollments racing retirement
//! preparations of one alias, under ambiguous writes, refusals and crashes.
//!
//! `OPS_SIM_SEEDS=<n>` runs a longer campaign (default 300 seeds per scenario);
//! `OPS_SIM_SEED=<s>` replays one seed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_tests::ops::{enrollment_race, renewal_race, OpsStats};

fn seeds() -> Vec<u64> {
    cotal_tests::campaign_seeds("OPS_SIM_SEED", "OPS_SIM_SEEDS", 300).unwrap()
}

fn campaign(name: &str, run: fn(u64) -> Result<OpsStats, String>) -> OpsStats {
    let mut total = OpsStats::default();
    for seed in seeds() {
        match run(seed) {
            Ok(stats) => total.merge(&stats),
            Err(failure) => panic!("{name}: {failure}"),
        }
    }
    println!("{name}: {total:?}");
    total
}

/// F22/F92: no credential outlives the epoch it was released at, no refused or crashed
/// renewal leaves an active row behind, and renewals work again after a settle.
#[test]
fn f92_renewals_racing_a_re_registration() {
    let stats = campaign("renewal_race", renewal_race);
    // The campaign must actually race: crashes, refusals and successes all happen.
    assert!(
        stats.crashes > 0 && stats.refused > 0 && stats.succeeded > 0,
        "{stats:?}"
    );
}

/// F95/F96 and §6.6: never two live uids for one alias, a retired uid never returns, and no
/// footprint outlives its row.
#[test]
fn f95_enrollments_racing_retirements_of_one_alias() {
    let stats = campaign("enrollment_race", enrollment_race);
    assert!(
        stats.crashes > 0 && stats.refused > 0 && stats.succeeded > 0,
        "{stats:?}"
    );
}
