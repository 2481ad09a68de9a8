//! The NATS auth callout service (reference-auth-service §8.2, callout-operator-mode §4–§9):
//! [`serve`] answers the broker's authorization requests on `$SYS.REQ.USER.AUTH` for the
//! callout account, on a connection with the callout service user's creds.
//!
//! The decisions are the core's ([`cotal_core::callout`]); this module is the I/O around them:
//! it opens each sealed request with the callout xkey and the `Nats-Server-Xkey` header key,
//! asks the [`Authorize`] implementation about a verified one, and publishes the signed answer
//! sealed to the server's xkey on the request's reply subject (`$SYS._INBOX.…`). A request that
//! does not prove its provenance is dropped without an answer; the server then refuses the
//! connect at its auth timeout.
//!
//! **Concurrency.** Each request is handled on its own task, at most [`MAX_IN_FLIGHT`] at a
//! time, so one slow authorizer call does not hold up every connect behind it (the server's
//! deadline is 2 s by default and its first PING to the waiting client comes at about the same
//! time, callout-operator-mode G6). Past the bound, requests wait in the subscription; those
//! that wait past their `exp` are dropped as stale.
//!
//! **The shared secret.** Opening a request and sealing its answer each need the curve
//! shared secret of the callout xkey and the server's xkey; it is computed once per server key
//! and kept ([`SharedBoxes`]), since a server keeps its xkey for its life: a connect then costs
//! no curve multiplication here at all. A key is kept only once a request sealed with it
//! proved to come from the server that signed that key, so no unverified header grows the
//! cache, which is bounded besides.
//!
//! **Secrets.** The xkey seed is a credential in its own right: a response sealed to the server
//! passes without the server checking its signer (callout-operator-mode G2). No seed, bearer or
//! minted JWT appears in a log line or a `Debug` output here.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_nats::{Client, Message, Subscriber};
use cotal_core::callout::{
    self, Admit, Answer, AnswerKeys, ConnectRequest, DropReason, TrustedServers,
};
use cotal_core::jwt::UnixSeconds;
use cotal_core::trust::{DaemonMaterial, AUTH_REQUEST_SUBJECT};
use cotal_core::EpError;
use crypto_box::aead::{Aead as _, AeadCore as _, OsRng};
use crypto_box::{Nonce, PublicKey, SalsaBox, SecretKey};
use futures::StreamExt as _;
use nkeys::{KeyPair, KeyPairType, XKey};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, error, info, warn};

use crate::authority::{unix_now, DataAccountSigner};

/// The queue group every callout service of a space joins, so each request is answered once.
pub const CALLOUT_QUEUE: &str = "cotal-auth-callout";

/// The header carrying the server's curve key on a sealed request.
pub const SERVER_XKEY_HEADER: &str = "Nats-Server-Xkey";

/// How many requests are handled at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// The outcome of an authorizer call: the grant, or why not (a reason the server logs; it never
/// reaches the client, and must not carry the bearer).
pub type AuthorizeFuture<'a> = Pin<Box<dyn Future<Output = Result<Admit, String>> + Send + 'a>>;

/// Decides verified connect requests: the daemon implements it with the ledger and credential
/// checks. Object-safe, so the service holds an `Arc<dyn Authorize>`.
pub trait Authorize: Send + Sync {
    /// Admits or denies one connect. `request.bearer` is `None` when the client sent no token,
    /// and `request.nonce` is the client's CONNECT `name` verbatim, unvalidated.
    fn authorize(&self, request: ConnectRequest) -> AuthorizeFuture<'_>;

    /// Called with each admission's user JWT just before it is sent (audit and metering). The
    /// default does nothing.
    fn admitted(&self, _request: &ConnectRequest, _user_jwt: &str, _expires_at: UnixSeconds) {}
}

/// What the service answers with: the callout account's keys, the xkey, the data account's
/// signer, and which servers it trusts.
#[derive(Clone)]
pub struct CalloutKeys {
    callout_account: String,
    callout_signer: Arc<KeyPair>,
    xkey: XKey,
    boxes: Arc<SharedBoxes>,
    data: DataAccountSigner,
    trusted: TrustedServers,
}

impl fmt::Debug for CalloutKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Public halves only.
        f.debug_struct("CalloutKeys")
            .field("callout_account", &self.callout_account)
            .field("callout_signer", &self.callout_signer.public_key())
            .field("xkey", &self.xkey.public_key())
            .field("data", &self.data)
            .field("trusted", &self.trusted)
            .finish()
    }
}

impl CalloutKeys {
    /// The keys of a space's trust root, trusting any server.
    pub fn from_material(material: &DaemonMaterial) -> Result<Self, EpError> {
        // A public-only xkey has no seed: the same refusal as an empty one.
        let xkey_seed = material.callout_xkey().seed().unwrap_or_default();
        CalloutKeys::new(
            material.callout_account(),
            material.callout_signing_key().clone(),
            &xkey_seed,
            DataAccountSigner::of(material),
        )
    }

    /// Checks and assembles the keys, trusting any server. Refused (`bad-request`): an empty
    /// or invalid xkey seed — the service never serves unsealed, since the bearer would cross
    /// the auth path in the clear — and signers without a seed or of the wrong kind.
    pub fn new(
        callout_account: &str,
        callout_signer: KeyPair,
        xkey_seed: &str,
        data: DataAccountSigner,
    ) -> Result<Self, EpError> {
        if xkey_seed.is_empty() {
            return Err(EpError::bad_request(
                "the auth callout needs the callout account's xkey seed; refusing to start a \
                 callout that would receive bearer tokens unsealed",
            ));
        }
        let not_curve = || EpError::bad_request("the callout xkey seed is not a curve (SX…) seed");
        let xkey = XKey::from_seed(xkey_seed).map_err(|_| not_curve())?;
        let (_, raw) = nkeys::decode_seed(xkey_seed).map_err(|_| not_curve())?;
        let boxes = Arc::new(SharedBoxes::new(SecretKey::from_bytes(raw)));
        for (what, key) in [
            ("callout signing key", &callout_signer),
            ("data signing key", &*data.signer),
        ] {
            if key.key_pair_type() != KeyPairType::Account || key.seed().is_err() {
                return Err(EpError::bad_request(format!(
                    "the {what} must be an account key pair with its seed"
                )));
            }
        }
        Ok(CalloutKeys {
            callout_account: callout_account.to_owned(),
            callout_signer: Arc::new(callout_signer),
            xkey,
            boxes,
            data,
            trusted: TrustedServers::Any,
        })
    }

    /// Answers only requests from these servers.
    pub fn with_trusted_servers(mut self, trusted: TrustedServers) -> Self {
        self.trusted = trusted;
        self
    }

    fn answer_keys(&self) -> AnswerKeys<'_> {
        AnswerKeys {
            callout_account: &self.callout_account,
            callout_signer: &self.callout_signer,
            data_account: &self.data.account,
            data_signer: &self.data.signer,
        }
    }
}

/// The most server keys whose shared secret is kept: a cluster's servers, with room for their
/// restarts (a restarted server draws a new xkey). Past it a secret is computed per request.
const MAX_KEPT_SERVERS: usize = 256;

/// The version prefix of a sealed payload (nats-server's `xkv1`, as `nkeys::XKey` writes it).
const SEALED_PREFIX: &[u8] = b"xkv1";

/// The curve shared secrets of the callout xkey with each verified server xkey: the same box
/// opens a server's requests and seals the answers to it. Never printed (no `Debug`).
struct SharedBoxes {
    secret: SecretKey,
    kept: Mutex<HashMap<String, Arc<SalsaBox>>>,
}

impl SharedBoxes {
    fn new(secret: SecretKey) -> SharedBoxes {
        SharedBoxes {
            secret,
            kept: Mutex::new(HashMap::new()),
        }
    }

    /// The box for the server key in `header` and whether it was kept already; `None` when the
    /// header is not a curve public key.
    fn for_server(&self, header: &str) -> Option<(Arc<SalsaBox>, bool)> {
        if let Some(kept) = self.lock().get(header) {
            return Some((Arc::clone(kept), true));
        }
        let (prefix, raw) = nkeys::from_public_key(header).ok()?;
        if KeyPairType::from(prefix) != KeyPairType::Curve {
            return None;
        }
        Some((
            Arc::new(SalsaBox::new(&PublicKey::from(raw), &self.secret)),
            false,
        ))
    }

    /// Keeps `shared` for `header`, unless the bound is reached.
    fn keep(&self, header: &str, shared: &Arc<SalsaBox>) {
        let mut kept = self.lock();
        if kept.len() < MAX_KEPT_SERVERS {
            kept.insert(header.to_owned(), Arc::clone(shared));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<SalsaBox>>> {
        // The map holds only complete entries (an insert cannot half-happen), so a poisoned
        // lock still guards a sound map.
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Opens a sealed payload (`xkv1`, the 24-byte nonce, the box), as `nkeys::XKey::open` does.
fn open(shared: &SalsaBox, sealed: &[u8]) -> Option<Vec<u8>> {
    let rest = sealed.strip_prefix(SEALED_PREFIX)?;
    let nonce_len = std::mem::size_of::<Nonce>();
    if rest.len() <= nonce_len {
        return None;
    }
    let (nonce, boxed) = rest.split_at(nonce_len);
    shared.decrypt(Nonce::from_slice(nonce), boxed).ok()
}

/// Seals `plain` under a fresh random nonce, as `nkeys::XKey::seal` does.
fn seal(shared: &SalsaBox, plain: &[u8]) -> Option<Vec<u8>> {
    let nonce = SalsaBox::generate_nonce(&mut OsRng);
    let boxed = shared.encrypt(&nonce, plain).ok()?;
    let mut sealed = Vec::with_capacity(SEALED_PREFIX.len() + nonce.len() + boxed.len());
    sealed.extend_from_slice(SEALED_PREFIX);
    sealed.extend_from_slice(&nonce);
    sealed.extend_from_slice(&boxed);
    Some(sealed)
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// Admitted: the sealed response to publish.
    Admitted { sealed: Vec<u8> },
    /// Denied with a signed response; `reason` as sent (folded).
    Denied { sealed: Vec<u8>, reason: String },
    /// Not answered.
    Dropped(DropReason),
    /// A verified request whose answer could not be signed or sealed (keys checked at start
    /// make this a bug, not an input): not answered either.
    Failed(String),
}

/// Handles one request message at `now`: unseal, verify, authorize, sign, seal. Publishing the
/// result is the caller's ([`serve`] does it).
pub async fn handle_request(
    keys: &CalloutKeys,
    authorizer: &dyn Authorize,
    message: &Message,
    now: UnixSeconds,
) -> Handled {
    let header = message
        .headers
        .as_ref()
        .and_then(|h| h.get(SERVER_XKEY_HEADER))
        .map(|v| v.as_str().to_owned());
    let Some(header) = header else {
        return Handled::Dropped(DropReason::MissingXkeyHeader);
    };
    let Some((shared, known)) = keys.boxes.for_server(&header) else {
        return Handled::Dropped(DropReason::Undecryptable);
    };
    let Some(opened) = open(&shared, &message.payload) else {
        return Handled::Dropped(DropReason::Undecryptable);
    };
    let Ok(token) = std::str::from_utf8(&opened) else {
        return Handled::Dropped(DropReason::Malformed(
            "the opened payload is not UTF-8".into(),
        ));
    };
    let request = match callout::verify_request(token, &header, &keys.trusted, now) {
        Ok(request) => request,
        Err(reason) => return Handled::Dropped(reason),
    };
    if !known {
        // The request proved its server signed this key: worth keeping.
        keys.boxes.keep(&header, &shared);
    }
    let decision = authorizer.authorize(request.clone()).await;
    let answer = match callout::answer(keys.answer_keys(), &request, decision, now) {
        Ok(answer) => answer,
        Err(e) => return Handled::Failed(format!("cannot sign the answer: {}", e.message)),
    };
    let Some(sealed) = seal(&shared, answer.response().as_bytes()) else {
        return Handled::Failed("cannot seal the answer".into());
    };
    match answer {
        Answer::Admitted {
            user_jwt,
            expires_at,
            ..
        } => {
            authorizer.admitted(&request, &user_jwt, expires_at);
            debug!(user = %request.user_nkey, server = %request.server_id, exp = expires_at.0, "auth callout: admitted");
            Handled::Admitted { sealed }
        }
        Answer::Denied { reason, .. } => {
            info!(user = %request.user_nkey, server = %request.server_id, %reason, "auth callout: denied");
            Handled::Denied { sealed, reason }
        }
    }
}

/// How many requests the service has handled, by outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CalloutCounters {
    pub admitted: u64,
    pub denied: u64,
    /// Not answered: they failed the provenance checks ([`DropReason`]).
    pub dropped: u64,
    /// Not answered: signing, sealing or publishing the answer failed.
    pub failed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    admitted: AtomicU64,
    denied: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

impl Counters {
    fn count(&self, counter: fn(&Counters) -> &AtomicU64) {
        counter(self).fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> CalloutCounters {
        CalloutCounters {
            admitted: self.admitted.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// A running callout service. Dropping the handle also stops it (the subscription ends), but
/// without waiting for the requests in flight: [`CalloutService::close`] is the orderly end.
pub struct CalloutService {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), EpError>>,
    counters: Arc<Counters>,
}

impl fmt::Debug for CalloutService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CalloutService")
            .field("counters", &self.counters())
            .field("running", &self.is_running())
            .finish()
    }
}

impl CalloutService {
    /// The outcomes so far.
    pub fn counters(&self) -> CalloutCounters {
        self.counters.snapshot()
    }

    /// Whether the service still takes requests (it ends when its subscription does, e.g. the
    /// connection closed).
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Unsubscribes, waits for the requests in flight to be answered, and flushes their
    /// answers. An error: the unsubscribe or the flush failed, or the service task died.
    pub async fn close(self) -> Result<(), EpError> {
        // The task may have ended already (its subscription closed): nothing to stop then.
        let _ = self.stop.send(true);
        self.task
            .await
            .map_err(|e| EpError::internal(format!("the auth callout task failed: {e}")))?
    }
}

/// Subscribes `$SYS.REQ.USER.AUTH` in queue group [`CALLOUT_QUEUE`] on `client` (connected
/// with the callout service user's creds), flushes the subscription to the server, and serves
/// until [`CalloutService::close`]. The plane reports ready only after this returns. The flush
/// writes the `SUB` to the server's socket (async-nats has no public PING round trip, and the
/// callout user may subscribe to nothing else to echo through), so a connect the plane
/// announces reaches a server that already holds the subscription in all but a
/// microsecond-wide race; one lost there is refused at the auth timeout, never admitted.
pub async fn serve(
    client: Client,
    keys: CalloutKeys,
    authorizer: Arc<dyn Authorize>,
) -> Result<CalloutService, EpError> {
    let unavailable = |what: &str, e: &dyn fmt::Display| {
        EpError::unavailable(format!("auth callout: {what}: {e}"))
    };
    let subscriber = client
        .queue_subscribe(AUTH_REQUEST_SUBJECT, CALLOUT_QUEUE.to_owned())
        .await
        .map_err(|e| unavailable("cannot subscribe to the authorization requests", &e))?;
    client
        .flush()
        .await
        .map_err(|e| unavailable("cannot flush the subscription", &e))?;
    if keys.trusted == TrustedServers::Any {
        warn!(
            "auth callout: no expected server ids; request provenance rests on the broker's \
             $SYS subject isolation (set them for hardened or multi-server deployments)"
        );
    }
    let counters = Arc::new(Counters::default());
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run(
        client,
        subscriber,
        Arc::new(keys),
        authorizer,
        Arc::clone(&counters),
        stopped,
    ));
    Ok(CalloutService {
        stop,
        task,
        counters,
    })
}

async fn run(
    client: Client,
    mut subscriber: Subscriber,
    keys: Arc<CalloutKeys>,
    authorizer: Arc<dyn Authorize>,
    counters: Arc<Counters>,
    mut stopped: watch::Receiver<bool>,
) -> Result<(), EpError> {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut in_flight = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => reap(done),
            next = subscriber.next() => {
                let Some(message) = next else { break };
                // Waits while MAX_IN_FLIGHT requests are being handled; the next requests wait
                // in the subscription meanwhile.
                let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { break };
                let (client, keys, authorizer, counters) = (
                    client.clone(),
                    Arc::clone(&keys),
                    Arc::clone(&authorizer),
                    Arc::clone(&counters),
                );
                in_flight.spawn(async move {
                    respond(&client, &keys, authorizer.as_ref(), &counters, message).await;
                    drop(slot);
                });
            }
        }
    }
    // On a connection that is down these would wait for a reconnect that may never come (a
    // plane closing because it lost its server): the close is bounded, and says so.
    let bounded = |what: &'static str| {
        move |_| {
            EpError::unavailable(format!(
                "auth callout: {what} did not finish within {CLOSE_WAIT:?}; the connection is down"
            ))
        }
    };
    let unsubscribed = tokio::time::timeout(CLOSE_WAIT, subscriber.unsubscribe())
        .await
        .map_err(bounded("unsubscribing"));
    let drained = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(done) = in_flight.join_next().await {
            reap(done);
        }
    })
    .await
    .map_err(bounded("answering the requests in flight"));
    let flushed = tokio::time::timeout(CLOSE_WAIT, client.flush())
        .await
        .map_err(bounded("flushing"));
    unsubscribed?
        .map_err(|e| EpError::unavailable(format!("auth callout: cannot unsubscribe: {e}")))?;
    drained?;
    flushed?.map_err(|e| EpError::unavailable(format!("auth callout: cannot flush: {e}")))
}

/// The longest each step of a close waits.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn reap(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        error!("auth callout: a request task failed: {e}");
    }
}

/// Handles one message and publishes its answer, counting the outcome.
async fn respond(
    client: &Client,
    keys: &CalloutKeys,
    authorizer: &dyn Authorize,
    counters: &Counters,
    message: Message,
) {
    let now = match unix_now() {
        Ok(now) => UnixSeconds(now),
        Err(e) => {
            error!("auth callout: {}", e.message);
            return counters.count(|c| &c.failed);
        }
    };
    let Some(reply) = message.reply.clone() else {
        debug!("auth callout: dropped a request without a reply subject");
        return counters.count(|c| &c.dropped);
    };
    let handled = handle_request(keys, authorizer, &message, now).await;
    let (counter, sealed): (fn(&Counters) -> &AtomicU64, Vec<u8>) = match handled {
        Handled::Admitted { sealed } => (|c| &c.admitted, sealed),
        Handled::Denied { sealed, .. } => (|c| &c.denied, sealed),
        Handled::Dropped(reason) => {
            debug!(reason = %reason, "auth callout: dropped a request unanswered");
            return counters.count(|c| &c.dropped);
        }
        Handled::Failed(why) => {
            error!("auth callout: left a request unanswered: {why}");
            return counters.count(|c| &c.failed);
        }
    };
    match client.publish(reply, sealed.into()).await {
        Ok(()) => counters.count(counter),
        Err(e) => {
            error!("auth callout: cannot publish an answer: {e}");
            counters.count(|c| &c.failed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxes_of(xkey: &XKey) -> SharedBoxes {
        let (_, raw) = nkeys::decode_seed(&xkey.seed().unwrap()).unwrap();
        SharedBoxes::new(SecretKey::from_bytes(raw))
    }

    /// The kept box opens what nkeys seals and seals what nkeys opens, both ways, as the
    /// server's own xkey code (which nkeys mirrors) does.
    #[test]
    fn a_kept_box_speaks_the_xkey_wire_format() {
        let (callout, server) = (XKey::new(), XKey::new());
        let boxes = boxes_of(&callout);
        let (shared, known) = boxes.for_server(&server.public_key()).unwrap();
        assert!(!known);
        let request = server.seal(b"a request", &callout).unwrap();
        assert_eq!(open(&shared, &request).unwrap(), b"a request");
        let answer = seal(&shared, b"an answer").unwrap();
        assert_eq!(server.open(&answer, &callout).unwrap(), b"an answer");
        // Another server's box opens nothing of this one's.
        let (other, _) = boxes.for_server(&XKey::new().public_key()).unwrap();
        assert!(open(&other, &request).is_none());
        assert!(open(&shared, b"xkv1short").is_none());
        assert!(open(&shared, &request[4..]).is_none());
    }

    /// A key is kept only when asked to (after its request verified), and not past the bound;
    /// a header that is not a curve key has no box.
    #[test]
    fn only_kept_keys_are_known_and_the_kept_set_is_bounded() {
        let boxes = boxes_of(&XKey::new());
        let server = XKey::new().public_key();
        let (shared, _) = boxes.for_server(&server).unwrap();
        assert!(!boxes.for_server(&server).unwrap().1);
        boxes.keep(&server, &shared);
        assert!(boxes.for_server(&server).unwrap().1);
        for _ in 0..MAX_KEPT_SERVERS + 5 {
            let key = XKey::new().public_key();
            let (shared, _) = boxes.for_server(&key).unwrap();
            boxes.keep(&key, &shared);
        }
        assert_eq!(boxes.lock().len(), MAX_KEPT_SERVERS);
        assert!(boxes
            .for_server(&KeyPair::new_user().public_key())
            .is_none());
        assert!(boxes.for_server("not a key").is_none());
    }
}
