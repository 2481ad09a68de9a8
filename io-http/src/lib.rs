//! `cotal-io-http`: the HTTP faces of the plane. They turn HTTP into core requests and core
//! results into HTTP answers, and hold no authority logic of their own.
//!
//! * [`bearer`] — IdP token verification against a pinned JWKS, the plane's own EdDSA
//!   bearers, their JWKS document and key rotation (served by the exchange and `GET /jwks`).
//! * [`face`] — the loopback and public HTTP faces on hyper: closed route tables, request
//!   guards, the loopback capability, refusal budgets, admission control and graceful close,
//!   around an injected [`face::FaceHandler`] that holds the authority logic.
//! * [`dev_idp`] — a development IdP (loopback, signs in anyone) for walk-throughs and tests.
//! * [`fetch`] — the one outbound client: a bounded JSON `GET` over HTTP or HTTPS.
//! * [`idp_keys`] — the pinned IdP's key set, fetched from its `jwksUri` and cached.
//! * [`loopback`] — the operator's client of a running plane's loopback face (`login`'s
//!   exchange, the interactive retire door).

pub mod bearer;
pub mod dev_idp;
pub mod face;
pub mod fetch;
pub mod idp_keys;
pub mod loopback;
