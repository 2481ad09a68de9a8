//! The plane's two HTTP faces (reference §3.1–§3.4, §3.11), on hyper 1 over tokio.
//!
//! * The **loopback face** ([`start_loopback`]) is always on: `/health`, `/jwks`, the token
//!   exchange, the manager-service authority route and the three host/operator doors, the POST
//!   routes behind the per-start [`Capability`] and the loopback refusal windows, with its own
//!   in-flight cap and per-request deadline.
//! * The **public face** ([`start_public`]) is optional: `/health`, `/jwks`, `/exchange`,
//!   `/manager-service-authority` and the discovery bundle, no capability, refusal budgets per
//!   peer, in-flight and connection caps per peer and per face, and a per-request deadline. Its state is never shared with loopback.
//!
//! Both bind 127.0.0.1 only: TLS terminates at the operator's reverse proxy.
//!
//! The faces hold **no authority logic**. A POST route checks method, `Origin`, content type,
//! capability and body size, parses the JSON body and hands it to the injected [`FaceHandler`];
//! the handler's [`Answer`] says whether it is a refusal, and the face turns it into HTTP
//! (applying the #802 throttle rule of [`budget`]). Every reply is `application/json`, every
//! error `{"error": "<sentence>"}`, and no CORS header is ever sent.
//!
//! The pure pieces — [`routes`], [`guard`], [`budget`], [`shares`], [`peer`], [`config`],
//! [`capability`], [`answer`] — are plain functions and structs, testable without a socket;
//! [`body`], `dispatch` and [`server`] are the async edge; [`probe`] reads a running plane's `/health`.

pub mod answer;
pub mod body;
pub mod budget;
pub mod capability;
pub mod config;
mod dispatch;
pub mod exchange;
pub mod guard;
pub mod handler;
pub mod peer;
pub mod probe;
mod reply;
pub mod routes;
pub mod server;
pub mod shares;

pub use answer::Answer;
pub use budget::{Clock, ManualClock, SystemClock};
pub use capability::{Capability, CapabilityError};
pub use config::{check_public_face, FaceConfigError, PublicFaceFlags, PublicFaceSettings};
pub use dispatch::{BUSY, DEADLINE_EXCEEDED, PEER_BUSY};
pub use handler::{DoorRequest, FaceHandler};
/// The status type of [`FaceHandler::observed`].
pub use hyper::StatusCode;
pub use peer::PeerKey;
pub use routes::{Door, Face, Route};
pub use server::{
    connection_ceiling, raise_fd_limit, start_faces, start_loopback, start_public, FaceHandle,
    LoopbackConfig, PublicConfig, CLOSE_GRACE, LOOPBACK_DEADLINE, LOOPBACK_MAX_CONNECTIONS,
    LOOPBACK_MAX_IN_FLIGHT, PEER_TOO_MANY_CONNECTIONS, PUBLIC_DEADLINE, PUBLIC_MAX_CONNECTIONS,
    PUBLIC_MAX_IN_FLIGHT, PUBLIC_PEER_MAX_CONNECTIONS, PUBLIC_PEER_MAX_IN_FLIGHT, RESERVED_FDS,
    TOO_MANY_CONNECTIONS,
};
