//! `cotal-authd gate ls|show`: read-only views of a space's issuance gates.

use cotal_core::issuance::{GateObservation, GateRef, ObserveGate};
use cotal_core::machine::Replay;
use cotal_core::names::{EndpointName, InstanceId, SpaceName};
use cotal_core::registry::{ListGates, ListedGate};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cotal_core::kv::Store;
use cotal_core::plane_grants::{self, PlaneConnection, AUTHORITY_CLIENT_TTL_SECS};
use cotal_io_nats::{
    drive, AuthorityClient, DataAccountSigner, Replicas, Space, SpaceOptions, StoreSet,
};
use serde_json::{json, Value};

/// Validated `gate` flags.
#[derive(Debug)]
pub struct GateArgs {
    pub space: SpaceName,
    pub server: String,
    /// The state root holding the space's trust root (the view signs its own read-only JWT).
    pub root: PathBuf,
    pub replicas: Replicas,
    pub json: bool,
    /// `show`: the one gate to print.
    pub one: Option<(EndpointName, InstanceId)>,
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
    let widths: Vec<usize> = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, (h, _))| {
            cells
                .iter()
                .filter_map(|r| r.get(i).map(String::len))
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |fields: Vec<&str>| {
        fields
            .iter()
            .zip(&widths)
            .map(|(f, w)| format!("{f:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(COLUMNS.iter().map(|(h, _)| *h).collect())];
    out.extend(
        cells
            .iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

async fn read_gate(space: &Space, gate: GateRef) -> Result<Option<Value>, String> {
    let seen = drive(&mut Replay::new(ObserveGate { gate: gate.clone() }), space)
        .await
        .map_err(|e| format!("reading gate {} failed: {e}", gate.key()))?;
    Ok(seen.map(|seen| row(&gate, &seen)))
}

/// Runs `gate ls` (no `one`) or `gate show`; returns what to print.
pub async fn gate(args: GateArgs) -> Result<String, String> {
    let material = cotal_io_fs::trust::load_daemon(&args.root, &args.space)?;
    let options = SpaceOptions {
        replicas: args.replicas,
        create_missing: false,
        stores: StoreSet::of(&[Store::Auth, Store::Records]),
        ..SpaceOptions::default()
    };
    // A view reads with the reader's grants: read-only over the two authority stores.
    let space_name = args.space.clone();
    let client = AuthorityClient::open(
        &args.server,
        PlaneConnection::AuthReader.label(&args.space),
        DataAccountSigner {
            account: material.data_account().to_owned(),
            signer: Arc::new(material.data_signing_key().clone()),
        },
        move |conn| plane_grants::auth_reader(&space_name, conn),
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
