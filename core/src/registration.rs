//! The registration ceremony (spec-fence-rules §5, reference-gate-impl §3.10–§3.11, §3.13):
//! how an endpoint instance gets — and a restart re-gets — the authority to serve.
//!
//! Observe → freeze → Phase 1 authorize under the freeze (name authority, ownership, governance
//! slot, continuity) → Phase 2 revoke + verified eviction of the whole credential family →
//! Phase 3 publish the spec → promote governance → Phase 4 reopen at the successor coordinate
//! (a re-registration advances the process epoch, fencing the predecessor).
//!
//! Failure discipline: a Phase-1 failure is a definite no-write, so the gate is abort-reopened
//! at `generation + 1` with every other coordinate unchanged (E2). From Phase 2 on nothing
//! reopens the old coordinate: the gate is left frozen for reconciliation (E4). Ambiguous writes
//! are settled by read-back first — the spec's exact bytes at a revision past the prior one, the
//! held slot's merge, the reopen's exact successor — and only an unresolved one leaves the gate
//! frozen.

use std::sync::Arc;

use crate::authority::{assert_name_authority, NameAuthority};
use crate::barrier::{self, FreezeToken};
use crate::contract::{read_closure, VerifiedClosure};
use crate::error::EpError;
use crate::gate::{
    Coordinates, EndpointGate, GateState, Generation, OpKind, ProcessEpoch, RegistrationRevision,
};
use crate::govern::{self, GovernedMap, Slot, SlotStance};
use crate::issuance::{observe_gate, GateObservation, GateRef};
use crate::kv::Revision;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, InstanceId, OpId, OwnerToken, Principal, SpaceName};
use crate::repair::{self, RepairCursor};
use crate::service::{self, RecordRead, ServiceSpec};

/// Holders one eviction call may name (the remote-manager maintenance verb takes 1 to 256).
pub const EVICT_PRINCIPALS_MAX: usize = 256;

/// What a completed registration committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// The spec key's store revision: the gate's new `registrationRevision` (F63).
    pub registration_revision: RegistrationRevision,
    /// The epoch the completing reopen committed (callers must not re-read the gate for it).
    pub process_epoch: ProcessEpoch,
    /// The generation the gate reopened at.
    pub generation: Generation,
}

/// Registers one endpoint instance: the whole ceremony as one machine.
#[derive(Debug, Clone)]
pub struct RegisterInstance {
    pub space: SpaceName,
    pub spec: ServiceSpec,
    pub instance: InstanceId,
    /// The broker-authenticated caller's owner; must be the spec's owner (F67).
    pub registrant: OwnerToken,
    pub authority: Arc<dyn NameAuthority>,
    /// This operation's id. A gate already frozen under a registration with this id is our own
    /// earlier attempt, which is resumed instead of refused (reference §7 item 17). An op id
    /// must have at most one live executor: resuming it while a partitioned predecessor still
    /// runs it lets both act on one freeze (the simulator's `SIM_RESUME_BESIDE_ZOMBIE` shows the
    /// remaining races). A restart that cannot prove its predecessor dead takes a fresh op id.
    pub op_id: OpId,
    /// Holders per eviction call, 1..=[`EVICT_PRINCIPALS_MAX`].
    pub evict_max: usize,
}

impl RegisterInstance {
    fn gate(&self) -> GateRef {
        GateRef::new(
            self.space.clone(),
            self.spec.endpoint().clone(),
            self.instance.clone(),
        )
    }
}

impl Script for RegisterInstance {
    type Output = Registered;

    /// Keeps F13/F14 (freeze and reopen op-pinned and token-pinned), F61/F62/F67 (name
    /// authority under the freeze, stable ownership, registrant = owner), F64 (the governance
    /// slot), F65 (governed-trait continuity), F66 (one declaration per command; virtual
    /// endpoints journal-only), F68 (revoke + verify-evict the whole family before the spec),
    /// F69 (a re-registration advances the epoch), Q-13 (generation +1 on every reopen).
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Registered, Halt> {
        self.check_call()?;
        let gate = self.gate();
        // Every step below is memoized once it finished (`cx.sub`): the script replays from
        // the top after each of its effects, so an unmemoized step is re-run (rows re-parsed,
        // closures re-verified, bytes re-serialized) once per later effect of the ceremony.
        let observed = cx.sub(|cx| observe_gate(cx, &gate))?;
        let Some(observed) = observed.as_ref() else {
            return Err(EpError::failed_precondition(format!(
                "gate {} does not exist; an instance's gate is created by its provisioner \
                 before it registers",
                gate.key()
            ))
            .into());
        };
        let resuming = is_ours(&observed.gate, &self.op_id);
        let token = self.freeze(cx, &gate, observed, resuming)?;
        let frozen = &observed.gate;
        if resuming {
            if let Some(done) = self.resume(cx, &gate, token, frozen)? {
                return Ok(done);
            }
        }
        let authorized = match cx
            .recover(|cx| cx.sub(|cx| self.authorize(cx, &gate, frozen, resuming)))?
        {
            Ok(authorized) => authorized,
            Err(cause) if resuming => {
                return Err(cause
                    .with_note("the resumed registration's gate stays frozen for reconciliation")
                    .into())
            }
            Err(cause) => return abort_reopen(cx, &gate, &self.op_id, token, frozen, cause),
        };
        let eviction = cx
            .recover(|cx| cx.sub(|cx| contain(cx, &gate, &self.op_id, token, self.evict_max)))?
            .map_err(|e| left_frozen(e, "could not revoke + verify-evict the credential family"))?;
        self.require_freeze_stands(cx, &gate, token)?;
        let spec_revision = self.publish(cx, &gate, frozen, &authorized)?;
        let successor = self.reopen(cx, &gate, token, frozen, &authorized, spec_revision)?;
        // Best effort: a slot left behind the reopened gate is harmless (F64).
        cx.recover(|cx| {
            govern::release_held(cx, &gate.endpoint, &self.instance, frozen.generation())
        })?
        .ok();
        if let Some(revision) = eviction.cursor_revision {
            // Best effort: a cursor is bound to one freeze token and any later freeze has
            // another.
            cx.recover(|cx| repair::delete_cursor(cx, &gate, revision))?
                .ok();
        }
        Ok(Registered {
            registration_revision: successor.registration_revision,
            process_epoch: successor.process_epoch,
            generation: successor.generation,
        })
    }
}

impl RegisterInstance {
    /// The call's own preconditions, before any effect: an eviction batch within bounds, and a
    /// registrant that owns the spec (F67).
    fn check_call(&self) -> Result<(), Halt> {
        if !(1..=EVICT_PRINCIPALS_MAX).contains(&self.evict_max) {
            return Err(EpError::internal(format!(
                "evict_max must be 1..={EVICT_PRINCIPALS_MAX}, not {}",
                self.evict_max
            ))
            .into());
        }
        if self.registrant != *self.spec.owner() {
            return Err(EpError::permission_denied(format!(
                "registrant {} is not the spec's owner {}; only the descriptor owner registers \
                 an endpoint instance (F67)",
                self.registrant,
                self.spec.owner()
            ))
            .into());
        }
        Ok(())
    }

    /// The freeze this registration runs under (F13): its own, when it resumes a freeze of its
    /// op id, else a fresh one over the open gate.
    fn freeze(
        &self,
        cx: &mut Ctx<'_>,
        gate: &GateRef,
        observed: &GateObservation,
        resuming: bool,
    ) -> Result<FreezeToken, Halt> {
        if observed.gate.state() != GateState::Open && !resuming {
            return Err(blocked(gate, &observed.gate).into());
        }
        if resuming {
            return Ok(FreezeToken(observed.revision));
        }
        let token = cx
            .sub(|cx| barrier::freeze(cx, gate, &self.op_id, observed))?
            .ok_or_else(|| {
                EpError::conflict(format!(
                    "a concurrent barrier froze gate {} first; re-observe and re-decide",
                    gate.key()
                ))
            })?;
        Ok(token)
    }

    /// A resumed freeze whose spec already advanced is completed from that spec (F14);
    /// `None` when the ceremony must run on.
    fn resume(
        &self,
        cx: &mut Ctx<'_>,
        gate: &GateRef,
        token: FreezeToken,
        frozen: &EndpointGate,
    ) -> Result<Option<Registered>, Halt> {
        match complete_frozen_from_spec(cx, gate, &self.op_id, token, frozen)? {
            Completion::Completed(done) => {
                clear_cursor(cx, gate)?;
                Ok(Some(done))
            }
            Completion::Raced => Err(EpError::conflict(format!(
                "gate {} moved while this registration resumed its own freeze",
                gate.key()
            ))
            .into()),
            Completion::NotCompleted => Ok(None),
        }
    }

    /// Only this operation can move a gate it froze, but one op id may have two live
    /// executors (a restart resuming beside a partitioned predecessor). If the other one
    /// reopened the gate, publishing now would advance the spec under an open gate at the old
    /// coordinate (reference §7 item 9). Confirm the freeze still stands first.
    fn require_freeze_stands(
        &self,
        cx: &mut Ctx<'_>,
        gate: &GateRef,
        token: FreezeToken,
    ) -> Result<(), Halt> {
        match cx.sub(|cx| observe_gate(cx, gate))?.as_ref() {
            Some(now) if now.revision == token.0 => Ok(()),
            _ => Err(EpError::conflict(format!(
                "gate {} left this registration's freeze before the spec was published; \
                 another executor of operation {} moved it. Nothing was published",
                gate.key(),
                self.op_id
            ))
            .into()),
        }
    }

    /// Publishes the spec, then promotes the held governance slot (F64, F65); a failed
    /// promote leaves the gate frozen.
    fn publish(
        &self,
        cx: &mut Ctx<'_>,
        gate: &GateRef,
        frozen: &EndpointGate,
        authorized: &Authorized,
    ) -> Result<Revision, Halt> {
        let spec_revision =
            *cx.sub(|cx| publish_spec(cx, gate, &self.spec, &authorized.current))?;
        cx.recover(|cx| {
            cx.sub(|cx| {
                govern::promote_held(cx, &gate.endpoint, &self.instance, frozen.generation())
            })
        })?
        .map_err(|e| {
            left_frozen(
                e,
                &format!(
                    "spec published at revision {spec_revision} but the governance promote did \
                     not complete"
                ),
            )
        })?;
        Ok(spec_revision)
    }

    /// Reopens at the successor coordinate: generation + 1, the published spec's
    /// revision, and the epoch advanced for a re-registration (F69).
    fn reopen(
        &self,
        cx: &mut Ctx<'_>,
        gate: &GateRef,
        token: FreezeToken,
        frozen: &EndpointGate,
        authorized: &Authorized,
        spec_revision: Revision,
    ) -> Result<Coordinates, Halt> {
        let re_registration = !matches!(authorized.current, RecordRead::Absent);
        let epoch = if re_registration {
            frozen.process_epoch().next()?
        } else {
            frozen.process_epoch()
        };
        let successor = successor_at(frozen, RegistrationRevision(spec_revision.0), epoch)?;
        let incomplete = |why: String| {
            EpError::unavailable(format!(
                "wrote the spec at revision {spec_revision} but the reopen did not complete \
                 ({why}); the gate is left frozen for reconciliation"
            ))
        };
        match cx
            .recover(|cx| cx.sub(|cx| barrier::reopen(cx, gate, &self.op_id, token, successor)))?
            .map(|reopened| *reopened)
        {
            Ok(true) => Ok(successor),
            Ok(false) => Err(incomplete("the gate left the freeze token".into()).into()),
            Err(e) => Err(incomplete(e.to_string()).into()),
        }
    }
}

/// What Phase 1 established.
struct Authorized {
    /// The spec key as it stood: absent, a deregistration marker, or a live prior spec.
    current: RecordRead,
}

impl RegisterInstance {
    /// Phase 1: every check that decides whether this registration may proceed, made under the
    /// freeze. Its only write is the slot-take, which a following abort-reopen orphans.
    fn authorize(
        &self,
        cx: &mut Ctx<'_>,
        gate: &GateRef,
        frozen: &EndpointGate,
        resuming: bool,
    ) -> Result<Authorized, Halt> {
        let endpoint = &gate.endpoint;
        let nar = assert_name_authority(cx, self.authority.as_ref(), endpoint, self.spec.owner())?;
        if nar != frozen.name_authority_revision() {
            return Err(EpError::conflict(format!(
                "the name authority of {endpoint} is at revision {nar} but the gate is bound to \
                 {}; a name transfer raced this registration (F67)",
                frozen.name_authority_revision()
            ))
            .into());
        }
        let spec_key = keys::svc_spec(endpoint, &self.instance);
        let current = service::read_record(cx, &spec_key)?;
        if let RecordRead::Live { value, .. } = &current {
            let stored = ServiceSpec::parse(value, endpoint)?;
            if stored.owner() != self.spec.owner() {
                return Err(EpError::permission_denied(format!(
                    "instance {} of {endpoint} is registered to owner {}; a re-registration never \
                     changes ownership (F67)",
                    self.instance,
                    stored.owner()
                ))
                .into());
            }
        }
        let (head, head_revision) = govern::read_governance(cx, endpoint)?;
        let stance = govern::slot_stance(&head, &self.instance, frozen.generation(), resuming)?;
        if let SlotStance::Foreign(slot) = stance {
            let live =
                govern::observe_holder_generation(cx, &self.space, endpoint, &slot.instance)?;
            govern::assert_foreign_slot_is_orphaned(&self.space, endpoint, slot, &live)?;
        }
        let surface = self.read_surface(cx)?;
        govern::check_continuity(&head.commands, &surface)?;
        if stance != SlotStance::Resumed {
            let slot = Slot {
                instance: self.instance.clone(),
                generation: frozen.generation(),
                commands: surface,
            };
            govern::take_slot(cx, endpoint, &head, head_revision, slot)?;
        }
        Ok(Authorized { current })
    }

    /// The new surface's command → governed-trait map, read from the verified closures in spec
    /// order and document order (the order the governance head records them in). A command
    /// declared twice is refused, and a virtual endpoint must be journal-class throughout (F66).
    fn read_surface(&self, cx: &mut Ctx<'_>) -> Result<GovernedMap, Halt> {
        let mut closures: Vec<VerifiedClosure> = Vec::new();
        for digest in self.spec.cluster_digests() {
            closures.push(read_closure(cx, digest)?.into_registration()?);
        }
        let mut surface = GovernedMap::new();
        for closure in &closures {
            for (name, command) in closure.document.commands_in_order() {
                if self.spec.activation().is_some() && !command.class.is_journal() {
                    return Err(EpError::failed_precondition(format!(
                        "command {name} is {}-class, but an on-demand (virtual) endpoint serves \
                         only journal-class commands (F66)",
                        command.class.as_str()
                    ))
                    .into());
                }
                let governed = command.governed_traits().into_iter().map(str::to_owned);
                surface.declare(name.clone(), governed)?;
            }
        }
        Ok(surface)
    }
}

/// The successor coordinate of a reopen from `frozen`: generation + 1 (`internal` past
/// `u64::MAX`), the name-authority revision carried forward.
fn successor_at(
    frozen: &EndpointGate,
    registration_revision: RegistrationRevision,
    process_epoch: ProcessEpoch,
) -> Result<Coordinates, EpError> {
    Ok(Coordinates {
        generation: frozen.generation().next()?,
        process_epoch,
        registration_revision,
        name_authority_revision: frozen.name_authority_revision(),
    })
}

fn is_ours(gate: &EndpointGate, op_id: &OpId) -> bool {
    gate.state() == GateState::Frozen
        && gate
            .op()
            .is_some_and(|op| op.kind() == OpKind::Registration && op.op_id() == op_id)
}

/// The refusal for a gate that is neither open nor frozen by this operation.
fn blocked(gate: &GateRef, observed: &EndpointGate) -> EpError {
    let mut detail = serde_json::Map::new();
    detail.insert("kind".into(), "ai.cotal.ep.lifecycle-blocked".into());
    detail.insert("gateState".into(), observed.state().as_str().into());
    if let Some(op) = observed.op() {
        detail.insert("blockedOp".into(), op.kind().as_str().into());
        detail.insert("opId".into(), op.op_id().as_str().into());
    }
    if observed.state() == GateState::Retired {
        return EpError::failed_precondition(format!(
            "gate {} is retired; a retired instance never registers again (F15)",
            gate.key()
        ))
        .with_detail(detail.into());
    }
    detail.insert("remedy".into(), crate::gate::RECONCILE_COMMAND.into());
    EpError::conflict(format!(
        "gate {} is frozen by another operation; wait for it, or if its holder is gone run \
         `{}`",
        gate.key(),
        crate::gate::remedy(&gate.space, &gate.endpoint, &gate.instance)
    ))
    .with_detail(detail.into())
}

/// Reopens `frozen` after a Phase-1 failure at the unchanged coordinate (E2), then refuses with
/// the original `cause`; if the reopen itself fails, the refusal says the gate stayed frozen.
/// Never `Ok`: it only suspends or refuses.
fn abort_reopen<T>(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    op_id: &OpId,
    token: FreezeToken,
    frozen: &EndpointGate,
    cause: EpError,
) -> Result<T, Halt> {
    let reopened = cx.recover(|cx| {
        let at = successor_at(
            frozen,
            frozen.registration_revision(),
            frozen.process_epoch(),
        )?;
        barrier::reopen(cx, gate, op_id, token, at)
    })?;
    let refusal = match reopened {
        Ok(true) => cause,
        Ok(false) => cause.with_note(
            "registration aborted and the issuance gate could not be reopened (it moved); \
             reconcile the gate",
        ),
        Err(e) => cause.with_note(format!(
            "registration aborted and the issuance gate could not be reopened: {e}"
        )),
    };
    Err(refusal.into())
}

/// Phase 2 (F68): revoke every active row of the family, then verify-evict every distinct holder
/// of the WHOLE family — rows already revoked included, since a partial earlier barrier may have
/// left their connections live. Returns the eviction's progress; its cursor revision, if one was
/// written, lets the cursor be cleared after the reopen.
pub fn contain(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    op_id: &OpId,
    token: FreezeToken,
    evict_max: usize,
) -> Result<Eviction, Halt> {
    let family = barrier::enumerate_family(cx, gate)?;
    barrier::revoke_active(cx, &family)?;
    let holders: Vec<Principal> = family
        .iter()
        .map(|r| r.row.holder_principal().clone())
        .collect();
    evict_all(cx, gate, op_id, token, holders, evict_max)
}

/// How a verified eviction went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The repair cursor's revision, when one was written.
    pub cursor_revision: Option<Revision>,
    /// Every holder owed eviction, sorted.
    pub holders: Vec<Principal>,
    /// Holders a matching cursor had already verified before this attempt.
    pub verified_before: Vec<Principal>,
    /// Holders verified by this attempt.
    pub verified_now: Vec<Principal>,
}

/// Verify-evicts `holders` in chunks of `evict_max`, journaled in the repair cursor bound to this
/// freeze (F53): a matching cursor's verified holders are skipped, any mismatch starts from
/// empty, and each chunk's verified holders are saved before the chunk is judged. Nothing is
/// written for an empty holder set: there is nothing to verify. Any holder left unverified is
/// `unavailable`, reporting durable progress as "N completed, M remaining".
pub fn evict_all(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    op_id: &OpId,
    token: FreezeToken,
    holders: Vec<Principal>,
    evict_max: usize,
) -> Result<Eviction, Halt> {
    let fresh = RepairCursor::new(op_id.clone(), token.0 .0, holders)?;
    let mut eviction = Eviction {
        cursor_revision: None,
        holders: fresh.holders().to_vec(),
        verified_before: Vec::new(),
        verified_now: Vec::new(),
    };
    if fresh.holders().is_empty() {
        return Ok(eviction);
    }
    let stored = repair::load_cursor(cx, gate)?;
    let (mut cursor, mut revision) = match stored {
        Some(s) if s.cursor.matches(op_id, token.0 .0, fresh.holders()) => (s.cursor, s.revision),
        Some(stale) => {
            let revision = repair::save_cursor(cx, gate, &fresh, Some(stale.revision))?;
            (fresh, revision)
        }
        None => {
            let revision = repair::save_cursor(cx, gate, &fresh, None)?;
            (fresh, revision)
        }
    };
    eviction.verified_before = cursor.verified().to_vec();
    let pending: Vec<Principal> = cursor.unverified().cloned().collect();
    for chunk in pending.chunks(evict_max.max(1)) {
        let verdicts = cx.evict(chunk.to_vec())?;
        let gone: Vec<Principal> = chunk
            .iter()
            .zip(&verdicts)
            .filter(|(_, &v)| v)
            .map(|(p, _)| p.clone())
            .collect();
        if !gone.is_empty() {
            cursor = cursor.with_verified(&gone)?;
            revision = repair::save_cursor(cx, gate, &cursor, Some(revision))?;
            eviction.verified_now.extend(gone.iter().cloned());
        }
        if gone.len() != chunk.len() {
            return Err(EpError::unavailable(format!(
                "eviction was not verified for every holder: {} completed, {} remaining; \
                 revocations stay in place and progress is journaled in the repair cursor",
                cursor.verified().len(),
                cursor.unverified().count()
            ))
            .into());
        }
    }
    eviction.cursor_revision = Some(revision);
    Ok(eviction)
}

/// Phase 3: writes the spec over whatever stood there (a deregistration marker is overwritten
/// pinned to its revision). A failed or ambiguous write is settled by reading the key back: our
/// exact bytes at a revision other than the prior one prove the write; anything else leaves the
/// gate frozen, because reopening the old coordinate after the spec may have advanced would
/// release stale-surface credentials (reference §7 item 9).
fn publish_spec(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    spec: &ServiceSpec,
    current: &RecordRead,
) -> Result<Revision, Halt> {
    let key = keys::svc_spec(&gate.endpoint, &gate.instance);
    let bytes = spec.to_bytes();
    let (written, prior) = match current {
        RecordRead::Absent => (
            cx.recover(|cx| service::create_record(cx, &key, &bytes))?,
            Revision(0),
        ),
        RecordRead::Deleted { revision, .. } | RecordRead::Live { revision, .. } => (
            cx.recover(|cx| service::update_record(cx, &key, &bytes, *revision))?,
            *revision,
        ),
    };
    let cause = match written {
        Ok(revision) => return Ok(revision),
        Err(e) => e,
    };
    let ambiguous = |detail: String| {
        Halt::Fail(EpError::unavailable(format!(
            "the spec-write outcome is ambiguous ({}; {detail}); the gate is left frozen for \
             reconciliation",
            cause.message
        )))
    };
    match cx.recover(|cx| service::read_record(cx, &key))? {
        Ok(RecordRead::Live { value, revision }) if revision != prior && value == bytes => {
            Ok(revision)
        }
        Ok(_) => Err(ambiguous("the read-back does not show this write".into())),
        Err(e) => Err(ambiguous(format!("the read-back failed: {e}"))),
    }
}

/// How finishing a frozen registration from its committed spec went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    Completed(Registered),
    /// The spec did not advance past the gate's registration revision: nothing to complete.
    NotCompleted,
    /// The reopen lost its CAS: someone else moved the gate.
    Raced,
}

/// Finishes a frozen registration whose Phase-3 spec write committed (reference §3.11): the
/// spec key must hold a live spec past the gate's registration revision; the held slot is
/// promoted; the gate reopens at the spec's revision, advancing the epoch unless this was the
/// first registration (F69). A reopen with an unknown outcome is `unavailable`.
pub fn complete_frozen_from_spec(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    op_id: &OpId,
    token: FreezeToken,
    frozen: &EndpointGate,
) -> Result<Completion, Halt> {
    let key = keys::svc_spec(&gate.endpoint, &gate.instance);
    let (value, revision) = match service::read_record(cx, &key)? {
        RecordRead::Live { value, revision } if revision.0 > frozen.registration_revision().0 => {
            (value, revision)
        }
        _ => return Ok(Completion::NotCompleted),
    };
    ServiceSpec::parse(&value, &gate.endpoint).map_err(|e| {
        EpError::unavailable(format!(
            "the committed spec at {key} does not parse ({e}); the gate stays frozen"
        ))
    })?;
    govern::promote_held(cx, &gate.endpoint, &gate.instance, frozen.generation())?;
    let epoch = if frozen.registration_revision().0 == 0 {
        frozen.process_epoch()
    } else {
        frozen.process_epoch().next()?
    };
    let successor = successor_at(frozen, RegistrationRevision(revision.0), epoch)?;
    if !barrier::reopen(cx, gate, op_id, token, successor)? {
        return Ok(Completion::Raced);
    }
    // Best effort: a slot left behind the reopened gate is harmless (F64).
    cx.recover(|cx| govern::release_held(cx, &gate.endpoint, &gate.instance, frozen.generation()))?
        .ok();
    Ok(Completion::Completed(Registered {
        registration_revision: successor.registration_revision,
        process_epoch: successor.process_epoch,
        generation: successor.generation,
    }))
}

/// Deletes a leftover repair cursor after a completed resume; a failure is harmless (a cursor
/// is bound to one freeze token and any later freeze has another).
fn clear_cursor(cx: &mut Ctx<'_>, gate: &GateRef) -> Result<(), Halt> {
    if let Some(stored) = cx
        .recover(|cx| repair::load_cursor(cx, gate))?
        .ok()
        .flatten()
    {
        cx.recover(|cx| repair::delete_cursor(cx, gate, stored.revision))?
            .ok();
    }
    Ok(())
}

/// A failure from Phase 2 on: `unavailable`, saying what did not complete and that the gate is
/// left frozen (E4).
fn left_frozen(e: EpError, what: &str) -> EpError {
    EpError::unavailable(format!(
        "{what}; the gate is left frozen for reconciliation: {e}"
    ))
}

/// Observes the gate's current process epoch: the fresh epoch read the serve grant and the
/// status writer fence on.
pub fn read_process_epoch(cx: &mut Ctx<'_>, gate: &GateRef) -> Result<ProcessEpoch, Halt> {
    let observed: Option<GateObservation> = observe_gate(cx, gate)?;
    observed.map(|o| o.gate.process_epoch()).ok_or_else(|| {
        EpError::failed_precondition(format!("gate {} does not exist", gate.key())).into()
    })
}
