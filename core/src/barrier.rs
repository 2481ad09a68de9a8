//! The barrier side of the gate: freeze, enumerate the credential family, revoke, reopen.
//!
//! A barrier freezes the gate FIRST and only then enumerates (F21): freeze and mint finalize CAS
//! the same key, so exactly one wins, and a mint that won wrote its ledger row before its touch,
//! so the enumeration sees it. The reopen is pinned to the freeze token (the gate revision the
//! freeze produced) and to the freezing operation's id (F14), and always advances the
//! generation by exactly 1.
//!
//! Ambiguous writes are settled by a leader read-back: a freeze carries our `opId`, and a reopen
//! writes our exact successor coordinate at a generation only the freezing operation can write,
//! so the gate itself says whether the write was ours.

use std::sync::Arc;

use crate::error::EpError;
use crate::gate::{Coordinates, EndpointGate, GateOp, GateState};
use crate::issuance::{observe_gate, GateObservation, GateRef};
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{KeysOutcome, KvRequest, Revision, Store};
use crate::ledger::{self, CredState, LedgerRow, Revocation};
use crate::machine::{Ctx, Halt, Replay, Script};
use crate::names::OpId;

/// The gate revision a winning freeze produced: the fencing token the reopen is pinned to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FreezeToken(pub Revision);

/// Freezes an open gate under a registration intent `{opId, kind: "registration"}` (E1, G5).
#[derive(Debug, Clone)]
pub struct FreezeGate {
    pub gate: GateRef,
    pub op_id: OpId,
    /// The observation the freeze is pinned to.
    pub observed: GateObservation,
}

impl FreezeGate {
    pub fn machine(gate: GateRef, op_id: OpId, observed: GateObservation) -> Replay<Self> {
        Replay::new(FreezeGate {
            gate,
            op_id,
            observed,
        })
    }
}

impl Script for FreezeGate {
    /// `Some(token)` when this freeze won; `None` when the gate moved since the observation.
    type Output = Option<FreezeToken>;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Self::Output, Halt> {
        freeze(cx, &self.gate, &self.op_id, &self.observed)
    }
}

/// Freezes the observed gate with a revision-pinned CAS and returns the freeze token.
///
/// Refused before any CAS when the observation is not `open` (`conflict`, F13). A lost CAS is
/// `None`: someone moved the gate, so re-observe and re-decide (F11). An ambiguous CAS reads the
/// gate back: frozen under our `opId` means it was ours (its revision is the token); unchanged at
/// the observed revision means it did not commit and the same pinned CAS is tried again; any
/// other state means another writer moved it, `None`.
pub fn freeze(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    op_id: &OpId,
    observed: &GateObservation,
) -> Result<Option<FreezeToken>, Halt> {
    let frozen = observed.gate.frozen(GateOp::registration(op_id.clone()))?;
    let request = KvRequest::Update {
        store: Store::Auth,
        key: gate.key(),
        value: frozen.to_bytes(),
        expected: observed.revision,
    };
    let settled = settle_write(cx, &request, |cx, heard| match heard {
        Heard::Lost { .. } => Ok(Verdict::Settled(None)),
        Heard::NotSent { why, .. } => Err(EpError::unavailable(format!(
            "freezing gate {} failed before it was sent: {why}; nothing was written",
            gate.key()
        ))
        .into()),
        Heard::Unanswered(_) => Ok(match observe_gate(cx, gate)? {
            Some(now) if is_frozen_by(&now.gate, op_id) => {
                Verdict::Settled(Some(FreezeToken(now.revision)))
            }
            Some(now) if now.revision == observed.revision => Verdict::Unmoved,
            _ => Verdict::Settled(None),
        }),
    })?;
    match settled {
        Settled::Written(revision) => Ok(Some(FreezeToken(revision))),
        Settled::Judged(token) => Ok(token),
        Settled::Exhausted(_) => Err(EpError::unavailable(format!(
            "freezing gate {} stayed ambiguous across {AMBIGUOUS_WRITE_ATTEMPTS} attempts; it did \
             not commit as far as the gate shows",
            gate.key()
        ))
        .into()),
    }
}

fn is_frozen_by(gate: &EndpointGate, op_id: &OpId) -> bool {
    gate.state() == GateState::Frozen && gate.op().is_some_and(|op| op.op_id() == op_id)
}

/// Reopens a gate this operation froze (E2, E3, E5).
#[derive(Debug, Clone)]
pub struct ReopenGate {
    pub gate: GateRef,
    pub op_id: OpId,
    pub token: FreezeToken,
    pub successor: Coordinates,
}

impl ReopenGate {
    pub fn machine(
        gate: GateRef,
        op_id: OpId,
        token: FreezeToken,
        successor: Coordinates,
    ) -> Replay<Self> {
        Replay::new(ReopenGate {
            gate,
            op_id,
            token,
            successor,
        })
    }
}

impl Script for ReopenGate {
    /// `true` when the gate is now open at the successor by this reopen; `false` when the gate
    /// is no longer at the freeze token.
    type Output = bool;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<bool, Halt> {
        reopen(cx, &self.gate, &self.op_id, self.token, self.successor)
    }
}

/// Reopens the gate at `successor`, pinned to the freeze token and the freezing `opId` (F14).
///
/// `false` when the gate's revision is not the token (someone else moved it), including when
/// another executor of the same operation (a reconciler) reopened it first. A gate at the
/// token frozen by another operation is `permission-denied`; a successor that does not advance
/// the generation by exactly 1 is refused before the CAS. An ambiguous CAS reads back:
/// open at exactly our successor means it committed; still at the token means it did not, and
/// the pinned CAS is tried again; a generation past the freeze at other coordinates is a
/// reopen by someone else (`false`); anything else leaves the outcome unknown (`unavailable`,
/// the gate may have reopened) rather than guessing.
pub fn reopen(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    op_id: &OpId,
    token: FreezeToken,
    successor: Coordinates,
) -> Result<bool, Halt> {
    let Some(current) = observe_gate(cx, gate)? else {
        return Ok(false);
    };
    if current.revision != token.0 {
        return Ok(false);
    }
    let reopened = current.gate.reopened(op_id, successor)?;
    let request = KvRequest::Update {
        store: Store::Auth,
        key: gate.key(),
        value: reopened.to_bytes(),
        expected: token.0,
    };
    let unknown = || {
        EpError::unavailable(format!(
            "reopening gate {} has an unknown outcome; it may have committed. Re-observe the gate \
             before acting on it",
            gate.key()
        ))
    };
    let settled = settle_write(cx, &request, |cx, heard| match heard {
        Heard::Lost { .. } => Ok(Verdict::Settled(false)),
        Heard::NotSent { why, .. } => Err(EpError::unavailable(format!(
            "reopening gate {} failed before it was sent: {why}; the gate stays frozen",
            gate.key()
        ))
        .into()),
        // Only a reopen of this freeze can write generation g+1 (the freeze is op-pinned), so
        // our exact successor at g+1 is our write even if a later barrier froze it again.
        Heard::Unanswered(_) => match observe_gate(cx, gate)? {
            Some(now) if now.revision == token.0 => Ok(Verdict::Unmoved),
            Some(now) if now.gate.coordinates() == successor => Ok(Verdict::Settled(true)),
            Some(now) if now.gate.generation() > current.gate.generation() => {
                Ok(Verdict::Settled(false))
            }
            _ => Err(unknown().into()),
        },
    })?;
    match settled {
        Settled::Written(_) => Ok(true),
        Settled::Judged(reopened) => Ok(reopened),
        Settled::Exhausted(_) => Err(unknown().into()),
    }
}

/// One row of an enumerated credential family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyRow {
    pub key: String,
    pub row: LedgerRow,
    pub revision: Revision,
}

/// Enumerates a gate's whole `epcred` family.
#[derive(Debug, Clone)]
pub struct EnumerateFamily {
    pub gate: GateRef,
}

impl Script for EnumerateFamily {
    type Output = Vec<FamilyRow>;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Self::Output, Halt> {
        list_family(cx, &self.gate.family_prefix())
    }
}

/// Enumerates every ledger row under one auth-store key prefix ending in `.` (a lifecycle's
/// `cred.<uid>.` family).
#[derive(Debug, Clone)]
pub struct EnumeratePrefix {
    pub prefix: String,
}

impl Script for EnumeratePrefix {
    type Output = Vec<FamilyRow>;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Self::Output, Halt> {
        list_family(cx, &self.prefix)
    }
}

/// Lists the keys under `prefix` and reads each row (see [`enumerate_family`]). The listing is
/// memoized and the reads run as one [`Ctx::each`] loop, so no replay copies the listing or
/// walks the rows already read: the enumeration is linear in the family's size.
fn list_family(cx: &mut Ctx<'_>, prefix: &str) -> Result<Vec<FamilyRow>, Halt> {
    let listed = cx.sub(|cx| match cx.keys(Store::Auth, prefix)? {
        KeysOutcome::Keys(keys) => Ok(keys
            .into_iter()
            .filter(|k| k.starts_with(prefix))
            .collect::<Vec<_>>()),
        KeysOutcome::Unavailable(why) => Err(EpError::unavailable(format!(
            "listing the credential family {prefix}> failed: {why}"
        ))
        .into()),
    })?;
    let rows = cx.each(&listed, |cx, key| read_family_row(cx, key))?;
    Ok(rows.iter().map(|row| FamilyRow::clone(row)).collect())
}

/// Lists and reads every row of the gate's `epcred` family (serve and sibling rows alike).
///
/// A DEL/PURGE marker in the family is corruption and refuses the enumeration (`internal`,
/// skipping it could hide a credential the barrier must revoke. So is a listed key that
/// reads back absent, and any row that does not parse or does not rebuild its key. The rows are
/// read as one [`Ctx::each`] loop, so a barrier over a large family stays linear to replay.
pub fn enumerate_family(cx: &mut Ctx<'_>, gate: &GateRef) -> Result<Arc<Vec<FamilyRow>>, Halt> {
    cx.call(&EnumerateFamily { gate: gate.clone() })
}

/// Lists and reads every ledger row under `prefix`, with [`enumerate_family`]'s refusals.
pub fn enumerate_prefix(cx: &mut Ctx<'_>, prefix: String) -> Result<Arc<Vec<FamilyRow>>, Halt> {
    cx.call(&EnumeratePrefix { prefix })
}

/// Reads one listed row of a credential family.
fn read_family_row(cx: &mut Ctx<'_>, key: &str) -> Result<FamilyRow, Halt> {
    let entry = match ledger::read(cx, Store::Auth, key)? {
        None => {
            return Err(EpError::internal(format!(
                "ledger row {key} was listed but reads back absent; ledger rows are never \
                 deleted"
            ))
            .into())
        }
        Some(entry) if !entry.is_put() => {
            return Err(EpError::internal(format!(
                "ledger row {key} carries a {} marker; a marker in a credential family is \
                 corruption, never a skip (Q-18)",
                entry.operation.as_str()
            ))
            .into())
        }
        Some(entry) => entry,
    };
    Ok(FamilyRow {
        row: LedgerRow::parse(&entry.value, key)?,
        revision: entry.revision,
        key: key.to_owned(),
    })
}

/// Revokes every `active` row of an enumerated family, one [`Ctx::each`] iteration per row
/// (the active keys picked once), so the revocations are linear in the family's size; returns
/// how many it revoked.
pub fn revoke_active(cx: &mut Ctx<'_>, family: &[FamilyRow]) -> Result<usize, Halt> {
    let active = cx.once(|| {
        Ok(family
            .iter()
            .filter(|r| r.row.state() == CredState::Active)
            .map(|r| r.key.clone())
            .collect::<Vec<_>>())
    })?;
    Ok(cx
        .each(&active, |cx, key| ledger::revoke_row(cx, key))?
        .len())
}

/// Revokes one ledger row (F26): see [`ledger::revoke_row`].
#[derive(Debug, Clone)]
pub struct RevokeRow {
    pub key: String,
}

impl Script for RevokeRow {
    type Output = Revocation;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Revocation, Halt> {
        ledger::revoke_row(cx, &self.key)
    }
}
