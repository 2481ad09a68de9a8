//! Boot crash-resume of open lifecycle operations (reference-auth-service §2.11), found from
//! the gates themselves.
//!
//! The reference keeps a durable intent row `stage.<opId>` per barrier and resumes from those.
//! This plane's only lifecycle barrier is the retirement ([`RetireLifecycle`]), and its first
//! write, the freeze, puts the operation in the gate row itself (`op: {opId, kind:
//! "retirement"}`); the `uid.<uid>` reservation names the alias. So the gates are the intents:
//! a listing of `gate.` under the plane claim finds every retirement a crash interrupted,
//! whichever step it reached, and no intent row can drift from the gate it describes.
//!
//! A retirement is owed (the reference's rule, F47, F48) when its gate is
//! * `frozen` by it: any of steps 1–5 may have run; the barrier re-reads each; or
//! * `retired` by it while the head is still at that uid and not `retired`: the crash fell
//!   between the gate terminal (G8) and the head's (H5).
//!
//! A gate a retirement holds with no head at all is corruption (a retirement freezes only under
//! its head, and heads are never deleted): it is reported, never "resumed".
//!
//! A head at another uid is a successor that replaced a completed retirement: nothing is owed.
//! Activation freezes (G0) are not resumed here: the next exchange of that grant re-enters its
//! activation, which resumes by its own op (F18).

use crate::error::EpError;
use crate::gate::{GateState, OpKind};
use crate::kv::{KeysOutcome, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::names::LifecycleUid;
use crate::plane_claim::{sealed_scan, ClaimHold};

use super::retire::RetireLifecycle;
use super::rows::{read_gate, read_head, read_reservation, HeadState};

/// The prefix every agent gate key starts with (`gate.<lifecycleUid>`).
const GATE_PREFIX: &str = "gate.";

/// What the boot found: the retirements to resume, and the gates it could not examine (each
/// said in one sentence; the boot goes on without them, fail-closed: their gates stay as
/// they are and nothing mints through a frozen one).
#[derive(Debug, Clone, Default)]
pub struct OpenOperations {
    pub retirements: Vec<RetireLifecycle>,
    pub unexamined: Vec<EpError>,
}

/// Finds the open retirements of the space (see the module doc): the `gate.` listing runs as
/// a sealed scan under `guard`, then each gate is examined as its own memoized step. Keeps
/// F47/F48 (a retirement's every step re-entered under its one op id) and F49 (the resume
/// runs the op the gate names, never a new one).
#[derive(Debug, Clone)]
pub struct FindOpenOperations {
    pub guard: Option<ClaimHold>,
}

impl Script for FindOpenOperations {
    type Output = OpenOperations;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<OpenOperations, Halt> {
        let listed = sealed_scan(cx, self.guard.as_ref(), |cx| {
            match cx.keys(Store::Auth, GATE_PREFIX)? {
                KeysOutcome::Keys(keys) => Ok(keys),
                KeysOutcome::Unavailable(why) => Err(EpError::unavailable(format!(
                    "listing the lifecycle gates failed: {why}"
                ))
                .into()),
            }
        })?;
        let mut found = OpenOperations::default();
        for key in listed {
            let Some(uid) = key.strip_prefix(GATE_PREFIX) else {
                continue;
            };
            let examined = cx.recover(|cx| {
                let uid = LifecycleUid::parse(uid).map_err(|e| {
                    EpError::internal(format!(
                        "the auth store holds the gate key {key}, which names no lifecycle uid \
                         ({})",
                        e.message
                    ))
                })?;
                cx.call(&ExamineGate {
                    uid,
                    guard: self.guard.clone(),
                })
            })?;
            match examined {
                Ok(owed) => found.retirements.extend(owed.as_ref().clone()),
                Err(e) => found.unexamined.push(e),
            }
        }
        Ok(found)
    }
}

/// One gate: the retirement it owes, if any.
#[derive(Debug, Clone)]
struct ExamineGate {
    uid: LifecycleUid,
    guard: Option<ClaimHold>,
}

impl Script for ExamineGate {
    type Output = Option<RetireLifecycle>;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Option<RetireLifecycle>, Halt> {
        let uid = &self.uid;
        let Some(gate) = read_gate(cx, uid)? else {
            // Listed, then gone: gates are never deleted, but a listing is only a hint; the
            // leader read is the truth, and an absent gate owes nothing.
            return Ok(None);
        };
        let Some(op) = gate.row.op().filter(|op| op.kind() == OpKind::Retirement) else {
            return Ok(None);
        };
        let state = gate.row.state();
        if state != GateState::Frozen && state != GateState::Retired {
            return Ok(None);
        }
        let Some(alias) = read_reservation(cx, uid)? else {
            return Err(EpError::internal(format!(
                "the issuance gate {} is held by retirement {} but uid.{uid} is absent; a gate \
                 is born only after its reservation (G0), so this is corruption",
                gate.row.key(),
                op.op_id()
            ))
            .into());
        };
        // A retirement freezes only under a head active at its uid (G7) and never deletes it
        // (F9): a gate it holds with no head at all is corruption, which no rerun can finish.
        let Some(head) = read_head(cx, &alias.owner, &alias.actor)? else {
            return Err(EpError::internal(format!(
                "the issuance gate {} is held by retirement {} but the head of \"{}/{}\" is \
                 absent; a retirement freezes only under its head and never deletes it, so \
                 this is corruption",
                gate.row.key(),
                op.op_id(),
                alias.owner,
                alias.actor
            ))
            .into());
        };
        let finished = head.row.lifecycle_uid() != uid || head.row.state() == HeadState::Retired;
        if state == GateState::Retired && finished {
            return Ok(None);
        }
        Ok(Some(RetireLifecycle {
            owner: alias.owner,
            actor: alias.actor,
            lifecycle_uid: uid.clone(),
            op_id: op.op_id().clone(),
            guard: self.guard.clone(),
        }))
    }
}
