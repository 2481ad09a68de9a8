//! The shared fence scenario: one endpoint gate in one KV model, a handful of minters and
//! barriers stepped one effect at a time by an external schedule, and an invariant checker named
//! after the fence rules (SPEC §13.1 F19–F23, F26, F43; DESIGN Q-13).
//!
//! The same scenario backs the proptest state machine, the plain property over [`run_ops`], the
//! deterministic regressions and the `fence_ops` fuzz target, so a schedule that breaks a rule
//! anywhere reproduces everywhere.
//!
//! Shape of a run:
//! * setup provisions `epgate.com_acme_deploy.<iid>` open at generation 0 and brings it through
//!   one registration barrier to generation 1, registration revision 7, so serve grants at
//!   (epoch 0, regRev 7, nar 0) are valid;
//! * every actor holds at most one in-flight machine; an [`Op::Step`] advances it by exactly one
//!   effect (or collects its result), so any interleaving of two machines' KV requests is a
//!   schedule some [`Op`] sequence produces;
//! * faults are scheduled against the *next* matching write, so they land wherever the schedule
//!   happens to put that write (a stage, a touch, a freeze, a revoke, a reopen);
//! * the checker runs after every op; the checks that are about a single moment (a touch
//!   committing, a reopen about to commit) run right at that effect.

use std::collections::BTreeMap;
use std::fmt;

use arbitrary::Arbitrary;
use cotal_core::barrier::{self, FreezeGate, FreezeToken, ReopenGate};
use cotal_core::canon::Digest;
use cotal_core::driver::{drive, ModelWorld, World};
use cotal_core::gate::{
    Coordinates, EndpointGate, GateState, Generation, NameAuthorityRevision, ProcessEpoch,
    RegistrationRevision,
};
use cotal_core::issuance::{
    observe_gate, CommitSibling, FinalizeServeMint, GateRef, ObserveGate, ProvisionGate, Release,
    ServeCredential, ServeGrant,
};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::{KvOp, KvOutcome, KvRequest, Store};
use cotal_core::ledger::{self, CredState, LedgerRow};
use cotal_core::machine::{Ctx, Effect, Halt, Machine, Observation, Replay, Script, Step};
use cotal_core::names::{
    keys, ActorToken, CredentialId, EndpointName, InstanceId, OpId, OwnerToken, Principal,
    SourceMember, SpaceName,
};
use cotal_core::{EpError, ErrorCode};
use proptest::prelude::*;

/// The space of the scenario's gate.
pub const SPACE: &str = "s1";
/// A reverse-DNS endpoint, so keys exercise the `.` → `_` tokenization.
pub const ENDPOINT: &str = "com.acme.deploy";
/// A 26-char instance id (`[a-z0-9]{26}`).
pub const INSTANCE: &str = "01hq3k9x7m2v5c8n4p6r0t1w3y";
/// A real owner: `u_` + 26 base32-lower characters.
pub const OWNER: &str = "u_abcdefghijklmnopqrstuvwxyz";
/// The serving instance's own actor: `epgate.principal` is `OWNER.srv`.
pub const SERVE_ACTOR: &str = "srv";
/// The actor of sibling credentials (a goal-writer), same owner, different principal.
pub const SIBLING_ACTOR: &str = "goalw";
/// The registration revision setup reopens the gate at.
pub const REGISTRATION_REVISION: u64 = 7;
/// Expiry of every minted credential, unix seconds.
pub const EXP: u64 = 1_900_000_000;

/// Most minters and barriers a scenario has; [`Config::normalized`] clamps to these.
pub const MAX_MINTERS: usize = 4;
pub const MAX_BARRIERS: usize = 2;

/// Upper bound on drain rounds. Every machine here has bounded retries, so a drain that needs
/// more rounds than this is a liveness bug, reported rather than hung on.
pub const DRAIN_ROUNDS: usize = 20_000;

/// A broken rule: which one, and what the scenario saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub detail: String,
}

impl Violation {
    pub fn new(rule: &'static str, detail: impl Into<String>) -> Self {
        Violation {
            rule,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated: {}", self.rule, self.detail)
    }
}

impl std::error::Error for Violation {}

/// What a minter mints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Arbitrary)]
pub enum MintKind {
    /// [`FinalizeServeMint`] for the gate principal at the gate's registered coordinates.
    Serve,
    /// Observe the gate, then [`CommitSibling`] a row held by the sibling principal.
    Sibling,
}

/// The cast of a scenario. Decoded from fuzz bytes as-is, so [`Config::normalized`] clamps it
/// into range instead of rejecting it.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct Config {
    pub minters: Vec<MintKind>,
    pub barriers: u8,
}

impl Config {
    pub fn new(minters: Vec<MintKind>, barriers: u8) -> Self {
        Config { minters, barriers }
    }

    /// 1..=4 minters (a single serve minter if none) and 1..=2 barriers.
    #[must_use]
    pub fn normalized(&self) -> Config {
        let mut minters: Vec<MintKind> = self.minters.iter().copied().take(MAX_MINTERS).collect();
        if minters.is_empty() {
            minters.push(MintKind::Serve);
        }
        let barriers = self.barriers.clamp(1, MAX_BARRIERS as u8);
        Config { minters, barriers }
    }

    /// Actor count after normalization: minters first, then barriers.
    pub fn actors(&self) -> usize {
        let n = self.normalized();
        n.minters.len() + usize::from(n.barriers)
    }
}

/// Where a scheduled fault lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Arbitrary)]
pub enum FaultTarget {
    /// The next `Update` of the gate key: a mint touch, a freeze or a reopen.
    Gate,
    /// The next `Create` in the credential family: a mint staging its row.
    Stage,
    /// The next `Update` in the credential family: a revoke, by a mint or a barrier.
    Revoke,
}

/// One scheduler decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Arbitrary)]
pub enum Op {
    /// Advance actor `n % actors` by one effect; an idle actor starts a new run first.
    Step(u8),
    /// The next write at `target` is answered `Ambiguous`, committed or not.
    Ambiguous { applied: bool, target: FaultTarget },
    /// The next write at `target` is refused before it is sent.
    Unavailable { target: FaultTarget },
    /// A peer plane's mint commits: identical gate bytes at the current revision, if open.
    PeerTouch,
    /// Actor `n % actors` loses its in-flight machine (process crash between two effects).
    Crash(u8),
}

/// A fault target, uniformly.
pub fn fault_target_strategy() -> impl Strategy<Value = FaultTarget> {
    prop_oneof![
        Just(FaultTarget::Gate),
        Just(FaultTarget::Stage),
        Just(FaultTarget::Revoke)
    ]
}

/// An injected fault op.
pub fn fault_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<bool>(), fault_target_strategy())
            .prop_map(|(applied, target)| Op::Ambiguous { applied, target }),
        fault_target_strategy().prop_map(|target| Op::Unavailable { target }),
    ]
}

/// A step of one of `config`'s actors. Minters are picked three times as often as barriers:
/// a barrier run holds the gate frozen for most of its ~8 effects, so uniform picking would
/// leave mints mostly observing a frozen gate and refusing at once.
pub fn step_strategy(config: &Config) -> BoxedStrategy<Op> {
    let config = config.normalized();
    let minters = config.minters.len();
    let weighted: Vec<u8> = (0..config.actors())
        .filter_map(|a| u8::try_from(a).ok())
        .flat_map(|a| {
            let weight = if usize::from(a) < minters { 3 } else { 1 };
            std::iter::repeat_n(a, weight)
        })
        .collect();
    proptest::sample::select(weighted)
        .prop_map(Op::Step)
        .boxed()
}

/// Ops over `config`'s actors, weighted so most of a sequence makes progress: steps
/// dominate, contention and faults are frequent enough to land inside most mints and barriers.
pub fn op_strategy(config: &Config) -> BoxedStrategy<Op> {
    let n = u8::try_from(config.actors()).unwrap_or(u8::MAX);
    prop_oneof![
        14 => step_strategy(config),
        3 => fault_strategy(),
        2 => Just(Op::PeerTouch),
        1 => (0..n).prop_map(Op::Crash),
    ]
    .boxed()
}

/// 1–4 minters of mixed kinds and 1–2 barriers.
pub fn config_strategy() -> impl Strategy<Value = Config> {
    let kind = prop_oneof![Just(MintKind::Serve), Just(MintKind::Sibling)];
    (
        proptest::collection::vec(kind, 1..=MAX_MINTERS),
        1..=(MAX_BARRIERS as u8),
    )
        .prop_map(|(minters, barriers)| Config { minters, barriers })
}

/// Counters showing what a run actually exercised, so tests can refuse a vacuous pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub ops: u64,
    pub serve_releases: u64,
    pub sibling_releases: u64,
    pub custom_releases: u64,
    /// Refused mints by error code.
    pub refusals: BTreeMap<ErrorCode, u64>,
    /// Refused mints whose row stayed active and whose refusal reported it (F43).
    pub debts: u64,
    pub mint_crashes: u64,
    pub barrier_crashes: u64,
    /// Barrier runs that froze, revoked and reopened the gate.
    pub barriers_completed: u64,
    /// Barrier runs that found the gate moved or held by another operation.
    pub barriers_lost: u64,
    /// Barrier runs that refused or failed (the gate may stay frozen for a resume).
    pub barrier_failures: u64,
    /// Barrier runs that picked up their own earlier freeze.
    pub barrier_resumes: u64,
    /// Mint touches that lost their revision pin.
    pub lost_touches: u64,
    pub peer_touches: u64,
    pub faults_injected: u64,
    /// Committed reopens (frozen → open transitions the tracker saw).
    pub reopens: u64,
}

impl Stats {
    pub fn releases(&self) -> u64 {
        self.serve_releases + self.sibling_releases + self.custom_releases
    }

    pub fn refused(&self) -> u64 {
        self.refusals.values().sum()
    }

    pub fn refused_with(&self, code: ErrorCode) -> u64 {
        self.refusals.get(&code).copied().unwrap_or(0)
    }

    /// Adds `other` into `self` (aggregating over many cases).
    pub fn merge(&mut self, other: &Stats) {
        self.ops += other.ops;
        self.serve_releases += other.serve_releases;
        self.sibling_releases += other.sibling_releases;
        self.custom_releases += other.custom_releases;
        for (code, n) in &other.refusals {
            *self.refusals.entry(*code).or_default() += n;
        }
        self.debts += other.debts;
        self.mint_crashes += other.mint_crashes;
        self.barrier_crashes += other.barrier_crashes;
        self.barriers_completed += other.barriers_completed;
        self.barriers_lost += other.barriers_lost;
        self.barrier_failures += other.barrier_failures;
        self.barrier_resumes += other.barrier_resumes;
        self.lost_touches += other.lost_touches;
        self.peer_touches += other.peer_touches;
        self.faults_injected += other.faults_injected;
        self.reopens += other.reopens;
    }
}

/// A machine whose effect history can be inspected: the checker reads a barrier's enumeration
/// out of it right before the reopen commits.
pub trait Traced: Machine {
    fn trace(&self) -> &[(Effect, Observation)];
}

impl<S: Script> Traced for Replay<S> {
    fn trace(&self) -> &[(Effect, Observation)] {
        self.history()
    }
}

/// A mint machine: anything that ends in a [`Release`].
pub type MintMachine = Box<dyn Traced<Output = Release>>;
/// A barrier machine.
pub type BarrierMachine = Box<dyn Traced<Output = BarrierOutcome>>;

/// A sibling mint as one script: observe the gate, then [`CommitSibling`] from that
/// observation (F43: the observation is the authority, never replaced by a re-read).
#[derive(Debug, Clone)]
pub struct SiblingMint {
    pub gate: GateRef,
    pub row: LedgerRow,
}

impl Script for SiblingMint {
    type Output = Release;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Release, Halt> {
        let Some(observed) = observe_gate(cx, &self.gate)? else {
            return Err(EpError::expired(format!(
                "gate {} does not exist; nothing to mint under",
                self.gate.key()
            ))
            .into());
        };
        CommitSibling {
            gate: self.gate.clone(),
            observed,
            row: self.row.clone(),
        }
        .run(cx)
    }
}

/// How a barrier run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierOutcome {
    /// The gate moved under the freeze, or another operation holds it: nothing written.
    Lost,
    /// Frozen at `token`, every active row revoked, reopened at generation + 1.
    Reopened {
        token: FreezeToken,
        revoked: usize,
        resumed: bool,
    },
    /// Frozen at `token`, but the reopen found the gate elsewhere (nobody else may move it).
    LeftFrozen { token: FreezeToken },
}

/// The registration barrier reduced to its fence steps (F21, F23, Q-13):
/// observe → freeze → enumerate the family → revoke every active row → reopen at the frozen
/// coordinates with generation + 1.
///
/// A gate already frozen under this barrier's own `opId` is resumed, not re-frozen: a barrier
/// that crashed or failed after its freeze committed must be able to finish, otherwise one
/// fault would freeze the gate for the rest of the scenario. The token is then the gate's
/// current revision, which is sound because nothing but this operation's reopen can move a
/// gate frozen under it (mint touches are pinned to an `open` revision).
#[derive(Debug, Clone)]
pub struct BarrierScript {
    pub gate: GateRef,
    pub op_id: OpId,
}

impl Script for BarrierScript {
    type Output = BarrierOutcome;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<BarrierOutcome, Halt> {
        let Some(observed) = observe_gate(cx, &self.gate)? else {
            return Err(EpError::failed_precondition(format!(
                "gate {} does not exist; a barrier needs a provisioned gate",
                self.gate.key()
            ))
            .into());
        };
        let frozen_by_us = observed.gate.state() == GateState::Frozen
            && observed
                .gate
                .op()
                .is_some_and(|op| op.op_id() == &self.op_id);
        let (token, resumed) = if frozen_by_us {
            (FreezeToken(observed.revision), true)
        } else if observed.gate.state() == GateState::Open {
            match barrier::freeze(cx, &self.gate, &self.op_id, &observed)? {
                Some(token) => (token, false),
                None => return Ok(BarrierOutcome::Lost),
            }
        } else {
            return Ok(BarrierOutcome::Lost);
        };
        // Only after the freeze committed: any mint that won its touch wrote its row first.
        let family = barrier::enumerate_family(cx, &self.gate)?;
        let mut revoked = 0;
        for member in family.iter().filter(|m| m.row.state() == CredState::Active) {
            ledger::revoke_row(cx, &member.key)?;
            revoked += 1;
        }
        let frozen_at = observed.gate.coordinates();
        let generation = frozen_at.generation.0.checked_add(1).ok_or_else(|| {
            Halt::Fail(EpError::internal(
                "the gate generation cannot advance past u64::MAX",
            ))
        })?;
        let successor = Coordinates {
            generation: Generation(generation),
            ..frozen_at
        };
        if barrier::reopen(cx, &self.gate, &self.op_id, token, successor)? {
            Ok(BarrierOutcome::Reopened {
                token,
                revoked,
                resumed,
            })
        } else {
            Ok(BarrierOutcome::LeftFrozen { token })
        }
    }
}

/// How a mint ended, as far as the scenario knows.
#[derive(Debug, Clone)]
pub enum MintStatus {
    InFlight,
    Released(Release),
    Refused(EpError),
    /// The machine was dropped mid-flight; it released nothing.
    Crashed,
}

/// One mint the scenario started.
#[derive(Debug, Clone)]
pub struct MintRecord {
    /// The minter actor that ran it.
    pub actor: usize,
    /// `None` for a machine a test supplied.
    pub kind: Option<MintKind>,
    /// The ledger row this mint stages (fresh credential id per mint).
    pub row_key: String,
    pub status: MintStatus,
}

/// A gate write by a mint that committed (the touch M, or whatever a broken script wrote).
#[derive(Debug, Clone)]
struct CommittedTouch {
    mint: usize,
    row_key: String,
    revision: cotal_core::kv::Revision,
}

struct MintFlight {
    mint: usize,
    machine: MintMachine,
    pending: Option<Observation>,
}

struct BarrierFlight {
    machine: BarrierMachine,
    pending: Option<Observation>,
}

enum Actor {
    Minter {
        kind: MintKind,
        current: Option<MintFlight>,
    },
    Barrier {
        ordinal: u8,
        op_id: OpId,
        runs: u64,
        current: Option<BarrierFlight>,
    },
}

impl Actor {
    fn is_busy(&self) -> bool {
        match self {
            Actor::Minter { current, .. } => current.is_some(),
            Actor::Barrier { current, .. } => current.is_some(),
        }
    }
}

impl fmt::Debug for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Minter { kind, current } => f
                .debug_struct("Minter")
                .field("kind", kind)
                .field("mint", &current.as_ref().map(|c| c.mint))
                .finish(),
            Actor::Barrier {
                op_id,
                runs,
                current,
                ..
            } => f
                .debug_struct("Barrier")
                .field("op_id", op_id)
                .field("runs", runs)
                .field("busy", &current.is_some())
                .finish(),
        }
    }
}

/// Who performs an effect.
#[derive(Debug, Clone, Copy)]
enum Role {
    Mint(usize),
    Barrier,
}

/// One op id per barrier run: distinct across barriers (the first byte) and across runs (the
/// tail), so two barriers never mistake each other's freeze for their own.
fn barrier_op_id(ordinal: u8, run: u64) -> OpId {
    let mut entropy = [0xb0_u8.wrapping_add(ordinal); 20];
    for (slot, byte) in entropy.iter_mut().rev().zip(run.to_le_bytes()) {
        *slot = byte;
    }
    OpId::mint(entropy)
}

fn setup_violation(error: impl fmt::Display) -> Violation {
    Violation::new("setup", error.to_string())
}

/// The scenario: the KV world, the actors, and everything the checker remembers.
pub struct Scenario {
    world: ModelWorld,
    gate: GateRef,
    gate_principal: Principal,
    sibling_principal: Principal,
    actors: Vec<Actor>,
    mints: Vec<MintRecord>,
    touches: Vec<CommittedTouch>,
    credentials: u64,
    /// Last seen gate state and generation (Q-13 tracking).
    gate_seen: (GateState, Generation),
    base_generation: Generation,
    /// Last seen state of every ledger row written in the scenario (F26 tracking).
    rows: BTreeMap<String, CredState>,
    stats: Stats,
}

impl fmt::Debug for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scenario")
            .field("gate", &self.gate.key())
            .field("gate_seen", &self.gate_seen)
            .field("actors", &self.actors)
            .field("mints", &self.mints.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Scenario {
    /// Provisions the gate and registers it at (generation 1, epoch 0, regRev 7, nar 0).
    pub fn new(config: &Config) -> Result<Scenario, Violation> {
        let config = config.normalized();
        let gate = GateRef::new(
            SpaceName::parse(SPACE).map_err(setup_violation)?,
            EndpointName::parse(ENDPOINT).map_err(setup_violation)?,
            InstanceId::parse(INSTANCE).map_err(setup_violation)?,
        );
        let owner = OwnerToken::parse(OWNER).map_err(setup_violation)?;
        let gate_principal = Principal::new(
            owner.clone(),
            ActorToken::parse(SERVE_ACTOR).map_err(setup_violation)?,
        );
        let sibling_principal = Principal::new(
            owner,
            ActorToken::parse(SIBLING_ACTOR).map_err(setup_violation)?,
        );
        let mut world = ModelWorld::new(KvModel::new());
        register(&mut world, &gate, &gate_principal).map_err(setup_violation)?;

        let mut actors: Vec<Actor> = config
            .minters
            .iter()
            .map(|&kind| Actor::Minter {
                kind,
                current: None,
            })
            .collect();
        actors.extend((0..config.barriers).map(|ordinal| Actor::Barrier {
            ordinal,
            op_id: barrier_op_id(ordinal, 0),
            runs: 0,
            current: None,
        }));
        let mut scenario = Scenario {
            world,
            gate,
            gate_principal,
            sibling_principal,
            actors,
            mints: Vec::new(),
            touches: Vec::new(),
            credentials: 0,
            gate_seen: (GateState::Open, Generation(0)),
            base_generation: Generation(0),
            rows: BTreeMap::new(),
            stats: Stats::default(),
        };
        let registered = scenario.read_gate()?;
        scenario.gate_seen = (registered.state(), registered.generation());
        scenario.base_generation = registered.generation();
        Ok(scenario)
    }

    pub fn gate_ref(&self) -> &GateRef {
        &self.gate
    }
    pub fn gate_principal(&self) -> &Principal {
        &self.gate_principal
    }
    pub fn sibling_principal(&self) -> &Principal {
        &self.sibling_principal
    }
    pub fn kv(&self) -> &KvModel {
        &self.world.kv
    }
    pub fn mints(&self) -> &[MintRecord] {
        &self.mints
    }
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    pub fn actor_count(&self) -> usize {
        self.actors.len()
    }
    pub fn is_busy(&self, actor: usize) -> bool {
        self.actors.get(actor).is_some_and(Actor::is_busy)
    }

    /// The gate as it is in the KV now (a scheduler-side peek, not an effect).
    pub fn read_gate(&self) -> Result<EndpointGate, Violation> {
        let key = self.gate.key();
        match self.world.kv.get(Store::Auth, &key) {
            Some(entry) if entry.is_put() => EndpointGate::parse(&entry.value)
                .map_err(|e| Violation::new("F9", format!("gate {key} does not parse: {e}"))),
            Some(entry) => Err(Violation::new(
                "F9",
                format!(
                    "gate {key} carries a {} marker; gates are never deleted",
                    entry.operation.as_str()
                ),
            )),
            None => Err(Violation::new("F9", format!("gate {key} vanished"))),
        }
    }

    /// The ledger row state the scenario last saw at `key`.
    pub fn row_state(&self, key: &str) -> Option<CredState> {
        self.rows.get(key).copied()
    }

    /// A credential id no other mint of this scenario uses.
    pub fn fresh_credential_id(&mut self) -> CredentialId {
        self.credentials += 1;
        let seed = format!("cotal-fence-credential-{}", self.credentials);
        CredentialId::from_sha256_hex(Digest::of(seed.as_bytes()).as_bytes())
    }

    /// A serve grant at the gate's current coordinates, as the registration flow would issue.
    pub fn serve_grant(&self) -> Result<ServeGrant, Violation> {
        let gate = self.read_gate()?;
        Ok(ServeGrant {
            space: self.gate.space.clone(),
            endpoint: self.gate.endpoint.clone(),
            instance: self.gate.instance.clone(),
            owner: self.gate_principal.owner().clone(),
            epoch: gate.process_epoch(),
            registration_revision: gate.registration_revision(),
            name_authority_revision: gate.name_authority_revision(),
        })
    }

    /// An `active` row of this gate's family for `credential_id`, held by `holder`.
    pub fn active_row(
        &self,
        credential_id: CredentialId,
        holder: &Principal,
    ) -> Result<LedgerRow, Violation> {
        LedgerRow::endpoint_active(
            self.gate.endpoint.clone(),
            &self.gate.instance,
            credential_id,
            holder.clone(),
            vec![SourceMember::Root],
            EXP,
        )
        .map_err(setup_violation)
    }

    /// Hands an idle minter a test-supplied mint machine staging `row_key`; the next
    /// [`Op::Step`]s of that actor run it. Returns the mint's index in [`Scenario::mints`].
    pub fn start_mint_with(
        &mut self,
        actor: usize,
        row_key: String,
        machine: MintMachine,
    ) -> Result<usize, Violation> {
        let mint = self.mints.len();
        match self.actors.get_mut(actor) {
            Some(Actor::Minter { current, .. }) if current.is_none() => {
                *current = Some(MintFlight {
                    mint,
                    machine,
                    pending: None,
                });
            }
            _ => {
                return Err(Violation::new(
                    "scenario",
                    format!("actor {actor} is not an idle minter"),
                ))
            }
        }
        self.mints.push(MintRecord {
            actor,
            kind: None,
            row_key,
            status: MintStatus::InFlight,
        });
        Ok(mint)
    }

    /// Hands an idle barrier actor a test-supplied barrier machine.
    pub fn start_barrier_with(
        &mut self,
        actor: usize,
        machine: BarrierMachine,
    ) -> Result<(), Violation> {
        match self.actors.get_mut(actor) {
            Some(Actor::Barrier { current, .. }) if current.is_none() => {
                *current = Some(BarrierFlight {
                    machine,
                    pending: None,
                });
                Ok(())
            }
            _ => Err(Violation::new(
                "scenario",
                format!("actor {actor} is not an idle barrier"),
            )),
        }
    }

    /// Applies one op, then runs the checker.
    pub fn apply(&mut self, op: &Op) -> Result<(), Violation> {
        self.stats.ops += 1;
        match *op {
            Op::Step(n) => {
                if let Some(actor) = self.actor_index(n) {
                    self.step_actor(actor, true)?;
                }
            }
            Op::Ambiguous { applied, target } => {
                let fault = if applied {
                    Fault::AmbiguousApplied
                } else {
                    Fault::AmbiguousNotApplied
                };
                self.inject(target, fault);
            }
            Op::Unavailable { target } => self.inject(target, Fault::Unavailable),
            Op::PeerTouch => self.peer_touch(),
            Op::Crash(n) => {
                if let Some(actor) = self.actor_index(n) {
                    self.crash(actor);
                }
            }
        }
        self.track_gate()?;
        self.check()
    }

    /// Steps every busy actor round-robin until all are idle; starts nothing new and injects
    /// nothing new (faults already scheduled may still fire).
    pub fn drain(&mut self) -> Result<(), Violation> {
        for _ in 0..DRAIN_ROUNDS {
            let busy: Vec<usize> = (0..self.actors.len())
                .filter(|&a| self.is_busy(a))
                .collect();
            if busy.is_empty() {
                return Ok(());
            }
            for actor in busy {
                self.step_actor(actor, false)?;
                self.track_gate()?;
                self.check()?;
            }
        }
        Err(Violation::new(
            "liveness",
            format!("actors still busy after {DRAIN_ROUNDS} drain rounds: {self:?}"),
        ))
    }

    /// The invariants that hold after every op (F22, F20, F26, Q-13).
    pub fn check(&self) -> Result<(), Violation> {
        for (index, mint) in self.mints.iter().enumerate() {
            match &mint.status {
                MintStatus::Released(release) => self.check_released(index, mint, release)?,
                MintStatus::Refused(error) => self.check_refused(index, mint, error)?,
                MintStatus::InFlight | MintStatus::Crashed => {}
            }
        }
        // the gate is where the tracker last saw it, so no gate write went unobserved,
        // and its generation is the registered one plus one per committed reopen.
        let gate = self.read_gate()?;
        if (gate.state(), gate.generation()) != self.gate_seen {
            return Err(Violation::new(
                "Q-13",
                format!(
                    "the gate is {} at generation {} but the tracker last saw {:?}",
                    gate.state().as_str(),
                    gate.generation(),
                    self.gate_seen
                ),
            ));
        }
        if Some(gate.generation().0) != self.base_generation.0.checked_add(self.stats.reopens) {
            return Err(Violation::new(
                "Q-13",
                format!(
                    "the gate is at generation {} after {} reopens from generation {}",
                    gate.generation(),
                    self.stats.reopens,
                    self.base_generation
                ),
            ));
        }
        Ok(())
    }

    /// The end-of-run check: every invariant of [`Scenario::check`], plus a full re-read of the
    /// credential family against what the tracker saw (F26: rows never deleted, never
    /// un-revoked, every row conformant).
    pub fn final_check(&self) -> Result<(), Violation> {
        self.check()?;
        let prefix = self.gate.family_prefix();
        let listed = self.world.kv.keys(Store::Auth, &prefix);
        for key in &listed {
            let state = self.read_row(key)?;
            if self.rows.get(key) != Some(&state) {
                return Err(Violation::new(
                    "F26",
                    format!(
                        "row {key} is {} but the tracker saw {:?}: a write went unobserved",
                        state.as_str(),
                        self.rows.get(key)
                    ),
                ));
            }
        }
        if let Some(missing) = self.rows.keys().find(|k| !listed.contains(k)) {
            return Err(Violation::new(
                "F26",
                format!("row {missing} was written but is no longer listed"),
            ));
        }
        Ok(())
    }

    /// Drains, runs the final check and returns the counters.
    pub fn finish(mut self) -> Result<Stats, Violation> {
        self.drain()?;
        self.final_check()?;
        Ok(self.stats)
    }

    fn actor_index(&self, n: u8) -> Option<usize> {
        usize::from(n).checked_rem(self.actors.len())
    }

    fn inject(&mut self, target: FaultTarget, fault: Fault) {
        let trigger = match target {
            FaultTarget::Gate => Trigger::new(Store::Auth, KvOp::Update, self.gate.key()),
            FaultTarget::Stage => {
                Trigger::new(Store::Auth, KvOp::Create, self.gate.family_prefix())
            }
            FaultTarget::Revoke => {
                Trigger::new(Store::Auth, KvOp::Update, self.gate.family_prefix())
            }
        };
        self.world.kv.inject(trigger, fault);
        self.stats.faults_injected += 1;
    }

    /// A peer plane's winning mint: the gate's own bytes at its current revision. It goes
    /// through `apply`, not `execute`, because faults model *our* connection, not the peer's.
    fn peer_touch(&mut self) {
        let key = self.gate.key();
        let Some(entry) = self.world.kv.get(Store::Auth, &key) else {
            return;
        };
        let open = entry.is_put()
            && EndpointGate::parse(&entry.value).is_ok_and(|g| g.state() == GateState::Open);
        if open {
            self.world.kv.apply(&KvRequest::Update {
                store: Store::Auth,
                key,
                value: entry.value,
                expected: entry.revision,
            });
            self.stats.peer_touches += 1;
        }
    }

    fn crash(&mut self, actor: usize) {
        // `Some(Some(mint))`: a minter lost that mint; `Some(None)`: a barrier lost its run.
        // A barrier keeps its op id, so its next run resumes a freeze that committed.
        let dropped = match self.actors.get_mut(actor) {
            Some(Actor::Minter { current, .. }) => current.take().map(|f| Some(f.mint)),
            Some(Actor::Barrier { current, .. }) => current.take().map(|_| None),
            None => None,
        };
        match dropped {
            Some(Some(mint)) => {
                self.set_status(mint, MintStatus::Crashed);
                self.stats.mint_crashes += 1;
            }
            Some(None) => self.stats.barrier_crashes += 1,
            None => {}
        }
    }

    fn step_actor(&mut self, actor: usize, may_start: bool) -> Result<(), Violation> {
        match self.actors.get_mut(actor) {
            Some(Actor::Minter { kind, current }) => {
                let kind = *kind;
                let flight = match current.take() {
                    Some(flight) => flight,
                    None if may_start => self.new_mint(actor, kind)?,
                    None => return Ok(()),
                };
                self.advance_mint(actor, flight)
            }
            Some(Actor::Barrier { op_id, current, .. }) => {
                let flight = match current.take() {
                    Some(flight) => flight,
                    None if may_start => BarrierFlight {
                        machine: Box::new(Replay::new(BarrierScript {
                            gate: self.gate.clone(),
                            op_id: op_id.clone(),
                        })),
                        pending: None,
                    },
                    None => return Ok(()),
                };
                self.advance_barrier(actor, flight)
            }
            None => Ok(()),
        }
    }

    fn new_mint(&mut self, actor: usize, kind: MintKind) -> Result<MintFlight, Violation> {
        let credential_id = self.fresh_credential_id();
        let machine: MintMachine = match kind {
            MintKind::Serve => Box::new(FinalizeServeMint::machine(
                self.gate.clone(),
                self.serve_grant()?,
                ServeCredential {
                    credential_id: credential_id.clone(),
                    holder_actor: self.gate_principal.actor().clone(),
                    source_chain: vec![SourceMember::Root],
                    exp: EXP,
                },
            )),
            MintKind::Sibling => Box::new(Replay::new(SiblingMint {
                gate: self.gate.clone(),
                row: self.active_row(credential_id.clone(), &self.sibling_principal)?,
            })),
        };
        let mint = self.mints.len();
        self.mints.push(MintRecord {
            actor,
            kind: Some(kind),
            row_key: keys::epcred(&self.gate.endpoint, &self.gate.instance, &credential_id),
            status: MintStatus::InFlight,
        });
        Ok(MintFlight {
            mint,
            machine,
            pending: None,
        })
    }

    fn advance_mint(&mut self, actor: usize, mut flight: MintFlight) -> Result<(), Violation> {
        match flight.machine.step(flight.pending.take()) {
            Step::Effect(effect) => {
                let role = Role::Mint(flight.mint);
                let observation = self.execute(role, &effect, flight.machine.trace())?;
                flight.pending = Some(observation);
                if let Some(Actor::Minter { current, .. }) = self.actors.get_mut(actor) {
                    *current = Some(flight);
                }
                Ok(())
            }
            Step::Done(result) => self.finish_mint(flight.mint, result),
        }
    }

    fn advance_barrier(
        &mut self,
        actor: usize,
        mut flight: BarrierFlight,
    ) -> Result<(), Violation> {
        match flight.machine.step(flight.pending.take()) {
            Step::Effect(effect) => {
                let observation = self.execute(Role::Barrier, &effect, flight.machine.trace())?;
                flight.pending = Some(observation);
                if let Some(Actor::Barrier { current, .. }) = self.actors.get_mut(actor) {
                    *current = Some(flight);
                }
            }
            Step::Done(result) => {
                let finished_clean = match result {
                    Ok(BarrierOutcome::Reopened { resumed, .. }) => {
                        self.stats.barriers_completed += 1;
                        self.stats.barrier_resumes += u64::from(resumed);
                        true
                    }
                    Ok(BarrierOutcome::Lost) => {
                        self.stats.barriers_lost += 1;
                        true
                    }
                    Ok(BarrierOutcome::LeftFrozen { .. }) | Err(_) => {
                        self.stats.barrier_failures += 1;
                        false
                    }
                };
                // A clean finish leaves no freeze of ours behind, so the next run is a new
                // operation; otherwise the next run keeps the op id and resumes.
                if let Some(Actor::Barrier {
                    ordinal,
                    op_id,
                    runs,
                    ..
                }) = self.actors.get_mut(actor)
                {
                    if finished_clean {
                        *runs += 1;
                        *op_id = barrier_op_id(*ordinal, *runs);
                    }
                }
            }
        }
        Ok(())
    }

    fn finish_mint(
        &mut self,
        mint: usize,
        result: Result<Release, EpError>,
    ) -> Result<(), Violation> {
        let Some((kind, row_key)) = self.mints.get(mint).map(|m| (m.kind, m.row_key.clone()))
        else {
            return Err(Violation::new("scenario", format!("mint {mint} unknown")));
        };
        match result {
            Ok(release) => {
                // F19/F22: a release is backed by this mint's own committed touch of an open
                // gate at exactly the revision it reports.
                let backed = self
                    .touches
                    .iter()
                    .any(|t| t.mint == mint && t.revision == release.gate_revision);
                if !backed {
                    return Err(Violation::new(
                        "F19/F22",
                        format!(
                            "mint {mint} released {} at gate revision {} without a committed \
                             touch of an open gate at that revision",
                            release.row_key, release.gate_revision
                        ),
                    ));
                }
                if release.row_key != row_key {
                    return Err(Violation::new(
                        "F22",
                        format!(
                            "mint {mint} released row {} but staged {row_key}",
                            release.row_key
                        ),
                    ));
                }
                match kind {
                    Some(MintKind::Serve) => self.stats.serve_releases += 1,
                    Some(MintKind::Sibling) => self.stats.sibling_releases += 1,
                    None => self.stats.custom_releases += 1,
                }
                self.set_status(mint, MintStatus::Released(release));
            }
            Err(error) => {
                *self.stats.refusals.entry(error.code).or_default() += 1;
                if self.row_state(&row_key) == Some(CredState::Active) {
                    self.stats.debts += 1;
                }
                self.set_status(mint, MintStatus::Refused(error));
            }
        }
        // Checked right away (and again after every op): the moment of refusal is the moment
        // the F20 promise is due.
        match self.mints.get(mint) {
            Some(
                record @ MintRecord {
                    status: MintStatus::Refused(error),
                    ..
                },
            ) => self.check_refused(mint, record, error),
            _ => Ok(()),
        }
    }

    fn set_status(&mut self, mint: usize, status: MintStatus) {
        if let Some(record) = self.mints.get_mut(mint) {
            record.status = status;
        }
    }

    /// F22: every released credential resolves to a conformant row in the KV.
    fn check_released(
        &self,
        index: usize,
        mint: &MintRecord,
        release: &Release,
    ) -> Result<(), Violation> {
        match self.world.kv.get(Store::Auth, &release.row_key) {
            Some(entry) if entry.is_put() && self.rows.contains_key(&release.row_key) => Ok(()),
            other => Err(Violation::new(
                "F22",
                format!(
                    "mint {index} (actor {}) released {} but the ledger holds {:?}",
                    mint.actor,
                    release.row_key,
                    other.map(|e| e.operation)
                ),
            )),
        }
    }

    /// F20: a refused mint's row is absent or `revoked`. A row left `active` is allowed only
    /// when the refusal names it (the revoke itself failed and was reported as reconciliation
    /// debt, F43: "a revoke failure is reported, never swallowed").
    fn check_refused(
        &self,
        index: usize,
        mint: &MintRecord,
        error: &EpError,
    ) -> Result<(), Violation> {
        match self.rows.get(&mint.row_key) {
            None | Some(CredState::Revoked) => Ok(()),
            Some(CredState::Active) if error.message.contains(&mint.row_key) => Ok(()),
            Some(CredState::Active) => Err(Violation::new(
                "F20",
                format!(
                    "mint {index} (actor {}) refused with {} but left row {} active without \
                     reporting it: {}",
                    mint.actor, error.code, mint.row_key, error.message
                ),
            )),
        }
    }

    fn read_row(&self, key: &str) -> Result<CredState, Violation> {
        read_ledger_state(&self.world.kv, key)
    }

    /// Executes one effect for `role`, with the checks that belong to that exact moment.
    fn execute(
        &mut self,
        role: Role,
        effect: &Effect,
        trace: &[(Effect, Observation)],
    ) -> Result<Observation, Violation> {
        let gate_key = self.gate.key();
        let gate_write = match effect {
            Effect::Kv(KvRequest::Update {
                store: Store::Auth,
                key,
                value,
                expected,
            }) if *key == gate_key => Some((value, *expected)),
            _ => None,
        };
        if let (Role::Barrier, Some((value, expected))) = (role, gate_write) {
            let reopens = EndpointGate::parse(value).is_ok_and(|g| g.state() == GateState::Open);
            if reopens {
                self.check_reopen(FreezeToken(expected), trace)?;
            }
        }
        let before = self.world.kv.get(Store::Auth, &gate_key);
        let sequence = self.world.kv.last_sequence(Store::Auth);
        let observation = self.world.perform(effect);
        // One effect appends at most one message, so a moved stream sequence means this very
        // write committed, whatever the caller was told (ambiguous-applied included).
        let committed = self.world.kv.last_sequence(Store::Auth) > sequence;

        if let (Role::Mint(mint), Some((value, _))) = (role, gate_write) {
            if observation == Observation::Kv(KvOutcome::CasLost) {
                self.stats.lost_touches += 1;
            }
            if committed {
                self.record_touch(mint, before.as_ref(), value)?;
            }
        }
        if let Effect::Kv(request) = effect {
            if committed && request.key().starts_with(&self.gate.family_prefix()) {
                self.track_row(request.key())?;
            }
        }
        Ok(observation)
    }

    /// F19/F22 at the linearization point of a mint's gate write: the gate it replaced was
    /// `open`, and the write is a pure touch (identical bytes), so the gate is still open at the
    /// same generation afterwards.
    fn record_touch(
        &mut self,
        mint: usize,
        before: Option<&cotal_core::kv::Entry>,
        written: &[u8],
    ) -> Result<(), Violation> {
        let row_key = self
            .mints
            .get(mint)
            .map(|m| m.row_key.clone())
            .unwrap_or_default();
        let after = self.world.kv.get(Store::Auth, &self.gate.key());
        let revision = after.as_ref().map(|e| e.revision).unwrap_or_default();
        self.touches.push(CommittedTouch {
            mint,
            row_key: row_key.clone(),
            revision,
        });
        let predecessor = before
            .filter(|e| e.is_put())
            .and_then(|e| EndpointGate::parse(&e.value).ok());
        match predecessor {
            Some(gate) if gate.state() == GateState::Open => {}
            other => {
                return Err(Violation::new(
                    "F19/F22",
                    format!(
                        "mint {mint} ({row_key}) committed a gate write at revision {revision} \
                         over a gate that was {}; no credential may be released under a gate \
                         that is not open",
                        other.map_or("unreadable", |g| g.state().as_str())
                    ),
                ))
            }
        }
        if before.map(|e| e.value.as_slice()) != Some(written) {
            return Err(Violation::new(
                "F19/F22",
                format!(
                    "mint {mint} ({row_key}) committed gate bytes that differ from the gate it \
                     replaced at revision {revision}; a mint finalize only touches the gate"
                ),
            ));
        }
        Ok(())
    }

    /// F21/F23, right before a barrier's reopen is sent: every mint touch that committed before
    /// the freeze token was enumerated by this barrier run, and its row is `revoked` now.
    fn check_reopen(
        &self,
        token: FreezeToken,
        trace: &[(Effect, Observation)],
    ) -> Result<(), Violation> {
        let enumerated =
            trace
                .iter()
                .rev()
                .find_map(|(effect, observation)| match (effect, observation) {
                    (
                        Effect::Kv(KvRequest::Keys { .. }),
                        Observation::Kv(KvOutcome::Keys(listed)),
                    ) => Some(listed),
                    _ => None,
                });
        for touch in self.touches.iter().filter(|t| t.revision < token.0) {
            if !enumerated.is_some_and(|listed| listed.contains(&touch.row_key)) {
                return Err(Violation::new(
                    "F21/F23",
                    format!(
                        "a barrier reopens its freeze at revision {} without having enumerated \
                         row {}, whose mint touch committed earlier at revision {}",
                        token.0, touch.row_key, touch.revision
                    ),
                ));
            }
            let state = self.read_row(&touch.row_key)?;
            if state != CredState::Revoked {
                return Err(Violation::new(
                    "F21/F23",
                    format!(
                        "a barrier reopens its freeze at revision {} while row {} (touch \
                         committed at revision {}) is still {}",
                        token.0,
                        touch.row_key,
                        touch.revision,
                        state.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// F26 after a committed write in the family: still a conformant row, never un-revoked.
    fn track_row(&mut self, key: &str) -> Result<(), Violation> {
        track_ledger_row(&mut self.rows, &self.world.kv, key)
    }

    /// Q-13 across one op: the generation never decreases, and rises by exactly 1 only when
    /// the gate goes frozen → open; a frozen → open transition always raises it.
    fn track_gate(&mut self) -> Result<(), Violation> {
        let gate = self.read_gate()?;
        let (was, old) = self.gate_seen;
        let now = (gate.state(), gate.generation());
        let reopened = was == GateState::Frozen && now.0 == GateState::Open;
        match now.1 .0.checked_sub(old.0) {
            Some(0) if !reopened => {}
            Some(1) if reopened => self.stats.reopens += 1,
            _ => {
                return Err(Violation::new(
                    "Q-13",
                    format!(
                        "the gate went from {} at generation {old} to {} at generation {}; only \
                         a reopen moves the generation, by exactly 1",
                        was.as_str(),
                        now.0.as_str(),
                        now.1
                    ),
                ))
            }
        }
        self.gate_seen = now;
        Ok(())
    }
}

/// Setup: provision the gate open at generation 0, then one registration barrier to
/// generation 1 at registration revision 7 (E0, E1, E3).
fn register(world: &mut ModelWorld, gate: &GateRef, principal: &Principal) -> Result<(), EpError> {
    drive(
        &mut ProvisionGate::machine(gate.clone(), principal.clone()),
        world,
    )?;
    let observed = drive(&mut Replay::new(ObserveGate { gate: gate.clone() }), world)?
        .ok_or_else(|| EpError::internal("the provisioned gate reads back absent"))?;
    let op_id = OpId::mint([0xee; 20]);
    let token = drive(
        &mut FreezeGate::machine(gate.clone(), op_id.clone(), observed.clone()),
        world,
    )?
    .ok_or_else(|| EpError::internal("the setup freeze lost on an untouched gate"))?;
    let successor = Coordinates {
        generation: Generation(1),
        process_epoch: ProcessEpoch(0),
        registration_revision: RegistrationRevision(REGISTRATION_REVISION),
        name_authority_revision: NameAuthorityRevision(0),
    };
    if drive(
        &mut ReopenGate::machine(gate.clone(), op_id, token, successor),
        world,
    )? {
        Ok(())
    } else {
        Err(EpError::internal("the setup reopen lost its freeze token"))
    }
}

/// Runs `ops` against a fresh scenario, drains every actor, and runs the final check.
/// A violation's detail names the op it followed.
pub fn run_ops(config: &Config, ops: &[Op]) -> Result<Stats, Violation> {
    let mut scenario = Scenario::new(config)?;
    for (index, op) in ops.iter().enumerate() {
        scenario.apply(op).map_err(|v| Violation {
            detail: format!("after op #{index} {op:?}: {}", v.detail),
            ..v
        })?;
    }
    scenario.finish().map_err(|v| Violation {
        detail: format!("while draining after {} ops: {}", ops.len(), v.detail),
        ..v
    })
}

/// The state of the ledger row at `key`: F25 if it does not parse, F26 if it is a marker or
/// gone (rows are never deleted). Shared by this checker and the simulator's.
pub fn read_ledger_state(kv: &KvModel, key: &str) -> Result<CredState, Violation> {
    match kv.get(Store::Auth, key) {
        Some(entry) if entry.is_put() => LedgerRow::parse(&entry.value, key)
            .map(|row| row.state())
            .map_err(|e| Violation::new("F25", format!("row {key} is not conformant: {e}"))),
        Some(entry) => Err(Violation::new(
            "F26",
            format!(
                "row {key} carries a {} marker; ledger rows are never deleted",
                entry.operation.as_str()
            ),
        )),
        None => Err(Violation::new("F26", format!("row {key} vanished"))),
    }
}

/// F26 after a committed write to `key`: the row still parses, and a revoked row never comes
/// back active. `rows` remembers each row's last seen state.
pub fn track_ledger_row(
    rows: &mut BTreeMap<String, CredState>,
    kv: &KvModel,
    key: &str,
) -> Result<(), Violation> {
    let state = read_ledger_state(kv, key)?;
    if rows.get(key) == Some(&CredState::Revoked) && state != CredState::Revoked {
        return Err(Violation::new(
            "F26",
            format!("row {key} went from revoked back to {}", state.as_str()),
        ));
    }
    rows.insert(key.to_owned(), state);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_are_valid_names() {
        assert_eq!(INSTANCE.len(), 26);
        assert!(InstanceId::parse(INSTANCE).is_ok());
        assert!(OwnerToken::parse(OWNER).unwrap().is_real_owner());
    }

    #[test]
    fn setup_registers_the_gate_at_generation_one() {
        let scenario = Scenario::new(&Config::new(vec![MintKind::Serve], 1)).unwrap();
        let gate = scenario.read_gate().unwrap();
        assert_eq!(gate.state(), GateState::Open);
        assert_eq!(gate.generation(), Generation(1));
        assert_eq!(
            gate.registration_revision(),
            RegistrationRevision(REGISTRATION_REVISION)
        );
        assert_eq!(gate.principal(), scenario.gate_principal());
    }

    #[test]
    fn barrier_op_ids_are_distinct_across_barriers_and_runs() {
        let ids = [
            barrier_op_id(0, 0),
            barrier_op_id(0, 1),
            barrier_op_id(1, 0),
            barrier_op_id(1, 1),
        ];
        for (i, a) in ids.iter().enumerate() {
            for b in ids.iter().skip(i + 1) {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn config_is_clamped_into_range() {
        let c = Config::new(vec![], 0).normalized();
        assert_eq!((c.minters.len(), c.barriers), (1, 1));
        let c = Config::new(vec![MintKind::Sibling; 9], 200).normalized();
        assert_eq!((c.minters.len(), c.barriers), (4, 2));
    }
}
