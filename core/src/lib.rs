//! `cotal-core`: the pure, deterministic heart of the Cotal authority plane.
//!
//! Nothing here performs I/O, reads a clock or draws randomness: time and entropy are inputs,
//! and every authority operation is a [`machine::Machine`] that emits [`machine::Effect`]s and
//! advances only when handed an [`machine::Observation`]. The same machines run under the NATS
//! driver, the synchronous in-memory [`driver`] and the simulator.
//!
//! Modules, by domain:
//! * [`names`] — endpoint names, lifecycle tokens, owners (one [`names::DerivedOwner`]),
//!   principals, bucket names, and the only key builders ([`names::keys`]);
//! * [`wire`] — the closed-object check and the byte-exact row writer every schema shares;
//! * [`gate`], [`ledger`], [`repair`] — the auth-bucket rows, byte-exact;
//! * [`canon`] — RFC 8785 canonical JSON and content digests;
//! * [`kv`] — the KV request set, its typed outcomes, the one ambiguous-write settle
//!   ([`kv::settle`]) and the NATS-faithful in-memory model;
//! * [`machine`], [`driver`] — the sans-IO protocol and a synchronous driver;
//! * [`issuance`], [`barrier`] — the mint fence and the barrier's gate operations;
//! * [`contract`] — contract artifacts, cluster manifests and cluster documents;
//! * [`service`] — service spec/status records and the records-bucket CAS helpers;
//! * [`govern`] — the endpoint governance head and its registration slot;
//! * [`authority`] — name authority: who may register which endpoint name;
//! * [`registration`] — the registration ceremony and its recovery;
//! * [`serving`] — serve-grant authorization and register-to-READY;
//! * [`endpoint_rail`] — the serving side of a targeted endpoint command: subject, envelope,
//!   reply;
//! * [`deregistration`] — status-then-spec removal that keeps the gate;
//! * [`reconcile`] — liveness-guarded repair of a frozen registration gate;
//! * [`rollback`] — the high-water mark that detects a rolled-back gate;
//! * [`lifecycle`] — agent lifecycles: the alias head, the uid reservation and the agent gate,
//!   the activation saga, the root credential, the connect-time credential check, the
//!   retirement barrier with its control-rail command, and the boot's resume of open ones;
//! * [`plane_claim`] — the `plane` row: one plane per space, reclaimed only from a dead plane;
//! * [`standby`] — which live plane a standby may wait on: one seen serving its actor ledger;
//! * [`status`] — where a space's plane is and whether it serves: its discovery record and
//!   what `status` says of it;
//! * [`table`] — the plain-text table the operator's read commands print;
//! * [`liveness`] — holder liveness and verified eviction from the servers' connection listings;
//! * [`registry`] — discovery reads of who is registered and serving;
//! * [`jwt`], [`profiles`] — NATS user JWTs and the permission profiles the plane mints;
//! * [`callout`] — the auth callout's decisions: which requests are answered, and the signed
//!   admission or denial;
//! * [`mint`] — the fenced mint end to end: build the credential, then release it by the fence;
//! * [`manager`] — manager-service requests, proofs, the host and holder, and the one
//!   registered-manager door ([`manager::door`]);
//! * [`journal`] — run journal activation ordering;
//! * [`renewal`] — manager-service operations and renewal compensation;
//! * [`run`] — run admission, attempts and the run check of a driver renewal;
//! * [`actors`], [`enrollment`] — the actor ledger and managed-agent enrollment/retirement;
//! * [`actor_verbs`] — the operator's verbs on the actor ledger: their checks, rows and
//!   sentences;
//! * [`host`] — host incarnations, the host fence and the plane's own `auth` contract.
//! * [`trust`] — the space's trust root: operator, accounts, callout, issuer keys, owner
//!   secret, IdP pin, their files, and the broker config.

// The purity rules listed in core/clippy.toml (no clocks, no random keys, no hash-ordered
// collections, no interior mutability) are errors here, not style warnings.
#![deny(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod actor_verbs;
pub mod actors;
pub mod authority;
pub mod barrier;
pub mod bearer;
pub mod bundle;
pub mod callout;
pub mod canon;
pub mod connect;
pub mod contract;
pub mod control_rail;
pub mod decided;
pub mod deregistration;
pub mod driver;
pub mod ecma;
pub mod endpoint_rail;
pub mod enrollment;
pub mod error;
pub mod exchange;
pub mod gate;
pub mod gate_view;
pub mod govern;
pub mod high_water;
pub mod host;
pub mod inbox;
pub mod issuance;
pub mod issued;
pub mod journal;
pub mod jwt;
pub mod kv;
pub mod ledger;
pub mod lifecycle;
pub mod liveness;
pub mod mac;
pub mod machine;
pub mod manager;
pub mod manager_ops;
pub mod manager_route;
pub mod mint;
pub mod names;
pub mod plane_claim;
pub mod plane_grants;
pub mod plane_probe;
pub mod platform_control;
pub mod profiles;
pub mod readiness;
pub mod reconcile;
pub mod registration;
pub mod registry;
pub mod renewal;
pub mod repair;
pub mod rollback;
pub mod run;
pub mod self_registration;
pub mod service;
pub mod serving;
pub mod session;
pub mod standby;
pub mod status;
pub mod table;
pub mod trust;
pub mod view;
pub mod wire;

pub use error::{EpError, ErrorCode};
