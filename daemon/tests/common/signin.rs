//! The sign-in fixture: a state root with a development IdP the test starts, the space's trust
//! root pinned to it, the operator's verbs, a plane, and the exchange over real HTTP.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::Instant;

use cotal_io_nats::async_nats::{Client, ConnectOptions, Event};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;

use super::*;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A state root with a development IdP serving, the space's trust root pinned to it, and the
/// processes a failed test must not leak.
pub struct Space {
    // Declared first so it drops first: it reads the embedded server's record under the state
    // root to stop that server, which the temp dir's removal would take away.
    pub reaper: Reaper,
    pub root: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Space {
    /// With this state root's development IdP.
    pub fn new() -> Space {
        Space::with_idp(|root, port| {
            command()
                .args(["dev-idp", "--port", &port.to_string(), "--state-dir"])
                .arg(root)
                .env("RUST_LOG", "off")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
    }

    /// With the IdP `start` runs on `127.0.0.1:<port>`, once its `/jwks` answers.
    pub fn with_idp(start: impl FnOnce(&std::path::Path, u16) -> Child) -> Space {
        require_server();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let port = free_port();
        let idp = start(&root, port);
        let reaper = Reaper(vec![idp], root.clone());
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + READY_TIMEOUT;
        while http(&url, "GET", "/jwks", &[], "").map(|a| a.0).ok() != Some(200) {
            assert!(
                Instant::now() < deadline,
                "the IdP did not serve {url}/jwks"
            );
            sleep(POLL);
        }
        let out = command()
            .args(["init", "--space", SPACE, "--idp", &url, "--state-dir"])
            .arg(&root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Space {
            reaper,
            root,
            _dir: dir,
        }
    }

    /// The IdP's origin, as the space pinned it.
    pub fn idp_url(&self) -> String {
        let pin: Value =
            serde_json::from_slice(&fs::read(space_dir(&self.root).join("idp.json")).unwrap())
                .unwrap();
        pin["url"].as_str().unwrap().to_owned()
    }

    pub fn authd(&self, args: &[&str]) -> String {
        let out = command()
            .args(args)
            .args(["--state-dir"])
            .arg(&self.root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    pub fn grant(&self, actor: &str, subject: &str, extra: &[&str]) {
        let mut args = vec![
            "actor",
            "grant",
            actor,
            "--space",
            SPACE,
            "--idp-subject",
            subject,
        ];
        args.extend_from_slice(if extra.is_empty() { &["--full"] } else { extra });
        self.authd(&args);
    }

    /// A grant with exactly these comma-separated lists, each possibly empty.
    pub fn grant_lists(&self, actor: &str, subject: &str, scope: &str, sub: &str, publ: &str) {
        let lists = [
            "--scope",
            scope,
            "--allow-subscribe",
            sub,
            "--allow-publish",
            publ,
        ];
        self.grant(actor, subject, &lists);
    }

    pub fn owner(&self, subject: &str) -> String {
        self.authd(&["owner", "--space", SPACE, "--idp-subject", subject])
    }

    pub fn idp_token(&self, subject: &str) -> String {
        self.authd(&["dev-idp", "token", "--subject", subject, "--ttl", "120"])
    }

    /// The space's `broker-config` as the extra config of a cluster node the test harness
    /// starts (its own `listen` and JetStream store dir are the harness's), with fast pings so
    /// a dead peer's connections go at once.
    pub fn node_config(&self) -> String {
        let config = self.authd(&["broker-config", "--space", SPACE]);
        let mut kept = String::new();
        let mut in_jetstream = false;
        for line in config.lines() {
            if in_jetstream {
                in_jetstream = line.trim() != "}";
            } else if line.starts_with("jetstream {") {
                in_jetstream = true;
            } else if !line.starts_with("listen:") {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        kept.push_str("ping_interval: \"1s\"\nping_max: 3\n");
        kept
    }

    /// Runs the space's own nats-server from `broker-config` (so it outlives any plane of the
    /// test) and returns its URL once it accepts connections.
    pub fn serve_broker(&mut self) -> String {
        let port = self.serve_broker_with("", &[], "");
        format!("nats://127.0.0.1:{port}")
    }

    /// Runs a nats-server of the space from `broker-config` with `flags` (TLS, routes), the
    /// config text `extra` appended, its config (`server.conf`) and store under `<root>/<name>`
    /// (the root itself for `""`), and returns its client port once it accepts connections.
    pub fn serve_broker_with(&mut self, name: &str, flags: &[&str], extra: &str) -> u16 {
        let port = free_port();
        let dir = self.root.join(name);
        fs::create_dir_all(&dir).unwrap();
        let mut args = vec!["broker-config", "--space", SPACE, "--listen"];
        let listen = format!("127.0.0.1:{port}");
        let store = dir.join("store");
        args.extend([listen.as_str(), "--store-dir", store.to_str().unwrap()]);
        args.extend_from_slice(flags);
        let config = format!("{}\n{extra}", self.authd(&args));
        let config_path = dir.join("server.conf");
        fs::write(&config_path, config).unwrap();
        self.reaper.0.push(broker(&config_path, port));
        port
    }

    /// Restarts the nats-server [`Space::serve_broker_with`] started as `name` on `port`, whose
    /// process is the reaper's entry `slot`, as an operator restarts the service: SIGTERM,
    /// then the same config and store again, once it accepts connections.
    pub fn restart_broker(&mut self, slot: usize, name: &str, port: u16) {
        let old = &mut self.reaper.0[slot];
        let pid = rustix::process::Pid::from_raw(old.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        old.wait().unwrap();
        self.reaper.0[slot] = broker(&self.root.join(name).join("server.conf"), port);
    }

    /// A data-account connection to `server` with no permission limits: the test's own view
    /// of the auth and records stores.
    pub async fn admin(&self, server: &str) -> cotal_io_nats::AuthorityClient {
        self.admin_for(server, Duration::from_secs(120)).await
    }

    /// [`Space::admin`] with a user JWT valid for `ttl` (a connection that must outlive a long
    /// run without a renewal swapping it).
    pub async fn admin_for(&self, server: &str, ttl: Duration) -> cotal_io_nats::AuthorityClient {
        let space = cotal_core::names::SpaceName::parse(SPACE).unwrap();
        let material = cotal_io_fs::trust::load_daemon(&self.root, &space).unwrap();
        cotal_io_nats::AuthorityClient::open(
            server,
            "test-admin".to_owned(),
            cotal_io_nats::DataAccountSigner {
                account: material.data_account().to_owned(),
                signer: std::sync::Arc::new(material.data_signing_key().clone()),
            },
            |_| Ok(cotal_core::jwt::UserNats::default()),
            ttl,
            space,
            cotal_io_nats::SpaceOptions {
                stores: cotal_io_nats::StoreSet::of(&[
                    cotal_core::kv::Store::Auth,
                    cotal_core::kv::Store::Records,
                ]),
                replicas_as_found: true,
                ..cotal_io_nats::SpaceOptions::default()
            },
        )
        .await
        .unwrap()
    }

    /// Registers manager instance `iid` (lifecycle `muid`) for `owner` on `server` as the
    /// registration ceremony leaves it: the gate `epgate.manager.<iid>` open at epoch 0 and
    /// revision 0, recording `<owner>.manager_serve_<iid>`. Returns the host's
    /// current-registration proof for it.
    pub async fn register_manager(
        &self,
        server: &str,
        owner: &str,
        iid: &str,
        muid: &str,
    ) -> String {
        use cotal_core::gate::{ProcessEpoch, RegistrationRevision};
        use cotal_core::issuance::{GateRef, ProvisionGate};
        use cotal_core::manager::{
            current_registration_proof, ManagerAuthorityRequest, ProofSecret,
        };
        use cotal_core::names::{EndpointName, InstanceId, OwnerToken, SpaceName};
        let space = SpaceName::parse(SPACE).unwrap();
        let envelope = ManagerAuthorityRequest::parse(&json!({
            "v": 1, "kind": "manager-service-authority", "operation": "prepare", "space": SPACE,
            "actor": "cli", "instanceId": iid, "managerLifecycleUid": muid,
            "requestId": "register000000000000000001", "identities": manager_identities(),
        }))
        .unwrap()
        .envelope;
        let owner = OwnerToken::parse(owner).unwrap();
        let gate = GateRef::new(
            space.clone(),
            EndpointName::parse("manager").unwrap(),
            InstanceId::parse(iid).unwrap(),
        );
        let admin = self.admin(server).await;
        cotal_io_nats::drive(
            &mut ProvisionGate::machine(gate, envelope.serve_principal(&owner).unwrap()),
            &admin.space().unwrap(),
        )
        .await
        .unwrap();
        admin.close().await.unwrap();
        let material = cotal_io_fs::trust::load_daemon(&self.root, &space).unwrap();
        current_registration_proof(
            &ProofSecret::new(material.data_signing_key().seed().unwrap()),
            &owner,
            &envelope,
            RegistrationRevision(0),
            ProcessEpoch(0),
        )
        .as_str()
        .to_owned()
    }

    /// Starts `up` and waits until it is ready (its discovery file is written).
    pub fn up(&mut self, extra: &[&str]) -> Value {
        self.up_with(extra, &[], None)
    }

    /// [`Space::up`] with extra environment, and with the plane's log (`RUST_LOG=info`)
    /// written to `log` when given. A `RUST_LOG` in `env` wins over either default.
    pub fn up_with(
        &mut self,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Option<&std::path::Path>,
    ) -> Value {
        self.up_as(command(), extra, env, log)
    }

    /// [`Space::up`] under a process limit of `nofile` file descriptors (soft and hard), set
    /// by util-linux's `prlimit` before the plane starts.
    pub fn up_with_nofile(&mut self, nofile: u64, extra: &[&str]) -> Value {
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--nofile={nofile}:{nofile}"))
            .arg("--")
            .arg(BIN)
            .env_remove("NATS_URL");
        self.up_as(command, extra, &[], None)
    }

    fn up_as(
        &mut self,
        mut command: Command,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Option<&std::path::Path>,
    ) -> Value {
        command
            .args(["up", "--space", SPACE, "--state-dir"])
            .arg(&self.root)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match log {
            Some(log) => command
                .env("RUST_LOG", "info")
                .stderr(fs::File::create(log).unwrap()),
            None => command.env("RUST_LOG", "warn").stderr(Stdio::inherit()),
        };
        command.envs(env.iter().copied());
        let mut child: Child = command.spawn().unwrap();
        let found = ready(&self.root, &mut child);
        self.reaper.0.push(child);
        found
    }

    pub fn row(&self, subject: &str, actor: &str) -> Value {
        let path = space_dir(&self.root)
            .join("actors")
            .join(format!("{}.{actor}.json", self.owner(subject)));
        serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
    }

    /// A managed agent row spawned by `parent` (what enrollment writes), with `secret`.
    pub fn spawn_agent(&self, subject: &str, parent: &str, actor: &str, secret: &str, uid: &str) {
        let owner = self.owner(subject);
        let dir = space_dir(&self.root).join("managed-actors");
        fs::create_dir_all(&dir).unwrap();
        let digest: String = Sha256::digest(secret.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let row = json!({
            "ver": 1, "owner": owner, "actor": actor, "scope": [],
            "allowSubscribe": ["team.>"], "allowPublish": ["team.a"],
            "parent": format!("{owner}.{parent}"), "tokenHash": digest,
            "lifecycleUid": uid, "grantedAt": "2026-12-01T00:00:00.000Z",
        });
        let path = dir.join(format!("{owner}.{actor}.json"));
        fs::write(&path, serde_json::to_vec_pretty(&row).unwrap()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// `POST /exchange`.
/// A nats-server on the configuration at `config`, once it accepts connections on `port`.
fn broker(config: &std::path::Path, port: u16) -> Child {
    let bin = std::env::var_os("COTAL_NATS_SERVER").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/venv/bin/nats-server"),
        std::path::PathBuf::from,
    );
    let mut server = std::process::Command::new(bin)
        .arg("-c")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + READY_TIMEOUT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() >= deadline {
            let _ = server.kill();
            panic!("the space's nats-server did not start");
        }
        sleep(POLL);
    }
    server
}

pub fn post(url: &str, cap: Option<&str>, body: &Value) -> (u16, Value) {
    post_to(url, "/exchange", cap, body)
}

/// A JSON `POST` to a door, with the loopback capability when given: the status and the body.
pub fn post_to(url: &str, path: &str, cap: Option<&str>, body: &Value) -> (u16, Value) {
    let auth = cap.map(|c| format!("Bearer {c}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth));
    }
    let (status, _, text) = http(url, "POST", path, &headers, &body.to_string()).unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub fn sentinel(space: &Space) -> String {
    let callout: Value =
        serde_json::from_slice(&fs::read(space_dir(&space.root).join("callout.json")).unwrap())
            .unwrap();
    callout["callout"]["sentinelCreds"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Connects as a standard client does: the sentinel creds, the bearer as `auth_token`, the
/// inbox nonce as the connection name and its inbox prefix. Server errors (permission
/// violations) arrive on the returned channel.
pub async fn connect(
    space: &Space,
    server: &str,
    token: &str,
    nonce: &str,
) -> Result<(Client, mpsc::UnboundedReceiver<String>), String> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let client = callout_client(space, token, nonce)
        .max_reconnects(Some(0))
        .connection_timeout(Duration::from_secs(5))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                match event {
                    Event::ServerError(e) => {
                        let _ = tx.send(e.to_string());
                    }
                    Event::Disconnected | Event::Closed => {
                        let _ = tx.send(CLOSED.to_owned());
                    }
                    _ => {}
                }
            }
        })
        .connect(server)
        .await
        .map_err(|e| e.to_string())?;
    admitted(&client, &mut rx).await?;
    Ok((client, rx))
}

/// A client of the space's callout: the sentinel creds, `token` as the bearer, `nonce` as its
/// connection name and inbox prefix.
pub fn callout_client(space: &Space, token: &str, nonce: &str) -> ConnectOptions {
    ConnectOptions::new()
        .credentials(&sentinel(space))
        .unwrap()
        .token(token.to_owned())
        .name(nonce)
        .custom_inbox_prefix(format!("_INBOX_{nonce}"))
}

/// What the event callback of [`connect`] says when the connection closes.
const CLOSED: &str = "the connection closed";

/// Proves the server admitted `client`. async-nats reports a connect done at the first server
/// op after CONNECT that is not an error, and a server still waiting on the callout PINGs the
/// client at its ping interval (1 s on the namespaced cluster), so a "connected" client may yet
/// be refused. A server processes nothing else of a connection before its CONNECT is decided:
/// a publish no profile allows, answered with a permissions violation, proves the admission;
/// an authorization violation or a close is the refusal.
async fn admitted(client: &Client, rx: &mut mpsc::UnboundedReceiver<String>) -> Result<(), String> {
    client
        .publish("_COTAL_ADMISSION_PROBE", "".into())
        .await
        .map_err(|e| e.to_string())?;
    client.flush().await.map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(e)) if e.to_lowercase().contains("permissions violation") => return Ok(()),
            Ok(Some(e)) if e.to_lowercase().contains("authorization violation") => return Err(e),
            Ok(Some(e)) if e == CLOSED => {
                return Err(format!(
                    "authorization violation ({CLOSED} before any answer)"
                ))
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                return Err("authorization violation (no answer to the admission probe)".into())
            }
        }
    }
}

/// The claims of a bearer (its payload, unverified: the tests read what the plane signed).
pub fn claims(token: &str) -> Value {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

/// The JOSE header of a bearer (its `kid` names the key that signed it).
pub fn claims_header(token: &str) -> Value {
    use base64::Engine as _;
    let header = token.split('.').next().unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .unwrap(),
    )
    .unwrap()
}

pub fn refused(outcome: Result<(Client, mpsc::UnboundedReceiver<String>), String>) -> String {
    match outcome {
        Ok(_) => panic!("the connect was admitted"),
        Err(e) => {
            assert!(e.to_lowercase().contains("authorization violation"), "{e}");
            e
        }
    }
}

/// The five held identities of a manager request (fixed keys).
pub fn manager_identities() -> Value {
    let id = |n: u8| json!({"id": nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, [n; 32]).unwrap().public_key()});
    json!({
        "supervisor": id(1), "executor": id(2), "serve": id(3),
        "goalWriter": id(4), "sessionLedger": id(5),
    })
}
