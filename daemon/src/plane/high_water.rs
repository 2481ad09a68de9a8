//! The plane's rollback guard around its own registration (ecosystem §8): before anything acts
//! on its gate, the gate and the authority streams must not have gone back behind the
//! high-water marks this state dir saw; after the ceremony, the marks rise to what it left.
//! The rule (which streams, the refusal and its audited row) is `core::high_water`; the reads
//! are io-nats's; the marks file is io-fs's.

use cotal_core::high_water::RolledBack;
use cotal_core::issuance::{observe_gate, GateObservation, GateRef};
use cotal_core::kv::Revision;
use cotal_core::machine::{script, Replay};
use cotal_core::rollback::Mark;
use cotal_io_fs::marks;
use cotal_io_nats::high_water::{check_before_acting, check_streams, StreamCheck, Streams};
use cotal_io_nats::{drive, Space};
use tracing::error;

use super::Start;
use crate::audit;

impl Start<'_> {
    /// Refuses to act on `gate` (as `observed`) when it or an authority stream is behind its
    /// mark: a rolled-back gate could be registered at a superseded epoch.
    pub(super) async fn check_rollback(
        &self,
        bound: &Space,
        gate: &GateRef,
        observed: Option<&GateObservation>,
    ) -> Result<(), String> {
        let high = marks::load(&marks::path(&self.inputs.root, self.space()))?;
        check_before_acting(bound, &gate.key(), observed, &high.gates, &high.streams)
            .await
            .map_err(|check| refused(check, "register", true))
    }
}

impl Start<'_> {
    /// Raises the high-water mark to the gate as it stands after this start's registration;
    /// returns the gate's revision then, the floor the fence watch holds it to.
    pub(super) async fn raise_mark(
        &self,
        bound: &Space,
        gate: &GateRef,
    ) -> Result<Revision, String> {
        let seen = observe(bound, gate)
            .await?
            .ok_or_else(|| format!("gate {} vanished right after its registration", gate.key()))?;
        let path = marks::path(&self.inputs.root, self.space());
        let mut high = marks::load(&path)?;
        high.raise_gate(&gate.key(), Mark::of(&seen));
        raise_streams(&mut high, bound).await?;
        marks::save(&path, &high)?;
        Ok(seen.revision)
    }
}

/// One leader read of the plane's own gate.
pub(super) async fn observe(
    bound: &Space,
    gate: &GateRef,
) -> Result<Option<GateObservation>, String> {
    drive(&mut Replay::new(script(|cx| observe_gate(cx, gate))), bound)
        .await
        .map_err(|e| format!("reading the plane's gate failed: {e}"))
}

/// Raises the stream marks of core's rollback stores to their last sequences as `bound` reads
/// them; a stream found below its mark is refused (the mark stands, never lowered).
pub(super) async fn raise_streams(
    high: &mut marks::HighWater,
    bound: &Space,
) -> Result<(), String> {
    let read = check_streams(bound, &high.streams, Streams::All)
        .await
        .map_err(|check| refused(check, "high-water", false))?;
    for (stream, last) in read {
        high.raise_stream(&stream, last);
    }
    Ok(())
}

/// What a failed rollback check says: a read that failed as it is; a store behind its mark
/// audited as refused over its row (and logged, `loud`, where the start refuses to act).
fn refused(check: StreamCheck, operation: &str, loud: bool) -> String {
    match check {
        StreamCheck::Unread(why) => why,
        StreamCheck::Rolled(RolledBack { row, error }) => {
            audit::refused("plane", operation, &row, &error);
            if loud {
                error!("{}", error.message);
            }
            error.message
        }
    }
}
