//! The auth-consumer reaper: F98's answer to a consumer on `KV_cotal_auth_<space>` outliving
//! the credential that made it.
//!
//! The only credential that may create a consumer on the auth stream is a remote manager's
//! executor (its create pinned to its own instance's family, for the reference barrier's
//! `kv.keys`), and it lives [`MANAGER_EXECUTOR_TTL_SECS`]. A consumer older than that has
//! outlived its creator by construction, whatever its config (a durable push exporter, an
//! ephemeral one whose delivery subject someone keeps subscribed): the reaper deletes it. The
//! plane creates no consumer of its own there (its listings are `STREAM.INFO` subject filters),
//! so nothing the plane needs is ever reaped. The listing and deletes run on the sealed
//! auth-scanner connection, the one plane connection granted them.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer};
use async_nats::Client;
use cotal_core::names::SpaceName;
use cotal_core::profiles::MANAGER_EXECUTOR_TTL_SECS;
use futures::TryStreamExt;

use crate::shape::StoreLayout;
use crate::space::Space;

/// How often the plane sweeps the auth stream's consumers.
pub const REAP_PERIOD: Duration = Duration::from_secs(30);

/// The oldest a consumer on the auth stream may be: the lifetime of the one credential that
/// can create one.
pub const MAX_CONSUMER_AGE: Duration = Duration::from_secs(MANAGER_EXECUTOR_TTL_SECS);

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Consumers deleted for outliving `max_age`.
    pub deleted: Vec<String>,
    /// Consumers young enough to keep.
    pub kept: usize,
}

/// Lists every consumer of `space`'s auth stream on `client` and deletes each one created
/// more than `max_age` before `now`. A failed listing or delete is an `Err` naming it: the
/// caller logs it and sweeps again next period (a consumer missed once is reaped next time).
pub async fn reap_auth_consumers(
    client: &Client,
    space: &SpaceName,
    max_age: Duration,
    now: SystemTime,
) -> Result<Reaped, String> {
    let stream_name = StoreLayout::of(cotal_core::kv::Store::Auth, space).stream;
    let js = jetstream::new(client.clone());
    let stream = js
        .get_stream_no_info(&stream_name)
        .await
        .map_err(|e| format!("binding {stream_name} failed: {e}"))?;
    let listed: Vec<consumer::Info> = stream
        .consumers()
        .try_collect()
        .await
        .map_err(|e| format!("listing the consumers of {stream_name} failed: {e}"))?;
    let now_secs = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let bound = i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX);
    let mut reaped = Reaped::default();
    for info in listed {
        let age = now_secs.saturating_sub(info.created.unix_timestamp());
        if age < bound {
            reaped.kept += 1;
            continue;
        }
        stream.delete_consumer(&info.name).await.map_err(|e| {
            format!(
                "deleting consumer {} of {stream_name} failed: {e}",
                info.name
            )
        })?;
        reaped.deleted.push(info.name);
    }
    Ok(reaped)
}

/// Every [`REAP_PERIOD`], deletes each consumer on `space`'s auth stream older than the one
/// credential that can create one (F98), on the binding `scanner` returns (the sealed auth
/// scanner's current one). A failed sweep is logged and tried again next period; it never ends
/// on its own: the caller drops it.
pub async fn reap_every_period(
    scanner: impl Fn() -> Result<Arc<Space>, cotal_core::EpError>,
    space: &SpaceName,
) -> std::convert::Infallible {
    loop {
        tokio::time::sleep(REAP_PERIOD).await;
        let swept = match scanner() {
            Ok(bound) => {
                reap_auth_consumers(bound.client(), space, MAX_CONSUMER_AGE, SystemTime::now())
                    .await
            }
            Err(e) => Err(e.message),
        };
        match swept {
            Ok(reaped) if !reaped.deleted.is_empty() => tracing::warn!(
                "deleted {} consumer(s) on the auth stream that outlived the executor \
                 credential that made them: {}",
                reaped.deleted.len(),
                reaped.deleted.join(", ")
            ),
            Ok(_) => {}
            Err(why) => tracing::warn!("the auth-consumer sweep failed: {why}"),
        }
    }
}
