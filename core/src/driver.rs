//! A synchronous driver: runs any [`Machine`] against the in-memory KV model.
//!
//! Used by unit tests, property tests, the fuzzer and the demo. Evictions and liveness probes
//! are answered by injectable policies (fail-closed by default, as the reference's barrier is
//! when no evictor is configured), and every effect is logged so tests can assert on what a
//! machine asked for.

use std::fmt;

use crate::actors::{ActorLedger, DurablesPort, MemoryActors, MemoryDurables};
use crate::error::EpError;
use crate::kv::model::KvModel;
use crate::machine::{Effect, Liveness, Machine, Observation, Step};
use crate::names::Principal;
use crate::plane_probe::{PlaneQuery, PlaneVerdict};

/// An upper bound on the steps one machine may take under [`drive`]; a machine that needs more
/// is looping and is failed `internal` instead of hanging the test.
pub const MAX_STEPS: usize = 100_000;

/// Executes effects for a driver.
pub trait World {
    fn perform(&mut self, effect: &Effect) -> Observation;
}

/// Answers eviction requests: one verdict per holder.
pub type Evictor = Box<dyn FnMut(&[Principal]) -> Vec<bool>>;
/// Answers liveness probes.
pub type Prober = Box<dyn FnMut(&Principal) -> Liveness>;
/// Answers plane-claim liveness questions.
pub type PlaneProber = Box<dyn FnMut(&PlaneQuery) -> PlaneVerdict>;

/// The KV model plus eviction and probe policies.
pub struct ModelWorld {
    pub kv: KvModel,
    evictor: Evictor,
    prober: Prober,
    plane_prober: PlaneProber,
    /// The host's actor ledger (clones share it).
    pub actors: MemoryActors,
    /// The broker's agent durables.
    pub durables: MemoryDurables,
    /// Every effect performed, in order.
    pub log: Vec<Effect>,
}

impl fmt::Debug for ModelWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelWorld")
            .field("kv", &self.kv)
            .field("actors", &self.actors)
            .field("durables", &self.durables)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl Default for ModelWorld {
    fn default() -> Self {
        Self::new(KvModel::new())
    }
}

impl ModelWorld {
    /// A world over `kv` whose evictor verifies nothing and whose probe answers `unknown`
    /// (fail-closed defaults).
    pub fn new(kv: KvModel) -> Self {
        ModelWorld {
            kv,
            evictor: Box::new(|holders| vec![false; holders.len()]),
            prober: Box::new(|_| Liveness::Unknown),
            plane_prober: Box::new(|_| PlaneVerdict::unknown("this world has no plane oracle")),
            actors: MemoryActors::new(),
            durables: MemoryDurables::new(),
            log: Vec::new(),
        }
    }

    pub fn set_evictor(&mut self, evictor: Evictor) {
        self.evictor = evictor;
    }

    pub fn set_prober(&mut self, prober: Prober) {
        self.prober = prober;
    }

    pub fn set_plane_prober(&mut self, prober: PlaneProber) {
        self.plane_prober = prober;
    }

    /// Every principal an `Evict` effect named so far.
    pub fn evicted(&self) -> Vec<Principal> {
        self.log
            .iter()
            .filter_map(|e| match e {
                Effect::Evict(holders) => Some(holders.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

impl World for ModelWorld {
    fn perform(&mut self, effect: &Effect) -> Observation {
        self.log.push(effect.clone());
        match effect {
            Effect::Kv(request) => Observation::Kv(self.kv.execute(request)),
            // The model serves reads one after another: one of the orders a concurrent driver
            // may produce.
            Effect::Reads(requests) => {
                Observation::Reads(requests.iter().map(|r| self.kv.execute(r)).collect())
            }
            Effect::Evict(holders) => Observation::Evicted((self.evictor)(holders)),
            Effect::Probe(holder) => Observation::Probed((self.prober)(holder)),
            Effect::ProbePlane(query) => Observation::PlaneProbed((self.plane_prober)(query)),
            // Artifacts live in the Contracts store at their digest hex. The read goes through
            // the model's request path, so scheduled faults apply to artifact reads too: an
            // unserved read is `ArtifactUnavailable`.
            Effect::ReadArtifact(digest) => match self.kv.execute(&crate::kv::KvRequest::Get {
                store: crate::kv::Store::Contracts,
                key: digest.hex(),
            }) {
                crate::kv::KvOutcome::Entry(entry) => {
                    Observation::Artifact(entry.filter(crate::kv::Entry::is_put).map(|e| e.value))
                }
                crate::kv::KvOutcome::Unavailable(why) | crate::kv::KvOutcome::Ambiguous(why) => {
                    Observation::ArtifactUnavailable(why)
                }
                other => Observation::ArtifactUnavailable(format!("unexpected {other:?}")),
            },
            Effect::Sleep(_) => Observation::Slept,
            Effect::Actors(request) => Observation::Actors(Box::new(self.actors.execute(request))),
            Effect::Durables(request) => Observation::Durables(self.durables.execute(request)),
        }
    }
}

/// Runs `machine` to completion against `world`.
pub fn drive<M: Machine, W: World>(machine: &mut M, world: &mut W) -> Result<M::Output, EpError> {
    let mut observation = None;
    for _ in 0..MAX_STEPS {
        match machine.step(observation.take()) {
            Step::Done(result) => return result,
            Step::Effect(effect) => observation = Some(world.perform(&effect)),
        }
    }
    Err(EpError::internal(format!(
        "machine did not finish within {MAX_STEPS} steps"
    )))
}
