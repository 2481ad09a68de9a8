//! `manager-service-maintenance` (reference-auth-service §4.7): a registered remote manager asks
//! the plane to evict holders of its own credential family (`evict-family-principal`, the
//! eviction its registration barrier needs, F68) or to reconcile a frozen manager gate of the
//! space (`reconcile-registration`, a foreign slot holder's registration that died in flight,
//! F52).
//!
//! The request is closed and carries the manager envelope without any proof: what binds an
//! eviction to the caller is that the gate of its own instance records the caller's
//! server-derived serve principal, and that every principal it names is a holder the plane
//! itself enumerates in that instance's family (`epcred.manager.<iid>.*`). A reconciliation
//! binds nothing to the caller but the scope: it runs the same liveness-guarded repair as
//! `cotal-authd gate reconcile`, which reopens only a gate whose freeze holder is proven gone.
//!
//! The answer echoes the request exactly, adds the authenticated `owner`, and then one
//! `EvictionResult` per requested principal in request order, or the reconcile report.

use serde_json::{Map, Value};

use crate::barrier::enumerate_family;
use crate::error::EpError;
use crate::gate::GateState;
use crate::issuance::{observe_gate, GateRef};
use crate::liveness::EvictionEvidence;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{EndpointName, InstanceId, OwnerToken, Principal};
use crate::registration::EVICT_PRINCIPALS_MAX;
use crate::wire::{self, ObjectWriter};

use super::envelope::{
    echo_coordinates, parse_coordinates, parse_identities, with_envelope, ManagerEnvelope,
};
use super::host::{ManagerHost, Supervisor};

/// The request kind this door serves.
pub const MAINTENANCE_KIND: &str = "manager-service-maintenance";

/// The members a maintenance request may carry (the protocol is closed).
const MEMBERS: [&str; 11] = with_envelope(["operation", "targetInstanceId", "principals"]);

/// What a maintenance request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Maintenance {
    /// `evict-family-principal`: the principals exactly as sent (1 to
    /// [`EVICT_PRINCIPALS_MAX`], distinct, non-empty), in request order.
    Evict(Vec<String>),
    /// `reconcile-registration`.
    Reconcile,
}

impl Maintenance {
    pub const fn operation(&self) -> &'static str {
        match self {
            Maintenance::Evict(_) => "evict-family-principal",
            Maintenance::Reconcile => "reconcile-registration",
        }
    }
}

/// A parsed maintenance request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceRequest {
    pub envelope: ManagerEnvelope,
    /// The instance whose gate the request acts on: the caller's own for an eviction.
    pub target: InstanceId,
    pub maintenance: Maintenance,
}

fn refuse(detail: impl AsRef<str>) -> EpError {
    EpError::bad_request(format!(
        "manager-service maintenance request {}",
        detail.as_ref()
    ))
}

impl MaintenanceRequest {
    /// The reference's closed parser, in its order: an object, no unknown member, the
    /// operation, `{ v: 1, kind }`, the shared coordinates, the identities, the target, then
    /// the principals the operation requires or forbids. Every refusal is `bad-request`.
    pub fn parse(raw: &Value) -> Result<MaintenanceRequest, EpError> {
        let map = raw.as_object().ok_or_else(|| refuse("must be an object"))?;
        if let Some(key) = wire::unknown_member(map, &MEMBERS) {
            return Err(refuse(format!(
                "carries unknown field {key:?} (the protocol is closed)"
            )));
        }
        let evict =
            match map.get("operation").and_then(Value::as_str) {
                Some("evict-family-principal") => true,
                Some("reconcile-registration") => false,
                _ => return Err(refuse(
                    "operation must be \"evict-family-principal\" or \"reconcile-registration\"",
                )),
            };
        if map.get("v").and_then(Value::as_u64) != Some(1)
            || map.get("kind").and_then(Value::as_str) != Some(MAINTENANCE_KIND)
        {
            return Err(refuse(format!(
                "must carry {{ v: 1, kind: {MAINTENANCE_KIND:?} }}"
            )));
        }
        let coordinates = parse_coordinates(map, &|detail| refuse(detail))?;
        let identities = parse_identities(map.get("identities"), &|detail| refuse(detail))?;
        let target = map
            .get("targetInstanceId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refuse("requires non-empty targetInstanceId"))?;
        let target = InstanceId::parse(target)
            .map_err(|_| refuse("targetInstanceId must be a lifecycle token ^[a-z0-9]{26,32}$"))?;
        let maintenance = if evict {
            Maintenance::Evict(principals(map).ok_or_else(|| {
                refuse(format!(
                    "evict-family-principal requires 1 to {EVICT_PRINCIPALS_MAX} distinct \
                     non-empty principals"
                ))
            })?)
        } else if map.contains_key("principals") {
            return Err(refuse("reconcile-registration must not carry principals"));
        } else {
            Maintenance::Reconcile
        };
        Ok(MaintenanceRequest {
            envelope: coordinates.with(identities),
            target,
            maintenance,
        })
    }

    /// The manager gate the request acts on.
    pub fn target_gate(&self) -> Result<GateRef, EpError> {
        let endpoint = EndpointName::parse("manager").map_err(EpError::stored)?;
        Ok(GateRef::new(
            self.envelope.space.clone(),
            endpoint,
            self.target.clone(),
        ))
    }

    /// The request's echo as the answer opens it, in the reference's member order, followed
    /// by the authenticated `owner`; `outcome` is the result's closing member.
    fn echo(&self, owner: &OwnerToken, outcome: (&str, &str)) -> String {
        let e = &self.envelope;
        let w = ObjectWriter::new()
            .uint("v", 1)
            .string("kind", MAINTENANCE_KIND)
            .string("operation", self.maintenance.operation())
            .string("space", e.space.as_str());
        let mut w = echo_coordinates(w, e)
            .raw("identities", &e.identities.to_json())
            .string("targetInstanceId", self.target.as_str());
        if let Maintenance::Evict(principals) = &self.maintenance {
            w = w.strings("principals", principals.iter().map(String::as_str));
        }
        w.string("owner", owner.as_str())
            .raw(outcome.0, outcome.1)
            .finish()
    }

    /// The eviction answer: the echo, then one result per requested principal in request
    /// order. `evidence` is what the eviction reported, in the same order.
    pub fn eviction_answer(
        &self,
        owner: &OwnerToken,
        evidence: &[EvictionEvidence],
    ) -> Result<String, EpError> {
        let Maintenance::Evict(principals) = &self.maintenance else {
            return Err(EpError::internal(
                "an eviction answer was asked of a reconcile request",
            ));
        };
        if evidence.len() != principals.len()
            || evidence
                .iter()
                .zip(principals)
                .any(|(e, p)| e.principal.to_string() != *p)
        {
            return Err(EpError::internal(
                "the eviction reported evidence for other principals than the request named",
            ));
        }
        let items: Vec<String> = evidence.iter().map(EvictionEvidence::to_json).collect();
        Ok(self.echo(owner, ("evictions", &format!("[{}]", items.join(",")))))
    }

    /// The reconcile answer: the echo, then `reconciliation` (the report's JSON).
    pub fn reconcile_answer(&self, owner: &OwnerToken, report_json: &str) -> String {
        self.echo(owner, ("reconciliation", report_json))
    }
}

/// `principals`: an array of 1 to [`EVICT_PRINCIPALS_MAX`] distinct non-empty strings.
fn principals(map: &Map<String, Value>) -> Option<Vec<String>> {
    let items = map.get("principals")?.as_array()?;
    if items.is_empty() || items.len() > EVICT_PRINCIPALS_MAX {
        return None;
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let s = item.as_str().filter(|s| !s.is_empty())?;
        if out.iter().any(|seen| seen == s) {
            return None;
        }
        out.push(s.to_owned());
    }
    Some(out)
}

/// What an authorized maintenance request may do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaintenancePlan {
    /// Evict these family holders (request order) and verify them gone.
    Evict(Vec<Principal>),
    /// Run the liveness-guarded repair of this frozen manager gate.
    Reconcile(GateRef),
}

/// The door's authorization (`authorizeRemoteManagerMaintenance`), in the reference's order:
/// 1. the request's space is the host's (`permission-denied`);
/// 2. the holder's scope names `supervise` (`permission-denied`, F90);
/// 3. an eviction targets the caller's own instance (`permission-denied`);
/// 4. the target's manager gate exists and is not retired (`failed-precondition`);
/// 5. an eviction's gate records the caller's server-derived serve principal
///    (`permission-denied`, F28);
/// 6. every principal an eviction names is a holder the plane enumerates in the target's
///    family (`permission-denied` naming the others); the enumeration refuses a DEL/PURGE
///    marker or a row that does not parse.
///
/// Keeps F68 (only holders of the instance's own family, so a manager can never have the plane
/// kick another owner's connections) and F91 (the gate re-checked at every call). KV round
/// trips: 1 gate read; an eviction adds 1 listing and 1 read per family row.
#[derive(Debug, Clone)]
pub struct AuthorizeMaintenance {
    pub host: ManagerHost,
    pub caller: Supervisor,
    pub request: MaintenanceRequest,
}

impl Script for AuthorizeMaintenance {
    type Output = MaintenancePlan;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<MaintenancePlan, Halt> {
        let r = &self.request;
        let e = &r.envelope;
        if e.space != self.host.space {
            return Err(EpError::permission_denied(format!(
                "manager maintenance request names space {}, not this host space {}",
                e.space, self.host.space
            ))
            .into());
        }
        self.caller.require_supervise("manager maintenance")?;
        // A platform holder repairs only its own assigned instance, for reconcile as for
        // eviction, and only a gate its own serve principal holds: the human path may reconcile
        // a foreign slot holder, the platform's never probes, revokes, evicts or reopens a gate
        // a human owns (reference §7.3).
        let platform = self.caller.platform_assignment().is_some();
        let evicting = matches!(r.maintenance, Maintenance::Evict(_));
        if (evicting || platform) && r.target != e.instance_id {
            let what = if evicting {
                "eviction"
            } else {
                "by platform control"
            };
            return Err(EpError::permission_denied(format!(
                "manager maintenance {what} may target only caller instance {}, not {}",
                e.instance_id, r.target
            ))
            .into());
        }
        let gate = r.target_gate()?;
        let observed = observe_gate(cx, &gate)?
            .filter(|o| o.gate.state() != GateState::Retired)
            .ok_or_else(|| {
                EpError::failed_precondition(format!(
                    "manager maintenance found no live registration gate for instance {}",
                    r.target
                ))
            })?;
        if evicting || platform {
            let serve = e.serve_principal(self.caller.owner())?;
            if *observed.gate.principal() != serve {
                return Err(EpError::permission_denied(format!(
                    "manager maintenance gate belongs to {}, not the caller's server-derived \
                     serve principal {serve}",
                    observed.gate.principal()
                ))
                .into());
            }
        }
        let Maintenance::Evict(asked) = &r.maintenance else {
            return Ok(MaintenancePlan::Reconcile(gate));
        };
        let family = enumerate_family(cx, &gate)?;
        let holders: Vec<&Principal> = family.iter().map(|r| r.row.holder_principal()).collect();
        let mut inside = Vec::with_capacity(asked.len());
        let mut outside = Vec::new();
        for name in asked {
            match holders.iter().find(|h| h.to_string() == *name) {
                Some(holder) => inside.push((*holder).clone()),
                None => outside.push(name.as_str()),
            }
        }
        if !outside.is_empty() {
            return Err(EpError::permission_denied(format!(
                "manager maintenance may evict only holders enumerated in {}; outside that \
                 family: {}",
                gate.family_prefix().trim_end_matches('.'),
                outside.join(", ")
            ))
            .into());
        }
        Ok(MaintenancePlan::Evict(inside))
    }
}
