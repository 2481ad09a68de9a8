//! Manager-caller instance selection (reference-auth-service §3.10): which registered manager
//! instance a `manager-caller` bearer may address, decided by the exchange when it mints the
//! bearer (§3.5, [`SelectManagerInstance`]) and decided again by the callout when it mints the
//! connection's permissions (§8.4, [`AuthorizeManagerCaller`]). A bearer outlives the decision it
//! was minted on, so the callout never trusts the instance the bearer names: it re-reads.
//!
//! **The co-located local manager.** Besides remote managers (gate principal
//! `<owner>.manager_serve_<iid>`, spec owner `<owner>`), the reference accepts the workspace's
//! own manager: the instance whose identity is persisted beside the plane's state
//! ([`LocalManager`], re-read by the caller at every selection), whose gate records
//! `local.<serve nkey>` and whose spec names owner `local`. It is a candidate for any owner's
//! caller, and the selection falls back to it only when the owner has no remote manager gate at
//! all: a remote manager mid-restart never lets a caller fall through to the local one.
//!
//! Every decision is a fresh leader-served read (F7) of `epgate.manager.<iid>` and the
//! instance's `svc` records, never a cached view. Such a read is not a fence (F6): the verdict
//! can change right after it, which is why the callout takes it again at every connect instead
//! of trusting the exchange's. A read or listing that is not answered refuses `unavailable`; it
//! is never taken for "no candidate".

use std::fmt;

use crate::error::EpError;
use crate::gate::{EndpointGate, GateState, ProcessEpoch};
use crate::issuance::{observe_gate, GateRef};
use crate::kv::{KeysOutcome, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, ActorToken, EndpointName, InstanceId, OwnerToken, Principal, SpaceName};
use crate::service::{read_record, RecordRead, ServiceSpec, ServiceStatus};

use super::envelope::ManagerActors;

/// The workspace's own manager instance, as its persisted identity names it: the instance id
/// and the gate principal `local.<serve nkey>` its registration provisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalManager {
    pub instance: InstanceId,
    /// `local.<serve nkey>`.
    pub serve: Principal,
}

impl LocalManager {
    /// Reads the local manager's persisted identity document (`{"instanceId",
    /// "serveIdentity":{"id","seed"}}`, as the reference's manager writes it): the instance id
    /// and the gate principal `local.<serve nkey>`. The seed is not kept. A document without
    /// both is refused with what is wrong, never taken for "no local manager".
    pub fn from_identity(bytes: &[u8]) -> Result<LocalManager, String> {
        let doc: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let instance = doc
            .get("instanceId")
            .and_then(serde_json::Value::as_str)
            .and_then(|s| InstanceId::parse(s).ok())
            .ok_or("instanceId is not a lifecycle token")?;
        let serve = doc
            .pointer("/serveIdentity/id")
            .and_then(serde_json::Value::as_str)
            .and_then(super::tokens::UserKey::parse)
            .ok_or("serveIdentity.id is not a user nkey")?;
        let serve = Principal::parse(&format!("local.{serve}")).map_err(|e| e.message)?;
        Ok(LocalManager { instance, serve })
    }
}

/// The spec owner of the local manager's registration.
pub const LOCAL_OWNER: &str = "local";

/// Whose manager a gate is, to one owner's caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    /// The owner's own remote manager.
    Remote,
    /// The workspace's co-located manager.
    Local,
}

/// Every manager gate of a space's auth bucket: `epgate.<token of "manager">.`, with the
/// trailing dot so no sibling endpoint whose token merely starts with `manager` is listed. The
/// prefix pins the endpoint token, so a listed key that parses as a gate key is a manager gate.
pub const MANAGER_GATE_PREFIX: &str = "epgate.manager.";

/// What one manager instance is to one owner's manager caller (§3.10 `managerGate`). The
/// checks run in the order `unknown`, `not this owner's`, `not open`, `not registered`, and the
/// first that fails is the verdict. Beyond the reference, whose list puts `not open` before
/// `not this owner's`, ownership is decided first: a caller asking about another owner's
/// instance learns only that it is not its own, never whether a barrier holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// No gate `epgate.manager.<iid>`.
    Unknown,
    /// This owner's gate, frozen (a barrier holds it) or retired.
    NotOpen,
    /// The gate records another principal than `<owner>.manager_serve_<iid>`.
    NotThisOwners,
    /// The gate is this owner's and open, but the records do not show its current registration
    /// serving: the spec is missing or deleted, names another owner, or sits at another revision
    /// than the gate's `registrationRevision`; or the status is missing, observes an older spec
    /// revision, or runs at another epoch than the gate's `processEpoch`.
    NotRegistered,
    /// Open, this owner's, registered at the gate's coordinates and serving them.
    Candidate,
}

impl fmt::Display for Verdict {
    /// The reference's words, read after "manager instance X is".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Unknown => "unknown",
            Verdict::NotOpen => "not open",
            Verdict::NotThisOwners => "not this owner's",
            Verdict::NotRegistered => "not registered",
            Verdict::Candidate => "a candidate",
        })
    }
}

impl Verdict {
    /// Whether the gate is this owner's, whatever its state: what the selection counts as "this
    /// owner's remote manager gates".
    fn is_this_owners(self) -> bool {
        matches!(
            self,
            Verdict::NotOpen | Verdict::NotRegistered | Verdict::Candidate
        )
    }

    /// `Ok` for a candidate; otherwise the refusal "manager instance X is <verdict>" followed by
    /// `at` (where it was decided) and what to do next. The one place a verdict becomes an
    /// error, so the exchange and the callout refuse with the same sentence and code.
    ///
    /// Codes: `unknown` and `not this owner's` are `permission-denied` (the caller holds no
    /// authority over such an instance: nothing of its owner stands there). `not open` and `not
    /// registered` are `failed-precondition`: the instance *is* the caller's own and only its
    /// current state refuses, the class the manager doors already use for "no current open
    /// manager gate" (verify-enrollment maps it to 412), so an operator can tell "wrong
    /// instance" from "your manager is not serving right now".
    fn require_candidate(self, instance: &InstanceId, at: &str) -> Result<(), EpError> {
        let refusal = |code: fn(String) -> EpError, next: &str| {
            Err(code(format!(
                "manager instance {instance} is {self}{at} - {next}"
            )))
        };
        match self {
            Verdict::Candidate => Ok(()),
            Verdict::Unknown => refusal(
                EpError::permission_denied,
                "no manager gate of that id exists in this space",
            ),
            Verdict::NotThisOwners => refusal(
                EpError::permission_denied,
                "its gate records another owner's serve principal",
            ),
            Verdict::NotOpen => refusal(
                EpError::failed_precondition,
                "its gate is frozen by a barrier (retry once it reopens) or retired (address \
                 another instance)",
            ),
            Verdict::NotRegistered => refusal(
                EpError::failed_precondition,
                "its records do not show its current registration serving; retry once the \
                 manager has registered and reported ready",
            ),
        }
    }
}

/// The gate `epgate.manager.<iid>` of `space`.
fn manager_gate(space: &SpaceName, instance: &InstanceId) -> Result<GateRef, EpError> {
    let endpoint = EndpointName::parse("manager").map_err(EpError::stored)?;
    Ok(GateRef::new(space.clone(), endpoint, instance.clone()))
}

/// Whether `gate` records `<owner>.manager_serve_<iid>`, the serve principal the registration
/// ceremony provisions for a remote manager (the actor named by [`ManagerActors`], as every
/// manager door derives it; F28).
fn owned_by(gate: &EndpointGate, owner: &OwnerToken, instance: &InstanceId) -> Result<bool, Halt> {
    let serve =
        ActorToken::parse(&ManagerActors::for_instance(instance).serve).map_err(EpError::stored)?;
    Ok(*gate.principal() == Principal::new(owner.clone(), serve))
}

/// The registration half of the verdict: the spec must be live, owned by `owner` and exactly
/// the record at the gate's `registrationRevision` (any other spec is not the registration the
/// gate fences); the status must be live, observe at least that revision and run at the gate's
/// `processEpoch` (a status of a superseded incarnation is not this one serving). KV round trips:
/// 1–2.
fn registration(
    cx: &mut Ctx<'_>,
    owner: &OwnerToken,
    gate: &GateRef,
    row: &EndpointGate,
) -> Result<Verdict, Halt> {
    let spec_key = keys::svc_spec(&gate.endpoint, &gate.instance);
    let RecordRead::Live { value, revision } = read_record(cx, &spec_key)? else {
        return Ok(Verdict::NotRegistered);
    };
    let spec = ServiceSpec::parse(&value, &gate.endpoint)?;
    if spec.owner() != owner || revision.0 != row.registration_revision().0 {
        return Ok(Verdict::NotRegistered);
    }
    let status_key = keys::svc_status(&gate.endpoint, &gate.instance);
    let RecordRead::Live { value, .. } = read_record(cx, &status_key)? else {
        return Ok(Verdict::NotRegistered);
    };
    let status = ServiceStatus::parse(&value)?;
    if status.observed_spec_revision().0 < revision.0 || status.epoch() != row.process_epoch() {
        return Ok(Verdict::NotRegistered);
    }
    Ok(Verdict::Candidate)
}

/// Reads the gate fresh and judges it, reading the `svc` records only when the gate is this
/// owner's and open. A spec or status whose bytes do not parse is `internal`, never a verdict:
/// corrupt records are reported, not skipped. KV round trips: 1–3.
fn verdict(
    cx: &mut Ctx<'_>,
    space: &SpaceName,
    owner: &OwnerToken,
    local: Option<&LocalManager>,
    instance: &InstanceId,
) -> Result<Verdict, Halt> {
    Ok(judge(cx, space, owner, local, instance)?.0)
}

/// [`verdict`], with the process epoch the gate read runs at when there is a gate: what a
/// session's serving check compares the session's epoch with. Remote managers only.
pub fn manager_verdict(
    cx: &mut Ctx<'_>,
    space: &SpaceName,
    owner: &OwnerToken,
    instance: &InstanceId,
) -> Result<(Verdict, Option<ProcessEpoch>), Halt> {
    let (verdict, epoch, _) = judge(cx, space, owner, None, instance)?;
    Ok((verdict, epoch))
}

/// Reads gate `instance` fresh and judges it for `owner`'s caller: this owner's remote
/// manager, or (when `local` names this instance) the workspace's own manager, whose gate
/// records `local.<serve nkey>` and whose spec names owner `local`. Returns the arm that owns
/// it (`None` when it is neither). KV round trips: 1–3.
fn judge(
    cx: &mut Ctx<'_>,
    space: &SpaceName,
    owner: &OwnerToken,
    local: Option<&LocalManager>,
    instance: &InstanceId,
) -> Result<(Verdict, Option<ProcessEpoch>, Option<Arm>), Halt> {
    let gate = manager_gate(space, instance)?;
    let Some(observed) = observe_gate(cx, &gate)? else {
        return Ok((Verdict::Unknown, None, None));
    };
    let row = &observed.gate;
    let epoch = Some(row.process_epoch());
    let (arm, spec_owner) = if owned_by(row, owner, instance)? {
        (Arm::Remote, owner.clone())
    } else if local.is_some_and(|l| l.instance == *instance && *row.principal() == l.serve) {
        (
            Arm::Local,
            OwnerToken::parse(LOCAL_OWNER).map_err(EpError::stored)?,
        )
    } else {
        return Ok((Verdict::NotThisOwners, epoch, None));
    };
    if row.state() != GateState::Open {
        return Ok((Verdict::NotOpen, epoch, Some(arm)));
    }
    Ok((registration(cx, &spec_owner, &gate, row)?, epoch, Some(arm)))
}

/// `managerGate(owner, iid)` (§3.10): the [`Verdict`] on manager instance `instance` for
/// `owner`'s manager caller, from a fresh leader read of its gate and `svc` records. A gate
/// carrying a DEL/PURGE marker is `failed-precondition` (gates are never deleted, F9) and an
/// unanswered read is `unavailable`: neither is a verdict. KV round trips: 1–3.
#[derive(Debug, Clone)]
pub struct ManagerCallerVerdict {
    pub space: SpaceName,
    pub owner: OwnerToken,
    /// The workspace's own manager, when one is persisted.
    pub local: Option<LocalManager>,
    pub instance: InstanceId,
}

impl Script for ManagerCallerVerdict {
    type Output = Verdict;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Verdict, Halt> {
        verdict(
            cx,
            &self.space,
            &self.owner,
            self.local.as_ref(),
            &self.instance,
        )
    }
}

/// `authorizeManagerCaller(owner, iid)` (§8.4): the callout's re-check, when it mints a
/// `manager-caller` connection's permissions, that the instance the bearer names is still a
/// [`Verdict::Candidate`] for the bearer's owner. Anything else refuses "manager instance X is
/// <verdict> at the permission mint" (codes as [`Verdict`] documents them): a bearer minted on
/// a verdict that has since changed (a barrier froze the gate, a successor incarnation took
/// over) addresses nothing. KV round trips: 1–3.
#[derive(Debug, Clone)]
pub struct AuthorizeManagerCaller {
    pub space: SpaceName,
    pub owner: OwnerToken,
    /// The workspace's own manager, when one is persisted (re-read for every connect).
    pub local: Option<LocalManager>,
    pub instance: InstanceId,
}

impl Script for AuthorizeManagerCaller {
    type Output = ();
    fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let verdict = verdict(
            cx,
            &self.space,
            &self.owner,
            self.local.as_ref(),
            &self.instance,
        )?;
        Ok(verdict.require_candidate(&self.instance, " at the permission mint")?)
    }
}

/// `selectManagerInstance(owner, requested?)` (§3.10): the manager instance a `manager-caller`
/// bearer of `owner` will address.
///
/// * `requested`: it must be a [`Verdict::Candidate`], else "manager instance X is <verdict>".
/// * Otherwise every manager gate is listed ([`MANAGER_GATE_PREFIX`], markers included) and
///   each key must parse as `epgate.manager.<iid>` (`internal` otherwise: the listing holds a
///   row no writer makes). The gates recording this owner's serve principal are this owner's,
///   whatever their state; the candidates among them are live. Exactly one live → it. More
///   than one → `failed-precondition` "<n> live remote manager candidates", naming them and
///   the `managerInstanceId` remedy. This owner's gates exist but none is live → `unavailable`
///   with the `managerInstanceId` remedy: a remote manager mid-restart must not let the
///   selection fall through to anything else. No gate of this owner's at all →
///   `failed-precondition` "found no manager candidate for owner X" (there is no local manager
///   to fall back to, see the module doc).
///
/// An unanswered listing or read, or a gate carrying a marker, refuses the whole selection:
/// none of them proves the owner has no candidate. KV round trips: explicit 1–3; listed 1 plus
/// one per listed gate plus up to 2 per gate of this owner's.
#[derive(Debug, Clone)]
pub struct SelectManagerInstance {
    pub space: SpaceName,
    pub owner: OwnerToken,
    /// The workspace's own manager, when one is persisted (re-read for every selection).
    pub local: Option<LocalManager>,
    pub requested: Option<InstanceId>,
}

impl Script for SelectManagerInstance {
    type Output = InstanceId;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<InstanceId, Halt> {
        let owner = &self.owner;
        if let Some(instance) = &self.requested {
            verdict(cx, &self.space, owner, self.local.as_ref(), instance)?
                .require_candidate(instance, "")?;
            return Ok(instance.clone());
        }
        let listed = match cx.keys(Store::Auth, MANAGER_GATE_PREFIX)? {
            KeysOutcome::Keys(listed) => listed,
            KeysOutcome::Unavailable(why) => {
                return Err(EpError::unavailable(format!(
                    "listing the manager gates of space {} failed ({why}); whether owner {owner} \
                     has a manager candidate is unknown - retry",
                    self.space
                ))
                .into())
            }
        };
        let instances = listed
            .iter()
            .map(|key| keys::parse_epgate(key).map(|(_, instance)| instance))
            .collect::<Result<Vec<_>, _>>()
            .map_err(EpError::stored)?;
        // One memoized iteration per gate, so a space with many managers replays linearly.
        let verdicts = cx.each(&instances, |cx, instance| {
            let (verdict, _, arm) = judge(cx, &self.space, owner, self.local.as_ref(), instance)?;
            Ok((verdict, arm))
        })?;
        // A gate gone since the listing reads `unknown` and, like another owner's, is not
        // this owner's; the local manager's gate is not a remote one.
        let owned: Vec<(&InstanceId, Verdict)> = instances
            .iter()
            .zip(verdicts.iter().map(|judged| **judged))
            .filter(|(_, (verdict, arm))| verdict.is_this_owners() && *arm == Some(Arm::Remote))
            .map(|(instance, (verdict, _))| (instance, verdict))
            .collect();
        let local = instances
            .iter()
            .zip(verdicts.iter().map(|judged| **judged))
            .find(|(_, judged)| *judged == (Verdict::Candidate, Some(Arm::Local)))
            .map(|(instance, _)| instance);
        let live: Vec<&InstanceId> = owned
            .iter()
            .filter(|(_, verdict)| *verdict == Verdict::Candidate)
            .map(|(instance, _)| *instance)
            .collect();
        match (live.as_slice(), owned.is_empty()) {
            ([one], _) => Ok((*one).clone()),
            ([], true) => match local {
                Some(local) => Ok(local.clone()),
                None => Err(EpError::failed_precondition(format!(
                    "manager-caller selection found no manager candidate for owner {owner} - no \
                     manager gate records its serve principal and the workspace's own manager \
                     is not serving; register a manager first"
                ))
                .into()),
            },
            ([], false) => Err(EpError::unavailable(format!(
                "owner {owner}'s remote manager instances are unavailable: none of {} is open \
                 and serving its current registration - retry once one is, or pass \
                 managerInstanceId to address one explicitly",
                joined(owned.iter().map(|(instance, _)| *instance))
            ))
            .into()),
            (many, _) => Err(EpError::failed_precondition(format!(
                "owner {owner} has {} live remote manager candidates ({}) - pass \
                 managerInstanceId to choose one",
                many.len(),
                joined(many.iter().copied())
            ))
            .into()),
        }
    }
}

/// `a, b, c`: the instances a refusal names.
fn joined<'a>(instances: impl Iterator<Item = &'a InstanceId>) -> String {
    instances
        .map(InstanceId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}
