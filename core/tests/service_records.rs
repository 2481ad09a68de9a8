//! Service records on the KV model: the records CAS cells of reference §6.5, one named test per
//! F42 clause of the status writer (§3.15), the spec/status parse rules, byte round-trips, and
//! ambiguous records writes settled by read-back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::*;
use cotal_core::driver::{drive, ModelWorld, World};
use cotal_core::gate::ProcessEpoch;
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, KvOutcome, KvRequest, Operation, Revision, Store};
use cotal_core::machine::{Ctx, Effect, Halt, Observation, Replay};
use cotal_core::names::{keys, EndpointName};
use cotal_core::service::{self as svc, RecordRead, ServiceSpec, ServiceStatus, WriteStatus};
use cotal_core::{EpError, ErrorCode};
use serde_json::{json, Value};

const OWNER: &str = "u_cccccccccccccccccccccccccc";
const ESCALATED: &str = svc::SERVICE_ESCALATED;

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

fn spec_value() -> Value {
    json!({"endpoint": "throwaway", "owner": OWNER, "clusterDigests": [digest('a')],
           "protocol": {"v": 1}})
}

fn endpoint() -> EndpointName {
    gate_ref().endpoint
}

fn spec_key() -> String {
    keys::svc_spec(&gate_ref().endpoint, &gate_ref().instance)
}

fn status_key() -> String {
    keys::svc_status(&gate_ref().endpoint, &gate_ref().instance)
}

/// Runs one records procedure on the world.
fn on<T>(
    world: &mut ModelWorld,
    f: impl Fn(&mut Ctx<'_>) -> Result<T, Halt>,
) -> Result<T, EpError> {
    run(world, Proc(f))
}

fn create(world: &mut ModelWorld, key: &str, bytes: &[u8]) -> Result<Revision, EpError> {
    on(world, |cx| svc::create_record(cx, key, bytes))
}

fn delete(world: &mut ModelWorld, key: &str, at: Revision) -> Result<Revision, EpError> {
    on(world, |cx| svc::delete_record(cx, key, at))
}

fn code<T: std::fmt::Debug>(result: Result<T, EpError>) -> ErrorCode {
    result.unwrap_err().code
}

/// A registered instance: gate open at epoch 0, spec published; returns the spec revision.
fn registered() -> (ModelWorld, u64) {
    let mut world = registered_world(1);
    let spec = ServiceSpec::from_value(spec_value(), &endpoint()).unwrap();
    let rev = create(&mut world, &spec_key(), &spec.to_bytes()).unwrap();
    (world, rev.0)
}

fn status(epoch: u64, state: &str, observed: u64) -> Value {
    json!({"epoch": epoch, "state": state, "observedSpecRevision": observed})
}

fn writer(epoch: u64, status: Value, supervisor: bool, expected: Option<u64>) -> WriteStatus {
    let gate = gate_ref();
    WriteStatus {
        endpoint: gate.endpoint.clone(),
        instance: gate.instance.clone(),
        gate,
        epoch: ProcessEpoch(epoch),
        status,
        expected_status_revision: expected.map(Revision),
        supervisor,
    }
}

fn write(world: &mut ModelWorld, status: Value) -> Result<Revision, EpError> {
    let epoch = status["epoch"].as_u64().unwrap_or(0);
    run(world, writer(epoch, status, false, None))
}

fn supervise(world: &mut ModelWorld, status: Value) -> Result<Revision, EpError> {
    run(
        world,
        writer(status["epoch"].as_u64().unwrap(), status, true, None),
    )
}

fn stored(world: &ModelWorld, key: &str) -> Option<(Value, Revision)> {
    let entry = world.kv.get(Store::Records, key)?;
    Some((serde_json::from_slice(&entry.value).ok()?, entry.revision))
}

fn stored_status(world: &ModelWorld) -> Value {
    stored(world, &status_key()).unwrap().0
}

fn inject(world: &mut ModelWorld, op: KvOp, fault: Fault) {
    world.kv.inject(Trigger::new(Store::Records, op, ""), fault);
}

// ---- §6.5 records CAS cells -----------------------------------------------------------------

#[test]
fn records_create_returns_its_revision_and_a_recreate_is_conflict() {
    let mut world = ModelWorld::default();
    assert!(create(&mut world, "k", b"{}").unwrap() > Revision(0));
    let again = create(&mut world, "k", b"{}").unwrap_err();
    assert_eq!(again.code, ErrorCode::Conflict);
    assert!(again.message.contains("re-read"), "{again}");
}

#[test]
fn records_stale_update_is_conflict_and_a_pinned_update_advances() {
    let mut world = ModelWorld::default();
    let r1 = create(&mut world, "k", b"1").unwrap();
    let r2 = on(&mut world, |cx| svc::update_record(cx, "k", b"2", r1)).unwrap();
    assert!(r2 > r1);
    let stale = on(&mut world, |cx| svc::update_record(cx, "k", b"3", r1));
    assert_eq!(code(stale), ErrorCode::Conflict);
    assert_eq!(world.kv.get(Store::Records, "k").unwrap().value, b"2");
}

#[test]
fn records_create_over_a_del_or_purge_marker_is_conflict() {
    let mut world = ModelWorld::default();
    let r = create(&mut world, "a", b"1").unwrap();
    delete(&mut world, "a", r).unwrap();
    assert_eq!(code(create(&mut world, "a", b"1")), ErrorCode::Conflict);
    world.kv.put(Store::Records, "b", b"1");
    world.kv.purge(Store::Records, "b");
    assert_eq!(code(create(&mut world, "b", b"1")), ErrorCode::Conflict);
}

#[test]
fn records_pinned_delete_of_a_moved_record_is_conflict_and_removes_nothing() {
    let mut world = ModelWorld::default();
    let stale = create(&mut world, "k", b"1").unwrap();
    on(&mut world, |cx| svc::update_record(cx, "k", b"2", stale)).unwrap();
    let lost = delete(&mut world, "k", stale).unwrap_err();
    assert_eq!(lost.code, ErrorCode::Conflict);
    assert!(
        lost.message
            .contains("is NOT the record that was inspected"),
        "{lost}"
    );
    assert!(lost.message.contains("re-read"), "{lost}");
    assert!(world.kv.get(Store::Records, "k").unwrap().is_put());
}

#[test]
fn read_record_tells_absence_markers_and_live_values_apart() {
    let mut world = ModelWorld::default();
    let read = |world: &mut ModelWorld| on(world, |cx| svc::read_record(cx, "k")).unwrap();
    assert_eq!(read(&mut world), RecordRead::Absent);
    let revision = create(&mut world, "k", b"1").unwrap();
    let value = b"1".to_vec();
    assert_eq!(read(&mut world), RecordRead::Live { value, revision });
    let revision = delete(&mut world, "k", revision).unwrap();
    let operation = Operation::Delete;
    assert_eq!(
        read(&mut world),
        RecordRead::Deleted {
            revision,
            operation
        }
    );
    let revision = world.kv.purge(Store::Records, "k");
    let operation = Operation::Purge;
    assert_eq!(
        read(&mut world),
        RecordRead::Deleted {
            revision,
            operation
        }
    );
}

#[test]
fn a_status_without_observed_spec_revision_is_refused() {
    let (mut world, _) = registered();
    let e = write(&mut world, json!({"epoch": 0, "state": "ready"})).unwrap_err();
    assert_eq!(e.code, ErrorCode::Internal);
    assert!(e.message.contains("observedSpecRevision"), "{e}");
    assert!(stored(&world, &status_key()).is_none());
}

// ---- F42: the status writer fence -------------------------------------------------------------

#[test]
fn f42_a_current_status_write_creates_then_updates() {
    let (mut world, spec) = registered();
    let r1 = write(&mut world, status(0, "starting", spec)).unwrap();
    let r2 = write(&mut world, status(0, "ready", spec)).unwrap();
    assert!(r2 > r1);
    assert_eq!(stored_status(&world), status(0, "ready", spec));
}

#[test]
fn f42_the_payload_epoch_must_equal_the_writing_epoch() {
    let (mut world, spec) = registered();
    let forged = run(&mut world, writer(0, status(1, "ready", spec), false, None));
    assert_eq!(code(forged), ErrorCode::Internal);
}

#[test]
fn f42_a_status_requires_a_live_spec() {
    let mut world = registered_world(1);
    let e = write(&mut world, status(0, "ready", 0));
    assert_eq!(code(e), ErrorCode::FailedPrecondition);
    let r = create(&mut world, &spec_key(), spec_value().to_string().as_bytes()).unwrap();
    delete(&mut world, &spec_key(), r).unwrap();
    let e = write(&mut world, status(0, "ready", 0)).unwrap_err();
    assert_eq!(e.code, ErrorCode::FailedPrecondition);
    assert!(e.message.contains("torn"), "{e}");
}

#[test]
fn f42_observed_spec_revision_may_not_run_ahead_of_the_spec() {
    let (mut world, spec) = registered();
    let ahead = write(&mut world, status(0, "ready", spec + 1));
    assert_eq!(code(ahead), ErrorCode::FailedPrecondition);
    write(&mut world, status(0, "ready", spec)).unwrap();
}

#[test]
fn f42_a_non_current_epoch_is_expired_even_when_it_equals_the_stored_epoch() {
    let (mut world, spec) = registered();
    write(&mut world, status(0, "ready", spec)).unwrap();
    // A takeover reopens the gate at epoch 1; the stored status still says 0, so monotonicity
    // against it alone would let the predecessor write.
    let token = freeze(&mut world, &op(2)).unwrap();
    assert!(reopen(&mut world, &op(2), token, coords(2, 1, 1, 0)).unwrap());
    let e = write(&mut world, status(0, "ready", spec));
    assert_eq!(code(e), ErrorCode::Expired);
    assert_eq!(stored_status(&world)["epoch"], 0);
    write(&mut world, status(1, "ready", spec)).unwrap();
}

#[test]
fn f42_an_epoch_below_the_stored_status_epoch_is_conflict() {
    let (mut world, spec) = registered();
    // A stored status ahead of the gate's epoch: the write is current, yet below it.
    let ahead = status(3, "ready", spec).to_string();
    world
        .kv
        .put(Store::Records, &status_key(), ahead.as_bytes());
    let e = write(&mut world, status(0, "ready", spec));
    assert_eq!(code(e), ErrorCode::Conflict);
}

#[test]
fn f42_an_escalated_row_is_never_overwritten() {
    let (mut world, spec) = registered();
    supervise(&mut world, status(0, ESCALATED, spec)).unwrap();
    let by_instance = write(&mut world, status(0, "ready", spec));
    assert_eq!(code(by_instance), ErrorCode::FailedPrecondition);
    let by_supervisor = supervise(&mut world, status(0, "ready", spec));
    assert_eq!(code(by_supervisor), ErrorCode::FailedPrecondition);
    assert_eq!(stored_status(&world)["state"], ESCALATED);
}

#[test]
fn f42_an_instance_write_cannot_originate_escalated() {
    let (mut world, spec) = registered();
    let e = write(&mut world, status(0, ESCALATED, spec));
    assert_eq!(code(e), ErrorCode::FailedPrecondition);
    assert!(stored(&world, &status_key()).is_none());
}

#[test]
fn f42_an_instance_write_drops_supervisor_fields_and_carries_the_stored_ones_forward() {
    let (mut world, spec) = registered();
    let mut by_supervisor = status(0, "restarting", spec);
    by_supervisor["restarts"] = json!([{"t": 10, "epoch": 0}]);
    supervise(&mut world, by_supervisor).unwrap();
    // Forged supervisor fields are dropped, not refused; the stored history rides forward, last.
    let forged = json!({"epoch": 0, "restarts": "forged", "state": "ready",
                        "observedSpecRevision": spec, "note": "x", "retiredAt": 5});
    write(&mut world, forged).unwrap();
    let bytes = world.kv.get(Store::Records, &status_key()).unwrap().value;
    let expected = format!(
        r#"{{"epoch":0,"state":"ready","observedSpecRevision":{spec},"note":"x","restarts":[{{"t":10,"epoch":0}}]}}"#
    );
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);
}

#[test]
fn f42_the_supervisor_may_originate_history_and_retirement() {
    let (mut world, spec) = registered();
    let mut escalated = status(0, ESCALATED, spec);
    escalated["restarts"] = json!([{"t": 1, "epoch": 0}]);
    escalated["retiredAt"] = json!(99);
    supervise(&mut world, escalated.clone()).unwrap();
    assert_eq!(stored_status(&world), escalated);
}

#[test]
fn f42_expected_status_revision_pins_a_derived_write() {
    let (mut world, spec) = registered();
    let from_absent = writer(0, status(0, "ready", spec), true, Some(0));
    let r = run(&mut world, from_absent.clone()).unwrap();
    assert_eq!(code(run(&mut world, from_absent)), ErrorCode::Conflict);
    run(
        &mut world,
        writer(0, status(0, "ready", spec), true, Some(r.0)),
    )
    .unwrap();
}

#[test]
fn f42_a_status_rewrites_its_deregistration_marker_pinned_to_it() {
    let (mut world, spec) = registered();
    let r = write(&mut world, status(0, "ready", spec)).unwrap();
    let marker = delete(&mut world, &status_key(), r).unwrap();
    assert!(write(&mut world, status(0, "ready", spec)).unwrap() > marker);
    let history = world.kv.history(Store::Records, &status_key());
    let ops: Vec<Operation> = history.iter().map(|h| h.1).collect();
    assert_eq!(ops, [Operation::Put, Operation::Delete, Operation::Put]);
}

// ---- parse rules and bytes ----------------------------------------------------------------------

#[test]
fn spec_parse_accepts_the_documented_shape() {
    let mut v = spec_value();
    v["endpointType"] = json!("svc");
    v["activation"] = json!({"mode": "on-demand", "capacity": 2, "maxRestarts": 3,
                             "restartWindowMs": 60000});
    v["future"] = json!({"x": [1, 2]});
    let spec = ServiceSpec::from_value(v.clone(), &endpoint()).unwrap();
    assert_eq!(spec.owner().as_str(), OWNER);
    assert_eq!(spec.endpoint_type(), Some("svc"));
    assert_eq!(spec.cluster_digests()[0].to_prefixed(), digest('a'));
    assert_eq!(spec.activation().unwrap().capacity, 2);
    assert_eq!(spec.value(), &v);
    // A reverse-DNS spec endpoint matches its tokenized key endpoint.
    let dotted = EndpointName::parse("com.acme.deploy").unwrap();
    v["endpoint"] = json!("com.acme.deploy");
    assert_eq!(
        ServiceSpec::from_value(v, &dotted).unwrap().endpoint(),
        &dotted
    );
}

#[test]
fn spec_parse_refuses_each_broken_rule() {
    let on_demand = |extra: Value| {
        let mut a = json!({"mode": "on-demand", "capacity": 1});
        a.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        a
    };
    let cases = [
        ("endpoint", json!("other")),
        ("endpoint", json!("Bad_Name")),
        ("owner", json!("not an owner")),
        ("owner", Value::Null),
        ("endpointType", json!(1)),
        ("clusterDigests", json!([])),
        ("clusterDigests", json!([digest('A')])),
        ("clusterDigests", json!([digest('a').replace(':', "-")])),
        ("protocol", json!({"v": 2})),
        ("activation", on_demand(json!({"capacity": 0}))),
        ("activation", on_demand(json!({"mode": "always"}))),
        ("activation", on_demand(json!({"maxRestarts": 0}))),
        ("activation", on_demand(json!({"restartWindowMs": -1}))),
        ("activation", on_demand(json!({"extra": true}))),
    ];
    for (field, bad) in cases {
        let mut v = spec_value();
        v[field] = bad.clone();
        let e = ServiceSpec::from_value(v, &endpoint()).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "{field} = {bad}");
    }
    assert!(ServiceSpec::from_value(json!([1]), &endpoint()).is_err());
    assert!(ServiceSpec::parse(b"{not json", &endpoint()).is_err());
}

#[test]
fn status_parse_rules() {
    let with = |extra: Value| {
        let mut s = status(0, "ready", 0);
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s
    };
    let ok = ServiceStatus::from_value(with(json!({"state": "ready-2", "x": null}))).unwrap();
    assert_eq!((ok.epoch(), ok.state()), (ProcessEpoch(0), "ready-2"));
    let history = with(json!({"restarts": [{"t": 1, "epoch": 0}, {"t": 2, "epoch": 1}]}));
    let parsed = ServiceStatus::from_value(history).unwrap();
    assert_eq!(parsed.restarts().unwrap().len(), 2);
    assert!(ServiceStatus::from_value(with(json!({"state": "a".repeat(32)}))).is_ok());
    let bad = [
        with(json!({"epoch": -1})),
        with(json!({"epoch": 1.5})),
        with(json!({"state": "Ready"})),
        with(json!({"state": "1ready"})),
        with(json!({"state": "a".repeat(33)})),
        with(json!({"observedSpecRevision": "1"})),
        with(json!({"restarts": [{"t": 1, "epoch": 0}, {"t": 2, "epoch": 0}]})),
        with(json!({"restarts": [{"t": 1}]})),
        with(json!({"retiredAt": 5})),
        with(json!({"state": ESCALATED, "retiredAt": -5})),
        json!("ready"),
    ];
    for v in bad {
        let e = ServiceStatus::from_value(v.clone()).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "{v}");
    }
}

#[test]
fn spec_bytes_round_trip_with_unknown_fields_in_caller_order() {
    let text = format!(
        r#"{{"zeta":{{"b":1,"a":[true,null,"\u0001é"]}},"owner":"{OWNER}","protocol":{{"v":1,"ext":"x"}},"endpoint":"throwaway","clusterDigests":["{}"],"alpha":1.5,"big":100000000000000000000}}"#,
        digest('b')
    );
    let spec = ServiceSpec::parse(text.as_bytes(), &endpoint()).unwrap();
    assert_eq!(String::from_utf8(spec.to_bytes()).unwrap(), text);
    // JSON.stringify spelling: an integral double prints without a fraction.
    let whole = br#"{"epoch":1.0,"state":"ready","observedSpecRevision":0}"#;
    let expected = br#"{"epoch":1,"state":"ready","observedSpecRevision":0}"#;
    assert_eq!(ServiceStatus::parse(whole).unwrap().to_bytes(), expected);
}

// ---- ambiguous writes --------------------------------------------------------------------------

#[test]
fn an_ambiguous_status_update_that_committed_is_settled_as_ours() {
    let (mut world, spec) = registered();
    write(&mut world, status(0, "starting", spec)).unwrap();
    inject(&mut world, KvOp::Update, ambiguous(true));
    let r = write(&mut world, status(0, "ready", spec)).unwrap();
    assert_eq!(
        stored(&world, &status_key()),
        Some((status(0, "ready", spec), r))
    );
}

#[test]
fn an_ambiguous_status_create_that_did_not_commit_is_resent() {
    let (mut world, spec) = registered();
    inject(&mut world, KvOp::CreateStrict, ambiguous(false));
    let r = write(&mut world, status(0, "ready", spec)).unwrap();
    assert_eq!(world.kv.history(Store::Records, &status_key()).len(), 1);
    assert_eq!(
        stored(&world, &status_key()),
        Some((status(0, "ready", spec), r))
    );
}

/// Answers the first records update ambiguously after applying it and a foreign write on top.
struct Interloper {
    inner: ModelWorld,
    armed: bool,
}

impl World for Interloper {
    fn perform(&mut self, effect: &Effect) -> Observation {
        if let Effect::Kv(request @ KvRequest::Update { key, .. }) = effect {
            if std::mem::take(&mut self.armed) {
                self.inner.kv.apply(request);
                self.inner
                    .kv
                    .put(Store::Records, key, br#"{"foreign":true}"#);
                return Observation::Kv(KvOutcome::Ambiguous("ack lost".into()));
            }
        }
        self.inner.perform(effect)
    }
}

#[test]
fn an_ambiguous_write_buried_under_a_foreign_write_is_unavailable() {
    let (mut world, spec) = registered();
    write(&mut world, status(0, "starting", spec)).unwrap();
    let mut world = Interloper {
        inner: world,
        armed: true,
    };
    let mut machine = Replay::new(writer(0, status(0, "ready", spec), false, None));
    let e = drive(&mut machine, &mut world).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert!(e.message.contains("may have committed"), "{e}");
}

#[test]
fn an_ambiguous_delete_cannot_be_attributed_unless_the_key_is_unmoved() {
    let mut world = ModelWorld::default();
    let r = create(&mut world, "k", b"1").unwrap();
    inject(&mut world, KvOp::Delete, Fault::AmbiguousApplied);
    assert_eq!(code(delete(&mut world, "k", r)), ErrorCode::Unavailable);
    // Not applied: the key reads back unmoved, so the delete is re-sent and wins.
    let mut world = ModelWorld::default();
    let r = create(&mut world, "k", b"1").unwrap();
    inject(&mut world, KvOp::Delete, Fault::AmbiguousNotApplied);
    delete(&mut world, "k", r).unwrap();
    assert!(!world.kv.get(Store::Records, "k").unwrap().is_put());
}

#[test]
fn record_bytes_order_integer_like_keys_first_as_json_stringify_does() {
    // JSON.parse + JSON.stringify enumerate array-index keys first, ascending, then the rest in
    // insertion order; the rows a TS peer writes for the same value must be byte-identical.
    let status = cotal_core::service::ServiceStatus::from_value(serde_json::json!({
        "epoch": 0, "state": "ready", "observedSpecRevision": 1, "10": "a", "2": "b", "02": "c"
    }))
    .unwrap();
    assert_eq!(
        String::from_utf8(status.to_bytes()).unwrap(),
        r#"{"2":"b","10":"a","epoch":0,"state":"ready","observedSpecRevision":1,"02":"c"}"#
    );
}
