//! "Run attempts racing" (issue 6): whatever the interleaving of several attempt machines, the
//! journal activations of the drivers they grant, and those drivers' status writes, at most one
//! driver per epoch has an accepted activation (F84). Attempts decide on the status record
//! (next epoch AND fencing token exactly); activations are decided by `activation_decision` over
//! a small in-memory journal; status writes are revision-pinned CAS on the KV model.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod run_fixtures;

use std::collections::{BTreeMap, BTreeSet};

use cotal_core::driver::{ModelWorld, World};
use cotal_core::journal::{activation_decision, Activation, FencingToken, RunEpoch, RunHolder};
use cotal_core::kv::Revision;
use cotal_core::machine::{Ctx, Machine, Replay, Step};
use cotal_core::run::{observe_hosted_run, AttemptGrant, HostedRunStatus, RunAttempt, RunState};
use proptest::prelude::*;
use run_fixtures::*;

/// One racing driver: its attempt machine, then (if granted) its activation, then its status
/// write pinned to the status revision it read before activating.
struct Driver {
    attempt: Option<Replay<RunAttempt>>,
    pending: Option<cotal_core::machine::Observation>,
    granted: Option<(u64, u64)>,
    read: Option<(Option<Revision>, Option<HostedRunStatus>)>,
    activated: bool,
    done: bool,
    takeover: String,
}

fn read_status(world: &mut ModelWorld) -> (Option<Revision>, Option<HostedRunStatus>) {
    let status = run_script(
        world,
        Proc(|cx: &mut Ctx<'_>| observe_hosted_run(cx, &manager(), &rid('d'))),
    )
    .unwrap();
    let rev = world
        .kv
        .get(
            cotal_core::kv::Store::Records,
            &format!("run.manager.{}.status", run_id('d')),
        )
        .map(|e| e.revision);
    (rev, status)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn f84_run_attempts_racing_leave_at_most_one_driver_per_epoch(
        asks in prop::collection::vec((1u64..4, 0u64..2), 2..5),
        schedule in prop::collection::vec(0usize..8, 0..200),
    ) {
        let mut world = manager_world(OWNER, false);
        admit_standard(&mut world, 'd');
        // Each driver asks for (e, e + skew): only skew 0 can ever be the next pair.
        let mut drivers: Vec<Driver> = asks.iter().enumerate().map(|(i, (e, skew))| {
            let mut request = attempt_request('d', *e, e + skew);
            request["attempt"]["takeoverId"] = serde_json::json!(format!("{i:016x}"));
            Driver {
                attempt: Some(Replay::new(RunAttempt {
                    request: parse_attempt(&request),
                    host: host().host,
                    holder: host().holder,
                    endpoint: manager(),
                })),
                pending: None,
                granted: None,
                read: None,
                activated: false,
                done: false,
                takeover: format!("{i:016x}"),
            }
        }).collect();
        let mut journal: Vec<Activation> = Vec::new();
        let mut accepted: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
        let n = drivers.len();
        // The schedule, then round-robin until everyone is done.
        let order = schedule.into_iter().map(|i| i % n).chain((0..n * 64).map(|i| i % n));
        for i in order {
            let d = &mut drivers[i];
            if d.done { continue; }
            if let Some(m) = d.attempt.as_mut() {
                match m.step(d.pending.take()) {
                    Step::Effect(effect) => d.pending = Some(world.perform(&effect)),
                    Step::Done(result) => {
                        d.attempt = None;
                        match result {
                            Ok(decision) => {
                                let pair = matches!(decision.grant, AttemptGrant::Pair { .. });
                                prop_assert!(pair, "an attempt grants a pair");
                                let spec = &asks[i];
                                d.granted = Some((spec.0, spec.0 + spec.1));
                            }
                            Err(_) => d.done = true,
                        }
                    }
                }
                continue;
            }
            let (epoch, token) = d.granted.unwrap();
            let holder = RunHolder::parse(&format!("{}.{}", nkey('A'), d.takeover)).unwrap();
            if !d.activated {
                // Replay, then activate against the journal's last accepted activation.
                d.read = Some(read_status(&mut world));
                let candidate = Activation {
                    holder: holder.clone(),
                    epoch: RunEpoch(epoch),
                    fencing_token: FencingToken(token),
                };
                if activation_decision(journal.last(), &candidate).accepted() {
                    accepted.entry(epoch).or_default().insert(d.takeover.clone());
                    journal.push(candidate);
                    d.activated = true;
                } else {
                    d.done = true;
                }
                continue;
            }
            // The activated driver records itself in the status, pinned to what it read.
            let (rev, _) = d.read.clone().unwrap();
            let status = HostedRunStatus {
                observed_spec_revision: 1,
                state: RunState::Running,
                holder,
                epoch: RunEpoch(epoch),
                fencing_token: FencingToken(token),
                journal_high: journal.len() as u64,
                at: 1,
            };
            let _ = put_status(&mut world, &rid('d'), &status, rev);
            d.done = true;
        }
        for (epoch, holders) in &accepted {
            prop_assert!(holders.len() <= 1, "epoch {epoch} activated by {holders:?}");
        }
        // Granted attempts never skip: every granted pair is (e, e).
        for d in &drivers {
            if let Some((e, t)) = d.granted { prop_assert_eq!(e, t); }
        }
    }
}
