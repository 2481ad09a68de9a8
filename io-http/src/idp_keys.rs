//! The pinned IdP's key set, fetched from the pin's `jwksUri` and cached (issue 12 part 2,
//! reference §10.3): the first verification fetches it; a token naming a `kid` the cache does
//! not hold refetches, so an IdP's key rotation is picked up within a minute. Whatever happens —
//! made-up kids, an IdP that is down, one that hangs — the key set is fetched at most once per
//! [`REFETCH_INTERVAL`], and never while a verification waits on it: the fetch runs outside the
//! cache's lock, so a hanging IdP stalls no one who holds keys (a caller that already holds keys
//! and finds a fetch in flight verifies with them). A failed refetch keeps the keys already
//! held; with none held, verification is `unavailable` (the IdP is down, which is not a refusal
//! of the token) until the next attempt is due. Verification itself is the pure
//! [`IdpVerifier`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use cotal_core::jwt::UnixSeconds;
use cotal_core::EpError;
use jsonwebtoken::jwk::JwkSet;
use std::sync::{Mutex, PoisonError};

use crate::bearer::{IdpConfig, IdpIdentity, IdpVerifier};

/// The least time between two fetches of the key set, whatever triggers them.
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

impl IdpSource {
    /// The IdP the trust root pins (`idp.json`).
    pub fn pinned(pin: &cotal_core::trust::IdpPin) -> IdpSource {
        IdpSource {
            issuer: pin.issuer().to_owned(),
            audience: pin.audience().to_owned(),
            jwks_uri: pin.jwks_uri().to_owned(),
        }
    }
}

#[derive(Debug, Default)]
struct Cache {
    verifier: Option<Arc<IdpVerifier>>,
    /// When the last fetch started, successful or not.
    attempted_at: Option<Instant>,
    /// Why the last fetch failed, while no keys are held.
    failure: Option<String>,
}

impl Cache {
    /// Whether another fetch may start now.
    fn due(&self, interval: Duration) -> bool {
        self.attempted_at.is_none_or(|at| at.elapsed() >= interval)
    }

    /// The held keys, or why there are none.
    fn held(&self) -> Result<Arc<IdpVerifier>, EpError> {
        self.verifier.clone().ok_or_else(|| {
            EpError::unavailable(self.failure.clone().unwrap_or_else(|| {
                "the pinned IdP's key set is not fetched yet; retry shortly".to_owned()
            }))
        })
    }
}

/// The pinned IdP's keys, fetched on demand.
#[derive(Debug)]
pub struct IdpKeys {
    source: IdpSource,
    refetch_interval: Duration,
    /// Held only to read or swap the cache, never across a fetch.
    cache: Mutex<Cache>,
    /// Held by the one fetch in flight.
    fetching: tokio::sync::Mutex<()>,
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
            fetching: tokio::sync::Mutex::new(()),
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

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The verifier to check `token` with: the held one when it knows the token's kid or no
    /// fetch is due; otherwise the result of a fetch, one at a time, at most once per interval.
    /// A caller holding keys never waits for another caller's fetch.
    async fn verifier_for(&self, token: &str) -> Result<Arc<IdpVerifier>, EpError> {
        let (held, due) = {
            let cache = self.cache();
            (cache.verifier.clone(), cache.due(self.refetch_interval))
        };
        let _fetching = match &held {
            Some(v) if v.knows_kid_of(token) || !due => return Ok(v.clone()),
            None if !due => return self.cache().held(),
            Some(v) => match self.fetching.try_lock() {
                Ok(guard) => guard,
                Err(_) => return Ok(v.clone()),
            },
            None => self.fetching.lock().await,
        };
        // A fetch that ended while this caller waited for its turn decides for it too.
        {
            let mut cache = self.cache();
            if !cache.due(self.refetch_interval) {
                return cache.held();
            }
            cache.attempted_at = Some(Instant::now());
        }
        let fetched = self.fetch().await;
        let mut cache = self.cache();
        match fetched {
            Ok(fresh) => {
                let fresh = Arc::new(fresh);
                cache.verifier = Some(fresh.clone());
                cache.failure = None;
                Ok(fresh)
            }
            Err(why) => match cache.verifier.clone() {
                Some(v) => {
                    tracing::warn!(%why, "refetching the IdP key set failed; keeping the keys held");
                    Ok(v)
                }
                None => {
                    cache.failure = Some(why.clone());
                    Err(EpError::unavailable(why))
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
