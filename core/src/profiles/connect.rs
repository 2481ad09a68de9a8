//! The connect-time profiles the NATS auth callout mints for a signed-in user or agent
//! (reference-auth-service §8.2, §8.4, §10.1): without a view, the core `agent` profile built from
//! the actor's ledger row; with a view, that view's own profile.
//!
//! Every builder here follows the conventions of [`super`]: a typed binding, a pure builder, rows
//! checked by the one row checker, a fixed row order documented in each table, and the principal
//! tags. Two things differ from the host profiles:
//!
//! * **The lifetime is the caller's.** A callout-minted JWT expires with the bearer that
//!   authorized it (§8.2 "`exp` = the bearer's `exp`"), so every binding carries a [`ConnectTtl`]
//!   computed from the bearer ([`ConnectTtl::until`]) instead of a profile constant.
//! * **The inbox is a client-chosen nonce.** The callout cannot know the per-connection nkey
//!   before the connection exists, so the client names its own inbox in `connect_opts.name`. That
//!   nonce is untrusted input and arrives as a [`ConnId`], whose grammar refuses `>`, `*`, `.`,
//!   whitespace and the empty string: `_INBOX_<nonce>.>` never spans another connection's inbox.
//!
//! Owners are derived `u_` owners only: user mode never mints for `local` or a platform owner
//! (reference `permissions.ts`: "user-mode owners are derived").
//!
//! Notation as in [`super`], plus `c` = the caller triple `<o>.<a>.<uid>` (the bearer's lifecycle
//! uid), `n` = the lifecycle name form `<o>-<a>-<uid>`, `reply(c)` = `P.ep.reply.*.*.*.c.*`.
//!
//! **Sources.** `packages/core/src/provision.ts` (`permissionsFor`'s `agent` arm and the
//! `admin`, `purger`, `channel-writer`, `channel-purger`, `deployer` builders),
//! `packages/core/src/subjects.ts` (the chat/inst/svc/ctl subject layout, `chathist_`/`dm_`/`dlv_`
//! names, bucket and stream names, the inbox grammar), `packages/core/src/endpoint-grants.ts` (the
//! Appendix-B baseline, the `spawn` capability set and the operator instrument sets) and
//! `implementations/auth/src/permissions.ts` (the callout's view dispatch) of `Cotal-AI/Cotal`.
//!
//! **Where this departs from the reference.**
//! * The `agent` profile grants the reference's ordered-watch rows as the reference release line
//!   does (`CONSUMER.{CREATE,INFO,DELETE}` with a `.>` tail on the presence and channel-registry
//!   buckets, and `$JS.FC.>`): a reference endpoint's `bindConnection` awaits `kv.watch()` on
//!   both buckets (both watches on by default) and fails its whole bind when the create is
//!   refused, so without them no reference agent connects. The residual is the reference's own: a
//!   consumer-create body names its `deliver_subject`, so the broker can be made to publish
//!   those buckets' rows into a subject of the creator's choosing, and a `.>` delete reaches a
//!   peer's watcher. The lifecycle-pinned watchers that would close it exist only in unreleased
//!   reference code.
//! * `channel-writer` holds no `STREAM.CREATE` on the channel bucket (the reference keeps it for a
//!   client's create-if-matching open): backing streams are created once at space setup, by
//!   provisioning, and no credential a bearer can obtain creates one.

use super::{
    assemble, bind_rows, caller_reply_filter, inbox, ConnId, Profile, RailCaller, Space,
    CONNECT_LIMITS, DESCRIBE, MANAGER_ENDPOINT, STANDING_TTL_MAX_SECS,
};
use crate::actors::row::{check_channel, is_role};
use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::issued::{AcceptedToken, IssuedGeneration};
use crate::jwt::{Permission, Permissions, UnixSeconds};
use crate::names::{EndpointToken, InstanceId, LifecycleUid, Principal, SessionId, SpaceName};
use crate::view::View;

// ---- Profile names (the JWT `name` label of the profile) -----------------------------------

pub const AGENT: &str = "agent";
pub const ADMIN: &str = "admin";
pub const PURGER: &str = "purger";
pub const CHANNEL_PURGER: &str = "channel-purger";
pub const CHANNEL_WRITER: &str = "channel-writer";
pub const DEPLOYER: &str = "deployer";
pub const MANAGER_CALLER: &str = "manager-caller";
pub const SESSION_CALLER: &str = "session-caller";

/// The read ACL an agent row with an empty `allowSubscribe` is minted (reference `agent` arm:
/// "Defaults to `[\"general\"]`").
const DEFAULT_READ_CHANNEL: &str = "general";
/// The delivery daemon's endpoint and control service name.
const DELIVERY: &str = "delivery";
/// The outer bound of a connect credential's lifetime; the bearer's own 900 s cap is the
/// bearer validator's to enforce.
pub const CONNECT_TTL_MAX_SECS: u64 = STANDING_TTL_MAX_SECS;

// ---- Lifetime -------------------------------------------------------------------------------

/// A connect credential's lifetime: what remains of the bearer that authorized it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectTtl(u64);

impl ConnectTtl {
    /// The lifetime that makes a credential issued at `now` expire exactly at the bearer's
    /// `expires_at`. Refuses an expired bearer and a lifetime over [`CONNECT_TTL_MAX_SECS`].
    pub fn until(now: UnixSeconds, expires_at: UnixSeconds) -> Result<Self, EpError> {
        let seconds = expires_at.0.checked_sub(now.0).filter(|s| *s > 0);
        let Some(seconds) = seconds else {
            return Err(EpError::permission_denied(format!(
                "the bearer expired at {} (now {}): an expired bearer is minted nothing",
                expires_at.0, now.0
            )));
        };
        if seconds > CONNECT_TTL_MAX_SECS {
            return Err(EpError::bad_request(format!(
                "connect credential lifetime {seconds} s is refused: it must be at most \
                 {CONNECT_TTL_MAX_SECS} s"
            )));
        }
        Ok(ConnectTtl(seconds))
    }

    pub const fn seconds(self) -> u64 {
        self.0
    }
}

// ---- Shared pieces --------------------------------------------------------------------------

/// Refuses a holder whose owner is not a derived `u_` owner.
fn require_derived(principal: &Principal) -> Result<(), EpError> {
    if principal.owner().as_derived().is_some() {
        return Ok(());
    }
    Err(EpError::permission_denied(format!(
        "principal {} is refused: the callout mints only for derived owners (u_ + 26 base32)",
        principal.key()
    )))
}

fn caller(principal: &Principal, uid: &LifecycleUid) -> RailCaller {
    RailCaller {
        owner: principal.owner().clone(),
        actor: principal.actor().clone(),
        uid: uid.clone(),
    }
}

/// The authz block of a request row (SPEC §13.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Untargeted: the command acts on the caller itself or creates.
    None,
    /// `self`.
    SelfMode,
    /// `owner.<o>`, pinned to the caller's own owner (a standing mint never names another).
    Owner,
    /// `any.*`: cross-owner reach, minted only into admin-authorized credentials.
    Any,
}

/// One endpoint command a caller may request.
#[derive(Debug, Clone, Copy)]
struct Cap {
    endpoint: &'static str,
    command: &'static str,
    /// `ps` scatters on `all` as well as `one`.
    scatter: bool,
    target: Target,
}

const fn cap(endpoint: &'static str, command: &'static str, target: Target) -> Cap {
    Cap {
        endpoint,
        command,
        scatter: false,
        target,
    }
}

/// The commands whose request submits a goal: the caller may follow its own goal's progress.
const GOAL_BEARING: [&str; 2] = ["spawn", "launch"];

/// Appendix B baseline beyond `describe`: the delivery daemon's join/leave/list and self stop.
const BASELINE: [Cap; 4] = [
    cap(DELIVERY, "join", Target::None),
    cap(DELIVERY, "leave", Target::None),
    cap(DELIVERY, "list", Target::None),
    cap(MANAGER_ENDPOINT, "stop", Target::SelfMode),
];

/// The `spawn` capability's additions: untargeted creation, owner-mode terminal and interactive
/// commands on the caller's own agents, the persona write and the status read.
const SPAWN: [Cap; 5] = [
    cap(MANAGER_ENDPOINT, "spawn", Target::None),
    cap(MANAGER_ENDPOINT, "despawn", Target::Owner),
    cap(MANAGER_ENDPOINT, "attach", Target::Owner),
    cap(MANAGER_ENDPOINT, "define-persona", Target::None),
    cap(MANAGER_ENDPOINT, "inspect", Target::None),
];

/// The manager reads, `spawn` and `define-persona`: the privileged operator instrument, which
/// carries no cross-owner row.
const INSTRUMENT_PRIVILEGED: [Cap; 6] = [
    cap(MANAGER_ENDPOINT, "status", Target::None),
    Cap {
        endpoint: MANAGER_ENDPOINT,
        command: "ps",
        scatter: true,
        target: Target::None,
    },
    cap(MANAGER_ENDPOINT, "inspect", Target::None),
    cap(MANAGER_ENDPOINT, "models", Target::None),
    cap(MANAGER_ENDPOINT, "spawn", Target::None),
    cap(MANAGER_ENDPOINT, "define-persona", Target::None),
];

/// What the admin instrument adds to the privileged one: any-mode despawn/attach and the
/// `manager.admin` command family.
const INSTRUMENT_ADMIN_EXTRA: [Cap; 10] = [
    cap(MANAGER_ENDPOINT, "despawn", Target::Any),
    cap(MANAGER_ENDPOINT, "attach", Target::Any),
    cap(MANAGER_ENDPOINT, "purge", Target::None),
    cap(MANAGER_ENDPOINT, "launch", Target::None),
    cap(MANAGER_ENDPOINT, "resume-preserved", Target::None),
    cap(MANAGER_ENDPOINT, "commit-resume", Target::None),
    cap(MANAGER_ENDPOINT, "finalize-resume", Target::None),
    cap(MANAGER_ENDPOINT, "prepare-preservation", Target::None),
    cap(MANAGER_ENDPOINT, "commit-preservation", Target::None),
    cap(MANAGER_ENDPOINT, "abort-preservation", Target::None),
];

/// The user-mode deployer's launch: untargeted, so the manager's owner-equality launch check
/// governs (reference `permissions.ts`: the deployer view rides the privileged tier).
const DEPLOYER_LAUNCH: Cap = cap(MANAGER_ENDPOINT, "launch", Target::None);

/// The caller rows of a capability set (SPEC §13.9 "Request publish", "Reply subscribe", "Live
/// event progress"): per capability and route `P.ep.<route>.<e>.<cmd>[.<authz>].c.*` — the
/// nonce the only wildcard — and, on the subscribe side, `reply(c)` plus one
/// `P.epe.<e>.*.*.goal.c.>` per endpoint holding a goal-bearing command.
fn caller_rows(sp: &Space, caps: &[Cap], c: &RailCaller) -> (Vec<String>, Vec<String>) {
    let p = &sp.p;
    let mut publish = Vec::new();
    let mut goal_endpoints: Vec<&str> = Vec::new();
    for k in caps {
        let authz = match k.target {
            Target::None => String::new(),
            Target::SelfMode => ".self".to_owned(),
            Target::Owner => format!(".owner.{}", c.owner),
            Target::Any => ".any.*".to_owned(),
        };
        let routes: &[&str] = if k.scatter { &["one", "all"] } else { &["one"] };
        for route in routes {
            publish.push(format!(
                "{p}.ep.{route}.{}.{}{authz}.{c}.*",
                k.endpoint, k.command
            ));
        }
        if GOAL_BEARING.contains(&k.command) && !goal_endpoints.contains(&k.endpoint) {
            goal_endpoints.push(k.endpoint);
        }
    }
    let mut subscribe = Vec::new();
    if !caps.is_empty() {
        subscribe.push(caller_reply_filter(sp, c));
    }
    subscribe.extend(
        goal_endpoints
            .iter()
            .map(|e| format!("{p}.epe.{e}.*.*.goal.{c}.>")),
    );
    (publish, subscribe)
}

/// The wildcard describe and the contract fetch every caller baseline carries (Appendix B,
/// SPEC §13.7): `P.ep.one.*.describe.c.*` and the subject-confined `DIRECT.GET` on `EPC_s`.
fn describe_rows(sp: &Space, c: &RailCaller) -> [String; 2] {
    [
        format!("{}.ep.one.*.{DESCRIBE}.{c}.*", sp.p),
        sp.epc_fetch(),
    ]
}

// ---- agent ----------------------------------------------------------------------------------

/// What the callout's `agent` profile binds: the actor's ledger row and the bearer's lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentBinding {
    pub space: SpaceName,
    /// The row's `owner.actor` (a derived owner).
    pub principal: Principal,
    /// The bearer's `act.lifecycleUid` (the ledger row's uid): keys every durable name.
    pub lifecycle_uid: LifecycleUid,
    /// The row's read ACL (channel patterns); empty reads `general`.
    pub allow_subscribe: Vec<String>,
    /// The row's post ACL (channel patterns); empty posts nowhere.
    pub allow_publish: Vec<String>,
    /// The row's role: binds the role's task queue `svc_<role>`.
    pub role: Option<String>,
    /// The bearer's `act.scope`: `spawn` and `admin` add caller rows.
    pub scope: Vec<String>,
    /// The client-chosen inbox nonce (`connect_opts.name`).
    pub conn_nonce: ConnId,
    pub ttl: ConnectTtl,
}

/// `agent`: an agent or a signed-in human on its own ledger row — post and read the channels
/// the row names, DM and anycast as itself, bind its own lifecycle's mailboxes, write its own
/// presence key, and call the endpoint baseline as its own caller triple.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | per `allowPublish` ch (row order): `P.chat.o.a.<ch>` | post as itself, only where declared (default-deny) |
/// | 2 | pub | `P.inst.*.*.o.a`, `P.svc.*.o.a` | DM any principal, anycast any role, sender slots pinned to itself |
/// | 3 | pub | `P.ctl.delivery.o.a` | durable join/leave/list requests to the delivery daemon |
/// | 4 | pub | `$JS.API.INFO` | |
/// | 5 | pub | `$JS.API.STREAM.INFO.` `CHAT_s`, `KV_cotal_presence_s`, `KV_cotal_channels_s` | join watermark and the public registries' metadata; never `DM_s`/`TASK_s` |
/// | 6 | pub | per `allowSubscribe` ch: `$JS.API.CONSUMER.CREATE.CHAT_s.chathist_n.P.chat.*.*.<ch>` | history reads: the create subject's filter token is pinned by the server to the body's filter, so history stays within the read ACL |
/// | 7 | pub | `$JS.API.CONSUMER.{INFO,MSG.NEXT,DELETE}.CHAT_s.chathist_n` | its own history consumer only |
/// | 8 | pub | bind rows on `DM_s` / `dm_n` | its own lifecycle's DM mailbox, bind-only |
/// | 9 | pub | bind rows on `DLV_s` / `dlv_n` | its own lifecycle's durable delivery, bind-only |
/// | 10 | pub | `$JS.API.CONSUMER.{CREATE,INFO,DELETE}.KV_cotal_presence_s.>`, `$JS.FC.>`, `$KV.cotal_presence_s.o.a` | the roster watch (an ordered consumer, rebuilt and cleaned up by the client) and its own presence key only |
/// | 11 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_channels_s`, `$JS.API.CONSUMER.{CREATE,INFO,DELETE}.KV_cotal_channels_s.>` | channel-registry point reads and watch |
/// | 12 | pub | `$JS.API.STREAM.INFO.KV_cotal_delivery_s`, `…STREAM.MSG.GET.KV_cotal_delivery_s` | delivery health, read-only |
/// | 13 | pub | with a role: bind rows on `TASK_s` / `svc_<role>` | its role's task queue, bind-only |
/// | 14 | pub | `P.ep.one.*.describe.c.*`, `$JS.API.DIRECT.GET.EPC_s.P.epc.>` | describe any endpoint, fetch its contract |
/// | 15 | pub | `P.ep.one.delivery.{join,leave,list}.c.*`, `P.ep.one.manager.stop.self.c.*` | the Appendix-B baseline |
/// | 16 | pub | with `spawn` in scope: `P.ep.one.manager.spawn.c.*`, `….{despawn,attach}.owner.o.c.*`, `….{define-persona,inspect}.c.*` | the spawn capability |
/// | 17 | pub | with `admin` in scope: the admin instrument set (as [`deployer`]'s reads plus `….{despawn,attach}.any.*.c.*` and the `manager.admin` family) | the admin capability mirrors the admin instrument |
/// | 18 | deny pub | `$JS.API.CONSUMER.CREATE.X`, `….CREATE.X.>`, `….DURABLE.CREATE.X.>` for `DM_s`, `TASK_s`, `DLV_s` | defence in depth over default-deny: no create path on a private mailbox |
/// | 19 | sub | `inbox` | |
/// | 20 | sub | `P.ctl.delivery.o.a.>` | the delivery daemon's replies |
/// | 21 | sub | per `allowSubscribe` ch: `P.chat.*.*.<ch>` | the live read |
/// | 22 | sub | `reply(c)`; with a goal-bearing capability `P.epe.manager.*.*.goal.c.>` | its own replies and its own goals' progress |
///
/// Keeps SPEC §13.1 (every durable name carries the lifecycle uid, so the credential cannot
/// bind a predecessor's or successor's mailbox), §13.2 (the caller triple is pinned in every
/// request row, the nonce the only wildcard) and §8 ("`STREAM.CREATE` is denied to agents").
/// A channel pattern is checked with the ledger's own channel grammar, so the minted subject is
/// the policy string verbatim (no rewritten token can alias another channel).
pub fn agent(b: &AgentBinding) -> Result<Profile, EpError> {
    require_derived(&b.principal)?;
    let default_read = [DEFAULT_READ_CHANNEL.to_owned()];
    let read: &[String] = if b.allow_subscribe.is_empty() {
        &default_read
    } else {
        &b.allow_subscribe
    };
    for ch in read.iter().chain(&b.allow_publish) {
        check_channel(ch).map_err(EpError::bad_request)?;
    }
    if let Some(role) = b.role.as_deref().filter(|r| !is_role(r)) {
        return Err(EpError::bad_request(format!(
            "role {role:?} is refused: it must be a plain token ([A-Za-z0-9_-])"
        )));
    }
    let sp = Space::new(&b.space);
    let p = &sp.p;
    let me = b.principal.key();
    let c = caller(&b.principal, &b.lifecycle_uid);
    let n = format!("{}-{}", b.principal.name(), b.lifecycle_uid);
    let (chat, dm, dlv, task) = (
        sp.stream("CHAT"),
        sp.stream("DM"),
        sp.stream("DLV"),
        sp.stream("TASK"),
    );
    let presence = sp.bucket("presence");
    let channels = sp.bucket("channels");
    let delivery = sp.bucket("delivery");
    let chathist = format!("chathist_{n}");
    let delivery_ctl = format!("{p}.ctl.{DELIVERY}.{me}");

    let mut publish: Vec<String> = b
        .allow_publish
        .iter()
        .map(|ch| format!("{p}.chat.{me}.{ch}"))
        .collect();
    publish.extend([
        format!("{p}.inst.*.*.{me}"),
        format!("{p}.svc.*.{me}"),
        delivery_ctl.clone(),
        "$JS.API.INFO".to_owned(),
        format!("$JS.API.STREAM.INFO.{chat}"),
        format!("$JS.API.STREAM.INFO.KV_{presence}"),
        format!("$JS.API.STREAM.INFO.KV_{channels}"),
    ]);
    publish.extend(
        read.iter()
            .map(|ch| format!("$JS.API.CONSUMER.CREATE.{chat}.{chathist}.{p}.chat.*.*.{ch}")),
    );
    publish.extend([
        format!("$JS.API.CONSUMER.INFO.{chat}.{chathist}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{chat}.{chathist}"),
        format!("$JS.API.CONSUMER.DELETE.{chat}.{chathist}"),
    ]);
    publish.extend(bind_rows(&dm, &format!("dm_{n}")));
    publish.extend(bind_rows(&dlv, &format!("dlv_{n}")));
    publish.extend([
        format!("$JS.API.CONSUMER.CREATE.KV_{presence}.>"),
        format!("$JS.API.CONSUMER.INFO.KV_{presence}.>"),
        format!("$JS.API.CONSUMER.DELETE.KV_{presence}.>"),
        "$JS.FC.>".to_owned(),
        format!("$KV.{presence}.{me}"),
        format!("$JS.API.STREAM.MSG.GET.KV_{channels}"),
        format!("$JS.API.CONSUMER.CREATE.KV_{channels}.>"),
        format!("$JS.API.CONSUMER.INFO.KV_{channels}.>"),
        format!("$JS.API.CONSUMER.DELETE.KV_{channels}.>"),
        format!("$JS.API.STREAM.INFO.KV_{delivery}"),
        format!("$JS.API.STREAM.MSG.GET.KV_{delivery}"),
    ]);
    if let Some(role) = &b.role {
        publish.extend(bind_rows(&task, &format!("svc_{role}")));
    }
    publish.extend(describe_rows(&sp, &c));
    let mut caps: Vec<Cap> = BASELINE.to_vec();
    if b.scope.iter().any(|s| s == "spawn") {
        caps.extend(SPAWN);
    }
    if b.scope.iter().any(|s| s == ADMIN) {
        caps.extend(INSTRUMENT_PRIVILEGED);
        caps.extend(INSTRUMENT_ADMIN_EXTRA);
    }
    let (ep_publish, ep_subscribe) = caller_rows(&sp, &caps, &c);
    publish.extend(ep_publish);

    let deny: Vec<String> = [&dm, &task, &dlv]
        .iter()
        .flat_map(|x| {
            [
                format!("$JS.API.CONSUMER.CREATE.{x}"),
                format!("$JS.API.CONSUMER.CREATE.{x}.>"),
                format!("$JS.API.CONSUMER.DURABLE.CREATE.{x}.>"),
            ]
        })
        .collect();

    let mut subscribe = vec![inbox(&b.conn_nonce), format!("{delivery_ctl}.>")];
    subscribe.extend(read.iter().map(|ch| format!("{p}.chat.*.*.{ch}")));
    subscribe.extend(ep_subscribe);

    let mut profile = assemble(
        AGENT,
        CONNECT_LIMITS,
        &b.principal,
        b.ttl.seconds(),
        publish,
        subscribe,
    )?;
    profile.permissions = with_publish_deny(profile.permissions, deny)?;
    Ok(profile)
}

/// Adds checked publish-deny rows to allow-only permissions.
fn with_publish_deny(p: Permissions, deny: Vec<String>) -> Result<Permissions, EpError> {
    Ok(Permissions {
        publish: Permission {
            allow: p.publish.allow,
            deny: super::checked_rows(deny, false)?,
        },
        ..p
    })
}

// ---- views ----------------------------------------------------------------------------------

/// What a view profile binds: the bearer's holder and the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewBinding {
    pub space: SpaceName,
    /// A derived owner's principal.
    pub principal: Principal,
    pub conn_nonce: ConnId,
    pub ttl: ConnectTtl,
}

/// What the `deployer` view binds: a view binding plus the bearer's lifecycle uid, which pins
/// its caller triple on the endpoint rails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployerBinding {
    pub view: ViewBinding,
    pub lifecycle_uid: LifecycleUid,
}

fn assemble_view(
    name: &'static str,
    b: &ViewBinding,
    publish: Vec<String>,
    subscribe: Vec<String>,
) -> Result<Profile, EpError> {
    require_derived(&b.principal)?;
    assemble(
        name,
        CONNECT_LIMITS,
        &b.principal,
        b.ttl.seconds(),
        publish,
        subscribe,
    )
}

/// Read verbs of a KV bucket read by key and enumerated or watched: existence, both point-read
/// forms, and the ordered consumer. No `$KV` publish, so no write.
fn kv_scan(stream: &str) -> [String; 5] {
    [
        format!("$JS.API.STREAM.INFO.{stream}"),
        format!("$JS.API.STREAM.MSG.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}.>"),
        format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
        format!("$JS.API.CONSUMER.INFO.{stream}.>"),
    ]
}

/// Read verbs of a KV bucket read by key only: existence and the two point-read forms.
fn kv_point_read(stream: &str) -> [String; 3] {
    [
        format!("$JS.API.STREAM.INFO.{stream}"),
        format!("$JS.API.STREAM.MSG.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}.>"),
    ]
}

/// `admin` (view `admin`, scope `admin`): the audit dashboard's read-only god-view over the
/// messaging plane — never the endpoint planes.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO`, `$JS.API.STREAM.INFO.CHAT_s`, `…STREAM.INFO.KV_cotal_presence_s` | |
/// | 2 | pub | `$JS.API.CONSUMER.CREATE.CHAT_s`, `….CREATE.CHAT_s.>`, `….{INFO,MSG.NEXT,DELETE}.CHAT_s.>`, `$JS.ACK.CHAT_s.>` | chat history (the bare create is the multi-filter ephemeral form) |
/// | 3 | pub | `$JS.API.CONSUMER.{CREATE,INFO,DELETE}.KV_cotal_presence_s.>` | roster watch and its rebuild cleanup |
/// | 4 | pub | `…STREAM.INFO.KV_cotal_channels_s`, `…STREAM.MSG.GET.KV_cotal_channels_s`, `…CONSUMER.{CREATE,INFO,DELETE}.KV_cotal_channels_s.>` | channel registry read and watch |
/// | 5 | pub | the same five rows on `KV_cotal_membership_s` | the derived membership feed, read-only |
/// | 6 | pub | `$JS.FC.>` | ordered-consumer flow control |
/// | 7 | pub | `…STREAM.INFO.DM_s`, `…CONSUMER.CREATE.DM_s`, `….CREATE.DM_s.>`, `….{INFO,MSG.NEXT,DELETE}.DM_s.>`, `$JS.ACK.DM_s.>` | DM history backfill: granted to this view only, never to an agent |
/// | 8 | sub | `P.chat.>`, `P.inst.>`, `P.svc.>`, `inbox` | the live tap over chat, DMs and anycast; the `ep*` planes are excluded |
///
/// No publish on any `P.` subject and no `$KV` write: it cannot post, forge or mutate. It holds
/// no row on the auth, records, sessions or admission stores (F98).
pub fn admin(b: &ViewBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let p = &sp.p;
    let chat = sp.stream("CHAT");
    let dm = sp.stream("DM");
    let presence = format!("KV_{}", sp.bucket("presence"));
    let channels = format!("KV_{}", sp.bucket("channels"));
    let membership = format!("KV_{}", sp.bucket("membership"));
    let mut publish = vec![
        "$JS.API.INFO".to_owned(),
        format!("$JS.API.STREAM.INFO.{chat}"),
        format!("$JS.API.STREAM.INFO.{presence}"),
        format!("$JS.API.CONSUMER.CREATE.{chat}"),
        format!("$JS.API.CONSUMER.CREATE.{chat}.>"),
        format!("$JS.API.CONSUMER.INFO.{chat}.>"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{chat}.>"),
        format!("$JS.API.CONSUMER.DELETE.{chat}.>"),
        format!("$JS.ACK.{chat}.>"),
        format!("$JS.API.CONSUMER.CREATE.{presence}.>"),
        format!("$JS.API.CONSUMER.INFO.{presence}.>"),
        format!("$JS.API.CONSUMER.DELETE.{presence}.>"),
    ];
    for kv in [&channels, &membership] {
        publish.extend([
            format!("$JS.API.STREAM.INFO.{kv}"),
            format!("$JS.API.STREAM.MSG.GET.{kv}"),
            format!("$JS.API.CONSUMER.CREATE.{kv}.>"),
            format!("$JS.API.CONSUMER.INFO.{kv}.>"),
            format!("$JS.API.CONSUMER.DELETE.{kv}.>"),
        ]);
    }
    publish.extend([
        "$JS.FC.>".to_owned(),
        format!("$JS.API.STREAM.INFO.{dm}"),
        format!("$JS.API.CONSUMER.CREATE.{dm}"),
        format!("$JS.API.CONSUMER.CREATE.{dm}.>"),
        format!("$JS.API.CONSUMER.INFO.{dm}.>"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{dm}.>"),
        format!("$JS.API.CONSUMER.DELETE.{dm}.>"),
        format!("$JS.ACK.{dm}.>"),
    ]);
    let subscribe = vec![
        format!("{p}.chat.>"),
        format!("{p}.inst.>"),
        format!("{p}.svc.>"),
        inbox(&b.conn_nonce),
    ];
    assemble_view(ADMIN, b, publish, subscribe)
}

/// `purger` (view `purger`, scope `admin`): history purge — it purges, it never reads.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | the purge needs no prior `STREAM.INFO` |
/// | 2 | pub | `$JS.API.STREAM.PURGE.CHAT_s`, `$JS.API.STREAM.PURGE.DM_s` | chat history, and DMs with `--dms` |
/// | 3 | sub | `inbox` | |
///
/// No consumer, no `MSG.GET`: a leaked purger drops history but reads no body.
pub fn purger(b: &ViewBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let publish = vec![
        "$JS.API.INFO".to_owned(),
        format!("$JS.API.STREAM.PURGE.{}", sp.stream("CHAT")),
        format!("$JS.API.STREAM.PURGE.{}", sp.stream("DM")),
    ];
    assemble_view(PURGER, b, publish, vec![inbox(&b.conn_nonce)])
}

/// The channel-registry rows [`channel_writer`] and [`channel_purger`] share: value writes on
/// the registry, its existence check and both point-read forms.
fn channel_registry_rows(sp: &Space) -> [String; 5] {
    let channels = sp.bucket("channels");
    [
        "$JS.API.INFO".to_owned(),
        format!("$KV.{channels}.>"),
        format!("$JS.API.STREAM.INFO.KV_{channels}"),
        format!("$JS.API.STREAM.MSG.GET.KV_{channels}"),
        format!("$JS.API.DIRECT.GET.KV_{channels}.>"),
    ]
}

/// `channel-writer` (view `channel-writer`, scope `admin`): edits the channel registry and
/// nothing else.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | |
/// | 2 | pub | `$KV.cotal_channels_s.>` | create, update or delete a channel's config key |
/// | 3 | pub | `$JS.API.STREAM.INFO.KV_cotal_channels_s` | bucket existence |
/// | 4 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_channels_s`, `$JS.API.DIRECT.GET.KV_cotal_channels_s.>` | read-before-write |
/// | 5 | sub | `inbox` | |
///
/// No stream data, no other bucket, no chat or DM; and (a departure, see the module) no
/// `STREAM.CREATE`.
pub fn channel_writer(b: &ViewBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let publish = channel_registry_rows(&sp).to_vec();
    assemble_view(CHANNEL_WRITER, b, publish, vec![inbox(&b.conn_nonce)])
}

/// `channel-purger` (view `channel-purger`, scope `admin`): deletes a channel — its registry
/// key and its chat messages.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1–4 | pub | the rows 1–4 of [`channel_writer`] | registry key delete and read-before-delete |
/// | 5 | pub | `$JS.API.STREAM.PURGE.CHAT_s` | drop the channel's messages |
/// | 6 | sub | `inbox` | |
pub fn channel_purger(b: &ViewBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let mut publish = channel_registry_rows(&sp).to_vec();
    publish.push(format!("$JS.API.STREAM.PURGE.{}", sp.stream("CHAT")));
    assemble_view(CHANNEL_PURGER, b, publish, vec![inbox(&b.conn_nonce)])
}

/// `deployer` (view `deployer`, scope `spawn`): a manifest deploy — read the live state and
/// launch over the manager's endpoint at the privileged tier, so the manager's owner-equality
/// launch authorization governs, never an any-mode reach.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | |
/// | 2 | pub | scan reads (`STREAM.INFO`, `STREAM.MSG.GET`, `DIRECT.GET ….>`, `CONSUMER.{CREATE,INFO} ….>`) on `KV_cotal_presence_s`, `KV_cotal_channels_s`, `KV_cotal_membership_s` | roster, channel registry, membership feed |
/// | 3 | pub | point reads (`STREAM.INFO`, `STREAM.MSG.GET`, `DIRECT.GET ….>`) on `KV_cotal_manager_s`, `KV_cotal_delivery_s` | manager readiness and delivery quiescence, no watch |
/// | 4 | pub | `$JS.FC.>` | |
/// | 5 | pub | `P.ep.one.*.describe.c.*`, `$JS.API.DIRECT.GET.EPC_s.P.epc.>` | resolve |
/// | 6 | pub | `P.ep.one.manager.{status,ps}.c.*`, `P.ep.all.manager.ps.c.*`, `P.ep.one.manager.{inspect,models,spawn,define-persona,launch}.c.*` | the privileged instrument plus an untargeted launch |
/// | 7 | sub | `inbox`, `reply(c)`, `P.epe.manager.*.*.goal.c.>` | replies and its own goals' progress |
///
/// No self-post, no `$KV` write, no stream administration, no mailbox create, no any-mode row.
pub fn deployer(b: &DeployerBinding) -> Result<Profile, EpError> {
    let v = &b.view;
    let sp = Space::new(&v.space);
    let c = caller(&v.principal, &b.lifecycle_uid);
    let kv = |kind: &str| format!("KV_{}", sp.bucket(kind));
    let mut publish = vec!["$JS.API.INFO".to_owned()];
    for k in ["presence", "channels", "membership"] {
        publish.extend(kv_scan(&kv(k)));
    }
    for k in ["manager", "delivery"] {
        publish.extend(kv_point_read(&kv(k)));
    }
    publish.push("$JS.FC.>".to_owned());
    publish.extend(describe_rows(&sp, &c));
    let mut caps = INSTRUMENT_PRIVILEGED.to_vec();
    caps.push(DEPLOYER_LAUNCH);
    let (ep_publish, ep_subscribe) = caller_rows(&sp, &caps, &c);
    publish.extend(ep_publish);
    let mut subscribe = vec![inbox(&v.conn_nonce)];
    subscribe.extend(ep_subscribe);
    assemble_view(DEPLOYER, v, publish, subscribe)
}

// ---- manager-caller -------------------------------------------------------------------------

/// What a `manager-caller` connection may ask its one manager instance: the privileged
/// instrument's reads and the run verbs a signed-in user drives (`run-answer` rides the `self`
/// target, as `cotal run answer` sends it). No creating, terminal or cross-owner command: the
/// view calls an instance the exchange and the callout both found to be the caller's own.
const MANAGER_CALLER_COMMANDS: [(&str, Target); 7] = [
    ("status", Target::None),
    ("ps", Target::None),
    ("inspect", Target::None),
    ("models", Target::None),
    ("run-start", Target::None),
    ("run-resume", Target::None),
    ("run-answer", Target::SelfMode),
];

/// The issuance a `manager-caller` connection carries (SPEC §13.15): the issuer's generation and
/// the token of the connection's accepted row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerIssuance {
    pub generation: IssuedGeneration,
    pub accepted: AcceptedToken,
}

/// What the `manager-caller` view binds: the bearer's holder and lifecycle, the manager instance
/// its `act.managerInstanceId` names, and — for an interactive row — the issuance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerCallerBinding {
    pub view: ViewBinding,
    pub lifecycle_uid: LifecycleUid,
    pub instance: InstanceId,
    /// `None` keeps the legacy rail (a managed row's view).
    pub issued: Option<CallerIssuance>,
}

/// `manager-caller` (view `manager-caller`, no required scope): a signed-in user's calls to the
/// one remote manager instance its bearer names, on the `ep.v1` rail with the issued generation
/// pinned beside the caller triple when the connection is an issuance.
///
/// `c` = the caller triple, `c'` = `c.<generation>` when issued, else `c`; `ep'` = `ep.v1` when
/// issued, else `ep`.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `P.ep'.one.*.describe.c'.*`, `$JS.API.DIRECT.GET.EPC_s.P.epc.>` | resolve and fetch the contract, on the same rail as every request |
/// | 2 | pub | when issued: `$JS.API.DIRECT.GET.KV_cotal_accepted_s.$KV.cotal_accepted_s.accepted.v1.<token>` | the client learns its generation from the issuer's row, nothing else on that store |
/// | 3 | pub | `P.ep'.inst.manager.<iid>.{status,ps,inspect,models,run-start,run-resume}.c'.*`, `P.ep'.inst.manager.<iid>.run-answer.self.c'.*` | the instrument reads and the run verbs, pinned to the instance |
/// | 4 | sub | `inbox`, `P.ep'.reply.*.*.*.c'.*` | replies |
///
/// Keeps F77: the request-publish and reply-subscribe rows carry the generation, so the
/// credential publishes under exactly the generation its evidence names, and a legacy
/// credential cannot publish on the versioned rail at all. The reference's own row set for this
/// view is not in the notes; this is its nearest real form (the instrument reads plus the run
/// verbs `cotal run` sends), and it holds no `$JS` write, no `$KV` row and no other instance.
pub fn manager_caller(b: &ManagerCallerBinding) -> Result<Profile, EpError> {
    let v = &b.view;
    let sp = Space::new(&v.space);
    let c = caller(&v.principal, &b.lifecycle_uid);
    let (rail, c) = match &b.issued {
        Some(i) => ("ep.v1", format!("{c}.{}", i.generation)),
        None => ("ep", c.to_string()),
    };
    let p = &sp.p;
    let mut publish = vec![format!("{p}.{rail}.one.*.{DESCRIBE}.{c}.*"), sp.epc_fetch()];
    if let Some(i) = &b.issued {
        publish.push(i.accepted.read_grant(&v.space));
    }
    for (command, target) in MANAGER_CALLER_COMMANDS {
        let authz = match target {
            Target::SelfMode => ".self",
            _ => "",
        };
        publish.push(format!(
            "{p}.{rail}.inst.{MANAGER_ENDPOINT}.{}.{command}{authz}.{c}.*",
            b.instance
        ));
    }
    let subscribe = vec![
        inbox(&v.conn_nonce),
        format!("{p}.{rail}.reply.*.*.*.{c}.*"),
    ];
    assemble_view(MANAGER_CALLER, v, publish, subscribe)
}

/// What the `session-caller` view binds: the bearer's holder and the one redeemed session its
/// check found the holder holds (reference §8.4), at the serving epoch the session is pinned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCallerBinding {
    pub view: ViewBinding,
    pub endpoint: EndpointToken,
    pub session: SessionId,
    pub epoch: ProcessEpoch,
}

/// `session-caller` (view `session-caller`, no required scope: the redeemed session is the
/// authority): the caller side of one session's byte rails, the exact mirror of
/// `session-serving`.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `P.eps.<e>.<sessionId>.<epoch>.in` | caller → serving, this session only |
/// | 2 | sub | `P.eps.<e>.<sessionId>.<epoch>.out` | serving → caller, this session only |
/// | 3 | sub | `inbox` | |
///
/// Keeps F73: the serving epoch rides the subject, so a restarted manager's new rails are not
/// this credential's. No `$JS`, no `$KV`, nothing of any other session.
pub fn session_caller(b: &SessionCallerBinding) -> Result<Profile, EpError> {
    let v = &b.view;
    let sp = Space::new(&v.space);
    let rail = format!("{}.eps.{}.{}.{}", sp.p, b.endpoint, b.session, b.epoch);
    assemble_view(
        SESSION_CALLER,
        v,
        vec![format!("{rail}.in")],
        vec![format!("{rail}.out"), inbox(&v.conn_nonce)],
    )
}

// ---- the view dispatch ----------------------------------------------------------------------

/// What the callout knows of a view bearer when it mints: enough for every view profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectViewBinding {
    pub view: ViewBinding,
    /// The bearer's `act.lifecycleUid` (used by `deployer`).
    pub lifecycle_uid: LifecycleUid,
    /// The bearer's `act.scope`.
    pub scope: Vec<String>,
}

/// The callout's view dispatch for the generic views of [`View`]'s table: re-asserts that the
/// bearer's own scope carries the view's required scope (defence in depth; the exchange and the
/// connect-time ledger read checked it first), then builds that view's profile. `manager-service`
/// is refused (reference §10.1: "it can never be a connect profile"); the views whose mint
/// re-checks an authority this pure builder does not hold are refused too.
pub fn view_profile(view: View, b: &ConnectViewBinding) -> Result<Profile, EpError> {
    type Build = fn(&ConnectViewBinding) -> Result<Profile, EpError>;
    let build: Build =
        match view {
            View::Admin => |b| admin(&b.view),
            View::Purger => |b| purger(&b.view),
            View::ChannelPurger => |b| channel_purger(&b.view),
            View::ChannelWriter => |b| channel_writer(&b.view),
            View::Deployer => |b| {
                deployer(&DeployerBinding {
                    view: b.view.clone(),
                    lifecycle_uid: b.lifecycle_uid.clone(),
                })
            },
            View::ManagerService => return Err(EpError::permission_denied(
                "view \"manager-service\" is refused at connect: it is not a generic profile and \
                 is never a connect profile (its authority is issued by the manager-service door)",
            )),
            View::ManagerCaller | View::SessionCaller | View::TransferWriter => {
                return Err(EpError::bad_request(format!(
                "view {:?} is not a generic connect profile: its credential is issued only after \
                 its own authority is re-checked at mint",
                view.as_str()
            )))
            }
        };
    let need = view.required_scope().unwrap_or(ADMIN);
    if !b.scope.iter().any(|s| s == need) {
        return Err(EpError::permission_denied(format!(
            "view {:?} needs scope {need:?} in the bearer's act.scope: nothing is minted",
            view.as_str()
        )));
    }
    build(b)
}
