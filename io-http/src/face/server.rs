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
//!
//! Each face caps its open connections, and the public face caps each peer's too (see
//! [`shares`](super::shares)): a connection over a cap is answered with one short refusal
//! and closed at once, before hyper reads anything, so a flood of idle sockets costs the plane
//! no more than the caps allow. [`FaceLimits::within_fd_limit`] keeps both faces' connections
//! under the process's file-descriptor limit with room to spare for the callout, which opens
//! the ledger on every decision.

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
use super::peer::PeerKey;
use super::routes::Face;
use super::shares::{Share, ShareCaps, ShareRefusal, Shares};

/// The public face's cap on concurrent requests.
pub const PUBLIC_MAX_IN_FLIGHT: usize = 64;
/// One peer's share of the public face's concurrent requests: an eighth, so a peer that holds
/// every request it may open (slow bodies, say) leaves the face to everyone else.
pub const PUBLIC_PEER_MAX_IN_FLIGHT: usize = 8;
/// The public face's cap on open connections.
pub const PUBLIC_MAX_CONNECTIONS: usize = 1024;
/// One peer's share of the public face's open connections. Behind a trusted proxy every
/// connection comes from the proxy, so this cap is not applied there (the proxy's own
/// per-client limits are, and the in-flight share still follows the forwarded peer).
pub const PUBLIC_PEER_MAX_CONNECTIONS: usize = 64;
/// The loopback face's cap on open connections (its callers are this host's processes, all
/// one peer, so it has no per-peer cap).
pub const LOOPBACK_MAX_CONNECTIONS: usize = 1024;
/// File descriptors kept out of the faces' reach whatever the limit: the NATS connections,
/// the callout's ledger reads, the state files and the logs need them while the faces are
/// full.
pub const RESERVED_FDS: u64 = 256;
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
    /// Open connections admitted before closing new ones ([`LOOPBACK_MAX_CONNECTIONS`]).
    pub max_connections: usize,
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
            max_connections: LOOPBACK_MAX_CONNECTIONS,
            deadline: LOOPBACK_DEADLINE,
            clock: Arc::new(SystemClock),
        }
    }
}

/// The most connections one face may hold under a process limit of `fd_limit` descriptors:
/// half of what [`RESERVED_FDS`] leaves, so the two faces together stay below the limit and
/// a process whose faces are full still has descriptors for the callout's decisions.
pub fn connection_ceiling(fd_limit: u64) -> usize {
    usize::try_from(fd_limit.saturating_sub(RESERVED_FDS) / 2)
        .unwrap_or(usize::MAX)
        .max(1)
}

impl LoopbackConfig {
    /// This configuration with its connection cap lowered to [`connection_ceiling`] of
    /// `fd_limit` when that is lower.
    pub fn within_fd_limit(mut self, fd_limit: u64) -> LoopbackConfig {
        self.max_connections = self.max_connections.min(connection_ceiling(fd_limit));
        self
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
    /// One peer's concurrent requests before answering it 429 ([`PUBLIC_PEER_MAX_IN_FLIGHT`]).
    pub peer_max_in_flight: usize,
    /// Open connections admitted before closing new ones ([`PUBLIC_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// One peer's open connections before closing its new ones
    /// ([`PUBLIC_PEER_MAX_CONNECTIONS`]; not applied with `trusted_proxy`).
    pub peer_max_connections: usize,
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
            peer_max_in_flight: PUBLIC_PEER_MAX_IN_FLIGHT,
            max_connections: PUBLIC_MAX_CONNECTIONS,
            peer_max_connections: PUBLIC_PEER_MAX_CONNECTIONS,
            deadline: PUBLIC_DEADLINE,
            clock: Arc::new(SystemClock),
        }
    }
}

impl PublicConfig {
    /// This configuration with its connection caps lowered to [`connection_ceiling`] of
    /// `fd_limit` when that is lower.
    pub fn within_fd_limit(mut self, fd_limit: u64) -> PublicConfig {
        let ceiling = connection_ceiling(fd_limit);
        self.max_connections = self.max_connections.min(ceiling);
        self.peer_max_connections = self.peer_max_connections.min(ceiling);
        self
    }
}

/// Raises the process's soft file-descriptor limit to its hard one (what the operator allows;
/// the soft default of 1,024 is a historical leftover) and returns the limit the faces' caps
/// must stay under. A limit that cannot be raised is kept as it is: the caps then follow it.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum) {
        if current < maximum
            && setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(maximum),
                    maximum: Some(maximum),
                },
            )
            .is_ok()
        {
            return maximum;
        }
    }
    limit.current.unwrap_or(u64::MAX)
}

/// Binds a plane's faces: the loopback one and, when asked, the public one, each with its
/// connection caps under the process's descriptor limit, raised first ([`raise_fd_limit`]). A
/// public face that cannot bind closes the loopback one first. The error is one sentence
/// naming the face and its port.
pub async fn start_faces<H: FaceHandler>(
    loopback: LoopbackConfig,
    public: Option<PublicConfig>,
    handler: Arc<H>,
) -> Result<(FaceHandle, Option<FaceHandle>), String> {
    let fd_limit = raise_fd_limit();
    let port = loopback.port;
    let loopback = start_loopback(loopback.within_fd_limit(fd_limit), Arc::clone(&handler))
        .await
        .map_err(|e| format!("cannot bind the loopback face on 127.0.0.1:{port}: {e}"))?;
    let Some(public) = public else {
        return Ok((loopback, None));
    };
    let port = public.port;
    match start_public(public.within_fd_limit(fd_limit), handler).await {
        Ok(public) => Ok((loopback, Some(public))),
        Err(e) => {
            loopback.close(CLOSE_GRACE).await;
            Err(format!(
                "cannot bind the public face on 127.0.0.1:{port}: {e}"
            ))
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
        admission: Admission {
            in_flight: Shares::new(ShareCaps {
                face: config.max_in_flight,
                peer: None,
            }),
            deadline: config.deadline,
        },
    };
    let connections = Shares::new(ShareCaps {
        face: config.max_connections,
        peer: None,
    });
    start(config.port, state, connections).await
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
        admission: Admission {
            in_flight: Shares::new(ShareCaps {
                face: config.max_in_flight,
                peer: Some(config.peer_max_in_flight),
            }),
            deadline: config.deadline,
        },
    };
    let connections = Shares::new(ShareCaps {
        face: config.max_connections,
        peer: (!config.trusted_proxy).then_some(config.peer_max_connections),
    });
    start(config.port, state, connections).await
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

async fn start<H: FaceHandler>(
    port: u16,
    state: FaceState<H>,
    connections: Shares,
) -> io::Result<FaceHandle> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
    let local_addr = listener.local_addr()?;
    let face = state.face;
    let (close_tx, close_rx) = watch::channel(None);
    let (stopped_tx, stopped_rx) = watch::channel(false);
    tokio::spawn(accept_loop(
        listener,
        Arc::new(state),
        connections,
        close_rx,
        stopped_tx,
    ));
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
    shares: Shares,
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
                Ok((stream, remote)) => match shares.take(&PeerKey::from_socket(remote)) {
                    Ok(share) => {
                        connections.spawn(serve_connection(
                            stream,
                            remote,
                            share,
                            Arc::clone(&state),
                            connection_close.clone(),
                        ));
                    }
                    Err(refusal) => refuse_connection(state.face, stream, remote, refusal),
                },
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

/// 503 sentence for a connection over the face's cap.
pub const TOO_MANY_CONNECTIONS: &str = "too many connections - retry shortly";
/// 429 sentence for a connection over its peer's cap.
pub const PEER_TOO_MANY_CONNECTIONS: &str = "too many connections from this peer - retry shortly";

/// Answers a connection over a cap with one short refusal, written only if the socket can take
/// it at once (the accept loop never waits on a refused peer), and closes it by dropping it.
fn refuse_connection(face: Face, stream: TcpStream, remote: SocketAddr, refusal: ShareRefusal) {
    let (status, sentence) = match refusal {
        ShareRefusal::Peer => ("429 Too Many Requests", PEER_TOO_MANY_CONNECTIONS),
        ShareRefusal::Face => ("503 Service Unavailable", TOO_MANY_CONNECTIONS),
    };
    let body = super::answer::error_body(sentence).to_string();
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    // Best effort: the peer may already be gone, or its buffer full; either way it is closed.
    // Written on the plain (still non-blocking) socket: tokio's own `try_write` refuses until
    // the reactor has reported the fresh socket writable, which it has not yet.
    if let Ok(mut stream) = stream.into_std() {
        let _ = std::io::Write::write(&mut stream, response.as_bytes());
    }
    tracing::debug!(face = %face, peer = %remote.ip(), "closed a connection: {sentence}");
}

async fn serve_connection<H: FaceHandler>(
    stream: TcpStream,
    remote: SocketAddr,
    // Held for as long as the connection is served, and given back however it ends.
    _share: Share,
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
