//! The authority streams' last sequences as a start reads them, checked against the marks its
//! state dir kept (`cotal_core::high_water`): each of core's [`ROLLBACK_STORES`] read on one
//! connection, in order, and refused at the first one behind its mark.

use std::collections::BTreeMap;

use cotal_core::high_water::{self, RolledBack, ROLLBACK_STORES};
use cotal_core::issuance::GateObservation;
use cotal_core::rollback::Mark;

use crate::space::Space;

/// Why the streams could not be vouched for.
#[derive(Debug, Clone)]
pub enum StreamCheck {
    /// A stream's last sequence could not be read (the sentence says which).
    Unread(String),
    /// A stream is behind its mark: refused (core's verdict).
    Rolled(RolledBack),
}

/// Which streams a check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// Only those with a mark: a start's check before it acts (nothing else to compare).
    Marked,
    /// All of them: the marks are about to be raised to what is read.
    All,
}

/// Reads the last sequence of each rollback store's stream on `bound` and checks it against its
/// mark in `marks`; the streams read with their last sequences, in [`ROLLBACK_STORES`] order.
pub async fn check_streams(
    bound: &Space,
    marks: &BTreeMap<String, u64>,
    which: Streams,
) -> Result<Vec<(String, u64)>, StreamCheck> {
    let mut read = Vec::new();
    for store in ROLLBACK_STORES {
        let stream = &bound.layout(store).stream;
        let mark = marks.get(stream).copied();
        if mark.is_none() && which == Streams::Marked {
            continue;
        }
        let last = bound
            .last_sequence(store)
            .await
            .map_err(StreamCheck::Unread)?;
        high_water::check_stream(stream, mark, last).map_err(StreamCheck::Rolled)?;
        read.push((stream.clone(), last));
    }
    Ok(read)
}

/// A start's check before it acts on its gate `gate_key` (observed as `seen`): the gate against
/// its mark in `gates`, then each marked stream against its last sequence on `bound` (ecosystem
/// §8: a rolled-back store could register the plane at a superseded epoch, F69).
pub async fn check_before_acting(
    bound: &Space,
    gate_key: &str,
    seen: Option<&GateObservation>,
    gates: &BTreeMap<String, Mark>,
    streams: &BTreeMap<String, u64>,
) -> Result<(), StreamCheck> {
    high_water::check_gate(gate_key, gates.get(gate_key), seen).map_err(StreamCheck::Rolled)?;
    check_streams(bound, streams, Streams::Marked).await?;
    Ok(())
}
