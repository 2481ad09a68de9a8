//! Deregistration (Q-19, reference-gate-impl §3.16): remove an instance's status, then its
//! spec, both revision-pinned; the gate is kept, and the id stays re-registrable — the next
//! registration writes over the tombstones and advances the epoch (F69), fencing a predecessor
//! that outlived its own deregistration.
//!
//! Order matters: the spec is read before the governance head (an in-flight registration holds
//! the slot through its spec publication, so it is never deleted under it), and the status is
//! deleted before the spec (concurrent readers only ever see "spec without status", never the
//! torn "status without spec").

use crate::govern::{self, DeregistrationSlot};
use crate::issuance::GateRef;
use crate::kv::Revision;
use crate::machine::{Ctx, Halt, Script};
use crate::names::keys;
use crate::service::{self, RecordRead};

/// Why a deregistration removed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRemoved {
    /// No live spec: nothing is registered.
    Absent,
    /// A registration of this instance holds the governance slot at its live generation.
    RegistrationInFlight,
    /// The status or spec moved since it was read.
    Superseded,
}

/// What a deregistration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deregistration {
    Removed {
        spec_revision: Revision,
        status_revision: Option<Revision>,
    },
    NotRemoved(NotRemoved),
}

/// Deregisters one instance.
#[derive(Debug, Clone)]
pub struct Deregister {
    pub gate: GateRef,
}

impl Script for Deregister {
    type Output = Deregistration;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Deregistration, Halt> {
        let gate = &self.gate;
        let spec_key = keys::svc_spec(&gate.endpoint, &gate.instance);
        let spec_revision = match service::read_record(cx, &spec_key)? {
            RecordRead::Live { revision, .. } => revision,
            _ => return Ok(Deregistration::NotRemoved(NotRemoved::Absent)),
        };
        let (head, _) = govern::read_governance(cx, &gate.endpoint)?;
        if let Some(slot) = head
            .provisional
            .as_ref()
            .filter(|s| s.instance == gate.instance)
        {
            let live =
                govern::observe_holder_generation(cx, &gate.space, &gate.endpoint, &gate.instance)?;
            if govern::deregistration_slot_check(&gate.endpoint, slot, &live)?
                == DeregistrationSlot::InFlight
            {
                return Ok(Deregistration::NotRemoved(NotRemoved::RegistrationInFlight));
            }
        }
        let status_key = keys::svc_status(&gate.endpoint, &gate.instance);
        let status_revision = match service::read_record(cx, &status_key)? {
            RecordRead::Live { revision, .. } => {
                match delete_unless_superseded(cx, &status_key, revision)? {
                    Some(_) => Some(revision),
                    None => return Ok(Deregistration::NotRemoved(NotRemoved::Superseded)),
                }
            }
            _ => None,
        };
        match delete_unless_superseded(cx, &spec_key, spec_revision)? {
            Some(_) => Ok(Deregistration::Removed {
                spec_revision,
                status_revision,
            }),
            None => Ok(Deregistration::NotRemoved(NotRemoved::Superseded)),
        }
    }
}

/// Deletes `key` pinned to `revision`; a lost pin is "superseded" (`None`), not a failure.
fn delete_unless_superseded(
    cx: &mut Ctx<'_>,
    key: &str,
    revision: Revision,
) -> Result<Option<Revision>, Halt> {
    match cx.recover(|cx| service::delete_record(cx, key, revision))? {
        Ok(revision) => Ok(Some(revision)),
        Err(e) if e.code == crate::ErrorCode::Conflict => Ok(None),
        Err(e) => Err(e.into()),
    }
}
