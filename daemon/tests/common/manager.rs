//! The manager fixture (issue 12): a plane on the space's own operator-mode server with
//! `alice/cli` granted `supervise`, one remote manager instance's held nkeys, and the steps
//! that bring it to activated over `POST /manager-service-authority` — `prepare`, the
//! instance's registration, `activate` — then its renewals. Shared by
//! `tests/manager_route_flow.rs` (`mod common;`) and `benches/renewal.rs` (by `#[path]`).
//!
//! The instance registers itself as the reference manager does (`registerRemoteManagerAuthority`
//! in the reference's `packages/manager`): over the executor credential `prepare` issued and
//! nothing else, it observes its gate, provisions it when absent, runs the registration barrier
//! with eviction through the plane's `manager-service-maintenance` door, and registers serving
//! (the READY status at the committed epoch), under the same self name authority the reference
//! manager passes (the name `manager` for its own owner).
//!
//! What stands in for a missing piece, marked `STAND-IN` where it happens: a hosted run's status
//! record is written by the admin connection (it is the run driver's write, and no driver runs
//! here).
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cotal_core::authority::SelfAuthority;
use cotal_core::canon::Digest;
use cotal_core::contract::{artifact_canonical_bytes, ClusterManifest};
use cotal_core::gate::EndpointGate;
use cotal_core::govern::ForeignSlotCondition;
use cotal_core::issuance::{observe_gate, GateRef, ProvisionGate};
use cotal_core::journal::{FencingToken, RunEpoch, RunHolder, RunId};
use cotal_core::jwt::{self, ClaimType, Claims, Creds, UnixSeconds};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::{script, Replay};
use cotal_core::manager::{
    current_registration_proof, registration_proof, ManagerAuthorityRequest, ProofSecret,
};
use cotal_core::names::{EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName};
use cotal_core::registration::{RegisterInstance, Registered, EVICT_PRINCIPALS_MAX};
use cotal_core::run::{write_run_status, HostedRunStatus, RunState};
use cotal_core::service::ServiceSpec;
use cotal_core::serving::RegisterServing;
use cotal_core::trust::DaemonMaterial;
use cotal_core::EpError;
use cotal_io_nats::async_nats::{self, jetstream, Client, ConnectOptions};
use cotal_io_nats::{drive, AuthorityClient, Evictor, NatsWorld, SpaceOptions, StoreSet};
use nkeys::{KeyPair, KeyPairType};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::signin::{post_to, Space};
use super::{http, READY_TIMEOUT, SPACE};

/// The manager instance and its lifecycle uid.
pub const IID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";
pub const UID: &str = "llllllllllllllllllllllllll";
/// The manager's registered commands.
pub const COMMANDS: [&str; 6] = [
    "spawn",
    "status",
    "turn",
    "run-start",
    "run-resume",
    "run-answer",
];
pub const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";
pub const RUN: &str = "run-0123456789abcdef0123456789abcdef";
pub const TAKEOVER: &str = "00112233aabbccdd";
/// A subject no issued credential may publish on (see [`Holder::violations`]).
pub const SENTINEL: &str = "cotal.sentinel.never.granted";

pub fn space_name() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

pub fn manager_gate() -> GateRef {
    GateRef::new(
        space_name(),
        EndpointName::parse("manager").unwrap(),
        InstanceId::parse(IID).unwrap(),
    )
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub fn key(n: u8) -> KeyPair {
    KeyPair::new_from_raw(KeyPairType::User, [n; 32]).unwrap()
}

/// The `ai.cotal.manager` cluster document the manager registers and activates with.
pub fn manager_document() -> Value {
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

pub fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// A run attempt's fence as the request carries it and the hosted run records it.
pub struct RunFence {
    pub holder: String,
    pub epoch: u64,
    pub token: u64,
}

/// The stores a reference manager binds over its executor connection, as a participant (no
/// request at bind: the executor holds no `STREAM.INFO`).
pub async fn participant(executor: &Holder) -> Result<cotal_io_nats::Space, EpError> {
    cotal_io_nats::Space::bind(
        executor.client.clone(),
        space_name(),
        SpaceOptions::participant(StoreSet::of(&[
            Store::Auth,
            Store::Records,
            Store::Contracts,
        ])),
    )
    .await
}

/// One connection made with an issued credential; server errors (permission violations)
/// arrive on `errors`.
pub struct Holder {
    pub client: Client,
    pub errors: mpsc::UnboundedReceiver<String>,
}

impl Holder {
    /// The permission violations the server reported for everything sent so far. A publish on
    /// [`SENTINEL`], a subject no credential here is granted, marks the end: the server
    /// reports violations in order, so every error before the sentinel's is one of ours.
    pub async fn violations(&mut self) -> Vec<String> {
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
pub struct Flow {
    pub space: Space,
    pub d: Value,
    pub server: String,
    pub owner: String,
    pub admin: AuthorityClient,
    pub material: DaemonMaterial,
    /// supervisor, executor, serve, goalWriter, sessionLedger.
    pub keys: Vec<KeyPair>,
    /// The run driver and mediator nkeys.
    pub driver: KeyPair,
    pub mediator: KeyPair,
}

impl Flow {
    pub async fn new() -> Flow {
        Flow::with_up(&[], &[]).await
    }

    /// [`Flow::new`] with `extra` arguments to `up` (e.g. a public face's port) and extra
    /// environment for the plane (e.g. its `RUST_LOG`).
    pub async fn with_up(extra: &[&str], env: &[(&str, &str)]) -> Flow {
        let mut space = Space::new();
        Flow::grant_manager(&space);
        let server = space.serve_broker();
        let mut args = vec!["--server", server.as_str()];
        args.extend_from_slice(extra);
        let d = space.up_with(&args, env, None);
        Flow::attach(space, d, server.clone(), &server).await
    }

    /// Grants `alice/cli` the `supervise` scope the manager route asks for.
    pub fn grant_manager(space: &Space) {
        space.grant_lists("cli", "alice", "supervise", "", "");
    }

    /// The fixture over a plane already serving (`d`, its discovery file) on servers the
    /// caller runs: `server` is the one URL holders and the test's own connections use,
    /// `admin_servers` the admin view's (a cluster's whole list).
    pub async fn attach(space: Space, d: Value, server: String, admin_servers: &str) -> Flow {
        let owner = space.owner("alice");
        let admin = space.admin(admin_servers).await;
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

    pub fn owner_token(&self) -> OwnerToken {
        OwnerToken::parse(&self.owner).unwrap()
    }

    /// The request envelope of `operation` for the held nkeys.
    pub fn envelope(&self, operation: &str, rid: &str) -> Value {
        self.envelope_for(IID, operation, rid)
    }

    /// [`Flow::envelope`] for manager instance `iid`.
    pub fn envelope_for(&self, iid: &str, operation: &str, rid: &str) -> Value {
        let id = |k: &KeyPair| json!({"id": k.public_key()});
        json!({
            "v": 1, "kind": "manager-service-authority", "operation": operation,
            "space": SPACE, "actor": "cli", "instanceId": iid, "managerLifecycleUid": UID,
            "requestId": rid,
            "identities": {
                "supervisor": id(&self.keys[0]), "executor": id(&self.keys[1]),
                "serve": id(&self.keys[2]), "goalWriter": id(&self.keys[3]),
                "sessionLedger": id(&self.keys[4]),
            },
        })
    }

    /// A `manager-service-maintenance` request of `operation` from instance `iid` targeting
    /// `target` (the caller's `principals` for an eviction are the caller's to add).
    pub fn maintenance_for(&self, iid: &str, operation: &str, target: &str, rid: &str) -> Value {
        let mut r = self.envelope_for(iid, "prepare", rid);
        r["kind"] = json!("manager-service-maintenance");
        r["operation"] = json!(operation);
        r["targetInstanceId"] = json!(target);
        r
    }

    /// [`Flow::maintenance_for`] from and on instance [`IID`].
    pub fn maintenance(&self, operation: &str, rid: &str) -> Value {
        self.maintenance_for(IID, operation, IID, rid)
    }

    /// A restart of instance [`IID`] that dies mid-barrier, as a manager killed there leaves
    /// it: the registration over a fresh executor whose evictions never verify, so the gate
    /// stays frozen under its op (and the endpoint's governance slot held). Returns the refusal.
    pub async fn die_mid_barrier(&self, closure: &Digest, op: u8) -> EpError {
        let executor = self.executor(&format!("prepareexecutordies{op:0>6}")).await;
        let bound = participant(&executor).await.unwrap();
        let never: Evictor =
            Box::new(|holders| Box::pin(async move { vec![false; holders.len()] }));
        let died = self.register_over(&bound, never, closure, op).await;
        executor.client.drain().await.unwrap();
        died.expect_err("a registration whose evictions never verify completed")
    }

    /// `activate` with the manager document and its deterministic registration proof.
    pub fn activate_request(&self, rid: &str) -> Value {
        let mut raw = self.envelope("activate", rid);
        raw["contractArtifacts"] = json!([manager_document()]);
        raw["registrationProof"] = json!(format!("sha256:{}", "0".repeat(64)));
        let parsed = ManagerAuthorityRequest::parse(&raw).unwrap();
        let proof = registration_proof(&self.owner_token(), &parsed).unwrap();
        raw["registrationProof"] = json!(proof.as_str());
        raw
    }

    /// A renewal of `operation` presenting `proof` at serve epoch `epoch` for the data account.
    pub fn renewal(&self, operation: &str, rid: &str, proof: &str, epoch: u64) -> Value {
        let mut raw = self.envelope(operation, rid);
        raw["registrationProof"] = json!(proof);
        raw["accountPublicKey"] = json!(self.material.data_account());
        raw["processEpoch"] = json!(epoch);
        raw
    }

    pub fn run_fence(&self) -> RunFence {
        RunFence {
            holder: format!("{}.{TAKEOVER}", self.keys[0].public_key()),
            epoch: 2,
            token: 7,
        }
    }

    pub fn run_request(&self, proof: &str, epoch: u64, fence: &RunFence) -> Value {
        let mut raw = self.renewal("renewRunDriver", "rundriver000000000000001", proof, epoch);
        raw["run"] = json!({
            "runId": RUN, "holder": fence.holder, "takeoverId": TAKEOVER, "epoch": fence.epoch,
            "fencingToken": fence.token, "driverId": self.driver.public_key(),
            "mediatorId": self.mediator.public_key(),
        });
        raw
    }

    /// `POST /manager-service-authority` on the loopback face with a fresh IdP token.
    pub fn ask(&self, request: &Value) -> (u16, Value) {
        post_to(
            self.d["url"].as_str().unwrap(),
            "/manager-service-authority",
            self.d["cap"].as_str(),
            &json!({"idpToken": self.space.idp_token("alice"), "request": request}),
        )
    }

    /// [`Flow::ask`] at the face `(url, capability)` with `idp_token`; `None` when nothing
    /// answered (the plane died mid-request).
    pub fn ask_at(
        &self,
        face: &(String, String),
        idp_token: &str,
        request: &Value,
    ) -> Option<(u16, Value)> {
        let body = json!({"idpToken": idp_token, "request": request}).to_string();
        let auth = format!("Bearer {}", face.1);
        let headers = [
            ("content-type", "application/json"),
            ("authorization", auth.as_str()),
        ];
        let path = "/manager-service-authority";
        let (status, _, text) = http(&face.0, "POST", path, &headers, &body).ok()?;
        Some((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// [`Flow::ask`], which must answer 200.
    pub fn granted(&self, request: &Value) -> Value {
        let (status, body) = self.ask(request);
        assert_eq!(status, 200, "{}: {body}", request["operation"]);
        assert!(!body.to_string().contains("seed"), "{body}");
        body
    }

    /// [`Flow::ask`], which must answer 403 with a sentence containing `says`.
    pub fn refused(&self, request: &Value, says: &str) {
        let (status, body) = self.ask(request);
        assert_eq!(status, 403, "{}: {body}", request["operation"]);
        assert!(error(&body).contains(says), "{says:?} not in {body}");
    }

    /// The answer's credential `name`: its JWT verified against the data account's signing
    /// key, for the `holder` nkey, in the data account, with its `exp` the answer states.
    pub fn credential(&self, body: &Value, name: &str, holder: &KeyPair) -> (String, Claims) {
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
    pub fn names(body: &Value) -> Vec<String> {
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
    pub async fn connect(&self, token: &str, holder: &KeyPair) -> Holder {
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
    pub async fn gate(&self) -> EndpointGate {
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
    pub async fn current_proof(&self) -> String {
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
    pub async fn family(&self) -> Vec<(String, String, CredState)> {
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
    pub async fn active(&self) -> Vec<String> {
        self.family()
            .await
            .into_iter()
            .filter(|(_, _, s)| *s == CredState::Active)
            .map(|(k, _, _)| k)
            .collect()
    }

    /// Publishes the manager's cluster (root document, then manifest) on the supervisor
    /// credential's own connection — its `P.epc.*` row, one create-only message per digest —
    /// and returns the closure digest a service spec names. Real: what `prepare` issued is what
    /// publishes the manager's contract.
    pub async fn publish_contract(&self, supervisor: &Holder) -> Digest {
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

    /// The executor credential of a fresh `prepare` (request id `rid`), connected on its own
    /// inbox: the one credential a reference manager registers over.
    pub async fn executor(&self, rid: &str) -> Holder {
        self.executor_for(IID, rid).await
    }

    /// [`Flow::executor`] for manager instance `iid`.
    pub async fn executor_for(&self, iid: &str, rid: &str) -> Holder {
        let prepared = self.granted(&self.envelope_for(iid, "prepare", rid));
        let (token, _) = self.credential(&prepared, "executor", &self.keys[1]);
        self.connect(&token, &self.keys[1]).await
    }

    /// The instance's registration under op `op`, for the spec naming `closure`, run as the
    /// reference manager runs it over the executor credential a fresh `prepare` issued: observe
    /// the gate and provision it when absent, then the barrier (evicting the family's holders
    /// through [`Flow::maintenance_evictor`]) and the serving registration with its READY
    /// status. Nothing here holds more than that credential's rows.
    pub async fn register(&self, closure: &Digest, op: u8) -> Registered {
        self.try_register(closure, op)
            .await
            .unwrap_or_else(|e| panic!("the manager's registration failed: {e}"))
    }

    /// [`Flow::register`], returning the ceremony's refusal.
    pub async fn try_register(&self, closure: &Digest, op: u8) -> Result<Registered, EpError> {
        let executor = self.executor(&format!("prepareexecutor{op:0>9}")).await;
        let result = self.register_on(&executor, closure, op).await;
        executor.client.drain().await.unwrap();
        result
    }

    /// The reference manager's registration sequence on an executor connection: its stores
    /// bound as a participant (no request at bind), eviction through the maintenance door.
    pub async fn register_on(
        &self,
        executor: &Holder,
        closure: &Digest,
        op: u8,
    ) -> Result<Registered, EpError> {
        self.register_instance_on(IID, executor, closure, op).await
    }

    /// [`Flow::register_on`] for manager instance `iid`, with the reference manager's one
    /// repair: a registration refused because another instance's registration holds the
    /// governance slot in flight asks the plane to `reconcile-registration` that holder once,
    /// then registers again.
    pub async fn register_instance_on(
        &self,
        iid: &str,
        executor: &Holder,
        closure: &Digest,
        op: u8,
    ) -> Result<Registered, EpError> {
        let bound = participant(executor).await?;
        let first = self
            .register_instance_over(iid, &bound, self.maintenance_evictor_for(iid), closure, op)
            .await;
        let Err(refused) = &first else {
            return first;
        };
        if ForeignSlotCondition::of(refused) != Some(ForeignSlotCondition::InFlight) {
            return first;
        }
        let holder = refused
            .details
            .iter()
            .find_map(|d| d.get("holderInstanceId").and_then(Value::as_str))
            .unwrap()
            .to_owned();
        let reconcile = self.maintenance_for(
            iid,
            "reconcile-registration",
            &holder,
            "reconcileholder00000000001",
        );
        let (status, answer) = self.ask(&reconcile);
        if status != 200 {
            return Err(EpError::conflict(format!(
                "reconciling the slot holder {holder} was refused: {answer}"
            )));
        }
        self.register_instance_over(iid, &bound, self.maintenance_evictor_for(iid), closure, op)
            .await
    }

    /// The registration sequence on `bound` with `evictor`: observe the gate, provision it when
    /// absent, then the ceremony and the serving registration with its READY status.
    pub async fn register_over(
        &self,
        bound: &cotal_io_nats::Space,
        evictor: Evictor,
        closure: &Digest,
        op: u8,
    ) -> Result<Registered, EpError> {
        self.register_instance_over(IID, bound, evictor, closure, op)
            .await
    }

    /// [`Flow::register_over`] for manager instance `iid`.
    pub async fn register_instance_over(
        &self,
        iid: &str,
        bound: &cotal_io_nats::Space,
        evictor: Evictor,
        closure: &Digest,
        op: u8,
    ) -> Result<Registered, EpError> {
        let (space, endpoint, instance) = (
            space_name(),
            EndpointName::parse("manager").unwrap(),
            InstanceId::parse(iid).unwrap(),
        );
        let gate = GateRef::new(space.clone(), endpoint.clone(), instance.clone());
        let observed = {
            let gate = gate.clone();
            drive(
                &mut Replay::new(script(move |cx| observe_gate(cx, &gate))),
                bound,
            )
            .await?
        };
        if observed.is_none() {
            let serve = ManagerAuthorityRequest::parse(&self.envelope_for(
                iid,
                "prepare",
                "provision00000000000000001",
            ))
            .unwrap()
            .envelope
            .serve_principal(&self.owner_token())?;
            drive(&mut ProvisionGate::machine(gate, serve), bound).await?;
        }
        let spec = ServiceSpec::from_value(
            json!({"endpoint": "manager", "owner": self.owner,
                   "clusterDigests": [closure.to_prefixed()], "protocol": {"v": 1}}),
            &endpoint,
        )?;
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
        let mut world = NatsWorld::new(bound);
        world.set_evictor(evictor);
        let serving = world
            .run(&mut Replay::new(RegisterServing {
                register: ceremony,
                status: serde_json::Map::new(),
            }))
            .await?;
        Ok(serving.registered)
    }

    /// The registration barrier's evictor, as the reference manager wires it: each set of
    /// holders goes to `POST /manager-service-authority` as one `manager-service-maintenance`
    /// `evict-family-principal` request for this instance, and a holder counts as evicted only
    /// when the plane answers `verifiedGone: true` for it.
    pub fn maintenance_evictor(&self) -> Evictor {
        self.maintenance_evictor_for(IID)
    }

    /// [`Flow::maintenance_evictor`] for manager instance `iid`.
    pub fn maintenance_evictor_for(&self, iid: &str) -> Evictor {
        let url = self.d["url"].as_str().unwrap().to_owned();
        let cap = self.d["cap"].as_str().map(str::to_owned);
        let idp_token = self.space.idp_token("alice");
        let base = self.maintenance_for(
            iid,
            "evict-family-principal",
            iid,
            "maintain00000000000000001",
        );
        Box::new(move |holders: Vec<Principal>| {
            let (url, cap, idp_token) = (url.clone(), cap.clone(), idp_token.clone());
            let mut request = base.clone();
            Box::pin(async move {
                let names: Vec<String> = holders.iter().map(ToString::to_string).collect();
                request["principals"] = json!(names);
                let body = json!({"idpToken": idp_token, "request": request});
                let (status, answer) = tokio::task::spawn_blocking(move || {
                    post_to(&url, "/manager-service-authority", cap.as_deref(), &body)
                })
                .await
                .unwrap();
                let verdicts: Option<Vec<bool>> = (status == 200)
                    .then(|| answer["evictions"].as_array())
                    .flatten()
                    .map(|a| a.iter().map(|e| e["verifiedGone"] == true).collect());
                match verdicts {
                    Some(v) if v.len() == names.len() => v,
                    _ => {
                        eprintln!(
                            "the maintenance door did not evict {names:?}: {status} {answer}"
                        );
                        vec![false; names.len()]
                    }
                }
            })
        })
    }

    /// STAND-IN (the run driver writes its run's status; no driver runs here): the admin
    /// connection records run [`RUN`] running on this instance under `fence`, as an attempt's
    /// activation would.
    pub async fn record_run(&self, fence: &RunFence) {
        self.record_run_status(RUN, RunState::Running, fence).await;
    }

    /// STAND-IN (as [`Flow::record_run`]): run `run`'s status `state` under `fence`, pinned to
    /// the status it replaces.
    pub async fn record_run_status(&self, run: &str, state: RunState, fence: &RunFence) {
        let status = HostedRunStatus {
            observed_spec_revision: 1,
            state,
            holder: RunHolder::parse(&fence.holder).unwrap(),
            epoch: RunEpoch(fence.epoch),
            fencing_token: FencingToken(fence.token),
            journal_high: 3,
            at: now_secs() * 1000,
        };
        let run = RunId::parse(run).unwrap();
        let endpoint = EndpointName::parse("manager").unwrap();
        let key = cotal_core::names::keys::run_status(&endpoint, &run);
        let before = match self
            .admin
            .space()
            .unwrap()
            .execute(&KvRequest::Get {
                store: Store::Records,
                key,
            })
            .await
        {
            KvOutcome::Entry(entry) => entry.map(|e| e.revision),
            other => panic!("the run status read failed: {other:?}"),
        };
        let write = script(move |cx| write_run_status(cx, &endpoint, &run, &status, before));
        drive(&mut Replay::new(write), &self.admin.space().unwrap())
            .await
            .unwrap();
    }

    /// prepare → the supervisor connects and publishes the contract → the instance registers
    /// (epoch 0); returns the supervisor's connection and the closure digest.
    pub async fn prepared_and_registered(&self) -> (Holder, Digest) {
        let prepared = self.granted(&self.envelope("prepare", "prepare00000000000000001"));
        let (supervisor_jwt, _) = self.credential(&prepared, "supervisor", &self.keys[0]);
        let supervisor = self.connect(&supervisor_jwt, &self.keys[0]).await;
        let closure = self.publish_contract(&supervisor).await;
        self.register(&closure, 1).await;
        (supervisor, closure)
    }
}
