//! `cotal-authd gate ls|show`: read-only views of a space's issuance gates; `gate reconcile`:
//! the operator's liveness-guarded repair of one frozen registration gate.

use cotal_core::gate_view::{self, GateView, LeftFrozen};
use cotal_core::issuance::{GateRef, ObserveGate};
use cotal_core::kv::Store;
use cotal_core::machine::Replay;
use cotal_core::names::{EndpointName, InstanceId, SpaceName};
use cotal_core::plane_grants::{self, PlaneConnection};
use cotal_core::reconcile::ReconcileGate;
use cotal_core::registry::ListGates;
use std::path::PathBuf;
use std::sync::Arc;

use cotal_io_nats::authority::bind_with_creds;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{drive, AuthorityClient, Dial, NatsWorld, Space, SpaceOptions};

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

async fn read_gate(space: &Space, gate: GateRef) -> Result<Option<GateView>, String> {
    let seen = drive(&mut Replay::new(ObserveGate { gate: gate.clone() }), space)
        .await
        .map_err(|e| gate_view::unreadable(&gate, &e))?;
    Ok(seen.map(|seen| GateView::of(&gate, &seen)))
}

/// Runs `gate ls` (no `one`) or `gate show`; returns what to print.
pub async fn gate(args: GateArgs) -> Result<String, String> {
    let options = SpaceOptions::existing(&[Store::Auth, Store::Records]);
    if let Some(path) = &args.creds {
        let creds = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the creds file {}: {e}", path.display()))?;
        let label = PlaneConnection::AuthReader.label(&args.space);
        let space = bind_with_creds(&args.server, &label, &creds, args.space.clone(), options)
            .await
            .map_err(|e| e.message)?;
        return view(&args, &space).await;
    }
    let material = cotal_io_fs::trust::load_daemon(&args.root, &args.space)?;
    // A view reads with the reader's grants: read-only over the two authority stores.
    let client = AuthorityClient::for_operator(
        &args.server,
        &material,
        &args.space,
        PlaneConnection::AuthReader,
        plane_grants::auth_reader,
    )
    .await?;
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
            let found = read_gate(space, gate.clone())
                .await?
                .ok_or_else(|| gate_view::no_gate(&gate))?;
            gate_view::shown(&found, args.json)
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
            let (rows, unreadable) = gate_view::listed(listed);
            for why in unreadable {
                eprintln!("cotal-authd: {why}");
            }
            gate_view::listing(&rows, args.json)
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
    AuthorityClient::for_operator(
        server,
        material,
        &gate.space,
        PlaneConnection::GateReconcile,
        |space, conn| plane_grants::gate_reconcile(space, conn, &gate.endpoint, &gate.instance),
    )
    .await
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
    let oracle = Arc::new(Oracle::of_system(&args.server, &material, &args.space));
    let outcome = async {
        let bound = client.space().map_err(|e| e.message.clone())?;
        let before = read_gate(&bound, gate.clone()).await?;
        let result = NatsWorld::new(&bound)
            .with_oracle(&oracle)
            .run_script(ReconcileGate { gate: gate.clone() })
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
    match result {
        Ok(report) => Ok(Reconciled::Reopened(report.printed(
            &found,
            after.as_ref(),
            args.json,
        ))),
        Err(e) => match LeftFrozen::of(&e, &found, before.as_ref(), after.as_ref(), args.json) {
            Some(LeftFrozen { found, why }) => Ok(Reconciled::LeftFrozen { found, why }),
            None => Err(e.message),
        },
    }
}
