//! One request through a face: route, guards, budgets, handler, reply.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::answer::Answer;
use super::body::read_json_body;
use super::budget::{
    lock, Clock, RefusedBudget, RollingWindow, BAD_CAP_PER_MIN, TOO_MANY_REFUSALS,
};
use super::capability::{missing_capability, Capability, TOO_MANY_BAD_CAPS};
use super::guard::{
    is_browser, is_json_content_type, method_refusal, BROWSER_ORIGIN_REFUSED, NOT_JSON,
};
use super::handler::{DoorRequest, FaceHandler};
use super::peer::{peer_key, PeerKey};
use super::reply::{self, Reply};
use super::routes::{request_target, Door, Face, Route};
use super::shares::{ShareRefusal, Shares};
use crate::bearer::JWKS_CACHE_CONTROL;

/// 503 when a face already holds its maximum of in-flight requests.
pub const BUSY: &str = "busy - retry shortly";
/// 429 when the requesting peer already holds its own share of the in-flight requests.
pub const PEER_BUSY: &str = "too many requests in flight from this peer - retry shortly";
/// 503 when a request outlives its face's deadline.
pub const DEADLINE_EXCEEDED: &str = "request deadline exceeded";

/// How a face proves its callers: the loopback capability with its invalid-capability window.
#[derive(Debug)]
pub(crate) struct CapabilityGate {
    pub(crate) capability: Capability,
    pub(crate) bad_caps: Mutex<RollingWindow>,
}

/// A face's admission control, the one both faces run with their own limits: in-flight
/// shares (per face and, on the public face, per peer) and the per-request deadline.
#[derive(Debug)]
pub(crate) struct Admission {
    pub(crate) in_flight: Shares,
    pub(crate) deadline: Duration,
}

/// Everything one face needs to answer a request. Never shared between faces.
#[derive(Debug)]
pub(crate) struct FaceState<H> {
    pub(crate) face: Face,
    pub(crate) handler: Arc<H>,
    pub(crate) clock: Arc<dyn Clock>,
    /// `Some` on the loopback face.
    pub(crate) gate: Option<CapabilityGate>,
    pub(crate) refused: RefusedBudget,
    /// Whether the last `X-Forwarded-For` hop names the peer (public face only).
    pub(crate) trusted_proxy: bool,
    pub(crate) admission: Admission,
}

/// Answers one request. Never fails: every outcome is a JSON reply.
pub(crate) async fn serve<H: FaceHandler>(
    state: Arc<FaceState<H>>,
    remote: SocketAddr,
    request: Request<Incoming>,
) -> Result<Reply, Infallible> {
    let admission = &state.admission;
    let peer = peer_key(request.headers(), state.trusted_proxy, remote);
    // The in-flight caps: a peer's work stays within its own share and the face's within its
    // cap, whatever the source; a full share is answered at once instead of queueing.
    let slot = match admission.in_flight.take(&peer) {
        Ok(slot) => slot,
        Err(ShareRefusal::Peer) => {
            tracing::debug!(face = %state.face, peer = %peer, "refused a request: {PEER_BUSY}");
            return Ok(reply::error(StatusCode::TOO_MANY_REQUESTS, PEER_BUSY));
        }
        Err(ShareRefusal::Face) => {
            tracing::warn!(face = %state.face, "refused a request: {BUSY}");
            return Ok(reply::error(StatusCode::SERVICE_UNAVAILABLE, BUSY));
        }
    };
    // The hard deadline: a stalled handler or a slow-dripping body is answered and cut, never
    // held. Dropping the timed-out future cancels whatever it was waiting on.
    let reply = match tokio::time::timeout(admission.deadline, route(&state, peer, request)).await {
        Ok(reply) => reply,
        Err(_) => {
            tracing::warn!(face = %state.face, "cut a request: {DEADLINE_EXCEEDED}");
            reply::closing(reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                DEADLINE_EXCEEDED,
            ))
        }
    };
    Ok(reply::holding(reply, slot))
}

/// The OpenMetrics text exposition's content type.
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Answers and reports the answer to the handler's request metrics.
async fn route<H: FaceHandler>(
    state: &FaceState<H>,
    peer: PeerKey,
    request: Request<Incoming>,
) -> Reply {
    let started = std::time::Instant::now();
    let found = state.face.lookup(&request_target(request.uri()));
    let reply = answer(state, found, peer, request).await;
    state.handler.observed(
        state.face,
        found.map_or("unknown", Route::path),
        reply.status(),
        started.elapsed(),
    );
    reply
}

async fn answer<H: FaceHandler>(
    state: &FaceState<H>,
    found: Option<Route>,
    peer: PeerKey,
    request: Request<Incoming>,
) -> Reply {
    let face = state.face;
    let Some(route) = found else {
        return reply::error(StatusCode::NOT_FOUND, &face.unknown_path_message());
    };
    if let Some(refusal) = method_refusal(route.methods(face), request.method()) {
        return reply::error(StatusCode::METHOD_NOT_ALLOWED, refusal);
    }
    match route {
        Route::Health => reply::json(StatusCode::OK, &state.handler.health(face)),
        Route::Jwks => reply::with_cache_control(
            reply::json(StatusCode::OK, &state.handler.jwks()),
            JWKS_CACHE_CONTROL,
        ),
        Route::MeshBundle => reply::json(StatusCode::OK, &state.handler.mesh_bundle()),
        Route::Metrics => reply::text(
            StatusCode::OK,
            state.handler.metrics(),
            METRICS_CONTENT_TYPE,
        ),
        Route::Door(door) => through_door(state, door, peer, request).await,
    }
}

/// A POST route, in the reference's order: (method, already checked) `Origin`, content type,
/// capability, throttle evaluation, body, handler, throttle enforcement.
async fn through_door<H: FaceHandler>(
    state: &FaceState<H>,
    door: Door,
    peer: PeerKey,
    request: Request<Incoming>,
) -> Reply {
    let headers = request.headers();
    if is_browser(headers) {
        return reply::error(StatusCode::FORBIDDEN, BROWSER_ORIGIN_REFUSED);
    }
    if !is_json_content_type(headers) {
        return reply::error(StatusCode::UNSUPPORTED_MEDIA_TYPE, NOT_JSON);
    }
    if let Some(gate) = &state.gate {
        if !gate.capability.authorizes(headers) {
            // Audited and throttled in its own window, before anything downstream runs. The
            // window is one per face, shared by every capability door: a cap guesser gains
            // nothing by spreading its guesses. The presented value is never logged: it may be
            // a near miss of the real one.
            let past_limit = lock(&gate.bad_caps).record_exceeds(state.clock.now());
            tracing::warn!(
                face = %state.face,
                door = %door,
                "auth-service: rejected a request with a missing/invalid capability"
            );
            if past_limit {
                return reply::error(StatusCode::TOO_MANY_REQUESTS, TOO_MANY_BAD_CAPS);
            }
            return reply::error(StatusCode::UNAUTHORIZED, missing_capability(door));
        }
    }
    // #802: evaluated now, before the body is read, but enforced only if the answer turns out
    // to be a refusal — a throttled caller with a good credential is not probing.
    let throttled = door.budgeted() && state.refused.is_throttled(&peer, state.clock.now());
    let body = match read_json_body(request.into_body()).await {
        Ok(body) => body,
        Err(refusal) => return reply::error(refusal.status(), refusal.message()),
    };
    let answer: Answer = state
        .handler
        .answer(DoorRequest {
            face: state.face,
            door,
            peer: peer.clone(),
            body,
        })
        .await;
    if door.budgeted() && answer.is_refusal() {
        // Recorded before the 429/specific-reason decision, as in the reference.
        state.refused.record_refusal(&peer, state.clock.now());
        if throttled {
            tracing::info!(face = %state.face, door = %door, peer = %peer, "throttled a refusal");
            return reply::error(StatusCode::TOO_MANY_REQUESTS, TOO_MANY_REFUSALS);
        }
    }
    let (status, body) = answer.into_parts();
    reply::json(status, &body)
}

/// The invalid-capability window of a fresh loopback face.
pub(crate) fn bad_cap_window() -> Mutex<RollingWindow> {
    Mutex::new(RollingWindow::new(BAD_CAP_PER_MIN))
}
