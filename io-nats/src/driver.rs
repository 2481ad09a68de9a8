//! The async driver: runs any core [`Machine`] against a bound [`Space`], the way
//! `cotal_core::driver` runs one against the in-memory model.
//!
//! KV effects go to [`Space::execute_hooked`], artifact reads to [`Space::read_artifact`],
//! sleeps to the tokio timer. Evictions and liveness probes are answered by injectable async
//! closures whose defaults fail closed: nothing is verified evicted and every holder's liveness
//! is `unknown`, as the reference barrier behaves when no evictor is configured.

use std::fmt;
use std::sync::Arc;

use cotal_core::actors::{
    ActorLedger, ActorsOutcome, ActorsRequest, AliasScript, DurablesOutcome, DurablesPort,
    Serialized,
};
use cotal_core::driver::MAX_STEPS;
use cotal_core::kv::{KvRequest, Store};
use cotal_core::machine::{Effect, Liveness, Machine, Observation, Step};
use cotal_core::names::Principal;
use cotal_core::plane_claim::{PlaneQuery, PlaneVerdict};
use cotal_core::EpError;
use futures::future::BoxFuture;

use crate::durables::NatsDurables;
use crate::space::{SendHook, Space};

/// Answers an eviction request: one verdict per holder, `true` = verified gone.
pub type Evictor = Box<dyn FnMut(Vec<Principal>) -> BoxFuture<'static, Vec<bool>> + Send>;
/// Answers a liveness probe.
pub type Prober = Box<dyn FnMut(Principal) -> BoxFuture<'static, Liveness> + Send>;
/// Answers a plane-claim liveness question.
pub type PlaneProber = Box<dyn FnMut(PlaneQuery) -> BoxFuture<'static, PlaneVerdict> + Send>;

/// A space plus the policies that answer the effects NATS KV cannot.
pub struct NatsWorld<'s> {
    pub space: &'s Space,
    evictor: Evictor,
    prober: Prober,
    plane_prober: PlaneProber,
    send_hook: Option<SendHook>,
    actors: Option<Arc<dyn ActorLedger>>,
    durables: Option<Arc<dyn DurablesPort>>,
    /// The broker's own durables (real JetStream consumers), when attached.
    nats_durables: Option<Arc<NatsDurables>>,
    /// The sealed scanner connection of each store that has one: its key listings run there.
    scanners: Vec<(Store, &'s Space)>,
    /// The connection of each store whose grant another connection holds: every request of
    /// that store runs there (a key listing still prefers the store's scanner).
    routes: Vec<(Store, &'s Space)>,
    /// Every effect performed, in order.
    pub log: Vec<Effect>,
}

impl fmt::Debug for NatsWorld<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsWorld")
            .field("space", &self.space.space())
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl<'s> NatsWorld<'s> {
    /// A world over `space` with the fail-closed evictor and prober and no send hook.
    pub fn new(space: &'s Space) -> Self {
        NatsWorld {
            space,
            evictor: Box::new(|holders| {
                let verdicts = vec![false; holders.len()];
                Box::pin(async move { verdicts })
            }),
            prober: Box::new(|_| Box::pin(async { Liveness::Unknown })),
            plane_prober: Box::new(|_| {
                Box::pin(async { PlaneVerdict::unknown("this world has no plane oracle") })
            }),
            send_hook: None,
            actors: None,
            durables: None,
            nats_durables: None,
            scanners: Vec::new(),
            routes: Vec::new(),
            log: Vec::new(),
        }
    }

    /// Attaches the host's actor ledger; without one every ledger effect is `Unavailable`.
    pub fn with_actors(mut self, actors: Arc<dyn ActorLedger>) -> Self {
        self.actors = Some(actors);
        self
    }

    /// Attaches the broker-durables port; without one every durables effect fails.
    pub fn with_durables(mut self, durables: Arc<dyn DurablesPort>) -> Self {
        self.durables = Some(durables);
        self
    }

    /// Attaches the broker's durables adapter: agents' mailboxes as real JetStream consumers.
    pub fn with_nats_durables(mut self, durables: Arc<NatsDurables>) -> Self {
        self.nats_durables = Some(durables);
        self
    }

    /// Runs every key listing of `store` on `scanner`, the plane's sealed scanner connection of
    /// that store (reference §2.5 step 5): the claim pins that connection, so a listing rides
    /// only a connection whose loss fences the plane.
    pub fn set_scanner(&mut self, store: Store, scanner: &'s Space) {
        self.scanners.retain(|(s, _)| *s != store);
        self.scanners.push((store, scanner));
    }

    /// Runs every request of `store` on `space`: one script can then read the stores of
    /// several of the plane's connections, each over the connection whose grant covers it.
    pub fn route(mut self, store: Store, space: &'s Space) -> Self {
        self.routes.retain(|(s, _)| *s != store);
        self.routes.push((store, space));
        self
    }

    /// The connection that serves `store`'s requests.
    fn space_of(&self, store: Store) -> &'s Space {
        self.routes
            .iter()
            .find(|(s, _)| *s == store)
            .map_or(self.space, |(_, space)| *space)
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

    /// Installs a hook run around every write's publish (see [`SendHook`]).
    pub fn set_send_hook(&mut self, hook: Option<SendHook>) {
        self.send_hook = hook;
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

    /// Executes one effect.
    pub async fn perform(&mut self, effect: &Effect) -> Observation {
        self.log.push(effect.clone());
        match effect {
            Effect::Kv(request @ KvRequest::Keys { store, .. }) => {
                let space = self
                    .scanners
                    .iter()
                    .find(|(s, _)| s == store)
                    .map_or_else(|| self.space_of(*store), |(_, scanner)| *scanner);
                Observation::Kv(space.execute(request).await)
            }
            Effect::Kv(request) => {
                let space = self.space_of(request.store());
                Observation::Kv(space.execute_hooked(request, self.send_hook.as_mut()).await)
            }
            Effect::Reads(requests) => Observation::Reads(
                futures::future::join_all(
                    requests.iter().map(|r| self.space_of(r.store()).execute(r)),
                )
                .await,
            ),
            Effect::Evict(holders) => Observation::Evicted((self.evictor)(holders.clone()).await),
            Effect::Probe(holder) => Observation::Probed((self.prober)(holder.clone()).await),
            Effect::ProbePlane(query) => {
                Observation::PlaneProbed((self.plane_prober)(query.clone()).await)
            }
            Effect::ReadArtifact(digest) => self.space.read_artifact(digest).await,
            Effect::Sleep(duration) => {
                tokio::time::sleep(*duration).await;
                Observation::Slept
            }
            Effect::Actors(request) => Observation::Actors(Box::new(match &self.actors {
                Some(actors) => ask_ledger(actors, request).await,
                None => ActorsOutcome::Unavailable(
                    "this plane has no host storage: no actor ledger is attached".into(),
                ),
            })),
            Effect::Durables(request) => {
                Observation::Durables(match (&self.nats_durables, &self.durables) {
                    (Some(nats), _) => {
                        let now_ms = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                        nats.execute(request, now_ms).await
                    }
                    (None, Some(durables)) => durables.execute(request),
                    (None, None) => DurablesOutcome::Failed(
                        "this plane has no broker-durables adapter attached".into(),
                    ),
                })
            }
        }
    }

    /// Runs `script` holding the attached ledger's lock on its alias (reference §6.6):
    /// enrollment and retirement preparation of one alias never overlap, in this process or in
    /// another plane sharing the ledger directory. The lock is awaited on the blocking pool, so
    /// a long holder stalls only this call, and it is released when the machine ends, whatever
    /// the outcome.
    pub async fn run_serialized<S: AliasScript>(
        &mut self,
        script: S,
    ) -> Result<S::Output, EpError> {
        let Some(actors) = self.actors.clone() else {
            return Err(EpError::unavailable(
                "this plane has no host storage: no actor ledger is attached",
            ));
        };
        let alias = script.alias();
        let guard = tokio::task::spawn_blocking(move || actors.lock_alias(&alias))
            .await
            .map_err(|e| EpError::internal(format!("the alias lock task failed: {e}")))?
            .map_err(EpError::unavailable)?;
        // The machine owns the guard: the lock is released when it is dropped, at the end of
        // this call whatever the outcome.
        self.run(&mut Serialized::new(script, guard)?).await
    }

    /// Runs `machine` to completion in this world.
    pub async fn run<M: Machine>(&mut self, machine: &mut M) -> Result<M::Output, EpError> {
        let mut observation = None;
        for _ in 0..MAX_STEPS {
            match machine.step(observation.take()) {
                Step::Done(result) => return result,
                Step::Effect(effect) => observation = Some(self.perform(&effect).await),
            }
        }
        Err(EpError::internal(format!(
            "machine did not finish within {MAX_STEPS} steps"
        )))
    }
}

/// Runs `machine` to completion against `space` with the fail-closed evictor and prober.
pub async fn drive<M: Machine>(machine: &mut M, space: &Space) -> Result<M::Output, EpError> {
    NatsWorld::new(space).run(machine).await
}

/// One request to the actor ledger: inline for a few small local files (cheaper than a hop to
/// the blocking pool), on the blocking pool for a ledger whose requests wait on this runtime
/// ([`ActorLedger::blocks`]).
pub async fn ask_ledger(actors: &Arc<dyn ActorLedger>, request: &ActorsRequest) -> ActorsOutcome {
    if !actors.blocks() {
        return actors.execute(request);
    }
    let (actors, request) = (Arc::clone(actors), request.clone());
    tokio::task::spawn_blocking(move || actors.execute(&request))
        .await
        .unwrap_or_else(|e| ActorsOutcome::Unavailable(format!("the ledger request died: {e}")))
}
