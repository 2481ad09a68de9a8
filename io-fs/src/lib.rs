//! `cotal-io-fs`: file-backed adapters of the plane. They execute core effects on the host's
//! disk and hold no authority logic of their own.
//!
//! [`FileActors`] is the host's actor ledger: one JSON file per row under `actors/`
//! (interactive) and `managed-actors/` (managed), the reference's on-disk layout. The ledger's
//! semantics (grammar, envelope walk, shadow checks, read-back settlement) are core's
//! [`cotal_core::actors::store::execute`]; this crate only supplies durable, fail-closed files
//! and the per-alias lock, and the serving lock a plane holds on the ledger it serves.
//!
//! [`trust`] is the space's trust root on disk: `init` (create-only, concurrent-safe) and the
//! daemon's and broker's read paths over the formats of [`cotal_core::trust`]. The daemon reads
//! the secret part through [`secrets`]' [`SecretStore`] seam: the [`FileSecretStore`] on a host
//! (the trust root's files, unchanged), whatever store a hosted platform injects otherwise.
//!
//! Beside it, the plane's own state files, one module a format: its instance identity
//! ([`instance`]), its crash-safe registration record and lock ([`registration`]), the rollback
//! high-water marks ([`marks`]), the discovery file of a ready plane ([`discovery`]) and the
//! workspace's own manager's identity ([`local_manager`]), the sign-in bundle `login` writes
//! ([`login_bundle`]), and the development IdP's key and origin ([`dev_idp`]). Every file here is written and read
//! through [`files`]: 0700 dirs, 0600 files, atomic durable writes, reads that refuse a symlink.

mod actors;
pub mod dev_idp;
pub mod discovery;
pub mod files;
pub mod instance;
pub mod ledger_home;
pub mod local_manager;
pub mod login_bundle;
pub mod marks;
pub mod random;
pub mod registration;
pub mod secrets;
pub mod trust;

pub use actors::{FileActors, ServingLock};
pub use secrets::{FileSecretStore, MemorySecretStore, SecretStore, StoreIdentity};
