//! From registration to serving (reference-gate-impl §3.13–§3.14): authorize a serve grant at
//! the committed coordinates, write the READY status, and the whole sequence as one machine.
//!
//! A read is never a fence (F6): the epoch a registration returns can be stale by the time it is
//! used, so the grant re-reads the gate's epoch and refuses `expired` if a successor registered,
//! and the status writer does the same (F42). Nothing here serves at a successor's epoch.

use std::sync::Arc;

use serde_json::json;

use crate::authority::{assert_name_authority, NameAuthority};
use crate::contract::{merge_commands, read_closure, VerifiedClosure};
use crate::error::EpError;
use crate::gate::{ProcessEpoch, RegistrationRevision};
use crate::issuance::{GateRef, ServeGrant};
use crate::machine::{Ctx, Halt, Script};
use crate::names::{keys, CommandToken, OwnerToken};
use crate::registration::{read_process_epoch, RegisterInstance, Registered};
use crate::service::{self, RecordRead, ServiceSpec, WriteStatus, SERVICE_READY};

/// A serve grant with the surface it authorizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizedServe {
    /// The coordinates the serve mint fences on (F27).
    pub grant: ServeGrant,
    /// The union of the closures' commands, sorted: one queue-qualified subscribe row each (F70).
    pub commands: Vec<CommandToken>,
    /// The commands served on the request rails (the ephemeral ones; journal-class commands
    /// ride `epj` submissions), sorted: the serve credential's subscribe rows.
    pub rail_commands: Vec<CommandToken>,
    /// True when any command is journal-class.
    pub journal_class: bool,
}

/// Authorizes serving `gate` at `epoch` for `holder`: the spec must be registered, the holder
/// must own it, the name authority must still hold, every closure must verify, and the gate's
/// epoch — read fresh, last — must still be `epoch` (`expired` otherwise). Keeps F6, F27, F66,
/// F67, F70.
#[derive(Debug, Clone)]
pub struct AuthorizeServeGrant {
    pub gate: GateRef,
    pub epoch: ProcessEpoch,
    pub holder: OwnerToken,
    pub authority: Arc<dyn NameAuthority>,
}

impl Script for AuthorizeServeGrant {
    type Output = AuthorizedServe;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<AuthorizedServe, Halt> {
        authorize_serve_grant(cx, self)
    }
}

/// See [`AuthorizeServeGrant`].
pub fn authorize_serve_grant(
    cx: &mut Ctx<'_>,
    args: &AuthorizeServeGrant,
) -> Result<AuthorizedServe, Halt> {
    let gate = &args.gate;
    let key = keys::svc_spec(&gate.endpoint, &gate.instance);
    let (spec, revision) = match service::read_record(cx, &key)? {
        RecordRead::Live { value, revision } => {
            (ServiceSpec::parse(&value, &gate.endpoint)?, revision)
        }
        _ => {
            return Err(EpError::failed_precondition(format!(
                "instance {} of {} is not registered ({key} holds no spec)",
                gate.instance, gate.endpoint
            ))
            .into())
        }
    };
    if args.holder != *spec.owner() {
        return Err(EpError::permission_denied(format!(
            "{} is registered to owner {}, not {}",
            gate.endpoint,
            spec.owner(),
            args.holder
        ))
        .into());
    }
    let nar = assert_name_authority(cx, args.authority.as_ref(), &gate.endpoint, spec.owner())?;
    let mut closures: Vec<VerifiedClosure> = Vec::new();
    for digest in spec.cluster_digests() {
        closures.push(read_closure(cx, digest)?.into_serve_grant()?);
    }
    let surface = merge_commands(closures.iter()).map_err(EpError::stored)?;
    let journal_class = surface.values().any(|c| c.class.is_journal());
    let rail_commands: Vec<CommandToken> = surface
        .iter()
        .filter(|(_, c)| !c.class.is_journal())
        .map(|(name, _)| name.clone())
        .collect();
    let commands: Vec<CommandToken> = surface.into_keys().collect();
    let current = read_process_epoch(cx, gate)?;
    if current != args.epoch {
        return Err(EpError::expired(format!(
            "the serve grant was asked for epoch {} but the instance is now at epoch {current}; \
             a successor registered",
            args.epoch
        ))
        .into());
    }
    Ok(AuthorizedServe {
        grant: ServeGrant {
            space: gate.space.clone(),
            endpoint: gate.endpoint.clone(),
            instance: gate.instance.clone(),
            owner: spec.owner().clone(),
            epoch: args.epoch,
            registration_revision: RegistrationRevision(revision.0),
            name_authority_revision: nar,
        },
        commands,
        rail_commands,
        journal_class,
    })
}

/// What registering a serving instance produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    pub registered: Registered,
    pub serve: AuthorizedServe,
    /// The READY status's revision.
    pub status_revision: crate::kv::Revision,
}

/// Register → serve grant → READY status, all at the coordinates the registration committed
/// (reference §3.13). If a successor registered in between, the grant or the status refuses
/// `expired` rather than serve at the successor's epoch (F42).
#[derive(Debug, Clone)]
pub struct RegisterServing {
    pub register: RegisterInstance,
    /// Extra status fields written with the READY state.
    pub status: serde_json::Map<String, serde_json::Value>,
}

impl Script for RegisterServing {
    type Output = Serving;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Serving, Halt> {
        // The ceremony and the grant are memoized sub-scripts: the status write's replays then
        // skip them instead of re-running every step of both.
        let registered = *cx.call(&self.register)?;
        let r = &self.register;
        let gate = GateRef::new(
            r.space.clone(),
            r.spec.endpoint().clone(),
            r.instance.clone(),
        );
        let serve = cx.call(&AuthorizeServeGrant {
            gate: gate.clone(),
            epoch: registered.process_epoch,
            holder: r.registrant.clone(),
            authority: r.authority.clone(),
        })?;
        let mut status = self.status.clone();
        status.insert("state".into(), json!(SERVICE_READY));
        status.insert("epoch".into(), json!(registered.process_epoch.0));
        status.insert(
            "observedSpecRevision".into(),
            json!(registered.registration_revision.0),
        );
        let status_revision = service::write_service_status(
            cx,
            &WriteStatus {
                endpoint: gate.endpoint.clone(),
                instance: gate.instance.clone(),
                gate,
                epoch: registered.process_epoch,
                status: status.into(),
                expected_status_revision: None,
                supervisor: false,
            },
        )?;
        Ok(Serving {
            registered,
            serve: AuthorizedServe::clone(&serve),
            status_revision,
        })
    }
}
