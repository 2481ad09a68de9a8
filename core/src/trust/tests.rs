use serde_json::{json, Value};

use super::*;
use crate::jwt::{ClaimType, Nats, MAX_JWT_BYTES};

const NOW: UnixSeconds = UnixSeconds(1_700_000_000);
const IDP: &str = "https://idp.example.com/realm/";

fn space() -> SpaceName {
    SpaceName::parse("main").unwrap()
}

fn seeds() -> ProvisionSeeds {
    let entropy: [u8; ProvisionSeeds::ENTROPY_BYTES] =
        std::array::from_fn(|i| (i * 7 % 251) as u8 ^ (i / 32) as u8);
    ProvisionSeeds::from_entropy(&entropy)
}

fn root() -> TrustRoot {
    provision(&space(), IdpPin::from_url(IDP).unwrap(), &seeds(), NOW).unwrap()
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn edit(bytes: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v = json_of(bytes);
    f(&mut v);
    v.to_string().into_bytes()
}

fn message<T: std::fmt::Debug>(r: Result<T, EpError>) -> String {
    r.unwrap_err().message
}

#[test]
fn provision_is_deterministic_and_keys_are_distinct() {
    let (a, b) = (root(), root());
    assert_eq!(a, b);
    assert_eq!(a.broker.to_bytes(), b.broker.to_bytes());
    let other = provision(
        &space(),
        IdpPin::from_url(IDP).unwrap(),
        &ProvisionSeeds::from_entropy(&[9; ProvisionSeeds::ENTROPY_BYTES]),
        NOW,
    )
    .unwrap();
    assert_ne!(a.broker.data_account(), other.broker.data_account());
    let publics = [
        a.operator.operator().public_key(),
        a.operator.operator_signing().public_key(),
        a.operator.system_account().public_key(),
        a.operator.data_account().public_key(),
        a.daemon.callout_account(),
    ];
    let unique: std::collections::BTreeSet<_> = publics.iter().collect();
    assert_eq!(unique.len(), publics.len());
    let shown = format!("{a:?}");
    let op_seed = a.operator.operator().key_pair().seed().unwrap();
    let user_seeds = [a.daemon.callout_creds(), a.daemon.sentinel_creds()]
        .map(|c| jwt::parse_creds(c).unwrap().seed);
    assert!(!shown.contains(&op_seed), "Debug leaks a seed");
    assert!(
        user_seeds.iter().all(|s| !shown.contains(s.as_str())),
        "Debug leaks creds"
    );
    assert_eq!(format!("{:?}", seeds()), "ProvisionSeeds(<redacted>)");
}

#[test]
fn provisioned_jwts_have_the_operator_mode_layout() {
    let r = root();
    let op = jwt::decode(r.broker.operator_jwt()).unwrap();
    assert_eq!((op.iss.as_str(), op.exp), (op.sub.as_str(), None));
    let Nats::Operator(o) = &op.nats else {
        panic!()
    };
    assert_eq!(o.signing_keys, [r.operator.operator_signing().public_key()]);
    assert_eq!(
        o.system_account.as_deref(),
        Some(r.broker.system_account().public_key.as_str())
    );
    let account = |a: &AccountJwt| {
        let c = jwt::verify(
            &a.jwt,
            ClaimType::Account,
            r.operator.operator_signing().public_key(),
            NOW,
        )
        .unwrap();
        assert_eq!((c.sub.as_str(), c.exp), (a.public_key.as_str(), None));
        let Nats::Account(n) = c.nats else { panic!() };
        (c.name, n)
    };
    let (name, sys) = account(r.broker.system_account());
    assert_eq!((name.as_str(), sys.authorization), ("SYS", None));
    let (name, data) = account(r.broker.data_account());
    assert_eq!(name, "main");
    assert_eq!(data.limits.jetstream, JetStreamLimits::UNLIMITED);
    assert_eq!(data.limits.nats, crate::profiles::HOST_LIMITS);
    assert_eq!(data.signing_keys.len(), 1);
    let (name, callout) = account(r.broker.callout_account());
    assert_eq!(name, "AUTH_main");
    assert_eq!(callout.limits.jetstream, JetStreamLimits::default());
    let auth = callout.authorization.unwrap();
    assert_eq!(auth.allowed_accounts, [r.daemon.data_account()]);
    assert_eq!(
        auth.xkey.as_deref(),
        Some(r.daemon.callout_xkey().public_key().as_str())
    );

    let user = |text: &str| {
        let creds = jwt::parse_creds(text).unwrap();
        let signer = r.daemon.callout_signing_key().public_key();
        jwt::verify(&creds.jwt, ClaimType::User, &signer, NOW).unwrap()
    };
    let service = user(r.daemon.callout_creds());
    assert_eq!(auth.auth_users, std::slice::from_ref(&service.sub));
    assert_eq!(service.user_account(), Some(r.daemon.callout_account()));
    assert_eq!(service.exp, None);
    let p = &service.user().unwrap().permissions;
    assert_eq!(p.subscribe.allow, [AUTH_REQUEST_SUBJECT]);
    assert_eq!(
        (p.publish.allow.as_slice(), p.publish.deny.as_slice()),
        (
            &[">".to_owned()][..],
            &[AUTH_REQUEST_SUBJECT.to_owned()][..]
        )
    );
    let sentinel = user(r.daemon.sentinel_creds());
    assert_eq!(sentinel.exp, None);
    assert_eq!(sentinel.name, "sentinel");
    let p = &sentinel.user().unwrap().permissions;
    assert_eq!(
        (p.publish.deny.as_slice(), p.subscribe.deny.as_slice()),
        (&[">".to_owned()][..], &[">".to_owned()][..])
    );
    assert!(p.publish.allow.is_empty() && p.subscribe.allow.is_empty());
    // Both users the trust root mints carry finite per-connection limits.
    for user in [&service, &sentinel] {
        assert_eq!(user.user().unwrap().limits, crate::profiles::HOST_LIMITS);
    }
}

#[test]
fn issuer_kid_is_the_rfc_8037_thumbprint() {
    // RFC 8037 A.1–A.3: this RFC 8032 seed's public key and JWK thumbprint.
    let d: [u8; 32] = data_encoding::HEXLOWER
        .decode(b"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
        .unwrap()
        .try_into()
        .unwrap();
    let key = IssuerKey::from_seed(d).unwrap();
    assert_eq!(key.x(), "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
    assert_eq!(key.kid(), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
}

#[test]
fn every_file_round_trips_and_has_its_reference_members() {
    let r = root();
    let s = space();
    let op = r.operator.to_bytes();
    assert_eq!(
        OperatorMaterial::parse(&op, &s, "operator.json").unwrap(),
        r.operator
    );
    let br = r.broker.to_bytes();
    assert_eq!(
        BrokerMaterial::parse(&br, &s, "broker.json").unwrap(),
        r.broker
    );
    for (name, bytes) in r.daemon.files() {
        assert!(bytes.ends_with(b"\n"), "{name}");
        assert_eq!(json_of(&bytes)["ver"], 1, "{name}");
    }
    let [(_, keys), (_, callout), (_, issuer), (_, secret), (_, system), (_, idp)] =
        r.daemon.files();
    let daemon = DaemonMaterial::assemble(
        &s,
        ServiceKeys::parse(&keys, "service-keys.json").unwrap(),
        CalloutMaterial::parse(&callout, &s, "callout.json").unwrap(),
        IssuerKeys::parse(&issuer, &s, "issuer.json").unwrap(),
        OwnerSecret::parse(&secret, "owner-secret.json").unwrap(),
        SystemUser::parse(&system, "system-user.json").unwrap(),
        IdpPin::parse(&idp, "idp.json").unwrap(),
    )
    .unwrap();
    assert_eq!(daemon, r.daemon);
    daemon.check_broker(&r.broker).unwrap();

    let member_names = |bytes: &[u8], path: &[&str]| {
        let mut v = json_of(bytes);
        for p in path {
            v = v[p].take();
        }
        v.as_object().unwrap().keys().cloned().collect::<Vec<_>>()
    };
    assert_eq!(member_names(&keys, &[]), ["ver", "dataAccount"]);
    assert_eq!(
        member_names(&keys, &["dataAccount"]),
        ["pub", "signingSeed"]
    );
    assert_eq!(
        member_names(&callout, &["callout"]),
        ["account", "calloutCreds", "sentinelCreds", "xkey"]
    );
    assert_eq!(
        member_names(&callout, &["callout", "account"]),
        ["pub", "seed", "signingSeed", "signingPub", "jwt"]
    );
    assert_eq!(
        member_names(&issuer, &[]),
        ["ver", "issuer", "activeKid", "keys"]
    );
    assert_eq!(json_of(&issuer)["issuer"], "urn:cotal:auth:main");
    assert_eq!(
        json_of(&issuer)["keys"][0]["privateJwk"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["kty", "crv", "x", "d"]
    );
    assert_eq!(json_of(&secret)["secretB64"].as_str().unwrap().len(), 44);
    assert_eq!(
        json_of(&idp),
        json!({"ver": 1, "url": "https://idp.example.com/realm",
               "issuer": "https://idp.example.com", "audience": "https://idp.example.com",
               "jwksUri": "https://idp.example.com/realm/jwks"})
    );
    assert_eq!(
        member_names(&op, &[]),
        ["ver", "space", "operator", "systemAccount", "dataAccount"]
    );
    assert_eq!(
        member_names(&br, &[]),
        [
            "ver",
            "space",
            "operatorJwt",
            "systemAccount",
            "dataAccount",
            "calloutAccount"
        ]
    );
}

#[test]
fn files_refuse_unknown_versions_members_and_foreign_spaces() {
    let r = root();
    let s = space();
    let other = SpaceName::parse("other").unwrap();
    let op = r.operator.to_bytes();
    let v2 = edit(&op, |v| v["ver"] = json!(2));
    assert_eq!(
        message(OperatorMaterial::parse(&v2, &s, "operator/operator.json")),
        "operator/operator.json has unknown version 2; this build reads version 1"
    );
    let extra = edit(&op, |v| v["operator"]["extra"] = json!(1));
    assert_eq!(
        message(OperatorMaterial::parse(&extra, &s, "operator.json")),
        "operator.json carries unknown member operator.extra; its schema is closed"
    );
    assert!(
        message(OperatorMaterial::parse(&op, &other, "operator.json"))
            .starts_with("operator.json belongs to a different space (main), not other")
    );
    assert!(message(BrokerMaterial::parse(
        &r.broker.to_bytes(),
        &other,
        "broker.json"
    ))
    .contains("belongs to a different space"));
    let [_, (_, callout), (_, issuer), (_, secret), _, _] = r.daemon.files();
    assert!(
        message(CalloutMaterial::parse(&callout, &other, "callout.json"))
            .starts_with("callout.json belongs to a different space (AUTH_main), not other")
    );
    assert!(message(IssuerKeys::parse(&issuer, &other, "issuer.json"))
        .starts_with("issuer.json belongs to a different space (urn:cotal:auth:main)"));
    assert!(
        message(OwnerSecret::parse(b"{not json", "owner-secret.json"))
            .starts_with("owner-secret.json is not valid JSON")
    );
    let unknown = edit(&secret, |v| v["ver"] = json!(7));
    assert!(message(OwnerSecret::parse(&unknown, "s.json")).contains("unknown version 7"));
}

#[test]
fn files_refuse_wrong_keys_bad_kids_and_short_secrets() {
    let r = root();
    let s = space();
    let op = r.operator.to_bytes();
    // An account seed where the operator's belongs.
    let wrong_kind = edit(&op, |v| {
        v["operator"]["seed"] = v["systemAccount"]["seed"].clone();
    });
    assert_eq!(
        message(OperatorMaterial::parse(&wrong_kind, &s, "operator.json")),
        "operator.json member operator.seed is not a Operator nkey seed"
    );
    let swapped = edit(&op, |v| {
        v["systemAccount"]["seed"] = v["dataAccount"]["seed"].clone();
    });
    let m = message(OperatorMaterial::parse(&swapped, &s, "operator.json"));
    assert!(
        m.contains("systemAccount.seed does not belong to systemAccount.pub"),
        "{m}"
    );
    let seed = r.operator.system_account().key_pair().seed().unwrap();
    assert!(
        !m.contains(&seed) && !m.contains(&r.operator.data_account().key_pair().seed().unwrap())
    );

    let [(_, keys), (_, callout), (_, issuer), (_, secret), (_, system), _] = r.daemon.files();
    let bad_kid = edit(&issuer, |v| v["keys"][0]["kid"] = json!("AAAA"));
    let m = message(IssuerKeys::parse(&bad_kid, &s, "issuer.json"));
    assert!(
        m.starts_with("issuer.json key 0 has kid AAAA, not its RFC 7638 thumbprint"),
        "{m}"
    );
    let bad_x = edit(&issuer, |v| {
        v["keys"][0]["privateJwk"]["x"] = json!("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
    });
    assert!(message(IssuerKeys::parse(&bad_x, &s, "i")).contains("not its d's public key"));
    let no_active = edit(&issuer, |v| v["activeKid"] = json!("nope"));
    assert!(message(IssuerKeys::parse(&no_active, &s, "i")).contains("none of its keys"));

    let short = edit(&secret, |v| {
        v["secretB64"] = json!(base64::engine::general_purpose::STANDARD.encode([1u8; 31]))
    });
    assert_eq!(
        message(OwnerSecret::parse(&short, "owner-secret.json")),
        "owner-secret.json holds a 31-byte owner secret, not 32 bytes"
    );
    let unpadded = edit(&secret, |v| {
        v["secretB64"] = json!(v["secretB64"].as_str().unwrap().trim_end_matches('='))
    });
    assert!(message(OwnerSecret::parse(&unpadded, "o")).contains("padded standard base64"));

    let user_seed = edit(&keys, |v| {
        v["dataAccount"]["signingSeed"] = json!(KeyPair::new_from_raw(KeyPairType::User, [3; 32])
            .unwrap()
            .seed()
            .unwrap())
    });
    assert!(message(ServiceKeys::parse(&user_seed, "k")).contains("is not a Account nkey seed"));
    let xkey = edit(&callout, |v| {
        v["callout"]["xkey"]["pub"] = json!(XKey::new_from_raw([4; 32]).public_key())
    });
    assert!(message(CalloutMaterial::parse(&xkey, &s, "c"))
        .contains("callout.xkey.seed does not belong to callout.xkey.pub"));
    let swapped_creds = edit(&callout, |v| {
        let c = &mut v["callout"];
        let sentinel = c["sentinelCreds"].clone();
        c["sentinelCreds"] = c["calloutCreds"].clone();
        c["calloutCreds"] = sentinel;
    });
    assert!(message(CalloutMaterial::parse(&swapped_creds, &s, "c"))
        .contains("does not list the calloutCreds user as an auth user"));

    // Files from two trust roots do not assemble.
    let other = provision(
        &s,
        IdpPin::from_url(IDP).unwrap(),
        &ProvisionSeeds::from_entropy(&[5; ProvisionSeeds::ENTROPY_BYTES]),
        NOW,
    )
    .unwrap();
    let [(_, other_keys), ..] = other.daemon.files();
    let m = message(DaemonMaterial::assemble(
        &s,
        ServiceKeys::parse(&other_keys, "k").unwrap(),
        CalloutMaterial::parse(&callout, &s, "c").unwrap(),
        IssuerKeys::parse(&issuer, &s, "i").unwrap(),
        OwnerSecret::parse(&secret, "o").unwrap(),
        SystemUser::parse(&system, "s").unwrap(),
        IdpPin::from_url(IDP).unwrap(),
    ));
    assert!(m.contains("come from different trust roots"), "{m}");

    // The system user: signed by the system account itself, exactly its grant, no expiry.
    let parsed = SystemUser::parse(&system, "s").unwrap();
    assert_eq!(parsed.account(), r.operator.system_account().public_key());
    let members: Vec<String> = json_of(&system)["systemUser"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(members, ["account", "creds"]);
    let foreign = edit(&system, |v| {
        v["systemUser"]["account"] = json!(other.operator.system_account().public_key())
    });
    assert!(message(SystemUser::parse(&foreign, "s")).contains("does not verify"));
    let user = KeyPair::new_from_raw(KeyPairType::User, [6; 32]).unwrap();
    let wider = jwt::user_creds(
        r.operator.system_account().key_pair(),
        r.operator.system_account().public_key(),
        &user,
        crate::liveness::SYSTEM_USER_NAME,
        &UserNats::default(),
        Validity {
            issued_at: NOW,
            expires_at: None,
        },
    )
    .unwrap();
    let wider = edit(&system, |v| v["systemUser"]["creds"] = json!(wider.text()));
    assert!(message(SystemUser::parse(&wider, "s")).contains("exactly its grant"));
    let upgraded = system_user_for(&r.operator, &[7; 32], NOW).unwrap();
    assert_eq!(
        SystemUser::parse(&upgraded.to_bytes(), "s").unwrap(),
        upgraded
    );
    assert!(message(r.daemon.check_broker(&other.broker)).contains("different trust roots"));
}

#[test]
fn broker_file_refuses_tampered_jwts() {
    let r = root();
    let s = space();
    let br = r.broker.to_bytes();
    let swapped = edit(&br, |v| {
        v["dataAccount"]["jwt"] = v["calloutAccount"]["jwt"].clone();
    });
    assert!(message(BrokerMaterial::parse(&swapped, &s, "broker.json"))
        .contains("dataAccount.jwt is not for dataAccount.pub"));
    let foreign = provision(
        &s,
        IdpPin::from_url(IDP).unwrap(),
        &ProvisionSeeds::from_entropy(&[5; ProvisionSeeds::ENTROPY_BYTES]),
        NOW,
    )
    .unwrap();
    let mixed = edit(&br, |v| {
        v["dataAccount"]["jwt"] = json!(foreign.broker.data_account().jwt);
        v["dataAccount"]["pub"] = json!(foreign.broker.data_account().public_key);
    });
    assert!(message(BrokerMaterial::parse(&mixed, &s, "broker.json"))
        .contains("is not signed by the operator"));
}

#[test]
fn idp_pins_normalize_and_refuse() {
    let pin = IdpPin::from_url("HTTPS://IdP.Example:443/").unwrap();
    assert_eq!(
        (pin.url(), pin.issuer(), pin.audience(), pin.jwks_uri()),
        (
            "HTTPS://IdP.Example:443",
            "https://idp.example",
            "https://idp.example",
            "HTTPS://IdP.Example:443/jwks"
        )
    );
    let pin = IdpPin::from_url("http://127.0.0.9:8080/a//").unwrap();
    assert_eq!(pin.issuer(), "http://127.0.0.9:8080");
    assert_eq!(pin.jwks_uri(), "http://127.0.0.9:8080/a//jwks");
    assert_eq!(
        IdpPin::from_url("http://[::1]:9/x").unwrap().issuer(),
        "http://[::1]:9"
    );
    for (url, why) in [
        (
            "http://idp.example/",
            "uses plain http on idp.example, which is not a loopback address literal",
        ),
        ("http://localhost:8080", "uses plain http on localhost"),
        ("http://10.0.0.1", "uses plain http on 10.0.0.1"),
        ("https://idp.example/?a=b", "must not carry a query"),
        ("https://idp.example/#frag", "must not carry a fragment"),
        (
            "https://user:hunter2@idp.example/",
            "must not carry userinfo",
        ),
        ("idp.example", "is not an absolute URL"),
        ("", "is empty"),
        ("ftp://idp.example", "must use https"),
        ("https://idp example", "whitespace"),
        ("https://:443/", "no valid host"),
        ("https://idp.example:0", "port"),
        ("https://idp.example:99999", "port"),
    ] {
        let m = message(IdpPin::from_url(url));
        assert!(
            m.starts_with("the IdP URL ") && m.contains(why),
            "{url}: {m}"
        );
        assert!(!m.contains("hunter2"), "{m}");
    }
    let idp = IdpPin::from_url(IDP).unwrap().to_bytes();
    let moved = edit(&idp, |v| v["issuer"] = json!("https://evil.example"));
    assert!(message(IdpPin::parse(&moved, "idp.json"))
        .starts_with("idp.json member issuer is not the one its url derives"));
}

#[test]
fn broker_config_quotes_paths_and_carries_no_callout_block() {
    let r = root();
    let conf = broker_config(&r.broker, "127.0.0.1:4222", "/tmp/a \"b\" \\c").unwrap();
    assert!(conf.contains(r#"store_dir: "/tmp/a \"b\" \\c""#), "{conf}");
    assert!(conf.contains("listen: \"127.0.0.1:4222\"\n"));
    assert!(conf.contains("resolver: MEMORY\n"));
    assert!(conf.contains(&format!("max_control_line: {MAX_CONTROL_LINE}\n")));
    assert!(!conf.contains("auth_callout") && !conf.contains("authorization"));
    for a in [
        r.broker.system_account(),
        r.broker.data_account(),
        r.broker.callout_account(),
    ] {
        assert!(conf.contains(&format!("  \"{}\": \"{}\"\n", a.public_key, a.jwt)));
    }
    assert!(broker_config(&r.broker, "127.0.0.1:1", "/tmp/x\ny").is_err());
}

/// The measurement behind [`MAX_CONTROL_LINE`]: the largest CONNECT the plane's credentials
/// make is a user JWT at the mint bound presented directly.
#[test]
fn max_control_line_covers_the_largest_connect() {
    let r = root();
    let signer = r.daemon.data_signing_key();
    let user = KeyPair::new_from_raw(KeyPairType::User, [7; 32]).unwrap();
    let mint = |n: usize| {
        let nats = UserNats {
            permissions: Permissions {
                publish: Permission {
                    allow: (0..n).map(|i| format!("cotal.main.pad.{i:05}")).collect(),
                    deny: Vec::new(),
                },
                ..Permissions::default()
            },
            ..UserNats::default()
        };
        let validity = Validity {
            issued_at: NOW,
            expires_at: Some(UnixSeconds(NOW.0 + 3600)),
        };
        jwt::user_jwt(
            signer,
            r.daemon.data_account(),
            &user.public_key(),
            "big",
            &nats,
            validity,
        )
    };
    let n = (1..2000).map_while(|n| mint(n).ok()).count();
    let largest = mint(n).unwrap().len();
    let sentinel = jwt::parse_creds(r.daemon.sentinel_creds())
        .unwrap()
        .jwt
        .len();
    // nats-py's CONNECT (callout-operator-mode §8): 274 + jwt + token, + 12 + name.
    let name = 64;
    let direct = 274 + largest + 12 + name;
    eprintln!(
        "largest user JWT {largest} bytes (bound {MAX_JWT_BYTES}), its CONNECT ~{direct}; \
         sentinel JWT {sentinel} bytes, room for a {}-byte bearer",
        MAX_CONTROL_LINE - (274 + sentinel + 12 + name)
    );
    assert!(largest > MAX_JWT_BYTES - 64 && largest <= MAX_JWT_BYTES);
    assert!(direct < MAX_CONTROL_LINE / 2 + 1024, "{direct}");
    assert!(sentinel < 1024, "{sentinel}");
}

#[test]
fn broker_config_renders_client_and_route_tls() {
    let r = root();
    let tls = ServerTls {
        cert: "/pki/server.pem".into(),
        key: "/pki/server-key.pem".into(),
        ca: Some("/pki/ca.pem".into()),
        verify: false,
    };
    let serving = Serving {
        tls: Some(tls.clone()),
        cluster: Some(ClusterRoutes {
            name: "c1".into(),
            listen: "127.0.0.1:6222".into(),
            routes: vec!["nats-route://127.0.0.1:6223".into()],
        }),
    };
    let conf = broker_config_with(&r.broker, "127.0.0.1:4222", "/s", &serving).unwrap();
    assert!(
        conf.ends_with(
            "tls {\n  cert_file: \"/pki/server.pem\"\n  key_file: \"/pki/server-key.pem\"\n  \
             ca_file: \"/pki/ca.pem\"\n}\n\
             cluster {\n  name: \"c1\"\n  listen: \"127.0.0.1:6222\"\n  \
             routes: [\"nats-route://127.0.0.1:6223\"]\n  tls {\n    \
             cert_file: \"/pki/server.pem\"\n    key_file: \"/pki/server-key.pem\"\n    \
             ca_file: \"/pki/ca.pem\"\n    verify: true\n  }\n}\n"
        ),
        "{conf}"
    );
    // Plain is what it was: no TLS, no cluster.
    let plain = broker_config(&r.broker, "127.0.0.1:4222", "/s").unwrap();
    assert!(!plain.contains("tls {") && !plain.contains("cluster {"));
    // Routes verify each other, so they need the CA; so does client verification.
    let no_ca = ServerTls { ca: None, ..tls };
    let routed = Serving {
        tls: Some(no_ca.clone()),
        ..serving
    };
    assert!(
        message(broker_config_with(&r.broker, "127.0.0.1:1", "/s", &routed))
            .starts_with("TLS routes need --tlscacert")
    );
    let verify = Serving {
        tls: Some(ServerTls {
            verify: true,
            ..no_ca
        }),
        cluster: None,
    };
    assert!(
        message(broker_config_with(&r.broker, "127.0.0.1:1", "/s", &verify))
            .starts_with("--tlsverify needs --tlscacert")
    );
}
