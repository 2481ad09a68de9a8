//! Agent lifecycles (spec §2.2, §2.5, §2.7, §3.1, §3.3): the alias head, the uid reservation
//! and the agent issuance gate as byte-exact rows ([`rows`]); the activation saga at a given
//! uid ([`ActivateLifecycle`]); the incarnation's root credential, minted release-last and
//! re-exported with the same id ([`EnsureRootCredential`]); the connect-time check of a bearer's
//! credential ([`AuthorizeConnectCredential`]); the operator's revoke ([`RevokeCredential`]);
//! the terminal retirement barrier ([`RetireLifecycle`]) behind the two retire doors (their
//! pre-checks: [`admit_door_retirement`]) and the auth control rail (`crate::control_rail`); and
//! the boot's search for retirements a crash interrupted ([`FindOpenOperations`]).
//!
//! The plane runs no takeover barrier: a live incarnation at another uid refuses activation by
//! name (F60), and only a barrier rotates a root credential.

mod activate;
mod flight;
mod resume;
mod retire;
mod retire_door;
mod root;
pub mod rows;

pub use activate::{ActivateLifecycle, Activated, ActivationRun, ACTIVATION_ATTEMPTS};
pub use flight::{flight_conflict, flight_timed_out, BootResume, Ran, RetireEntry};
pub use resume::{FindOpenOperations, OpenOperations};
pub use retire::{
    interactive_retirement_op_id, managed_retirement_op_id, RetireLifecycle, Retirement,
    RETIRE_FREEZE_ATTEMPTS,
};
pub use retire_door::{
    admit_door_retirement, DoorRetirement, PlaneRetire, RetireDoor, RetireTarget,
};
pub use root::{
    AuthorizeConnectCredential, AuthorizedConnect, EnsureRootCredential, RevokeCredential,
    RevokeRootCredential, RevokedRoot, RootCredential, RootEntropy, ROOT_CREDENTIAL_TTL_MS,
    ROOT_MINT_ATTEMPTS,
};
pub use rows::{
    read_gate, read_head, AgentGate, HeadState, LifecycleHead, UidReservation, Versioned,
};
