//! Rollback detection (ecosystem §8, Jepsen's NATS 2.12.1 findings): an acknowledged JetStream
//! write can be rolled back (lazy fsync after correlated crashes, minority disk corruption), and
//! a fencing plane that trusts a rolled-back gate can act at a superseded epoch. So the plane
//! keeps, per gate, a high-water mark of the highest revision, process epoch and generation it
//! has observed, and any later observation below it is a rollback: refused loudly, never
//! "corrected". Every one of the three only ever grows on an honest store (KV revisions are
//! stream sequences; a gate's epoch and generation advance on every reopen, Q-13, F69).

use serde_json::json;

use crate::error::EpError;
use crate::issuance::GateObservation;
use crate::kv::Revision;

/// The detail kind of a rollback refusal.
pub const ROLLBACK_DETECTED: &str = "ai.cotal.auth.rollback-detected";

/// The highest coordinates seen of one gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub revision: Revision,
    pub process_epoch: u64,
    pub generation: u64,
}

impl Mark {
    /// The mark of one observation.
    pub fn of(seen: &GateObservation) -> Mark {
        Mark {
            revision: seen.revision,
            process_epoch: seen.gate.process_epoch().0,
            generation: seen.gate.generation().0,
        }
    }

    /// The higher of two marks, coordinate by coordinate.
    pub fn max(self, other: Mark) -> Mark {
        Mark {
            revision: Revision(self.revision.0.max(other.revision.0)),
            process_epoch: self.process_epoch.max(other.process_epoch),
            generation: self.generation.max(other.generation),
        }
    }
}

/// Checks `seen` (or the gate's absence) against the `mark` kept for `gate_key`: `Ok` when
/// nothing went backwards; otherwise a `failed-precondition` refusal naming what fell below
/// what, for the operator to investigate (the store must be restored from the newest data, or
/// the mark removed deliberately once the loss is understood).
pub fn check(gate_key: &str, mark: &Mark, seen: Option<&GateObservation>) -> Result<(), EpError> {
    let Some(seen) = seen else {
        return Err(refused(
            gate_key,
            mark,
            format!(
                "gate {gate_key} is gone, but this plane saw it at revision {}",
                mark.revision.0
            ),
        ));
    };
    let now = Mark::of(seen);
    let fell = [
        ("revision", now.revision.0, mark.revision.0),
        ("process epoch", now.process_epoch, mark.process_epoch),
        ("generation", now.generation, mark.generation),
    ]
    .into_iter()
    .filter(|(_, now, before)| now < before)
    .map(|(what, now, before)| format!("its {what} is {now}, below the {before} this plane saw"))
    .collect::<Vec<_>>();
    if fell.is_empty() {
        return Ok(());
    }
    Err(refused(
        gate_key,
        mark,
        format!("gate {gate_key} went backwards: {}", fell.join(", ")),
    ))
}

/// Checks a store's stream as it stands (`last_seq`) against the highest last sequence this
/// plane saw of it (`mark`): a stream sequence only grows on an honest store, so one below the
/// mark means acknowledged writes were lost — a revoked credential row may be active again,
/// a retired gate open. `failed-precondition` naming both, like [`check`].
pub fn check_stream(stream: &str, mark: u64, last_seq: u64) -> Result<(), EpError> {
    if last_seq >= mark {
        return Ok(());
    }
    Err(EpError::failed_precondition(format!(
        "stream {stream} went backwards: its last sequence is {last_seq}, below the {mark} this \
         plane saw. {ROLLED_BACK}"
    ))
    .with_detail(json!({
        "kind": ROLLBACK_DETECTED,
        "stream": stream,
        "lastSeq": mark,
    })))
}

/// What a rollback means and what the operator does about it.
const ROLLED_BACK: &str = "The auth store has rolled back (an acknowledged write was lost, or the \
    store was restored from an older copy); the plane refuses to act on it, since a rolled-back \
    store can authorize a superseded epoch or a revoked credential. Restore the store from its \
    newest data, or, once the loss is understood, remove this plane's high-water mark \
    deliberately";

fn refused(gate_key: &str, mark: &Mark, what: String) -> EpError {
    EpError::failed_precondition(format!("{what}. {ROLLED_BACK}")).with_detail(json!({
        "kind": ROLLBACK_DETECTED,
        "gate": gate_key,
        "revision": mark.revision.0,
        "processEpoch": mark.process_epoch,
        "generation": mark.generation,
    }))
}
