//! The incarnation's root credential (reference-auth-service §9.3, spec F58–F60): minted once,
//! release-last, re-exported with the same id on every exchange; the connect-time check that
//! makes revoking it deny every bearer (§8.3 step 3); and the operator's revoke.

use crate::error::{EpError, ErrorCode};
use crate::gate::GateState;
use crate::issuance;
use crate::kv::settle::{settle_write, Heard, Settled, Verdict};
use crate::kv::{KvRequest, ReadOutcome, Revision, Store};
use crate::ledger::{self, CredState, LedgerRow, Revocation};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{
    keys, ActorToken, CredentialId, LifecycleUid, ManagerInstance, OwnerToken, Principal,
    SourceMember,
};

use super::activate::{cas_head, describe, ActivateLifecycle, Landed};
use super::rows::{
    head_of, never_deleted, read_head, read_never_deleted, AgentGate, LifecycleHead, Versioned,
};

/// A root credential row's lifetime: 90 days, in the milliseconds agent rows carry. Long by
/// design: the root lives with its incarnation, and rotating it is a barrier's job.
pub const ROOT_CREDENTIAL_TTL_MS: u64 = 90 * 24 * 60 * 60 * 1000;
/// Mint rounds one ensure makes when a sibling's mint or stamp moves the gate or the head.
pub const ROOT_MINT_ATTEMPTS: usize = 3;

const ROW_WHAT: &str = "credential row";

/// The entropy one ensure may need: the activation's op id, and one fresh credential id per
/// mint round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootEntropy {
    pub op: [u8; 20],
    pub credentials: [[u8; 20]; ROOT_MINT_ATTEMPTS],
}

/// The root credential an ensure returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootCredential {
    pub credential_id: CredentialId,
    /// True when this ensure minted and stamped it; false when the head already named it.
    pub minted: bool,
}

/// Ensures the incarnation `(owner, actor, lifecycle_uid)` has its active root credential and
/// returns its id (the reference's `ensureRootCredential`).
///
/// * Fast path: a head active at the uid with a `currentCredentialId` names the incarnation's
///   root (F59: one per incarnation, the same id on every exchange). Its row is leader-read: an
///   absent row is `internal` (the row is durable before the stamp), a revoked or expired one
///   refuses `permission-denied` naming the barrier (rotation is a barrier's job, F37, F58), a
///   row bound to another holder or uid is `internal`.
/// * Slow path, release-last (F19, F59): [`ActivateLifecycle`] (F55), observe the open gate,
///   stage the ACTIVE `cred.` row durable FIRST (sourceChain `["root"]`, exp now + 90 days),
///   finalize by a revision-pinned touch of the gate (M: still open at the same generation,
///   F20), then stamp the head LAST (H3, F58). A lost touch or stamp revokes the never-exported
///   row (F20) and starts a new round, at most [`ROOT_MINT_ATTEMPTS`], then `unavailable`; a
///   round that finds a sibling's stamp converges on it.
///
/// Every write is settled by a leader read-back; an unsettleable touch is treated as lost,
/// which is safe because the row was never exported. Round trips: 2 on the fast path (head,
/// row), 1 when `known` is the stamped root (head and row read together); 11 on a virgin alias
/// (head, the activation's 6, gate, row create, touch, stamp).
///
/// Why reading the head and a `known` row together decides what reading them in turn would:
/// `known` is an id an earlier ensure returned, so the head was stamped with it before this
/// ensure began. From then on "the head is active at this uid naming `known`" holds over one
/// unbroken interval (a stamp never returns to a cleared id, a retired head never reactivates at
/// its uid), and so does "the row is active and unexpired" (a revoke is final, time only moves
/// on). Two reads that each find their predicate true, whichever landed first, therefore saw an
/// instant where both held; a head naming another root falls back to reading that root's row.
#[derive(Debug, Clone)]
pub struct EnsureRootCredential {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub lifecycle_uid: LifecycleUid,
    /// The minting authority the head and reservation record (`auth-service:<space>`).
    pub manager_instance: ManagerInstance,
    /// The exchange's wall clock, unix milliseconds.
    pub now_ms: u64,
    pub entropy: RootEntropy,
    /// The root id an earlier ensure of this incarnation returned, when the caller remembers
    /// one: a hint that saves a round trip, never evidence (the head still decides).
    pub known: Option<CredentialId>,
}

impl Script for EnsureRootCredential {
    type Output = RootCredential;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<RootCredential, Halt> {
        let uid = &self.lifecycle_uid;
        let mut read_with_known = None;
        if let Some(known) = &self.known {
            let [head, row] = cx.get_together([
                (
                    Store::Records,
                    keys::lifecycle_head(&self.owner, &self.actor),
                ),
                (Store::Auth, keys::cred(uid, known)),
            ])?;
            let head = head_of(head, &self.owner, &self.actor)?;
            if head.as_ref().and_then(|h| self.stamp_of(h)) == Some(known) {
                return self.judge_root(row, known);
            }
            read_with_known = Some(head);
        }
        for fresh in &self.entropy.credentials {
            let head = match read_with_known.take() {
                Some(head) => head,
                None => read_head(cx, &self.owner, &self.actor)?,
            };
            if let Some(id) = head.as_ref().and_then(|h| self.stamp_of(h)) {
                return self.stamped_root(cx, id);
            }
            let activated = cx.call(&ActivateLifecycle {
                owner: self.owner.clone(),
                actor: self.actor.clone(),
                lifecycle_uid: uid.clone(),
                manager_instance: self.manager_instance.clone(),
                op_entropy: self.entropy.op,
            })?;
            if let Some(id) = self.stamp_of(&activated.head) {
                return self.stamped_root(cx, id);
            }
            let row = LedgerRow::agent_active(
                uid.clone(),
                CredentialId::mint(*fresh),
                self.holder(),
                vec![SourceMember::Root],
                self.now_ms.saturating_add(ROOT_CREDENTIAL_TTL_MS),
            )?;
            if self.mint(cx, &row, &activated.head)? {
                return Ok(RootCredential {
                    credential_id: row.credential_id().clone(),
                    minted: true,
                });
            }
        }
        Err(EpError::unavailable(format!(
            "the root-credential ensure for \"{}/{}\" at uid {uid} kept losing its gate finalize \
             or head stamp to concurrent movement across {ROOT_MINT_ATTEMPTS} rounds; \
             re-exchange",
            self.owner, self.actor
        ))
        .into())
    }
}

impl EnsureRootCredential {
    fn holder(&self) -> Principal {
        Principal::new(self.owner.clone(), self.actor.clone())
    }

    /// The root stamp of `head`, when it is this incarnation's.
    fn stamp_of<'h>(&self, head: &'h Versioned<LifecycleHead>) -> Option<&'h CredentialId> {
        if head.row.is_active_at(&self.lifecycle_uid) {
            head.row.current_credential_id()
        } else {
            None
        }
    }

    /// The fast path: the stamped root, proven still live.
    fn stamped_root(&self, cx: &mut Ctx<'_>, id: &CredentialId) -> Result<RootCredential, Halt> {
        let row = cx.get(Store::Auth, keys::cred(&self.lifecycle_uid, id))?;
        self.judge_root(row, id)
    }

    /// Judges the served read of the stamped root `id`'s row: present, active, this
    /// incarnation's, unexpired.
    fn judge_root(&self, read: ReadOutcome, id: &CredentialId) -> Result<RootCredential, Halt> {
        let (owner, actor) = (&self.owner, &self.actor);
        let key = keys::cred(&self.lifecycle_uid, id);
        let Some(entry) = never_deleted(read, &key, ROW_WHAT)? else {
            return Err(EpError::internal(format!(
                "the head of \"{owner}/{actor}\" names root credential {id} but {key} is absent; \
                 the row is durable before the stamp, so this is corruption (F59)"
            ))
            .into());
        };
        let row = LedgerRow::parse(&entry.value, &key)?;
        if row.state() != CredState::Active {
            return Err(EpError::permission_denied(format!(
                "the root credential of \"{owner}/{actor}\" ({id}) is revoked; rotating a root \
                 credential is the family-revoke barrier's job, never a re-mint - re-grant \
                 (respawn) the actor for a fresh incarnation"
            ))
            .into());
        }
        if *row.holder_principal() != self.holder() || *row.lifecycle_uid() != self.lifecycle_uid {
            return Err(EpError::internal(format!(
                "the root credential row {key} binds {}/{}, not this incarnation; garbled \
                 trusted-path state never authorizes",
                row.holder_principal(),
                row.lifecycle_uid()
            ))
            .into());
        }
        if row.exp() <= self.now_ms {
            return Err(EpError::permission_denied(format!(
                "the root credential of \"{owner}/{actor}\" ({id}) expired at {}; rotation is the \
                 barrier's job - re-grant (respawn) the actor for a fresh incarnation",
                row.exp()
            ))
            .into());
        }
        Ok(RootCredential {
            credential_id: id.clone(),
            minted: false,
        })
    }

    /// One release-last round: observe, stage, finalize, stamp. `true` when the head now names
    /// `row`; `false` when the round lost (its row revoked). A refusal after staging revokes
    /// the row first, so no refused round leaves an active row behind.
    fn mint(
        &self,
        cx: &mut Ctx<'_>,
        row: &LedgerRow,
        head: &Versioned<LifecycleHead>,
    ) -> Result<bool, Halt> {
        let observed = observe_open_gate(cx, &self.lifecycle_uid)?;
        let row_key = issuance::stage(cx, row)?;
        let round = cx.recover(|cx| {
            Ok(finalize(cx, &observed)? && self.stamp(cx, head, row.credential_id())?)
        })?;
        match round {
            Ok(true) => Ok(true),
            Ok(false) => {
                ledger::revoke_row(cx, &row_key)?;
                Ok(false)
            }
            Err(refusal) => issuance::revoke_then_refuse(cx, &row_key, refusal),
        }
    }

    /// H3: `currentCredentialId` absent → `id`, pinned to the head the activation returned.
    /// `true` when the head names `id` (written, or found after an unanswered send).
    fn stamp(
        &self,
        cx: &mut Ctx<'_>,
        head: &Versioned<LifecycleHead>,
        id: &CredentialId,
    ) -> Result<bool, Halt> {
        let next = head.row.stamped(id)?;
        let uid = &self.lifecycle_uid;
        let landed = cas_head(cx, &next, Some(head.revision), |found| {
            found.is_active_at(uid) && found.current_credential_id() == Some(id)
        })?;
        Ok(matches!(landed, Landed::Ours(_)))
    }
}

/// The gate as a mint observes it (F19): its exact stored bytes and revision, which the
/// finalize rewrites. Only an open gate mints (`permission-denied` otherwise).
struct OpenGate {
    key: String,
    raw: Vec<u8>,
    revision: Revision,
}

fn observe_open_gate(cx: &mut Ctx<'_>, uid: &LifecycleUid) -> Result<OpenGate, Halt> {
    let key = keys::agent_gate(uid);
    let Some(entry) = read_never_deleted(cx, Store::Auth, &key, "issuance gate")? else {
        return Err(EpError::permission_denied(format!(
            "lifecycle {uid} has no issuance gate; a never-activated lifecycle mints nothing"
        ))
        .into());
    };
    let gate = AgentGate::parse(&entry.value, uid)?;
    if gate.state() != GateState::Open {
        return Err(EpError::permission_denied(format!(
            "the issuance gate {key} is {}; only an open gate mints (F22)",
            gate.state().as_str()
        ))
        .into());
    }
    Ok(OpenGate {
        key,
        raw: entry.value,
        revision: entry.revision,
    })
}

/// M: the revision-pinned touch that rewrites the observed gate bytes. `true` when it
/// committed; `false` when the gate moved (a barrier, or a sibling mint's touch). A touch that
/// went unanswered is settled only when the gate still reads at the pin (not applied: sent
/// again); a moved gate after an unanswered touch cannot say who moved it, since the bytes are
/// identical, so it counts as lost.
fn finalize(cx: &mut Ctx<'_>, gate: &OpenGate) -> Result<bool, Halt> {
    let request = KvRequest::Update {
        store: Store::Auth,
        key: gate.key.clone(),
        value: gate.raw.clone(),
        expected: gate.revision,
    };
    let settled = settle_write(cx, &request, |cx, heard| {
        if let Heard::NotSent { why, .. } = heard {
            return Err(EpError::unavailable(format!(
                "the finalize touch of {} was not sent: {why}; nothing was released",
                gate.key
            ))
            .into());
        }
        let unanswered = matches!(heard, Heard::Unanswered(_));
        Ok(
            match read_never_deleted(cx, Store::Auth, &gate.key, "issuance gate")? {
                Some(now) if unanswered && now.revision == gate.revision => Verdict::Unmoved,
                _ => Verdict::Settled(false),
            },
        )
    })?;
    Ok(match settled {
        Settled::Written(_) => true,
        Settled::Judged(touched) => touched,
        Settled::Exhausted(_) => false,
    })
}

/// What the connect check authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizedConnect {
    /// The live row the bearer's credential id names.
    pub row: LedgerRow,
    /// True for a root credential (it also matched the head's current root).
    pub root: bool,
}

/// The connect-time credential check (reference-auth-service §8.3 step 3; deny-new, F59): the
/// bearer's `cred.<uid>.<credid>` row is leader-read and must exist, be `active`, bind the
/// connecting principal, the uid and the id (the row rebuilds its own key), and be unexpired
/// (`exp` ms > now); a root credential (`sourceChain == ["root"]`) must also be the head's
/// current root, so a superseded or never-stamped root is denied. Every refusal, an unreadable
/// store included, is `permission-denied`: a connect fails closed. Round trips: 1, the row and
/// the head read together (the head is judged only for a root).
///
/// Why the two reads may land in either order: a bearer names a root only after the exchange
/// saw the head stamped with it, so the stamp precedes this connect. From then on "the head is
/// active at the uid naming this id" holds over one unbroken interval (a stamp never returns to
/// a cleared id, a retired head never reactivates at its uid), as does "the row is active and
/// unexpired" (a revoke is final); two reads that each find theirs true saw an instant where
/// both held, exactly as reading them in turn would.
#[derive(Debug, Clone)]
pub struct AuthorizeConnectCredential {
    pub holder: Principal,
    pub lifecycle_uid: LifecycleUid,
    pub credential_id: CredentialId,
    pub now_ms: u64,
}

impl Script for AuthorizeConnectCredential {
    type Output = AuthorizedConnect;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<AuthorizedConnect, Halt> {
        let [row, head] = cx.reads_together(self.reads())?;
        self.judge(row, head)
    }
}

impl AuthorizeConnectCredential {
    /// The two leader reads the check stands on: the credential row and the alias's head. A
    /// caller may send them beside reads of its own (the connect does, with its inbox binding),
    /// then hand their outcomes to [`AuthorizeConnectCredential::judge`].
    pub fn reads(&self) -> [KvRequest; 2] {
        let (owner, actor) = (self.holder.owner(), self.holder.actor());
        [
            KvRequest::Get {
                store: Store::Auth,
                key: keys::cred(&self.lifecycle_uid, &self.credential_id),
            },
            KvRequest::Get {
                store: Store::Records,
                key: keys::lifecycle_head(owner, actor),
            },
        ]
    }

    /// Judges the outcomes of [`AuthorizeConnectCredential::reads`]. Every refusal is
    /// `permission-denied`: a row that cannot be proven live (an unserved read, a marker)
    /// denies the connect rather than failing it.
    pub fn judge(&self, row: ReadOutcome, head: ReadOutcome) -> Result<AuthorizedConnect, Halt> {
        match self.check(row, head) {
            Err(Halt::Fail(e)) if e.code != ErrorCode::PermissionDenied => {
                Err(EpError::permission_denied(format!(
                    "the connect is denied: its credential could not be proven live ({})",
                    e.message
                ))
                .into())
            }
            decided => decided,
        }
    }

    fn check(&self, row: ReadOutcome, head: ReadOutcome) -> Result<AuthorizedConnect, Halt> {
        let (id, uid) = (&self.credential_id, &self.lifecycle_uid);
        let (owner, actor) = (self.holder.owner(), self.holder.actor());
        let key = keys::cred(uid, id);
        let Some(entry) = never_deleted(row, &key, ROW_WHAT)? else {
            return Err(deny(format!(
                "credential {id} of lifecycle {uid} is not in the ledger; an unknown credential \
                 never connects"
            )));
        };
        let row = LedgerRow::parse(&entry.value, &key)?;
        if row.state() != CredState::Active {
            return Err(deny(format!(
                "credential {id} is revoked; a revoked credential never connects again (F59)"
            )));
        }
        if *row.holder_principal() != self.holder {
            return Err(deny(format!(
                "credential {id} is bound to another principal than {}; it connects only as \
                 its own holder",
                self.holder
            )));
        }
        if row.exp() <= self.now_ms {
            return Err(deny(format!("credential {id} expired at {}", row.exp())));
        }
        let root = row.source_chain() == [SourceMember::Root];
        if root {
            let head = head_of(head, owner, actor)?;
            let current = head
                .as_ref()
                .filter(|h| h.row.is_active_at(uid))
                .and_then(|h| h.row.current_credential_id());
            if current != Some(id) {
                return Err(deny(format!(
                    "root credential {id} is not the current root of \"{owner}/{actor}\" (the head \
                     {}, naming {}); a superseded or never-stamped root never connects (F59)",
                    describe(head.as_ref()),
                    current.map_or("no root", CredentialId::as_str)
                )));
            }
        }
        Ok(AuthorizedConnect { row, root })
    }
}

fn deny(message: String) -> Halt {
    EpError::permission_denied(message).into()
}

/// Revokes `cred.<uid>.<credid>` (the operator's revoke path): monotonic, an already revoked
/// row is success (F26); an absent row or a marker is `failed-precondition` (rows are never
/// deleted, F9); an ambiguous write is settled by the next leader read ([`ledger::revoke_row`]).
#[derive(Debug, Clone)]
pub struct RevokeCredential {
    pub lifecycle_uid: LifecycleUid,
    pub credential_id: CredentialId,
}

impl Script for RevokeCredential {
    type Output = Revocation;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Revocation, Halt> {
        ledger::revoke_row(cx, &keys::cred(&self.lifecycle_uid, &self.credential_id))
    }
}

/// Revokes the root credential an alias's head names (the operator's `actor revoke
/// --credential`): every bearer of the incarnation carries that one id, so this one revoke
/// denies all of them at their next connect, and the next exchange refuses ("barrier") because
/// rotating a root is a barrier's job (F26, reference §9.3). No head, or a head without a stamp,
/// is `not-found`: there is nothing issued to revoke.
#[derive(Debug, Clone)]
pub struct RevokeRootCredential {
    pub owner: OwnerToken,
    pub actor: ActorToken,
}

/// What [`RevokeRootCredential`] revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedRoot {
    pub lifecycle_uid: LifecycleUid,
    pub credential_id: CredentialId,
    pub revocation: Revocation,
}

impl Script for RevokeRootCredential {
    type Output = RevokedRoot;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<RevokedRoot, Halt> {
        let head = read_head(cx, &self.owner, &self.actor)?;
        let Some((uid, credential)) = head.as_ref().and_then(|h| {
            h.row
                .current_credential_id()
                .map(|id| (h.row.lifecycle_uid().clone(), id.clone()))
        }) else {
            return Err(EpError::new(
                ErrorCode::NotFound,
                format!(
                    "{}/{} has no root credential: nothing was issued to it yet",
                    self.owner, self.actor
                ),
            )
            .into());
        };
        let revocation = *cx.call(&RevokeCredential {
            lifecycle_uid: uid.clone(),
            credential_id: credential.clone(),
        })?;
        Ok(RevokedRoot {
            lifecycle_uid: uid,
            credential_id: credential,
            revocation,
        })
    }
}
