//! The rollback high-water marks: `<root>/space.<hex>/high-water.json` —
//! `{"ver":1,"gates":{"<gate key>":{"revision","processEpoch","generation"}},"streams":{"<name>":
//! lastSeq}}`, the highest coordinates this state dir saw of its gate and streams, so a start
//! notices a store that rolled back underneath it (`cotal_core::rollback`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cotal_core::kv::Revision;
use cotal_core::names::SpaceName;
use cotal_core::rollback::Mark;
use serde_json::{json, Value};

use crate::files;
use crate::trust;

const HIGH_WATER_FILE: &str = "high-water.json";
/// The one version of the file this build writes and reads.
const VERSION: u64 = 1;

/// Where the high-water marks of `space`'s instance live.
pub fn path(root: &Path, space: &SpaceName) -> PathBuf {
    root.join(trust::space_segment(space)).join(HIGH_WATER_FILE)
}

/// Everything the rollback check remembers of the stores: per gate its [`Mark`], per stream the
/// highest last sequence seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HighWater {
    pub gates: BTreeMap<String, Mark>,
    pub streams: BTreeMap<String, u64>,
}

impl HighWater {
    /// Raises the mark of `gate_key` to `seen` (never lowers it).
    pub fn raise_gate(&mut self, gate_key: &str, seen: Mark) {
        let mark = match self.gates.get(gate_key) {
            Some(before) => before.max(seen),
            None => seen,
        };
        self.gates.insert(gate_key.to_owned(), mark);
    }

    /// Raises the mark of `stream` to `last_seq` (never lowers it).
    pub fn raise_stream(&mut self, stream: &str, last_seq: u64) {
        let mark = self.streams.entry(stream.to_owned()).or_insert(0);
        *mark = (*mark).max(last_seq);
    }
}

/// The marks recorded at `path`; empty when none were recorded yet. A file this build cannot
/// read is refused: silently dropping a mark would blind the rollback check.
pub fn load(path: &Path) -> Result<HighWater, String> {
    let Some(bytes) = files::read_regular(path)? else {
        return Ok(HighWater::default());
    };
    let corrupt = || {
        format!(
            "{} is not a high-water file this build reads; restore it, or remove it deliberately \
             (the rollback check then starts over from the store as it is)",
            path.display()
        )
    };
    let doc: Value = serde_json::from_slice(&bytes).map_err(|_| corrupt())?;
    if doc.get("ver").and_then(Value::as_u64) != Some(VERSION) {
        return Err(corrupt());
    }
    let mut marks = HighWater::default();
    if let Some(gates) = doc.get("gates") {
        for (key, entry) in gates.as_object().ok_or_else(corrupt)? {
            let number = |name: &str| entry.get(name).and_then(Value::as_u64).ok_or_else(corrupt);
            marks.gates.insert(
                key.clone(),
                Mark {
                    revision: Revision(number("revision")?),
                    process_epoch: number("processEpoch")?,
                    generation: number("generation")?,
                },
            );
        }
    }
    if let Some(streams) = doc.get("streams") {
        for (name, seq) in streams.as_object().ok_or_else(corrupt)? {
            marks
                .streams
                .insert(name.clone(), seq.as_u64().ok_or_else(corrupt)?);
        }
    }
    Ok(marks)
}

/// Records `marks` durably.
pub fn save(path: &Path, marks: &HighWater) -> Result<(), String> {
    let gates: serde_json::Map<String, Value> = marks
        .gates
        .iter()
        .map(|(key, mark)| {
            (
                key.clone(),
                json!({
                    "revision": mark.revision.0,
                    "processEpoch": mark.process_epoch,
                    "generation": mark.generation,
                }),
            )
        })
        .collect();
    let doc = json!({"ver": VERSION, "gates": gates, "streams": marks.streams});
    files::write_private(path, format!("{doc:#}\n").as_bytes())
}
