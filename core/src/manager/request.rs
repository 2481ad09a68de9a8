//! The manager-service authority request and its closed parser.

use std::fmt;

use serde_json::{Map, Value};

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::journal::{FencingToken, RunEpoch, RunHolder, RunId, TakeoverId};
use crate::lifecycle::managed_retirement_op_id;
use crate::names::{is_platform_owner, ActorToken, DerivedOwner, LifecycleUid, OpId, OwnerToken};
use crate::wire;

use super::envelope::{parse_coordinates, parse_identities, with_envelope, ManagerEnvelope};
use super::tokens::{AccountKey, RegistrationProof, UserKey};
use super::{exactly, safe_at_least, string};

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

/// One parsed manager-service authority request: the shared envelope and the operation with
/// exactly the parts it carries, so no operation can be handed a request without its proof,
/// fence, run, session or retirement.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerAuthorityRequest {
    pub envelope: ManagerEnvelope,
    pub call: ManagerCall,
}

/// The manager-service operations, each with its own parts.
#[derive(Debug, Clone, PartialEq)]
pub enum ManagerCall {
    /// The first phase: no proof, nothing read or written.
    Prepare,
    Activate {
        proof: RegistrationProof,
        /// 1..=64 artifacts, as parsed (member order kept for hashing).
        contract_artifacts: Vec<Value>,
    },
    Renew {
        proof: RegistrationProof,
    },
    Session {
        proof: RegistrationProof,
        session: SessionGrant,
    },
    Retire {
        proof: RegistrationProof,
        retirement: Retirement,
    },
    RenewStandingBundle {
        proof: RegistrationProof,
        fence: RenewalFence,
    },
    RenewRunDriver {
        proof: RegistrationProof,
        fence: RenewalFence,
        run: RunFence,
    },
}

impl ManagerAuthorityRequest {
    pub fn operation(&self) -> ManagerOperation {
        match &self.call {
            ManagerCall::Prepare => ManagerOperation::Prepare,
            ManagerCall::Activate { .. } => ManagerOperation::Activate,
            ManagerCall::Renew { .. } => ManagerOperation::Renew,
            ManagerCall::Session { .. } => ManagerOperation::Session,
            ManagerCall::Retire { .. } => ManagerOperation::Retire,
            ManagerCall::RenewStandingBundle { .. } => ManagerOperation::RenewStandingBundle,
            ManagerCall::RenewRunDriver { .. } => ManagerOperation::RenewRunDriver,
        }
    }

    /// The presented registration proof; every operation but `prepare` carries one.
    pub fn registration_proof(&self) -> Option<&RegistrationProof> {
        match &self.call {
            ManagerCall::Prepare => None,
            ManagerCall::Activate { proof, .. }
            | ManagerCall::Renew { proof }
            | ManagerCall::Session { proof, .. }
            | ManagerCall::Retire { proof, .. }
            | ManagerCall::RenewStandingBundle { proof, .. }
            | ManagerCall::RenewRunDriver { proof, .. } => Some(proof),
        }
    }

    /// `activate`'s artifacts; empty for every other operation.
    pub fn contract_artifacts(&self) -> &[Value] {
        match &self.call {
            ManagerCall::Activate {
                contract_artifacts, ..
            } => contract_artifacts,
            _ => &[],
        }
    }

    /// The host fence of the two renewals.
    pub fn renewal(&self) -> Option<&RenewalFence> {
        match &self.call {
            ManagerCall::RenewStandingBundle { fence, .. }
            | ManagerCall::RenewRunDriver { fence, .. } => Some(fence),
            _ => None,
        }
    }

    pub fn run(&self) -> Option<&RunFence> {
        match &self.call {
            ManagerCall::RenewRunDriver { run, .. } => Some(run),
            _ => None,
        }
    }

    pub fn session(&self) -> Option<&SessionGrant> {
        match &self.call {
            ManagerCall::Session { session, .. } => Some(session),
            _ => None,
        }
    }

    pub fn retirement(&self) -> Option<&Retirement> {
        match &self.call {
            ManagerCall::Retire { retirement, .. } => Some(retirement),
            _ => None,
        }
    }
}

// ---- Parser ----------------------------------------------------------------------------------

const ALLOWED: [&str; 16] = with_envelope([
    "operation",
    "registrationProof",
    "session",
    "retirement",
    "contractArtifacts",
    "accountPublicKey",
    "processEpoch",
    "run",
]);

const MAX_ARTIFACTS: usize = 64;

fn refuse(what: impl fmt::Display) -> EpError {
    EpError::bad_request(format!("manager-service authority request {what}"))
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
    let (o, operation) = parse_head(raw)?;
    let op = operation.as_str();
    let coordinates = parse_coordinates(o, &|what| refuse(what))?;
    let registration_proof = parse_proof(o, operation)?;
    let contract_artifacts = parse_artifacts(o, operation)?;
    let renewal = parse_renewal(o, operation)?;
    let run = only_for(
        o,
        operation,
        ManagerOperation::RenewRunDriver,
        "run",
        parse_run,
    )?;
    let session = only_for(
        o,
        operation,
        ManagerOperation::Session,
        "session",
        parse_session,
    )?;
    let retirement = only_for(o, operation, ManagerOperation::Retire, "retirement", |v| {
        parse_retirement(v, allow_platform)
    })?;
    let identities = parse_identities(o.get("identities"), &|what| refuse(what))?;
    let proof = || {
        registration_proof
            .clone()
            .ok_or_else(|| refuse(format_args!("{op} requires a sha256 registrationProof")))
    };
    let call = match operation {
        ManagerOperation::Prepare => ManagerCall::Prepare,
        ManagerOperation::Activate => ManagerCall::Activate {
            proof: proof()?,
            contract_artifacts,
        },
        ManagerOperation::Renew => ManagerCall::Renew { proof: proof()? },
        ManagerOperation::Session => ManagerCall::Session {
            proof: proof()?,
            session: session.ok_or_else(|| refuse("session requires its session"))?,
        },
        ManagerOperation::Retire => ManagerCall::Retire {
            proof: proof()?,
            retirement: retirement.ok_or_else(|| refuse("retire requires its retirement"))?,
        },
        ManagerOperation::RenewStandingBundle => ManagerCall::RenewStandingBundle {
            proof: proof()?,
            fence: renewal.ok_or_else(|| refuse(format_args!("{op} requires its fence")))?,
        },
        ManagerOperation::RenewRunDriver => ManagerCall::RenewRunDriver {
            proof: proof()?,
            fence: renewal.ok_or_else(|| refuse(format_args!("{op} requires its fence")))?,
            run: run.ok_or_else(|| refuse(format_args!("{op} requires its run")))?,
        },
    };
    Ok(ManagerAuthorityRequest {
        envelope: coordinates.with(identities),
        call,
    })
}

/// The closed head of a request: an object, no unknown member, `{ v: 1, kind }`, then the
/// operation.
fn parse_head(raw: &Value) -> Result<(&Map<String, Value>, ManagerOperation), EpError> {
    let o = raw.as_object().ok_or_else(|| refuse("must be an object"))?;
    if let Some(k) = wire::unknown_member(o, &ALLOWED) {
        let mut quoted = String::new();
        wire::push_json_string(&mut quoted, k);
        return Err(refuse(format_args!(
            "carries unknown field {quoted} (the protocol is closed)"
        )));
    }
    if o.get("v").and_then(wire::safe_uint) != Some(1)
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
    Ok((o, operation))
}

/// The registration proof every operation but `prepare` carries; `prepare` carries neither it
/// nor artifacts.
fn parse_proof(
    o: &Map<String, Value>,
    operation: ManagerOperation,
) -> Result<Option<RegistrationProof>, EpError> {
    if operation == ManagerOperation::Prepare {
        if o.contains_key("registrationProof") || o.contains_key("contractArtifacts") {
            return Err(refuse(
                "prepare must not carry registrationProof or contractArtifacts",
            ));
        }
        return Ok(None);
    }
    let op = operation.as_str();
    string(o, "registrationProof")
        .and_then(RegistrationProof::parse)
        .map(Some)
        .ok_or_else(|| refuse(format_args!("{op} requires a sha256 registrationProof")))
}

/// `activate`'s 1–64 contract artifacts; no other operation carries any.
fn parse_artifacts(
    o: &Map<String, Value>,
    operation: ManagerOperation,
) -> Result<Vec<Value>, EpError> {
    match (operation, o.get("contractArtifacts")) {
        (ManagerOperation::Activate, Some(Value::Array(items)))
            if (1..=MAX_ARTIFACTS).contains(&items.len()) =>
        {
            Ok(items.clone())
        }
        (ManagerOperation::Activate, _) => Err(refuse(
            "activate requires 1-64 canonical manager contractArtifacts",
        )),
        (_, Some(_)) => Err(refuse(format_args!(
            "{} must not carry contractArtifacts",
            operation.as_str()
        ))),
        (_, None) => Ok(Vec::new()),
    }
}

/// The two renewals' host fence (the assigned account and the serve process epoch); no other
/// operation carries either member.
fn parse_renewal(
    o: &Map<String, Value>,
    operation: ManagerOperation,
) -> Result<Option<RenewalFence>, EpError> {
    let op = operation.as_str();
    if operation.is_renewal() {
        let account_public_key = string(o, "accountPublicKey")
            .and_then(AccountKey::parse)
            .ok_or_else(|| refuse(format_args!("{op} requires an accountPublicKey")))?;
        let epoch = safe_at_least(o, "processEpoch", 0)
            .ok_or_else(|| refuse(format_args!("{op} requires a non-negative processEpoch")))?;
        Ok(Some(RenewalFence {
            account_public_key,
            process_epoch: ProcessEpoch(epoch),
        }))
    } else if o.contains_key("accountPublicKey") || o.contains_key("processEpoch") {
        Err(refuse(format_args!(
            "{op} must not carry accountPublicKey or processEpoch"
        )))
    } else {
        Ok(None)
    }
}

/// Member `key`, parsed by `parse` when the request is `wanted`'s; any other operation must
/// not carry it.
fn only_for<T>(
    o: &Map<String, Value>,
    operation: ManagerOperation,
    wanted: ManagerOperation,
    key: &str,
    parse: impl FnOnce(Option<&Value>) -> Result<T, EpError>,
) -> Result<Option<T>, EpError> {
    if operation == wanted {
        Ok(Some(parse(o.get(key))?))
    } else if o.contains_key(key) {
        Err(refuse(format_args!(
            "{} must not carry {key}",
            operation.as_str()
        )))
    } else {
        Ok(None)
    }
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
    if !(DerivedOwner::is_derived(owner) || (allow_platform && is_platform_owner(owner))) {
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
