//! The ledger's semantics over any row store: one implementation of find, grant, revoke and the
//! envelope walk, shared by the file adapter and the in-memory twin so both fail closed alike.

use super::envelope::check_within_spawner_grant;
use super::row::{ActorRow, RowSpace};
use super::{ActorsOutcome, ActorsRequest, Boundary, Denial, Held};
use crate::names::Principal;

/// Why a row store could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The stored row is not a row (symlink, non-regular file, unreadable bytes); a sentence
    /// naming the file.
    Corrupt(String),
    /// The store could not be reached; nothing is known.
    Unavailable(String),
}

impl From<StoreError> for Denial {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Corrupt(why) => Denial::Corrupt(why),
            StoreError::Unavailable(why) => Denial::Unavailable(why),
        }
    }
}

/// Raw row files keyed by space and principal.
pub trait RowStore {
    /// The row's bytes, or `None` when no row exists.
    fn load(
        &mut self,
        space: RowSpace,
        principal: &Principal,
    ) -> Result<Option<Vec<u8>>, StoreError>;
    /// Replaces the row atomically: afterwards readers see either the old or the new bytes.
    fn store(
        &mut self,
        space: RowSpace,
        principal: &Principal,
        bytes: &[u8],
    ) -> Result<(), StoreError>;
    /// Removes the row; `false` when there was none.
    fn remove(&mut self, space: RowSpace, principal: &Principal) -> Result<bool, StoreError>;
    /// Where the row lives, for refusals (a file path).
    fn describe(&self, space: RowSpace, principal: &Principal) -> String;
    /// The principals with a row in `space`, sorted; an entry whose name is not
    /// `<owner>.<actor>.json` is returned as the sentence naming it.
    fn principals(&mut self, space: RowSpace)
        -> Result<Vec<Result<Principal, String>>, StoreError>;
}

/// Executes one ledger request over `store`.
pub fn execute<S: RowStore>(store: &mut S, request: &ActorsRequest) -> ActorsOutcome {
    let result = match request {
        ActorsRequest::Find { space, principal } => find_in(store, *space, principal)
            .map(|row| ActorsOutcome::Found(row.map(|row| Held { space: *space, row }))),
        ActorsRequest::FindUnified { principal } => {
            find_unified(store, principal).map(ActorsOutcome::Found)
        }
        ActorsRequest::CheckEnvelope { row, boundary } => {
            walk(store, row, *boundary).map(|()| ActorsOutcome::Within)
        }
        ActorsRequest::GrantInteractive(row) => grant(store, RowSpace::Interactive, row),
        ActorsRequest::GrantManaged(row) => grant(store, RowSpace::Managed, row),
        ActorsRequest::RevokeManagedAt {
            principal,
            lifecycle_uid,
        } => match find_in(store, RowSpace::Managed, principal) {
            Ok(Some(row)) if row.lifecycle_uid.as_ref() == Some(lifecycle_uid) => {
                remove_settled(store, RowSpace::Managed, principal).map(ActorsOutcome::Revoked)
            }
            Ok(_) => Ok(ActorsOutcome::Revoked(false)),
            Err(e) => Err(e),
        },
        ActorsRequest::RevokeInteractive { principal } => revoke_interactive(store, principal),
        ActorsRequest::List { space } => list(store, *space),
    };
    result.unwrap_or_else(Into::into)
}

/// Removes an interactive grant. A managed agent's row belongs to its spawn lifecycle, so the
/// operator's revoke refuses it and says what removes it instead.
fn revoke_interactive<S: RowStore>(
    store: &mut S,
    principal: &Principal,
) -> Result<ActorsOutcome, Denial> {
    if find_in(store, RowSpace::Managed, principal)?.is_some() {
        return Err(Denial::Refused(format!(
            "actor {:?} is a managed agent - its grant is owned by the spawn lifecycle; retire \
             it through its manager (`cotal despawn {}`) instead of revoking it",
            principal.actor().as_str(),
            principal.actor()
        )));
    }
    remove_settled(store, RowSpace::Interactive, principal).map(ActorsOutcome::Revoked)
}

/// Every row of `space`, each read exactly as a find reads it, so a listing shows a corrupt
/// row as the same sentence a connect would be denied with.
fn list<S: RowStore>(store: &mut S, space: RowSpace) -> Result<ActorsOutcome, Denial> {
    let rows = store
        .principals(space)?
        .into_iter()
        .map(|entry| {
            let principal = entry?;
            match find_in(store, space, &principal) {
                Ok(Some(row)) => Ok(row),
                Ok(None) => Err(format!(
                    "{}: removed while listing",
                    store.describe(space, &principal)
                )),
                Err(Denial::Refused(why) | Denial::Corrupt(why) | Denial::Unavailable(why)) => {
                    Err(why)
                }
            }
        })
        .collect();
    Ok(ActorsOutcome::Listed(rows))
}

/// One space's row of `principal`; a row whose content names another principal is refused.
fn find_in<S: RowStore>(
    store: &mut S,
    space: RowSpace,
    principal: &Principal,
) -> Result<Option<ActorRow>, Denial> {
    let Some(bytes) = store.load(space, principal)? else {
        return Ok(None);
    };
    let path = store.describe(space, principal);
    let row = ActorRow::from_file_bytes(&bytes, space)
        .map_err(|why| Denial::Corrupt(format!("{path}: {why}")))?;
    if row.principal() != *principal {
        return Err(Denial::Corrupt(format!(
            "{path}: actor grant principal {:?} does not match requested canonical principal \
             {:?} - refusing to authenticate one row as another",
            row.principal().key(),
            principal.key()
        )));
    }
    Ok(Some(row))
}

fn find_unified<S: RowStore>(store: &mut S, principal: &Principal) -> Result<Option<Held>, Denial> {
    let interactive = find_in(store, RowSpace::Interactive, principal)?;
    let managed = find_in(store, RowSpace::Managed, principal)?;
    match (interactive, managed) {
        (Some(_), Some(_)) => Err(Denial::Corrupt(format!(
            "actor {:?} is granted in BOTH the interactive and managed row spaces - a broken \
             ledger denies; remove one of {} / {}",
            principal.actor().as_str(),
            store.describe(RowSpace::Interactive, principal),
            store.describe(RowSpace::Managed, principal)
        ))),
        (Some(row), None) => Ok(Some(Held {
            space: RowSpace::Interactive,
            row,
        })),
        (None, Some(row)) => Ok(Some(Held {
            space: RowSpace::Managed,
            row,
        })),
        (None, None) => Ok(None),
    }
}

fn walk<S: RowStore>(store: &mut S, row: &ActorRow, boundary: Boundary) -> Result<(), Denial> {
    check_within_spawner_grant(row, boundary, &mut |p| {
        find_unified(store, p).map(|held| held.map(|h| h.row))
    })
}

/// Upserts `row` in `space`: checks, envelope (managed), no row in the other space, write, then
/// the post-write re-check of the other space that removes our own row if one appeared — at
/// most one surviving row per principal without a cross-writer lock.
fn grant<S: RowStore>(
    store: &mut S,
    space: RowSpace,
    row: &ActorRow,
) -> Result<ActorsOutcome, Denial> {
    row.check_for_write(space).map_err(Denial::Refused)?;
    if space == RowSpace::Managed {
        walk(store, row, Boundary::Spawn)?;
    }
    let principal = row.principal();
    let refusal = || {
        Denial::Refused(match space {
            RowSpace::Managed => format!(
                "actor {:?} already has an interactive grant - a managed agent cannot shadow it; \
                 revoke it first (`cotal actor revoke {}`) or spawn under another name",
                row.actor.as_str(),
                row.actor
            ),
            RowSpace::Interactive => format!(
                "actor {:?} is a managed agent - its grant is owned by the spawn lifecycle \
                 (respawn rewrites it, despawn revokes it); pick another actor name for an \
                 interactive grant",
                row.actor.as_str()
            ),
        })
    };
    if find_in(store, space.other(), &principal)?.is_some() {
        return Err(refusal());
    }
    write_settled(store, space, &principal, &row.to_file_bytes())?;
    if find_in(store, space.other(), &principal)?.is_some() {
        remove_settled(store, space, &principal)?;
        return Err(refusal());
    }
    Ok(ActorsOutcome::Granted(row.clone()))
}

/// Writes and, when the store reports a failure, settles by reading back: our exact bytes mean
/// the write landed.
fn write_settled<S: RowStore>(
    store: &mut S,
    space: RowSpace,
    principal: &Principal,
    bytes: &[u8],
) -> Result<(), Denial> {
    match store.store(space, principal, bytes) {
        Ok(()) => Ok(()),
        Err(StoreError::Unavailable(why)) => match store.load(space, principal) {
            Ok(Some(found)) if found == bytes => Ok(()),
            Ok(_) => Err(Denial::Unavailable(format!(
                "{}: the grant was not written ({why})",
                store.describe(space, principal)
            ))),
            Err(again) => Err(Denial::Unavailable(format!(
                "{}: the grant write failed ({why}) and the read-back failed too ({again:?}); \
                 the write may have landed",
                store.describe(space, principal)
            ))),
        },
        Err(corrupt) => Err(corrupt.into()),
    }
}

/// Removes and, on a failure, settles by reading back: no row means it is gone.
fn remove_settled<S: RowStore>(
    store: &mut S,
    space: RowSpace,
    principal: &Principal,
) -> Result<bool, Denial> {
    match store.remove(space, principal) {
        Ok(removed) => Ok(removed),
        Err(StoreError::Unavailable(why)) => match store.load(space, principal) {
            Ok(None) => Ok(true),
            Ok(Some(_)) => Err(Denial::Unavailable(format!(
                "{}: the row was not removed ({why})",
                store.describe(space, principal)
            ))),
            Err(again) => Err(Denial::Unavailable(format!(
                "{}: the removal failed ({why}) and the read-back failed too ({again:?}); the \
                 row may be gone",
                store.describe(space, principal)
            ))),
        },
        Err(corrupt) => Err(corrupt.into()),
    }
}
