//! Subscriptions that follow an [`AuthorityClient`]'s connection across its renewals: the one
//! way a listener on a renewed connection (the gate push, the auth control rail) stays
//! subscribed. At each renewal the interests are subscribed on the fresh connection, confirmed
//! by a flush, before the old subscriptions — and the binding that keeps the old connection
//! open — are let go, so there is no moment in which nothing listens. Woken by the client's
//! [`renewals`](AuthorityClient::renewals), never by polling.

use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, Message, Subscriber};
use cotal_core::kv::Store;
use cotal_core::names::SpaceName;
use cotal_core::EpError;
use futures::stream::SelectAll;
use futures::StreamExt;
use tokio::sync::watch;

use crate::authority::AuthorityClient;
use crate::shape::StoreLayout;
use crate::space::Space;

/// One subscription to hold on the followed connection.
#[derive(Debug, Clone)]
pub enum Interest {
    Subject(String),
    /// A queue subscription: one member of `group` gets each message.
    Queue {
        subject: String,
        group: String,
    },
}

/// Where the followed connection is found: its current binding and a renewal receiver taken
/// *before* the binding, so a renewal that lands in between still wakes the follower. `Err`
/// means the connection is gone for good (the client failed closed or was dropped).
pub trait Source: Send + Sync {
    fn current(&self) -> Result<(Arc<Space>, watch::Receiver<u64>), EpError>;
}

impl Source for &AuthorityClient {
    fn current(&self) -> Result<(Arc<Space>, watch::Receiver<u64>), EpError> {
        let renewals = self.renewals();
        Ok((self.space()?, renewals))
    }
}

/// The subscriptions on one connection, and the binding that keeps that connection open.
struct Bound {
    space: Arc<Space>,
    renewals: watch::Receiver<u64>,
    deliveries: SelectAll<Subscriber>,
}

/// Why a binding was not made.
enum Unbound {
    /// The source is gone: the follower ends with this error.
    Gone(EpError),
    /// The server refused or the connection dropped the subscriptions: tried again later.
    Failed(String),
}

/// The messages of a set of interests on a followed connection.
pub struct Followed<S> {
    label: String,
    source: S,
    interests: Vec<Interest>,
    retry: Duration,
    bound: Option<Bound>,
    /// A renewal was seen and the move to the fresh connection is still to be made.
    moving: bool,
}

impl<S> std::fmt::Debug for Followed<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Followed")
            .field("label", &self.label)
            .field("interests", &self.interests)
            .field("bound", &self.bound.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: Source> Followed<S> {
    /// A follower of `interests` on `source`'s connection, named `label` in its log lines; a
    /// failed subscription is tried again after `retry`.
    pub fn new(label: impl Into<String>, source: S, interests: Vec<Interest>) -> Self {
        Followed {
            label: label.into(),
            source,
            interests,
            retry: Duration::from_millis(250),
            bound: None,
            moving: false,
        }
    }

    /// Subscribes on the current connection now, confirmed by a flush: a listener that must be
    /// listening before it reports ready calls this first. `unavailable` when it cannot.
    pub async fn listen(&mut self) -> Result<(), EpError> {
        match self.bind().await {
            Ok(bound) => {
                self.bound = Some(bound);
                Ok(())
            }
            Err(Unbound::Gone(e)) => Err(e),
            Err(Unbound::Failed(why)) => Err(EpError::unavailable(why)),
        }
    }

    /// The next message, with the client it arrived on (to answer on the same connection).
    /// Moves to each renewed connection as it comes; `Err` only once the source is gone.
    pub async fn next(&mut self) -> Result<(Client, Message), EpError> {
        loop {
            if self.bound.is_none() || self.moving {
                match self.bind().await {
                    // Assigned only now: the replaced binding (and its connection) is let go
                    // after the fresh subscriptions are confirmed.
                    Ok(fresh) => {
                        self.bound = Some(fresh);
                        self.moving = false;
                    }
                    Err(Unbound::Gone(e)) => return Err(e),
                    Err(Unbound::Failed(why)) => {
                        tracing::warn!(connection = %self.label, "subscribing failed ({why}); retrying");
                        tokio::time::sleep(self.retry).await;
                    }
                }
                continue;
            }
            let Some(bound) = self.bound.as_mut() else {
                continue;
            };
            tokio::select! {
                delivered = bound.deliveries.next() => match delivered {
                    Some(message) => return Ok((bound.space.client().clone(), message)),
                    // Every subscription ended: the connection closed under it.
                    None => {
                        self.bound = None;
                        tokio::time::sleep(self.retry).await;
                    }
                },
                renewed = bound.renewals.changed() => match renewed {
                    Ok(()) => self.moving = true,
                    Err(_) => return Err(match self.source.current() {
                        Err(e) => e,
                        Ok(_) => EpError::unavailable(format!("the connection {} is gone", self.label)),
                    }),
                },
            }
        }
    }

    async fn bind(&self) -> Result<Bound, Unbound> {
        let (space, mut renewals) = self.source.current().map_err(Unbound::Gone)?;
        renewals.borrow_and_update();
        let client = space.client();
        let mut deliveries = SelectAll::new();
        for interest in &self.interests {
            let subscribed = match interest {
                Interest::Subject(subject) => client.subscribe(subject.clone()).await,
                Interest::Queue { subject, group } => {
                    client.queue_subscribe(subject.clone(), group.clone()).await
                }
            };
            deliveries.push(subscribed.map_err(|e| Unbound::Failed(e.to_string()))?);
        }
        client
            .flush()
            .await
            .map_err(|e| Unbound::Failed(e.to_string()))?;
        Ok(Bound {
            space,
            renewals,
            deliveries,
        })
    }
}

/// The writes of one KV key on a connection, followed across its renewals, as a wake-up for a
/// wait that polls (a standby may wait longer than one credential lives): the poll covers what
/// no write announces, a write wakes the wait at once. Empty when the subscription could not be
/// made at the start: the wait then polls alone.
#[derive(Debug)]
pub struct KeyWrites<'a>(Option<Followed<&'a AuthorityClient>>);

impl<'a> KeyWrites<'a> {
    /// Listens to the writes of `key` in `store` of `space` on `client`, confirmed before it
    /// returns; `why` names the wait in the follower's log lines.
    pub async fn listen(
        client: &'a AuthorityClient,
        store: Store,
        space: &SpaceName,
        key: &str,
        why: &str,
    ) -> KeyWrites<'a> {
        let subject = StoreLayout::of(store, space).subject(key);
        let label = format!("{} ({why})", client.label());
        let mut writes = Followed::new(label, client, vec![Interest::Subject(subject)]);
        KeyWrites(writes.listen().await.ok().map(|()| writes))
    }

    /// Waits `period`, or less when the key is written first.
    pub async fn within(&mut self, period: Duration) {
        match &mut self.0 {
            Some(writes) => {
                tokio::select! {
                    () = tokio::time::sleep(period) => {}
                    _ = writes.next() => {}
                }
            }
            None => tokio::time::sleep(period).await,
        }
    }
}
