//! The seam between the faces and the plane: the daemon injects a [`FaceHandler`], the faces
//! call it only with requests that passed every HTTP guard.

use std::future::Future;
use std::time::Duration;

use hyper::StatusCode;

use serde_json::Value;

use super::answer::Answer;
use super::peer::PeerKey;
use super::routes::{Door, Face};

/// One guarded POST request: it passed the method, `Origin`, content-type, capability (on
/// loopback) and body-size checks, and its body parsed as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct DoorRequest {
    /// The face it arrived on (the exchange's policy differs per face).
    pub face: Face,
    /// The door it was sent to.
    pub door: Door,
    /// Who sent it: the socket address, or on a public face with a trusted proxy the last
    /// `X-Forwarded-For` hop. For logs; the budgets are applied by the face.
    pub peer: PeerKey,
    /// The parsed body: any JSON value (`null` included); its shape is the handler's to check.
    pub body: Value,
}

/// What the plane supplies to the faces. It holds the authority logic; the faces hold none.
pub trait FaceHandler: Send + Sync + 'static {
    /// The `200` body of `/health` on `face`: at least `{"ok": true, "issuer": …}`; the daemon
    /// may add its readiness state.
    fn health(&self, face: Face) -> Value;

    /// The `200` body of `GET /jwks`: the issuer's public key set (served with
    /// `cache-control: max-age=300`).
    fn jwks(&self) -> Value;

    /// The `200` body of `GET /.well-known/cotal-mesh` on the public face: the discovery bundle
    /// (finalised by the daemon once the public listener is bound).
    fn mesh_bundle(&self) -> Value;

    /// The body of `GET /metrics` on the loopback face, in the OpenMetrics text format.
    fn metrics(&self) -> String;

    /// Called once per answered request with the route's path (`"unknown"` for a path the
    /// face does not serve), the status and how long the answer took, for the request metrics.
    fn observed(&self, face: Face, path: &'static str, status: StatusCode, elapsed: Duration);

    /// Answers one guarded door request. The answer must say whether it is a refusal
    /// ([`Answer::refused`], [`Answer::refusal`]) so the face can apply its budgets.
    fn answer(&self, request: DoorRequest) -> impl Future<Output = Answer> + Send;
}
