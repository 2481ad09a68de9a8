//! Live enforcement of the credentials the plane mints, on a real `nats-server` 2.15.1 in
//! operator mode (issue: credentials, "Live enforcement"). The operator, system-account and
//! data-account JWTs are all minted by `cotal_core::jwt` and handed to the server through a
//! memory resolver preload; user JWTs are minted with `jwt::user_jwt` from the permission rows
//! of `cotal_core::profiles` for caller-held user nkeys, exactly as the plane would.
//!
//! What the server is asked to prove, per profile (`endpoint-serve`, `goal-writer`,
//! `run-admitter`): the JWT connects; a publish its grant allows reaches a subscriber; one it
//! does not allow is refused with `Permissions Violation for Publish` and never delivered; a
//! subscribe it does not allow is refused. And at connect: an expired JWT, a JWT from an
//! account outside the preload, a JWT signed by a key foreign to its account, and a JWT
//! presented without its holder's nonce signature are each refused with
//! `Authorization Violation`.
//!
//! Beyond that: every profile builder's JWT connects and every one of its rows is granted by
//! the server (so no row is one the server reads differently or refuses); the serve rows keep
//! F39 (egress pinned to the bound epoch) and F70 (the class rail only queue-qualified); a
//! serve JWT at the 16 KiB mint bound needs `max_control_line` raised above the 4096-byte
//! default; CONNZ shows the minted JWT and the principal tags.
//!
//! The clock: the server checks `exp` against its own wall clock, so the JWT timestamps here
//! are built from the real system clock ([`wall_clock`]) — the one place a test reads it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_core::gate::{NameAuthorityRevision, ProcessEpoch, RegistrationRevision};
use cotal_core::issuance::ServeGrant;
use cotal_core::jwt::{
    self, AccountNats, OperatorNats, UnixSeconds, UserNats, Validity, MAX_JWT_BYTES,
};
use cotal_core::names::{
    admission_bucket, auth_bucket, records_bucket, ActorToken, CommandToken, EndpointName,
    InstanceId, LifecycleUid, OwnerToken, Principal, SpaceName,
};
use cotal_core::profiles::{
    deprovisioner, endpoint_serve, goal_writer, provisioner, registration_executor, remote_manager,
    retirement_requester, run_admitter, run_driver, run_mediator, run_operator, session_ledger,
    Channel, CheckpointToken, ConnId, DeprovisionerBinding, ExecutorWindow, GoalWriterBinding,
    ManagerRole, PoolToken, Profile, ProvisionerBinding, RailCaller, RegistrationExecutorBinding,
    RemoteManagerBinding, RetirementRequesterBinding, RunAdmitterBinding, RunBinding, RunId,
    RunOperatorBinding, RunOperatorScope, ServeBinding, SessionLedgerBinding, StandingTtl,
    TakeoverId,
};
use cotal_tests::nats::client::{ClientError, JwtAuth, NatsClient};
use cotal_tests::nats::wall_clock;
use cotal_tests::nats::{NatsServer, ServerOptions};
use nkeys::KeyPair;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Above the largest CONNECT line a maximal (16 KiB) JWT makes. The user JWT travels in
/// CONNECT, and the server's default `max_control_line` (4096 bytes) already refuses the
/// provisioner (~5 KB) and run-mediator (~3.9 KB plus CONNECT fields) credentials.
const MAX_CONTROL_LINE: usize = 32 * 1024;
/// The server's `-ERR` (and log line) for a protocol line over `max_control_line`.
const MAX_CONTROL_LINE_ERR: &str = "maximum control line exceeded";
/// How long a subscriber waits for a message the server accepted.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);

const SPACE: &str = "prod";
/// `cotal.<space>`.
const P: &str = "cotal.prod";
const ENDPOINT: &str = "com.acme.deploy";
/// The endpoint's subject token.
const E: &str = "com_acme_deploy";
const IID: &str = "0123456789abcdefghijklmnop";
const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
/// A caller triple `<owner>.<actor>.<uid>` as it rides the rails.
const CALLER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.caller.zyxwvutsrqponmlkjihgfedcba";
const RUN: &str = "run-0123456789abcdef";
const OTHER_RUN: &str = "run-fedcba9876543210";

fn space() -> SpaceName {
    SpaceName::parse(SPACE).unwrap()
}

fn principal(actor: &str) -> Principal {
    Principal::new(
        OwnerToken::parse(OWNER).unwrap(),
        ActorToken::parse(actor).unwrap(),
    )
}

/// The serve binding of instance [`IID`] at `epoch`, serving `commands`.
fn serve_binding(epoch: u64, conn: &ConnId, commands: &[String]) -> ServeBinding {
    ServeBinding {
        grant: ServeGrant {
            space: space(),
            endpoint: EndpointName::parse(ENDPOINT).unwrap(),
            instance: InstanceId::parse(IID).unwrap(),
            owner: OwnerToken::parse(OWNER).unwrap(),
            epoch: ProcessEpoch(epoch),
            registration_revision: RegistrationRevision(1),
            name_authority_revision: NameAuthorityRevision(1),
        },
        actor: ActorToken::parse("deployer").unwrap(),
        conn: conn.clone(),
        rail_commands: commands
            .iter()
            .map(|c| CommandToken::parse(c).unwrap())
            .collect(),
        journal_class: false,
        pools: vec![],
        ttl: StandingTtl::DEFAULT,
    }
}

fn serve_at(epoch: u64) -> impl FnOnce(&ConnId) -> Profile {
    move |conn| endpoint_serve(&serve_binding(epoch, conn, &["deploy".to_owned()])).unwrap()
}

/// A credential holder: the user key pair (its seed stays here) and the JWT minted for it.
struct Holder {
    key: KeyPair,
    jwt: String,
}

/// A server in operator mode trusting our operator, with the system and data accounts
/// preloaded; `account` signs the users.
struct Live {
    server: NatsServer,
    account: KeyPair,
    now: UnixSeconds,
}

impl Live {
    fn start() -> Live {
        Live::start_with(Some(MAX_CONTROL_LINE))
    }

    /// `max_control_line: None` leaves the server default (4096 bytes).
    fn start_with(max_control_line: Option<usize>) -> Live {
        let now = wall_clock();
        let forever = Validity {
            issued_at: now,
            expires_at: None,
        };
        let operator = KeyPair::new_operator();
        let system = KeyPair::new_account();
        let account = KeyPair::new_account();
        let operator_jwt = jwt::operator_jwt(
            &operator,
            "cotal-live-operator",
            &OperatorNats {
                system_account: Some(system.public_key()),
                ..OperatorNats::default()
            },
            forever,
        )
        .unwrap();
        let account_jwt = |key: &KeyPair, name: &str| {
            jwt::account_jwt(
                &operator,
                &key.public_key(),
                name,
                &AccountNats::default(),
                forever,
            )
            .unwrap()
        };
        let mut extra_config = format!(
            "operator: \"{operator_jwt}\"\n\
             system_account: \"{sys}\"\n\
             resolver: MEMORY\n\
             resolver_preload: {{\n  \"{sys}\": \"{sys_jwt}\"\n  \"{acct}\": \"{acct_jwt}\"\n}}\n",
            sys = system.public_key(),
            sys_jwt = account_jwt(&system, "SYS"),
            acct = account.public_key(),
            acct_jwt = account_jwt(&account, "cotal"),
        );
        if let Some(bytes) = max_control_line {
            extra_config.push_str(&format!("max_control_line: {bytes}\n"));
        }
        let server = NatsServer::start(ServerOptions {
            binary: None,
            extra_config,
        })
        .unwrap();
        Live {
            server,
            account,
            now,
        }
    }

    /// Mints a user JWT for `key` in the data account, signed by `signer` (the account key
    /// unless a test says otherwise).
    fn mint(
        &self,
        signer: &KeyPair,
        account: &str,
        key: &KeyPair,
        name: &str,
        nats: &UserNats,
        validity: Validity,
    ) -> String {
        jwt::user_jwt(signer, account, &key.public_key(), name, nats, validity).unwrap()
    }

    /// A holder of `profile` (built for the holder's own connection id, its public nkey),
    /// valid from now for the profile's lifetime.
    fn holder(&self, profile: impl FnOnce(&ConnId) -> Profile) -> Holder {
        let key = KeyPair::new_user();
        let profile = profile(&ConnId::parse(&key.public_key()).unwrap());
        let validity = Validity {
            issued_at: self.now,
            expires_at: Some(UnixSeconds(self.now.0 + profile.ttl_seconds)),
        };
        let jwt = self.mint(
            &self.account,
            &self.account.public_key(),
            &key,
            profile.name,
            &profile_nats(&profile),
            validity,
        );
        Holder { key, jwt }
    }

    /// A user without permission rows (the server then allows everything): the far end of
    /// each check.
    fn unrestricted(&self) -> Holder {
        let key = KeyPair::new_user();
        let validity = Validity {
            issued_at: self.now,
            expires_at: Some(UnixSeconds(self.now.0 + 600)),
        };
        let jwt = self.mint(
            &self.account,
            &self.account.public_key(),
            &key,
            "observer",
            &UserNats::default(),
            validity,
        );
        Holder { key, jwt }
    }

    /// An unrestricted connection subscribed to every subject of the account.
    fn observer(&self) -> NatsClient {
        let mut observer = self.connect(&self.unrestricted(), "observer");
        self.subscribed(&mut observer, ">", None);
        observer
    }

    fn log(&self) -> String {
        self.server.log_tail()
    }

    /// Whether the server log shows `text` within a short wait (it is written asynchronously).
    fn log_shows(&self, text: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.log().contains(text) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    fn try_connect(&self, holder: &Holder, label: &str) -> Result<NatsClient, ClientError> {
        NatsClient::connect(
            self.server.port(),
            label,
            Some(JwtAuth {
                jwt: &holder.jwt,
                key: &holder.key,
            }),
        )
    }

    fn connect(&self, holder: &Holder, label: &str) -> NatsClient {
        self.try_connect(holder, label).unwrap_or_else(|e| {
            panic!(
                "{label}: a valid minted JWT ({} bytes) must connect, but: {e}\n\
                 server log tail:\n{}",
                holder.jwt.len(),
                self.log()
            )
        })
    }

    /// Asserts the connection is refused with `Authorization Violation`.
    fn connect_refused(&self, holder: &Holder, label: &str) {
        match self.try_connect(holder, label) {
            Err(ClientError::Refused(e)) if e == "Authorization Violation" => {}
            Err(e) => panic!(
                "{label}: expected -ERR 'Authorization Violation' at connect, got: {e}\n\
                 server log tail:\n{}",
                self.log()
            ),
            Ok(_) => panic!(
                "{label}: the server accepted a JWT it must refuse\nserver log tail:\n{}",
                self.log()
            ),
        }
    }

    fn published(&self, client: &mut NatsClient, subject: &str) {
        if let Err(e) = client.publish(subject, None, subject.as_bytes()) {
            panic!(
                "publish to {subject:?} is granted but: {e}\nserver log tail:\n{}",
                self.log()
            );
        }
    }

    fn publish_refused(&self, client: &mut NatsClient, subject: &str) {
        let want = format!("Permissions Violation for Publish to \"{subject}\"");
        match client.publish(subject, None, subject.as_bytes()) {
            Err(ClientError::Refused(e)) if e == want => {}
            other => panic!(
                "publish to {subject:?} is not granted: expected -ERR '{want}', got {other:?}\n\
                 server log tail:\n{}",
                self.log()
            ),
        }
    }

    fn subscribed(&self, client: &mut NatsClient, subject: &str, queue: Option<&str>) -> u64 {
        client.subscribe(subject, queue).unwrap_or_else(|e| {
            panic!(
                "subscribe to {subject:?} (queue {queue:?}) is granted but: {e}\n\
                 server log tail:\n{}",
                self.log()
            )
        })
    }

    fn subscribe_refused(&self, client: &mut NatsClient, subject: &str, queue: Option<&str>) {
        let mut want = format!("Permissions Violation for Subscription to \"{subject}\"");
        if let Some(q) = queue {
            want.push_str(&format!(" using queue \"{q}\""));
        }
        match client.subscribe(subject, queue) {
            Err(ClientError::Refused(e)) if e == want => {}
            other => panic!(
                "subscribe to {subject:?} (queue {queue:?}) is not granted: expected \
                 -ERR '{want}', got {other:?}\nserver log tail:\n{}",
                self.log()
            ),
        }
    }

    /// Asserts `client` receives exactly these subjects next, in order. A refused publish
    /// made between two granted ones would show up here out of place.
    fn delivered(&self, client: &mut NatsClient, subjects: &[String]) {
        for want in subjects {
            match client.next_msg(DELIVERY_TIMEOUT) {
                Ok(m) if &m.subject == want => assert_eq!(m.payload, want.as_bytes()),
                other => panic!(
                    "expected delivery of {want:?}, got {other:?}\nserver log tail:\n{}",
                    self.log()
                ),
            }
        }
    }
}

fn profile_nats(profile: &Profile) -> UserNats {
    UserNats {
        permissions: profile.permissions.clone(),
        tags: profile.tags.clone(),
        ..UserNats::default()
    }
}

// ---- endpoint-serve ---------------------------------------------------------------------------

/// Every egress row of the serve profile, instantiated at `epoch`.
fn serve_egress(epoch: u64) -> Vec<String> {
    vec![
        format!("{P}.ep.reply.{E}.{IID}.{epoch}.{CALLER}.n1"),
        format!("{P}.ep.v1.reply.{E}.{IID}.{epoch}.g1.{CALLER}.n1"),
        format!("{P}.epe.{E}.{IID}.{epoch}.ready"),
        format!("{P}.ept.{E}.{IID}.{epoch}.t1.schedule"),
        format!("{P}.epr.{E}.{IID}.{epoch}.spec.put"),
    ]
}

#[test]
fn f39_serve_jwt_at_epoch_3_publishes_its_rows_and_is_refused_at_epochs_2_and_4() {
    let live = Live::start();
    let mut observer = live.observer();
    let serve = live.holder(serve_at(3));
    let mut c = live.connect(&serve, "endpoint-serve@3");

    for ((stale, newer), granted) in serve_egress(2)
        .iter()
        .zip(&serve_egress(4))
        .zip(&serve_egress(3))
    {
        live.publish_refused(&mut c, stale);
        live.publish_refused(&mut c, newer);
        live.published(&mut c, granted);
    }
    // Timer rows: only `.schedule` is publishable, never the plane's `.armed`/`.fire`.
    live.publish_refused(&mut c, &format!("{P}.ept.{E}.{IID}.3.t1.fire"));
    live.publish_refused(&mut c, &format!("{P}.ept.{E}.{IID}.3.t1.armed"));
    // Another instance's reply row, same epoch.
    live.publish_refused(
        &mut c,
        &format!("{P}.ep.reply.{E}.zzzzzzzzzzzzzzzzzzzzzzzzzz.3.{CALLER}.n1"),
    );
    live.delivered(&mut observer, &serve_egress(3));

    // Timer fires are the one epoch-pinned subscribe row.
    live.subscribed(&mut c, &format!("{P}.ept.{E}.{IID}.3.*.fire"), None);
    live.subscribe_refused(&mut c, &format!("{P}.ept.{E}.{IID}.4.*.fire"), None);
}

#[test]
fn f70_serve_jwt_class_rail_is_subscribable_only_queue_qualified_by_the_endpoint() {
    let live = Live::start();
    let serve = live.holder(serve_at(3));
    let mut c = live.connect(&serve, "endpoint-serve");
    let class = format!("{P}.ep.one.{E}.deploy.>");

    live.subscribe_refused(&mut c, &class, None);
    live.subscribe_refused(&mut c, &class, Some("intruders"));
    live.subscribe_refused(&mut c, &format!("{P}.ep.one.{E}.>"), Some(E));
    live.subscribe_refused(&mut c, &format!("{P}.ep.one.{E}.undeploy.>"), Some(E));
    live.subscribe_refused(&mut c, "_INBOX.>", None);
    let one = live.subscribed(&mut c, &class, Some(E));
    let all = live.subscribed(&mut c, &format!("{P}.ep.all.{E}.deploy.>"), None);
    let inst = live.subscribed(&mut c, &format!("{P}.ep.inst.{E}.{IID}.deploy.>"), None);
    let describe = live.subscribed(&mut c, &format!("{P}.ep.one.{E}.describe.>"), Some(E));
    let v1 = live.subscribed(&mut c, &format!("{P}.ep.v1.one.{E}.deploy.>"), Some(E));

    // A caller's requests reach the instance on each rail it subscribed.
    let mut caller = live.connect(&live.unrestricted(), "caller");
    for (subject, sid) in [
        (format!("{P}.ep.one.{E}.deploy.{CALLER}.n1"), one),
        (format!("{P}.ep.all.{E}.deploy.{CALLER}.n2"), all),
        (format!("{P}.ep.inst.{E}.{IID}.deploy.{CALLER}.n3"), inst),
        (format!("{P}.ep.one.{E}.describe.{CALLER}.n4"), describe),
        (format!("{P}.ep.v1.one.{E}.deploy.g1.{CALLER}.n5"), v1),
    ] {
        live.published(&mut caller, &subject);
        let msg = c.next_msg(DELIVERY_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "the serve connection should receive {subject:?}: {e}\nserver log tail:\n{}",
                live.log()
            )
        });
        assert_eq!((msg.subject.as_str(), msg.sid), (subject.as_str(), sid));
    }
}

#[test]
fn serve_jwt_at_the_16_kib_mint_bound_connects_only_with_a_raised_max_control_line() {
    let commands =
        |n: usize| -> Vec<String> { (0..n).map(|i| format!("command-{i:03}")).collect() };
    // The largest serve credential the mint allows: add commands until the mint refuses the
    // JWT as over MAX_JWT_BYTES. Every nkey has the same length, so a probe with throwaway
    // keys sizes the real one exactly.
    let (account, user) = (KeyPair::new_account(), KeyPair::new_user());
    let conn = ConnId::parse(&user.public_key()).unwrap();
    let now = wall_clock();
    let probe = |n: usize| {
        let profile = endpoint_serve(&serve_binding(3, &conn, &commands(n))).unwrap();
        let validity = Validity {
            issued_at: now,
            expires_at: Some(UnixSeconds(now.0 + profile.ttl_seconds)),
        };
        let nats = profile_nats(&profile);
        jwt::user_jwt(
            &account,
            &account.public_key(),
            &user.public_key(),
            profile.name,
            &nats,
            validity,
        )
    };
    let largest = (1..500).map_while(|n| probe(n).ok()).count();
    let refusal = probe(largest + 1).unwrap_err();
    assert!(
        refusal.message.contains("16384-byte bound"),
        "{}",
        refusal.message
    );

    for (max_control_line, connects) in [(None, false), (Some(MAX_CONTROL_LINE), true)] {
        let live = Live::start_with(max_control_line);
        let holder = live
            .holder(|conn| endpoint_serve(&serve_binding(3, conn, &commands(largest))).unwrap());
        let bytes = holder.jwt.len();
        assert!(
            (MAX_JWT_BYTES - 1024..=MAX_JWT_BYTES).contains(&bytes),
            "{bytes}"
        );
        match (live.try_connect(&holder, "serve-16k"), connects) {
            (Ok(mut c), true) => {
                let last = format!("{P}.ep.one.{E}.command-{:03}.>", largest - 1);
                live.subscribed(&mut c, &last, Some(E));
            }
            (Err(ClientError::Refused(e)), false) if e == MAX_CONTROL_LINE_ERR => {}
            // The server closes mid-CONNECT; should its reset overtake its answer, its log
            // still names the cause.
            (Err(ClientError::Protocol(_)), false) if live.log_shows(MAX_CONTROL_LINE_ERR) => {}
            (outcome, _) => panic!(
                "a {bytes}-byte serve JWT with max_control_line {max_control_line:?}: got {:?}\n\
                 server log tail:\n{}",
                outcome.map(|_| "connected"),
                live.log()
            ),
        }
    }
}

// ---- goal-writer ------------------------------------------------------------------------------

fn goal_writer_of(conn: &ConnId) -> Profile {
    goal_writer(&GoalWriterBinding {
        space: space(),
        principal: principal("goal_writer"),
        conn: conn.clone(),
        endpoint: EndpointName::parse(ENDPOINT).unwrap(),
        ttl: StandingTtl::DEFAULT,
    })
    .unwrap()
}

#[test]
fn goal_writer_jwt_commits_its_endpoints_goals_and_is_refused_decisions_and_the_auth_bucket() {
    let live = Live::start();
    let mut observer = live.observer();
    let writer = live.holder(goal_writer_of);
    let mut c = live.connect(&writer, "goal-writer");
    let rec = records_bucket(&space());

    let granted = [
        format!("{P}.epf.{E}.goal.{CALLER}.g1.bind"),
        format!("$KV.{rec}.goalidx.{E}.g1"),
        format!("{P}.epf.{E}.goal.{CALLER}.g1.result"),
        format!("{P}.epf.{E}.receipt.g1"),
        format!("$KV.{rec}.goal.{E}.g1"),
    ];
    let refused = [
        // Decisions and quarantine are never a goal writer's.
        format!("{P}.epf.{E}.dec.g1"),
        // Another endpoint's goals.
        format!("{P}.epf.com_other_svc.goal.{CALLER}.g1.bind"),
        // F98: no write on the auth bucket.
        format!("$KV.{}.epgate.{E}.{IID}", auth_bucket(&space())),
        // Not a serve credential: no reply rail.
        format!("{P}.ep.reply.{E}.{IID}.3.{CALLER}.n1"),
        format!("$KV.{rec}.svc.{E}.{IID}.spec"),
    ];
    for (bad, good) in refused.iter().zip(&granted) {
        live.publish_refused(&mut c, bad);
        live.published(&mut c, good);
    }
    live.delivered(&mut observer, &granted);

    let own_inbox = format!("_INBOX_{}.r1", writer.key.public_key());
    live.subscribed(&mut c, &own_inbox, None);
    live.subscribe_refused(&mut c, "_INBOX.>", None);
    live.subscribe_refused(&mut c, &format!("{P}.epf.{E}.>"), None);
    live.subscribe_refused(
        &mut c,
        &format!("_INBOX_{}.>", KeyPair::new_user().public_key()),
        None,
    );
}

#[test]
fn minted_jwt_and_principal_tags_identify_the_connection_in_connz() {
    let live = Live::start();
    let writer = live.holder(goal_writer_of);
    let _c = live.connect(&writer, "goal-writer");
    let connz = live.server.monitor("/connz?auth=true").unwrap();
    let conn = connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["authorized_user"] == writer.key.public_key().as_str())
        .unwrap_or_else(|| panic!("no connection of the writer in {connz}"));
    assert_eq!(
        conn["account"],
        live.account.public_key().as_str(),
        "{conn}"
    );
    // The server shows the exact JWT; `name_tag` is the account's name, not the user's.
    assert_eq!(conn["jwt"], writer.jwt.as_str(), "{conn}");
    assert_eq!(conn["name_tag"], "cotal", "{conn}");
    let tags: Vec<&str> = conn["tags"]
        .as_array()
        .unwrap_or_else(|| panic!("no tags in {conn}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        tags,
        [
            format!("owner:{OWNER}"),
            "actor:goal_writer".to_owned(),
            format!("principal:{OWNER}.goal_writer"),
        ],
        "{conn}"
    );
}

// ---- run-admitter -----------------------------------------------------------------------------

#[test]
fn f88_run_admitter_jwt_writes_only_its_runs_two_admission_keys() {
    let live = Live::start();
    let mut observer = live.observer();
    let admitter = live.holder(|conn| {
        run_admitter(&RunAdmitterBinding {
            space: space(),
            principal: principal("caller"),
            conn: conn.clone(),
            endpoint: EndpointName::parse("manager").unwrap(),
            run: RunId::parse(RUN).unwrap(),
        })
        .unwrap()
    });
    let mut c = live.connect(&admitter, "run-admitter");
    let adm = admission_bucket(&space());

    let granted = [
        format!("$KV.{adm}.admission.v1.manager.{RUN}"),
        format!("$KV.{adm}.revoked.v1.manager.{RUN}"),
    ];
    let refused = [
        format!("$KV.{adm}.admission.v1.manager.{OTHER_RUN}"),
        format!("$KV.{adm}.revoked.v1.manager.{OTHER_RUN}"),
    ];
    for (bad, good) in refused.iter().zip(&granted) {
        live.publish_refused(&mut c, bad);
        live.published(&mut c, good);
    }
    // No journal, no records: admission only.
    live.publish_refused(&mut c, &format!("{P}.wfj.{RUN}"));
    live.publish_refused(
        &mut c,
        &format!("$KV.{}.run.manager.{RUN}.state", records_bucket(&space())),
    );
    live.published(&mut c, "$JS.API.INFO");
    let mut expected = granted.to_vec();
    expected.push("$JS.API.INFO".to_owned());
    live.delivered(&mut observer, &expected);

    live.subscribe_refused(&mut c, &format!("$KV.{adm}.>"), None);
    live.subscribe_refused(&mut c, "_INBOX.>", None);
}

// ---- refused at connect -----------------------------------------------------------------------

#[test]
fn expired_user_jwt_is_refused_at_connect_with_authorization_violation() {
    let live = Live::start();
    let key = KeyPair::new_user();
    let profile = goal_writer_of(&ConnId::parse(&key.public_key()).unwrap());
    let mint = |issued_at: u64, expires_at: u64| Holder {
        key: key.clone(),
        jwt: live.mint(
            &live.account,
            &live.account.public_key(),
            &key,
            profile.name,
            &profile_nats(&profile),
            Validity {
                issued_at: UnixSeconds(issued_at),
                expires_at: Some(UnixSeconds(expires_at)),
            },
        ),
    };
    let now = live.now.0;
    live.connect_refused(&mint(now - 120, now - 60), "expired a minute ago");
    // Control: the same key and rows, still valid, are accepted.
    live.connect(&mint(now - 120, now + 60), "valid for another minute");
}

#[test]
fn user_jwt_of_an_account_outside_the_preload_is_refused_at_connect() {
    let live = Live::start();
    let foreign = KeyPair::new_account();
    let key = KeyPair::new_user();
    let profile = goal_writer_of(&ConnId::parse(&key.public_key()).unwrap());
    let validity = Validity {
        issued_at: live.now,
        expires_at: Some(UnixSeconds(live.now.0 + 60)),
    };
    let jwt = live.mint(
        &foreign,
        &foreign.public_key(),
        &key,
        profile.name,
        &profile_nats(&profile),
        validity,
    );
    live.connect_refused(&Holder { key, jwt }, "foreign account");
    live.connect(&live.holder(goal_writer_of), "the preloaded account");
}

#[test]
fn user_jwt_signed_by_a_key_foreign_to_its_account_is_refused_at_connect() {
    let live = Live::start();
    // Claims our data account as `issuer_account`, but the signer is no signing key of it.
    let foreign_signer = KeyPair::new_account();
    let key = KeyPair::new_user();
    let profile = goal_writer_of(&ConnId::parse(&key.public_key()).unwrap());
    let validity = Validity {
        issued_at: live.now,
        expires_at: Some(UnixSeconds(live.now.0 + 60)),
    };
    let jwt = live.mint(
        &foreign_signer,
        &live.account.public_key(),
        &key,
        profile.name,
        &profile_nats(&profile),
        validity,
    );
    assert_eq!(
        jwt::decode(&jwt).unwrap().user_account(),
        Some(live.account.public_key().as_str())
    );
    live.connect_refused(&Holder { key, jwt }, "foreign signer");
    // Control: the same rows signed by the account itself are accepted.
    live.connect(&live.holder(goal_writer_of), "signed by the account");
}

#[test]
fn user_jwt_presented_without_its_holders_seed_is_refused_at_connect() {
    let live = Live::start();
    let holder = live.holder(goal_writer_of);
    // The JWT alone (as a leak would give it), the nonce signed by some other user key.
    let thief = Holder {
        key: KeyPair::new_user(),
        jwt: holder.jwt.clone(),
    };
    live.connect_refused(&thief, "JWT without its seed");
    live.connect(&holder, "the holder");
}

// ---- every profile ----------------------------------------------------------------------------

/// One of every profile the plane mints, each for the connection id `conn`.
fn every_profile(conn: &ConnId) -> Vec<Profile> {
    let manager = || EndpointName::parse("manager").unwrap();
    let uid = |u: &str| LifecycleUid::parse(u).unwrap();
    let rail_caller = |actor: &str, u: &str| RailCaller {
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: ActorToken::parse(actor).unwrap(),
        uid: uid(u),
    };
    let run = RunBinding {
        space: space(),
        owner: OwnerToken::parse(OWNER).unwrap(),
        conn: conn.clone(),
        endpoint: manager(),
        run: RunId::parse(RUN).unwrap(),
        takeover: TakeoverId::parse("tk1").unwrap(),
        instance: InstanceId::parse(IID).unwrap(),
        epoch: ProcessEpoch(4),
        ttl: StandingTtl::DEFAULT,
    };
    let mut serve = serve_binding(3, conn, &["deploy".to_owned(), "status".to_owned()]);
    serve.journal_class = true;
    serve.pools = vec![PoolToken::parse("hot").unwrap()];
    let operator = |scope| RunOperatorBinding {
        space: space(),
        principal: principal("cli"),
        conn: conn.clone(),
        endpoint: manager(),
        takeover: TakeoverId::parse("tk1").unwrap(),
        scope,
    };
    vec![
        endpoint_serve(&serve).unwrap(),
        goal_writer_of(conn),
        session_ledger(&SessionLedgerBinding {
            space: space(),
            principal: principal("ledger"),
            conn: conn.clone(),
            ttl: StandingTtl::DEFAULT,
        })
        .unwrap(),
        remote_manager(&RemoteManagerBinding {
            space: space(),
            owner: OwnerToken::parse(OWNER).unwrap(),
            instance: InstanceId::parse(IID).unwrap(),
            conn: conn.clone(),
            role: ManagerRole::Supervisor(StandingTtl::DEFAULT),
        })
        .unwrap(),
        run_driver(&run).unwrap(),
        run_mediator(&run).unwrap(),
        run_operator(&operator(RunOperatorScope::Status(
            RunId::parse(RUN).unwrap(),
        )))
        .unwrap(),
        run_operator(&operator(RunOperatorScope::Answer(
            CheckpointToken::parse("cp1").unwrap(),
        )))
        .unwrap(),
        run_admitter(&RunAdmitterBinding {
            space: space(),
            principal: principal("cli"),
            conn: conn.clone(),
            endpoint: manager(),
            run: RunId::parse(RUN).unwrap(),
        })
        .unwrap(),
        retirement_requester(&RetirementRequesterBinding {
            space: space(),
            caller: rail_caller("manager_serve_x", "zyxwvutsrqponmlkjihgfedcba"),
            conn: conn.clone(),
            target: rail_caller("agent7", "tttttttttttttttttttttttttt"),
        })
        .unwrap(),
        provisioner(&ProvisionerBinding {
            space: space(),
            principal: principal("provisioner"),
            conn: conn.clone(),
        })
        .unwrap(),
        deprovisioner(&DeprovisionerBinding {
            space: space(),
            principal: principal("manager_serve_x"),
            conn: conn.clone(),
            target: principal("agent7"),
            target_uid: uid("tttttttttttttttttttttttttt"),
            member_channels: vec![Channel::parse("team.backend").unwrap()],
        })
        .unwrap(),
        registration_executor(&RegistrationExecutorBinding {
            space: space(),
            principal: principal("auth_reg"),
            conn: conn.clone(),
            endpoint: EndpointName::parse(ENDPOINT).unwrap(),
            instance: InstanceId::parse(IID).unwrap(),
            window: ExecutorWindow::Registration,
        })
        .unwrap(),
    ]
}

/// A concrete subject a row grants: each wildcard token replaced by a literal one.
fn instance_of(row: &str) -> String {
    row.split('.')
        .map(|t| if t == "*" || t == ">" { "w" } else { t })
        .collect::<Vec<_>>()
        .join(".")
}

#[test]
fn every_profile_jwt_connects_and_the_server_grants_each_of_its_rows() {
    let live = Live::start();
    let count = every_profile(&ConnId::parse("probe-conn").unwrap()).len();
    for i in 0..count {
        let mut name = "";
        let holder = live.holder(|conn| {
            let profile = every_profile(conn).swap_remove(i);
            name = profile.name;
            profile
        });
        eprintln!("{name}: {} bytes", holder.jwt.len());
        let mut c = live.connect(&holder, name);
        // The rows as the server reads them: decoded from the minted token.
        let claims = jwt::decode(&holder.jwt).unwrap();
        let perms = &claims.user().unwrap().permissions;
        for row in &perms.publish.allow {
            live.published(&mut c, &instance_of(row));
        }
        for row in &perms.subscribe.allow {
            let (subject, queue) = match row.split_once(' ') {
                Some((s, q)) => (s, Some(q)),
                None => (row.as_str(), None),
            };
            live.subscribed(&mut c, subject, queue);
        }
        // Nothing outside the grant: the account-wide inbox is nobody's.
        live.subscribe_refused(&mut c, "_INBOX.>", None);
    }
}
