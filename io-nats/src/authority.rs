//! The plane's self-minted, labelled data-account connections (reference-auth-service §2.5,
//! §2.7, §2.12): [`AuthorityClient`] opens one connection whose user JWT this process signs with
//! the data account's signing key, binds a [`Space`] on it, and renews it in process.
//!
//! **Renewal without dropping in-flight work.** The reference re-mints at half-life and lets the
//! server cut the connection at the old JWT's `exp`, so the reconnect presents the fresh one;
//! every request in flight at the cut is lost. Here, at half-life a *fresh connection* with a
//! fresh JWT (same user nkey, so the same [`ConnId`] and reply inbox) is opened and a fresh
//! [`Space`] bound on it, then swapped in: [`AuthorityClient::space`] hands out the new binding
//! from then on. The old connection is drained only once no caller holds its binding any more
//! (its `Arc` is ours alone), and in any case [`retire_margin`] before its JWT expires, so the
//! server never has to cut it. Own gate writes are announced on one [`GateWrites`] hub shared
//! by every binding, so a fence watch ([`crate::host::hold_fence`] over the client, which
//! implements [`FenceReads`]) is woken across swaps and takes the current binding per read.
//!
//! **Renewal is a fail-closed boundary.** A failed re-mint, re-connect or re-bind is logged
//! with `error!` at once and retried until [`retire_margin`] before the old credential's
//! expiry; past that the client is *failed*: [`AuthorityClient::space`] refuses with
//! `unavailable` and [`AuthorityClient::failed`] resolves, so the owner stops serving instead of
//! riding a credential the server is about to cut. [`AuthorityClient::space`] also refuses once
//! the current credential has expired, whatever the renewal task did.
//!
//! Secrets: the user seed and the JWTs live only in this process's memory; no log line or
//! error carries them.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::{AuthError, Client, ConnectOptions, Event};
use cotal_core::jwt::{self, Permissions, UnixSeconds, UserNats, Validity};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::names::{Principal, SpaceName};
use cotal_core::plane_grants::{PlaneConnection, AUTHORITY_CLIENT_TTL_SECS};
use cotal_core::plane_probe::ConnTuple;
use cotal_core::profiles::{host_user, principal_tags, ConnId};
use cotal_core::trust::DaemonMaterial;
use cotal_core::EpError;
use nkeys::KeyPair;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use crate::dial::Dial;
use crate::host::{FenceReads, GateWrites};
use crate::shape::Replicas;
use crate::space::{Space, SpaceOptions, StoreSet};

/// The shortest credential lifetime accepted: renewal runs at half-life, in whole seconds.
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// How often a retiring connection checks whether its last holder is gone.
const RETIRE_POLL: Duration = Duration::from_millis(20);

/// How long before a credential's expiry its connection is closed regardless of holders, and
/// the last moment a failed renewal may still be retried: a tenth of the lifetime, at most 5 s.
pub fn retire_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(5))
}

/// The data account's identity and the signing key the plane mints with.
#[derive(Clone)]
pub struct DataAccountSigner {
    /// The account's public key (`A…`).
    pub account: String,
    /// One of the account's signing keys (an account key pair).
    pub signer: Arc<KeyPair>,
}

impl DataAccountSigner {
    /// The trust root's data account and its signing key: the signer of every connection the
    /// plane or an operator's verb mints for itself.
    pub fn of(material: &cotal_core::trust::DaemonMaterial) -> DataAccountSigner {
        DataAccountSigner {
            account: material.data_account().to_owned(),
            signer: Arc::new(material.data_signing_key().clone()),
        }
    }
}

impl fmt::Debug for DataAccountSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The signing key's public half only: its seed never leaves memory.
        f.debug_struct("DataAccountSigner")
            .field("account", &self.account)
            .field("signer", &self.signer.public_key())
            .finish()
    }
}

/// One binding: a connection with its JWT's expiry and the space bound on it.
#[derive(Debug, Clone)]
struct Binding {
    space: Arc<Space>,
    issued: Instant,
    expires: Instant,
    /// Set once a renewal replaced this binding: its connection's end is then expected.
    retired: Arc<AtomicBool>,
}

/// What every binding of one client is made from.
struct Config {
    label: String,
    dial: Dial,
    conn: ConnId,
    user: Arc<KeyPair>,
    signer: DataAccountSigner,
    nats: UserNats,
    ttl: Duration,
    space: SpaceName,
    options: SpaceOptions,
    hub: Arc<GateWrites>,
    /// `Some(why)` once the current connection dropped (see [`AuthorityClient::lost`]).
    lost: Arc<watch::Sender<Option<String>>>,
}

/// Everything the renewal task shares with the client.
struct Shared {
    cfg: Config,
    current: RwLock<Binding>,
    /// `Some(reason)` once the client has failed closed.
    failure: watch::Sender<Option<String>>,
    closing: AtomicBool,
    /// Renewals swapped in so far; every swap wakes the [`AuthorityClient::renewals`] followers.
    swaps: watch::Sender<u64>,
    /// How long the last renewal took (mint, connect, bind, swap), in microseconds.
    last_renewal_us: AtomicU64,
    retiring: Mutex<Vec<JoinHandle<()>>>,
}

/// A self-minted, labelled, renewing connection with its [`Space`].
pub struct AuthorityClient {
    shared: Arc<Shared>,
    renewal: JoinHandle<()>,
}

impl fmt::Debug for AuthorityClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorityClient")
            .field("label", &self.shared.cfg.label)
            .field("conn", &self.shared.cfg.conn)
            .field("swaps", &self.swaps())
            .finish_non_exhaustive()
    }
}

pub(crate) fn unix_now() -> Result<u64, EpError> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .map_err(|_| EpError::internal("the system clock is before 1970"))
}

/// Logs what the client reports about a connection, under its label: a refused publish is a
/// grant the plane lacks and must be visible, never swallowed.
fn event_logger(label: String) -> impl Fn(Event) -> futures::future::Ready<()> {
    let log = EventLog::new(label);
    move |event| {
        log.log(&event);
        futures::future::ready(())
    }
}

/// One connection's event log. Its drop is said once (`warn`) and its return once (`info`);
/// the failed attempts between them (each an I/O error, up to ten a second,
/// [`crate::reconnect_delay`]) go to `debug`, so a server that is down for a while does not
/// flood the log.
struct EventLog {
    label: String,
    down: AtomicBool,
}

impl EventLog {
    fn new(label: String) -> EventLog {
        EventLog {
            label,
            down: AtomicBool::new(false),
        }
    }

    fn log(&self, event: &Event) {
        let label = &self.label;
        match event {
            Event::ServerError(e) => warn!(connection = %label, "server error: {e}"),
            Event::ClientError(e) if self.down.load(Ordering::Relaxed) => {
                debug!(connection = %label, "reconnect attempt failed: {e}");
            }
            Event::ClientError(e) => warn!(connection = %label, "client error: {e}"),
            Event::Disconnected => {
                self.down.store(true, Ordering::Relaxed);
                warn!(connection = %label, "disconnected");
            }
            Event::Connected => {
                self.down.store(false, Ordering::Relaxed);
                info!(connection = %label, "connection event: {event}");
            }
            other => info!(connection = %label, "connection event: {other}"),
        }
    }
}

impl Config {
    /// Signs a fresh JWT for the stable user nkey: the grant, valid from now for the lifetime.
    fn mint(&self) -> Result<(String, Duration), EpError> {
        let now = unix_now()?;
        let exp = now.saturating_add(self.ttl.as_secs());
        let validity = Validity {
            issued_at: UnixSeconds(now),
            expires_at: Some(UnixSeconds(exp)),
        };
        let jwt = jwt::user_jwt(
            &self.signer.signer,
            &self.signer.account,
            &self.user.public_key(),
            &self.label,
            &self.nats,
            validity,
        )?;
        // The server expires whole seconds: the credential lives until `exp`, counted from the
        // wall clock now, not from the second it was rounded down to.
        let left = UNIX_EPOCH + Duration::from_secs(exp);
        let left = left
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Ok((jwt, left))
    }

    /// Mints, connects and binds one fresh binding.
    async fn fresh_binding(&self) -> Result<Binding, EpError> {
        let (jwt, left) = self.mint()?;
        let issued = Instant::now();
        let key = Arc::clone(&self.user);
        let retired = Arc::new(AtomicBool::new(false));
        let (label, lost, gone) = (
            self.label.clone(),
            Arc::clone(&self.lost),
            Arc::clone(&retired),
        );
        let log = EventLog::new(label.clone());
        // A drop of the current connection is recorded (a renewal's drain of the one it
        // replaced is not), for owners that must not outlive their exact connection.
        let events = move |event: Event| {
            log.log(&event);
            if matches!(event, Event::Disconnected) && !gone.load(Ordering::SeqCst) {
                lost.send_replace(Some(format!("connection {label} dropped")));
            }
            futures::future::ready(())
        };
        let client = self
            .dial
            .apply(ConnectOptions::with_jwt(jwt, move |nonce| {
                let key = Arc::clone(&key);
                async move { key.sign(&nonce).map_err(AuthError::new) }
            }))
            .name(&self.label)
            .custom_inbox_prefix(format!("_INBOX_{}", self.conn))
            .connection_timeout(self.options.request_timeout)
            .event_callback(events)
            .connect(self.dial.urls())
            .await
            .map_err(|e| {
                EpError::unavailable(format!(
                    "connection {} cannot connect to the NATS server at {}: {}",
                    self.label,
                    self.dial.servers(),
                    self.dial.describe(&e)
                ))
            })?;
        let space = match Space::bind_sharing(
            client.clone(),
            self.space.clone(),
            self.options.clone(),
            Arc::clone(&self.hub),
        )
        .await
        {
            Ok(space) => space,
            Err(e) => {
                let _ = client.drain().await;
                return Err(EpError {
                    message: format!(
                        "connection {} cannot bind its stores: {}",
                        self.label, e.message
                    ),
                    ..e
                });
            }
        };
        Ok(Binding {
            space: Arc::new(space),
            issued,
            expires: issued + left,
            retired,
        })
    }
}

impl Shared {
    fn current(&self) -> Binding {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn fail(&self, reason: String) {
        error!(connection = %self.cfg.label, "{reason}");
        self.failure.send_replace(Some(reason));
    }

    /// One renewal: a fresh binding swapped in, the old one retired once unheld.
    async fn renew(self: &Arc<Self>) -> Result<Duration, EpError> {
        let started = Instant::now();
        let fresh = self.cfg.fresh_binding().await?;
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(PoisonError::into_inner),
            fresh,
        );
        let took = started.elapsed();
        self.last_renewal_us.store(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.swaps.send_modify(|n| *n += 1);
        let shared = Arc::clone(self);
        let retire = tokio::spawn(async move { shared.retire(old).await });
        let mut retiring = self.retiring.lock().unwrap_or_else(PoisonError::into_inner);
        retiring.retain(|h| !h.is_finished());
        retiring.push(retire);
        Ok(took)
    }

    /// Drains `old` once no caller holds its space, or at [`retire_margin`] before its expiry,
    /// or at once when the client closes.
    async fn retire(&self, old: Binding) {
        old.retired.store(true, Ordering::SeqCst);
        let deadline = old
            .expires
            .checked_sub(retire_margin(self.cfg.ttl))
            .unwrap_or(old.expires);
        while Arc::strong_count(&old.space) > 1 && !self.closing.load(Ordering::Relaxed) {
            if Instant::now() >= deadline {
                warn!(
                    connection = %self.cfg.label,
                    holders = Arc::strong_count(&old.space) - 1,
                    "closing a renewed connection that callers still hold: its credential \
                     expires shortly, their requests on it fail"
                );
                break;
            }
            tokio::time::sleep(RETIRE_POLL).await;
        }
        if let Err(e) = old.space.client().drain().await {
            warn!(connection = %self.cfg.label, "draining a renewed connection failed: {e}");
        }
    }

    /// Renews at every half-life until closed; fails the client when a renewal cannot be made
    /// before the current credential's retire margin.
    async fn renew_forever(self: Arc<Self>) {
        let margin = retire_margin(self.cfg.ttl);
        let retry = (self.cfg.ttl / 8).clamp(Duration::from_millis(100), Duration::from_secs(10));
        loop {
            let current = self.current();
            let half = current.issued + (current.expires - current.issued) / 2;
            tokio::time::sleep_until(half.into()).await;
            let give_up = current
                .expires
                .checked_sub(margin)
                .unwrap_or(current.expires);
            loop {
                match self.renew().await {
                    Ok(took) => {
                        info!(
                            connection = %self.cfg.label,
                            took_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                            "renewed the connection's credential on a fresh connection"
                        );
                        break;
                    }
                    Err(e) if Instant::now() + retry < give_up => {
                        error!(
                            connection = %self.cfg.label,
                            "renewing the connection's credential FAILED ({}); retrying until \
                             shortly before the current one expires",
                            e.message
                        );
                        tokio::time::sleep(retry).await;
                    }
                    Err(e) => {
                        self.fail(format!(
                            "renewing the credential of connection {} FAILED ({}) and the \
                             current one expires shortly: the connection stops serving now \
                             (fail-closed renewal)",
                            self.cfg.label, e.message
                        ));
                        return;
                    }
                }
            }
        }
    }
}

impl AuthorityClient {
    /// Opens one labelled connection (`name` = `label`) whose user JWT this process mints for
    /// a fresh user nkey with `grant(&conn_id)` (the nkey's public key is the connection id;
    /// the grant's permissions and tags, which attribute the connection to its holder),
    /// `exp` = now + `ttl`, signed by `signer`; binds `space` on it with `options`; and starts
    /// the half-life renewal. `ttl` is whole seconds, at least [`MIN_TTL`].
    pub async fn open(
        servers: impl Into<Dial>,
        label: String,
        signer: DataAccountSigner,
        grant: impl FnOnce(&ConnId) -> Result<UserNats, EpError>,
        ttl: Duration,
        space: SpaceName,
        options: SpaceOptions,
    ) -> Result<AuthorityClient, EpError> {
        if ttl < MIN_TTL || ttl.subsec_nanos() != 0 {
            return Err(EpError::bad_request(format!(
                "connection {label}: a credential lifetime of {ttl:?} is refused; it must be whole \
                 seconds, at least {MIN_TTL:?}"
            )));
        }
        let user = Arc::new(KeyPair::new_user());
        let conn = ConnId::parse(&user.public_key())?;
        let nats = grant(&conn)?;
        let cfg = Config {
            label,
            dial: servers.into(),
            conn,
            user,
            signer,
            nats,
            ttl,
            space,
            options,
            hub: Arc::default(),
            lost: Arc::new(watch::channel(None).0),
        };
        let first = cfg.fresh_binding().await?;
        let shared = Arc::new(Shared {
            cfg,
            current: RwLock::new(first),
            failure: watch::channel(None).0,
            closing: AtomicBool::new(false),
            swaps: watch::Sender::new(0),
            last_renewal_us: AtomicU64::new(0),
            retiring: Mutex::new(Vec::new()),
        });
        let renewal = tokio::spawn(Arc::clone(&shared).renew_forever());
        Ok(AuthorityClient { shared, renewal })
    }

    /// The current binding; take it per operation and drop it after, so a renewal can retire
    /// the connection it replaced. Refuses with `unavailable` once the client has failed closed
    /// or its current credential has expired.
    pub fn space(&self) -> Result<Arc<Space>, EpError> {
        if let Some(reason) = self.shared.failure.borrow().as_ref() {
            return Err(EpError::unavailable(reason.clone()));
        }
        let current = self.shared.current();
        if Instant::now() >= current.expires {
            return Err(EpError::unavailable(format!(
                "the credential of connection {} has expired and was not renewed; the connection \
                 no longer serves",
                self.shared.cfg.label
            )));
        }
        Ok(current.space)
    }

    pub fn label(&self) -> &str {
        &self.shared.cfg.label
    }

    /// The stable connection id: the user nkey's public key, also the reply-inbox scope.
    pub fn conn_id(&self) -> &ConnId {
        &self.shared.cfg.conn
    }

    /// Renewals swapped in so far.
    pub fn swaps(&self) -> u64 {
        *self.shared.swaps.borrow()
    }

    /// Follows this client's connection across renewals: the receiver wakes the moment a
    /// renewed connection is swapped in (its value is the swap count), so a subscription moves
    /// to the fresh connection before the old one is drained, with no polling. It does not hold
    /// the client: once the client is gone, `changed()` fails and the follower ends.
    pub fn renewals(&self) -> watch::Receiver<u64> {
        self.shared.swaps.subscribe()
    }

    /// How long the last renewal took from the mint to the swap (connect and bind included);
    /// `None` before the first.
    pub fn last_renewal(&self) -> Option<Duration> {
        (self.swaps() > 0)
            .then(|| Duration::from_micros(self.shared.last_renewal_us.load(Ordering::Relaxed)))
    }

    /// Resolves with the reason once the client has failed closed (a renewal could not be made
    /// in time); pending while it serves. The owner selects on it to stop serving.
    pub async fn failed(&self) -> EpError {
        let mut failure = self.shared.failure.subscribe();
        loop {
            if let Some(reason) = failure.borrow_and_update().as_ref() {
                return EpError::unavailable(reason.clone());
            }
            if failure.changed().await.is_err() {
                // The sender lives as long as `shared`, which this borrow keeps.
                futures::future::pending::<()>().await;
            }
        }
    }

    /// Resolves with the reason once the current connection dropped (a renewal's planned swap
    /// is not a drop). The client itself reconnects like any other; an owner whose identity is
    /// that exact connection (a sealed scanner, whose `(server, cid)` the plane claim pins)
    /// treats this as its death.
    pub async fn lost(&self) -> String {
        let mut lost = self.shared.cfg.lost.subscribe();
        loop {
            if let Some(why) = lost.borrow_and_update().as_ref() {
                return why.clone();
            }
            if lost.changed().await.is_err() {
                futures::future::pending::<()>().await;
            }
        }
    }

    /// Forgets a recorded drop, so [`AuthorityClient::lost`] waits for the next one. An owner
    /// that pins itself to the reconnected connection again (the plane re-taking its claim
    /// after its server came back) clears it *before* it reads the connection's tuple: a drop
    /// after that is recorded, never lost between the read and the clear.
    pub fn clear_lost(&self) {
        self.shared.cfg.lost.send_replace(None);
    }

    /// True while the current connection is connected (not reconnecting, not closed).
    pub fn is_connected(&self) -> bool {
        self.shared.current().space.client().connection_state()
            == async_nats::connection::State::Connected
    }

    /// The current connection as the server identifies it: its run id and the connection id.
    pub fn server_connection(&self) -> (String, u64) {
        let info = self.shared.current().space.client().server_info();
        (info.server_id, info.client_id)
    }

    /// The current connection as the plane claim pins it (reference §2.5): the server, the
    /// connection id and the user nkey the servers list it under.
    pub fn conn_tuple(&self) -> Result<ConnTuple, EpError> {
        let (server, cid) = self.server_connection();
        ConnTuple::new(&server, cid, self.conn_id().as_str())
    }

    /// Stops renewing, drains the current connection and every retiring one. Fails naming the
    /// label when the current connection does not drain.
    pub async fn close(self) -> Result<(), EpError> {
        self.renewal.abort();
        self.shared.closing.store(true, Ordering::Relaxed);
        let retiring: Vec<JoinHandle<()>> = std::mem::take(
            &mut *self
                .shared
                .retiring
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for handle in retiring {
            let _ = handle.await;
        }
        let current = self.shared.current();
        current.space.client().drain().await.map_err(|e| {
            EpError::unavailable(format!(
                "connection {} failed to close: {e}",
                self.shared.cfg.label
            ))
        })
    }
}

impl Drop for AuthorityClient {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

impl FenceReads for AuthorityClient {
    fn gate_writes(&self) -> &GateWrites {
        &self.shared.cfg.hub
    }

    fn read(&self, request: &KvRequest) -> impl Future<Output = KvOutcome> + Send {
        let space = self.space();
        async move {
            match space {
                Ok(space) => space.execute(request).await,
                Err(e) => KvOutcome::Unavailable(e.message),
            }
        }
    }
}

/// Connects the callout connection with its stored creds text (JWT and seed), named `label`.
/// The creds are never quoted in an error.
pub async fn connect_with_creds(
    servers: impl Into<Dial>,
    label: &str,
    creds: &str,
) -> Result<Client, EpError> {
    let dial: Dial = servers.into();
    let options = ConnectOptions::new().credentials(creds).map_err(|_| {
        EpError::bad_request(format!(
            "the stored credentials of connection {label} are not a valid creds file"
        ))
    })?;
    dial.apply(options)
        .name(label)
        .event_callback(event_logger(label.to_owned()))
        .connect(dial.urls())
        .await
        .map_err(|e| {
            EpError::unavailable(format!(
                "connection {label} cannot connect to the NATS server at {}: {}",
                dial.servers(),
                dial.describe(&e)
            ))
        })
}

impl AuthorityClient {
    /// An operator verb's own short connection of `role` in `space` to `server` (`gate
    /// ls|show|reconcile`, `actor revoke --credential`): self-minted from the trust root's data
    /// account, granted exactly one [`plane_grants`](cotal_core::plane_grants) builder (of
    /// `space` and the connection) under the host limits, re-minted at half-life of [`AUTHORITY_CLIENT_TTL_SECS`], over the two
    /// authority stores as they were created (a verb never creates one).
    pub async fn for_operator(
        server: &Dial,
        material: &DaemonMaterial,
        space: &SpaceName,
        role: PlaneConnection,
        grants: impl FnOnce(&SpaceName, &ConnId) -> Result<Permissions, EpError>,
    ) -> Result<AuthorityClient, String> {
        AuthorityClient::open(
            server,
            role.label(space),
            DataAccountSigner::of(material),
            |conn| grants(space, conn).map(host_user),
            Duration::from_secs(AUTHORITY_CLIENT_TTL_SECS),
            space.clone(),
            SpaceOptions::existing(&[Store::Auth, Store::Records]),
        )
        .await
        .map_err(|e| e.message.clone())
    }
}

/// An operator's binding of `space` as the user of a creds file's `creds` text (`gate ls|show
/// --creds`: an operator's read-only user, on a host without the trust root), connected as
/// `label` ([`connect_with_creds`]).
pub async fn bind_with_creds(
    servers: &Dial,
    label: &str,
    creds: &str,
    space: SpaceName,
    options: SpaceOptions,
) -> Result<Space, EpError> {
    let client = connect_with_creds(servers, label, creds).await?;
    Space::bind(client, space, options).await
}

/// How a plane opens its self-minted connections: to its servers, signed by the data account,
/// labelled by role (`cotal:<role>:<space>`), granted exactly one [`plane_grants`] builder
/// under [`HOST_LIMITS`](cotal_core::profiles::HOST_LIMITS), tagged with the gate principal, and
/// re-minted at half-life of [`AUTHORITY_CLIENT_TTL_SECS`].
///
/// [`plane_grants`]: cotal_core::plane_grants
#[derive(Clone, Debug)]
pub struct PlaneDialer {
    server: Dial,
    /// The servers as the operator is shown them (without userinfo).
    shown: String,
    space: SpaceName,
    signer: DataAccountSigner,
    replicas: Replicas,
    /// The gate principal's tags: the servers' own listing attributes every connection to this
    /// plane, so a reconcile of a frozen `auth` gate sees the plane that froze it as live for as
    /// long as it runs (F24, F52).
    tags: Vec<String>,
}

impl PlaneDialer {
    /// The dialer of the plane of `space` whose gate principal is `holder`; `shown` is how its
    /// servers are named to the operator.
    pub fn new(
        server: Dial,
        shown: String,
        space: SpaceName,
        signer: DataAccountSigner,
        replicas: Replicas,
        holder: &Principal,
    ) -> PlaneDialer {
        PlaneDialer {
            server,
            shown,
            space,
            signer,
            replicas,
            tags: principal_tags(holder),
        }
    }

    /// The binding of `stores` at the plane's replicas; only the mint creates a missing store.
    pub fn options(&self, stores: &[Store], create_missing: bool) -> SpaceOptions {
        SpaceOptions {
            replicas: self.replicas,
            stores: StoreSet::of(stores),
            create_missing,
            ..SpaceOptions::default()
        }
    }

    /// Opens one self-minted connection of `role`, refusing in one sentence a server this
    /// space's trust root does not govern.
    pub async fn open(
        &self,
        role: PlaneConnection,
        grants: impl FnOnce(&ConnId) -> Result<Permissions, EpError>,
        options: SpaceOptions,
    ) -> Result<AuthorityClient, String> {
        let tags = self.tags.clone();
        AuthorityClient::open(
            &self.server,
            role.label(&self.space),
            self.signer.clone(),
            move |conn| {
                Ok(UserNats {
                    tags,
                    ..host_user(grants(conn)?)
                })
            },
            Duration::from_secs(AUTHORITY_CLIENT_TTL_SECS),
            self.space.clone(),
            options,
        )
        .await
        .map_err(|e| self.refusal(&e.message))
    }

    /// `client` (the first connection opened), unless its server lets clients in without
    /// credentials: such a server is not one this space's trust root governs, and `client` is
    /// closed before the refusal.
    pub async fn governed(&self, client: AuthorityClient) -> Result<AuthorityClient, String> {
        let open_to_all = !client
            .space()
            .map_err(|e| e.message.clone())?
            .client()
            .server_info()
            .auth_required;
        if open_to_all {
            let _ = client.close().await;
            return Err(self.not_ours("it lets clients in without credentials"));
        }
        Ok(client)
    }

    /// A refused credential means the server does not trust this space's operator (or lacks
    /// its accounts); anything else (unreachable, timed out) is said as it is.
    pub fn refusal(&self, why: &str) -> String {
        if why.to_ascii_lowercase().contains("authorization") {
            self.not_ours(why)
        } else {
            why.to_owned()
        }
    }

    /// The one sentence for a server that refused or ignored this space's credentials.
    pub fn not_ours(&self, why: &str) -> String {
        format!(
            "the NATS server at {} is not serving space {} from its trust root ({why}); run it \
             from `cotal-authd broker-config --space {}`, or start `up` without --server",
            self.shown, self.space, self.space
        )
    }
}
