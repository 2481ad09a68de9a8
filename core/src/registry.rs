//! Registry readers (reference-gate-impl §3.17): who is registered and serving right now, and
//! which issuance gates a space holds ([`ListGates`]).
//!
//! These are discovery reads, never fences (F6, F70): a scatter's expected set or a
//! reconciler's "is this slot registered?" is advisory, and every authority decision they feed
//! is re-checked by a CAS elsewhere. They are still leader-served and still fail loudly — an
//! unreadable registry is not an empty one.

use crate::error::EpError;
use crate::gate::{ProcessEpoch, RegistrationRevision};
use crate::issuance::{GateObservation, GateRef, ObserveGate};
use crate::kv::{KeysOutcome, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, EndpointName, InstanceId, SpaceName};
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
        let prefix = keys::svc_endpoint_prefix(endpoint);
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

/// One row of [`ListGates`].
#[derive(Debug, Clone, PartialEq)]
pub enum ListedGate {
    /// The gate as one leader-served read saw it.
    Read {
        gate: GateRef,
        seen: GateObservation,
    },
    /// A listed gate that could not be read: a DEL/PURGE marker (gates are never deleted, F9),
    /// bytes that are not a gate, or a read that failed.
    Unreadable { gate: GateRef, error: EpError },
}

impl ListedGate {
    pub fn gate(&self) -> &GateRef {
        match self {
            ListedGate::Read { gate, .. } | ListedGate::Unreadable { gate, .. } => gate,
        }
    }
}

/// Every issuance gate of `space`, in key order: the auth store's `epgate.` keys, markers
/// included, each read leader-served ([`ObserveGate`]).
///
/// A marker is an [`ListedGate::Unreadable`] row, never a skip and never a failed listing
/// a view that skipped it would hide a gate someone deleted, against F9), and so is a
/// gate whose read fails or whose bytes do not parse: one bad gate does not hide the others. A
/// listed key that reads back absent is left out (it has no row to show). A listing that fails
/// is `unavailable`; a listed key that is not a gate key fails the listing with its parse
/// error. A view, never a fence (F6).
#[derive(Debug, Clone)]
pub struct ListGates {
    pub space: SpaceName,
}

impl Script for ListGates {
    type Output = Vec<ListedGate>;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Vec<ListedGate>, Halt> {
        let listed = match cx.keys(Store::Auth, keys::EPGATE_PREFIX)? {
            KeysOutcome::Keys(keys) => keys,
            KeysOutcome::Unavailable(why) => {
                return Err(EpError::unavailable(format!(
                    "listing the gates of space {} failed: {why}",
                    self.space
                ))
                .into())
            }
        };
        let mut rows = Vec::with_capacity(listed.len());
        for key in listed {
            let (endpoint, instance) = keys::parse_epgate(&key)?;
            let gate = GateRef::new(self.space.clone(), endpoint, instance);
            // Each read is its own memoized sub-script, so a long listing stays cheap to replay.
            match cx.recover(|cx| cx.call(&ObserveGate { gate: gate.clone() }))? {
                Ok(seen) => {
                    if let Some(seen) = seen.as_ref() {
                        rows.push(ListedGate::Read {
                            gate,
                            seen: seen.clone(),
                        });
                    }
                }
                Err(error) => rows.push(ListedGate::Unreadable { gate, error }),
            }
        }
        Ok(rows)
    }
}
