//! Host incarnations: self-authorized reverse-DNS host endpoints and the host fence
//! (reference-auth-service §7.1–§7.2).
//!
//! A platform host registers one instance of its own endpoint at every start, before it admits or
//! recovers any work. The registration is the shared self-authorized ceremony
//! ([`SelfAuthorizedInstance`]): publish the contract artifacts, provision the gate open on first
//! sight, register under a name authority that authorizes exactly this endpoint for exactly this
//! owner, then confirm the gate still stands at what the registration committed. The first start
//! of an instance commits epoch 0; each later start commits the previous epoch + 1 and so fences
//! its predecessor (F69), which learns it through [`AwaitHostFence`].
//!
//! The host's gate records `local.host_serve_<instanceId>`, a principal nothing holds: the host is
//! minted no serve credential, so its credential family stays empty and the registration's
//! verified-eviction phase has nobody to evict (F68).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::authority::SelfAuthority;
use crate::canon::Digest;
use crate::contract::{
    artifact_canonical_bytes, parse_cluster_document, publish_artifact, ClusterManifest,
};
use crate::error::EpError;
use crate::gate::{EndpointGate, GateState, OpKind, ProcessEpoch, RegistrationRevision};
use crate::issuance::{observe_gate, GateObservation, GateRef, ProvisionGate};
use crate::kv::{Revision, Store};
use crate::ledger;
use crate::machine::{Ctx, Effect, Halt, Machine, Observation, Replay, Script, Step};
use crate::names::{ActorToken, EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName};
use crate::registration::{RegisterInstance, Registered, EVICT_PRINCIPALS_MAX};
use crate::service::ServiceSpec;
use crate::wire::{safe_uint, MAX_SAFE_INTEGER};

/// How long [`AwaitHostFence`] sleeps between gate reads. It polls because no runtime credential
/// may create a consumer on the auth bucket (SPEC 13.9); the NATS adapter cuts the sleep short
/// when the plane itself writes the gate.
pub const HOST_FENCE_POLL: Duration = Duration::from_millis(1000);

/// The actor prefix of a host gate's principal; the instance id completes it.
const HOST_SERVE_ACTOR: &str = "host_serve_";

/// A host endpoint name: a valid endpoint name with at least two labels (reverse-DNS). Single
/// labels are reserved for the shipped endpoints (F61, SPEC 13.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostEndpoint(EndpointName);

impl HostEndpoint {
    /// Parses a host endpoint; every refusal is `bad-request` and names SPEC 13.2.
    pub fn parse(s: &str) -> Result<HostEndpoint, EpError> {
        let name = EndpointName::parse(s).map_err(|e| {
            EpError::bad_request(format!(
                "host endpoint refused: {}; a host endpoint is a reverse-DNS endpoint name \
                 (SPEC 13.2)",
                e.message
            ))
        })?;
        HostEndpoint::new(name)
    }

    /// Admits `name` as a host endpoint when it is reverse-DNS (F61).
    pub fn new(name: EndpointName) -> Result<HostEndpoint, EpError> {
        if !name.is_reverse_dns() {
            return Err(EpError::bad_request(format!(
                "host endpoint \"{name}\" is a single-label name; single-label names are reserved \
                 for the shipped endpoints, so a host endpoint must be reverse-DNS, e.g. \
                 com.example.{name} (SPEC 13.2)"
            )));
        }
        Ok(HostEndpoint(name))
    }

    pub fn name(&self) -> &EndpointName {
        &self.0
    }
}

/// `local.host_serve_<instanceId>`: the principal a host gate records. Nothing holds it.
pub fn host_principal(instance: &InstanceId) -> Result<Principal, EpError> {
    let actor = ActorToken::parse(&format!("{HOST_SERVE_ACTOR}{instance}"))?;
    Ok(Principal::new(OwnerToken::local(), actor))
}

/// Contract artifacts to publish (canonical bytes) and the closure digest the spec advertises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfContract {
    pub cluster_digest: Digest,
    pub artifacts: Vec<Vec<u8>>,
}

/// One document's single-document closure: its canonical bytes, then its manifest's, whose
/// digest is the closure digest a referrer names (SPEC 13.7: `$ref`s and command digests name
/// closures, not bare artifacts).
fn single_document_closure(doc: &Value) -> Result<(Digest, [Vec<u8>; 2]), EpError> {
    let root = artifact_canonical_bytes(doc)?;
    let manifest = ClusterManifest::new(Digest::of(&root));
    Ok((manifest.closure_digest(), [root, manifest.to_bytes()]))
}

impl SelfContract {
    /// One cluster document with its single-document manifest: the document's canonical bytes,
    /// then the manifest's, whose digest is the closure digest. Refuses an invalid document
    /// (`contract-invalid`) before anything is written.
    pub fn from_cluster(doc: &Value) -> Result<SelfContract, EpError> {
        SelfContract::with_schemas(doc, &[])
    }

    /// A cluster document whose commands name schema closures: every schema's closure is
    /// published first (so each digest the document names resolves, SPEC 13.7), then the
    /// document's own.
    pub fn with_schemas(doc: &Value, schemas: &[Value]) -> Result<SelfContract, EpError> {
        parse_cluster_document(doc)?;
        let mut artifacts = Vec::with_capacity(2 * (schemas.len() + 1));
        for schema in schemas {
            let (_, closure) = single_document_closure(schema)?;
            artifacts.extend(closure);
        }
        let (cluster_digest, closure) = single_document_closure(doc)?;
        artifacts.extend(closure);
        Ok(SelfContract {
            cluster_digest,
            artifacts,
        })
    }
}

/// The plane's own endpoint name: the `auth` instance every plane registers at start.
pub const AUTH_ENDPOINT: &str = "auth";

/// The command the plane's auth control rail serves: retire one lifecycle.
pub const RETIRE_LIFECYCLE: &str = "retire-lifecycle";

/// `retire-lifecycle`'s input: the requester's stable op id and the serve-issuance coordinate
/// its grant is keyed under. The target lifecycle is never an argument: `exact` mode carries it
/// in the broker-enforced subject.
fn retire_lifecycle_input() -> Value {
    serde_json::json!({
        "type": "object", "additionalProperties": false,
        "required": ["opId", "serveEndpoint", "serveInstanceId", "serveEpoch"],
        "properties": {
            "opId": {"type": "string"},
            "serveEndpoint": {"type": "string"},
            "serveInstanceId": {"type": "string"},
            "serveEpoch": {"type": "integer", "minimum": 0},
        },
    })
}

/// `retire-lifecycle`'s output: what the retirement did.
fn retire_lifecycle_output() -> Value {
    serde_json::json!({
        "type": "object", "additionalProperties": false,
        "required": ["retired", "lifecycleUid", "opId", "evictedPrincipals"],
        "properties": {
            "retired": {"type": "boolean"},
            "lifecycleUid": {"type": "string"},
            "opId": {"type": "string"},
            "evictedPrincipals": {"type": "array", "items": {"type": "string"}},
        },
    })
}

/// The closure digests `retire-lifecycle` requests pin as their `op.inputDigest` and
/// `op.outputDigest`: those [`auth_cluster`] names.
pub fn retire_lifecycle_digests() -> Result<(Digest, Digest), EpError> {
    let (input, _) = single_document_closure(&retire_lifecycle_input())?;
    let (output, _) = single_document_closure(&retire_lifecycle_output())?;
    Ok((input, output))
}

/// The `auth` endpoint's cluster document, as the reference registers it (revision 1): the auth
/// control rail's one command, `retire-lifecycle`, targeted in `exact` mode under capability
/// `auth.admin`, naming its input and output schemas by closure digest. A TypeScript peer reads
/// the same closure digest in the plane's spec.
pub fn auth_cluster() -> Result<Value, EpError> {
    let (input, output) = retire_lifecycle_digests()?;
    Ok(serde_json::json!({
        "urn": "ai.cotal.auth", "revision": 1, "attributes": [], "events": [],
        "commands": [{
            "name": RETIRE_LIFECYCLE, "class": "ephemeral", "targeted": true,
            "modes": ["exact"], "capability": "auth.admin",
            "inputDigest": input.to_prefixed(), "outputDigest": output.to_prefixed(),
        }],
    }))
}

impl SelfContract {
    /// The plane's own contract: the two schema closures, then [`auth_cluster`]'s, what `up`
    /// publishes before it registers its `auth` instance.
    pub fn auth() -> Result<SelfContract, EpError> {
        SelfContract::with_schemas(
            &auth_cluster()?,
            &[retire_lifecycle_input(), retire_lifecycle_output()],
        )
    }
}

/// The plane's own `auth` instance as the reference registers it (reference §2.5 step 2, §7.1):
/// spec owner `local`, gate principal `local.<serve nkey>`, the [`SelfContract::auth`] closure.
/// A TypeScript peer reading these rows sees the same `auth` instance the reference writes.
pub fn auth_instance(
    space: &SpaceName,
    instance: &InstanceId,
    serve_key: &str,
    op_id: OpId,
) -> Result<SelfAuthorizedInstance, EpError> {
    let endpoint = EndpointName::parse(AUTH_ENDPOINT)?;
    Ok(SelfAuthorizedInstance {
        gate: GateRef::new(space.clone(), endpoint, instance.clone()),
        owner: OwnerToken::local(),
        principal: auth_principal(serve_key)?,
        contract: SelfContract::auth()?,
        op_id,
    })
}

/// The plane's gate principal, `local.<serve nkey>`: what its connections are attributed to.
pub fn auth_principal(serve_key: &str) -> Result<Principal, EpError> {
    let actor = ActorToken::parse(serve_key).map_err(|e| {
        EpError::bad_request(format!(
            "the plane's serve key is not a principal actor: {}",
            e.message
        ))
    })?;
    Ok(Principal::new(OwnerToken::local(), actor))
}

/// The shared self-authorized registration ceremony (reference §7.1), used for endpoints the
/// plane registers on its own authority: the host endpoint, and the plane's `auth` endpoint.
///
/// Order: publish every artifact before the registration that advertises it (F9: create-only,
/// idempotent by content) → observe the gate, provision it open for `principal` only when absent
/// (Q-3; a DEL/PURGE marker is refused, F9) → [`RegisterInstance`] with spec `{endpoint, owner,
/// clusterDigests:[closure], protocol:{v:1}}` under a [`SelfAuthority`] for exactly this
/// endpoint and owner (F61, F62, F67; the ceremony's own F-rules) → the confirming read
/// ([`confirm_registration`]). Ambiguous writes are settled inside each step by leader
/// read-back (artifacts by content, the gate by its bytes, the ceremony by its op id).
#[derive(Debug, Clone)]
pub struct SelfAuthorizedInstance {
    pub gate: GateRef,
    pub owner: OwnerToken,
    /// Recorded in the gate when this start provisions it.
    pub principal: Principal,
    pub contract: SelfContract,
    /// The operation this start runs: [`resumed_op`]'s choice, recorded durably by the caller
    /// before the ceremony's freeze.
    pub op_id: OpId,
}

/// Which operation a (re)start of a self-authorized registration runs under, given the gate it
/// observed and the op id an earlier start recorded durably before its freeze (crash-safe
/// self-registration, F14: only a retry of the same operation may finish a frozen gate, and it
/// resumes the same op id). `Some(recorded)` when the gate is still frozen by that very
/// registration: the ceremony then resumes it instead of refusing. `None` otherwise — no record,
/// or the recorded operation already ended (its gate reopened, or it never froze) — and the
/// caller takes a fresh op id, records it, then registers.
///
/// Resuming is safe only when the recorded operation has no other live executor; the caller
/// proves that (the daemon holds an exclusive lock on its state dir for its whole life, so a
/// predecessor that recorded the op id has exited).
pub fn resumed_op(observed: Option<&EndpointGate>, recorded: Option<&OpId>) -> Option<OpId> {
    let (gate, recorded) = (observed?, recorded?);
    let op = gate.op()?;
    (gate.state() == GateState::Frozen
        && op.kind() == OpKind::Registration
        && op.op_id() == recorded)
        .then(|| recorded.clone())
}

/// [`SelfAuthorizedInstance::prepare`] as a machine, for callers that run the registration
/// themselves (the daemon wraps it in the serving variant).
#[derive(Debug, Clone)]
pub struct PrepareSelfAuthorized<'a>(pub &'a SelfAuthorizedInstance);

impl Script for PrepareSelfAuthorized<'_> {
    type Output = bool;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<bool, Halt> {
        self.0.prepare(cx)
    }
}

impl SelfAuthorizedInstance {
    /// Steps 2–3: publish, then provision the gate only if it does not exist yet. Returns
    /// whether this call provisioned it.
    pub fn prepare(&self, cx: &mut Ctx<'_>) -> Result<bool, Halt> {
        // Each publish is memoized once done: its checks (the artifact's strict parse, its
        // digest, the stored bytes' verification) would otherwise rerun on every later replay.
        for artifact in &self.contract.artifacts {
            cx.sub(|cx| publish_artifact(cx, artifact))?;
        }
        if observe_gate(cx, &self.gate)?.is_some() {
            return Ok(false);
        }
        cx.call(&ProvisionGate {
            gate: self.gate.clone(),
            principal: self.principal.clone(),
        })?;
        Ok(true)
    }

    /// Step 4's registrar: the self-authorized spec under this start's op id.
    pub fn registration(&self) -> Result<RegisterInstance, EpError> {
        let endpoint = &self.gate.endpoint;
        let spec = ServiceSpec::from_value(
            serde_json::json!({
                "endpoint": endpoint.as_str(), "owner": self.owner.as_str(),
                "clusterDigests": [self.contract.cluster_digest.to_prefixed()],
                "protocol": {"v": 1},
            }),
            endpoint,
        )?;
        Ok(RegisterInstance {
            space: self.gate.space.clone(),
            spec,
            instance: self.gate.instance.clone(),
            registrant: self.owner.clone(),
            authority: Arc::new(SelfAuthority {
                name: endpoint.clone(),
                owner: self.owner.clone(),
            }),
            op_id: self.op_id.clone(),
            evict_max: EVICT_PRINCIPALS_MAX,
        })
    }
}

impl Script for SelfAuthorizedInstance {
    type Output = Registered;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<Registered, Halt> {
        let register = self.registration()?;
        cx.call(&PrepareSelfAuthorized(self))?;
        let registered = *cx.call(&register)?;
        confirm_registration(cx, &self.gate, &registered)?;
        Ok(registered)
    }
}

/// The confirming read (reference §7.1 step 6): a read is never a fence (F6), and a later start
/// may already have registered by the time this one returns. The gate must still be `open` at
/// exactly the committed process epoch and registration revision, else `conflict`.
pub fn confirm_registration(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    registered: &Registered,
) -> Result<(), Halt> {
    let seen = observe_host_gate(cx, gate)?;
    let now = match &seen {
        Some(o)
            if o.gate.state() == GateState::Open
                && o.gate.process_epoch() == registered.process_epoch
                && o.gate.registration_revision() == registered.registration_revision =>
        {
            return Ok(())
        }
        Some(o) => format!(
            "it is {} at epoch {}, registration revision {}",
            o.gate.state().as_str(),
            o.gate.process_epoch(),
            o.gate.registration_revision()
        ),
        None => "it is gone".to_owned(),
    };
    Err(EpError::conflict(format!(
        "gate {} is no longer open at this registration (epoch {}, registration revision {}): \
         {now}; a later barrier fenced this start (SPEC 13.1)",
        gate.key(),
        registered.process_epoch,
        registered.registration_revision
    ))
    .into())
}

/// A host's fixed configuration: which space, which endpoint, which contract.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub space: SpaceName,
    pub endpoint: HostEndpoint,
    pub contract: SelfContract,
}

impl HostConfig {
    /// A platform host's configuration (reference §7.3): its endpoint must be reverse-DNS, its
    /// contract the cluster document with the schema artifacts its commands' digests name. The
    /// error is one sentence.
    pub fn of_platform(
        space: &SpaceName,
        endpoint: &str,
        cluster: &Value,
        artifacts: &[Value],
    ) -> Result<HostConfig, String> {
        Ok(HostConfig {
            space: space.clone(),
            endpoint: HostEndpoint::parse(endpoint).map_err(|e| e.message)?,
            contract: SelfContract::with_schemas(cluster, artifacts)
                .map_err(|e| format!("the platform host's contract: {}", e.message))?,
        })
    }

    /// The gate of one host instance.
    pub fn gate(&self, instance: &InstanceId) -> GateRef {
        GateRef::new(
            self.space.clone(),
            self.endpoint.name().clone(),
            instance.clone(),
        )
    }
}

/// What a host start committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIncarnation {
    pub instance: InstanceId,
    /// The epoch to arm [`AwaitHostFence`] with.
    pub process_epoch: ProcessEpoch,
    pub registration_revision: RegistrationRevision,
}

/// Registers one host incarnation: [`SelfAuthorizedInstance`] for the host endpoint, owner
/// `local`, principal [`host_principal`]. The first start of an instance commits epoch 0, each
/// later one the previous + 1, fencing the predecessor (F69). The epoch can be stale as soon as
/// this returns; the host arms [`AwaitHostFence`] with it.
#[derive(Debug, Clone)]
pub struct RegisterHostIncarnation {
    pub host: HostConfig,
    pub instance: InstanceId,
    /// A fresh op id per start, or the recorded one [`resumed_op`] chose after a crash.
    pub op_id: OpId,
}

impl RegisterHostIncarnation {
    fn ceremony(&self) -> Result<SelfAuthorizedInstance, EpError> {
        Ok(SelfAuthorizedInstance {
            gate: self.host.gate(&self.instance),
            owner: OwnerToken::local(),
            principal: host_principal(&self.instance)?,
            contract: self.host.contract.clone(),
            op_id: self.op_id.clone(),
        })
    }
}

impl Script for RegisterHostIncarnation {
    type Output = HostIncarnation;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<HostIncarnation, Halt> {
        let registered = *cx.call(&self.ceremony()?)?;
        Ok(HostIncarnation {
            instance: self.instance.clone(),
            process_epoch: registered.process_epoch,
            registration_revision: registered.registration_revision,
        })
    }
}

/// Reads a host gate (read-only, leader-served): `None` when there is none — absent, or deleted
/// (a DEL/PURGE marker means the incarnation's gate is gone, which fences it). Bad bytes are
/// `internal`; a failed read is `unavailable`.
pub fn observe_host_gate(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
) -> Result<Option<GateObservation>, Halt> {
    let Some(entry) = ledger::read(cx, Store::Auth, &gate.key())? else {
        return Ok(None);
    };
    if !entry.is_put() {
        return Ok(None);
    }
    Ok(Some(GateObservation {
        gate: crate::gate::EndpointGate::parse(&entry.value)?,
        revision: entry.revision,
        raw: entry.value,
    }))
}

/// [`observe_host_gate`] as a machine.
#[derive(Debug, Clone)]
pub struct ObserveHostGate {
    pub gate: GateRef,
}

impl Script for ObserveHostGate {
    type Output = Option<GateObservation>;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Self::Output, Halt> {
        observe_host_gate(cx, &self.gate)
    }
}

/// Parses a caller's `processEpoch`: a non-negative safe integer, 0 included; anything else is
/// `bad-request`.
pub fn parse_host_epoch(value: &Value) -> Result<ProcessEpoch, EpError> {
    // `safe_uint` also admits integral doubles (`1.0`), as `Number.isSafeInteger` does.
    safe_uint(value).map(ProcessEpoch).ok_or_else(|| {
        EpError::bad_request(format!(
            "processEpoch must be a non-negative integer, got {value}"
        ))
    })
}

/// True when the incarnation at `epoch` is fenced by what the read saw: no gate, a gate not
/// `open`, or one at another epoch.
///
/// Not `open` counts even at `epoch`: a frozen gate means a barrier won it (F21), nothing is
/// released under it (F22), and no barrier hands the registration back as it was — a
/// re-registration reopens at the next epoch (F69), a reconciler's abort-reopen at the next
/// generation after evicting every holder (F52). Waiting out a freeze would only keep a process
/// claiming to serve what it can no longer mint. An owner therefore arms the fence only after
/// its own registration has reopened the gate (the confirming read, [`confirm_registration`]),
/// never while its own barrier holds it.
pub fn host_fenced(seen: Option<&GateObservation>, epoch: ProcessEpoch) -> bool {
    seen.is_none_or(|o| o.gate.state() != GateState::Open || o.gate.process_epoch() != epoch)
}

/// How a host incarnation's fence ended: the one classification every holder reports from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceEnd {
    /// The gate is gone (deleted, or never there).
    Gone,
    /// A read showed the gate below the revision its owner saw after registering: the store
    /// lost an acknowledged write, so nothing it says can be trusted.
    RolledBack {
        seen: GateObservation,
        floor: Revision,
    },
    /// The gate is at another process epoch, in any state: a successor registered (F69).
    Superseded(GateObservation),
    /// The gate is at this epoch but not open: a barrier holds it (F21, F22).
    Held(GateObservation),
}

impl FenceEnd {
    /// The gate as last read, `None` when it is gone (what the reference's `awaitHostFence`
    /// returns).
    pub fn observation(&self) -> Option<&GateObservation> {
        match self {
            FenceEnd::Gone => None,
            FenceEnd::RolledBack { seen, .. }
            | FenceEnd::Superseded(seen)
            | FenceEnd::Held(seen) => Some(seen),
        }
    }

    /// The operator's sentence for a plane whose fence at `epoch` on `gate` ended this way
    /// (F21, F22, F69): a successor's registration, a barrier holding the gate, the gate gone,
    /// or a store that rolled back below the revision the plane stood at after registering
    /// (ecosystem §8).
    pub fn plane_copy(&self, gate: &GateRef, epoch: ProcessEpoch) -> String {
        match self {
            FenceEnd::RolledBack { seen, floor } => format!(
                "gate {} is at revision {}, below the {} it stood at after this plane's \
                 registration: the store rolled back (an acknowledged write was lost), so \
                 nothing it says can be trusted; investigate before starting again",
                gate.key(),
                seen.revision.0,
                floor.0
            ),
            FenceEnd::Superseded(seen) => format!(
                "the gate moved from epoch {epoch} to {} (generation {}, {}); a successor registered",
                seen.gate.process_epoch(),
                seen.gate.generation(),
                seen.gate.state().as_str()
            ),
            FenceEnd::Held(seen) => format!(
                "the gate is {} at generation {} ({}), not open at this plane's epoch {epoch}; a \
                 barrier holds it",
                seen.gate.state().as_str(),
                seen.gate.generation(),
                seen.gate
                    .op()
                    .map(|op| format!("{}:{}", op.kind().as_str(), op.op_id()))
                    .unwrap_or_default()
            ),
            FenceEnd::Gone => format!("gate {} is gone", gate.key()),
        }
    }

    /// The refusal a plane audits when its fence ended on a rolled-back gate (`None` for any
    /// other end): `failed-precondition` with `copy` ([`FenceEnd::plane_copy`]) and the
    /// rollback detail naming the gate.
    pub fn rollback_refusal(&self, gate: &GateRef, copy: &str) -> Option<EpError> {
        let FenceEnd::RolledBack { .. } = self else {
            return None;
        };
        Some(
            EpError::failed_precondition(copy.to_owned()).with_detail(serde_json::json!({
                "kind": crate::rollback::ROLLBACK_DETECTED,
                "gate": gate.key(),
            })),
        )
    }

    /// The end a read that fences decided, in the order the checks matter: a rolled-back read
    /// first (its other fields cannot be trusted), then another epoch, then a held gate.
    fn of(seen: Option<GateObservation>, epoch: ProcessEpoch, floor: Option<Revision>) -> Self {
        match seen {
            None => FenceEnd::Gone,
            Some(seen) => match floor.filter(|floor| seen.revision.0 < floor.0) {
                Some(floor) => FenceEnd::RolledBack { seen, floor },
                None if seen.gate.process_epoch() != epoch => FenceEnd::Superseded(seen),
                None => FenceEnd::Held(seen),
            },
        }
    }
}

/// The operator's sentence for a plane whose server is lost (every connection dropped at once,
/// its scanners included) and did not come back within `limit_secs`: a failure a supervisor
/// restarts, not a fence, since no successor holds its gate.
pub fn broker_lost_copy(limit_secs: u64) -> String {
    format!(
        "lost the connection to the NATS server and it did not come back within {limit_secs}s; \
         stopping (start again once it is back)"
    )
}

/// The operator's cause while a plane waits up to `limit_secs` for its lost server (a restart
/// of it, a network blip): it serves again, under a re-taken plane claim, once its connections
/// are back.
pub fn broker_awaited_copy(limit_secs: u64) -> String {
    format!(
        "lost the connection to the NATS server; waiting up to {limit_secs}s for it to come back"
    )
}

/// The operator's sentence for a plane whose gate has not read for `limit_secs` (`why`, the
/// last read's error): only a fresh read can tell it has been fenced (F6), so it stops claiming
/// to serve.
pub fn gate_unreadable_copy(gate: &GateRef, limit_secs: u64, why: &str) -> String {
    format!(
        "cannot read gate {} for {limit_secs}s ({why}); stopping, since a fence can no longer be \
         noticed",
        gate.key()
    )
}

/// Resolves when the host incarnation at `epoch` is fenced (see [`host_fenced`]) or, armed with
/// [`AwaitHostFence::with_floor`], when a read shows the gate below that revision (a rolled-back
/// store), with how it ended ([`FenceEnd`]). Otherwise it sleeps its poll ([`HOST_FENCE_POLL`]
/// unless [`AwaitHostFence::with_poll`] says otherwise) and reads again, forever: the caller
/// drops the machine to stop waiting. A failed read fails it; a driver that outlives failed
/// reads re-arms it ([`AwaitHostFence::rearmed`]). It asks for a sleep only right after a read
/// that saw the incarnation still held, so each sleep is also a sign the gate was readable.
///
/// Hand-written rather than a [`Script`]: it may run for the whole life of a host, so it keeps
/// only the read in flight, never a history of polls.
#[derive(Debug)]
pub struct AwaitHostFence {
    gate: GateRef,
    epoch: ProcessEpoch,
    poll: Duration,
    /// A gate read below this revision resolves the fence too: the store rolled back
    /// (ecosystem §8), so nothing the gate says any more can be trusted.
    floor: Option<Revision>,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    Reading(Box<Replay<ObserveHostGate>>),
    Sleeping,
    Done,
}

impl Phase {
    /// A fresh leader read of the gate.
    fn read(gate: &GateRef) -> Phase {
        Phase::Reading(Box::new(Replay::new(ObserveHostGate {
            gate: gate.clone(),
        })))
    }
}

impl AwaitHostFence {
    /// Arms the fence for the incarnation at `epoch`; an epoch beyond the safe integers is
    /// `bad-request`.
    pub fn new(gate: GateRef, epoch: ProcessEpoch) -> Result<AwaitHostFence, EpError> {
        if epoch.0 > MAX_SAFE_INTEGER {
            return Err(EpError::bad_request(format!(
                "processEpoch must be a non-negative integer, got {epoch}"
            )));
        }
        let phase = Phase::read(&gate);
        Ok(AwaitHostFence {
            gate,
            epoch,
            poll: HOST_FENCE_POLL,
            floor: None,
            phase,
        })
    }

    /// The same fence also resolving on a gate read below revision `floor` (the revision the
    /// owner saw its gate at once it registered): a rolled-back store.
    pub fn with_floor(mut self, floor: Revision) -> AwaitHostFence {
        self.floor = Some(floor);
        self
    }

    /// True when `seen` fences this incarnation: [`host_fenced`], or below the floor.
    fn fences(&self, seen: Option<&GateObservation>) -> bool {
        host_fenced(seen, self.epoch)
            || seen.is_some_and(|o| self.floor.is_some_and(|floor| o.revision.0 < floor.0))
    }

    /// The same fence sleeping `poll` between reads: how late, at most, it notices a writer other
    /// than its own driver. A zero poll re-reads without pause.
    pub fn with_poll(mut self, poll: Duration) -> AwaitHostFence {
        self.poll = poll;
        self
    }

    /// A fresh fence for the same incarnation and poll, starting with a read: what a driver arms
    /// again after a failed read it chooses to outlive.
    pub fn rearmed(&self) -> AwaitHostFence {
        AwaitHostFence {
            gate: self.gate.clone(),
            epoch: self.epoch,
            poll: self.poll,
            floor: self.floor,
            phase: Phase::read(&self.gate),
        }
    }

    /// Arms the fence with a caller's JSON `processEpoch` ([`parse_host_epoch`]).
    pub fn from_json(gate: GateRef, epoch: &Value) -> Result<AwaitHostFence, EpError> {
        AwaitHostFence::new(gate, parse_host_epoch(epoch)?)
    }

    pub fn gate(&self) -> &GateRef {
        &self.gate
    }

    pub fn epoch(&self) -> ProcessEpoch {
        self.epoch
    }

    pub fn poll(&self) -> Duration {
        self.poll
    }

    fn finish<T>(&mut self, result: Result<T, EpError>) -> Step<T> {
        self.phase = Phase::Done;
        Step::Done(result)
    }
}

impl Machine for AwaitHostFence {
    type Output = FenceEnd;

    fn step(&mut self, observation: Option<Observation>) -> Step<Self::Output> {
        let observation = match (&self.phase, observation) {
            (Phase::Done, _) => {
                return Step::Done(Err(EpError::internal(
                    "the host fence was stepped after it resolved",
                )))
            }
            (Phase::Sleeping, None) => return Step::Effect(Effect::Sleep(self.poll)),
            (Phase::Sleeping, Some(Observation::Slept)) => {
                self.phase = Phase::read(&self.gate);
                None
            }
            (Phase::Sleeping, Some(other)) => {
                return self.finish(Err(EpError::internal(format!(
                    "the driver answered the host fence's sleep with {other:?}"
                ))))
            }
            (Phase::Reading(_), observation) => observation,
        };
        let Phase::Reading(read) = &mut self.phase else {
            return self.finish(Err(EpError::internal("the host fence lost its read")));
        };
        match read.step(observation) {
            Step::Effect(effect) => Step::Effect(effect),
            Step::Done(Err(e)) => self.finish(Err(e)),
            Step::Done(Ok(seen)) if self.fences(seen.as_ref()) => {
                let end = FenceEnd::of(seen, self.epoch, self.floor);
                self.finish(Ok(end))
            }
            Step::Done(Ok(_)) => {
                self.phase = Phase::Sleeping;
                Step::Effect(Effect::Sleep(self.poll))
            }
        }
    }
}
