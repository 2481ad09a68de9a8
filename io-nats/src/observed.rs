//! The issuing host's observation of the served run requests (SPEC §14.8, reference-auth-service
//! §5.1): [`RunRequestObserver`] subscribes read-only to
//! [`served_run_request_subjects`] on the host's connection and records what
//! [`ObservedRunRequest::parse`] accepts into the core's [`ObservedRunRequests`].
//!
//! **Exactness.** A take must see every request the broker delivered to this connection before
//! the manager's forward arrived. In async-nats 0.51, `Client::flush` only writes the outgoing
//! buffer to the socket; it waits for no reply from the server, so it proves nothing about what
//! has been read. The observer makes a real round trip instead ([`round_trip`]): it publishes
//! to a fresh inbox of its own connection and waits for that message to come back. The server
//! writes a connection's deliveries in order, and the client hands each delivery to its
//! subscriber channel before reading the next, so once the echo is in, every earlier delivery
//! sits in a subscriber channel, and the take drains those channels before it looks. The
//! connection must therefore be allowed to publish and subscribe on its own inbox prefix; an
//! echo the server refuses never comes back, and the round trip fails after
//! [`ROUND_TRIP_WAIT`]. The order holds per connection: on a cluster where the caller, the
//! manager and this connection sit on different servers, a request still on a route to this
//! connection's server is not covered, and its forward is refused.
//!
//! **Draining.** Between takes a background task keeps reading the subscriptions, so the
//! client's bounded subscriber channels do not fill up over time (a full channel drops
//! deliveries as a slow consumer; a single burst larger than the channel capacity is dropped
//! regardless, so the connection should keep async-nats' default capacity). The task and
//! [`RunRequestObserver::take`] share the subscribers behind one fair async mutex; the task
//! waits at most [`DRAIN_WAIT`] for a delivery while holding it, so a take queued behind it
//! gets the subscribers within about that long.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::{Client, Message, Subscriber};
use cotal_core::names::SpaceName;
use cotal_core::run::{served_run_request_subjects, ObservedRunRequest, ObservedRunRequests};
use cotal_core::EpError;
use futures::future::select_all;
use futures::{FutureExt as _, StreamExt as _};
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tracing::warn;

use crate::follow::Source;

/// The longest the background task holds the subscribers while waiting for a delivery.
pub const DRAIN_WAIT: Duration = Duration::from_millis(25);

/// How long a round trip through the server may take before it counts as failed.
pub const ROUND_TRIP_WAIT: Duration = Duration::from_secs(2);

/// How long [`RunRequestObserver::follow`] waits before it retries a failed move to a renewed
/// connection.
pub const RENEWAL_FOLLOW_RETRY: Duration = Duration::from_millis(100);

/// Records the run requests callers publish on the served run request subjects of one space,
/// so that the host issues for a forwarded request only if the broker really carried it, and
/// only once (SPEC §14.8: a forward is issued only for a request the host observed, once).
/// Never replies to anything it reads. Dropping it stops the background task and unsubscribes.
pub struct RunRequestObserver {
    shared: Arc<Shared>,
    drainer: JoinHandle<()>,
}

struct Shared {
    space: SpaceName,
    /// The connection observed on and its subscriptions, replaced together by
    /// [`RunRequestObserver::rebind`]. Closed subscriptions (the connection is gone for good)
    /// are removed.
    conn: tokio::sync::Mutex<Observing>,
    seen: Mutex<ObservedRunRequests>,
}

struct Observing {
    client: Client,
    subscribers: Vec<Subscriber>,
}

impl fmt::Debug for RunRequestObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunRequestObserver")
            .field("space", &self.shared.space)
            .field("held", &self.shared.seen().len())
            .finish_non_exhaustive()
    }
}

impl RunRequestObserver {
    /// Subscribes to every served run request pattern of `space` on `client` and returns once
    /// the server has registered all of them (a round trip after the subscriptions, which the
    /// server processes in order), so a request published after this returns is observed.
    /// `unavailable` when a subscription or the round trip fails.
    pub async fn start(client: Client, space: SpaceName) -> Result<RunRequestObserver, EpError> {
        let subscribers = subscribe_all(&client, &space).await?;
        let shared = Arc::new(Shared {
            space,
            conn: tokio::sync::Mutex::new(Observing {
                client,
                subscribers,
            }),
            seen: Mutex::new(ObservedRunRequests::new()),
        });
        let drainer = tokio::spawn(drain_in_background(Arc::clone(&shared)));
        Ok(RunRequestObserver { shared, drainer })
    }

    /// Moves the observation to `client` (a renewed connection of the same identity), keeping
    /// every observation held: the new subscriptions are confirmed by the server first, then
    /// the old ones are drained one last time and dropped. The caller keeps the old connection
    /// open until this returns, so no request published meanwhile falls between the two. A
    /// request delivered on both connections is recorded twice, which is the same as its caller
    /// publishing it again.
    pub async fn rebind(&self, client: Client) -> Result<(), EpError> {
        let subscribers = subscribe_all(&client, &self.shared.space).await?;
        let mut conn = self.shared.conn.lock().await;
        self.shared.drain_ready(&mut conn.subscribers);
        *conn = Observing {
            client,
            subscribers,
        };
        Ok(())
    }

    /// [`start`](Self::start) on `source`'s current connection, confirmed by the server before
    /// it returns, and the observation kept on that connection across its renewals: each
    /// renewed connection is subscribed ([`rebind`](Self::rebind)) before the binding that
    /// keeps the one it replaces open is let go; a failed move is retried every
    /// [`RENEWAL_FOLLOW_RETRY`] until it lands. The follower ends once the source is gone.
    pub async fn follow<S: Source + 'static>(
        source: S,
        space: SpaceName,
    ) -> Result<Arc<RunRequestObserver>, EpError> {
        let (mut held, mut renewals) = source.current()?;
        renewals.borrow_and_update();
        let observer = Arc::new(RunRequestObserver::start(held.client().clone(), space).await?);
        let follower = Arc::clone(&observer);
        tokio::spawn(async move {
            // Woken by each renewal; a failed move is retried until it lands.
            while renewals.changed().await.is_ok() {
                loop {
                    renewals.borrow_and_update();
                    let Ok((fresh, _)) = source.current() else {
                        return;
                    };
                    match follower.rebind(fresh.client().clone()).await {
                        // Only now may the replaced connection go: the binding held keeps it open.
                        Ok(()) => {
                            drop(std::mem::replace(&mut held, fresh));
                            break;
                        }
                        Err(e) => warn!(
                            "moving the run request observation to the renewed issuing \
                             connection failed ({}); retrying",
                            e.message
                        ),
                    }
                    tokio::time::sleep(RENEWAL_FOLLOW_RETRY).await;
                }
            }
        });
        Ok(observer)
    }

    /// Consumes the observation of exactly `subject`: first a round trip through the server and
    /// a drain of every delivery it proves has arrived, then the unexpired observation, removed
    /// so no second forward finds it. A failed round trip is logged and the take goes on with
    /// what has arrived: what is recorded was observed, so the answer is never a request the
    /// broker did not carry; at worst a request still in flight is missed and the forward
    /// refused.
    pub async fn take(&self, subject: &str) -> Option<ObservedRunRequest> {
        let client = self.shared.conn.lock().await.client.clone();
        if let Err(why) = round_trip(&client).await {
            warn!(space = %self.shared.space, subject, "observed run request take without a confirmed round trip: {why}");
        }
        let mut conn = self.shared.conn.lock().await;
        // Unconstrained: tokio's cooperative budget would otherwise report a channel with
        // deliveries in it as pending after enough reads, and the drain would stop short.
        tokio::task::coop::unconstrained(async { self.shared.drain_ready(&mut conn.subscribers) })
            .await;
        self.shared.seen().take(subject, unix_millis())
    }
}

impl Drop for RunRequestObserver {
    fn drop(&mut self) {
        self.drainer.abort();
    }
}

impl Shared {
    fn seen(&self) -> std::sync::MutexGuard<'_, ObservedRunRequests> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, message: &Message) {
        let subject = message.subject.as_str();
        if let Some(request) = ObservedRunRequest::parse(&self.space, subject, &message.payload) {
            self.seen().record(subject, request, unix_millis());
        }
    }

    /// Records every delivery already in a subscriber channel, without waiting; drops the
    /// subscriptions that have closed.
    fn drain_ready(&self, subscribers: &mut Vec<Subscriber>) {
        subscribers.retain_mut(|subscriber| loop {
            match subscriber.next().now_or_never() {
                Some(Some(message)) => self.record(&message),
                Some(None) => break false,
                None => break true,
            }
        });
    }
}

/// Subscribes to every served run request pattern of `space` on `client`, confirmed by a round
/// trip (the server processes a connection's subscriptions in order).
async fn subscribe_all(client: &Client, space: &SpaceName) -> Result<Vec<Subscriber>, EpError> {
    let mut subscribers = Vec::new();
    for pattern in served_run_request_subjects(space) {
        let subscriber = client
            .subscribe(pattern.clone())
            .await
            .map_err(|e| EpError::unavailable(format!("cannot subscribe to {pattern}: {e}")))?;
        subscribers.push(subscriber);
    }
    round_trip(client).await.map_err(|why| {
        EpError::unavailable(format!(
            "the served run request subscriptions are not confirmed by the server: {why}"
        ))
    })?;
    Ok(subscribers)
}

/// Reads the subscriptions, holding them for at most [`DRAIN_WAIT`] per wait so a take queued
/// on the (fair) mutex gets them next; with none left (the connection closed) it waits for a
/// rebind.
async fn drain_in_background(shared: Arc<Shared>) {
    loop {
        let mut conn = shared.conn.lock().await;
        let subscribers = &mut conn.subscribers;
        if subscribers.is_empty() {
            drop(conn);
            tokio::time::sleep(DRAIN_WAIT).await;
            continue;
        }
        let next = select_all(subscribers.iter_mut().map(|s| s.next()));
        // The futures not chosen borrow the subscribers: dropped here, before a removal.
        let outcome = timeout(DRAIN_WAIT, next)
            .await
            .map(|(message, index, _)| (message, index));
        match outcome {
            Ok((Some(message), _)) => {
                shared.record(&message);
                // Catch up on a burst within this one hold of the subscribers.
                shared.drain_ready(subscribers);
            }
            Ok((None, closed)) => {
                subscribers.swap_remove(closed);
            }
            Err(_) => {}
        }
    }
}

/// One message out to a fresh inbox of this connection and back. Everything the server wrote
/// to the connection before the echo has been handed to its subscriber channels once the echo
/// is read.
async fn round_trip(client: &Client) -> Result<(), String> {
    let inbox = client.new_inbox();
    let mut echo = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| format!("cannot subscribe to the echo inbox: {e}"))?;
    client
        .publish(inbox, bytes::Bytes::new())
        .await
        .map_err(|e| format!("cannot publish the echo: {e}"))?;
    client
        .flush()
        .await
        .map_err(|e| format!("cannot send the echo: {e}"))?;
    match timeout(ROUND_TRIP_WAIT, echo.next()).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the connection closed before the echo came back".to_owned()),
        Err(_) => Err(format!(
            "the echo did not come back within {ROUND_TRIP_WAIT:?}"
        )),
    }
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
