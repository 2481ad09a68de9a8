//! The CPU time a process has used, for the benches that report CPU per operation.

use std::fs;
use std::time::Duration;

/// The CPU time `pid` has used so far (user + system), from `/proc/<pid>/stat`; zero when the
/// process is gone.
pub fn cpu(pid: u32) -> Duration {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesized command: state is the 3rd, utime the 14th, stime 15th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    // USER_HZ: /proc counts in hundredths of a second on every Linux ABI.
    Duration::from_millis(ticks * 10)
}
