//! Reading a running plane's `/health`, for `cotal-authd status`: one plain HTTP/1.1 GET over
//! loopback with a bounded wait.

use std::time::Duration;

use serde_json::Value;

/// The most a health document may be.
const MAX_HEALTH_BYTES: usize = 64 * 1024;

/// `GET <url>/health` (`url` = `http://host:port`, as the discovery file names it): the JSON
/// body of a 200, or why there is none. Waits at most `wait` in all.
pub async fn health(url: &str, wait: Duration) -> Result<Value, String> {
    crate::fetch::get_json(&format!("{url}/health"), wait, MAX_HEALTH_BYTES).await
}
