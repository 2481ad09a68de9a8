//! The managed-agent requests and their closed parsers (reference §6.1, §6.4): enrollment,
//! retirement preparation, and a host platform's runtime create/status.

use serde_json::{Map, Value};

use crate::actors::row::check_channel;
use crate::actors::TokenHash;
use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::lifecycle::managed_retirement_op_id;
use crate::manager::{
    parse_coordinates, parse_identities, ManagerEnvelope, RegistrationProof, RetirementTarget,
};
use crate::names::{ActorToken, LifecycleUid, OpId, OwnerToken};
use crate::wire::{self, ObjectWriter, MAX_SAFE_INTEGER};

use super::{ENROLLMENT_KIND, ENVELOPE_KEYS, MAX_ENROLLMENT_LIST, PREPARE_RETIREMENT_KIND};

// ---- Requests ---------------------------------------------------------------------------------

/// The envelope every request a registered manager presents with its host-issued
/// current-registration proof shares: the managed-agent requests, and the retained-agent
/// validation, goal-index scan and admin authorization doors of [`crate::manager`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedEnvelope {
    pub manager: ManagerEnvelope,
    /// The host-issued current-registration proof (HMAC) the request presents.
    pub registration_proof: RegistrationProof,
    /// The manager's serve process epoch the request claims is current.
    pub serve_epoch: ProcessEpoch,
}

/// What to enroll. The request carries no lifecycle uid: the host picks it (F95).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentTarget {
    pub actor: ActorToken,
    /// SHA-256 of the participant's locally held actor token; the token never travels (F95).
    pub token_hash: TokenHash,
    pub role: Option<String>,
    pub label: Option<String>,
    pub capabilities: Option<Vec<String>>,
    pub subscribe: Option<Vec<String>>,
    pub allow_subscribe: Option<Vec<String>>,
    pub allow_publish: Option<Vec<String>>,
}

/// `manager-managed-agent-enrollment`, parsed (closed; unknown input fields are refused, never
/// retained).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentRequest {
    pub envelope: ManagedEnvelope,
    pub target: EnrollmentTarget,
}

/// `manager-managed-agent-prepare-retirement`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareRetirementRequest {
    pub envelope: ManagedEnvelope,
    pub target: RetirementTarget,
    /// Always `managedRetirementOpId(target.lifecycleUid)` (F96): only the parser sets it, and
    /// it refuses any other, so the machine needs no re-check.
    pub(super) op_id: OpId,
}

impl PrepareRetirementRequest {
    pub fn op_id(&self) -> &OpId {
        &self.op_id
    }
}

pub(crate) fn refuse(what: &str, detail: impl AsRef<str>) -> EpError {
    EpError::bad_request(format!("{what} request {}", detail.as_ref()))
}

fn object<'v>(raw: &'v Value, what: &str) -> Result<&'v Map<String, Value>, EpError> {
    raw.as_object()
        .ok_or_else(|| refuse(what, "must be an object"))
}

fn closed(map: &Map<String, Value>, allowed: &[&str], what: &str, at: &str) -> Result<(), EpError> {
    match wire::unknown_member(map, allowed) {
        Some(key) => Err(refuse(
            what,
            format!("{at}carries unknown field {key:?} (the protocol is closed)"),
        )),
        None => Ok(()),
    }
}

fn non_empty<'m>(map: &'m Map<String, Value>, key: &str, what: &str) -> Result<&'m str, EpError> {
    map.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| refuse(what, format!("requires non-empty {key}")))
}

/// Prefixes a grammar refusal from [`crate::names`] with the request it came from.
pub(crate) fn grammar(what: &str) -> impl Fn(EpError) -> EpError + '_ {
    move |e| refuse(what, e.message)
}

/// Opens a registered-manager request of `kind` in the reference's order: an object, no member
/// outside the envelope's and the request's `own`, then the envelope. Every door whose body is
/// the envelope plus its own members opens here, so they refuse alike.
pub(crate) fn open_closed<'v>(
    raw: &'v Value,
    what: &str,
    kind: &str,
    own: &[&str],
) -> Result<(&'v Map<String, Value>, ManagedEnvelope), EpError> {
    let map = object(raw, what)?;
    let allowed: Vec<&str> = ENVELOPE_KEYS.iter().chain(own).copied().collect();
    closed(map, &allowed, what, "")?;
    Ok((map, parse_envelope(map, what, kind)?))
}

/// The shared envelope, in the reference's order: `{ v: 1, kind }`, the coordinates, the
/// current-registration proof, the serve epoch, then the identities.
fn parse_envelope(
    map: &Map<String, Value>,
    what: &str,
    kind: &str,
) -> Result<ManagedEnvelope, EpError> {
    if map.get("v").and_then(Value::as_u64) != Some(1)
        || map.get("kind").and_then(Value::as_str) != Some(kind)
    {
        return Err(refuse(
            what,
            format!("must carry {{ v: 1, kind: {kind:?} }}"),
        ));
    }
    let coordinates = parse_coordinates(map, &|detail| refuse(what, detail))?;
    let registration_proof = non_empty(map, "registrationProof", what).and_then(|proof| {
        RegistrationProof::parse(proof)
            .ok_or_else(|| refuse(what, "requires a sha256 registrationProof"))
    })?;
    let serve_epoch = map
        .get("serveEpoch")
        .and_then(Value::as_u64)
        .filter(|&e| e <= MAX_SAFE_INTEGER)
        .ok_or_else(|| refuse(what, "serveEpoch must be a non-negative safe integer"))?;
    let identities = parse_identities(map.get("identities"), &|detail| refuse(what, detail))?;
    Ok(ManagedEnvelope {
        manager: coordinates.with(identities),
        registration_proof,
        serve_epoch: ProcessEpoch(serve_epoch),
    })
}

/// Optional string member `key` of `t`: absent is `None`; present, it must be a string `ok`
/// admits, or the request is refused with `refusal`.
fn optional_string(
    t: &Map<String, Value>,
    key: &str,
    ok: impl Fn(&str) -> bool,
    what: &str,
    refusal: &str,
) -> Result<Option<String>, EpError> {
    t.get(key)
        .map(|v| {
            v.as_str()
                .filter(|s| ok(s))
                .map(str::to_owned)
                .ok_or_else(|| refuse(what, refusal))
        })
        .transpose()
}

/// `target.capabilities` when present: an array of at most [`MAX_ENROLLMENT_LIST`] capability
/// tokens of 1-64 characters, the bound checked before any entry.
fn capability_list(t: &Map<String, Value>, what: &str) -> Result<Option<Vec<String>>, EpError> {
    let Some(v) = t.get("capabilities") else {
        return Ok(None);
    };
    let caps = v
        .as_array()
        .ok_or_else(|| refuse(what, "target.capabilities must be an array when present"))?;
    if caps.len() > MAX_ENROLLMENT_LIST {
        return Err(refuse(
            what,
            format!(
                "target.capabilities carries {} entries, more than the \
                 {MAX_ENROLLMENT_LIST}-entry bound",
                caps.len()
            ),
        ));
    }
    caps.iter()
        .map(|c| {
            c.as_str()
                .filter(|c| c.len() <= 64 && crate::actors::row::is_scope_token(c))
                .map(str::to_owned)
                .ok_or_else(|| {
                    refuse(
                        what,
                        "target.capabilities must contain only 1-64 character capability tokens",
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// One optional bounded list of channel patterns on an enrollment target.
fn channel_list(
    map: &Map<String, Value>,
    field: &str,
    what: &str,
) -> Result<Option<Vec<String>>, EpError> {
    let Some(value) = map.get(field) else {
        return Ok(None);
    };
    let items = value.as_array().ok_or_else(|| {
        refuse(
            what,
            format!("target.{field} must be an array of channel patterns when present"),
        )
    })?;
    if items.len() > MAX_ENROLLMENT_LIST {
        return Err(refuse(
            what,
            format!(
                "target.{field} carries {} entries, more than the {MAX_ENROLLMENT_LIST}-entry bound",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .map(|item| {
            let s = item.as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
                refuse(
                    what,
                    format!("target.{field} must contain only non-empty strings"),
                )
            })?;
            check_channel(s).map_err(|e| refuse(what, e))?;
            Ok(s.to_owned())
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

impl EnrollmentRequest {
    /// Parses the closed enrollment request (reference §6.1). Every refusal is `bad-request`
    /// "managed agent enrollment request …". A `lifecycleUid` anywhere is an unknown field:
    /// the participant never names the uid (F95).
    pub fn parse(raw: &Value) -> Result<EnrollmentRequest, EpError> {
        let what = "managed agent enrollment";
        let (map, envelope) = open_closed(raw, what, ENROLLMENT_KIND, &["target"])?;
        let t = map
            .get("target")
            .and_then(Value::as_object)
            .ok_or_else(|| refuse(what, "requires a target"))?;
        closed(
            t,
            &[
                "actor",
                "tokenHash",
                "role",
                "label",
                "capabilities",
                "subscribe",
                "allowSubscribe",
                "allowPublish",
            ],
            what,
            "target ",
        )?;
        let actor = t
            .get("actor")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refuse(what, "target requires a non-empty actor"))?;
        let actor = ActorToken::parse(actor).map_err(grammar(what))?;
        let token_hash = t
            .get("tokenHash")
            .and_then(Value::as_str)
            .and_then(|h| TokenHash::parse(h).ok())
            .ok_or_else(|| {
                refuse(
                    what,
                    "target.tokenHash must be a lowercase hex sha256 digest of the locally held \
                     actorToken",
                )
            })?;
        let role = optional_string(
            t,
            "role",
            |r| r.len() <= 64 && crate::actors::row::is_role(r),
            what,
            "target.role must be a 1-64 character role token when present",
        )?;
        let label = optional_string(
            t,
            "label",
            |l| (1..=256).contains(&l.encode_utf16().count()),
            what,
            "target.label must be a 1-256 character string when present",
        )?;
        let capabilities = capability_list(t, what)?;
        Ok(EnrollmentRequest {
            envelope,
            target: EnrollmentTarget {
                actor,
                token_hash,
                role,
                label,
                capabilities,
                subscribe: channel_list(t, "subscribe", what)?,
                allow_subscribe: channel_list(t, "allowSubscribe", what)?,
                allow_publish: channel_list(t, "allowPublish", what)?,
            },
        })
    }
}

impl PrepareRetirementRequest {
    /// Parses the closed prepare-retirement request (reference §6.1): the target is exactly
    /// `{owner (u_), actor, lifecycleUid}` and the op id must be the one derived from the
    /// target's uid, so one lifecycle never has two terminal operations (F96).
    pub fn parse(raw: &Value) -> Result<PrepareRetirementRequest, EpError> {
        let what = "managed agent prepare-retirement";
        let (map, envelope) = open_closed(raw, what, PREPARE_RETIREMENT_KIND, &["target", "opId"])?;
        let target = exact_target(map, what)?;
        let op_id = map
            .get("opId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refuse(what, "requires a non-empty opId"))?;
        let op_id = OpId::parse(op_id).map_err(grammar(what))?;
        if op_id != managed_retirement_op_id(&target.lifecycle_uid)? {
            return Err(refuse(
                what,
                format!(
                    "opId must be the derived terminal operation id for lifecycle {}",
                    target.lifecycle_uid
                ),
            ));
        }
        Ok(PrepareRetirementRequest {
            envelope,
            target,
            op_id,
        })
    }
}

impl RetirementTarget {
    /// The target as a request names it and an answer echoes it: `{owner, actor,
    /// lifecycleUid}`, in that order.
    pub fn to_json(&self) -> String {
        ObjectWriter::new()
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("lifecycleUid", self.lifecycle_uid.as_str())
            .finish()
    }
}

/// The exact incarnation a request names: `target` is exactly `{owner (u_), actor,
/// lifecycleUid}`.
pub(crate) fn exact_target(
    map: &Map<String, Value>,
    what: &str,
) -> Result<RetirementTarget, EpError> {
    let t = map
        .get("target")
        .and_then(Value::as_object)
        .filter(|t| {
            t.len() == 3
                && ["owner", "actor", "lifecycleUid"]
                    .iter()
                    .all(|k| t.contains_key(*k))
        })
        .ok_or_else(|| {
            refuse(
                what,
                "target must be exactly { owner, actor, lifecycleUid }",
            )
        })?;
    let field = |k: &str| {
        t.get(k).and_then(Value::as_str).ok_or_else(|| {
            refuse(
                what,
                "target must contain string owner, actor, and lifecycleUid",
            )
        })
    };
    let (owner, actor, uid) = (field("owner")?, field("actor")?, field("lifecycleUid")?);
    if !crate::names::DerivedOwner::is_derived(owner) {
        return Err(refuse(
            what,
            format!("target owner {owner:?} is not a derived owner (u_ + 26 base32 chars)"),
        ));
    }
    Ok(RetirementTarget {
        owner: OwnerToken::parse(owner).map_err(grammar(what))?,
        actor: ActorToken::parse(actor).map_err(grammar(what))?,
        lifecycle_uid: LifecycleUid::parse(uid).map_err(grammar(what))?,
    })
}

/// A host platform's `manager-managed-agent-runtime-create` or `…-runtime-status`, parsed
/// (reference §6.1): the shared envelope and the exact target, nothing else (`providerRef`,
/// `handle`, `name` are unknown fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeRequest {
    /// [`super::RUNTIME_CREATE_KIND`] or [`super::RUNTIME_STATUS_KIND`].
    pub kind: &'static str,
    pub envelope: ManagedEnvelope,
    pub target: RetirementTarget,
}

impl RuntimeRequest {
    /// Parses the closed runtime request of `kind`. Every refusal is `bad-request` "managed
    /// agent runtime request …".
    pub fn parse(raw: &Value, kind: &'static str) -> Result<RuntimeRequest, EpError> {
        let what = "managed agent runtime";
        let (map, envelope) = open_closed(raw, what, kind, &["target"])?;
        Ok(RuntimeRequest {
            kind,
            envelope,
            target: exact_target(map, what)?,
        })
    }
}
