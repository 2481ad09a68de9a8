//! Guarded repair of a frozen registration gate (F52, F53; reference-gate-impl §3.18).
//!
//! A registration that died after its freeze leaves the gate frozen under its `opId`. The
//! reconciler may finish that dead operation — same `opId`, never a new one — but only after
//! affirmative proof that the freeze holder is gone: `live`, `unknown` and `unestablishable` all
//! refuse (unknowability is not death). Then it does the barrier's own duty in full: revoke
//! every active row, verify-evict every holder of the family plus the freeze holder (journaled in
//! the repair cursor, so a retry skips only holders verified under this very freeze), and reopen
//! — completing the registration from its committed spec when the spec advanced, else
//! abort-reopening at the unchanged coordinate.

use serde_json::json;

use crate::barrier::{self, FreezeToken};
use crate::error::{EpError, ErrorCode};
use crate::gate::{Coordinates, EndpointGate, GateState, Generation, OpKind};
use crate::issuance::{observe_gate, GateObservation, GateRef};
use crate::ledger::CredState;
use crate::machine::{Ctx, Halt, Liveness, Script};
use crate::names::{OpId, Principal};
use crate::registration::{
    complete_frozen_from_spec, evict_all, Completion, Eviction, EVICT_PRINCIPALS_MAX,
};
use crate::repair;
use crate::wire::ObjectWriter;

pub use crate::gate::{remedy, RECONCILE_COMMAND};

/// The detail kind a reconcile refusal carries.
pub const GATE_RECONCILE_REFUSED: &str = "ai.cotal.ep.gate-reconcile-refused";

/// Why a reconcile refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileCondition {
    NoGate,
    NotFrozen,
    WrongOpKind,
    HolderAlive,
    HolderUnknown,
    LivenessUnestablishable,
    EvictionUnverified,
    Raced,
}

impl ReconcileCondition {
    pub const ALL: [ReconcileCondition; 8] = [
        ReconcileCondition::NoGate,
        ReconcileCondition::NotFrozen,
        ReconcileCondition::WrongOpKind,
        ReconcileCondition::HolderAlive,
        ReconcileCondition::HolderUnknown,
        ReconcileCondition::LivenessUnestablishable,
        ReconcileCondition::EvictionUnverified,
        ReconcileCondition::Raced,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ReconcileCondition::NoGate => "no-gate",
            ReconcileCondition::NotFrozen => "not-frozen",
            ReconcileCondition::WrongOpKind => "wrong-op-kind",
            ReconcileCondition::HolderAlive => "holder-alive",
            ReconcileCondition::HolderUnknown => "holder-unknown",
            ReconcileCondition::LivenessUnestablishable => "liveness-unestablishable",
            ReconcileCondition::EvictionUnverified => "eviction-unverified",
            ReconcileCondition::Raced => "raced",
        }
    }

    const fn code(self) -> ErrorCode {
        match self {
            ReconcileCondition::NoGate
            | ReconcileCondition::NotFrozen
            | ReconcileCondition::WrongOpKind
            | ReconcileCondition::HolderAlive => ErrorCode::FailedPrecondition,
            ReconcileCondition::HolderUnknown
            | ReconcileCondition::LivenessUnestablishable
            | ReconcileCondition::EvictionUnverified => ErrorCode::Unavailable,
            ReconcileCondition::Raced => ErrorCode::Conflict,
        }
    }

    /// The condition a refusal from this module carries, if any.
    pub fn of(error: &EpError) -> Option<ReconcileCondition> {
        let detail = error
            .details
            .iter()
            .find(|d| d["kind"] == GATE_RECONCILE_REFUSED)?;
        let condition = detail["condition"].as_str()?;
        Self::ALL.into_iter().find(|c| c.as_str() == condition)
    }

    fn refuse(self, message: impl Into<String>) -> EpError {
        EpError::new(self.code(), message).with_detail(json!({
            "kind": GATE_RECONCILE_REFUSED,
            "condition": self.as_str(),
        }))
    }
}

/// Whether the cursor was cleaned up after the reopen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorCleanup {
    /// No cursor was needed (no holder to verify).
    None,
    Deleted,
    /// The delete failed; harmless, since the cursor is bound to a freeze that no longer exists.
    Retained,
}

/// What a reconcile did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    pub gate: GateRef,
    pub holder_principal: Principal,
    pub op_id: OpId,
    pub freeze_token: FreezeToken,
    pub before: Coordinates,
    pub after: Coordinates,
    pub liveness: Liveness,
    pub family_rows: usize,
    /// The credential ids of the rows this reconcile revoked (those active at enumeration).
    pub revoked: Vec<String>,
    pub holders: Vec<Principal>,
    pub holders_verified_before_attempt: Vec<Principal>,
    pub holders_verified_this_attempt: Vec<Principal>,
    /// True when the registration was completed from its committed spec (else abort-reopened).
    pub completed_registration: bool,
    pub repair_cursor_cleanup: CursorCleanup,
    pub reopened_at_generation: Generation,
}

impl ReconcileReport {
    /// The reference's `GateReconcileReport` as JSON, in its member order: the gate, the freeze
    /// it finished, the coordinates before and after, the liveness that allowed it (always
    /// `gone`, from a complete listing), the family and what was revoked and evicted.
    /// `holdersRemaining` is empty: a reconcile that leaves a holder unverified refuses instead
    /// of reporting.
    pub fn to_reference_json(&self) -> String {
        let coordinates = |c: &Coordinates| {
            ObjectWriter::new()
                .uint("generation", c.generation.0)
                .uint("processEpoch", c.process_epoch.0)
                .uint("registrationRevision", c.registration_revision.0)
                .uint("nameAuthorityRevision", c.name_authority_revision.0)
                .finish()
        };
        let names =
            |ps: &[Principal]| -> Vec<String> { ps.iter().map(ToString::to_string).collect() };
        let (holders, before, now) = (
            names(&self.holders),
            names(&self.holders_verified_before_attempt),
            names(&self.holders_verified_this_attempt),
        );
        let liveness = ObjectWriter::new()
            .string("state", self.liveness.as_str())
            .string(
                "detail",
                "the servers' connection listing, complete on every server",
            )
            .finish();
        ObjectWriter::new()
            .string("endpoint", self.gate.endpoint.as_str())
            .string("instanceId", self.gate.instance.as_str())
            .string("holderPrincipal", &self.holder_principal.to_string())
            .string("opId", self.op_id.as_str())
            .uint("freezeToken", self.freeze_token.0 .0)
            .raw("before", &coordinates(&self.before))
            .raw("after", &coordinates(&self.after))
            .raw("liveness", &liveness)
            .uint("familyRows", self.family_rows as u64)
            .strings("revoked", self.revoked.iter().map(String::as_str))
            .strings("evicted", now.iter().map(String::as_str))
            .strings("holders", holders.iter().map(String::as_str))
            .strings(
                "holdersVerifiedBeforeAttempt",
                before.iter().map(String::as_str),
            )
            .strings("holdersVerifiedThisAttempt", now.iter().map(String::as_str))
            .strings("holdersRemaining", std::iter::empty())
            .string(
                "repairCursorCleanup",
                match self.repair_cursor_cleanup {
                    CursorCleanup::Retained => "retained",
                    CursorCleanup::None | CursorCleanup::Deleted => "deleted",
                },
            )
            .uint("reopenedAtGeneration", self.reopened_at_generation.0)
            .finish()
    }
}

/// Reconciles one frozen registration gate.
#[derive(Debug, Clone)]
pub struct ReconcileGate {
    pub gate: GateRef,
}

impl Script for ReconcileGate {
    type Output = ReconcileReport;

    /// Keeps F14 (the dead op's own id), F16/F52 (only a liveness-proven reconciler reopens),
    /// F53 (the cursor discipline), F68 (whole-family revoke and verified eviction) and Q-13.
    fn run(&self, cx: &mut Ctx<'_>) -> Result<ReconcileReport, Halt> {
        let gate = &self.gate;
        let (observed, op_id) = self.frozen_registration(cx)?;
        let frozen = &observed.gate;
        let token = FreezeToken(observed.revision);
        let holder = frozen.principal().clone();
        let liveness = require_gone(cx, &holder)?;
        self.require_unmoved(cx, &observed)?;
        let family = barrier::enumerate_family(cx, gate)?;
        barrier::revoke_active(cx, &family)?;
        let revoked: Vec<String> = family
            .iter()
            .filter(|r| r.row.state() == CredState::Active)
            .map(|r| r.row.credential_id().to_string())
            .collect();
        let mut holders: Vec<Principal> = family
            .iter()
            .map(|r| r.row.holder_principal().clone())
            .collect();
        holders.push(holder.clone());
        let eviction = self.evict(cx, &op_id, token, holders)?;
        let (after, completed_registration) = self.finish(cx, &op_id, token, frozen)?;
        let repair_cursor_cleanup = match eviction.cursor_revision {
            None => CursorCleanup::None,
            Some(revision) => match cx.recover(|cx| repair::delete_cursor(cx, gate, revision))? {
                Ok(()) => CursorCleanup::Deleted,
                Err(_) => CursorCleanup::Retained,
            },
        };
        Ok(ReconcileReport {
            gate: gate.clone(),
            holder_principal: holder,
            op_id,
            freeze_token: token,
            before: frozen.coordinates(),
            reopened_at_generation: after.generation,
            after,
            liveness,
            family_rows: family.len(),
            revoked,
            holders: eviction.holders,
            holders_verified_before_attempt: eviction.verified_before,
            holders_verified_this_attempt: eviction.verified_now,
            completed_registration,
            repair_cursor_cleanup,
        })
    }
}

impl ReconcileGate {
    /// Step 1: the gate as it stands, which must be frozen by a registration; returns it with
    /// the dead operation's own id (F14).
    fn frozen_registration(&self, cx: &mut Ctx<'_>) -> Result<(GateObservation, OpId), Halt> {
        let gate = &self.gate;
        let observed = match cx.recover(|cx| observe_gate(cx, gate))? {
            Ok(Some(observed)) => observed,
            Ok(None) => {
                return Err(ReconcileCondition::NoGate
                    .refuse(format!("gate {} does not exist", gate.key()))
                    .into())
            }
            Err(e) if e.code == ErrorCode::FailedPrecondition => {
                return Err(ReconcileCondition::NoGate.refuse(e.message).into())
            }
            Err(e) => return Err(e.into()),
        };
        let frozen = &observed.gate;
        let op = match (frozen.state(), frozen.op()) {
            (GateState::Frozen, Some(op)) => op,
            _ => {
                return Err(ReconcileCondition::NotFrozen
                    .refuse(format!(
                        "gate {} is \"{}\", not \"frozen\"; there is nothing to reconcile",
                        gate.key(),
                        frozen.state().as_str()
                    ))
                    .into())
            }
        };
        if op.kind() != OpKind::Registration {
            return Err(ReconcileCondition::WrongOpKind
                .refuse(format!(
                    "gate {} is frozen by a {} operation; only a registration freeze is \
                     reconciled here",
                    gate.key(),
                    op.kind().as_str()
                ))
                .into());
        }
        let op_id = op.op_id().clone();
        Ok((observed, op_id))
    }

    /// Step 3: the probe answered about the holder of the freeze read in step 1; the freeze
    /// itself may have been reopened by its own operation since (and its holder died after).
    /// Act only on the freeze that still stands, or revocations would hit a live, open gate's
    /// family.
    fn require_unmoved(&self, cx: &mut Ctx<'_>, observed: &GateObservation) -> Result<(), Halt> {
        match observe_gate(cx, &self.gate)? {
            Some(now) if now.revision == observed.revision => Ok(()),
            _ => Err(ReconcileCondition::Raced
                .refuse(format!(
                    "gate {} moved while the holder's liveness was probed; nothing was \
                     revoked. Re-observe it",
                    self.gate.key()
                ))
                .into()),
        }
    }

    /// Step 5: verified eviction of every holder of the family plus the freeze holder (F68),
    /// journaled in the repair cursor (F53); an unverified one leaves the gate frozen.
    fn evict(
        &self,
        cx: &mut Ctx<'_>,
        op_id: &OpId,
        token: FreezeToken,
        holders: Vec<Principal>,
    ) -> Result<Eviction, Halt> {
        let gate = &self.gate;
        let evicted =
            cx.recover(|cx| evict_all(cx, gate, op_id, token, holders, EVICT_PRINCIPALS_MAX))?;
        evicted.map_err(|e| {
            ReconcileCondition::EvictionUnverified
                .refuse(format!(
                    "{}; the gate stays frozen and a retry resumes from the cursor",
                    e.message
                ))
                .into()
        })
    }

    /// Step 6: finishes the dead registration from its committed spec when the spec advanced,
    /// else abort-reopens at the unchanged coordinate one generation on. Returns the
    /// coordinates the gate reopened at and whether the registration completed.
    fn finish(
        &self,
        cx: &mut Ctx<'_>,
        op_id: &OpId,
        token: FreezeToken,
        frozen: &EndpointGate,
    ) -> Result<(Coordinates, bool), Halt> {
        let gate = &self.gate;
        let raced = || {
            ReconcileCondition::Raced.refuse(format!(
                "gate {} moved while it was being reconciled; re-observe it",
                gate.key()
            ))
        };
        match complete_frozen_from_spec(cx, gate, op_id, token, frozen)? {
            Completion::Completed(done) => Ok((
                Coordinates {
                    generation: done.generation,
                    process_epoch: done.process_epoch,
                    registration_revision: done.registration_revision,
                    name_authority_revision: frozen.name_authority_revision(),
                },
                true,
            )),
            Completion::Raced => Err(raced().into()),
            Completion::NotCompleted => {
                let mut at = frozen.coordinates();
                at.generation = at.generation.next()?;
                if !barrier::reopen(cx, gate, op_id, token, at)? {
                    return Err(raced().into());
                }
                Ok((at, false))
            }
        }
    }
}

/// Step 2: the freeze holder's liveness, which must be affirmatively `gone`: `live`, `unknown`
/// and `unestablishable` all refuse, because unknowability is not death (F52).
fn require_gone(cx: &mut Ctx<'_>, holder: &Principal) -> Result<Liveness, Halt> {
    let liveness = cx.probe(holder.clone())?;
    let refusal = match liveness {
        Liveness::Gone => return Ok(liveness),
        Liveness::Live => ReconcileCondition::HolderAlive.refuse(format!(
            "the freeze holder {holder} is ALIVE; its registration may still be in flight, so \
             the gate is left to it"
        )),
        Liveness::Unknown => ReconcileCondition::HolderUnknown.refuse(format!(
            "the liveness of freeze holder {holder} is UNKNOWN; absence of evidence is not \
             evidence of absence, so the gate stays frozen (F52)"
        )),
        Liveness::Unestablishable => ReconcileCondition::LivenessUnestablishable.refuse(format!(
            "the liveness of freeze holder {holder} CANNOT BE ESTABLISHED; the reconciler will \
             not infer death from silence (F52)"
        )),
    };
    Err(refusal.into())
}
