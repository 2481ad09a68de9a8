//! Audit lines: one per authority decision the plane makes, on the `cotal::audit` target
//! (`RUST_LOG=cotal::audit=info` keeps only them; `--log-format json` makes them one object per
//! line). Each says who asked, the operation, the row it decided over and the coordinate it
//! acted at, the outcome, and for a refusal its code. Never a secret, bearer or capability.

use cotal_core::EpError;
use tracing::info;

/// The coordinate a decision acted at.
#[derive(Debug, Clone, Copy, Default)]
pub struct At {
    pub generation: Option<u64>,
    pub epoch: Option<u64>,
}

/// A decision that went through.
pub fn granted(caller: &str, operation: &str, row: &str, at: At) {
    info!(
        target: "cotal::audit",
        caller,
        operation,
        row,
        generation = at.generation,
        epoch = at.epoch,
        outcome = "granted",
        "audit"
    );
}

/// A decision that was refused, with the refusal's code.
pub fn refused(caller: &str, operation: &str, row: &str, error: &EpError) {
    info!(
        target: "cotal::audit",
        caller,
        operation,
        row,
        outcome = "refused",
        code = error.code.as_str(),
        reason = %error.message,
        "audit"
    );
}
