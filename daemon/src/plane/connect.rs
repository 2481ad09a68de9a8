//! The plane's answer to each auth-callout connect (reference §8.2–§8.4): a bearer the plane
//! signed, for an actor the ledger still grants at the bearer's lifecycle, whose credential row
//! is live on the store, under an inbox nonce no other principal holds (core's `inbox`) — then
//! the actor's profile (its ledger row's agent profile, or its view's), in a user JWT that dies
//! with the bearer. Every check fails closed: a plane that is not serving, an unreadable ledger
//! or store, or a store whose shape is unproven denies.

use crate::ledger::Ledger;
use cotal_core::callout::ConnectRequest;
use cotal_core::connect::{Admitted, DecideConnect};
use cotal_core::error::EpError;
use cotal_core::inbox::KnownBindings;
use cotal_core::jwt::UnixSeconds;
use cotal_core::kv::Store;
use cotal_core::names::SpaceName;
use cotal_core::view::View;
use cotal_io_http::bearer::BearerIssuer;
use cotal_io_nats::callout::{Authorize, AuthorizeFuture};
use cotal_io_nats::NatsWorld;
use std::sync::Mutex;
use tokio::sync::watch;

use super::connections::PlaneLink;
use super::decision::{Decided, Recorder};
use super::manager_caller::{self, LocalManagerFile};
use super::Readiness;

/// What an agent is told by a plane that is not serving (the operator's cause is on /health).
const NOT_SERVING: &str = "the auth service is momentarily unavailable; retry shortly";

/// How long a connect waits for a plane whose server came back until the connections its
/// decision rides are back too: well inside the server's auth timeout (2 s by default), which
/// would refuse it unanswered.
const REGAIN_WAIT: std::time::Duration = std::time::Duration::from_millis(1_000);

/// Decides the plane's callout connects.
pub(super) struct ConnectAuthorizer {
    pub(super) space: SpaceName,
    pub(super) bearers: BearerIssuer,
    pub(super) ledger: Ledger,
    pub(super) local: LocalManagerFile,
    pub(super) connections: PlaneLink,
    pub(super) readiness: watch::Receiver<Readiness>,
    pub(super) recorder: Recorder,
    /// The inbox bindings admitted connects proved: a reconnect under a known nonce skips its
    /// binding's read (a binding is write-once, `core::inbox`).
    pub(super) bindings: Mutex<KnownBindings>,
}

impl ConnectAuthorizer {
    /// Serving, then the bearer's signature (io-http), then core's [`DecideConnect`] over the
    /// connect reader, with the sessions, issued and accepted stores on the issuing connection
    /// whose grant alone reads them (and alone writes the accepted store: the inbox bindings
    /// and the manager-caller accepted rows).
    async fn decide(&self, request: &ConnectRequest) -> Result<Admitted, EpError> {
        self.serving().await?;
        let token = request.bearer.as_ref().ok_or_else(|| {
            EpError::permission_denied(
                "the connect carries no bearer (auth_token); exchange for one at /exchange",
            )
        })?;
        let now = UnixSeconds(crate::clock::now_secs());
        let bearer = self.bearers.verify(token.expose(), now)?;
        let local = match bearer.act.view {
            Some(View::ManagerCaller) => self.local.read()?,
            _ => None,
        };
        let decide = DecideConnect {
            space: self.space.clone(),
            expires_at: bearer.expires_at,
            act: bearer.act,
            connection_name: request.nonce.clone(),
            now,
            local,
            fresh_generation: manager_caller::fresh_generation()?,
            known_binding: request
                .nonce
                .as_deref()
                .and_then(|nonce| self.bindings().holder(nonce)),
        };
        let connections = self.connections.get()?;
        let reader = connections.reader.space().map_err(|e| {
            EpError::permission_denied(format!("the connect reader is down: {}", e.message))
        })?;
        let issuer = connections.issuer.space()?;
        NatsWorld::new(&reader)
            .routes(&[Store::Sessions, Store::Issued, Store::Accepted], &issuer)
            .with_actors(self.ledger.port())
            .run_script(decide)
            .await
    }

    /// Whether the plane serves: at once while ready; while it waits for its server to come
    /// back, a connect waits up to [`REGAIN_WAIT`] for it to serve again, so the connects that
    /// reach the plane first after a server restart are admitted instead of refused (a refused
    /// client backs off before it retries).
    async fn serving(&self) -> Result<(), EpError> {
        let mut readiness = self.readiness.clone();
        let waited = tokio::time::timeout(
            REGAIN_WAIT,
            readiness.wait_for(|r| !matches!(r, Readiness::Reconnecting(_))),
        )
        .await;
        match waited {
            Ok(Ok(now)) if *now == Readiness::Ready => Ok(()),
            _ => Err(EpError::unavailable(NOT_SERVING)),
        }
    }

    fn bindings(&self) -> std::sync::MutexGuard<'_, KnownBindings> {
        // A kept binding is inserted whole or not at all: a poisoned lock guards a sound map.
        self.bindings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Authorize for ConnectAuthorizer {
    fn authorize(&self, request: ConnectRequest) -> AuthorizeFuture<'_> {
        Box::pin(async move {
            match self.decide(&request).await {
                Ok(Admitted { principal, admit }) => {
                    if let Some(nonce) = request.nonce.as_deref() {
                        self.bindings().keep(nonce, &principal);
                    }
                    let key = principal.key();
                    self.recorder
                        .record(&Decided::new("connect", &key, &key), None);
                    Ok(admit)
                }
                Err(e) => {
                    let nkey = request.user_nkey.as_str();
                    self.recorder
                        .record(&Decided::new("connect", "connect", nkey), Some(&e));
                    Err(e.message)
                }
            }
        })
    }
}
