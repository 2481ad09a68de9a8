//! Scripts that may run only while their alias is locked (reference §6.6): enrollment and
//! retirement preparation of one `(owner, actor)` must never overlap, so their machines are
//! [`AliasScript`]s, runnable only through a [`Serialized`], which takes the [`AliasGuard`] for
//! exactly their alias and holds it until the machine is dropped.

use std::fmt;
use std::marker::PhantomData;

use crate::error::EpError;
use crate::machine::{Ctx, Halt, Machine, Observation, Replay, Script, Step};
use crate::names::Principal;

use super::AliasGuard;

/// Proof that the running script's alias lock is held. Only [`Serialized`] makes one, so an
/// [`AliasScript`] cannot be run from outside it.
#[derive(Debug, Clone, Copy)]
pub struct LockHeld<'a>(PhantomData<&'a AliasGuard>);

/// A script that must run under the lock of [`AliasScript::alias`].
pub trait AliasScript {
    type Output;
    /// The `(owner, actor)` whose lock the script needs.
    fn alias(&self) -> Principal;
    fn run_held(&self, cx: &mut Ctx<'_>, held: LockHeld<'_>) -> Result<Self::Output, Halt>;
}

/// The script with the guard it runs under.
struct Locked<S> {
    script: S,
    guard: AliasGuard,
}

impl<S: AliasScript> Script for Locked<S> {
    type Output = S::Output;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<S::Output, Halt> {
        let held = LockHeld(PhantomData::<&AliasGuard>);
        debug_assert_eq!(self.guard.alias(), &self.script.alias());
        self.script.run_held(cx, held)
    }
}

/// An [`AliasScript`] as a [`Machine`], holding its alias lock for as long as it lives.
pub struct Serialized<S> {
    replay: Replay<Locked<S>>,
}

impl<S: AliasScript> Serialized<S> {
    /// `internal` when `guard` locks another alias than the script's: a driver bug, refused
    /// before anything runs.
    pub fn new(script: S, guard: AliasGuard) -> Result<Self, EpError> {
        let alias = script.alias();
        if guard.alias() != &alias {
            return Err(EpError::internal(format!(
                "a script for alias {alias} was handed the lock of {}",
                guard.alias()
            )));
        }
        Ok(Serialized {
            replay: Replay::new(Locked { script, guard }),
        })
    }

    /// Every effect performed so far with its observation, in order.
    pub fn history(&self) -> &[(crate::machine::Effect, Observation)] {
        self.replay.history()
    }

    pub fn script(&self) -> &S {
        &self.replay.script().script
    }
}

impl<S> fmt::Debug for Serialized<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Serialized(..)")
    }
}

impl<S: AliasScript> Machine for Serialized<S> {
    type Output = S::Output;
    fn step(&mut self, observation: Option<Observation>) -> Step<S::Output> {
        self.replay.step(observation)
    }
}
