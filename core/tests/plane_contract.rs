//! The plane's own contract (`core::host`): the void schema's closure digest is computed from
//! its canonical bytes and still equals the digest the reference spells out; the `auth` cluster
//! is a valid cluster document whose bytes do not drift.
#![allow(clippy::unwrap_used)]

use cotal_core::canon::{canonicalize, Digest};
use cotal_core::contract::parse_cluster_document;
use cotal_core::host::{auth_cluster, void_digest, SelfContract};
use serde_json::json;

/// The digest the daemon, the simulator fixtures and the reference spelled out by hand.
const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";

#[test]
fn the_void_digest_is_computed_from_the_void_schemas_canonical_bytes() {
    assert_eq!(
        canonicalize(&json!({"type": "null"})).unwrap(),
        r#"{"type":"null"}"#
    );
    assert_eq!(
        void_digest().unwrap(),
        Digest::parse_prefixed(VOID).unwrap()
    );
    assert_eq!(void_digest().unwrap().to_prefixed(), VOID);
}

#[test]
fn the_auth_cluster_declares_exchange_and_renew_with_void_io() {
    let cluster = auth_cluster().unwrap();
    parse_cluster_document(&cluster).unwrap();
    assert_eq!(cluster["urn"], "ai.cotal.auth");
    let commands = cluster["commands"].as_array().unwrap();
    let names: Vec<_> = commands.iter().map(|c| c["name"].clone()).collect();
    assert_eq!(names, [json!("exchange"), json!("renew")]);
    for command in commands {
        assert_eq!(command["inputDigest"], VOID);
        assert_eq!(command["outputDigest"], VOID);
        assert_eq!(command["class"], "ephemeral");
        assert_eq!(command["targeted"], false);
    }
}

#[test]
fn the_auth_contract_bytes_do_not_drift() {
    let contract = SelfContract::auth().unwrap();
    assert_eq!(contract.artifacts.len(), 2);
    // The closure digest the daemon's hand-written cluster advertised before it moved here.
    assert_eq!(
        contract.cluster_digest.to_prefixed(),
        "sha256:b72add36ec7655f5194a9036b82e2e21216d0a66ad8c33f6ac3cd897c54e8f9e"
    );
}
