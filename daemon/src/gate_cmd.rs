//! `cotal-authd gate ls|show`: read-only views of a space's issuance gates; `gate reconcile`:
//! the operator's liveness-guarded repair of one frozen registration gate.

use cotal_core::issuance::{GateObservation, GateRef, ObserveGate};
use cotal_core::machine::Replay;
use cotal_core::names::{EndpointName, InstanceId, SpaceName};
use cotal_core::reconcile::{ReconcileCondition, ReconcileGate, ReconcileReport};
use cotal_core::registry::{ListGates, ListedGate};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cotal_core::kv::Store;
use cotal_core::plane_grants::{self, PlaneConnection, AUTHORITY_CLIENT_TTL_SECS};
use cotal_io_nats::authority::connect_with_creds;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{
    drive, AuthorityClient, DataAccountSigner, Dial, NatsWorld, Space, SpaceOptions, StoreSet,
};
use serde_json::{json, Value};

use crate::audit;

/// Validated `gate` flags.
#[derive(Debug)]
pub struct GateArgs {
    pub space: SpaceName,
    pub server: Dial,
    /// The state root holding the space's trust root (the view signs its own read-only JWT).
    pub root: PathBuf,
    pub json: bool,
    /// `show`: the one gate to print.
    pub one: Option<(EndpointName, InstanceId)>,
    /// A creds file to connect with instead of a JWT minted from the trust root under `root`
    /// (an operator's read-only user, on a host without the trust root).
    pub creds: Option<PathBuf>,
}

/// One gate as the views print it.
fn row(gate: &GateRef, seen: &GateObservation) -> Value {
    let g = &seen.gate;
    json!({
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
    })
}

fn cell(v: &Value, field: &str) -> String {
    match v.get(field) {
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

const COLUMNS: [(&str, &str); 8] = [
    ("ENDPOINT", "endpoint"),
    ("INSTANCE", "instance"),
    ("STATE", "state"),
    ("GEN", "generation"),
    ("EPOCH", "processEpoch"),
    ("REGREV", "registrationRevision"),
    ("PRINCIPAL", "principal"),
    ("OP", "op"),
];

fn table(rows: &[Value]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| COLUMNS.iter().map(|(_, f)| cell(r, f)).collect())
        .collect();
    let headers: Vec<&str> = COLUMNS.iter().map(|(h, _)| *h).collect();
    crate::table::render(&headers, &cells)
}

async fn read_gate(space: &Space, gate: GateRef) -> Result<Option<Value>, String> {
    let seen = drive(&mut Replay::new(ObserveGate { gate: gate.clone() }), space)
        .await
        .map_err(|e| format!("reading gate {} failed: {e}", gate.key()))?;
    Ok(seen.map(|seen| row(&gate, &seen)))
}

/// Runs `gate ls` (no `one`) or `gate show`; returns what to print.
pub async fn gate(args: GateArgs) -> Result<String, String> {
    let options = SpaceOptions {
        create_missing: false,
        replicas_as_found: true,
        stores: StoreSet::of(&[Store::Auth, Store::Records]),
        ..SpaceOptions::default()
    };
    if let Some(path) = &args.creds {
        let creds = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the creds file {}: {e}", path.display()))?;
        let client = connect_with_creds(
            &args.server,
            &PlaneConnection::AuthReader.label(&args.space),
            &creds,
        )
        .await
        .map_err(|e| e.message)?;
        let space = Space::bind(client, args.space.clone(), options)
            .await
            .map_err(|e| e.message)?;
        return view(&args, &space).await;
    }
    let material = cotal_io_fs::trust::load_daemon(&args.root, &args.space)?;
    // A view reads with the reader's grants: read-only over the two authority stores.
    let space_name = args.space.clone();
    let client = AuthorityClient::open(
        &args.server,
        PlaneConnection::AuthReader.label(&args.space),
        DataAccountSigner {
            account: material.data_account().to_owned(),
            signer: Arc::new(material.data_signing_key().clone()),
        },
        move |conn| {
            plane_grants::auth_reader(&space_name, conn).map(cotal_core::profiles::host_user)
        },
        Duration::from_secs(AUTHORITY_CLIENT_TTL_SECS),
        args.space.clone(),
        options,
    )
    .await
    .map_err(|e| e.message.clone())?;
    let space = client.space().map_err(|e| e.message.clone())?;
    let out = view(&args, &space).await;
    drop(space);
    let _ = client.close().await;
    out
}

async fn view(args: &GateArgs, space: &Space) -> Result<String, String> {
    let out = match &args.one {
        Some((endpoint, instance)) => {
            let gate = GateRef::new(args.space.clone(), endpoint.clone(), instance.clone());
            let found = read_gate(space, gate).await?.ok_or_else(|| {
                format!(
                    "space {} has no gate for endpoint {endpoint} instance {instance}",
                    args.space
                )
            })?;
            if args.json {
                format!("{found:#}")
            } else {
                table(std::slice::from_ref(&found))
            }
        }
        None => {
            let listed = drive(
                &mut Replay::new(ListGates {
                    space: args.space.clone(),
                }),
                space,
            )
            .await
            .map_err(|e| e.message.clone())?;
            let mut rows = Vec::new();
            for listed in listed {
                match listed {
                    ListedGate::Read { gate, seen } => rows.push(row(&gate, &seen)),
                    // An unreadable gate is an error row: reported, and the listing goes on.
                    ListedGate::Unreadable { gate, error } => {
                        eprintln!("cotal-authd: reading gate {} failed: {error}", gate.key());
                    }
                }
            }
            if args.json {
                format!("{:#}", Value::Array(rows))
            } else {
                table(&rows)
            }
        }
    };
    let _ = space.client().drain().await;
    Ok(out)
}

/// Validated `gate reconcile` flags.
#[derive(Debug)]
pub struct ReconcileArgs {
    pub space: SpaceName,
    pub server: Dial,
    pub root: PathBuf,
    pub endpoint: EndpointName,
    pub instance: InstanceId,
    pub json: bool,
}

/// How a reconcile ended, with what it prints on stdout.
#[derive(Debug)]
pub enum Reconciled {
    /// The gate reopened.
    Reopened(String),
    /// The gate stays frozen (its holder is live or its liveness unknown, or an eviction went
    /// unverified): what was found, and the refusal sentence.
    LeftFrozen { found: String, why: String },
}

/// The reconciler's own short-lived connection for `gate`: the registration-executor rows of
/// exactly that instance (`plane_grants::gate_reconcile`), self-minted from the trust root.
/// Shared by `gate reconcile` and the manager maintenance door's `reconcile-registration`.
pub async fn open_reconciler(
    server: &Dial,
    material: &cotal_core::trust::DaemonMaterial,
    gate: &GateRef,
) -> Result<AuthorityClient, String> {
    let options = SpaceOptions {
        create_missing: false,
        replicas_as_found: true,
        stores: StoreSet::of(&[Store::Auth, Store::Records]),
        ..SpaceOptions::default()
    };
    let (space, endpoint, instance) = (
        gate.space.clone(),
        gate.endpoint.clone(),
        gate.instance.clone(),
    );
    AuthorityClient::open(
        server,
        PlaneConnection::GateReconcile.label(&gate.space),
        DataAccountSigner {
            account: material.data_account().to_owned(),
            signer: Arc::new(material.data_signing_key().clone()),
        },
        move |conn| {
            plane_grants::gate_reconcile(&space, conn, &endpoint, &instance)
                .map(cotal_core::profiles::host_user)
        },
        Duration::from_secs(AUTHORITY_CLIENT_TTL_SECS),
        gate.space.clone(),
        options,
    )
    .await
    .map_err(|e| e.message.clone())
}

/// Runs `gate reconcile`: the liveness-guarded repair of one frozen registration gate
/// ([`ReconcileGate`]: F14, F16, F52, F53, F68), with the servers' own connection listing as
/// the oracle and the system account's kick as the evictor. It never reopens over a live or
/// unknown holder. `Err` is a failure that left nothing to report (bad material, no server).
pub async fn reconcile(args: ReconcileArgs) -> Result<Reconciled, String> {
    let material = cotal_io_fs::trust::load_daemon(&args.root, &args.space)?;
    let gate = GateRef::new(
        args.space.clone(),
        args.endpoint.clone(),
        args.instance.clone(),
    );
    let client = open_reconciler(&args.server, &material, &gate).await?;
    let oracle = Arc::new(Oracle::new(
        &args.server,
        material.system_user().creds(),
        material.data_account(),
        PlaneConnection::PlaneSystem.label(&args.space),
    ));
    let outcome = async {
        let bound = client.space().map_err(|e| e.message.clone())?;
        let before = read_gate(&bound, gate.clone()).await?;
        let mut world = NatsWorld::new(&bound);
        world.set_prober(oracle.prober());
        world.set_evictor(oracle.evictor());
        let result = world
            .run(&mut Replay::new(ReconcileGate { gate: gate.clone() }))
            .await;
        let after = read_gate(&bound, gate.clone()).await.ok().flatten();
        Ok::<_, String>((before, result, after))
    }
    .await;
    let _ = client.close().await;
    let (before, result, after) = outcome?;
    match &result {
        Ok(report) => audit::granted(
            "operator",
            "reconcile",
            &gate.key(),
            audit::At {
                generation: Some(report.after.generation.0),
                epoch: Some(report.after.process_epoch.0),
            },
        ),
        Err(e) => audit::refused("operator", "reconcile", &gate.key(), e),
    }
    let found = oracle.findings();
    Ok(match result {
        Ok(report) => Reconciled::Reopened(if args.json {
            format!("{:#}", report_json(&report, &found, after.as_ref()))
        } else {
            report_text(&report, &found)
        }),
        Err(e) => {
            let condition = ReconcileCondition::of(&e);
            let frozen = after.as_ref().is_some_and(|g| g["state"] == "frozen");
            let mut lines = Vec::new();
            if let Some(g) = &before {
                lines.push(format!("found: {}", describe(g)));
            }
            lines.extend(found.iter().map(|f| format!("found: {f}")));
            if let Some(g) = &after {
                lines.push(format!("now: {}", describe(g)));
            }
            let found = if args.json {
                format!(
                    "{:#}",
                    json!({
                        "reopened": false,
                        "condition": condition.map(ReconcileCondition::as_str),
                        "refusal": e.message,
                        "findings": found,
                        "before": before,
                        "after": after,
                    })
                )
            } else {
                lines.join("\n")
            };
            if frozen {
                Reconciled::LeftFrozen {
                    found,
                    why: format!("the gate stays frozen: {}", e.message),
                }
            } else {
                return Err(e.message);
            }
        }
    })
}

fn describe(g: &Value) -> String {
    format!(
        "gate {}/{} is {} at generation {}, epoch {}, registration revision {}{}",
        cell(g, "endpoint"),
        cell(g, "instance"),
        cell(g, "state"),
        cell(g, "generation"),
        cell(g, "processEpoch"),
        cell(g, "registrationRevision"),
        match g.get("op") {
            Some(Value::Object(_)) =>
                format!(" (op {}, holder {})", cell(g, "op"), cell(g, "principal")),
            _ => String::new(),
        }
    )
}

fn report_text(r: &ReconcileReport, found: &[String]) -> String {
    let mut lines = vec![format!(
        "found: gate {} frozen by registration {} (holder {}) at generation {}, epoch {}",
        r.gate.key(),
        r.op_id,
        r.holder_principal,
        r.before.generation,
        r.before.process_epoch
    )];
    lines.extend(found.iter().map(|f| format!("found: {f}")));
    lines.push(format!(
        "did: revoked {} of {} credential row(s); verified {} holder(s) gone ({} already by an \
         earlier attempt)",
        r.revoked.len(),
        r.family_rows,
        r.holders.len(),
        r.holders_verified_before_attempt.len()
    ));
    lines.push(format!(
        "did: reopened the gate at generation {}, epoch {}, registration revision {} ({})",
        r.after.generation,
        r.after.process_epoch,
        r.after.registration_revision,
        if r.completed_registration {
            "completed the registration from its committed spec"
        } else {
            "aborted the registration at its unchanged coordinate"
        }
    ));
    lines.join("\n")
}

fn report_json(r: &ReconcileReport, found: &[String], after: Option<&Value>) -> Value {
    let coordinates = |c: &cotal_core::gate::Coordinates| {
        json!({
            "generation": c.generation.0,
            "processEpoch": c.process_epoch.0,
            "registrationRevision": c.registration_revision.0,
            "nameAuthorityRevision": c.name_authority_revision.0,
        })
    };
    json!({
        "reopened": true,
        "gate": r.gate.key(),
        "opId": r.op_id.as_str(),
        "holderPrincipal": r.holder_principal.to_string(),
        "freezeToken": r.freeze_token.0 .0,
        "liveness": r.liveness.as_str(),
        "familyRows": r.family_rows,
        "revoked": r.revoked.len(),
        "holders": r.holders.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "completedRegistration": r.completed_registration,
        "before": coordinates(&r.before),
        "after": coordinates(&r.after),
        "findings": found,
        "gateNow": after,
    })
}
