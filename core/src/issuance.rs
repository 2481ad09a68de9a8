//! The mint fence (SPEC §13.1, F19–F29, F43): provisioning and observing an endpoint gate, and
//! the two finalize paths that decide whether a fully built credential may be released.
//!
//! Order is always observe gate → stage ledger row → revision-pinned touch of the gate →
//! release (F19). The touch rewrites the gate's observed bytes at the observed revision, so it
//! wins only if nothing at all was written to the gate since the observation; a freeze or a
//! reopen in between makes it lose, and the staged row is revoked (F20, F21).

use crate::error::EpError;
use crate::gate::{
    EndpointGate, GateState, NameAuthorityRevision, ProcessEpoch, RegistrationRevision,
};
use crate::kv::{Revision, Store, WriteOutcome};
use crate::ledger::{self, LedgerRow};
use crate::machine::{Ctx, Halt, Replay, Script};
use crate::names::{
    keys, ActorToken, CredentialId, EndpointName, InstanceId, OwnerToken, Principal, SourceMember,
    SpaceName,
};

/// Which gate: an endpoint instance in a space. Adapters carry the endpoint *name*; only the
/// key builders tokenize it (a double-tokenization bug once broke every reverse-DNS endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GateRef {
    pub space: SpaceName,
    pub endpoint: EndpointName,
    pub instance: InstanceId,
}

impl GateRef {
    pub fn new(space: SpaceName, endpoint: EndpointName, instance: InstanceId) -> Self {
        GateRef {
            space,
            endpoint,
            instance,
        }
    }

    /// `epgate.<endpointToken>.<instanceId>`.
    pub fn key(&self) -> String {
        keys::epgate(&self.endpoint, &self.instance)
    }

    /// `epcred.<endpointToken>.<instanceId>.` — the credential family this gate fences.
    pub fn family_prefix(&self) -> String {
        keys::epcred_family_prefix(&self.endpoint, &self.instance)
    }
}

/// A gate as one leader-served read saw it: the parsed row, its KV revision and its exact bytes
/// (the touch rewrites these bytes, so it never re-serializes a peer's row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateObservation {
    pub gate: EndpointGate,
    pub revision: Revision,
    pub raw: Vec<u8>,
}

/// Reads the gate: `None` when absent; a DEL/PURGE marker is `failed-precondition` (gates are
/// never deleted, F9); bad bytes are `internal`.
pub fn observe_gate(cx: &mut Ctx<'_>, gate: &GateRef) -> Result<Option<GateObservation>, Halt> {
    let key = gate.key();
    let Some(entry) = ledger::read(cx, Store::Auth, &key)? else {
        return Ok(None);
    };
    if !entry.is_put() {
        return Err(EpError::failed_precondition(format!(
            "gate {key} carries a {} marker; gates are never deleted (F9)",
            entry.operation.as_str()
        ))
        .into());
    }
    Ok(Some(GateObservation {
        gate: EndpointGate::parse(&entry.value)?,
        revision: entry.revision,
        raw: entry.value,
    }))
}

/// Observes one gate.
#[derive(Debug, Clone)]
pub struct ObserveGate {
    pub gate: GateRef,
}

impl Script for ObserveGate {
    type Output = Option<GateObservation>;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Self::Output, Halt> {
        observe_gate(cx, &self.gate)
    }
}

/// Provisions a gate open at generation 0 (E0): create-only and byte-idempotent, so re-running
/// it on the untouched gate with the same principal is a no-op, while a different principal —
/// or any gate that has since been frozen or reopened — is `conflict` (reference §3.2). Callers
/// that may re-run provisioning observe first and provision only on absence.
#[derive(Debug, Clone)]
pub struct ProvisionGate {
    pub gate: GateRef,
    pub principal: Principal,
}

impl ProvisionGate {
    pub fn machine(gate: GateRef, principal: Principal) -> Replay<Self> {
        Replay::new(ProvisionGate { gate, principal })
    }
}

impl Script for ProvisionGate {
    type Output = Revision;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Revision, Halt> {
        let row = EndpointGate::provisioned(self.principal.clone())?;
        ledger::create_byte_idempotent(cx, Store::Auth, &self.gate.key(), &row.to_bytes(), "gate")
    }
}

/// A serve grant: the coordinates a serve credential was authorized at. Issued by the serve
/// grant authorization of the registration flow; the finalize compares it with the live gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeGrant {
    pub space: SpaceName,
    pub endpoint: EndpointName,
    pub instance: InstanceId,
    pub owner: OwnerToken,
    pub epoch: ProcessEpoch,
    pub registration_revision: RegistrationRevision,
    pub name_authority_revision: NameAuthorityRevision,
}

/// The fully built serve credential awaiting release: its identity and ledger facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeCredential {
    /// `sha256-<hex>` of the creds (or JWT) text, so a byte-identical retry maps to one row.
    pub credential_id: CredentialId,
    pub holder_actor: ActorToken,
    pub source_chain: Vec<SourceMember>,
    /// Expiry, unix seconds.
    pub exp: u64,
}

/// What a winning finalize committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The ledger row that now records the credential (F22).
    pub row_key: String,
    /// The gate revision the winning touch produced.
    pub gate_revision: Revision,
}

/// The serve-mint release fence (F19–F22, F27, F28). Build the whole credential first; release
/// it only if this machine returns `Ok`.
///
/// Checks, in order, with no write before the last of them: the gate exists (`expired`), is the
/// grant's gate (`internal`), is `open` (`expired`), sits at the grant's epoch, registration
/// revision and name-authority revision (`expired`), and records the minting principal
/// (`permission-denied`). Then it stages the ledger row and touches the gate at the observed
/// revision. A lost touch revokes the staged row and refuses `expired`; a touch whose outcome
/// is unknown cannot be settled by a read (its bytes are identical to the gate's), so it fails
/// closed: revoke, `unavailable`. There is no retry on contention: a serve mint that loses to a
/// peer's touch simply refuses, unlike [`CommitSibling`].
#[derive(Debug, Clone)]
pub struct FinalizeServeMint {
    pub gate: GateRef,
    pub grant: ServeGrant,
    pub credential: ServeCredential,
}

impl FinalizeServeMint {
    pub fn machine(gate: GateRef, grant: ServeGrant, credential: ServeCredential) -> Replay<Self> {
        Replay::new(FinalizeServeMint {
            gate,
            grant,
            credential,
        })
    }
}

impl Script for FinalizeServeMint {
    type Output = Release;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Release, Halt> {
        let grant = &self.grant;
        let credential = &self.credential;
        for member in &credential.source_chain {
            SourceMember::parse_bounded(&member.to_wire()).map_err(EpError::stored)?;
        }
        let Some(observed) = observe_gate(cx, &self.gate)? else {
            return Err(EpError::expired(format!(
                "gate {} does not exist; the serve grant no longer matches a live instance",
                self.gate.key()
            ))
            .into());
        };
        if (&grant.space, &grant.endpoint, &grant.instance)
            != (&self.gate.space, &self.gate.endpoint, &self.gate.instance)
        {
            return Err(EpError::internal(
                "the serve grant names another gate than the one this mint observes",
            )
            .into());
        }
        let gate = &observed.gate;
        if gate.state() != GateState::Open {
            return Err(blocked(gate, &self.gate).into());
        }
        if gate.process_epoch() != grant.epoch
            || gate.registration_revision() != grant.registration_revision
            || gate.name_authority_revision() != grant.name_authority_revision
        {
            return Err(EpError::expired(format!(
                "the serve grant was authorized at epoch {}, registration revision {}, name \
                 authority revision {}, but the gate now has {}, {}, {}; the instance was taken \
                 over, re-registered or its name transferred (F27)",
                grant.epoch,
                grant.registration_revision,
                grant.name_authority_revision,
                gate.process_epoch(),
                gate.registration_revision(),
                gate.name_authority_revision()
            ))
            .into());
        }
        let minted = Principal::new(grant.owner.clone(), credential.holder_actor.clone());
        if &minted != gate.principal() {
            return Err(EpError::permission_denied(format!(
                "serve credentials of this gate are minted only for {}, not {minted} (F28)",
                gate.principal()
            ))
            .into());
        }
        let row = LedgerRow::endpoint_active(
            self.gate.endpoint.clone(),
            &self.gate.instance,
            credential.credential_id.clone(),
            gate.principal().clone(),
            credential.source_chain.clone(),
            credential.exp,
        )
        .map_err(EpError::stored)?;
        let row_key = stage(cx, &row)?;
        match touch(cx, &self.gate, &observed)? {
            WriteOutcome::Written(gate_revision) => Ok(Release {
                row_key,
                gate_revision,
            }),
            WriteOutcome::CasLost => revoke_then_refuse(
                cx,
                &row_key,
                EpError::expired(
                    "the issuance gate advanced during mint; the credential was not released \
                     (F20)",
                ),
            ),
            WriteOutcome::Ambiguous(why) => revoke_then_refuse(
                cx,
                &row_key,
                EpError::unavailable(format!(
                    "the gate commit's outcome is unknown ({why}); the mint fails closed and \
                     the credential was not released"
                )),
            ),
            WriteOutcome::NotSent(why) => revoke_then_refuse(
                cx,
                &row_key,
                EpError::unavailable(format!(
                    "the gate commit could not be sent ({why}); the credential was not released"
                )),
            ),
        }
    }
}

/// Attempts a sibling commit makes while the only thing moving the gate is peers' touches. Not a
/// settle loop (so not [`crate::kv::settle::AMBIGUOUS_WRITE_ATTEMPTS`]): an unanswered touch is
/// never re-sent, and each attempt re-pins to a peer's identical-bytes touch.
pub const SIBLING_COMMIT_ATTEMPTS: usize = 64;

/// Commits a credential minted beside the serve credential into the same `epcred` family (F43).
///
/// The caller observed the gate and built the credential from that observation; the observation
/// is the authority and is never replaced by a re-read. A lost touch re-reads the gate: if every
/// field except the revision equals the observation, the only writer that can have moved it is
/// a peer mint's identical-bytes touch (the closed set of gate writers), so the commit re-pins
/// and retries, at most [`SIBLING_COMMIT_ATTEMPTS`] times; any moved field refuses `expired`.
/// Every refusal after staging revokes the staged row first.
#[derive(Debug, Clone)]
pub struct CommitSibling {
    pub gate: GateRef,
    pub observed: GateObservation,
    pub row: LedgerRow,
}

impl CommitSibling {
    pub fn machine(gate: GateRef, observed: GateObservation, row: LedgerRow) -> Replay<Self> {
        Replay::new(CommitSibling {
            gate,
            observed,
            row,
        })
    }
}

impl Script for CommitSibling {
    type Output = Release;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Release, Halt> {
        if self.observed.gate.state() != GateState::Open {
            return Err(blocked(&self.observed.gate, &self.gate).into());
        }
        if self.row.endpoint() != Some(&self.gate.endpoint)
            || self.row.lifecycle_uid() != &self.gate.instance.as_lifecycle_uid()
        {
            return Err(EpError::failed_precondition(
                "the sibling row belongs to another gate's credential family",
            )
            .into());
        }
        if self.row.state() != crate::ledger::CredState::Active {
            return Err(EpError::bad_request("a sibling commit stages an active row").into());
        }
        let row_key = stage(cx, &self.row)?;
        let mut pin = self.observed.clone();
        for _ in 0..SIBLING_COMMIT_ATTEMPTS {
            match touch(cx, &self.gate, &pin)? {
                WriteOutcome::Written(gate_revision) => {
                    return Ok(Release {
                        row_key,
                        gate_revision,
                    })
                }
                WriteOutcome::Ambiguous(why) => {
                    return revoke_then_refuse(
                        cx,
                        &row_key,
                        EpError::unavailable(format!(
                            "the sibling commit's outcome is unknown ({why}); it fails closed"
                        )),
                    )
                }
                WriteOutcome::NotSent(why) => {
                    return revoke_then_refuse(
                        cx,
                        &row_key,
                        EpError::unavailable(format!(
                            "the sibling commit could not be sent ({why}); nothing was released"
                        )),
                    )
                }
                WriteOutcome::CasLost => {}
            }
            let now = match cx.recover(|cx| observe_gate(cx, &self.gate))? {
                Ok(now) => now,
                Err(e) => return revoke_then_refuse(cx, &row_key, e),
            };
            match now {
                None => {
                    return revoke_then_refuse(
                        cx,
                        &row_key,
                        EpError::expired("the issuance gate vanished during the sibling mint"),
                    )
                }
                Some(now) if now.gate != self.observed.gate => return revoke_then_refuse(
                    cx,
                    &row_key,
                    EpError::expired(
                        "a barrier moved the issuance gate during the sibling mint (frozen, or \
                             reopened at a successor coordinate); nothing was released (F43)",
                    ),
                ),
                Some(now) => pin = now,
            }
        }
        revoke_then_refuse(
            cx,
            &row_key,
            EpError::unavailable(format!(
                "the issuance gate stayed contended across {SIBLING_COMMIT_ATTEMPTS} sibling \
                 commit attempts"
            )),
        )
    }
}

/// Rewrites the observed gate bytes at the observed revision: the mint's commit CAS (M). An
/// unanswered touch cannot be settled by a read-back: its bytes equal the gate's, so the read
/// cannot tell who wrote.
fn touch(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    observed: &GateObservation,
) -> Result<WriteOutcome, Halt> {
    cx.update(
        Store::Auth,
        gate.key(),
        observed.raw.clone(),
        observed.revision,
    )
}

/// Stages a ledger row (create-only, byte-idempotent, F29). If staging failed after a write may
/// have landed, the row is revoked if it is there, so a refused mint never leaves an active row.
pub(crate) fn stage(cx: &mut Ctx<'_>, row: &LedgerRow) -> Result<String, Halt> {
    let key = row.key();
    let staged = cx.recover(|cx| {
        ledger::create_byte_idempotent(cx, Store::Auth, &key, &row.to_bytes(), "ledger row")
    })?;
    match staged {
        Ok(_) => Ok(key),
        Err(e) if e.code == crate::ErrorCode::Unavailable => {
            match cx.recover(|cx| ledger::read(cx, Store::Auth, &key))? {
                Ok(Some(entry)) if entry.is_put() && entry.value == row.to_bytes() => {
                    revoke_then_refuse(cx, &key, e)
                }
                Ok(_) => Err(e.into()),
                Err(read_error) => Err(e
                    .with_note(format!(
                        "the staged row {key} may exist active and could not be read back: \
                         {read_error}; it is reconciliation debt"
                    ))
                    .into()),
            }
        }
        // Our own row, already revoked: an ambiguous stage committed and a barrier revoked the
        // row before the read-back. Nothing may be released; say why precisely.
        Err(e) if e.code == crate::ErrorCode::Conflict => {
            match cx.recover(|cx| ledger::read(cx, Store::Auth, &key))? {
                Ok(Some(entry)) if entry.is_put() && entry.value == row.revoked().to_bytes() => {
                    Err(EpError::expired(format!(
                        "a barrier revoked this mint's staged row {key} before the mint could \
                         confirm it; the credential was not released (F20)"
                    ))
                    .into())
                }
                _ => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Revokes the staged row, then refuses with `refusal`; a revoke failure is appended to the
/// message as reconciliation debt, never swallowed. Never `Ok`: it only suspends or refuses.
pub(crate) fn revoke_then_refuse<T>(
    cx: &mut Ctx<'_>,
    row_key: &str,
    refusal: EpError,
) -> Result<T, Halt> {
    let refusal = match cx.recover(|cx| ledger::revoke_row(cx, row_key))? {
        Ok(_) => refusal,
        Err(e) => refusal.with_note(format!(
            "revoking the staged row {row_key} also failed ({e}); it is reconciliation debt"
        )),
    };
    Err(refusal.into())
}

/// `expired` for a gate that is not open, with the reference's lifecycle-blocked detail.
fn blocked(gate: &EndpointGate, at: &GateRef) -> EpError {
    let mut detail = serde_json::Map::new();
    detail.insert("kind".into(), "ai.cotal.ep.lifecycle-blocked".into());
    detail.insert("gateState".into(), gate.state().as_str().into());
    if let Some(op) = gate.op() {
        let mut blocked_op = serde_json::Map::new();
        blocked_op.insert("opId".into(), op.op_id().as_str().into());
        blocked_op.insert("kind".into(), op.kind().as_str().into());
        detail.insert("blockedOp".into(), blocked_op.into());
    }
    EpError::expired(format!(
        "gate {} is {}; no credential is released under a gate that is not open (F22)",
        at.key(),
        gate.state().as_str()
    ))
    .with_detail(detail.into())
}
