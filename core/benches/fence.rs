//! Throughput of the mint fence over the KV model, reported as ratios against baselines run in
//! the same process (never as absolute thresholds):
//!
//! * serve-mint finalize vs the same three KV requests issued directly on the model — the cost
//!   of the machine (replay runtime, checks, row building) per mint;
//! * sibling commit vs the same baseline;
//! * gate parse + serialize vs a bare `serde_json::from_slice` of the same bytes.
//!
//! Run with `cargo bench -p cotal-core --bench fence`.

// A benchmark times itself with the wall clock; core's purity rules bind the machines, not this.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use cotal_core::barrier;
use cotal_core::driver::{drive, ModelWorld};
use cotal_core::gate::{
    Coordinates, EndpointGate, Generation, NameAuthorityRevision, ProcessEpoch,
    RegistrationRevision,
};
use cotal_core::issuance::{
    observe_gate, CommitSibling, FinalizeServeMint, GateRef, ProvisionGate, ServeCredential,
    ServeGrant,
};
use cotal_core::kv::{KvRequest, Store};
use cotal_core::ledger::LedgerRow;
use cotal_core::machine::{Ctx, Halt, Replay, Script};
use cotal_core::names::{
    ActorToken, CredentialId, EndpointName, InstanceId, OpId, OwnerToken, Principal, SourceMember,
    SpaceName,
};
use cotal_core::EpError;

const MINTS: u32 = 20_000;

struct Proc<F>(F);
impl<T, F: Fn(&mut Ctx<'_>) -> Result<T, Halt>> Script for Proc<F> {
    type Output = T;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<T, Halt> {
        (self.0)(cx)
    }
}

fn fixture() -> Result<(ModelWorld, GateRef, Principal), EpError> {
    let gate = GateRef::new(
        SpaceName::parse("bench")?,
        EndpointName::parse("com.acme.deploy")?,
        InstanceId::mint([7; 20]),
    );
    let principal = Principal::parse("u_cccccccccccccccccccccccccc.srv")?;
    let mut world = ModelWorld::default();
    drive(
        &mut ProvisionGate::machine(gate.clone(), principal.clone()),
        &mut world,
    )?;
    let op = OpId::mint([1; 20]);
    let g = gate.clone();
    let observed = drive(
        &mut Replay::new(Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &g))),
        &mut world,
    )?
    .ok_or_else(|| EpError::internal("gate missing"))?;
    let (g, o) = (gate.clone(), op.clone());
    let token = drive(
        &mut Replay::new(Proc(move |cx: &mut Ctx<'_>| {
            barrier::freeze(cx, &g, &o, &observed)
        })),
        &mut world,
    )?
    .ok_or_else(|| EpError::internal("freeze lost"))?;
    let successor = Coordinates {
        generation: Generation(1),
        process_epoch: ProcessEpoch(0),
        registration_revision: RegistrationRevision(7),
        name_authority_revision: NameAuthorityRevision(0),
    };
    drive(
        &mut barrier::ReopenGate::machine(gate.clone(), op, token, successor),
        &mut world,
    )?;
    Ok((world, gate, principal))
}

fn credential_id(i: u32) -> CredentialId {
    let mut digest = [0u8; 32];
    digest[..4].copy_from_slice(&i.to_be_bytes());
    CredentialId::from_sha256_hex(&digest)
}

/// Steps per second of `body`, which returns how many machine steps it took.
fn measure(mut body: impl FnMut(u32) -> usize) -> (f64, f64) {
    let start = Instant::now();
    let mut steps = 0usize;
    for i in 0..MINTS {
        steps += body(i);
    }
    let elapsed = start.elapsed().max(Duration::from_nanos(1)).as_secs_f64();
    (f64::from(MINTS) / elapsed, steps as f64 / elapsed)
}

fn main() -> Result<(), EpError> {
    // Baseline: the serve mint's three KV requests issued straight on the model.
    let (mut world, gate, principal) = fixture()?;
    let key = gate.key();
    let (baseline, _) = measure(|i| {
        let entry = world.kv.get(Store::Auth, &key);
        let (value, revision) = entry.map(|e| (e.value, e.revision)).unwrap_or_default();
        world.kv.execute(&KvRequest::Create {
            store: Store::Auth,
            key: format!("{}{}", gate.family_prefix(), credential_id(i).as_str()),
            value: value.clone(),
        });
        black_box(world.kv.execute(&KvRequest::Update {
            store: Store::Auth,
            key: key.clone(),
            value,
            expected: revision,
        }));
        3
    });

    let (mut world, gate, principal2) = fixture()?;
    let grant = ServeGrant {
        space: gate.space.clone(),
        endpoint: gate.endpoint.clone(),
        instance: gate.instance.clone(),
        owner: OwnerToken::parse("u_cccccccccccccccccccccccccc")?,
        epoch: ProcessEpoch(0),
        registration_revision: RegistrationRevision(7),
        name_authority_revision: NameAuthorityRevision(0),
    };
    let actor = ActorToken::parse("srv")?;
    let mut failures = 0u32;
    let (serve, serve_steps) = measure(|i| {
        let mut machine = FinalizeServeMint::machine(
            gate.clone(),
            grant.clone(),
            ServeCredential {
                credential_id: credential_id(i),
                holder_actor: actor.clone(),
                source_chain: vec![SourceMember::Root],
                exp: 1_900_000_000,
            },
        );
        if drive(&mut machine, &mut world).is_err() {
            failures += 1;
        }
        machine.history().len() + 1
    });

    let (mut world, gate, _) = fixture()?;
    let (sibling, sibling_steps) = measure(|i| {
        let g = gate.clone();
        let observed = drive(
            &mut Replay::new(Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &g))),
            &mut world,
        )
        .ok()
        .flatten();
        let row = LedgerRow::endpoint_active(
            gate.endpoint.clone(),
            &gate.instance,
            credential_id(i),
            principal.clone(),
            vec![SourceMember::Root],
            1_900_000_000,
        );
        let (Some(observed), Ok(row)) = (observed, row) else {
            failures += 1;
            return 0;
        };
        let mut machine = CommitSibling::machine(gate.clone(), observed, row);
        if drive(&mut machine, &mut world).is_err() {
            failures += 1;
        }
        machine.history().len() + 2
    });

    let bytes = EndpointGate::provisioned(principal2)?.to_bytes();
    let (json_only, _) = measure(|_| {
        black_box(serde_json::from_slice::<serde_json::Value>(black_box(&bytes)).is_ok());
        1
    });
    let (gate_codec, _) = measure(|_| {
        if let Ok(gate) = EndpointGate::parse(black_box(&bytes)) {
            black_box(gate.to_bytes());
        }
        1
    });

    let barrier_costs: Vec<(usize, f64)> = [10usize, 100, 1000]
        .into_iter()
        .map(|rows| barrier_over(rows).map(|secs| (rows, secs)))
        .collect::<Result<_, _>>()?;

    println!("mint fence over the KV model ({MINTS} mints each, failures: {failures})");
    println!("  baseline: 3 raw KV-model requests     {baseline:>12.0} /s");
    println!(
        "  serve-mint finalize machine           {serve:>12.0} /s  ({serve_steps:.0} steps/s)  ratio {:.2}x of baseline",
        serve / baseline
    );
    println!(
        "  observe + sibling commit machines     {sibling:>12.0} /s  ({sibling_steps:.0} steps/s)  ratio {:.2}x of baseline",
        sibling / baseline
    );
    println!("  baseline: serde_json parse of a gate  {json_only:>12.0} /s");
    println!(
        "  gate parse + serialize                {gate_codec:>12.0} /s  ratio {:.2}x of baseline",
        gate_codec / json_only
    );
    println!("barrier (freeze, enumerate, revoke all, reopen) over a family of N rows:");
    if let Some(&(_, base)) = barrier_costs.first() {
        for (rows, secs) in &barrier_costs {
            println!(
                "  N = {rows:>5}: {:>10.3} ms   per-row cost {:.2}x of N = 10 (1.00x = linear)",
                secs * 1e3,
                (secs / *rows as f64) / (base / 10.0)
            );
        }
    }
    Ok(())
}

/// Seconds one barrier takes over a family of `rows` active rows.
fn barrier_over(rows: usize) -> Result<f64, EpError> {
    let (mut world, gate, principal) = fixture()?;
    for i in 0..rows {
        let g = gate.clone();
        let now = drive(
            &mut Replay::new(Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &g))),
            &mut world,
        )?
        .ok_or_else(|| EpError::internal("gate missing"))?;
        let row = LedgerRow::endpoint_active(
            gate.endpoint.clone(),
            &gate.instance,
            credential_id(u32::try_from(i).unwrap_or(u32::MAX)),
            principal.clone(),
            vec![SourceMember::Root],
            1_900_000_000,
        )?;
        drive(
            &mut CommitSibling::machine(gate.clone(), now, row),
            &mut world,
        )?;
    }
    let op = OpId::mint([9; 20]);
    let start = Instant::now();
    let (g, o) = (gate.clone(), op.clone());
    let finished = drive(
        &mut Replay::new(Proc(move |cx: &mut Ctx<'_>| {
            let observed =
                observe_gate(cx, &g)?.ok_or_else(|| EpError::internal("gate missing"))?;
            let token = barrier::freeze(cx, &g, &o, &observed)?
                .ok_or_else(|| EpError::internal("freeze lost"))?;
            let family = barrier::enumerate_family(cx, &g)?;
            barrier::revoke_active(cx, &family)?;
            let mut next = observed.gate.coordinates();
            next.generation.0 += 1;
            barrier::reopen(cx, &g, &o, token, next)
        })),
        &mut world,
    )?;
    let elapsed = start.elapsed().as_secs_f64();
    if finished {
        Ok(elapsed)
    } else {
        Err(EpError::internal("the barrier's reopen lost"))
    }
}
