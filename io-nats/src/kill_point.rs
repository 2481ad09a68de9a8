//! The crash-test hook on the write path's [`SendHook`]: a process that kills (or stops) itself
//! at a chosen KV write, so tests can crash a real plane at every write boundary of an
//! operation.
//!
//! Compiled only with the `kill-points` cargo feature (off by default; the daemon's feature of
//! the same name turns it on for the test run), so a production binary cannot be told to kill
//! itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::process::{getpid, kill_process, Signal as KillSignal};

use crate::space::{SendHook, SendPhase};

/// A crash-test hook (`<VAR>=<before|after>:<n>[:stop]`): this process sends itself SIGKILL
/// right before, or just after, the n-th KV write of the operations the variable names
/// (counted from 1 across them), so a test can crash a real plane at every write boundary (the
/// daemon names one variable for its registration, one for its retirement barriers).
/// "After" waits a moment first, so the write reaches the server and only its reply goes unread:
/// the ambiguous case. With `:stop` it sends SIGSTOP instead: a holder that is alive (its
/// connections open) but makes no progress. A malformed value is refused rather than ignored.
#[derive(Debug, Clone)]
pub struct KillPoint {
    phase: SendPhase,
    write: usize,
    signal: KillSignal,
    seen: Arc<AtomicUsize>,
}

impl KillPoint {
    /// The hook `var` asks for, `None` when it is unset; a malformed value is refused.
    pub fn from_env(var: &str) -> Result<Option<KillPoint>, String> {
        let Some(value) = std::env::var_os(var) else {
            return Ok(None);
        };
        let value = value.into_string().map_err(|_| malformed(var))?;
        KillPoint::parse(var, &value).map(Some)
    }

    /// `value` of `var`: `before:<n>` or `after:<n>`, n >= 1, optionally then `:stop`.
    pub fn parse(var: &str, value: &str) -> Result<KillPoint, String> {
        let bad = || malformed(var);
        let mut fields = value.split(':');
        let phase = match fields.next() {
            Some("before") => SendPhase::Before,
            Some("after") => SendPhase::After,
            _ => return Err(bad()),
        };
        let write: usize = fields
            .next()
            .and_then(|n| n.parse().ok())
            .filter(|n| *n >= 1)
            .ok_or_else(bad)?;
        let signal = match (fields.next(), fields.next()) {
            (None, _) => KillSignal::KILL,
            (Some("stop"), None) => KillSignal::STOP,
            _ => return Err(bad()),
        };
        Ok(KillPoint {
            phase,
            write,
            signal,
            seen: Arc::default(),
        })
    }

    pub fn hook(&self) -> SendHook {
        let point = self.clone();
        Box::new(move |phase, _request| {
            let nth = if phase == SendPhase::Before {
                point.seen.fetch_add(1, Ordering::SeqCst) + 1
            } else {
                point.seen.load(Ordering::SeqCst)
            };
            let kill = phase == point.phase && nth == point.write;
            let signal = point.signal;
            Box::pin(async move {
                if kill {
                    if phase == SendPhase::After {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let _ = kill_process(getpid(), signal);
                }
            })
        })
    }
}

/// The one sentence for a malformed value of `var`.
fn malformed(var: &str) -> String {
    format!("{var} must be before:<n> or after:<n>, n >= 1, optionally then :stop")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_point_parses_its_phase_write_and_signal_and_refuses_anything_else() {
        let point = KillPoint::parse("V", "before:3").unwrap();
        assert_eq!(
            (point.phase, point.write, point.signal),
            (SendPhase::Before, 3, KillSignal::KILL)
        );
        let point = KillPoint::parse("V", "after:1:stop").unwrap();
        assert_eq!(
            (point.phase, point.write, point.signal),
            (SendPhase::After, 1, KillSignal::STOP)
        );
        for bad in [
            "",
            "before",
            "before:0",
            "during:1",
            "after:x",
            "after:1:term",
            "after:1:stop:x",
        ] {
            assert_eq!(
                KillPoint::parse("V", bad).unwrap_err(),
                "V must be before:<n> or after:<n>, n >= 1, optionally then :stop",
                "{bad:?}"
            );
        }
    }
}
