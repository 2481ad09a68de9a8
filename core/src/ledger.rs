//! Credential-ledger rows (`epcred.<endpoint>.<instanceId>.<credentialId>`, and the agent
//! family's `cred.<lifecycleUid>.<credentialId>`) and the two writes the fences make on them:
//! the byte-idempotent stage and the bounded revoke.
//!
//! Rows are never deleted and their state only moves `active → revoked` (F26); a staged name
//! never re-binds to other content (F29); every released credential resolves to a row (F22).

use crate::error::EpError;
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{KvRequest, ReadOutcome, Revision, Store, WriteOutcome};
use crate::machine::{Ctx, Halt};
use crate::names::{
    keys, CredentialId, EndpointName, InstanceId, LifecycleUid, Principal, SourceMember,
};
use crate::wire::{self, ObjectWriter};

/// Ledger state: monotonic, `active → revoked` only (F26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredState {
    Active,
    Revoked,
}

impl CredState {
    pub const fn as_str(self) -> &'static str {
        match self {
            CredState::Active => "active",
            CredState::Revoked => "revoked",
        }
    }
}

/// One credential-ledger row. Fields are private: every value satisfies the closed schema.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LedgerRow {
    credential_id: CredentialId,
    holder_principal: Principal,
    lifecycle_uid: LifecycleUid,
    /// Present exactly in the endpoint family.
    endpoint: Option<EndpointName>,
    source_chain: Vec<SourceMember>,
    state: CredState,
    exp: u64,
}

const ROW_FIELDS: [&str; 7] = [
    "credentialId",
    "holderPrincipal",
    "lifecycleUid",
    "endpoint",
    "sourceChain",
    "state",
    "exp",
];
const WHAT: &str = "credential-ledger row";

impl LedgerRow {
    /// A new `active` row of the endpoint family. The holder must have a real owner so a barrier
    /// can evict it (F24); the lineage must be non-empty; `exp` is unix seconds.
    pub fn endpoint_active(
        endpoint: EndpointName,
        instance: &InstanceId,
        credential_id: CredentialId,
        holder_principal: Principal,
        source_chain: Vec<SourceMember>,
        exp: u64,
    ) -> Result<LedgerRow, EpError> {
        let uid = instance.as_lifecycle_uid();
        let row = LedgerRow::agent_active(uid, credential_id, holder_principal, source_chain, exp)?;
        Ok(LedgerRow {
            endpoint: Some(endpoint),
            ..row
        })
    }

    /// A new `active` row of the agent family (`cred.<lifecycleUid>.<credentialId>`), under the
    /// same rules; `exp` is unix milliseconds, as the reference's agent rows carry it. The one
    /// constructor check of a new row: [`LedgerRow::endpoint_active`] builds on it.
    pub fn agent_active(
        lifecycle_uid: LifecycleUid,
        credential_id: CredentialId,
        holder_principal: Principal,
        source_chain: Vec<SourceMember>,
        exp: u64,
    ) -> Result<LedgerRow, EpError> {
        if !holder_principal.owner().is_real_owner() {
            return Err(EpError::bad_request(format!(
                "holder {holder_principal} has no real owner; a row whose holder cannot be \
                 evicted never ledgers (F24)"
            )));
        }
        if source_chain.is_empty() {
            return Err(EpError::bad_request(
                "a ledger row needs a non-empty source chain",
            ));
        }
        if exp > wire::MAX_SAFE_INTEGER {
            return Err(EpError::bad_request("exp must be a safe unsigned integer"));
        }
        Ok(LedgerRow {
            credential_id,
            holder_principal,
            lifecycle_uid,
            endpoint: None,
            source_chain,
            state: CredState::Active,
            exp,
        })
    }

    pub fn credential_id(&self) -> &CredentialId {
        &self.credential_id
    }
    pub fn holder_principal(&self) -> &Principal {
        &self.holder_principal
    }
    pub fn lifecycle_uid(&self) -> &LifecycleUid {
        &self.lifecycle_uid
    }
    pub fn endpoint(&self) -> Option<&EndpointName> {
        self.endpoint.as_ref()
    }
    pub fn source_chain(&self) -> &[SourceMember] {
        &self.source_chain
    }
    pub fn state(&self) -> CredState {
        self.state
    }
    pub fn exp(&self) -> u64 {
        self.exp
    }

    /// The same row, revoked.
    #[must_use]
    pub fn revoked(&self) -> LedgerRow {
        LedgerRow {
            state: CredState::Revoked,
            ..self.clone()
        }
    }

    /// The key this row lives at, rebuilt from its own identity.
    pub fn key(&self) -> String {
        match &self.endpoint {
            Some(endpoint) => keys::epcred(
                endpoint,
                &self.lifecycle_uid.as_instance_id(),
                &self.credential_id,
            ),
            None => keys::cred(&self.lifecycle_uid, &self.credential_id),
        }
    }

    /// The row's exact bytes, in the reference's stage order.
    pub fn to_json(&self) -> String {
        let mut w = ObjectWriter::new()
            .string("credentialId", self.credential_id.as_str())
            .string("holderPrincipal", &self.holder_principal.key())
            .string("lifecycleUid", self.lifecycle_uid.as_str());
        if let Some(endpoint) = &self.endpoint {
            w = w.string("endpoint", endpoint.as_str());
        }
        let chain: Vec<String> = self
            .source_chain
            .iter()
            .map(SourceMember::to_wire)
            .collect();
        w.strings("sourceChain", chain.iter().map(String::as_str))
            .string("state", self.state.as_str())
            .uint("exp", self.exp)
            .finish()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().into_bytes()
    }

    /// Parses a stored row read from `key`. Closed schema; `cred.` rows must not carry
    /// `endpoint`, `epcred.` rows must; the row's own identity must rebuild `key` exactly, so a
    /// row pointing at another key is refused. Every violation is `internal`.
    pub fn parse(bytes: &[u8], key: &str) -> Result<LedgerRow, EpError> {
        let map = wire::parse_object(bytes, WHAT)?;
        wire::reject_unknown(&map, &ROW_FIELDS, WHAT)?;
        let endpoint_family = key.starts_with("epcred.");
        if !endpoint_family && !key.starts_with("cred.") {
            return Err(EpError::internal(format!(
                "{key:?} is not a credential-ledger key (cred. or epcred.)"
            )));
        }
        let credential_id = CredentialId::parse(wire::str_field(&map, "credentialId", WHAT)?)
            .map_err(EpError::stored)?;
        let holder_principal = Principal::parse(wire::str_field(&map, "holderPrincipal", WHAT)?)
            .map_err(EpError::stored)?;
        if !holder_principal.owner().is_real_owner() {
            return Err(EpError::internal(format!(
                "stored ledger row holder {holder_principal} has no real owner (F24)"
            )));
        }
        let lifecycle_uid = LifecycleUid::parse(wire::str_field(&map, "lifecycleUid", WHAT)?)
            .map_err(EpError::stored)?;
        let endpoint = match (endpoint_family, map.get("endpoint")) {
            (true, Some(_)) => Some(
                EndpointName::parse(wire::str_field(&map, "endpoint", WHAT)?)
                    .map_err(EpError::stored)?,
            ),
            (true, None) => {
                return Err(EpError::internal(
                    "stored epcred row lacks its endpoint field",
                ))
            }
            (false, Some(_)) => {
                return Err(EpError::internal(
                    "stored cred row carries an endpoint field",
                ))
            }
            (false, None) => None,
        };
        let source_chain = wire::str_array_field(&map, "sourceChain", WHAT)?
            .into_iter()
            .map(|m| SourceMember::parse(m).map_err(EpError::stored))
            .collect::<Result<Vec<_>, _>>()?;
        if source_chain.is_empty() {
            return Err(EpError::internal(
                "stored ledger row has an empty source chain",
            ));
        }
        let state = match wire::str_field(&map, "state", WHAT)? {
            "active" => CredState::Active,
            "revoked" => CredState::Revoked,
            other => {
                return Err(EpError::internal(format!(
                    "stored ledger row state {other:?} is neither active nor revoked"
                )))
            }
        };
        let exp = wire::uint_field(&map, "exp", WHAT)?;
        let row = LedgerRow {
            credential_id,
            holder_principal,
            lifecycle_uid,
            endpoint,
            source_chain,
            state,
            exp,
        };
        if row.key() != key {
            return Err(EpError::internal(format!(
                "stored ledger row at {key:?} names another key ({:?})",
                row.key()
            )));
        }
        Ok(row)
    }
}

/// How a create-only write of exact bytes ended ([`create_identical`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdenticalCreate {
    /// A send was acknowledged: this call created the key.
    Created(Revision),
    /// Our exact bytes are there. `unanswered`: they were found after a send went unanswered,
    /// so they may be that send's; otherwise a create lost to them, so they were already there.
    Found {
        revision: Revision,
        unanswered: bool,
    },
    /// The send never went out: nothing was written.
    NotSent(String),
    /// The key holds other content (or a marker): a staged name never re-binds (F29).
    Foreign,
    /// A create lost its create-only condition, yet the key reads back absent.
    LostAbsent,
    /// Every send went unanswered and the key kept reading back absent; it may still commit.
    Exhausted,
}

/// Create-only write of `bytes` at `key`, settled by content (F29): the bytes identify the
/// writer, so a lost or unanswered create reads the key back and finds our bytes, other
/// content, or nothing; nothing after an unanswered send is sent again (bounded by
/// [`AMBIGUOUS_WRITE_ATTEMPTS`]). Callers word the refusals.
pub fn create_identical(
    cx: &mut Ctx<'_>,
    store: Store,
    key: &str,
    bytes: &[u8],
) -> Result<IdenticalCreate, Halt> {
    let request = KvRequest::Create {
        store,
        key: key.to_owned(),
        value: bytes.to_vec(),
    };
    let settled = settle_write(cx, &request, |cx, heard| {
        let unanswered = match heard {
            Heard::NotSent { why, .. } => {
                return Ok(Verdict::Settled(IdenticalCreate::NotSent(why.clone())))
            }
            Heard::Unanswered(_) => true,
            Heard::Lost { .. } => false,
        };
        Ok(match read(cx, store, key)? {
            Some(entry) if entry.is_put() && entry.value == bytes => {
                Verdict::Settled(IdenticalCreate::Found {
                    revision: entry.revision,
                    unanswered,
                })
            }
            Some(_) => Verdict::Settled(IdenticalCreate::Foreign),
            None if unanswered => Verdict::Unmoved,
            None => Verdict::Settled(IdenticalCreate::LostAbsent),
        })
    })?;
    Ok(match settled {
        Settled::Written(revision) => IdenticalCreate::Created(revision),
        Settled::Judged(created) => created,
        Settled::Exhausted(_) => IdenticalCreate::Exhausted,
    })
}

/// Create-only write that succeeds again only for byte-identical content (F29).
///
/// A lost create reads the key back: identical bytes are a retry of ours, anything else is
/// `conflict`. An ambiguous create is settled the same way, because the bytes identify the
/// writer; if the read shows nothing there, the create is tried again (bounded). Returns the
/// revision holding our bytes.
pub fn create_byte_idempotent(
    cx: &mut Ctx<'_>,
    store: Store,
    key: &str,
    bytes: &[u8],
    what: &str,
) -> Result<Revision, Halt> {
    let refusal = match create_identical(cx, store, key, bytes)? {
        IdenticalCreate::Created(revision) | IdenticalCreate::Found { revision, .. } => {
            return Ok(revision)
        }
        IdenticalCreate::NotSent(why) => EpError::unavailable(format!(
            "creating {what} {key} failed before it was sent: {why}; nothing was written"
        )),
        IdenticalCreate::Foreign => EpError::conflict(format!(
            "{what} {key} exists with foreign content; a staged name never re-binds (F29)"
        )),
        IdenticalCreate::LostAbsent => EpError::conflict(format!(
            "creating {what} {key} lost its create-only condition but the key reads back absent; \
             re-read and retry"
        )),
        IdenticalCreate::Exhausted => EpError::unavailable(format!(
            "creating {what} {key} stayed ambiguous across {AMBIGUOUS_WRITE_ATTEMPTS} attempts; it \
             may have committed"
        )),
    };
    Err(refusal.into())
}

/// A leader-served read; `None` when the key has no message.
pub fn read(cx: &mut Ctx<'_>, store: Store, key: &str) -> Result<Option<crate::kv::Entry>, Halt> {
    match cx.get(store, key)? {
        ReadOutcome::Entry(entry) => Ok(entry),
        ReadOutcome::Unavailable(why) => {
            Err(EpError::unavailable(format!("reading {key} failed: {why}")).into())
        }
    }
}

/// What a revoke found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// This revoke moved the row to `revoked` (or settled an ambiguous write of ours).
    Revoked,
    /// The row was already `revoked`.
    AlreadyRevoked,
}

/// CAS attempts a revoke makes before it reports the row as contended. Not a settle loop (so
/// not [`AMBIGUOUS_WRITE_ATTEMPTS`]): every attempt re-reads the row and re-pins to whatever
/// moved it, and an ambiguous attempt needs no read-back of its own, since a revoked row is the
/// goal whoever wrote it.
pub const REVOKE_ATTEMPTS: usize = 4;

/// Moves the row at `key` to `revoked` (F26): idempotent on an already-revoked row; an absent
/// row or a DEL/PURGE marker is corruption (`failed-precondition`, never "nothing to do"); a lost
/// pin re-reads and retries, at most [`REVOKE_ATTEMPTS`] times. An ambiguous write is settled by
/// the next read, since a revoked row is the goal whoever wrote it.
pub fn revoke_row(cx: &mut Ctx<'_>, key: &str) -> Result<Revocation, Halt> {
    let mut wrote_ambiguously = false;
    for _ in 0..REVOKE_ATTEMPTS {
        let entry = match read(cx, Store::Auth, key)? {
            None => {
                return Err(EpError::failed_precondition(format!(
                    "ledger row {key} is absent; rows are never deleted, so it was never staged \
                     or the ledger is corrupt"
                ))
                .into())
            }
            Some(entry) if !entry.is_put() => {
                return Err(EpError::failed_precondition(format!(
                    "ledger row {key} carries a {} marker; ledger rows are never deleted (F9)",
                    entry.operation.as_str()
                ))
                .into())
            }
            Some(entry) => entry,
        };
        let row = LedgerRow::parse(&entry.value, key)?;
        if row.state() == CredState::Revoked {
            return Ok(if wrote_ambiguously {
                Revocation::Revoked
            } else {
                Revocation::AlreadyRevoked
            });
        }
        match cx.update(Store::Auth, key, row.revoked().to_bytes(), entry.revision)? {
            WriteOutcome::Written(_) => return Ok(Revocation::Revoked),
            WriteOutcome::CasLost => {}
            WriteOutcome::Ambiguous(_) => wrote_ambiguously = true,
            WriteOutcome::NotSent(why) => {
                return Err(EpError::unavailable(format!(
                    "revoking ledger row {key} failed before it was sent: {why}"
                ))
                .into())
            }
        }
    }
    Err(EpError::unavailable(format!(
        "revoking ledger row {key} kept losing its pin across {REVOKE_ATTEMPTS} attempts"
    ))
    .into())
}
