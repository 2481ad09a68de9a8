//! The auth control rail listener (reference §2.5 step 9): the plane's own `auth` instance
//! serving `retire-lifecycle` on the `ep` rails, on the `cotal:auth-admin:<space>` connection,
//! at the epoch its registration committed. Each call is checked by
//! [`cotal_core::endpoint_rail`] and [`cotal_core::control_rail`], then joins the
//! retirement flight of its op id ([`Retirements`]) that the managed-retire door shares.
//!
//! The reply goes to the subject derived from the request's (its caller triple and nonce), never
//! to a transport reply target (SPEC §13.2). A request whose subject does not parse names no
//! one to answer and is dropped with a log line. The connection is renewed at half-life on a
//! fresh connection; the listener subscribes on the fresh one before it lets the old one go.

use std::sync::Arc;

use cotal_core::control_rail::{AdmitRetireCall, RailAdmission, RetireCall};
use cotal_core::endpoint_rail::{reply_error, reply_ok, Outcome, ServedCommand};
use cotal_core::machine::Replay;
use cotal_core::EpError;
use cotal_io_nats::async_nats::{Client, Message};
use cotal_io_nats::follow::{Followed, Interest, Source};
use cotal_io_nats::Space;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::connections::PlaneLink;
use super::decision::{Decided, Recorder};
use super::retirement::{Entry, Retirements};
use super::Readiness;

/// The rail's dependencies.
pub(super) struct Rail {
    pub(super) served: ServedCommand,
    pub(super) connections: PlaneLink,
    pub(super) retirements: Arc<Retirements>,
    pub(super) readiness: watch::Receiver<Readiness>,
    pub(super) recorder: Recorder,
    /// Calls answered at once, at most [`RAIL_IN_FLIGHT`].
    pub(super) in_flight: Arc<tokio::sync::Semaphore>,
}

/// How many rail calls the plane answers at once (the public face's cap).
pub(super) const RAIL_IN_FLIGHT: usize = 64;

/// The admin connection, current across its renewals, as long as the plane holds it.
struct AdminConnection(PlaneLink);

impl Source for AdminConnection {
    fn current(&self) -> Result<(Arc<Space>, watch::Receiver<u64>), EpError> {
        let connections = self.0.get()?;
        (&connections.admin).current()
    }
}

impl Rail {
    /// Subscribes on the current connection, flushed, and serves until aborted.
    pub(super) async fn start(self) -> Result<JoinHandle<()>, String> {
        let [class, instance] = self.served.subscriptions();
        let group = self.served.endpoint.token().as_str().to_owned();
        let interests = vec![
            Interest::Queue {
                subject: class,
                group,
            },
            Interest::Subject(instance),
        ];
        let source = AdminConnection(self.connections.clone());
        let mut calls = Followed::new("auth control rail", source, interests);
        calls.listen().await.map_err(|e| e.message)?;
        let rail = Arc::new(self);
        Ok(tokio::spawn(async move { rail.serve(calls).await }))
    }

    async fn serve(self: Arc<Self>, mut calls: Followed<AdminConnection>) {
        loop {
            let (client, message) = match calls.next().await {
                Ok(call) => call,
                Err(e) => {
                    debug!("the auth control rail stopped: {}", e.message);
                    return;
                }
            };
            // Bounded like the HTTP faces: past the cap the listener stops reading its
            // subscription until a call ends (the server buffers, then drops for a slow one).
            let Ok(permit) = Arc::clone(&self.in_flight).acquire_owned().await else {
                return;
            };
            let rail = Arc::clone(&self);
            tokio::spawn(async move {
                rail.answer(client, message).await;
                drop(permit);
            });
        }
    }

    /// Answers one request (see the module doc).
    async fn answer(&self, client: Client, message: Message) {
        let Some(subject) = self.served.subject(message.subject.as_str()) else {
            debug!(subject = %message.subject, "auth-admin: dropped a request on a subject this rail does not serve");
            return;
        };
        let reply_to = self.served.reply_subject(&subject);
        let request = match self.served.request(subject, &message.payload) {
            Ok(request) => request,
            Err((Some(id), e)) => {
                self.refused(&e, "");
                publish(
                    &client,
                    reply_to,
                    reply_error(&id, &e, Outcome::NotExecuted),
                )
                .await;
                return;
            }
            Err((None, e)) => {
                debug!(
                    "auth-admin: dropped a request whose envelope has no usable id: {}",
                    e.message
                );
                return;
            }
        };
        let (id, reply_expected) = (request.id.clone(), request.reply_expected);
        let (body, row) = match self.decide(&request).await {
            Ok((call, output)) => {
                let row = format!("lifecycle.{}.{}", call.target.owner, call.target.actor);
                let who = caller(&call);
                self.recorder
                    .record(&Decided::new("retire-lifecycle", &who, &row), None);
                (reply_ok(&id, output), row)
            }
            Err((e, outcome)) => {
                let row = format!("{}", request.subject.target);
                self.refused(&e, &row);
                (reply_error(&id, &e, outcome), row)
            }
        };
        if reply_expected {
            publish(&client, reply_to, body).await;
        } else {
            debug!(row, "auth-admin: a cast was answered by nothing, as asked");
        }
    }

    fn refused(&self, e: &EpError, row: &str) {
        self.recorder
            .record(&Decided::new("retire-lifecycle", "manager", row), Some(e));
    }

    /// The check and the barrier: `Ok` with the call and its output, or the refusal with how far
    /// it got.
    async fn decide(
        &self,
        request: &cotal_core::endpoint_rail::TargetedRequest,
    ) -> Result<(RetireCall, serde_json::Value), (EpError, Outcome)> {
        let refused = |e| (e, Outcome::NotExecuted);
        if let Some(refusal) = self.readiness.borrow().refusal() {
            return Err(refused(refusal));
        }
        let call = RetireCall::from_request(&self.served.space, request).map_err(refused)?;
        let admitted = self
            .retirements
            .read(Replay::new(AdmitRetireCall { call: call.clone() }))
            .await
            .map_err(refused)?;
        if admitted == RailAdmission::AlreadyRetired {
            let output = call.output(&[]);
            return Ok((call, output));
        }
        let ran = self
            .retirements
            .retire(call.barrier(), Entry::Rail)
            .await
            .map_err(|e| (e, Outcome::Executed))?;
        if ran.retirement.not_started {
            return Err((
                EpError::failed_precondition(format!(
                    "lifecycle {} of \"{}/{}\" was never current, so there is nothing to retire",
                    call.target.uid, call.target.owner, call.target.actor
                )),
                Outcome::Executed,
            ));
        }
        let output = call.output(&ran.evicted);
        Ok((call, output))
    }
}

fn caller(call: &RetireCall) -> String {
    format!("{}.{}", call.caller.owner, call.caller.actor)
}

async fn publish(client: &Client, subject: String, body: Vec<u8>) {
    if let Err(e) = client.publish(subject.clone(), body.into()).await {
        warn!(subject, "auth-admin: publishing a reply failed: {e}");
    }
}
