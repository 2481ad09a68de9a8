//! The verify-enrollment decision (reference-auth-service §3.8, §6.2) on the KV model: a host
//! platform that keeps its own database asks the plane only whether a managed-agent request may
//! proceed. Each cell runs [`VerifyEnrollment`] for the four kinds it answers (enrollment,
//! prepare-retirement, runtime-create, runtime-status) and checks, besides its verdict, that the
//! decision wrote nothing: the KV model, the actor ledger and the broker durables are as they
//! were, and the only effect ever asked for is the one read of the manager gate.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod enrollment_common;

use cotal_core::actors::RowSpace;
use cotal_core::driver::{drive, ModelWorld};
use cotal_core::enrollment::{
    RuntimeRequest, VerifyEnrollment, VerifyRequest, ENROLLMENT_KIND, PREPARE_RETIREMENT_KIND,
    RUNTIME_CREATE_KIND, RUNTIME_STATUS_KIND,
};
use cotal_core::kv::{KvRequest, Operation, Revision, Store};
use cotal_core::machine::{Effect, Replay};
use cotal_core::manager::Supervisor;
use cotal_core::names::{keys, DerivedOwner, EndpointName, InstanceId, LifecycleUid, Principal};
use cotal_core::{EpError, ErrorCode};
use enrollment_common::*;
use serde_json::{json, Value};

// ---- The four kinds ---------------------------------------------------------------------------

/// One kind the door decides on, with how its refusals name it.
#[derive(Debug, Clone, Copy)]
struct Kind {
    kind: &'static str,
    /// Leads the space, scope and target-owner refusals.
    what: &'static str,
    /// Leads the registered-manager door's refusals (`core::manager::door`).
    door: &'static str,
}

const ENROLL: Kind = Kind {
    kind: ENROLLMENT_KIND,
    what: "managed agent enrollment",
    door: "manager enrollment",
};
const PREPARE: Kind = Kind {
    kind: PREPARE_RETIREMENT_KIND,
    what: "managed agent prepare-retirement",
    door: "manager prepare-retirement",
};
const CREATE: Kind = Kind {
    kind: RUNTIME_CREATE_KIND,
    what: "managed agent runtime-create",
    door: "managed agent runtime-create",
};
const STATUS: Kind = Kind {
    kind: RUNTIME_STATUS_KIND,
    what: "managed agent runtime-status",
    door: "managed agent runtime-status",
};

const KINDS: [Kind; 4] = [ENROLL, PREPARE, CREATE, STATUS];
/// The kinds whose request names a target owner.
const TARGETED: [Kind; 3] = [PREPARE, CREATE, STATUS];
const RUNTIME: [Kind; 2] = [CREATE, STATUS];

impl Kind {
    /// The fixture's well-formed request of this kind (target `worker` at [`TARGET_UID`]).
    fn request(self) -> Value {
        self.request_for(TARGET_UID)
    }

    /// The well-formed request of this kind for `worker` at `uid` (enrollment names no uid).
    fn request_for(self, uid: &str) -> Value {
        match self.kind {
            ENROLLMENT_KIND => enrollment(),
            PREPARE_RETIREMENT_KIND => prepare_for(uid),
            kind => runtime_for(kind, uid),
        }
    }

    /// The request aimed at instance `iid`, with an otherwise valid proof for it.
    fn at(self, iid: &str) -> Value {
        with_proof(
            edit(self.request(), &["instanceId"], Some(json!(iid))),
            &proof_for(iid, REVISION, EPOCH, OWNER),
        )
    }

    /// What the door answers for the fixture's request of this kind.
    fn authorized(self) -> Value {
        match self.kind {
            ENROLLMENT_KIND | PREPARE_RETIREMENT_KIND => json!({
                "authorized": true,
                "owner": OWNER,
                "actor": "worker",
                "instanceId": IID,
                "serveEpoch": EPOCH,
            }),
            _ => json!({
                "authorized": true,
                "owner": OWNER,
                "instanceId": IID,
                "actor": "cli",
                "target": {"owner": OWNER, "actor": "worker", "lifecycleUid": TARGET_UID},
            }),
        }
    }
}

fn with_proof(raw: Value, proof: &str) -> Value {
    edit(raw, &["registrationProof"], Some(json!(proof)))
}

fn gate_key(iid: &str) -> String {
    keys::epgate(
        &EndpointName::parse("manager").unwrap(),
        &InstanceId::parse(iid).unwrap(),
    )
}

// ---- Deciding, and proving nothing was written --------------------------------------------------

/// A key's retained messages: `(revision, operation, value)`, oldest first.
type History = Vec<(Revision, Operation, Vec<u8>)>;

/// One KV store as a decision could have changed it.
#[derive(Debug, PartialEq)]
struct StoreState {
    store: Store,
    last_sequence: Revision,
    /// Every key with its retained history, sorted.
    keys: Vec<(String, History)>,
}

/// Everything a decision could have written.
#[derive(Debug, PartialEq)]
struct State {
    kv: Vec<StoreState>,
    /// Ledger requests served (a write is a request).
    ledger_requests: u64,
    /// The raw row files the fixture can hold: `cli` (interactive) and `worker` (managed).
    rows: Vec<Option<Vec<u8>>>,
    durables_requests: usize,
    provisioned: Vec<(Principal, LifecycleUid)>,
}

fn state(w: &ModelWorld) -> State {
    let kv = [
        Store::Auth,
        Store::Records,
        Store::Admission,
        Store::Contracts,
    ]
    .into_iter()
    .map(|store| {
        let keys =
            w.kv.keys(store, "")
                .into_iter()
                .map(|k| {
                    let history = w.kv.history(store, &k);
                    (k, history)
                })
                .collect();
        StoreState {
            store,
            last_sequence: w.kv.last_sequence(store),
            keys,
        }
    })
    .collect();
    State {
        kv,
        ledger_requests: w.actors.requests_served(),
        rows: vec![
            w.actors.raw(RowSpace::Interactive, &alias("cli")),
            w.actors.raw(RowSpace::Managed, &alias("worker")),
        ],
        durables_requests: w.durables.requests().len(),
        provisioned: w.durables.provisioned(),
    }
}

/// One decision's verdict and the effects it asked for.
struct Decision {
    result: Result<Value, EpError>,
    effects: Vec<Effect>,
}

impl Decision {
    /// Asserts the decision made exactly `n` KV round trips (each the read of `iid`'s gate).
    fn reads(self, n: usize, iid: &str) -> Result<Value, EpError> {
        let gate = KvRequest::Get {
            store: Store::Auth,
            key: gate_key(iid),
        };
        assert_eq!(self.effects.len(), n, "{:?}", self.effects);
        for effect in &self.effects {
            assert_eq!(effect, &Effect::Kv(gate.clone()));
        }
        self.result
    }
}

/// Decides `raw` for `owner` holding `scope` and asserts the decision wrote nothing and asked
/// for nothing but KV reads of the manager gate (at most one).
fn decide_as(w: &mut ModelWorld, raw: &Value, scope: &[&str], owner: &str) -> Decision {
    let before = state(w);
    let logged = w.log.len();
    let mut machine = Replay::new(VerifyEnrollment {
        host: host(),
        caller: Supervisor::human(
            DerivedOwner::parse(owner).unwrap(),
            scope.iter().map(|s| s.to_string()).collect(),
        ),
        request: VerifyRequest::parse(raw).unwrap(),
    });
    let result = drive(&mut machine, w);
    assert_eq!(state(w), before, "the decision wrote nothing ({result:?})");
    let effects = w.log.split_off(logged);
    assert!(effects.len() <= 1, "{effects:?}");
    for effect in &effects {
        assert!(
            matches!(
                effect,
                Effect::Kv(KvRequest::Get {
                    store: Store::Auth,
                    ..
                })
            ),
            "only the gate read: {effect:?}"
        );
    }
    Decision { result, effects }
}

fn decide(w: &mut ModelWorld, raw: &Value) -> Decision {
    decide_as(w, raw, &["supervise"], OWNER)
}

/// Asserts `result` is refused with `code` and exactly `message`.
fn refused_with(result: Result<Value, EpError>, code: ErrorCode, message: &str) {
    let e = result.expect_err(message);
    assert_eq!((e.code, e.message.as_str()), (code, message), "{e}");
}

fn parse_refused(raw: &Value, needle: &str) -> EpError {
    let e = VerifyRequest::parse(raw).expect_err(needle);
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
    e
}

/// A runtime request's parse refusal: `bad-request` "managed agent runtime request …".
fn runtime_refused(raw: &Value, needle: &str) {
    let e = parse_refused(raw, needle);
    assert!(
        e.message.starts_with("managed agent runtime request "),
        "{e}"
    );
}

// ---- Authorization ------------------------------------------------------------------------------

/// F94: each of the four kinds, from the current open registration with `supervise`, is
/// authorized with exactly its answer, after one read of the manager gate.
#[test]
fn f94_each_kind_is_authorized_with_its_exact_answer() {
    for kind in KINDS {
        let mut w = world();
        let answer = decide(&mut w, &kind.request()).reads(1, IID);
        assert_eq!(answer.unwrap(), kind.authorized(), "{kind:?}");
    }
}

/// F94: the runtime answer names the envelope's actor (the manager's `cli`) beside the exact
/// target, and the two runtime kinds answer alike.
#[test]
fn f94_runtime_answers_name_the_envelope_actor_beside_the_target() {
    let mut w = world();
    let create = decide(&mut w, &CREATE.request()).reads(1, IID).unwrap();
    let status = decide(&mut w, &STATUS.request()).reads(1, IID).unwrap();
    assert_eq!(create, status);
    assert_eq!(create["actor"], json!("cli"));
    assert_eq!(create["target"]["actor"], json!("worker"));
    assert!(create.get("serveEpoch").is_none(), "{create}");
}

/// F94: the decision writes nothing even over an enrolled agent: prepare-retirement and the
/// runtime kinds at its host-picked uid leave its managed row, its broker footprint and every
/// store as they were, and no ledger or durables request is made.
#[test]
fn f94_deciding_over_an_enrolled_agent_writes_nothing() {
    let mut w = world();
    let enrolled = enroll(&mut w, &enrollment()).unwrap();
    let uid = enrolled.material.lifecycle_uid.as_str().to_owned();
    let row = managed_row(&w, "worker").unwrap();
    let footprint = w
        .durables
        .footprint(&alias("worker"), &enrolled.material.lifecycle_uid);
    assert!(footprint.is_some());
    for kind in KINDS {
        let answer = decide(&mut w, &kind.request_for(&uid)).reads(1, IID);
        assert_eq!(answer.unwrap()["authorized"], json!(true), "{kind:?}");
    }
    assert_eq!(managed_row(&w, "worker"), Some(row));
    assert_eq!(
        w.durables
            .footprint(&alias("worker"), &enrolled.material.lifecycle_uid),
        footprint
    );
}

/// F94: an authorized enrollment decision is not an enrollment: no managed row appears and no
/// durables request is made (the host platform enrolls on its own storage).
#[test]
fn f94_an_authorized_enrollment_enrolls_nothing() {
    let mut w = world();
    decide(&mut w, &enrollment()).reads(1, IID).unwrap();
    assert!(managed_row(&w, "worker").is_none());
    assert!(w.durables.requests().is_empty());
    assert!(w.durables.provisioned().is_empty());
}

/// F94: a request naming another space is refused `permission-denied` before any read.
#[test]
fn f94_another_space_is_refused_for_every_kind() {
    for kind in KINDS {
        let mut w = world();
        let raw = edit(kind.request(), &["space"], Some(json!("other")));
        refused_with(
            decide(&mut w, &raw).reads(0, IID),
            ErrorCode::PermissionDenied,
            &format!(
                "{} request names space other, not host space {SPACE}",
                kind.what
            ),
        );
    }
}

/// F94: `spawn` and `admin` without `supervise` are refused before any read.
#[test]
fn f94_spawn_and_admin_do_not_imply_supervise_for_any_kind() {
    for kind in KINDS {
        let mut w = world();
        refused_with(
            decide_as(&mut w, &kind.request(), &["spawn", "admin"], OWNER).reads(0, IID),
            ErrorCode::PermissionDenied,
            &format!(
                "{} needs scope \"supervise\"; spawn/admin do not imply it",
                kind.what
            ),
        );
    }
}

/// F94: an instance with no manager gate is `failed-precondition`.
#[test]
fn f94_an_absent_gate_is_refused_for_every_kind() {
    for kind in KINDS {
        let mut w = world();
        refused_with(
            decide(&mut w, &kind.at(ABSENT_IID)).reads(1, ABSENT_IID),
            ErrorCode::FailedPrecondition,
            &format!(
                "{} found no current open manager gate for instance {ABSENT_IID}",
                kind.door
            ),
        );
    }
}

/// F94: a frozen gate (a takeover in flight) is not a current registration:
/// `failed-precondition`.
#[test]
fn f94_a_frozen_gate_is_refused_for_every_kind() {
    for kind in KINDS {
        let mut w = world();
        refused_with(
            decide(&mut w, &kind.at(FROZEN_IID)).reads(1, FROZEN_IID),
            ErrorCode::FailedPrecondition,
            &format!(
                "{} found no current open manager gate for instance {FROZEN_IID}",
                kind.door
            ),
        );
    }
}

/// F94: a gate recording another owner's serve principal is `permission-denied`, naming both
/// principals.
#[test]
fn f94_a_foreign_gate_principal_is_refused_for_every_kind() {
    for kind in KINDS {
        let mut w = world();
        refused_with(
            decide(&mut w, &kind.at(FOREIGN_IID)).reads(1, FOREIGN_IID),
            ErrorCode::PermissionDenied,
            &format!(
                "{} gate belongs to another owner: {OTHER_OWNER}.manager_serve_{FOREIGN_IID} is \
                 not serve principal {OWNER}.manager_serve_{FOREIGN_IID}",
                kind.door
            ),
        );
    }
}

/// F94: another owner presenting this manager's request, its target rewritten to itself, passes
/// the target check and is refused at the gate (the serve principal is derived from the
/// authenticated owner, never from the body).
#[test]
fn f94_another_owner_is_refused_at_the_gate_for_every_kind() {
    for kind in KINDS {
        let mut w = world();
        let raw = match kind.kind {
            ENROLLMENT_KIND => kind.request(),
            _ => edit(
                kind.request(),
                &["target", "owner"],
                Some(json!(OTHER_OWNER)),
            ),
        };
        refused_with(
            decide_as(&mut w, &raw, &["supervise"], OTHER_OWNER).reads(1, IID),
            ErrorCode::PermissionDenied,
            &format!(
                "{} gate belongs to another owner: {OWNER}.manager_serve_{IID} is not serve \
                 principal {OTHER_OWNER}.manager_serve_{IID}",
                kind.door
            ),
        );
    }
}

/// F94: a serve epoch behind or ahead of the gate's is a `conflict` naming both epochs, even
/// with a proof computed at the stale epoch.
#[test]
fn f94_a_stale_serve_epoch_is_a_conflict_for_every_kind() {
    for kind in KINDS {
        for stale in [EPOCH - 1, EPOCH + 1, 0] {
            let mut w = world();
            let raw = with_proof(
                edit(kind.request(), &["serveEpoch"], Some(json!(stale))),
                &proof_for(IID, REVISION, stale, OWNER),
            );
            refused_with(
                decide(&mut w, &raw).reads(1, IID),
                ErrorCode::Conflict,
                &format!(
                    "{} serve epoch {stale} is stale; current is {EPOCH}",
                    kind.door
                ),
            );
        }
    }
}

/// F94: a forged proof, a proof for a superseded registration revision, a proof for another
/// epoch and a proof computed under another owner are each `permission-denied`.
#[test]
fn f94_a_proof_not_of_the_current_registration_is_refused_for_every_kind() {
    let forged = format!("sha256:{}", "f".repeat(64));
    let proofs = [
        forged,
        proof_for(IID, REVISION - 1, EPOCH, OWNER),
        proof_for(IID, REVISION + 1, EPOCH, OWNER),
        proof_for(IID, REVISION, EPOCH - 1, OWNER),
        proof_for(IID, REVISION, EPOCH, OTHER_OWNER),
        proof_for(FOREIGN_IID, REVISION, EPOCH, OWNER),
    ];
    for kind in KINDS {
        for proof in &proofs {
            let mut w = world();
            refused_with(
                decide(&mut w, &with_proof(kind.request(), proof)).reads(1, IID),
                ErrorCode::PermissionDenied,
                &format!(
                    "{} proof does not match current host registration",
                    kind.door
                ),
            );
        }
    }
}

/// F96: prepare-retirement and the runtime kinds may target only the authenticated owner's
/// agents: another target owner is `permission-denied` before any read.
#[test]
fn f96_a_target_owner_other_than_the_callers_is_refused() {
    for kind in TARGETED {
        let mut w = world();
        let raw = edit(
            kind.request(),
            &["target", "owner"],
            Some(json!(OTHER_OWNER)),
        );
        refused_with(
            decide(&mut w, &raw).reads(0, IID),
            ErrorCode::PermissionDenied,
            &format!(
                "{} target owner {OTHER_OWNER} does not match authenticated owner {OWNER}",
                kind.what
            ),
        );
    }
}

/// F94, F96: the checks run in the reference's order (space, `supervise`, target owner, gate,
/// epoch, proof): a request wrong in every way reports the first, and mending each in turn
/// reports the next.
#[test]
fn f94_f96_the_checks_run_in_the_reference_order() {
    for kind in TARGETED {
        let forged = format!("sha256:{}", "f".repeat(64));
        let bad = with_proof(
            edit(
                edit(
                    edit(kind.request(), &["space"], Some(json!("other"))),
                    &["target", "owner"],
                    Some(json!(OTHER_OWNER)),
                ),
                &["serveEpoch"],
                Some(json!(EPOCH + 1)),
            ),
            &forged,
        );
        let mended_space = edit(bad.clone(), &["space"], Some(json!(SPACE)));
        let mended_owner = edit(
            mended_space.clone(),
            &["target", "owner"],
            Some(json!(OWNER)),
        );
        let mended_epoch = edit(mended_owner.clone(), &["serveEpoch"], Some(json!(EPOCH)));
        let mut w = world();
        let cells: [(&Value, &[&str], ErrorCode, usize, &str); 5] = [
            (
                &bad,
                &["admin"],
                ErrorCode::PermissionDenied,
                0,
                "not host space",
            ),
            (
                &mended_space,
                &["admin"],
                ErrorCode::PermissionDenied,
                0,
                "needs scope \"supervise\"",
            ),
            (
                &mended_space,
                &["supervise"],
                ErrorCode::PermissionDenied,
                0,
                "does not match authenticated owner",
            ),
            (
                &mended_owner,
                &["supervise"],
                ErrorCode::Conflict,
                1,
                "serve epoch 5 is stale",
            ),
            (
                &mended_epoch,
                &["supervise"],
                ErrorCode::PermissionDenied,
                1,
                "proof does not match current host registration",
            ),
        ];
        for (raw, scope, code, reads, needle) in cells {
            refused(
                decide_as(&mut w, raw, scope, OWNER).reads(reads, IID),
                code,
                needle,
            );
        }
    }
}

// ---- Parsing ------------------------------------------------------------------------------------

/// The door answers four kinds: any other kind (or none) is `bad-request` naming all four.
#[test]
fn verify_an_unknown_kind_is_refused_naming_the_four_kinds() {
    let runtime = CREATE.request();
    for raw in [
        edit(
            runtime.clone(),
            &["kind"],
            Some(json!("manager-managed-agent-runtime-delete")),
        ),
        edit(
            runtime.clone(),
            &["kind"],
            Some(json!("manager-service-authority")),
        ),
        edit(runtime.clone(), &["kind"], Some(json!(7))),
        edit(runtime, &["kind"], None),
        json!("manager-managed-agent-enrollment"),
    ] {
        let e = parse_refused(&raw, "needs request.kind to be one of");
        for kind in KINDS {
            assert!(e.message.contains(kind.kind), "{kind:?} in {e}");
        }
    }
}

/// Each kind dispatches to its own closed parser: the runtime kinds keep their kind, and a
/// runtime body carrying the other runtime kind is refused by the kind-checked parser.
#[test]
fn verify_each_kind_parses_with_its_own_parser() {
    assert!(matches!(
        VerifyRequest::parse(&ENROLL.request()).unwrap(),
        VerifyRequest::Enrollment(_)
    ));
    assert!(matches!(
        VerifyRequest::parse(&PREPARE.request()).unwrap(),
        VerifyRequest::PrepareRetirement(_)
    ));
    for kind in RUNTIME {
        let VerifyRequest::Runtime(r) = VerifyRequest::parse(&kind.request()).unwrap() else {
            panic!("{kind:?} is a runtime request");
        };
        assert_eq!(
            r,
            RuntimeRequest::parse(&kind.request(), kind.kind).unwrap()
        );
        assert_eq!(r.kind, kind.kind);
        assert_eq!(r.envelope.manager.actor.as_str(), "cli");
        assert_eq!(r.envelope.manager.instance_id.as_str(), IID);
        assert_eq!(r.envelope.serve_epoch.0, EPOCH);
        assert_eq!(r.target.owner.as_str(), OWNER);
        assert_eq!(r.target.actor.as_str(), "worker");
        assert_eq!(r.target.lifecycle_uid.as_str(), TARGET_UID);
    }
    let e = RuntimeRequest::parse(&CREATE.request(), RUNTIME_STATUS_KIND).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert!(
        e.message
            .contains("must carry { v: 1, kind: \"manager-managed-agent-runtime-status\" }"),
        "{e}"
    );
    // The enrollment and prepare kinds keep their own parsers' closed refusals.
    parse_refused(
        &edit(ENROLL.request(), &["lifecycleUid"], Some(json!(TARGET_UID))),
        "managed agent enrollment request carries unknown field \"lifecycleUid\"",
    );
    parse_refused(
        &edit(PREPARE.request(), &["opId"], None),
        "managed agent prepare-retirement request",
    );
}

/// The runtime request is closed: `providerRef`, `handle`, `name` and `opId` (the retirement's
/// field) are unknown fields.
#[test]
fn verify_a_runtime_request_refuses_unknown_fields() {
    let op_id = PREPARE.request()["opId"].clone();
    for kind in RUNTIME {
        for (field, value) in [
            ("providerRef", json!("docker://worker")),
            ("handle", json!("h-1")),
            ("name", json!("worker")),
            ("opId", op_id.clone()),
            ("lifecycleUid", json!(TARGET_UID)),
        ] {
            runtime_refused(
                &edit(kind.request(), &[field], Some(value)),
                &format!("carries unknown field \"{field}\" (the protocol is closed)"),
            );
        }
    }
}

/// F96: the runtime target is exactly `{owner, actor, lifecycleUid}`: a missing, extra or
/// non-object target is refused, and each of the three must be a string.
#[test]
fn f96_a_runtime_target_must_be_exactly_owner_actor_and_lifecycle_uid() {
    let exactly = "target must be exactly { owner, actor, lifecycleUid }";
    for kind in RUNTIME {
        let raw = kind.request();
        for target in [
            None,
            Some(json!("worker")),
            Some(json!([OWNER, "worker", TARGET_UID])),
            Some(json!({})),
            Some(json!({"owner": OWNER, "actor": "worker"})),
            Some(json!({"owner": OWNER, "lifecycleUid": TARGET_UID})),
            Some(json!({"actor": "worker", "lifecycleUid": TARGET_UID})),
            Some(
                json!({"owner": OWNER, "actor": "worker", "lifecycleUid": TARGET_UID, "name": "w"}),
            ),
            Some(
                json!({"owner": OWNER, "actor": "worker", "lifecycleUid": TARGET_UID,
                       "providerRef": "docker://worker"}),
            ),
            Some(json!({"owner": OWNER, "actor": "worker", "uid": TARGET_UID})),
        ] {
            runtime_refused(&edit(raw.clone(), &["target"], target), exactly);
        }
        for (field, value) in [
            ("owner", json!(null)),
            ("actor", json!(7)),
            ("lifecycleUid", json!({"uid": TARGET_UID})),
        ] {
            runtime_refused(
                &edit(raw.clone(), &["target", field], Some(value)),
                "target must contain string owner, actor, and lifecycleUid",
            );
        }
        for (field, value) in [("actor", ""), ("lifecycleUid", "short")] {
            let e =
                VerifyRequest::parse(&edit(raw.clone(), &["target", field], Some(json!(value))))
                    .unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{field}: {e}");
            assert!(
                e.message.starts_with("managed agent runtime request "),
                "{e}"
            );
        }
    }
}

/// F96: a runtime target owner must be a derived owner (`u_` and 26 base32 characters).
#[test]
fn f96_a_non_derived_runtime_target_owner_is_refused() {
    for kind in RUNTIME {
        for owner in [
            "alice",
            "u_short",
            "u_CCCCCCCCCCCCCCCCCCCCCCCCCC",
            "x_cccccccccccccccccccccccccc",
            "",
        ] {
            runtime_refused(
                &edit(kind.request(), &["target", "owner"], Some(json!(owner))),
                &format!("target owner {owner:?} is not a derived owner (u_ + 26 base32 chars)"),
            );
        }
    }
}

/// A runtime request carries the whole managed envelope: without its proof or serve epoch, or
/// at another protocol version, it is refused.
#[test]
fn verify_a_runtime_request_needs_the_whole_envelope() {
    for kind in RUNTIME {
        for (field, needle) in [
            ("registrationProof", "requires non-empty registrationProof"),
            (
                "serveEpoch",
                "serveEpoch must be a non-negative safe integer",
            ),
            ("v", "must carry { v: 1"),
        ] {
            runtime_refused(&edit(kind.request(), &[field], None), needle);
        }
        runtime_refused(
            &edit(kind.request(), &["v"], Some(json!(2))),
            "must carry { v: 1",
        );
    }
}
