//! What the exchange's root-credential ensure (reference §9.3, core's `EnsureRootCredential`
//! inside `exchange::PlanExchange`) needs from the process: fresh entropy, the minting
//! authority's name, and the root id each actor's last exchange was bound to — a hint that
//! saves a round trip, never a decision.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use cotal_core::error::EpError;
use cotal_core::exchange::RootInputs;
use cotal_core::lifecycle::RootEntropy;
use cotal_core::names::{CredentialId, LifecycleUid, ManagerInstance, Principal, SpaceName};
use cotal_core::self_registration::plane_manager_instance;
use cotal_io_fs::random;

/// How many actors' root ids the plane remembers as hints. Past it the hints are dropped
/// wholesale: a missing hint costs one round trip, never a decision.
const KNOWN_ROOTS_MAX: usize = 65_536;

/// The plane's root-credential hints.
pub(super) struct RootHints {
    manager_instance: ManagerInstance,
    /// The lifecycle and root id each actor's last exchange was bound to.
    known: Mutex<HashMap<Principal, (LifecycleUid, CredentialId)>>,
}

impl RootHints {
    pub(super) fn new(space: &SpaceName) -> Result<RootHints, String> {
        let manager_instance = plane_manager_instance(space).map_err(|e| e.message)?;
        Ok(RootHints {
            manager_instance,
            known: Mutex::new(HashMap::new()),
        })
    }

    /// The hints; a poisoned lock still holds usable hints (each entry is written whole).
    fn known(&self) -> MutexGuard<'_, HashMap<Principal, (LifecycleUid, CredentialId)>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ensure's inputs for an exchange that claims to be `principal`'s.
    pub(super) fn inputs(&self, principal: Option<&Principal>) -> Result<RootInputs, EpError> {
        let draw = || random::entropy().map_err(EpError::internal);
        Ok(RootInputs {
            manager_instance: self.manager_instance.clone(),
            entropy: RootEntropy {
                op: draw()?,
                credentials: [draw()?, draw()?, draw()?],
            },
            known: principal.and_then(|p| self.known().get(p).cloned()),
        })
    }

    /// Remembers the root a bearer of `principal` was bound to.
    pub(super) fn remember(&self, principal: &Principal, uid: &LifecycleUid, id: &CredentialId) {
        let mut known = self.known();
        if known.len() >= KNOWN_ROOTS_MAX {
            known.clear();
        }
        known.insert(principal.clone(), (uid.clone(), id.clone()));
    }
}
