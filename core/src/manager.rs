//! Manager-service authority requests (reference-auth-service §4.1–§4.2): the closed request
//! envelope and its parser, the deterministic registration proof, the host-secret HMAC
//! current-registration proof, and the shared current-registration check every registered-manager
//! door runs.
//!
//! **Byte compatibility.** Both proofs hash a `JSON.stringify` text whose key order is fixed by the
//! reference, so a proof minted by a TypeScript host verifies here and vice versa. The identities
//! are written in the parser's canonical order (supervisor, executor, serve, goalWriter,
//! sessionLedger) whatever order the caller sent, exactly as the reference rebuilds them.

use std::fmt;

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::canon::Digest;
use crate::error::EpError;
use crate::gate::{GateState, ProcessEpoch, RegistrationRevision};
use crate::issuance::{observe_gate, GateObservation, GateRef};
use crate::journal::{FencingToken, RunEpoch, RunHolder, RunId, TakeoverId};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{
    ActorToken, EndpointName, InstanceId, LifecycleUid, OpId, OwnerToken, SpaceName,
};
use crate::stored::{self, ObjectWriter};

// ---- HMAC and constant-time comparison ------------------------------------------------------

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under `key`; the parts are fed in order,
/// so a domain prefix needs no copy.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC accepts a key of any length (a long one is hashed first), so `new_from_slice`
    // cannot fail; the fallback is a fixed key only to keep the function total.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new(&Default::default()));
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Equality whose time does not depend on where the inputs differ. A length mismatch is simply
/// unequal (the reference's `timingSafeEqual` throws there; the lengths of proofs are public).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// The host secret keying the current-registration proof: the data account's signing seed as
/// its UTF-8 text. Never printed.
#[derive(Clone)]
pub struct ProofSecret(Vec<u8>);

impl ProofSecret {
    pub fn new(secret: impl Into<Vec<u8>>) -> ProofSecret {
        ProofSecret(secret.into())
    }
}

impl fmt::Debug for ProofSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProofSecret(<redacted>)")
    }
}

// ---- Wire grammars ---------------------------------------------------------------------------

/// `first` followed by exactly `rest` characters of RFC 4648 base32 (`[A-Z2-7]`): the shape the
/// reference checks for public nkeys (no checksum at this boundary).
fn is_nkey(s: &str, first: u8, rest: usize) -> bool {
    let b = s.as_bytes();
    b.first() == Some(&first)
        && b.len() == rest + 1
        && b.iter()
            .skip(1)
            .all(|&c| matches!(c, b'A'..=b'Z' | b'2'..=b'7'))
}

macro_rules! wire_string {
    ($(#[$doc:meta])* $name:ident, $valid:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// `None` when `s` is outside the grammar.
            pub fn parse(s: &str) -> Option<$name> {
                let valid: fn(&str) -> bool = $valid;
                valid(s).then(|| $name(s.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

wire_string!(
    /// A public user nkey `^U[A-Z2-7]{55}$`, generated and held by the participant.
    UserKey,
    |s| is_nkey(s, b'U', 55)
);
wire_string!(
    /// A public account nkey `^A[A-Z2-7]{55}$`.
    AccountKey,
    |s| is_nkey(s, b'A', 55)
);
wire_string!(
    /// An idempotency token `^[A-Za-z0-9_-]{22,64}$`.
    RequestId,
    |s| (22..=64).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
);
wire_string!(
    /// A registration proof `^sha256:[0-9a-f]{64}$` (either kind: deterministic or HMAC).
    RegistrationProof,
    |s| s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
);

// ---- Request model ---------------------------------------------------------------------------

/// The manager-service authority operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ManagerOperation {
    Prepare,
    Activate,
    Renew,
    Session,
    Retire,
    RenewStandingBundle,
    RenewRunDriver,
}

impl ManagerOperation {
    pub const ALL: [ManagerOperation; 7] = [
        ManagerOperation::Prepare,
        ManagerOperation::Activate,
        ManagerOperation::Renew,
        ManagerOperation::Session,
        ManagerOperation::Retire,
        ManagerOperation::RenewStandingBundle,
        ManagerOperation::RenewRunDriver,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ManagerOperation::Prepare => "prepare",
            ManagerOperation::Activate => "activate",
            ManagerOperation::Renew => "renew",
            ManagerOperation::Session => "session",
            ManagerOperation::Retire => "retire",
            ManagerOperation::RenewStandingBundle => "renewStandingBundle",
            ManagerOperation::RenewRunDriver => "renewRunDriver",
        }
    }

    /// The two renewals carry the host-assigned account and the serve process epoch.
    pub const fn is_renewal(self) -> bool {
        matches!(
            self,
            ManagerOperation::RenewStandingBundle | ManagerOperation::RenewRunDriver
        )
    }
}

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
    pub fn serve_principal(&self, owner: &OwnerToken) -> String {
        format!(
            "{owner}.{}",
            ManagerActors::for_instance(&self.instance_id).serve
        )
    }
}

/// A renewal's host fence: the assigned data account and the serve process epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RenewalFence {
    pub account_public_key: AccountKey,
    pub process_epoch: ProcessEpoch,
}

/// `renewRunDriver`: the activated journal attempt and the two caller-held nkeys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunFence {
    pub run_id: RunId,
    pub holder: RunHolder,
    pub takeover_id: TakeoverId,
    pub epoch: RunEpoch,
    pub fencing_token: FencingToken,
    pub driver_id: UserKey,
    pub mediator_id: UserKey,
}

/// `session`: one serving nkey and the exact session coordinates (endpoint is always `manager`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionGrant {
    pub id: UserKey,
    pub session_id: String,
    pub epoch: u64,
    /// Unix seconds, > 0.
    pub exp: u64,
}

/// The managed lifecycle a `retire` targets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RetirementTarget {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub lifecycle_uid: LifecycleUid,
}

/// `retire`: the requester nkey, the exact target, its derived op id and the serve epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Retirement {
    pub id: UserKey,
    pub target: RetirementTarget,
    pub op_id: OpId,
    pub serve_epoch: ProcessEpoch,
}

/// One parsed manager-service authority request. Operation-specific parts are present exactly
/// for their operation (the parser refuses them anywhere else).
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerAuthorityRequest {
    pub operation: ManagerOperation,
    pub envelope: ManagerEnvelope,
    /// Absent only for `prepare`.
    pub registration_proof: Option<RegistrationProof>,
    /// `activate` only: 1..=64 artifacts, as parsed (member order kept for hashing).
    pub contract_artifacts: Vec<Value>,
    pub renewal: Option<RenewalFence>,
    pub run: Option<RunFence>,
    pub session: Option<SessionGrant>,
    pub retirement: Option<Retirement>,
}

/// The managed lifecycle's one terminal operation id: the first 26 hex digits of
/// `sha256("retire:" + uid)` — derived, never selected, so every retry converges on one op.
pub fn managed_retirement_op_id(uid: &LifecycleUid) -> Result<OpId, EpError> {
    let hex = Digest::of(format!("retire:{uid}").as_bytes()).hex();
    OpId::parse(hex.get(..26).unwrap_or_default()).map_err(EpError::stored)
}

// ---- Parser ----------------------------------------------------------------------------------

const ALLOWED: [&str; 16] = [
    "v",
    "kind",
    "operation",
    "space",
    "actor",
    "instanceId",
    "managerLifecycleUid",
    "requestId",
    "registrationProof",
    "session",
    "retirement",
    "contractArtifacts",
    "identities",
    "accountPublicKey",
    "processEpoch",
    "run",
];

const MAX_ARTIFACTS: usize = 64;

fn refuse(what: impl fmt::Display) -> EpError {
    EpError::bad_request(format!("manager-service authority request {what}"))
}

/// A JavaScript `Number.isSafeInteger(x) && x >= min` field.
fn safe_at_least(map: &Map<String, Value>, key: &str, min: u64) -> Option<u64> {
    map.get(key)
        .and_then(stored::safe_uint)
        .filter(|n| *n >= min)
}

fn string<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m str> {
    map.get(key).and_then(Value::as_str)
}

/// `Object.keys(o)` compared as a set with `keys`: an object with exactly these members.
fn exactly<'m>(value: Option<&'m Value>, keys: &[&str]) -> Option<&'m Map<String, Value>> {
    value
        .and_then(Value::as_object)
        .filter(|m| m.len() == keys.len() && keys.iter().all(|k| m.contains_key(*k)))
}

impl ManagerAuthorityRequest {
    /// Parses a request from a human holder: a retirement target owner must be a derived `u_`
    /// owner. Keeps F90: the view is closed (unknown fields refuse, never ignored) and names no
    /// profile, permission or actor the server would otherwise derive. Every refusal is `bad-request` "manager-service authority request …", checked in
    /// the reference's order so the first refusal names the same fault.
    pub fn parse(raw: &Value) -> Result<ManagerAuthorityRequest, EpError> {
        parse(raw, false)
    }

    /// As [`ManagerAuthorityRequest::parse`], for the platform holder: a `p_` platform owner may
    /// be named as retirement target (the holder's owner-equality check still applies).
    pub fn parse_for_platform(raw: &Value) -> Result<ManagerAuthorityRequest, EpError> {
        parse(raw, true)
    }
}

fn parse(raw: &Value, allow_platform: bool) -> Result<ManagerAuthorityRequest, EpError> {
    let o = raw.as_object().ok_or_else(|| refuse("must be an object"))?;
    if let Some(k) = o.keys().find(|k| !ALLOWED.contains(&k.as_str())) {
        let mut quoted = String::new();
        stored::push_json_string(&mut quoted, k);
        return Err(refuse(format_args!(
            "carries unknown field {quoted} (the protocol is closed)"
        )));
    }
    if o.get("v").and_then(stored::safe_uint) != Some(1)
        || string(o, "kind") != Some("manager-service-authority")
    {
        return Err(refuse(
            "must carry { v: 1, kind: \"manager-service-authority\" }",
        ));
    }
    let operation = string(o, "operation")
        .and_then(|s| {
            ManagerOperation::ALL
                .into_iter()
                .find(|op| op.as_str() == s)
        })
        .ok_or_else(|| {
            refuse(
                "operation must be \"prepare\", \"activate\", \"renew\", \"session\", \"retire\", \
                 \"renewStandingBundle\", or \"renewRunDriver\"",
            )
        })?;
    let op = operation.as_str();
    let coordinates = parse_coordinates(o, &|what| refuse(what))?;
    let prepare = operation == ManagerOperation::Prepare;
    if prepare && (o.contains_key("registrationProof") || o.contains_key("contractArtifacts")) {
        return Err(refuse(
            "prepare must not carry registrationProof or contractArtifacts",
        ));
    }
    let registration_proof = if prepare {
        None
    } else {
        Some(
            string(o, "registrationProof")
                .and_then(RegistrationProof::parse)
                .ok_or_else(|| refuse(format_args!("{op} requires a sha256 registrationProof")))?,
        )
    };
    let contract_artifacts = match (operation, o.get("contractArtifacts")) {
        (ManagerOperation::Activate, Some(Value::Array(items)))
            if (1..=MAX_ARTIFACTS).contains(&items.len()) =>
        {
            items.clone()
        }
        (ManagerOperation::Activate, _) => {
            return Err(refuse(
                "activate requires 1-64 canonical manager contractArtifacts",
            ))
        }
        (_, Some(_)) => {
            return Err(refuse(format_args!(
                "{op} must not carry contractArtifacts"
            )))
        }
        (_, None) => Vec::new(),
    };

    let renewal = if operation.is_renewal() {
        let account_public_key = string(o, "accountPublicKey")
            .and_then(AccountKey::parse)
            .ok_or_else(|| refuse(format_args!("{op} requires an accountPublicKey")))?;
        let epoch = safe_at_least(o, "processEpoch", 0)
            .ok_or_else(|| refuse(format_args!("{op} requires a non-negative processEpoch")))?;
        Some(RenewalFence {
            account_public_key,
            process_epoch: ProcessEpoch(epoch),
        })
    } else if o.contains_key("accountPublicKey") || o.contains_key("processEpoch") {
        return Err(refuse(format_args!(
            "{op} must not carry accountPublicKey or processEpoch"
        )));
    } else {
        None
    };

    let run = if operation == ManagerOperation::RenewRunDriver {
        Some(parse_run(o.get("run"))?)
    } else if o.contains_key("run") {
        return Err(refuse(format_args!("{op} must not carry run")));
    } else {
        None
    };

    let session = if operation == ManagerOperation::Session {
        Some(parse_session(o.get("session"))?)
    } else if o.contains_key("session") {
        return Err(refuse(format_args!("{op} must not carry session")));
    } else {
        None
    };

    let retirement = if operation == ManagerOperation::Retire {
        Some(parse_retirement(o.get("retirement"), allow_platform)?)
    } else if o.contains_key("retirement") {
        return Err(refuse(format_args!("{op} must not carry retirement")));
    } else {
        None
    };

    let identities = parse_identities(o.get("identities"), &|what| refuse(what))?;
    Ok(ManagerAuthorityRequest {
        operation,
        envelope: coordinates.with(identities),
        registration_proof,
        contract_artifacts,
        renewal,
        run,
        session,
        retirement,
    })
}

fn parse_run(value: Option<&Value>) -> Result<RunFence, EpError> {
    const KEYS: [&str; 7] = [
        "runId",
        "holder",
        "takeoverId",
        "epoch",
        "fencingToken",
        "driverId",
        "mediatorId",
    ];
    let r = exactly(value, &KEYS).ok_or_else(|| {
        refuse(
            "renewRunDriver requires exactly runId, holder, takeoverId, epoch, fencingToken, \
             driverId, mediatorId",
        )
    })?;
    let invalid = || {
        refuse(
            "renewRunDriver requires valid runId, holder, takeoverId, epoch, fencingToken, and \
             distinct driverId/mediatorId",
        )
    };
    let text = |k: &str| string(r, k).ok_or_else(invalid);
    let run_id = RunId::parse(text("runId")?).map_err(|_| invalid())?;
    let holder = RunHolder::parse(text("holder")?).map_err(|_| invalid())?;
    let takeover_id = TakeoverId::parse(text("takeoverId")?).map_err(|_| invalid())?;
    let epoch = safe_at_least(r, "epoch", 1).ok_or_else(invalid)?;
    let fencing_token = safe_at_least(r, "fencingToken", 1).ok_or_else(invalid)?;
    let driver_id = UserKey::parse(text("driverId")?).ok_or_else(invalid)?;
    let mediator_id = UserKey::parse(text("mediatorId")?).ok_or_else(invalid)?;
    let bound = holder
        .as_str()
        .strip_suffix(takeover_id.as_str())
        .is_some_and(|h| h.ends_with('.'));
    if driver_id == mediator_id || !bound {
        return Err(invalid());
    }
    Ok(RunFence {
        run_id,
        holder,
        takeover_id,
        epoch: RunEpoch(epoch),
        fencing_token: FencingToken(fencing_token),
        driver_id,
        mediator_id,
    })
}

/// Closed: the reference reads the five fields and passes extra members through; a closed
/// protocol refuses them instead (they would be echoed into issued material).
fn parse_session(value: Option<&Value>) -> Result<SessionGrant, EpError> {
    let invalid = || refuse("session requires { id, endpoint:\"manager\", sessionId, epoch, exp }");
    let s = exactly(value, &["id", "endpoint", "sessionId", "epoch", "exp"]).ok_or_else(invalid)?;
    let id = string(s, "id")
        .and_then(UserKey::parse)
        .ok_or_else(invalid)?;
    if string(s, "endpoint") != Some("manager") {
        return Err(invalid());
    }
    let session_id = string(s, "sessionId")
        .filter(|x| !x.is_empty())
        .ok_or_else(invalid)?;
    let epoch = safe_at_least(s, "epoch", 0).ok_or_else(invalid)?;
    let exp = safe_at_least(s, "exp", 1).ok_or_else(invalid)?;
    Ok(SessionGrant {
        id,
        session_id: session_id.to_owned(),
        epoch,
        exp,
    })
}

fn parse_retirement(value: Option<&Value>, allow_platform: bool) -> Result<Retirement, EpError> {
    let r = exactly(value, &["id", "target", "opId", "serveEpoch"]).ok_or_else(|| {
        refuse("retire requires retirement exactly { id, target, opId, serveEpoch }")
    })?;
    let invalid = || {
        refuse(
            "retire requires a requester user nkey, exact target, lifecycle opId, and \
             non-negative safe serveEpoch",
        )
    };
    let id = string(r, "id")
        .and_then(UserKey::parse)
        .ok_or_else(invalid)?;
    let target =
        exactly(r.get("target"), &["owner", "actor", "lifecycleUid"]).ok_or_else(invalid)?;
    let (Some(owner), Some(actor), Some(uid)) = (
        string(target, "owner"),
        string(target, "actor"),
        string(target, "lifecycleUid"),
    ) else {
        return Err(invalid());
    };
    let op_id = string(r, "opId").ok_or_else(invalid)?;
    let serve_epoch = safe_at_least(r, "serveEpoch", 0).ok_or_else(invalid)?;
    let lifecycle_uid = LifecycleUid::parse(uid)
        .map_err(|_| refuse("retirement target lifecycleUid must be a lifecycle token"))?;
    let op_id =
        OpId::parse(op_id).map_err(|_| refuse("retirement opId must be a lifecycle token"))?;
    if op_id != managed_retirement_op_id(&lifecycle_uid)? {
        return Err(refuse(format_args!(
            "retire opId must be the managed lifecycle's derived terminal operation id for \
             {lifecycle_uid}"
        )));
    }
    let derived = |prefix: &str| {
        owner.strip_prefix(prefix).is_some_and(|b| {
            b.len() == 26 && b.bytes().all(|c| matches!(c, b'a'..=b'z' | b'2'..=b'7'))
        })
    };
    if !(derived("u_") || (allow_platform && derived("p_"))) {
        return Err(refuse(
            "retirement target owner must be a derived owner token u_<26 base32>",
        ));
    }
    let owner = OwnerToken::parse(owner).map_err(|e| refuse(e.message))?;
    let actor = ActorToken::parse(actor)
        .map_err(|_| refuse("retirement target actor must be a single NATS-safe token"))?;
    Ok(Retirement {
        id,
        target: RetirementTarget {
            owner,
            actor,
            lifecycle_uid,
        },
        op_id,
        serve_epoch: ProcessEpoch(serve_epoch),
    })
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

// ---- Proofs ----------------------------------------------------------------------------------

/// The domain-separation prefix of the current-registration HMAC (with its trailing NUL).
pub const CURRENT_REGISTRATION_DOMAIN: &[u8] = b"cotal/manager-current-registration/v1\0";

/// The deterministic registration proof (no secret): `sha256:` + hex SHA-256 of
/// `{"v":1,"space","owner","instanceId","lifecycleUid","actors","identities","artifactDigests"}`,
/// where `artifactDigests` lists the raw digest of each contract artifact's `JSON.stringify`
/// (empty for `session`). Used by `activate`, `session` and `retire`.
pub fn registration_proof(
    owner: &OwnerToken,
    request: &ManagerAuthorityRequest,
) -> Result<RegistrationProof, EpError> {
    let mut digests = Vec::new();
    if request.operation != ManagerOperation::Session {
        for artifact in &request.contract_artifacts {
            let mut text = String::new();
            stored::js_stringify(&mut text, artifact)?;
            digests.push(Digest::of(text.as_bytes()).to_prefixed());
        }
    }
    let e = &request.envelope;
    let json = ObjectWriter::new()
        .uint("v", 1)
        .string("space", e.space.as_str())
        .string("owner", owner.as_str())
        .string("instanceId", e.instance_id.as_str())
        .string("lifecycleUid", e.manager_lifecycle_uid.as_str())
        .raw(
            "actors",
            &ManagerActors::for_instance(&e.instance_id).to_json(),
        )
        .raw("identities", &e.identities.to_json())
        .strings("artifactDigests", digests.iter().map(String::as_str))
        .finish();
    Ok(RegistrationProof(Digest::of(json.as_bytes()).to_prefixed()))
}

/// The current-registration proof: `sha256:` + hex HMAC-SHA256 keyed by the host secret over
/// [`CURRENT_REGISTRATION_DOMAIN`] followed by
/// `{"v":1,"kind":"manager-current-registration","space","owner","actor","instanceId",
/// "lifecycleUid","actors","identities","registrationRevision","processEpoch"}`. It binds the
/// held nkeys and the lifecycle to one gate registration, so a swapped nkey, another owner or a
/// superseded registration fails it.
pub fn current_registration_proof(
    secret: &ProofSecret,
    owner: &OwnerToken,
    envelope: &ManagerEnvelope,
    registration_revision: RegistrationRevision,
    process_epoch: ProcessEpoch,
) -> RegistrationProof {
    let json = ObjectWriter::new()
        .uint("v", 1)
        .string("kind", "manager-current-registration")
        .string("space", envelope.space.as_str())
        .string("owner", owner.as_str())
        .string("actor", envelope.actor.as_str())
        .string("instanceId", envelope.instance_id.as_str())
        .string("lifecycleUid", envelope.manager_lifecycle_uid.as_str())
        .raw(
            "actors",
            &ManagerActors::for_instance(&envelope.instance_id).to_json(),
        )
        .raw("identities", &envelope.identities.to_json())
        .uint("registrationRevision", registration_revision.0)
        .uint("processEpoch", process_epoch.0)
        .finish();
    let mac = hmac_sha256(&secret.0, &[CURRENT_REGISTRATION_DOMAIN, json.as_bytes()]);
    RegistrationProof(Digest::from_bytes(mac).to_prefixed())
}

// ---- The shared current-registration check ---------------------------------------------------

/// The door check every registered-manager request runs after its own space, scope and target
/// checks, in this order (reference §4.1):
/// 1. the manager gate is present and `open`, else `failed-precondition` "<what> found no
///    current open manager gate for instance X";
/// 2. it records `<owner>.manager_serve_<iid>`, else `permission-denied` "<what> gate belongs to
///    another owner: P is not serve principal S";
/// 3. with `epoch` given, the gate's process epoch equals it, else `conflict` "<what> serve
///    epoch E is stale; current is C" (`None` only for `renew`, whose proof binds the epoch);
/// 4. the presented proof equals the HMAC proof at the gate's registration revision and epoch,
///    compared in constant time, else `permission-denied` "<what> proof does not match current
///    host registration".
///
/// Keeps F91 (a renewal re-checks owner, actor, lifecycle, instance and the current gate): the
/// proof binds the held nkeys, the lifecycle and the gate's current registration revision and
/// epoch, the way F27/F28 bind a serve mint to its gate's coordinates and principal. Returns the
/// observation it decided on.
pub fn check_current_registration(
    cx: &mut Ctx<'_>,
    envelope: &ManagerEnvelope,
    proof: &RegistrationProof,
    epoch: Option<ProcessEpoch>,
    owner: &OwnerToken,
    secret: &ProofSecret,
    what: &str,
) -> Result<GateObservation, Halt> {
    let iid = &envelope.instance_id;
    let observed = match observe_gate(cx, &envelope.gate()?)? {
        Some(observed) if observed.gate.state() == GateState::Open => observed,
        _ => {
            return Err(EpError::failed_precondition(format!(
                "{what} found no current open manager gate for instance {iid}"
            ))
            .into())
        }
    };
    let gate = &observed.gate;
    let serve = envelope.serve_principal(owner);
    if gate.principal().to_string() != serve {
        return Err(EpError::permission_denied(format!(
            "{what} gate belongs to another owner: {} is not serve principal {serve}",
            gate.principal()
        ))
        .into());
    }
    if let Some(epoch) = epoch {
        if gate.process_epoch() != epoch {
            return Err(EpError::conflict(format!(
                "{what} serve epoch {epoch} is stale; current is {}",
                gate.process_epoch()
            ))
            .into());
        }
    }
    let expected = current_registration_proof(
        secret,
        owner,
        envelope,
        gate.registration_revision(),
        gate.process_epoch(),
    );
    if !constant_time_eq(proof.as_str().as_bytes(), expected.as_str().as_bytes()) {
        return Err(EpError::permission_denied(format!(
            "{what} proof does not match current host registration"
        ))
        .into());
    }
    Ok(observed)
}

/// [`check_current_registration`] as a machine.
#[derive(Debug, Clone)]
pub struct CheckCurrentRegistration {
    pub envelope: ManagerEnvelope,
    pub proof: RegistrationProof,
    pub epoch: Option<ProcessEpoch>,
    pub owner: OwnerToken,
    pub secret: ProofSecret,
    /// The door's name, leading every refusal (e.g. "manager-service renew").
    pub what: String,
}

impl Script for CheckCurrentRegistration {
    type Output = GateObservation;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<GateObservation, Halt> {
        check_current_registration(
            cx,
            &self.envelope,
            &self.proof,
            self.epoch,
            &self.owner,
            &self.secret,
            &self.what,
        )
    }
}
