//! Renewal compensation (reference-auth-service §4.6): the durable per-instance cleanup intent
//! `renewclean.manager.<instanceId>` and the fenced release of the manager's endpoint family
//! (serve, goalWriter, sessionLedger) under it.
//!
//! A family release writes three ledger rows, each before its own gate touch (F19, F22). If the
//! operation then fails, every row *this request created* must be revoked, and no row it merely
//! *reused* may be: a renewal minted in the same second as the previous issuance signs
//! byte-identical JWTs, so its stage lands on the prior family's live rows, and revoking them
//! would cut a healthy manager off (F92). The intent records each participant before its row is
//! staged and checkpoints whether the stage created or reused the row, so a crash anywhere leaves
//! enough on disk for the next operation on the instance to finish the cleanup first.
//!
//! **Ambiguity.** A create that came back ambiguous and reads back our bytes is attributed by
//! revision: KV revisions are stream-wide, so a row whose revision is above the intent write
//! that recorded its participant was written after that record, i.e. by this request (intent
//! writes are revision-pinned, so two operations on one instance never stage at once). Every
//! intent write is settled by a leader read-back of its own bytes.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::{EpError, ErrorCode};
use crate::gate::{
    Coordinates, GateState, Generation, NameAuthorityRevision, ProcessEpoch, RegistrationRevision,
};
use crate::issuance::{observe_gate, GateObservation, GateRef};
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{KvRequest, Revision, Store, WriteOutcome};
use crate::ledger::{self, CredState, IdenticalCreate, LedgerRow};
use crate::machine::{Ctx, Halt};
use crate::manager::{RequestId, UserKey};
use crate::names::{keys, CredentialId, EndpointName, InstanceId, Principal, SourceMember};
use crate::wire::{self, ObjectWriter};

/// Attempts a family member's touch makes while only peers' identical-bytes touches move the
/// gate (the sibling rule of F43). Not a settle loop (so not [`AMBIGUOUS_WRITE_ATTEMPTS`]): a
/// touch is never re-sent after an unanswered attempt, only re-pinned after a peer's.
pub const TOUCH_ATTEMPTS: usize = 16;

/// The three endpoint-family roles, in release order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Serve,
    GoalWriter,
    SessionLedger,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Serve, Role::GoalWriter, Role::SessionLedger];

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Serve => "serve",
            Role::GoalWriter => "goalWriter",
            Role::SessionLedger => "sessionLedger",
        }
    }

    fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The fault probe that fires right after this role's gate touch won.
    fn after_finalize(self) -> RenewalFault {
        match self {
            Role::Serve => RenewalFault::AfterServeFinalize,
            Role::GoalWriter => RenewalFault::AfterGoalFinalize,
            Role::SessionLedger => RenewalFault::AfterSessionFinalize,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether this request's stage wrote the row, or found a byte-identical one already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// Recorded before the stage; the stage's outcome was never checkpointed.
    Unresolved,
    Created,
    Reused,
}

impl Ownership {
    pub const fn as_str(self) -> &'static str {
        match self {
            Ownership::Unresolved => "unresolved",
            Ownership::Created => "created",
            Ownership::Reused => "reused",
        }
    }
}

/// A participant's progress: staged (`prepared`) or committed by a winning touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParticipantState {
    Prepared,
    Finalized,
}

impl ParticipantState {
    pub const fn as_str(self) -> &'static str {
        match self {
            ParticipantState::Prepared => "prepared",
            ParticipantState::Finalized => "finalized",
        }
    }
}

/// `pending` while an operation may still leave rows behind; `complete` once it answered or
/// cleaned up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntentState {
    Pending,
    Complete,
}

impl IntentState {
    pub const fn as_str(self) -> &'static str {
        match self {
            IntentState::Pending => "pending",
            IntentState::Complete => "complete",
        }
    }
}

/// A test probe: fail the operation at this point, as the reference's `probeRenewalFault` does.
/// Production passes none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RenewalFault {
    AfterServeFinalize,
    AfterGoalFinalize,
    AfterSessionFinalize,
    BeforeResponse,
}

impl RenewalFault {
    pub const fn as_str(self) -> &'static str {
        match self {
            RenewalFault::AfterServeFinalize => "after-serve-finalize",
            RenewalFault::AfterGoalFinalize => "after-goal-finalize",
            RenewalFault::AfterSessionFinalize => "after-session-finalize",
            RenewalFault::BeforeResponse => "before-response",
        }
    }
}

fn probe(fault: Option<RenewalFault>, at: RenewalFault) -> Result<(), Halt> {
    if fault == Some(at) {
        return Err(
            EpError::unavailable(format!("injected renewal fault at {}", at.as_str())).into(),
        );
    }
    Ok(())
}

/// The ledger row a participant stands for, with the gate coordinates it was built at
/// (the reference's in-memory serve ledger row; only the first seven fields are persisted in
/// the ledger itself). Endpoint is always `manager`, state always `active`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IntentRow {
    pub credential_id: CredentialId,
    /// The credential's nkey.
    pub credential_key: UserKey,
    pub holder_principal: Principal,
    pub instance: InstanceId,
    pub source_chain: Vec<SourceMember>,
    pub exp: Option<u64>,
    pub coordinates: Coordinates,
}

const ROW_FIELDS: [&str; 12] = [
    "credentialId",
    "credentialKey",
    "holderPrincipal",
    "endpoint",
    "lifecycleUid",
    "sourceChain",
    "state",
    "exp",
    "generation",
    "processEpoch",
    "registrationRevision",
    "nameAuthorityRevision",
];

fn manager_endpoint() -> Result<EndpointName, EpError> {
    EndpointName::parse("manager").map_err(EpError::stored)
}

impl IntentRow {
    /// The persisted ledger row this participant stands for.
    pub fn ledger_row(&self) -> Result<LedgerRow, EpError> {
        LedgerRow::endpoint_active(
            manager_endpoint()?,
            &self.instance,
            self.credential_id.clone(),
            self.holder_principal.clone(),
            self.source_chain.clone(),
            self.exp.unwrap_or(0),
        )
    }

    fn to_json(&self) -> String {
        let chain: Vec<String> = self
            .source_chain
            .iter()
            .map(SourceMember::to_wire)
            .collect();
        let c = &self.coordinates;
        let mut w = ObjectWriter::new()
            .string("credentialId", self.credential_id.as_str())
            .string("credentialKey", self.credential_key.as_str())
            .string("holderPrincipal", &self.holder_principal.key())
            .string("endpoint", "manager")
            .string("lifecycleUid", self.instance.as_str())
            .strings("sourceChain", chain.iter().map(String::as_str))
            .string("state", "active");
        if let Some(exp) = self.exp {
            w = w.uint("exp", exp);
        }
        w.uint("generation", c.generation.0)
            .uint("processEpoch", c.process_epoch.0)
            .uint("registrationRevision", c.registration_revision.0)
            .uint("nameAuthorityRevision", c.name_authority_revision.0)
            .finish()
    }

    fn parse(value: &serde_json::Value, instance: &InstanceId) -> Result<IntentRow, EpError> {
        const WHAT: &str = "manager renewal cleanup intent row";
        let map = value
            .as_object()
            .ok_or_else(|| EpError::internal(format!("{WHAT} is not an object")))?;
        wire::reject_unknown(map, &ROW_FIELDS, WHAT)?;
        let text = |k: &str| wire::str_field(map, k, WHAT);
        let uint = |k: &str| wire::uint_field(map, k, WHAT);
        if text("endpoint")? != "manager"
            || text("lifecycleUid")? != instance.as_str()
            || text("state")? != "active"
        {
            return Err(EpError::internal(format!(
                "{WHAT} does not belong to the active manager family of {instance}"
            )));
        }
        let source_chain = wire::str_array_field(map, "sourceChain", WHAT)?
            .into_iter()
            .map(|m| SourceMember::parse(m).map_err(EpError::stored))
            .collect::<Result<Vec<_>, _>>()?;
        if source_chain.is_empty() {
            return Err(EpError::internal(format!(
                "{WHAT} has an empty source chain"
            )));
        }
        Ok(IntentRow {
            credential_id: CredentialId::parse(text("credentialId")?).map_err(EpError::stored)?,
            credential_key: UserKey::parse(text("credentialKey")?)
                .ok_or_else(|| EpError::internal(format!("{WHAT} credentialKey is no nkey")))?,
            holder_principal: Principal::parse(text("holderPrincipal")?)
                .map_err(EpError::stored)?,
            instance: instance.clone(),
            source_chain,
            exp: map.get("exp").map(|_| uint("exp")).transpose()?,
            coordinates: Coordinates {
                generation: Generation(uint("generation")?),
                process_epoch: ProcessEpoch(uint("processEpoch")?),
                registration_revision: RegistrationRevision(uint("registrationRevision")?),
                name_authority_revision: NameAuthorityRevision(uint("nameAuthorityRevision")?),
            },
        })
    }
}

/// One role's record in the intent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Participant {
    pub role: Role,
    pub ownership: Ownership,
    pub state: ParticipantState,
    pub row: IntentRow,
}

/// The cleanup intent row: `{v:1, kind:"manager-renewal-cleanup", requestId, state,
/// participants:[{role, ownership, state, row}]}`, written in this order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CleanupIntent {
    pub request_id: RequestId,
    pub state: IntentState,
    pub participants: Vec<Participant>,
}

const INTENT_KIND: &str = "manager-renewal-cleanup";

impl CleanupIntent {
    pub fn pending(request_id: RequestId) -> CleanupIntent {
        CleanupIntent {
            request_id,
            state: IntentState::Pending,
            participants: Vec::new(),
        }
    }

    /// The same intent, complete: every participant finalized.
    #[must_use]
    pub fn completed(&self) -> CleanupIntent {
        CleanupIntent {
            state: IntentState::Complete,
            ..self.clone()
        }
    }

    pub fn to_json(&self) -> String {
        let participants: Vec<String> = self
            .participants
            .iter()
            .map(|p| {
                ObjectWriter::new()
                    .string("role", p.role.as_str())
                    .string("ownership", p.ownership.as_str())
                    .string("state", p.state.as_str())
                    .raw("row", &p.row.to_json())
                    .finish()
            })
            .collect();
        ObjectWriter::new()
            .uint("v", 1)
            .string("kind", INTENT_KIND)
            .string("requestId", self.request_id.as_str())
            .string("state", self.state.as_str())
            .raw("participants", &format!("[{}]", participants.join(",")))
            .finish()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().into_bytes()
    }

    /// Parses a stored intent read from `key`. Closed schema at every level, one participant
    /// per role, an unresolved participant never finalized; every violation is `internal`.
    pub fn parse(bytes: &[u8], key: &str) -> Result<CleanupIntent, EpError> {
        const WHAT: &str = "manager renewal cleanup intent";
        let instance = key
            .strip_prefix("renewclean.manager.")
            .and_then(|i| InstanceId::parse(i).ok())
            .ok_or_else(|| {
                EpError::internal(format!("{WHAT} is stored under a malformed key {key:?}"))
            })?;
        let map = wire::parse_object(bytes, WHAT)?;
        wire::reject_unknown(
            &map,
            &["v", "kind", "requestId", "state", "participants"],
            WHAT,
        )?;
        let request_id = wire::str_field(&map, "requestId", WHAT)
            .ok()
            .and_then(RequestId::parse);
        let state = match wire::str_field(&map, "state", WHAT)? {
            "pending" => Some(IntentState::Pending),
            "complete" => Some(IntentState::Complete),
            _ => None,
        };
        let (Some(1), Ok(INTENT_KIND), Some(request_id), Some(state), Some(list)) = (
            map.get("v").and_then(wire::safe_uint),
            wire::str_field(&map, "kind", WHAT),
            request_id,
            state,
            map.get("participants")
                .and_then(serde_json::Value::as_array),
        ) else {
            return Err(EpError::internal(format!("{WHAT} does not validate")));
        };
        let invalid = || EpError::internal(format!("{WHAT} carries an invalid participant"));
        let mut participants: Vec<Participant> = Vec::new();
        for item in list {
            let p = item.as_object().ok_or_else(invalid)?;
            wire::reject_unknown(p, &["role", "ownership", "state", "row"], WHAT)?;
            let role = p
                .get("role")
                .and_then(serde_json::Value::as_str)
                .and_then(Role::parse)
                .ok_or_else(invalid)?;
            let ownership = match p.get("ownership").and_then(serde_json::Value::as_str) {
                Some("unresolved") => Ownership::Unresolved,
                Some("created") => Ownership::Created,
                Some("reused") => Ownership::Reused,
                _ => return Err(invalid()),
            };
            let pstate = match p.get("state").and_then(serde_json::Value::as_str) {
                Some("prepared") => ParticipantState::Prepared,
                Some("finalized") => ParticipantState::Finalized,
                _ => return Err(invalid()),
            };
            if ownership == Ownership::Unresolved && pstate != ParticipantState::Prepared {
                return Err(invalid());
            }
            if participants.iter().any(|q| q.role == role) {
                return Err(EpError::internal(format!("{WHAT} repeats role {role}")));
            }
            let row = IntentRow::parse(p.get("row").ok_or_else(invalid)?, &instance)?;
            participants.push(Participant {
                role,
                ownership,
                state: pstate,
                row,
            });
        }
        Ok(CleanupIntent {
            request_id,
            state,
            participants,
        })
    }
}

/// An intent as read, with the revision a rewrite pins to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedIntent {
    pub revision: Revision,
    pub intent: CleanupIntent,
}

/// Leader-served read of the intent; a DEL/PURGE marker is `failed-precondition` (intents are
/// never deleted), bad bytes `internal`.
pub fn load_intent(cx: &mut Ctx<'_>, key: &str) -> Result<Option<LoadedIntent>, Halt> {
    // Memoized: the parse is not redone on every later replay of the renewal.
    Ok((*cx.sub(|cx| read_intent(cx, key))?).clone())
}

fn read_intent(cx: &mut Ctx<'_>, key: &str) -> Result<Option<LoadedIntent>, Halt> {
    let Some(entry) = ledger::read(cx, Store::Auth, key)? else {
        return Ok(None);
    };
    if !entry.is_put() {
        return Err(EpError::failed_precondition(format!(
            "manager renewal cleanup intent {key} carries a {} marker; cleanup intents are never \
             deleted",
            entry.operation.as_str()
        ))
        .into());
    }
    Ok(Some(LoadedIntent {
        revision: entry.revision,
        intent: CleanupIntent::parse(&entry.value, key)?,
    }))
}

/// Writes the intent create-only (`expected: None`) or pinned to `expected`. A lost pin is
/// `conflict` (another operation on this instance moved it); an ambiguous write is settled by
/// reading back our own bytes, re-sent while the key reads unmoved, and otherwise `unavailable`.
pub fn write_intent(
    cx: &mut Ctx<'_>,
    key: &str,
    intent: &CleanupIntent,
    expected: Option<Revision>,
) -> Result<Revision, Halt> {
    // Memoized: the intent is not re-serialized on every later replay of the renewal.
    cx.sub(|cx| put_intent(cx, key, intent, expected))
        .map(|revision| *revision)
}

fn put_intent(
    cx: &mut Ctx<'_>,
    key: &str,
    intent: &CleanupIntent,
    expected: Option<Revision>,
) -> Result<Revision, Halt> {
    let bytes = intent.to_bytes();
    let request = match expected {
        None => KvRequest::Create {
            store: Store::Auth,
            key: key.to_owned(),
            value: bytes.clone(),
        },
        Some(expected) => KvRequest::Update {
            store: Store::Auth,
            key: key.to_owned(),
            value: bytes.clone(),
            expected,
        },
    };
    let settled = settle_write(cx, &request, |cx, heard| {
        let why = match heard {
            Heard::Unanswered(why) => why,
            Heard::Lost { earlier: None } => {
                return Err(EpError::conflict(format!(
                    "the manager renewal cleanup intent {key} moved: another operation on this \
                     manager instance is in flight; retry"
                ))
                .into())
            }
            Heard::Lost { earlier: Some(_) } => RESEND_LOST,
            Heard::NotSent { why, earlier: None } => {
                return Err(EpError::unavailable(format!(
                    "writing the manager renewal cleanup intent {key} failed before it was \
                     sent: {why}"
                ))
                .into())
            }
            Heard::NotSent { why, .. } => why,
        };
        match ledger::read(cx, Store::Auth, key)? {
            Some(entry) if entry.is_put() && entry.value == bytes => {
                Ok(Verdict::Settled(entry.revision))
            }
            Some(entry) if Some(entry.revision) == expected => Ok(Verdict::Unmoved),
            None if expected.is_none() => Ok(Verdict::Unmoved),
            _ => Err(EpError::unavailable(format!(
                "writing the manager renewal cleanup intent {key} came back ambiguous ({why}) \
                 and the intent moved; the write may have committed"
            ))
            .into()),
        }
    })?;
    match settled {
        Settled::Written(revision) | Settled::Judged(revision) => Ok(revision),
        Settled::Exhausted(heard) => {
            let why = match &heard {
                Heard::Unanswered(why) | Heard::NotSent { why, .. } => why,
                Heard::Lost { .. } => RESEND_LOST,
            };
            Err(EpError::unavailable(format!(
                "writing the manager renewal cleanup intent {key} stayed ambiguous across \
                 {AMBIGUOUS_WRITE_ATTEMPTS} attempts ({why}); it may have committed"
            ))
            .into())
        }
    }
}

/// Why a re-send after an unanswered intent write is itself unsettled when it lost its pin: the
/// earlier attempt may have landed.
const RESEND_LOST: &str = "a re-send lost its pin";

/// Stages `row` create-only and learns who owns it. `after` is the revision of the intent write
/// that recorded this participant: an ambiguous create that reads back our bytes above it is
/// ours; our bytes at or below it were already there. A lost create over identical bytes is a
/// reuse; over anything else `conflict` (F29).
pub fn stage_owned(cx: &mut Ctx<'_>, row: &LedgerRow, after: Revision) -> Result<Ownership, Halt> {
    let key = row.key();
    let refusal = match ledger::create_identical(cx, Store::Auth, &key, &row.to_bytes())? {
        IdenticalCreate::Created(_) => return Ok(Ownership::Created),
        IdenticalCreate::Found {
            revision,
            unanswered,
        } => {
            return Ok(if unanswered && revision > after {
                Ownership::Created
            } else {
                Ownership::Reused
            })
        }
        IdenticalCreate::NotSent(why) => EpError::unavailable(format!(
            "staging ledger row {key} failed before it was sent: {why}; nothing was written"
        )),
        IdenticalCreate::Foreign => EpError::conflict(format!(
            "ledger row {key} exists with other content; a staged name never re-binds (F29)"
        )),
        IdenticalCreate::LostAbsent => EpError::conflict(format!(
            "staging ledger row {key} lost its create-only condition but the key reads back \
             absent; retry"
        )),
        IdenticalCreate::Exhausted => EpError::unavailable(format!(
            "staging ledger row {key} stayed ambiguous across {AMBIGUOUS_WRITE_ATTEMPTS} \
             attempts; it may have committed"
        )),
    };
    Err(refusal.into())
}

/// Rewrites the pinned gate bytes at the pinned revision (the mint's commit CAS). A lost touch
/// re-reads the gate: if every field still equals the pin, only a peer's identical-bytes touch
/// moved it, so the touch re-pins and retries (F43); a moved field refuses `expired` (F20). An
/// unanswered touch cannot be settled (its bytes equal the gate's), so it fails closed.
fn touch(cx: &mut Ctx<'_>, gate: &GateRef, pin: &mut GateObservation) -> Result<(), Halt> {
    for _ in 0..TOUCH_ATTEMPTS {
        match cx.update(Store::Auth, gate.key(), pin.raw.clone(), pin.revision)? {
            WriteOutcome::Written(revision) => {
                pin.revision = revision;
                return Ok(());
            }
            WriteOutcome::CasLost => {}
            WriteOutcome::Ambiguous(why) => {
                return Err(EpError::unavailable(format!(
                    "the gate commit's outcome is unknown ({why}); the renewal fails closed and \
                     releases nothing"
                ))
                .into())
            }
            WriteOutcome::NotSent(why) => {
                return Err(EpError::unavailable(format!(
                    "the gate commit could not be sent ({why}); nothing was released"
                ))
                .into())
            }
        }
        match observe_gate(cx, gate)? {
            Some(now) if now.gate == pin.gate => *pin = now,
            _ => {
                return Err(EpError::expired(
                    "the issuance gate moved during the manager family release (frozen, reopened \
                     or gone); nothing was released (F20, F43)",
                )
                .into())
            }
        }
    }
    Err(EpError::unavailable(format!(
        "the issuance gate stayed contended across {TOUCH_ATTEMPTS} commit attempts"
    ))
    .into())
}

/// One family credential awaiting release: its role, its signed JWT and its ledger row.
#[derive(Debug, Clone)]
pub struct FamilyMember {
    pub role: Role,
    pub jwt: String,
    pub row: IntentRow,
}

/// What the operation holds in memory while it releases the family; [`compensate`] reads it.
#[derive(Debug, Default)]
struct Progress {
    /// The intent as last written by this request, with its revision.
    current: Option<LoadedIntent>,
    /// Ownership learned by this request's stages, including those not yet checkpointed.
    volatile: BTreeMap<Role, Ownership>,
}

/// Releases the manager's endpoint family under the cleanup intent (§4.6), pinned to
/// `observed` (the gate observation every member was built from, F27/F43). In order: settle a
/// prior pending intent (or refuse with its cleanup debt), write this request's pending intent,
/// then per member record the participant, stage its row and checkpoint the ownership, touch
/// the gate; finally mark the intent complete. Any refusal after the intent was written revokes
/// exactly the rows this request created, never a reused row (F92). Returns the released JWTs
/// in member order only when everything committed.
pub fn release_family(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    observed: &GateObservation,
    request_id: &RequestId,
    members: &[FamilyMember],
    fault: Option<RenewalFault>,
) -> Result<Vec<(Role, String)>, Halt> {
    if observed.gate.state() != GateState::Open {
        return Err(EpError::expired(format!(
            "gate {} is {}; no credential is released under a gate that is not open (F22)",
            gate.key(),
            observed.gate.state().as_str()
        ))
        .into());
    }
    let key = keys::renewal_intent(&gate.instance);
    let mut progress = Progress::default();
    begin(cx, &key, observed, request_id, &mut progress)?;
    match cx.recover(|cx| release(cx, gate, observed, &key, members, fault, &mut progress))? {
        Ok(()) => Ok(members.iter().map(|m| (m.role, m.jwt.clone())).collect()),
        Err(primary) => Err(compensate(cx, &key, request_id, &progress, primary)?.into()),
    }
}

fn begin(
    cx: &mut Ctx<'_>,
    key: &str,
    observed: &GateObservation,
    request_id: &RequestId,
    progress: &mut Progress,
) -> Result<(), Halt> {
    let mut pin = None;
    if let Some(prior) = load_intent(cx, key)? {
        pin = Some(prior.revision);
        if prior.intent.state == IntentState::Pending {
            let failed = cleanup(
                cx,
                &prior.intent,
                prior.revision,
                Some(observed),
                &BTreeMap::new(),
            )?;
            if !failed.is_empty() {
                return Err(with_debt(
                    EpError::failed_precondition(
                        "a prior manager renewal has unresolved cleanup debt; refusing to mint \
                         another generation",
                    ),
                    &failed,
                )
                .into());
            }
            pin = Some(write_intent(
                cx,
                key,
                &prior.intent.completed(),
                Some(prior.revision),
            )?);
        }
    }
    let intent = CleanupIntent::pending(request_id.clone());
    let revision = cx
        .recover(|cx| write_intent(cx, key, &intent, pin))?
        .map_err(|e| {
            annotate(
                e,
                "persisting the manager renewal cleanup intent failed before any endpoint \
                 credential was finalized",
            )
        })?;
    progress.current = Some(LoadedIntent { revision, intent });
    Ok(())
}

/// Prefixes a failure's message with what was being done.
fn annotate(e: EpError, what: &str) -> EpError {
    EpError {
        message: format!("{what}: {}", e.message),
        ..e
    }
}

/// Writes `intent` over the current one and remembers it.
fn checkpoint(
    cx: &mut Ctx<'_>,
    key: &str,
    progress: &mut Progress,
    intent: CleanupIntent,
) -> Result<(), Halt> {
    let Some(current) = &progress.current else {
        return Err(EpError::internal("the renewal cleanup intent was never written").into());
    };
    let revision = write_intent(cx, key, &intent, Some(current.revision))?;
    progress.current = Some(LoadedIntent { revision, intent });
    Ok(())
}

fn current_intent(progress: &Progress) -> Result<CleanupIntent, Halt> {
    progress
        .current
        .as_ref()
        .map(|c| c.intent.clone())
        .ok_or_else(|| EpError::internal("the renewal cleanup intent was never written").into())
}

fn release(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    observed: &GateObservation,
    key: &str,
    members: &[FamilyMember],
    fault: Option<RenewalFault>,
    progress: &mut Progress,
) -> Result<(), Halt> {
    let mut pin = observed.clone();
    for member in members {
        let role = member.role;
        let ledger_row = member.row.ledger_row()?;
        let mut intent = current_intent(progress)?;
        intent.participants.push(Participant {
            role,
            ownership: Ownership::Unresolved,
            state: ParticipantState::Prepared,
            row: member.row.clone(),
        });
        cx.recover(|cx| checkpoint(cx, key, progress, intent))?
            .map_err(|e| {
                annotate(
                    e,
                    &format!(
                        "persisting manager renewal {role} cleanup metadata failed before the row \
                     was staged"
                    ),
                )
            })?;
        let after = progress
            .current
            .as_ref()
            .map_or(Revision(0), |c| c.revision);
        let ownership = match cx.recover(|cx| stage_owned(cx, &ledger_row, after))? {
            Ok(ownership) => ownership,
            // A definitive refusal staged nothing: drop the marker so cleanup has no debt. An
            // `unavailable` stage may have landed; its marker stays for reconciliation.
            Err(e) if e.code != ErrorCode::Unavailable => {
                let mut intent = current_intent(progress)?;
                intent.participants.retain(|p| p.role != role);
                return Err(
                    match cx.recover(|cx| checkpoint(cx, key, progress, intent))? {
                        Ok(()) => e,
                        Err(w) => EpError::unavailable(format!(
                        "{}; ALSO clearing the un-staged manager renewal {role} marker failed, so \
                         reconciliation must conserve the row: {}",
                        e.message, w.message
                    )),
                    }
                    .into(),
                );
            }
            Err(e) => return Err(e.into()),
        };
        progress.volatile.insert(role, ownership);
        let mut intent = current_intent(progress)?;
        for p in intent.participants.iter_mut().filter(|p| p.role == role) {
            p.ownership = ownership;
        }
        cx.recover(|cx| checkpoint(cx, key, progress, intent))?
            .map_err(|e| {
                annotate(
                    e,
                    &format!(
                        "manager renewal {role} row was staged but its ownership checkpoint could \
                     not be persisted; reconciliation must conserve the row"
                    ),
                )
            })?;
        touch(cx, gate, &mut pin)?;
        probe(fault, role.after_finalize())?;
    }
    probe(fault, RenewalFault::BeforeResponse)?;
    let mut done = current_intent(progress)?.completed();
    for p in &mut done.participants {
        p.state = ParticipantState::Finalized;
    }
    checkpoint(cx, key, progress, done)
}

/// Revokes, newest first, every row `intent` created (ownership from the durable record, or
/// from `volatile` where the record is still unresolved). A row is skipped when reused or
/// already revoked; it is debt (its role is returned) when its ledger entry is unreadable, a
/// marker or does not match, its coordinates differ from `gate` (a superseded generation is the
/// barrier's to reconcile), or its revoke failed.
///
/// A participant whose ownership checkpoint never landed (its request crashed between recording
/// it and checkpointing the stage) is resolved from durable facts instead of being conserved
/// forever: its marker is the intent's last write (`recorded_at`), intent writes are
/// revision-pinned so no other request staged meanwhile, and KV revisions are stream-wide — so
/// an absent row was never staged, and an active row above `recorded_at` was written by that
/// request (created) while one below it predates the record (reused).
fn cleanup(
    cx: &mut Ctx<'_>,
    intent: &CleanupIntent,
    recorded_at: Revision,
    gate: Option<&GateObservation>,
    volatile: &BTreeMap<Role, Ownership>,
) -> Result<Vec<Role>, Halt> {
    let mut failed = Vec::new();
    for p in intent.participants.iter().rev() {
        let ownership = match p.ownership {
            Ownership::Unresolved => volatile.get(&p.role).copied(),
            known => Some(known),
        };
        if ownership == Some(Ownership::Reused) {
            continue;
        }
        let Ok(row) = p.row.ledger_row() else {
            failed.push(p.role);
            continue;
        };
        let key = row.key();
        let Ok(entry) = cx.recover(|cx| ledger::read(cx, Store::Auth, &key))? else {
            failed.push(p.role);
            continue;
        };
        let unresolved = ownership.is_none();
        let (stored, revision) = match entry {
            None if unresolved => continue,
            Some(entry) if entry.is_put() => {
                (LedgerRow::parse(&entry.value, &key).ok(), entry.revision)
            }
            _ => (None, Revision(0)),
        };
        let Some(stored) = stored.filter(|s| {
            s.holder_principal() == row.holder_principal()
                && s.source_chain() == row.source_chain()
                && Some(s.exp()) == p.row.exp
        }) else {
            failed.push(p.role);
            continue;
        };
        if stored.state() == CredState::Revoked || (unresolved && revision <= recorded_at) {
            continue;
        }
        if gate.is_some_and(|g| g.gate.coordinates() != p.row.coordinates) {
            failed.push(p.role);
            continue;
        }
        if cx.recover(|cx| ledger::revoke_row(cx, &key))?.is_err() {
            failed.push(p.role);
        }
    }
    Ok(failed)
}

fn with_debt(primary: EpError, failed: &[Role]) -> EpError {
    let mut roles: Vec<&str> = failed.iter().map(|r| r.as_str()).collect();
    roles.sort_unstable();
    roles.dedup();
    let plural = if roles.len() == 1 { "" } else { "s" };
    primary.with_note(format!(
        "ALSO renewal compensation revoke failed for {} role{plural} ({}); the rows need barrier \
         reconciliation",
        roles.len(),
        roles.join(", ")
    ))
}

/// Undoes this request's half-finished family after `primary`: re-reads the intent (an
/// ambiguous or failed checkpoint may have left its revision unknown), and if it is still this
/// request's and pending, revokes exactly the rows this request created and marks it complete.
/// Always ends in `primary` (returned, to refuse with), with any cleanup debt appended.
fn compensate(
    cx: &mut Ctx<'_>,
    key: &str,
    request_id: &RequestId,
    progress: &Progress,
    primary: EpError,
) -> Result<EpError, Halt> {
    let loaded = match cx.recover(|cx| load_intent(cx, key))? {
        Ok(Some(loaded))
            if loaded.intent.request_id == *request_id
                && loaded.intent.state == IntentState::Pending =>
        {
            loaded
        }
        Ok(_) => return Ok(primary),
        Err(e) => {
            return Ok(primary.with_note(format!(
                "ALSO reading the renewal cleanup intent back failed ({e}); the next renewal of \
                 this instance settles it first"
            )))
        }
    };
    let cleaned = cx.recover(|cx| {
        cleanup(
            cx,
            &loaded.intent,
            loaded.revision,
            None,
            &progress.volatile,
        )
    })?;
    let failed = match cleaned {
        Ok(failed) => failed,
        Err(e) => return Ok(primary.with_note(e.message)),
    };
    if !failed.is_empty() {
        return Ok(with_debt(primary, &failed));
    }
    let completed =
        cx.recover(|cx| write_intent(cx, key, &loaded.intent.completed(), Some(loaded.revision)))?;
    Ok(match completed {
        Ok(_) => primary,
        Err(e) => primary.with_note(format!(
            "ALSO renewal compensation revoked every created row but clearing its durable cleanup \
             intent failed; the next renewal of this instance settles it first: {e}"
        )),
    })
}
