//! The terminal retirement barrier of an agent lifecycle (spec §3.1 G7/G8/G10, §3.3 H4/H5,
//! F47–F50) behind the two retire doors' outcome table (reference-auth-service §3.9).
//!
//! The barrier runs in the normative order and every step re-reads durable state, so a rerun
//! under the same op id finishes a crashed run (F18): G7 freeze → H4 retiring → revoke the
//! `cred.<uid>.` family → verified eviction → `frontier.<uid>` → G8 retired → H5 retired.
//! The frontier record is written only after containment verified, so on resume its presence
//! is the durable proof that the revoke and the eviction already completed.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use crate::barrier::{self, FamilyRow};
use crate::canon::Digest;
use crate::error::EpError;
use crate::gate::GateState;
use crate::kv::Store;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, ActorToken, LifecycleUid, OpId, OwnerToken, Principal};
use crate::plane_claim::{sealed_scan, ClaimHold};
use crate::registration::EVICT_PRINCIPALS_MAX;
use crate::wire::{self, ObjectWriter};

use super::activate::{cas_head, describe, update_gate, write_pinned, Landed};
use super::rows::{
    read_gate, read_head, read_never_deleted, AgentGate, HeadState, LifecycleHead, Versioned,
};

/// Rounds the freeze makes while mint finalize touches move the gate under it: each round
/// re-observes and re-pins (F11), then the barrier refuses `unavailable`.
pub const RETIRE_FREEZE_ATTEMPTS: usize = 5;

/// The interactive door's retirement op id: the first 26 hex digits of
/// `sha256("interactive-retire:" + uid)` (reference-auth-service §3.9), derived so that every
/// retry of one lifecycle's retirement resumes one operation.
pub fn interactive_retirement_op_id(uid: &LifecycleUid) -> Result<OpId, EpError> {
    derived_op_id("interactive-retire:", uid)
}

/// The managed lifecycle's one retirement op id, `managedRetirementOpId(uid)`: the first 26 hex
/// digits of `sha256("retire:" + uid)`. The manager's rail and the host's door both derive it,
/// so they create or resume the same operation (F49).
pub fn managed_retirement_op_id(uid: &LifecycleUid) -> Result<OpId, EpError> {
    derived_op_id("retire:", uid)
}

fn derived_op_id(domain: &str, uid: &LifecycleUid) -> Result<OpId, EpError> {
    let hex = Digest::of(format!("{domain}{uid}").as_bytes()).hex();
    OpId::parse(hex.get(..26).unwrap_or_default()).map_err(EpError::stored)
}

/// What a retire door answers (`{retired, lifecycleUid, notStarted?, alreadyRetired?}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retirement {
    pub retired: bool,
    pub lifecycle_uid: LifecycleUid,
    /// No incarnation at this uid was ever current under the alias, or a retired predecessor
    /// is: nothing to retire.
    pub not_started: bool,
    /// The head was already retired at this uid: nothing was written.
    pub already_retired: bool,
}

/// Retires the incarnation `(owner, actor, lifecycle_uid)` under `op_id` (the plane's
/// `retireInteractiveLifecycle` / `retireManagedLifecycle` after their door prechecks).
///
/// Outcome table (reference-auth-service §3.9), from a leader read of the head:
/// * head absent → `not_started`;
/// * head at another uid → `not_started` when that head is retired, else `conflict` (a live
///   or retiring successor is not this request's to retire);
/// * head retired at this uid → `already_retired`;
/// * head active, or retiring under this op, at this uid → the barrier below, then `retired`.
///   A head retiring under another op is `conflict` (one retirement per lifecycle, F49).
///
/// The barrier (F47, in order; the plane runs no obligation drain and no pool cleaner, so
/// steps 5–8 of F47 have nothing to act on here):
/// 1. **G7** freeze the open gate under `{opId, kind: "retirement"}`, CAS at the observed
///    revision, FIRST so a staged mint loses (F21); our own freeze resumes; a freeze or
///    terminal of any other op is `conflict` / `permission-denied` (F14, G10).
/// 2. **H4** head `active → retiring` bound to the op, revision-pinned (F48).
/// 3. revoke every active `cred.<uid>.` row (F26, F47 (3)), enumerated after the freeze.
/// 4. verified eviction of every holder of the family plus the alias principal (F47 (4)); an
///    unverified one refuses `unavailable` and leaves the gate frozen and the head retiring,
///    so nothing mints and the alias is not replaceable (F50) until a rerun verifies.
/// 5. `frontier.<uid>` create-only under the op (F47 (9), §2.7), G8's precondition.
/// 6. **G8** gate `frozen → retired`, op-pinned.
/// 7. **H5** head `retiring → retired`, op-pinned; only now is the alias replaceable.
///
/// Every write is settled by a leader read-back.
#[derive(Debug, Clone)]
pub struct RetireLifecycle {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub lifecycle_uid: LifecycleUid,
    pub op_id: OpId,
    /// The plane claim the family enumeration runs under ([`sealed_scan`]): a plane that lost
    /// its claim never revokes or evicts from a listing another plane's store state may have
    /// outrun. `None` only where no plane claim exists (models, one-shot commands).
    pub guard: Option<ClaimHold>,
}

impl Script for RetireLifecycle {
    type Output = Retirement;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Retirement, Halt> {
        let uid = &self.lifecycle_uid;
        let head = read_head(cx, &self.owner, &self.actor)?;
        let outcome = |retired, not_started, already_retired| Retirement {
            retired,
            lifecycle_uid: uid.clone(),
            not_started,
            already_retired,
        };
        let head = match head {
            None => return Ok(outcome(false, true, false)),
            Some(h) if h.row.lifecycle_uid() != uid => {
                if h.row.state() == HeadState::Retired {
                    return Ok(outcome(false, true, false));
                }
                return Err(EpError::conflict(format!(
                    "lifecycle \"{}/{}\" {}, not {uid}; a current or retiring incarnation at \
                     another uid is not this request's to retire",
                    self.owner,
                    self.actor,
                    describe(Some(&h))
                ))
                .into());
            }
            Some(h) if h.row.state() == HeadState::Retired => {
                return Ok(outcome(true, false, true))
            }
            Some(h) => h,
        };
        if let Some(other) = head.row.retirement_op().filter(|op| **op != self.op_id) {
            return Err(EpError::conflict(format!(
                "lifecycle \"{}/{}\" is retiring at uid {uid} under operation {other}, not {}; a \
                 lifecycle has exactly one retirement operation (F49)",
                self.owner, self.actor, self.op_id
            ))
            .into());
        }
        let gate = self.freeze(cx, &head)?;
        if !gate.row.is_retirement_of(&self.op_id, GateState::Retired) {
            let head = self.begin_retiring(cx, head)?;
            if self.read_frontier(cx)?.is_none() {
                self.contain(cx, &head.row)?;
                self.record_frontier(cx)?;
            }
            self.retire_gate(cx)?;
        } else if self.read_frontier(cx)?.is_none() {
            return Err(EpError::internal(format!(
                "the issuance gate {} is retired by {} but {} is absent; the frontier precedes \
                 the gate terminal (G8), so this is corruption",
                gate.row.key(),
                self.op_id,
                keys::frontier(uid)
            ))
            .into());
        }
        self.complete_head(cx)?;
        Ok(outcome(true, false, false))
    }
}

impl RetireLifecycle {
    /// Step 1 (G7, G10): the gate frozen or retired by this op, freezing an open one. The head
    /// read before is the currency guard: an open gate is frozen only under a head active at
    /// this uid, so a stale request never freezes a gate it may not retire.
    fn freeze(
        &self,
        cx: &mut Ctx<'_>,
        head: &Versioned<LifecycleHead>,
    ) -> Result<Versioned<AgentGate>, Halt> {
        let uid = &self.lifecycle_uid;
        for _ in 0..RETIRE_FREEZE_ATTEMPTS {
            let Some(gate) = read_gate(cx, uid)? else {
                return Err(EpError::failed_precondition(format!(
                    "lifecycle {uid} has no issuance gate; nothing to retire"
                ))
                .into());
            };
            let op = &self.op_id;
            if gate.row.is_retirement_of(op, GateState::Frozen)
                || gate.row.is_retirement_of(op, GateState::Retired)
            {
                return Ok(gate);
            }
            match (gate.row.state(), gate.row.op()) {
                (GateState::Retired, other) => {
                    return Err(EpError::permission_denied(format!(
                        "the issuance gate {} was terminalized by operation {}, not {op}; a \
                         terminal retry succeeds only for its own operation (G10, F15)",
                        gate.row.key(),
                        other.map_or("<none>", |o| o.op_id().as_str())
                    ))
                    .into())
                }
                (GateState::Frozen, other) => {
                    return Err(EpError::conflict(format!(
                        "the issuance gate {} is frozen by a {} (operation {}), not this \
                         retirement {op}; one barrier at a time (F14)",
                        gate.row.key(),
                        other.map_or("<none>", |o| o.kind().as_str()),
                        other.map_or("<none>", |o| o.op_id().as_str())
                    ))
                    .into())
                }
                (GateState::Open, _) => {}
            }
            if !head.row.is_active_at(uid) {
                return Err(EpError::internal(format!(
                    "the issuance gate {} is open under a head that {}; H4 follows G7, so this \
                     is corruption",
                    gate.row.key(),
                    describe(Some(head))
                ))
                .into());
            }
            let frozen = gate.row.retirement_frozen(op)?;
            let landed = write_pinned(
                cx,
                Store::Auth,
                &frozen.key(),
                frozen.to_bytes(),
                Some(gate.revision),
                |cx| read_gate(cx, uid),
                |found| found.is_retirement_of(op, GateState::Frozen),
                &frozen,
            )?;
            if let Landed::Ours(gate) = landed {
                return Ok(gate);
            }
        }
        Err(EpError::unavailable(format!(
            "freezing the issuance gate of {uid} kept losing to concurrent movement across \
             {RETIRE_FREEZE_ATTEMPTS} rounds; nothing was frozen by this run - retry"
        ))
        .into())
    }

    /// Step 2 (H4): the head `active → retiring` under this op; a head already retiring under
    /// it is the resumed step.
    fn begin_retiring(
        &self,
        cx: &mut Ctx<'_>,
        head: Versioned<LifecycleHead>,
    ) -> Result<Versioned<LifecycleHead>, Halt> {
        let (uid, op) = (&self.lifecycle_uid, &self.op_id);
        if head.row.is_retiring_by(uid, op) {
            return Ok(head);
        }
        let next = head.row.retiring(op)?;
        let landed = cas_head(cx, &next, Some(head.revision), |found| {
            found.is_retiring_by(uid, op)
        })?;
        match landed {
            Landed::Ours(head) => Ok(head),
            Landed::Foreign => {
                let now = read_head(cx, &self.owner, &self.actor)?;
                Err(EpError::conflict(format!(
                    "the head of \"{}/{}\" moved before it could begin retiring (it {}); the \
                     gate stays frozen by {op} - retry the same retirement",
                    self.owner,
                    self.actor,
                    describe(now.as_ref())
                ))
                .into())
            }
        }
    }

    /// Steps 3–4 (F47 (3)–(4)): revoke every active row of the `cred.<uid>.` family, then
    /// verify-evict every holder the family ever named (already revoked rows included: an
    /// earlier partial run may have left their connections live) plus the alias principal.
    fn contain(&self, cx: &mut Ctx<'_>, head: &LifecycleHead) -> Result<(), Halt> {
        let prefix = keys::cred_family_prefix(&self.lifecycle_uid);
        let family = sealed_scan(cx, self.guard.as_ref(), |cx| {
            barrier::enumerate_prefix(cx, prefix)
        })?;
        if let Some(foreign) = family
            .iter()
            .find(|r| r.row.lifecycle_uid() != &self.lifecycle_uid)
        {
            return Err(EpError::internal(format!(
                "ledger row {} binds lifecycle {}; a row under cred.{}. that names another uid \
                 is corruption",
                foreign.key,
                foreign.row.lifecycle_uid(),
                self.lifecycle_uid
            ))
            .into());
        }
        barrier::revoke_active(cx, &family)?;
        let holders: BTreeSet<Principal> = family
            .iter()
            .map(|r: &FamilyRow| r.row.holder_principal().clone())
            .chain(std::iter::once(head.principal()))
            .collect();
        let holders: Vec<Principal> = holders.into_iter().collect();
        let mut unverified = 0;
        for chunk in holders.chunks(EVICT_PRINCIPALS_MAX) {
            let verdicts = cx.evict(chunk.to_vec())?;
            unverified += verdicts.iter().filter(|gone| !**gone).count();
        }
        if unverified > 0 {
            return Err(EpError::unavailable(format!(
                "eviction of lifecycle {} was not verified for {unverified} of {} holder(s); the \
                 credentials stay revoked, the gate stays frozen and the alias is not \
                 replaceable (F50) - rerun the same retirement {} once eviction can be verified",
                self.lifecycle_uid,
                holders.len(),
                self.op_id
            ))
            .into());
        }
        Ok(())
    }

    /// The frontier record, if one exists; one of another operation refuses (a frontier
    /// records once, under its own retirement).
    fn read_frontier(&self, cx: &mut Ctx<'_>) -> Result<Option<Frontier>, Halt> {
        let key = keys::frontier(&self.lifecycle_uid);
        let Some(entry) = read_never_deleted(cx, Store::Records, &key, FRONTIER_WHAT)? else {
            return Ok(None);
        };
        let found = Frontier::parse(&entry.value, &self.lifecycle_uid)?;
        if found.op_id != self.op_id {
            return Err(EpError::permission_denied(format!(
                "the frontier record {key} belongs to operation {}, not {}; a frontier records \
                 once, under its own retirement (F47)",
                found.op_id, self.op_id
            ))
            .into());
        }
        Ok(Some(found))
    }

    /// Step 5 (F47 (9)): `frontier.<uid>` create-only under this op.
    fn record_frontier(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let record = Frontier {
            lifecycle_uid: self.lifecycle_uid.clone(),
            op_id: self.op_id.clone(),
            streams: BTreeMap::new(),
        };
        let uid = &self.lifecycle_uid;
        let landed = write_pinned(
            cx,
            Store::Records,
            &keys::frontier(uid),
            record.to_bytes(),
            None,
            |cx| {
                let key = keys::frontier(uid);
                match read_never_deleted(cx, Store::Records, &key, FRONTIER_WHAT)? {
                    None => Ok(None),
                    Some(entry) => Ok(Some(Versioned {
                        row: Frontier::parse(&entry.value, uid)?,
                        revision: entry.revision,
                    })),
                }
            },
            |found| found.op_id == self.op_id,
            &record,
        )?;
        match landed {
            Landed::Ours(_) => Ok(()),
            Landed::Foreign => self.read_frontier(cx).map(|_| ()),
        }
    }

    /// Step 6 (G8): the gate `frozen → retired`, op-pinned. A gate already retired by this op
    /// is a sibling resume that got there first.
    fn retire_gate(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let (uid, op) = (&self.lifecycle_uid, &self.op_id);
        let Some(gate) = read_gate(cx, uid)? else {
            return Err(EpError::internal(format!(
                "the issuance gate of {uid} vanished before its terminal; a gate is never \
                 deleted (F9)"
            ))
            .into());
        };
        if gate.row.is_retirement_of(op, GateState::Retired) {
            return Ok(());
        }
        let retired = gate.row.retired(op)?;
        match update_gate(cx, &retired, gate.revision)? {
            Landed::Ours(_) => Ok(()),
            Landed::Foreign => Err(EpError::unavailable(format!(
                "the issuance gate {} moved under its retirement {op} before the terminal; rerun \
                 the same retirement",
                gate.row.key()
            ))
            .into()),
        }
    }

    /// Step 7 (H5): the head `retiring → retired`. A head retired at this uid, or already
    /// replaced by a successor (only a retired head is replaceable), is this op's completed
    /// step.
    fn complete_head(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let (uid, op) = (&self.lifecycle_uid, &self.op_id);
        let Some(head) = read_head(cx, &self.owner, &self.actor)? else {
            return Err(EpError::internal(format!(
                "the head of \"{}/{}\" vanished mid-retirement; a head is never deleted (F9)",
                self.owner, self.actor
            ))
            .into());
        };
        if head.row.lifecycle_uid() != uid || head.row.state() == HeadState::Retired {
            return Ok(());
        }
        let next = head.row.retired_by(op)?;
        let landed = cas_head(cx, &next, Some(head.revision), |found| {
            found.lifecycle_uid() != uid || found.state() == HeadState::Retired
        })?;
        match landed {
            Landed::Ours(_) => Ok(()),
            Landed::Foreign => Err(EpError::unavailable(format!(
                "the head of \"{}/{}\" moved under its retirement {op} before the terminal; \
                 rerun the same retirement",
                self.owner, self.actor
            ))
            .into()),
        }
    }
}

// ---- the frontier record ---------------------------------------------------------------------

const FRONTIER_WHAT: &str = "frontier record";
const FRONTIER_FIELDS: [&str; 3] = ["lifecycleUid", "opId", "streams"];

/// `frontier.<lifecycleUid>` (spec §2.7): `{ lifecycleUid, opId, streams }`, the per-stream
/// retirement cutoffs of the lifecycle's half-open interval, create-only and never deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frontier {
    lifecycle_uid: LifecycleUid,
    op_id: OpId,
    /// Stream name → last sequence at retirement. The plane's KV-only deployment has no
    /// lifecycle-bounded streams to fence, so its records carry none.
    streams: BTreeMap<String, u64>,
}

impl Frontier {
    fn to_bytes(&self) -> Vec<u8> {
        let streams = self
            .streams
            .iter()
            .fold(ObjectWriter::new(), |w, (name, seq)| w.uint(name, *seq))
            .finish();
        ObjectWriter::new()
            .string("lifecycleUid", self.lifecycle_uid.as_str())
            .string("opId", self.op_id.as_str())
            .raw("streams", &streams)
            .finish()
            .into_bytes()
    }

    /// Closed parse; the embedded uid must be the key's; every stream cutoff an unsigned
    /// integer. Every violation is `internal`.
    fn parse(bytes: &[u8], uid: &LifecycleUid) -> Result<Frontier, EpError> {
        let map = wire::parse_object(bytes, FRONTIER_WHAT)?;
        wire::reject_unknown(&map, &FRONTIER_FIELDS, FRONTIER_WHAT)?;
        let key = keys::frontier(uid);
        if wire::str_field(&map, "lifecycleUid", FRONTIER_WHAT)? != uid.as_str() {
            return Err(EpError::internal(format!(
                "the frontier record {key} embeds another lifecycleUid"
            )));
        }
        let op_id =
            OpId::parse(wire::str_field(&map, "opId", FRONTIER_WHAT)?).map_err(EpError::stored)?;
        let streams = map
            .get("streams")
            .and_then(|v| v.as_object())
            .ok_or_else(|| EpError::internal(format!("the frontier record {key} has no streams")))?
            .iter()
            .map(|(name, seq)| {
                seq.as_u64().map(|seq| (name.clone(), seq)).ok_or_else(|| {
                    EpError::internal(format!(
                        "the frontier record {key} has a non-integer cutoff for {name}"
                    ))
                })
            })
            .collect::<Result<BTreeMap<_, _>, _>>()?;
        Ok(Frontier {
            lifecycle_uid: uid.clone(),
            op_id,
            streams,
        })
    }
}
