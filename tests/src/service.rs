//! The service's doors against each other (issue 24 item 6): exchanges, connects, operator
//! revokes, re-grants and revokes of the grant, retirements and plane restarts of one
//! interactive actor, interleaved by the seed over one model world with the KV model's faults
//! (ambiguous writes, lost requests, unavailable reads, crashes at every step boundary).
//!
//! The doors are core's own scripts — `exchange::PlanExchange`, `connect::DecideConnect`,
//! `lifecycle::admit_door_retirement` with `RetireLifecycle`, `lifecycle::RevokeRootCredential`
//! — exactly as the plane runs them. Checked on every event:
//!
//! * no bearer for a lifecycle whose retirement, re-grant or grant revoke was acknowledged
//!   before the exchange began;
//! * no connect admitted after its credential's revoke, its lifecycle's retirement, re-grant or
//!   grant revoke was acknowledged;
//! * no retirement that leaves a usable credential (an active row the head names) behind;
//! * every refusal one of the documented codes (`internal` is a bug).
//!
//! A connect door with a rule removed ([`Connect::Unchecked`]) is available so a test can show
//! the checks have teeth.

use std::collections::BTreeMap;

use cotal_core::actors::{ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, RowSpace};
use cotal_core::bearer::BearerAct;
use cotal_core::callout::Admit;
use cotal_core::connect::{Admitted, DecideConnect};
use cotal_core::driver::ModelWorld;
use cotal_core::error::{EpError, ErrorCode};
use cotal_core::exchange::{
    BearerPlan, ExchangeRefusal, Exchanger, PlanExchange, RootInputs, SignedIn,
};
use cotal_core::issued::IssuedGeneration;
use cotal_core::jwt::UnixSeconds;
use cotal_core::kv::Store;
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::lifecycle::{
    admit_door_retirement, RetireDoor, RetireTarget, Retirement, RevokeRootCredential, RevokedRoot,
    RootEntropy,
};
use cotal_core::machine::{Ctx, Halt, Replay, Script};
use cotal_core::names::{
    ActorToken, CredentialId, DerivedOwner, LifecycleUid, ManagerInstance, OwnerToken, Principal,
    SpaceName,
};

use crate::interleave::{flight, Event, Faults, Interleaver};

const SPACE: &str = "s1";
const OWNER: &str = "u_cccccccccccccccccccccccccc";
const ACTOR: &str = "cli";
/// 2023-11-14T22:13:20Z, in seconds.
const NOW: u64 = 1_700_000_000;

/// Which connect door the scenario knocks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// The plane's: `connect::DecideConnect`.
    Decided,
    /// A door that skips the live-credential check (teeth: the checker must catch it).
    Unchecked,
}

/// What one seed saw.
#[derive(Debug, Default, Clone)]
pub struct ServiceStats {
    pub seeds: u64,
    pub steps: u64,
    pub crashes: u64,
    pub restarts: u64,
    pub bearers: u64,
    pub admitted: u64,
    pub refused: u64,
    pub revokes: u64,
    pub retirements: u64,
    pub regrants: u64,
}

impl ServiceStats {
    pub fn merge(&mut self, o: &ServiceStats) {
        self.seeds += o.seeds;
        self.steps += o.steps;
        self.crashes += o.crashes;
        self.restarts += o.restarts;
        self.bearers += o.bearers;
        self.admitted += o.admitted;
        self.refused += o.refused;
        self.revokes += o.revokes;
        self.retirements += o.retirements;
        self.regrants += o.regrants;
    }
}

enum Out {
    Exchanged(Box<Result<BearerPlan, ExchangeRefusal>>),
    Connected(Box<Admitted>),
    Revoked(RevokedRoot),
    Retired(Retirement),
}

/// What a flight was when it was spawned.
#[derive(Debug, Clone)]
enum Asked {
    Exchange,
    Connect {
        uid: LifecycleUid,
        credential: CredentialId,
    },
    Revoke,
    Retire {
        uid: LifecycleUid,
    },
}

/// Acknowledged events, by the step they were heard at.
#[derive(Debug, Default)]
struct Acks {
    /// A credential's revoke.
    revoked: BTreeMap<CredentialId, u64>,
    /// A lifecycle ending: retired, re-granted away from, or its grant revoked.
    ended: BTreeMap<LifecycleUid, u64>,
}

fn fixture<T>(r: Result<T, EpError>) -> Result<T, String> {
    r.map_err(|e| format!("fixture: {e}"))
}

fn principal() -> Result<Principal, String> {
    Ok(Principal::new(
        fixture(OwnerToken::parse(OWNER))?,
        fixture(ActorToken::parse(ACTOR))?,
    ))
}

fn row(uid: LifecycleUid) -> Result<ActorRow, String> {
    let p = principal()?;
    Ok(ActorRow {
        owner: p.owner().clone(),
        actor: p.actor().clone(),
        scope: vec!["spawn".into()],
        allow_subscribe: vec!["general".into()],
        allow_publish: vec!["general".into()],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(uid),
        granted_at: "2023-11-14T22:00:00.000Z".into(),
    })
}

fn grant(world: &ModelWorld, uid: LifecycleUid) -> Result<(), String> {
    match world
        .actors
        .execute(&ActorsRequest::GrantInteractive(row(uid)?))
    {
        ActorsOutcome::Granted(_) => Ok(()),
        other => Err(format!("fixture: granting: {other:?}")),
    }
}

/// The uid the ledger grants the actor at now, if any.
fn granted_uid(world: &ModelWorld) -> Result<Option<LifecycleUid>, String> {
    Ok(world
        .actors
        .row(RowSpace::Interactive, &principal()?)
        .and_then(|r| r.lifecycle_uid))
}

fn exchange(rng: &mut crate::sim::SplitMix64) -> Result<PlanExchange, String> {
    Ok(PlanExchange {
        space: fixture(SpaceName::parse(SPACE))?,
        exchanger: Exchanger::Human(SignedIn {
            owner: fixture(DerivedOwner::parse(OWNER))?,
            token_expires_at: UnixSeconds(NOW + 600),
            actor: ACTOR.to_owned(),
            view: None,
            session_grant: None,
        }),
        ttl_secs: Some(300.0),
        manager_instance_id: None,
        now: UnixSeconds(NOW),
        local: None,
        root: RootInputs {
            manager_instance: fixture(ManagerInstance::parse(&format!("auth-service:{SPACE}")))?,
            entropy: RootEntropy {
                op: rng.entropy20(),
                credentials: [rng.entropy20(), rng.entropy20(), rng.entropy20()],
            },
            known: None,
        },
    })
}

fn decide(act: &BearerAct, known_binding: Option<Principal>) -> Result<DecideConnect, String> {
    Ok(DecideConnect {
        space: fixture(SpaceName::parse(SPACE))?,
        act: act.clone(),
        expires_at: UnixSeconds(NOW + 300),
        connection_name: Some("ibxservicesim01".to_owned()),
        now: UnixSeconds(NOW),
        local: None,
        fresh_generation: IssuedGeneration::parse("0123456789abcdef0123456789abcdef")
            .ok_or("fixture: generation")?,
        known_binding,
    })
}

/// The binding a plane has kept for the connect in [`one_connect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Never seen: the binding is read (and, unbound, written).
    Nothing,
    /// Kept for the connecting principal.
    Ours,
    /// Kept for another principal.
    Another,
}

/// One exchange, then the connect of its bearer, on a fresh world whose nonce is bound already
/// when `bound`; returns the effects the connect alone sent and its outcome. The cells that
/// pin the connect's round trips read them.
pub fn one_connect(
    bound: bool,
    kept: Kept,
) -> Result<(Vec<cotal_core::machine::Effect>, Result<Admitted, EpError>), String> {
    let mut world = ModelWorld::default();
    let mut rng = crate::sim::SplitMix64::new(7);
    grant(&world, LifecycleUid::mint(rng.entropy20()))?;
    let plan = cotal_core::driver::drive(&mut Replay::new(exchange(&mut rng)?), &mut world)
        .map_err(|e| format!("exchanging: {e}"))?
        .map_err(|r| format!("exchanging: {}", r.error))?;
    let me = principal()?;
    let decision = decide(&plan.act, None)?;
    if bound {
        let bind = cotal_core::inbox::BindInbox {
            nonce: fixture(cotal_core::profiles::ConnId::parse(
                decision.connection_name.as_deref().unwrap_or_default(),
            ))?,
            principal: me.clone(),
        };
        cotal_core::driver::drive(&mut Replay::new(bind), &mut world)
            .map_err(|e| format!("binding: {e}"))?;
    }
    let another = Principal::new(me.owner().clone(), fixture(ActorToken::parse("other"))?);
    let known_binding = match kept {
        Kept::Nothing => None,
        Kept::Ours => Some(me),
        Kept::Another => Some(another),
    };
    world.log.clear();
    let outcome = cotal_core::driver::drive(
        &mut Replay::new(DecideConnect {
            known_binding,
            ..decision
        }),
        &mut world,
    );
    Ok((std::mem::take(&mut world.log), outcome))
}

/// The connect door with its live-credential check removed: the ledger row alone admits.
struct UncheckedConnect(DecideConnect);

impl Script for UncheckedConnect {
    type Output = Admitted;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Admitted, Halt> {
        let act = &self.0.act;
        let principal = Principal::new(act.owner.clone(), act.actor.clone());
        cotal_core::actors::authorize::authorize_connect(
            cx,
            &principal,
            &[],
            act.lifecycle_uid.as_ref(),
        )?;
        Ok(Admitted {
            admit: Admit {
                name: principal.name(),
                permissions: Default::default(),
                tags: Vec::new(),
                limits: cotal_core::profiles::CONNECT_LIMITS,
                expires_at: self.0.expires_at,
            },
            principal,
        })
    }
}

/// The interactive retire door: its pre-check on the ledger, then the barrier.
struct RetireDoorFlight(RetireTarget);

impl Script for RetireDoorFlight {
    type Output = Retirement;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Retirement, Halt> {
        let admitted = admit_door_retirement(cx, RetireDoor::Interactive, &self.0)?;
        let ran = cx.call(&admitted.barrier)?;
        Ok(admitted.answer(Retirement::clone(&ran))?)
    }
}

/// The codes a door may refuse with; anything else (`internal` above all) is a bug.
fn documented(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::PermissionDenied
            | ErrorCode::Unavailable
            | ErrorCode::Conflict
            | ErrorCode::FailedPrecondition
            | ErrorCode::NotFound
            | ErrorCode::AlreadyExists
    )
}

/// Whether `uid`'s credential `id` is usable: its row active and the head naming it (the
/// connect check's rule for a root credential).
fn usable(world: &ModelWorld, uid: &LifecycleUid, id: &CredentialId) -> Result<bool, String> {
    let key = cotal_core::names::keys::cred(uid, id);
    let active = match world.kv.get(Store::Auth, &key) {
        Some(entry) => {
            LedgerRow::parse(&entry.value, &key)
                .map_err(|e| format!("{key}: {e}"))?
                .state()
                == CredState::Active
        }
        None => false,
    };
    if !active {
        return Ok(false);
    }
    let p = principal()?;
    let head_key = cotal_core::names::keys::lifecycle_head(p.owner(), p.actor());
    let Some(entry) = world.kv.get(Store::Records, &head_key) else {
        return Ok(false);
    };
    let head = cotal_core::lifecycle::LifecycleHead::parse(&entry.value, p.owner(), p.actor())
        .map_err(|e| format!("{head_key}: {e}"))?;
    Ok(head.lifecycle_uid() == uid && head.current_credential_id() == Some(id))
}

/// Every usable credential of `uid` (an active row the head names).
fn usable_of(world: &ModelWorld, uid: &LifecycleUid) -> Result<Vec<String>, String> {
    let prefix = format!("cred.{uid}.");
    let mut found = Vec::new();
    for key in world.kv.keys(Store::Auth, &prefix) {
        let Some(id) = key.strip_prefix(&prefix) else {
            continue;
        };
        let id = fixture(CredentialId::parse(id))?;
        if usable(world, uid, &id)? {
            found.push(key);
        }
    }
    Ok(found)
}

/// One seed of the scenario.
pub fn service_race(seed: u64, door: Connect) -> Result<ServiceStats, String> {
    let mut world = ModelWorld::default();
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    let mut sim: Interleaver<Out> = Interleaver::new(world, seed, Faults::for_seed(seed));
    let first = LifecycleUid::mint(sim.rng().entropy20());
    grant(&sim.world, first)?;
    let mut stats = ServiceStats {
        seeds: 1,
        ..ServiceStats::default()
    };
    let mut acks = Acks::default();
    let mut asked: BTreeMap<String, (Asked, u64)> = BTreeMap::new();
    let mut bearers: Vec<BearerAct> = Vec::new();
    let mut owed: Vec<LifecycleUid> = Vec::new();
    let fail = |what: String, sim: &Interleaver<Out>| {
        format!("seed {seed}: {what}\n--- last steps ---\n{}", sim.tail(40))
    };
    let budget = 8 + sim.rng().below(10);
    let mut spawned = 0u64;
    let mut step = 0u64;
    loop {
        let quiet = spawned >= budget;
        if !quiet && (sim.live() < 3 || sim.rng().chance(120)) {
            spawn_one(
                &mut sim, &mut asked, &bearers, &mut acks, &mut stats, spawned, step, door,
            )?;
            spawned += 1;
        }
        if !quiet && sim.rng().chance(8) {
            // A plane restart: every flight in progress dies; owed retirements resume.
            stats.restarts += 1;
            while sim.live() > 0 {
                if let Some(Event::Crashed { .. }) = sim.crash_one() {
                    stats.crashes += 1;
                }
            }
        }
        if sim.live() == 0 {
            if quiet {
                break;
            }
            continue;
        }
        step += 1;
        stats.steps += 1;
        let Some(event) = sim.step() else {
            continue;
        };
        let (label, result) = match event {
            Event::Crashed { label } => {
                stats.crashes += 1;
                if let Some((Asked::Retire { uid }, _)) = asked.get(&label) {
                    owed.push(uid.clone());
                }
                continue;
            }
            Event::Finished { label, result } => (label, result),
        };
        let (what, began) = asked
            .get(&label)
            .cloned()
            .ok_or("an unknown flight ended")?;
        let result = match result {
            Ok(Out::Exchanged(planned)) => match *planned {
                Ok(plan) => Ok(Out::Exchanged(Box::new(Ok(plan)))),
                Err(refusal) => Err(refusal.error),
            },
            Ok(out) => Ok(out),
            Err(e) => Err(e),
        };
        match (what, result) {
            (_, Err(e)) => {
                stats.refused += 1;
                if !documented(e.code) {
                    return Err(fail(
                        format!("{label} refused with an undocumented code: {e}"),
                        &sim,
                    ));
                }
            }
            (Asked::Exchange, Ok(Out::Exchanged(planned))) => {
                let plan = (*planned).map_err(|r| r.error.to_string())?;
                stats.bearers += 1;
                let uid = plan
                    .act
                    .lifecycle_uid
                    .clone()
                    .ok_or("a bearer without a uid")?;
                if acks.ended.get(&uid).is_some_and(|&t| t < began) {
                    return Err(fail(
                        format!(
                            "{label} minted a bearer for lifecycle {uid}, ended before it began"
                        ),
                        &sim,
                    ));
                }
                bearers.push(plan.act);
            }
            (Asked::Connect { uid, credential }, Ok(Out::Connected(admitted))) => {
                stats.admitted += 1;
                if admitted.principal != principal()? {
                    return Err(fail(
                        format!("{label} admitted {}", admitted.principal),
                        &sim,
                    ));
                }
                if acks.revoked.get(&credential).is_some_and(|&t| t < began) {
                    return Err(fail(
                        format!("{label} was admitted on credential {credential}, revoked before it began"),
                        &sim,
                    ));
                }
                if acks.ended.get(&uid).is_some_and(|&t| t < began) {
                    return Err(fail(
                        format!("{label} was admitted at lifecycle {uid}, ended before it began"),
                        &sim,
                    ));
                }
            }
            (Asked::Revoke, Ok(Out::Revoked(revoked))) => {
                stats.revokes += 1;
                acks.revoked.entry(revoked.credential_id).or_insert(step);
            }
            (Asked::Retire { uid }, Ok(Out::Retired(done))) => {
                stats.retirements += 1;
                if done.retired {
                    acks.ended.entry(uid.clone()).or_insert(step);
                    let left = usable_of(&sim.world, &uid)?;
                    if !left.is_empty() {
                        return Err(fail(
                            format!("{label} retired {uid} leaving usable credentials {left:?}"),
                            &sim,
                        ));
                    }
                }
                owed.retain(|u| *u != uid);
            }
            (what, Ok(_)) => {
                return Err(fail(format!("{label} ({what:?}) ended out of kind"), &sim))
            }
        }
        // Resume retirements a crash or restart interrupted, as the boot's resume does.
        if sim.live() < 2 {
            if let Some(uid) = owed.pop() {
                let target = RetireTarget {
                    principal: principal()?,
                    uid: uid.clone(),
                };
                let label = format!("resume{spawned}:{uid}");
                asked.insert(label.clone(), (Asked::Retire { uid }, step));
                sim.spawn(label, None, flight(RetireDoorFlight(target), Out::Retired));
                spawned += 1;
            }
        }
    }
    // Settle: with faults off, every interrupted retirement finishes and leaves nothing usable.
    sim.set_faults(Faults::default());
    for uid in owed {
        let target = RetireTarget {
            principal: principal()?,
            uid: uid.clone(),
        };
        sim.spawn(
            format!("settle:{uid}"),
            None,
            flight(RetireDoorFlight(target), Out::Retired),
        );
        let mut outcome = None;
        sim.run(|_, event| outcome = Some(event));
        if let Some(Event::Finished {
            result: Ok(Out::Retired(done)),
            ..
        }) = outcome
        {
            if done.retired && !usable_of(&sim.world, &uid)?.is_empty() {
                return Err(fail(
                    format!("settling {uid} left usable credentials"),
                    &sim,
                ));
            }
        }
    }
    Ok(stats)
}

/// Spawns one operation the seed picks; ledger operations (re-grant, grant revoke) act at once.
#[allow(clippy::too_many_arguments)]
fn spawn_one(
    sim: &mut Interleaver<Out>,
    asked: &mut BTreeMap<String, (Asked, u64)>,
    bearers: &[BearerAct],
    acks: &mut Acks,
    stats: &mut ServiceStats,
    n: u64,
    step: u64,
    door: Connect,
) -> Result<(), String> {
    let pick = sim.rng().weighted(&[30, 40, 8, 8, 4, 6]).unwrap_or(0);
    match pick {
        0 => {
            let label = format!("exchange{n}");
            let plan = exchange(sim.rng())?;
            asked.insert(label.clone(), (Asked::Exchange, step));
            sim.spawn(label, None, flight(plan, |r| Out::Exchanged(Box::new(r))));
        }
        1 => {
            // Mostly a recent bearer, sometimes any: stale ones must keep being refused.
            let recent = bearers
                .get(bearers.len().saturating_sub(3)..)
                .unwrap_or_default();
            let from = if sim.rng().chance(700) {
                recent
            } else {
                bearers
            };
            let Some(act) = sim.rng().pick(from).cloned() else {
                return Ok(());
            };
            let (Some(uid), Some(credential)) =
                (act.lifecycle_uid.clone(), act.credential_id.clone())
            else {
                return Err("a recorded bearer names no credential".to_owned());
            };
            let label = format!("connect{n}");
            asked.insert(label.clone(), (Asked::Connect { uid, credential }, step));
            // Once a connect was admitted the nonce's binding exists: half the later connects
            // judge it as the plane's kept binding, without reading it.
            let known = if stats.admitted > 0 && sim.rng().chance(500) {
                Some(principal()?)
            } else {
                None
            };
            let decide = decide(&act, known)?;
            let machine = match door {
                Connect::Decided => flight(decide, |a| Out::Connected(Box::new(a))),
                Connect::Unchecked => {
                    flight(UncheckedConnect(decide), |a| Out::Connected(Box::new(a)))
                }
            };
            sim.spawn(label, None, machine);
        }
        2 => {
            let label = format!("revoke{n}");
            let p = principal()?;
            asked.insert(label.clone(), (Asked::Revoke, step));
            sim.spawn(
                label,
                None,
                flight(
                    RevokeRootCredential {
                        owner: p.owner().clone(),
                        actor: p.actor().clone(),
                    },
                    Out::Revoked,
                ),
            );
        }
        3 => {
            let Some(uid) = granted_uid(&sim.world)? else {
                return Ok(());
            };
            let label = format!("retire{n}:{uid}");
            let target = RetireTarget {
                principal: principal()?,
                uid: uid.clone(),
            };
            asked.insert(label.clone(), (Asked::Retire { uid }, step));
            sim.spawn(label, None, flight(RetireDoorFlight(target), Out::Retired));
        }
        4 => {
            // The operator revokes the grant: every lifecycle of the actor has ended.
            if let Some(uid) = granted_uid(&sim.world)? {
                match sim.world.actors.execute(&ActorsRequest::RevokeInteractive {
                    principal: principal()?,
                }) {
                    ActorsOutcome::Revoked(_) => {
                        acks.ended.entry(uid).or_insert(step);
                    }
                    other => return Err(format!("revoking the grant: {other:?}")),
                }
            }
        }
        _ => {
            // A re-grant rotates the lifecycle.
            let fresh = LifecycleUid::mint(sim.rng().entropy20());
            if let Some(uid) = granted_uid(&sim.world)? {
                acks.ended.entry(uid).or_insert(step);
            }
            grant(&sim.world, fresh)?;
            stats.regrants += 1;
        }
    }
    Ok(())
}
