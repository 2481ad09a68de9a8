//! Signing the credentials an operation issues, and releasing the endpoint family through the
//! fence.

use sha2::{Digest as _, Sha256};

use crate::contract::{ClusterDocument, CommandClass};
use crate::error::EpError;
use crate::issuance::{GateObservation, ServeGrant};
use crate::journal;
use crate::jwt::UnixSeconds;
use crate::machine::{Ctx, Halt};
use crate::manager::{ManagerHost, UserKey};
use crate::names::{ActorToken, CommandToken, CredentialId, Principal, SourceMember};
use crate::profiles::{
    self, ConnId, GoalWriterBinding, ManagerRole, Profile, RemoteManagerBinding, ServeBinding,
    SessionLedgerBinding,
};

use super::{
    release_family, CredentialName, FamilyMember, IntentRow, IssuedCredential, ManagerAuthority,
    Role, MANAGER_URN,
};

// ---- Signing --------------------------------------------------------------------------------

/// Signs a data-account user JWT for the caller-held `user` nkey, valid from `now` for the
/// profile's lifetime.
pub(super) fn sign(
    host: &ManagerHost,
    profile: &Profile,
    user: &UserKey,
    now: UnixSeconds,
) -> Result<IssuedCredential, EpError> {
    profile.sign_for(&host.signer, host.account.as_str(), user.as_str(), now)
}

/// The connection id a caller-held key's inbox is keyed by: the nkey itself.
pub(super) fn conn(key: &UserKey) -> Result<ConnId, EpError> {
    ConnId::parse(key.as_str()).map_err(|e| EpError::internal(e.message))
}

pub(super) fn actor(name: &str) -> Result<ActorToken, EpError> {
    ActorToken::parse(name).map_err(|e| EpError::internal(e.message))
}

/// The supervisor (standing lifetime) and executor (300 s) `remote-manager` pair.
pub(super) fn base_pair(
    call: &ManagerAuthority,
) -> Result<Vec<(CredentialName, IssuedCredential)>, EpError> {
    let e = &call.request.envelope;
    let binding = |role, key: &UserKey| -> Result<IssuedCredential, EpError> {
        let profile = profiles::remote_manager(&RemoteManagerBinding {
            space: e.space.clone(),
            owner: call.owner().clone(),
            instance: e.instance_id.clone(),
            conn: conn(key)?,
            role,
        })?;
        sign(&call.host, &profile, key, call.now())
    };
    Ok(vec![
        (
            CredentialName::Supervisor,
            binding(
                ManagerRole::Supervisor(call.host.standing_ttl),
                &e.identities.supervisor,
            )?,
        ),
        (
            CredentialName::Executor,
            binding(ManagerRole::Executor, &e.identities.executor)?,
        ),
    ])
}

/// The manager's command surface from its `ai.cotal.manager` cluster document: every command
/// ephemeral (served on the request rails), sorted.
pub(super) fn manager_surface(document: &ClusterDocument) -> Result<Vec<CommandToken>, EpError> {
    if document.urn != MANAGER_URN {
        return Err(EpError::failed_precondition(format!(
            "the manager cluster document has urn {}, not {MANAGER_URN}",
            document.urn
        )));
    }
    for (name, command) in &document.commands {
        if command.class != CommandClass::Ephemeral {
            return Err(EpError::failed_precondition(format!(
                "the manager cluster declares {}-class command {name}; every manager command is \
                 ephemeral",
                command.class.as_str()
            )));
        }
    }
    Ok(document.commands.keys().cloned().collect())
}

/// Signs the three endpoint-family credentials at the observed gate: serve with `commands`
/// (F27: the grant is the observation's coordinates), goalWriter and sessionLedger beside it.
pub(super) fn family(
    call: &ManagerAuthority,
    observed: &GateObservation,
    commands: Vec<CommandToken>,
) -> Result<Vec<FamilyMember>, EpError> {
    let e = &call.request.envelope;
    let gate = call.gate()?;
    let actors = call.actors();
    let owner = call.owner();
    let ttl = call.host.standing_ttl;
    let coordinates = observed.gate.coordinates();
    let grant = ServeGrant {
        space: gate.space.clone(),
        endpoint: gate.endpoint.clone(),
        instance: gate.instance.clone(),
        owner: owner.clone(),
        epoch: coordinates.process_epoch,
        registration_revision: coordinates.registration_revision,
        name_authority_revision: coordinates.name_authority_revision,
    };
    let serve = profiles::endpoint_serve(&ServeBinding {
        grant,
        actor: actor(&actors.serve)?,
        conn: conn(&e.identities.serve)?,
        rail_commands: commands,
        journal_class: false,
        pools: Vec::new(),
        ttl,
    })?;
    let principal = |name: &str| Ok::<_, EpError>(Principal::new(owner.clone(), actor(name)?));
    let goal = profiles::goal_writer(&GoalWriterBinding {
        space: e.space.clone(),
        principal: principal(&actors.goal_writer)?,
        conn: conn(&e.identities.goal_writer)?,
        endpoint: gate.endpoint.clone(),
        ttl,
    })?;
    let session = profiles::session_ledger(&SessionLedgerBinding {
        space: e.space.clone(),
        principal: principal(&actors.session_ledger)?,
        conn: conn(&e.identities.session_ledger)?,
        ttl,
    })?;
    [
        (Role::Serve, serve, &e.identities.serve, &actors.serve),
        (
            Role::GoalWriter,
            goal,
            &e.identities.goal_writer,
            &actors.goal_writer,
        ),
        (
            Role::SessionLedger,
            session,
            &e.identities.session_ledger,
            &actors.session_ledger,
        ),
    ]
    .into_iter()
    .map(|(role, profile, key, holder)| {
        let issued = sign(&call.host, &profile, key, call.now())?;
        let digest: [u8; 32] = Sha256::digest(issued.jwt.as_bytes()).into();
        Ok(FamilyMember {
            role,
            row: IntentRow {
                credential_id: CredentialId::from_sha256_hex(&digest),
                credential_key: key.clone(),
                holder_principal: principal(holder)?,
                instance: gate.instance.clone(),
                source_chain: vec![SourceMember::Root],
                exp: Some(issued.exp),
                coordinates,
            },
            jwt: issued.jwt,
        })
    })
    .collect()
}

/// Releases the family through the fence and pairs each JWT with its expiry.
pub(super) fn release(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
    observed: &GateObservation,
    members: Vec<FamilyMember>,
) -> Result<Vec<(CredentialName, IssuedCredential)>, Halt> {
    let exps: Vec<u64> = members.iter().map(|m| m.row.exp.unwrap_or(0)).collect();
    let released = release_family(
        cx,
        &call.gate()?,
        observed,
        &call.request.envelope.request_id,
        &members,
        call.fault(),
    )?;
    Ok(released
        .into_iter()
        .zip(exps)
        .map(|((role, jwt), exp)| (role.into(), IssuedCredential { jwt, exp }))
        .collect())
}

pub(super) fn profile_token(run: &journal::RunId) -> Result<profiles::RunId, EpError> {
    profiles::RunId::parse(run.as_str()).map_err(|e| EpError::internal(e.message))
}
