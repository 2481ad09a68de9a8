//! Shared test support.
//!
//! * [`fence`] — the fence scenario model (one gate, minters, barriers, faults) and its
//!   invariant checker, shared by the proptest state machine, the regression tests and the
//!   `fence_ops` fuzz target.

pub mod fence;
