//! The operator's view of issuance gates: one gate as `gate ls|show` print it (a JSON object,
//! the table's cells, the sentence `gate reconcile` says of it before and after), and a
//! reconcile's report as lines and JSON. Presentation of rows the machines read; it decides
//! nothing, so a view can never drift from what the fence holds.

use serde_json::{json, Value};

use crate::gate::{Coordinates, GateState};
use crate::issuance::{GateObservation, GateRef};
use crate::reconcile::ReconcileReport;

/// The table's columns: header and JSON member.
pub const COLUMNS: [(&str, &str); 8] = [
    ("ENDPOINT", "endpoint"),
    ("INSTANCE", "instance"),
    ("STATE", "state"),
    ("GEN", "generation"),
    ("EPOCH", "processEpoch"),
    ("REGREV", "registrationRevision"),
    ("PRINCIPAL", "principal"),
    ("OP", "op"),
];

/// One gate as the views show it: its coordinates, holder and operation as one JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct GateView(Value);

impl GateView {
    /// The view of `gate` as `seen` (its KV revision included).
    pub fn of(gate: &GateRef, seen: &GateObservation) -> GateView {
        let g = &seen.gate;
        GateView(json!({
            "endpoint": gate.endpoint.as_str(),
            "instance": gate.instance.as_str(),
            "state": g.state().as_str(),
            "generation": g.generation().0,
            "processEpoch": g.process_epoch().0,
            "registrationRevision": g.registration_revision().0,
            "nameAuthorityRevision": g.name_authority_revision().0,
            "principal": g.principal().to_string(),
            "op": g.op().map(|op| json!({"opId": op.op_id().as_str(), "kind": op.kind().as_str()})),
            "kvRevision": seen.revision.0,
        }))
    }

    pub fn to_json(&self) -> &Value {
        &self.0
    }

    /// Whether the gate is frozen.
    pub fn is_frozen(&self) -> bool {
        self.0.get("state").and_then(Value::as_str) == Some(GateState::Frozen.as_str())
    }

    /// One table cell: a string as is, an absent member `-`, the operation as `kind:opId`.
    pub fn cell(&self, field: &str) -> String {
        match self.0.get(field) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => "-".into(),
            Some(Value::Object(op)) => format!(
                "{}:{}",
                op.get("kind").and_then(Value::as_str).unwrap_or("?"),
                op.get("opId").and_then(Value::as_str).unwrap_or("?")
            ),
            Some(other) => other.to_string(),
        }
    }

    /// The table row: one cell per [`COLUMNS`] entry.
    pub fn cells(&self) -> Vec<String> {
        COLUMNS.iter().map(|(_, field)| self.cell(field)).collect()
    }

    /// The gate in one clause: `gate E/I is STATE at generation …`, and its operation and
    /// holder when one holds it.
    pub fn describe(&self) -> String {
        format!(
            "gate {}/{} is {} at generation {}, epoch {}, registration revision {}{}",
            self.cell("endpoint"),
            self.cell("instance"),
            self.cell("state"),
            self.cell("generation"),
            self.cell("processEpoch"),
            self.cell("registrationRevision"),
            match self.0.get("op") {
                Some(Value::Object(_)) => format!(
                    " (op {}, holder {})",
                    self.cell("op"),
                    self.cell("principal")
                ),
                _ => String::new(),
            }
        )
    }
}

impl ReconcileReport {
    /// What `gate reconcile` prints of a reopen: what it found (the freeze and the servers'
    /// `findings`), then what it did.
    pub fn operator_lines(&self, findings: &[String]) -> String {
        let mut lines = vec![format!(
            "found: gate {} frozen by registration {} (holder {}) at generation {}, epoch {}",
            self.gate.key(),
            self.op_id,
            self.holder_principal,
            self.before.generation,
            self.before.process_epoch
        )];
        lines.extend(findings.iter().map(|f| format!("found: {f}")));
        lines.push(format!(
            "did: revoked {} of {} credential row(s); verified {} holder(s) gone ({} already by \
             an earlier attempt)",
            self.revoked.len(),
            self.family_rows,
            self.holders.len(),
            self.holders_verified_before_attempt.len()
        ));
        lines.push(format!(
            "did: reopened the gate at generation {}, epoch {}, registration revision {} ({})",
            self.after.generation,
            self.after.process_epoch,
            self.after.registration_revision,
            if self.completed_registration {
                "completed the registration from its committed spec"
            } else {
                "aborted the registration at its unchanged coordinate"
            }
        ));
        lines.join("\n")
    }

    /// `gate reconcile --json` of a reopen: the report, the servers' `findings` and the gate
    /// as read afterwards.
    pub fn operator_json(&self, findings: &[String], now: Option<&GateView>) -> Value {
        let coordinates = |c: &Coordinates| {
            json!({
                "generation": c.generation.0,
                "processEpoch": c.process_epoch.0,
                "registrationRevision": c.registration_revision.0,
                "nameAuthorityRevision": c.name_authority_revision.0,
            })
        };
        json!({
            "reopened": true,
            "gate": self.gate.key(),
            "opId": self.op_id.as_str(),
            "holderPrincipal": self.holder_principal.to_string(),
            "freezeToken": self.freeze_token.0 .0,
            "liveness": self.liveness.as_str(),
            "familyRows": self.family_rows,
            "revoked": self.revoked.len(),
            "holders": self.holders.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "completedRegistration": self.completed_registration,
            "before": coordinates(&self.before),
            "after": coordinates(&self.after),
            "findings": findings,
            "gateNow": now.map(GateView::to_json),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::gate::EndpointGate;
    use crate::kv::Revision;
    use crate::names::{EndpointName, InstanceId, Principal, SpaceName};

    fn gate() -> GateRef {
        GateRef::new(
            SpaceName::parse("demo").unwrap(),
            EndpointName::parse("auth").unwrap(),
            InstanceId::parse("iiiiiiiiiiiiiiiiiiiiiiiiii").unwrap(),
        )
    }

    #[test]
    fn an_open_gate_reads_as_its_coordinates_with_no_operation() {
        // Its frozen twin below reads as frozen, with its operation as kind:opId.
        let g = gate();
        let holder = Principal::parse("u_aaaaaaaaaaaaaaaaaaaaaaaaaa.svc").unwrap();
        let open = EndpointGate::provisioned(holder).unwrap();
        let seen = GateObservation {
            raw: open.to_bytes(),
            gate: open,
            revision: Revision(7),
        };
        let view = GateView::of(&g, &seen);
        assert!(!view.is_frozen());
        assert_eq!(view.cell("op"), "-");
        assert_eq!(view.to_json()["kvRevision"], 7);
        assert_eq!(view.cells().len(), COLUMNS.len());
        assert!(
            view.describe()
                .starts_with("gate auth/iiiiiiiiiiiiiiiiiiiiiiiiii is open at generation "),
            "{}",
            view.describe()
        );
        let op = crate::gate::GateOp::registration(
            crate::names::OpId::parse("oooooooooooooooooooooooooo").unwrap(),
        );
        let frozen = seen.gate.frozen(op).unwrap();
        let seen = GateObservation {
            raw: frozen.to_bytes(),
            gate: frozen,
            revision: Revision(8),
        };
        let view = GateView::of(&g, &seen);
        assert!(view.is_frozen());
        assert_eq!(view.cell("op"), "registration:oooooooooooooooooooooooooo");
        assert!(
            view.describe()
                .ends_with("(op registration:oooooooooooooooooooooooooo, holder u_aaaaaaaaaaaaaaaaaaaaaaaaaa.svc)"),
            "{}",
            view.describe()
        );
    }
}
