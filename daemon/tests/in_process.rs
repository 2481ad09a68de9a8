//! Two spaces' planes in one process, as a host platform runs them through the library
//! (`cotal_authd::plane::Plane`): each on its own operator-mode server from its own trust root.
//! Fencing one (a successor registers its instance) ends that plane alone as `Fenced`; cutting
//! the successor's sealed ledger scanner ends it as `Failed` (a restart, not a fence), readiness
//! `unavailable` with the operator copy; the other space keeps serving throughout and closes
//! cleanly.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::require_server;
use cotal_authd::embedded::{self, Embedded};
use cotal_authd::plane::{Ended, Plane, PlaneInputs};
use cotal_authd::trust_cmd::embedded_dir;
use cotal_core::liveness::Listing;
use cotal_core::names::SpaceName;
use cotal_core::plane_grants::PlaneConnection;
use cotal_io_fs::{instance, trust};
use cotal_io_http::face::probe;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::Replicas;

const IDP: &str = "http://127.0.0.1:4190";

/// Stops the embedded servers however the test ends (a failed assertion must not leak them).
struct Servers(Vec<Embedded>);

impl Drop for Servers {
    fn drop(&mut self) {
        for server in self.0.drain(..) {
            server.stop();
        }
    }
}

/// The space's trust root, its embedded server, and the plane's inputs.
fn space(root: &Path, name: &str) -> (PlaneInputs, Embedded) {
    let space = SpaceName::parse(name).unwrap();
    trust::init(root, &space, IDP).unwrap();
    let broker = trust::load_broker(root, &space).unwrap();
    let server = embedded::start(&embedded_dir(root, &space), false, |listen, store| {
        cotal_core::trust::broker_config(&broker, listen, store).map_err(|e| e.message)
    })
    .unwrap();
    let inputs = PlaneInputs {
        space: space.clone(),
        server: server.url.as_str().into(),
        root: root.to_path_buf(),
        replicas: Replicas::One,
        standby: false,
        ledger: cotal_io_fs::ledger_home::LedgerHome::Files(cotal_io_fs::FileActors::new(
            trust::space_dir(root, &space),
        )),
        material: trust::load_daemon(root, &space).unwrap(),
        identity: instance::load_or_create(root, &space).unwrap(),
        port: 0,
        public: None,
        standing_ttl: cotal_core::profiles::StandingTtl::DEFAULT,
        composition: cotal_authd::plane::Composition::Cli,
        secrets: std::sync::Arc::new(cotal_io_fs::FileSecretStore::new(root)),
    };
    (inputs, server)
}

#[test]
fn one_spaces_fence_leaves_the_other_space_serving() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let (a_inputs, a_server) = space(dir.path(), "alpha");
    let (b_inputs, b_server) = space(dir.path(), "beta");
    let _servers = Servers(vec![a_server, b_server]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (a, b) = tokio::join!(Plane::start(&a_inputs), Plane::start(&b_inputs));
        let (a, b) = (a.unwrap(), b.unwrap());
        for plane in [&a, &b] {
            let health = probe::health(&plane.loopback_url(), Duration::from_secs(2))
                .await
                .unwrap();
            assert_eq!(health["state"], "ready", "{health}");
        }

        // A successor of alpha's instance (a restart beside its running predecessor) fences
        // alpha by registering at the next epoch, then waits for alpha's claim.
        let successor = Plane::start(&a_inputs);
        tokio::pin!(successor);
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::select! {
                ended = a.ended() => ended,
                started = &mut successor => panic!(
                    "the successor finished starting before alpha ended: {:?}",
                    started.map(|_| ())
                ),
            }
        })
        .await
        .expect("alpha was not fenced within 10 s of its successor's start");
        let Ended::Fenced(why) = ended else {
            panic!("alpha ended otherwise: {ended:?}")
        };
        // The successor's freeze is what alpha sees first.
        assert!(why.contains("registration"), "{why}");
        a.close().await.unwrap();
        let a = successor.await.unwrap();
        assert_eq!(a.registered().process_epoch.0, 1);

        // Cut the successor's sealed ledger scanner with alpha's own system user.
        let oracle = Oracle::new(
            &a_inputs.server,
            a_inputs.material.system_user().creds(),
            a_inputs.material.data_account(),
            PlaneConnection::PlaneSystem.label(&a_inputs.space),
        );
        let scanner = PlaneConnection::AuthScan.label(&a_inputs.space);
        let Listing::Complete(conns) = oracle.sweep().await else {
            panic!("alpha's listing is incomplete")
        };
        let target = conns.iter().find(|c| c.name == scanner).unwrap();
        oracle.kick(&target.server.id, target.cid).await.unwrap();

        let ended = tokio::time::timeout(Duration::from_secs(3), a.ended())
            .await
            .expect("alpha's successor did not end within 3 s of losing its scanner");
        let Ended::Failed(copy) = ended else {
            panic!("alpha ended otherwise: {ended:?}")
        };
        assert!(copy.contains("STOPPED scanning"), "{copy}");
        let health = probe::health(&a.loopback_url(), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(health["state"], "unavailable", "{health}");
        assert_eq!(health["cause"], copy.as_str());

        // Beta is untouched: still serving, not ended, and it closes cleanly.
        assert!(
            tokio::time::timeout(Duration::from_millis(500), b.ended())
                .await
                .is_err(),
            "beta ended with alpha"
        );
        let health = probe::health(&b.loopback_url(), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(health["state"], "ready", "{health}");
        // Beta's inventory: every connection it owns, by label; only the short registration
        // connection has ended while it serves, and all have once it closed.
        let labels: Vec<String> = PlaneConnection::ALL
            .iter()
            .map(|role| role.label(&b_inputs.space))
            .collect();
        let serving = b.connections().await;
        assert_eq!(
            serving.iter().map(|c| c.label.clone()).collect::<Vec<_>>(),
            labels
        );
        for c in &serving {
            assert_eq!(c.ended, c.label.contains("auth-registration"), "{c:?}");
        }
        b.close().await.unwrap();
        assert!(b.connections().await.iter().all(|c| c.ended));
        a.close().await.unwrap();
        // Closing is idempotent.
        b.close().await.unwrap();
    });
}
