//! Redeemed sessions as the `session-caller` view sees them (SPEC §13.6, reference §3.5, §8.4):
//! the row `session.<sessionId>` a serving manager's redemption wrote into the space's sessions
//! store, the coordinates a caller's signed grant selects it by, and the check the exchange and
//! the callout both run before a session's caller is minted anything.
//!
//! This plane never writes a session row. The manager redeems (create-only `issuing`, then
//! `active`, F72) and ends (a terminal state, F73) its sessions over its standing
//! `session-ledger` credential, which this plane issues; the plane only reads the row, leader
//! served, and judges it.

mod row;
mod verify;

pub use row::{SessionCoordinates, SessionRow, SessionState, SESSION_ID_MIN_CHARS};
pub use verify::{RedeemedSession, VerifySession};
