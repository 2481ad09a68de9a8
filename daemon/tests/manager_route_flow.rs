//! The manager route end to end (issue 12): `POST /manager-service-authority` on the running
//! daemon over real HTTP, against a manager instance registered on the space's own
//! operator-mode server — `prepare`, the instance's registration, `activate`, `renew`,
//! `renewStandingBundle` and `renewRunDriver`, each answer's credentials verified against the
//! data account and connected to the real server, the proofs each answer returns carried into
//! the next request (the order of `core/tests/renewal_cells.rs`, now on the plane's restricted
//! remote-manager issuer connection).
//!
//! What is real: the IdP token, the grant ledger, the plane and its issuer connection, every
//! KV row the route reads and writes, the contract publication (on the connection of the
//! supervisor credential `prepare` issued), the registration ceremony's gate, ledger and
//! records writes on a real server (with the servers' own connection listing as the liveness
//! oracle and the system account's kick as the evictor), and every connect.
//!
//! What stands in for a missing piece, each marked `STAND-IN` where it happens:
//! * the manager gate `epgate.manager.<iid>` is provisioned by the test's admin connection: no
//!   plane path provisions a remote manager's gate;
//! * the registration ceremony runs on a connection the test signs with exactly the plane's
//!   registration-executor rows for `manager/<iid>` (`plane_grants::gate_reconcile`), under a
//!   static name authority binding `manager` to the owner: F98 took the auth-bucket rows out of
//!   the `remote-manager` profile ("the plane owns those writes"), but no plane door runs or
//!   authorizes a remote manager's registration, and nothing on a real server holds the
//!   operator's provisioning authority for the single-label name `manager`;
//! * the hosted run a `renewRunDriver` renews is written by the admin connection: this plane
//!   does not serve `manager-run-admission`/`manager-run-attempt` yet.
//!
//! Regressions this flow found on the real server (the model has no grants): the issuer
//! connection could not write the renewal cleanup intent `renewclean.manager.<iid>`, so every
//! `activate` stalled on an unacknowledged write, and it bound no contract store, so every
//! `renewStandingBundle` was refused reading the registered closures
//! (`plane_grants::remote_manager_issuer` rows 18–20).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::signin::{post_to, Space};
use common::*;
use cotal_core::authority::SelfAuthority;
use cotal_core::canon::Digest;
use cotal_core::contract::{artifact_canonical_bytes, ClusterManifest};
use cotal_core::gate::{EndpointGate, GateState};
use cotal_core::issuance::{observe_gate, GateRef, ProvisionGate};
use cotal_core::journal::{FencingToken, RunEpoch, RunHolder, RunId};
use cotal_core::jwt::{self, ClaimType, Claims, Creds, UnixSeconds};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::{script, Replay};
use cotal_core::manager::{
    current_registration_proof, registration_proof, ManagerAuthorityRequest, ProofSecret,
};
use cotal_core::names::{CredentialId, EndpointName, InstanceId, OpId, OwnerToken, SpaceName};
use cotal_core::plane_grants;
use cotal_core::registration::{RegisterInstance, Registered, EVICT_PRINCIPALS_MAX};
use cotal_core::run::{write_run_status, HostedRunStatus, RunState};
use cotal_core::service::ServiceSpec;
use cotal_core::trust::DaemonMaterial;
use cotal_io_nats::async_nats::{self, jetstream, Client, ConnectOptions};
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{drive, AuthorityClient, DataAccountSigner, NatsWorld, SpaceOptions, StoreSet};
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;

/// The manager instance and its lifecycle uid.
const IID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";
const UID: &str = "llllllllllllllllllllllllll";
/// The manager's registered commands.
const COMMANDS: [&str; 3] = ["spawn", "status", "turn"];
const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";
const RUN: &str = "run-0123456789abcdef0123456789abcdef";
const TAKEOVER: &str = "00112233aabbccdd";
const STANDING_SECS: u64 = 86_400;
const EXECUTOR_SECS: u64 = 300;
/// A subject no issued credential may publish on (see [`Holder::violations`]).
const SENTINEL: &str = "cotal.sentinel.never.granted";

fn space_name() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn manager_gate() -> GateRef {
    GateRef::new(
        space_name(),
        EndpointName::parse("manager").unwrap(),
        InstanceId::parse(IID).unwrap(),
    )
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn key(n: u8) -> KeyPair {
    KeyPair::new_from_raw(KeyPairType::User, [n; 32]).unwrap()
}

/// The `ai.cotal.manager` cluster document the manager registers and activates with.
fn manager_document() -> Value {
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|c| {
            json!({"name": c, "class": "ephemeral", "targeted": false,
                   "capability": format!("x.{c}"), "inputDigest": VOID, "outputDigest": VOID,
                   "traits": []})
        })
        .collect();
    json!({"urn": "ai.cotal.manager", "revision": 1, "attributes": [], "events": [],
           "commands": commands})
}

/// The family row key of an issued endpoint-family JWT: `epcred.manager.<iid>.sha256-<hex>`,
/// the credential id being the JWT's digest (reference §4.4).
fn row_key(token: &str) -> String {
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    format!(
        "{}{}",
        manager_gate().family_prefix(),
        CredentialId::from_sha256_hex(&digest)
    )
}

/// The sorted, deduplicated row keys of `tokens`.
fn row_keys<'a>(tokens: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let mut keys: Vec<String> = tokens.into_iter().map(|t| row_key(t)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// A run attempt's fence as the request carries it and the hosted run records it.
struct RunFence {
    holder: String,
    epoch: u64,
    token: u64,
}

/// One connection made with an issued credential; server errors (permission violations)
/// arrive on `errors`.
struct Holder {
    client: Client,
    errors: mpsc::UnboundedReceiver<String>,
}

impl Holder {
    /// The permission violations the server reported for everything sent so far. A publish on
    /// [`SENTINEL`], a subject no credential here is granted, marks the end: the server
    /// reports violations in order, so every error before the sentinel's is one of ours.
    async fn violations(&mut self) -> Vec<String> {
        self.client.publish(SENTINEL, "".into()).await.unwrap();
        self.client.flush().await.unwrap();
        let mut seen = Vec::new();
        loop {
            let e = tokio::time::timeout(READY_TIMEOUT, self.errors.recv())
                .await
                .expect("the server did not report the sentinel's violation")
                .expect("the connection's event stream ended");
            if e.contains(SENTINEL) {
                return seen;
            }
            seen.push(e);
        }
    }
}

/// A plane on the space's own server, `alice/cli` granted `supervise`, the manager's five
/// held nkeys, and the test's unrestricted admin view of the stores.
struct Flow {
    space: Space,
    d: Value,
    server: String,
    owner: String,
    admin: AuthorityClient,
    material: DaemonMaterial,
    /// supervisor, executor, serve, goalWriter, sessionLedger.
    keys: Vec<KeyPair>,
    /// The run driver and mediator nkeys.
    driver: KeyPair,
    mediator: KeyPair,
}

impl Flow {
    async fn new() -> Flow {
        let mut space = Space::new();
        space.grant(
            "cli",
            "alice",
            &[
                "--scope",
                "supervise",
                "--allow-subscribe",
                "",
                "--allow-publish",
                "",
            ],
        );
        let server = space.serve_broker();
        let d = space.up(&["--server", &server]);
        let owner = space.owner("alice");
        let admin = space.admin(&server).await;
        let material = cotal_io_fs::trust::load_daemon(&space.root, &space_name()).unwrap();
        Flow {
            space,
            d,
            server,
            owner,
            admin,
            material,
            keys: (1..=5).map(key).collect(),
            driver: key(11),
            mediator: key(12),
        }
    }

    fn owner_token(&self) -> OwnerToken {
        OwnerToken::parse(&self.owner).unwrap()
    }

    /// The request envelope of `operation` for the held nkeys.
    fn envelope(&self, operation: &str, rid: &str) -> Value {
        let id = |k: &KeyPair| json!({"id": k.public_key()});
        json!({
            "v": 1, "kind": "manager-service-authority", "operation": operation,
            "space": SPACE, "actor": "cli", "instanceId": IID, "managerLifecycleUid": UID,
            "requestId": rid,
            "identities": {
                "supervisor": id(&self.keys[0]), "executor": id(&self.keys[1]),
                "serve": id(&self.keys[2]), "goalWriter": id(&self.keys[3]),
                "sessionLedger": id(&self.keys[4]),
            },
        })
    }

    /// `activate` with the manager document and its deterministic registration proof.
    fn activate_request(&self, rid: &str) -> Value {
        let mut raw = self.envelope("activate", rid);
        raw["contractArtifacts"] = json!([manager_document()]);
        raw["registrationProof"] = json!(format!("sha256:{}", "0".repeat(64)));
        let parsed = ManagerAuthorityRequest::parse(&raw).unwrap();
        let proof = registration_proof(&self.owner_token(), &parsed).unwrap();
        raw["registrationProof"] = json!(proof.as_str());
        raw
    }

    /// A renewal of `operation` presenting `proof` at serve epoch `epoch` for the data account.
    fn renewal(&self, operation: &str, rid: &str, proof: &str, epoch: u64) -> Value {
        let mut raw = self.envelope(operation, rid);
        raw["registrationProof"] = json!(proof);
        raw["accountPublicKey"] = json!(self.material.data_account());
        raw["processEpoch"] = json!(epoch);
        raw
    }

    fn run_fence(&self) -> RunFence {
        RunFence {
            holder: format!("{}.{TAKEOVER}", self.keys[0].public_key()),
            epoch: 2,
            token: 7,
        }
    }

    fn run_request(&self, proof: &str, epoch: u64, fence: &RunFence) -> Value {
        let mut raw = self.renewal("renewRunDriver", "rundriver000000000000001", proof, epoch);
        raw["run"] = json!({
            "runId": RUN, "holder": fence.holder, "takeoverId": TAKEOVER, "epoch": fence.epoch,
            "fencingToken": fence.token, "driverId": self.driver.public_key(),
            "mediatorId": self.mediator.public_key(),
        });
        raw
    }

    /// `POST /manager-service-authority` on the loopback face with a fresh IdP token.
    fn ask(&self, request: &Value) -> (u16, Value) {
        post_to(
            self.d["url"].as_str().unwrap(),
            "/manager-service-authority",
            self.d["cap"].as_str(),
            &json!({"idpToken": self.space.idp_token("alice"), "request": request}),
        )
    }

    /// [`Flow::ask`], which must answer 200.
    fn granted(&self, request: &Value) -> Value {
        let (status, body) = self.ask(request);
        assert_eq!(status, 200, "{}: {body}", request["operation"]);
        assert!(!body.to_string().contains("seed"), "{body}");
        body
    }

    /// [`Flow::ask`], which must answer 403 with a sentence containing `says`.
    fn refused(&self, request: &Value, says: &str) {
        let (status, body) = self.ask(request);
        assert_eq!(status, 403, "{}: {body}", request["operation"]);
        assert!(error(&body).contains(says), "{says:?} not in {body}");
    }

    /// The answer's credential `name`: its JWT verified against the data account's signing
    /// key, for the `holder` nkey, in the data account, with its `exp` the answer states.
    fn credential(&self, body: &Value, name: &str, holder: &KeyPair) -> (String, Claims) {
        let c = &body["credentials"][name];
        let token = c["jwt"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {body}"));
        let claims = jwt::verify(
            token,
            ClaimType::User,
            &self.material.data_signing_key().public_key(),
            UnixSeconds(now_secs()),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(claims.sub, holder.public_key(), "{name}");
        assert_eq!(
            claims.user_account(),
            Some(self.material.data_account()),
            "{name}"
        );
        assert_eq!(c["exp"].as_u64(), claims.exp.map(|e| e.0), "{name}");
        (token.to_owned(), claims)
    }

    /// Every credential name of an answer, sorted.
    fn names(body: &Value) -> Vec<String> {
        let mut names: Vec<String> = body["credentials"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        names.sort_unstable();
        names
    }

    /// Connects to the real server with an issued credential for `holder`, on its own
    /// connection-scoped inbox; the server must admit it.
    async fn connect(&self, token: &str, holder: &KeyPair) -> Holder {
        let creds = Creds {
            jwt: token.to_owned(),
            seed: holder.seed().unwrap(),
        };
        let (tx, errors) = mpsc::unbounded_channel();
        // A kicked holder stays gone for the test: with its JWT still valid the server would
        // admit a reconnect, and the ceremony's verified eviction would then (rightly) stay
        // unverified. async-nats reads 0 reconnects as "no limit" and asks the delay callback
        // before the first connect too, so the first attempt is immediate and any later one
        // waits past the test.
        let attempts = AtomicUsize::new(0);
        let client = ConnectOptions::with_credentials(&creds.text())
            .unwrap()
            .custom_inbox_prefix(format!("_INBOX_{}", holder.public_key()))
            .max_reconnects(Some(1))
            .reconnect_delay_callback(move |_| {
                if attempts.fetch_add(1, Ordering::Relaxed) == 0 {
                    Duration::ZERO
                } else {
                    Duration::from_secs(3600)
                }
            })
            .connection_timeout(Duration::from_secs(5))
            .event_callback(move |event| {
                let tx = tx.clone();
                async move {
                    if let async_nats::Event::ServerError(e) = event {
                        let _ = tx.send(e.to_string());
                    }
                }
            })
            .connect(&self.server)
            .await
            .unwrap_or_else(|e| panic!("the server refused {}: {e}", holder.public_key()));
        Holder { client, errors }
    }

    /// The manager gate as the store holds it (a leader read).
    async fn gate(&self) -> EndpointGate {
        let gate = manager_gate();
        drive(
            &mut Replay::new(script(move |cx| observe_gate(cx, &gate))),
            &self.admin.space().unwrap(),
        )
        .await
        .unwrap()
        .expect("the manager gate is absent")
        .gate
    }

    /// The host's current-registration proof for the held nkeys at the gate as it stands.
    async fn current_proof(&self) -> String {
        let gate = self.gate().await;
        let envelope =
            ManagerAuthorityRequest::parse(&self.envelope("prepare", "proof000000000000000001"))
                .unwrap()
                .envelope;
        current_registration_proof(
            &ProofSecret::new(self.material.data_signing_key().seed().unwrap()),
            &self.owner_token(),
            &envelope,
            gate.registration_revision(),
            gate.process_epoch(),
        )
        .as_str()
        .to_owned()
    }

    /// The manager instance's credential family `epcred.manager.<iid>.*`: (key, holder actor,
    /// state) per row, sorted by key.
    async fn family(&self) -> Vec<(String, String, CredState)> {
        let bound = self.admin.space().unwrap();
        let prefix = manager_gate().family_prefix();
        let KvOutcome::Keys(keys) = bound
            .execute(&KvRequest::Keys {
                store: Store::Auth,
                prefix,
            })
            .await
        else {
            panic!("the family listing failed");
        };
        let mut rows = Vec::new();
        for k in keys {
            let KvOutcome::Entry(Some(entry)) = bound
                .execute(&KvRequest::Get {
                    store: Store::Auth,
                    key: k.clone(),
                })
                .await
            else {
                panic!("{k} is unreadable");
            };
            let row = LedgerRow::parse(&entry.value, &k).unwrap();
            rows.push((
                k,
                row.holder_principal().actor().as_str().to_owned(),
                row.state(),
            ));
        }
        rows
    }

    /// The keys of the family's active rows, sorted.
    async fn active(&self) -> Vec<String> {
        self.family()
            .await
            .into_iter()
            .filter(|(_, _, s)| *s == CredState::Active)
            .map(|(k, _, _)| k)
            .collect()
    }

    /// STAND-IN (no plane path provisions a remote manager's gate): the admin connection
    /// provisions `epgate.manager.<iid>` open at generation 0 for the owner's server-derived
    /// serve principal `<owner>.manager_serve_<iid>`.
    async fn provision(&self) {
        let envelope =
            ManagerAuthorityRequest::parse(&self.envelope("prepare", "provision0000000000000001"))
                .unwrap()
                .envelope;
        let serve = envelope.serve_principal(&self.owner_token()).unwrap();
        drive(
            &mut ProvisionGate::machine(manager_gate(), serve),
            &self.admin.space().unwrap(),
        )
        .await
        .unwrap();
    }

    /// Publishes the manager's cluster (root document, then manifest) on the supervisor
    /// credential's own connection — its `P.epc.*` row, one create-only message per digest —
    /// and returns the closure digest a service spec names. Real: what `prepare` issued is what
    /// publishes the manager's contract.
    async fn publish_contract(&self, supervisor: &Holder) -> Digest {
        let js = jetstream::new(supervisor.client.clone());
        let publish = |bytes: Vec<u8>| {
            let js = js.clone();
            async move {
                let digest = Digest::of(&bytes);
                let ack = js
                    .send_publish(
                        format!("cotal.{SPACE}.epc.{}", digest.hex()),
                        jetstream::message::PublishMessage::build()
                            .payload(bytes.into())
                            .expected_last_subject_sequence(0),
                    )
                    .await
                    .unwrap()
                    .await;
                ack.unwrap_or_else(|e| panic!("publishing artifact {digest} failed: {e}"));
                digest
            }
        };
        let root = publish(artifact_canonical_bytes(&manager_document()).unwrap()).await;
        publish(ClusterManifest::new(root).to_bytes()).await
    }

    /// The registration ceremony of the manager instance under op `op`, for the spec naming
    /// `closure`, on a real server.
    ///
    /// STAND-IN (no plane door runs, or authorizes, a remote manager's registration): the
    /// ceremony runs on a connection the test signs from the trust root with exactly the
    /// registration-executor rows the plane would scope to `manager/<iid>`
    /// (`plane_grants::gate_reconcile`: gate, repair cursor, the instance's `epcred` family,
    /// its spec/status/governance records, contract reads); the name authority is a static
    /// binding of `manager` to the owner, standing in for the operator's provisioning
    /// authority no real server holds. Liveness and eviction are real: the servers'
    /// connection listing and the system account's kick.
    async fn register(&self, closure: &Digest, op: u8) -> Registered {
        let (space, endpoint, instance) = (
            space_name(),
            EndpointName::parse("manager").unwrap(),
            InstanceId::parse(IID).unwrap(),
        );
        let executor = {
            let (endpoint, instance) = (endpoint.clone(), instance.clone());
            let space = space.clone();
            AuthorityClient::open(
                &self.server,
                "test-manager-registration".to_owned(),
                DataAccountSigner {
                    account: self.material.data_account().to_owned(),
                    signer: Arc::new(self.material.data_signing_key().clone()),
                },
                move |conn| {
                    plane_grants::gate_reconcile(&space, conn, &endpoint, &instance).map(Into::into)
                },
                Duration::from_secs(300),
                space_name(),
                SpaceOptions {
                    create_missing: false,
                    replicas_as_found: true,
                    stores: StoreSet::of(&[Store::Auth, Store::Records, Store::Contracts]),
                    ..SpaceOptions::default()
                },
            )
            .await
            .unwrap()
        };
        let oracle = Arc::new(Oracle::new(
            &self.server,
            self.material.system_user().creds(),
            self.material.data_account(),
            "test-manager-oracle".to_owned(),
        ));
        let spec = ServiceSpec::from_value(
            json!({"endpoint": "manager", "owner": self.owner,
                   "clusterDigests": [closure.to_prefixed()], "protocol": {"v": 1}}),
            &endpoint,
        )
        .unwrap();
        let ceremony = RegisterInstance {
            space: space.clone(),
            registrant: self.owner_token(),
            spec,
            instance,
            authority: Arc::new(SelfAuthority {
                name: endpoint,
                owner: self.owner_token(),
            }),
            op_id: OpId::mint([op; 20]),
            evict_max: EVICT_PRINCIPALS_MAX,
        };
        let bound = executor.space().unwrap();
        let mut world = NatsWorld::new(&bound);
        world.set_evictor(oracle.evictor());
        world.set_prober(oracle.prober());
        let registered = world.run(&mut Replay::new(ceremony)).await;
        executor.close().await.unwrap();
        registered.unwrap_or_else(|e| panic!("the manager's registration failed: {e}"))
    }

    /// STAND-IN (this plane does not serve `manager-run-admission`/`manager-run-attempt` yet):
    /// the admin connection records run [`RUN`] running on this instance under `fence`, as an
    /// attempt's activation would.
    async fn record_run(&self, fence: &RunFence) {
        let status = HostedRunStatus {
            observed_spec_revision: 1,
            state: RunState::Running,
            holder: RunHolder::parse(&fence.holder).unwrap(),
            epoch: RunEpoch(fence.epoch),
            fencing_token: FencingToken(fence.token),
            journal_high: 3,
            at: now_secs() * 1000,
        };
        let write = script(move |cx| {
            write_run_status(
                cx,
                &EndpointName::parse("manager").unwrap(),
                &RunId::parse(RUN).unwrap(),
                &status,
                None,
            )
        });
        drive(&mut Replay::new(write), &self.admin.space().unwrap())
            .await
            .unwrap();
    }

    /// prepare → the supervisor connects and publishes the contract → the instance registers
    /// (epoch 0); returns the supervisor's connection and the closure digest.
    async fn prepared_and_registered(&self) -> (Holder, Digest) {
        let prepared = self.granted(&self.envelope("prepare", "prepare00000000000000001"));
        let (supervisor_jwt, _) = self.credential(&prepared, "supervisor", &self.keys[0]);
        let supervisor = self.connect(&supervisor_jwt, &self.keys[0]).await;
        let closure = self.publish_contract(&supervisor).await;
        self.provision().await;
        self.register(&closure, 1).await;
        (supervisor, closure)
    }
}

/// The whole flow on a real server: prepare → the manager registers its instance → activate
/// → renew → renewStandingBundle → renewRunDriver, each answer 200 with exactly its closed
/// credential set, every JWT verified against the data account and admitted by the server,
/// each proof the next request presents the one the previous answer returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_route_flow_prepare_activate_and_renewals_on_a_real_server() {
    let f = Flow::new().await;

    // prepare: the supervisor (standing) and executor (300 s) remote-manager pair, no proof,
    // nothing written.
    let prepared = f.granted(&f.envelope("prepare", "prepare00000000000000001"));
    assert_eq!(Flow::names(&prepared), ["executor", "supervisor"]);
    assert_eq!(prepared["operation"], "prepare");
    assert_eq!(prepared["owner"], f.owner.as_str());
    assert!(
        prepared.get("nextRegistrationProof").is_none(),
        "{prepared}"
    );
    let (supervisor_jwt, supervisor) = f.credential(&prepared, "supervisor", &f.keys[0]);
    let (executor_jwt, executor) = f.credential(&prepared, "executor", &f.keys[1]);
    assert_eq!(supervisor.name, "remote-manager");
    assert_eq!(executor.name, "remote-manager");
    let lifetime = |c: &Claims| c.exp.unwrap().0 - c.iat.0;
    assert_eq!(lifetime(&supervisor), STANDING_SECS);
    assert_eq!(lifetime(&executor), EXECUTOR_SECS);
    assert_eq!(
        prepared["expiresAt"].as_u64(),
        Some(executor.exp.unwrap().0 * 1000)
    );
    assert!(f.family().await.is_empty(), "prepare writes nothing");

    // The manager connects with both, and publishes its contract on the supervisor's
    // connection; the supervisor holds no row of the auth bucket (F98): its gate write is a
    // permission violation.
    let mut supervisor = f.connect(&supervisor_jwt, &f.keys[0]).await;
    let mut executor = f.connect(&executor_jwt, &f.keys[1]).await;
    assert!(executor.violations().await.is_empty());
    let closure = f.publish_contract(&supervisor).await;
    assert!(supervisor.violations().await.is_empty());
    supervisor
        .client
        .publish(
            format!("$KV.cotal_auth_{SPACE}.epgate.manager.{IID}"),
            "{}".into(),
        )
        .await
        .unwrap();
    let violations = supervisor.violations().await;
    assert!(
        violations
            .iter()
            .any(|v| v.to_lowercase().contains("permissions violation")),
        "{violations:?}"
    );

    // The instance registers (stand-ins: provisioning, the registration executor and the name
    // authority; see the module doc).
    f.provision().await;
    let registered = f.register(&closure, 1).await;
    let gate = f.gate().await;
    assert_eq!(gate.state(), GateState::Open);
    assert_eq!(gate.process_epoch().0, 0);
    assert_eq!(
        gate.registration_revision(),
        registered.registration_revision
    );
    assert_eq!(
        gate.principal().to_string(),
        format!("{}.manager_serve_{IID}", f.owner)
    );

    // activate: the endpoint family released through the fence, the next proof returned.
    let activated = f.granted(&f.activate_request("activate000000000000001"));
    assert_eq!(
        Flow::names(&activated),
        ["goalWriter", "serve", "sessionLedger"]
    );
    let next = activated["nextRegistrationProof"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(next, f.current_proof().await);
    let (serve_jwt, serve) = f.credential(&activated, "serve", &f.keys[2]);
    let (goal_jwt, goal) = f.credential(&activated, "goalWriter", &f.keys[3]);
    let (session_jwt, session) = f.credential(&activated, "sessionLedger", &f.keys[4]);
    assert_eq!(serve.name, "endpoint-serve");
    assert_eq!(goal.name, "goal-writer");
    assert_eq!(session.name, "session-ledger");
    let activation = [serve_jwt.clone(), goal_jwt.clone(), session_jwt.clone()];
    assert_eq!(f.active().await, row_keys(&activation));
    let mut holders: Vec<String> = f.family().await.into_iter().map(|(_, a, _)| a).collect();
    holders.sort_unstable();
    assert_eq!(
        holders,
        [
            format!("manager_goal_{IID}"),
            format!("manager_serve_{IID}"),
            format!("manager_session_{IID}"),
        ]
    );

    // The serve credential connects and serves its own instance's command rails.
    let mut serving = f.connect(&serve_jwt, &f.keys[2]).await;
    for command in COMMANDS {
        let rail = format!("cotal.{SPACE}.ep.inst.manager.{IID}.{command}.>");
        let subs = &serve.user().unwrap().permissions.subscribe.allow;
        assert!(subs.contains(&rail), "{rail} not in {subs:?}");
        let _sub = serving.client.subscribe(rail).await.unwrap();
    }
    assert!(serving.violations().await.is_empty());
    for (token, holder) in [(&goal_jwt, &f.keys[3]), (&session_jwt, &f.keys[4])] {
        let mut h = f.connect(token, holder).await;
        assert!(h.violations().await.is_empty());
    }

    // renew: the supervisor/executor pair again, for the current registration only.
    let mut renew = f.envelope("renew", "renew000000000000000001");
    renew["registrationProof"] = json!(next);
    let renewed = f.granted(&renew);
    assert_eq!(Flow::names(&renewed), ["executor", "supervisor"]);
    let (renewed_supervisor, _) = f.credential(&renewed, "supervisor", &f.keys[0]);
    f.credential(&renewed, "executor", &f.keys[1]);
    f.connect(&renewed_supervisor, &f.keys[0]).await;
    assert_eq!(
        f.active().await,
        row_keys(&activation),
        "renew releases no family row"
    );

    // renewStandingBundle at the registered epoch with the activation's proof: exactly the five
    // duties, the serve grant re-derived from the registered spec, three fresh family rows.
    let standing =
        f.granted(&f.renewal("renewStandingBundle", "standing0000000000000001", &next, 0));
    assert_eq!(
        Flow::names(&standing),
        [
            "executor",
            "goalWriter",
            "serve",
            "sessionLedger",
            "supervisor"
        ]
    );
    assert_eq!(standing["processEpoch"], 0);
    assert_eq!(standing["accountPublicKey"], f.material.data_account());
    for (name, holder) in [
        ("supervisor", &f.keys[0]),
        ("executor", &f.keys[1]),
        ("serve", &f.keys[2]),
        ("goalWriter", &f.keys[3]),
        ("sessionLedger", &f.keys[4]),
    ] {
        let (token, _) = f.credential(&standing, name, holder);
        let mut h = f.connect(&token, holder).await;
        assert!(h.violations().await.is_empty(), "{name}");
    }
    let (renewed_serve_jwt, renewed_serve) = f.credential(&standing, "serve", &f.keys[2]);
    let subs = &renewed_serve.user().unwrap().permissions.subscribe.allow;
    for command in COMMANDS {
        assert!(subs.contains(&format!("cotal.{SPACE}.ep.inst.manager.{IID}.{command}.>")));
    }
    assert!(
        subs.iter()
            .filter(|s| s.contains(".ep.inst."))
            .all(|s| s.contains(&format!(".manager.{IID}."))),
        "{subs:?}"
    );
    // The renewal's family rows are active beside the activation's: fresh rows, or the very
    // same rows where a renewal signed in the activation's second reproduced a JWT byte for
    // byte (reference §4.6 `reused`).
    let (renewed_goal, _) = f.credential(&standing, "goalWriter", &f.keys[3]);
    let (renewed_session, _) = f.credential(&standing, "sessionLedger", &f.keys[4]);
    let both: Vec<String> = activation
        .iter()
        .cloned()
        .chain([renewed_serve_jwt, renewed_goal, renewed_session])
        .collect();
    assert_eq!(f.active().await, row_keys(&both));

    // renewRunDriver for a run recorded running on this instance: exactly the driver pair for
    // the requested nkeys, echoing the run.
    let fence = f.run_fence();
    f.record_run(&fence).await;
    let driven = f.granted(&f.run_request(&next, 0, &fence));
    assert_eq!(Flow::names(&driven), ["runDriver", "runMediator"]);
    assert_eq!(driven["run"]["runId"], RUN);
    let (driver_jwt, driver) = f.credential(&driven, "runDriver", &f.driver);
    let (mediator_jwt, mediator) = f.credential(&driven, "runMediator", &f.mediator);
    assert_eq!(driver.name, "run-driver");
    assert_eq!(mediator.name, "run-mediator");
    f.connect(&driver_jwt, &f.driver).await;
    f.connect(&mediator_jwt, &f.mediator).await;
    assert_eq!(
        f.active().await,
        row_keys(&both),
        "a run renewal releases no family row"
    );
}

/// The refusals the model covers, over HTTP on the real server: a forged proof on every
/// proven operation, a stale serve epoch, a foreign account, a swapped nkey, an unrecorded or
/// moved run — each a 403 with its sentence, and none releases a family row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_route_flow_refusals_are_403_and_release_nothing() {
    let f = Flow::new().await;
    let (_supervisor, _) = f.prepared_and_registered().await;
    let forged = format!("sha256:{}", "1".repeat(64));

    let mut activate = f.activate_request("activate000000000000001");
    activate["registrationProof"] = json!(forged);
    f.refused(&activate, "registration proof does not match");
    assert!(f.family().await.is_empty());

    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let next = activated["nextRegistrationProof"]
        .as_str()
        .unwrap()
        .to_owned();
    let released = f.active().await;
    assert_eq!(released.len(), 3);

    let mut renew = f.envelope("renew", "renew000000000000000001");
    renew["registrationProof"] = json!(forged);
    f.refused(&renew, "proof does not match current host registration");

    let standing = |proof: &str, epoch| {
        f.renewal(
            "renewStandingBundle",
            "standing0000000000000001",
            proof,
            epoch,
        )
    };
    f.refused(
        &standing(&forged, 0),
        "proof does not match the current registration",
    );
    f.refused(&standing(&next, 1), "processEpoch is stale");
    let mut foreign = standing(&next, 0);
    foreign["accountPublicKey"] = json!(KeyPair::new_from_raw(KeyPairType::Account, [77; 32])
        .unwrap()
        .public_key());
    f.refused(&foreign, "account");
    let mut swapped = standing(&next, 0);
    swapped["identities"]["serve"]["id"] = json!(key(99).public_key());
    f.refused(&swapped, "proof does not match the current registration");

    let fence = f.run_fence();
    f.refused(
        &f.run_request(&next, 0, &fence),
        "does not hold the activated run and takeover fence",
    );
    f.record_run(&fence).await;
    let moved = RunFence {
        token: fence.token - 1,
        ..f.run_fence()
    };
    f.refused(
        &f.run_request(&next, 0, &moved),
        "does not hold the activated run and takeover fence",
    );
    f.refused(&f.run_request(&forged, 0, &fence), "proof does not match");
    f.refused(&f.run_request(&next, 1, &fence), "processEpoch is stale");

    assert_eq!(f.active().await, released, "no refusal released a row");
}

/// A re-registration advances the process epoch (F69) and evicts the activation's live serve
/// connection; the proofs and epochs of the first registration are then refused (F91), and a
/// fresh activation at the new epoch returns the proof the renewals need there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_route_flow_reregistration_fences_the_previous_epoch() {
    let f = Flow::new().await;
    let (_supervisor, closure) = f.prepared_and_registered().await;
    let activated = f.granted(&f.activate_request("activate000000000000001"));
    let first = activated["nextRegistrationProof"]
        .as_str()
        .unwrap()
        .to_owned();
    let (serve_jwt, _) = f.credential(&activated, "serve", &f.keys[2]);
    let serving = f.connect(&serve_jwt, &f.keys[2]).await;
    serving.client.flush().await.unwrap();

    let registered = f.register(&closure, 2).await;
    assert_eq!(registered.process_epoch.0, 1);
    let gate = f.gate().await;
    assert_eq!((gate.state(), gate.process_epoch().0), (GateState::Open, 1));
    // The ceremony's verified eviction kicked the serve holder off the real server.
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    while serving.client.connection_state() == async_nats::connection::State::Connected {
        assert!(
            std::time::Instant::now() < deadline,
            "the previous serve holder was not evicted"
        );
        tokio::time::sleep(POLL).await;
    }
    assert!(
        f.active().await.is_empty(),
        "the re-registration revoked the whole family"
    );

    let standing = |proof: &str, epoch| {
        f.renewal(
            "renewStandingBundle",
            "standing0000000000000001",
            proof,
            epoch,
        )
    };
    f.refused(&standing(&first, 0), "processEpoch is stale");
    f.refused(
        &standing(&first, 1),
        "proof does not match the current registration",
    );
    let mut renew = f.envelope("renew", "renew000000000000000001");
    renew["registrationProof"] = json!(first);
    f.refused(&renew, "proof does not match current host registration");

    // Credential ids are JWT digests, and the goal-writer and session-ledger JWTs carry no
    // gate coordinate: signed in the first activation's second they would reproduce the ids
    // of its rows the re-registration revoked, which staging refuses (F29: "a staged name
    // never re-binds"; the model refuses the same). A restarted manager re-activates in a
    // later second; so does this test.
    let (_, first_goal) = f.credential(&activated, "goalWriter", &f.keys[3]);
    while now_secs() <= first_goal.iat.0 {
        tokio::time::sleep(POLL).await;
    }
    let again = f.granted(&f.activate_request("activate000000000000002"));
    let second = again["nextRegistrationProof"].as_str().unwrap().to_owned();
    assert_ne!(second, first, "the proof binds the new epoch and revision");
    assert_eq!(second, f.current_proof().await);
    let (serve2, _) = f.credential(&again, "serve", &f.keys[2]);
    let (goal2, _) = f.credential(&again, "goalWriter", &f.keys[3]);
    let (session2, _) = f.credential(&again, "sessionLedger", &f.keys[4]);
    assert_eq!(f.active().await, row_keys(&[serve2, goal2, session2]));
    let renewed = f.granted(&standing(&second, 1));
    assert_eq!(renewed["processEpoch"], 1);
    let (token, _) = f.credential(&renewed, "serve", &f.keys[2]);
    f.connect(&token, &f.keys[2]).await;
    renew["registrationProof"] = json!(second);
    f.granted(&renew);
}
