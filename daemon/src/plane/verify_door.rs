//! `POST /manager-service-authority/verify-enrollment` (reference §3.8, loopback only): a host
//! platform that authenticated the human on its own route asks for the plane's decision on a
//! managed-agent request ([`VerifyEnrollment`]) and nothing else. The body is closed to
//! `{owner, request}`; the caller's scope comes from this plane's own interactive ledger row,
//! never from the body. Statuses: `permission-denied` 403, `conflict` 409,
//! `failed-precondition` 412, `bad-request` 400, anything else 403.

use cotal_core::actors::authorize::authorize_human_grant;
use cotal_core::enrollment::{VerifyEnrollment, VerifyRequest};
use cotal_core::error::EpError;
use cotal_core::machine::Replay;
use cotal_core::manager::{ManagerHost, Supervisor};
use cotal_core::names::{ActorToken, DerivedOwner, SpaceName};
use cotal_io_fs::FileActors;
use cotal_io_http::face::{Answer, DoorRequest};
use cotal_io_nats::NatsWorld;
use serde_json::Value;

use super::connections::PlaneLink;
use super::decision::{Decided, Recorder};

/// The door's dependencies.
pub(super) struct VerifyDoor {
    pub(super) space: SpaceName,
    pub(super) ledger: FileActors,
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

/// The body, closed: `{owner, request}`.
struct Asked {
    owner: DerivedOwner,
    actor: ActorToken,
    request: VerifyRequest,
}

/// Every shape or grammar failure of the body is a 400 naming it.
fn asked(body: &Value) -> Result<Asked, String> {
    let Value::Object(map) = body else {
        return Err("the body must be an object {owner, request}".to_owned());
    };
    if let Some(extra) = map
        .keys()
        .find(|k| !["owner", "request"].contains(&k.as_str()))
    {
        return Err(format!("unknown field {extra:?}"));
    }
    let owner = map
        .get("owner")
        .and_then(Value::as_str)
        .ok_or("owner must be a string")?;
    let owner = DerivedOwner::parse(owner).map_err(|e| e.message)?;
    let request = map
        .get("request")
        .filter(|r| r.is_object())
        .ok_or("request must be an object")?;
    let actor = request
        .get("actor")
        .and_then(Value::as_str)
        .ok_or("request.actor must be a string")?;
    let actor = ActorToken::parse(actor).map_err(|e| e.message)?;
    let request = VerifyRequest::parse(request).map_err(|e| e.message)?;
    Ok(Asked {
        owner,
        actor,
        request,
    })
}

impl VerifyDoor {
    pub(super) async fn answer(&self, request: &DoorRequest) -> Answer {
        let asked = match asked(&request.body) {
            Ok(asked) => asked,
            Err(why) => return Answer::bad_request(why),
        };
        let caller = format!("{}.{}", asked.owner, asked.actor);
        let outcome = self.decide(asked).await;
        let decided = Decided::new("verify-enrollment", &caller, "-");
        self.recorder.answer(request, &decided, outcome)
    }

    /// The caller's interactive grant, read fresh, then the decision on the manager gate read
    /// over the remote-manager issuer connection.
    async fn decide(&self, asked: Asked) -> Result<Value, EpError> {
        let grant = authorize_human_grant(
            &mut &self.ledger,
            &self.space,
            &asked.owner,
            &asked.actor,
            None,
        )?;
        let decision = VerifyEnrollment {
            host: self.host.clone(),
            caller: Supervisor {
                owner: asked.owner,
                scope: grant.row.scope.clone(),
            },
            request: asked.request,
        };
        let bound = self.connections.get()?.issuer.space()?;
        NatsWorld::new(&bound).run(&mut Replay::new(decision)).await
    }
}
