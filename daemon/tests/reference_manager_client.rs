//! A manager running the TypeScript reference's exact client calls registers itself against
//! this plane unchanged: the official NATS JS client libraries the reference uses
//! (`@nats-io/transport-node`, `@nats-io/jetstream`, `@nats-io/kv`, pinned by
//! `tests/reference-client/package-lock.json` and installed by `scripts/nats-js.sh`) run the
//! calls of `registerRemoteManagerAuthority` (the reference's `packages/manager`) over the
//! executor credential a real plane's `prepare` issued, on the space's own operator-mode
//! server: the buckets bound by name, a contract artifact published create-only (and its lost
//! CAS on a re-publish) and read back by both Direct Get forms, the gate observed absent,
//! provisioned, frozen at its revision, the family row staged, listed with `kv.keys` (an ordered
//! push consumer), read and revoked at its revision, the repair cursor saved and cleared, the
//! spec observed, created and read back, the gate reopened at the freeze token. The same
//! library calls on another instance's gate and family are refused by the server.
//!
//! `tests/reference-client/manager-calls.mjs` makes the calls and nothing else; every byte it
//! writes is computed here by the core's own row types, so what lands is byte-compatible with
//! what the plane reads (and the admin view below reads it back through those types).
//!
//! Needs Node.js and npm: when they or the libraries are missing the test fails and names the
//! install command, never skips.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::process::ExitStatus;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use common::manager::{manager_document, now_secs, space_name, Flow, IID};
use common::reference_client::{install, run_script};
use common::SPACE;
use cotal_core::canon::Digest;
use cotal_core::contract::{artifact_canonical_bytes, ClusterManifest};
use cotal_core::gate::{
    Coordinates, EndpointGate, GateOp, GateState, Generation, NameAuthorityRevision, ProcessEpoch,
    RegistrationRevision,
};
use cotal_core::issuance::{observe_gate, GateRef};
use cotal_core::jwt::Creds;
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::{script, Replay};
use cotal_core::names::{
    ActorToken, CredentialId, EndpointName, InstanceId, OpId, Principal, SourceMember,
};
use cotal_core::repair::RepairCursor;
use cotal_core::service::ServiceSpec;
use cotal_io_nats::drive;
use serde_json::{json, Value};

/// The command that installs the pinned libraries, quoted in every "missing" failure.
const CALLS: &str = "tests/reference-client/manager-calls.mjs";
/// Another manager instance of the same owner: nothing of it is the executor's.
const OTHER_IID: &str = "nnnnnnnnnnnnnnnnnnnnnnnnnn";

/// The positive steps the script must report, in order.
const STEPS: [&str; 19] = [
    "connect",
    "kv.open",
    "contract.publish",
    "contract.republish-lost-cas",
    "contract.direct-get",
    "contract.direct-get-next-by-subject",
    "gate.observe-absent",
    "gate.provision",
    "gate.freeze",
    "family.stage",
    "family.keys",
    "family.revoke",
    "repair.save",
    "repair.clear",
    "records.govern-observe",
    "records.spec-observe-absent",
    "records.spec-create",
    "records.spec-read",
    "gate.reopen",
];

/// Every byte the script writes, from the core's row types.
struct Rows {
    principal: Principal,
    op: OpId,
    contract: Vec<u8>,
    gate: EndpointGate,
    frozen: EndpointGate,
    row: LedgerRow,
    spec: Vec<u8>,
}

impl Rows {
    fn new(f: &Flow) -> Rows {
        let endpoint = EndpointName::parse("manager").unwrap();
        let principal = Principal::new(
            f.owner_token(),
            ActorToken::parse(&format!("manager_serve_{IID}")).unwrap(),
        );
        let op = OpId::mint([7; 20]);
        let gate = EndpointGate::provisioned(principal.clone()).unwrap();
        let frozen = gate.frozen(GateOp::registration(op.clone())).unwrap();
        let row = LedgerRow::endpoint_active(
            endpoint.clone(),
            &InstanceId::parse(IID).unwrap(),
            CredentialId::parse(&format!("sha256-{}", "cd".repeat(32))).unwrap(),
            principal.clone(),
            vec![SourceMember::Root],
            now_secs() + 300,
        )
        .unwrap();
        let contract = artifact_canonical_bytes(&manager_document()).unwrap();
        let closure = Digest::of(&ClusterManifest::new(Digest::of(&contract)).to_bytes());
        let spec = ServiceSpec::from_value(
            json!({"endpoint": "manager", "owner": f.owner,
                   "clusterDigests": [closure.to_prefixed()], "protocol": {"v": 1}}),
            &endpoint,
        )
        .unwrap()
        .to_bytes();
        Rows {
            principal,
            op,
            contract,
            gate,
            frozen,
            row,
            spec,
        }
    }

    /// The repair cursor of the freeze at `freeze_token`, owing the row's holder.
    fn repair(&self, freeze_token: u64) -> RepairCursor {
        RepairCursor::new(self.op.clone(), freeze_token, vec![self.principal.clone()]).unwrap()
    }

    /// The gate the freeze reopens to: generation + 1, the spec's revision.
    fn reopened(&self, registration_revision: u64, process_epoch: u64) -> EndpointGate {
        self.frozen
            .reopened(
                &self.op,
                Coordinates {
                    generation: Generation(1),
                    process_epoch: ProcessEpoch(process_epoch),
                    registration_revision: RegistrationRevision(registration_revision),
                    name_authority_revision: NameAuthorityRevision(0),
                },
            )
            .unwrap()
    }

    /// The bytes the script asks for once it knows a revision.
    fn answer(&self, need: &Value) -> Vec<u8> {
        let n = |k: &str| {
            need[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{k} missing: {need}"))
        };
        match need["need"].as_str() {
            Some("repair") => self.repair(n("freezeToken")).to_bytes(),
            Some("reopen") => self
                .reopened(n("registrationRevision"), n("processEpoch"))
                .to_bytes(),
            _ => panic!("the script asked for something unknown: {need}"),
        }
    }
}

fn run_calls(config: Value, rows: &Rows) -> (ExitStatus, Vec<Value>, String) {
    run_script(
        CALLS,
        &config,
        |need| json!({"bytes": B64.encode(rows.answer(need))}),
    )
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

fn decoded(step: &Value) -> Vec<u8> {
    B64.decode(step["bytes"].as_str().unwrap()).unwrap()
}

async fn read(f: &Flow, store: Store, key: &str) -> Option<cotal_core::kv::Entry> {
    let request = KvRequest::Get {
        store,
        key: key.to_owned(),
    };
    match f.admin.space().unwrap().execute(&request).await {
        KvOutcome::Entry(entry) => entry,
        other => panic!("{key} is unreadable: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_nats_js_client_runs_the_manager_registration_calls_over_the_issued_executor() {
    install();
    let f = Flow::new().await;
    let prepared = f.granted(&f.envelope("prepare", "prepare00000000000000001"));
    let (jwt, _) = f.credential(&prepared, "executor", &f.keys[1]);
    let creds = Creds {
        jwt,
        seed: f.keys[1].seed().unwrap(),
    };
    let rows = Rows::new(&f);
    let config = json!({
        "server": f.server,
        "space": SPACE,
        "instanceId": IID,
        "otherInstanceId": OTHER_IID,
        "creds": creds.text(),
        "nkey": f.keys[1].public_key(),
        "contractHex": Digest::of(&rows.contract).hex(),
        "credentialId": rows.row.credential_id().as_str(),
        "bytes": {
            "contract": b64(&rows.contract),
            "gate": b64(&rows.gate.to_bytes()),
            "frozen": b64(&rows.frozen.to_bytes()),
            "row": b64(&rows.row.to_bytes()),
            "revoked": b64(&rows.row.revoked().to_bytes()),
            "spec": b64(&rows.spec),
        },
    });
    let (status, steps, stderr, rows) = tokio::task::spawn_blocking(move || {
        let (status, steps, stderr) = run_calls(config, &rows);
        (status, steps, stderr, rows)
    })
    .await
    .unwrap();
    let said = || {
        let lines: Vec<String> = steps.iter().map(Value::to_string).collect();
        format!("{}\nstderr: {stderr}", lines.join("\n"))
    };
    assert!(status.success(), "{CALLS} exited {status}:\n{}", said());

    // Every positive step succeeded, in order, with no permission violation on the way.
    let step = |name: &str| {
        steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no {name} step:\n{}", said()))
    };
    let names: Vec<&str> = steps.iter().filter_map(|s| s["step"].as_str()).collect();
    assert_eq!(names[..STEPS.len()], STEPS, "{}", said());
    for name in STEPS {
        let s = step(name);
        assert_eq!(s["ok"], true, "{}", said());
        assert_eq!(s["violations"], json!([]), "{name}: {}", said());
    }
    let code = step("contract.republish-lost-cas")["code"]
        .as_u64()
        .unwrap();
    assert!([10071, 10164, 10077].contains(&code), "{}", said());

    // The same calls on another instance: refused by the server, which names the subject.
    let auth = format!("cotal_auth_{SPACE}");
    let refusals = [
        (
            "refused.foreign-gate-create",
            format!("$KV.{auth}.epgate.manager.{OTHER_IID}"),
        ),
        (
            "refused.foreign-family-keys",
            format!("$KV.{auth}.epcred.manager.{OTHER_IID}.>"),
        ),
    ];
    assert_eq!(
        names[STEPS.len()..],
        refusals.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        "{}",
        said()
    );
    for (name, subject) in &refusals {
        let s = step(name);
        assert_eq!(
            (&s["ok"], &s["expect"]),
            (&json!(false), &json!("refusal")),
            "{}",
            said()
        );
        let violations = s["violations"].as_array().unwrap();
        assert!(
            violations.iter().any(|v| {
                let v = v.as_str().unwrap_or_default();
                v.contains("Permissions Violation for Publish") && v.contains(subject.as_str())
            }),
            "{name}: no publish violation naming {subject}:\n{}",
            said()
        );
    }
    let create = step("refused.foreign-family-keys")["violations"].to_string();
    assert!(
        create.contains(&format!("$JS.API.CONSUMER.CREATE.KV_{auth}.")),
        "{}",
        said()
    );

    // What the admin view reads back is what the core's row types wrote.
    let freeze_token = step("gate.freeze")["revision"].as_u64().unwrap();
    let spec_revision = step("records.spec-create")["revision"].as_u64().unwrap();
    let reopened = rows.reopened(spec_revision, 0);
    assert_eq!(decoded(step("gate.reopen")), reopened.to_bytes());
    let gate = f.gate().await;
    assert_eq!(gate, reopened);
    assert_eq!(gate.state(), GateState::Open);
    assert_eq!(gate.generation(), Generation(1));
    assert_eq!(
        gate.registration_revision(),
        RegistrationRevision(spec_revision)
    );
    assert_eq!(
        f.family().await,
        vec![(
            rows.row.key(),
            format!("manager_serve_{IID}"),
            CredState::Revoked
        )]
    );
    let repair_key = format!("eprepair.manager.{IID}");
    let cursor = RepairCursor::parse(&decoded(step("repair.save")), &repair_key).unwrap();
    assert_eq!(cursor, rows.repair(freeze_token));
    let cleared = read(&f, Store::Auth, &repair_key).await;
    assert!(
        cleared.as_ref().is_none_or(|e| !e.is_put()),
        "the repair cursor was not cleared: {cleared:?}"
    );
    let spec = read(&f, Store::Records, &format!("svc.manager.{IID}.spec"))
        .await
        .expect("the spec is absent");
    assert_eq!(spec.value, rows.spec);
    assert_eq!(spec.revision.0, spec_revision);
    assert_eq!(
        ServiceSpec::parse(&spec.value, &EndpointName::parse("manager").unwrap())
            .unwrap()
            .owner(),
        &f.owner_token()
    );

    // Nothing of the other instance was written.
    let other = GateRef::new(
        space_name(),
        EndpointName::parse("manager").unwrap(),
        InstanceId::parse(OTHER_IID).unwrap(),
    );
    let observed = drive(
        &mut Replay::new(script(move |cx| observe_gate(cx, &other))),
        &f.admin.space().unwrap(),
    )
    .await
    .unwrap();
    assert!(observed.is_none(), "another instance's gate was written");
}
