//! The one recorder every door's decision goes through: the decision metric, the audit line
//! and, for a face door, the warn line of a refusal and the answer. A door says what it decided
//! over ([`Decided`]) and how it came out; the bookkeeping is written once, here.

use std::sync::Arc;

use cotal_core::error::EpError;
use cotal_io_http::face::{Answer, DoorRequest};
use serde_json::Value;

use super::metrics::PlaneMetrics;
use crate::audit;

/// What a decision was about: the operation (the metric's label), what the audit line calls it
/// (the operation, or the door's path where one label covers several doors), who asked
/// (`anonymous` before authentication), the row it decided over, and the coordinate a grant
/// acted at.
#[derive(Debug, Clone, Copy)]
pub(super) struct Decided<'a> {
    pub(super) operation: &'static str,
    pub(super) audited: &'a str,
    pub(super) caller: &'a str,
    pub(super) row: &'a str,
    pub(super) at: audit::At,
}

impl<'a> Decided<'a> {
    pub(super) fn new(operation: &'static str, caller: &'a str, row: &'a str) -> Decided<'a> {
        Decided {
            operation,
            audited: operation,
            caller,
            row,
            at: audit::At::default(),
        }
    }
}

/// Records decisions on the plane's metrics and audit trail.
#[derive(Debug, Clone)]
pub(super) struct Recorder {
    metrics: Arc<PlaneMetrics>,
}

impl Recorder {
    pub(super) fn new(metrics: &Arc<PlaneMetrics>) -> Recorder {
        Recorder {
            metrics: Arc::clone(metrics),
        }
    }

    /// Records one decision: granted (`Ok`) or refused with its code.
    pub(super) fn record(&self, d: &Decided<'_>, refused: Option<&EpError>) {
        match refused {
            None => {
                self.metrics.decided(d.operation, None);
                audit::granted(d.caller, d.audited, d.row, d.at);
            }
            Some(e) => {
                self.metrics.decided(d.operation, Some(e.code));
                audit::refused(d.caller, d.audited, d.row, e);
            }
        }
    }

    /// Records a face door's decision and answers it: the body, or the door's refusal (logged
    /// with the peer that asked).
    pub(super) fn answer(
        &self,
        request: &DoorRequest,
        d: &Decided<'_>,
        outcome: Result<Value, EpError>,
    ) -> Answer {
        self.record(d, outcome.as_ref().err());
        match outcome {
            Ok(body) => Answer::ok(body),
            Err(e) => {
                tracing::warn!(peer = %request.peer, operation = d.operation, "refused: {}", e.message);
                Answer::refusal(request.door, &e)
            }
        }
    }
}
