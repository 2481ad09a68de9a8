//! Seeded race scenarios for the authority operations (issue 6), run by the [`interleave`]
//! scheduler over one KV model with ambiguous writes, refusals and crashes:
//!
//! * [`renewal_race`] — standing renewals of one manager instance racing its re-registration.
//!   Checked after every step: a credential a renewal released at an epoch the gate has since
//!   left (its barrier done, the gate open again) is revoked (F22, F92: no credential outlives
//!   its epoch). After a quiet settle (finish the re-registration, renew at the new epoch; a
//!   renewal refused for cleanup debt is answered the way F92 prescribes, by one more
//!   re-registration): the renewal succeeds and the family's only active rows are the ones it
//!   released — nothing a refused or crashed renewal staged is left active.
//! * [`enrollment_race`] — enrollments (token hashes a/b/c) and retirement preparations of ONE
//!   alias, serialized by the alias lock, with ledger and durables failures and crashes. Checked
//!   after every step: the uids alive for the alias (the ledger row's and every provisioned
//!   footprint's) are at most one, a uid whose row left the ledger never returns (not in the
//!   ledger, not in a later answer), a successful enrollment's uid and hash are the ledger
//!   row's, a successful preparation leaves no row at its uid; at the end, after a quiet retry,
//!   every provisioned footprint is the current row's.
//!
//! [`interleave`]: crate::interleave

use std::collections::BTreeSet;
use std::sync::Arc;

use cotal_core::actors::{
    ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, AliasScript, RowSpace, Serialized,
};
use cotal_core::authority::SelfAuthority;
use cotal_core::canon::Digest;
use cotal_core::contract::publish_cluster;
use cotal_core::driver::{drive, ModelWorld};
use cotal_core::enrollment::{
    EnrollManagedAgent, EnrollmentRequest, EnrollmentResult, PrepareManagedRetirement,
    PrepareRetirementRequest, PrepareRetirementResult,
};
use cotal_core::gate::{EndpointGate, GateState, ProcessEpoch, RegistrationRevision};
use cotal_core::issuance::{GateRef, ProvisionGate};
use cotal_core::kv::Store;
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::lifecycle::managed_retirement_op_id;
use cotal_core::machine::{Ctx, Halt, Replay, Script};
use cotal_core::manager::{
    current_registration_proof, registration_proof, AccountKey, AgentOnboarding,
    ManagerAuthorityRequest, ManagerHost, ProofSecret, Supervisor,
};
use cotal_core::names::{
    ActorToken, CredentialId, DerivedOwner, EndpointName, InstanceId, LifecycleUid, OpId,
    OwnerToken, Principal, SpaceName,
};
use cotal_core::profiles::StandingTtl;
use cotal_core::registration::{RegisterInstance, EVICT_PRINCIPALS_MAX};
use cotal_core::renewal::{CredentialName, ManagerAuthority, RemoteManagerAuthorityMaterial};
use cotal_core::service::ServiceSpec;
use cotal_core::{EpError, ErrorCode};
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::interleave::{flight, serialized_flight, Event, Faults, Interleaver};

const SPACE: &str = "s1";
const OWNER: &str = "u_cccccccccccccccccccccccccc";
const IID: &str = "mgr0aaaaaaaaaaaaaaaaaaaaaa";
const MUID: &str = "llllllllllllllllllllllllll";
const SECRET: &str = "SAAHOSTSECRETFORTHESIMULATORONLY";
/// 2023-11-14T22:13:20Z.
const T0: u64 = 1_700_000_000_000;
const COMMANDS: [&str; 2] = ["spawn", "status"];

/// What one seed of a scenario saw.
#[derive(Debug, Default, Clone)]
pub struct OpsStats {
    pub seeds: u64,
    pub steps: u64,
    pub crashes: u64,
    pub succeeded: u64,
    pub refused: u64,
    /// Settles where a renewal refused for cleanup debt needed one more re-registration.
    pub debt_reregistrations: u64,
}

impl OpsStats {
    pub fn merge(&mut self, o: &OpsStats) {
        self.seeds += o.seeds;
        self.steps += o.steps;
        self.crashes += o.crashes;
        self.succeeded += o.succeeded;
        self.refused += o.refused;
        self.debt_reregistrations += o.debt_reregistrations;
    }
}

fn fail(seed: u64, what: String, trace: &str) -> String {
    format!("seed {seed}: {what}\n--- last steps ---\n{trace}")
}

/// Sets `key` on a fixture object (every request fixture here is a JSON object).
fn set(v: &mut Value, key: &str, value: Value) {
    if let Some(map) = v.as_object_mut() {
        map.insert(key.to_owned(), value);
    }
}

fn parse<T>(r: Result<T, EpError>) -> Result<T, String> {
    r.map_err(|e| format!("fixture: {e}"))
}

// ---- The registered manager ------------------------------------------------------------------

fn owner() -> Result<OwnerToken, String> {
    parse(OwnerToken::parse(OWNER))
}

fn gate_ref() -> Result<GateRef, String> {
    Ok(GateRef::new(
        parse(SpaceName::parse(SPACE))?,
        parse(EndpointName::parse("manager"))?,
        parse(InstanceId::parse(IID))?,
    ))
}

fn manager_document() -> Value {
    const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|c| {
            json!({"name": c, "class": "ephemeral", "targeted": false, "capability": format!("x.{c}"),
                   "inputDigest": VOID, "outputDigest": VOID, "traits": []})
        })
        .collect();
    json!({"urn": "ai.cotal.manager", "revision": 1, "attributes": [], "events": [],
           "commands": commands})
}

struct Publish(Value);

impl Script for Publish {
    type Output = Digest;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Digest, Halt> {
        publish_cluster(cx, &self.0)
    }
}

/// The manager's registration op `n` (fresh op ids resume nothing).
fn registrar(closure: &Digest, n: u8) -> Result<RegisterInstance, String> {
    let endpoint = parse(EndpointName::parse("manager"))?;
    let spec = parse(ServiceSpec::from_value(
        json!({"endpoint": "manager", "owner": OWNER, "clusterDigests": [closure.to_prefixed()],
               "protocol": {"v": 1}}),
        &endpoint,
    ))?;
    Ok(RegisterInstance {
        space: parse(SpaceName::parse(SPACE))?,
        registrant: owner()?,
        spec,
        instance: parse(InstanceId::parse(IID))?,
        authority: Arc::new(SelfAuthority {
            name: endpoint,
            owner: owner()?,
        }),
        op_id: OpId::mint([n; 20]),
        evict_max: EVICT_PRINCIPALS_MAX,
    })
}

/// A world with the manager instance provisioned, its cluster published and registered once;
/// the evictor verifies every holder gone. Returns the world and the closure digest.
fn registered_manager() -> Result<(ModelWorld, Digest), String> {
    let mut world = ModelWorld::default();
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    let principal = parse(Principal::parse(&format!("{OWNER}.manager_serve_{IID}")))?;
    parse(drive(
        &mut ProvisionGate::machine(gate_ref()?, principal),
        &mut world,
    ))?;
    let closure = parse(drive(
        &mut Replay::new(Publish(manager_document())),
        &mut world,
    ))?;
    parse(drive(&mut Replay::new(registrar(&closure, 1)?), &mut world))?;
    Ok((world, closure))
}

fn gate(world: &ModelWorld) -> Result<Option<EndpointGate>, String> {
    let Some(entry) = world.kv.get(Store::Auth, &gate_ref()?.key()) else {
        return Ok(None);
    };
    EndpointGate::parse(&entry.value)
        .map(Some)
        .map_err(|e| format!("gate: {e}"))
}

fn key_pair(kind: KeyPairType, n: u8) -> Result<KeyPair, String> {
    KeyPair::new_from_raw(kind, [n; 32]).map_err(|e| format!("fixture key: {e}"))
}

fn identities() -> Result<Value, String> {
    let mut ids = Vec::new();
    for n in 1..=5 {
        ids.push(key_pair(KeyPairType::User, n)?.public_key());
    }
    Ok(json!({
        "supervisor": {"id": ids.first()}, "executor": {"id": ids.get(1)},
        "serve": {"id": ids.get(2)}, "goalWriter": {"id": ids.get(3)},
        "sessionLedger": {"id": ids.get(4)},
    }))
}

fn envelope(operation: &str, request_id: &str) -> Result<Value, String> {
    Ok(json!({
        "v": 1, "kind": "manager-service-authority", "operation": operation, "space": SPACE,
        "actor": "cli", "instanceId": IID, "managerLifecycleUid": MUID, "requestId": request_id,
        "identities": identities()?,
    }))
}

fn proof_secret() -> ProofSecret {
    ProofSecret::new(SECRET)
}

/// The host-issued proof for the manager's registration at `reg`/`epoch`.
fn current_proof(reg: RegistrationRevision, epoch: ProcessEpoch) -> Result<String, String> {
    let request = parse(ManagerAuthorityRequest::parse(&envelope(
        "prepare",
        "proof0000000000000000000",
    )?))?;
    Ok(
        current_registration_proof(&proof_secret(), &owner()?, &request.envelope, reg, epoch)
            .as_str()
            .to_owned(),
    )
}

// ---- Renewals racing a re-registration --------------------------------------------------------

struct RenewalHost {
    host: ManagerHost,
    account: String,
}

fn renewal_host() -> Result<RenewalHost, String> {
    let account = key_pair(KeyPairType::Account, 40)?.public_key();
    Ok(RenewalHost {
        host: ManagerHost {
            space: parse(SpaceName::parse(SPACE))?,
            account: AccountKey::parse(&account).ok_or("fixture: account key")?,
            signer: Arc::new(key_pair(KeyPairType::Account, 41)?),
            proof_secret: proof_secret(),
            standing_ttl: StandingTtl::DEFAULT,
            agents: onboarding(),
        },
        account,
    })
}

fn onboarding() -> AgentOnboarding {
    AgentOnboarding {
        sentinel_creds: "-----BEGIN NATS USER JWT-----sentinel".into(),
        agent_bearer_exchange_url: "https://auth.example/exchange".into(),
    }
}

fn holder() -> Result<Supervisor, String> {
    Ok(Supervisor::human(
        parse(DerivedOwner::parse(OWNER))?,
        vec!["supervise".into()],
    ))
}

fn activation(h: &RenewalHost, now_ms: u64) -> Result<ManagerAuthority, String> {
    let mut raw = envelope("activate", "activate000000000000000001")?;
    set(&mut raw, "contractArtifacts", json!([manager_document()]));
    set(
        &mut raw,
        "registrationProof",
        json!(format!("sha256:{}", "0".repeat(64))),
    );
    let draft = parse(ManagerAuthorityRequest::parse(&raw))?;
    set(
        &mut raw,
        "registrationProof",
        json!(parse(registration_proof(&owner()?, &draft))?.as_str()),
    );
    let request = parse(ManagerAuthorityRequest::parse(&raw))?;
    Ok(ManagerAuthority::new(
        h.host.clone(),
        holder()?,
        request,
        now_ms,
    ))
}

/// A standing renewal presenting the registration at `gate` (its revision and epoch).
fn standing(
    h: &RenewalHost,
    gate: &EndpointGate,
    n: u32,
    now_ms: u64,
) -> Result<ManagerAuthority, String> {
    let mut raw = envelope("renewStandingBundle", &format!("standing{n:018}"))?;
    set(
        &mut raw,
        "registrationProof",
        json!(current_proof(
            gate.registration_revision(),
            gate.process_epoch()
        )?),
    );
    set(&mut raw, "accountPublicKey", json!(h.account));
    set(&mut raw, "processEpoch", json!(gate.process_epoch().0));
    let request = parse(ManagerAuthorityRequest::parse(&raw))?;
    Ok(ManagerAuthority::new(
        h.host.clone(),
        holder()?,
        request,
        now_ms,
    ))
}

/// The ledger keys of the endpoint-family credentials a renewal released.
fn family_keys(gate: &GateRef, material: &RemoteManagerAuthorityMaterial) -> Vec<String> {
    material
        .credentials
        .iter()
        .filter(|(name, _)| {
            matches!(
                name,
                CredentialName::Serve | CredentialName::GoalWriter | CredentialName::SessionLedger
            )
        })
        .map(|(_, c)| {
            let digest: [u8; 32] = Sha256::digest(c.jwt.as_bytes()).into();
            format!(
                "{}{}",
                gate.family_prefix(),
                CredentialId::from_sha256_hex(&digest)
            )
        })
        .collect()
}

fn row_state(world: &ModelWorld, key: &str) -> Result<Option<CredState>, String> {
    let Some(entry) = world.kv.get(Store::Auth, key) else {
        return Ok(None);
    };
    LedgerRow::parse(&entry.value, key)
        .map(|row| Some(row.state()))
        .map_err(|e| format!("{key}: {e}"))
}

fn active_family(world: &ModelWorld) -> Result<BTreeSet<String>, String> {
    let mut active = BTreeSet::new();
    for key in world.kv.keys(Store::Auth, &gate_ref()?.family_prefix()) {
        if row_state(world, &key)? == Some(CredState::Active) {
            active.insert(key);
        }
    }
    Ok(active)
}

enum RenewalOut {
    Renewed(Box<RemoteManagerAuthorityMaterial>),
    Registered,
}

/// One seed of renewals racing a re-registration (module docs).
pub fn renewal_race(seed: u64) -> Result<OpsStats, String> {
    let h = renewal_host()?;
    let gref = gate_ref()?;
    let (mut world, closure) = registered_manager()?;
    let activated = parse(drive(&mut Replay::new(activation(&h, T0)?), &mut world))?;
    // (ledger key, epoch it was released at)
    let mut released: Vec<(String, ProcessEpoch)> = family_keys(&gref, &activated)
        .into_iter()
        .map(|k| (k, ProcessEpoch(0)))
        .collect();
    let first = gate(&world)?.ok_or("no gate after registration")?;

    let mut sim: Interleaver<RenewalOut> = Interleaver::new(world, seed, Faults::for_seed(seed));
    let renewals = 1 + sim.rng().below(3);
    // Each renewal's rows expire at its own second (same-second ones share the activation's).
    let mut expiries = Vec::new();
    for n in 0..renewals {
        // Some renewals land in the activation's second: their JWTs are byte-identical to its
        // own, so their stages reuse its rows (the F92 reuse path).
        let second = if sim.rng().chance(250) { 0 } else { n + 1 };
        let now = T0 + second * 1_000;
        expiries.push(now / 1_000 + StandingTtl::DEFAULT.seconds());
        let call = standing(&h, &first, u32::try_from(n).unwrap_or(0), now)?;
        sim.spawn(
            format!("renew{n}"),
            None,
            flight(call, |m| RenewalOut::Renewed(Box::new(m))),
        );
    }
    sim.spawn(
        "register2",
        None,
        flight(registrar(&closure, 2)?, |_| RenewalOut::Registered),
    );

    let mut stats = OpsStats {
        seeds: 1,
        ..OpsStats::default()
    };
    let mut registered = false;
    while sim.live() > 0 {
        stats.steps += 1;
        let event = sim.step();
        match event {
            Some(Event::Finished { label, result }) => match result {
                Ok(RenewalOut::Renewed(m)) => {
                    stats.succeeded += 1;
                    let epoch = m
                        .host_fence
                        .as_ref()
                        .map_or(ProcessEpoch(0), |f| f.process_epoch);
                    if epoch != first.process_epoch() {
                        return Err(fail(
                            seed,
                            format!("{label} released at epoch {epoch}, not the one it presented"),
                            &sim.tail(40),
                        ));
                    }
                    released.extend(family_keys(&gref, &m).into_iter().map(|k| (k, epoch)));
                }
                Ok(RenewalOut::Registered) => {
                    registered = true;
                    stats.succeeded += 1;
                }
                Err(e) if e.code == ErrorCode::Internal => {
                    return Err(fail(seed, format!("{label}: internal: {e}"), &sim.tail(40)))
                }
                Err(e) => {
                    stats.refused += 1;
                    let exp = label
                        .strip_prefix("renew")
                        .and_then(|n| n.parse::<usize>().ok())
                        .and_then(|n| expiries.get(n).copied());
                    if let Some(exp) = exp {
                        check_refusal(&sim.world, &released, exp, &e).map_err(|what| {
                            fail(seed, format!("{label}: {what}"), &sim.tail(40))
                        })?;
                    }
                }
            },
            Some(Event::Crashed { .. }) => stats.crashes += 1,
            None => {}
        }
        check_released(&sim.world, &released).map_err(|what| fail(seed, what, &sim.tail(40)))?;
    }

    // Settle: no faults. Finish the re-registration (resume its op if its gate stayed frozen, a
    // fresh op if it never completed), then renew at the new epoch.
    let trace = sim.tail(60);
    let tail = |_: usize| trace.as_str();
    let mut world = sim.world;
    let frozen = gate(&world)?.is_some_and(|g| g.state() == GateState::Frozen);
    if frozen {
        drive(&mut Replay::new(registrar(&closure, 2)?), &mut world)
            .map_err(|e| fail(seed, format!("resuming the re-registration: {e}"), tail(40)))?;
    } else if !registered {
        drive(&mut Replay::new(registrar(&closure, 3)?), &mut world)
            .map_err(|e| fail(seed, format!("a fresh re-registration: {e}"), tail(40)))?;
    }
    let mut now = gate(&world)?.ok_or("gate vanished")?;
    let mut renewed = drive(
        &mut Replay::new(standing(&h, &now, 100, T0 + 60_000)?),
        &mut world,
    );
    if let Err(e) = &renewed {
        if e.message.contains("cleanup debt") {
            stats.debt_reregistrations += 1;
            drive(&mut Replay::new(registrar(&closure, 4)?), &mut world)
                .map_err(|e| fail(seed, format!("the debt re-registration: {e}"), tail(40)))?;
            now = gate(&world)?.ok_or("gate vanished")?;
            renewed = drive(
                &mut Replay::new(standing(&h, &now, 101, T0 + 61_000)?),
                &mut world,
            );
        }
    }
    let renewed = renewed.map_err(|e| {
        fail(
            seed,
            format!("the settled renewal at epoch {}: {e}", now.process_epoch()),
            tail(40),
        )
    })?;
    if now.process_epoch() == first.process_epoch() {
        return Err(fail(
            seed,
            "the settle did not re-register".into(),
            tail(40),
        ));
    }
    let expected: BTreeSet<String> = family_keys(&gref, &renewed).into_iter().collect();
    let active = active_family(&world)?;
    if active != expected {
        return Err(fail(
            seed,
            format!(
                "after the settle the active family is {active:?}, not the settled renewal's \
                 {expected:?}: a refused or crashed renewal left a row active"
            ),
            tail(60),
        ));
    }
    Ok(stats)
}

/// F92: a refused renewal leaves none of its own rows (the unreleased ones expiring at its
/// second) active, unless its refusal declares the cleanup debt it left for the next renewal.
fn check_refusal(
    world: &ModelWorld,
    released: &[(String, ProcessEpoch)],
    exp: u64,
    error: &EpError,
) -> Result<(), String> {
    if error.message.contains("ALSO") || error.message.contains("reconciliation") {
        return Ok(());
    }
    for key in world.kv.keys(Store::Auth, &gate_ref()?.family_prefix()) {
        let Some(entry) = world.kv.get(Store::Auth, &key) else {
            continue;
        };
        let row = LedgerRow::parse(&entry.value, &key).map_err(|e| format!("{key}: {e}"))?;
        if row.state() == CredState::Active
            && row.exp() == exp
            && !released.iter().any(|(k, _)| *k == key)
        {
            return Err(format!(
                "refused ({error}) but left its unreleased row {key} active without declaring \
                 cleanup debt"
            ));
        }
    }
    Ok(())
}

/// F22/F92: once the gate is open at a later epoch, every credential released at an earlier
/// one is revoked (the barrier that moved the gate must have reached it).
fn check_released(world: &ModelWorld, released: &[(String, ProcessEpoch)]) -> Result<(), String> {
    let Some(gate) = gate(world)? else {
        return Err("the manager gate disappeared".into());
    };
    if gate.state() != GateState::Open {
        return Ok(());
    }
    for (key, epoch) in released {
        if *epoch < gate.process_epoch() && row_state(world, key)? != Some(CredState::Revoked) {
            return Err(format!(
                "F22: {key} released at epoch {epoch} is still live while the gate is open at \
                 epoch {}",
                gate.process_epoch()
            ));
        }
    }
    Ok(())
}

// ---- Enrollments and retirements of one alias -----------------------------------------------

const AGENT: &str = "worker";

fn enrollment_host() -> Result<ManagerHost, String> {
    Ok(renewal_host()?.host)
}

fn caller() -> Result<Supervisor, String> {
    Ok(Supervisor::human(
        parse(DerivedOwner::parse(OWNER))?,
        vec!["spawn".into(), "supervise".into()],
    ))
}

fn managed_envelope(kind: &str, request_id: &str, gate: &EndpointGate) -> Result<Value, String> {
    Ok(json!({
        "v": 1, "kind": kind, "space": SPACE, "actor": "cli", "instanceId": IID,
        "managerLifecycleUid": MUID, "requestId": request_id,
        "registrationProof": current_proof(gate.registration_revision(), gate.process_epoch())?,
        "serveEpoch": gate.process_epoch().0, "identities": identities()?,
    }))
}

fn enroll(
    gate: &EndpointGate,
    hash: char,
    n: u32,
    entropy: [u8; 20],
) -> Result<EnrollManagedAgent, String> {
    let mut raw = managed_envelope(
        "manager-managed-agent-enrollment",
        &format!("enroll{n:020}"),
        gate,
    )?;
    set(
        &mut raw,
        "target",
        json!({
            "actor": AGENT, "tokenHash": hash.to_string().repeat(64), "capabilities": ["run"],
            "subscribe": ["general"], "allowSubscribe": ["general"], "allowPublish": ["general"],
        }),
    );
    Ok(EnrollManagedAgent {
        host: enrollment_host()?,
        caller: caller()?,
        request: parse(EnrollmentRequest::parse(&raw))?,
        fresh_uid_entropy: entropy,
        now_ms: T0,
    })
}

fn retire(
    gate: &EndpointGate,
    uid: &LifecycleUid,
    n: u32,
) -> Result<PrepareManagedRetirement, String> {
    let mut raw = managed_envelope(
        "manager-managed-agent-prepare-retirement",
        &format!("prepare{n:019}"),
        gate,
    )?;
    set(
        &mut raw,
        "target",
        json!({"owner": OWNER, "actor": AGENT, "lifecycleUid": uid.as_str()}),
    );
    set(
        &mut raw,
        "opId",
        json!(parse(managed_retirement_op_id(uid))?.as_str()),
    );
    Ok(PrepareManagedRetirement {
        host: enrollment_host()?,
        caller: caller()?,
        request: parse(PrepareRetirementRequest::parse(&raw))?,
    })
}

enum AliasOut {
    Enrolled(Box<EnrollmentResult>),
    Prepared(Box<PrepareRetirementResult>),
}

struct AliasTrack {
    /// Uids returned by successful enrollments, with their token hash.
    enrolled: Vec<(LifecycleUid, String)>,
    /// The uid the ledger row named after the previous step.
    last_row: Option<LifecycleUid>,
    /// Uids whose row left the ledger: released for good.
    gone: BTreeSet<LifecycleUid>,
}

fn current_row(world: &ModelWorld, alias: &Principal) -> Option<ActorRow> {
    world.actors.row(RowSpace::Managed, alias)
}

/// After every step: the uids alive for the alias — the ledger row's and every provisioned
/// footprint's — are at most one; a uid whose row left the ledger never comes back.
fn check_alias(world: &ModelWorld, alias: &Principal, t: &mut AliasTrack) -> Result<(), String> {
    let row = current_row(world, alias).and_then(|r| r.lifecycle_uid);
    if let Some(last) = t.last_row.take() {
        if row.as_ref() != Some(&last) {
            t.gone.insert(last);
        }
    }
    if let Some(uid) = &row {
        if t.gone.contains(uid) {
            return Err(format!("released uid {uid} is back in the ledger"));
        }
    }
    let live: BTreeSet<LifecycleUid> = world
        .durables
        .provisioned()
        .into_iter()
        .filter(|(p, _)| p == alias)
        .map(|(_, uid)| uid)
        .chain(row.clone())
        .collect();
    if live.len() > 1 {
        return Err(format!("two live uids for one alias: {live:?}"));
    }
    t.last_row = row;
    Ok(())
}

/// One seed of enrollments and retirement preparations of one alias (module docs).
pub fn enrollment_race(seed: u64) -> Result<OpsStats, String> {
    let (world, _) = registered_manager()?;
    let alias = Principal::new(owner()?, parse(ActorToken::parse(AGENT))?);
    let cli = ActorRow {
        owner: owner()?,
        actor: parse(ActorToken::parse("cli"))?,
        scope: vec!["spawn".into(), "supervise".into(), "run".into()],
        allow_subscribe: vec!["general".into(), "team.>".into()],
        allow_publish: vec!["general".into()],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(LifecycleUid::mint([7; 20])),
        granted_at: "2023-11-14T22:00:00.000Z".into(),
    };
    match world.actors.execute(&ActorsRequest::GrantInteractive(cli)) {
        ActorsOutcome::Granted(_) => {}
        other => return Err(format!("fixture: granting cli: {other:?}")),
    }
    let gate_now = gate(&world)?.ok_or("no gate")?;
    let mut sim: Interleaver<AliasOut> = Interleaver::new(world, seed, Faults::for_seed(seed));
    let mut track = AliasTrack {
        enrolled: Vec::new(),
        last_row: None,
        gone: BTreeSet::new(),
    };
    let mut stats = OpsStats {
        seeds: 1,
        ..OpsStats::default()
    };
    let budget = 6 + sim.rng().below(7);
    let lock = Some(alias.key());
    let mut spawned = 0u32;
    let spawn =
        |sim: &mut Interleaver<AliasOut>, track: &AliasTrack, n: u32| -> Result<(), String> {
            let rng = sim.rng();
            if rng.chance(550) {
                let hash = *rng.pick(&['a', 'b', 'c']).unwrap_or(&'a');
                let entropy = rng.entropy20();
                let m = enroll(&gate_now, hash, n, entropy)?;
                sim.spawn(
                    format!("enroll{n}:{hash}"),
                    lock.clone(),
                    parse(serialized_flight(m, |r| AliasOut::Enrolled(Box::new(r))))?,
                );
            } else {
                let mut candidates: Vec<LifecycleUid> =
                    track.enrolled.iter().map(|(u, _)| u.clone()).collect();
                if let Some(uid) = current_row(&sim.world, &alias).and_then(|r| r.lifecycle_uid) {
                    candidates.push(uid);
                }
                candidates.push(LifecycleUid::mint(sim.rng().entropy20()));
                let uid = sim
                    .rng()
                    .pick(&candidates)
                    .cloned()
                    .ok_or("no retirement candidate")?;
                let m = retire(&gate_now, &uid, n)?;
                sim.spawn(
                    format!("retire{n}:{uid}"),
                    lock.clone(),
                    parse(serialized_flight(m, |r| AliasOut::Prepared(Box::new(r))))?,
                );
            }
            Ok(())
        };
    for _ in 0..3 {
        spawn(&mut sim, &track, spawned)?;
        spawned += 1;
    }
    while sim.live() > 0 {
        stats.steps += 1;
        // Host-side faults between steps: a ledger write that fails or whose answer is lost, a
        // durables request that fails.
        if sim.rng().chance(30) {
            sim.world.actors.fail_next_writes(1);
        }
        if sim.rng().chance(30) {
            sim.world.actors.ambiguous_next_writes(1);
        }
        if sim.rng().chance(40) {
            sim.world.durables.fail_next(1);
        }
        let event = sim.step();
        let ended = event.is_some();
        match event {
            Some(Event::Finished { label, result }) => match result {
                Ok(AliasOut::Enrolled(r)) => {
                    stats.succeeded += 1;
                    let uid = r.material.lifecycle_uid.clone();
                    if track.gone.contains(&uid) {
                        return Err(fail(
                            seed,
                            format!("{label} returned released uid {uid}"),
                            &sim.tail(40),
                        ));
                    }
                    let row = current_row(&sim.world, &alias);
                    let hash = label.rsplit(':').next().unwrap_or_default().repeat(64);
                    let matches = row.as_ref().is_some_and(|row| {
                        row.lifecycle_uid.as_ref() == Some(&uid)
                            && row.token_hash.as_ref().map(|h| h.as_str()) == Some(hash.as_str())
                    });
                    if !matches {
                        return Err(fail(
                            seed,
                            format!("{label} answered uid {uid} but the ledger holds {row:?}"),
                            &sim.tail(40),
                        ));
                    }
                    track.enrolled.push((uid, hash));
                }
                Ok(AliasOut::Prepared(r)) => {
                    stats.succeeded += 1;
                    let uid = r.target.lifecycle_uid.clone();
                    if current_row(&sim.world, &alias)
                        .and_then(|row| row.lifecycle_uid)
                        .as_ref()
                        == Some(&uid)
                    {
                        return Err(fail(
                            seed,
                            format!("{label} prepared {uid} but its row is still granted"),
                            &sim.tail(40),
                        ));
                    }
                }
                Err(e) if e.code == ErrorCode::Internal => {
                    return Err(fail(seed, format!("{label}: internal: {e}"), &sim.tail(40)))
                }
                Err(_) => stats.refused += 1,
            },
            Some(Event::Crashed { .. }) => stats.crashes += 1,
            None => {}
        }
        check_alias(&sim.world, &alias, &mut track)
            .map_err(|what| fail(seed, what, &sim.tail(40)))?;
        if ended && u64::from(spawned) < budget {
            spawn(&mut sim, &track, spawned)?;
            spawned += 1;
        }
    }
    // Settle: a quiet retry of whatever is enrolled finishes its provisioning; then every
    // footprint must belong to the row the ledger holds.
    let world = &mut sim.world;
    world.kv.clear_faults();
    world.actors.fail_next_writes(0);
    world.actors.ambiguous_next_writes(0);
    world.durables.fail_next(0);
    if let Some(row) = current_row(world, &alias) {
        let hash = row
            .token_hash
            .as_ref()
            .and_then(|h| h.as_str().chars().next())
            .ok_or("the managed row carries no token hash")?;
        let m = enroll(&gate_now, hash, 999, [9; 20])?;
        let guard = world
            .actors
            .lock_alias(&m.alias())
            .map_err(|e| fail(seed, format!("the settling retry's lock: {e}"), ""))?;
        drive(&mut parse(Serialized::new(m, guard))?, world)
            .map_err(|e| fail(seed, format!("the settling retry: {e}"), &sim.tail(40)))?;
    }
    let current = current_row(&sim.world, &alias).and_then(|r| r.lifecycle_uid);
    for (principal, uid) in sim.world.durables.provisioned() {
        if principal == alias && Some(&uid) != current.as_ref() {
            return Err(fail(
                seed,
                format!("a footprint at {uid} outlived its row (the ledger holds {current:?})"),
                &sim.tail(60),
            ));
        }
    }
    Ok(stats)
}

/// Makes standing renewals of the fixture manager at one registration.
pub type RenewalMaker = Box<dyn Fn(u32, u64) -> Result<ManagerAuthority, String>>;

/// The renewal benchmark's fixture: the manager registered and activated on the model, and a
/// maker of standing renewals `(n, now_ms)` presenting its current registration.
pub fn activated_manager() -> Result<(ModelWorld, RenewalMaker), String> {
    let h = renewal_host()?;
    let (mut world, _) = registered_manager()?;
    parse(drive(&mut Replay::new(activation(&h, T0)?), &mut world))?;
    let at = gate(&world)?.ok_or("no gate after registration")?;
    Ok((world, Box::new(move |n, now| standing(&h, &at, n, now))))
}

/// The fixture data account's signing key (the renewal benchmark's signing baseline).
pub fn fixture_signer() -> Result<KeyPair, String> {
    key_pair(KeyPairType::Account, 41)
}
