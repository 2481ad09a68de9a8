//! The endpoint governance head `govern.<endpointToken>` (records store) and its registration slot.
//!
//! The head holds two things (reference-gate-impl §2.4):
//! * `commands` — the endpoint's *binding* governed-trait impositions per command. It only ever
//!   grows (F65): a command removed from a later surface keeps its entry as a tombstone, so a
//!   remove-then-re-add, a fresh instance or a re-registration cannot strip a governed trait.
//! * `provisional` — the registration slot: the one in-flight registration of the endpoint,
//!   stamped with the generation of the gate its holder froze. Every registration CAS-takes it
//!   under its frozen gate and holds it through spec publication and the reopen; this is the
//!   endpoint's registration linearization point (F64).
//!
//! The slot is decidable as abandoned from durable facts alone: a promote needs the slot's stamp
//! to equal the holder's *frozen* generation, a freeze keeps the generation and only a reopen
//! advances it, so a holder gate above the stamp proves the slot can never be promoted again.
//!
//! **Byte layout.** The reference writes the head with `JSON.stringify`:
//! `{"commands":{…},"provisional":{"instanceId":…,"generation":…,"commands":{…}}}` with
//! `provisional` omitted when absent. A command map is a JS object filled from a JS `Map`, so its
//! keys come out in ECMAScript property order: keys that are array indices (canonical decimal
//! integers below 2³²−1, e.g. `"7"`) first in ascending numeric order, then every other key in
//! insertion order. Insertion order is history: the stored order of the map read back, with new
//! commands appended in declaration order by a promote's merge. Commands whose governed set is
//! empty are not written. Each URN array is sorted by UTF-16 code units (JS `Array.sort`).
//! [`GovernedMap`] keeps insertion order and [`GovernedMap::to_json`] applies those rules, so a
//! head read from a reference peer and written back is byte-identical.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::error::{EpError, ErrorCode};
use crate::gate::Generation;
use crate::issuance::{observe_gate, GateRef};
use crate::kv::{KvRequest, Revision, Store, WriteOutcome};
use crate::ledger;
use crate::machine::{Ctx, Halt};
use crate::names::{keys, CommandToken, EndpointName, InstanceId, SpaceName};
use crate::wire::{self, ObjectWriter};

const WHAT: &str = "governance head";

/// Command → governed trait URNs, in the order the reference would write them back. Equality is
/// exact (order and ungoverned entries count); compare [`GovernedMap::to_json`] for "same bytes".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GovernedMap {
    entries: Vec<(CommandToken, BTreeSet<String>)>,
}

impl GovernedMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares one command of a surface with its governed URNs (possibly none). A command
    /// declared twice is an ambiguous surface (`failed-precondition`, F66); an empty URN is
    /// `bad-request`.
    pub fn declare(
        &mut self,
        command: CommandToken,
        urns: impl IntoIterator<Item = String>,
    ) -> Result<(), EpError> {
        if self.get(&command).is_some() {
            return Err(EpError::failed_precondition(format!(
                "command \"{command}\" is declared more than once across the closure; a duplicate \
                 command name is an ambiguous surface (F66)"
            )));
        }
        let urns: BTreeSet<String> = urns.into_iter().collect();
        if urns.contains("") {
            return Err(EpError::bad_request("a governed trait URN is never empty"));
        }
        self.entries.push((command, urns));
        Ok(())
    }

    pub fn get(&self, command: &CommandToken) -> Option<&BTreeSet<String>> {
        self.entries
            .iter()
            .find(|(c, _)| c == command)
            .map(|(_, urns)| urns)
    }

    /// Entries in insertion order, empty sets included.
    pub fn iter(&self) -> impl Iterator<Item = (&CommandToken, &BTreeSet<String>)> {
        self.entries.iter().map(|(c, urns)| (c, urns))
    }

    /// The promote's merge (F65): every entry of `self` in place, `next`'s URNs unioned in, and
    /// commands new to `self` appended in `next`'s order. Ungoverned commands of `next` are not
    /// recorded; nothing is ever dropped.
    #[must_use]
    pub fn merged(&self, next: &GovernedMap) -> GovernedMap {
        let mut out = self.clone();
        for (command, urns) in next.entries.iter().filter(|(_, u)| !u.is_empty()) {
            match out.entries.iter_mut().find(|(c, _)| c == command) {
                Some((_, into)) => into.extend(urns.iter().cloned()),
                None => out.entries.push((command.clone(), urns.clone())),
            }
        }
        out
    }

    /// The map's exact JSON (see the module notes for the order).
    pub fn to_json(&self) -> String {
        let mut written: Vec<&(CommandToken, BTreeSet<String>)> =
            self.entries.iter().filter(|(_, u)| !u.is_empty()).collect();
        // Stable: non-index keys keep insertion order behind the ascending index keys.
        written.sort_by_key(|(c, _)| wire::array_index(c.as_str()).map_or((1, 0), |n| (0, n)));
        written
            .into_iter()
            .fold(ObjectWriter::new(), |w, (command, urns)| {
                let mut sorted: Vec<&str> = urns.iter().map(String::as_str).collect();
                sorted.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
                w.strings(command.as_str(), sorted)
            })
            .finish()
    }

    fn parse(value: Option<&Value>, what: &str) -> Result<GovernedMap, EpError> {
        let Some(Value::Object(map)) = value else {
            return Err(EpError::internal(format!(
                "stored {WHAT} has a missing or non-object {what} command map"
            )));
        };
        let mut entries = Vec::with_capacity(map.len());
        for (command, urns) in map {
            let command = CommandToken::parse(command).map_err(EpError::stored)?;
            let urns = urns
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|u| u.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
                        .collect::<Option<BTreeSet<String>>>()
                })
                .ok_or_else(|| {
                    EpError::internal(format!(
                        "stored {WHAT} maps {what} command \"{command}\" to something other than \
                         an array of non-empty strings"
                    ))
                })?;
            entries.push((command, urns));
        }
        Ok(GovernedMap { entries })
    }
}

/// The registration slot: the in-flight registration's holder, its frozen gate generation and
/// the governed declarations it will promote once its spec publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub instance: InstanceId,
    pub generation: Generation,
    pub commands: GovernedMap,
}

/// The parsed `govern.<endpoint>` value; an absent head is the default (empty, no slot).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GovernanceHead {
    pub commands: GovernedMap,
    pub provisional: Option<Slot>,
}

impl GovernanceHead {
    /// True when the slot names `instance` stamped at `generation`.
    pub fn held_by(&self, instance: &InstanceId, generation: Generation) -> bool {
        self.provisional
            .as_ref()
            .is_some_and(|s| s.instance == *instance && s.generation == generation)
    }

    /// The head's exact bytes, as the reference writes them.
    pub fn to_json(&self) -> String {
        let w = ObjectWriter::new().raw("commands", &self.commands.to_json());
        match &self.provisional {
            None => w.finish(),
            Some(slot) => {
                let slot_json = ObjectWriter::new()
                    .string("instanceId", slot.instance.as_str())
                    .uint("generation", slot.generation.0)
                    .raw("commands", &slot.commands.to_json())
                    .finish();
                w.raw("provisional", &slot_json).finish()
            }
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().into_bytes()
    }

    /// Parses stored head bytes with a closed schema; every violation is `internal`: garbled
    /// governance state never authorizes.
    pub fn parse(bytes: &[u8]) -> Result<GovernanceHead, EpError> {
        let map = wire::parse_object(bytes, WHAT)?;
        wire::reject_unknown(&map, &["commands", "provisional"], WHAT)?;
        let commands = GovernedMap::parse(map.get("commands"), "binding")?;
        let provisional = match map.get("provisional") {
            None => None,
            Some(Value::Object(slot)) => Some(parse_slot(slot)?),
            Some(_) => {
                return Err(EpError::internal(format!(
                    "stored {WHAT} has a non-object provisional slot"
                )))
            }
        };
        Ok(GovernanceHead {
            commands,
            provisional,
        })
    }
}

fn parse_slot(slot: &Map<String, Value>) -> Result<Slot, EpError> {
    const SLOT: &str = "governance slot";
    wire::reject_unknown(slot, &["instanceId", "generation", "commands"], SLOT)?;
    Ok(Slot {
        instance: InstanceId::parse(wire::str_field(slot, "instanceId", SLOT)?)
            .map_err(EpError::stored)?,
        generation: Generation(wire::uint_field(slot, "generation", SLOT)?),
        commands: GovernedMap::parse(slot.get("commands"), "provisional")?,
    })
}

/// Leader-reads the head: absent → the empty head and no revision; a DEL/PURGE marker is
/// `failed-precondition` (a monotonic history-bearing record is never deleted, and treating a
/// marker as a virgin head would let a deletion erase every tombstone, F65); garbled bytes are
/// `internal`.
pub fn read_governance(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
) -> Result<(GovernanceHead, Option<Revision>), Halt> {
    let key = keys::govern(endpoint);
    match ledger::read(cx, Store::Records, &key)? {
        None => Ok((GovernanceHead::default(), None)),
        Some(entry) if !entry.is_put() => Err(EpError::failed_precondition(format!(
            "the governance head {key} carries a {} marker; it is never deleted, so this is \
             tampering or a storage fault: reconcile the head before registering (a deletion \
             never resets governance history, F65)",
            entry.operation.as_str()
        ))
        .into()),
        Some(entry) => Ok((GovernanceHead::parse(&entry.value)?, Some(entry.revision))),
    }
}

/// F65 continuity: for every command the binding governs that the new surface still declares,
/// every bound URN must still be declared (`permission-denied` naming the command and URN). A
/// command the surface no longer declares keeps its tombstone and does not refuse here.
pub fn check_continuity(binding: &GovernedMap, surface: &GovernedMap) -> Result<(), EpError> {
    for (command, bound) in binding.iter() {
        let Some(declared) = surface.get(command) else {
            continue;
        };
        if let Some(urn) = bound.iter().find(|u| !declared.contains(*u)) {
            return Err(EpError::permission_denied(format!(
                "registration drops governed trait \"{urn}\" from command \"{command}\", which the \
                 endpoint's governance record still imposes; a self-published descriptor cannot \
                 strip an authority-imposed annotation by re-registration, a fresh instance or a \
                 remove-then-re-add; land an authority-authorized revision (F65)"
            )));
        }
    }
    Ok(())
}

/// How the head's slot stands for a registration frozen at `frozen` (step 18 of §3.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotStance<'h> {
    /// No slot: take it.
    Vacant,
    /// A resumed registration still holds its own slot: do not take it again.
    Resumed,
    /// This instance's slot from an aborted earlier attempt (stamp below the frozen
    /// generation): the take replaces it.
    OwnOrphan,
    /// Another instance holds it: take it only if [`assert_foreign_slot_is_orphaned`] passes.
    Foreign(&'h Slot),
}

/// Classifies the slot for `instance` frozen at `frozen` (F64). A resumed registration that
/// holds its slot at `frozen` does not take it again. Any other slot is classified as for a
/// fresh run, resuming or not: a resumed run cannot tell whether its crashed predecessor reached
/// the take, and one that did not finds the head exactly as a fresh run would — vacant, its own
/// older slot left behind by a best-effort release, or another instance's (whose orphan check
/// still guards it: a slot this run took at `frozen` is never another's to reclaim while this
/// gate stands frozen there). An own slot stamped above a freeze cannot exist (`internal`).
pub fn slot_stance<'h>(
    head: &'h GovernanceHead,
    instance: &InstanceId,
    frozen: Generation,
    resuming: bool,
) -> Result<SlotStance<'h>, EpError> {
    let Some(slot) = &head.provisional else {
        return Ok(SlotStance::Vacant);
    };
    if resuming && head.held_by(instance, frozen) {
        return Ok(SlotStance::Resumed);
    }
    if slot.instance != *instance {
        return Ok(SlotStance::Foreign(slot));
    }
    if slot.generation >= frozen {
        return Err(EpError::internal(format!(
            "the governance slot is held by this very instance at generation {} while its gate \
             is frozen at {frozen}; every retry freezes at an advanced generation, so reconcile \
             the head before registering",
            slot.generation
        )));
    }
    Ok(SlotStance::OwnOrphan)
}

/// Writes `head` created (fenced against any marker) or pinned to `pin`. Not settled here:
/// every caller decides from a re-read of the head (or aborts), and none re-sends the write.
fn write_head(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
    head: &GovernanceHead,
    pin: Option<Revision>,
) -> Result<WriteOutcome, Halt> {
    cx.write(KvRequest::create_or_update(
        Store::Records,
        keys::govern(endpoint),
        head.to_bytes(),
        pin,
    ))
}

/// Why a head write did not certainly commit, for messages.
fn why(outcome: &WriteOutcome) -> String {
    match outcome {
        WriteOutcome::Ambiguous(why) | WriteOutcome::NotSent(why) => why.clone(),
        WriteOutcome::CasLost | WriteOutcome::Written(_) => {
            "the head moved under the write".to_owned()
        }
    }
}

/// Re-reads the head after a failed write; a failed read-back becomes `failure(reason)`.
fn read_back(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
    failure: impl Fn(String) -> EpError,
) -> Result<GovernanceHead, Halt> {
    match cx.recover(|cx| read_governance(cx, endpoint))? {
        Ok((head, _)) => Ok(head),
        Err(e) => Err(failure(format!("the read-back failed too: {e}")).into()),
    }
}

/// CAS-takes the slot (step 22): writes the observed binding unchanged plus `slot`, created when
/// the head was absent or pinned to the observed revision. A lost CAS is `conflict`; any other
/// failure is `unavailable` and the caller abort-reopens, which is safe even if the write landed:
/// the reopen moves the gate past the slot's stamp, orphaning it (F64, reference §7 item 10).
pub fn take_slot(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
    observed: &GovernanceHead,
    revision: Option<Revision>,
    slot: Slot,
) -> Result<Revision, Halt> {
    let taken = GovernanceHead {
        commands: observed.commands.clone(),
        provisional: Some(slot),
    };
    let refusal = match write_head(cx, endpoint, &taken, revision)? {
        WriteOutcome::Written(revision) => return Ok(revision),
        WriteOutcome::CasLost => EpError::conflict(format!(
            "a concurrent registration for endpoint \"{endpoint}\" took the governance slot first \
             (a definite no-write CAS loss); re-read and re-decide (F64)"
        )),
        WriteOutcome::NotSent(why) => EpError::unavailable(format!(
            "the governance slot-take for endpoint \"{endpoint}\" failed before it was sent \
             ({why}); nothing was written and the registration aborts"
        )),
        WriteOutcome::Ambiguous(why) => EpError::unavailable(format!(
            "the governance slot-take for endpoint \"{endpoint}\" is ambiguous ({why}); the \
             registration aborts before any spec write and the gate reopens, so a \
             committed-but-unacked slot self-orphans at the reopened generation (F64)"
        )),
    };
    Err(refusal.into())
}

/// Promotes the held slot to binding (Phase 3b): writes `binding ∪ provisional` and retains the
/// same slot, pinned to the read revision, so a concurrent deregistration still sees the slot
/// until the reopen (reference §7 item 12). No slot → nothing to do. A slot of another instance
/// or another generation is `unavailable` (the gate stays frozen). A failed write is settled by
/// read-back: still ours with the binding already equal to the merge means done; anything else
/// is `unavailable`. Idempotent, so a reconciler may re-run it (F64, F65).
pub fn promote_held(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
    instance: &InstanceId,
    frozen: Generation,
) -> Result<(), Halt> {
    let (head, revision) = read_governance(cx, endpoint)?;
    let Some(slot) = head.provisional else {
        return Ok(());
    };
    if slot.instance != *instance || slot.generation != frozen {
        return Err(EpError::unavailable(format!(
            "the governance slot for endpoint \"{endpoint}\" is held by instance \"{}\" at \
             generation {}, not by \"{instance}\" at the frozen generation {frozen}; the gate \
             stays frozen",
            slot.instance, slot.generation
        ))
        .into());
    }
    let pin = revision.ok_or_else(|| slot_without_revision(endpoint))?;
    let promoted = GovernanceHead {
        commands: head.commands.merged(&slot.commands),
        provisional: Some(slot),
    };
    let lost = match write_head(cx, endpoint, &promoted, Some(pin))? {
        WriteOutcome::Written(_) => return Ok(()),
        lost => lost,
    };
    let incomplete = |detail: String| {
        EpError::unavailable(format!(
            "the governance promote for endpoint \"{endpoint}\" did not complete ({}); the gate \
             is left frozen for reconciliation (the promote is an idempotent re-CAS of the held \
             slot){detail}",
            why(&lost)
        ))
    };
    let again = read_back(cx, endpoint, |e| incomplete(format!("; {e}")))?;
    if again.held_by(instance, frozen) && again.commands.to_json() == promoted.commands.to_json() {
        Ok(())
    } else {
        Err(incomplete(String::new()).into())
    }
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRelease {
    /// The slot was ours and is now cleared.
    Released,
    /// No slot, or not ours at this generation: nothing to release.
    NotHeld,
    /// Still ours after the retry: a harmless orphan, its stamp is behind the reopened gate.
    Leftover,
}

/// Releases the held slot after the reopen (step 32): writes the binding without `provisional`,
/// pinned. A failed write re-reads: cleared → done; still ours at `generation` → one retry; a
/// foreign slot → done. Binding impositions are never touched (F65).
pub fn release_held(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
    instance: &InstanceId,
    generation: Generation,
) -> Result<SlotRelease, Halt> {
    // Two passes, not a settle loop: each pass re-reads the head and re-pins to it, and a second
    // failure leaves a slot that is harmless behind the reopened gate.
    for _ in 0..2 {
        let (head, revision) = read_governance(cx, endpoint)?;
        if !head.held_by(instance, generation) {
            return Ok(SlotRelease::NotHeld);
        }
        let pin = revision.ok_or_else(|| slot_without_revision(endpoint))?;
        let cleared = GovernanceHead {
            commands: head.commands,
            provisional: None,
        };
        let lost = match write_head(cx, endpoint, &cleared, Some(pin))? {
            WriteOutcome::Written(_) => return Ok(SlotRelease::Released),
            lost => lost,
        };
        let again = read_back(cx, endpoint, |e| {
            EpError::unavailable(format!(
                "the issuance gate reopened but the governance slot release for endpoint \
                 \"{endpoint}\" did not complete ({}); {e}; the leftover slot is behind the live \
                 gate and does not block deregistration",
                why(&lost)
            ))
        })?;
        match &again.provisional {
            None => return Ok(SlotRelease::Released),
            Some(_) if again.held_by(instance, generation) => {}
            Some(_) => return Ok(SlotRelease::NotHeld),
        }
    }
    Ok(SlotRelease::Leftover)
}

fn slot_without_revision(endpoint: &EndpointName) -> EpError {
    EpError::internal(format!(
        "the governance head for endpoint \"{endpoint}\" has a slot but no store revision"
    ))
}

/// The `details[].kind` of every foreign-slot refusal.
pub const FOREIGN_SLOT_HELD: &str = "ai.cotal.ep.foreign-slot-held";

/// Why a foreign slot was not reclaimed (the detail's `condition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignSlotCondition {
    NoSeam,
    Unreadable,
    Garbled,
    Behind,
    InFlight,
}

impl ForeignSlotCondition {
    pub const ALL: [ForeignSlotCondition; 5] = [
        ForeignSlotCondition::NoSeam,
        ForeignSlotCondition::Unreadable,
        ForeignSlotCondition::Garbled,
        ForeignSlotCondition::Behind,
        ForeignSlotCondition::InFlight,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ForeignSlotCondition::NoSeam => "no-seam",
            ForeignSlotCondition::Unreadable => "unreadable",
            ForeignSlotCondition::Garbled => "garbled",
            ForeignSlotCondition::Behind => "behind",
            ForeignSlotCondition::InFlight => "in-flight",
        }
    }

    /// The condition of a foreign-slot refusal, read from its detail (the message is prose).
    pub fn of(error: &EpError) -> Option<ForeignSlotCondition> {
        let detail = error
            .details
            .iter()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some(FOREIGN_SLOT_HELD))?;
        let condition = detail.get("condition").and_then(Value::as_str)?;
        Self::ALL.into_iter().find(|c| c.as_str() == condition)
    }
}

/// What observing a holder's live gate generation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderGeneration {
    /// The caller has no way to observe the holder's gate.
    NoSeam,
    /// The read failed, or the gate is absent or deleted: unreadable is not absent.
    Unreadable(String),
    /// The gate was read but holds no valid unsigned generation.
    Garbled(String),
    Live(Generation),
}

/// Observes `holder`'s gate generation from the auth store (a read, never a freeze; F64). Absent
/// gates, markers and failed reads are [`HolderGeneration::Unreadable`]; a corrupt row is
/// [`HolderGeneration::Garbled`].
pub fn observe_holder_generation(
    cx: &mut Ctx<'_>,
    space: &SpaceName,
    endpoint: &EndpointName,
    holder: &InstanceId,
) -> Result<HolderGeneration, Halt> {
    let gate = GateRef::new(space.clone(), endpoint.clone(), holder.clone());
    Ok(match cx.recover(|cx| observe_gate(cx, &gate))? {
        Ok(Some(observed)) => HolderGeneration::Live(observed.gate.generation()),
        Ok(None) => HolderGeneration::Unreadable(format!("gate {} is absent", gate.key())),
        Err(e) if e.code == ErrorCode::Internal => HolderGeneration::Garbled(e.message),
        Err(e) => HolderGeneration::Unreadable(e.to_string()),
    })
}

/// The foreign-slot orphan predicate (F64; reference §3.12). Only `live > stamp` licenses a
/// reclaim: the holder's gate has reopened past the stamp, so no freeze at the stamped
/// generation exists and the promote's equality can never hold again. Every other observation
/// refuses with a [`FOREIGN_SLOT_HELD`] detail: no seam and `live == stamp` (genuinely in flight,
/// whatever the holder's liveness) are `conflict`; unreadable, garbled and behind-the-stamp
/// observations are `unavailable`. No liveness probe is consulted, by design.
pub fn assert_foreign_slot_is_orphaned(
    space: &SpaceName,
    endpoint: &EndpointName,
    slot: &Slot,
    live: &HolderGeneration,
) -> Result<(), EpError> {
    let holder = &slot.instance;
    let stamp = slot.generation;
    let held = format!(
        "a concurrent registration for endpoint \"{endpoint}\" (instance \"{holder}\") holds the \
         governance slot through its spec publication"
    );
    let refuse = |code: ErrorCode, condition: ForeignSlotCondition, message: String| {
        Err(EpError::new(code, message).with_detail(json!({
            "kind": FOREIGN_SLOT_HELD,
            "holderInstanceId": holder.as_str(),
            "condition": condition.as_str(),
        })))
    };
    let unobserved = format!(
        "{held}, and its issuance-gate generation could not be observed; refusing rather than \
         racing a registration that may still be in flight (F64)"
    );
    match live {
        HolderGeneration::NoSeam => refuse(
            ErrorCode::Conflict,
            ForeignSlotCondition::NoSeam,
            format!(
                "{held}; re-read and re-decide. This registration cannot observe that instance's \
                 issuance gate, so it cannot tell an in-flight registration from an abandoned one \
                 and refuses (F64)"
            ),
        ),
        HolderGeneration::Unreadable(why) => refuse(
            ErrorCode::Unavailable,
            ForeignSlotCondition::Unreadable,
            format!("{unobserved}: {why}"),
        ),
        HolderGeneration::Garbled(what) => refuse(
            ErrorCode::Unavailable,
            ForeignSlotCondition::Garbled,
            format!("{unobserved}: observed {what}, not an unsigned generation"),
        ),
        HolderGeneration::Live(live) if *live < stamp => refuse(
            ErrorCode::Unavailable,
            ForeignSlotCondition::Behind,
            format!(
                "{held} at generation {stamp}, ahead of its observed live gate generation {live}; \
                 refusing rather than treating an ahead or garbled observation as an abandoned \
                 slot (F64)"
            ),
        ),
        HolderGeneration::Live(live) if *live == stamp => refuse(
            ErrorCode::Conflict,
            ForeignSlotCondition::InFlight,
            format!(
                "{held}; its issuance gate is still at generation {stamp}, so that registration \
                 is IN FLIGHT and this one must wait; re-read and re-decide. If its holder is \
                 gone, reopen that instance's gate first (its own restart heals it on boot, or \
                 run: {}), which advances the generation past the slot and lets this \
                 registration reclaim it (F64)",
                crate::gate::remedy(space, endpoint, holder)
            ),
        ),
        HolderGeneration::Live(_) => Ok(()),
    }
}

/// What deregistration's slot check decided (reference §3.16 step 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeregistrationSlot {
    /// The slot holds this instance at its live generation: a registration is in flight through
    /// spec publication and reopen, so nothing may be deleted (`registration-in-flight`).
    InFlight,
    /// The stamp is behind the live gate: a leftover after a completed reopen; delete proceeds.
    Leftover,
}

/// Classifies a slot that names the instance being deregistered against that instance's live
/// gate generation. Only `stamp < live` lets the delete proceed; an unobservable generation or a
/// stamp ahead of the live gate refuses `unavailable` rather than racing a registration (F64).
pub fn deregistration_slot_check(
    endpoint: &EndpointName,
    slot: &Slot,
    live: &HolderGeneration,
) -> Result<DeregistrationSlot, EpError> {
    let at = format!("\"{endpoint}/{}\"", slot.instance);
    let live = match live {
        HolderGeneration::Live(live) => *live,
        HolderGeneration::NoSeam => return Err(unobservable(&at, "no observation seam")),
        HolderGeneration::Unreadable(why) => return Err(unobservable(&at, why)),
        HolderGeneration::Garbled(what) => return Err(unobservable(&at, what)),
    };
    match slot.generation.cmp(&live) {
        std::cmp::Ordering::Equal => Ok(DeregistrationSlot::InFlight),
        std::cmp::Ordering::Less => Ok(DeregistrationSlot::Leftover),
        std::cmp::Ordering::Greater => Err(EpError::unavailable(format!(
            "the governance slot for {at} is held at generation {}, ahead of the observed live \
             gate generation {live}; refusing the delete rather than treating an ahead or garbled \
             observation as a leftover",
            slot.generation
        ))),
    }
}

fn unobservable(at: &str, why: &str) -> EpError {
    EpError::unavailable(format!(
        "could not observe the issuance-gate generation for {at} while its governance slot is \
         held; refusing the delete rather than racing an in-flight registration: {why}"
    ))
}
