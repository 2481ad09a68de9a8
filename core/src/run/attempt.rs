//! Run attempts (reference-auth-service §5.5, SPEC §14.4/§14.8, F84/F87/F88): a registered
//! manager asks for the driver/mediator pair of the *next* attempt of an admitted run, or for a
//! read-only operator. The machine decides and returns the grant; [`sign_attempt`] then signs
//! it (pure, no KV). KV round trips: 1 gate read + 2 admission reads (admission, revocation
//! marker) + 1 status read for an attempt; 1 (+2 with a run id) for an operator.

use nkeys::KeyPair;
use serde_json::{json, Value};

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::journal::{FencingToken, RunEpoch, RunId};
use crate::jwt::{self, UnixSeconds, UserNats, Validity};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{EndpointName, Principal};
use crate::profiles::{
    self, ConnId, Profile, RunBinding, RunOperatorBinding, RunOperatorScope, StandingTtl,
};

use super::admission::{read_run_admission, AdmissionView};
use super::admit::{authenticate_registered_manager, require_supervise, HostAuthority};
use super::request::{AttemptBody, AttemptSpec, OperatorSpec, RunAttemptRequest};
use super::status::observe_hosted_run;

/// The credentials an attempt decision grants, each for a caller-held nkey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptGrant {
    /// `run-driver` and `run-mediator`, standing TTL.
    Pair { driver: Profile, mediator: Profile },
    /// `run-operator`, 60 s.
    Operator(Profile),
}

/// The run attempt machine's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptDecision {
    pub grant: AttemptGrant,
}

/// One run attempt or run operator request, §5.5. See the module doc for round trips.
#[derive(Debug, Clone)]
pub struct RunAttempt {
    pub request: RunAttemptRequest,
    pub host: HostAuthority,
    /// The endpoint hosting the run (`manager`).
    pub endpoint: EndpointName,
    /// The driver pair's lifetime.
    pub standing_ttl: StandingTtl,
}

/// `admitted(runId)`: the admission exists and reads back at these coordinates
/// ([`read_run_admission`]), carries no revocation marker (F88: a revoked run is issued
/// nothing), and was admitted on this instance.
fn admitted(cx: &mut Ctx<'_>, a: &RunAttempt, run: &RunId) -> Result<AdmissionView, Halt> {
    let e = &a.request.registered.envelope;
    let view = read_run_admission(cx, &e.space, &a.endpoint, run)?;
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

fn binding_ids(run: &RunId, conn: &str) -> Result<(profiles::RunId, ConnId), EpError> {
    Ok((
        profiles::RunId::parse(run.as_str()).map_err(|e| EpError::internal(e.message))?,
        ConnId::parse(conn).map_err(|e| EpError::internal(e.message))?,
    ))
}

impl RunAttempt {
    /// The attempt branch (§5.5 item 3). Keeps F84: the attempt must carry exactly the next
    /// recorded epoch AND fencing token (1/1 with no record), so two attempts for one epoch
    /// cannot both be granted against the same status; and F88 via [`admitted`].
    fn attempt(
        &self,
        cx: &mut Ctx<'_>,
        spec: &AttemptSpec,
        process_epoch: ProcessEpoch,
    ) -> Result<AttemptGrant, Halt> {
        let run = &spec.run_id;
        let view = admitted(cx, self, run)?;
        if spec.served.is_some() {
            return Err(EpError::new(
                crate::ErrorCode::Unimplemented,
                "a served run-resume attempt needs the served-caller check against the \
                 registered manager contract (SPEC 14.8), which this plane does not perform yet; \
                 nothing was issued",
            )
            .into());
        }
        let status = observe_hosted_run(cx, &self.endpoint, run)?;
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
        let e = &self.request.registered.envelope;
        let owner = view.admission.caller().owner.clone();
        let pin = |conn: &str| -> Result<RunBinding, EpError> {
            let (_, conn) = binding_ids(run, conn)?;
            Ok(RunBinding {
                space: e.space.clone(),
                owner: owner.clone(),
                conn,
                endpoint: self.endpoint.clone(),
                run: profiles::RunId::parse(run.as_str())
                    .map_err(|e| EpError::internal(e.message))?,
                takeover: spec.takeover_id.clone(),
                instance: e.instance_id.clone(),
                epoch: process_epoch,
                ttl: self.standing_ttl,
            })
        };
        Ok(AttemptGrant::Pair {
            driver: profiles::run_driver(&pin(spec.driver_id.as_str())?)?,
            mediator: profiles::run_mediator(&pin(spec.mediator_id.as_str())?)?,
        })
    }

    /// The operator branch (§5.5 item 4): a named run must be admitted; an answering operator
    /// needs the run journal's open checkpoint, which is not modelled, so it is refused
    /// `unimplemented` before anything is issued.
    fn operator(&self, cx: &mut Ctx<'_>, spec: &OperatorSpec) -> Result<AttemptGrant, Halt> {
        if let Some(run) = &spec.run_id {
            admitted(cx, self, run)?;
        }
        if spec.answers.is_some() {
            return Err(EpError::new(
                crate::ErrorCode::Unimplemented,
                "an answering run operator needs the pause token from the run journal's open \
                 checkpoint (SPEC 14.8); this plane does not read run journals yet, so nothing \
                 was issued",
            )
            .into());
        }
        let e = &self.request.registered.envelope;
        let scope = match &spec.run_id {
            Some(run) => RunOperatorScope::Status(
                profiles::RunId::parse(run.as_str()).map_err(|e| EpError::internal(e.message))?,
            ),
            None => RunOperatorScope::List,
        };
        let conn = ConnId::parse(spec.id.as_str()).map_err(|e| EpError::internal(e.message))?;
        Ok(AttemptGrant::Operator(profiles::run_operator(
            &RunOperatorBinding {
                space: e.space.clone(),
                principal: Principal::new(self.host.owner.clone(), e.actor.clone()),
                conn,
                endpoint: self.endpoint.clone(),
                takeover: spec.takeover_id.clone(),
                scope,
            },
        )?))
    }
}

impl Script for RunAttempt {
    type Output = AttemptDecision;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<AttemptDecision, Halt> {
        require_supervise(&self.host, "manager run attempt")?;
        let observed = authenticate_registered_manager(
            cx,
            &self.request.registered,
            &self.host,
            "run attempt",
        )?;
        let grant = match &self.request.body {
            AttemptBody::Attempt(spec) => self.attempt(cx, spec, observed.gate.process_epoch())?,
            AttemptBody::Operator(spec) => self.operator(cx, spec)?,
        };
        Ok(AttemptDecision { grant })
    }
}

/// One signed credential `{jwt, exp}` (exp in unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedJwt {
    pub jwt: String,
    pub exp: u64,
}

fn sign(
    profile: &Profile,
    signer: &KeyPair,
    account: &str,
    user: &str,
    now: UnixSeconds,
) -> Result<IssuedJwt, EpError> {
    let exp = now.0.checked_add(profile.ttl_seconds).ok_or_else(|| {
        EpError::bad_request("the credential's expiry overflows the unix-seconds range")
    })?;
    let nats = UserNats {
        permissions: profile.permissions.clone(),
        tags: profile.tags.clone(),
        ..UserNats::default()
    };
    let validity = Validity {
        issued_at: now,
        expires_at: Some(UnixSeconds(exp)),
    };
    let jwt = jwt::user_jwt(signer, account, user, profile.name, &nats, validity)?;
    Ok(IssuedJwt { jwt, exp })
}

/// Signs the granted profiles for the request's caller-held nkeys and builds the closed §5.5
/// response `{v:1, kind:"manager-run-attempt", space, owner, actor, instanceId,
/// managerLifecycleUid, requestId, registrationProof, accountPublicKey, processEpoch,
/// identities, attempt | operator, credentials: {driver, mediator} | {operator}}`. Run
/// credentials carry no ledger row and pass no gate release (the reference signs them after the
/// checks above), so this signs directly rather than through a fence.
pub fn sign_attempt(
    request: &RunAttemptRequest,
    owner: &crate::names::OwnerToken,
    decision: &AttemptDecision,
    signer: &KeyPair,
    now: UnixSeconds,
) -> Result<Value, EpError> {
    let r = &request.registered;
    let e = &r.envelope;
    let account = r.account_public_key.as_str();
    let cred = |c: &IssuedJwt| json!({"jwt": c.jwt, "exp": c.exp});
    let (body_key, body, credentials) = match (&request.body, &decision.grant) {
        (AttemptBody::Attempt(a), AttemptGrant::Pair { driver, mediator }) => {
            let d = sign(driver, signer, account, a.driver_id.as_str(), now)?;
            let m = sign(mediator, signer, account, a.mediator_id.as_str(), now)?;
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
            let c = sign(profile, signer, account, o.id.as_str(), now)?;
            let mut body = json!({"id": o.id.as_str(), "takeoverId": o.takeover_id.as_str()});
            if let Some(map) = body.as_object_mut() {
                if let Some(run) = &o.run_id {
                    map.insert("runId".into(), run.as_str().into());
                }
                if let Some(t) = &o.answers {
                    let mut answers = json!({"runId": t.run_id.as_str(), "stepKey": t.step_key});
                    if let (true, Some(am)) = (t.amend, answers.as_object_mut()) {
                        am.insert("amend".into(), true.into());
                    }
                    map.insert("answers".into(), answers);
                }
                if let Some(served) = &o.served {
                    map.insert("served".into(), served.as_str().into());
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
