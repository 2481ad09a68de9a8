//! The endpoint issuance gate row `epgate.<endpoint>.<instanceId>` and its transitions.
//!
//! The gate is the single serialization point of an endpoint instance's authority: mint
//! finalize, freeze and reopen all CAS its KV revision. This module owns the row's closed schema
//! (reference-gate-impl §2.3, §3.19), its byte-exact serialization, and the transition rules that
//! must hold *before* any CAS is attempted (F12–F14, Q-13).

use std::fmt;

use serde_json::{Map, Value};

use crate::error::EpError;
use crate::names::{EndpointName, InstanceId, OpId, Principal, SpaceName};
use crate::wire::{self, ObjectWriter};

macro_rules! coordinate {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

coordinate!(
    /// Freeze/reopen counter: every reopen advances it by exactly 1; nothing else moves it.
    Generation
);
coordinate!(
    /// The instance's incarnation epoch; a re-registration advances it by exactly 1.
    ProcessEpoch
);

/// A coordinate that only ever advances by exactly one: its checked successor.
macro_rules! advancing {
    ($name:ident, $what:literal) => {
        impl $name {
            /// The value exactly one past this one; `internal` at `u64::MAX`, where a silent
            /// saturation would repeat a coordinate the fences rely on never repeating.
            pub fn next(self) -> Result<Self, EpError> {
                self.0.checked_add(1).map($name).ok_or_else(|| {
                    EpError::internal(concat!("the ", $what, " cannot advance past u64::MAX"))
                })
            }
        }
    };
}

advancing!(Generation, "gate generation");
advancing!(ProcessEpoch, "process epoch");

coordinate!(
    /// Store revision of the `svc…spec` key the gate was last reopened at (0 = never registered).
    RegistrationRevision
);
coordinate!(
    /// Revision of the name-authority binding the serving owner was verified at.
    NameAuthorityRevision
);

/// Mintability of a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateState {
    Open,
    Frozen,
    /// Terminal: the gate never mints again (F15).
    Retired,
}

impl GateState {
    pub const fn as_str(self) -> &'static str {
        match self {
            GateState::Open => "open",
            GateState::Frozen => "frozen",
            GateState::Retired => "retired",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<GateState> {
        [GateState::Open, GateState::Frozen, GateState::Retired]
            .into_iter()
            .find(|st| st.as_str() == s)
    }
}

/// The kind of operation that owns a frozen or retired gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Activation,
    Takeover,
    Registration,
    Retirement,
}

impl OpKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            OpKind::Activation => "activation",
            OpKind::Takeover => "takeover",
            OpKind::Registration => "registration",
            OpKind::Retirement => "retirement",
        }
    }

    fn parse(s: &str) -> Option<OpKind> {
        [
            OpKind::Activation,
            OpKind::Takeover,
            OpKind::Registration,
            OpKind::Retirement,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// Only takeover and registration intents may carry a successor summary (F17).
    const fn may_carry_successor(self) -> bool {
        matches!(self, OpKind::Takeover | OpKind::Registration)
    }

    /// Kinds that may leave a gate `retired` (F13).
    const fn may_terminalize(self) -> bool {
        matches!(self, OpKind::Activation | OpKind::Retirement)
    }
}

/// The operation intent `op` carried by a frozen or retired gate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GateOp {
    op_id: OpId,
    kind: OpKind,
    successor: Option<String>,
}

impl GateOp {
    /// An intent; refuses a successor summary on a kind that may not carry one, or an empty one.
    pub fn new(op_id: OpId, kind: OpKind, successor: Option<String>) -> Result<GateOp, EpError> {
        match &successor {
            Some(_) if !kind.may_carry_successor() => Err(EpError::bad_request(format!(
                "a {} intent carries no successor summary",
                kind.as_str()
            ))),
            Some(s) if s.is_empty() => Err(EpError::bad_request(
                "a successor summary must be a non-empty string",
            )),
            _ => Ok(GateOp {
                op_id,
                kind,
                successor,
            }),
        }
    }

    /// The activation saga's intent (G0): an activation never carries a successor (F17).
    pub fn activation(op_id: OpId) -> GateOp {
        GateOp {
            op_id,
            kind: OpKind::Activation,
            successor: None,
        }
    }

    /// The registration barrier's intent (no successor summary, as the reference writes it).
    pub fn registration(op_id: OpId) -> GateOp {
        GateOp {
            op_id,
            kind: OpKind::Registration,
            successor: None,
        }
    }

    /// The terminal barrier's intent (G7): a retirement never carries a successor (F17).
    pub fn retirement(op_id: OpId) -> GateOp {
        GateOp {
            op_id,
            kind: OpKind::Retirement,
            successor: None,
        }
    }

    pub fn op_id(&self) -> &OpId {
        &self.op_id
    }
    pub fn kind(&self) -> OpKind {
        self.kind
    }
    pub fn successor(&self) -> Option<&str> {
        self.successor.as_deref()
    }

    /// The intent's exact bytes: `opId`, `kind`, then `successor` when present (both gate
    /// families write it so).
    pub(crate) fn to_json(&self) -> String {
        let w = ObjectWriter::new()
            .string("opId", self.op_id.as_str())
            .string("kind", self.kind.as_str());
        match &self.successor {
            Some(s) => w.string("successor", s).finish(),
            None => w.finish(),
        }
    }

    pub(crate) fn parse(value: &Value) -> Result<GateOp, EpError> {
        let map = value
            .as_object()
            .ok_or_else(|| EpError::internal("stored gate op is not an object"))?;
        wire::reject_unknown(map, &["opId", "kind", "successor"], "gate op")?;
        let op_id =
            OpId::parse(wire::str_field(map, "opId", "gate op")?).map_err(EpError::stored)?;
        let kind = OpKind::parse(wire::str_field(map, "kind", "gate op")?)
            .ok_or_else(|| EpError::internal("stored gate op kind is not one of the four kinds"))?;
        let successor = match map.get("successor") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(EpError::internal(
                    "stored gate op successor is not a string",
                ))
            }
        };
        GateOp::new(op_id, kind, successor).map_err(EpError::stored)
    }
}

/// The four coordinates a reopen writes (the gate's successor coordinate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Coordinates {
    pub generation: Generation,
    pub process_epoch: ProcessEpoch,
    pub registration_revision: RegistrationRevision,
    pub name_authority_revision: NameAuthorityRevision,
}

/// One endpoint gate row. Fields are private so every value satisfies the op/state rules (F12).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EndpointGate {
    state: GateState,
    coordinates: Coordinates,
    principal: Principal,
    op: Option<GateOp>,
}

const GATE_FIELDS: [&str; 7] = [
    "state",
    "generation",
    "processEpoch",
    "registrationRevision",
    "nameAuthorityRevision",
    "principal",
    "op",
];

impl EndpointGate {
    /// The row a provisioner creates: open, every coordinate 0 (E0, Q-3). The principal must
    /// have a real owner, because it is the eviction target of every row this gate ledgers (F24).
    pub fn provisioned(principal: Principal) -> Result<EndpointGate, EpError> {
        require_real_owner(&principal)?;
        Ok(EndpointGate {
            state: GateState::Open,
            coordinates: Coordinates {
                generation: Generation(0),
                process_epoch: ProcessEpoch(0),
                registration_revision: RegistrationRevision(0),
                name_authority_revision: NameAuthorityRevision(0),
            },
            principal,
            op: None,
        })
    }

    pub fn state(&self) -> GateState {
        self.state
    }
    pub fn coordinates(&self) -> Coordinates {
        self.coordinates
    }
    pub fn generation(&self) -> Generation {
        self.coordinates.generation
    }
    pub fn process_epoch(&self) -> ProcessEpoch {
        self.coordinates.process_epoch
    }
    pub fn registration_revision(&self) -> RegistrationRevision {
        self.coordinates.registration_revision
    }
    pub fn name_authority_revision(&self) -> NameAuthorityRevision {
        self.coordinates.name_authority_revision
    }
    pub fn principal(&self) -> &Principal {
        &self.principal
    }
    pub fn op(&self) -> Option<&GateOp> {
        self.op.as_ref()
    }

    /// The row a freeze writes: `open → frozen` under `op` (E1, G3, G5, G7). Refused before any
    /// CAS unless the gate is open and the kind may freeze an open gate (F13).
    pub fn frozen(&self, op: GateOp) -> Result<EndpointGate, EpError> {
        if self.state != GateState::Open {
            return Err(EpError::conflict(format!(
                "the gate is {}, not open; only an open gate can be frozen",
                self.state.as_str()
            )));
        }
        if op.kind == OpKind::Activation {
            return Err(EpError::bad_request(
                "an activation intent never freezes an open gate (F13)",
            ));
        }
        let frozen = EndpointGate {
            state: GateState::Frozen,
            op: Some(op),
            ..self.clone()
        };
        debug_assert_eq!(
            frozen.coordinates, self.coordinates,
            "a freeze moves no coordinate"
        );
        Ok(frozen)
    }

    /// The row a reopen writes: `frozen → open` at `successor` (E2, E3, E5). Keeps F13 (a
    /// retirement freeze never reopens), F14 (only the op's own executor reopens:
    /// `permission-denied` otherwise) and Q-13 (generation advances by exactly 1). The process
    /// epoch may advance by at most 1 and no coordinate may move backwards.
    pub fn reopened(&self, op_id: &OpId, successor: Coordinates) -> Result<EndpointGate, EpError> {
        let op = match (&self.state, &self.op) {
            (GateState::Frozen, Some(op)) => op,
            _ => {
                return Err(EpError::conflict(format!(
                    "the gate is {}, not frozen; there is nothing to reopen",
                    self.state.as_str()
                )))
            }
        };
        if op.op_id != *op_id {
            return Err(EpError::permission_denied(format!(
                "the gate is frozen by operation {}, not {op_id}; only that operation's executor \
                 may reopen it (F14)",
                op.op_id
            )));
        }
        if op.kind == OpKind::Retirement {
            return Err(EpError::failed_precondition(
                "a retirement freeze never reopens; it can only terminalize (F13)",
            ));
        }
        check_successor(&self.coordinates, &successor)?;
        debug_assert_eq!(
            self.coordinates.generation.next().ok(),
            Some(successor.generation),
            "a reopen advances the generation by exactly 1 (Q-13)"
        );
        Ok(EndpointGate {
            state: GateState::Open,
            coordinates: successor,
            principal: self.principal.clone(),
            op: None,
        })
    }

    /// The row's exact bytes: provisioner field order, `op` appended last when present.
    pub fn to_json(&self) -> String {
        let c = &self.coordinates;
        let w = ObjectWriter::new()
            .string("state", self.state.as_str())
            .uint("generation", c.generation.0)
            .uint("processEpoch", c.process_epoch.0)
            .uint("registrationRevision", c.registration_revision.0)
            .uint("nameAuthorityRevision", c.name_authority_revision.0)
            .string("principal", &self.principal.key());
        match &self.op {
            Some(op) => w.raw("op", &op.to_json()).finish(),
            None => w.finish(),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().into_bytes()
    }

    /// Parses stored gate bytes with every rule of the closed schema; any violation is
    /// `internal` (the row is corrupt), never a panic.
    pub fn parse(bytes: &[u8]) -> Result<EndpointGate, EpError> {
        let map = wire::parse_object(bytes, "endpoint gate")?;
        Self::from_map(&map)
    }

    fn from_map(map: &Map<String, Value>) -> Result<EndpointGate, EpError> {
        const WHAT: &str = "endpoint gate";
        wire::reject_unknown(map, &GATE_FIELDS, WHAT)?;
        let state = GateState::parse(wire::str_field(map, "state", WHAT)?).ok_or_else(|| {
            EpError::internal("stored endpoint gate state is not open, frozen or retired")
        })?;
        let coordinates = Coordinates {
            generation: Generation(wire::uint_field(map, "generation", WHAT)?),
            process_epoch: ProcessEpoch(wire::uint_field(map, "processEpoch", WHAT)?),
            registration_revision: RegistrationRevision(wire::uint_field(
                map,
                "registrationRevision",
                WHAT,
            )?),
            name_authority_revision: NameAuthorityRevision(wire::uint_field(
                map,
                "nameAuthorityRevision",
                WHAT,
            )?),
        };
        let principal =
            Principal::parse(wire::str_field(map, "principal", WHAT)?).map_err(EpError::stored)?;
        require_real_owner(&principal).map_err(EpError::stored)?;
        let op = map.get("op").map(GateOp::parse).transpose()?;
        check_state_op(state, op.as_ref(), WHAT)?;
        Ok(EndpointGate {
            state,
            coordinates,
            principal,
            op,
        })
    }
}

/// The state x intent rule both gate families' parsers keep (F12, F13): a frozen or retired
/// gate carries its op intent, an open one none, and only an activation or a retirement leaves
/// a gate retired. Every violation is `internal`: the stored row is impossible state.
pub(crate) fn check_state_op(
    state: GateState,
    op: Option<&GateOp>,
    what: &str,
) -> Result<(), EpError> {
    match (state, op) {
        (GateState::Open, Some(_)) => Err(EpError::internal(format!(
            "stored {what} is open but carries an op intent (F12)"
        ))),
        (GateState::Frozen | GateState::Retired, None) => Err(EpError::internal(format!(
            "stored {what} is {} without an op intent (F12)",
            state.as_str()
        ))),
        (GateState::Retired, Some(op)) if !op.kind.may_terminalize() => {
            Err(EpError::internal(format!(
                "stored {what} is retired under a {} intent, which never terminalizes (F13)",
                op.kind.as_str()
            )))
        }
        _ => Ok(()),
    }
}

fn require_real_owner(principal: &Principal) -> Result<(), EpError> {
    if principal.owner().is_real_owner() {
        Ok(())
    } else {
        Err(EpError::bad_request(format!(
            "gate principal {principal} has no real owner (u_/p_ + 26 base32, or local); it could \
             not be evicted (F24)"
        )))
    }
}

fn check_successor(current: &Coordinates, next: &Coordinates) -> Result<(), EpError> {
    if current.generation.next().ok() != Some(next.generation) {
        return Err(EpError::internal(format!(
            "a reopen must advance generation by exactly 1 (Q-13): frozen at {}, successor {}",
            current.generation, next.generation
        )));
    }
    let epoch_step = next.process_epoch.0.checked_sub(current.process_epoch.0);
    if !matches!(epoch_step, Some(0 | 1)) {
        return Err(EpError::internal(format!(
            "a reopen may advance the process epoch by 0 or 1 (Q-5): frozen at {}, successor {}",
            current.process_epoch, next.process_epoch
        )));
    }
    if next.name_authority_revision < current.name_authority_revision {
        return Err(EpError::internal(
            "a reopen may not move the name-authority revision backwards",
        ));
    }
    Ok(())
}

/// The operator command that runs `crate::reconcile::ReconcileGate` (`cotal-authd gate
/// reconcile`). It lives with the gate, not the reconciler, because the registration and the
/// governed slots that refuse over a frozen gate name it too, and they sit below the reconciler.
pub const RECONCILE_COMMAND: &str = "cotal-authd gate reconcile";

/// The full command line that reconciles one instance's gate, for refusals to name.
pub fn remedy(space: &SpaceName, endpoint: &EndpointName, instance: &InstanceId) -> String {
    format!("{RECONCILE_COMMAND} --space {space} --endpoint {endpoint} --instance {instance}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advancing_coordinate_steps_by_one_and_refuses_past_the_range() {
        assert_eq!(Generation(4).next().ok(), Some(Generation(5)));
        assert_eq!(ProcessEpoch(0).next().ok(), Some(ProcessEpoch(1)));
        let e = Generation(u64::MAX).next().unwrap_err();
        assert_eq!(e.code, crate::ErrorCode::Internal);
        assert!(e.message.contains("gate generation"), "{e}");
        let e = ProcessEpoch(u64::MAX).next().unwrap_err();
        assert_eq!(e.code, crate::ErrorCode::Internal);
        assert!(e.message.contains("process epoch"), "{e}");
    }
}
