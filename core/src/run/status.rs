//! The run status record: the last-value-wins half of a workflow run's record in the records
//! bucket, `run.<endpointToken>.<runId>.status` (reference `run-record.ts`, `RECORD_KINDS.run`),
//! beside the append-only journal. It names the driver holding the run and the fence it holds
//! it under; a run-driver renewal and a run attempt decide on it.

use std::fmt;

use crate::error::EpError;
use crate::journal::{FencingToken, RunEpoch, RunHolder, RunId, TakeoverId};
use crate::kv::Revision;
use crate::machine::{Ctx, Halt};
use crate::manager::UserKey;
use crate::names::{keys, EndpointName, InstanceId};
use crate::service::{self, RecordRead};
use crate::wire::{self, ObjectWriter};

/// The status record's fields, in the order the reference writes them.
const FIELDS: [&str; 8] = [
    "v",
    "observedSpecRevision",
    "state",
    "holder",
    "epoch",
    "fencingToken",
    "journalHigh",
    "at",
];

/// What a run is doing now. `released` (its driver stopped holding it, no result) and `failed`
/// (the program failed, the journal has the result) are distinct on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    Running,
    Released,
    Completed,
    Failed,
}

impl RunState {
    pub const ALL: [RunState; 4] = [
        RunState::Running,
        RunState::Released,
        RunState::Completed,
        RunState::Failed,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Released => "released",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// A completed or failed run gets no new attempt.
    pub const fn is_terminal(self) -> bool {
        matches!(self, RunState::Completed | RunState::Failed)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's status record, parsed closed: `{v:1, observedSpecRevision, state, holder, epoch,
/// fencingToken, journalHigh, at}`. The record carries no instance: a hosting manager writes the
/// holder as `<supervisor nkey>.<takeoverId>`, and the instance is bound only through the
/// registered supervisor nkey (see [`HostedRunStatus::hosted_on`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedRunStatus {
    pub observed_spec_revision: u64,
    pub state: RunState,
    pub holder: RunHolder,
    pub epoch: RunEpoch,
    pub fencing_token: FencingToken,
    /// The highest journal ordinal the run is known to have reached (F86).
    pub journal_high: u64,
    /// Unix millis of the write.
    pub at: u64,
}

impl HostedRunStatus {
    /// Parses stored bytes; anything outside the closed schema is `internal`.
    pub fn parse(bytes: &[u8]) -> Result<HostedRunStatus, EpError> {
        const WHAT: &str = "run status";
        let map = wire::parse_object(bytes, WHAT)?;
        wire::reject_unknown(&map, &FIELDS, WHAT)?;
        if map.get("v").and_then(wire::safe_uint) != Some(1) {
            return Err(EpError::internal("stored run status must carry v: 1"));
        }
        let state = wire::str_field(&map, "state", WHAT)?;
        let state = RunState::parse(state).ok_or_else(|| {
            EpError::internal(format!(
                "stored run status state {:?} is not running, released, completed or failed",
                state
            ))
        })?;
        let holder =
            RunHolder::parse(wire::str_field(&map, "holder", WHAT)?).map_err(EpError::stored)?;
        Ok(HostedRunStatus {
            observed_spec_revision: wire::uint_field(&map, "observedSpecRevision", WHAT)?,
            state,
            holder,
            epoch: RunEpoch(wire::uint_field(&map, "epoch", WHAT)?),
            fencing_token: FencingToken(wire::uint_field(&map, "fencingToken", WHAT)?),
            journal_high: wire::uint_field(&map, "journalHigh", WHAT)?,
            at: wire::uint_field(&map, "at", WHAT)?,
        })
    }

    /// The record as the reference's `JSON.stringify` writes it.
    pub fn to_bytes(&self) -> Vec<u8> {
        ObjectWriter::new()
            .uint("v", 1)
            .uint("observedSpecRevision", self.observed_spec_revision)
            .string("state", self.state.as_str())
            .string("holder", self.holder.as_str())
            .uint("epoch", self.epoch.0)
            .uint("fencingToken", self.fencing_token.0)
            .uint("journalHigh", self.journal_high)
            .uint("at", self.at)
            .finish()
            .into_bytes()
    }

    /// The takeover id: what follows the holder's last dot (`None` for an undotted holder).
    pub fn takeover(&self) -> Option<&str> {
        self.holder_parts().map(|(_, takeover)| takeover)
    }

    /// The instance the run is hosted on, as seen by a manager registered with `supervisor` on
    /// `instance`: that instance when the holder's prefix (before its last dot) is exactly the
    /// registered supervisor nkey, else `None` — a holder under any other prefix binds no
    /// instance. `supervisor` must come from verified registration state (the identities the
    /// current-registration proof binds), never from the request alone.
    pub fn hosted_on<'i>(
        &self,
        supervisor: &UserKey,
        instance: &'i InstanceId,
    ) -> Option<&'i InstanceId> {
        self.holder_parts()
            .filter(|(prefix, _)| *prefix == supervisor.as_str())
            .map(|_| instance)
    }

    fn holder_parts(&self) -> Option<(&str, &str)> {
        self.holder
            .as_str()
            .rsplit_once('.')
            .filter(|(prefix, _)| !prefix.is_empty())
    }
}

/// Leader-served read of a run's status record (one KV round trip). `None` = the run has no
/// status (never started, or its status was never written). A DEL/PURGE marker is a deletion,
/// never absence: `failed-precondition`. Garbled bytes are `internal`.
pub fn observe_hosted_run(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
    run: &RunId,
) -> Result<Option<HostedRunStatus>, Halt> {
    let key = keys::run_status(endpoint, run);
    match service::read_record(cx, &key)? {
        RecordRead::Absent => Ok(None),
        RecordRead::Deleted { operation, .. } => Err(EpError::failed_precondition(format!(
            "the run status {key} carries a {} marker; a deletion is never absence - reconcile \
             the store (SPEC 13.7)",
            operation.as_str()
        ))
        .into()),
        RecordRead::Live { value, .. } => {
            Ok(Some(HostedRunStatus::parse(&value).map_err(|e| {
                EpError::internal(format!("run status {key}: {}", e.message))
            })?))
        }
    }
}

/// Writes a run's status: create-only when `expected` is `None` (fenced against the key's whole
/// history), else pinned to `expected`. A lost CAS is `conflict`; ambiguous writes are settled by
/// read-back ([`service::create_record`], [`service::update_record`]). The hosting driver writes
/// this record; the plane only reads it — the writer exists for the simulator and tests.
pub fn write_run_status(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
    run: &RunId,
    status: &HostedRunStatus,
    expected: Option<Revision>,
) -> Result<Revision, Halt> {
    let key = keys::run_status(endpoint, run);
    let bytes = status.to_bytes();
    match expected {
        None => service::create_record(cx, &key, &bytes),
        Some(revision) => service::update_record(cx, &key, &bytes, revision),
    }
}

/// The run check of a run-driver renewal (reference-auth-service §4.5 step 7, §4.4
/// `renewRunDriver` re-read): the observed run must be `running`, hosted on `instance` under the
/// registered `supervisor` nkey, with exactly the caller's holder, takeover id, epoch and fencing
/// token — else `conflict` "manager-service run renewal does not hold the activated run and
/// takeover fence". An unrecorded run, a bumped fencing token, a foreign holder prefix and a
/// stale takeover id all land here. Keeps F84/F87: a renewal re-issues a driver pair only to the
/// driver whose activation the run record names, per run and per takeover.
pub fn run_holds_fence(
    status: Option<&HostedRunStatus>,
    supervisor: &UserKey,
    instance: &InstanceId,
    holder: &RunHolder,
    takeover: &TakeoverId,
    epoch: RunEpoch,
    token: FencingToken,
) -> Result<(), EpError> {
    let holds = status.is_some_and(|s| {
        s.state == RunState::Running
            && s.hosted_on(supervisor, instance) == Some(instance)
            && s.holder == *holder
            && s.takeover() == Some(takeover.as_str())
            && s.epoch == epoch
            && s.fencing_token == token
    });
    if holds {
        Ok(())
    } else {
        Err(EpError::conflict(
            "manager-service run renewal does not hold the activated run and takeover fence",
        ))
    }
}
