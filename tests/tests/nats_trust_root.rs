//! The trust root on a real nats-server 2.15.1 (issue 14): a provisioned root's
//! `broker_config` passes `nats-server -t`, boots, and the server enforces it — the callout
//! service's creds connect to the callout account, a data-account user minted with the data
//! signing key connects with JetStream on, a user JWT at the 16 KiB mint bound connects
//! (the config's `max_control_line`), and no credentials, an unknown account's user, and the
//! sentinel (whose admission waits on a callout nobody answers here) are refused.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::{Duration, Instant};

use cotal_core::jwt::{
    self, Permission, Permissions, UnixSeconds, UserNats, Validity, MAX_JWT_BYTES,
};
use cotal_core::names::SpaceName;
use cotal_core::trust::{
    broker_config, provision, IdpPin, ProvisionSeeds, TrustRoot, AUTH_REQUEST_SUBJECT,
    MAX_CONTROL_LINE,
};
use cotal_tests::nats::client::{ClientError, JwtAuth, NatsClient};
use cotal_tests::nats::wall_clock;
use cotal_tests::nats::{check_config, ConfiguredServer};
use nkeys::{KeyPair, KeyPairType};
use serde_json::Value;

const AUTH_VIOLATION: &str = "Authorization Violation";

fn trust_root() -> TrustRoot {
    let entropy: [u8; ProvisionSeeds::ENTROPY_BYTES] =
        std::array::from_fn(|i| (i * 31 % 253) as u8 ^ (i / 32) as u8);
    provision(
        &SpaceName::parse("main").unwrap(),
        IdpPin::from_url("https://idp.example.com").unwrap(),
        &ProvisionSeeds::from_entropy(&entropy),
        wall_clock(),
    )
    .unwrap()
}

fn creds_auth(text: &str) -> (String, KeyPair) {
    let creds = jwt::parse_creds(text).unwrap();
    (creds.jwt, KeyPair::from_seed(&creds.seed).unwrap())
}

/// A data-account user signed by `signer` with `permissions`, valid for a minute.
fn data_user(root: &TrustRoot, signer: &KeyPair, permissions: Permissions) -> (String, KeyPair) {
    let user = KeyPair::new_user();
    let now = wall_clock();
    let token = jwt::user_jwt(
        signer,
        root.daemon.data_account(),
        &user.public_key(),
        "app",
        &UserNats {
            permissions,
            ..UserNats::default()
        },
        Validity {
            issued_at: now,
            expires_at: Some(UnixSeconds(now.0 + 60)),
        },
    )
    .unwrap();
    (token, user)
}

fn connect(server: &ConfiguredServer, name: &str, auth: &(String, KeyPair)) -> NatsClient {
    NatsClient::connect(
        server.port(),
        name,
        Some(JwtAuth {
            jwt: &auth.0,
            key: &auth.1,
        }),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}\nserver log:\n{}", server.log_tail()))
}

fn refused(server: &ConfiguredServer, name: &str, auth: Option<&(String, KeyPair)>) -> String {
    let outcome = NatsClient::connect(
        server.port(),
        name,
        auth.map(|a| JwtAuth {
            jwt: &a.0,
            key: &a.1,
        }),
    );
    match outcome {
        Err(ClientError::Refused(e)) => e,
        other => panic!(
            "{name}: expected a refusal, got {:?}\nserver log:\n{}",
            other.map(|_| "connected"),
            server.log_tail()
        ),
    }
}

#[test]
fn the_broker_config_boots_and_the_server_enforces_the_trust_root() {
    let root = trust_root();
    // The store dir may hold spaces, quotes and backslashes: the config quotes it.
    let odd = |store: &std::path::Path| store.join("sp ace \"q\" \\b $x");

    let probe = broker_config(&root.broker, "127.0.0.1:4222", "/tmp/sp ace \"q\" \\b $x").unwrap();
    check_config(&probe).unwrap();

    let server = ConfiguredServer::start(|listen, store| {
        broker_config(&root.broker, listen, &odd(store).to_string_lossy()).unwrap()
    })
    .unwrap();
    assert!(
        server
            .dir()
            .join("store")
            .join("sp ace \"q\" \\b $x")
            .is_dir(),
        "JetStream did not use the quoted store dir\n{}",
        server.log_tail()
    );

    // The callout service lands in the callout account and may take the auth requests.
    let service = creds_auth(root.daemon.callout_creds());
    let mut callout = connect(&server, "callout", &service);
    callout
        .subscribe(AUTH_REQUEST_SUBJECT, Some("auth"))
        .unwrap();

    // A data-account user minted with the data signing key: JetStream answers.
    let all = Permissions {
        publish: Permission {
            allow: vec![">".into()],
            deny: vec![],
        },
        subscribe: Permission {
            allow: vec![">".into()],
            deny: vec![],
        },
        response: None,
    };
    let app = data_user(&root, root.daemon.data_signing_key(), all.clone());
    let mut client = connect(&server, "app", &app);
    let sid = client.subscribe("_INBOX.js", None).unwrap();
    client
        .publish("$JS.API.INFO", Some("_INBOX.js"), b"")
        .unwrap();
    let msg = client.next_msg(Duration::from_secs(5)).unwrap();
    assert_eq!(msg.sid, sid);
    let info: Value = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(
        info["type"], "io.nats.jetstream.api.v1.account_info_response",
        "{info}"
    );
    assert!(info.get("error").is_none(), "JetStream is off: {info}");

    // A user JWT at the 16 KiB mint bound connects under the config's max_control_line.
    let subjects = |n: usize| Permissions {
        publish: Permission {
            allow: (0..n).map(|i| format!("cotal.main.pad.{i:05}")).collect(),
            deny: vec![],
        },
        ..Permissions::default()
    };
    let signer = root.daemon.data_signing_key();
    let user = KeyPair::new_user();
    let fits = |n: usize| {
        jwt::user_jwt(
            signer,
            root.daemon.data_account(),
            &user.public_key(),
            "app",
            &UserNats {
                permissions: subjects(n),
                ..UserNats::default()
            },
            Validity {
                issued_at: wall_clock(),
                expires_at: Some(UnixSeconds(wall_clock().0 + 60)),
            },
        )
        .is_ok()
    };
    let n = (1..2000).take_while(|&n| fits(n)).count();
    let big = data_user(&root, signer, subjects(n));
    assert!(big.0.len() > MAX_JWT_BYTES - 64, "{}", big.0.len());
    // The harness client's CONNECT: its fixed fields, the JWT and the 86-char signature.
    let connect_len = r#"{"verbose":false,"pedantic":false,"tls_required":false,"name":"big","lang":"rust-raw","version":"0","protocol":1,"echo":true,"jwt":"","sig":""}"#.len()
        + big.0.len()
        + 86;
    eprintln!(
        "user JWT {} bytes, CONNECT {connect_len} bytes, max_control_line {MAX_CONTROL_LINE}; \
         sentinel JWT {} bytes",
        big.0.len(),
        jwt::parse_creds(root.daemon.sentinel_creds())
            .unwrap()
            .jwt
            .len()
    );
    assert!(connect_len > 4096 && connect_len < MAX_CONTROL_LINE);
    connect(&server, "big", &big);

    // No credentials, and a user of an account the operator never signed.
    assert_eq!(refused(&server, "anonymous", None), AUTH_VIOLATION);
    let stranger = KeyPair::new_from_raw(KeyPairType::Account, [99; 32]).unwrap();
    let foreign = {
        let user = KeyPair::new_user();
        let now = wall_clock();
        let token = jwt::user_jwt(
            &stranger,
            &stranger.public_key(),
            &user.public_key(),
            "stranger",
            &UserNats::default(),
            Validity {
                issued_at: now,
                expires_at: Some(UnixSeconds(now.0 + 60)),
            },
        )
        .unwrap();
        (token, user)
    };
    assert_eq!(refused(&server, "stranger", Some(&foreign)), AUTH_VIOLATION);

    // The sentinel is not an auth user: its connect goes to the callout, which the service
    // here receives but never answers, so the server refuses it at the auth timeout (2 s).
    let sentinel = creds_auth(root.daemon.sentinel_creds());
    let started = Instant::now();
    assert_eq!(
        refused(&server, "sentinel", Some(&sentinel)),
        AUTH_VIOLATION
    );
    let waited = started.elapsed();
    let request = callout.next_msg(Duration::from_secs(1)).unwrap();
    assert_eq!(request.subject, AUTH_REQUEST_SUBJECT);
    assert!(
        request.payload.starts_with(b"xkv1"),
        "the request is not sealed"
    );
    assert!(
        waited >= Duration::from_millis(1900),
        "refused after {waited:?}, before the callout timed out"
    );
}
