//! A small seeded interleaver for the authority operations' race scenarios (renewals racing a
//! re-registration, enrollments racing retirements, run attempts racing): any number of core
//! machines over ONE [`ModelWorld`], stepped one effect at a time in an order the seed picks,
//! with the faults every KV write can meet — the ack lost after the write committed, the
//! request lost before it did, a refusal before any effect — and crashes at any step boundary.
//!
//! The registration simulator ([`crate::sim`]) owns its whole ceremony; this one owns nothing
//! but the schedule, so each scenario brings its machines and its own invariants (checked
//! between steps through [`Interleaver::world`] and on every [`Event`]).
//!
//! Alias locks: a flight may name a lock key. Once it has taken its first step it holds the key
//! until it finishes or crashes, and no other flight naming the same key starts meanwhile —
//! the way the host serializes enrollment and retirement preparation per alias (a crashed
//! process's file lock dies with it).

use std::fmt;

use cotal_core::actors::{AliasGuard, AliasScript, Serialized};
use cotal_core::driver::{ModelWorld, World};
use cotal_core::error::EpError;
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::machine::{Effect, Machine, Observation, Replay, Script, Step};

use crate::sim::SplitMix64;

/// Per-mille rates of the faults the interleaver injects.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// A KV write commits but its caller hears `Ambiguous`.
    pub ambiguous_applied: u32,
    /// A KV write is lost and its caller hears `Ambiguous`.
    pub ambiguous_lost: u32,
    /// A KV request is refused `Unavailable` before any effect.
    pub unavailable: u32,
    /// The flight's process crashes before this step (its machine is dropped).
    pub crash: u32,
}

impl Faults {
    /// Faults that make most histories hostile without stalling them.
    pub const HOSTILE: Faults = Faults {
        ambiguous_applied: 40,
        ambiguous_lost: 30,
        unavailable: 30,
        crash: 15,
    };

    /// Faults rare enough that most operations complete, so the interesting races (a renewal
    /// finishing while a barrier runs) happen often.
    pub const MILD: Faults = Faults {
        ambiguous_applied: 8,
        ambiguous_lost: 6,
        unavailable: 4,
        crash: 4,
    };

    /// Odd seeds are hostile, even seeds mild: a campaign sees both kinds of history.
    pub const fn for_seed(seed: u64) -> Faults {
        if seed % 2 == 1 {
            Faults::HOSTILE
        } else {
            Faults::MILD
        }
    }
}

/// How a flight ended.
#[derive(Debug)]
pub enum Event<O> {
    Finished {
        label: String,
        result: Result<O, EpError>,
    },
    Crashed {
        label: String,
    },
}

struct Flight<O> {
    label: String,
    lock: Option<String>,
    machine: Box<dyn Machine<Output = O>>,
    started: bool,
    answer: Option<Observation>,
}

/// The seeded schedule over one world.
pub struct Interleaver<O> {
    pub world: ModelWorld,
    rng: SplitMix64,
    faults: Faults,
    flights: Vec<Flight<O>>,
    /// One line per step, for a failing seed's report.
    pub trace: Vec<String>,
}

impl<O> fmt::Debug for Interleaver<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interleaver")
            .field("flights", &self.flights.len())
            .field("trace", &self.trace.len())
            .finish_non_exhaustive()
    }
}

impl<O> Interleaver<O> {
    pub fn new(world: ModelWorld, seed: u64, faults: Faults) -> Self {
        Interleaver {
            world,
            rng: SplitMix64::new(seed),
            faults,
            flights: Vec::new(),
            trace: Vec::new(),
        }
    }

    /// The seed's random source, for scenarios that draw their own choices.
    pub fn rng(&mut self) -> &mut SplitMix64 {
        &mut self.rng
    }

    /// Replaces the fault rates (e.g. a quiet settle phase after a hostile one).
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// Adds a flight; `lock` names the alias it must hold exclusively.
    pub fn spawn(
        &mut self,
        label: impl Into<String>,
        lock: Option<String>,
        machine: Box<dyn Machine<Output = O>>,
    ) {
        self.flights.push(Flight {
            label: label.into(),
            lock,
            machine,
            started: false,
            answer: None,
        });
    }

    /// Crashes one live flight (the oldest): a plane restart kills every flight in progress.
    pub fn crash_one(&mut self) -> Option<Event<O>> {
        if self.flights.is_empty() {
            return None;
        }
        let flight = self.flights.remove(0);
        self.trace.push(format!("{} CRASH (restart)", flight.label));
        Some(Event::Crashed {
            label: flight.label,
        })
    }

    /// Flights not yet finished or crashed.
    pub fn live(&self) -> usize {
        self.flights.len()
    }

    fn eligible(&self, i: usize) -> bool {
        let Some(f) = self.flights.get(i) else {
            return false;
        };
        if f.started {
            return true;
        }
        let Some(lock) = &f.lock else {
            return true;
        };
        !self
            .flights
            .iter()
            .any(|o| o.started && o.lock.as_ref() == Some(lock))
    }

    /// Steps one eligible flight by one effect; returns its end if it ended. `None` with live
    /// flights left cannot happen: the oldest flight of a lock is always eligible.
    pub fn step(&mut self) -> Option<Event<O>> {
        let eligible: Vec<usize> = (0..self.flights.len())
            .filter(|&i| self.eligible(i))
            .collect();
        let &i = self.rng.pick(&eligible)?;
        if self.rng.chance(self.faults.crash) {
            let flight = self.flights.remove(i);
            self.trace.push(format!("{} CRASH", flight.label));
            return Some(Event::Crashed {
                label: flight.label,
            });
        }
        let flight = self.flights.get_mut(i)?;
        flight.started = true;
        let step = flight.machine.step(flight.answer.take());
        match step {
            Step::Done(result) => {
                let flight = self.flights.remove(i);
                self.trace.push(format!(
                    "{} done {}",
                    flight.label,
                    match &result {
                        Ok(_) => "ok".to_owned(),
                        Err(e) => format!("err {e}"),
                    }
                ));
                Some(Event::Finished {
                    label: flight.label,
                    result,
                })
            }
            Step::Effect(effect) => {
                let label = flight.label.clone();
                let answer = self.perform(&label, &effect);
                if let Some(flight) = self.flights.get_mut(i) {
                    flight.answer = Some(answer);
                }
                None
            }
        }
    }

    fn perform(&mut self, label: &str, effect: &Effect) -> Observation {
        if let Effect::Kv(request) = effect {
            let fault = if self.rng.chance(self.faults.unavailable) {
                Some(Fault::Unavailable)
            } else if request.is_write() && self.rng.chance(self.faults.ambiguous_applied) {
                Some(Fault::AmbiguousApplied)
            } else if request.is_write() && self.rng.chance(self.faults.ambiguous_lost) {
                Some(Fault::AmbiguousNotApplied)
            } else {
                None
            };
            let fault_name = fault
                .as_ref()
                .map(|f| format!(" [{f:?}]"))
                .unwrap_or_default();
            if let Some(fault) = fault {
                self.world.kv.inject(
                    Trigger::new(request.store(), request.op(), request.key()),
                    fault,
                );
            }
            let answer = self.world.perform(effect);
            self.world.kv.clear_faults();
            self.trace.push(format!(
                "{label} {:?} {}{fault_name} -> {}",
                request.op(),
                request.key(),
                brief(&answer)
            ));
            answer
        } else {
            let answer = self.world.perform(effect);
            self.trace
                .push(format!("{label} {effect:?} -> {}", brief(&answer)));
            answer
        }
    }

    /// Steps until every flight has ended, handing each end to `on_event` with the world.
    pub fn run(&mut self, mut on_event: impl FnMut(&mut ModelWorld, Event<O>)) {
        while !self.flights.is_empty() {
            if let Some(event) = self.step() {
                on_event(&mut self.world, event);
            }
        }
    }

    /// The last `n` trace lines, joined for a failure message.
    pub fn tail(&self, n: usize) -> String {
        let start = self.trace.len().saturating_sub(n);
        self.trace.get(start..).unwrap_or_default().join("\n")
    }
}

fn brief(o: &Observation) -> String {
    let s = format!("{o:?}");
    match s.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", s.get(..cut).unwrap_or_default()),
        None => s,
    }
}

/// Boxes `script` as a flight whose output `wrap` maps into the scenario's output type.
pub fn flight<S, O>(script: S, wrap: fn(S::Output) -> O) -> Box<dyn Machine<Output = O>>
where
    S: Script + 'static,
    O: 'static,
{
    Box::new(Mapped {
        run: Replay::new(script),
        wrap,
    })
}

/// [`flight`] for a script that runs only under its alias lock. The interleaver's flight lock
/// (the `lock` of [`Interleaver::spawn`]) is what excludes the alias's other flights here, so
/// the guard handed to the machine holds nothing of its own.
pub fn serialized_flight<S, O>(
    script: S,
    wrap: fn(S::Output) -> O,
) -> Result<Box<dyn Machine<Output = O>>, EpError>
where
    S: AliasScript + 'static,
    O: 'static,
{
    let guard = AliasGuard::new(script.alias(), Box::new(()));
    Ok(Box::new(Mapped {
        run: Serialized::new(script, guard)?,
        wrap,
    }))
}

struct Mapped<M: Machine, O> {
    run: M,
    wrap: fn(M::Output) -> O,
}

impl<M: Machine, O> Machine for Mapped<M, O> {
    type Output = O;
    fn step(&mut self, observation: Option<Observation>) -> Step<O> {
        match self.run.step(observation) {
            Step::Effect(effect) => Step::Effect(effect),
            Step::Done(result) => Step::Done(result.map(self.wrap)),
        }
    }
}
