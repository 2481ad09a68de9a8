//! A platform's assignment of its control manager to one account (reference §7.3): the row the
//! platform backend alone writes, read fresh by the platform control door on every call. The
//! holder a platform call is authorized as ([`super::Supervisor::platform`]) carries it in place
//! of a human's `supervise` scope.

use crate::names::{InstanceId, LifecycleUid, SpaceName};

use super::tokens::AccountKey;

/// Whether the row assigns its instance now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentState {
    Assigned,
    /// The backend took the assignment back: every later call is refused, renewals included.
    Revoked,
}

/// One platform-run control manager assigned to one account; an account has at most one
/// current row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformAssignment {
    pub space: SpaceName,
    pub account_public_key: AccountKey,
    /// The platform's stable control instance, reused across every restart.
    pub instance_id: InstanceId,
    /// The control instance's manager lifecycle, reused across every restart.
    pub lifecycle_uid: LifecycleUid,
    /// The manager instance this control instance replaces: the door only reads its
    /// registration and gate, never writes them.
    pub predecessor_instance_id: Option<InstanceId>,
    pub assignment_revision: u64,
    pub state: AssignmentState,
}
