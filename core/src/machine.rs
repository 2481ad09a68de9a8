//! The sans-IO machine protocol (DESIGN §3) and the replay runtime the core's machines use.
//!
//! A [`Machine`] advances only when handed an [`Observation`]: it answers each call with the next
//! [`Effect`] it needs, or with its result. Drivers (the in-memory [`crate::driver`], the NATS
//! adapter, the simulator) execute effects and feed the outcomes back.
//!
//! Most machines here are written as a [`Script`]: straight-line code over a [`Ctx`] whose
//! effect calls either return a recorded observation or suspend the script. [`Replay`] re-runs the
//! script from the top with every observation so far each time one arrives. Because scripts are
//! pure functions of their inputs and observations, a re-run takes exactly the same path, so the
//! fence logic reads top to bottom like the rules it keeps while staying fully sans-IO. A re-run
//! that asks for a different effect than the one recorded is a determinism bug and fails the
//! machine with `internal` instead of acting on a wrong answer.
//!
//! Replaying from the top costs time quadratic in the number of effects, which matters for
//! loops over whole credential families. [`Ctx::call`] bounds it: a sub-script runs in its own
//! frame, and once it finishes its result is memoized in the caller's frame as one entry, so
//! later replays of the caller skip the sub-script's effects entirely. [`Ctx::each`] does the
//! same for a loop, without walking the finished iterations on each replay, so a loop over N
//! rows costs O(N) to replay rather than O(N²).
//!
//! Every memo is tagged with the source location of the [`Ctx::call`], [`Ctx::sub`] or
//! [`Ctx::once`] that recorded it (`#[track_caller]`), so a replay that reaches a memo recorded by
//! another step fails as a divergence even when both steps return the same type.
//!
//! Effects come back typed: [`Ctx::get`], [`Ctx::keys`] and [`Ctx::write`] (with its per-kind
//! helpers) answer only the outcomes their request kind can produce, and
//! [`crate::kv::settle::settle_write`] settles a write whose answer was lost. [`Ctx::recover`]
//! hands a step's refusal back as a value while a suspension still propagates.

use std::any::Any;
use std::fmt;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use crate::actors::{ActorsOutcome, ActorsRequest, DurablesOutcome, DurablesRequest};
use crate::canon::Digest;
use crate::error::EpError;
use crate::kv::{KeysOutcome, KvOutcome, KvRequest, ReadOutcome, Revision, Store, WriteOutcome};
use crate::names::Principal;
use crate::plane_probe::{PlaneQuery, PlaneVerdict};

/// What a machine needs from the world next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// One KV operation on a named store.
    Kv(KvRequest),
    /// Leader-served reads (`Get` requests) a script needs at once, answered by
    /// [`Observation::Reads`], one outcome per request in order. A driver may serve them
    /// concurrently and in any order; [`Ctx::get_together`] says when a script may ask.
    Reads(Vec<KvRequest>),
    /// Verified eviction of these holders; answered with one verdict per holder, input order.
    Evict(Vec<Principal>),
    /// Liveness of a holder principal.
    Probe(Principal),
    /// Liveness of a held plane claim's two scanner connections.
    ProbePlane(PlaneQuery),
    /// Read a contract artifact; the bytes are verified by the core, not the adapter.
    ReadArtifact(Digest),
    /// Wait (poll loops).
    Sleep(Duration),
    /// One request to the host's actor ledger (boxed: rows are large, effects travel in `Halt`).
    Actors(Box<ActorsRequest>),
    /// One request to the broker about an agent's durables.
    Durables(Box<DurablesRequest>),
}

/// Liveness verdict of a holder principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Live,
    Gone,
    Unknown,
    Unestablishable,
}

impl Liveness {
    /// The verdict's wire word, as reports and the reference's `liveness.state` write it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Liveness::Live => "live",
            Liveness::Gone => "gone",
            Liveness::Unknown => "unknown",
            Liveness::Unestablishable => "unestablishable",
        }
    }
}

/// The world's answer to the last effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Kv(KvOutcome),
    /// One outcome per request of the `Reads` effect, in its order.
    Reads(Vec<KvOutcome>),
    /// One verdict per holder of the `Evict` effect: `true` = verified gone.
    Evicted(Vec<bool>),
    Probed(Liveness),
    PlaneProbed(PlaneVerdict),
    /// The artifact bytes, or `None` when the store has none.
    Artifact(Option<Vec<u8>>),
    /// The contract store could not be read: neither presence nor absence is known.
    ArtifactUnavailable(String),
    Slept,
    Actors(Box<ActorsOutcome>),
    Durables(DurablesOutcome),
}

/// One step of a machine.
#[derive(Debug)]
pub enum Step<T> {
    Effect(Effect),
    Done(Result<T, EpError>),
}

/// A sans-IO state machine. The first call passes `None`; every later call passes the
/// observation answering the effect the previous call returned. Calling again with `None`
/// while an effect is outstanding repeats that effect.
pub trait Machine {
    type Output;
    fn step(&mut self, observation: Option<Observation>) -> Step<Self::Output>;
}

/// A closure as a [`Script`]: what [`script`] makes and [`Ctx::sub`] runs.
pub struct Closure<F>(F);

impl<F> fmt::Debug for Closure<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Closure(..)")
    }
}

/// Straight-line code as a [`Script`], so a one-off machine needs no named type:
/// `Replay::new(script(|cx| observe_gate(cx, &gate)))`.
pub fn script<T, F>(body: F) -> Closure<F>
where
    F: Fn(&mut Ctx<'_>) -> Result<T, Halt>,
{
    Closure(body)
}

impl<T, F: Fn(&mut Ctx<'_>) -> Result<T, Halt>> Script for Closure<F> {
    type Output = T;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<T, Halt> {
        (self.0)(cx)
    }
}

/// Why a script stopped before producing its output.
#[derive(Debug)]
pub enum Halt {
    /// The script needs this effect answered before it can go on.
    Suspend(Effect),
    /// The script refused or failed.
    Fail(EpError),
}

impl From<EpError> for Halt {
    fn from(error: EpError) -> Self {
        Halt::Fail(error)
    }
}

/// The source location of the memoizing call that recorded a memo.
type Site = &'static Location<'static>;

/// One recorded step of a frame.
enum Entry {
    /// An effect with the observation that answered it.
    Io(Effect, Observation),
    /// A finished sub-script's output (an `Arc<T>` behind `Any`), and where it was memoized.
    Returned(Site, Arc<dyn Any + Send + Sync>),
    /// A finished sub-script's refusal, and where it was memoized.
    Failed(Site, EpError),
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Io(effect, observation) => write!(f, "Io({effect:?}, {observation:?})"),
            Entry::Returned(site, _) => write!(f, "Returned(at {site}, ..)"),
            Entry::Failed(site, e) => write!(f, "Failed(at {site}, {e})"),
        }
    }
}

/// The recorded steps of one script invocation, and the frame of the sub-script it is
/// currently inside, if any.
#[derive(Debug, Default)]
struct Frame {
    entries: Vec<Entry>,
    child: Option<Box<Frame>>,
}

impl Frame {
    /// Records an observation in the innermost live frame: the one whose script suspended.
    fn record(&mut self, effect: Effect, observation: Observation) {
        match &mut self.child {
            Some(child) => child.record(effect, observation),
            None => self.entries.push(Entry::Io(effect, observation)),
        }
    }
}

/// The script's view of the world: effects answered from the recorded history.
#[derive(Debug)]
pub struct Ctx<'a> {
    frame: &'a mut Frame,
    cursor: usize,
}

fn diverged(at: usize, now: &dyn fmt::Debug, recorded: &dyn fmt::Debug) -> Halt {
    Halt::Fail(EpError::internal(format!(
        "machine replay diverged at step {at}: recorded {recorded:?}, now {now:?}; the machine \
         is not deterministic"
    )))
}

impl Ctx<'_> {
    /// Performs an effect: returns its recorded observation, or suspends the script.
    pub fn perform(&mut self, effect: Effect) -> Result<Observation, Halt> {
        debug_assert!(
            self.cursor <= self.frame.entries.len(),
            "the replay cursor passed the frame's entries"
        );
        match self.frame.entries.get(self.cursor) {
            None => Err(Halt::Suspend(effect)),
            Some(Entry::Io(recorded, observation)) => {
                if *recorded != effect {
                    return Err(diverged(self.cursor, &effect, recorded));
                }
                self.cursor += 1;
                Ok(observation.clone())
            }
            Some(other) => Err(diverged(self.cursor, &effect, other)),
        }
    }

    /// Runs `script` as a sub-script in its own frame and memoizes its result: replays of this
    /// script after the sub-script finished return the memo without replaying its effects.
    /// Use it around loops whose iterations each perform effects.
    #[track_caller]
    pub fn call<S>(&mut self, script: &S) -> Result<Arc<S::Output>, Halt>
    where
        S: Script,
        S::Output: Send + Sync + 'static,
    {
        self.call_at(Location::caller(), script)
    }

    fn call_at<S>(&mut self, site: Site, script: &S) -> Result<Arc<S::Output>, Halt>
    where
        S: Script,
        S::Output: Send + Sync + 'static,
    {
        if let Some(memo) = self.memo(site, "a sub-script call") {
            return memo;
        }
        let child = self.frame.child.get_or_insert_with(Box::default);
        let outcome = script.run(&mut Ctx {
            frame: child,
            cursor: 0,
        });
        let entry = match outcome {
            Err(suspend @ Halt::Suspend(_)) => return Err(suspend),
            Ok(output) => Entry::Returned(site, Arc::new(output)),
            Err(Halt::Fail(error)) => Entry::Failed(site, error),
        };
        self.frame.child = None;
        self.frame.entries.push(entry);
        // Read the memo back through the replay path, so a live run and a replay return the
        // very same value.
        self.call_at(site, script)
    }

    /// The recorded end of the memoized step at the cursor (`what`, called at `site`), if an
    /// earlier run of this script already finished it; `None` when the step has not run yet. A
    /// memo recorded at another call site, or of another type, is a divergence: handing it out
    /// would answer this step with another step's result.
    fn memo<T: Send + Sync + 'static>(
        &mut self,
        site: Site,
        what: &str,
    ) -> Option<Result<Arc<T>, Halt>> {
        debug_assert!(
            self.cursor <= self.frame.entries.len(),
            "the replay cursor passed the frame's entries"
        );
        let result = match self.frame.entries.get(self.cursor)? {
            Entry::Returned(recorded, _) | Entry::Failed(recorded, _) if *recorded != site => {
                Err(diverged(
                    self.cursor,
                    &format!("{what} at {site}"),
                    &format!("a memo from {recorded}"),
                ))
            }
            Entry::Returned(_, memo) => Arc::clone(memo)
                .downcast::<T>()
                .map_err(|_| diverged(self.cursor, &format!("{what} of another type"), &"a memo")),
            Entry::Failed(_, error) => Err(Halt::Fail(error.clone())),
            io @ Entry::Io(..) => return Some(Err(diverged(self.cursor, &what, io))),
        };
        self.cursor += 1;
        Some(result)
    }

    /// [`Ctx::call`] for a closure: runs `step` as a memoized sub-script. Use it around steps
    /// whose replay is costly (parsing or serializing rows, verifying artifacts), so the
    /// enclosing script's later replays return the memo instead of redoing the work.
    #[track_caller]
    pub fn sub<T, F>(&mut self, step: F) -> Result<Arc<T>, Halt>
    where
        T: Send + Sync + 'static,
        F: Fn(&mut Ctx<'_>) -> Result<T, Halt>,
    {
        self.call_at(Location::caller(), &Closure(step))
    }

    /// Runs `step` over every item in order, each iteration a memoized sub-script, and memoizes
    /// the whole loop once it finished; the first refusal ends it. Unlike a `for` loop of
    /// [`Ctx::sub`] calls, a replay does not walk the finished iterations' memos: the loop's
    /// frame holds one entry per finished iteration, so the next item is the one at that count
    /// and a replay costs the same at the thousandth row as at the first. A loop over a
    /// credential family is then linear in its rows instead of quadratic.
    ///
    /// `items` must be the same on every replay (a pure function of the script's inputs and
    /// earlier observations, as everything a script computes is); a replay handed fewer items
    /// than it has finished diverges.
    #[track_caller]
    pub fn each<I, T, F>(&mut self, items: &[I], step: F) -> Result<Arc<Vec<Arc<T>>>, Halt>
    where
        T: Send + Sync + 'static,
        F: Fn(&mut Ctx<'_>, &I) -> Result<T, Halt>,
    {
        let site = Location::caller();
        if let Some(memo) = self.memo(site, "a memoized loop") {
            return memo;
        }
        let looped = self.frame.child.get_or_insert_with(Box::default);
        if looped.entries.len() > items.len() {
            return Err(diverged(
                looped.entries.len(),
                &format!("a loop over {} items at {site}", items.len()),
                &format!("{} finished iterations", looped.entries.len()),
            ));
        }
        let mut refused = None;
        while let Some(item) = items.get(looped.entries.len()) {
            let current = looped.child.get_or_insert_with(Box::default);
            let entry = match step(
                &mut Ctx {
                    frame: current,
                    cursor: 0,
                },
                item,
            ) {
                Err(suspend @ Halt::Suspend(_)) => return Err(suspend),
                Ok(output) => Entry::Returned(site, Arc::new(output)),
                Err(Halt::Fail(error)) => {
                    refused = Some(error.clone());
                    Entry::Failed(site, error)
                }
            };
            looped.child = None;
            looped.entries.push(entry);
            if refused.is_some() {
                break;
            }
        }
        let entry = match refused {
            Some(error) => Entry::Failed(site, error),
            None => {
                let mut outputs = Vec::with_capacity(looped.entries.len());
                for (at, entry) in looped.entries.iter().enumerate() {
                    let output = match entry {
                        Entry::Returned(_, memo) => Arc::clone(memo).downcast::<T>().ok(),
                        _ => None,
                    };
                    let Some(output) = output else {
                        return Err(diverged(at, &"a finished loop iteration", entry));
                    };
                    outputs.push(output);
                }
                Entry::Returned(site, Arc::new(outputs))
            }
        };
        self.frame.child = None;
        self.frame.entries.push(entry);
        // Read the memo back through the replay path, as `call` does.
        match self.memo(site, "a memoized loop") {
            Some(memo) => memo,
            None => Err(diverged(self.cursor, &"a memoized loop", &"nothing")),
        }
    }

    /// Runs an effect-free computation once and memoizes its result like a finished sub-script:
    /// replays return the memo. Use it for costly pure steps between effects (signing JWTs),
    /// which a replay would otherwise redo after every later effect.
    #[track_caller]
    pub fn once<T, F>(&mut self, compute: F) -> Result<Arc<T>, Halt>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Result<T, EpError>,
    {
        let site = Location::caller();
        if let Some(memo) = self.memo(site, "a memoized computation") {
            return memo;
        }
        let (entry, result) = match compute() {
            Ok(output) => {
                let output = Arc::new(output);
                (Entry::Returned(site, output.clone()), Ok(output))
            }
            Err(error) => (Entry::Failed(site, error.clone()), Err(Halt::Fail(error))),
        };
        self.frame.entries.push(entry);
        self.cursor += 1;
        result
    }

    /// Runs `body` and hands its refusal back as a value, while a suspension still propagates:
    /// the one place that tells the two halts apart, for callers that act on a refusal (revoke
    /// then refuse, relabel, fall back). `cx.recover(|cx| step(cx))?` is `Ok(result)` or
    /// `Ok(Err(refusal))`.
    ///
    /// Not memoized: `body` replays inline, exactly as the hand-written `match` it replaces did,
    /// so an enclosing script's replay cost is unchanged, and `body` may capture mutable state
    /// (a memo would need an `Fn` body and an `Arc` output). A costly body memoizes inside it:
    /// `cx.recover(|cx| cx.sub(step))`.
    pub fn recover<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, Halt>,
    ) -> Result<Result<T, EpError>, Halt> {
        match body(self) {
            Ok(output) => Ok(Ok(output)),
            Err(Halt::Fail(refusal)) => Ok(Err(refusal)),
            Err(suspend @ Halt::Suspend(_)) => Err(suspend),
        }
    }

    /// Performs one KV request. Prefer the typed helpers ([`Ctx::get`], [`Ctx::write`], …),
    /// whose outcomes hold only what their request kind can produce.
    pub fn kv(&mut self, request: KvRequest) -> Result<KvOutcome, Halt> {
        match self.perform(Effect::Kv(request))? {
            Observation::Kv(outcome) => Ok(outcome),
            other => Err(mismatch("a KV outcome", &other)),
        }
    }

    /// A leader-served read of `key`'s last message.
    pub fn get(&mut self, store: Store, key: impl Into<String>) -> Result<ReadOutcome, Halt> {
        let key = key.into();
        let outcome = self.kv(KvRequest::Get {
            store,
            key: key.clone(),
        })?;
        ReadOutcome::from_outcome(outcome).map_err(|other| impossible(&key, &other))
    }

    /// Leader-served reads of every `(store, key)` in one round trip, one outcome each, in order.
    /// The driver may serve them concurrently, so they land in no defined order: ask for reads
    /// together only when the decision taken on them holds in whichever order they landed (the
    /// doc of each caller says why its decision does).
    pub fn get_together<const N: usize>(
        &mut self,
        reads: [(Store, String); N],
    ) -> Result<[ReadOutcome; N], Halt> {
        self.reads_together(reads.map(|(store, key)| KvRequest::Get { store, key }))
    }

    /// [`Ctx::get_together`] for any mix of last-message (`Get`) and first-message
    /// (`GetFirst`) reads; any other request is refused `internal` before anything is sent.
    pub fn reads_together<const N: usize>(
        &mut self,
        requests: [KvRequest; N],
    ) -> Result<[ReadOutcome; N], Halt> {
        if let Some(other) = requests
            .iter()
            .find(|r| !matches!(r, KvRequest::Get { .. } | KvRequest::GetFirst { .. }))
        {
            return Err(EpError::internal(format!(
                "a {:?} request on {} was sent among reads",
                other.op(),
                other.key()
            ))
            .into());
        }
        let requests = requests.to_vec();
        let outcomes = match self.perform(Effect::Reads(requests.clone()))? {
            Observation::Reads(outcomes) if outcomes.len() == N => outcomes,
            other => return Err(mismatch(&format!("{N} read outcomes"), &other)),
        };
        let typed = requests
            .iter()
            .zip(outcomes)
            .map(|(request, outcome)| {
                ReadOutcome::from_outcome(outcome)
                    .map_err(|other| impossible(request.key(), &other))
            })
            .collect::<Result<Vec<_>, _>>()?;
        typed
            .try_into()
            .map_err(|_| Halt::Fail(EpError::internal("the read outcomes changed length")))
    }

    /// A leader-served read of `key`'s first message.
    pub fn get_first(&mut self, store: Store, key: impl Into<String>) -> Result<ReadOutcome, Halt> {
        let key = key.into();
        let outcome = self.kv(KvRequest::GetFirst {
            store,
            key: key.clone(),
        })?;
        ReadOutcome::from_outcome(outcome).map_err(|other| impossible(&key, &other))
    }

    /// Every key under `prefix` that still has a message, markers included (sorted).
    pub fn keys(&mut self, store: Store, prefix: impl Into<String>) -> Result<KeysOutcome, Halt> {
        let prefix = prefix.into();
        let outcome = self.kv(KvRequest::Keys {
            store,
            prefix: prefix.clone(),
        })?;
        KeysOutcome::from_outcome(outcome).map_err(|other| impossible(&prefix, &other))
    }

    /// Performs one write request (`Create`, `CreateStrict`, `Update` or `Delete`). A read
    /// request is refused `internal` before anything is sent.
    pub fn write(&mut self, request: KvRequest) -> Result<WriteOutcome, Halt> {
        if !request.is_write() {
            return Err(EpError::internal(format!(
                "a {:?} request on {} was sent as a write",
                request.op(),
                request.key()
            ))
            .into());
        }
        let key = request.key().to_owned();
        let outcome = self.kv(request)?;
        WriteOutcome::from_outcome(outcome).map_err(|other| impossible(&key, &other))
    }

    /// Create-only write that also succeeds over a DEL or PURGE marker (`KvRequest::Create`).
    pub fn create(
        &mut self,
        store: Store,
        key: impl Into<String>,
        value: Vec<u8>,
    ) -> Result<WriteOutcome, Halt> {
        self.write(KvRequest::Create {
            store,
            key: key.into(),
            value,
        })
    }

    /// Create-only write refused over any marker (`KvRequest::CreateStrict`).
    pub fn create_strict(
        &mut self,
        store: Store,
        key: impl Into<String>,
        value: Vec<u8>,
    ) -> Result<WriteOutcome, Halt> {
        self.write(KvRequest::CreateStrict {
            store,
            key: key.into(),
            value,
        })
    }

    /// Write pinned to the key's last revision `expected` (`KvRequest::Update`).
    pub fn update(
        &mut self,
        store: Store,
        key: impl Into<String>,
        value: Vec<u8>,
        expected: Revision,
    ) -> Result<WriteOutcome, Halt> {
        self.write(KvRequest::Update {
            store,
            key: key.into(),
            value,
            expected,
        })
    }

    /// DEL marker pinned to the key's last revision `expected` (`KvRequest::Delete`).
    pub fn delete(
        &mut self,
        store: Store,
        key: impl Into<String>,
        expected: Revision,
    ) -> Result<WriteOutcome, Halt> {
        self.write(KvRequest::Delete {
            store,
            key: key.into(),
            expected,
        })
    }

    /// Reads a contract artifact's bytes (`None` when nothing is published under `digest`).
    pub fn read_artifact(&mut self, digest: Digest) -> Result<ArtifactRead, Halt> {
        match self.perform(Effect::ReadArtifact(digest))? {
            Observation::Artifact(bytes) => Ok(ArtifactRead::Bytes(bytes)),
            Observation::ArtifactUnavailable(why) => Ok(ArtifactRead::Unavailable(why)),
            other => Err(mismatch("an artifact read", &other)),
        }
    }

    /// Asks for verified eviction of `holders`; one verdict per holder.
    pub fn evict(&mut self, holders: Vec<Principal>) -> Result<Vec<bool>, Halt> {
        let expected = holders.len();
        match self.perform(Effect::Evict(holders))? {
            Observation::Evicted(verdicts) if verdicts.len() == expected => Ok(verdicts),
            Observation::Evicted(verdicts) => Err(Halt::Fail(EpError::internal(format!(
                "the evictor answered {} verdicts for {expected} holders",
                verdicts.len()
            )))),
            other => Err(mismatch("eviction verdicts", &other)),
        }
    }

    /// Asks the oracle about a held plane claim's scanner connections.
    pub fn probe_plane(&mut self, query: PlaneQuery) -> Result<PlaneVerdict, Halt> {
        match self.perform(Effect::ProbePlane(query))? {
            Observation::PlaneProbed(verdict) => Ok(verdict),
            other => Err(mismatch("a plane-liveness verdict", &other)),
        }
    }

    /// Asks for the liveness of `holder`.
    pub fn probe(&mut self, holder: Principal) -> Result<Liveness, Halt> {
        match self.perform(Effect::Probe(holder))? {
            Observation::Probed(liveness) => Ok(liveness),
            other => Err(mismatch("a liveness verdict", &other)),
        }
    }
}

/// How the contract store answered an artifact read ([`Ctx::read_artifact`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactRead {
    /// The stored bytes (unverified), or `None` when nothing is published at the digest.
    Bytes(Option<Vec<u8>>),
    /// The store could not be read: neither presence nor absence is known.
    Unavailable(String),
}

/// `internal`: the KV driver answered a request with an outcome its kind cannot produce.
fn impossible(key: &str, outcome: &KvOutcome) -> Halt {
    Halt::Fail(EpError::internal(format!(
        "the KV driver answered a request on {key} with {outcome:?}, which that request cannot \
         produce"
    )))
}

impl Ctx<'_> {
    /// Performs one actor-ledger request.
    pub fn actors(&mut self, request: ActorsRequest) -> Result<ActorsOutcome, Halt> {
        match self.perform(Effect::Actors(Box::new(request)))? {
            Observation::Actors(outcome) => Ok(*outcome),
            other => Err(mismatch("an actor-ledger outcome", &other)),
        }
    }

    /// Performs one broker-durables request.
    pub fn durables(&mut self, request: DurablesRequest) -> Result<DurablesOutcome, Halt> {
        match self.perform(Effect::Durables(Box::new(request)))? {
            Observation::Durables(outcome) => Ok(outcome),
            other => Err(mismatch("a durables outcome", &other)),
        }
    }
}

fn mismatch(wanted: &str, got: &Observation) -> Halt {
    Halt::Fail(EpError::internal(format!(
        "the driver answered with {got:?} where {wanted} was due"
    )))
}

/// Straight-line machine code over a [`Ctx`].
pub trait Script {
    type Output;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Self::Output, Halt>;
}

/// Runs a [`Script`] as a [`Machine`] by replaying it over the observations so far.
#[derive(Debug)]
pub struct Replay<S> {
    script: S,
    frame: Frame,
    /// Every effect with its observation, in order, across all frames (for tracing).
    log: Vec<(Effect, Observation)>,
    pending: Option<Effect>,
    finished: bool,
}

impl<S: Script> Replay<S> {
    pub fn new(script: S) -> Self {
        Replay {
            script,
            frame: Frame::default(),
            log: Vec::new(),
            pending: None,
            finished: false,
        }
    }

    /// Every effect performed so far with its observation, in order.
    pub fn history(&self) -> &[(Effect, Observation)] {
        &self.log
    }

    /// The script being run.
    pub fn script(&self) -> &S {
        &self.script
    }
}

impl<S: Script> Machine for Replay<S> {
    type Output = S::Output;

    fn step(&mut self, observation: Option<Observation>) -> Step<S::Output> {
        if self.finished {
            return Step::Done(Err(EpError::internal(
                "the machine was stepped after it finished",
            )));
        }
        match (self.pending.take(), observation) {
            (Some(effect), Some(observation)) => {
                self.frame.record(effect.clone(), observation.clone());
                self.log.push((effect, observation));
            }
            (Some(effect), None) => {
                self.pending = Some(effect.clone());
                return Step::Effect(effect);
            }
            (None, Some(observation)) => {
                self.finished = true;
                return Step::Done(Err(EpError::internal(format!(
                    "the machine was handed {observation:?} while no effect was outstanding"
                ))));
            }
            (None, None) => {}
        }
        debug_assert!(!self.finished, "a finished machine's script was run again");
        let mut cx = Ctx {
            frame: &mut self.frame,
            cursor: 0,
        };
        let outcome = self.script.run(&mut cx);
        // A deterministic script replays every step it recorded before it can finish; one that
        // finished short of its history took another path on this replay.
        debug_assert!(
            outcome.is_err() || cx.cursor == cx.frame.entries.len(),
            "a script finished before replaying all {} recorded steps (stopped at {})",
            cx.frame.entries.len(),
            cx.cursor
        );
        match outcome {
            Err(Halt::Suspend(effect)) => {
                self.pending = Some(effect.clone());
                Step::Effect(effect)
            }
            Err(Halt::Fail(error)) => {
                self.finished = true;
                Step::Done(Err(error))
            }
            Ok(output) => {
                self.finished = true;
                Step::Done(Ok(output))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    // Test scripts count their runs through a `Cell`: the replay is exactly what is under test,
    // so the purity rule's ban on interior mutability does not apply here.
    #![allow(clippy::disallowed_types)]

    use std::cell::Cell;

    use super::*;
    use crate::kv::{Entry, Operation, Revision, Store};

    fn get(key: &str) -> KvRequest {
        KvRequest::Get {
            store: Store::Auth,
            key: key.into(),
        }
    }

    fn absent() -> Observation {
        Observation::Kv(KvOutcome::Entry(None))
    }

    /// Reads `a`, then `b` only if `a` was present; returns how many keys were present.
    struct TwoReads;

    impl Script for TwoReads {
        type Output = usize;
        fn run(&self, cx: &mut Ctx<'_>) -> Result<usize, Halt> {
            let a = matches!(cx.kv(get("a"))?, KvOutcome::Entry(Some(_)));
            if !a {
                return Ok(0);
            }
            let b = matches!(cx.kv(get("b"))?, KvOutcome::Entry(Some(_)));
            Ok(1 + usize::from(b))
        }
    }

    fn present(key: &str) -> Observation {
        Observation::Kv(KvOutcome::Entry(Some(Entry {
            key: key.into(),
            value: b"{}".to_vec(),
            revision: Revision(1),
            operation: Operation::Put,
        })))
    }

    #[test]
    fn a_script_suspends_on_each_effect_and_resumes_with_its_observation() {
        let mut m = Replay::new(TwoReads);
        assert!(matches!(m.step(None), Step::Effect(Effect::Kv(r)) if r == get("a")));
        // Re-polling without an observation repeats the outstanding effect.
        assert!(matches!(m.step(None), Step::Effect(Effect::Kv(r)) if r == get("a")));
        assert!(matches!(m.step(Some(present("a"))), Step::Effect(Effect::Kv(r)) if r == get("b")));
        assert!(matches!(m.step(Some(absent())), Step::Done(Ok(1))));
        assert_eq!(m.history().len(), 2);
        let after = m.step(None);
        assert!(matches!(after, Step::Done(Err(e)) if e.code == crate::ErrorCode::Internal));
    }

    #[test]
    fn an_observation_with_nothing_outstanding_fails_the_machine() {
        let mut m = Replay::new(TwoReads);
        assert!(matches!(m.step(Some(absent())), Step::Done(Err(_))));
    }

    #[test]
    fn the_wrong_kind_of_observation_is_internal() {
        let mut m = Replay::new(TwoReads);
        m.step(None);
        let done = m.step(Some(Observation::Slept));
        assert!(matches!(done, Step::Done(Err(e)) if e.code == crate::ErrorCode::Internal));
    }

    /// A script that asks for a different effect on replay: a determinism bug.
    struct Fickle(Cell<u32>);

    impl Script for Fickle {
        type Output = ();
        fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
            let n = self.0.get();
            self.0.set(n + 1);
            cx.kv(get(&format!("k{n}")))?;
            cx.kv(get("next"))?;
            Ok(())
        }
    }

    #[test]
    fn a_replay_that_diverges_fails_closed_instead_of_using_a_wrong_answer() {
        let mut m = Replay::new(Fickle(Cell::new(0)));
        m.step(None);
        let done = m.step(Some(absent()));
        match done {
            Step::Done(Err(e)) => assert!(e.message.contains("not deterministic"), "{e}"),
            other => panic!("expected a divergence failure, got {other:?}"),
        }
    }

    #[test]
    fn eviction_verdicts_must_match_the_holders() {
        struct Evict;
        impl Script for Evict {
            type Output = Vec<bool>;
            fn run(&self, cx: &mut Ctx<'_>) -> Result<Vec<bool>, Halt> {
                let p = Principal::parse("u_cccccccccccccccccccccccccc.a")?;
                cx.evict(vec![p.clone(), p])
            }
        }
        let mut m = Replay::new(Evict);
        m.step(None);
        let done = m.step(Some(Observation::Evicted(vec![true])));
        assert!(matches!(done, Step::Done(Err(e)) if e.code == crate::ErrorCode::Internal));
    }

    /// Reads `a` and `b` each as a memoized sub-script, counting how often each body runs.
    struct Outer<'c>(&'c Cell<u32>);
    struct Inner<'c>(&'static str, &'c Cell<u32>);

    impl Script for Inner<'_> {
        type Output = bool;
        fn run(&self, cx: &mut Ctx<'_>) -> Result<bool, Halt> {
            self.1.set(self.1.get() + 1);
            Ok(matches!(cx.kv(get(self.0))?, KvOutcome::Entry(Some(_))))
        }
    }

    impl Script for Outer<'_> {
        type Output = (bool, bool);
        fn run(&self, cx: &mut Ctx<'_>) -> Result<(bool, bool), Halt> {
            let a = cx.call(&Inner("a", self.0))?;
            let b = cx.call(&Inner("b", self.0))?;
            Ok((*a, *b))
        }
    }

    #[test]
    fn a_finished_sub_script_is_memoized_and_never_replayed() {
        let runs = Cell::new(0);
        let mut m = Replay::new(Outer(&runs));
        assert!(matches!(m.step(None), Step::Effect(Effect::Kv(r)) if r == get("a")));
        assert!(matches!(m.step(Some(present("a"))), Step::Effect(Effect::Kv(r)) if r == get("b")));
        assert!(matches!(
            m.step(Some(absent())),
            Step::Done(Ok((true, false)))
        ));
        // Inner("a") ran on the first pass and again when its observation arrived (then it was
        // memoized); Inner("b") likewise. Without the memo, "a" would run a third time.
        assert_eq!(runs.get(), 4);
        assert_eq!(m.history().len(), 2, "the trace still holds every effect");
    }

    struct FailingInner;

    impl Script for FailingInner {
        type Output = ();
        fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
            cx.kv(get("x"))?;
            Err(EpError::conflict("inner refused").into())
        }
    }

    struct Recovers;

    impl Script for Recovers {
        type Output = String;
        fn run(&self, cx: &mut Ctx<'_>) -> Result<String, Halt> {
            let refused = match cx.recover(|cx| cx.call(&FailingInner))? {
                Err(e) => e.message,
                Ok(_) => "accepted".into(),
            };
            cx.kv(get("after"))?;
            Ok(refused)
        }
    }

    #[test]
    fn a_sub_script_refusal_is_memoized_too() {
        let mut m = Replay::new(Recovers);
        m.step(None);
        assert!(matches!(m.step(Some(absent())), Step::Effect(Effect::Kv(r)) if r == get("after")));
        assert!(matches!(m.step(Some(absent())), Step::Done(Ok(msg)) if msg == "inner refused"));
    }

    #[test]
    fn a_recovered_sub_script_still_suspends_on_its_effects() {
        let mut m = Replay::new(Recovers);
        assert!(matches!(m.step(None), Step::Effect(Effect::Kv(r)) if r == get("x")));
        assert!(matches!(m.step(None), Step::Effect(Effect::Kv(r)) if r == get("x")));
    }

    /// Memoizes a number at one call site on the first run and at another on every replay.
    struct SiteSwap {
        runs: Cell<u32>,
        by_sub: bool,
    }

    impl Script for SiteSwap {
        type Output = u32;
        fn run(&self, cx: &mut Ctx<'_>) -> Result<u32, Halt> {
            let first = self.runs.get() == 0;
            self.runs.set(self.runs.get() + 1);
            let value = match (self.by_sub, first) {
                (false, true) => cx.once(|| Ok(1u32))?,
                (false, false) => cx.once(|| Ok(2u32))?,
                (true, true) => cx.sub(|_| Ok(1u32))?,
                (true, false) => cx.sub(|_| Ok(2u32))?,
            };
            cx.kv(get("after"))?;
            Ok(*value)
        }
    }

    #[test]
    fn a_replay_reaching_a_memo_of_the_same_type_from_another_site_diverges() {
        for by_sub in [false, true] {
            let mut m = Replay::new(SiteSwap {
                runs: Cell::new(0),
                by_sub,
            });
            assert!(matches!(m.step(None), Step::Effect(Effect::Kv(r)) if r == get("after")));
            match m.step(Some(absent())) {
                Step::Done(Err(e)) => {
                    assert_eq!(e.code, crate::ErrorCode::Internal, "{e}");
                    assert!(e.message.contains("not deterministic"), "{e}");
                    assert!(e.message.contains("machine.rs"), "names the sites: {e}");
                }
                other => panic!("expected a divergence failure, got {other:?}"),
            }
        }
    }

    /// Reads each key in a memoized sub-script called at one site inside a loop.
    struct Looped<'c>(&'c Cell<u32>);

    impl Script for Looped<'_> {
        type Output = Vec<bool>;
        fn run(&self, cx: &mut Ctx<'_>) -> Result<Vec<bool>, Halt> {
            let mut found = Vec::new();
            for key in ["a", "b", "c"] {
                let present = cx.sub(|cx| {
                    self.0.set(self.0.get() + 1);
                    Ok(matches!(
                        cx.get(Store::Auth, key)?,
                        ReadOutcome::Entry(Some(_))
                    ))
                })?;
                found.push(*present);
            }
            Ok(found)
        }
    }

    #[test]
    fn one_call_site_in_a_loop_memoizes_each_iteration_on_its_own() {
        let runs = Cell::new(0);
        let mut m = Replay::new(Looped(&runs));
        assert!(matches!(m.step(None), Step::Effect(Effect::Kv(r)) if r == get("a")));
        assert!(matches!(m.step(Some(present("a"))), Step::Effect(Effect::Kv(r)) if r == get("b")));
        assert!(matches!(m.step(Some(absent())), Step::Effect(Effect::Kv(r)) if r == get("c")));
        match m.step(Some(present("c"))) {
            Step::Done(Ok(found)) => assert_eq!(found, [true, false, true]),
            other => panic!("expected the three reads, got {other:?}"),
        }
        // Each iteration's body ran on the pass that suspended on its read and on the pass its
        // observation arrived, then never again: 2 runs × 3 iterations.
        assert_eq!(runs.get(), 6);
    }

    /// Reads each key through [`Ctx::each`], counting how often each body runs; refuses at
    /// `stop` when given.
    struct Each<'c>(&'c Cell<u32>, Option<&'static str>);

    impl Script for Each<'_> {
        type Output = Vec<bool>;
        fn run(&self, cx: &mut Ctx<'_>) -> Result<Vec<bool>, Halt> {
            let found = cx.each(&["a", "b", "c"], |cx, key| {
                self.0.set(self.0.get() + 1);
                let present = matches!(cx.get(Store::Auth, *key)?, ReadOutcome::Entry(Some(_)));
                if self.1 == Some(*key) {
                    return Err(EpError::conflict(format!("refused at {key}")).into());
                }
                Ok(present)
            })?;
            cx.get(Store::Auth, "after")?;
            Ok(found.iter().map(|f| **f).collect())
        }
    }

    #[test]
    fn a_loop_runs_each_iteration_until_it_finishes_then_memoizes_the_whole() {
        let runs = Cell::new(0);
        let mut m = Replay::new(Each(&runs, None));
        assert!(matches!(m.step(None), Step::Effect(Effect::Kv(r)) if r == get("a")));
        assert!(matches!(m.step(Some(present("a"))), Step::Effect(Effect::Kv(r)) if r == get("b")));
        assert!(matches!(m.step(Some(absent())), Step::Effect(Effect::Kv(r)) if r == get("c")));
        assert!(
            matches!(m.step(Some(present("c"))), Step::Effect(Effect::Kv(r)) if r == get("after"))
        );
        match m.step(Some(absent())) {
            Step::Done(Ok(found)) => assert_eq!(found, [true, false, true]),
            other => panic!("expected the three reads, got {other:?}"),
        }
        // Each body ran on the pass that suspended on its read and on the pass its observation
        // arrived, then never again, not even when the read after the loop replayed it.
        assert_eq!(runs.get(), 6);
        assert_eq!(m.history().len(), 4);
    }

    #[test]
    fn a_loop_stops_at_its_first_refusal() {
        let runs = Cell::new(0);
        let mut m = Replay::new(Each(&runs, Some("b")));
        m.step(None);
        m.step(Some(present("a")));
        match m.step(Some(present("b"))) {
            Step::Done(Err(e)) => assert_eq!(e.message, "refused at b"),
            other => panic!("expected the refusal at b, got {other:?}"),
        }
        assert_eq!(runs.get(), 4, "c never ran");
    }

    /// Writes one key and reports the typed outcome.
    struct WriteOnce;

    impl Script for WriteOnce {
        type Output = WriteOutcome;
        fn run(&self, cx: &mut Ctx<'_>) -> Result<WriteOutcome, Halt> {
            cx.create(Store::Auth, "k", b"{}".to_vec())
        }
    }

    #[test]
    fn a_write_answered_with_a_read_outcome_is_internal() {
        let mut m = Replay::new(WriteOnce);
        m.step(None);
        match m.step(Some(absent())) {
            Step::Done(Err(e)) => {
                assert_eq!(e.code, crate::ErrorCode::Internal, "{e}");
                assert!(e.message.contains("cannot produce"), "{e}");
            }
            other => panic!("expected an internal refusal, got {other:?}"),
        }
        let mut m = Replay::new(WriteOnce);
        m.step(None);
        let unanswered = Observation::Kv(KvOutcome::Ambiguous("timed out".into()));
        assert!(matches!(
            m.step(Some(unanswered)),
            Step::Done(Ok(WriteOutcome::Ambiguous(why))) if why == "timed out"
        ));
    }
}
