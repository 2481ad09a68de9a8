//! `cotal-io-http`: the HTTP faces of the plane. They turn HTTP into core requests and core
//! results into HTTP answers, and hold no authority logic of their own.
//!
//! * [`bearer`] — IdP token verification against a pinned JWKS, the plane's own EdDSA
//!   bearers, their JWKS document and key rotation (served by the exchange and `GET /jwks`).
//! * [`face`] — the loopback and public HTTP faces on hyper: closed route tables, request
//!   guards, the loopback capability, refusal budgets, admission control and graceful close,
//!   around an injected [`face::FaceHandler`] that holds the authority logic.

pub mod bearer;
pub mod face;
