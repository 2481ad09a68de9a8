//! The issued-authority store's operations (SPEC §13.15) as sans-IO scripts over
//! [`Store::Issued`] and [`Store::Accepted`].
//!
//! Immutable rows (the evidence, the source index, the accepted row) are read as the *first*
//! message on their key: the store keeps every message and removes none, so whatever is
//! published on such a key later is inert to every reader. The attempt row is read last-by-key,
//! because it advances by CAS at the revision the last read observed. Every write that goes
//! unanswered is settled by a leader read-back of the same key.

use crate::actors::{ActorsOutcome, ActorsRequest};
use crate::canon::canonicalize;
use crate::error::EpError;
use crate::gate::GateState;
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{Entry, KvRequest, ReadOutcome, Revision, Store, WriteOutcome};
use crate::lifecycle::rows::{read_gate, read_head};
use crate::machine::{Ctx, Halt, Script};
use crate::names::Principal;

use super::ceiling::{IssuedEvidence, IssuedRef, SubjectPermissions};
use super::rows::{
    accepted_row, attempt_key, evidence_key, parse_accepted_row, parse_source_index_row,
    source_index_key, source_index_row, AcceptedToken, AttemptRow, AttemptState, Evidence,
    IssuedSource, SourceKind,
};

/// CAS rounds a retirement makes before it gives up (each one re-reads the row).
const RETIRE_ROUNDS: usize = 4;

/// A leader read of `key`'s first (`first`) or last message; a deletion marker is corruption,
/// never absence, and an unserved read is a refusal, never an absence of revocation.
fn read(cx: &mut Ctx<'_>, store: Store, key: &str, first: bool) -> Result<Option<Entry>, Halt> {
    let outcome = if first {
        cx.get_first(store, key)?
    } else {
        cx.get(store, key)?
    };
    match outcome {
        ReadOutcome::Entry(Some(e)) if !e.is_put() => Err(EpError::failed_precondition(format!(
            "issued row {key} carries a deletion marker; a deletion is never absence (SPEC 13.15)"
        ))
        .into()),
        ReadOutcome::Entry(entry) => Ok(entry),
        ReadOutcome::Unavailable(why) => Err(EpError::unavailable(format!(
            "the issued store read of {key} failed: {why}"
        ))
        .into()),
    }
}

/// The evidence `r` names and its digest. Absent → `permission-denied` (an unrecorded
/// generation authorizes nothing); garbled or naming another reference → `permission-denied`.
fn read_evidence(cx: &mut Ctx<'_>, r: &IssuedRef) -> Result<(Evidence, String), Halt> {
    let key = evidence_key(r);
    let Some(entry) = read(cx, Store::Issued, &key, true)? else {
        return Err(EpError::permission_denied(format!(
            "no issued evidence for generation {}; an unrecorded generation authorizes nothing \
             (SPEC 13.15)",
            r.generation
        ))
        .into());
    };
    let evidence = Evidence::from_bytes(&entry.value).map_err(|why| {
        EpError::permission_denied(format!(
            "issued evidence at {key} is unreadable ({why}); garbled trusted state never \
             authorizes"
        ))
    })?;
    if evidence.reference() != r {
        return Err(EpError::permission_denied(format!(
            "issued evidence at {key} names a different reference; garbled trusted state never \
             authorizes"
        ))
        .into());
    }
    let digest = evidence.digest()?;
    Ok((evidence, digest))
}

/// The attempt row of `r` pinned to `digest`, with its revision.
fn read_attempt(
    cx: &mut Ctx<'_>,
    r: &IssuedRef,
    digest: &str,
) -> Result<(AttemptState, Revision), Halt> {
    let key = attempt_key(r);
    let Some(entry) = read(cx, Store::Issued, &key, false)? else {
        return Err(EpError::permission_denied(format!(
            "no issued attempt row at {key}; evidence without an attempt was never prepared \
             (SPEC 13.15)"
        ))
        .into());
    };
    match AttemptRow::from_bytes(&entry.value) {
        Ok(row) if row.digest == digest => Ok((row.state, entry.revision)),
        _ => Err(EpError::permission_denied(format!(
            "issued attempt row {key} is malformed or pins a different evidence digest"
        ))
        .into()),
    }
}

/// A create-only write of an immutable row: ours when the key's first message is our bytes
/// (an unanswered send that landed); anything else there is `conflict` naming `what`.
fn create_once(
    cx: &mut Ctx<'_>,
    store: Store,
    key: &str,
    bytes: &[u8],
    what: &str,
) -> Result<Revision, Halt> {
    let request = KvRequest::create_or_update(store, key.to_owned(), bytes.to_vec(), None);
    let settled = settle_write(cx, &request, |cx, heard| {
        if let Heard::NotSent { why, earlier: None } = heard {
            return Err(
                EpError::unavailable(format!("the create of {what} {key} failed: {why}")).into(),
            );
        }
        Ok(match read(cx, store, key, true)? {
            Some(found) if found.value == bytes => Verdict::Settled(Ok(found.revision)),
            Some(_) => Verdict::Settled(Err(())),
            None => Verdict::Unmoved,
        })
    })?;
    match settled {
        Settled::Written(revision) | Settled::Judged(Ok(revision)) => Ok(revision),
        Settled::Judged(Err(())) => Err(EpError::conflict(format!(
            "{what} {key} already holds another row; a generation is never reused (SPEC 13.15)"
        ))
        .into()),
        Settled::Exhausted(_) => Err(EpError::unavailable(format!(
            "the create of {what} {key} stayed unanswered after {AMBIGUOUS_WRITE_ATTEMPTS} \
             attempts and reads back absent; it may still commit"
        ))
        .into()),
    }
}

/// Stage → release → accepted row, for one fresh generation (F78): the evidence, a `prepared`
/// attempt row and one source-index row per source, all create-only; then the attempt row CAS
/// to `active` at the revision the prepare observed — never a re-read one, so a retirement that
/// landed in between wins — and last, when the issuance is a connection's, its accepted row.
/// Nothing is returned for release until all of it is durable.
///
/// * A generation that already has evidence refuses `conflict` before anything is written.
/// * A lost activation, or an accepted row already naming another issuance, retires the
///   issuance and refuses: no material may be released on it.
/// * A crash anywhere leaves at worst a `prepared` (or retired) issuance, which authorizes
///   nothing and whose generation is never reused.
///
/// Keeps F77 (the generation is the issuer's, fresh) and F78. Round trips: 1 first-read + 3 +
/// one per source (+1 with an accepted row), +1 read-back per unanswered or lost write.
#[derive(Debug, Clone)]
pub struct IssueGeneration {
    pub evidence: Evidence,
    /// The connection's accepted row to write once the issuance is active.
    pub accepted: Option<AcceptedToken>,
}

impl Script for IssueGeneration {
    type Output = IssuedRef;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<IssuedRef, Halt> {
        let evidence = &self.evidence;
        let r = evidence.reference();
        let key = evidence_key(r);
        if read(cx, Store::Issued, &key, true)?.is_some() {
            return Err(EpError::conflict(format!(
                "generation {} already has issued evidence; a generation is never reused (SPEC \
                 13.15)",
                r.generation
            ))
            .into());
        }
        let digest = evidence.digest()?;
        create_once(
            cx,
            Store::Issued,
            &key,
            &evidence.to_bytes()?,
            "issued evidence",
        )?;
        let prepared = AttemptRow {
            state: AttemptState::Prepared,
            digest: digest.clone(),
        }
        .to_bytes()?;
        let at = create_once(
            cx,
            Store::Issued,
            &attempt_key(r),
            &prepared,
            "issued attempt",
        )?;
        for source in evidence.sources() {
            create_once(
                cx,
                Store::Issued,
                &source_index_key(source, r),
                &source_index_row(source, r)?,
                "issued source index",
            )?;
        }
        let activated = activate(cx, r, &digest, at);
        retire_on_refusal(cx, r, activated)?;
        if let Some(token) = &self.accepted {
            let written = create_once(
                cx,
                Store::Accepted,
                &token.key(),
                &accepted_row(r)?,
                "accepted row",
            );
            retire_on_refusal(cx, r, written.map(|_| ()))?;
        }
        Ok(r.clone())
    }
}

/// Passes `step` through, except that a refusal first retires the staged issuance `r`: no
/// material may ever be released on it. A suspension is only the script waiting for its next
/// observation and passes untouched.
fn retire_on_refusal(cx: &mut Ctx<'_>, r: &IssuedRef, step: Result<(), Halt>) -> Result<(), Halt> {
    match step {
        Err(Halt::Fail(refusal)) => {
            cx.call(&RetireIssued {
                reference: r.clone(),
            })?;
            Err(refusal.into())
        }
        other => other,
    }
}

/// The release CAS: `prepared` at `at` → `active`. An unanswered send reads back: our active
/// row is ours; the row still at `at` is unmoved (sent again); anything else lost the race.
fn activate(cx: &mut Ctx<'_>, r: &IssuedRef, digest: &str, at: Revision) -> Result<(), Halt> {
    let key = attempt_key(r);
    let active = AttemptRow {
        state: AttemptState::Active,
        digest: digest.to_owned(),
    }
    .to_bytes()?;
    let request = KvRequest::Update {
        store: Store::Issued,
        key: key.clone(),
        value: active.clone(),
        expected: at,
    };
    let settled = settle_write(cx, &request, |cx, heard| {
        if let Heard::NotSent { why, earlier: None } = heard {
            return Err(EpError::unavailable(format!(
                "the activation of generation {} was not sent: {why}",
                r.generation
            ))
            .into());
        }
        Ok(match read(cx, Store::Issued, &key, false)? {
            Some(found) if found.value == active => Verdict::Settled(true),
            Some(found) if found.revision == at => Verdict::Unmoved,
            _ => Verdict::Settled(false),
        })
    })?;
    match settled {
        Settled::Written(_) | Settled::Judged(true) => Ok(()),
        Settled::Judged(false) => Err(EpError::conflict(format!(
            "generation {} lost its activation to a concurrent retirement; no material is \
             released on it (SPEC 13.15)",
            r.generation
        ))
        .into()),
        Settled::Exhausted(heard) => Err(EpError::unavailable(format!(
            "the activation of generation {} stayed unanswered ({}); no material is released on \
             it",
            r.generation,
            heard.last_unanswered().unwrap_or("no answer")
        ))
        .into()),
    }
}

/// Retires one issuance: `prepared` → `aborted`, `active` → `revoked`; idempotent on a terminal
/// state, which it returns. Each round re-reads the row, so an unanswered or lost CAS is
/// settled by the next read. Round trips: 1 + 2 per round (at most 4 rounds).
#[derive(Debug, Clone)]
pub struct RetireIssued {
    pub reference: IssuedRef,
}

impl Script for RetireIssued {
    type Output = AttemptState;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<AttemptState, Halt> {
        let r = &self.reference;
        let (_, digest) = read_evidence(cx, r)?;
        for _ in 0..RETIRE_ROUNDS {
            let (state, revision) = read_attempt(cx, r, &digest)?;
            if state.is_terminal() {
                return Ok(state);
            }
            let retired = AttemptRow {
                state: state.retired(),
                digest: digest.clone(),
            };
            match cx.write(KvRequest::Update {
                store: Store::Issued,
                key: attempt_key(r),
                value: retired.to_bytes()?,
                expected: revision,
            })? {
                WriteOutcome::Written(_) => return Ok(retired.state),
                WriteOutcome::CasLost | WriteOutcome::Ambiguous(_) => {}
                WriteOutcome::NotSent(why) => {
                    return Err(EpError::unavailable(format!(
                        "retiring generation {} was not sent: {why}",
                        r.generation
                    ))
                    .into())
                }
            }
        }
        Err(EpError::unavailable(format!(
            "retiring generation {} lost {RETIRE_ROUNDS} CAS rounds; it is not confirmed",
            r.generation
        ))
        .into())
    }
}

/// Whether one source is live, as only this plane can attest:
/// * an actor-ledger row: the ledger holds a row for that owner and actor at exactly that
///   lifecycle uid (either row space), **and** the lifecycle head is active at that uid. The
///   reference checks the row alone; the head is read too because retiring an interactive
///   lifecycle leaves its grant row in place until a re-grant, and an issuance on a retired
///   incarnation must not outlive it (F79: a lifecycle terminal ends every issuance on it).
/// * a static incarnation's credentials: its lifecycle gate exists and is not retired.
///
/// A failed read refuses; a foreign coordinate refuses.
fn source_is_live(cx: &mut Ctx<'_>, source: &IssuedSource) -> Result<bool, Halt> {
    match source.kind() {
        SourceKind::ActorLedger { owner, actor, uid } => {
            match cx.actors(ActorsRequest::FindUnified {
                principal: Principal::new(owner.clone(), actor.clone()),
            })? {
                ActorsOutcome::Found(held) => {
                    let at_uid = held.is_some_and(|h| h.row.lifecycle_uid.as_ref() == Some(&uid));
                    Ok(at_uid
                        && read_head(cx, &owner, &actor)?.is_some_and(|h| h.row.is_active_at(&uid)))
                }
                ActorsOutcome::Refused(why)
                | ActorsOutcome::Corrupt(why)
                | ActorsOutcome::Unavailable(why) => Err(EpError::unavailable(format!(
                    "the actor ledger could not attest {source}: {why}"
                ))
                .into()),
                other => Err(EpError::internal(format!(
                    "the actor ledger answered a lookup with {other:?}"
                ))
                .into()),
            }
        }
        SourceKind::LifecycleCredentials { uid } => {
            Ok(read_gate(cx, &uid)?.is_some_and(|g| g.row.state() != GateState::Retired))
        }
        SourceKind::Foreign => Err(EpError::permission_denied(format!(
            "issued source {source} is a coordinate this plane cannot attest; refused"
        ))
        .into()),
    }
}

/// The resolution a consumer acts on (F79): the evidence exists, its attempt row is `active`,
/// the evidence is unexpired, every source is live, and a second read of the attempt row
/// returns the same revision — that second read is the linearization point. Anything else
/// refuses `permission-denied`; an unserved read refuses `unavailable`. Writes nothing. Round
/// trips: 3 + one per source (its gate, or its lifecycle head beside the actor ledger's file
/// read).
#[derive(Debug, Clone)]
pub struct ResolveIssued {
    pub reference: IssuedRef,
    /// Unix seconds.
    pub now_secs: u64,
}

impl Script for ResolveIssued {
    type Output = IssuedEvidence;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<IssuedEvidence, Halt> {
        let r = &self.reference;
        let (evidence, digest) = read_evidence(cx, r)?;
        let (state, before) = read_attempt(cx, r, &digest)?;
        if state != AttemptState::Active {
            return Err(EpError::permission_denied(format!(
                "generation {} is {state}; only an active issuance authorizes (SPEC 13.15)",
                r.generation
            ))
            .into());
        }
        if let Some(at) = evidence.expires_at().filter(|at| self.now_secs >= *at) {
            return Err(EpError::permission_denied(format!(
                "generation {} expired at {at} (SPEC 13.15)",
                r.generation
            ))
            .into());
        }
        for source in evidence.sources() {
            if !source_is_live(cx, source)? {
                return Err(EpError::permission_denied(format!(
                    "generation {} depends on {source}, which is no longer live (SPEC 13.15)",
                    r.generation
                ))
                .into());
            }
        }
        let (state, after) = read_attempt(cx, r, &digest)?;
        if state != AttemptState::Active || after != before {
            return Err(EpError::permission_denied(format!(
                "generation {} changed during resolution; refused (SPEC 13.15)",
                r.generation
            ))
            .into());
        }
        Ok(IssuedEvidence {
            reference: r.clone(),
            permissions: evidence.permissions().clone(),
            resolved_revision: after.0,
        })
    }
}

/// A renewal under an existing generation (F80): the evidence exists, its attempt is `active`,
/// and its recorded ceiling is RFC 8785 byte-identical to `permissions`. A changed ceiling is a
/// fresh issuance on a fresh generation over a new connection, never an update of this one
/// (`failed-precondition`). Writes nothing. Round trips: 2.
#[derive(Debug, Clone)]
pub struct ConfirmIssued {
    pub reference: IssuedRef,
    pub permissions: SubjectPermissions,
}

impl Script for ConfirmIssued {
    type Output = ();
    fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let r = &self.reference;
        let (evidence, digest) = read_evidence(cx, r)?;
        let (state, _) = read_attempt(cx, r, &digest)?;
        if state != AttemptState::Active {
            return Err(EpError::permission_denied(format!(
                "generation {} is {state}; a renewal rides an active issuance only (SPEC 13.15)",
                r.generation
            ))
            .into());
        }
        let recorded = canonicalize(&evidence.permissions().to_value())?;
        if recorded != canonicalize(&self.permissions.to_value())? {
            return Err(EpError::failed_precondition(format!(
                "generation {} was issued for a different ceiling; a permission change is a \
                 fresh generation on a new connection, never a renewal (SPEC 13.15)",
                r.generation
            ))
            .into());
        }
        Ok(())
    }
}

/// Retires every issuance indexed under one source (F79: a lifecycle terminal retires every
/// issuance that depends on it). The caller ends the source's liveness first, so nothing can be
/// issued on it behind the walk. An index row that disagrees with its own coordinates or with
/// its evidence refuses. Returns how many issuances it retired (or found retired). Round trips:
/// 1 listing + per index row 1 + a retirement.
#[derive(Debug, Clone)]
pub struct RetireSource {
    pub source: IssuedSource,
}

impl Script for RetireSource {
    type Output = usize;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<usize, Halt> {
        let source = &self.source;
        let keys = match cx.keys(Store::Issued, source.index_prefix())? {
            crate::kv::KeysOutcome::Keys(keys) => keys,
            crate::kv::KeysOutcome::Unavailable(why) => {
                return Err(EpError::unavailable(format!(
                    "listing the issuances of {source} failed: {why}"
                ))
                .into())
            }
        };
        let mut retired = 0;
        for key in keys {
            let Some(entry) = read(cx, Store::Issued, &key, true)? else {
                continue;
            };
            let disagrees = || {
                EpError::internal(format!(
                    "issued source index {key} does not agree with its own coordinates or its \
                     evidence"
                ))
            };
            let (indexed, r) = parse_source_index_row(&entry.value).map_err(|_| disagrees())?;
            if indexed != *source || key != source_index_key(source, &r) {
                return Err(disagrees().into());
            }
            let (evidence, _) = read_evidence(cx, &r)?;
            if !evidence.sources().contains(source) {
                return Err(disagrees().into());
            }
            cx.call(&RetireIssued { reference: r })?;
            retired += 1;
        }
        Ok(retired)
    }
}

/// The issuance a connection's accepted row names, if it has one. Round trips: 1.
#[derive(Debug, Clone)]
pub struct ReadAccepted {
    pub token: AcceptedToken,
}

impl Script for ReadAccepted {
    type Output = Option<IssuedRef>;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Option<IssuedRef>, Halt> {
        let key = self.token.key();
        let Some(entry) = read(cx, Store::Accepted, &key, true)? else {
            return Ok(None);
        };
        parse_accepted_row(&entry.value).map(Some).map_err(|why| {
            EpError::failed_precondition(format!("accepted row {key} is unreadable: {why}")).into()
        })
    }
}
