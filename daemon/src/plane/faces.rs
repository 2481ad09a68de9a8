//! What the plane answers on its HTTP faces: `/health` with its readiness, `/jwks` with its
//! bearer issuer's keys, and the doors behind the readiness gate: a plane that is not serving
//! refuses every door first; a serving one hands the request to its [`Doors`] (the exchange,
//! the manager-service authority route, the retire doors and the verify-enrollment door).

use cotal_core::bundle::MeshBundle;
use cotal_core::trust::{DaemonMaterial, IdpPin};
use cotal_io_fs::discovery;
use cotal_io_http::bearer::BearerIssuer;
use cotal_io_http::face::{Answer, Door, DoorRequest, Face, FaceHandler, StatusCode};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cotal_core::names::SpaceName;
use cotal_io_http::face::PublicFaceSettings;
use tokio::sync::watch;

use std::future::Future;
use std::pin::Pin;

use super::exchange::Exchange;
use super::manager_route::ManagerRoute;
use super::metrics::PlaneMetrics;
use super::retire_doors::RetireDoors;
use super::verify_door::VerifyDoor;
use super::{HostedContext, Readiness};

/// The plane's answers, shared by its faces.
#[derive(Debug)]
pub(super) struct PlaneFaces {
    issuer: String,
    /// The bearer issuer the doors share: `/jwks` publishes its ring as it is now.
    bearers: BearerIssuer,
    /// A hosted plane's assigned context, which `/health` names.
    context: Option<HostedContext>,
    readiness: watch::Receiver<Readiness>,
    metrics: Arc<PlaneMetrics>,
    /// The public face's `/.well-known/cotal-mesh`, set once that face is bound.
    bundle: OnceLock<Value>,
    /// The pinned IdP the bundle tells a client to sign in at.
    idp: IdpPin,
    sentinel_creds: String,
    doors: Box<dyn Doors>,
}

/// The doors a serving plane answers.
pub(super) trait Doors: Send + Sync + std::fmt::Debug {
    fn answer<'a>(
        &'a self,
        request: &'a DoorRequest,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;
}

/// The production doors.
#[derive(Debug)]
pub(super) struct PlaneDoors {
    pub(super) exchange: Exchange,
    pub(super) manager: ManagerRoute,
    pub(super) retire: RetireDoors,
    pub(super) verify: VerifyDoor,
}

impl Doors for PlaneDoors {
    fn answer<'a>(
        &'a self,
        request: &'a DoorRequest,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + 'a>> {
        Box::pin(async move {
            match request.door {
                Door::Exchange => self.exchange.answer(request).await,
                Door::ManagerServiceAuthority => self.manager.answer(request).await,
                Door::InteractiveRetire | Door::ManagedRetire => self.retire.answer(request).await,
                Door::VerifyEnrollment => self.verify.answer(request).await,
            }
        })
    }
}

impl PlaneFaces {
    pub(super) fn new(
        material: &DaemonMaterial,
        bearers: BearerIssuer,
        context: Option<&HostedContext>,
        doors: Box<dyn Doors>,
        readiness: watch::Receiver<Readiness>,
        metrics: Arc<PlaneMetrics>,
    ) -> Result<PlaneFaces, String> {
        Ok(PlaneFaces {
            doors,
            context: context.cloned(),
            issuer: bearers.issuer().to_owned(),
            bearers,
            readiness,
            metrics,
            bundle: OnceLock::new(),
            idp: material.idp().clone(),
            sentinel_creds: material.sentinel_creds().to_owned(),
        })
    }

    /// Builds the discovery bundle ([`MeshBundle`], reference §3.3) once the public face is
    /// bound at `url`: the server clients connect to is the advertised one, else the plane's
    /// own, never with userinfo; `server_tls` says whether the server requires TLS.
    pub(super) fn publish_bundle(
        &self,
        space: &SpaceName,
        server: &str,
        server_tls: bool,
        settings: &PublicFaceSettings,
        url: &str,
    ) {
        let advertised = settings
            .advertised_server
            .clone()
            .unwrap_or_else(|| discovery::redacted(server));
        let bundle = MeshBundle {
            space,
            server: &advertised,
            server_tls,
            idp: &self.idp,
            url,
            agent_provisioning_url: settings.agent_provisioning_url.as_deref(),
            sentinel_creds: &self.sentinel_creds,
        };
        let _ = self.bundle.set(bundle.to_json());
    }
}

impl FaceHandler for PlaneFaces {
    fn health(&self, _face: Face) -> Value {
        let readiness = self.readiness.borrow().clone();
        readiness.health(&self.issuer, self.context.as_ref())
    }

    fn jwks(&self) -> Value {
        self.bearers.ring().jwks()
    }

    /// Served by the public face only, which sets it when it binds.
    fn mesh_bundle(&self) -> Value {
        self.bundle.get().cloned().unwrap_or_else(|| json!({}))
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }

    fn observed(&self, face: Face, path: &'static str, status: StatusCode, elapsed: Duration) {
        self.metrics
            .request(face.name(), path, status.as_u16(), elapsed);
    }

    async fn answer(&self, request: DoorRequest) -> Answer {
        // A plane that stopped serving refuses every operation first, with a copy meant for the
        // agent that asked (the operator's cause is on /health and in the log, reference §2.6).
        let not_ready = self.readiness.borrow().refusal();
        if let Some(refusal) = not_ready {
            return Answer::refusal(request.door, &refusal);
        }
        self.doors.answer(&request).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use cotal_core::error::{EpError, ErrorCode};
    use cotal_core::names::SpaceName;
    use cotal_core::trust::{provision, IdpPin, ProvisionSeeds};
    use cotal_io_http::face::{Door, PeerKey};

    fn faces(readiness: Readiness) -> (PlaneFaces, watch::Sender<Readiness>) {
        let mut entropy = [0u8; ProvisionSeeds::ENTROPY_BYTES];
        for (i, b) in entropy.iter_mut().enumerate() {
            *b = u8::try_from(i % 251).unwrap();
        }
        let root = provision(
            &SpaceName::parse("faces").unwrap(),
            IdpPin::from_url("http://127.0.0.1:4190").unwrap(),
            &ProvisionSeeds::from_entropy(&entropy),
            cotal_core::jwt::UnixSeconds(1_780_000_000),
        )
        .unwrap();
        let (tx, rx) = watch::channel(readiness);
        let faces = PlaneFaces::new(
            &root.daemon,
            BearerIssuer::of_issuer_keys(SpaceName::parse("faces").unwrap(), root.daemon.issuer())
                .unwrap(),
            None,
            Box::new(Reached),
            rx,
            Arc::new(PlaneMetrics::new()),
        )
        .unwrap();
        (faces, tx)
    }

    /// Stands in for the doors: says the request got past the readiness gate.
    #[derive(Debug)]
    struct Reached;

    impl Doors for Reached {
        fn answer<'a>(
            &'a self,
            request: &'a DoorRequest,
        ) -> Pin<Box<dyn Future<Output = Answer> + Send + 'a>> {
            Box::pin(async move {
                Answer::refusal(
                    request.door,
                    &EpError::new(ErrorCode::Unimplemented, "reached the door"),
                )
            })
        }
    }

    fn request() -> DoorRequest {
        DoorRequest {
            face: Face::Loopback,
            door: Door::ManagerServiceAuthority,
            peer: PeerKey::new("127.0.0.1"),
            body: json!({}),
        }
    }

    #[tokio::test]
    async fn a_fenced_plane_refuses_with_the_agent_copy_and_shows_the_operator_copy() {
        let copy = "this auth plane lost its sealed auth-ledger scanner … restart the auth service";
        let (faces, _tx) = faces(Readiness::Unavailable(copy.into()));
        let refused = faces.answer(request()).await;
        assert!(refused.is_refusal());
        let said = refused.body()["error"].as_str().unwrap();
        assert!(said.contains("momentarily unavailable"), "{said}");
        assert!(said.contains("retry"), "{said}");
        assert!(!said.contains("restart the auth service"), "{said}");
        let health = faces.health(Face::Loopback);
        assert_eq!(health["state"], "unavailable");
        assert_eq!(health["cause"], copy);
    }

    #[tokio::test]
    async fn a_draining_plane_refuses_and_a_ready_one_reaches_the_door() {
        let (faces, tx) = faces(Readiness::Draining);
        let said = faces.answer(request()).await.body()["error"].to_string();
        assert!(said.contains("shutting down"), "{said}");
        tx.send_replace(Readiness::Ready);
        let said = faces.answer(request()).await.body()["error"].to_string();
        assert!(said.contains("reached the door"), "{said}");
        assert_eq!(faces.health(Face::Loopback)["state"], "ready");
    }
}
