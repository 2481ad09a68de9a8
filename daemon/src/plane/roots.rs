//! The incarnation root credentials the exchange binds bearers to (reference §9.3), minted by
//! the core's `EnsureRootCredential` on the plane's mint connection — the one whose grant writes
//! lifecycle heads, uid reservations, lifecycle gates and credential rows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cotal_core::error::EpError;
use cotal_core::lifecycle::{EnsureRootCredential, RootEntropy};
use cotal_core::machine::Replay;
use cotal_core::names::{CredentialId, LifecycleUid, ManagerInstance, Principal, SpaceName};
use cotal_io_nats::NatsWorld;

use super::connections::{Connections, PlaneLink};
use crate::state;

/// How many incarnations' root ids the plane remembers as hints. Past it the hints are
/// dropped wholesale: a missing hint costs one round trip, never a decision.
const KNOWN_ROOTS_MAX: usize = 65_536;

/// The plane's root-credential minting over its mint connection.
pub(super) struct MintRoots {
    connections: PlaneLink,
    manager_instance: ManagerInstance,
    /// The root id each incarnation's last ensure returned, handed to the next ensure so it
    /// reads the head and that row together ([`EnsureRootCredential::known`]).
    known: Mutex<HashMap<(Principal, LifecycleUid), CredentialId>>,
}

impl MintRoots {
    pub(super) fn new(
        connections: Arc<Connections>,
        space: &SpaceName,
    ) -> Result<MintRoots, String> {
        let manager_instance =
            ManagerInstance::parse(&format!("auth-service:{space}")).map_err(|e| e.message)?;
        Ok(MintRoots {
            connections: PlaneLink::to(&connections),
            manager_instance,
            known: Mutex::new(HashMap::new()),
        })
    }
}

impl MintRoots {
    /// The hints; a poisoned lock still holds usable hints (each entry is written whole).
    fn known_roots(&self) -> MutexGuard<'_, HashMap<(Principal, LifecycleUid), CredentialId>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn entropy() -> Result<RootEntropy, EpError> {
    let draw = || state::entropy().map_err(EpError::internal);
    Ok(RootEntropy {
        op: draw()?,
        credentials: [draw()?, draw()?, draw()?],
    })
}

impl MintRoots {
    /// The root credential of the incarnation `(principal, uid)`, minted on first use.
    pub(super) async fn ensure(
        &self,
        principal: &Principal,
        uid: &LifecycleUid,
        now_ms: u64,
    ) -> Result<CredentialId, EpError> {
        let incarnation = (principal.clone(), uid.clone());
        let known = self.known_roots().get(&incarnation).cloned();
        let machine = EnsureRootCredential {
            owner: principal.owner().clone(),
            actor: principal.actor().clone(),
            lifecycle_uid: uid.clone(),
            manager_instance: self.manager_instance.clone(),
            now_ms,
            entropy: entropy()?,
            known,
        };
        let bound = self.connections.get()?.mint.space()?;
        let root = NatsWorld::new(&bound)
            .run(&mut Replay::new(machine))
            .await?;
        let mut known = self.known_roots();
        if known.len() >= KNOWN_ROOTS_MAX {
            known.clear();
        }
        known.insert(incarnation, root.credential_id.clone());
        Ok(root.credential_id)
    }
}
