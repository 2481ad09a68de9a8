//! The `manager-caller` view's three plane steps (reference §3.10, §8.4, SPEC §13.15), each a
//! core script run on the connection whose grant it needs: the exchange's instance selection,
//! the callout's re-check of that instance at the permission mint, and the callout's issuance of
//! an interactive user's connection.

use std::sync::Arc;

use cotal_core::error::EpError;
use cotal_core::issued::{IssueManagerCaller, IssuedGeneration};
use cotal_core::kv::Store;
use cotal_core::machine::Replay;
use cotal_core::manager::{AuthorizeManagerCaller, LocalManager, SelectManagerInstance};
use cotal_core::names::{InstanceId, OwnerToken, SpaceName};
use cotal_core::profiles::{manager_caller, ManagerCallerBinding, Profile};
use cotal_io_fs::FileActors;
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
    pub(super) ledger: FileActors,
}

impl ManagerCallers {
    pub(super) fn new(
        space: &SpaceName,
        root: &std::path::Path,
        connections: &Arc<Connections>,
        ledger: FileActors,
    ) -> ManagerCallers {
        ManagerCallers {
            space: space.clone(),
            local_identity: state::local_manager_path(root, space),
            connections: PlaneLink::to(connections),
            ledger,
        }
    }

    /// The workspace's own manager, read fresh (a malformed identity refuses, `internal`).
    fn local(&self) -> Result<Option<LocalManager>, EpError> {
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

    /// The callout's re-check at the permission mint (§8.4): the bearer's instance is still a
    /// candidate of its owner's, read on the connect reader.
    pub(super) async fn authorize(
        &self,
        owner: &OwnerToken,
        instance: &InstanceId,
    ) -> Result<(), EpError> {
        let bound = self.connections.get()?.reader.space()?;
        let check = AuthorizeManagerCaller {
            space: self.space.clone(),
            owner: owner.clone(),
            local: self.local()?,
            instance: instance.clone(),
        };
        NatsWorld::new(&bound).run(&mut Replay::new(check)).await
    }

    /// The profile of one `manager-caller` connection: issued (SPEC §13.15) on the issuing
    /// connection for an interactive row, whose ledger row is the issuance's source; a managed
    /// row's view stays on the legacy rail and issues nothing.
    pub(super) async fn profile(
        &self,
        binding: ManagerCallerBinding,
        interactive: bool,
    ) -> Result<Profile, EpError> {
        if !interactive {
            return manager_caller(&binding);
        }
        let fresh: [u8; 16] = state::random_bytes().map_err(EpError::internal)?;
        let hex: String = fresh.iter().map(|b| format!("{b:02x}")).collect();
        let fresh_generation = IssuedGeneration::parse(&hex)
            .ok_or_else(|| EpError::internal("a drawn generation is not 32 hex digits"))?;
        let bound = self.connections.get()?.issuer.space()?;
        NatsWorld::new(&bound)
            .with_actors(Arc::new(self.ledger.clone()))
            .run(&mut Replay::new(IssueManagerCaller {
                binding,
                fresh_generation,
            }))
            .await
    }
}
