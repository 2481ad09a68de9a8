//! `cotal-io-http`: the HTTP faces of the plane. They turn HTTP into core requests and core
//! results into HTTP answers, and hold no authority logic of their own.
//!
//! * [`bearer`] — IdP token verification against a pinned JWKS, the plane's own EdDSA
//!   bearers, their JWKS document and key rotation (served by the exchange and `GET /jwks`).

pub mod bearer;
