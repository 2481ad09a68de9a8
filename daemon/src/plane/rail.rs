//! The auth control rail's door (reference §2.5 step 9): the plane's own `auth` instance
//! serving `retire-lifecycle` on the `ep` rails, on the `cotal:auth-admin:<space>` connection,
//! at the epoch its registration committed. Each call is checked by
//! [`cotal_core::endpoint_rail`] and [`cotal_core::control_rail`], then joins the retirement
//! flight of its op id ([`Retirements`]) that the managed-retire door shares. Listening, the
//! renewals and the reply subject are [`rail_server`]'s.

use std::sync::Arc;

use cotal_core::control_rail::{AdmitRetireCall, RailAdmission, RetireCall};
use cotal_core::decided::{Audited, RAIL_REFUSED_CALLER};
use cotal_core::endpoint_rail::{Outcome, ServedCommand, TargetedRequest};
use cotal_core::EpError;
use cotal_io_nats::follow::Source;
use cotal_io_nats::rail_server::{self, Decision, RailDoor};
use cotal_io_nats::Space;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::connections::PlaneLink;
use super::decision::{Decided, Recorder};
use super::retirement::{Entry, Retirements};
use super::Readiness;

/// How many rail calls the plane answers at once (the public face's cap).
const RAIL_IN_FLIGHT: usize = 64;

/// The rail's door: readiness, the caller's gate, the barrier.
pub(super) struct Rail {
    pub(super) space: cotal_core::names::SpaceName,
    pub(super) retirements: Arc<Retirements>,
    pub(super) readiness: watch::Receiver<Readiness>,
    pub(super) recorder: Recorder,
}

/// The admin connection, current across its renewals, as long as the plane holds it.
struct AdminConnection(PlaneLink);

impl Source for AdminConnection {
    fn current(&self) -> Result<(Arc<Space>, watch::Receiver<u64>), EpError> {
        let connections = self.0.get()?;
        (&connections.admin).current()
    }
}

impl Rail {
    /// Serves `served` on the admin connection: subscribed, flushed, before it returns.
    pub(super) async fn start(
        self,
        served: ServedCommand,
        connections: PlaneLink,
    ) -> Result<JoinHandle<()>, String> {
        let source = AdminConnection(connections);
        rail_server::serve(served, source, Arc::new(self), RAIL_IN_FLIGHT)
            .await
            .map_err(|e| e.message)
    }

    /// The check and the barrier: `Ok` with the call and its output, or the refusal with how far
    /// it got.
    async fn retire(
        &self,
        request: &TargetedRequest,
    ) -> Result<(RetireCall, serde_json::Value), (EpError, Outcome)> {
        let refused = |e| (e, Outcome::NotExecuted);
        if let Some(refusal) = self.readiness.borrow().refusal() {
            return Err(refused(refusal));
        }
        let call = RetireCall::from_request(&self.space, request).map_err(refused)?;
        let admitted = self
            .retirements
            .read(AdmitRetireCall { call: call.clone() })
            .await
            .map_err(refused)?;
        if admitted == RailAdmission::AlreadyRetired {
            let output = call.output(&[]);
            return Ok((call, output));
        }
        let ran = self.retirements.retire(call.barrier(), Entry::Rail).await;
        match ran.and_then(|ran| call.answer(&ran)) {
            Ok(output) => Ok((call, output)),
            Err(e) => Err((e, Outcome::Executed)),
        }
    }
}

impl RailDoor for Rail {
    fn decide<'a>(&'a self, request: &'a TargetedRequest) -> Decision<'a> {
        Box::pin(async move {
            match self.retire(request).await {
                Ok((call, output)) => {
                    let Audited { caller, row } = call.audited();
                    self.recorder
                        .record(&Decided::new("retire-lifecycle", &caller, &row), None);
                    Ok(output)
                }
                Err((e, outcome)) => {
                    let row = request.subject.target.to_string();
                    let decided = Decided::new("retire-lifecycle", RAIL_REFUSED_CALLER, &row);
                    self.recorder.record(&decided, Some(&e));
                    Err((e, outcome))
                }
            }
        })
    }

    fn refused_envelope(&self, error: &EpError) {
        let decided = Decided::new("retire-lifecycle", RAIL_REFUSED_CALLER, "");
        self.recorder.record(&decided, Some(error));
    }
}
