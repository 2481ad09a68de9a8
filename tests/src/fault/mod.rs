//! The fault campaign's pieces that need no NATS client: what the clients saw ([`history`]),
//! the seeded fault schedule ([`schedule`]) and how a step is carried out on a namespaced
//! cluster ([`inject`]), and the independent checker ([`checker`]) that
//! judges a run from the auth store's raw messages and those histories.
//!
//! The checker is deliberately not the plane's code: it reads rows as plain JSON with its own
//! few field names (reference-gate-impl §2.3), so a bug in the core's parsers or fences cannot
//! hide itself from the check.

pub mod checker;
pub mod history;
pub mod inject;
pub mod schedule;
