//! `manager-goal-index-scan` (reference-auth-service §4.7): a restarted remote manager asks the
//! plane for the manager endpoint's in-flight goals its owner's callers submitted, to settle
//! every goal an earlier incarnation accepted but never finished.
//!
//! **The index.** The manager's goal writer records each accepted action goal, create-only and
//! before its bind, at `goalidx.manager.<owner>.<actor>.<uid>.<goalId>` in the records store
//! (one atomic key, the caller's coordinates in the key and in the value), and deletes it at the
//! goal's terminal. A manager holds no enumeration grant on the records store, so the plane
//! enumerates for it: the listing is under the authenticated owner's prefix only, and every row
//! must name the manager endpoint and that owner in its value and rebuild exactly the key it was
//! listed under, or the scan fails `internal` (garbled reconcile state never authorizes).
//!
//! **Where it runs.** [`AuthorizeGoalIndexScan`] is the door (F90's `supervise`, F94's
//! current-registration check); [`ScanGoalIndex`] is the enumeration, which a driver runs on the
//! plane's sealed records scanner (F98: dynamic enumeration only on the sealed scanner the plane
//! opens for itself, never on a connection a caller reaches).
//!
//! **Markers (deviation).** The reference's host scan refuses any DEL/PURGE marker in the
//! listing, while its own index sweep skips deleted entries, and the goal writer clears an entry
//! with a DEL at the goal's terminal: every owner with one finished goal would have a scan that
//! fails for ever. Here a DEL marker, the writer's own terminal clear, is skipped, and so is a key
//! gone between the listing and its read; a PURGE marker, which no protocol writer leaves on the
//! index, is refused as the reference refuses every marker (`failed-precondition`).
//!
//! Entries are answered in key order (the reference answers in the order its consumer delivered
//! the subjects).

use serde_json::{Map, Value};

use crate::enrollment::{open_closed, ManagedEnvelope};
use crate::error::EpError;
use crate::kv::{KeysOutcome, Operation, ReadOutcome, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, ActorToken, EndpointName, GoalId, InstanceId, LifecycleUid, OwnerToken};
use crate::wire::{self, ObjectWriter};

use super::door::GOAL_INDEX_SCAN;
use super::echo_current;
use super::host::{ManagerHost, Supervisor, SUPERVISE};

/// The request kind this door serves.
pub const GOAL_INDEX_SCAN_KIND: &str = "manager-goal-index-scan";

/// How the door's refusals name it.
const WHAT: &str = "manager goal-index scan";

/// The members an index entry may carry (its schema is closed).
const ENTRY_MEMBERS: [&str; 8] = [
    "v",
    "endpoint",
    "owner",
    "actor",
    "uid",
    "goalId",
    "iid",
    "allocated",
];
/// The members of an entry's acceptance floor.
const ALLOCATED_MEMBERS: [&str; 4] = ["name", "actor", "uid", "readinessDeadlineMs"];

/// A parsed `manager-goal-index-scan` request: the current-registration envelope and nothing
/// else (no filter: what is scanned is the plane's choice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalIndexScanRequest {
    pub envelope: ManagedEnvelope,
}

impl GoalIndexScanRequest {
    /// The reference's closed parser: an object, no unknown member, then the envelope. Every
    /// refusal is `bad-request` "manager goal-index scan request …".
    pub fn parse(raw: &Value) -> Result<GoalIndexScanRequest, EpError> {
        let (_, envelope) = open_closed(raw, WHAT, GOAL_INDEX_SCAN_KIND, &[])?;
        Ok(GoalIndexScanRequest { envelope })
    }
}

/// The identity a goal's acceptance allocated, recorded before the acceptance was answered.
/// The reference bounds its members only as non-empty strings, so they are kept as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalAllocation {
    pub name: String,
    pub actor: String,
    pub uid: String,
    /// Unix milliseconds, > 0, when recorded.
    pub readiness_deadline_ms: Option<u64>,
}

/// One in-flight goal of the manager endpoint's reconcile index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalIndexEntry {
    pub endpoint: EndpointName,
    /// The goal's caller.
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub uid: LifecycleUid,
    pub goal_id: GoalId,
    /// The manager incarnation that accepted the goal.
    pub iid: InstanceId,
    pub allocated: Option<GoalAllocation>,
}

impl GoalIndexEntry {
    /// The row as the goal writer writes it, members in its order.
    pub fn to_json(&self) -> String {
        let mut w = ObjectWriter::new()
            .uint("v", 1)
            .string("endpoint", self.endpoint.as_str())
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("uid", self.uid.as_str())
            .string("goalId", self.goal_id.as_str())
            .string("iid", self.iid.as_str());
        if let Some(a) = &self.allocated {
            let mut floor = ObjectWriter::new()
                .string("name", &a.name)
                .string("actor", &a.actor)
                .string("uid", &a.uid);
            if let Some(deadline) = a.readiness_deadline_ms {
                floor = floor.uint("readinessDeadlineMs", deadline);
            }
            w = w.raw("allocated", &floor.finish());
        }
        w.finish()
    }

    /// The key the entry is stored under.
    pub fn key(&self) -> String {
        keys::goal_index(
            &self.endpoint,
            &self.owner,
            &self.actor,
            &self.uid,
            &self.goal_id,
        )
    }

    /// Parses the row stored at `key`. Malformed is `internal`, naming the key.
    pub fn parse(bytes: &[u8], key: &str) -> Result<GoalIndexEntry, EpError> {
        let what = format!("goal-index entry {key}");
        let garbled = || {
            EpError::internal(format!(
                "{what} is malformed; garbled reconcile state never authorizes (SPEC 13.6)"
            ))
        };
        let map = wire::parse_object(bytes, &what)?;
        wire::reject_unknown(&map, &ENTRY_MEMBERS, &what)?;
        if map.get("v").and_then(wire::safe_uint) != Some(1) {
            return Err(garbled());
        }
        let text = |k: &str| map.get(k).and_then(Value::as_str).ok_or_else(garbled);
        let grammar = |e: EpError| EpError::internal(format!("{what}: {}", e.message));
        Ok(GoalIndexEntry {
            endpoint: EndpointName::parse(text("endpoint")?).map_err(grammar)?,
            owner: OwnerToken::parse(text("owner")?).map_err(grammar)?,
            actor: ActorToken::parse(text("actor")?).map_err(grammar)?,
            uid: LifecycleUid::parse(text("uid")?).map_err(grammar)?,
            goal_id: GoalId::parse(text("goalId")?).map_err(grammar)?,
            iid: InstanceId::parse(text("iid")?).map_err(grammar)?,
            allocated: match map.get("allocated") {
                None => None,
                Some(value) => Some(allocation(value, &what)?),
            },
        })
    }
}

/// An entry's acceptance floor: closed, its three names non-empty, its deadline a positive
/// safe integer when present (a hollow or unbounded floor never authorizes).
fn allocation(value: &Value, what: &str) -> Result<GoalAllocation, EpError> {
    let refuse = |detail: &str| {
        EpError::internal(format!(
            "{what} carries {detail}; garbled reconcile state never authorizes (SPEC 13.6)"
        ))
    };
    let a: &Map<String, Value> = value
        .as_object()
        .ok_or_else(|| refuse("a malformed acceptance floor"))?;
    wire::reject_unknown(a, &ALLOCATED_MEMBERS, &format!("{what} allocated"))?;
    let name = |k: &str| {
        a.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| refuse("an acceptance floor with an empty component"))
    };
    let readiness_deadline_ms = match a.get("readinessDeadlineMs") {
        None => None,
        Some(v) => Some(
            wire::safe_uint(v)
                .filter(|n| *n >= 1)
                .ok_or_else(|| refuse("an invalid readiness deadline"))?,
        ),
    };
    Ok(GoalAllocation {
        name: name("name")?,
        actor: name("actor")?,
        uid: name("uid")?,
        readiness_deadline_ms,
    })
}

/// The door (`authorizeRemoteManagerGoalIndexScan`), in the reference's order:
/// 1. the request's space is the host's (`permission-denied`);
/// 2. the holder's scope names `supervise` (`permission-denied`, F90);
/// 3. the registered-manager check at the request's serve epoch with its current-registration
///    proof ([`GOAL_INDEX_SCAN`]; F94's check).
///
/// KV round trips: 1 (the gate).
#[derive(Debug, Clone)]
pub struct AuthorizeGoalIndexScan {
    pub host: ManagerHost,
    pub caller: Supervisor,
    pub request: GoalIndexScanRequest,
}

impl Script for AuthorizeGoalIndexScan {
    type Output = ();

    fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let e = &self.request.envelope;
        e.require_host_space(&self.host, WHAT)?;
        if !self.caller.supervises() {
            return Err(
                EpError::permission_denied(format!("{WHAT} needs scope \"{SUPERVISE}\"")).into(),
            );
        }
        e.check_current(cx, &GOAL_INDEX_SCAN, &self.host, self.caller.owner())
    }
}

/// The scan (`scanManagerGoalIndex` and `completeRemoteManagerGoalIndexScan`), run after
/// [`AuthorizeGoalIndexScan`] admitted the request: lists `goalidx.manager.<owner>.` on the
/// records store and reads each listed row (module docs: markers, order). Every row must parse,
/// rebuild its key, and name the manager endpoint and `owner`, or the scan fails `internal`.
///
/// KV round trips: 1 listing + 1 read per listed key, the reads one [`Ctx::each`] loop.
#[derive(Debug, Clone)]
pub struct ScanGoalIndex {
    /// The authenticated owner: the only owner whose entries are listed.
    pub owner: OwnerToken,
    pub request: GoalIndexScanRequest,
}

impl Script for ScanGoalIndex {
    type Output = GoalIndexScan;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<GoalIndexScan, Halt> {
        let manager = EndpointName::parse("manager").map_err(EpError::stored)?;
        let prefix = keys::goal_index_owner_prefix(&manager, &self.owner);
        let listed = cx.sub(|cx| match cx.keys(Store::Records, prefix.clone())? {
            KeysOutcome::Keys(keys) => Ok(keys
                .into_iter()
                .filter(|k| k.starts_with(&prefix))
                .collect::<Vec<_>>()),
            KeysOutcome::Unavailable(why) => Err(EpError::unavailable(format!(
                "listing the manager goal index {prefix}> failed: {why}"
            ))
            .into()),
        })?;
        let rows = cx.each(&listed, |cx, key| {
            read_entry(cx, key, &manager, &self.owner)
        })?;
        Ok(GoalIndexScan {
            request: self.request.clone(),
            owner: self.owner.clone(),
            entries: rows.iter().filter_map(|row| (**row).clone()).collect(),
        })
    }
}

/// Reads one listed index row: `None` for a key deleted (DEL, the writer's terminal clear) or
/// gone since the listing; a PURGE marker refuses; a live row must be a well-formed entry of the
/// manager endpoint and `owner` at exactly `key`.
fn read_entry(
    cx: &mut Ctx<'_>,
    key: &str,
    manager: &EndpointName,
    owner: &OwnerToken,
) -> Result<Option<GoalIndexEntry>, Halt> {
    let entry = match cx.get(Store::Records, key)? {
        ReadOutcome::Entry(None) => return Ok(None),
        ReadOutcome::Entry(Some(entry)) => entry,
        ReadOutcome::Unavailable(why) => {
            return Err(EpError::unavailable(format!("reading {key} failed: {why}")).into())
        }
    };
    match entry.operation {
        Operation::Put => {}
        Operation::Delete => return Ok(None),
        Operation::Purge => {
            return Err(EpError::failed_precondition(format!(
                "manager goal-index entry {key} carries a {} marker; a deletion is never a live \
                 index row",
                entry.operation.as_str()
            ))
            .into())
        }
    }
    let parsed = GoalIndexEntry::parse(&entry.value, key)?;
    if parsed.key() != key {
        return Err(EpError::internal(format!(
            "manager goal-index entry body names {}, which does not match key {key}",
            parsed.key()
        ))
        .into());
    }
    if parsed.endpoint != *manager || parsed.owner != *owner {
        return Err(EpError::internal(
            "manager goal-index scanner returned a foreign endpoint or owner",
        )
        .into());
    }
    Ok(Some(parsed))
}

/// The scan's answer: the request echoed with the authenticated owner, then the entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalIndexScan {
    pub request: GoalIndexScanRequest,
    pub owner: OwnerToken,
    pub entries: Vec<GoalIndexEntry>,
}

impl GoalIndexScan {
    /// The wire answer, members in the reference's order (the request's identities are not
    /// echoed).
    pub fn to_json(&self) -> String {
        let entries: Vec<String> = self.entries.iter().map(GoalIndexEntry::to_json).collect();
        echo_current(
            GOAL_INDEX_SCAN_KIND,
            &self.request.envelope,
            Some(&self.owner),
        )
        .raw("entries", &format!("[{}]", entries.join(",")))
        .finish()
    }
}
