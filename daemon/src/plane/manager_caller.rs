//! The `manager-caller` view's plane inputs (reference §3.10, §8.4, SPEC §13.15): the exchange's
//! instance selection, a core script run with the gate listing on the sealed ledger scanner;
//! the workspace's own manager, read fresh for every selection and connect re-check; and the
//! entropy of an interactive caller's first issuance (the re-check and the issuance themselves
//! are steps of core's connect decision).

use std::sync::Arc;

use cotal_core::error::EpError;
use cotal_core::issued::IssuedGeneration;
use cotal_core::kv::Store;
use cotal_core::machine::Replay;
use cotal_core::manager::{LocalManager, SelectManagerInstance};
use cotal_core::names::{InstanceId, OwnerToken, SpaceName};
use cotal_io_nats::NatsWorld;

use super::connections::{Connections, PlaneLink};
use crate::state;

/// The plane's `manager-caller` steps over its connections.
#[derive(Debug, Clone)]
pub(super) struct ManagerCallers {
    pub(super) space: SpaceName,
    /// Where the workspace's own manager persists its identity, re-read at every selection and
    /// re-check (§3.10).
    pub(super) local_identity: std::path::PathBuf,
    pub(super) connections: PlaneLink,
}

impl ManagerCallers {
    pub(super) fn new(
        space: &SpaceName,
        root: &std::path::Path,
        connections: &Arc<Connections>,
    ) -> ManagerCallers {
        ManagerCallers {
            space: space.clone(),
            local_identity: state::local_manager_path(root, space),
            connections: PlaneLink::to(connections),
        }
    }

    /// The workspace's own manager, read fresh (a malformed identity refuses, `internal`).
    pub(super) fn local(&self) -> Result<Option<LocalManager>, EpError> {
        state::load_local_manager(&self.local_identity).map_err(EpError::internal)
    }

    /// §3.10: the owner's one live remote manager instance, or the requested one if it is a
    /// candidate. Reads ride the issuing connection; the gate listing rides the sealed ledger
    /// scanner, the only connection whose loss fences the plane.
    pub(super) async fn select(
        &self,
        owner: &OwnerToken,
        requested: Option<InstanceId>,
    ) -> Result<InstanceId, EpError> {
        let connections = self.connections.get()?;
        let (reads, listing) = (
            connections.issuer.space()?,
            connections.scanners.ledger.space()?,
        );
        let mut world = NatsWorld::new(&reads);
        world.set_scanner(Store::Auth, &listing);
        let select = SelectManagerInstance {
            space: self.space.clone(),
            owner: owner.clone(),
            local: self.local()?,
            requested,
        };
        world.run(&mut Replay::new(select)).await
    }
}

/// Fresh entropy for an interactive `manager-caller`'s first issuance.
pub(super) fn fresh_generation() -> Result<IssuedGeneration, EpError> {
    let fresh: [u8; 16] = state::random_bytes().map_err(EpError::internal)?;
    let hex: String = fresh.iter().map(|b| format!("{b:02x}")).collect();
    IssuedGeneration::parse(&hex)
        .ok_or_else(|| EpError::internal("a drawn generation is not 32 hex digits"))
}
