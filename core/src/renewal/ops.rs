//! The seven operations, each with the door it knocks on and the credentials it issues.

use serde_json::Value;

use crate::contract::{parse_cluster_document, read_closure, ClusterDocument};
use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::issuance::{observe_gate, GateObservation};
use crate::machine::{Ctx, Halt};
use crate::manager::door::{self, Presented};
use crate::manager::{
    current_registration_proof, registration_proof, RegistrationProof, RenewalFence, Retirement,
    RunFence, SessionGrant,
};
use crate::names::{keys, CommandToken, Principal};
use crate::profiles::{
    self, RailCaller, RetirementRequesterBinding, RunBinding, SessionId, SessionServingBinding,
    SESSION_TTL_MAX_SECS,
};
use crate::run::{observe_hosted_run, run_holds_fence};
use crate::service::{self, RecordRead, ServiceSpec};

use super::sign::{actor, base_pair, conn, family, manager_surface, profile_token, release, sign};
use super::{CredentialName, Issued, ManagerAuthority, MANAGER_URN};

// ---- Operations -----------------------------------------------------------------------------

/// `prepare`: the first phase — no proof, no gate, nothing written; the `remote-manager`
/// supervisor (standing lifetime) and executor (300 s) for the caller-held nkeys (F91).
/// KV round trips: 0.
pub fn prepare(call: &ManagerAuthority) -> Result<Issued, EpError> {
    Ok(Issued {
        credentials: base_pair(call)?,
        next_registration_proof: None,
    })
}

/// `renew`: the same pair as `prepare`, only for the current registration: gate open, serve
/// principal, HMAC proof at the gate's registration revision and epoch (F91; the proof binds
/// the epoch, so no separate epoch is presented). KV round trips: 1.
pub fn renew(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    proof: &RegistrationProof,
) -> Result<Issued, Halt> {
    call.knock(cx, &door::RENEW, None, None, Presented::Current(proof))?;
    Ok(Issued {
        credentials: base_pair(call)?,
        next_registration_proof: None,
    })
}

/// `activate`: the deterministic registration proof (with the artifact digests) must match;
/// the gate must exist, be open and record the serve principal (F28); the serve grant is
/// reconstructed from the submitted `ai.cotal.manager` document at the observed gate (F27);
/// serve, goalWriter and sessionLedger are released through the fence under the cleanup intent
/// (F19–F22, F43, F92). Returns `nextRegistrationProof`, the HMAC proof at the observed
/// registration revision and epoch. KV round trips: 16 (gate 1, intent 2, 4 per member, 1 to
/// complete).
pub fn activate(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    proof: &RegistrationProof,
    contract_artifacts: &[Value],
) -> Result<Issued, Halt> {
    let owner = call.owner();
    require_deterministic_proof(
        call,
        proof,
        "manager-service registration proof does not match this owner/lifecycle/artifact set",
    )?;
    let document = contract_artifacts
        .iter()
        .find(|a| a.get("urn").and_then(Value::as_str) == Some(MANAGER_URN))
        .ok_or_else(|| {
            EpError::bad_request(
                "the activation request submits no ai.cotal.manager cluster document",
            )
        })?;
    let commands = manager_surface(&parse_cluster_document(document)?)?;
    let observed = call.knock(cx, &door::ACTIVATE, None, None, Presented::Verified)?;
    let members = (*cx.once(|| family(call, &observed, commands))?).clone();
    let credentials = release(cx, call, &observed, members)?;
    let c = observed.gate.coordinates();
    Ok(Issued {
        credentials,
        next_registration_proof: Some(current_registration_proof(
            &call.host.proof_secret,
            owner,
            &call.request.envelope,
            c.registration_revision,
            c.process_epoch,
        )),
    })
}

/// The presented proof must equal the deterministic registration proof of the authenticated
/// owner and this request (compared in constant time), else `permission-denied` `refusal`.
fn require_deterministic_proof(
    call: &ManagerAuthority,
    proof: &RegistrationProof,
    refusal: &str,
) -> Result<(), EpError> {
    let expected = registration_proof(call.owner(), &call.request)?;
    if proof.matches(&expected) {
        Ok(())
    } else {
        Err(EpError::permission_denied(refusal))
    }
}

/// `session`: the deterministic registration proof (no artifact digests) must match; then one
/// `session-serving` credential for the caller-held `session.id`, held by the serve principal,
/// confined to the session's two rails at its epoch. It expires at
/// `min(session.exp, now + 24 h)`; a session already expired at `now` is refused
/// `failed-precondition`. Keeps F73 (the epoch rides the rails), F74 (never past 24 h) and F90
/// (a server-derived holder; the request names only the session). KV round trips: 0.
pub fn session(
    call: &ManagerAuthority,
    proof: &RegistrationProof,
    s: &SessionGrant,
) -> Result<Issued, EpError> {
    require_deterministic_proof(
        call,
        proof,
        "manager-service session proof does not match this owner/lifecycle",
    )?;
    let now = call.now();
    if s.exp <= now.0 {
        return Err(EpError::failed_precondition(format!(
            "manager-service session {} expired at {} (now {}); redeem a live session first",
            s.session_id, s.exp, now.0
        )));
    }
    let exp = s.exp.min(now.0.saturating_add(SESSION_TTL_MAX_SECS));
    let e = &call.request.envelope;
    let profile = profiles::session_serving(&SessionServingBinding {
        space: e.space.clone(),
        principal: Principal::new(call.owner().clone(), actor(&call.actors().serve)?),
        conn: conn(&s.id)?,
        endpoint: call.gate()?.endpoint,
        session: SessionId::parse(&s.session_id)?,
        epoch: ProcessEpoch(s.epoch),
        ttl_seconds: exp.saturating_sub(now.0),
    })?;
    Ok(Issued {
        credentials: vec![(
            CredentialName::SessionServing,
            sign(&call.host, &profile, &s.id, now)?,
        )],
        next_registration_proof: None,
    })
}

/// The reference's `authorizeRemoteManagerRetirement`, in order: the target owner is the
/// authenticated owner (`permission-denied` "…may target only its authenticated owner…"), the
/// manager gate is present and open (`failed-precondition` "…found no current open manager
/// gate…"), it records the server-derived serve principal (`permission-denied` "…not the
/// server-derived serve principal…"), and sits at `retirement.serveEpoch` (`conflict` "…serve
/// epoch E is stale; current is C"). Keeps F94 (authorized against the caller instance's current
/// open gate, principal and epoch) and F96 (target owner = authenticated owner). The owner check
/// needs no read, so a foreign target costs no round trip. KV round trips: 1.
pub fn authorize_remote_manager_retirement(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    retirement: &Retirement,
) -> Result<GateObservation, Halt> {
    let owner = call.owner();
    if retirement.target.owner != *owner {
        return Err(EpError::permission_denied(format!(
            "{} may target only its authenticated owner {owner}, not {}",
            door::RETIRE.name,
            retirement.target.owner
        ))
        .into());
    }
    call.knock(
        cx,
        &door::RETIRE,
        None,
        Some(retirement.serve_epoch),
        Presented::Verified,
    )
}

/// `retire`: the deterministic registration proof must match, then
/// [`authorize_remote_manager_retirement`]; one `retirement-requester` credential for the
/// caller-held `retirement.id`, asked as the serve principal at the manager's lifecycle uid and
/// aimed at exactly the target triple, for the profile's five minutes. Keeps F4 (the target uid
/// rides the subject, so a recycled alias is never reached), F94 and F96 (the parser already
/// recomputed the derived `opId`). KV round trips: 1.
pub fn retire(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    proof: &RegistrationProof,
    retirement: &Retirement,
) -> Result<Issued, Halt> {
    require_deterministic_proof(
        call,
        proof,
        "manager-service retirement proof does not match this owner/lifecycle",
    )?;
    authorize_remote_manager_retirement(cx, call, retirement)?;
    let e = &call.request.envelope;
    let t = &retirement.target;
    let profile = profiles::retirement_requester(&RetirementRequesterBinding {
        space: e.space.clone(),
        caller: RailCaller {
            owner: call.owner().clone(),
            actor: actor(&call.actors().serve)?,
            uid: e.manager_lifecycle_uid.clone(),
        },
        conn: conn(&retirement.id)?,
        target: RailCaller {
            owner: t.owner.clone(),
            actor: t.actor.clone(),
            uid: t.lifecycle_uid.clone(),
        },
    })?;
    Ok(Issued {
        credentials: vec![(
            CredentialName::RetirementRequester,
            sign(&call.host, &profile, &retirement.id, call.now())?,
        )],
        next_registration_proof: None,
    })
}

/// The host's renewal authorization (reference §4.5 steps 2–6), in order: the request's space
/// and account are the host's (`permission-denied`), the gate is present and open
/// (`failed-precondition`), records the owner's serve principal (`permission-denied`), sits at
/// the request's process epoch (`conflict`), and the HMAC proof matches (`permission-denied`; it
/// binds the held nkeys, so a swapped nkey fails here). Keeps F91. KV round trips: 1.
pub fn authorize_renewal(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    proof: &RegistrationProof,
    fence: &RenewalFence,
) -> Result<GateObservation, Halt> {
    call.knock(
        cx,
        &door::RENEWAL_DOOR,
        Some(&fence.account_public_key),
        Some(fence.process_epoch),
        Presented::Current(proof),
    )
}

/// Re-observes the gate before issuance: it must still be open with exactly the fields the
/// authorization decided on (any touch may have moved its revision), else `conflict` "<what>
/// moved before issuance". Returns the fresh observation the fence pins to.
fn reobserve(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    decided: &GateObservation,
    what: &str,
) -> Result<GateObservation, Halt> {
    match observe_gate(cx, &call.gate()?)? {
        Some(now) if now.gate == decided.gate => Ok(now),
        _ => Err(
            EpError::conflict(format!("manager-service {what} gate moved before issuance")).into(),
        ),
    }
}

/// The command surface the *registered* spec authorizes: the spec read leader-served at the
/// gate's registration revision (a spec at any other revision is not the registration the gate
/// fences), owned by the holder, and its closures' root documents — each verified against its
/// content digest — yield the one `ai.cotal.manager` document. KV round trips: 1 plus 2
/// artifact reads per closure.
fn registered_surface(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    observed: &GateObservation,
) -> Result<Vec<CommandToken>, Halt> {
    let gate = call.gate()?;
    let key = keys::svc_spec(&gate.endpoint, &gate.instance);
    let revision = observed.gate.registration_revision();
    let spec = match service::read_record(cx, &key)? {
        RecordRead::Live { value, revision: r } if r.0 == revision.0 => {
            ServiceSpec::parse(&value, &gate.endpoint)?
        }
        _ => {
            return Err(EpError::failed_precondition(format!(
                "the manager registration at revision {revision} no longer holds {key}; \
                 re-register before renewing"
            ))
            .into())
        }
    };
    if spec.owner() != call.owner() {
        return Err(EpError::permission_denied(format!(
            "the registered manager spec belongs to {}, not {}",
            spec.owner(),
            call.owner()
        ))
        .into());
    }
    let mut manager: Option<ClusterDocument> = None;
    for digest in spec.cluster_digests() {
        let closure = read_closure(cx, digest)?.into_serve_grant()?;
        if closure.document.urn == MANAGER_URN && manager.replace(closure.document).is_some() {
            return Err(EpError::internal(format!(
                "the registered manager spec names more than one {MANAGER_URN} document"
            ))
            .into());
        }
    }
    let document = manager.ok_or_else(|| {
        EpError::failed_precondition(format!(
            "the registered manager spec names no {MANAGER_URN} cluster document"
        ))
    })?;
    Ok(manager_surface(&document)?)
}

/// `renewStandingBundle`: the renewal authorization, the serve grant re-derived from the
/// registered spec, the gate re-observed unchanged (`conflict` "…standing renewal gate moved
/// before issuance"), then all five duties: supervisor and executor signed, serve, goalWriter
/// and sessionLedger released through the fence under the cleanup intent. Keeps F27 (grant at
/// the fenced coordinates), F89 (bounded standing lifetime), F91, F92 (a failed renewal revokes
/// only what it created). KV round trips: 18 plus 2 artifact reads per closure.
pub fn renew_standing_bundle(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    proof: &RegistrationProof,
    fence: &RenewalFence,
) -> Result<Issued, Halt> {
    // Memoized as one step: the proof, the spec and closure reads and their verification are
    // not redone on every replay of the release that follows.
    let prelude = cx.sub(|cx| {
        let decided = authorize_renewal(cx, call, proof, fence)?;
        let commands = registered_surface(cx, call, &decided)?;
        let observed = reobserve(cx, call, &decided, "standing renewal")?;
        Ok((commands, observed))
    })?;
    let (commands, observed) = (prelude.0.clone(), prelude.1.clone());
    // Signed once: a replay after each later effect reuses the memo instead of re-signing.
    let mut credentials = (*cx.once(|| base_pair(call))?).clone();
    let members = (*cx.once(|| family(call, &observed, commands))?).clone();
    credentials.extend(release(cx, call, &observed, members)?);
    Ok(Issued {
        credentials,
        next_registration_proof: None,
    })
}

/// `renewRunDriver`: the renewal authorization, then the run check (§4.5 step 7: the run's
/// status is `running`, hosted on this instance under the registered supervisor nkey, with the
/// caller's holder, takeover id, epoch and fencing token, else `conflict`), the gate
/// re-observed (`conflict` "…run renewal gate moved before issuance") and the run re-read
/// (`conflict` "…run renewal authority moved before issuance"). Issues `run-driver` and
/// `run-mediator` for the requested nkeys, bound to the run, takeover, instance and epoch.
/// Keeps F84/F87 (one driver per run and takeover), F91. KV round trips: 4.
pub fn renew_run_driver(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    proof: &RegistrationProof,
    fence: &RenewalFence,
    run: &RunFence,
) -> Result<Issued, Halt> {
    let decided = authorize_renewal(cx, call, proof, fence)?;
    let gate = call.gate()?;
    let e = &call.request.envelope;
    let holds = |status: Option<&crate::run::HostedRunStatus>| {
        run_holds_fence(
            status,
            &e.identities.supervisor,
            &e.instance_id,
            &run.holder,
            &run.takeover_id,
            run.epoch,
            run.fencing_token,
        )
    };
    holds(observe_hosted_run(cx, &gate.endpoint, &run.run_id)?.as_ref())?;
    reobserve(cx, call, &decided, "run renewal")?;
    if holds(observe_hosted_run(cx, &gate.endpoint, &run.run_id)?.as_ref()).is_err() {
        return Err(EpError::conflict(
            "manager-service run renewal authority moved before issuance",
        )
        .into());
    }
    let binding = RunBinding {
        space: e.space.clone(),
        owner: call.owner().clone(),
        conn: conn(&run.driver_id)?,
        endpoint: gate.endpoint.clone(),
        run: profile_token(&run.run_id)?,
        takeover: profiles::TakeoverId::parse(run.takeover_id.as_str())
            .map_err(|e| EpError::internal(e.message))?,
        instance: e.instance_id.clone(),
        epoch: decided.gate.process_epoch(),
        ttl: call.host.standing_ttl,
    };
    let driver = sign(
        &call.host,
        &profiles::run_driver(&binding)?,
        &run.driver_id,
        call.now(),
    )?;
    let mediator_binding = RunBinding {
        conn: conn(&run.mediator_id)?,
        ..binding
    };
    let mediator = sign(
        &call.host,
        &profiles::run_mediator(&mediator_binding)?,
        &run.mediator_id,
        call.now(),
    )?;
    Ok(Issued {
        credentials: vec![
            (CredentialName::RunDriver, driver),
            (CredentialName::RunMediator, mediator),
        ],
        next_registration_proof: None,
    })
}
