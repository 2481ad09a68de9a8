//! The pinned IdP's key set, fetched from the pin's `jwksUri` and cached (issue 12 part 2,
//! reference §10.3): the first verification fetches it; a token naming a `kid` the cache does
//! not hold refetches at most once per [`REFETCH_INTERVAL`], so an IdP's key rotation is picked
//! up within a minute while a flood of tokens with made-up kids costs one fetch a minute, not
//! one per request. A failed refetch keeps the keys already held. Verification itself is the
//! pure [`IdpVerifier`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use cotal_core::jwt::UnixSeconds;
use cotal_core::EpError;
use jsonwebtoken::jwk::JwkSet;
use tokio::sync::Mutex;

use crate::bearer::{IdpConfig, IdpIdentity, IdpVerifier};

/// The least time between two fetches triggered by unknown kids.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(60);
/// The longest a fetch may take.
const FETCH_WAIT: Duration = Duration::from_secs(10);
/// The largest key set accepted: real JWKS documents are a few KiB.
const MAX_JWKS_BYTES: usize = 256 * 1024;

/// The IdP a space pins: who issues, for whom, and where its keys are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdpSource {
    pub issuer: String,
    pub audience: String,
    pub jwks_uri: String,
}

#[derive(Debug, Default)]
struct Cache {
    verifier: Option<Arc<IdpVerifier>>,
    fetched_at: Option<Instant>,
}

/// The pinned IdP's keys, fetched on demand.
#[derive(Debug)]
pub struct IdpKeys {
    source: IdpSource,
    refetch_interval: Duration,
    cache: Mutex<Cache>,
}

impl IdpKeys {
    pub fn new(source: IdpSource) -> Self {
        Self::with_refetch_interval(source, REFETCH_INTERVAL)
    }

    /// As [`IdpKeys::new`] with another least time between unknown-kid refetches (tests).
    pub fn with_refetch_interval(source: IdpSource, refetch_interval: Duration) -> Self {
        IdpKeys {
            source,
            refetch_interval,
            cache: Mutex::new(Cache::default()),
        }
    }

    pub fn source(&self) -> &IdpSource {
        &self.source
    }

    /// Verifies an IdP token at `now` against the pinned IdP's current keys. Refusals are the
    /// verifier's `permission-denied` sentences; keys that cannot be had at all are
    /// `unavailable`.
    pub async fn verify(&self, token: &str, now: UnixSeconds) -> Result<IdpIdentity, EpError> {
        self.verifier_for(token).await?.verify(token, now)
    }

    /// The verifier to check `token` with: the cached one, refreshed first when it has none
    /// yet, or when it does not know the token's kid and the last fetch is old enough. The
    /// lock is held across the fetch so concurrent callers share one.
    async fn verifier_for(&self, token: &str) -> Result<Arc<IdpVerifier>, EpError> {
        let mut cache = self.cache.lock().await;
        let stale = cache
            .fetched_at
            .is_none_or(|at| at.elapsed() >= self.refetch_interval);
        match cache.verifier.clone() {
            Some(v) if v.knows_kid_of(token) || !stale => Ok(v),
            held => match self.fetch().await {
                Ok(fresh) => {
                    let fresh = Arc::new(fresh);
                    cache.verifier = Some(fresh.clone());
                    cache.fetched_at = Some(Instant::now());
                    Ok(fresh)
                }
                Err(why) => {
                    cache.fetched_at = Some(Instant::now());
                    match held {
                        Some(v) => {
                            tracing::warn!(%why, "refetching the IdP key set failed; keeping the keys held");
                            Ok(v)
                        }
                        None => Err(EpError::unavailable(why)),
                    }
                }
            },
        }
    }

    async fn fetch(&self) -> Result<IdpVerifier, String> {
        let uri = &self.source.jwks_uri;
        let doc = crate::fetch::get_json(uri, FETCH_WAIT, MAX_JWKS_BYTES)
            .await
            .map_err(|why| format!("cannot fetch the pinned IdP's key set: {why}"))?;
        let jwks: JwkSet = serde_json::from_value(doc)
            .map_err(|e| format!("the pinned IdP's key set at {uri} is not a JWKS: {e}"))?;
        IdpVerifier::new(IdpConfig {
            issuer: self.source.issuer.clone(),
            audience: self.source.audience.clone(),
            jwks,
        })
        .map_err(|e| format!("the pinned IdP's key set at {uri}: {}", e.message))
    }
}
