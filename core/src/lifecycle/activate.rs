//! The activation saga at a given uid (spec §3.1 G0–G2, §3.3 H0–H1; F2, F5, F18, F55–F57).

use crate::error::EpError;
use crate::gate::GateState;
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{KvRequest, Revision, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, ActorToken, LifecycleUid, ManagerInstance, OpId, OwnerToken};

use super::rows::{
    read_gate, read_head, read_reservation, AgentGate, HeadState, LifecycleHead, UidReservation,
    Versioned,
};

/// Gate/head rounds one activation makes while siblings move the same keys (the reference's
/// bound): each round re-observes the gate and re-decides.
pub const ACTIVATION_ATTEMPTS: usize = 5;

/// Activates the alias `(owner, actor)` at the caller's `lifecycle_uid` (the reference's
/// issuance activation, `activateLifecycleAtUid`), in the normative order of F55: reserve
/// `uid.<uid>` (F2, create-only) → create `gate.<uid>` frozen under an activation intent (G0) →
/// the head CAS (H0 create-only over a virgin alias, H1 pinned over a retired one) → reopen the
/// gate LAST (G1, generation 0 → 1).
///
/// * Idempotent and crash-resumable (F18, F57): a reservation of this alias is adopted, a gate
///   frozen by an activation is resumed under ITS op id (`op_entropy` mints one only for a gate
///   this run creates), an open gate under a head active at the uid is a completed activation.
/// * A head-CAS loser terminalizes its own orphan gate (G2) and its uid stays burned (F56); a
///   run that finds the alias held by another incarnation first settles such an orphan of this
///   alias, so a crash between the lost CAS and G2 still ends retired (F57).
/// * Refuses: a head active at another uid (`already-exists`, naming the takeover barrier this
///   plane does not run, F60); a retiring head (`failed-precondition`); a reservation of another
///   alias or a retired gate (`permission-denied`, F5); a gate frozen by any other operation
///   (`failed-precondition`, F14).
///
/// Every write is settled by a leader read-back ([`settle_write`]). Round trips on a virgin
/// alias: head read, reservation create, gate read, gate create, head create, gate reopen (6).
#[derive(Debug, Clone)]
pub struct ActivateLifecycle {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub lifecycle_uid: LifecycleUid,
    pub manager_instance: ManagerInstance,
    /// Entropy for the activation op id, used only when this run creates the gate.
    pub op_entropy: [u8; 20],
}

/// How an activation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActivationRun {
    /// The head was already active at the uid over an open gate: nothing was written.
    AlreadyActive,
    /// This run completed (or resumed and completed) the activation op.
    Completed(OpId),
}

/// The activated incarnation: the head active at the uid and its open gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activated {
    pub head: Versioned<LifecycleHead>,
    pub gate: Versioned<AgentGate>,
    pub run: ActivationRun,
}

/// What a settled pinned write of a never-deleted row found.
pub(super) enum Landed<T> {
    /// The row the writer wanted is there (written by it, or by a sibling that converged).
    Ours(Versioned<T>),
    /// Something else is there; the writer re-decides.
    Foreign,
}

impl Script for ActivateLifecycle {
    type Output = Activated;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Activated, Halt> {
        let uid = &self.lifecycle_uid;
        let current = read_head(cx, &self.owner, &self.actor)?;
        let mut ours = self.own_head(cx, current.as_ref())?;
        if ours.is_none() {
            self.reserve(cx)?;
        }
        for _ in 0..ACTIVATION_ATTEMPTS {
            let Some(gate) = self.observe_or_create_gate(cx)? else {
                continue;
            };
            let op_id = match gate.row.state() {
                GateState::Frozen => frozen_activation_op(&gate)?,
                GateState::Retired => {
                    return Err(EpError::permission_denied(format!(
                        "uid {uid} has a terminally retired issuance gate; a burned uid never \
                         re-activates (F5) - re-grant the actor for a fresh incarnation"
                    ))
                    .into())
                }
                GateState::Open => return self.already_open(cx, ours.as_ref(), gate),
            };
            let head = match &ours {
                Some(head) => head.clone(),
                None => {
                    let head = self.write_head(cx, current.as_ref(), &gate, &op_id)?;
                    ours = Some(head.clone());
                    head
                }
            };
            let reopened = gate.row.reopened(&op_id)?;
            if let Landed::Ours(gate) = update_gate(cx, &reopened, gate.revision)? {
                return Ok(Activated {
                    head,
                    gate,
                    run: ActivationRun::Completed(op_id),
                });
            }
        }
        Err(EpError::unavailable(format!(
            "activation of \"{}/{}\" at uid {uid} kept losing its gate and head writes to \
             concurrent movement across {ACTIVATION_ATTEMPTS} rounds; re-read and retry",
            self.owner, self.actor
        ))
        .into())
    }
}

impl ActivateLifecycle {
    /// The head this run continues from: one already active at the uid is ours; one active
    /// at another uid or retiring refuses, after settling an orphan gate of this alias (F57);
    /// none, or a retired one, is `None` (this run writes the head).
    fn own_head(
        &self,
        cx: &mut Ctx<'_>,
        current: Option<&Versioned<LifecycleHead>>,
    ) -> Result<Option<Versioned<LifecycleHead>>, Halt> {
        match current {
            Some(h) if h.row.is_active_at(&self.lifecycle_uid) => Ok(Some(h.clone())),
            Some(h) if h.row.state() == HeadState::Active => {
                self.settle_orphan(cx)?;
                Err(self.takeover_refusal(h).into())
            }
            Some(h) if h.row.state() == HeadState::Retiring => {
                self.settle_orphan(cx)?;
                Err(EpError::failed_precondition(format!(
                    "lifecycle \"{}/{}\" is retiring (op {}); a retiring alias is not \
                     replaceable until its retirement barrier completes",
                    self.owner,
                    self.actor,
                    h.row.retirement_op().map_or("<none>", OpId::as_str)
                ))
                .into())
            }
            _ => Ok(None),
        }
    }

    /// One round's gate: the stored one, or one this run creates frozen under a fresh
    /// activation op (G0). `None` when a sibling's create landed first: the round re-decides.
    fn observe_or_create_gate(
        &self,
        cx: &mut Ctx<'_>,
    ) -> Result<Option<Versioned<AgentGate>>, Halt> {
        if let Some(gate) = read_gate(cx, &self.lifecycle_uid)? {
            return Ok(Some(gate));
        }
        let born =
            AgentGate::activation_frozen(self.lifecycle_uid.clone(), OpId::mint(self.op_entropy));
        Ok(match create_gate(cx, &born)? {
            Landed::Ours(gate) => Some(gate),
            Landed::Foreign => None,
        })
    }

    /// An open gate: a completed activation when the head is active at the uid, else foreign.
    fn already_open(
        &self,
        cx: &mut Ctx<'_>,
        ours: Option<&Versioned<LifecycleHead>>,
        gate: Versioned<AgentGate>,
    ) -> Result<Activated, Halt> {
        // The saga writes the head before its reopen, so an open gate under a head
        // active at this uid is a completed activation; anything else is foreign.
        let head = match ours {
            Some(head) => Some(head.clone()),
            None => read_head(cx, &self.owner, &self.actor)?,
        };
        match head {
            Some(head) if head.row.is_active_at(&self.lifecycle_uid) => Ok(Activated {
                head,
                gate,
                run: ActivationRun::AlreadyActive,
            }),
            other => Err(EpError::failed_precondition(format!(
                "the issuance gate {} is open but the head of \"{}/{}\" {}; an \
                 activation reopens only after its head CAS, so this is foreign \
                 movement or corruption (F55)",
                gate.row.key(),
                self.owner,
                self.actor,
                describe(other.as_ref())
            ))
            .into()),
        }
    }

    fn takeover_refusal(&self, head: &Versioned<LifecycleHead>) -> EpError {
        EpError::new(
            crate::ErrorCode::AlreadyExists,
            format!(
                "lifecycle \"{}/{}\" is active at uid {}, not this grant's {}; retiring a live \
                 predecessor is the takeover barrier's job and this plane runs no takeover \
                 barrier (F60) - retire or despawn the predecessor first (an operator-granted \
                 actor: `cotal-authd actor retire {} --lifecycle-uid {}`), or grant a fresh \
                 actor name",
                self.owner,
                self.actor,
                head.row.lifecycle_uid(),
                self.lifecycle_uid,
                self.actor,
                head.row.lifecycle_uid()
            ),
        )
    }

    /// Step 1 (F2): the create-only reservation, or adoption of this alias's earlier one.
    fn reserve(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let uid = &self.lifecycle_uid;
        let key = keys::uid_reservation(uid);
        let reservation = UidReservation {
            owner: self.owner.clone(),
            actor: self.actor.clone(),
            minted_by: self.manager_instance.clone(),
        };
        let request =
            KvRequest::create_or_update(Store::Records, key.clone(), reservation.to_bytes(), None);
        let settled = settle_write(cx, &request, |cx, heard| {
            if let Heard::NotSent { why, .. } = heard {
                return Err(EpError::unavailable(format!(
                    "reserving uid {uid} failed before it was sent: {why}; nothing was written"
                ))
                .into());
            }
            Ok(match read_reservation(cx, uid)? {
                Some(found) if found.names(&self.owner, &self.actor) => Verdict::Settled(()),
                Some(found) => {
                    return Err(EpError::permission_denied(format!(
                        "uid {uid} is reserved by \"{}/{}\", not \"{}/{}\"; a uid is never \
                         adopted across aliases (F2)",
                        found.owner, found.actor, self.owner, self.actor
                    ))
                    .into())
                }
                None if matches!(heard, Heard::Unanswered(_)) => Verdict::Unmoved,
                None => {
                    return Err(EpError::conflict(format!(
                        "reserving uid {uid} lost its create-only condition, yet {key} reads \
                         back absent; re-read and retry"
                    ))
                    .into())
                }
            })
        })?;
        match settled {
            Settled::Written(_) | Settled::Judged(()) => Ok(()),
            Settled::Exhausted(_) => Err(EpError::unavailable(format!(
                "reserving uid {uid} stayed unanswered across {AMBIGUOUS_WRITE_ATTEMPTS} \
                 attempts; it may have committed"
            ))
            .into()),
        }
    }

    /// Step 3: the head CAS (H0 / H1). A lost CAS converges when the head is now active at this
    /// uid (a sibling activation of the same grant won); otherwise this run is the loser of F56:
    /// it retires its own orphan gate (G2) and refuses `conflict`.
    fn write_head(
        &self,
        cx: &mut Ctx<'_>,
        current: Option<&Versioned<LifecycleHead>>,
        gate: &Versioned<AgentGate>,
        op_id: &OpId,
    ) -> Result<Versioned<LifecycleHead>, Halt> {
        let uid = &self.lifecycle_uid;
        let next = LifecycleHead::activated(
            self.owner.clone(),
            self.actor.clone(),
            uid.clone(),
            self.manager_instance.clone(),
        );
        let pin = current.map(|h| h.revision);
        let landed = cas_head(cx, &next, pin, |found| found.is_active_at(uid))?;
        match landed {
            Landed::Ours(head) => Ok(head),
            Landed::Foreign => {
                let now = read_head(cx, &self.owner, &self.actor)?;
                retire_orphan(cx, gate, op_id)?;
                Err(EpError::conflict(format!(
                    "activation of \"{}/{}\" at uid {uid} lost the head CAS (the head {}); this \
                     activation's uid is burned and its gate retired (F56)",
                    self.owner,
                    self.actor,
                    describe(now.as_ref())
                ))
                .into())
            }
        }
    }

    /// The resume half of F57 for a run that finds the alias held by another incarnation: an
    /// activation gate of THIS alias's reservation still frozen is an orphan whose head CAS can
    /// no longer win, so it is retired (G2). Anything else is left alone.
    fn settle_orphan(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let uid = &self.lifecycle_uid;
        let Some(gate) = read_gate(cx, uid)? else {
            return Ok(());
        };
        let Some(op_id) = gate.row.activation_op().cloned() else {
            return Ok(());
        };
        match read_reservation(cx, uid)? {
            Some(found) if found.names(&self.owner, &self.actor) => {
                retire_orphan(cx, &gate, &op_id)
            }
            _ => Ok(()),
        }
    }
}

/// G2: retires this op's own frozen activation gate, op-pinned; the uid stays burned.
fn retire_orphan(cx: &mut Ctx<'_>, gate: &Versioned<AgentGate>, op_id: &OpId) -> Result<(), Halt> {
    let retired = gate.row.retired(op_id)?;
    match update_gate(cx, &retired, gate.revision)? {
        Landed::Ours(_) => Ok(()),
        Landed::Foreign => Err(EpError::unavailable(format!(
            "the orphan issuance gate {} moved before its activation op {op_id} could retire it; \
             running the activation again settles it",
            gate.row.key()
        ))
        .into()),
    }
}

/// A frozen gate's activation op, resumed under its own id (F18); a gate frozen by any other
/// operation is a barrier in flight, which activation neither adopts nor overrides (F14).
fn frozen_activation_op(gate: &Versioned<AgentGate>) -> Result<OpId, EpError> {
    gate.row.activation_op().cloned().ok_or_else(|| {
        EpError::failed_precondition(format!(
            "the issuance gate {} is frozen by a {} (op {}); a barrier is in flight, \
             and activation neither adopts nor overrides it (F14)",
            gate.row.key(),
            gate.row.op().map_or("<none>", |op| op.kind().as_str()),
            gate.row.op().map_or("<none>", |op| op.op_id().as_str()),
        ))
    })
}

/// G0: the create-only gate, settled by read-back (our exact frozen row is ours).
fn create_gate(cx: &mut Ctx<'_>, born: &AgentGate) -> Result<Landed<AgentGate>, Halt> {
    let uid = born.lifecycle_uid();
    write_pinned(
        cx,
        Store::Auth,
        &born.key(),
        born.to_bytes(),
        None,
        |cx| read_gate(cx, uid),
        |found| found == born,
        born,
    )
}

/// A pinned gate rewrite (G1, G2), settled by read-back: our exact successor row is ours (a
/// sibling's identical successor converges).
pub(super) fn update_gate(
    cx: &mut Ctx<'_>,
    next: &AgentGate,
    pin: Revision,
) -> Result<Landed<AgentGate>, Halt> {
    let uid = next.lifecycle_uid();
    write_pinned(
        cx,
        Store::Auth,
        &next.key(),
        next.to_bytes(),
        Some(pin),
        |cx| read_gate(cx, uid),
        |found| found == next,
        next,
    )
}

/// A head CAS (H1–H5) pinned to the revision the writer read (`None`: the head's create),
/// settled by reading the head back: `is_ours` says whether the head found is the one wanted.
pub(super) fn cas_head(
    cx: &mut Ctx<'_>,
    next: &LifecycleHead,
    pin: Option<Revision>,
    is_ours: impl Fn(&LifecycleHead) -> bool,
) -> Result<Landed<LifecycleHead>, Halt> {
    write_pinned(
        cx,
        Store::Records,
        &next.key(),
        next.to_bytes(),
        pin,
        |cx| read_head(cx, next.owner(), next.actor()),
        is_ours,
        next,
    )
}

/// Writes a never-deleted row create-only (`pin` = `None`) or pinned, and settles every answer
/// that is not a commit by reading the row back: `is_ours` says whether what is there is the
/// row the writer wanted; a key still at the pin after an unanswered send is sent again.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_pinned<T: Clone>(
    cx: &mut Ctx<'_>,
    store: Store,
    key: &str,
    bytes: Vec<u8>,
    pin: Option<Revision>,
    read: impl Fn(&mut Ctx<'_>) -> Result<Option<Versioned<T>>, Halt>,
    is_ours: impl Fn(&T) -> bool,
    written: &T,
) -> Result<Landed<T>, Halt> {
    let request = KvRequest::create_or_update(store, key.to_owned(), bytes, pin);
    let settled = settle_write(cx, &request, |cx, heard| {
        if let Heard::NotSent { why, .. } = heard {
            return Err(EpError::unavailable(format!(
                "writing {key} failed before it was sent: {why}; nothing was written"
            ))
            .into());
        }
        let unanswered = matches!(heard, Heard::Unanswered(_));
        Ok(match read(cx)? {
            Some(found) if is_ours(&found.row) => Verdict::Settled(Landed::Ours(found)),
            Some(found) if unanswered && Some(found.revision) == pin => Verdict::Unmoved,
            None if unanswered && pin.is_none() => Verdict::Unmoved,
            _ => Verdict::Settled(Landed::Foreign),
        })
    })?;
    match settled {
        Settled::Written(revision) => Ok(Landed::Ours(Versioned {
            row: written.clone(),
            revision,
        })),
        Settled::Judged(landed) => Ok(landed),
        Settled::Exhausted(_) => Err(EpError::unavailable(format!(
            "writing {key} stayed unanswered across {AMBIGUOUS_WRITE_ATTEMPTS} attempts; it may \
             have committed"
        ))
        .into()),
    }
}

/// A head for a refusal sentence: absent, or its state and uid.
pub(super) fn describe(head: Option<&Versioned<LifecycleHead>>) -> String {
    match head {
        None => "is absent".to_owned(),
        Some(h) => format!(
            "is {} at uid {}",
            h.row.state().as_str(),
            h.row.lifecycle_uid()
        ),
    }
}
