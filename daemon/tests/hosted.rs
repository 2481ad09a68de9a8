//! The hosted entry point (`cotal_authd::hosted`), as a platform embeds it: contexts whose
//! secret material lives only in an injected in-memory store (the state dir keeps the IdP pin
//! and the actor ledger, nothing secret), each on its own operator-mode server and account.
//! Ported from the reference's hosted smokes (`hosted-auth-lifetime`, `hosted-auth-fence`) and
//! its host incarnation hooks (§7.2), on real servers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::signin::{post, Space};
use common::SPACE;
use cotal_authd::hosted::{
    self, HostInput, HostedHandle, HostedInputs, ObserveAssignment, Observed, PlatformControl,
};
use cotal_core::error::ErrorCode;
use cotal_core::host::FenceEnd;
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::lifecycle::ActivationRun;
use cotal_core::liveness::Listing;
use cotal_core::machine::Replay;
use cotal_core::manager::{AccountKey, AssignmentState, PlatformAssignment};
use cotal_core::names::SpaceName;
use cotal_core::names::{platform_control_owner, InstanceId, LifecycleUid};
use cotal_core::plane_claim::{ClaimRow, ClaimState, PLANE_CLAIM_KEY};
use cotal_core::plane_grants::PlaneConnection;
use cotal_core::plane_probe::ConnTuple;
use cotal_io_fs::secrets::{MemorySecretStore, SecretKey, SecretStore, StoreIdentity};
use cotal_io_fs::trust;
use cotal_io_http::face::probe;
use cotal_io_nats::async_nats::ConnectOptions;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{NatsWorld, Replicas};
use serde_json::{json, Value};

const HOST_IID: &str = "0123456789abcdefghijklmnop";

/// One assigned context: its IdP, trust root and broker (from the CLI, as a platform's
/// provisioning would make them), its secrets moved into an injected store.
struct Context {
    space: Space,
    server: String,
    store: Arc<MemorySecretStore>,
    identity: StoreIdentity,
    account: String,
    /// The platform backend's assignment row for the account.
    backend: Arc<Backend>,
}

/// The platform backend's one assignment row, or its outage.
#[derive(Debug)]
struct Backend(std::sync::Mutex<Result<Option<PlatformAssignment>, String>>);

impl ObserveAssignment for Backend {
    fn observe<'a>(&'a self, _space: &'a SpaceName, _account: &'a str) -> Observed<'a> {
        let now = self.0.lock().unwrap().clone();
        Box::pin(async move { now })
    }
}

fn space_name() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

impl Context {
    fn new(store_id: &str) -> Context {
        let mut space = Space::new();
        let server = space.serve_broker();
        space.grant("cli", "alice", &[]);
        let account = trust::load_daemon(&space.root, &space_name())
            .unwrap()
            .data_account()
            .to_owned();
        let identity = StoreIdentity::injected(store_id).unwrap();
        let store = Arc::new(MemorySecretStore::new(Some(identity.clone())));
        trust::copy_secrets(&space.root, &space_name(), store.as_ref()).unwrap();
        let dir = trust::space_dir(&space.root, &space_name());
        for file in trust::secret_files() {
            std::fs::remove_file(dir.join(file)).unwrap();
        }
        Context {
            space,
            server,
            store,
            identity,
            account,
            backend: Arc::new(Backend(std::sync::Mutex::new(Ok(None)))),
        }
    }

    fn inputs(&self) -> HostedInputs {
        HostedInputs {
            account_public_key: self.account.clone(),
            lifecycle_uid: "life00000000000000000000a1".to_owned(),
            space: SPACE.to_owned(),
            servers: self.server.clone(),
            tls: cotal_io_nats::TlsSettings::default(),
            state_dir: self.space.root.clone(),
            store: self.store.clone(),
            store_identity: self.identity.clone(),
            port: 0,
            public_face: None,
            platform_control: Some(PlatformControl {
                observe_assignment: self.backend.clone(),
                host: Some(host_input()),
            }),
            standing_ttl_secs: None,
            replicas: Replicas::One,
        }
    }

    /// The sentinel creds, from the store (the state dir holds no secret).
    fn sentinel(&self) -> String {
        let key = SecretKey::of(&space_name(), "callout.json");
        let callout: Value =
            serde_json::from_slice(&self.store.get(&key).unwrap().unwrap()).unwrap();
        callout["callout"]["sentinelCreds"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn oracle(&self) -> Oracle {
        let material = self.material();
        Oracle::new(
            &self.server,
            material.system_user().creds(),
            material.data_account(),
            "test-sweep".to_owned(),
        )
    }

    /// A signed-in human's exchange on the context's loopback face, then a connect through its
    /// callout: what a context that serves answers.
    async fn serves(&self, handle: &HostedHandle, nonce: &str) {
        let (status, body) = post(
            &handle.loopback_url(),
            Some(handle.capability()),
            &json!({"idpToken": self.space.idp_token("alice"), "actor": "cli"}),
        );
        assert_eq!(status, 200, "{body}");
        let token = body["token"].as_str().unwrap().to_owned();
        let client = ConnectOptions::new()
            .credentials(&self.sentinel())
            .unwrap()
            .token(token)
            .name(nonce)
            .custom_inbox_prefix(format!("_INBOX_{nonce}"))
            .max_reconnects(Some(0))
            .connection_timeout(Duration::from_secs(5))
            .connect(&self.server)
            .await
            .unwrap();
        client.flush().await.unwrap();
        drop(client);
    }
}

impl Context {
    /// Stops the context's broker (its process), as a broker outage does.
    fn stop_broker(&mut self) {
        let mut server = self.space.reaper.0.pop().unwrap();
        server.kill().unwrap();
        server.wait().unwrap();
    }

    /// Starts the broker again from the same configuration (same port, same store).
    fn restart_broker(&mut self) {
        let bin = std::env::var_os("COTAL_NATS_SERVER").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/venv/bin/nats-server"),
            std::path::PathBuf::from,
        );
        let server = std::process::Command::new(bin)
            .arg("-c")
            .arg(self.space.root.join("server.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.space.reaper.0.push(server);
    }

    /// The material, through the store (the state dir holds none).
    fn material(&self) -> cotal_core::trust::DaemonMaterial {
        trust::load_daemon_from(
            self.store.as_ref(),
            &self.space.root,
            &space_name(),
            trust::Composition::Hosted,
        )
        .unwrap()
    }

    /// An unrestricted data-account connection of the test: its own view of the stores.
    async fn admin(&self) -> cotal_io_nats::AuthorityClient {
        let material = self.material();
        cotal_io_nats::AuthorityClient::open(
            &self.server,
            "test-admin".to_owned(),
            cotal_io_nats::DataAccountSigner {
                account: material.data_account().to_owned(),
                signer: Arc::new(material.data_signing_key().clone()),
            },
            |_| Ok(cotal_core::jwt::UserNats::default()),
            Duration::from_secs(120),
            space_name(),
            cotal_io_nats::SpaceOptions {
                stores: cotal_io_nats::StoreSet::of(&[Store::Auth, Store::Records]),
                replicas_as_found: true,
                ..cotal_io_nats::SpaceOptions::default()
            },
        )
        .await
        .unwrap()
    }

    /// The plane claim row, read by the test's own connection.
    async fn claim_row(&self) -> ClaimRow {
        let admin = self.admin().await;
        let bound = admin.space().unwrap();
        let read = cotal_core::machine::script(|cx| {
            cotal_core::ledger::read(cx, Store::Auth, PLANE_CLAIM_KEY)
        });
        let entry = NatsWorld::new(&bound)
            .run(&mut Replay::new(read))
            .await
            .unwrap()
            .expect("a claim row");
        let _ = admin.close().await;
        ClaimRow::parse(&entry.value).unwrap()
    }

    /// The plane claim row's state.
    async fn claim_state(&self) -> String {
        self.claim_row().await.state.as_str().to_owned()
    }
}

fn host_input() -> HostInput {
    let command = json!({
        "name": "work", "class": "ephemeral", "targeted": false, "capability": "host.work",
        "inputDigest": "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d",
        "outputDigest": "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d",
        "traits": [],
    });
    HostInput {
        endpoint: "com.example.host".to_owned(),
        cluster: json!({
            "urn": "com.example.host", "revision": 1, "attributes": [], "events": [],
            "commands": [command],
        }),
        artifacts: Vec::new(),
    }
}

async fn health(handle: &HostedHandle) -> Value {
    probe::health(&handle.loopback_url(), Duration::from_secs(2))
        .await
        .unwrap()
}

/// The context's published bearer keys.
fn jwks(handle: &HostedHandle) -> Value {
    let (status, _, body) = common::http(&handle.loopback_url(), "GET", "/jwks", &[], "").unwrap();
    assert_eq!(status, 200);
    serde_json::from_str(&body).unwrap()
}

fn refused(result: Result<HostedHandle, String>) -> String {
    match result {
        Ok(_) => panic!("the start was not refused"),
        Err(why) => why,
    }
}

/// hosted-auth-lifetime, cell 1, and hosted-auth-fence's store and broker cells: every
/// validation refusal, in the reference's sentences, before anything is bound (a stale issuer in
/// the store, a broker that does not trust the account).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_auth_lifetime_validation_refuses_in_the_reference_order() {
    let a = Context::new("store-a");
    let b = Context::new("store-b");

    let mut anonymous = a.inputs();
    anonymous.store = Arc::new(MemorySecretStore::new(None));
    let why = refused(hosted::start(anonymous).await);
    assert!(why.contains("must declare a stable identity"), "{why}");

    let mut other_identity = a.inputs();
    other_identity.store_identity = b.identity.clone();
    let why = refused(hosted::start(other_identity).await);
    assert!(why.contains("identity does not match"), "{why}");

    let mut other_account = a.inputs();
    other_account.account_public_key = b.account.clone();
    let why = refused(hosted::start(other_account).await);
    assert!(why.contains("data account does not match"), "{why}");

    let mut no_state = a.inputs();
    no_state.state_dir = std::path::PathBuf::new();
    let why = refused(hosted::start(no_state).await);
    assert!(why.contains("needs an account"), "{why}");

    let mut relative = a.inputs();
    relative.state_dir = Path::new("relative/state").to_path_buf();
    let why = refused(hosted::start(relative).await);
    assert!(why.contains("absolute path"), "{why}");

    let mut bad_host = a.inputs();
    bad_host.platform_control = Some(PlatformControl {
        observe_assignment: a.backend.clone(),
        host: Some(HostInput {
            endpoint: "host".to_owned(),
            ..host_input()
        }),
    });
    let why = refused(hosted::start(bad_host).await);
    assert!(why.contains("reverse-DNS"), "{why}");

    // hosted-auth-fence: a stale issuer in the store (another space's), and a broker that
    // does not trust the context's account.
    let foreign = MemorySecretStore::new(Some(a.identity.clone()));
    for file in trust::secret_files() {
        let key = SecretKey::of(&space_name(), file);
        let mut bytes = a.store.get(&key).unwrap().unwrap();
        if file == "issuer.json" {
            let text = String::from_utf8(bytes).unwrap();
            bytes = text
                .replace("urn:cotal:auth:t1", "urn:cotal:auth:elsewhere")
                .into_bytes();
        }
        foreign.create(&key, &bytes).unwrap();
    }
    let mut stale = a.inputs();
    stale.store = Arc::new(foreign);
    let why = refused(hosted::start(stale).await);
    assert!(why.contains("belongs to a different space"), "{why}");
    let mut untrusted = a.inputs();
    untrusted.servers = b.server.clone();
    let why = refused(hosted::start(untrusted).await);
    assert!(
        why.contains("is not serving space") && why.to_lowercase().contains("authorization"),
        "{why}"
    );

    // An empty store: the hosted remedy, never the CLI's.
    let mut empty = a.inputs();
    empty.store = Arc::new(MemorySecretStore::new(Some(a.identity.clone())));
    let why = refused(hosted::start(empty).await);
    assert!(why.contains("hosted composition must provision"), "{why}");
}

/// hosted-auth-lifetime, cells 2–4: two contexts of two accounts start concurrently in one
/// process, each ready with its assigned context (on the handle and in `/health`) and its own
/// issuer; a duplicate start of one is refused by the plane claim while both keep serving; a
/// closed context drains while the other serves, restarts with the same issuer, and closes
/// idempotently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_auth_lifetime_two_contexts_serve_side_by_side() {
    let a = Context::new("store-a");
    let b = Context::new("store-b");
    let cwd_before: Vec<_> = std::fs::read_dir(".")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();

    let (first, second) = tokio::join!(hosted::start(a.inputs()), hosted::start(b.inputs()));
    let (first, second) = (first.unwrap(), second.unwrap());
    for (handle, ctx) in [(&first, &a), (&second, &b)] {
        let readiness = handle.readiness().to_json();
        assert_eq!(readiness["state"], "ready", "{readiness}");
        assert_eq!(
            readiness["context"]["accountPublicKey"],
            ctx.account.as_str()
        );
        let h = health(handle).await;
        assert_eq!(h["state"], "ready", "{h}");
        assert_eq!(
            h["context"]["accountPublicKey"],
            ctx.account.as_str(),
            "{h}"
        );
    }
    // Same space name, two accounts: two issuers' keys.
    let keys_a = jwks(&first);
    assert_ne!(keys_a, jwks(&second));
    a.serves(&first, "ibxhosteda01").await;
    b.serves(&second, "ibxhostedb01").await;

    // A duplicate start of A: the live plane holds the claim.
    let duplicate = tokio::time::timeout(Duration::from_secs(30), hosted::start(a.inputs()))
        .await
        .expect("the duplicate start did not end");
    let why = refused(duplicate);
    assert!(
        ["plane", "claim", "held"]
            .iter()
            .any(|w| why.to_lowercase().contains(w)),
        "{why}"
    );
    assert_eq!(first.readiness().state, "ready");
    assert_eq!(second.readiness().state, "ready");

    // Nothing was made in the working directory.
    let cwd_after: Vec<_> = std::fs::read_dir(".")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(cwd_before, cwd_after);

    first.close().await.unwrap();
    assert_eq!(first.readiness().state, "draining");
    assert!(
        probe::health(&first.loopback_url(), Duration::from_millis(500))
            .await
            .is_err()
    );
    assert_eq!(second.readiness().state, "ready");
    b.serves(&second, "ibxhostedb02").await;
    first.close().await.unwrap();

    let again = hosted::start(a.inputs()).await.unwrap();
    assert_eq!(jwks(&again), keys_a);
    a.serves(&again, "ibxhosteda02").await;
    again.close().await.unwrap();
    second.close().await.unwrap();
    second.close().await.unwrap();
}

/// hosted-auth-lifetime, cell 5: with its broker stopped, a context's close cannot release the
/// plane claim (`release-unreachable`: it says so, the context is not ready, the row stays
/// held); once the broker is back, closing again releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_auth_lifetime_close_releases_the_claim_once_the_broker_is_back() {
    let mut a = Context::new("store-a");
    let handle = hosted::start(a.inputs()).await.unwrap();
    assert_eq!(a.claim_state().await, "held");

    a.stop_broker();
    let why = handle.close().await.unwrap_err();
    assert!(why.contains("cannot release the plane claim"), "{why}");
    assert_ne!(handle.readiness().state, "ready");

    a.restart_broker();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match handle.close().await {
            Ok(()) => break,
            Err(why) => {
                assert!(why.contains("cannot release the plane claim"), "{why}");
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the claim was not released within 30 s of the broker's return: {why}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert_eq!(a.claim_state().await, "released");
    handle.close().await.unwrap();
}

/// A broker restart is ridden out, not an end: while its broker is away the context says
/// `unavailable` with the cause, and once the broker is back (the same config and store) it is
/// `ready` again under its plane claim re-taken at the next generation, and serves exchanges
/// and connects as before. It closes as any serving context does, releasing the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_context_rides_out_a_restart_of_its_broker() {
    let mut a = Context::new("store-a");
    let handle = hosted::start(a.inputs()).await.unwrap();
    a.serves(&handle, "ibxride00001").await;
    let claimed = a.claim_row().await.generation;

    a.stop_broker();
    let away = until(|| {
        let readiness = handle.readiness();
        (readiness.state == "unavailable").then_some(readiness.cause)
    })
    .await;
    assert!(
        away.as_deref()
            .is_some_and(|cause| cause.contains("waiting up to 10s for it to come back")),
        "{away:?}"
    );
    a.restart_broker();
    until(|| (handle.readiness().state == "ready").then_some(())).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while a.claim_row().await.generation != claimed + 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the claim was not re-taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.serves(&handle, "ibxride00002").await;
    assert!(handle
        .connections()
        .await
        .iter()
        .all(|c| !c.ended || c.label.contains("auth-registration")));
    handle.close().await.unwrap();
    assert_eq!(a.claim_state().await, "released");
}

/// Polls `seen` until it yields, for at most 30 s.
async fn until<T>(seen: impl Fn() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = seen() {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "not within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// hosted-auth-fence: a start on a busy loopback port is refused and releases what it took; the
/// kick of one context's sealed ledger scanner ends that context alone —
/// `unavailable` with the scanner-death copy and its assigned context, its `/health` gone —
/// while the other keeps serving exchanges and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_auth_fence_a_cut_scanner_ends_only_its_context() {
    let a = Context::new("store-a");
    let b = Context::new("store-b");
    let second = hosted::start(b.inputs()).await.unwrap();

    // A start whose loopback port is taken fails after its claim, releases what it took, and
    // leaves the sibling serving; the next start of the same context comes up.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut on_busy = a.inputs();
    on_busy.port = busy.local_addr().unwrap().port();
    let why = refused(hosted::start(on_busy).await);
    assert!(why.contains("cannot bind the loopback face"), "{why}");
    assert_eq!(a.claim_state().await, "released");
    assert_eq!(second.readiness().state, "ready");
    let first = hosted::start(a.inputs()).await.unwrap();

    let oracle = a.oracle();
    let scanner = PlaneConnection::AuthScan.label(&space_name());
    let Listing::Complete(conns) = oracle.sweep().await else {
        panic!("A's listing is incomplete")
    };
    let target = conns.iter().find(|c| c.name == scanner).unwrap();
    oracle.kick(&target.server.id, target.cid).await.unwrap();

    tokio::time::timeout(Duration::from_secs(5), first.ended())
        .await
        .expect("A did not end within 5 s of losing its scanner");
    let readiness = first.readiness();
    assert_eq!(readiness.state, "unavailable");
    assert!(
        readiness
            .cause
            .as_deref()
            .is_some_and(|c| c.contains("STOPPED scanning")),
        "{readiness:?}"
    );
    assert_eq!(readiness.context.account_public_key, a.account);
    // The ended context closes itself: its faces stop answering.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while probe::health(&first.loopback_url(), Duration::from_millis(300))
        .await
        .is_ok()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's /health still answers"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(first.readiness().state, "unavailable");

    assert_eq!(second.readiness().state, "ready");
    b.serves(&second, "ibxfenceb01").await;
    second.close().await.unwrap();
}

/// §7.2: a host incarnation registers at epoch 0, its restart at epoch 1 fences it (the
/// await resolves with the successor's gate, woken by the push), a bad epoch is `bad-request`,
/// and a context that is not ready refuses every hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_incarnation_restart_fences_its_predecessor_through_await_host_fence() {
    let a = Context::new("store-a");
    let handle = Arc::new(hosted::start(a.inputs()).await.unwrap());

    assert!(handle.observe_host_gate(HOST_IID).await.unwrap().is_none());
    let first = handle.register_host_incarnation(HOST_IID).await.unwrap();
    assert_eq!(first.process_epoch.0, 0);
    let seen = handle.observe_host_gate(HOST_IID).await.unwrap().unwrap();
    assert_eq!(seen.gate.process_epoch().0, 0);

    let bad = handle
        .await_host_fence(HOST_IID, &json!(-1))
        .await
        .unwrap_err();
    assert_eq!(bad.code, ErrorCode::BadRequest, "{bad:?}");

    let waiting = Arc::clone(&handle);
    let fence = tokio::spawn(async move { waiting.await_host_fence(HOST_IID, &json!(0)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !fence.is_finished(),
        "the fence resolved while the incarnation held"
    );

    let second = handle.register_host_incarnation(HOST_IID).await.unwrap();
    assert_eq!(second.process_epoch.0, 1);
    let ended = tokio::time::timeout(Duration::from_secs(5), fence)
        .await
        .expect("the predecessor's fence did not resolve")
        .unwrap()
        .unwrap();
    // The successor's registration barrier freezes the gate at the predecessor's epoch before
    // it commits the next one: either read fences the predecessor.
    match &ended {
        FenceEnd::Superseded(seen) => assert_eq!(seen.gate.process_epoch().0, 1),
        FenceEnd::Held(seen) => {
            assert_eq!(seen.gate.process_epoch().0, 0);
            assert!(seen.gate.op().is_some(), "{seen:?}");
        }
        other => panic!("the fence ended otherwise: {other:?}"),
    }
    let now = handle.observe_host_gate(HOST_IID).await.unwrap().unwrap();
    assert_eq!(now.gate.process_epoch().0, 1);

    handle.close().await.unwrap();
    let refused = handle
        .register_host_incarnation(HOST_IID)
        .await
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::Unavailable, "{refused:?}");
    assert!(refused.message.contains("not ready"), "{refused:?}");
}

const CONTROL_IID: &str = "pppppppppppppppppppppppppp";
const CONTROL_UID: &str = "mmmmmmmmmmmmmmmmmmmmmmmmmm";

/// The platform control door (reference §7.3) on a real plane: the assigned control manager is
/// prepared under the `p_` owner derived for the context's account (never read from the
/// request), and each refusal comes with its code: a moved revision and a revoked row
/// (`permission-denied`), the backend down (`unavailable`), an `idpToken` in the envelope
/// (`bad-request`), a managed-agent kind (`unimplemented`); a delegated launch's lifecycle is
/// activated at its pinned uid; a context without platform control has neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn platform_control_prepares_the_assigned_manager_under_its_platform_owner() {
    let a = Context::new("store-a");
    let assigned = PlatformAssignment {
        space: space_name(),
        account_public_key: AccountKey::parse(&a.account).unwrap(),
        instance_id: InstanceId::parse(CONTROL_IID).unwrap(),
        lifecycle_uid: LifecycleUid::parse(CONTROL_UID).unwrap(),
        predecessor_instance_id: None,
        assignment_revision: 1,
        state: AssignmentState::Assigned,
    };
    *a.backend.0.lock().unwrap() = Ok(Some(assigned.clone()));
    let handle = hosted::start(a.inputs()).await.unwrap();
    let envelope = |operation: &str, revision: u64| {
        let id = |n: u8| {
            json!({"id": nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, [n; 32])
                .unwrap()
                .public_key()})
        };
        json!({
            "v": 1, "kind": "platform-control-authority", "space": SPACE,
            "accountPublicKey": a.account, "assignmentRevision": revision,
            "request": {
                "v": 1, "kind": "manager-service-authority", "operation": operation,
                "space": SPACE, "actor": "cli", "instanceId": CONTROL_IID,
                "managerLifecycleUid": CONTROL_UID, "requestId": "platform-00000000000000001",
                "identities": {
                    "supervisor": id(1), "executor": id(2), "serve": id(3),
                    "goalWriter": id(4), "sessionLedger": id(5),
                },
            },
        })
    };

    let material = handle
        .platform_control_authority(&envelope("prepare", 1))
        .await
        .unwrap();
    let owner = platform_control_owner(a.material().owner_secret(), &space_name(), &a.account);
    assert_eq!(material["owner"], owner.as_str(), "{material}");
    assert!(owner.as_str().starts_with("p_"));
    assert_eq!(material["operation"], "prepare");
    assert_eq!(material["instanceId"], CONTROL_IID);
    for name in ["supervisor", "executor"] {
        assert!(
            material["credentials"][name]["jwt"].is_string(),
            "{material}"
        );
    }

    let code = |r: Result<Value, cotal_core::EpError>| r.unwrap_err().code;
    assert_eq!(
        code(
            handle
                .platform_control_authority(&envelope("prepare", 2))
                .await
        ),
        ErrorCode::PermissionDenied
    );
    let mut with_token = envelope("prepare", 1);
    with_token["idpToken"] = json!("x");
    assert_eq!(
        code(handle.platform_control_authority(&with_token).await),
        ErrorCode::BadRequest
    );
    let mut managed = envelope("prepare", 1);
    managed["request"]["kind"] = json!("manager-managed-agent-enrollment");
    assert_eq!(
        code(handle.platform_control_authority(&managed).await),
        ErrorCode::Unimplemented
    );
    *a.backend.0.lock().unwrap() = Err("the backend is down".to_owned());
    assert_eq!(
        code(
            handle
                .platform_control_authority(&envelope("prepare", 1))
                .await
        ),
        ErrorCode::Unavailable
    );
    *a.backend.0.lock().unwrap() = Ok(Some(PlatformAssignment {
        state: AssignmentState::Revoked,
        ..assigned
    }));
    assert_eq!(
        code(
            handle
                .platform_control_authority(&envelope("prepare", 1))
                .await
        ),
        ErrorCode::PermissionDenied
    );
    // A delegated launch's lifecycle, activated at its pinned uid before any row exists:
    // idempotent at that uid, refused at another while it lives (F60).
    let user = a.material().owner_for_idp_subject("bob").unwrap();
    let (uid, other) = ("launch00000000000000000001", "launch00000000000000000002");
    let first = handle
        .activate_managed_lifecycle(user.owner().as_str(), "worker", uid)
        .await
        .unwrap();
    assert!(
        matches!(first.run, ActivationRun::Completed(_)),
        "{first:?}"
    );
    let again = handle
        .activate_managed_lifecycle(user.owner().as_str(), "worker", uid)
        .await
        .unwrap();
    assert_eq!(again.run, ActivationRun::AlreadyActive);
    let taken = handle
        .activate_managed_lifecycle(user.owner().as_str(), "worker", other)
        .await
        .unwrap_err();
    assert_eq!(taken.code, ErrorCode::AlreadyExists, "{taken:?}");
    handle.close().await.unwrap();

    let mut plain = a.inputs();
    plain.platform_control = None;
    let without = hosted::start(plain).await.unwrap();
    assert_eq!(
        code(
            without
                .platform_control_authority(&envelope("prepare", 1))
                .await
        ),
        ErrorCode::FailedPrecondition
    );
    without.close().await.unwrap();
}

/// hosted-bootstrap-order, as it stands here: a plane that died holding the claim (its row
/// `held` at generation 1, its scanners gone without a release) does not block a new start of
/// the context, which asks the servers' own listing (the system account's CONNZ, always there
/// while the broker is: the reference's delivery-daemon precondition has no counterpart),
/// finds the holder's scanners gone, reclaims at the next generation and serves; the sibling
/// context serves throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_bootstrap_order_a_dead_predecessors_claim_is_reclaimed() {
    let a = Context::new("store-a");
    let b = Context::new("store-b");
    let second = hosted::start(b.inputs()).await.unwrap();

    // The dead predecessor's row, on A's broker, naming scanner connections no server holds.
    let admin = a.admin().await;
    let bound = admin.space().unwrap();
    let server_id = bound.client().server_info().server_id;
    let gone = |n: u8| {
        let user = nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, [n; 32]).unwrap();
        ConnTuple::new(&server_id, 900_000 + u64::from(n), &user.public_key()).unwrap()
    };
    let row = ClaimRow {
        generation: 1,
        claim_id: "dead-predecessor".to_owned(),
        state: ClaimState::Held,
        ledger: gone(1),
        records: gone(2),
        opened_at: "2026-12-01T00:00:00.000Z".to_owned(),
    };
    let staged = bound
        .execute(&KvRequest::Create {
            store: Store::Auth,
            key: PLANE_CLAIM_KEY.to_owned(),
            value: row.to_bytes(),
        })
        .await;
    assert!(matches!(staged, KvOutcome::Written(_)), "{staged:?}");
    let _ = admin.close().await;
    b.serves(&second, "ibxbootb01").await;

    let first = hosted::start(a.inputs()).await.unwrap();
    assert_eq!(first.readiness().state, "ready");
    let now = a.claim_row().await;
    assert_eq!(
        (now.state, now.generation),
        (ClaimState::Held, 2),
        "{now:?}"
    );
    a.serves(&first, "ibxboota01").await;
    assert_eq!(second.readiness().state, "ready");
    b.serves(&second, "ibxbootb02").await;
    first.close().await.unwrap();
    second.close().await.unwrap();
}
