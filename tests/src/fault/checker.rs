//! The independent checker: given every message the auth store's stream held during a run (as
//! a capture read them, in stream order), a final leader read of each acknowledged revision, and
//! the clients' [`History`](super::history::History), it lists every violation of:
//!
//! 1. **released inside the fence** (F19–F22): a released credential's winning touch is a
//!    message of its own gate, `open`, at the worker's epoch and registration revision, and its
//!    ledger row was `active` before it;
//! 2. **the barrier revokes what was released** (F46–F50): a gate reopens at coordinates other
//!    than a release's only after that release's row was revoked (an abort reopen keeps them);
//! 3. **coordinates only advance**: a gate's generation and epoch never go back, a reopen moves
//!    the generation by exactly one, and an open gate is only ever rewritten byte for byte;
//! 4. **never two live epochs of one instance**: no two completed registrations share an
//!    epoch, and releases of one gate never come from an older epoch after a newer one;
//! 5. **no acknowledged write lost**: each acknowledged touch still holds the bytes the capture
//!    saw there (or was trimmed with a later revision of its key present), each completed
//!    registration's reopen is in the stream and the gate never ends below it, and each
//!    acknowledged revoke is its row's final state;
//! 6. **ledger rows are monotonic**: `active` → `revoked` only, never deleted;
//! 7. **revocation shuts the next connect**: no connect check that began after a revoke was
//!    acknowledged admits that credential;
//! 8. **every refusal is a documented code**, and none is `internal`.
//!
//! It reads rows as JSON with its own field names (reference-gate-impl §2.3) and nothing of the
//! plane's code.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::history::Event;

/// The error codes of the envelope catalog (reference-gate-impl §3, SPEC §13.3). `internal` is
/// documented but means a stored row or a machine broke: under faults it is a violation.
pub const DOCUMENTED_CODES: &[&str] = &[
    "bad-request",
    "permission-denied",
    "not-found",
    "already-exists",
    "conflict",
    "contract-invalid",
    "failed-precondition",
    "deadline-exceeded",
    "expired",
    "unavailable",
    "unimplemented",
    "internal",
];

/// What a KV message did to its key (the `KV-Operation` header; absent means a put).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOp {
    Put,
    Delete,
    Purge,
}

/// One message of the auth store's stream, its subject already reduced to the KV key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMsg {
    pub seq: u64,
    pub key: String,
    pub op: KvOp,
    pub payload: Vec<u8>,
}

/// A final leader read of one stream sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtSeq {
    /// The message is there: its key and bytes.
    Present { key: String, payload: Vec<u8> },
    /// No message at that sequence (deleted by the bucket's history limit, or lost).
    Absent,
}

/// The store as a final read saw it.
#[derive(Debug, Clone, Default)]
pub struct FinalReads {
    /// Each acknowledged revision the history names, read back by sequence.
    pub at_seq: BTreeMap<u64, AtSeq>,
    /// The last message of each key the history names: gates and revoked rows (absent: the
    /// key has no message).
    pub last: BTreeMap<String, Last>,
}

/// A key's last message: its revision and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Last {
    pub revision: u64,
    pub payload: Vec<u8>,
}

/// The verdict on one run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub violations: Vec<String>,
    /// Releases, registrations, revokes and connects checked, and refusals by code.
    pub releases: usize,
    pub registrations: usize,
    pub admissions: usize,
    pub refusals: BTreeMap<String, usize>,
}

impl Report {
    fn violation(&mut self, rule: &str, what: String) {
        self.violations.push(format!("{rule}: {what}"));
    }
}

/// Judges one run. `captured` must be in stream order.
pub fn check(captured: &[StreamMsg], finals: &FinalReads, events: &[Event]) -> Report {
    let mut report = Report::default();
    let by_seq: BTreeMap<u64, &StreamMsg> = captured.iter().map(|m| (m.seq, m)).collect();
    let mut by_key: BTreeMap<&str, Vec<&StreamMsg>> = BTreeMap::new();
    for m in captured {
        by_key.entry(m.key.as_str()).or_default().push(m);
    }
    released_inside_fence(&mut report, &by_seq, &by_key, events);
    barrier_revokes_released(&mut report, &by_key, events);
    for (key, msgs) in &by_key {
        if key.starts_with("epgate.") {
            coordinates_advance(&mut report, key, msgs);
        }
        if key.starts_with("epcred.") || key.starts_with("cred.") {
            rows_monotonic(&mut report, key, msgs);
        }
    }
    one_live_epoch(&mut report, events);
    acked_writes_survive(&mut report, &by_seq, finals, events);
    other_acked_writes_survive(&mut report, &by_key, finals, events);
    revocation_shuts_connects(&mut report, events);
    refusal_codes(&mut report, events);
    report
}

fn json(m: &StreamMsg) -> Option<Value> {
    serde_json::from_slice(&m.payload).ok()
}

fn field<'a>(row: &'a Value, name: &str) -> Option<&'a Value> {
    row.get(name)
}

fn state(m: &StreamMsg) -> Option<String> {
    json(m).and_then(|v| {
        field(&v, "state")
            .and_then(Value::as_str)
            .map(str::to_owned)
    })
}

fn number(row: &Value, name: &str) -> Option<u64> {
    field(row, name).and_then(Value::as_u64)
}

/// Rule 1.
fn released_inside_fence(
    report: &mut Report,
    by_seq: &BTreeMap<u64, &StreamMsg>,
    by_key: &BTreeMap<&str, Vec<&StreamMsg>>,
    events: &[Event],
) {
    for event in events {
        let Event::Released {
            gate,
            row_key,
            gate_revision,
            epoch,
            registration_revision,
            ..
        } = event
        else {
            continue;
        };
        report.releases += 1;
        let Some(touch) = by_seq.get(gate_revision) else {
            report.violation(
                "released-inside-fence",
                format!("{row_key}: its winning touch {gate_revision} is not in the stream"),
            );
            continue;
        };
        let row = json(touch).unwrap_or(Value::Null);
        let at = (
            touch.key.as_str(),
            touch.op,
            field(&row, "state").and_then(Value::as_str),
            number(&row, "processEpoch"),
            number(&row, "registrationRevision"),
        );
        let want = (
            gate.as_str(),
            KvOp::Put,
            Some("open"),
            Some(*epoch),
            Some(*registration_revision),
        );
        if at != want {
            report.violation(
                "released-inside-fence",
                format!(
                    "{row_key} released at revision {gate_revision}, which is {at:?}, not \
                     {want:?}"
                ),
            );
        }
        let staged = by_key.get(row_key.as_str()).and_then(|msgs| msgs.first());
        match staged {
            Some(m) if m.seq < *gate_revision && state(m).as_deref() == Some("active") => {}
            other => report.violation(
                "released-inside-fence",
                format!(
                    "{row_key} released at {gate_revision} without an active row before it \
                     (first row message: {:?})",
                    other.map(|m| (m.seq, state(m)))
                ),
            ),
        }
    }
}

/// Rule 2.
fn barrier_revokes_released(
    report: &mut Report,
    by_key: &BTreeMap<&str, Vec<&StreamMsg>>,
    events: &[Event],
) {
    for event in events {
        let Event::Released {
            gate,
            row_key,
            gate_revision,
            ..
        } = event
        else {
            continue;
        };
        let gate_msgs = by_key.get(gate.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        let coordinates = |m: &StreamMsg| {
            json(m).map(|row| {
                (
                    number(&row, "processEpoch"),
                    number(&row, "registrationRevision"),
                    number(&row, "nameAuthorityRevision"),
                )
            })
        };
        let Some(released_at) = gate_msgs
            .iter()
            .find(|m| m.seq == *gate_revision)
            .and_then(|m| coordinates(m))
        else {
            continue;
        };
        // An abort reopen (reference E2: the registration failed before any revoke) keeps the
        // coordinates, so the credential stays valid; the first reopen that moves them is the
        // one the barrier must precede.
        let successor = gate_msgs.iter().find(|m| {
            m.seq > *gate_revision
                && state(m).as_deref() == Some("open")
                && coordinates(m) != Some(released_at)
        });
        let Some(reopen) = successor else { continue };
        let revoked = by_key.get(row_key.as_str()).is_some_and(|msgs| {
            msgs.iter()
                .any(|m| m.seq < reopen.seq && state(m).as_deref() == Some("revoked"))
        });
        if !revoked {
            report.violation(
                "barrier-revokes-released",
                format!(
                    "{gate} reopened at new coordinates at {} while {row_key} (released at \
                     {gate_revision}) was still active",
                    reopen.seq
                ),
            );
        }
    }
}

/// Rule 3.
fn coordinates_advance(report: &mut Report, key: &str, msgs: &[&StreamMsg]) {
    let mut previous: Option<(&StreamMsg, Value)> = None;
    for m in msgs {
        if m.op != KvOp::Put {
            report.violation(
                "coordinates-advance",
                format!("{key} was deleted at {}", m.seq),
            );
            continue;
        }
        let Some(row) = json(m) else {
            report.violation(
                "coordinates-advance",
                format!("{key} at {} is not JSON", m.seq),
            );
            continue;
        };
        if let Some((before, was)) = &previous {
            let (g0, g1) = (number(was, "generation"), number(&row, "generation"));
            let (e0, e1) = (number(was, "processEpoch"), number(&row, "processEpoch"));
            let (s0, s1) = (
                field(was, "state").and_then(Value::as_str),
                field(&row, "state").and_then(Value::as_str),
            );
            if g1 < g0 || e1 < e0 {
                report.violation(
                    "coordinates-advance",
                    format!(
                        "{key} went back from (generation {g0:?}, epoch {e0:?}) at {} to \
                         ({g1:?}, {e1:?}) at {}",
                        before.seq, m.seq
                    ),
                );
            }
            match (s0, s1) {
                (Some("open"), Some("open")) if before.payload != m.payload => report.violation(
                    "coordinates-advance",
                    format!(
                        "{key}: an open gate was rewritten with new bytes at {}",
                        m.seq
                    ),
                ),
                (Some("frozen"), Some("open")) if g1 != g0.map(|g| g + 1) => report.violation(
                    "coordinates-advance",
                    format!(
                        "{key} reopened at {} from generation {g0:?} to {g1:?}",
                        m.seq
                    ),
                ),
                _ => {}
            }
        }
        previous = Some((m, row));
    }
}

/// Rule 4.
fn one_live_epoch(report: &mut Report, events: &[Event]) {
    let mut epochs: BTreeMap<(&str, u64), u32> = BTreeMap::new();
    for event in events {
        if let Event::Registered {
            gate,
            worker,
            epoch,
            ..
        } = event
        {
            report.registrations += 1;
            if let Some(first) = epochs.insert((gate.as_str(), *epoch), *worker) {
                report.violation(
                    "one-live-epoch",
                    format!("{gate}: workers {first} and {worker} both registered epoch {epoch}"),
                );
            }
        }
    }
    let mut releases: BTreeMap<&str, Vec<(u64, u64, u32)>> = BTreeMap::new();
    for event in events {
        if let Event::Released {
            gate,
            gate_revision,
            epoch,
            worker,
            ..
        } = event
        {
            releases
                .entry(gate.as_str())
                .or_default()
                .push((*gate_revision, *epoch, *worker));
        }
    }
    for (gate, mut list) in releases {
        list.sort_unstable();
        for pair in list.windows(2) {
            if let [(r0, e0, w0), (r1, e1, w1)] = pair {
                if e1 < e0 {
                    report.violation(
                        "one-live-epoch",
                        format!(
                            "{gate}: worker {w1} released at epoch {e1} (revision {r1}) after \
                             worker {w0} released at epoch {e0} (revision {r0})"
                        ),
                    );
                }
            }
        }
    }
}

/// Rule 5.
fn acked_writes_survive(
    report: &mut Report,
    by_seq: &BTreeMap<u64, &StreamMsg>,
    finals: &FinalReads,
    events: &[Event],
) {
    for event in events {
        let Event::Released {
            gate,
            gate_revision,
            ..
        } = event
        else {
            continue;
        };
        let seen = by_seq.get(gate_revision);
        let now = finals.at_seq.get(gate_revision);
        let last = finals.last.get(gate.as_str()).map(|l| l.revision);
        let kept = match (seen, now) {
            (Some(seen), Some(AtSeq::Present { key, payload })) => {
                *key == seen.key && *payload == seen.payload
            }
            (Some(_), Some(AtSeq::Absent)) => last.is_some_and(|l| l > *gate_revision),
            _ => false,
        };
        if !kept {
            report.violation(
                "acked-writes-survive",
                format!(
                    "{gate} revision {gate_revision} was acknowledged; now {now:?}, the key's \
                     last revision {last:?}"
                ),
            );
        }
    }
}

/// Rule 5 for the other acknowledged writes: a completed registration's reopen is in the
/// stream and the gate never ends below its generation; an acknowledged revoke is the row's
/// final state; an exchanged root credential's row was `active` in the stream.
fn other_acked_writes_survive(
    report: &mut Report,
    by_key: &BTreeMap<&str, Vec<&StreamMsg>>,
    finals: &FinalReads,
    events: &[Event],
) {
    let last_row = |key: &str| {
        finals
            .last
            .get(key)
            .and_then(|l| serde_json::from_slice::<Value>(&l.payload).ok())
    };
    let has = |key: &str, matches: &dyn Fn(&Value) -> bool| {
        by_key
            .get(key)
            .is_some_and(|msgs| msgs.iter().filter_map(|m| json(m)).any(|row| matches(&row)))
    };
    for event in events {
        match event {
            Event::Registered {
                gate,
                epoch,
                generation,
                ..
            } => {
                let reopened = has(gate, &|row| {
                    row["state"] == "open"
                        && number(row, "generation") == Some(*generation)
                        && number(row, "processEpoch") == Some(*epoch)
                });
                let now = last_row(gate).and_then(|row| number(&row, "generation"));
                if !reopened || now.is_none_or(|g| g < *generation) {
                    report.violation(
                        "acked-writes-survive",
                        format!(
                            "{gate}: the registration at generation {generation}, epoch {epoch} \
                             completed (in the stream: {reopened}); the gate now ends at \
                             generation {now:?}"
                        ),
                    );
                }
            }
            Event::Revoked { row_key, .. } => {
                let now = last_row(row_key);
                if now.as_ref().map(|row| &row["state"]) != Some(&Value::from("revoked")) {
                    report.violation(
                        "acked-writes-survive",
                        format!("{row_key} was revoked; its row now ends as {now:?}"),
                    );
                }
            }
            Event::Exchanged { row_key } if !has(row_key, &|row| row["state"] == "active") => {
                report.violation(
                    "released-inside-fence",
                    format!("the root credential {row_key} was handed out without an active row"),
                );
            }
            _ => {}
        }
    }
}

/// Rule 6.
fn rows_monotonic(report: &mut Report, key: &str, msgs: &[&StreamMsg]) {
    let mut revoked_at = None;
    for m in msgs {
        if m.op != KvOp::Put {
            report.violation("rows-monotonic", format!("{key} was deleted at {}", m.seq));
            continue;
        }
        match (state(m).as_deref(), revoked_at) {
            (Some("revoked"), None) => revoked_at = Some(m.seq),
            (Some("active"), Some(at)) => report.violation(
                "rows-monotonic",
                format!("{key} was revoked at {at} and active again at {}", m.seq),
            ),
            _ => {}
        }
    }
}

/// Rule 7.
fn revocation_shuts_connects(report: &mut Report, events: &[Event]) {
    let revoked: BTreeMap<&str, u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Revoked { row_key, acked_ms } => Some((row_key.as_str(), *acked_ms)),
            _ => None,
        })
        .collect();
    for event in events {
        if let Event::Admitted {
            row_key,
            started_ms,
        } = event
        {
            report.admissions += 1;
            if let Some(acked) = revoked.get(row_key.as_str()) {
                if started_ms > acked {
                    report.violation(
                        "revocation-shuts-connects",
                        format!(
                            "{row_key} was admitted by a check begun at {started_ms} ms, after \
                             its revoke was acknowledged at {acked} ms"
                        ),
                    );
                }
            }
        }
    }
}

/// Rule 8.
fn refusal_codes(report: &mut Report, events: &[Event]) {
    let documented: BTreeSet<&str> = DOCUMENTED_CODES.iter().copied().collect();
    for event in events {
        if let Event::Refused { op, code, message } = event {
            *report.refusals.entry(code.clone()).or_default() += 1;
            if !documented.contains(code.as_str()) || code == "internal" {
                report.violation(
                    "refusal-codes",
                    format!("{op} refused with {code:?}: {message}"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
