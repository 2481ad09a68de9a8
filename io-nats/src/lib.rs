//! `cotal-io-nats`: executes the core's effects on NATS JetStream (DESIGN §2).
//!
//! * [`shape`] — the JetStream shape of each per-space store (spec-fence-rules §2.1, F7, F10):
//!   what the adapter creates and what every bind verifies.
//! * [`space`] — [`Space`]: one space's stores bound once on one connection, and every core
//!   [`KvRequest`](cotal_core::kv::KvRequest) executed on them with leader-served reads,
//!   revision-pinned publishes and the outcome mapping of DESIGN §3 (CAS lost, unavailable,
//!   ambiguous). Round trips are documented there and counted.
//! * [`host`] — the host fence: [`host::await_host_fence`] (and [`host::hold_fence`], which
//!   outlives failed reads up to a bound), woken at once by this space's own gate writes and by
//!   polling for everyone else's.
//! * [`authority`] — [`AuthorityClient`]: the plane's self-minted, labelled connections, renewed
//!   at half-life on a fresh connection without dropping in-flight work, and
//!   [`authority::connect_with_creds`] for the callout connection.
//! * [`dial`] — [`Dial`]: the server URLs and the TLS material every connection applies.
//! * [`callout`] — the auth callout service: [`callout::serve`] answers the broker's sealed
//!   authorization requests through an [`callout::Authorize`] implementation.
//! * [`journal`] — [`RunJournals`]: a run's journal walked leader-served off its one subject,
//!   and [`journal::read_journal_checkpoint`], the checkpoint an answering run operator
//!   settles (the journal's pause at the step, combined with the pause's status record);
//! * [`driver`] — the async driver: any core machine run against a [`Space`], evictions and
//!   liveness probes answered by injectable async closures (fail-closed by default);
//! * [`liveness`] — [`liveness::Oracle`]: holder liveness from the servers' own connection
//!   listings and verified eviction by the system account's kick, the production prober and
//!   evictor.
//! * [`ledger`] — [`KvActors`]: the actor ledger in the space's replicated bucket, core's one
//!   ledger implementation over leader-served reads and revision-pinned writes.
//! * [`observed`] — [`RunRequestObserver`]: the issuing host's one-shot observations of the
//!   served run requests (SPEC §14.8), exact at each take by a round trip through the server.
//! * [`wiring`] — a [`NatsWorld`] set up in one expression (scanner, oracle, routes, hook) and a
//!   script run to its end.
//! * [`high_water`] — the authority streams' last sequences read and checked against a start's
//!   high-water marks (`cotal_core::high_water`).
//! * [`self_registration`] — the plane's self-registration run stage by stage
//!   (`cotal_core::self_registration`).

pub mod authority;
pub mod callout;
pub mod dial;
pub mod driver;
pub mod durables;
pub mod embedded;
pub mod flights;
pub mod follow;
pub mod high_water;
pub mod host;
pub mod journal;
#[cfg(feature = "kill-points")]
pub mod kill_point;
pub mod ledger;
pub mod liveness;
pub mod observed;
pub mod rail_server;
pub mod reaper;
pub mod self_registration;
pub mod shape;
pub mod space;
pub mod wiring;

pub use authority::{AuthorityClient, DataAccountSigner};
pub use dial::{Dial, TlsSettings};
pub use driver::{drive, Evictor, NatsWorld, PlaneProber, Prober};
pub use journal::RunJournals;
pub use ledger::KvActors;
pub use observed::RunRequestObserver;
pub use shape::{Replicas, StoreLayout};
pub use space::{Bind, SendHook, SendPhase, Space, SpaceOptions, StoreSet};

/// The client this adapter is built on, for callers that need the same version (tests, the
/// daemon's connection options).
pub use async_nats;
