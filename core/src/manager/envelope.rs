//! What every registered-manager request shares: its coordinates, the five caller-held
//! identities and the server-derived actors.

use serde_json::{Map, Value};

use crate::error::EpError;
use crate::issuance::GateRef;
use crate::names::{
    ActorToken, EndpointName, InstanceId, LifecycleUid, OwnerToken, Principal, SpaceName,
};
use crate::wire::ObjectWriter;

use super::tokens::{RequestId, UserKey};
use super::{exactly, string};

/// The five caller-held nkeys of one manager lifecycle.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ManagerIdentities {
    pub supervisor: UserKey,
    pub executor: UserKey,
    pub serve: UserKey,
    pub goal_writer: UserKey,
    pub session_ledger: UserKey,
}

/// Wire names of the identities, in the order the reference rebuilds (and so hashes) them.
pub const IDENTITY_NAMES: [&str; 5] = [
    "supervisor",
    "executor",
    "serve",
    "goalWriter",
    "sessionLedger",
];

impl ManagerIdentities {
    /// The keys in [`IDENTITY_NAMES`] order.
    pub fn keys(&self) -> [&UserKey; 5] {
        [
            &self.supervisor,
            &self.executor,
            &self.serve,
            &self.goal_writer,
            &self.session_ledger,
        ]
    }

    pub fn to_json(&self) -> String {
        IDENTITY_NAMES
            .iter()
            .zip(self.keys())
            .fold(ObjectWriter::new(), |w, (name, key)| {
                w.raw(
                    name,
                    &ObjectWriter::new().string("id", key.as_str()).finish(),
                )
            })
            .finish()
    }
}

/// The server-derived actors of a manager instance (never client input).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ManagerActors {
    pub supervisor: String,
    pub executor: String,
    pub serve: String,
    pub goal_writer: String,
    pub session_ledger: String,
}

impl ManagerActors {
    pub fn for_instance(instance: &InstanceId) -> ManagerActors {
        let iid = instance.as_str();
        ManagerActors {
            supervisor: format!("manager_{iid}"),
            executor: format!("manager_exec_{iid}"),
            serve: format!("manager_serve_{iid}"),
            goal_writer: format!("manager_goal_{iid}"),
            session_ledger: format!("manager_session_{iid}"),
        }
    }

    pub fn to_json(&self) -> String {
        ObjectWriter::new()
            .string("supervisor", &self.supervisor)
            .string("executor", &self.executor)
            .string("serve", &self.serve)
            .string("goalWriter", &self.goal_writer)
            .string("sessionLedger", &self.session_ledger)
            .finish()
    }
}

/// The coordinates every registered-manager request shares, and all the current-registration
/// proof binds besides the owner and the gate's coordinates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ManagerEnvelope {
    pub space: SpaceName,
    /// The interactive ledger actor authenticating the request (normally `cli`).
    pub actor: ActorToken,
    pub instance_id: InstanceId,
    pub manager_lifecycle_uid: LifecycleUid,
    pub request_id: RequestId,
    pub identities: ManagerIdentities,
}

impl ManagerEnvelope {
    /// The manager instance's issuance gate `epgate.manager.<instanceId>` in the request's space.
    pub fn gate(&self) -> Result<GateRef, EpError> {
        let endpoint = EndpointName::parse("manager").map_err(EpError::stored)?;
        Ok(GateRef::new(
            self.space.clone(),
            endpoint,
            self.instance_id.clone(),
        ))
    }

    /// `<owner>.manager_serve_<instanceId>`: the only principal a manager gate may record.
    pub fn serve_principal(&self, owner: &OwnerToken) -> Result<Principal, EpError> {
        let actor = ManagerActors::for_instance(&self.instance_id).serve;
        let actor = ActorToken::parse(&actor).map_err(EpError::stored)?;
        Ok(Principal::new(owner.clone(), actor))
    }
}

/// The coordinates every registered-manager request carries (manager-service authority, run,
/// managed-agent requests), before its identities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Coordinates {
    pub space: SpaceName,
    pub actor: ActorToken,
    pub instance_id: InstanceId,
    pub manager_lifecycle_uid: LifecycleUid,
    pub request_id: RequestId,
}

impl Coordinates {
    pub(crate) fn with(self, identities: ManagerIdentities) -> ManagerEnvelope {
        ManagerEnvelope {
            space: self.space,
            actor: self.actor,
            instance_id: self.instance_id,
            manager_lifecycle_uid: self.manager_lifecycle_uid,
            request_id: self.request_id,
            identities,
        }
    }
}

/// The members every registered-manager request carries: `v`, `kind`, the coordinates
/// [`parse_coordinates`] reads, and the identities [`parse_identities`] reads.
const ENVELOPE_MEMBERS: [&str; 8] = [
    "v",
    "kind",
    "space",
    "actor",
    "instanceId",
    "managerLifecycleUid",
    "requestId",
    "identities",
];

/// A door's closed member list: the envelope's members followed by the door's `own`, built at
/// compile time so that the envelope's members are listed once. `N` must be 8 + `M`; any other
/// length fails the build.
pub(crate) const fn with_envelope<const N: usize, const M: usize>(
    own: [&'static str; M],
) -> [&'static str; N] {
    assert!(N == ENVELOPE_MEMBERS.len() + M, "member list length");
    let mut out = [""; N];
    let mut slots: &mut [&'static str] = &mut out;
    let (mut envelope, mut own): (&[&'static str], &[&'static str]) = (&ENVELOPE_MEMBERS, &own);
    while let [slot, rest @ ..] = slots {
        if let [member, more @ ..] = envelope {
            *slot = member;
            envelope = more;
        } else if let [member, more @ ..] = own {
            *slot = member;
            own = more;
        }
        slots = rest;
    }
    out
}

/// Writes the request's coordinates after `space` (and the authenticated `owner` where a door
/// places it there), in the reference's order: `actor`, `instanceId`, `managerLifecycleUid`,
/// `requestId`.
pub(crate) fn echo_coordinates(w: ObjectWriter, e: &ManagerEnvelope) -> ObjectWriter {
    w.string("actor", e.actor.as_str())
        .string("instanceId", e.instance_id.as_str())
        .string("managerLifecycleUid", e.manager_lifecycle_uid.as_str())
        .string("requestId", e.request_id.as_str())
}

/// The members an answer to a registered-manager request opens with, in the reference's order:
/// `v`, `kind`, `space`, the authenticated `owner` where the door places it there, then the
/// request's coordinates (never its identities).
pub(crate) fn echo_envelope(
    kind: &str,
    e: &ManagerEnvelope,
    owner: Option<&OwnerToken>,
) -> ObjectWriter {
    let mut w = ObjectWriter::new()
        .uint("v", 1)
        .string("kind", kind)
        .string("space", e.space.as_str());
    if let Some(owner) = owner {
        w = w.string("owner", owner.as_str());
    }
    echo_coordinates(w, e)
}

/// Parses the shared coordinates in the reference's order: all five present and non-empty
/// first, then each grammar. `refuse` words the refusal for the request being parsed (each
/// door prefixes its own name).
pub(crate) fn parse_coordinates(
    o: &Map<String, Value>,
    refuse: &dyn Fn(&str) -> EpError,
) -> Result<Coordinates, EpError> {
    let text = |key: &str| {
        string(o, key)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refuse(&format!("requires non-empty {key}")))
    };
    let (space, actor, instance_id, lifecycle_uid, request_id) = (
        text("space")?,
        text("actor")?,
        text("instanceId")?,
        text("managerLifecycleUid")?,
        text("requestId")?,
    );
    let instance_id = InstanceId::parse(instance_id)
        .map_err(|_| refuse("instanceId must be a lifecycle token ^[a-z0-9]{26,32}$"))?;
    let manager_lifecycle_uid = LifecycleUid::parse(lifecycle_uid)
        .map_err(|_| refuse("managerLifecycleUid must be a lifecycle token ^[a-z0-9]{26,32}$"))?;
    let space = SpaceName::parse(space).map_err(|e| refuse(&format!("space: {}", e.message)))?;
    let actor = ActorToken::parse(actor)
        .map_err(|_| refuse("actor must be an owner-token-grammar actor ^[A-Za-z0-9_]{1,64}$"))?;
    let request_id = RequestId::parse(request_id)
        .ok_or_else(|| refuse("requestId must be a 22-64 character idempotency token"))?;
    Ok(Coordinates {
        space,
        actor,
        instance_id,
        manager_lifecycle_uid,
        request_id,
    })
}

/// Parses `identities`: exactly the five names, each exactly `{ id }` with a user nkey.
pub(crate) fn parse_identities(
    value: Option<&Value>,
    refuse: &dyn Fn(&str) -> EpError,
) -> Result<ManagerIdentities, EpError> {
    let ids = value
        .and_then(Value::as_object)
        .ok_or_else(|| refuse("requires identities"))?;
    if ids.len() != IDENTITY_NAMES.len() || !IDENTITY_NAMES.iter().all(|n| ids.contains_key(*n)) {
        return Err(refuse(&format!(
            "identities must contain exactly {}",
            IDENTITY_NAMES.join(", ")
        )));
    }
    let key = |name: &str| {
        let item = exactly(ids.get(name), &["id"])
            .ok_or_else(|| refuse(&format!("identities.{name} must be exactly {{ id }}")))?;
        string(item, "id")
            .and_then(UserKey::parse)
            .ok_or_else(|| refuse(&format!("identities.{name}.id must be a user nkey")))
    };
    Ok(ManagerIdentities {
        supervisor: key("supervisor")?,
        executor: key("executor")?,
        serve: key("serve")?,
        goal_writer: key("goalWriter")?,
        session_ledger: key("sessionLedger")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_door_list_is_the_envelope_members_then_its_own() {
        let list: [&str; 10] = with_envelope(["registrationProof", "serveEpoch"]);
        assert_eq!(list[..8], ENVELOPE_MEMBERS);
        assert_eq!(list[8..], ["registrationProof", "serveEpoch"]);
    }
}
