//! The `session-caller` view's plane step (reference §3.5, §8.4; SPEC §13.6): whether a
//! bearer's holder holds a redeemed session right now, decided by the core's [`VerifySession`]
//! on the issuing connection, whose grant alone reads the sessions store. The exchange runs it
//! before it signs a `session-caller` bearer, the callout again before it mints the
//! connection: a session closed, superseded or expired in between confers nothing.

use std::sync::Arc;

use cotal_core::error::EpError;
use cotal_core::machine::Replay;
use cotal_core::names::{LifecycleUid, Principal, SpaceName};
use cotal_core::session::{RedeemedSession, SessionCoordinates, VerifySession};
use cotal_io_nats::NatsWorld;

use super::connections::{Connections, PlaneLink};

/// The plane's session check over its issuing connection.
#[derive(Debug, Clone)]
pub(super) struct SessionCallers {
    pub(super) space: SpaceName,
    pub(super) connections: PlaneLink,
}

impl SessionCallers {
    pub(super) fn new(space: &SpaceName, connections: &Arc<Connections>) -> SessionCallers {
        SessionCallers {
            space: space.clone(),
            connections: PlaneLink::to(connections),
        }
    }

    /// The session `claim` selects, if `holder` at `lifecycle_uid` holds it at `now_ms`.
    pub(super) async fn verify(
        &self,
        holder: &Principal,
        lifecycle_uid: &LifecycleUid,
        claim: SessionCoordinates,
        now_ms: u64,
    ) -> Result<RedeemedSession, EpError> {
        let bound = self.connections.get()?.issuer.space()?;
        let check = VerifySession {
            space: self.space.clone(),
            holder: holder.clone(),
            lifecycle_uid: lifecycle_uid.clone(),
            claim,
            now_ms,
        };
        NatsWorld::new(&bound).run(&mut Replay::new(check)).await
    }
}
