//! The inbox binding raced (issue 26 item 1): connects of three principals under ONE inbox
//! nonce, interleaved by the seed over one KV model with every write's faults (the ack lost
//! after the commit, the request lost, a refusal) and crashes at any step. Checked on every end
//! and after a quiet round: every admitted connect names one and the same principal, the one
//! the store's binding row names; every refusal is `permission-denied` or `unavailable`.
//!
//! `INBOX_SIM_SEEDS=<n>` runs a longer campaign (default 300 seeds); `INBOX_SIM_SEED=<s>`
//! replays one seed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_core::driver::ModelWorld;
use cotal_core::error::ErrorCode;
use cotal_core::inbox::{parse_binding_row, BindInbox, InboxToken};
use cotal_core::kv::model::KvModel;
use cotal_core::kv::{KvRequest, Store};
use cotal_core::machine::Effect;
use cotal_core::names::Principal;
use cotal_core::profiles::ConnId;
use cotal_tests::interleave::{flight, Event, Faults, Interleaver};
use cotal_tests::service::{one_connect, Kept};

const PRINCIPALS: [&str; 3] = [
    "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.cli",
    "u_bbbbbbbbbbbbbbbbbbbbbbbbbb.cli",
    "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.ops",
];
const NONCE: &str = "ibxsharednonce000001";
const CONNECTS_EACH: usize = 3;

fn bind(p: &str) -> BindInbox {
    BindInbox {
        nonce: ConnId::parse(NONCE).unwrap(),
        principal: Principal::parse(p).unwrap(),
    }
}

fn bound(world: &ModelWorld) -> Option<Principal> {
    let key = InboxToken::for_nonce(&ConnId::parse(NONCE).unwrap()).key();
    world
        .kv
        .get_first(Store::Accepted, &key)
        .map(|e| parse_binding_row(&e.value).unwrap())
}

/// One history: how many connects were admitted, or the broken invariant.
fn history(seed: u64) -> Result<usize, String> {
    let mut sim: Interleaver<()> = Interleaver::new(
        ModelWorld::new(KvModel::new()),
        seed,
        Faults::for_seed(seed),
    );
    for round in 0..CONNECTS_EACH {
        for p in PRINCIPALS {
            sim.spawn(format!("{p}#{round}"), None, flight(bind(p), |()| ()));
        }
    }
    let mut admitted: Vec<Principal> = Vec::new();
    let mut broken: Option<String> = None;
    sim.run(|world, event| {
        let Event::Finished { label, result } = event else {
            return;
        };
        let who = Principal::parse(label.split('#').next().unwrap_or_default()).unwrap();
        match result {
            Ok(()) => {
                if bound(world).as_ref() != Some(&who) {
                    broken.get_or_insert(format!(
                        "{label} admitted while the binding names {:?}",
                        bound(world)
                    ));
                }
                admitted.push(who);
            }
            Err(e) if matches!(e.code, ErrorCode::PermissionDenied | ErrorCode::Unavailable) => {}
            Err(e) => {
                broken.get_or_insert(format!("{label} refused with an undocumented code: {e}"));
            }
        }
    });
    if let Some(b) = broken {
        return Err(format!("seed {seed}: {b}\n{}", sim.tail(40)));
    }
    if let Some(first) = admitted.first() {
        if let Some(other) = admitted.iter().find(|p| *p != first) {
            return Err(format!(
                "seed {seed}: both {first} and {other} were admitted under one nonce\n{}",
                sim.tail(40)
            ));
        }
    }
    // A quiet round: exactly the bound principal (or, if no bind ever committed, the first
    // to ask) is admitted; the others are refused.
    let mut quiet: Interleaver<()> = Interleaver::new(sim.world, seed, Faults::default());
    let mut holder = bound(&quiet.world);
    for p in PRINCIPALS {
        let who = Principal::parse(p).unwrap();
        quiet.spawn(p, None, flight(bind(p), |()| ()));
        let mut result = None;
        quiet.run(|_, event| {
            if let Event::Finished { result: r, .. } = event {
                result = Some(r);
            }
        });
        let holder = holder.get_or_insert_with(|| who.clone());
        match result {
            Some(Ok(())) if *holder == who => {}
            Some(Err(e)) if *holder != who && e.code == ErrorCode::PermissionDenied => {}
            other => {
                return Err(format!(
                    "seed {seed}: quiet connect of {p} ended {other:?} with {holder} bound"
                ))
            }
        }
        if bound(&quiet.world).as_ref() != Some(holder) {
            return Err(format!("seed {seed}: the binding moved off {holder}"));
        }
    }
    Ok(admitted.len())
}

#[test]
fn inbox_nonce_admits_one_principal_under_faults() {
    let seeds = cotal_tests::campaign_seeds("INBOX_SIM_SEED", "INBOX_SIM_SEEDS", 300).unwrap();
    let mut admitted = 0;
    for seed in &seeds {
        admitted += history(*seed).unwrap_or_else(|failure| panic!("{failure}"));
    }
    // The campaign must exercise admissions, not only refusals.
    assert!(
        admitted > 0,
        "no connect was admitted in {} seeds",
        seeds.len()
    );
}

/// The requests on the accepted store (the binding's) among `effects`, and the sizes of the
/// batched reads.
fn accepted_and_batches(effects: &[Effect]) -> (Vec<KvRequest>, Vec<usize>) {
    let mut accepted = Vec::new();
    let mut batches = Vec::new();
    for effect in effects {
        match effect {
            Effect::Kv(request) if request.store() == Store::Accepted => {
                accepted.push(request.clone());
            }
            Effect::Reads(reads) => {
                batches.push(reads.len());
                accepted.extend(
                    reads
                        .iter()
                        .filter(|r| r.store() == Store::Accepted)
                        .cloned(),
                );
            }
            _ => {}
        }
    }
    (accepted, batches)
}

/// A first connect reads its nonce's binding in the round trip that reads its credential and
/// head, then writes the binding: two round trips on the store in all.
#[test]
fn an_unknown_nonce_is_read_beside_the_credential_then_bound() {
    let (effects, outcome) = one_connect(false, Kept::Nothing).unwrap();
    outcome.unwrap();
    let (accepted, batches) = accepted_and_batches(&effects);
    assert_eq!(batches, [3], "{effects:?}");
    assert!(
        matches!(
            accepted.as_slice(),
            [KvRequest::GetFirst { .. }, KvRequest::CreateStrict { .. }]
        ),
        "{accepted:?}"
    );
}

/// A reconnect under a bound nonce the plane has not kept: one round trip, nothing written.
#[test]
fn a_bound_nonce_costs_no_round_trip_of_its_own() {
    let (effects, outcome) = one_connect(true, Kept::Nothing).unwrap();
    outcome.unwrap();
    let (accepted, batches) = accepted_and_batches(&effects);
    assert_eq!(batches, [3], "{effects:?}");
    assert!(
        matches!(accepted.as_slice(), [KvRequest::GetFirst { .. }]),
        "{accepted:?}"
    );
}

/// A binding the plane kept is judged without reading it (it is write-once): the connect reads
/// only its credential and head.
#[test]
fn a_kept_binding_is_judged_without_reading_it() {
    let (effects, outcome) = one_connect(true, Kept::Ours).unwrap();
    outcome.unwrap();
    let (accepted, batches) = accepted_and_batches(&effects);
    assert_eq!(batches, [2], "{effects:?}");
    assert!(accepted.is_empty(), "{accepted:?}");
}

/// A nonce kept for another principal refuses, in the sentence the store's binding gives, and
/// reads nothing of the binding.
#[test]
fn a_nonce_kept_for_another_principal_is_refused_without_a_read() {
    let (effects, outcome) = one_connect(true, Kept::Another).unwrap();
    let refusal = outcome.unwrap_err();
    assert_eq!(refusal.code, ErrorCode::PermissionDenied);
    assert!(
        refusal.message.contains("inbox nonce of another principal"),
        "{refusal}"
    );
    let (accepted, _) = accepted_and_batches(&effects);
    assert!(accepted.is_empty(), "{accepted:?}");
}
