//! The plane's own contract and rows (`core::host`): the `auth` cluster is the reference's
//! (one `retire-lifecycle` command naming its schema closures), its artifacts publish before the
//! document, and the rows a first registration writes are pinned byte for byte, so a TypeScript
//! peer reads the same `auth` instance it would see from the reference.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use cotal_core::canon::Digest;
use cotal_core::contract::{parse_cluster_document, ClusterManifest};
use cotal_core::driver::ModelWorld;
use cotal_core::host::{auth_cluster, auth_instance, SelfContract, RETIRE_LIFECYCLE};
use cotal_core::kv::Store;
use cotal_core::names::{keys, InstanceId, OpId, SpaceName};
use cotal_core::serving::RegisterServing;
use nkeys::{KeyPair, KeyPairType};
use serde_json::json;

const SPACE: &str = "s1";

fn serve_key() -> String {
    KeyPair::new_from_raw(KeyPairType::User, [9; 32])
        .unwrap()
        .public_key()
}

fn instance() -> InstanceId {
    InstanceId::parse(common::IID).unwrap()
}

#[test]
fn the_auth_cluster_is_the_reference_retire_lifecycle_rail() {
    let cluster = auth_cluster().unwrap();
    parse_cluster_document(&cluster).unwrap();
    assert_eq!(cluster["urn"], "ai.cotal.auth");
    assert_eq!(cluster["revision"], 1);
    let commands = cluster["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1);
    let c = &commands[0];
    assert_eq!(c["name"], RETIRE_LIFECYCLE);
    assert_eq!(c["class"], "ephemeral");
    assert_eq!(c["targeted"], true);
    assert_eq!(c["modes"], json!(["exact"]));
    assert_eq!(c["capability"], "auth.admin");
}

#[test]
fn the_auth_contract_publishes_both_schema_closures_before_the_document() {
    let contract = SelfContract::auth().unwrap();
    assert_eq!(contract.artifacts.len(), 6);
    let cluster = auth_cluster().unwrap();
    let closure_of = |root: &[u8]| ClusterManifest::new(Digest::of(root)).closure_digest();
    let command = &cluster["commands"][0];
    assert_eq!(
        closure_of(&contract.artifacts[0]).to_prefixed(),
        command["inputDigest"]
    );
    assert_eq!(
        closure_of(&contract.artifacts[2]).to_prefixed(),
        command["outputDigest"]
    );
    assert_eq!(closure_of(&contract.artifacts[4]), contract.cluster_digest);
    assert_eq!(
        String::from_utf8(contract.artifacts[0].clone()).unwrap(),
        r#"{"additionalProperties":false,"properties":{"opId":{"type":"string"},"serveEndpoint":{"type":"string"},"serveEpoch":{"minimum":0,"type":"integer"},"serveInstanceId":{"type":"string"}},"required":["opId","serveEndpoint","serveInstanceId","serveEpoch"],"type":"object"}"#
    );
    // The closure digest the plane's spec advertises; it moves only with the contract.
    assert_eq!(contract.cluster_digest.to_prefixed(), CLUSTER_DIGEST);
}

/// Computed independently (Python: sorted-key compact JSON and SHA-256 over the reference's
/// schemas and document, each closed by its single-document manifest).
const CLUSTER_DIGEST: &str =
    "sha256:578c9006c67aa85704abdc6e745525b6d31f07be3b0f78d36ccb331b109f6147";

#[test]
fn a_first_registration_writes_the_reference_spec_status_and_gate_bytes() {
    let space = SpaceName::parse(SPACE).unwrap();
    let ceremony = auth_instance(&space, &instance(), &serve_key(), OpId::mint([3; 20])).unwrap();
    let mut world = ModelWorld::default();
    let provisioned = common::run(
        &mut world,
        cotal_core::host::PrepareSelfAuthorized(&ceremony),
    )
    .unwrap();
    assert!(provisioned);
    let serving = common::run(
        &mut world,
        RegisterServing {
            register: ceremony.registration().unwrap(),
            status: serde_json::Map::new(),
        },
    )
    .unwrap();
    assert_eq!(serving.registered.process_epoch.0, 0);
    let endpoint = ceremony.gate.endpoint.clone();
    let read = |store: Store, key: String| {
        String::from_utf8(world.kv.get(store, &key).unwrap().value).unwrap()
    };
    let gate = read(Store::Auth, ceremony.gate.key());
    let spec = read(Store::Records, keys::svc_spec(&endpoint, &instance()));
    let status = read(Store::Records, keys::svc_status(&endpoint, &instance()));
    let principal = format!("local.{}", serve_key());
    assert_eq!(
        gate,
        format!(
            r#"{{"state":"open","generation":1,"processEpoch":0,"registrationRevision":2,"nameAuthorityRevision":0,"principal":"{principal}"}}"#
        )
    );
    assert_eq!(
        spec,
        format!(
            r#"{{"endpoint":"auth","owner":"local","clusterDigests":["{CLUSTER_DIGEST}"],"protocol":{{"v":1}}}}"#
        )
    );
    assert_eq!(
        status,
        r#"{"state":"ready","epoch":0,"observedSpecRevision":2}"#
    );
}
