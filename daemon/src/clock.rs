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

/// A unix-seconds instant as human output shows it: RFC 3339 in UTC to the second
/// (`2026-12-05T01:33:30Z`), the ISO 8601 profile every log reader and `date -d` parse.
pub fn rfc3339_secs(unix_secs: u64) -> String {
    let millis = cotal_core::actors::row::iso8601_millis(unix_secs.saturating_mul(1000));
    // `YYYY-MM-DDTHH:MM:SS.mmmZ` with whole seconds: drop the `.000`.
    match millis.strip_suffix(".000Z") {
        Some(seconds) => format!("{seconds}Z"),
        None => millis,
    }
}

#[cfg(test)]
mod tests {
    use super::rfc3339_secs;

    #[test]
    fn human_times_are_rfc_3339_utc_seconds() {
        assert_eq!(rfc3339_secs(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_secs(1_796_441_610), "2026-12-05T03:33:30Z");
        assert_eq!(rfc3339_secs(951_782_400), "2000-02-29T00:00:00Z");
    }
}
