//! The plane's own registration as a start runs it (reference §2.5 step 2; F14, F69), in the
//! three stages the adapter drives on the registration connection: publish the auth cluster and
//! provision the gate ([`crate::host::PrepareSelfAuthorized`]), register serving with the READY status
//! ([`RegisterServing`]), then confirm the registration on the gate ([`confirm_registration`]).
//! The stages, the serving request and the sentence each stage's failure is told with live
//! here; the connection, the lock, the durable op record and the kill points are the adapter's.

use crate::error::EpError;
use crate::host::{confirm_registration, SelfAuthorizedInstance, AUTH_ENDPOINT};
use crate::issuance::GateRef;
use crate::machine::{script, Script};
use crate::names::{EndpointName, InstanceId, ManagerInstance, SpaceName};
use crate::registration::Registered;
use crate::serving::RegisterServing;

/// The gate the plane's own `auth` instance registers at (`epgate.auth.<instance>`), the one
/// [`crate::host::auth_instance`]'s ceremony names: what a start observes before it chooses its
/// op id (F14) and checks against its high-water mark (F69).
pub fn auth_gate(space: &SpaceName, instance: &InstanceId) -> Result<GateRef, EpError> {
    let endpoint = EndpointName::parse(AUTH_ENDPOINT)?;
    Ok(GateRef::new(space.clone(), endpoint, instance.clone()))
}

/// The plane's own manager instance, `auth-service:<space>`: the minting authority the heads and
/// reservations it activates (its root-credential ensures, a platform's delegated activations)
/// record. Audit only, never a key segment.
pub fn plane_manager_instance(space: &SpaceName) -> Result<ManagerInstance, EpError> {
    ManagerInstance::parse(&format!("auth-service:{space}"))
}

/// A stage of the plane's self-registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The auth cluster published and the gate provisioned.
    Prepare,
    /// The serving registration's request built from the instance (its spec).
    Request,
    /// The serving registration (the ceremony, the serve grant, the READY status).
    Register,
    /// The registration confirmed on the gate by leader read.
    Confirm,
}

/// A stage that failed, and why.
#[derive(Debug, Clone)]
pub struct Stopped {
    pub stage: Stage,
    pub error: EpError,
}

impl Stopped {
    /// What the start is told: which stage failed, with the refusal.
    pub fn sentence(&self) -> String {
        let e = &self.error;
        match self.stage {
            Stage::Prepare => {
                format!("publishing the auth cluster or provisioning the gate failed: {e}")
            }
            Stage::Request => e.message.clone(),
            Stage::Register | Stage::Confirm => {
                format!("registering the auth instance failed: {e}")
            }
        }
    }

    /// The stage that refused on the gate itself (the ceremony's own refusal), which the
    /// audit trail records against the gate.
    pub fn audited(&self) -> bool {
        self.stage == Stage::Register
    }
}

impl SelfAuthorizedInstance {
    /// Stage two: the serving registration, with no extra status fields.
    pub fn serving(&self) -> Result<RegisterServing, EpError> {
        Ok(RegisterServing {
            register: self.registration()?,
            status: serde_json::Map::new(),
        })
    }

    /// Stage three: the registration `registered` confirmed on the gate.
    pub fn confirm<'a>(
        &'a self,
        registered: &'a Registered,
    ) -> impl Script<Output = ()> + Send + 'a {
        script(move |cx| confirm_registration(cx, &self.gate, registered))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn the_plane_observes_the_gate_its_ceremony_registers() {
        let space = SpaceName::parse("s1").unwrap();
        let instance = InstanceId::parse("cccccccccccccccccccccccccc").unwrap();
        let serve_key = nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, [9; 32])
            .unwrap()
            .public_key();
        let op = crate::names::OpId::mint([3; 20]);
        let ceremony = crate::host::auth_instance(&space, &instance, &serve_key, op).unwrap();
        assert_eq!(auth_gate(&space, &instance).unwrap(), ceremony.gate);
    }

    #[test]
    fn the_planes_manager_instance_names_its_space() {
        let space = SpaceName::parse("s1").unwrap();
        let instance = plane_manager_instance(&space).unwrap();
        assert_eq!(instance, ManagerInstance::parse("auth-service:s1").unwrap());
    }

    #[test]
    fn each_stage_is_told_with_its_refusal() {
        let stopped = |stage| Stopped {
            stage,
            error: EpError::unavailable("kv down"),
        };
        let e = EpError::unavailable("kv down");
        assert_eq!(
            stopped(Stage::Prepare).sentence(),
            format!("publishing the auth cluster or provisioning the gate failed: {e}")
        );
        for stage in [Stage::Register, Stage::Confirm] {
            assert_eq!(
                stopped(stage).sentence(),
                format!("registering the auth instance failed: {e}")
            );
        }
        assert_eq!(stopped(Stage::Request).sentence(), "kv down");
        assert!(stopped(Stage::Register).audited());
        assert!(!stopped(Stage::Prepare).audited() && !stopped(Stage::Confirm).audited());
        assert_eq!(stopped(Stage::Prepare).error.code, ErrorCode::Unavailable);
    }
}
