//! Registry readers (reference-gate-impl §3.17): who is registered and serving right now.
//!
//! These are discovery reads, never fences (F6, F70): a scatter's expected set or a
//! reconciler's "is this slot registered?" is advisory, and every authority decision they feed
//! is re-checked by a CAS elsewhere. They are still leader-served and still fail loudly — an
//! unreadable registry is not an empty one.

use crate::error::EpError;
use crate::gate::{ProcessEpoch, RegistrationRevision};
use crate::kv::{KeysOutcome, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, EndpointName, InstanceId};
use crate::service::{
    self, RecordRead, ServiceSpec, ServiceStatus, SERVICE_ESCALATED, SERVICE_EXITED,
};

/// One instance a scatter should expect an answer from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedInstance {
    pub instance: InstanceId,
    pub registration_revision: RegistrationRevision,
    pub epoch: ProcessEpoch,
}

/// The instances of `endpoint` that are registered and serving their current spec: a live spec,
/// and a live status that is neither `exited` nor `escalated` and observes that very spec
/// revision. An unreadable registry is `failed-precondition` ("is unreadable"), and so is an
/// empty set ("no live registered instances") — the two messages differ so an operator can
/// tell them apart. A malformed spec or status is `internal`.
#[derive(Debug, Clone)]
pub struct FreezeExpectedSet {
    pub endpoint: EndpointName,
}

impl Script for FreezeExpectedSet {
    type Output = Vec<ExpectedInstance>;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Vec<ExpectedInstance>, Halt> {
        let endpoint = &self.endpoint;
        let prefix = format!("svc.{}.", endpoint.token().as_str());
        let listed = match cx.keys(Store::Records, prefix.as_str())? {
            KeysOutcome::Keys(keys) => keys,
            KeysOutcome::Unavailable(why) => {
                return Err(EpError::failed_precondition(format!(
                    "the service registry of {endpoint} is unreadable ({why}); retry once the \
                     records bucket answers"
                ))
                .into())
            }
        };
        let mut expected = Vec::new();
        for instance in listed.iter().filter_map(|key| spec_instance(&prefix, key)) {
            let spec_key = keys::svc_spec(endpoint, &instance);
            let RecordRead::Live { value, revision } = service::read_record(cx, &spec_key)? else {
                continue;
            };
            ServiceSpec::parse(&value, endpoint)?;
            let status_key = keys::svc_status(endpoint, &instance);
            let RecordRead::Live { value: status, .. } = service::read_record(cx, &status_key)?
            else {
                continue;
            };
            let status = ServiceStatus::parse(&status)?;
            let serving = status.state() != SERVICE_EXITED
                && status.state() != SERVICE_ESCALATED
                && status.observed_spec_revision().0 >= revision.0;
            if serving {
                expected.push(ExpectedInstance {
                    instance,
                    registration_revision: RegistrationRevision(revision.0),
                    epoch: status.epoch(),
                });
            }
        }
        if expected.is_empty() {
            return Err(EpError::failed_precondition(format!(
                "endpoint {endpoint} has no live registered instances serving their current spec"
            ))
            .into());
        }
        Ok(expected)
    }
}

/// The instance id of a `svc.<token>.<instanceId>.spec` key under `prefix`, if it is one.
fn spec_instance(prefix: &str, key: &str) -> Option<InstanceId> {
    let rest = key.strip_prefix(prefix)?.strip_suffix(".spec")?;
    InstanceId::parse(rest).ok()
}
