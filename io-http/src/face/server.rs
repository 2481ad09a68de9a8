//! Starting a face on 127.0.0.1, and closing it gracefully.
//!
//! Each accepted connection is served by hyper's HTTP/1.1 connection driver on its own task.
//! [`FaceHandle::close`] stops admitting (the listener is dropped, so new connections are
//! refused), asks every connection to finish its in-flight request and close, waits up to the
//! grace period, then cuts whatever is left.
//!
//! hyper's own 30 s limit on reading a request's headers applies on both faces; each face's
//! per-request deadline starts once the headers are in, so a client that drips its body (or
//! never finishes it) is answered and cut at the deadline instead of holding its slot.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::budget::{Clock, RefusedBudget, SystemClock};
use super::capability::Capability;
use super::dispatch::{self, Admission, CapabilityGate, FaceState};
use super::handler::FaceHandler;
use super::routes::Face;

/// The public face's cap on concurrent requests.
pub const PUBLIC_MAX_IN_FLIGHT: usize = 64;
/// The public face's per-request deadline.
pub const PUBLIC_DEADLINE: Duration = Duration::from_secs(10);
/// The loopback face's cap on concurrent requests: its callers are this host's own processes,
/// so it is wider than the public one, but a local client that opens request after request
/// and never finishes them still cannot grow the plane's work without bound.
pub const LOOPBACK_MAX_IN_FLIGHT: usize = 256;
/// The loopback face's per-request deadline. Longer than the public one: a loopback door may
/// legitimately wait that long on the plane's own work (a retire door waits up to 30 s for its
/// retirement flight before it answers), and the deadline must cut only a stalled request.
pub const LOOPBACK_DEADLINE: Duration = Duration::from_secs(60);
/// How long a production close waits for in-flight requests before cutting them.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// How long `accept` backs off after an error (e.g. out of file descriptors), so a persistent
/// failure does not spin the accept loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The loopback face's configuration.
#[derive(Debug)]
pub struct LoopbackConfig {
    /// The port on 127.0.0.1; 0 asks the OS for an ephemeral one.
    pub port: u16,
    /// This start's capability (see [`Capability::generate`]).
    pub capability: Capability,
    /// Concurrent requests admitted before answering 503 ([`LOOPBACK_MAX_IN_FLIGHT`]).
    pub max_in_flight: usize,
    /// Per-request deadline ([`LOOPBACK_DEADLINE`]).
    pub deadline: Duration,
    /// The clock of the refusal windows.
    pub clock: Arc<dyn Clock>,
}

impl LoopbackConfig {
    /// A loopback face on `port` guarded by `capability`, with the production limits, on the
    /// system clock.
    pub fn new(port: u16, capability: Capability) -> LoopbackConfig {
        LoopbackConfig {
            port,
            capability,
            max_in_flight: LOOPBACK_MAX_IN_FLIGHT,
            deadline: LOOPBACK_DEADLINE,
            clock: Arc::new(SystemClock),
        }
    }
}

/// The public face's configuration.
#[derive(Debug, Clone)]
pub struct PublicConfig {
    /// The port on 127.0.0.1 (the reverse proxy forwards to it); 0 asks for an ephemeral one.
    pub port: u16,
    /// Whether the last `X-Forwarded-For` hop names the peer.
    pub trusted_proxy: bool,
    /// Concurrent requests admitted before answering 503 ([`PUBLIC_MAX_IN_FLIGHT`]).
    pub max_in_flight: usize,
    /// Per-request deadline ([`PUBLIC_DEADLINE`]).
    pub deadline: Duration,
    /// The clock of the per-peer budgets.
    pub clock: Arc<dyn Clock>,
}

impl PublicConfig {
    /// A public face on `port` with the production limits, on the system clock.
    pub fn new(port: u16, trusted_proxy: bool) -> PublicConfig {
        PublicConfig {
            port,
            trusted_proxy,
            max_in_flight: PUBLIC_MAX_IN_FLIGHT,
            deadline: PUBLIC_DEADLINE,
            clock: Arc::new(SystemClock),
        }
    }
}

/// Binds the loopback face on 127.0.0.1 and serves it until [`FaceHandle::close`].
pub async fn start_loopback<H: FaceHandler>(
    config: LoopbackConfig,
    handler: Arc<H>,
) -> io::Result<FaceHandle> {
    let state = FaceState {
        face: Face::Loopback,
        handler,
        clock: config.clock,
        gate: Some(CapabilityGate {
            capability: config.capability,
            bad_caps: dispatch::bad_cap_window(),
        }),
        refused: RefusedBudget::loopback(),
        trusted_proxy: false,
        admission: Admission::new(config.max_in_flight, config.deadline),
    };
    start(config.port, state).await
}

/// Binds the public face on 127.0.0.1 and serves it until [`FaceHandle::close`].
pub async fn start_public<H: FaceHandler>(
    config: PublicConfig,
    handler: Arc<H>,
) -> io::Result<FaceHandle> {
    let state = FaceState {
        face: Face::Public,
        handler,
        clock: config.clock,
        gate: None,
        refused: RefusedBudget::public(),
        trusted_proxy: config.trusted_proxy,
        admission: Admission::new(config.max_in_flight, config.deadline),
    };
    start(config.port, state).await
}

/// A running face. Close it with [`FaceHandle::close`]; dropping the handle instead cuts every
/// connection at once.
#[derive(Debug)]
pub struct FaceHandle {
    face: Face,
    local_addr: SocketAddr,
    /// `Some(cut-off)` once a close was asked for. Dropping the sender (the handle) cuts at once.
    close: watch::Sender<Option<Instant>>,
    /// Becomes `true` when the accept loop and every connection are gone.
    stopped: watch::Receiver<bool>,
}

impl FaceHandle {
    /// Which face this is.
    pub fn face(&self) -> Face {
        self.face
    }

    /// The bound address (127.0.0.1 and the port, the OS's choice when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops admitting, lets in-flight requests finish for up to `grace`, then cuts the rest;
    /// returns once the face is fully down. Idempotent: a later call keeps the first call's
    /// cut-off and just waits for the same end.
    pub async fn close(&self, grace: Duration) {
        let cut_off = Instant::now() + grace;
        self.close.send_if_modified(|asked| {
            if asked.is_some() {
                return false;
            }
            *asked = Some(cut_off);
            true
        });
        let mut stopped = self.stopped.clone();
        // An error means the server task is gone already, which is the end we wait for.
        let _ = stopped.wait_for(|down| *down).await;
    }
}

async fn start<H: FaceHandler>(port: u16, state: FaceState<H>) -> io::Result<FaceHandle> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
    let local_addr = listener.local_addr()?;
    let face = state.face;
    let (close_tx, close_rx) = watch::channel(None);
    let (stopped_tx, stopped_rx) = watch::channel(false);
    tokio::spawn(accept_loop(listener, Arc::new(state), close_rx, stopped_tx));
    tracing::info!(face = %face, addr = %local_addr, "face listening");
    Ok(FaceHandle {
        face,
        local_addr,
        close: close_tx,
        stopped: stopped_rx,
    })
}

async fn accept_loop<H: FaceHandler>(
    listener: TcpListener,
    state: Arc<FaceState<H>>,
    mut close: watch::Receiver<Option<Instant>>,
    stopped: watch::Sender<bool>,
) {
    let mut connections = JoinSet::new();
    // Each connection watches the same close signal; this copy is only cloned from.
    let connection_close = close.clone();
    let cut_off = loop {
        tokio::select! {
            cut_off = close_asked(&mut close) => break cut_off,
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    connections.spawn(serve_connection(
                        stream,
                        remote,
                        Arc::clone(&state),
                        connection_close.clone(),
                    ));
                }
                Err(e) => {
                    tracing::warn!(face = %state.face, "accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            // Reap finished connections so the set does not grow with the face's lifetime.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    };
    // Stop admitting: new connection attempts are refused from here on.
    drop(listener);
    let drained = tokio::time::timeout_at(cut_off, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            face = %state.face,
            cut = connections.len(),
            "close grace over: cutting the remaining connections"
        );
        connections.shutdown().await;
    }
    tracing::info!(face = %state.face, "face closed");
    stopped.send_replace(true);
}

async fn serve_connection<H: FaceHandler>(
    stream: TcpStream,
    remote: SocketAddr,
    state: Arc<FaceState<H>>,
    mut close: watch::Receiver<Option<Instant>>,
) {
    // Small JSON replies: send each at once rather than waiting to coalesce.
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| dispatch::serve(Arc::clone(&state), remote, request));
    let mut builder = http1::Builder::new();
    // The timer backs hyper's default 30 s limit on reading a request's headers.
    builder.timer(TokioTimer::new());
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let outcome = tokio::select! {
        outcome = connection.as_mut() => outcome,
        _ = close_asked(&mut close) => {
            // Finish the request in flight (if any), then close; an idle one closes at once.
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = outcome {
        // A client that went away mid-request; nothing to answer.
        tracing::debug!(peer = %remote, "connection ended with an error: {e}");
    }
}

/// Resolves with the close cut-off once a close is asked for; a dropped handle cuts at once.
async fn close_asked(close: &mut watch::Receiver<Option<Instant>>) -> Instant {
    match close.wait_for(Option::is_some).await {
        Ok(asked) => asked.unwrap_or_else(Instant::now),
        Err(_) => Instant::now(),
    }
}
