//! The crash-test hooks: a real plane that kills itself at a chosen KV write, so tests can
//! crash it at every write boundary of an operation.
//!
//! The hooks exist only in a build with the `kill-points` cargo feature (off by default; the
//! test run turns it on), so a production binary cannot be told to kill itself. A build without
//! them refuses to start a plane while one of their variables is set
//! ([`refuse_requested`]): ignoring it would let a crash test pass without ever crashing.

#[cfg(feature = "kill-points")]
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(feature = "kill-points")]
use std::sync::Arc;
#[cfg(feature = "kill-points")]
use std::time::Duration;

#[cfg(feature = "kill-points")]
use cotal_io_nats::{SendHook, SendPhase};
#[cfg(feature = "kill-points")]
use rustix::process::{getpid, kill_process, Signal as KillSignal};

/// Kills the plane at a write of its own registration.
pub(super) const REGISTRATION_KILL_AT: &str = "COTAL_AUTHD_KILL_AT";
/// Kills the plane at a write of its retirement barriers.
pub(super) const RETIREMENT_KILL_AT: &str = "COTAL_AUTHD_RETIRE_KILL_AT";

/// Refuses, in one sentence, when a crash-test hook's variable is set in a build without the
/// hooks.
#[cfg(not(feature = "kill-points"))]
pub fn refuse_requested() -> Result<(), String> {
    match [REGISTRATION_KILL_AT, RETIREMENT_KILL_AT]
        .into_iter()
        .find(|var| std::env::var_os(var).is_some())
    {
        Some(var) => Err(format!(
            "{var} asks for a crash-test hook, but this cotal-authd was built without them (the \
             kill-points cargo feature); unset {var}, or run a build with --features kill-points"
        )),
        None => Ok(()),
    }
}

/// A crash-test hook (`<VAR>=<before|after>:<n>[:stop]`): this process sends itself SIGKILL
/// right before, or just after, the n-th KV write of the operations the variable names
/// (counted from 1 across them), so a test can crash a real plane at every write boundary:
/// [`REGISTRATION_KILL_AT`] for its registration, [`RETIREMENT_KILL_AT`] for its retirement
/// barriers.
/// "After" waits a moment first, so the write reaches the server and only its reply goes unread:
/// the ambiguous case. With `:stop` it sends SIGSTOP instead: a holder that is alive (its
/// connections open) but makes no progress. A malformed value is refused rather than ignored.
#[cfg(feature = "kill-points")]
#[derive(Debug, Clone)]
pub(super) struct KillPoint {
    phase: SendPhase,
    write: usize,
    signal: KillSignal,
    seen: Arc<AtomicUsize>,
}

#[cfg(feature = "kill-points")]
impl KillPoint {
    pub(super) fn from_env(var: &str) -> Result<Option<KillPoint>, String> {
        let Some(value) = std::env::var_os(var) else {
            return Ok(None);
        };
        let bad =
            || format!("{var} must be before:<n> or after:<n>, n >= 1, optionally then :stop");
        let value = value.into_string().map_err(|_| bad())?;
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
        Ok(Some(KillPoint {
            phase,
            write,
            signal,
            seen: Arc::default(),
        }))
    }

    pub(super) fn hook(&self) -> SendHook {
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
