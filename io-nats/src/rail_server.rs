//! Serving one targeted endpoint-rail command (SPEC §13.2) on a followed connection: the class
//! subject as a queue member and the instance subject, held across the connection's renewals
//! ([`Followed`]); each request parsed by the core's [`ServedCommand`], decided by a
//! [`RailDoor`], and answered on the subject derived from the request (its caller triple and
//! nonce), never on a transport reply target. A request whose subject does not parse, or whose
//! envelope has no usable id, names no one to answer and is dropped with a log line.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::{Client, Message};
use cotal_core::endpoint_rail::{reply_error, reply_ok, Outcome, ServedCommand, TargetedRequest};
use cotal_core::EpError;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::follow::{Followed, Interest, Source};

/// A door's decision on one request: the reply's data, or the refusal with how far it got.
pub type Decision<'a> =
    Pin<Box<dyn Future<Output = Result<Value, (EpError, Outcome)>> + Send + 'a>>;

/// The command's own rules: what a parsed request is answered.
pub trait RailDoor: Send + Sync + 'static {
    fn decide<'a>(&'a self, request: &'a TargetedRequest) -> Decision<'a>;
    /// A request refused before it reached the door (its envelope did not parse), for the
    /// door's audit.
    fn refused_envelope(&self, error: &EpError);
}

/// Serves `served` on `source`'s connection through `door`, at most `in_flight` calls at once
/// (past the cap the listener stops reading until a call ends; the server buffers, then drops
/// for a slow consumer). Subscribed, flushed, before it returns; runs until aborted or until the
/// source is gone.
pub async fn serve<S, D>(
    served: ServedCommand,
    source: S,
    door: Arc<D>,
    in_flight: usize,
) -> Result<JoinHandle<()>, EpError>
where
    S: Source + 'static,
    D: RailDoor,
{
    let [class, instance] = served.subscriptions();
    let group = served.endpoint.token().as_str().to_owned();
    let interests = vec![
        Interest::Queue {
            subject: class,
            group,
        },
        Interest::Subject(instance),
    ];
    let label = format!("{} rail", served.command);
    let mut calls = Followed::new(label, source, interests);
    calls.listen().await?;
    let served = Arc::new(served);
    let slots = Arc::new(Semaphore::new(in_flight));
    Ok(tokio::spawn(async move {
        loop {
            let (client, message) = match calls.next().await {
                Ok(call) => call,
                Err(e) => {
                    debug!(command = %served.command, "the rail stopped: {}", e.message);
                    return;
                }
            };
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let (served, door) = (Arc::clone(&served), Arc::clone(&door));
            tokio::spawn(async move {
                answer(&served, door.as_ref(), client, message).await;
                drop(permit);
            });
        }
    }))
}

/// Answers one request (see the module doc).
async fn answer(served: &ServedCommand, door: &impl RailDoor, client: Client, message: Message) {
    let Some(subject) = served.subject(message.subject.as_str()) else {
        debug!(subject = %message.subject, "dropped a request on a subject this rail does not serve");
        return;
    };
    let reply_to = served.reply_subject(&subject);
    let request = match served.request(subject, &message.payload) {
        Ok(request) => request,
        Err((Some(id), e)) => {
            door.refused_envelope(&e);
            let body = reply_error(&id, &e, Outcome::NotExecuted);
            return publish(&client, reply_to, body).await;
        }
        Err((None, e)) => {
            debug!(
                "dropped a request whose envelope has no usable id: {}",
                e.message
            );
            return;
        }
    };
    let body = match door.decide(&request).await {
        Ok(output) => reply_ok(&request.id, output),
        Err((e, outcome)) => reply_error(&request.id, &e, outcome),
    };
    if request.reply_expected {
        publish(&client, reply_to, body).await;
    } else {
        debug!(subject = %request.subject.target, "a cast was answered by nothing, as asked");
    }
}

async fn publish(client: &Client, subject: String, body: Vec<u8>) {
    if let Err(e) = client.publish(subject.clone(), body.into()).await {
        warn!(subject, "publishing a rail reply failed: {e}");
    }
}
