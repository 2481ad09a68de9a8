//! The three lifecycle rows, byte-exact with the reference's writers, each with a closed parser:
//! the alias head `lifecycle.<owner>.<actor>` and the uid reservation `uid.<lifecycleUid>`
//! (records store), and the agent issuance gate `gate.<lifecycleUid>` (auth store).
//!
//! All three are never deleted (F9): [`read_never_deleted`] refuses a DEL/PURGE marker as
//! corruption, never reading it as the absence that would make a key look virgin.

use serde_json::{Map, Value};

use crate::error::EpError;
use crate::gate::{self, GateOp, GateState, Generation, OpKind, ProcessEpoch};
use crate::kv::{Entry, ReadOutcome, Revision, Store};
use crate::machine::{Ctx, Halt};
use crate::names::{
    keys, ActorToken, CredentialId, LifecycleUid, ManagerInstance, OpId, OwnerToken, Principal,
};
use crate::wire::{self, ObjectWriter};

/// A parsed row and the store revision it was read at (for a head, its `mappingRevision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    pub row: T,
    pub revision: Revision,
}

/// A leader-served read of a never-deleted key: `None` only on true absence. A DEL/PURGE marker
/// is `failed-precondition` (corruption, F9); an unserved read is `unavailable`.
pub fn read_never_deleted(
    cx: &mut Ctx<'_>,
    store: Store,
    key: &str,
    what: &str,
) -> Result<Option<Entry>, Halt> {
    never_deleted(cx.get(store, key)?, key, what)
}

/// [`read_never_deleted`]'s judgement of a read already served (one of [`Ctx::get_together`]'s).
pub fn never_deleted(outcome: ReadOutcome, key: &str, what: &str) -> Result<Option<Entry>, Halt> {
    match outcome {
        ReadOutcome::Entry(None) => Ok(None),
        ReadOutcome::Entry(Some(entry)) if entry.is_put() => Ok(Some(entry)),
        ReadOutcome::Entry(Some(entry)) => Err(EpError::failed_precondition(format!(
            "the {what} {key} carries a {} marker; it is never deleted, so the marker is \
             corruption, not absence (F9)",
            entry.operation.as_str()
        ))
        .into()),
        ReadOutcome::Unavailable(why) => Err(EpError::unavailable(format!(
            "reading the {what} {key} failed: {why}; an authority read fails closed"
        ))
        .into()),
    }
}

// ---- the agent issuance gate ----------------------------------------------------------------

/// The agent family's issuance gate `gate.<lifecycleUid>` (spec §2.2): smaller than the endpoint
/// gate (no endpoint coordinates), the same state x intent rules (F12, F13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentGate {
    lifecycle_uid: LifecycleUid,
    state: GateState,
    generation: Generation,
    op: Option<GateOp>,
}

const GATE_FIELDS: [&str; 4] = ["lifecycleUid", "state", "generation", "op"];
const GATE_WHAT: &str = "issuance gate";

impl AgentGate {
    /// The row an activation creates (G0): frozen under its activation intent at generation 0,
    /// so nothing mints before the activation's own reopen.
    pub fn activation_frozen(lifecycle_uid: LifecycleUid, op_id: OpId) -> AgentGate {
        AgentGate {
            lifecycle_uid,
            state: GateState::Frozen,
            generation: Generation(0),
            op: Some(GateOp::activation(op_id)),
        }
    }

    pub fn lifecycle_uid(&self) -> &LifecycleUid {
        &self.lifecycle_uid
    }
    pub fn state(&self) -> GateState {
        self.state
    }
    pub fn generation(&self) -> Generation {
        self.generation
    }
    pub fn op(&self) -> Option<&GateOp> {
        self.op.as_ref()
    }
    pub fn key(&self) -> String {
        keys::agent_gate(&self.lifecycle_uid)
    }

    /// The frozen activation intent this gate carries, if it is frozen by an activation.
    pub fn activation_op(&self) -> Option<&OpId> {
        match (&self.state, &self.op) {
            (GateState::Frozen, Some(op)) if op.kind() == OpKind::Activation => Some(op.op_id()),
            _ => None,
        }
    }

    /// The row the activation's reopen writes (G1): `frozen → open` at generation + 1,
    /// only by the operation that froze it (F14: `permission-denied` otherwise), never out of
    /// a retirement freeze (F13).
    pub fn reopened(&self, op_id: &OpId) -> Result<AgentGate, EpError> {
        let op = self.frozen_by(op_id, "reopen")?;
        if op.kind() == OpKind::Retirement {
            return Err(EpError::failed_precondition(format!(
                "the issuance gate {} is frozen by a retirement, which never reopens (F13)",
                self.key()
            )));
        }
        Ok(AgentGate {
            lifecycle_uid: self.lifecycle_uid.clone(),
            state: GateState::Open,
            generation: self.generation.next()?,
            op: None,
        })
    }

    /// The row the terminal barrier's first step writes (G7): `open → frozen` under the
    /// retirement intent, generation unchanged, so a mint staged against the open gate loses its
    /// finalize touch (F21). Only an open gate freezes (F13); anything else is refused before
    /// any CAS (`conflict`: another operation holds or ended it).
    pub fn retirement_frozen(&self, op_id: &OpId) -> Result<AgentGate, EpError> {
        if self.state != GateState::Open {
            return Err(EpError::conflict(format!(
                "the issuance gate {} is {}, not open; a retirement freezes only an open gate \
                 (F13)",
                self.key(),
                self.state.as_str()
            )));
        }
        Ok(AgentGate {
            state: GateState::Frozen,
            op: Some(GateOp::retirement(op_id.clone())),
            ..self.clone()
        })
    }

    /// True when this gate is frozen (G7) or retired (G8) by the retirement `op_id`.
    pub fn is_retirement_of(&self, op_id: &OpId, state: GateState) -> bool {
        self.state == state
            && self
                .op
                .as_ref()
                .is_some_and(|op| op.kind() == OpKind::Retirement && op.op_id() == op_id)
    }

    /// The row a terminalization writes (G2 for an activation orphan, G8 for a retirement):
    /// `frozen → retired`, op-pinned (F14), generation unchanged, the intent kept as audit; only
    /// an activation or a retirement terminalizes (F13).
    pub fn retired(&self, op_id: &OpId) -> Result<AgentGate, EpError> {
        let op = self.frozen_by(op_id, "terminalize")?;
        if !matches!(op.kind(), OpKind::Activation | OpKind::Retirement) {
            return Err(EpError::failed_precondition(format!(
                "the issuance gate {} is frozen by a {}, which aborts by reopening and never \
                 terminalizes (F13)",
                self.key(),
                op.kind().as_str()
            )));
        }
        Ok(AgentGate {
            state: GateState::Retired,
            ..self.clone()
        })
    }

    fn frozen_by(&self, op_id: &OpId, verb: &str) -> Result<&GateOp, EpError> {
        match (&self.state, &self.op) {
            (GateState::Frozen, Some(op)) if op.op_id() == op_id => Ok(op),
            (GateState::Frozen, Some(op)) => Err(EpError::permission_denied(format!(
                "the issuance gate {} is frozen by operation {}, not {op_id}; only that \
                 operation's executor may {verb} it (F14)",
                self.key(),
                op.op_id()
            ))),
            _ => Err(EpError::failed_precondition(format!(
                "the issuance gate {} is {}, not frozen; there is no freeze to {verb}",
                self.key(),
                self.state.as_str()
            ))),
        }
    }

    /// The reference's bytes: `lifecycleUid`, `state`, `generation`, then `op` when present.
    pub fn to_json(&self) -> String {
        let w = ObjectWriter::new()
            .string("lifecycleUid", self.lifecycle_uid.as_str())
            .string("state", self.state.as_str())
            .uint("generation", self.generation.0);
        match &self.op {
            Some(op) => w.raw("op", &op.to_json()).finish(),
            None => w.finish(),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().into_bytes()
    }

    /// Parses the gate stored at `gate.<lifecycle_uid>`. Closed schema; the embedded
    /// `lifecycleUid` must equal the key's; the state x intent rules of F12/F13. Every
    /// violation is `internal`.
    pub fn parse(bytes: &[u8], lifecycle_uid: &LifecycleUid) -> Result<AgentGate, EpError> {
        let map = wire::parse_object(bytes, GATE_WHAT)?;
        wire::reject_unknown(&map, &GATE_FIELDS, GATE_WHAT)?;
        let uid = wire::str_field(&map, "lifecycleUid", GATE_WHAT)?;
        if uid != lifecycle_uid.as_str() {
            return Err(EpError::internal(format!(
                "the issuance gate {} embeds lifecycleUid {uid:?}; a key-mismatched gate never \
                 authorizes",
                keys::agent_gate(lifecycle_uid)
            )));
        }
        let state =
            GateState::parse(wire::str_field(&map, "state", GATE_WHAT)?).ok_or_else(|| {
                EpError::internal("stored issuance gate state is not open, frozen or retired")
            })?;
        let generation = Generation(wire::uint_field(&map, "generation", GATE_WHAT)?);
        let op = map.get("op").map(GateOp::parse).transpose()?;
        gate::check_state_op(state, op.as_ref(), GATE_WHAT)?;
        Ok(AgentGate {
            lifecycle_uid: lifecycle_uid.clone(),
            state,
            generation,
            op,
        })
    }
}

/// Reads `gate.<uid>` (auth store, leader-served); `None` on true absence.
pub fn read_gate(
    cx: &mut Ctx<'_>,
    uid: &LifecycleUid,
) -> Result<Option<Versioned<AgentGate>>, Halt> {
    let key = keys::agent_gate(uid);
    let Some(entry) = read_never_deleted(cx, Store::Auth, &key, GATE_WHAT)? else {
        return Ok(None);
    };
    Ok(Some(Versioned {
        row: AgentGate::parse(&entry.value, uid)?,
        revision: entry.revision,
    }))
}

// ---- the uid reservation ---------------------------------------------------------------------

/// The space-global reservation `uid.<lifecycleUid>`: `{ owner, actor, mintedBy }`. Audit only;
/// the key's existence is the reservation (F2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidReservation {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub minted_by: ManagerInstance,
}

const RESERVATION_FIELDS: [&str; 3] = ["owner", "actor", "mintedBy"];
const RESERVATION_WHAT: &str = "uid reservation";

impl UidReservation {
    /// The reference's bytes: `owner`, `actor`, `mintedBy`.
    pub fn to_bytes(&self) -> Vec<u8> {
        ObjectWriter::new()
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("mintedBy", self.minted_by.as_str())
            .finish()
            .into_bytes()
    }

    /// Whether this reservation belongs to the alias `(owner, actor)`.
    pub fn names(&self, owner: &OwnerToken, actor: &ActorToken) -> bool {
        self.owner == *owner && self.actor == *actor
    }

    /// Closed parse: exactly the three members, each in its grammar; `internal` otherwise.
    pub fn parse(bytes: &[u8]) -> Result<UidReservation, EpError> {
        let map = wire::parse_object(bytes, RESERVATION_WHAT)?;
        wire::reject_unknown(&map, &RESERVATION_FIELDS, RESERVATION_WHAT)?;
        let field = |name| wire::str_field(&map, name, RESERVATION_WHAT);
        Ok(UidReservation {
            owner: OwnerToken::parse(field("owner")?).map_err(EpError::stored)?,
            actor: ActorToken::parse(field("actor")?).map_err(EpError::stored)?,
            minted_by: ManagerInstance::parse(field("mintedBy")?).map_err(EpError::stored)?,
        })
    }
}

/// Reads `uid.<uid>` (records store, leader-served); `None` on true absence.
pub fn read_reservation(
    cx: &mut Ctx<'_>,
    uid: &LifecycleUid,
) -> Result<Option<UidReservation>, Halt> {
    let key = keys::uid_reservation(uid);
    match read_never_deleted(cx, Store::Records, &key, RESERVATION_WHAT)? {
        None => Ok(None),
        Some(entry) => Ok(Some(UidReservation::parse(&entry.value)?)),
    }
}

// ---- the lifecycle head ----------------------------------------------------------------------

/// The head's state (spec §3.3). Only `active` is a current mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadState {
    Active,
    /// The terminal barrier's op-bound containment phase: not current, not replaceable.
    Retiring,
    /// Terminal for its uid; the alias may be re-activated with a fresh uid (H1).
    Retired,
}

impl HeadState {
    pub const fn as_str(self) -> &'static str {
        match self {
            HeadState::Active => "active",
            HeadState::Retiring => "retiring",
            HeadState::Retired => "retired",
        }
    }

    fn parse(s: &str) -> Option<HeadState> {
        [HeadState::Active, HeadState::Retiring, HeadState::Retired]
            .into_iter()
            .find(|st| st.as_str() == s)
    }
}

/// The head's optional members, in the order they were written. The reference rewrites a head
/// by spreading the stored object and appending what is new, so after a takeover cleared
/// `currentCredentialId` a later stamp lands after `lastTakeoverOpId`: keeping the stored order
/// is what keeps a rewrite byte-identical to the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Optional {
    CurrentCredentialId,
    LastTakeoverOpId,
    Op,
}

impl Optional {
    const fn field(self) -> &'static str {
        match self {
            Optional::CurrentCredentialId => "currentCredentialId",
            Optional::LastTakeoverOpId => "lastTakeoverOpId",
            Optional::Op => "op",
        }
    }
}

/// The alias head `lifecycle.<owner>.<actor>` (spec §2.7): one incarnation of an alias. Fields
/// are private so every value keeps the closed schema (op exactly at `retiring`, epoch ≥ 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleHead {
    owner: OwnerToken,
    actor: ActorToken,
    lifecycle_uid: LifecycleUid,
    manager_instance: ManagerInstance,
    process_epoch: ProcessEpoch,
    state: HeadState,
    current_credential_id: Option<CredentialId>,
    last_takeover_op_id: Option<OpId>,
    /// The retirement operation's intent; present exactly at `retiring`.
    retirement_op: Option<OpId>,
    order: Vec<Optional>,
}

const HEAD_FIELDS: [&str; 9] = [
    "owner",
    "actor",
    "lifecycleUid",
    "managerInstance",
    "processEpoch",
    "state",
    "currentCredentialId",
    "lastTakeoverOpId",
    "op",
];
const HEAD_WHAT: &str = "lifecycle head";

impl LifecycleHead {
    /// The head an activation writes (H0 over a virgin alias, H1 over a retired one): active at
    /// `lifecycle_uid`, process epoch 1, no credential stamp, no takeover stamp.
    pub fn activated(
        owner: OwnerToken,
        actor: ActorToken,
        lifecycle_uid: LifecycleUid,
        manager_instance: ManagerInstance,
    ) -> LifecycleHead {
        LifecycleHead {
            owner,
            actor,
            lifecycle_uid,
            manager_instance,
            process_epoch: ProcessEpoch(1),
            state: HeadState::Active,
            current_credential_id: None,
            last_takeover_op_id: None,
            retirement_op: None,
            order: Vec::new(),
        }
    }

    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }
    pub fn actor(&self) -> &ActorToken {
        &self.actor
    }
    pub fn lifecycle_uid(&self) -> &LifecycleUid {
        &self.lifecycle_uid
    }
    pub fn manager_instance(&self) -> &ManagerInstance {
        &self.manager_instance
    }
    pub fn process_epoch(&self) -> ProcessEpoch {
        self.process_epoch
    }
    pub fn state(&self) -> HeadState {
        self.state
    }
    pub fn current_credential_id(&self) -> Option<&CredentialId> {
        self.current_credential_id.as_ref()
    }
    pub fn last_takeover_op_id(&self) -> Option<&OpId> {
        self.last_takeover_op_id.as_ref()
    }
    pub fn retirement_op(&self) -> Option<&OpId> {
        self.retirement_op.as_ref()
    }
    /// The principal the alias connects as, `<owner>.<actor>`.
    pub fn principal(&self) -> Principal {
        Principal::new(self.owner.clone(), self.actor.clone())
    }
    pub fn key(&self) -> String {
        keys::lifecycle_head(&self.owner, &self.actor)
    }

    /// True when this head is the current mapping of `uid`: `active` at exactly that uid (the
    /// currency rule of spec §3.3: `retiring` and `retired` are no current mapping).
    pub fn is_active_at(&self, uid: &LifecycleUid) -> bool {
        self.state == HeadState::Active && self.lifecycle_uid == *uid
    }

    /// The head the root stamp writes (H3): `currentCredentialId` moves from absent to `id`
    /// only (F58); the same value is idempotent; any other value is a rotation, which only a
    /// barrier performs (`failed-precondition`). The head must be active.
    pub fn stamped(&self, id: &CredentialId) -> Result<LifecycleHead, EpError> {
        if self.state != HeadState::Active {
            return Err(EpError::failed_precondition(format!(
                "the lifecycle head {} is {}; only an active head takes a root credential stamp",
                self.key(),
                self.state.as_str()
            )));
        }
        match &self.current_credential_id {
            Some(current) if current == id => Ok(self.clone()),
            Some(current) => Err(EpError::failed_precondition(format!(
                "the lifecycle head {} already names root credential {current}; replacing it is \
                 the family-revoke barrier's job, never a stamp (F58)",
                self.key()
            ))),
            None => {
                let mut next = self.clone();
                next.current_credential_id = Some(id.clone());
                next.order.push(Optional::CurrentCredentialId);
                Ok(next)
            }
        }
    }

    /// The head the terminal barrier's containment step writes (H4): `active → retiring` bound
    /// to the retirement `op_id`, so every currency seam sees no current mapping from here on
    /// (F48). Only a head active at its own uid moves (`failed-precondition` otherwise).
    pub fn retiring(&self, op_id: &OpId) -> Result<LifecycleHead, EpError> {
        if self.state != HeadState::Active {
            return Err(EpError::failed_precondition(format!(
                "the lifecycle head {} is {}; only an active head begins a retirement (H4)",
                self.key(),
                self.state.as_str()
            )));
        }
        let mut next = self.clone();
        next.state = HeadState::Retiring;
        next.retirement_op = Some(op_id.clone());
        next.order.push(Optional::Op);
        Ok(next)
    }

    /// The head the barrier's last step writes (H5): `retiring → retired`, op-pinned to the
    /// same `op_id` (`permission-denied` for another, F14), the intent dropped.
    pub fn retired_by(&self, op_id: &OpId) -> Result<LifecycleHead, EpError> {
        match (&self.state, &self.retirement_op) {
            (HeadState::Retiring, Some(op)) if op == op_id => {
                let mut next = self.clone();
                next.state = HeadState::Retired;
                next.retirement_op = None;
                next.order.retain(|m| *m != Optional::Op);
                Ok(next)
            }
            (HeadState::Retiring, Some(op)) => Err(EpError::permission_denied(format!(
                "the lifecycle head {} is retiring under operation {op}, not {op_id}; only that \
                 operation completes it (F14)",
                self.key()
            ))),
            _ => Err(EpError::failed_precondition(format!(
                "the lifecycle head {} is {}, not retiring; there is no retirement to complete \
                 (H5)",
                self.key(),
                self.state.as_str()
            ))),
        }
    }

    /// True when this head is retiring at `uid` under the retirement `op_id`.
    pub fn is_retiring_by(&self, uid: &LifecycleUid, op_id: &OpId) -> bool {
        self.state == HeadState::Retiring
            && self.lifecycle_uid == *uid
            && self.retirement_op.as_ref() == Some(op_id)
    }

    /// The head's bytes: the six required members in the reference's activation order, then the
    /// optional ones in the order they were written.
    pub fn to_json(&self) -> String {
        let mut w = ObjectWriter::new()
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("lifecycleUid", self.lifecycle_uid.as_str())
            .string("managerInstance", self.manager_instance.as_str())
            .uint("processEpoch", self.process_epoch.0)
            .string("state", self.state.as_str());
        for member in &self.order {
            w = match member {
                Optional::CurrentCredentialId => match &self.current_credential_id {
                    Some(id) => w.string(member.field(), id.as_str()),
                    None => w,
                },
                Optional::LastTakeoverOpId => match &self.last_takeover_op_id {
                    Some(op) => w.string(member.field(), op.as_str()),
                    None => w,
                },
                Optional::Op => match &self.retirement_op {
                    Some(op) => w.raw(
                        member.field(),
                        &ObjectWriter::new()
                            .string("opId", op.as_str())
                            .string("kind", OpKind::Retirement.as_str())
                            .finish(),
                    ),
                    None => w,
                },
            };
        }
        w.finish()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().into_bytes()
    }

    /// Parses the head stored at `lifecycle.<owner>.<actor>`. Closed schema (the nested `op`
    /// too); the embedded owner and actor must equal the key's; `lifecycleUid` and
    /// `lastTakeoverOpId` in the F1 grammar; a non-empty `managerInstance`; `processEpoch` ≥ 1;
    /// `op` required at `retiring` and forbidden otherwise. Every violation is `internal`.
    pub fn parse(
        bytes: &[u8],
        owner: &OwnerToken,
        actor: &ActorToken,
    ) -> Result<LifecycleHead, EpError> {
        let key = keys::lifecycle_head(owner, actor);
        let map = wire::parse_object(bytes, HEAD_WHAT)?;
        wire::reject_unknown(&map, &HEAD_FIELDS, HEAD_WHAT)?;
        let bad = |why: &str| EpError::internal(format!("the lifecycle head {key} {why}"));
        let field = |name| wire::str_field(&map, name, HEAD_WHAT);
        if field("owner")? != owner.as_str() || field("actor")? != actor.as_str() {
            return Err(bad(
                "embeds another owner or actor; a key-mismatched head never authorizes",
            ));
        }
        let lifecycle_uid = LifecycleUid::parse(field("lifecycleUid")?).map_err(EpError::stored)?;
        let manager_instance =
            ManagerInstance::parse(field("managerInstance")?).map_err(EpError::stored)?;
        let process_epoch = ProcessEpoch(wire::uint_field(&map, "processEpoch", HEAD_WHAT)?);
        if process_epoch.0 < 1 {
            return Err(bad("has processEpoch 0; an activation writes 1"));
        }
        let state = HeadState::parse(field("state")?)
            .ok_or_else(|| bad("has a state that is not active, retiring or retired"))?;
        let mut order = Vec::new();
        for name in map.keys() {
            let member = match name.as_str() {
                "currentCredentialId" => Optional::CurrentCredentialId,
                "lastTakeoverOpId" => Optional::LastTakeoverOpId,
                "op" => Optional::Op,
                _ => continue,
            };
            order.push(member);
        }
        let current_credential_id = match map.get("currentCredentialId") {
            None => None,
            Some(_) => {
                Some(CredentialId::parse(field("currentCredentialId")?).map_err(EpError::stored)?)
            }
        };
        let last_takeover_op_id = match map.get("lastTakeoverOpId") {
            None => None,
            Some(_) => Some(OpId::parse(field("lastTakeoverOpId")?).map_err(EpError::stored)?),
        };
        let retirement_op = map
            .get("op")
            .map(|op| retirement_intent(op, &key))
            .transpose()?;
        match (state, &retirement_op) {
            (HeadState::Retiring, None) => {
                return Err(bad("is retiring without its retirement op intent"))
            }
            (HeadState::Active | HeadState::Retired, Some(_)) => {
                return Err(bad(&format!(
                    "carries an op intent in state {}; only a retiring head is op-bound",
                    state.as_str()
                )))
            }
            _ => {}
        }
        Ok(LifecycleHead {
            owner: owner.clone(),
            actor: actor.clone(),
            lifecycle_uid,
            manager_instance,
            process_epoch,
            state,
            current_credential_id,
            last_takeover_op_id,
            retirement_op,
            order,
        })
    }
}

/// The head's closed `op`: exactly `{ opId, kind: "retirement" }`.
fn retirement_intent(value: &Value, key: &str) -> Result<OpId, EpError> {
    const WHAT: &str = "lifecycle head op intent";
    let map: &Map<String, Value> = value
        .as_object()
        .ok_or_else(|| EpError::internal(format!("the {WHAT} of {key} is not an object")))?;
    wire::reject_unknown(map, &["opId", "kind"], WHAT)?;
    if wire::str_field(map, "kind", WHAT)? != OpKind::Retirement.as_str() {
        return Err(EpError::internal(format!(
            "the {WHAT} of {key} is not a retirement"
        )));
    }
    OpId::parse(wire::str_field(map, "opId", WHAT)?).map_err(EpError::stored)
}

/// Reads `lifecycle.<owner>.<actor>` (records store, leader-served); `None` on true absence.
pub fn read_head(
    cx: &mut Ctx<'_>,
    owner: &OwnerToken,
    actor: &ActorToken,
) -> Result<Option<Versioned<LifecycleHead>>, Halt> {
    let key = keys::lifecycle_head(owner, actor);
    head_of(cx.get(Store::Records, &key)?, owner, actor)
}

/// [`read_head`]'s judgement of a read of `lifecycle.<owner>.<actor>` already served.
pub fn head_of(
    outcome: ReadOutcome,
    owner: &OwnerToken,
    actor: &ActorToken,
) -> Result<Option<Versioned<LifecycleHead>>, Halt> {
    let key = keys::lifecycle_head(owner, actor);
    let Some(entry) = never_deleted(outcome, &key, HEAD_WHAT)? else {
        return Ok(None);
    };
    Ok(Some(Versioned {
        row: LifecycleHead::parse(&entry.value, owner, actor)?,
        revision: entry.revision,
    }))
}
