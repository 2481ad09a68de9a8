//! The auth callout service (reference-auth-service §8.2, §11.7 cells callout-shape,
//! auth-callout, callout-deny).
//!
//! * `callout_shape_*` — broker-free: the per-message handler fed crafted requests, sealed and
//!   signed here with nkeys (a server key and xkey of the test's own), as nats-server 2.15.1
//!   writes them (callout-operator-mode §4). Provenance failures get no answer at all; a
//!   well-formed request with a junk bearer gets a signed, sealed denial.
//! * `auth_callout_*`, `callout_deny_*` — a provisioned trust root's broker config on a real
//!   nats-server 2.15.1 with the service answering: clients present the sentinel's creds plus
//!   their bearer in `auth_token` and land in the data account, or are refused with
//!   `Authorization Violation`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cotal_core::callout::{Admit, ConnectRequest, DropReason};
use cotal_core::jwt::{
    self, AuthorizationVerdict, ClaimType, Nats, Permission, Permissions, UnixSeconds, UserNats,
    Validity,
};
use cotal_core::names::SpaceName;
use cotal_core::trust::{broker_config, provision, IdpPin, ProvisionSeeds, TrustRoot};
use cotal_io_nats::async_nats::{self, HeaderMap, Message};
use cotal_io_nats::authority::connect_with_creds;
use cotal_io_nats::callout::{
    handle_request, serve, Authorize, AuthorizeFuture, CalloutKeys, CalloutService, Handled,
    SERVER_XKEY_HEADER,
};
use cotal_io_nats::DataAccountSigner;
use cotal_tests::nats::client::{ClientError, JwtAuth, NatsClient};
use cotal_tests::nats::{wall_clock, ConfiguredServer};
use nkeys::{KeyPair, XKey};
use serde_json::{json, Value};

const AUTH_VIOLATION: &str = "Authorization Violation";

/// The bearer the test authorizer admits.
const GOOD_TOKEN: &str = "good-bearer-0123456789";

/// The test authorizer's deny reason: an em dash the encoder path must survive.
const EM_DASH_REASON: &str = "denied \u{2014} bearer expired";

/// The nonce whose authorization the test authorizer holds until [`TestAuthorizer::release`].
const SLOW_NONCE: &str = "ibx-slow";

/// How long an admission lasts (the bearer's `exp`, as the daemon will pass it).
const ADMIT_SECONDS: u64 = 600;

fn trust_root() -> TrustRoot {
    let entropy: [u8; ProvisionSeeds::ENTROPY_BYTES] =
        std::array::from_fn(|i| (i * 17 % 251) as u8 ^ (i / 32) as u8);
    provision(
        &SpaceName::parse("main").unwrap(),
        IdpPin::from_url("https://idp.example.com").unwrap(),
        &ProvisionSeeds::from_entropy(&entropy),
        wall_clock(),
    )
    .unwrap()
}

/// The grant of an admitted client: publish `a.ok.>`, nothing else.
fn grant() -> Permissions {
    Permissions {
        publish: Permission {
            allow: vec!["a.ok.>".into()],
            deny: vec![],
        },
        subscribe: Permission {
            allow: vec!["_INBOX.>".into()],
            deny: vec![],
        },
        response: None,
    }
}

/// Admits [`GOOD_TOKEN`] (unless the nonce is a wildcard or dotted: that is this authorizer's
/// rule, as the plane's inbox grammar will be), denies everything else with
/// [`EM_DASH_REASON`], and records what it saw and what was minted. A request named
/// [`SLOW_NONCE`] is decided only once `release` is notified (a slow ledger read).
#[derive(Debug)]
struct TestAuthorizer {
    expires_at: UnixSeconds,
    seen: Mutex<Vec<ConnectRequest>>,
    minted: Mutex<Vec<(String, UnixSeconds)>>,
    release: tokio::sync::Notify,
}

impl TestAuthorizer {
    fn new() -> Arc<Self> {
        Arc::new(TestAuthorizer {
            expires_at: UnixSeconds(wall_clock().0 + ADMIT_SECONDS),
            seen: Mutex::new(Vec::new()),
            minted: Mutex::new(Vec::new()),
            release: tokio::sync::Notify::new(),
        })
    }

    fn seen(&self) -> Vec<ConnectRequest> {
        self.seen.lock().unwrap().clone()
    }
}

impl Authorize for TestAuthorizer {
    fn authorize(&self, request: ConnectRequest) -> AuthorizeFuture<'_> {
        Box::pin(async move {
            if request.nonce.as_deref() == Some(SLOW_NONCE) {
                self.seen.lock().unwrap().push(request.clone());
                self.release.notified().await;
            }
            let verdict = match (&request.bearer, request.nonce.as_deref()) {
                (None, _) => Err("no user token presented".to_owned()),
                (Some(_), Some(n)) if n.contains(['*', '>', '.']) => {
                    Err(format!("nonce {n:?} is not an inbox token"))
                }
                (Some(t), _) if t.expose() == GOOD_TOKEN => Ok(Admit {
                    name: "alice".into(),
                    permissions: grant(),
                    tags: vec!["owner:u_test".into(), "actor:alice".into()],
                    limits: cotal_core::profiles::CONNECT_LIMITS,
                    expires_at: self.expires_at,
                }),
                (Some(_), _) => Err(EM_DASH_REASON.to_owned()),
            };
            if request.nonce.as_deref() != Some(SLOW_NONCE) {
                self.seen.lock().unwrap().push(request);
            }
            verdict
        })
    }

    fn admitted(&self, _request: &ConnectRequest, user_jwt: &str, expires_at: UnixSeconds) {
        self.minted
            .lock()
            .unwrap()
            .push((user_jwt.to_owned(), expires_at));
    }
}

fn keys(root: &TrustRoot) -> CalloutKeys {
    CalloutKeys::from_material(&root.daemon).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Broker-free: the per-message handler on crafted requests
// ---------------------------------------------------------------------------------------------

/// The test's stand-in for a nats-server: its key (signs requests) and its xkey (seals them).
struct FakeServer {
    key: KeyPair,
    xkey: XKey,
}

impl FakeServer {
    fn new() -> Self {
        FakeServer {
            key: KeyPair::new_server(),
            xkey: XKey::new(),
        }
    }

    /// Request claims as nats-server 2.15.1 writes them, for a fresh user nkey.
    fn claims(&self, root: &TrustRoot, token: Option<&str>) -> Value {
        let now = wall_clock().0;
        let mut connect = json!({"jwt": "eyJ.sentinel", "sig": "c2ln", "name": "ibx-nonce-1",
                                 "lang": "rust", "version": "0", "protocol": 1});
        if let Some(token) = token {
            connect["auth_token"] = json!(token);
        }
        json!({
            "aud": "nats-authorization-request", "exp": now + 2, "iat": now, "jti": "x",
            "iss": self.key.public_key(), "sub": root.daemon.callout_account(),
            "nats": {
                "type": "authorization_request", "version": 2,
                "server_id": {"name": "fake", "host": "127.0.0.1", "id": self.key.public_key(),
                              "version": "2.15.1", "xkey": self.xkey.public_key()},
                "user_nkey": KeyPair::new_user().public_key(),
                "client_info": {"host": "127.0.0.1", "id": 7, "kind": "Client", "type": "nats",
                                "name_tag": "sentinel"},
                "connect_opts": connect,
            },
        })
    }
}

fn sign(signer: &KeyPair, claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
    let sig = URL_SAFE_NO_PAD.encode(signer.sign(input.as_bytes()).unwrap());
    format!("{input}.{sig}")
}

fn message(payload: Vec<u8>, header: Option<&str>) -> Message {
    let headers = header.map(|h| {
        let mut map = HeaderMap::new();
        map.insert(SERVER_XKEY_HEADER, h);
        map
    });
    Message {
        subject: "$SYS.REQ.USER.AUTH".into(),
        reply: Some("$SYS._INBOX.test.reply".into()),
        payload: payload.into(),
        headers,
        status: None,
        description: None,
        length: 0,
    }
}

/// A request signed by `signer`, sealed by `sealer` to the callout xkey, with `header` as the
/// `Nats-Server-Xkey`.
fn sealed(root: &TrustRoot, claims: &Value, signer: &KeyPair, sealer: &XKey) -> Vec<u8> {
    let callout = XKey::from_public_key(&root.daemon.callout_xkey().public_key()).unwrap();
    sealer
        .seal(sign(signer, claims).as_bytes(), &callout)
        .unwrap()
}

async fn handle(root: &TrustRoot, authorizer: &TestAuthorizer, message: &Message) -> Handled {
    handle_request(&keys(root), authorizer, message, wall_clock()).await
}

/// Asserts the request is dropped for `reason` without the authorizer being asked.
async fn assert_dropped(root: &TrustRoot, message: Message, reason: impl Fn(&DropReason) -> bool) {
    let authorizer = TestAuthorizer::new();
    let handled = handle(root, &authorizer, &message).await;
    match &handled {
        Handled::Dropped(r) if reason(r) => {}
        other => panic!("expected a drop, got {other:?}"),
    }
    assert!(authorizer.seen().is_empty(), "the authorizer was asked");
}

#[test]
fn callout_shape_empty_xkey_seed_refuses_at_start() {
    let root = trust_root();
    let data = || DataAccountSigner {
        account: root.daemon.data_account().to_owned(),
        signer: Arc::new(root.daemon.data_signing_key().clone()),
    };
    let signer = root.daemon.callout_signing_key().clone();
    let e =
        CalloutKeys::new(root.daemon.callout_account(), signer.clone(), "", data()).unwrap_err();
    assert!(e.message.contains("unsealed"), "{e}");
    // A seed that is no curve seed is refused too; a good one is accepted.
    let not_curve = root.daemon.data_signing_key().seed().unwrap();
    assert!(CalloutKeys::new(
        root.daemon.callout_account(),
        signer.clone(),
        &not_curve,
        data()
    )
    .is_err());
    let seed = root.daemon.callout_xkey().seed().unwrap();
    let ok = CalloutKeys::new(root.daemon.callout_account(), signer, &seed, data()).unwrap();
    // Debug shows public halves only.
    let shown = format!("{ok:?}");
    assert!(!shown.contains(&seed), "{shown}");
    assert!(!shown.contains(&root.daemon.callout_signing_key().seed().unwrap()));
}

#[tokio::test]
async fn callout_shape_missing_header_gets_no_response() {
    let root = trust_root();
    let server = FakeServer::new();
    let payload = sealed(
        &root,
        &server.claims(&root, Some(GOOD_TOKEN)),
        &server.key,
        &server.xkey,
    );
    assert_dropped(&root, message(payload, None), |r| {
        *r == DropReason::MissingXkeyHeader
    })
    .await;
}

#[tokio::test]
async fn callout_shape_undecryptable_payload_gets_no_response() {
    let root = trust_root();
    let server = FakeServer::new();
    let header = server.xkey.public_key();
    let claims = server.claims(&root, Some(GOOD_TOKEN));
    // Sealed to another key than the callout's.
    let stranger = XKey::new();
    let wrong = server
        .xkey
        .seal(sign(&server.key, &claims).as_bytes(), &stranger)
        .unwrap();
    assert_dropped(&root, message(wrong, Some(&header)), |r| {
        *r == DropReason::Undecryptable
    })
    .await;
    // Plaintext, garbage, and a header that is no curve key.
    let plain = sign(&server.key, &claims).into_bytes();
    assert_dropped(&root, message(plain, Some(&header)), |r| {
        *r == DropReason::Undecryptable
    })
    .await;
    assert_dropped(
        &root,
        message(b"xkv1 garbage".to_vec(), Some(&header)),
        |r| *r == DropReason::Undecryptable,
    )
    .await;
    let good = sealed(&root, &claims, &server.key, &server.xkey);
    assert_dropped(&root, message(good, Some("not-a-key")), |r| {
        *r == DropReason::Undecryptable
    })
    .await;
}

#[tokio::test]
async fn callout_shape_claim_xkey_differs_from_header_gets_no_response() {
    let root = trust_root();
    let server = FakeServer::new();
    // A relay re-seals the server's signed request under its own key.
    let relay = XKey::new();
    let payload = sealed(
        &root,
        &server.claims(&root, Some(GOOD_TOKEN)),
        &server.key,
        &relay,
    );
    assert_dropped(&root, message(payload, Some(&relay.public_key())), |r| {
        *r == DropReason::XkeyMismatch
    })
    .await;
}

#[tokio::test]
async fn callout_shape_issuer_not_server_id_gets_no_response() {
    let root = trust_root();
    let server = FakeServer::new();
    let mut claims = server.claims(&root, Some(GOOD_TOKEN));
    claims["nats"]["server_id"]["id"] = json!(KeyPair::new_server().public_key());
    let payload = sealed(&root, &claims, &server.key, &server.xkey);
    assert_dropped(
        &root,
        message(payload, Some(&server.xkey.public_key())),
        |r| *r == DropReason::IssuerNotServer,
    )
    .await;
}

#[tokio::test]
async fn callout_shape_non_n_issuer_gets_no_response() {
    let root = trust_root();
    let server = FakeServer::new();
    // An account key (a callout-creds holder's forgery) signs as its own "server".
    let forger = KeyPair::new_account();
    let mut claims = server.claims(&root, Some(GOOD_TOKEN));
    claims["iss"] = json!(forger.public_key());
    claims["nats"]["server_id"]["id"] = json!(forger.public_key());
    let payload = sealed(&root, &claims, &forger, &server.xkey);
    assert_dropped(
        &root,
        message(payload, Some(&server.xkey.public_key())),
        |r| matches!(r, DropReason::Malformed(why) if why.contains("cannot issue")),
    )
    .await;
}

/// Opens a sealed answer as the server would and verifies it: signed by the callout signing
/// key, for `request`'s user nkey and server.
fn open_answer(
    root: &TrustRoot,
    server: &FakeServer,
    sealed: &[u8],
    request: &ConnectRequest,
) -> AuthorizationVerdict {
    let callout = XKey::from_public_key(&root.daemon.callout_xkey().public_key()).unwrap();
    let opened = server.xkey.open(sealed, &callout).unwrap();
    let token = String::from_utf8(opened).unwrap();
    let claims = jwt::verify(
        &token,
        ClaimType::AuthorizationResponse,
        &root.daemon.callout_signing_key().public_key(),
        wall_clock(),
    )
    .unwrap();
    assert_eq!(claims.sub, request.user_nkey.as_str());
    assert_eq!(
        claims.aud.as_deref(),
        Some(server.key.public_key().as_str())
    );
    let Nats::AuthorizationResponse(response) = claims.nats else {
        panic!("{:?}", claims.nats)
    };
    assert_eq!(
        response.issuer_account.as_deref(),
        Some(root.daemon.callout_account())
    );
    response.verdict
}

#[tokio::test]
async fn callout_shape_junk_bearer_gets_a_signed_deny_response() {
    let root = trust_root();
    let server = FakeServer::new();
    let authorizer = TestAuthorizer::new();
    let payload = sealed(
        &root,
        &server.claims(&root, Some("junk")),
        &server.key,
        &server.xkey,
    );
    let handled = handle(
        &root,
        &authorizer,
        &message(payload, Some(&server.xkey.public_key())),
    )
    .await;
    let Handled::Denied { sealed, reason } = &handled else {
        panic!("expected a denial, got {handled:?}")
    };
    assert_eq!(reason, "denied - bearer expired");
    let seen = authorizer.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].bearer.as_ref().unwrap().expose(), "junk");
    assert_eq!(
        open_answer(&root, &server, sealed, &seen[0]),
        AuthorizationVerdict::Error("denied - bearer expired".into())
    );
}

#[tokio::test]
async fn callout_shape_good_bearer_gets_a_sealed_admission() {
    let root = trust_root();
    let server = FakeServer::new();
    let authorizer = TestAuthorizer::new();
    let payload = sealed(
        &root,
        &server.claims(&root, Some(GOOD_TOKEN)),
        &server.key,
        &server.xkey,
    );
    let handled = handle(
        &root,
        &authorizer,
        &message(payload, Some(&server.xkey.public_key())),
    )
    .await;
    let Handled::Admitted { sealed } = &handled else {
        panic!("expected an admission, got {handled:?}")
    };
    let request = &authorizer.seen()[0];
    let AuthorizationVerdict::Jwt(user_jwt) = open_answer(&root, &server, sealed, request) else {
        panic!("not an admission")
    };
    let user = jwt::verify(
        &user_jwt,
        ClaimType::User,
        &root.daemon.data_signing_key().public_key(),
        wall_clock(),
    )
    .unwrap();
    assert_eq!(user.sub, request.user_nkey.as_str());
    assert_eq!(user.user_account(), Some(root.daemon.data_account()));
    assert_eq!(user.exp, Some(authorizer.expires_at));
    assert_eq!(user.name, "alice");
    assert_eq!(user.user().unwrap().permissions, grant());
    assert_eq!(
        authorizer.minted.lock().unwrap().as_slice(),
        &[(user_jwt.clone(), authorizer.expires_at)]
    );
    // Nothing secret in the Debug outputs of what the plane handled.
    assert!(!format!("{request:?}").contains(GOOD_TOKEN));
    assert!(!format!("{handled:?}").contains(&user_jwt));
}

// ---------------------------------------------------------------------------------------------
// A real nats-server 2.15.1 with the service answering
// ---------------------------------------------------------------------------------------------

/// The trust root's broker, its callout service up, and the authorizer it asks.
struct Mesh {
    root: TrustRoot,
    server: ConfiguredServer,
    service: CalloutService,
    authorizer: Arc<TestAuthorizer>,
}

impl Mesh {
    /// Boots the broker config (plus `extra` config lines) and serves the callout on it.
    async fn start(extra: &str) -> Mesh {
        let root = trust_root();
        let server = ConfiguredServer::start(|listen, store| {
            let mut config = broker_config(&root.broker, listen, &store.to_string_lossy()).unwrap();
            config.push_str(extra);
            config
        })
        .unwrap();
        let client = connect_with_creds(
            &format!("nats://127.0.0.1:{}", server.port()),
            "cotal:auth-service:main",
            root.daemon.callout_creds(),
        )
        .await
        .unwrap();
        let authorizer = TestAuthorizer::new();
        let service = serve(client, keys(&root), authorizer.clone())
            .await
            .unwrap();
        Mesh {
            root,
            server,
            service,
            authorizer,
        }
    }

    /// Connects as a client of the callout: the sentinel's creds plus `token`, named `name`.
    async fn client(&self, name: &str, token: Option<&str>) -> Result<NatsClient, ClientError> {
        let creds = jwt::parse_creds(self.root.daemon.sentinel_creds()).unwrap();
        let key = KeyPair::from_seed(&creds.seed).unwrap();
        let (port, name, token) = (
            self.server.port(),
            name.to_owned(),
            token.map(str::to_owned),
        );
        blocking(move || {
            let auth = JwtAuth {
                jwt: &creds.jwt,
                key: &key,
            };
            NatsClient::connect_with_token(port, &name, Some(auth), token.as_deref())
        })
        .await
    }

    /// A data-account user minted directly with the data signing key (no callout), subscribed
    /// to `subject`: the witness of what admitted clients publish.
    async fn witness(&self, subject: &str) -> NatsClient {
        let user = KeyPair::new_user();
        let now = wall_clock();
        let token = jwt::user_jwt(
            self.root.daemon.data_signing_key(),
            self.root.daemon.data_account(),
            &user.public_key(),
            "witness",
            &UserNats {
                permissions: Permissions {
                    subscribe: Permission {
                        allow: vec![">".into()],
                        deny: vec![],
                    },
                    ..Permissions::default()
                },
                ..UserNats::default()
            },
            Validity {
                issued_at: now,
                expires_at: Some(UnixSeconds(now.0 + 60)),
            },
        )
        .unwrap();
        let (port, subject) = (self.server.port(), subject.to_owned());
        blocking(move || {
            let auth = JwtAuth {
                jwt: &token,
                key: &user,
            };
            let mut witness = NatsClient::connect(port, "witness", Some(auth)).unwrap();
            witness.subscribe(&subject, None).unwrap();
            witness
        })
        .await
    }

    fn refusal(&self, outcome: Result<NatsClient, ClientError>) -> String {
        match outcome {
            Err(ClientError::Refused(e)) => e,
            other => panic!(
                "expected a refusal, got {:?}\nserver log:\n{}",
                other.map(|_| "connected"),
                self.server.log_tail()
            ),
        }
    }
}

/// Runs the blocking raw client off the runtime, which the service's tasks need.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test]
async fn auth_callout_valid_bearer_lands_in_the_data_account_with_its_grant() {
    let mesh = Mesh::start("").await;
    let mut witness = mesh.witness("a.>").await;
    let client = mesh
        .client("ibx-nonce-1", Some(GOOD_TOKEN))
        .await
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", mesh.server.log_tail()));

    let seen = mesh.authorizer.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].nonce.as_deref(), Some("ibx-nonce-1"));
    assert_eq!(seen[0].bearer.as_ref().unwrap().expose(), GOOD_TOKEN);
    assert_eq!(seen[0].client.name_tag, "sentinel");
    // The server's own identity and xkey, as its INFO advertises them.
    let info = client.info().clone();
    assert_eq!(
        seen[0].server_id.as_str(),
        info["server_id"].as_str().unwrap()
    );
    assert_eq!(seen[0].server_xkey, info["xkey"].as_str().unwrap());

    let (client, mut witness, forbidden) = blocking(move || {
        let mut client = client;
        client.publish("a.ok.1", None, b"hello").unwrap();
        let got = witness.next_msg(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (got.subject.as_str(), got.payload.as_slice()),
            ("a.ok.1", &b"hello"[..])
        );
        let forbidden = client.publish("a.no.1", None, b"nope");
        (client, witness, forbidden)
    })
    .await;
    assert_eq!(
        forbidden,
        Err(ClientError::Refused(
            "Permissions Violation for Publish to \"a.no.1\"".into()
        ))
    );
    // The forbidden message never reached the data account; the connection stays open.
    let (_client, nothing) = blocking(move || {
        let mut client = client;
        client.publish("a.ok.2", None, b"still here").unwrap();
        let next = witness.next_msg(Duration::from_secs(5)).unwrap();
        (client, next)
    })
    .await;
    assert_eq!(nothing.subject, "a.ok.2");

    // The minted JWT expires exactly when the authorizer said (the bearer's exp).
    let minted = mesh.authorizer.minted.lock().unwrap().clone();
    assert_eq!(minted.len(), 1);
    let (user_jwt, expires_at) = &minted[0];
    assert_eq!(*expires_at, mesh.authorizer.expires_at);
    let claims = jwt::decode(user_jwt).unwrap();
    assert_eq!(claims.exp, Some(mesh.authorizer.expires_at));
    assert_eq!(claims.sub, seen[0].user_nkey.as_str());
    assert_eq!(claims.user_account(), Some(mesh.root.daemon.data_account()));
    let counters = mesh.service.counters();
    assert_eq!(
        (counters.admitted, counters.denied, counters.dropped),
        (1, 0, 0)
    );
    mesh.service.close().await.unwrap();
}

#[tokio::test]
async fn auth_callout_missing_token_is_denied() {
    let mesh = Mesh::start("").await;
    let outcome = mesh.client("ibx-nonce-2", None).await;
    assert_eq!(mesh.refusal(outcome), AUTH_VIOLATION);
    let seen = mesh.authorizer.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].bearer, None, "the authorizer saw a token");
    assert_eq!(mesh.service.counters().denied, 1);
    mesh.service.close().await.unwrap();
}

#[tokio::test]
async fn auth_callout_wildcard_nonce_is_carried_verbatim_and_refused() {
    let mesh = Mesh::start("").await;
    let outcome = mesh.client(">", Some(GOOD_TOKEN)).await;
    assert_eq!(mesh.refusal(outcome), AUTH_VIOLATION);
    let seen = mesh.authorizer.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].nonce.as_deref(), Some(">"));
    assert!(mesh.authorizer.minted.lock().unwrap().is_empty());
    mesh.service.close().await.unwrap();
}

#[tokio::test]
async fn callout_deny_em_dash_rejects_promptly() {
    // The server waits up to 15 s for the callout; the harness client gives up after
    // `IO_TIMEOUT` (5 s, under half of that). So an `Authorization Violation` here can only
    // come from the denial itself: a lost or hung answer would surface as a client timeout.
    let mesh = Mesh::start("authorization {\n  timeout: 15\n}\n").await;
    let outcome = mesh.client("ibx-nonce-3", Some("expired-bearer")).await;
    assert_eq!(mesh.refusal(outcome), AUTH_VIOLATION);
    assert_eq!(mesh.service.counters().denied, 1);
    // The server may write its log line just after it answered the client: give it a moment.
    let folded = "Auth callout service returned an error: denied - bearer expired";
    let mut log = mesh.server.log_tail();
    for _ in 0..40 {
        if log.contains(folded) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        log = mesh.server.log_tail();
    }
    assert!(
        log.contains(folded),
        "the server did not log the folded reason:\n{log}"
    );
    mesh.service.close().await.unwrap();
}

#[tokio::test]
async fn auth_callout_close_stops_answering() {
    let mesh = Mesh::start("").await;
    mesh.client("ibx-nonce-4", Some(GOOD_TOKEN)).await.unwrap();
    mesh.service.close().await.unwrap();
    // Nobody answers now: the server refuses at its 2 s auth timeout.
    let again = {
        let creds = jwt::parse_creds(mesh.root.daemon.sentinel_creds()).unwrap();
        let key = KeyPair::from_seed(&creds.seed).unwrap();
        let port = mesh.server.port();
        blocking(move || {
            let auth = JwtAuth {
                jwt: &creds.jwt,
                key: &key,
            };
            NatsClient::connect_with_token(port, "ibx-nonce-5", Some(auth), Some(GOOD_TOKEN))
        })
        .await
    };
    assert!(
        matches!(&again, Err(ClientError::Refused(e)) if e == AUTH_VIOLATION),
        "{:?}",
        again.map(|_| "connected")
    );
    assert_eq!(mesh.authorizer.seen().len(), 1);
}

/// The async client of the adapter reaches the same verdicts (its `token` and `credentials`
/// options together send what the harness client sends).
#[tokio::test]
async fn auth_callout_async_client_connects_with_sentinel_creds_and_token() {
    let mesh = Mesh::start("").await;
    let url = format!("nats://127.0.0.1:{}", mesh.server.port());
    let options = || {
        async_nats::ConnectOptions::new()
            .credentials(mesh.root.daemon.sentinel_creds())
            .unwrap()
            .name("ibx-nonce-6")
    };
    let client = options()
        .token(GOOD_TOKEN.into())
        .connect(&url)
        .await
        .unwrap();
    client.publish("a.ok.async", "x".into()).await.unwrap();
    client.flush().await.unwrap();
    let refused = options()
        .token("junk".into())
        .connect(&url)
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .to_lowercase()
            .contains("authorization violation"),
        "{refused}"
    );
    let counters = mesh.service.counters();
    assert_eq!((counters.admitted, counters.denied), (1, 1));
    mesh.service.close().await.unwrap();
}

#[tokio::test]
async fn auth_callout_a_slow_authorization_does_not_hold_up_the_next_connect() {
    let mesh = Arc::new(Mesh::start("").await);
    // The slow connect's authorization waits for a release that comes only after the next
    // connect is through: handled one at a time, the next connect would wait behind it and be
    // refused at the server's 2 s auth timeout instead.
    let slow = {
        let mesh = Arc::clone(&mesh);
        tokio::spawn(async move { mesh.client(SLOW_NONCE, Some(GOOD_TOKEN)).await.map(|_| ()) })
    };
    while mesh.authorizer.seen().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    mesh.client("ibx-fast", Some(GOOD_TOKEN))
        .await
        .unwrap_or_else(|e| panic!("the fast connect waited on the slow one: {e}"));
    mesh.authorizer.release.notify_one();
    slow.await.unwrap().unwrap();
    assert_eq!(mesh.service.counters().admitted, 2);
}
