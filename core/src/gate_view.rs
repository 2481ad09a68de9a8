//! The operator's view of issuance gates: one gate as `gate ls|show` print it (a JSON object,
//! the table's cells, the sentence `gate reconcile` says of it before and after), the listings
//! `gate ls|show` print, and a reconcile's report (a reopen, or a refusal that leaves the gate
//! frozen) as lines and JSON. Presentation of rows the machines read; it decides
//! nothing, so a view can never drift from what the fence holds.

use serde_json::{json, Value};

use std::fmt::Display;

use crate::error::EpError;
use crate::gate::{Coordinates, GateState};
use crate::issuance::{GateObservation, GateRef};
use crate::reconcile::{ReconcileCondition, ReconcileReport};
use crate::registry::ListedGate;

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

/// `gate ls`'s rows of what [`crate::registry::ListGates`] listed, and the sentence of each
/// gate it could not read: an error row, reported while the listing goes on.
pub fn listed(listed: Vec<ListedGate>) -> (Vec<GateView>, Vec<String>) {
    let mut rows = Vec::new();
    let mut unreadable_rows = Vec::new();
    for listed in listed {
        match listed {
            ListedGate::Read { gate, seen } => rows.push(GateView::of(&gate, &seen)),
            ListedGate::Unreadable { gate, error } => {
                unreadable_rows.push(unreadable(&gate, &error));
            }
        }
    }
    (rows, unreadable_rows)
}

/// `gate ls` printed: the table of `rows`, or with `json` their objects as one array.
pub fn listing(rows: &[GateView], json: bool) -> String {
    if json {
        let rows = rows.iter().map(|r| r.to_json().clone()).collect();
        format!("{:#}", Value::Array(rows))
    } else {
        table(rows)
    }
}

/// `gate show` printed: the one gate's table, or with `json` its object.
pub fn shown(view: &GateView, json: bool) -> String {
    if json {
        format!("{:#}", view.to_json())
    } else {
        table(std::slice::from_ref(view))
    }
}

fn table(rows: &[GateView]) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(GateView::cells).collect();
    let headers: Vec<&str> = COLUMNS.iter().map(|(h, _)| *h).collect();
    crate::table::render(&headers, &cells)
}

/// `gate show` of a gate the space does not have.
pub fn no_gate(gate: &GateRef) -> String {
    format!(
        "space {} has no gate for endpoint {} instance {}",
        gate.space, gate.endpoint, gate.instance
    )
}

/// A gate whose read failed: `gate show`'s refusal, and `gate ls`'s error row (the listing goes
/// on).
pub fn unreadable(gate: &GateRef, error: &impl Display) -> String {
    format!("reading gate {} failed: {error}", gate.key())
}

/// A reconcile refused with the gate still frozen: what `gate reconcile` found, and the
/// sentence it fails with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftFrozen {
    pub found: String,
    pub why: String,
}

impl LeftFrozen {
    /// A reconcile refused with `error` (F14, F52: it never reopens over a live or unknown
    /// holder): with the gate `after` still frozen, what it found — the gate `before`, the
    /// servers' `findings`, the gate `after` — as lines or with `json` one object, and why the
    /// gate stays frozen. `None` when the gate is not frozen after (the refusal alone is said).
    pub fn of(
        error: &EpError,
        findings: &[String],
        before: Option<&GateView>,
        after: Option<&GateView>,
        json: bool,
    ) -> Option<LeftFrozen> {
        if !after.is_some_and(GateView::is_frozen) {
            return None;
        }
        let found = if json {
            format!(
                "{:#}",
                json!({
                    "reopened": false,
                    "condition": ReconcileCondition::of(error).map(ReconcileCondition::as_str),
                    "refusal": error.message,
                    "findings": findings,
                    "before": before.map(GateView::to_json),
                    "after": after.map(GateView::to_json),
                })
            )
        } else {
            let mut lines = Vec::new();
            if let Some(g) = before {
                lines.push(format!("found: {}", g.describe()));
            }
            lines.extend(findings.iter().map(|f| format!("found: {f}")));
            if let Some(g) = after {
                lines.push(format!("now: {}", g.describe()));
            }
            lines.join("\n")
        };
        Some(LeftFrozen {
            found,
            why: format!("the gate stays frozen: {}", error.message),
        })
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

    /// What `gate reconcile` prints of a reopen: [`ReconcileReport::operator_lines`], or with
    /// `json` [`ReconcileReport::operator_json`].
    pub fn printed(&self, findings: &[String], now: Option<&GateView>, json: bool) -> String {
        if json {
            format!("{:#}", self.operator_json(findings, now))
        } else {
            self.operator_lines(findings)
        }
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

    /// A provisioned, open gate.
    fn open_gate() -> EndpointGate {
        let holder = Principal::parse("u_aaaaaaaaaaaaaaaaaaaaaaaaaa.svc").unwrap();
        EndpointGate::provisioned(holder).unwrap()
    }

    /// `gate` frozen by a registration.
    fn frozen(gate: &EndpointGate) -> EndpointGate {
        let op = crate::gate::GateOp::registration(
            crate::names::OpId::parse("oooooooooooooooooooooooooo").unwrap(),
        );
        gate.frozen(op).unwrap()
    }

    /// `gate` as a read at KV revision `revision` saw it.
    fn seen(gate: EndpointGate, revision: u64) -> GateObservation {
        GateObservation {
            raw: gate.to_bytes(),
            gate,
            revision: Revision(revision),
        }
    }

    #[test]
    fn an_open_gate_reads_as_its_coordinates_with_no_operation() {
        // Its frozen twin below reads as frozen, with its operation as kind:opId.
        let g = gate();
        let view = GateView::of(&g, &seen(open_gate(), 7));
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
        let view = GateView::of(&g, &seen(frozen(&open_gate()), 8));
        assert!(view.is_frozen());
        assert_eq!(view.cell("op"), "registration:oooooooooooooooooooooooooo");
        assert!(
            view.describe()
                .ends_with("(op registration:oooooooooooooooooooooooooo, holder u_aaaaaaaaaaaaaaaaaaaaaaaaaa.svc)"),
            "{}",
            view.describe()
        );
    }

    /// `gate ls|show` print tables or pretty JSON; a missing or unreadable gate is one sentence
    /// naming it.
    #[test]
    fn the_listings_and_the_missing_gates_sentences() {
        let g = gate();
        let view = GateView::of(&g, &seen(open_gate(), 7));
        let table = shown(&view, false);
        assert_eq!(table, listing(std::slice::from_ref(&view), false));
        assert!(table.starts_with("ENDPOINT  INSTANCE"), "{table}");
        assert_eq!(table.lines().count(), 2);
        assert_eq!(listing(&[], false).lines().count(), 1);
        assert_eq!(shown(&view, true), format!("{:#}", view.to_json()));
        assert_eq!(
            listing(&[view.clone(), view.clone()], true),
            format!("{:#}", json!([view.to_json(), view.to_json()]))
        );
        let unread = ListedGate::Unreadable {
            gate: g.clone(),
            error: EpError::internal("not a gate"),
        };
        let (rows, unread) = listed(vec![
            ListedGate::Read {
                gate: g.clone(),
                seen: seen(open_gate(), 7),
            },
            unread,
        ]);
        assert_eq!(rows, vec![view.clone()]);
        assert_eq!(
            unread,
            vec![format!(
                "reading gate {} failed: {}",
                g.key(),
                EpError::internal("not a gate")
            )]
        );
        assert_eq!(
            no_gate(&g),
            "space demo has no gate for endpoint auth instance iiiiiiiiiiiiiiiiiiiiiiiiii"
        );
        assert_eq!(
            unreadable(&g, &"torn"),
            format!("reading gate {} failed: torn", g.key())
        );
    }

    /// F14, F52: a refused reconcile over a gate still frozen says what it found and why it
    /// stays frozen; over a gate no longer frozen it has nothing to add to the refusal.
    #[test]
    fn a_refusal_that_leaves_the_gate_frozen_says_what_it_found() {
        let g = gate();
        let holder = Principal::parse("u_aaaaaaaaaaaaaaaaaaaaaaaaaa.svc").unwrap();
        let open = EndpointGate::provisioned(holder).unwrap();
        let op = crate::gate::GateOp::registration(
            crate::names::OpId::parse("oooooooooooooooooooooooooo").unwrap(),
        );
        let frozen = open.frozen(op).unwrap();
        let seen = |gate: EndpointGate| GateObservation {
            raw: gate.to_bytes(),
            gate,
            revision: Revision(8),
        };
        let (open, frozen) = (
            GateView::of(&g, &seen(open)),
            GateView::of(&g, &seen(frozen)),
        );
        let error = EpError::unavailable("the holder is live");
        let findings = ["1 connection of the holder listed".to_owned()];
        assert_eq!(
            LeftFrozen::of(&error, &findings, Some(&frozen), Some(&open), false),
            None
        );
        assert_eq!(LeftFrozen::of(&error, &findings, None, None, false), None);
        let left = LeftFrozen::of(&error, &findings, Some(&frozen), Some(&frozen), false).unwrap();
        assert_eq!(left.why, "the gate stays frozen: the holder is live");
        assert_eq!(
            left.found,
            format!(
                "found: {}\nfound: 1 connection of the holder listed\nnow: {}",
                frozen.describe(),
                frozen.describe()
            )
        );
        let left = LeftFrozen::of(&error, &findings, None, Some(&frozen), true).unwrap();
        let found: Value = serde_json::from_str(&left.found).unwrap();
        assert_eq!(
            found,
            json!({
                "reopened": false,
                "condition": null,
                "refusal": "the holder is live",
                "findings": findings,
                "before": null,
                "after": frozen.to_json(),
            })
        );
    }
}
