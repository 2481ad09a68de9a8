//! `cotal-core`: the pure, deterministic heart of the Cotal authority plane.
//!
//! Nothing here performs I/O, reads a clock or draws randomness: time and entropy are inputs,
//! and every authority operation is a [`machine::Machine`] that emits [`machine::Effect`]s and
//! advances only when handed an [`machine::Observation`]. The same machines run under the NATS
//! driver, the synchronous in-memory driver and the simulator.

pub mod canon;
pub mod error;
pub mod names;

pub use error::{EpError, ErrorCode};
