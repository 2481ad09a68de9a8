//! `cotal-authd gate ls|show`: read-only views of a space's issuance gates; `gate reconcile`:
//! the operator's liveness-guarded repair of one frozen registration gate.

use cotal_core::gate_view::{GateView, COLUMNS};
use cotal_core::issuance::{GateRef, ObserveGate};
use cotal_core::machine::Replay;
use cotal_core::names::{EndpointName, InstanceId, SpaceName};
use cotal_core::reconcile::{ReconcileCondition, ReconcileGate};
use cotal_core::registry::{ListGates, ListedGate};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cotal_core::kv::Store;
use cotal_core::plane_grants::{self, PlaneConnection, AUTHORITY_CLIENT_TTL_SECS};
use cotal_io_nats::authority::connect_with_creds;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{
    drive, AuthorityClient, DataAccountSigner, Dial, NatsWorld, Space, SpaceOptions,
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

fn table(rows: &[GateView]) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(GateView::cells).collect();
    let headers: Vec<&str> = COLUMNS.iter().map(|(h, _)| *h).collect();
    cotal_core::table::render(&headers, &cells)
}

async fn read_gate(space: &Space, gate: GateRef) -> Result<Option<GateView>, String> {
    let seen = drive(&mut Replay::new(ObserveGate { gate: gate.clone() }), space)
        .await
        .map_err(|e| format!("reading gate {} failed: {e}", gate.key()))?;
    Ok(seen.map(|seen| GateView::of(&gate, &seen)))
}

/// Runs `gate ls` (no `one`) or `gate show`; returns what to print.
pub async fn gate(args: GateArgs) -> Result<String, String> {
    let options = SpaceOptions::existing(&[Store::Auth, Store::Records]);
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
        DataAccountSigner::of(&material),
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
                format!("{:#}", found.to_json())
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
                    ListedGate::Read { gate, seen } => rows.push(GateView::of(&gate, &seen)),
                    // An unreadable gate is an error row: reported, and the listing goes on.
                    ListedGate::Unreadable { gate, error } => {
                        eprintln!("cotal-authd: reading gate {} failed: {error}", gate.key());
                    }
                }
            }
            if args.json {
                let rows = rows.iter().map(|r| r.to_json().clone()).collect();
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
    let (space, endpoint, instance) = (
        gate.space.clone(),
        gate.endpoint.clone(),
        gate.instance.clone(),
    );
    AuthorityClient::open(
        server,
        PlaneConnection::GateReconcile.label(&gate.space),
        DataAccountSigner::of(material),
        move |conn| {
            plane_grants::gate_reconcile(&space, conn, &endpoint, &instance)
                .map(cotal_core::profiles::host_user)
        },
        Duration::from_secs(AUTHORITY_CLIENT_TTL_SECS),
        gate.space.clone(),
        SpaceOptions::existing(&[Store::Auth, Store::Records]),
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
            format!("{:#}", report.operator_json(&found, after.as_ref()))
        } else {
            report.operator_lines(&found)
        }),
        Err(e) => {
            let condition = ReconcileCondition::of(&e);
            let frozen = after.as_ref().is_some_and(GateView::is_frozen);
            let mut lines = Vec::new();
            if let Some(g) = &before {
                lines.push(format!("found: {}", g.describe()));
            }
            lines.extend(found.iter().map(|f| format!("found: {f}")));
            if let Some(g) = &after {
                lines.push(format!("now: {}", g.describe()));
            }
            let found = if args.json {
                format!(
                    "{:#}",
                    json!({
                        "reopened": false,
                        "condition": condition.map(ReconcileCondition::as_str),
                        "refusal": e.message,
                        "findings": found,
                        "before": before.as_ref().map(GateView::to_json),
                        "after": after.as_ref().map(GateView::to_json),
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
