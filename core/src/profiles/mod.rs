//! The permission profiles the plane mints: one pure builder per profile, from a typed binding to
//! the exact NATS `pub`/`sub` rows, the principal tags and the lifetime (SPEC §13.9, Appendix B;
//! reference-auth-service §4.4, §5.3, §5.5, §6.3). The connect-time profiles the auth callout
//! mints for bearers (§8.4: `agent` and the views) live in the `connect` submodule; the host
//! profiles live by domain in `manager` (the hosted endpoint's and the remote manager's own),
//! `run` (a run's), `lifecycle` (provisioning and retiring an incarnation) and `executor` (the
//! registration executor), on the value types of `binding` and the row kit of `rows`. Every one
//! is re-exported here.
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

use crate::error::EpError;
use crate::jwt::{self, NatsLimits, Permissions, UnixSeconds, UserNats, Validity};
use crate::names::Principal;

mod binding;
mod connect;
mod executor;
mod lifecycle;
mod manager;
mod rows;
mod run;

pub use crate::names::SessionId;
pub use binding::{
    Channel, CheckpointToken, ConnId, PoolToken, RailCaller, RunId, StandingTtl, TakeoverId,
};
pub use connect::{
    admin, agent, channel_purger, channel_writer, deployer, manager_caller, purger, session_caller,
    view_profile, AgentBinding, CallerIssuance, ConnectTtl, ConnectViewBinding, DeployerBinding,
    ManagerCallerBinding, SessionCallerBinding, ViewBinding, ADMIN, AGENT, CHANNEL_PURGER,
    CHANNEL_WRITER, CONNECT_TTL_MAX_SECS, DEPLOYER, MANAGER_CALLER, PURGER,
};
pub(crate) use executor::registration_executor_rows;
pub use executor::{registration_executor, ExecutorWindow, RegistrationExecutorBinding};
pub use lifecycle::{
    deprovisioner, provisioner, retirement_requester, DeprovisionerBinding, ProvisionerBinding,
    RetirementRequesterBinding,
};
pub use manager::{
    endpoint_serve, goal_writer, remote_manager, remote_manager_actor, session_ledger,
    session_serving, GoalWriterBinding, ManagerRole, RemoteManagerBinding, ServeBinding,
    SessionLedgerBinding, SessionServingBinding,
};
use rows::{assemble, bind_rows, caller_reply_filter, checked_rows, Space};
pub(crate) use rows::{checked_permissions, inbox};
pub use run::{
    run_admitter, run_driver, run_driver_caller, run_mediator, run_operator, RunAdmitterBinding,
    RunBinding, RunOperatorBinding, RunOperatorScope,
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

// ---- Per-connection limits ------------------------------------------------------------------

/// nats-server's default `max_payload` (1 MiB): the largest message a minted user may publish.
/// The server refuses a larger publish whatever the JWT says unless its operator raised
/// `max_payload`; stating it in the JWT keeps the bound when they do.
pub const MAX_PAYLOAD_BYTES: i64 = 1024 * 1024;
/// The `data` budget every minted user carries: 1 GiB. nats-server 2.15 applies a user's `subs`
/// and `payload` to its connection but not its `data`, so this value is a declared budget for
/// audits and a future server, never unlimited.
pub const DATA_BUDGET_BYTES: i64 = 1024 * 1024 * 1024;

/// The per-connection limits of the callout's connect profiles (`agent` and every view): what a
/// bearer — a reference client among them — connects with. The limits are finite so that no
/// bearer-held connection can hold unbounded server state; they are generous so that ordinary
/// use never meets them: a reference agent or manager client holds a few dozen subscriptions
/// (its inbox, its channels, its KV watches and consumers), far below 4,096, and publishes
/// envelopes far below the 1 MiB payload.
///
/// nats-server (since 2.11) does not apply a callout-minted JWT's own limits: it drops that JWT
/// once it has read the permissions. What holds a callout-admitted connection is the data
/// account's per-connection ceiling, [`HOST_LIMITS`], which provisioning writes into the account
/// JWT; these values are what the plane states for the connection.
pub const CONNECT_LIMITS: NatsLimits = NatsLimits {
    subs: 4096,
    data: DATA_BUDGET_BYTES,
    payload: MAX_PAYLOAD_BYTES,
};
/// The per-connection limits of the host profiles and the plane's own users (the hosted
/// endpoint and manager, runs, provisioning, the plane's KV and callout connections): the same
/// payload and data budgets as [`CONNECT_LIMITS`], and four times the subscriptions, since one
/// hosted manager connection serves many sessions and runs at once.
pub const HOST_LIMITS: NatsLimits = NatsLimits {
    subs: 16_384,
    data: DATA_BUDGET_BYTES,
    payload: MAX_PAYLOAD_BYTES,
};

/// The user claims of a connection the plane or its CLI opens for itself with bare `permissions`
/// (a plane-grant row set, not a profile): those permissions under [`HOST_LIMITS`], so no user
/// JWT the plane mints is unlimited.
pub fn host_user(permissions: Permissions) -> UserNats {
    UserNats {
        permissions,
        limits: HOST_LIMITS,
        ..UserNats::default()
    }
}

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
    /// The connection's `subs`/`data`/`payload` limits: [`CONNECT_LIMITS`] or [`HOST_LIMITS`],
    /// always finite.
    pub limits: NatsLimits,
}

impl Profile {
    /// The JWT claims this profile carries when issued at `now`: its permissions, tags and
    /// limits, valid for its lifetime. The expiry is `validity.expires_at`.
    pub fn claims(&self, now: UnixSeconds) -> Result<(UserNats, Validity), EpError> {
        let exp = now.0.checked_add(self.ttl_seconds).ok_or_else(|| {
            EpError::bad_request("the credential's expiry overflows the unix-seconds range")
        })?;
        let nats = UserNats {
            permissions: self.permissions.clone(),
            tags: self.tags.clone(),
            limits: self.limits,
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
