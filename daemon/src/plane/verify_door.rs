//! `POST /manager-service-authority/verify-enrollment` (reference §3.8, loopback only): a host
//! platform that authenticated the human on its own route asks for the plane's decision on a
//! managed-agent request ([`VerifyEnrollment`]) and nothing else. The body is closed to
//! `{owner, request}`; the caller's scope comes from this plane's own interactive ledger row,
//! never from the body. Statuses: `permission-denied` 403, `conflict` 409,
//! `failed-precondition` 412, `bad-request` 400, anything else 403.

use crate::ledger::Ledger;
use cotal_core::enrollment::{VerifyAsked, VerifyAtDoor};
use cotal_core::error::EpError;
use cotal_core::manager::ManagerHost;
use cotal_core::names::SpaceName;
use cotal_io_http::face::{Answer, DoorRequest};
use cotal_io_nats::NatsWorld;
use serde_json::Value;

use super::connections::PlaneLink;
use super::decision::{Decided, Recorder};

/// The door's dependencies.
pub(super) struct VerifyDoor {
    pub(super) space: SpaceName,
    pub(super) ledger: Ledger,
    pub(super) host: ManagerHost,
    pub(super) connections: PlaneLink,
    pub(super) recorder: Recorder,
}

impl std::fmt::Debug for VerifyDoor {
    // The host holds the proof secret and the signing key: only the space is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyDoor")
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

impl VerifyDoor {
    pub(super) async fn answer(&self, request: &DoorRequest) -> Answer {
        let asked = match VerifyAsked::parse(&request.body) {
            Ok(asked) => asked,
            Err(why) => return Answer::bad_request(why),
        };
        let caller = asked.caller();
        let outcome = self.decide(asked).await;
        let decided = Decided::new("verify-enrollment", &caller, "-");
        self.recorder.answer(request, &decided, outcome)
    }

    /// Core's decision on the issuer connection (the manager gate), with the ledger attached
    /// for the caller's grant, read fresh.
    async fn decide(&self, asked: VerifyAsked) -> Result<Value, EpError> {
        let bound = self.connections.get()?.issuer.space()?;
        NatsWorld::new(&bound)
            .with_actors(self.ledger.port())
            .run_script(VerifyAtDoor {
                space: self.space.clone(),
                host: self.host.clone(),
                asked,
            })
            .await
    }
}
