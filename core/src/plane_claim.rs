//! The plane claim (reference-auth-service §2.10, SPEC 13.13): at most one plane per space.
//!
//! One never-deleted key, `plane`, in the auth store holds the claim: a generation that rises
//! with every held write, a per-open random `claimId`, `held` or `released`, and the connection
//! identities `(serverId, cid, userNkey)` of the winner's two sealed scanner connections, which
//! are non-reconnecting, so while the plane lives they stay exactly as recorded and once it dies
//! they are gone for good. An open acquires it over the barrier connection:
//!
//! * absent → a create-only write at generation 1; `released` → a revision-pinned write at
//!   generation + 1 (no liveness question: a clean close released it);
//! * `held` by another open → the liveness oracle is asked about the *prior* tuples
//!   ([`Effect::ProbePlane`](crate::machine::Effect::ProbePlane)): any live tuple refuses (`live-peer`), any unknown one refuses
//!   (`unknown`, fail-safe), and only both gone under a complete listing lets the open reclaim
//!   it (revision-pinned, generation + 1);
//! * the holder whose server went away re-takes its own row ([`RetakePlaneClaim`]): while the
//!   row is still exactly its hold, a revision-pinned write at generation + 1 under a fresh
//!   claim id names its scanners' reconnected connections (no liveness question: the row
//!   itself shows nobody wrote it since); any other row is `lost`;
//! * a row that does not parse is `corrupt` and is never overwritten;
//! * a second lost write is `concurrent`: nobody spins on an exclusion key.
//!
//! Every write is settled by reading the row back ([`settle_write`]): our exact bytes are ours.
//! The guard ([`check_held`]) re-validates the row before and after every sealed scan, and the
//! release writes `released` only over the winner's own row.

use serde_json::{json, Map, Value};

use crate::actors::row::iso8601_millis;
use crate::error::{EpError, ErrorCode};
use crate::kv::settle::{settle_write, Heard, Settled, Verdict};
use crate::kv::{Entry, KvRequest, ReadOutcome, Revision, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::names::SpaceName;
pub use crate::plane_probe::{ConnTuple, PlaneQuery, PlaneVerdict, TupleLiveness};
use crate::wire::MAX_SAFE_INTEGER;

/// The claim's key in the space's auth store.
pub const PLANE_CLAIM_KEY: &str = "plane";
/// The detail kind every claim refusal carries.
pub const PLANE_CLAIM_REFUSED: &str = "ai.cotal.auth.plane-claim-refused";
/// Acquire attempts: a lost write re-reads once and re-decides.
const ACQUIRE_ATTEMPTS: usize = 2;

/// Whether the claim is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    Held,
    Released,
}

impl ClaimState {
    pub const fn as_str(self) -> &'static str {
        match self {
            ClaimState::Held => "held",
            ClaimState::Released => "released",
        }
    }
}

/// The `plane` row (closed v1 schema).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRow {
    pub generation: u64,
    pub claim_id: String,
    pub state: ClaimState,
    /// The auth-ledger scanner connection.
    pub ledger: ConnTuple,
    /// The records scanner connection.
    pub records: ConnTuple,
    /// When the holder opened, as `Date.toISOString` writes it.
    pub opened_at: String,
}

impl ClaimRow {
    /// The closed parse: exactly the v1 members, `v` 1, a generation of at least 1, a claim id
    /// of 1..=128 characters, a known state, well-formed tuples, and an `openedAt` of
    /// 1..=64 characters. `None` on anything else: an exclusion row that does not parse is
    /// never reasoned over.
    pub fn parse(bytes: &[u8]) -> Option<ClaimRow> {
        let value: Value = serde_json::from_slice(bytes).ok()?;
        let map: &Map<String, Value> = value.as_object()?;
        const MEMBERS: [&str; 7] = [
            "v",
            "generation",
            "claimId",
            "state",
            "ledger",
            "records",
            "openedAt",
        ];
        if map.len() != MEMBERS.len() || !MEMBERS.iter().all(|m| map.contains_key(*m)) {
            return None;
        }
        if map.get("v")?.as_u64()? != 1 {
            return None;
        }
        let generation = map.get("generation")?.as_u64()?;
        let claim_id = map.get("claimId")?.as_str()?;
        let opened_at = map.get("openedAt")?.as_str()?;
        let state = match map.get("state")?.as_str()? {
            "held" => ClaimState::Held,
            "released" => ClaimState::Released,
            _ => return None,
        };
        let fits = |s: &str, max: usize| !s.is_empty() && s.chars().count() <= max;
        if !(1..=MAX_SAFE_INTEGER).contains(&generation)
            || !fits(claim_id, 128)
            || !fits(opened_at, 64)
        {
            return None;
        }
        Some(ClaimRow {
            generation,
            claim_id: claim_id.to_owned(),
            state,
            ledger: ConnTuple::parse(map.get("ledger")?)?,
            records: ConnTuple::parse(map.get("records")?)?,
            opened_at: opened_at.to_owned(),
        })
    }

    /// The row's bytes in the reference's member order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut map = Map::new();
        map.insert("v".into(), 1.into());
        map.insert("generation".into(), self.generation.into());
        map.insert("claimId".into(), self.claim_id.clone().into());
        map.insert("state".into(), self.state.as_str().into());
        map.insert("ledger".into(), self.ledger.to_json());
        map.insert("records".into(), self.records.to_json());
        map.insert("openedAt".into(), self.opened_at.clone().into());
        Value::Object(map).to_string().into_bytes()
    }

    fn same_holder(&self, hold: &ClaimHold) -> bool {
        self.claim_id == hold.claim_id
            && self.generation == hold.generation
            && self.ledger == hold.ledger
            && self.records == hold.records
    }
}

/// Why a claim operation refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimRefusal {
    Corrupt,
    LivePeer,
    Unknown,
    Concurrent,
    Fenced,
    Released,
    Lost,
    ReleaseUnreachable,
}

impl ClaimRefusal {
    pub const ALL: [ClaimRefusal; 8] = [
        ClaimRefusal::Corrupt,
        ClaimRefusal::LivePeer,
        ClaimRefusal::Unknown,
        ClaimRefusal::Concurrent,
        ClaimRefusal::Fenced,
        ClaimRefusal::Released,
        ClaimRefusal::Lost,
        ClaimRefusal::ReleaseUnreachable,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ClaimRefusal::Corrupt => "corrupt",
            ClaimRefusal::LivePeer => "live-peer",
            ClaimRefusal::Unknown => "unknown",
            ClaimRefusal::Concurrent => "concurrent",
            ClaimRefusal::Fenced => "fenced",
            ClaimRefusal::Released => "released",
            ClaimRefusal::Lost => "lost",
            ClaimRefusal::ReleaseUnreachable => "release-unreachable",
        }
    }

    /// `unknown` and `release-unreachable` are worth retrying (`unavailable`); the rest are
    /// `failed-precondition`.
    pub const fn code(self) -> ErrorCode {
        match self {
            ClaimRefusal::Unknown | ClaimRefusal::ReleaseUnreachable => ErrorCode::Unavailable,
            _ => ErrorCode::FailedPrecondition,
        }
    }

    /// The reason a claim refusal carries, if `error` is one.
    pub fn of(error: &EpError) -> Option<ClaimRefusal> {
        let detail = error
            .details
            .iter()
            .find(|d| d["kind"] == PLANE_CLAIM_REFUSED)?;
        let reason = detail["reason"].as_str()?;
        Self::ALL.into_iter().find(|r| r.as_str() == reason)
    }

    fn refuse(self, message: String) -> EpError {
        EpError::new(self.code(), message)
            .with_detail(json!({"kind": PLANE_CLAIM_REFUSED, "reason": self.as_str()}))
    }

    /// The held row's scanner connections a `live-peer` refusal names, so a caller can tell
    /// whose they are (the plane's own fenced predecessor, or another plane).
    pub fn live_peer(error: &EpError) -> Option<PlaneQuery> {
        let detail = error.details.iter().find(|d| {
            d["kind"] == PLANE_CLAIM_REFUSED && d["reason"] == ClaimRefusal::LivePeer.as_str()
        })?;
        Some(PlaneQuery {
            ledger: ConnTuple::parse(&detail["ledger"])?,
            records: ConnTuple::parse(&detail["records"])?,
        })
    }
}

/// The winner's hold: what the guard and the release compare the row with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimHold {
    pub space: SpaceName,
    pub claim_id: String,
    pub generation: u64,
    pub ledger: ConnTuple,
    pub records: ConnTuple,
    /// True when the row was reclaimed from a dead holder.
    pub reclaimed: bool,
}

impl ClaimHold {
    /// The audit action of the acquisition that won this hold: `reclaim` when it was taken
    /// over from a dead holder, else `claim`.
    pub fn action(&self) -> &'static str {
        if self.reclaimed {
            "reclaim"
        } else {
            "claim"
        }
    }

    /// The operator's line for a won hold.
    pub fn held_copy(&self) -> &'static str {
        if self.reclaimed {
            "holds the plane claim, reclaimed from a dead plane"
        } else {
            "holds the plane claim"
        }
    }
}

/// Acquires the claim for this open (see the module doc).
#[derive(Debug, Clone)]
pub struct AcquirePlaneClaim {
    pub space: SpaceName,
    /// A fresh random id per open (a new user nkey's public key).
    pub claim_id: String,
    pub ledger: ConnTuple,
    pub records: ConnTuple,
    /// The open's wall clock, unix milliseconds (`openedAt`).
    pub now_ms: u64,
}

impl Script for AcquirePlaneClaim {
    type Output = ClaimHold;

    /// Keeps SPEC 13.13's single plane per space: create-only or revision-pinned writes only, a
    /// held row reclaimed only when the oracle shows both prior scanners gone under a complete
    /// listing, a corrupt row never overwritten, a second lost write refused.
    fn run(&self, cx: &mut Ctx<'_>) -> Result<ClaimHold, Halt> {
        let space = &self.space;
        for _ in 0..ACQUIRE_ATTEMPTS {
            let current = read_claim(cx, space)?;
            let (generation, expected, reclaimed) = match &current {
                None => (1, None, false),
                Some((row, revision)) => match row.state {
                    ClaimState::Released => (next_generation(row)?, Some(*revision), false),
                    ClaimState::Held if row.claim_id == self.claim_id => {
                        // Our own row, written by an earlier send of this very open.
                        return Ok(self.hold(row.generation, false));
                    }
                    ClaimState::Held => {
                        self.adjudicate(cx, row)?;
                        (next_generation(row)?, Some(*revision), true)
                    }
                },
            };
            if write_claim(cx, space, &self.row(generation), expected)? {
                return Ok(self.hold(generation, reclaimed));
            }
        }
        Err(ClaimRefusal::Concurrent
            .refuse(format!(
                "another auth plane claimed space \"{space}\" while this one was opening (its \
                 write won the claim row twice); one plane serves a space. If two planes were \
                 started for it, stop one; after a crash-recovery race the other one now serves \
                 and this one is not needed"
            ))
            .into())
    }
}

impl AcquirePlaneClaim {
    /// The `held` row this open writes at `generation`.
    fn row(&self, generation: u64) -> ClaimRow {
        ClaimRow {
            generation,
            claim_id: self.claim_id.clone(),
            state: ClaimState::Held,
            ledger: self.ledger.clone(),
            records: self.records.clone(),
            opened_at: iso8601_millis(self.now_ms),
        }
    }

    fn hold(&self, generation: u64, reclaimed: bool) -> ClaimHold {
        ClaimHold {
            space: self.space.clone(),
            claim_id: self.claim_id.clone(),
            generation,
            ledger: self.ledger.clone(),
            records: self.records.clone(),
            reclaimed,
        }
    }

    /// A held row: reclaimable only when both of its scanner connections are gone.
    fn adjudicate(&self, cx: &mut Ctx<'_>, row: &ClaimRow) -> Result<(), Halt> {
        let verdict = cx.probe_plane(PlaneQuery {
            ledger: row.ledger.clone(),
            records: row.records.clone(),
        })?;
        let live: Vec<String> = [
            ("auth-ledger", &row.ledger, verdict.ledger),
            ("records", &row.records, verdict.records),
        ]
        .into_iter()
        .filter(|(_, _, v)| *v == TupleLiveness::Live)
        .map(|(role, t, _)| {
            format!(
                "{role} scanner (connection {} on server {})",
                t.cid, t.server_id
            )
        })
        .collect();
        let space = &self.space;
        if !live.is_empty() {
            let mut refusal = ClaimRefusal::LivePeer.refuse(format!(
                "another auth plane already owns space \"{space}\": its {} {} live on the \
                     servers (claim held since {}). Two planes over one space would split its \
                     sealed scans, so this one refuses. Stop the other auth service process for \
                     this space, then start this one",
                live.join(" and "),
                if live.len() == 1 { "is" } else { "are" },
                row.opened_at
            ));
            refusal.details = vec![json!({
                "kind": PLANE_CLAIM_REFUSED,
                "reason": ClaimRefusal::LivePeer.as_str(),
                "ledger": row.ledger.to_json(),
                "records": row.records.to_json(),
            })];
            return Err(refusal.into());
        }
        if verdict.ledger != TupleLiveness::Gone || verdict.records != TupleLiveness::Gone {
            return Err(ClaimRefusal::Unknown
                .refuse(format!(
                    "cannot confirm the previous auth plane of space \"{space}\" has \
                     disconnected ({}; claim held since {}). This refusal is FAIL-SAFE: taking \
                     over while it might still scan could act on a partial enumeration. Retry \
                     once every server of the cluster answers (a dropped connection clears in \
                     seconds); if it persists, check this host's link to the servers. Do not \
                     edit the claim row by hand",
                    verdict
                        .note
                        .as_deref()
                        .unwrap_or("the servers' listing could not decide"),
                    row.opened_at
                ))
                .into());
        }
        Ok(())
    }
}

fn next_generation(row: &ClaimRow) -> Result<u64, Halt> {
    row.generation
        .checked_add(1)
        .filter(|g| *g <= MAX_SAFE_INTEGER)
        .ok_or_else(|| {
            EpError::internal("the plane claim's generation cannot advance past 2^53 - 1").into()
        })
}

fn corrupt(space: &SpaceName) -> Halt {
    ClaimRefusal::Corrupt
        .refuse(format!(
            "the plane claim row of space \"{space}\" is not a valid v1 claim (garbled bytes or \
             a foreign write); it is the single-plane exclusion, so it is never reasoned over or \
             overwritten automatically. Inspect `{PLANE_CLAIM_KEY}` in the space's auth store \
             and restore or remove it deliberately"
        ))
        .into()
}

/// Reads the row (leader-served): `None` when the space was never claimed. A marker or a row
/// that does not parse is `corrupt`; an unserved read is `unavailable`.
fn read_claim(cx: &mut Ctx<'_>, space: &SpaceName) -> Result<Option<(ClaimRow, Revision)>, Halt> {
    match cx.get(Store::Auth, PLANE_CLAIM_KEY)? {
        ReadOutcome::Entry(None) => Ok(None),
        ReadOutcome::Entry(Some(entry)) => parse_entry(space, &entry).map(Some),
        ReadOutcome::Unavailable(why) => Err(EpError::unavailable(format!(
            "cannot read the plane claim of space \"{space}\": {why}"
        ))
        .into()),
    }
}

fn parse_entry(space: &SpaceName, entry: &Entry) -> Result<(ClaimRow, Revision), Halt> {
    if !entry.is_put() {
        return Err(corrupt(space));
    }
    ClaimRow::parse(&entry.value)
        .map(|row| (row, entry.revision))
        .ok_or_else(|| corrupt(space))
}

/// Writes `row` create-only (`expected` = `None`) or pinned to `expected`; `true` when it is
/// ours (acknowledged, or read back byte-identical), `false` when another write won the row.
fn write_claim(
    cx: &mut Ctx<'_>,
    space: &SpaceName,
    row: &ClaimRow,
    expected: Option<Revision>,
) -> Result<bool, Halt> {
    let request = KvRequest::create_or_update(
        Store::Auth,
        PLANE_CLAIM_KEY.to_owned(),
        row.to_bytes(),
        expected,
    );
    let settled = settle_write(cx, &request, |cx, heard| {
        if let Heard::NotSent { why, .. } = heard {
            return Err(EpError::unavailable(format!(
                "the plane claim write of space \"{space}\" was not sent: {why}"
            ))
            .into());
        }
        Ok(match cx.get(Store::Auth, PLANE_CLAIM_KEY)? {
            ReadOutcome::Entry(Some(entry)) if entry.value == row.to_bytes() => {
                Verdict::Settled(true)
            }
            ReadOutcome::Entry(Some(entry)) if Some(entry.revision) != expected => {
                Verdict::Settled(false)
            }
            ReadOutcome::Entry(None) if expected.is_some() => Verdict::Settled(false),
            ReadOutcome::Entry(_) => Verdict::Unmoved,
            ReadOutcome::Unavailable(why) => {
                return Err(EpError::unavailable(format!(
                    "the plane claim write of space \"{space}\" went unanswered and its \
                     read-back failed ({why}); whether this open holds the claim is unknown"
                ))
                .into())
            }
        })
    })?;
    match settled {
        Settled::Written(_) => Ok(true),
        Settled::Judged(ours) => Ok(ours),
        Settled::Exhausted(heard) => Err(EpError::unavailable(format!(
            "the plane claim write of space \"{space}\" stayed unanswered ({}); whether this \
             open holds the claim is unknown",
            heard.last_unanswered().unwrap_or("no answer")
        ))
        .into()),
    }
}

/// When a guard check runs, relative to its sealed scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanPhase {
    /// Before: a failed check refuses to enumerate.
    Before,
    /// After: a failed check discards the enumeration.
    After,
}

/// The operator copy of a plane that lost a sealed scanner connection and fenced itself.
pub fn scanner_death_copy(space: &SpaceName, role: &str) -> String {
    format!(
        "this auth plane lost its sealed {role} scanner connection for space \"{space}\" and \
         STOPPED scanning rather than risk a partial enumeration (deliberate and fail-safe: the \
         connection does not reconnect, because the plane claim pins its exact identity). \
         Nothing is lost; restart the auth service, and the successor takes over once the \
         servers confirm the dropped connections are gone"
    )
}

/// The agent-facing copy of a fenced plane: no operator instruction in it.
pub const FENCED_AGENT_COPY: &str = "the auth service is momentarily unavailable; retry shortly";

/// The guard (reference §2.10): the row must be `held` by exactly this hold — same claim id,
/// generation and both tuples — unless the plane fenced itself (`fenced` is its reason) or
/// began its release. Keeps SPEC 13.13 around every sealed scan.
pub fn check_held(
    hold: &ClaimHold,
    current: Option<&ClaimRow>,
    fenced: Option<&str>,
    releasing: bool,
    phase: ScanPhase,
) -> Result<(), EpError> {
    let space = &hold.space;
    let what = match phase {
        ScanPhase::Before => "refusing to enumerate",
        ScanPhase::After => "DISCARDING this enumeration",
    };
    if let Some(reason) = fenced {
        return Err(ClaimRefusal::Fenced.refuse(format!("{what}: {reason}")));
    }
    if releasing {
        return Err(ClaimRefusal::Released.refuse(format!(
            "{what}: the plane claim of space \"{space}\" is being released (the plane is \
             closing)"
        )));
    }
    match current {
        Some(row) if row.state == ClaimState::Held && row.same_holder(hold) => Ok(()),
        Some(row)
            if row.state == ClaimState::Held
                && row.claim_id == hold.claim_id
                && row.generation == hold.generation =>
        {
            Err(ClaimRefusal::Lost.refuse(format!(
                "{what}: the plane claim of space \"{space}\" still names this open, but its \
                 scanner tuples no longer match (a foreign rewrite)"
            )))
        }
        _ => Err(ClaimRefusal::Lost.refuse(format!(
            "{what}: the plane claim of space \"{space}\" is no longer held by this plane \
             (generation {}); another plane may own it",
            hold.generation
        ))),
    }
}

/// Reads the row and checks it with [`check_held`] (the guard as a machine, for scans that run
/// as one).
#[derive(Debug, Clone)]
pub struct AssertHeld {
    pub hold: ClaimHold,
    pub phase: ScanPhase,
}

impl Script for AssertHeld {
    type Output = ();

    fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let current = read_claim(cx, &self.hold.space)?;
        check_held(
            &self.hold,
            current.as_ref().map(|(row, _)| row),
            None,
            false,
            self.phase,
        )
        .map_err(Halt::from)
    }
}

/// Runs one sealed scan under the claim guard (reference §2.10, SPEC 13.13): the row is
/// checked before the scan (a failure refuses to enumerate) and again after it (a failure
/// discards what was enumerated), so no plane acts on a listing taken while another plane
/// may own the space. `None` is a world without a plane claim (a model or a one-shot command
/// that owns no plane), where the scan runs bare.
pub fn sealed_scan<T>(
    cx: &mut Ctx<'_>,
    hold: Option<&ClaimHold>,
    scan: impl FnOnce(&mut Ctx<'_>) -> Result<T, Halt>,
) -> Result<T, Halt> {
    let Some(hold) = hold else {
        return scan(cx);
    };
    let guard = |phase| AssertHeld {
        hold: hold.clone(),
        phase,
    };
    cx.call(&guard(ScanPhase::Before))?;
    let listed = scan(cx)?;
    cx.call(&guard(ScanPhase::After))?;
    Ok(listed)
}

/// Releases the claim on a clean close: `held` by this hold → `released` (pinned); already
/// released with this hold's identity → done; anything else is `lost` and left alone (a
/// successor may own it); an unanswered write or read is `release-unreachable`, worth retrying.
#[derive(Debug, Clone)]
pub struct ReleasePlaneClaim {
    pub hold: ClaimHold,
}

impl Script for ReleasePlaneClaim {
    type Output = ();

    fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let hold = &self.hold;
        let space = &hold.space;
        let unreachable = |why: &str| -> Halt {
            ClaimRefusal::ReleaseUnreachable
                .refuse(format!(
                    "cannot release the plane claim of space \"{space}\" ({why}); the row stays \
                     held, and closing again once the servers answer releases it"
                ))
                .into()
        };
        let current = match cx.recover(|cx| read_claim(cx, space))? {
            Ok(current) => current,
            Err(e) if e.code == ErrorCode::Unavailable => return Err(unreachable(&e.message)),
            Err(e) => return Err(e.into()),
        };
        let lost = || -> Halt {
            ClaimRefusal::Lost
                .refuse(format!(
                    "the plane claim of space \"{space}\" is no longer this plane's (generation \
                     {}, claim {}); NOT releasing it, since a successor may own it",
                    hold.generation, hold.claim_id
                ))
                .into()
        };
        let Some((row, revision)) = current else {
            return Err(lost());
        };
        if !row.same_holder(hold) {
            return Err(lost());
        }
        if row.state == ClaimState::Released {
            return Ok(());
        }
        let released = ClaimRow {
            state: ClaimState::Released,
            ..row
        };
        match cx.recover(|cx| write_claim(cx, space, &released, Some(revision)))? {
            Ok(true) => Ok(()),
            Ok(false) => Err(lost()),
            Err(e) if e.code == ErrorCode::Unavailable => Err(unreachable(&e.message)),
            Err(e) => Err(e.into()),
        }
    }
}

/// Re-takes the claim this plane holds (`hold`) once its server came back: the scanners'
/// connections reconnected, so the row's tuples name connections that are gone, and a peer
/// asking the oracle about them would take the space over. While the row is still exactly
/// `hold`, a revision-pinned write at generation + 1 under the fresh `claim_id` names the
/// scanners as they are now; a row anyone else wrote meanwhile (a standby that reclaimed it)
/// is `lost`, and the plane must stop. Keeps SPEC 13.13: the write is pinned to the very row
/// this plane holds, so two planes never both win it, and it is settled by reading it back.
#[derive(Debug, Clone)]
pub struct RetakePlaneClaim {
    pub hold: ClaimHold,
    /// The re-taken hold as an open would claim it: a fresh claim id, the scanners' reconnected
    /// tuples and the wall clock, in the hold's space.
    pub open: AcquirePlaneClaim,
}

impl Script for RetakePlaneClaim {
    type Output = ClaimHold;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<ClaimHold, Halt> {
        let hold = &self.hold;
        let space = &hold.space;
        let lost = || -> Halt {
            ClaimRefusal::Lost
                .refuse(format!(
                    "the plane claim of space \"{space}\" is no longer held by this plane \
                     (generation {}) after its server came back; another plane may own it, so \
                     this one stops",
                    hold.generation
                ))
                .into()
        };
        let open = &self.open;
        let Some((row, revision)) = read_claim(cx, space)? else {
            return Err(lost());
        };
        if row.state == ClaimState::Held && row.claim_id == open.claim_id {
            // Our own re-take, written by an earlier send of this very script.
            return Ok(open.hold(row.generation, false));
        }
        if row.state != ClaimState::Held || !row.same_holder(hold) {
            return Err(lost());
        }
        let generation = next_generation(&row)?;
        if write_claim(cx, space, &open.row(generation), Some(revision))? {
            Ok(open.hold(generation, false))
        } else {
            Err(lost())
        }
    }
}
