//! A platform host embedding the plane (`cotal_authd::hosted`), end to end on a real server:
//! it provisions a space (the trust root `init` makes, its secrets moved into an injected
//! in-memory store, so the state dir keeps nothing secret), runs the space's operator-mode
//! nats-server, starts a hosted context for the assigned account, registers an incarnation of
//! its own reverse-DNS host endpoint, awaits that incarnation's fence, and is fenced by the
//! next start's registration of the same instance.
//!
//!     cargo run -p cotal-authd --example hosted_host
//!
//! It needs `nats-server` (`scripts/install-nats-server.sh`, or `COTAL_NATS_SERVER`).

use std::sync::Arc;
use std::time::Duration;

use cotal_authd::embedded;
use cotal_authd::hosted::{
    self, HostInput, HostedInputs, ObserveAssignment, Observed, PlatformControl,
};
use cotal_authd::trust_cmd::embedded_dir;
use cotal_core::names::SpaceName;
use cotal_io_fs::secrets::{MemorySecretStore, StoreIdentity};
use cotal_io_fs::trust;
use cotal_io_nats::Replicas;
use serde_json::json;

/// This example's platform assigns no control manager (its service door refuses every call).
#[derive(Debug)]
struct NoAssignment;

impl ObserveAssignment for NoAssignment {
    fn observe<'a>(&'a self, _space: &'a SpaceName, _account: &'a str) -> Observed<'a> {
        Box::pin(async { Ok(None) })
    }
}

/// The host's incarnation: stable across the host's restarts, so each start fences the last.
const INSTANCE: &str = "hostinstance00000000000001";

#[tokio::main]
async fn main() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("cotal-hosted-example-{}", std::process::id()));
    let result = run(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(state_dir: &std::path::Path) -> Result<(), String> {
    let space = SpaceName::parse("example").map_err(|e| e.message)?;

    // The platform's provisioning: a trust root, its broker, and the store it injects.
    trust::init(state_dir, &space, "http://127.0.0.1:4190")?;
    let broker = trust::load_broker(state_dir, &space)?;
    let server = embedded::start(&embedded_dir(state_dir, &space), false, |listen, store| {
        cotal_core::trust::broker_config(&broker, listen, store).map_err(|e| e.message)
    })?;
    let identity = StoreIdentity::injected("example-platform/store-1")?;
    let store = Arc::new(MemorySecretStore::new(Some(identity.clone())));
    trust::copy_secrets(state_dir, &space, store.as_ref())?;
    let account = trust::load_daemon(state_dir, &space)?
        .data_account()
        .to_owned();
    let secrets = trust::space_dir(state_dir, &space);
    for file in trust::secret_files() {
        std::fs::remove_file(secrets.join(file)).map_err(|e| format!("{file}: {e}"))?;
    }

    let outcome = host(state_dir, &space, &server.url, store, identity, account).await;
    server.stop();
    outcome
}

async fn host(
    state_dir: &std::path::Path,
    space: &SpaceName,
    server: &str,
    store: Arc<MemorySecretStore>,
    identity: StoreIdentity,
    account: String,
) -> Result<(), String> {
    let command = json!({
        "name": "work", "class": "ephemeral", "targeted": false, "capability": "host.work",
        "inputDigest": "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d",
        "outputDigest": "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d",
        "traits": [],
    });
    let handle = hosted::start(HostedInputs {
        account_public_key: account,
        lifecycle_uid: "examplelifecycle0000000001".to_owned(),
        space: space.as_str().to_owned(),
        servers: server.to_owned(),
        tls: cotal_io_nats::TlsSettings::default(),
        state_dir: state_dir.to_path_buf(),
        store,
        store_identity: identity,
        port: 0,
        public_face: None,
        platform_control: Some(PlatformControl {
            observe_assignment: Arc::new(NoAssignment),
            host: Some(HostInput {
                endpoint: "com.example.host".to_owned(),
                cluster: json!({
                    "urn": "com.example.host", "revision": 1, "attributes": [], "events": [],
                    "commands": [command],
                }),
                artifacts: Vec::new(),
            }),
        }),
        standing_ttl_secs: None,
        replicas: Replicas::One,
    })
    .await?;
    println!("hosted context: {}", handle.readiness().to_json());

    let first = handle
        .register_host_incarnation(INSTANCE)
        .await
        .map_err(|e| e.message)?;
    println!("registered {INSTANCE} at epoch {}", first.process_epoch.0);
    let epoch = json!(first.process_epoch.0);
    let fence = handle.await_host_fence(INSTANCE, &epoch);
    let restart = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        handle.register_host_incarnation(INSTANCE).await
    };
    let (fenced, second) = tokio::join!(fence, restart);
    let second = second.map_err(|e| e.message)?;
    let fenced = fenced.map_err(|e| e.message)?;
    let seen = fenced
        .observation()
        .map(|o| format!("{:?} at epoch {}", o.gate.state(), o.gate.process_epoch().0));
    println!(
        "the restart registered epoch {}; the incarnation at epoch {} is fenced (its gate: {})",
        second.process_epoch.0,
        first.process_epoch.0,
        seen.as_deref().unwrap_or("gone")
    );
    handle.close().await
}
