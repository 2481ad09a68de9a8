//! Who is asking and who answers: the one vocabulary every registered-manager operation shares
//! for the trusted host's own facts ([`ManagerHost`]) and the authenticated human holder
//! ([`Supervisor`]).

use std::fmt;
use std::sync::Arc;

use nkeys::KeyPair;

use crate::error::EpError;
use crate::names::{DerivedOwner, OwnerToken, SpaceName};
use crate::profiles::StandingTtl;

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

/// The authenticated human holder: the derived owner the front door verified and the scope of
/// its interactive ledger row, read fresh; never taken from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    pub owner: DerivedOwner,
    pub scope: Vec<String>,
}

impl Supervisor {
    pub fn owner(&self) -> &OwnerToken {
        self.owner.owner()
    }

    /// Whether the holder's scope names `supervise` itself (F90: `spawn` and `admin` never
    /// imply it).
    pub fn supervises(&self) -> bool {
        self.scope.iter().any(|s| s == SUPERVISE)
    }

    /// `permission-denied` "<who> needs scope "supervise"; spawn/admin do not imply it" unless
    /// the holder's scope names `supervise` (F90).
    pub fn require_supervise(&self, who: &str) -> Result<(), EpError> {
        if self.supervises() {
            return Ok(());
        }
        Err(EpError::permission_denied(format!(
            "{who} needs scope \"{SUPERVISE}\"; spawn/admin do not imply it"
        )))
    }
}
