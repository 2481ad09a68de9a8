//! Shared test support.
//!
//! * [`fence`] — the fence scenario model (one gate, minters, barriers, faults) and its
//!   invariant checker, shared by the proptest state machine, the regression tests and the
//!   `fence_ops` fuzz target.
//! * [`nats`] — the nats-server harness: a pinned server (or a 3-node cluster) on loopback.
//! * [`sim`] — the deterministic simulator: seeded histories of the registration ceremony
//!   with crashes, ambiguous writes and contention, checked against the fence rules after
//!   every step.

pub mod fence;
pub mod nats;
pub mod sim;
