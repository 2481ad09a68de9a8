//! Fixtures shared by the run test files: one space `s1`, one manager instance registered by
//! `OWNER` (gate open at registration revision 7, process epoch 3), its run requests, and an
//! issued caller with a ceiling that permits its run-start.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_core::driver::{drive, ModelWorld};
use cotal_core::gate::{
    Coordinates, EndpointGate, GateOp, Generation, NameAuthorityRevision, ProcessEpoch,
    RegistrationRevision,
};
use cotal_core::journal::{FencingToken, RunEpoch, RunHolder, RunId};
use cotal_core::kv::{Revision, Store};
use cotal_core::machine::{Ctx, Halt, Replay, Script};
use cotal_core::manager::{
    current_registration_proof, AccountKey, AgentOnboarding, ManagerEnvelope, ManagerHost,
    ProofSecret, Supervisor,
};
use cotal_core::names::DerivedOwner;
use cotal_core::names::{EndpointName, OpId, OwnerToken, Principal, SpaceName};
use cotal_core::profiles::StandingTtl;
use cotal_core::run::{
    parse_run_admission_request, parse_run_attempt_request, write_run_status, AdmissionOutcome,
    AdmitRun, AuthorizeRunAdmission, HostedRunStatus, IssuedEvidence, IssuedGeneration, IssuedRef,
    ObservedRunRequest, RunRequestOperation, RunState, SubjectAllow, SubjectPermission,
    SubjectPermissions,
};
use cotal_core::EpError;
use serde_json::{json, Value};

pub const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";
pub const OTHER_IID: &str = "jjjjjjjjjjjjjjjjjjjjjjjjjj";
pub const LUID: &str = "llllllllllllllllllllllllll";
pub const OWNER: &str = "u_cccccccccccccccccccccccccc";
pub const OTHER_OWNER: &str = "u_dddddddddddddddddddddddddd";
pub const SECRET: &str = "SAAFAKESEEDFORTESTSONLY";
pub const CALLER_ACTOR: &str = "alice";
pub const CALLER_UID: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";
pub const GEN: &str = "0123456789abcdef0123456789abcdef";
pub const OTHER_GEN: &str = "fedcba9876543210fedcba9876543210";
pub const NONCE: &str = "nonce_0123456789abcdefgh";
pub const REG: u64 = 7;
pub const EPOCH: u64 = 3;

pub fn nkey(c: char) -> String {
    format!("U{}", c.to_string().repeat(55))
}
pub fn account() -> String {
    format!("A{}", "Q".repeat(55))
}
pub fn run_id(c: char) -> String {
    format!("run-{}", c.to_string().repeat(32))
}
pub fn rid(c: char) -> RunId {
    RunId::parse(&run_id(c)).unwrap()
}
pub fn manager() -> EndpointName {
    EndpointName::parse("manager").unwrap()
}
pub fn space() -> SpaceName {
    SpaceName::parse("s1").unwrap()
}
pub fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}

/// The host and the authenticated holder a run door is asked under.
#[derive(Debug, Clone)]
pub struct RunHost {
    pub host: ManagerHost,
    pub holder: Supervisor,
}

pub fn host() -> RunHost {
    RunHost {
        host: ManagerHost {
            space: space(),
            account: AccountKey::parse(&account()).unwrap(),
            signer: std::sync::Arc::new(
                nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::Account, [41; 32]).unwrap(),
            ),
            proof_secret: ProofSecret::new(SECRET),
            standing_ttl: StandingTtl::DEFAULT,
            agents: AgentOnboarding {
                sentinel_creds: String::new(),
                agent_bearer_exchange_url: String::new(),
            },
        },
        holder: Supervisor::human(
            DerivedOwner::parse(OWNER).unwrap(),
            vec!["supervise".into()],
        ),
    }
}

/// [`host`] whose holder lacks the `supervise` scope.
pub fn host_without_supervise() -> RunHost {
    let mut h = host();
    h.holder = Supervisor::human(
        DerivedOwner::parse(OWNER).unwrap(),
        vec!["spawn".into(), "admin".into()],
    );
    h
}

/// [`host`] assigned another data account.
pub fn host_with_account(account: AccountKey) -> RunHost {
    let mut h = host();
    h.host.account = account;
    h
}

pub fn identities() -> Value {
    json!({
        "supervisor": {"id": nkey('A')},
        "executor": {"id": nkey('B')},
        "serve": {"id": nkey('C')},
        "goalWriter": {"id": nkey('D')},
        "sessionLedger": {"id": nkey('E')},
    })
}

/// The envelope every run request shares, with the current proof at `(REG, EPOCH)`.
pub fn registered(kind: &str) -> Value {
    let mut r = json!({
        "v": 1,
        "kind": kind,
        "space": "s1",
        "actor": "cli",
        "instanceId": IID,
        "managerLifecycleUid": LUID,
        "requestId": "req_0123456789abcdefghij",
        "registrationProof": format!("sha256:{}", "0".repeat(64)),
        "accountPublicKey": account(),
        "processEpoch": EPOCH,
        "identities": identities(),
    });
    let probe = parse_run_admission_request(&with(
        with(r.clone(), "kind", json!("manager-run-admission")),
        "run",
        json!({"runId": run_id('0'), "subject": ""}),
    ))
    .unwrap();
    let proof = proof_for(&probe.registered.envelope, REG, EPOCH);
    r["registrationProof"] = json!(proof);
    r
}

pub fn proof_for(envelope: &ManagerEnvelope, reg: u64, epoch: u64) -> String {
    current_registration_proof(
        &ProofSecret::new(SECRET),
        &owner(),
        envelope,
        RegistrationRevision(reg),
        ProcessEpoch(epoch),
    )
    .as_str()
    .to_owned()
}

pub fn with(mut r: Value, key: &str, value: Value) -> Value {
    r.as_object_mut().unwrap().insert(key.into(), value);
    r
}

pub fn without(mut r: Value, key: &str) -> Value {
    r.as_object_mut().unwrap().remove(key);
    r
}

/// `cotal.s1.ep.v1.one.manager.run-start.<owner>.alice.<uid>.<gen>.<nonce>`.
pub fn start_subject(caller_owner: &str, generation: &str) -> String {
    format!("cotal.s1.ep.v1.one.manager.run-start.{caller_owner}.{CALLER_ACTOR}.{CALLER_UID}.{generation}.{NONCE}")
}

pub fn admission_request(run: char, subject: &str) -> Value {
    with(
        registered("manager-run-admission"),
        "run",
        json!({"runId": run_id(run), "subject": subject}),
    )
}

pub fn started() -> Option<ObservedRunRequest> {
    Some(ObservedRunRequest {
        operation: RunRequestOperation::Start,
        envelope: json!({"class": "manager"}),
    })
}

pub fn ceiling(publish: &[&str]) -> SubjectPermissions {
    SubjectPermissions {
        publish: SubjectPermission {
            allow: SubjectAllow::Patterns(publish.iter().map(|s| (*s).to_owned()).collect()),
            deny: vec![],
        },
        subscribe: SubjectPermission {
            allow: SubjectAllow::None,
            deny: vec![],
        },
    }
}

pub fn evidence(caller_owner: &str, generation: &str) -> IssuedEvidence {
    IssuedEvidence {
        reference: IssuedRef {
            space: space(),
            owner: OwnerToken::parse(caller_owner).unwrap(),
            actor: cotal_core::names::ActorToken::parse(CALLER_ACTOR).unwrap(),
            uid: cotal_core::names::LifecycleUid::parse(CALLER_UID).unwrap(),
            generation: IssuedGeneration::parse(generation).unwrap(),
        },
        permissions: ceiling(&["cotal.s1.ep.v1.*.manager.run-start.>"]),
        resolved_revision: 4,
    }
}

pub fn coords(generation: u64, epoch: u64, reg: u64) -> Coordinates {
    Coordinates {
        generation: Generation(generation),
        process_epoch: ProcessEpoch(epoch),
        registration_revision: RegistrationRevision(reg),
        name_authority_revision: NameAuthorityRevision(0),
    }
}

/// A world whose manager gate records `gate_owner`'s serve principal, open at `(REG, EPOCH)`
/// (or frozen after that when `frozen`).
pub fn manager_world(gate_owner: &str, frozen: bool) -> ModelWorld {
    let principal = Principal::parse(&format!("{gate_owner}.manager_serve_{IID}")).unwrap();
    let mut gate = EndpointGate::provisioned(principal).unwrap();
    for step in 1..=EPOCH {
        let op_id = OpId::mint([u8::try_from(step).unwrap(); 20]);
        gate = gate.frozen(GateOp::registration(op_id.clone())).unwrap();
        gate = gate.reopened(&op_id, coords(step, step, REG)).unwrap();
    }
    if frozen {
        gate = gate
            .frozen(GateOp::registration(OpId::mint([200; 20])))
            .unwrap();
    }
    let mut world = ModelWorld::default();
    world.kv.put(
        Store::Auth,
        &format!("epgate.manager.{IID}"),
        &gate.to_bytes(),
    );
    world
}

pub fn run_script<S: Script>(world: &mut ModelWorld, script: S) -> Result<S::Output, EpError> {
    drive(&mut Replay::new(script), world)
}

pub struct Proc<F>(pub F);

impl<T, F: Fn(&mut Ctx<'_>) -> Result<T, Halt>> Script for Proc<F> {
    type Output = T;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<T, Halt> {
        (self.0)(cx)
    }
}

/// Both admission phases, as the adapter runs them.
pub fn admit(
    world: &mut ModelWorld,
    request: &Value,
    host: RunHost,
    observed: Option<ObservedRunRequest>,
    evidence: Result<IssuedEvidence, EpError>,
    admitted_at: u64,
) -> Result<AdmissionOutcome, EpError> {
    let request = parse_run_admission_request(request)?;
    let authorized = run_script(
        world,
        AuthorizeRunAdmission {
            request,
            host: host.host,
            holder: host.holder,
            endpoint: manager(),
        },
    )?;
    run_script(
        world,
        AdmitRun {
            authorized,
            observed,
            evidence,
            admitted_at,
        },
    )
}

/// Admits run `c` for the standard issued caller.
pub fn admit_standard(world: &mut ModelWorld, c: char) -> AdmissionOutcome {
    let subject = start_subject(OWNER, GEN);
    admit(
        world,
        &admission_request(c, &subject),
        host(),
        started(),
        Ok(evidence(OWNER, GEN)),
        1_700_000_000_000,
    )
    .unwrap()
}

pub fn holder(takeover: &str) -> RunHolder {
    RunHolder::parse(&format!("{}.{takeover}", nkey('A'))).unwrap()
}

pub fn status(state: RunState, epoch: u64, token: u64) -> HostedRunStatus {
    HostedRunStatus {
        observed_spec_revision: 1,
        state,
        holder: holder("cccccccccccccccc"),
        epoch: RunEpoch(epoch),
        fencing_token: FencingToken(token),
        journal_high: 1,
        at: 1_700_000_000_000,
    }
}

pub fn put_status(
    world: &mut ModelWorld,
    run: &RunId,
    s: &HostedRunStatus,
    expected: Option<Revision>,
) -> Result<Revision, EpError> {
    let (run, s) = (run.clone(), s.clone());
    run_script(
        world,
        Proc(move |cx: &mut Ctx<'_>| write_run_status(cx, &manager(), &run, &s, expected)),
    )
}

pub fn attempt_request(run: char, epoch: u64, token: u64) -> Value {
    with(
        registered("manager-run-attempt"),
        "attempt",
        json!({
            "runId": run_id(run),
            "takeoverId": "cccccccccccccccc",
            "epoch": epoch,
            "fencingToken": token,
            "driverId": nkey('F'),
            "mediatorId": nkey('G'),
        }),
    )
}

pub fn parse_attempt(v: &Value) -> cotal_core::run::RunAttemptRequest {
    parse_run_attempt_request(v).unwrap()
}

// ---- served run requests (run_served.rs) ------------------------------------------------------

/// The input and output closure digests the registered manager pins for its served commands.
pub fn pinned(which: &str) -> cotal_core::canon::Digest {
    cotal_core::canon::Digest::of(format!("{which}-schema").as_bytes())
}

/// A manager cluster declaring `run-resume` and `run-answer` (ephemeral, untargeted).
pub fn manager_cluster() -> Value {
    let command = |name: &str| {
        json!({
            "name": name, "class": "ephemeral", "targeted": false,
            "capability": format!("manager.{name}"),
            "inputDigest": pinned(&format!("{name}-in")).to_prefixed(),
            "outputDigest": pinned(&format!("{name}-out")).to_prefixed(),
            "traits": [],
        })
    };
    json!({
        "urn": "ai.cotal.manager", "revision": 1, "attributes": [], "events": [],
        "commands": [command("run-resume"), command("run-answer")],
    })
}

/// Publishes the manager cluster and writes the manager's spec (owned by `spec_owner`) so that it
/// lands at records revision `at`. Returns the spec's revision.
pub fn register_manager_spec(world: &mut ModelWorld, spec_owner: &str, at: u64) -> Revision {
    let doc = manager_cluster();
    let closure = run_script(
        world,
        Proc(move |cx: &mut Ctx<'_>| cotal_core::contract::publish_cluster(cx, &doc)),
    )
    .unwrap();
    while world.kv.last_sequence(Store::Records).0 + 1 < at {
        world.kv.put(Store::Records, "padding", b"{}");
    }
    let spec = cotal_core::service::ServiceSpec::from_value(
        json!({
            "endpoint": "manager", "owner": spec_owner,
            "clusterDigests": [closure.to_prefixed()], "protocol": {"v": 1},
        }),
        &manager(),
    )
    .unwrap();
    world.kv.put(
        Store::Records,
        &format!("svc.manager.{IID}.spec"),
        &spec.to_bytes(),
    )
}

/// A manager world with run `d` admitted for the standard caller and the manager's spec
/// registered at the gate's registration revision.
pub fn served_world() -> ModelWorld {
    let mut world = manager_world(OWNER, false);
    admit_standard(&mut world, 'd');
    assert_eq!(register_manager_spec(&mut world, OWNER, REG).0, REG);
    world
}

/// `cotal.s1.ep.v1.one.manager.<command>[.<target>].<owner>.alice.<uid>.<gen>.<nonce>`.
pub fn served_subject(command: &str, target: &str, caller_owner: &str, generation: &str) -> String {
    format!(
        "cotal.s1.ep.v1.one.manager.{command}{target}.{caller_owner}.{CALLER_ACTOR}.{CALLER_UID}.{generation}.{NONCE}"
    )
}

/// An observed envelope declaring `command`'s registered class and contract, optionally bound.
pub fn served_envelope(command: &str, bind: Option<(&str, u64)>) -> Value {
    let mut env = json!({
        "class": "ephemeral",
        "op": {
            "endpoint": "manager", "command": command,
            "inputDigest": pinned(&format!("{command}-in")).to_prefixed(),
            "outputDigest": pinned(&format!("{command}-out")).to_prefixed(),
        },
    });
    if let Some((instance, epoch)) = bind {
        env["bind"] = json!({"instanceId": instance, "epoch": epoch});
    }
    env
}

pub fn observed_resume(run: char) -> ObservedRunRequest {
    ObservedRunRequest {
        operation: RunRequestOperation::Resume { run_id: rid(run) },
        envelope: served_envelope("run-resume", None),
    }
}

pub fn observed_answer(run: char, step: &str, amend: bool) -> ObservedRunRequest {
    ObservedRunRequest {
        operation: RunRequestOperation::Answer {
            endpoint: "manager".into(),
            run_id: rid(run),
            step_key: step.into(),
            amend,
        },
        envelope: served_envelope("run-answer", None),
    }
}

/// Issued evidence for the standard caller whose ceiling permits every manager request.
pub fn served_evidence(caller_owner: &str, generation: &str) -> IssuedEvidence {
    IssuedEvidence {
        permissions: ceiling(&["cotal.s1.ep.v1.*.manager.>"]),
        ..evidence(caller_owner, generation)
    }
}
