//! The served caller of a forwarded run-resume or run-answer (reference-auth-service §5.6,
//! SPEC §14.8): a registered manager forwards the request subject a caller published, and the
//! host issues for it only if the broker really carried that request (the host's own one-shot
//! observation), the request is one the registered manager would run (bind, class, pinned
//! contract), and the caller's issued authority covers it.
//!
//! Split like admission: [`ServedCall::check_subject`] (pure) and [`registered_run_command`]
//! (KV + contract store) run before the adapter takes the observation;
//! [`authorize_served_caller`] (pure) decides once the observation and the caller's issued
//! evidence are in.

use serde_json::json;

use crate::canon::Digest;
use crate::contract::{merge_commands, read_closure, CommandClass};
use crate::error::EpError;
use crate::gate::{ProcessEpoch, RegistrationRevision};
use crate::journal::RunId;
use crate::machine::{Ctx, Halt};
use crate::names::{keys, CommandToken, EndpointName, InstanceId, OwnerToken, SpaceName};
use crate::service::{self, RecordRead, ServiceSpec};

use super::observed::{ObservedRunRequest, RunRequestOperation};
use super::subject::{parse_request_subject, RequestSubject, Route};
use crate::issued::IssuedEvidence;

/// The detail kind of a served caller the host cannot bind to issued authority.
pub const EP_UNBOUND_CALLER_AUTHORITY: &str = "EP_UNBOUND_CALLER_AUTHORITY";

/// The two served commands a run attempt door forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedCommand {
    Resume,
    Answer,
}

impl ServedCommand {
    pub const fn as_str(self) -> &'static str {
        match self {
            ServedCommand::Resume => "run-resume",
            ServedCommand::Answer => "run-answer",
        }
    }
}

/// What the registered manager declares for a served command at its registration revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredRunCommand {
    pub class: CommandClass,
    pub input_digest: Digest,
    pub output_digest: Digest,
}

/// The declaration of `command` by the manager instance registered at `revision`: its spec,
/// read leader-served, must be exactly the record at the gate's registration revision (any other
/// is not the registration the gate fences) and owned by `owner`; each closure it names is read
/// through the contract store and verified against its digest; the command is looked up across
/// them (each command is declared once, F66). A manager that does not declare the command would
/// refuse the request unrun, so that is `permission-denied`. KV round trips: 1 plus 2 artifact
/// reads per closure.
pub fn registered_run_command(
    cx: &mut Ctx<'_>,
    endpoint: &EndpointName,
    instance: &InstanceId,
    owner: &OwnerToken,
    revision: RegistrationRevision,
    command: ServedCommand,
) -> Result<RegisteredRunCommand, Halt> {
    let key = keys::svc_spec(endpoint, instance);
    let spec = match service::read_record(cx, &key)? {
        RecordRead::Live { value, revision: r } if r.0 == revision.0 => {
            ServiceSpec::parse(&value, endpoint)?
        }
        _ => {
            return Err(EpError::failed_precondition(format!(
                "the manager registration at revision {revision} no longer holds {key}; the \
                 manager must re-register before forwarding a served {}",
                command.as_str()
            ))
            .into())
        }
    };
    if spec.owner() != owner {
        return Err(EpError::permission_denied(format!(
            "the registered manager spec belongs to {}, not {owner}",
            spec.owner()
        ))
        .into());
    }
    let mut closures = Vec::new();
    for digest in spec.cluster_digests() {
        closures.push(read_closure(cx, digest)?.into_serve_grant()?);
    }
    let name = CommandToken::parse(command.as_str()).map_err(|e| EpError::internal(e.message))?;
    let merged = merge_commands(&closures).map_err(EpError::stored)?;
    let declared = merged.get(&name).ok_or_else(|| {
        EpError::permission_denied(format!(
            "the registered manager declares no {} command, so it runs no such request",
            command.as_str()
        ))
    })?;
    Ok(RegisteredRunCommand {
        class: declared.class,
        input_digest: declared.input_digest,
        output_digest: declared.output_digest,
    })
}

/// A forwarded served subject whose grammar and coordinates were checked, with everything the
/// observation and evidence are then checked against. Made by the attempt door's first phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCall {
    served: String,
    subject: RequestSubject,
    operation: RunRequestOperation,
    run_owner: OwnerToken,
    space: SpaceName,
    instance: InstanceId,
    process_epoch: ProcessEpoch,
    registered: RegisteredRunCommand,
}

/// The forwarded operation a served call must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Forwarded<'a> {
    Resume(&'a RunId),
    Answer {
        run_id: &'a RunId,
        step_key: &'a str,
        amend: bool,
    },
}

/// Where a served subject must point: this space, endpoint and instance.
pub(crate) struct ServedScope<'a> {
    pub space: &'a SpaceName,
    pub endpoint: &'a EndpointName,
    pub instance: &'a InstanceId,
    pub process_epoch: ProcessEpoch,
}

impl ServedCall {
    /// The subject's shape (§5.6, first clause): a `cotal.<space>.` request-plane subject of
    /// this endpoint and exactly `command`, untargeted or `self`-targeted (the target a
    /// `run-answer` rides), on this instance when instance-routed; else `permission-denied`.
    /// Only then is the registered declaration read (`registered`). The rail is not checked
    /// here: a legacy caller is refused after the observation, as the reference does, with the
    /// unbound-caller detail.
    pub(crate) fn check_subject(
        served: &str,
        forwarded: Forwarded<'_>,
        scope: &ServedScope<'_>,
        run_owner: OwnerToken,
        registered: impl FnOnce(ServedCommand) -> Result<RegisteredRunCommand, Halt>,
    ) -> Result<ServedCall, Halt> {
        let command = match forwarded {
            Forwarded::Resume(_) => ServedCommand::Resume,
            Forwarded::Answer { .. } => ServedCommand::Answer,
        };
        let subject = parse_request_subject(served).filter(|s| {
            served.starts_with(&format!("cotal.{}.", scope.space))
                && s.endpoint == scope.endpoint.token()
                && s.command == command.as_str()
                && s.target.as_deref().is_none_or(|t| t == "self")
                && match &s.route {
                    Route::Inst(iid) => iid == scope.instance,
                    Route::One | Route::All => true,
                }
        });
        let subject = subject.ok_or_else(|| {
            EpError::permission_denied(format!(
                "a served {} must name this space, endpoint and instance, untargeted or \
                 self-targeted",
                command.as_str()
            ))
        })?;
        let registered = registered(command)?;
        let operation = match forwarded {
            Forwarded::Resume(run_id) => RunRequestOperation::Resume {
                run_id: run_id.clone(),
            },
            Forwarded::Answer {
                run_id,
                step_key,
                amend,
            } => RunRequestOperation::Answer {
                endpoint: scope.endpoint.as_str().to_owned(),
                run_id: run_id.clone(),
                step_key: step_key.to_owned(),
                amend,
            },
        };
        Ok(ServedCall {
            served: served.to_owned(),
            subject,
            operation,
            run_owner,
            space: scope.space.clone(),
            instance: scope.instance.clone(),
            process_epoch: scope.process_epoch,
            registered,
        })
    }

    /// The exact subject whose observation the adapter must take (once).
    pub fn served(&self) -> &str {
        &self.served
    }

    /// The parsed subject: its caller is whose issued evidence the adapter resolves.
    pub fn subject(&self) -> &RequestSubject {
        &self.subject
    }

    pub fn command(&self) -> ServedCommand {
        match self.operation {
            RunRequestOperation::Answer { .. } => ServedCommand::Answer,
            _ => ServedCommand::Resume,
        }
    }
}

/// `authorizeServedRunCaller` after the subject check (§5.6), in the reference's order; every
/// refusal is `permission-denied` and nothing is issued:
/// 1. the host observed this exact subject and had not consumed it (`observed`);
/// 2. the observed operation is the forwarded one (same run, endpoint, step, amendment);
/// 3. an observed `bind` names this instance and the gate's process epoch (F44: the bound
///    incarnation alone would run it, so its forward is no authority for another);
/// 4. the observed class and pinned input/output digests are the registered declaration;
/// 5. a derived `u_` caller owner is the run owner;
/// 6. a v1 caller's issued evidence (the adapter's resolution, or its refusal) names the
///    subject's issued reference and its publish ceiling permits the subject.
///
/// A legacy-rail caller has no issued authority to bind: the reference's managed-seat fallback
/// for `run-answer` needs the actor ledger, which this door does not read, so it is refused
/// with detail kind [`EP_UNBOUND_CALLER_AUTHORITY`].
pub fn authorize_served_caller(
    call: &ServedCall,
    observed: Option<&ObservedRunRequest>,
    evidence: &Result<IssuedEvidence, EpError>,
) -> Result<(), EpError> {
    let command = call.command().as_str();
    let observed = observed.ok_or_else(|| {
        EpError::permission_denied(format!(
            "the issuing host did not observe this {command} request, or already accepted a \
             forward of it (SPEC 14.8)"
        ))
    })?;
    if observed.operation != call.operation {
        return Err(EpError::permission_denied(format!(
            "the forwarded {command} names another run, step, endpoint or amendment than the \
             request the issuing host observed (SPEC 14.8)"
        )));
    }
    let unrunnable = || {
        EpError::permission_denied(format!(
            "the observed {command} request declares another class or pins another contract \
             than the registered manager serves, which refuses it unrun (SPEC 13.7, 14.8)"
        ))
    };
    let facts = observed.facts().ok_or_else(unrunnable)?;
    if facts
        .bind
        .as_ref()
        .is_some_and(|b| b.instance_id != call.instance || b.epoch != call.process_epoch)
    {
        return Err(EpError::permission_denied(format!(
            "the observed {command} request is bound to another manager instance or epoch than \
             the registered one, which refuses it unrun (SPEC 13.2, 14.8)"
        )));
    }
    let r = &call.registered;
    if facts.class != r.class.as_str()
        || facts.input_digest != r.input_digest
        || facts.output_digest != r.output_digest
    {
        return Err(unrunnable());
    }
    let s = &call.subject;
    if s.owner.as_derived().is_some() && s.owner != call.run_owner {
        return Err(EpError::permission_denied(
            "a user resumes only a run admitted for that user and answers only on the \
             participant manager that user registered",
        ));
    }
    let Some(generation) = s.generation.as_ref().filter(|_| s.v1) else {
        // The legacy-rail managed-seat answer of the reference is out of scope here.
        return Err(EpError::permission_denied(format!(
            "{command} on a participant manager rides the versioned rail with an issued caller; \
             this host does not accept a legacy-rail caller (SPEC 14.8)"
        ))
        .with_detail(json!({
            "kind": EP_UNBOUND_CALLER_AUTHORITY,
            "owner": s.owner.as_str(),
            "actor": s.actor.as_str(),
            "uid": s.uid.as_str(),
        })));
    };
    let evidence = evidence.as_ref().map_err(Clone::clone)?;
    let e = &evidence.reference;
    if e.space != call.space
        || e.owner != s.owner
        || e.actor != s.actor
        || e.uid != s.uid
        || &e.generation != generation
    {
        return Err(EpError::permission_denied(format!(
            "the served {command} caller's evidence names another issued reference"
        )));
    }
    if !evidence.permissions.publish.permits(&call.served) {
        return Err(EpError::permission_denied(format!(
            "the caller's issued ceiling does not permit this {command} subject"
        )));
    }
    Ok(())
}
