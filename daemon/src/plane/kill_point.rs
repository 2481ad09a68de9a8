//! The crash-test hooks: a real plane that kills itself at a chosen KV write, so tests can
//! crash it at every write boundary of an operation ([`KillPoint`], io-nats's hook on the write
//! path, set by the variables below).
//!
//! The hooks exist only in a build with the `kill-points` cargo feature (off by default; the
//! test run turns it on), so a production binary cannot be told to kill itself. A build without
//! them refuses to start a plane while one of their variables is set
//! ([`refuse_requested`]): ignoring it would let a crash test pass without ever crashing.

#[cfg(feature = "kill-points")]
pub(super) use cotal_io_nats::kill_point::KillPoint;

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
