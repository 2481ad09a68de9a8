//! Run admission (reference-auth-service §5.3, SPEC §14.8, F88) as two machines, because the
//! host's one-shot observation must be consumed *between* them, exactly where the reference
//! consumes it: after the registered manager and its forwarded subject are authenticated, before
//! anything else. [`AuthorizeRunAdmission`] (1 KV round trip: the gate) yields an
//! [`AuthorizedAdmission`] naming the subject to take; the adapter takes the observation and
//! resolves the caller's issued evidence; [`AdmitRun`] (1 round trip: the create; +1 read-back
//! when the create is lost or ambiguous) decides and writes. Nothing is written on any refusal.

use crate::error::EpError;
use crate::issuance::GateObservation;
use crate::machine::{Ctx, Halt, Script};
use crate::manager::door::{check_registered, Door, Knock, Presented, RUN_ADMISSION};
use crate::manager::{ManagerHost, Supervisor};
use crate::names::{keys, EndpointName};

use super::admission::{
    create_settled, AdmissionParts, Created, Provenance, RunAdmission, RunCaller,
};
use super::observed::{ObservedRunRequest, RunRequestOperation};
use super::request::{RegisteredRun, RunAdmissionRequest};
use super::subject::{parse_request_subject, RequestSubject, Route};
use crate::issued::{IssuedEvidence, IssuedRef};
use crate::kv::Revision;

/// A run door's registered-manager check: the request's space and account are the host's, and
/// its manager is registered at the request's process epoch with the presented HMAC proof
/// ([`check_registered`]). Keeps F91: a run door re-checks owner, instance, lifecycle and the
/// current gate registration before issuing anything. One KV round trip.
pub(crate) fn authenticate_registered_manager(
    cx: &mut Ctx<'_>,
    door: &Door,
    r: &RegisteredRun,
    host: &ManagerHost,
    holder: &Supervisor,
) -> Result<GateObservation, Halt> {
    let knock = Knock {
        envelope: &r.envelope,
        owner: holder.owner(),
        account: Some(&r.account_public_key),
        epoch: Some(r.process_epoch),
        proof: Presented::Current(&r.registration_proof),
    };
    check_registered(cx, door, host, &knock)
}

/// An admission forward whose manager, gate and subject were authenticated. Only
/// [`AuthorizeRunAdmission`] makes one.
#[derive(Debug, Clone)]
pub struct AuthorizedAdmission {
    request: RunAdmissionRequest,
    holder: Supervisor,
    endpoint: EndpointName,
    subject: RequestSubject,
}

impl AuthorizedAdmission {
    /// The exact subject whose observation the adapter must take (once) before [`AdmitRun`].
    pub fn subject(&self) -> &str {
        &self.request.subject
    }

    pub fn request(&self) -> &RunAdmissionRequest {
        &self.request
    }

    /// The authenticated forward's subject as this phase parsed it: the caller whose issued
    /// evidence the adapter resolves ([`RequestSubject::issued_ref`], F88).
    pub fn caller(&self) -> &RequestSubject {
        &self.subject
    }
}

/// Phase one of §5.3: `supervise`, the registered manager, and the forwarded subject — a
/// `cotal.<space>.` **v1** request-plane `run-start` of `endpoint`, untargeted, on this instance
/// when instance-routed, with an issued caller — else `permission-denied` "manager run admission
/// needs the served v1 run-start subject of this space, endpoint and instance with an issued
/// caller". One KV round trip; writes nothing.
#[derive(Debug, Clone)]
pub struct AuthorizeRunAdmission {
    pub request: RunAdmissionRequest,
    pub host: ManagerHost,
    pub holder: Supervisor,
    /// The endpoint hosting the run (`manager`).
    pub endpoint: EndpointName,
}

impl Script for AuthorizeRunAdmission {
    type Output = AuthorizedAdmission;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<AuthorizedAdmission, Halt> {
        self.holder.require_supervise("manager run admission")?;
        let r = &self.request;
        authenticate_registered_manager(
            cx,
            &RUN_ADMISSION,
            &r.registered,
            &self.host,
            &self.holder,
        )?;
        let space = &r.registered.envelope.space;
        let instance = &r.registered.envelope.instance_id;
        let subject = parse_request_subject(&r.subject).filter(|s| {
            r.subject.starts_with(&format!("cotal.{space}."))
                && s.v1
                && s.endpoint == self.endpoint.token()
                && s.command == "run-start"
                && s.target.is_none()
                && match &s.route {
                    Route::Inst(iid) => iid == instance,
                    Route::One | Route::All => true,
                }
                && s.generation.is_some()
        });
        let subject = subject.ok_or_else(|| {
            EpError::permission_denied(
                "manager run admission needs the served v1 run-start subject of this space, \
                 endpoint and instance with an issued caller",
            )
        })?;
        Ok(AuthorizedAdmission {
            request: r.clone(),
            holder: self.holder.clone(),
            endpoint: self.endpoint.clone(),
            subject,
        })
    }
}

/// The admission result `{v:1, kind:"manager-run-admission", requestId, runId, revision,
/// admission}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionOutcome {
    pub revision: Revision,
    pub admission: RunAdmission,
    /// `false` when an identical earlier admission was returned unchanged (an exact retry).
    pub created: bool,
}

impl AdmissionOutcome {
    /// The route's answer to `request`: `{v:1, kind:"manager-run-admission", requestId, runId,
    /// revision, admission}`.
    pub fn to_result(&self, request: &RunAdmissionRequest) -> serde_json::Value {
        serde_json::json!({
            "v": 1,
            "kind": "manager-run-admission",
            "requestId": request.registered.envelope.request_id.as_str(),
            "runId": request.run_id.as_str(),
            "revision": self.revision.0,
            "admission": self.admission.to_value(),
        })
    }
}

/// Phase two of §5.3, after the adapter consumed the observation and resolved the evidence:
/// 1. the host observed a caller publish this exact run-start and it was not consumed yet
///    (`observed`), else `permission-denied` "…did not observe this run-start request…";
/// 2. a derived `u_` caller owner is the manager's registered owner;
/// 3. the caller's issued evidence (or the adapter's refusal: forged, revoked, dead source) names
///    the same reference and its publish ceiling permits the subject;
/// 4. the admission is created create-only. A lost create reads the record back: the same
///    instance and issued caller is an exact retry (same revision and `admittedAt`); anything
///    else is `conflict` "run R is already admitted for another caller or instance".
///
/// Keeps F88 (create-only, before any driver; idempotent for the same request; nothing written
/// on a refusal) and F87 (the run id is the host-minted one the forward names). Ambiguous
/// creates are settled by a leader read-back: our own bytes are ours.
#[derive(Debug, Clone)]
pub struct AdmitRun {
    pub authorized: AuthorizedAdmission,
    /// What `ObservedRunRequests::take(subject, now)` returned.
    pub observed: Option<ObservedRunRequest>,
    /// The issued store's answer for the subject's caller, or its refusal.
    pub evidence: Result<IssuedEvidence, EpError>,
    /// Unix millis.
    pub admitted_at: u64,
}

impl Script for AdmitRun {
    type Output = AdmissionOutcome;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<AdmissionOutcome, Halt> {
        let evidence = self.admissible_evidence()?;
        let admission = self.admission(&evidence)?;
        let bytes = admission.to_bytes()?;
        let a = &self.authorized;
        let key = keys::run_admission(&a.endpoint, &a.request.run_id);
        let (value, revision, found) = match create_settled(cx, &key, &bytes)? {
            Created::Written(revision) => {
                return Ok(AdmissionOutcome {
                    revision,
                    admission,
                    created: true,
                })
            }
            Created::Found(found) => found,
        };
        if found == bytes {
            // Our own ambiguous create landed.
            return Ok(AdmissionOutcome {
                revision,
                admission,
                created: true,
            });
        }
        let written = value
            .and_then(|v| RunAdmission::from_value(&v))
            .map_err(|why| {
                EpError::internal(format!("stored admission {key} is unreadable: {why}"))
            })?;
        Ok(self.earlier(written, revision, &admission, &evidence.reference)?)
    }
}

impl AdmitRun {
    /// Steps 1-3: the observation, the caller's owner, then the issued evidence and its
    /// ceiling. Returns the evidence the admission is built on.
    fn admissible_evidence(&self) -> Result<IssuedEvidence, EpError> {
        let a = &self.authorized;
        let r = &a.request;
        if !matches!(
            self.observed,
            Some(ObservedRunRequest {
                operation: RunRequestOperation::Start,
                ..
            })
        ) {
            return Err(EpError::permission_denied(
                "the issuing host did not observe this run-start request, or already admitted a \
                 forward of it (SPEC 14.8)",
            ));
        }
        let s = &a.subject;
        if s.owner.as_derived().is_some() && s.owner != *a.holder.owner() {
            return Err(EpError::permission_denied(
                "a user's run is admitted only on the participant manager that user registered",
            ));
        }
        let evidence = self.evidence.clone()?;
        let e = &evidence.reference;
        if e.space != r.registered.envelope.space
            || e.owner != s.owner
            || e.actor != s.actor
            || e.uid != s.uid
            || Some(&e.generation) != s.generation.as_ref()
        {
            return Err(EpError::permission_denied(
                "manager run admission evidence names another issued reference",
            ));
        }
        if !evidence.permissions.publish.permits(&r.subject) {
            return Err(EpError::permission_denied(
                "the caller's issued ceiling does not permit this run-start subject",
            ));
        }
        Ok(evidence)
    }

    /// The admission step 4 creates: the subject's issued caller at the evidence's generation,
    /// its ceiling, and the evidence as provenance.
    fn admission(&self, evidence: &IssuedEvidence) -> Result<RunAdmission, EpError> {
        let a = &self.authorized;
        let (r, s, e) = (&a.request, &a.subject, &evidence.reference);
        RunAdmission::new(AdmissionParts {
            space: r.registered.envelope.space.clone(),
            endpoint: a.endpoint.clone(),
            run_id: r.run_id.clone(),
            instance_id: r.registered.envelope.instance_id.clone(),
            caller: RunCaller {
                owner: s.owner.clone(),
                actor: s.actor.clone(),
                uid: s.uid.clone(),
                generation: Some(e.generation.clone()),
            },
            ceiling: evidence.permissions.clone(),
            provenance: Provenance::Issued {
                reference: e.clone(),
                resolved_revision: evidence.resolved_revision,
            },
            admitted_at: self.admitted_at,
        })
    }

    /// Step 4's lost create: the admission `written` earlier is an exact retry when it names
    /// the same instance and issued caller (returned unchanged), else `conflict`.
    fn earlier(
        &self,
        written: RunAdmission,
        revision: Revision,
        admission: &RunAdmission,
        e: &IssuedRef,
    ) -> Result<AdmissionOutcome, EpError> {
        let same_caller = matches!(
            written.provenance(),
            Provenance::Issued { reference, .. } if reference.owner == e.owner
                && reference.actor == e.actor
                && reference.uid == e.uid
                && reference.generation == e.generation
        );
        if written.instance_id() != admission.instance_id() || !same_caller {
            return Err(EpError::conflict(format!(
                "run {} is already admitted for another caller or instance",
                self.authorized.request.run_id.as_str()
            )));
        }
        Ok(AdmissionOutcome {
            revision,
            admission: written,
            created: false,
        })
    }
}
