//! Who is asking and who answers: the one vocabulary every registered-manager operation shares
//! for the trusted host's own facts ([`ManagerHost`]) and the authenticated human holder
//! ([`Supervisor`]).

use std::fmt;
use std::sync::Arc;

use nkeys::KeyPair;

use crate::error::EpError;
use crate::names::{is_platform_owner, DerivedOwner, OwnerToken, SpaceName};
use crate::profiles::StandingTtl;

use super::platform::{AssignmentState, PlatformAssignment};
use super::proof::ProofSecret;
use super::tokens::AccountKey;

/// The ledger scope a human holder needs; `spawn` and `admin` never imply it (F90).
pub const SUPERVISE: &str = "supervise";

/// What only the trusted host knows: its space, the data account it was assigned, the key that
/// signs that account's user JWTs, the proof secret, the validated standing lifetime, and what
/// it hands enrolled agents.
#[derive(Clone)]
pub struct ManagerHost {
    pub space: SpaceName,
    /// The host-assigned data account (public key): every JWT's `issuer_account`.
    pub account: AccountKey,
    /// The data account's signing key pair.
    pub signer: Arc<KeyPair>,
    pub proof_secret: ProofSecret,
    pub standing_ttl: StandingTtl,
    pub agents: AgentOnboarding,
}

impl fmt::Debug for ManagerHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagerHost")
            .field("space", &self.space)
            .field("account", &self.account)
            .field("signer", &self.signer.public_key())
            .field("standing_ttl", &self.standing_ttl)
            .field("agents", &self.agents)
            .finish_non_exhaustive()
    }
}

/// What an enrolled managed agent is handed to reach the space.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentOnboarding {
    /// The space-wide callout sentinel credentials.
    pub sentinel_creds: String,
    /// The public exchange base URL agents trade their token at.
    pub agent_bearer_exchange_url: String,
}

impl fmt::Debug for AgentOnboarding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The sentinel creds carry a seed: never printed.
        f.debug_struct("AgentOnboarding")
            .field("agent_bearer_exchange_url", &self.agent_bearer_exchange_url)
            .finish_non_exhaustive()
    }
}

/// Who a registered-manager operation is authorized for: the authenticated human holder (the
/// derived owner the front door verified and the scope of its interactive ledger row, read
/// fresh; never taken from the request), or a platform's control manager (the `p_` owner
/// derived for the context's account, and the assignment the platform control door read for
/// this call in place of `supervise`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    owner: OwnerToken,
    authority: Authority,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Authority {
    Scope(Vec<String>),
    Platform(Box<PlatformAssignment>),
}

impl Supervisor {
    /// A signed-in human holding `scope` on its interactive row.
    pub fn human(owner: DerivedOwner, scope: Vec<String>) -> Supervisor {
        Supervisor {
            owner: owner.into_owner(),
            authority: Authority::Scope(scope),
        }
    }

    /// A platform's control manager under `assignment`: built only by the platform control door
    /// ([`crate::platform_control`]), after it checked the assignment against the call. Refuses
    /// an owner that is not a platform owner (`internal`: the door derives it).
    pub fn platform(
        owner: OwnerToken,
        assignment: PlatformAssignment,
    ) -> Result<Supervisor, EpError> {
        if !is_platform_owner(owner.as_str()) {
            return Err(EpError::internal(format!(
                "a platform holder's owner must be a platform owner (p_ + 26 base32 chars), not \
                 {owner}"
            )));
        }
        Ok(Supervisor {
            owner,
            authority: Authority::Platform(Box::new(assignment)),
        })
    }

    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    /// The assignment a platform holder was authorized under; `None` for a human.
    pub fn platform_assignment(&self) -> Option<&PlatformAssignment> {
        match &self.authority {
            Authority::Scope(_) => None,
            Authority::Platform(assignment) => Some(assignment),
        }
    }

    /// Whether the holder may supervise: a human whose scope names `supervise` itself (F90:
    /// `spawn` and `admin` never imply it), or a platform holder whose assignment is current.
    pub fn supervises(&self) -> bool {
        match &self.authority {
            Authority::Scope(scope) => scope.iter().any(|s| s == SUPERVISE),
            Authority::Platform(assignment) => assignment.state == AssignmentState::Assigned,
        }
    }

    /// `permission-denied` unless [`Supervisor::supervises`]: for a human "<who> needs scope
    /// "supervise"; spawn/admin do not imply it" (F90), for a platform holder the assignment's.
    pub fn require_supervise(&self, who: &str) -> Result<(), EpError> {
        if self.supervises() {
            return Ok(());
        }
        Err(EpError::permission_denied(match &self.authority {
            Authority::Scope(_) => {
                format!("{who} needs scope \"{SUPERVISE}\"; spawn/admin do not imply it")
            }
            Authority::Platform(assignment) => format!(
                "platform control instance {} is not the current assignment's instance",
                assignment.instance_id
            ),
        }))
    }
}
