//! Run attempts (reference-auth-service §5.5, SPEC §14.4/§14.8, F84/F87/F88): a registered
//! manager asks for the driver/mediator pair of the *next* attempt of an admitted run, or for a
//! run operator. The machines decide and return the grant; [`sign_attempt`] then signs it (pure,
//! no KV).
//!
//! A request carrying `served` (a forwarded run-resume, or the run-answer of an answering
//! operator) is split like admission, because the host's one-shot observation of the served
//! subject must be consumed between the phases: [`AuthorizeRunAttempt`] authenticates the
//! manager, checks the admission and the served subject and reads the registered declaration of
//! the served command; the adapter then takes the observation, resolves the caller's issued
//! evidence and, for an answer, reads the run journal's checkpoint at the step; and
//! [`IssueRunAttempt`] decides. [`RunAttempt`] is the one-shot door for requests without
//! `served`/`answers`.
//!
//! KV round trips on the model: phase one 1 gate read + 2 admission reads (admission, revocation
//! marker) per named run + (with `served`) 1 spec read and 2 artifact reads per registered
//! closure; phase two 1 status read for an attempt, 0 for an operator. So a plain attempt is 4,
//! a served resume against a one-closure manager 7, an answering operator 6.

use nkeys::KeyPair;
use serde_json::{json, Value};

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::issuance::GateObservation;
use crate::journal::{FencingToken, RunEpoch, RunId};
use crate::jwt::UnixSeconds;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{EndpointName, OwnerToken, Principal};
use crate::profiles::{
    self, ConnId, IssuedCredential, Profile, RunBinding, RunOperatorBinding, RunOperatorScope,
    StandingTtl,
};

use super::admission::{read_run_admission, AdmissionView};
use super::admit::authenticate_registered_manager;
use super::checkpoint::{pause_token, JournalCheckpoint};
use super::observed::ObservedRunRequest;
use super::request::{
    AttemptBody, AttemptSpec, OperatorAnswers, OperatorAsk, OperatorSpec, RunAttemptRequest,
};
use super::served::{
    authorize_served_caller, registered_run_command, Forwarded, ServedCall, ServedScope,
};
use super::status::observe_hosted_run;
use crate::issued::IssuedEvidence;
use crate::manager::door::RUN_ATTEMPT;
use crate::manager::{ManagerHost, Supervisor};

/// The credentials an attempt decision grants, each for a caller-held nkey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptGrant {
    /// `run-driver` and `run-mediator`, standing TTL.
    Pair { driver: Profile, mediator: Profile },
    /// `run-operator`, 60 s.
    Operator(Profile),
}

/// The run attempt machines' output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptDecision {
    pub grant: AttemptGrant,
}

/// `admitted(runId)`: the admission exists and reads back at these coordinates
/// ([`read_run_admission`]), carries no revocation marker (F88: a revoked run is issued
/// nothing), and was admitted on this instance.
fn admitted(
    cx: &mut Ctx<'_>,
    request: &RunAttemptRequest,
    endpoint: &EndpointName,
    run: &RunId,
) -> Result<AdmissionView, Halt> {
    let e = &request.registered.envelope;
    let view = read_run_admission(cx, &e.space, endpoint, run)?;
    if view.revoked.is_some() {
        return Err(EpError::permission_denied(format!(
            "run {} was revoked; a revoked run is issued nothing (SPEC 14.8)",
            run.as_str()
        ))
        .into());
    }
    if view.admission.instance_id() != &e.instance_id {
        return Err(EpError::permission_denied(format!(
            "run {} was admitted on another manager instance or endpoint",
            run.as_str()
        ))
        .into());
    }
    Ok(view)
}

fn profile_run(run: &RunId) -> Result<profiles::RunId, EpError> {
    profiles::RunId::parse(run.as_str()).map_err(|e| EpError::internal(e.message))
}

fn conn(id: &str) -> Result<ConnId, EpError> {
    ConnId::parse(id).map_err(|e| EpError::internal(e.message))
}

/// Phase one of §5.5 (see the module doc): `supervise`; the registered manager (keeping the
/// gate's process epoch and registration revision); `admitted` for every run the request names;
/// for a served resume or answer, the served subject's shape and the registered manager's
/// declaration of the command at the gate's registration revision. An answering operator
/// without `served` is refused here (`permission-denied` "an answering run operator carries the
/// served run-answer subject…"). Keeps F88 (an unadmitted or revoked run gets nothing) and F91
/// (owner, instance, lifecycle and current registration re-checked). Writes nothing.
#[derive(Debug, Clone)]
pub struct AuthorizeRunAttempt {
    pub request: RunAttemptRequest,
    /// The host; its standing lifetime is the driver pair's.
    pub host: ManagerHost,
    pub holder: Supervisor,
    /// The endpoint hosting the run (`manager`).
    pub endpoint: EndpointName,
}

/// What every authorized attempt carries into its issue step.
#[derive(Debug, Clone)]
struct Authorized {
    request: RunAttemptRequest,
    holder: Supervisor,
    endpoint: EndpointName,
    standing_ttl: StandingTtl,
    process_epoch: ProcessEpoch,
}

/// A run attempt request whose manager, admissions and served subject were authorized, by what
/// its issue step still needs. Only [`AuthorizeRunAttempt`] makes one, so each variant's `issue`
/// takes exactly the inputs the adapter must gather for it and no others.
#[derive(Debug, Clone)]
pub enum AuthorizedAttempt {
    /// An attempt without a served caller, or a read operator: nothing more to gather.
    Plain(PlainAttempt),
    /// A forwarded run-resume attempt: the served subject's observation and its caller's
    /// issued evidence.
    Served(ServedAttempt),
    /// An answering operator: its served run-answer's observation and evidence, and the run
    /// journal's checkpoint at the answered step.
    Answering(AnsweringAttempt),
}

impl AuthorizedAttempt {
    pub fn request(&self) -> &RunAttemptRequest {
        match self {
            AuthorizedAttempt::Plain(a) => &a.authorized.request,
            AuthorizedAttempt::Served(a) => &a.authorized.request,
            AuthorizedAttempt::Answering(a) => &a.authorized.request,
        }
    }
}

/// What a plain attempt issues for.
#[derive(Debug, Clone)]
enum PlainBody {
    /// A driver pair for the admission's caller owner.
    Attempt {
        spec: AttemptSpec,
        run_owner: OwnerToken,
    },
    /// A read operator (no `answers`).
    Read(OperatorSpec),
}

/// [`AuthorizedAttempt::Plain`].
#[derive(Debug, Clone)]
pub struct PlainAttempt {
    authorized: Authorized,
    body: PlainBody,
}

impl PlainAttempt {
    pub fn issue(self) -> IssueRunAttempt {
        let step = match self.body {
            PlainBody::Attempt { spec, run_owner } => IssueStep::Attempt {
                spec,
                run_owner,
                served: None,
            },
            PlainBody::Read(spec) => IssueStep::Read(spec),
        };
        IssueRunAttempt {
            authorized: self.authorized,
            step,
        }
    }
}

/// [`AuthorizedAttempt::Served`].
#[derive(Debug, Clone)]
pub struct ServedAttempt {
    authorized: Authorized,
    spec: AttemptSpec,
    run_owner: OwnerToken,
    call: ServedCall,
}

impl ServedAttempt {
    /// The served call whose subject the adapter takes the observation of (once) and whose
    /// caller's issued evidence it resolves.
    pub fn call(&self) -> &ServedCall {
        &self.call
    }

    pub fn issue(self, inputs: ServedInputs) -> IssueRunAttempt {
        IssueRunAttempt {
            authorized: self.authorized,
            step: IssueStep::Attempt {
                spec: self.spec,
                run_owner: self.run_owner,
                served: Some((self.call, inputs)),
            },
        }
    }
}

/// [`AuthorizedAttempt::Answering`].
#[derive(Debug, Clone)]
pub struct AnsweringAttempt {
    authorized: Authorized,
    spec: OperatorSpec,
    answers: OperatorAnswers,
    call: ServedCall,
}

impl AnsweringAttempt {
    /// The served run-answer call (see [`ServedAttempt::call`]).
    pub fn call(&self) -> &ServedCall {
        &self.call
    }

    /// The pause an answering operator settles: the adapter reads the run journal's checkpoint
    /// at this run and step.
    pub fn answers(&self) -> &OperatorAnswers {
        &self.answers
    }

    /// `checkpoint` is the journal's checkpoint at the answered step, or the read's failure.
    pub fn issue(
        self,
        inputs: ServedInputs,
        checkpoint: Result<Option<JournalCheckpoint>, EpError>,
    ) -> IssueRunAttempt {
        IssueRunAttempt {
            authorized: self.authorized,
            step: IssueStep::Answer {
                spec: self.spec,
                answers: self.answers,
                call: self.call,
                inputs,
                checkpoint,
            },
        }
    }
}

impl AuthorizeRunAttempt {
    fn served_call(
        &self,
        cx: &mut Ctx<'_>,
        served: &str,
        forwarded: Forwarded<'_>,
        run_owner: OwnerToken,
        observed: &GateObservation,
    ) -> Result<ServedCall, Halt> {
        let e = &self.request.registered.envelope;
        let scope = ServedScope {
            space: &e.space,
            endpoint: &self.endpoint,
            instance: &e.instance_id,
            process_epoch: observed.gate.process_epoch(),
        };
        ServedCall::check_subject(served, forwarded, &scope, run_owner, |command| {
            registered_run_command(
                cx,
                &self.endpoint,
                &e.instance_id,
                self.holder.owner(),
                observed.gate.registration_revision(),
                command,
            )
        })
    }
}

impl Script for AuthorizeRunAttempt {
    type Output = AuthorizedAttempt;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<AuthorizedAttempt, Halt> {
        self.holder.require_supervise("manager run attempt")?;
        let (r, endpoint) = (&self.request, &self.endpoint);
        let observed = authenticate_registered_manager(
            cx,
            &RUN_ATTEMPT,
            &r.registered,
            &self.host,
            &self.holder,
        )?;
        let authorized = Authorized {
            request: r.clone(),
            holder: self.holder.clone(),
            endpoint: endpoint.clone(),
            standing_ttl: self.host.standing_ttl,
            process_epoch: observed.gate.process_epoch(),
        };
        Ok(match &r.body {
            AttemptBody::Attempt(spec) => {
                let view = admitted(cx, r, endpoint, &spec.run_id)?;
                let run_owner = view.admission.caller().owner.clone();
                match &spec.served {
                    None => AuthorizedAttempt::Plain(PlainAttempt {
                        authorized,
                        body: PlainBody::Attempt {
                            spec: spec.clone(),
                            run_owner,
                        },
                    }),
                    Some(s) => {
                        let forwarded = Forwarded::Resume(&spec.run_id);
                        let call =
                            self.served_call(cx, s, forwarded, run_owner.clone(), &observed)?;
                        AuthorizedAttempt::Served(ServedAttempt {
                            authorized,
                            spec: spec.clone(),
                            run_owner,
                            call,
                        })
                    }
                }
            }
            AttemptBody::Operator(spec) => match &spec.ask {
                OperatorAsk::Read { run_id } => {
                    if let Some(run) = run_id {
                        admitted(cx, r, endpoint, run)?;
                    }
                    AuthorizedAttempt::Plain(PlainAttempt {
                        authorized,
                        body: PlainBody::Read(spec.clone()),
                    })
                }
                OperatorAsk::Answer { answers: t, served } => {
                    admitted(cx, r, endpoint, &t.run_id)?;
                    let served = served.as_deref().ok_or_else(|| {
                        EpError::permission_denied(
                            "an answering run operator carries the served run-answer subject of \
                             the caller it answers for (SPEC 14.8)",
                        )
                    })?;
                    let forwarded = Forwarded::Answer {
                        run_id: &t.run_id,
                        step_key: &t.step_key,
                        amend: t.amend,
                    };
                    // An answer's run owner is the manager's registered owner.
                    let owner = self.holder.owner().clone();
                    let call = self.served_call(cx, served, forwarded, owner, &observed)?;
                    AuthorizedAttempt::Answering(AnsweringAttempt {
                        authorized,
                        spec: spec.clone(),
                        answers: t.clone(),
                        call,
                    })
                }
            },
        })
    }
}

/// What the adapter gathered for a served call: what `ObservedRunRequests::take(subject, now)`
/// returned, and the issued store's answer for the subject's caller (or its refusal: forged,
/// revoked, dead source).
#[derive(Debug, Clone)]
pub struct ServedInputs {
    pub observed: Option<ObservedRunRequest>,
    pub evidence: Result<IssuedEvidence, EpError>,
}

/// What an issue step decides on, with exactly the inputs gathered for it.
#[derive(Debug, Clone)]
enum IssueStep {
    Attempt {
        spec: AttemptSpec,
        run_owner: OwnerToken,
        served: Option<(ServedCall, ServedInputs)>,
    },
    Read(OperatorSpec),
    Answer {
        spec: OperatorSpec,
        answers: OperatorAnswers,
        call: ServedCall,
        inputs: ServedInputs,
        checkpoint: Result<Option<JournalCheckpoint>, EpError>,
    },
}

/// Phase two of §5.5, made by an [`AuthorizedAttempt`]'s `issue` with the inputs it needs:
/// * **attempt**: the served caller (if any) is authorized for `run-resume` with run owner =
///   the admission's caller owner ([`authorize_served_caller`]); then the run status: a
///   terminal run gets no new attempt (`failed-precondition`), and the attempt must carry exactly
///   the next recorded epoch AND fencing token, 1/1 with no record (`conflict`; F84: two
///   attempts for one epoch cannot both be granted against the same status). Grants
///   `run-driver` + `run-mediator` pinned to the run, takeover, instance and process epoch.
/// * **operator**: an answer's pause token is read off the journal checkpoint ([`pause_token`]:
///   `waiting` to answer, `resumed` with an accepted answer to amend, else
///   `failed-precondition`), never off the request; then its served `run-answer` caller is
///   authorized with run owner = the manager's registered owner. Grants `run-operator` scoped
///   to the one pause (`answers: {token}`), the named run's status, or the run list.
///
/// Keeps F84, F87 (one driver per run and takeover), F88.
#[derive(Debug, Clone)]
pub struct IssueRunAttempt {
    authorized: Authorized,
    step: IssueStep,
}

impl IssueRunAttempt {
    fn attempt(
        &self,
        cx: &mut Ctx<'_>,
        spec: &AttemptSpec,
        owner: &OwnerToken,
        served: Option<&(ServedCall, ServedInputs)>,
    ) -> Result<AttemptGrant, Halt> {
        let a = &self.authorized;
        if let Some((call, inputs)) = served {
            authorize_served_caller(call, inputs.observed.as_ref(), &inputs.evidence)?;
        }
        let run = &spec.run_id;
        let status = observe_hosted_run(cx, &a.endpoint, run)?;
        if let Some(s) = status.as_ref().filter(|s| s.state.is_terminal()) {
            return Err(EpError::failed_precondition(format!(
                "run {} is {}; a terminal run gets no new attempt",
                run.as_str(),
                s.state
            ))
            .into());
        }
        let (epoch, token) = status.as_ref().map_or((RunEpoch(0), FencingToken(0)), |s| {
            (s.epoch, s.fencing_token)
        });
        let next = (epoch.0.checked_add(1), token.0.checked_add(1));
        if next != (Some(spec.epoch.0), Some(spec.fencing_token.0)) {
            return Err(EpError::conflict(format!(
                "run {} attempt must be the next recorded epoch/fencing token: asked {}/{}, \
                 recorded {}/{}",
                run.as_str(),
                spec.epoch.0,
                spec.fencing_token.0,
                epoch.0,
                token.0
            ))
            .into());
        }
        let e = &a.request.registered.envelope;
        let pin = |id: &str| -> Result<RunBinding, EpError> {
            Ok(RunBinding {
                space: e.space.clone(),
                owner: owner.clone(),
                conn: conn(id)?,
                endpoint: a.endpoint.clone(),
                run: profile_run(run)?,
                takeover: spec.takeover_id.clone(),
                instance: e.instance_id.clone(),
                epoch: a.process_epoch,
                ttl: a.standing_ttl,
            })
        };
        Ok(AttemptGrant::Pair {
            driver: profiles::run_driver(&pin(spec.driver_id.as_str())?)?,
            mediator: profiles::run_mediator(&pin(spec.mediator_id.as_str())?)?,
        })
    }

    fn operator(
        &self,
        spec: &OperatorSpec,
        scope: RunOperatorScope,
    ) -> Result<AttemptGrant, EpError> {
        let a = &self.authorized;
        let e = &a.request.registered.envelope;
        Ok(AttemptGrant::Operator(profiles::run_operator(
            &RunOperatorBinding {
                space: e.space.clone(),
                principal: Principal::new(a.holder.owner().clone(), e.actor.clone()),
                conn: conn(spec.id.as_str())?,
                endpoint: a.endpoint.clone(),
                takeover: spec.takeover_id.clone(),
                scope,
            },
        )?))
    }
}

impl Script for IssueRunAttempt {
    type Output = AttemptDecision;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<AttemptDecision, Halt> {
        let grant = match &self.step {
            IssueStep::Attempt {
                spec,
                run_owner,
                served,
            } => self.attempt(cx, spec, run_owner, served.as_ref())?,
            IssueStep::Read(spec) => {
                let scope = match &spec.ask {
                    OperatorAsk::Read { run_id: Some(run) } => {
                        RunOperatorScope::Status(profile_run(run)?)
                    }
                    OperatorAsk::Read { run_id: None } => RunOperatorScope::List,
                    OperatorAsk::Answer { .. } => {
                        return Err(EpError::internal(
                            "an answering operator reached the read operator's issuance",
                        )
                        .into())
                    }
                };
                self.operator(spec, scope)?
            }
            IssueStep::Answer {
                spec,
                answers,
                call,
                inputs,
                checkpoint,
            } => {
                let token = pause_token(checkpoint, answers)?;
                authorize_served_caller(call, inputs.observed.as_ref(), &inputs.evidence)?;
                self.operator(spec, RunOperatorScope::Answer(token))?
            }
        };
        Ok(AttemptDecision { grant })
    }
}

/// One run attempt or read operator, §5.5, in one go: [`AuthorizeRunAttempt`] then the plain
/// issue step. A request carrying `served` or `answers` needs the observation, the caller's
/// evidence and the journal checkpoint only the adapter gathers between the phases, so this door
/// refuses it before anything is read or issued.
#[derive(Debug, Clone)]
pub struct RunAttempt {
    pub request: RunAttemptRequest,
    /// The host; its standing lifetime is the driver pair's.
    pub host: ManagerHost,
    pub holder: Supervisor,
    /// The endpoint hosting the run (`manager`).
    pub endpoint: EndpointName,
}

impl Script for RunAttempt {
    type Output = AttemptDecision;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<AttemptDecision, Halt> {
        self.holder.require_supervise("manager run attempt")?;
        let needs_inputs = match &self.request.body {
            AttemptBody::Attempt(a) => a.served.is_some(),
            AttemptBody::Operator(o) => matches!(o.ask, OperatorAsk::Answer { .. }),
        };
        if needs_inputs {
            return Err(served_needs_phases().into());
        }
        let authorized = AuthorizeRunAttempt {
            request: self.request.clone(),
            host: self.host.clone(),
            holder: self.holder.clone(),
            endpoint: self.endpoint.clone(),
        }
        .run(cx)?;
        match authorized {
            AuthorizedAttempt::Plain(plain) => plain.issue().run(cx),
            AuthorizedAttempt::Served(_) | AuthorizedAttempt::Answering(_) => {
                Err(served_needs_phases().into())
            }
        }
    }
}

fn served_needs_phases() -> EpError {
    EpError::new(
        crate::ErrorCode::Unimplemented,
        "a served run-resume or an answering operator needs the observed request, the caller's \
         issued evidence and the run journal's open checkpoint, which only the \
         AuthorizeRunAttempt / IssueRunAttempt phases take; nothing was issued",
    )
}

/// Signs the granted profiles for the request's caller-held nkeys and builds the closed §5.5
/// response `{v:1, kind:"manager-run-attempt", space, owner, actor, instanceId,
/// managerLifecycleUid, requestId, registrationProof, accountPublicKey, processEpoch,
/// identities, attempt | operator, credentials: {driver, mediator} | {operator}}`. Run
/// credentials carry no ledger row and pass no gate release (the reference signs them after the
/// checks above), so this signs directly rather than through a fence.
pub fn sign_attempt(
    request: &RunAttemptRequest,
    owner: &OwnerToken,
    decision: &AttemptDecision,
    signer: &KeyPair,
    now: UnixSeconds,
) -> Result<Value, EpError> {
    let r = &request.registered;
    let e = &r.envelope;
    let account = r.account_public_key.as_str();
    let cred = |c: &IssuedCredential| json!({"jwt": c.jwt, "exp": c.exp});
    let (body_key, body, credentials) = match (&request.body, &decision.grant) {
        (AttemptBody::Attempt(a), AttemptGrant::Pair { driver, mediator }) => {
            let d = driver.sign_for(signer, account, a.driver_id.as_str(), now)?;
            let m = mediator.sign_for(signer, account, a.mediator_id.as_str(), now)?;
            let mut body = json!({
                "runId": a.run_id.as_str(),
                "takeoverId": a.takeover_id.as_str(),
                "epoch": a.epoch.0,
                "fencingToken": a.fencing_token.0,
                "driverId": a.driver_id.as_str(),
                "mediatorId": a.mediator_id.as_str(),
            });
            if let (Some(served), Some(map)) = (&a.served, body.as_object_mut()) {
                map.insert("served".into(), served.as_str().into());
            }
            (
                "attempt",
                body,
                json!({"driver": cred(&d), "mediator": cred(&m)}),
            )
        }
        (AttemptBody::Operator(o), AttemptGrant::Operator(profile)) => {
            let c = profile.sign_for(signer, account, o.id.as_str(), now)?;
            let mut body = json!({"id": o.id.as_str(), "takeoverId": o.takeover_id.as_str()});
            if let Some(map) = body.as_object_mut() {
                match &o.ask {
                    OperatorAsk::Read { run_id } => {
                        if let Some(run) = run_id {
                            map.insert("runId".into(), run.as_str().into());
                        }
                    }
                    OperatorAsk::Answer { answers: t, served } => {
                        let mut answers =
                            json!({"runId": t.run_id.as_str(), "stepKey": t.step_key});
                        if let (true, Some(am)) = (t.amend, answers.as_object_mut()) {
                            am.insert("amend".into(), true.into());
                        }
                        map.insert("answers".into(), answers);
                        if let Some(served) = served {
                            map.insert("served".into(), served.as_str().into());
                        }
                    }
                }
            }
            ("operator", body, json!({"operator": cred(&c)}))
        }
        _ => {
            return Err(EpError::internal(
                "a run attempt decision does not match its request's kind",
            ))
        }
    };
    let ids = &e.identities;
    let mut out = json!({
        "v": 1,
        "kind": "manager-run-attempt",
        "space": e.space.as_str(),
        "owner": owner.as_str(),
        "actor": e.actor.as_str(),
        "instanceId": e.instance_id.as_str(),
        "managerLifecycleUid": e.manager_lifecycle_uid.as_str(),
        "requestId": e.request_id.as_str(),
        "registrationProof": r.registration_proof.as_str(),
        "accountPublicKey": account,
        "processEpoch": r.process_epoch.0,
        "identities": {
            "supervisor": {"id": ids.supervisor.as_str()},
            "executor": {"id": ids.executor.as_str()},
            "serve": {"id": ids.serve.as_str()},
            "goalWriter": {"id": ids.goal_writer.as_str()},
            "sessionLedger": {"id": ids.session_ledger.as_str()},
        },
    });
    if let Some(map) = out.as_object_mut() {
        map.insert(body_key.into(), body);
        map.insert("credentials".into(), credentials);
    }
    Ok(out)
}
