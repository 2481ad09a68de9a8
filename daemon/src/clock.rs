//! The daemon's one wall clock: core takes time as an input, and every command and door reads
//! it here. A clock before 1970 reads as 0, which every expiry check then refuses.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Unix seconds now.
pub fn now_secs() -> u64 {
    now_ms() / 1000
}

/// A unix-seconds instant as human output shows it (core's, where the sentences are written).
pub use cotal_core::actors::row::rfc3339_secs;
