//! The machines the simulator's actors run: the core's own scripts behind one type-erased
//! [`Machine`], plus the deliberately broken variants the teeth tests switch on.
//!
//! The broken variants live here, never in core: each one is either a wrapper that lies to a
//! correct machine about one kind of effect (the effect is never sent, a success is fabricated),
//! or a short script that skips a duty the ceremony owes. The simulator must catch every one of
//! them with the rule it breaks.

use cotal_core::barrier::{self, FreezeToken};
use cotal_core::deregistration::Deregistration;
use cotal_core::gate::{Coordinates, EndpointGate, GateState, Generation, ProcessEpoch};
use cotal_core::issuance::{observe_gate, GateRef, Release};
use cotal_core::kv::{KvOutcome, KvRequest, Revision, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::{Ctx, Effect, Halt, Machine, Observation, Replay, Script, Step};
use cotal_core::names::{keys, OpId};
use cotal_core::reconcile::ReconcileReport;
use cotal_core::registration::Registered;
use cotal_core::service::{self, RecordRead};
use cotal_core::serving::{AuthorizedServe, Serving};

/// What any simulated machine ends with.
#[derive(Debug)]
pub enum Outcome {
    Registered(Registered),
    Serving(Box<Serving>),
    Grant(Box<AuthorizedServe>),
    Release(Release),
    Deregistration(Deregistration),
    Reconciled(Box<ReconcileReport>),
    /// A status write's revision.
    Status(Revision),
    /// A broken barrier's end.
    Barrier,
    /// A plane start's gate observation (`None`: no gate yet).
    Observed(Option<Box<EndpointGate>>),
    /// A step of the simulated process that touches no store (the durable op record).
    Local,
}

/// A running machine of any kind.
pub type SimMachine = Box<dyn Machine<Output = Outcome>>;

/// Maps a machine's output into [`Outcome`].
struct Erase<M, F> {
    inner: M,
    wrap: F,
}

impl<M: Machine, F: FnMut(M::Output) -> Outcome> Machine for Erase<M, F> {
    type Output = Outcome;
    fn step(&mut self, observation: Option<Observation>) -> Step<Outcome> {
        match self.inner.step(observation) {
            Step::Effect(effect) => Step::Effect(effect),
            Step::Done(result) => Step::Done(result.map(&mut self.wrap)),
        }
    }
}

/// Runs `script` as a [`SimMachine`].
pub fn erase<S>(script: S, wrap: fn(S::Output) -> Outcome) -> SimMachine
where
    S: Script + 'static,
{
    Box::new(Erase {
        inner: Replay::new(script),
        wrap,
    })
}

/// One process-local step (writing or clearing a plane's durable op record) as a machine: it
/// performs no effect, so it is a step boundary of its own and a crash can fall right before it.
#[derive(Debug)]
pub struct Local;

impl Machine for Local {
    type Output = Outcome;
    fn step(&mut self, _: Option<Observation>) -> Step<Outcome> {
        Step::Done(Ok(Outcome::Local))
    }
}

/// A plane start's first step: observe its gate, which the restart rule decides from.
#[derive(Debug, Clone)]
pub struct ObserveGate {
    pub gate: GateRef,
}

impl Script for ObserveGate {
    type Output = Outcome;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Outcome, Halt> {
        let observed = observe_gate(cx, &self.gate)?;
        Ok(Outcome::Observed(observed.map(|o| Box::new(o.gate))))
    }
}

/// The deliberately broken variants behind the simulator's test-only switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Broken {
    /// Registrations never send Phase 2's revokes: each revoke write is answered "written"
    /// without reaching the KV. Breaks F68 (the family is not revoked before the spec).
    SkipRevoke,
    /// Some registrant runs are replaced by a takeover-like barrier that freezes and reopens at
    /// the next epoch without revoking or evicting anything. Breaks F22/F23/F68.
    ReopenWithoutRevoke,
    /// Status writers write READY at their grant's epoch without the fresh gate read.
    /// Breaks F42.
    StaleReady,
    /// A plane's restart ignores its op record and always takes a fresh op id, so a gate its
    /// crashed predecessor left frozen is never resumed. Breaks F14.
    PlaneNeverResumes,
    /// A plane's op record is not durable: a crash loses it, so a restart cannot resume the
    /// freeze the crashed run left. Breaks F14.
    PlaneRecordNotDurable,
}

/// Lies to a correct machine about its revokes (see [`Broken::SkipRevoke`]).
pub struct SkipRevoke(pub SimMachine);

impl std::fmt::Debug for SkipRevoke {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SkipRevoke(..)")
    }
}

impl Machine for SkipRevoke {
    type Output = Outcome;
    fn step(&mut self, observation: Option<Observation>) -> Step<Outcome> {
        let mut observation = observation;
        loop {
            match self.0.step(observation.take()) {
                Step::Effect(Effect::Kv(KvRequest::Update {
                    store: Store::Auth,
                    key,
                    value,
                    ..
                })) if LedgerRow::parse(&value, &key)
                    .is_ok_and(|row| row.state() == CredState::Revoked) =>
                {
                    observation = Some(Observation::Kv(KvOutcome::Written(Revision(u64::MAX))));
                }
                other => return other,
            }
        }
    }
}

/// See [`Broken::ReopenWithoutRevoke`]: observe, freeze, reopen at generation + 1 and epoch + 1.
#[derive(Debug, Clone)]
pub struct ReopenWithoutRevoke {
    pub gate: GateRef,
    pub op_id: OpId,
}

impl Script for ReopenWithoutRevoke {
    type Output = Outcome;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Outcome, Halt> {
        let Some(observed) = observe_gate(cx, &self.gate)? else {
            return Ok(Outcome::Barrier);
        };
        if observed.gate.state() != GateState::Open {
            return Ok(Outcome::Barrier);
        }
        let Some(token): Option<FreezeToken> =
            barrier::freeze(cx, &self.gate, &self.op_id, &observed)?
        else {
            return Ok(Outcome::Barrier);
        };
        let at = observed.gate.coordinates();
        let successor = Coordinates {
            generation: Generation(at.generation.0 + 1),
            process_epoch: ProcessEpoch(at.process_epoch.0 + 1),
            ..at
        };
        barrier::reopen(cx, &self.gate, &self.op_id, token, successor)?;
        Ok(Outcome::Barrier)
    }
}

/// See [`Broken::StaleReady`]: the status writer without its fresh epoch read (F42).
#[derive(Debug, Clone)]
pub struct UnfencedReady {
    pub gate: GateRef,
    pub epoch: ProcessEpoch,
    pub observed_spec_revision: u64,
}

impl Script for UnfencedReady {
    type Output = Outcome;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Outcome, Halt> {
        let key = keys::svc_status(&self.gate.endpoint, &self.gate.instance);
        let bytes = ready_status(self.epoch, self.observed_spec_revision).into_bytes();
        let revision = match service::read_record(cx, &key)? {
            RecordRead::Absent => service::create_record(cx, &key, &bytes)?,
            RecordRead::Deleted { revision, .. } | RecordRead::Live { revision, .. } => {
                service::update_record(cx, &key, &bytes, revision)?
            }
        };
        Ok(Outcome::Status(revision))
    }
}

/// The READY status a serving instance writes at `epoch`, as JSON text (the tests crate does
/// not name `serde_json`; callers hand the text to `canon::parse_strict`).
pub fn ready_status(epoch: ProcessEpoch, observed_spec_revision: u64) -> String {
    format!(
        r#"{{"state":"ready","epoch":{},"observedSpecRevision":{observed_spec_revision}}}"#,
        epoch.0
    )
}
