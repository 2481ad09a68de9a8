//! The incarnation root credentials the exchange binds bearers to (reference §9.3), minted by
//! the core's `EnsureRootCredential` on the plane's mint connection — the one whose grant writes
//! lifecycle heads, uid reservations, lifecycle gates and credential rows.

use std::sync::Arc;

use cotal_core::error::EpError;
use cotal_core::lifecycle::{EnsureRootCredential, RootEntropy};
use cotal_core::machine::Replay;
use cotal_core::names::{CredentialId, LifecycleUid, ManagerInstance, Principal, SpaceName};
use cotal_io_nats::NatsWorld;

use super::connections::{Connections, PlaneLink};
use crate::state;

/// The plane's root-credential minting over its mint connection.
pub(super) struct MintRoots {
    connections: PlaneLink,
    manager_instance: ManagerInstance,
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
        })
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
        {
            let machine = EnsureRootCredential {
                owner: principal.owner().clone(),
                actor: principal.actor().clone(),
                lifecycle_uid: uid.clone(),
                manager_instance: self.manager_instance.clone(),
                now_ms,
                entropy: entropy()?,
            };
            let bound = self.connections.get()?.mint.space()?;
            let root = NatsWorld::new(&bound)
                .run(&mut Replay::new(machine))
                .await?;
            Ok(root.credential_id)
        }
    }
}
