//! The permission profiles the plane mints: one pure builder per profile, from a typed binding to
//! the exact NATS `pub`/`sub` rows, the principal tags and the lifetime (SPEC §13.9, Appendix B;
//! reference-auth-service §4.4, §5.3, §5.5, §6.3). The connect-time profiles the auth callout
//! mints for bearers (§8.4: `agent` and the views) live in the `connect` submodule and are
//! re-exported here.
//!
//! Every builder is a pure function of its binding: no I/O, no clock, no randomness. Every value
//! that lands in a subject arrives as a validated newtype, and every finished row is checked
//! again before it leaves ([`MAX_SUBJECT_BYTES`], no empty token, wildcards only as whole tokens,
//! `>` only last), so a malformed row is an [`EpError`], never a credential.
//!
//! **Row order.** Each profile emits its rows in the order of its doc table, top to bottom; a row
//! that repeats keeps its first position. The order carries no meaning to NATS (allow lists are
//! sets) but is fixed so that minted JWTs, golden tests and audits are byte-stable.
//!
//! **Notation in the tables.** `P` = `cotal.<space>`, `s` = the space token, `e` = the endpoint
//! token, `iid` = the instance id, `E` = the bound process epoch, `o.a` = the principal,
//! `inbox` = `_INBOX_<connId>.>` (the connection-scoped reply inbox, never the account-wide one).
//!
//! **Where this departs from the TypeScript reference** (F98): the reference's
//! endpoint-serve-executor builder holds `CONSUMER.CREATE/INFO/DELETE` on `KV_cotal_auth_<s>`;
//! ours omits them (the plane's own executors list a family with a `STREAM.INFO` subjects filter,
//! which creates nothing). The remote manager's executor keeps the reference's registration
//! surface, because a reference manager registers itself over it, with its consumer create pinned
//! to the instance's own family and every auth-stream consumer reaped once it outlives the
//! executor's lifetime; its supervisor holds nothing on the auth bucket ([`remote_manager`]).

use std::collections::BTreeSet;
use std::fmt;

use sha2::{Digest as _, Sha256};

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::host::{AUTH_ENDPOINT, RETIRE_LIFECYCLE};
use crate::issuance::ServeGrant;
use crate::jwt::{self, Permission, Permissions, UnixSeconds, UserNats, Validity};
use crate::names::str_newtype;
pub use crate::names::SessionId;
mod connect;
pub use connect::{
    admin, agent, channel_purger, channel_writer, deployer, manager_caller, purger, session_caller,
    view_profile, AgentBinding, CallerIssuance, ConnectTtl, ConnectViewBinding, DeployerBinding,
    ManagerCallerBinding, SessionCallerBinding, ViewBinding, ADMIN, AGENT, CHANNEL_PURGER,
    CHANNEL_WRITER, CONNECT_TTL_MAX_SECS, DEPLOYER, MANAGER_CALLER, PURGER,
};

use crate::names::{
    admission_bucket, auth_bucket, contract_stream, keys, records_bucket, space_prefix, ActorToken,
    CommandToken, EndpointName, InstanceId, LifecycleUid, OwnerToken, Principal, SpaceName,
};

// ---- Limits and lifetimes -------------------------------------------------------------------

/// The longest subject a row may carry (SPEC §13.2 "whole subject ≤ 1024 bytes").
pub const MAX_SUBJECT_BYTES: usize = 1024;
/// Lower bound of a standing credential's lifetime.
pub const STANDING_TTL_MIN_SECS: u64 = 5;
/// Upper bound (and default) of a standing credential's lifetime: 24 h.
pub const STANDING_TTL_MAX_SECS: u64 = 86_400;
/// One-shot profiles whose window is one operation (provisioner, deprovisioner, retirement
/// requester, registration executor): five minutes.
pub const ONE_SHOT_TTL_SECS: u64 = 300;
/// The longest a per-session credential may live (F74: `exp ≤ 24 h`).
pub const SESSION_TTL_MAX_SECS: u64 = 86_400;
/// The remote manager's executor credential.
pub const MANAGER_EXECUTOR_TTL_SECS: u64 = 300;
/// One served run call (`run-operator`): a copied credential dies within a minute.
pub const RUN_OPERATOR_TTL_SECS: u64 = 60;
/// One run's admission (`run-admitter`).
pub const RUN_ADMITTER_TTL_SECS: u64 = 60;
/// A registration executor minted for gate reconciliation (reference-auth-service §4.7).
pub const RECONCILE_EXECUTOR_TTL_SECS: u64 = 60;

// ---- Profile names (the JWT `name`) ---------------------------------------------------------

pub const ENDPOINT_SERVE: &str = "endpoint-serve";
pub const GOAL_WRITER: &str = "goal-writer";
pub const SESSION_LEDGER: &str = "session-ledger";
pub const SESSION_SERVING: &str = "session-serving";
pub const REMOTE_MANAGER: &str = "remote-manager";
pub const RUN_DRIVER: &str = "run-driver";
pub const RUN_MEDIATOR: &str = "run-mediator";
pub const RUN_OPERATOR: &str = "run-operator";
pub const RUN_ADMITTER: &str = "run-admitter";
pub const RETIREMENT_REQUESTER: &str = "retirement-requester";
pub const PROVISIONER: &str = "provisioner";
pub const DEPROVISIONER: &str = "deprovisioner";
pub const REGISTRATION_EXECUTOR: &str = "endpoint-serve-executor";

/// The reserved command every endpoint serves; derived, never registered (SPEC §13.7).
const DESCRIBE: &str = "describe";
/// The endpoint hosting managers, runs and their records.
const MANAGER_ENDPOINT: &str = "manager";

// ---- The result -----------------------------------------------------------------------------

/// One minted profile: what the JWT carries besides its subject key and expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The JWT `name`: the profile label.
    pub name: &'static str,
    pub permissions: Permissions,
    /// `owner:<o>`, `actor:<a>`, `principal:<o>.<a>`, in that order.
    pub tags: Vec<String>,
    pub ttl_seconds: u64,
}

impl Profile {
    /// The JWT claims this profile carries when issued at `now`: its permissions and tags, valid
    /// for its lifetime. The expiry is `validity.expires_at`.
    pub fn claims(&self, now: UnixSeconds) -> Result<(UserNats, Validity), EpError> {
        let exp = now.0.checked_add(self.ttl_seconds).ok_or_else(|| {
            EpError::bad_request("the credential's expiry overflows the unix-seconds range")
        })?;
        let nats = UserNats {
            permissions: self.permissions.clone(),
            tags: self.tags.clone(),
            ..UserNats::default()
        };
        let validity = Validity {
            issued_at: now,
            expires_at: Some(UnixSeconds(exp)),
        };
        Ok((nats, validity))
    }

    /// Signs this profile as a JWT for the caller-held `user` nkey in `account`, issued at
    /// `now`, with its expiry.
    pub fn sign_for(
        &self,
        signer: &nkeys::KeyPair,
        account: &str,
        user: &str,
        now: UnixSeconds,
    ) -> Result<IssuedCredential, EpError> {
        let (nats, validity) = self.claims(now)?;
        let exp = validity.expires_at.map_or(now.0, |e| e.0);
        Ok(IssuedCredential {
            jwt: jwt::user_jwt(signer, account, user, self.name, &nats, validity)?,
            exp,
        })
    }
}

/// One signed credential for a caller-held nkey: the JWT and its expiry (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCredential {
    pub jwt: String,
    pub exp: u64,
}

/// The identity tags every minted user JWT carries, so a connection is attributable from CONNZ.
pub fn principal_tags(p: &Principal) -> Vec<String> {
    vec![
        format!("owner:{}", p.owner()),
        format!("actor:{}", p.actor()),
        format!("{}{}", crate::liveness::PRINCIPAL_TAG, p.key()),
    ]
}

// ---- Binding value types --------------------------------------------------------------------

/// A standing credential's lifetime, bounded to
/// [`STANDING_TTL_MIN_SECS`]..=[`STANDING_TTL_MAX_SECS`]; 24 h unless the operator says less.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StandingTtl(u64);

impl StandingTtl {
    pub const DEFAULT: StandingTtl = StandingTtl(STANDING_TTL_MAX_SECS);

    /// Refuses a lifetime outside the bounds with `bad-request` naming the bound it broke.
    pub fn new(seconds: u64) -> Result<Self, EpError> {
        if seconds < STANDING_TTL_MIN_SECS {
            return Err(EpError::bad_request(format!(
                "standing credential lifetime {seconds} s is refused: it must be at least \
                 {STANDING_TTL_MIN_SECS} s"
            )));
        }
        if seconds > STANDING_TTL_MAX_SECS {
            return Err(EpError::bad_request(format!(
                "standing credential lifetime {seconds} s is refused: it must be at most \
                 {STANDING_TTL_MAX_SECS} s (24 h); renewal, not a longer lifetime, keeps it alive"
            )));
        }
        Ok(StandingTtl(seconds))
    }

    pub const fn seconds(self) -> u64 {
        self.0
    }
}

impl Default for StandingTtl {
    fn default() -> Self {
        StandingTtl::DEFAULT
    }
}

fn all_chars(s: &str, ok: impl Fn(char) -> bool) -> bool {
    s.chars().all(ok)
}

fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

str_newtype! {
    /// The authenticated connection id that keys the reply inbox `_INBOX_<connId>.>`: the
    /// caller-held user nkey, or a client-chosen inbox nonce. Metacharacters would widen the
    /// inbox grant to other connections, so only `[A-Za-z0-9_-]{8,120}` passes.
    ConnId, "connection id", "[A-Za-z0-9_-]{8,120}",
    |s: &str| (8..=120).contains(&s.len()) && all_chars(s, id_char)
}
str_newtype! {
    /// A workflow run id (the `wfj.<runId>` token).
    RunId, "run id", "[A-Za-z0-9_-]{1,64}",
    |s: &str| (1..=64).contains(&s.len()) && all_chars(s, id_char)
}
str_newtype! {
    /// A takeover attempt id; names the per-takeover journal replay durable.
    TakeoverId, "takeover id", "[A-Za-z0-9_-]{1,64}",
    |s: &str| (1..=64).contains(&s.len()) && all_chars(s, id_char)
}
str_newtype! {
    /// A checkpoint token: the request id a pause is keyed by.
    CheckpointToken, "checkpoint token", "[A-Za-z0-9_-]{1,64}",
    |s: &str| (1..=64).contains(&s.len()) && all_chars(s, id_char)
}
str_newtype! {
    /// A work-pool token (`pool_<e>_<pool>` parses from its last `_` because a pool has none).
    PoolToken, "pool", "[a-z0-9-]{1,32}",
    |s: &str| (1..=32).contains(&s.len())
        && all_chars(s, |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}
str_newtype! {
    /// A concrete channel (dot-separated `[A-Za-z0-9_-]+` segments, no wildcard): the
    /// deprovisioner deletes exact membership rows, so a wildcard channel is refused at mint.
    Channel, "channel", "dot-separated [A-Za-z0-9_-]+ segments (no wildcard)",
    |s: &str| s.split('.').all(|seg| !seg.is_empty() && all_chars(seg, id_char))
}

// ---- Row checking and assembly --------------------------------------------------------------

/// Refuses a row that is not a well-formed NATS subject (or, on the subscribe side, a
/// queue-qualified `"<subject> <queue>"`): too long, an empty token, whitespace, or a wildcard
/// that is not a whole token (`>` only last).
fn check_row(row: &str, queue_ok: bool) -> Result<(), EpError> {
    let refuse = |why: &str| {
        let shown: String = row.chars().take(120).collect();
        Err(EpError::bad_request(format!(
            "permission row {shown:?} is refused: {why}"
        )))
    };
    let (subject, queue) = match row.split_once(' ') {
        Some((s, q)) if queue_ok => (s, Some(q)),
        Some(_) => return refuse("only a subscribe row may carry a queue group"),
        None => (row, None),
    };
    if subject.len() > MAX_SUBJECT_BYTES {
        return refuse(&format!(
            "the subject is {} bytes, over the {MAX_SUBJECT_BYTES}-byte bound",
            subject.len()
        ));
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    let last = tokens.len().saturating_sub(1);
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return refuse("it has an empty token");
        }
        if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return refuse("a token carries whitespace");
        }
        let wild = t.contains('*') || t.contains('>');
        if wild && *t != "*" && *t != ">" {
            return refuse("a wildcard must be a whole token");
        }
        if *t == ">" && i != last {
            return refuse("'>' may only be the last token");
        }
    }
    if let Some(q) = queue {
        if q.is_empty() || !all_chars(q, id_char) {
            return refuse("the queue group must be one [A-Za-z0-9_-]+ token");
        }
    }
    Ok(())
}

/// Checks every row and drops repeats (first position wins): the allow-only permissions every
/// profile (and every plane connection grant, [`crate::plane_grants`]) is made of.
pub(crate) fn checked_permissions(
    publish: Vec<String>,
    subscribe: Vec<String>,
) -> Result<Permissions, EpError> {
    Ok(Permissions {
        publish: Permission {
            allow: checked_rows(publish, false)?,
            deny: Vec::new(),
        },
        subscribe: Permission {
            allow: checked_rows(subscribe, true)?,
            deny: Vec::new(),
        },
        response: None,
    })
}

/// Checks every row of one list and drops repeats (first position wins); `queue_ok` admits the
/// subscribe side's queue-qualified form.
fn checked_rows(rows: Vec<String>, queue_ok: bool) -> Result<Vec<String>, EpError> {
    let mut out: Vec<String> = Vec::with_capacity(rows.len());
    for row in rows {
        check_row(&row, queue_ok)?;
        if !out.contains(&row) {
            out.push(row);
        }
    }
    Ok(out)
}

/// Checks every row, drops repeats (first position wins) and builds the profile.
fn assemble(
    name: &'static str,
    principal: &Principal,
    ttl_seconds: u64,
    publish: Vec<String>,
    subscribe: Vec<String>,
) -> Result<Profile, EpError> {
    Ok(Profile {
        name,
        permissions: checked_permissions(publish, subscribe)?,
        tags: principal_tags(principal),
        ttl_seconds,
    })
}

/// The space-derived names every profile builds from.
struct Space {
    /// `cotal.<space>`.
    p: String,
    /// The space token.
    s: String,
    auth: String,
    records: String,
    admission: String,
    epc: String,
}

impl Space {
    fn new(space: &SpaceName) -> Self {
        Space {
            p: space_prefix(space),
            s: space.token().to_owned(),
            auth: auth_bucket(space),
            records: records_bucket(space),
            admission: admission_bucket(space),
            epc: contract_stream(space),
        }
    }

    /// A per-space stream: `<FAMILY>_<s>`.
    fn stream(&self, family: &str) -> String {
        format!("{family}_{}", self.s)
    }

    /// A per-space KV bucket: `cotal_<kind>_<s>`.
    fn bucket(&self, kind: &str) -> String {
        format!("cotal_{kind}_{}", self.s)
    }

    /// The contract-store fetch every resolver holds: last-by-subject, subject-confined.
    fn epc_fetch(&self) -> String {
        format!("$JS.API.DIRECT.GET.{}.{}.epc.>", self.epc, self.p)
    }
}

pub(crate) fn inbox(conn: &ConnId) -> String {
    format!("_INBOX_{conn}.>")
}

/// Bind-only rows on a pre-created pull durable: info, next, ack — never create or delete.
fn bind_rows(stream: &str, durable: &str) -> [String; 3] {
    [
        format!("$JS.API.CONSUMER.INFO.{stream}.{durable}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"),
        format!("$JS.ACK.{stream}.{durable}.>"),
    ]
}

/// A caller triple on the endpoint rails (`<owner>.<actor>.<uid>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailCaller {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub uid: LifecycleUid,
}

impl fmt::Display for RailCaller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.owner, self.actor, self.uid)
    }
}

/// The caller's own reply rail: every endpoint's replies to this triple, nonce wildcarded.
fn caller_reply_filter(sp: &Space, c: &RailCaller) -> String {
    format!("{}.ep.reply.*.*.*.{c}.*", sp.p)
}

// ---- endpoint-serve -------------------------------------------------------------------------

/// What an `endpoint-serve` credential binds: an authorized serve grant (the gate coordinates
/// the mint fences on, F27) plus the serving surface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeBinding {
    /// Space, endpoint, instance, registered owner and the epoch the credential pins.
    pub grant: ServeGrant,
    /// The serving actor; the owner is the grant's registered owner, never a second input.
    pub actor: ActorToken,
    pub conn: ConnId,
    /// The registered commands served on the request rails (the ephemeral ones; journal-class
    /// commands ride `epj` submissions). `describe` is derived and may not be listed.
    pub rail_commands: Vec<CommandToken>,
    /// True when any registered command is journal-class: the instance binds the shared effects
    /// durable `eff_<e>`.
    pub journal_class: bool,
    /// Work pools this endpoint owns; each binds its pre-created `pool_<e>_<pool>`.
    pub pools: Vec<PoolToken>,
    pub ttl: StandingTtl,
}

/// `endpoint-serve`: one instance's serving authority and nothing else — no agent baseline, no
/// chat, no store writes. Re-minted on every takeover at the new epoch (F37).
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | sub | per command `c` (sorted, then `describe`): `P.ep.one.e.c.> e` | class rail, queue-qualified ONLY, queue group = endpoint token (F70): nonces reach only the instance the queue picks |
/// | 2 | sub | `P.ep.all.e.c.>` | scatter rail, plain (every instance answers a scatter) |
/// | 3 | sub | `P.ep.inst.e.iid.c.>` | own instance rail |
/// | 4 | sub | rows 1–3 again on `P.ep.v1…` | the versioned rail (F77): the `.>` tail spans the caller's generation |
/// | 5 | sub | `P.ept.e.iid.E.*.fire` | own timer fires at own epoch only |
/// | 6 | sub | `inbox` | JetStream API replies |
/// | 7 | pub | `P.ep.reply.e.iid.E.*.*.*.*` | replies, attribution-pinned to instance and epoch (F39) |
/// | 8 | pub | `P.ep.v1.reply.e.iid.E.*.*.*.*.*` | v1 replies: one more token spans the generation |
/// | 9 | pub | `P.epe.e.iid.E.>` | events, epoch-pinned (F39) |
/// | 10 | pub | `P.ept.e.iid.E.*.schedule` | timer schedule requests only, never `.armed`/`.fire` (F39) |
/// | 11 | pub | `P.epr.e.iid.E.>` | record-write ingress; the writer reads the epoch from this subject (F39, F42) |
/// | 12 | pub | if journal-class: bind rows on `EPF_s` / `eff_e` | instances pull-compete on one shared effects durable |
/// | 13 | pub | per pool (sorted): bind rows on `EPW_s` / `pool_e_<pool>` | pool consume + ack, bind-only |
/// | 14 | pub | `$JS.API.INFO`, only when 12 or 13 emitted rows | the pull client's context probe |
///
/// Keeps F70 (one queue-qualified row per registered command, never a plain class-rail
/// subscribe, never a `>` spanning commands), F39 (every egress row pins the bound epoch; no
/// subject carrying any other epoch is publishable) and F40 (the subscribe side is deliberately
/// epoch-free: ingress is fenced by the barrier's revocation and eviction, not by subject).
/// Session subjects are absent by design: sessions use per-session credentials only.
pub fn endpoint_serve(b: &ServeBinding) -> Result<Profile, EpError> {
    let g = &b.grant;
    let sp = Space::new(&g.space);
    let e = g.endpoint.token();
    let (p, i, epoch) = (&sp.p, &g.instance, g.epoch);
    let mut commands: BTreeSet<&str> = BTreeSet::new();
    for c in &b.rail_commands {
        if c.as_str() == DESCRIBE {
            return Err(EpError::bad_request(
                "\"describe\" is refused as a served command: it is reserved and every serve \
                 credential derives it (SPEC 13.7)",
            ));
        }
        commands.insert(c.as_str());
    }
    let mut sub = Vec::new();
    for cmd in commands.into_iter().chain([DESCRIBE]) {
        for rail in ["ep", "ep.v1"] {
            sub.push(format!("{p}.{rail}.one.{e}.{cmd}.> {e}"));
            sub.push(format!("{p}.{rail}.all.{e}.{cmd}.>"));
            sub.push(format!("{p}.{rail}.inst.{e}.{i}.{cmd}.>"));
        }
    }
    sub.push(format!("{p}.ept.{e}.{i}.{epoch}.*.fire"));
    sub.push(inbox(&b.conn));
    let mut publish = vec![
        format!("{p}.ep.reply.{e}.{i}.{epoch}.*.*.*.*"),
        format!("{p}.ep.v1.reply.{e}.{i}.{epoch}.*.*.*.*.*"),
        format!("{p}.epe.{e}.{i}.{epoch}.>"),
        format!("{p}.ept.{e}.{i}.{epoch}.*.schedule"),
        format!("{p}.epr.{e}.{i}.{epoch}.>"),
    ];
    let mut binds: Vec<String> = Vec::new();
    if b.journal_class {
        binds.extend(bind_rows(&sp.stream("EPF"), &format!("eff_{e}")));
    }
    let pools: BTreeSet<&PoolToken> = b.pools.iter().collect();
    for pool in pools {
        binds.extend(bind_rows(&sp.stream("EPW"), &format!("pool_{e}_{pool}")));
    }
    if !binds.is_empty() {
        binds.push("$JS.API.INFO".to_owned());
    }
    publish.extend(binds);
    let holder = Principal::new(g.owner.clone(), b.actor.clone());
    assemble(ENDPOINT_SERVE, &holder, b.ttl.seconds(), publish, sub)
}

// ---- goal-writer ----------------------------------------------------------------------------

/// What a `goal-writer` credential binds: one endpoint whose action goals it binds and commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalWriterBinding {
    pub space: SpaceName,
    pub principal: Principal,
    pub conn: ConnId,
    pub endpoint: EndpointName,
    pub ttl: StandingTtl,
}

/// `goal-writer`: the endpoint's commit principal (SPEC §13.9 "Result/receipt/terminal/resume
/// facts") composed with the three additions the §13.9 goal-writer row names, on a standing
/// connection disjoint from the serve credential (a serve connection is broker-denied every goal
/// write).
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `P.epf.e.goal.*.*.*.*.bind` | the per-goal first-wins bind leaf |
/// | 2 | pub | `$KV.cotal_records_s.goalidx.e.>` | the reconcile index, written create-only before the bind |
/// | 3 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_auth_s` | own-gate currency read before the first terminal CAS — a fast-fail belt, named residual of F98, never the fence |
/// | 4 | pub | `P.epf.e.goal.*.*.*.*.result` | goal terminal |
/// | 5 | pub | `P.epf.e.goal.*.*.*.*.result.*` | epoch-scoped terminal of an executor-pinned goal |
/// | 6 | pub | `P.epf.e.eff.>`, `…receipt.>`, `…wrk.>`, `…cp.>` | the rest of the commit families; never `dec.>`/`quar.>` |
/// | 7 | pub | `$KV.cotal_records_s.goal.e.>`, `….cp.e.>`, `….lease.e.>` | own record keys |
/// | 8 | pub | `$JS.API.STREAM.MSG.GET.EPF_s`, `…KV_cotal_records_s` | leader-served fencing read-back (F8) |
/// | 9 | pub | `$JS.API.INFO` | KV client context |
/// | 10 | sub | `inbox` | |
///
/// Keeps F98 (its one auth-bucket row is the named own-gate read; no write, no consumer there)
/// and F41 (a superseded writer reads its gate and declines to commit).
pub fn goal_writer(b: &GoalWriterBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let (p, rec) = (&sp.p, &sp.records);
    let e = b.endpoint.token();
    let publish = vec![
        format!("{p}.epf.{e}.goal.*.*.*.*.bind"),
        format!("$KV.{rec}.goalidx.{e}.>"),
        format!("$JS.API.STREAM.MSG.GET.KV_{}", sp.auth),
        format!("{p}.epf.{e}.goal.*.*.*.*.result"),
        format!("{p}.epf.{e}.goal.*.*.*.*.result.*"),
        format!("{p}.epf.{e}.eff.>"),
        format!("{p}.epf.{e}.receipt.>"),
        format!("{p}.epf.{e}.wrk.>"),
        format!("{p}.epf.{e}.cp.>"),
        format!("$KV.{rec}.goal.{e}.>"),
        format!("$KV.{rec}.cp.{e}.>"),
        format!("$KV.{rec}.lease.{e}.>"),
        format!("$JS.API.STREAM.MSG.GET.{}", sp.stream("EPF")),
        format!("$JS.API.STREAM.MSG.GET.KV_{rec}"),
        "$JS.API.INFO".to_owned(),
    ];
    let sub = vec![inbox(&b.conn)];
    assemble(GOAL_WRITER, &b.principal, b.ttl.seconds(), publish, sub)
}

// ---- session-ledger -------------------------------------------------------------------------

/// What a `session-ledger` credential binds: nothing but its holder — the ledger is per space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLedgerBinding {
    pub space: SpaceName,
    pub principal: Principal,
    pub conn: ConnId,
    pub ttl: StandingTtl,
}

/// `session-ledger`: the standing owner of the dedicated sessions bucket (SPEC §13.6's durable
/// revocation authority that outlives the serving endpoint). It holds no session rail of any
/// shape; the byte rails are per-session credentials.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$KV.cotal_sessions_s.session.*` | create-only / revision-CAS on `session.<id>` (F72, F73) |
/// | 2 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_sessions_s` | leader-served read, blind but confined to a bucket that holds only session rows |
/// | 3 | pub | `$JS.API.STREAM.INFO.KV_cotal_sessions_s` | bind-time shape proof |
/// | 4 | pub | `$JS.API.INFO` | KV client context |
/// | 5 | sub | `inbox` | |
///
/// Keeps F98 (no grant on the auth bucket: session rows live in their own bucket).
pub fn session_ledger(b: &SessionLedgerBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let sessions = sp.bucket("sessions");
    let publish = vec![
        format!("$KV.{sessions}.session.*"),
        format!("$JS.API.STREAM.MSG.GET.KV_{sessions}"),
        format!("$JS.API.STREAM.INFO.KV_{sessions}"),
        "$JS.API.INFO".to_owned(),
    ];
    assemble(
        SESSION_LEDGER,
        &b.principal,
        b.ttl.seconds(),
        publish,
        vec![inbox(&b.conn)],
    )
}

// ---- session-serving ------------------------------------------------------------------------

/// What a `session-serving` credential binds: one session of one endpoint at the serving
/// instance's process epoch, and a lifetime the issuer computed from the session's own expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionServingBinding {
    pub space: SpaceName,
    pub principal: Principal,
    pub conn: ConnId,
    pub endpoint: EndpointName,
    pub session: SessionId,
    /// The serving instance's process epoch the session was redeemed at.
    pub epoch: ProcessEpoch,
    /// 1..=[`SESSION_TTL_MAX_SECS`]: never past the session's expiry, never past 24 h.
    pub ttl_seconds: u64,
}

/// `session-serving`: the serving side of one session — the exact mirror of the caller, which
/// publishes `in` and subscribes `out`.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `P.eps.e.<sessionId>.E.out` | serving → caller, this session only |
/// | 2 | sub | `P.eps.e.<sessionId>.E.in` | caller → serving, this session only |
/// | 3 | sub | `inbox` | |
///
/// Keeps F73 (the epoch rides the subject, so the rails die with the serving epoch) and F74
/// (a lifetime over 24 h is refused).
pub fn session_serving(b: &SessionServingBinding) -> Result<Profile, EpError> {
    if !(1..=SESSION_TTL_MAX_SECS).contains(&b.ttl_seconds) {
        return Err(EpError::bad_request(format!(
            "session-serving lifetime {} s is refused: it must be 1..={SESSION_TTL_MAX_SECS} s",
            b.ttl_seconds
        )));
    }
    let sp = Space::new(&b.space);
    let rail = format!(
        "{}.eps.{}.{}.{}",
        sp.p,
        b.endpoint.token(),
        b.session,
        b.epoch
    );
    assemble(
        SESSION_SERVING,
        &b.principal,
        b.ttl_seconds,
        vec![format!("{rail}.out")],
        vec![format!("{rail}.in"), inbox(&b.conn)],
    )
}

// ---- remote-manager -------------------------------------------------------------------------

/// Which of the remote manager's two base identities a credential is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagerRole {
    /// `manager_<iid>`: the standing supervisor.
    Supervisor(StandingTtl),
    /// `manager_exec_<iid>`: the short-lived executor ([`MANAGER_EXECUTOR_TTL_SECS`]).
    Executor,
}

/// The server-derived actor of a manager role: never client input (reference-auth-service §4.1).
pub fn remote_manager_actor(
    role: ManagerRole,
    instance: &InstanceId,
) -> Result<ActorToken, EpError> {
    let actor = match role {
        ManagerRole::Supervisor(_) => format!("manager_{instance}"),
        ManagerRole::Executor => format!("manager_exec_{instance}"),
    };
    ActorToken::parse(&actor).map_err(|e| EpError::internal(e.message))
}

/// What a `remote-manager` credential binds: one owner's one manager instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteManagerBinding {
    pub space: SpaceName,
    /// The authenticated (derived) owner; the actor is derived from `role` and `instance`.
    pub owner: OwnerToken,
    pub instance: InstanceId,
    pub conn: ConnId,
    pub role: ManagerRole,
}

/// `remote-manager`: a remote user manager's base credential — its own lease and presence, its
/// own instance's service records and contract publication, and nothing of any other instance.
/// The supervisor and the executor share rows 1–3, 6, 7, 9 and 10; only the executor (five
/// minutes, the one credential a reference manager registers over) holds the instance-scoped
/// registration surface on the auth bucket (rows 4, 5 and 8).
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO`, `$JS.API.STREAM.INFO.KV_cotal_manager_s`, `$JS.API.STREAM.MSG.GET.KV_cotal_manager_s`, `$KV.cotal_manager_s.lease.iid` | own instance lease only, never `lease.*` |
/// | 2 | pub | `$KV.cotal_presence_s.o.a` | own presence key only |
/// | 3 | pub | `$JS.API.STREAM.INFO.KV_cotal_presence_s`, `…CONSUMER.CREATE.KV_cotal_presence_s.>`, `…CONSUMER.INFO.KV_cotal_presence_s.>`, `$JS.FC.>` | roster watch (public); flow control of every ordered consumer |
/// | 4 | pub | `$KV.cotal_auth_s.epgate.manager.iid`, `….eprepair.manager.iid` | executor: gate provision, freeze/reopen CAS, the one repair cursor (F19–F23) |
/// | 5 | pub | `$KV.cotal_auth_s.epcred.manager.iid.>` | executor: the instance's ledger family, stage and revoke (F68) |
/// | 6 | pub | `$KV.cotal_records_s.svc.manager.iid.spec`, `….status`, `$KV.cotal_records_s.govern.manager` | this instance's registration records |
/// | 7 | pub | `P.epc.*`, `$JS.API.DIRECT.GET.EPC_s.P.epc.>`, `$JS.API.DIRECT.GET.EPC_s` | contract publication (one digest token; the store refuses a second message per subject) and read-back |
/// | 8 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_auth_s`, `$JS.API.CONSUMER.CREATE.KV_cotal_auth_s.*.$KV.cotal_auth_s.epcred.manager.iid.>`, `$JS.API.CONSUMER.INFO.KV_cotal_auth_s.>`, `$JS.API.CONSUMER.DELETE.KV_cotal_auth_s.>` | executor: leader-served gate and row reads (the reference's named residual; it also reads a foreign slot holder's gate generation) and the family listing a reference barrier makes with `kv.keys` (an ordered push consumer) |
/// | 9 | pub | `$JS.API.DIRECT.GET.KV_cotal_records_s.$KV.cotal_records_s.<key>` for the three keys of 6, `$JS.API.STREAM.MSG.GET.KV_cotal_records_s` | key-pinned and leader-served records reads |
/// | 10 | sub | `inbox` | the only delivery subject: API replies, acks, the listing's deliveries |
///
/// **Where this departs from the reference's rows**, each narrowing still admitting the
/// reference manager's own client sequence (observe → provision → barrier → register serving):
/// * the supervisor holds none of rows 4, 5 and 10: it is a 24 h standing credential and the
///   reference manager registers over the executor alone, so a copied supervisor cannot freeze,
///   revoke or list anything on the auth bucket;
/// * the executor's consumer create is the filter-subject form pinned to its own family (the
///   reference grants `CONSUMER.CREATE.KV_cotal_auth_s.>`): the server refuses a create whose
///   body's filter is not the subject's (10131), so no consumer it makes can deliver anything but
///   this instance's own ledger rows. F98's other concern, a consumer outliving the credential that
///   made it, is answered by the plane's auth-consumer reaper, which deletes every consumer on the
///   auth stream older than [`MANAGER_EXECUTOR_TTL_SECS`] (`cotal_io_nats::reaper`).
///
/// Keeps F90 (one owner, one server-derived actor, one instance; no wildcard spans instances).
pub fn remote_manager(b: &RemoteManagerBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let (p, rec, auth) = (&sp.p, &sp.records, &sp.auth);
    let i = &b.instance;
    let actor = remote_manager_actor(b.role, i)?;
    let holder = Principal::new(b.owner.clone(), actor);
    let manager = sp.bucket("manager");
    let presence = sp.bucket("presence");
    let manager_endpoint = EndpointName::parse(MANAGER_ENDPOINT)?;
    let e = manager_endpoint.token();
    let executor = b.role == ManagerRole::Executor;
    let record_keys = [
        keys::svc_spec(&manager_endpoint, i),
        keys::svc_status(&manager_endpoint, i),
        keys::govern(&manager_endpoint),
    ];
    let mut publish = vec![
        "$JS.API.INFO".to_owned(),
        format!("$JS.API.STREAM.INFO.KV_{manager}"),
        format!("$JS.API.STREAM.MSG.GET.KV_{manager}"),
        format!("$KV.{manager}.lease.{i}"),
        format!("$KV.{presence}.{}", holder.key()),
        format!("$JS.API.STREAM.INFO.KV_{presence}"),
        format!("$JS.API.CONSUMER.CREATE.KV_{presence}.>"),
        format!("$JS.API.CONSUMER.INFO.KV_{presence}.>"),
        "$JS.FC.>".to_owned(),
    ];
    if executor {
        publish.extend([
            format!("$KV.{auth}.epgate.{e}.{i}"),
            format!("$KV.{auth}.eprepair.{e}.{i}"),
            format!("$KV.{auth}.epcred.{e}.{i}.>"),
        ]);
    }
    publish.extend(record_keys.iter().map(|k| format!("$KV.{rec}.{k}")));
    publish.push(format!("{p}.epc.*"));
    publish.push(sp.epc_fetch());
    publish.push(format!("$JS.API.DIRECT.GET.{}", sp.epc));
    if executor {
        publish.extend([
            format!("$JS.API.STREAM.MSG.GET.KV_{auth}"),
            format!("$JS.API.CONSUMER.CREATE.KV_{auth}.*.$KV.{auth}.epcred.{e}.{i}.>"),
            format!("$JS.API.CONSUMER.INFO.KV_{auth}.>"),
            format!("$JS.API.CONSUMER.DELETE.KV_{auth}.>"),
        ]);
    }
    publish.extend(
        record_keys
            .iter()
            .map(|k| format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.{k}")),
    );
    publish.push(format!("$JS.API.STREAM.MSG.GET.KV_{rec}"));
    let ttl = match b.role {
        ManagerRole::Supervisor(ttl) => ttl.seconds(),
        ManagerRole::Executor => MANAGER_EXECUTOR_TTL_SECS,
    };
    assemble(REMOTE_MANAGER, &holder, ttl, publish, vec![inbox(&b.conn)])
}

// ---- run-driver / run-mediator --------------------------------------------------------------

/// The run-stable caller triple a run's actions ride, derived from the run id alone so every
/// host that resumes the run re-derives the same one: with `h = hex(sha256(runId))`, actor
/// `wf_<h[0..12]>`, uid `h[12..38]`, under the run's owner.
pub fn run_driver_caller(run: &RunId, owner: &OwnerToken) -> Result<RailCaller, EpError> {
    let hex: String = Sha256::digest(run.as_str().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let slice = |r: std::ops::Range<usize>| {
        hex.get(r)
            .ok_or_else(|| EpError::internal("sha-256 hex is shorter than 38 chars"))
    };
    let actor = ActorToken::parse(&format!("wf_{}", slice(0..12)?))
        .map_err(|e| EpError::internal(e.message))?;
    let uid = LifecycleUid::parse(slice(12..38)?).map_err(|e| EpError::internal(e.message))?;
    Ok(RailCaller {
        owner: owner.clone(),
        actor,
        uid,
    })
}

/// What the driver/mediator pair of one run attempt binds (reference-auth-service §5.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunBinding {
    pub space: SpaceName,
    /// The run's owner (the admission's caller owner); the actor is derived from the run id.
    pub owner: OwnerToken,
    pub conn: ConnId,
    /// The hosting endpoint (the manager); leads every record key.
    pub endpoint: EndpointName,
    pub run: RunId,
    pub takeover: TakeoverId,
    /// The driving instance and its epoch: the coordinates its timer schedules are addressed by.
    pub instance: InstanceId,
    pub epoch: ProcessEpoch,
    pub ttl: StandingTtl,
}

/// The run's journal replay durable `wfj_<run>_<takeover>` on `WFJ_s`: exact create (filter =
/// the run's own subject), bind, and delete — one name per takeover, so contenders never share.
fn journal_replay_rows(sp: &Space, run: &RunId, takeover: &TakeoverId) -> Vec<String> {
    let stream = sp.stream("WFJ");
    let durable = format!("wfj_{run}_{takeover}");
    let mut rows = vec![format!(
        "$JS.API.CONSUMER.CREATE.{stream}.{durable}.{}.wfj.{run}",
        sp.p
    )];
    rows.extend(bind_rows(&stream, &durable));
    rows.push(format!("$JS.API.CONSUMER.DELETE.{stream}.{durable}"));
    rows
}

/// The run's own record keys: `run.e.<run>.>`, `program.e.<run>`, `notice.e.<run>.>`,
/// `migration.e.<run>.>`.
fn run_record_rows(sp: &Space, e: &str, run: &RunId) -> [String; 4] {
    let rec = &sp.records;
    [
        format!("$KV.{rec}.run.{e}.{run}.>"),
        format!("$KV.{rec}.program.{e}.{run}"),
        format!("$KV.{rec}.notice.{e}.{run}.>"),
        format!("$KV.{rec}.migration.{e}.{run}.>"),
    ]
}

/// `run-driver`: one run's driver for one takeover attempt — it appends the run's journal and
/// writes the run's own records, nothing else. Reads and effects live on the mediator.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `P.wfj.<run>` | the run's one journal subject; never `wfj.>` (F87) |
/// | 2 | pub | `$JS.API.CONSUMER.CREATE.WFJ_s.wfj_<run>_<tk>.P.wfj.<run>` | the per-takeover replay durable, filter pinned (F84) |
/// | 3 | pub | bind rows on `WFJ_s` / `wfj_<run>_<tk>`, `$JS.API.CONSUMER.DELETE.WFJ_s.wfj_<run>_<tk>` | replay from the top; deleted and recreated per takeover |
/// | 4 | pub | `$KV.cotal_records_s.run.e.<run>.>`, `….program.e.<run>`, `….notice.e.<run>.>`, `….migration.e.<run>.>` | the run's own records |
/// | 5 | pub | `$JS.API.INFO` | |
/// | 6 | sub | `inbox` | |
///
/// Keeps F84 (one authoritative appender per run subject), F87 (per run and per takeover, no
/// wildcard form) and F88 (no row on the admission store).
pub fn run_driver(b: &RunBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let e = b.endpoint.token();
    let caller = run_driver_caller(&b.run, &b.owner)?;
    let mut publish = vec![format!("{}.wfj.{}", sp.p, b.run)];
    publish.extend(journal_replay_rows(&sp, &b.run, &b.takeover));
    publish.extend(run_record_rows(&sp, e.as_str(), &b.run));
    publish.push("$JS.API.INFO".to_owned());
    let holder = Principal::new(caller.owner, caller.actor);
    assemble(
        RUN_DRIVER,
        &holder,
        b.ttl.seconds(),
        publish,
        vec![inbox(&b.conn)],
    )
}

/// `run-mediator`: the hosting manager's trusted per-run connection. It replays (never appends)
/// the journal to authorize each effect, re-reads the admission before every channel effect,
/// and performs the effects; it is never handed to the driver.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | replay rows of the driver (create, bind, delete; no journal publish) | authorize effects from the journal |
/// | 2 | pub | the run's own records (as the driver) and `$KV.cotal_records_s.cp.e.>` | mediated checkpoint writer (token-keyed: endpoint-wide residual) |
/// | 3 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_records_s` | records reads |
/// | 4 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_admission_s` | admission re-read before every channel effect (F88, SPEC §13.9 "Run admission read") |
/// | 5 | pub | `P.epf.e.cp.>`, `$JS.API.STREAM.MSG.GET.EPF_s` | checkpoint settle facts and their read |
/// | 6 | pub | `P.ept.e.iid.E.*.schedule`, `$JS.API.STREAM.MSG.GET.EPT_s` | timer schedules at this attempt's instance and epoch (F39) |
/// | 7 | pub | `$JS.API.STREAM.INFO.CHAT_s`, `…STREAM.MSG.GET.CHAT_s`, `…CONSUMER.{CREATE,INFO,MSG.NEXT,DELETE}.CHAT_s.>`, `$JS.ACK.CHAT_s.>` | channel waits (`wfw_<requestId>` durables) |
/// | 8 | pub | `$JS.API.STREAM.INFO.KV_cotal_presence_s`, `…CONSUMER.{CREATE,INFO,DELETE}.KV_cotal_presence_s.>`, `$JS.FC.>` | roster reads |
/// | 9 | pub | `$KV.cotal_channels_s.>`, `…STREAM.MSG.GET.KV_cotal_channels_s`, `$KV.cotal_members_s.>`, `…STREAM.MSG.GET.KV_cotal_members_s` | conclaves |
/// | 10 | pub | `P.ep.one.*.describe.<caller>.*` | resolve, as the run's caller |
/// | 11 | pub | `P.ep.one.manager.spawn.<caller>.*`, `….turn.owner.<o>.<caller>.*`, `….despawn.owner.<o>.<caller>.*` | seat lifecycle, owner mode pinned to the run owner |
/// | 12 | pub | `$JS.API.DIRECT.GET.EPC_s.P.epc.>`, `$JS.API.INFO` | contract fetch for resolve |
/// | 13 | sub | `P.ep.reply.*.*.*.<caller>.*`, `inbox` | the caller's own reply rail |
///
/// `<caller>` is [`run_driver_caller`]. Keeps F84 (reads the journal, cannot append), F88.
pub fn run_mediator(b: &RunBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let (p, rec) = (&sp.p, &sp.records);
    let e = b.endpoint.token();
    let (i, epoch) = (&b.instance, b.epoch);
    let caller = run_driver_caller(&b.run, &b.owner)?;
    let chat = sp.stream("CHAT");
    let presence = format!("KV_{}", sp.bucket("presence"));
    let channels = sp.bucket("channels");
    let members = sp.bucket("members");
    let o = &caller.owner;
    let mut publish = journal_replay_rows(&sp, &b.run, &b.takeover);
    publish.extend(run_record_rows(&sp, e.as_str(), &b.run));
    publish.extend([
        format!("$KV.{rec}.cp.{e}.>"),
        format!("$JS.API.STREAM.MSG.GET.KV_{rec}"),
        format!("$JS.API.STREAM.MSG.GET.KV_{}", sp.admission),
        format!("{p}.epf.{e}.cp.>"),
        format!("$JS.API.STREAM.MSG.GET.{}", sp.stream("EPF")),
        format!("{p}.ept.{e}.{i}.{epoch}.*.schedule"),
        format!("$JS.API.STREAM.MSG.GET.{}", sp.stream("EPT")),
        format!("$JS.API.STREAM.INFO.{chat}"),
        format!("$JS.API.STREAM.MSG.GET.{chat}"),
        format!("$JS.API.CONSUMER.CREATE.{chat}.>"),
        format!("$JS.API.CONSUMER.INFO.{chat}.>"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{chat}.>"),
        format!("$JS.API.CONSUMER.DELETE.{chat}.>"),
        format!("$JS.ACK.{chat}.>"),
        format!("$JS.API.STREAM.INFO.{presence}"),
        format!("$JS.API.CONSUMER.CREATE.{presence}.>"),
        format!("$JS.API.CONSUMER.INFO.{presence}.>"),
        format!("$JS.API.CONSUMER.DELETE.{presence}.>"),
        "$JS.FC.>".to_owned(),
        format!("$KV.{channels}.>"),
        format!("$JS.API.STREAM.MSG.GET.KV_{channels}"),
        format!("$KV.{members}.>"),
        format!("$JS.API.STREAM.MSG.GET.KV_{members}"),
        format!("{p}.ep.one.*.{DESCRIBE}.{caller}.*"),
        format!("{p}.ep.one.{MANAGER_ENDPOINT}.spawn.{caller}.*"),
        format!("{p}.ep.one.{MANAGER_ENDPOINT}.turn.owner.{o}.{caller}.*"),
        format!("{p}.ep.one.{MANAGER_ENDPOINT}.despawn.owner.{o}.{caller}.*"),
        sp.epc_fetch(),
        "$JS.API.INFO".to_owned(),
    ]);
    let sub = vec![caller_reply_filter(&sp, &caller), inbox(&b.conn)];
    let holder = Principal::new(caller.owner.clone(), caller.actor.clone());
    assemble(RUN_MEDIATOR, &holder, b.ttl.seconds(), publish, sub)
}

// ---- run-operator ---------------------------------------------------------------------------

/// Which served run call a `run-operator` credential is minted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOperatorScope {
    /// `run-ps`: walks run records, replays no journal, writes nothing.
    List,
    /// `run-status` (and the read half of `run-answer`): replays this run's journal.
    Status(RunId),
    /// The answering half of `run-answer`: files the answer and settles ONE checkpoint.
    Answer(CheckpointToken),
}

/// What a `run-operator` credential binds: one endpoint, one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOperatorBinding {
    pub space: SpaceName,
    /// `{owner, actor: request actor}`.
    pub principal: Principal,
    pub conn: ConnId,
    pub endpoint: EndpointName,
    /// Names this call's journal replay durable.
    pub takeover: TakeoverId,
    pub scope: RunOperatorScope,
}

/// `run-operator`: one served run-surface call on its own connection, so the serve rails never
/// carry a run's journal or records reach. 60 s.
///
/// | # | dir | row | when |
/// |---|-----|-----|------|
/// | 1 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_records_s` | always (point reads, consumer-free walk) |
/// | 2 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_admission_s` | always: the admission read (F88, SPEC §13.9 "Run admission read") |
/// | 3 | pub | replay rows on `WFJ_s` / `wfj_<run>_<tk>` (create, bind, delete) | `Status` |
/// | 4 | pub | `$KV.cotal_records_s.answer.e.<tok>.>`, `….cp.e.<tok>.>`, `P.epf.e.cp.<tok>`, `$JS.API.STREAM.MSG.GET.EPF_s` | `Answer`: every write pinned to the one pause |
/// | 5 | pub | `$JS.API.INFO` | always |
/// | 6 | sub | `inbox` | always |
///
/// Keeps F88 (reads the admission, writes none) and F87 (the replay durable is per call).
pub fn run_operator(b: &RunOperatorBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let (p, rec) = (&sp.p, &sp.records);
    let e = b.endpoint.token();
    let mut publish = vec![
        format!("$JS.API.STREAM.MSG.GET.KV_{rec}"),
        format!("$JS.API.STREAM.MSG.GET.KV_{}", sp.admission),
    ];
    match &b.scope {
        RunOperatorScope::List => {}
        RunOperatorScope::Status(run) => {
            publish.extend(journal_replay_rows(&sp, run, &b.takeover));
        }
        RunOperatorScope::Answer(tok) => publish.extend([
            format!("$KV.{rec}.answer.{e}.{tok}.>"),
            format!("$KV.{rec}.cp.{e}.{tok}.>"),
            format!("{p}.epf.{e}.cp.{tok}"),
            format!("$JS.API.STREAM.MSG.GET.{}", sp.stream("EPF")),
        ]),
    }
    publish.push("$JS.API.INFO".to_owned());
    assemble(
        RUN_OPERATOR,
        &b.principal,
        RUN_OPERATOR_TTL_SECS,
        publish,
        vec![inbox(&b.conn)],
    )
}

// ---- run-admitter ---------------------------------------------------------------------------

/// What a `run-admitter` credential binds: one run of one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAdmitterBinding {
    pub space: SpaceName,
    pub principal: Principal,
    pub conn: ConnId,
    pub endpoint: EndpointName,
    pub run: RunId,
}

/// `run-admitter`: the one-shot connection a run is admitted over. 60 s.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | KV client context |
/// | 2 | pub | `$KV.cotal_admission_s.admission.v1.e.<run>` | the admission, create-only |
/// | 3 | pub | `$KV.cotal_admission_s.revoked.v1.e.<run>` | its revocation marker, create-only |
/// | 4 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_admission_s` | create-conflict read-back |
/// | 5 | sub | `inbox` | |
///
/// Keeps F88 (admission is create-only and exists before the driver launches; two exact keys).
pub fn run_admitter(b: &RunAdmitterBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let adm = &sp.admission;
    let (e, run) = (b.endpoint.token(), &b.run);
    let publish = vec![
        "$JS.API.INFO".to_owned(),
        format!("$KV.{adm}.admission.v1.{e}.{run}"),
        format!("$KV.{adm}.revoked.v1.{e}.{run}"),
        format!("$JS.API.STREAM.MSG.GET.KV_{adm}"),
    ];
    assemble(
        RUN_ADMITTER,
        &b.principal,
        RUN_ADMITTER_TTL_SECS,
        publish,
        vec![inbox(&b.conn)],
    )
}

// ---- retirement-requester -------------------------------------------------------------------

/// What a `retirement-requester` credential binds: the requesting caller triple and ONE target
/// incarnation, both literal in the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetirementRequesterBinding {
    pub space: SpaceName,
    /// The requesting manager's own triple (its serve actor and lifecycle uid).
    pub caller: RailCaller,
    pub conn: ConnId,
    /// The one incarnation this credential may ask to retire.
    pub target: RailCaller,
}

/// `retirement-requester`: request + reply on the auth endpoint's rail and nothing else — it
/// only asks; the plane holds every executing right and re-checks the caller's serve gate at
/// serve time. Five minutes.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `P.ep.one.auth.retire-lifecycle.handle.<tO>.<tA>.<tUid>.<cO>.<cA>.<cUid>.*` | own triple, one target, the nonce the only wildcard |
/// | 2 | sub | `P.ep.reply.*.*.*.<cO>.<cA>.<cUid>.*` | own reply rail |
/// | 3 | sub | `inbox` | |
///
/// The target rides the subject as the `handle` triple, so a leaked requester cannot be
/// re-aimed (F4: a recycled alias names a different uid). No `$KV`, no `STREAM.`, no `>`.
pub fn retirement_requester(b: &RetirementRequesterBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let (t, c) = (&b.target, &b.caller);
    let publish = vec![format!(
        "{}.ep.one.{AUTH_ENDPOINT}.{RETIRE_LIFECYCLE}.handle.{t}.{c}.*",
        sp.p
    )];
    let sub = vec![caller_reply_filter(&sp, c), inbox(&b.conn)];
    let holder = Principal::new(c.owner.clone(), c.actor.clone());
    assemble(
        RETIREMENT_REQUESTER,
        &holder,
        ONE_SHOT_TTL_SECS,
        publish,
        sub,
    )
}

// ---- provisioner ----------------------------------------------------------------------------

/// What a `provisioner` credential binds: only its holder — it provisions the space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionerBinding {
    pub space: SpaceName,
    pub principal: Principal,
    pub conn: ConnId,
}

/// `provisioner`: the ephemeral onboarding authority — create-or-verify the space's streams and
/// buckets, pre-create agents' bind-only mailboxes, write read ACLs and the channel registry.
/// It never reads a mailbox body, never deletes or purges a stream. Five minutes.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | |
/// | 2 | pub | per stream `X` of the inventory below: `$JS.API.STREAM.CREATE.X`, `$JS.API.STREAM.INFO.X` | idempotent create-or-verify |
/// | 3 | pub | `$JS.API.STREAM.UPDATE.KV_cotal_{presence,delivery,manager}_s` | reconcile the TTL'd buckets' `max_age` |
/// | 4 | pub | for `DM_s`, `DLV_s`, `TASK_s`: `$JS.API.CONSUMER.CREATE.X.>`, `…CONSUMER.DURABLE.CREATE.X.>`, `…CONSUMER.INFO.X.>` | pre-create bind-only mailboxes (no MSG.NEXT/ACK: never reads a body) |
/// | 5 | pub | `$KV.cotal_acl_s.>`, `$KV.cotal_channels_s.>` | the two registries provisioning writes |
/// | 6 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_acl_s`, `$JS.API.DIRECT.GET.KV_cotal_acl_s.>`, same for `channels` | read-before-write of those registries |
/// | 7 | pub | `$JS.API.STREAM.UPDATE.KV_cotal_{records,issued,accepted,admission}_s` | one-time hardening of the authority stores |
/// | 8 | pub | `$JS.API.CONSUMER.{CREATE,INFO,DELETE}.KV_cotal_records_s.>` | the boot sweep's slot enumeration |
/// | 9 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_records_s`, `$JS.API.DIRECT.GET.KV_cotal_records_s.$KV.cotal_records_s.mgrslot.>` | slot reads |
/// | 10 | sub | `inbox` | |
///
/// Stream inventory, in order: `CHAT_s`, `DM_s`, `TASK_s`, `INBOX_s`, `DLV_s`,
/// `OBJ_cotal_artifacts_s`, `EPJ_s`, `EPF_s`, `EPE_s`, `EPT_REQ_s`, `EPR_s`, `EPT_s`, `EPW_s`,
/// `WFJ_s`, `EPC_s`, `KV_cotal_sessions_s`, `KV_cotal_records_s`, then `KV_cotal_<b>_s` for
/// `presence`, `channels`, `members`, `acl`, `membership`, `delivery`, `manager`.
///
/// Keeps F98: `KV_cotal_auth_s` is absent from the inventory (the reference lists it); the plane
/// ensures its own auth store, and no host profile holds any grant on that bucket.
pub fn provisioner(b: &ProvisionerBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let kv = |kind: &str| format!("KV_{}", sp.bucket(kind));
    let mut inventory: Vec<String> = ["CHAT", "DM", "TASK", "INBOX", "DLV"]
        .iter()
        .map(|f| sp.stream(f))
        .collect();
    inventory.push(format!("OBJ_{}", sp.bucket("artifacts")));
    inventory.extend(
        ["EPJ", "EPF", "EPE", "EPT_REQ", "EPR", "EPT", "EPW", "WFJ"]
            .iter()
            .map(|f| sp.stream(f)),
    );
    inventory.push(sp.epc.clone());
    inventory.push(kv("sessions"));
    inventory.push(format!("KV_{}", sp.records));
    inventory.extend(
        [
            "presence",
            "channels",
            "members",
            "acl",
            "membership",
            "delivery",
            "manager",
        ]
        .iter()
        .map(|k| kv(k)),
    );
    let mut publish = vec!["$JS.API.INFO".to_owned()];
    for x in &inventory {
        publish.push(format!("$JS.API.STREAM.CREATE.{x}"));
        publish.push(format!("$JS.API.STREAM.INFO.{x}"));
    }
    for k in ["presence", "delivery", "manager"] {
        publish.push(format!("$JS.API.STREAM.UPDATE.{}", kv(k)));
    }
    for f in ["DM", "DLV", "TASK"] {
        let x = sp.stream(f);
        publish.push(format!("$JS.API.CONSUMER.CREATE.{x}.>"));
        publish.push(format!("$JS.API.CONSUMER.DURABLE.CREATE.{x}.>"));
        publish.push(format!("$JS.API.CONSUMER.INFO.{x}.>"));
    }
    let (acl, channels) = (sp.bucket("acl"), sp.bucket("channels"));
    publish.push(format!("$KV.{acl}.>"));
    publish.push(format!("$KV.{channels}.>"));
    for bucket in [&acl, &channels] {
        publish.push(format!("$JS.API.STREAM.MSG.GET.KV_{bucket}"));
        publish.push(format!("$JS.API.DIRECT.GET.KV_{bucket}.>"));
    }
    for x in [
        format!("KV_{}", sp.records),
        kv("issued"),
        kv("accepted"),
        format!("KV_{}", sp.admission),
    ] {
        publish.push(format!("$JS.API.STREAM.UPDATE.{x}"));
    }
    let rec = &sp.records;
    publish.extend([
        format!("$JS.API.CONSUMER.CREATE.KV_{rec}.>"),
        format!("$JS.API.CONSUMER.INFO.KV_{rec}.>"),
        format!("$JS.API.CONSUMER.DELETE.KV_{rec}.>"),
        format!("$JS.API.STREAM.MSG.GET.KV_{rec}"),
        format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.mgrslot.>"),
    ]);
    assemble(
        PROVISIONER,
        &b.principal,
        ONE_SHOT_TTL_SECS,
        publish,
        vec![inbox(&b.conn)],
    )
}

// ---- deprovisioner --------------------------------------------------------------------------

/// What a `deprovisioner` credential binds: ONE departed incarnation's footprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeprovisionerBinding {
    pub space: SpaceName,
    /// The minting authority's principal (the credential's holder).
    pub principal: Principal,
    pub conn: ConnId,
    /// The incarnation torn down.
    pub target: Principal,
    pub target_uid: LifecycleUid,
    /// Concrete channels whose durable membership rows for the target are deleted.
    pub member_channels: Vec<Channel>,
}

/// `deprovisioner`: target-pinned teardown of one retired incarnation — its two bind-only
/// mailboxes, its read-ACL row and the membership rows of the channels named. Five minutes.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | |
/// | 2 | pub | `$JS.API.CONSUMER.DELETE.DM_s.dm_<o>-<a>-<uid>` | the DM mailbox, by exact lifecycle-keyed name |
/// | 3 | pub | `$JS.API.CONSUMER.DELETE.DLV_s.dlv_<o>-<a>-<uid>` | the delivery mailbox |
/// | 4 | pub | `$JS.API.STREAM.INFO.KV_cotal_acl_s`, `$KV.cotal_acl_s.<o>.<a>.<uid>` | the read-ACL row |
/// | 5 | pub | if channels: `$JS.API.STREAM.INFO.KV_cotal_members_s`, then per channel (sorted) `$KV.cotal_members_s.<ch>/<o>.<a>.<uid>` | one exact membership row each (Appendix B) |
/// | 6 | sub | `inbox` | |
///
/// Keeps F4: every name carries the target's lifecycle uid, so a replayed teardown is
/// broker-denied against a same-alias successor. It never reads a body, never touches a peer,
/// never deletes a stream or the role-shared `svc_<role>`.
pub fn deprovisioner(b: &DeprovisionerBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let t = &b.target;
    let uid = &b.target_uid;
    let name = format!("{}-{uid}", t.name());
    let acl = sp.bucket("acl");
    let mut publish = vec![
        "$JS.API.INFO".to_owned(),
        format!("$JS.API.CONSUMER.DELETE.{}.dm_{name}", sp.stream("DM")),
        format!("$JS.API.CONSUMER.DELETE.{}.dlv_{name}", sp.stream("DLV")),
        format!("$JS.API.STREAM.INFO.KV_{acl}"),
        format!("$KV.{acl}.{}.{uid}", t.key()),
    ];
    let channels: BTreeSet<&Channel> = b.member_channels.iter().collect();
    if !channels.is_empty() {
        let members = sp.bucket("members");
        publish.push(format!("$JS.API.STREAM.INFO.KV_{members}"));
        for ch in channels {
            publish.push(format!("$KV.{members}.{ch}/{}.{uid}", t.key()));
        }
    }
    assemble(
        DEPROVISIONER,
        &b.principal,
        ONE_SHOT_TTL_SECS,
        publish,
        vec![inbox(&b.conn)],
    )
}

// ---- registration executor ------------------------------------------------------------------

/// What a registration executor is minted for; only the lifetime differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorWindow {
    /// A registration or serve-mint window: [`ONE_SHOT_TTL_SECS`].
    Registration,
    /// A gate reconciliation (reference-auth-service §4.7): [`RECONCILE_EXECUTOR_TTL_SECS`].
    Reconcile,
}

/// What a registration executor binds: ONE endpoint instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationExecutorBinding {
    pub space: SpaceName,
    pub principal: Principal,
    pub conn: ConnId,
    pub endpoint: EndpointName,
    pub instance: InstanceId,
    pub window: ExecutorWindow,
}

/// `endpoint-serve-executor` (the registration executor): the plane's own one-shot connection
/// for one instance's registration ceremony and serve-mint fence. Every write names exactly this
/// instance's keys.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | |
/// | 2 | pub | `$KV.cotal_auth_s.epgate.e.iid` | gate provision, freeze/reopen CAS, mint finalize (F19–F23) |
/// | 3 | pub | `$KV.cotal_auth_s.eprepair.e.iid` | the one repair cursor |
/// | 4 | pub | `$KV.cotal_auth_s.epcred.e.iid.>` | the instance's ledger family: stage and revoke (F68) |
/// | 5 | pub | `$KV.cotal_records_s.svc.e.iid.spec`, `….svc.e.iid.status`, `….govern.e` | spec CAS, READY status, governance slot (F63, F64) |
/// | 6 | pub | `P.epc.*` | contract publication, one digest token |
/// | 7 | pub | `$JS.API.DIRECT.GET.EPC_s.P.epc.>`, `$JS.API.DIRECT.GET.EPC_s` | lost-create verify read of an artifact |
/// | 8 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_auth_s` | leader-served gate and row reads (F7; named serve-executor residual of F98) |
/// | 9 | pub | `$JS.API.DIRECT.GET.KV_cotal_records_s.$KV.cotal_records_s.<key>` for the keys of 5 | key-pinned reads |
/// | 10 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_records_s` | leader-served records reads (F8) |
/// | 11 | sub | `inbox` | |
///
/// Keeps F98: the reference's `CONSUMER.{CREATE,INFO,DELETE}` rows on `KV_cotal_auth_s` are
/// omitted — family enumeration belongs to the sealed scanner.
pub fn registration_executor(b: &RegistrationExecutorBinding) -> Result<Profile, EpError> {
    let ttl = match b.window {
        ExecutorWindow::Registration => ONE_SHOT_TTL_SECS,
        ExecutorWindow::Reconcile => RECONCILE_EXECUTOR_TTL_SECS,
    };
    assemble(
        REGISTRATION_EXECUTOR,
        &b.principal,
        ttl,
        registration_executor_rows(&b.space, &b.endpoint, &b.instance),
        vec![inbox(&b.conn)],
    )
}

/// The publish rows 1–10 of [`registration_executor`], unchecked; the plane's own registration
/// connection ([`crate::plane_grants::auth_registration`]) builds on exactly these.
pub(crate) fn registration_executor_rows(
    space: &SpaceName,
    endpoint: &EndpointName,
    instance: &InstanceId,
) -> Vec<String> {
    let sp = Space::new(space);
    let (p, auth, rec) = (&sp.p, &sp.auth, &sp.records);
    let (e, i) = (endpoint.token(), instance);
    let record_keys = [
        keys::svc_spec(endpoint, i),
        keys::svc_status(endpoint, i),
        keys::govern(endpoint),
    ];
    let mut publish = vec![
        "$JS.API.INFO".to_owned(),
        format!("$KV.{auth}.epgate.{e}.{i}"),
        format!("$KV.{auth}.eprepair.{e}.{i}"),
        format!("$KV.{auth}.epcred.{e}.{i}.>"),
    ];
    publish.extend(record_keys.iter().map(|k| format!("$KV.{rec}.{k}")));
    publish.push(format!("{p}.epc.*"));
    publish.push(sp.epc_fetch());
    publish.push(format!("$JS.API.DIRECT.GET.{}", sp.epc));
    publish.push(format!("$JS.API.STREAM.MSG.GET.KV_{auth}"));
    publish.extend(
        record_keys
            .iter()
            .map(|k| format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.{k}")),
    );
    publish.push(format!("$JS.API.STREAM.MSG.GET.KV_{rec}"));
    publish
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_checker_refuses_malformed_rows() {
        assert!(check_row("a.b.>", false).is_ok());
        assert!(check_row("a.*.c", false).is_ok());
        assert!(check_row("a.b.> q_1", true).is_ok());
        for bad in ["", "a..b", ".a", "a.", "a.>.b", "a.b*", "a.>x", "a b"] {
            assert!(check_row(bad, false).is_err(), "{bad:?}");
        }
        assert!(check_row("a.b.> q", false).is_err());
        assert!(check_row("a.b.> q.x", true).is_err());
        assert!(check_row("a.b.> ", true).is_err());
        let long = format!("a.{}", "b".repeat(MAX_SUBJECT_BYTES));
        let err = check_row(&long, false).unwrap_err();
        assert!(err.message.contains("1024"), "{}", err.message);
    }
}
