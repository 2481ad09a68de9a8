//! Manager-service operations (reference-auth-service §4.3–§4.6): `prepare`, `activate`,
//! `renew`, `session`, `retire`, `renewStandingBundle` and `renewRunDriver` as sans-IO machines,
//! the closed result [`RemoteManagerAuthorityMaterial`], and renewal compensation
//! ([`compensation`]).
//!
//! Every JWT is a data-account user JWT for a caller-held nkey (`sub` = the nkey, signed by the
//! data account's signing key, `issuer_account` = the account); the plane never sees a seed and
//! returns JWTs only. Credentials of the manager's endpoint family (serve, goalWriter,
//! sessionLedger) are released only through the fence: ledger row first, then a revision-pinned
//! touch of the manager gate, under the cleanup intent of [`compensation`].
//!
//! KV round trips on the model (no faults, no prior pending intent): `prepare` 0, `renew` 1,
//! `session` 0, `retire` 1, `activate` 16, `renewStandingBundle` 18 plus 2 artifact reads per
//! registered closure, `renewRunDriver` 4.

pub mod compensation;

use std::fmt;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::contract::{parse_cluster_document, read_closure, ClusterDocument, CommandClass};
use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::issuance::{observe_gate, GateObservation, GateRef, ServeGrant};
use crate::journal;
use crate::jwt::UnixSeconds;
use crate::machine::{Ctx, Halt, Script};
use crate::manager::door::{self, check_registered, Door, Knock, Presented};
use crate::manager::{
    current_registration_proof, registration_proof, AccountKey, ManagerActors,
    ManagerAuthorityRequest, ManagerCall, ManagerHost, ManagerOperation, RegistrationProof,
    RenewalFence, Retirement, RunFence, SessionGrant, Supervisor, UserKey,
};
use crate::names::{
    keys, ActorToken, CommandToken, CredentialId, OwnerToken, Principal, SourceMember, SpaceName,
};
use crate::profiles::{
    self, ConnId, GoalWriterBinding, ManagerRole, Profile, RailCaller, RemoteManagerBinding,
    RetirementRequesterBinding, RunBinding, ServeBinding, SessionId, SessionLedgerBinding,
    SessionServingBinding, SESSION_TTL_MAX_SECS,
};
use crate::run::{observe_hosted_run, run_holds_fence};
use crate::service::{self, RecordRead, ServiceSpec};
use crate::stored::ObjectWriter;

pub use compensation::{
    release_family, CleanupIntent, FamilyMember, IntentRow, IntentState, Ownership, Participant,
    ParticipantState, RenewalFault, Role,
};

/// The cluster type URN of the manager's command surface.
pub const MANAGER_URN: &str = "ai.cotal.manager";

// ---- Inputs ---------------------------------------------------------------------------------

/// One manager-service authority request, ready to issue. `now_ms` is the injected clock (unix
/// millis).
#[derive(Debug, Clone)]
pub struct ManagerAuthority {
    pub host: ManagerHost,
    pub holder: Supervisor,
    pub request: ManagerAuthorityRequest,
    pub now_ms: u64,
    /// A test probe that fails the release at one point; it exists only with the
    /// `fault-probes` feature, so a production build cannot inject one.
    #[cfg(feature = "fault-probes")]
    pub fault: Option<RenewalFault>,
}

impl ManagerAuthority {
    pub fn new(
        host: ManagerHost,
        holder: Supervisor,
        request: ManagerAuthorityRequest,
        now_ms: u64,
    ) -> Self {
        ManagerAuthority {
            host,
            holder,
            request,
            now_ms,
            #[cfg(feature = "fault-probes")]
            fault: None,
        }
    }

    /// The injected test fault, if any (always none without `fault-probes`).
    fn fault(&self) -> Option<RenewalFault> {
        #[cfg(feature = "fault-probes")]
        return self.fault;
        #[cfg(not(feature = "fault-probes"))]
        None
    }

    fn now(&self) -> UnixSeconds {
        UnixSeconds::from_millis(self.now_ms)
    }

    fn owner(&self) -> &OwnerToken {
        self.holder.owner()
    }

    fn actors(&self) -> ManagerActors {
        ManagerActors::for_instance(&self.request.envelope.instance_id)
    }

    fn gate(&self) -> Result<GateRef, EpError> {
        self.request.envelope.gate()
    }

    /// Knocks on `door` with this request's envelope and holder.
    fn knock(
        &self,
        cx: &mut Ctx<'_>,
        door: &Door,
        account: Option<&AccountKey>,
        epoch: Option<ProcessEpoch>,
        proof: Presented<'_>,
    ) -> Result<GateObservation, Halt> {
        let knock = Knock {
            envelope: &self.request.envelope,
            owner: self.owner(),
            account,
            epoch,
            proof,
        };
        check_registered(cx, door, &self.host, &knock)
    }
}

impl Script for ManagerAuthority {
    type Output = RemoteManagerAuthorityMaterial;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<RemoteManagerAuthorityMaterial, Halt> {
        issue(cx, self)
    }
}

// ---- Credentials and the result -------------------------------------------------------------

/// The closed set of credential names a manager-service result may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CredentialName {
    Supervisor,
    Executor,
    Serve,
    GoalWriter,
    SessionLedger,
    SessionServing,
    RetirementRequester,
    RunDriver,
    RunMediator,
}

impl CredentialName {
    pub const fn as_str(self) -> &'static str {
        match self {
            CredentialName::Supervisor => "supervisor",
            CredentialName::Executor => "executor",
            CredentialName::Serve => "serve",
            CredentialName::GoalWriter => "goalWriter",
            CredentialName::SessionLedger => "sessionLedger",
            CredentialName::SessionServing => "sessionServing",
            CredentialName::RetirementRequester => "retirementRequester",
            CredentialName::RunDriver => "runDriver",
            CredentialName::RunMediator => "runMediator",
        }
    }
}

impl fmt::Display for CredentialName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Role> for CredentialName {
    fn from(role: Role) -> Self {
        match role {
            Role::Serve => CredentialName::Serve,
            Role::GoalWriter => CredentialName::GoalWriter,
            Role::SessionLedger => CredentialName::SessionLedger,
        }
    }
}

/// One issued JWT and its expiry (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCredential {
    pub jwt: String,
    pub exp: u64,
}

/// What an operation issued, before the closed-set check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub credentials: Vec<(CredentialName, IssuedCredential)>,
    pub next_registration_proof: Option<RegistrationProof>,
}

/// The credentials an operation must issue (reference §4.3 item 6).
pub const fn required_credentials(operation: ManagerOperation) -> &'static [CredentialName] {
    use CredentialName as C;
    match operation {
        ManagerOperation::Prepare | ManagerOperation::Renew => &[C::Supervisor, C::Executor],
        ManagerOperation::Activate => &[C::Serve, C::GoalWriter, C::SessionLedger],
        ManagerOperation::Session => &[C::SessionServing],
        ManagerOperation::Retire => &[C::RetirementRequester],
        ManagerOperation::RenewStandingBundle => &[
            C::Supervisor,
            C::Executor,
            C::Serve,
            C::GoalWriter,
            C::SessionLedger,
        ],
        ManagerOperation::RenewRunDriver => &[C::RunDriver, C::RunMediator],
    }
}

/// The closed-set check on what an operation issued: a missing required credential is
/// `internal` "… did not issue required credential NAME"; for the two renewals the issued set
/// must be exactly the required set, else `internal` "… returned credentials outside its closed
/// profile set". A renewal never hands out a credential its profile set does not name (F90).
pub fn check_credential_set(
    operation: ManagerOperation,
    issued: &[CredentialName],
) -> Result<(), EpError> {
    let op = operation.as_str();
    let required = required_credentials(operation);
    if let Some(missing) = required.iter().find(|name| !issued.contains(name)) {
        return Err(EpError::internal(format!(
            "manager-service {op} did not issue required credential {missing}"
        )));
    }
    let mut distinct = issued.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if operation.is_renewal()
        && (distinct.len() != issued.len() || issued.iter().any(|n| !required.contains(n)))
    {
        return Err(EpError::internal(format!(
            "manager-service {op} returned credentials outside its closed profile set"
        )));
    }
    Ok(())
}

/// `min(exp) × 1000`: the result expires with its shortest-lived credential.
pub fn expires_at_ms(credentials: &[(CredentialName, IssuedCredential)]) -> Result<u64, EpError> {
    credentials
        .iter()
        .map(|(_, c)| c.exp)
        .min()
        .and_then(|exp| exp.checked_mul(1000))
        .ok_or_else(|| EpError::internal("a manager-service result carries no credential"))
}

/// The closed result of a manager-service operation (reference §4.3 item 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteManagerAuthorityMaterial {
    pub operation: ManagerOperation,
    pub space: SpaceName,
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub instance_id: crate::names::InstanceId,
    pub lifecycle_uid: crate::names::LifecycleUid,
    pub request_id: crate::manager::RequestId,
    pub registration_proof: Option<RegistrationProof>,
    /// Renewals echo their host fence.
    pub account_public_key: Option<AccountKey>,
    pub process_epoch: Option<crate::gate::ProcessEpoch>,
    pub run: Option<RunFence>,
    /// `retire` echoes its terminal coordinates.
    pub retirement: Option<Retirement>,
    /// Unix millis.
    pub issued_at: u64,
    /// Unix millis: the earliest credential expiry.
    pub expires_at: u64,
    pub actors: ManagerActors,
    pub identities: crate::manager::ManagerIdentities,
    pub next_registration_proof: Option<RegistrationProof>,
    pub credentials: Vec<(CredentialName, IssuedCredential)>,
}

impl RemoteManagerAuthorityMaterial {
    /// The credential issued under `name`.
    pub fn credential(&self, name: CredentialName) -> Option<&IssuedCredential> {
        self.credentials
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c)
    }

    /// The issued names, in issue order.
    pub fn names(&self) -> Vec<CredentialName> {
        self.credentials.iter().map(|(n, _)| *n).collect()
    }

    /// The result as the reference's `JSON.stringify` writes it. Never contains a seed.
    pub fn to_json(&self) -> String {
        let mut w = ObjectWriter::new()
            .uint("v", 1)
            .string("kind", "manager-service-authority")
            .string("operation", self.operation.as_str())
            .string("space", self.space.as_str())
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("instanceId", self.instance_id.as_str())
            .string("lifecycleUid", self.lifecycle_uid.as_str())
            .string("requestId", self.request_id.as_str());
        if let Some(proof) = &self.registration_proof {
            w = w.string("registrationProof", proof.as_str());
        }
        if let (Some(account), Some(epoch)) = (&self.account_public_key, self.process_epoch) {
            w = w
                .string("accountPublicKey", account.as_str())
                .uint("processEpoch", epoch.0);
        }
        if let Some(run) = &self.run {
            let run = ObjectWriter::new()
                .string("runId", run.run_id.as_str())
                .string("holder", run.holder.as_str())
                .string("takeoverId", run.takeover_id.as_str())
                .uint("epoch", run.epoch.0)
                .uint("fencingToken", run.fencing_token.0)
                .string("driverId", run.driver_id.as_str())
                .string("mediatorId", run.mediator_id.as_str())
                .finish();
            w = w.raw("run", &run);
        }
        if let Some(retirement) = &self.retirement {
            w = w.raw("retirement", &retirement_json(retirement));
        }
        w = w
            .uint("issuedAt", self.issued_at)
            .uint("expiresAt", self.expires_at)
            .raw("actors", &self.actors.to_json())
            .raw("identities", &self.identities.to_json());
        if let Some(proof) = &self.next_registration_proof {
            w = w.string("nextRegistrationProof", proof.as_str());
        }
        let credentials = self
            .credentials
            .iter()
            .fold(ObjectWriter::new(), |o, (name, c)| {
                o.raw(
                    name.as_str(),
                    &ObjectWriter::new()
                        .string("jwt", &c.jwt)
                        .uint("exp", c.exp)
                        .finish(),
                )
            })
            .finish();
        w.raw("credentials", &credentials).finish()
    }
}

/// `{id, target: {owner, actor, lifecycleUid}, opId, serveEpoch}`, the parsed request's order.
fn retirement_json(r: &Retirement) -> String {
    let t = &r.target;
    let target = ObjectWriter::new()
        .string("owner", t.owner.as_str())
        .string("actor", t.actor.as_str())
        .string("lifecycleUid", t.lifecycle_uid.as_str())
        .finish();
    ObjectWriter::new()
        .string("id", r.id.as_str())
        .raw("target", &target)
        .string("opId", r.op_id.as_str())
        .uint("serveEpoch", r.serve_epoch.0)
        .finish()
}

// ---- Holder and request checks --------------------------------------------------------------

/// Every nkey the request names (the five identities, and a run's driver and mediator, a
/// retirement's requester, a session's serving key) must be distinct: one nkey cannot collapse
/// separate authority lifetimes. The parser checks only driver ≠ mediator.
pub fn require_distinct_identities(request: &ManagerAuthorityRequest) -> Result<(), EpError> {
    let mut keys: Vec<&UserKey> = request.envelope.identities.keys().to_vec();
    if let Some(run) = request.run() {
        keys.extend([&run.driver_id, &run.mediator_id]);
    }
    if let Some(retirement) = request.retirement() {
        keys.push(&retirement.id);
    }
    if let Some(session) = request.session() {
        keys.push(&session.id);
    }
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != keys.len() {
        return Err(EpError::bad_request(
            "manager-service identities must be distinct; one nkey cannot collapse separate \
             authority lifetimes",
        ));
    }
    Ok(())
}

// ---- Signing --------------------------------------------------------------------------------

/// Signs a data-account user JWT for the caller-held `user` nkey, valid from `now` for the
/// profile's lifetime.
fn sign(
    host: &ManagerHost,
    profile: &Profile,
    user: &UserKey,
    now: UnixSeconds,
) -> Result<IssuedCredential, EpError> {
    let (jwt, exp) = profile.sign_for(&host.signer, host.account.as_str(), user.as_str(), now)?;
    Ok(IssuedCredential { jwt, exp })
}

/// The connection id a caller-held key's inbox is keyed by: the nkey itself.
fn conn(key: &UserKey) -> Result<ConnId, EpError> {
    ConnId::parse(key.as_str()).map_err(|e| EpError::internal(e.message))
}

fn actor(name: &str) -> Result<ActorToken, EpError> {
    ActorToken::parse(name).map_err(|e| EpError::internal(e.message))
}

/// The supervisor (standing lifetime) and executor (300 s) `remote-manager` pair.
fn base_pair(call: &ManagerAuthority) -> Result<Vec<(CredentialName, IssuedCredential)>, EpError> {
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
fn manager_surface(document: &ClusterDocument) -> Result<Vec<CommandToken>, EpError> {
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
fn family(
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
fn release(
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

fn profile_token(run: &journal::RunId) -> Result<profiles::RunId, EpError> {
    profiles::RunId::parse(run.as_str()).map_err(|e| EpError::internal(e.message))
}

/// Issues one manager-service operation (reference §4.3): the holder's `supervise` scope,
/// distinct nkeys, the operation's own checks and credentials, the closed-set check, and the
/// closed result.
pub fn issue(
    cx: &mut Ctx<'_>,
    call: &ManagerAuthority,
) -> Result<RemoteManagerAuthorityMaterial, Halt> {
    call.holder.require_supervise("manager-service authority")?;
    let r = &call.request;
    require_distinct_identities(r)?;
    let issued = match &r.call {
        ManagerCall::Prepare => prepare(call)?,
        ManagerCall::Renew { proof } => renew(cx, call, proof)?,
        ManagerCall::Activate {
            proof,
            contract_artifacts,
        } => activate(cx, call, proof, contract_artifacts)?,
        ManagerCall::RenewStandingBundle { proof, fence } => {
            renew_standing_bundle(cx, call, proof, fence)?
        }
        ManagerCall::RenewRunDriver { proof, fence, run } => {
            renew_run_driver(cx, call, proof, fence, run)?
        }
        ManagerCall::Session { proof, session: s } => session(call, proof, s)?,
        ManagerCall::Retire { proof, retirement } => retire(cx, call, proof, retirement)?,
    };
    material(call, issued).map_err(Halt::from)
}

/// Applies the closed-set check and assembles the result.
pub fn material(
    call: &ManagerAuthority,
    issued: Issued,
) -> Result<RemoteManagerAuthorityMaterial, EpError> {
    let r = &call.request;
    let names: Vec<CredentialName> = issued.credentials.iter().map(|(n, _)| *n).collect();
    check_credential_set(r.operation(), &names)?;
    let e = &r.envelope;
    Ok(RemoteManagerAuthorityMaterial {
        operation: r.operation(),
        space: e.space.clone(),
        owner: call.owner().clone(),
        actor: e.actor.clone(),
        instance_id: e.instance_id.clone(),
        lifecycle_uid: e.manager_lifecycle_uid.clone(),
        request_id: e.request_id.clone(),
        registration_proof: r.registration_proof().cloned(),
        account_public_key: r.renewal().map(|f| f.account_public_key.clone()),
        process_epoch: r.renewal().map(|f| f.process_epoch),
        run: r.run().cloned(),
        retirement: r.retirement().cloned(),
        issued_at: call.now_ms,
        expires_at: expires_at_ms(&issued.credentials)?,
        actors: call.actors(),
        identities: e.identities.clone(),
        next_registration_proof: issued.next_registration_proof,
        credentials: issued.credentials,
    })
}
