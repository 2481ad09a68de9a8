//! The run credentials (reference-auth-service §5.5): the run-driver and run-mediator pair of one
//! run attempt, the run-operator of one served run call, and the run-admitter of one admission.

use sha2::{Digest as _, Sha256};

use super::{
    assemble, bind_rows, caller_reply_filter, inbox, CheckpointToken, ConnId, Profile, RailCaller,
    RunId, Space, StandingTtl, TakeoverId, DESCRIBE, HOST_LIMITS, MANAGER_ENDPOINT, RUN_ADMITTER,
    RUN_ADMITTER_TTL_SECS, RUN_DRIVER, RUN_MEDIATOR, RUN_OPERATOR, RUN_OPERATOR_TTL_SECS,
};
use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::names::{
    ActorToken, EndpointName, InstanceId, LifecycleUid, OwnerToken, Principal, SpaceName,
};

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
        HOST_LIMITS,
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
    assemble(
        RUN_MEDIATOR,
        HOST_LIMITS,
        &holder,
        b.ttl.seconds(),
        publish,
        sub,
    )
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
        HOST_LIMITS,
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
        HOST_LIMITS,
        &b.principal,
        RUN_ADMITTER_TTL_SECS,
        publish,
        vec![inbox(&b.conn)],
    )
}
