//! The manager's own credentials: the endpoint-serve, goal-writer, session-ledger and
//! session-serving profiles of a hosted endpoint, and the remote manager's base credential.

use std::collections::BTreeSet;

use super::executor::RegistrationRows;
use super::{
    assemble, bind_rows, inbox, ConnId, PoolToken, Profile, SessionId, Space, StandingTtl,
    DESCRIBE, ENDPOINT_SERVE, GOAL_WRITER, HOST_LIMITS, MANAGER_ENDPOINT,
    MANAGER_EXECUTOR_TTL_SECS, REMOTE_MANAGER, SESSION_LEDGER, SESSION_SERVING,
    SESSION_TTL_MAX_SECS,
};
use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::issuance::ServeGrant;
use crate::names::{
    ActorToken, CommandToken, EndpointName, InstanceId, OwnerToken, Principal, SpaceName,
};

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
    assemble(
        ENDPOINT_SERVE,
        HOST_LIMITS,
        &holder,
        b.ttl.seconds(),
        publish,
        sub,
    )
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
    assemble(
        GOAL_WRITER,
        HOST_LIMITS,
        &b.principal,
        b.ttl.seconds(),
        publish,
        sub,
    )
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
        HOST_LIMITS,
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
        HOST_LIMITS,
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
    let auth = &sp.auth;
    let i = &b.instance;
    let actor = remote_manager_actor(b.role, i)?;
    let holder = Principal::new(b.owner.clone(), actor);
    let manager = sp.bucket("manager");
    let presence = sp.bucket("presence");
    let manager_endpoint = EndpointName::parse(MANAGER_ENDPOINT)?;
    let e = manager_endpoint.token();
    let executor = b.role == ManagerRole::Executor;
    let reg = RegistrationRows::new(&sp, &manager_endpoint, i);
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
        publish.extend(reg.gate);
    }
    publish.extend(reg.records);
    publish.extend(reg.contract);
    if executor {
        publish.extend([
            format!("$JS.API.STREAM.MSG.GET.KV_{auth}"),
            format!("$JS.API.CONSUMER.CREATE.KV_{auth}.*.$KV.{auth}.epcred.{e}.{i}.>"),
            format!("$JS.API.CONSUMER.INFO.KV_{auth}.>"),
            format!("$JS.API.CONSUMER.DELETE.KV_{auth}.>"),
        ]);
    }
    publish.extend(reg.record_reads);
    let ttl = match b.role {
        ManagerRole::Supervisor(ttl) => ttl.seconds(),
        ManagerRole::Executor => MANAGER_EXECUTOR_TTL_SECS,
    };
    assemble(
        REMOTE_MANAGER,
        HOST_LIMITS,
        &holder,
        ttl,
        publish,
        vec![inbox(&b.conn)],
    )
}
