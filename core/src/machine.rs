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
//! later replays of the caller skip the sub-script's effects entirely.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::actors::{ActorsOutcome, ActorsRequest, DurablesOutcome, DurablesRequest};
use crate::canon::Digest;
use crate::error::EpError;
use crate::kv::{KvOutcome, KvRequest};
use crate::names::Principal;

/// What a machine needs from the world next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// One KV operation on a named store.
    Kv(KvRequest),
    /// Verified eviction of these holders; answered with one verdict per holder, input order.
    Evict(Vec<Principal>),
    /// Liveness of a holder principal.
    Probe(Principal),
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

/// The world's answer to the last effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Kv(KvOutcome),
    /// One verdict per holder of the `Evict` effect: `true` = verified gone.
    Evicted(Vec<bool>),
    Probed(Liveness),
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

/// One recorded step of a frame.
enum Entry {
    /// An effect with the observation that answered it.
    Io(Effect, Observation),
    /// A finished sub-script's output (an `Arc<T>` behind `Any`).
    Returned(Arc<dyn Any + Send + Sync>),
    /// A finished sub-script's refusal.
    Failed(EpError),
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Io(effect, observation) => write!(f, "Io({effect:?}, {observation:?})"),
            Entry::Returned(_) => f.write_str("Returned(..)"),
            Entry::Failed(e) => write!(f, "Failed({e})"),
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
    pub fn call<S>(&mut self, script: &S) -> Result<Arc<S::Output>, Halt>
    where
        S: Script,
        S::Output: Send + Sync + 'static,
    {
        if let Some(memo) = self.memo("a sub-script call") {
            return memo;
        }
        let child = self.frame.child.get_or_insert_with(Box::default);
        let outcome = script.run(&mut Ctx {
            frame: child,
            cursor: 0,
        });
        let entry = match outcome {
            Err(suspend @ Halt::Suspend(_)) => return Err(suspend),
            Ok(output) => Entry::Returned(Arc::new(output)),
            Err(Halt::Fail(error)) => Entry::Failed(error),
        };
        self.frame.child = None;
        self.frame.entries.push(entry);
        // Read the memo back through the replay path, so a live run and a replay return the
        // very same value.
        self.call(script)
    }

    /// The recorded end of the memoized step at the cursor (`what`), if an earlier run of this
    /// script already finished it; `None` when the step has not run yet.
    fn memo<T: Send + Sync + 'static>(&mut self, what: &str) -> Option<Result<Arc<T>, Halt>> {
        let result = match self.frame.entries.get(self.cursor)? {
            Entry::Returned(memo) => Arc::clone(memo)
                .downcast::<T>()
                .map_err(|_| diverged(self.cursor, &format!("{what} of another type"), &"a memo")),
            Entry::Failed(error) => Err(Halt::Fail(error.clone())),
            io @ Entry::Io(..) => return Some(Err(diverged(self.cursor, &what, io))),
        };
        self.cursor += 1;
        Some(result)
    }

    /// [`Ctx::call`] for a closure: runs `step` as a memoized sub-script. Use it around steps
    /// whose replay is costly (parsing or serializing rows, verifying artifacts), so the
    /// enclosing script's later replays return the memo instead of redoing the work.
    pub fn sub<T, F>(&mut self, step: F) -> Result<Arc<T>, Halt>
    where
        T: Send + Sync + 'static,
        F: Fn(&mut Ctx<'_>) -> Result<T, Halt>,
    {
        self.call(&Closure(step))
    }

    /// Runs an effect-free computation once and memoizes its result like a finished sub-script:
    /// replays return the memo. Use it for costly pure steps between effects (signing JWTs),
    /// which a replay would otherwise redo after every later effect.
    pub fn once<T, F>(&mut self, compute: F) -> Result<Arc<T>, Halt>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Result<T, EpError>,
    {
        if let Some(memo) = self.memo("a memoized computation") {
            return memo;
        }
        let (entry, result) = match compute() {
            Ok(output) => {
                let output = Arc::new(output);
                (Entry::Returned(output.clone()), Ok(output))
            }
            Err(error) => (Entry::Failed(error.clone()), Err(Halt::Fail(error))),
        };
        self.frame.entries.push(entry);
        self.cursor += 1;
        result
    }

    /// Performs one KV request.
    pub fn kv(&mut self, request: KvRequest) -> Result<KvOutcome, Halt> {
        match self.perform(Effect::Kv(request))? {
            Observation::Kv(outcome) => Ok(outcome),
            other => Err(mismatch("a KV outcome", &other)),
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

    /// Asks for the liveness of `holder`.
    pub fn probe(&mut self, holder: Principal) -> Result<Liveness, Halt> {
        match self.perform(Effect::Probe(holder))? {
            Observation::Probed(liveness) => Ok(liveness),
            other => Err(mismatch("a liveness verdict", &other)),
        }
    }
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
        let mut cx = Ctx {
            frame: &mut self.frame,
            cursor: 0,
        };
        match self.script.run(&mut cx) {
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
            let refused = match cx.call(&FailingInner) {
                Err(Halt::Fail(e)) => e.message,
                Err(suspend) => return Err(suspend),
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
}
