//! `cotal-authd` as a library: the plane of one space as a value ([`plane::Plane`]: start it,
//! wait for its end, close it; it installs no signal handler and never exits the process, so a
//! host can run several spaces' planes in one process), and the pieces the `cotal-authd`
//! binary (`src/main.rs`: the CLI only) is made of.

pub mod actor_cmd;
pub mod audit;
pub mod clock;
pub mod dev_idp_cmd;
pub mod embedded;
pub mod gate_cmd;
pub mod hosted;
pub mod issuer_cmd;
pub mod ledger;
pub mod login_cmd;
pub mod plane;
pub mod status;
pub mod trust_cmd;
pub mod up;
