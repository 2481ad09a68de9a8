//! What the plane answers on its HTTP faces: `/health` with its readiness, `/jwks` with its
//! bearer issuer's keys, and the doors, each of which refuses until its operation is served
//! here (issue 12's routes).

use cotal_core::error::{EpError, ErrorCode};
use cotal_core::trust::DaemonMaterial;
use cotal_io_http::bearer::{KeyRing, SigningKey};
use cotal_io_http::face::{Answer, DoorRequest, Face, FaceHandler, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use super::metrics::PlaneMetrics;
use super::Readiness;

/// The plane's answers, shared by its faces.
#[derive(Debug)]
pub(super) struct PlaneFaces {
    issuer: String,
    jwks: Value,
    readiness: watch::Receiver<Readiness>,
    metrics: Arc<PlaneMetrics>,
}

impl PlaneFaces {
    pub(super) fn new(
        material: &DaemonMaterial,
        readiness: watch::Receiver<Readiness>,
        metrics: Arc<PlaneMetrics>,
    ) -> Result<PlaneFaces, String> {
        let key = SigningKey::from_seed(material.issuer().active().seed())
            .map_err(|e| format!("the issuer key does not load: {}", e.message))?;
        Ok(PlaneFaces {
            issuer: material.issuer().issuer().to_owned(),
            jwks: KeyRing::new(key).jwks(),
            readiness,
            metrics,
        })
    }
}

impl FaceHandler for PlaneFaces {
    fn health(&self, _face: Face) -> Value {
        let readiness = self.readiness.borrow().clone();
        match &readiness {
            Readiness::Unavailable(cause) => json!({
                "ok": true, "issuer": self.issuer, "state": readiness.as_str(), "cause": cause,
            }),
            _ => json!({"ok": true, "issuer": self.issuer, "state": readiness.as_str()}),
        }
    }

    fn jwks(&self) -> Value {
        self.jwks.clone()
    }

    /// Served only by a public face, which this plane does not open yet.
    fn mesh_bundle(&self) -> Value {
        json!({})
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }

    fn observed(&self, face: Face, path: &'static str, status: StatusCode, elapsed: Duration) {
        self.metrics
            .request(face.name(), path, status.as_u16(), elapsed);
    }

    async fn answer(&self, request: DoorRequest) -> Answer {
        Answer::refusal(
            request.door,
            &EpError::new(
                ErrorCode::Unimplemented,
                format!("{} is not served by this plane yet", request.door.path()),
            ),
        )
    }
}
