//! Who is asking and who answers: the one vocabulary every registered-manager operation shares
//! for the trusted host's own facts ([`ManagerHost`]) and the authenticated human holder
//! ([`Supervisor`]).

use std::fmt;
use std::sync::Arc;

use nkeys::KeyPair;

use crate::error::EpError;
use crate::names::{is_platform_owner, DerivedOwner, OwnerToken, SpaceName};
use crate::profiles::StandingTtl;
use crate::trust::DaemonMaterial;

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

impl ManagerHost {
    /// The host a plane serves from its trust root: its space, the data account and its
    /// signing key (whose seed is the proof secret), the standing lifetime only the trusted host
    /// sets (reference §2.3 step 0), and the sentinel creds enrolled agents present. The agents'
    /// exchange URL is empty: the route fills it in once the public face is bound. The error is
    /// one sentence.
    pub fn of_trust_root(
        space: SpaceName,
        material: &DaemonMaterial,
        standing_ttl: StandingTtl,
    ) -> Result<ManagerHost, String> {
        let signing_seed = material
            .data_signing_key()
            .seed()
            .map_err(|e| format!("the data account's signing key has no seed: {e}"))?;
        Ok(ManagerHost {
            space,
            account: AccountKey::parse(material.data_account())
                .ok_or("the trust root's data account is not an account key")?,
            signer: Arc::new(material.data_signing_key().clone()),
            proof_secret: ProofSecret::new(signing_seed),
            standing_ttl,
            agents: AgentOnboarding {
                sentinel_creds: material.sentinel_creds().to_owned(),
                agent_bearer_exchange_url: String::new(),
            },
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::UnixSeconds;
    use crate::trust::{provision, IdpPin, ProvisionSeeds};

    #[test]
    fn the_host_of_a_trust_root_signs_for_its_data_account_and_onboards_with_its_sentinel() {
        let mut entropy = [0u8; ProvisionSeeds::ENTROPY_BYTES];
        for (i, b) in entropy.iter_mut().enumerate() {
            *b = u8::try_from(i % 251).unwrap();
        }
        let space = SpaceName::parse("host").unwrap();
        let root = provision(
            &space,
            IdpPin::from_url("http://127.0.0.1:4190").unwrap(),
            &ProvisionSeeds::from_entropy(&entropy),
            UnixSeconds(1_780_000_000),
        )
        .unwrap();
        let material = &root.daemon;
        let host =
            ManagerHost::of_trust_root(space.clone(), material, StandingTtl::DEFAULT).unwrap();
        assert_eq!(host.space, space);
        assert_eq!(host.account.as_str(), material.data_account());
        assert_eq!(
            host.signer.public_key(),
            material.data_signing_key().public_key()
        );
        assert_eq!(host.standing_ttl, StandingTtl::DEFAULT);
        assert_eq!(host.agents.sentinel_creds, material.sentinel_creds());
        assert_eq!(host.agents.agent_bearer_exchange_url, "");
    }
}
