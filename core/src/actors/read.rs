//! Reading and writing the actor ledger with typed outcomes: one method per request kind, each
//! returning only what that kind can produce, and ONE mapping of a ledger denial to the caller's
//! error ([`denied`]). The same methods serve a door's script (through its actor-ledger effect,
//! which the simulator drives) and a caller holding the ledger itself (a CLI, a bench).

use super::{ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, Boundary, Held, RowSpace};
use crate::error::EpError;
use crate::machine::{Ctx, Halt};
use crate::names::{LifecycleUid, Principal};

/// The one mapping of a ledger answer that is not `wanted` to the caller's error: a refusal is
/// the ledger's policy (`permission-denied`: the envelope, the row spaces or the grammar forbid
/// it), a stored row that fails its grammar is the host's broken state (`internal`, as the
/// reference answers it; the sentence names the file), an unreachable ledger `unavailable`; any
/// other answer is out of turn (`internal`). Every door's HTTP status for these is unchanged:
/// the faces map codes per door.
pub fn denied(outcome: ActorsOutcome, wanted: &str) -> EpError {
    match outcome {
        ActorsOutcome::Refused(why) => EpError::permission_denied(why),
        ActorsOutcome::Corrupt(why) => EpError::internal(why),
        ActorsOutcome::Unavailable(why) => EpError::unavailable(why),
        other => EpError::internal(format!(
            "the actor ledger answered {other:?} where {wanted} was due"
        )),
    }
}

/// Where a request reaches the actor ledger: the ledger itself, or a script's effect.
pub trait LedgerRead {
    /// What a request can fail with: a refusal, or for a script also a suspension.
    type Error: From<EpError>;

    /// One request, its raw outcome.
    fn read(&mut self, request: ActorsRequest) -> Result<ActorsOutcome, Self::Error>;

    /// The row of `principal` in `space`, if granted.
    fn find_row(
        &mut self,
        space: RowSpace,
        principal: &Principal,
    ) -> Result<Option<Held>, Self::Error> {
        match self.read(ActorsRequest::Find {
            space,
            principal: principal.clone(),
        })? {
            ActorsOutcome::Found(held) => Ok(held),
            other => Err(denied(other, "a row").into()),
        }
    }

    /// The row of `principal` in either space (one in both is a broken ledger, denied).
    fn find_unified(&mut self, principal: &Principal) -> Result<Option<Held>, Self::Error> {
        match self.read(ActorsRequest::FindUnified {
            principal: principal.clone(),
        })? {
            ActorsOutcome::Found(held) => Ok(held),
            other => Err(denied(other, "a row").into()),
        }
    }

    /// Whether `row` is within its delegation envelope at `boundary` now.
    fn check_envelope(&mut self, row: &ActorRow, boundary: Boundary) -> Result<(), Self::Error> {
        match self.read(ActorsRequest::CheckEnvelope {
            row: row.clone(),
            boundary,
        })? {
            ActorsOutcome::Within => Ok(()),
            other => Err(denied(other, "an envelope verdict").into()),
        }
    }

    /// Grants a managed row; the row as written.
    fn grant_managed(&mut self, row: ActorRow) -> Result<ActorRow, Self::Error> {
        match self.read(ActorsRequest::GrantManaged(row))? {
            ActorsOutcome::Granted(row) => Ok(row),
            other => Err(denied(other, "a granted row").into()),
        }
    }

    /// Removes `principal`'s managed row while it still names `lifecycle_uid`; whether one was.
    fn revoke_managed_at(
        &mut self,
        principal: &Principal,
        lifecycle_uid: &LifecycleUid,
    ) -> Result<bool, Self::Error> {
        match self.read(ActorsRequest::RevokeManagedAt {
            principal: principal.clone(),
            lifecycle_uid: lifecycle_uid.clone(),
        })? {
            ActorsOutcome::Revoked(removed) => Ok(removed),
            other => Err(denied(other, "a revocation").into()),
        }
    }
}

impl<T: ActorLedger + ?Sized> LedgerRead for &T {
    type Error = EpError;
    fn read(&mut self, request: ActorsRequest) -> Result<ActorsOutcome, EpError> {
        Ok(self.execute(&request))
    }
}

impl LedgerRead for Ctx<'_> {
    type Error = Halt;
    fn read(&mut self, request: ActorsRequest) -> Result<ActorsOutcome, Halt> {
        self.actors(request)
    }
}
