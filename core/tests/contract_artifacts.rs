//! Contract artifacts (SPEC §13.7, reference-gate-impl §3.20): canonical bytes, closure
//! manifests, the cluster-document grammar (one test per rule, refused and admitted), golden
//! digests, and publishing / reading closures through the KV model with its faults.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{ambiguous, run, Proc};
use cotal_core::canon::{content_digest, Digest};
use cotal_core::contract::*;
use cotal_core::driver::ModelWorld;
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::settle::AMBIGUOUS_WRITE_ATTEMPTS;
use cotal_core::kv::{KvOp, Store};
use cotal_core::machine::{Ctx, Effect};
use cotal_core::names::CommandToken;
use cotal_core::{EpError, ErrorCode};
use serde_json::{json, Value};

/// Independently computed with `sha256sum` over hand-written canonical text.
const VOID_ARTIFACT: &str =
    "sha256:bcde375ebd4cbacf651311181173836b169d5a360c6ac158c6a2cdaf49be3f61";
const VOID_CLOSURE: &str =
    "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";
const SMALL_ROOT: &str = "sha256:b191a77262a4009f490d27ee9926812b84684fd74eb39fdf878d31d2f43b9488";
const SMALL_CLOSURE: &str =
    "sha256:879ca3777664e559c44b083c57672312cf4aa71e8c6eccbb856351dbec99b2f9";

fn d(s: &str) -> Digest {
    Digest::parse_prefixed(s).unwrap()
}

/// The golden document: one targeted `inspect` admitting `owner`.
fn small_doc() -> Value {
    json!({
        "urn": "com.acme.deploy", "revision": 1, "attributes": [], "events": [],
        "commands": [{
            "name": "inspect", "class": "ephemeral", "targeted": true, "modes": ["owner"],
            "capability": "deploy.inspect", "inputDigest": VOID_CLOSURE, "outputDigest": VOID_CLOSURE
        }]
    })
}

/// The rule-test base: `small_doc` plus a governed journal action command at `commands[1]`.
fn doc() -> Value {
    let mut doc = small_doc();
    doc["commands"].as_array_mut().unwrap().push(json!({
        "name": "deploy", "class": "journal", "targeted": false, "capability": "deploy.run",
        "inputDigest": VOID_CLOSURE, "outputDigest": VOID_CLOSURE,
        "traits": ["ai.cotal.priced", "com.acme.audited", "ai.cotal.guarded"],
        "action": true, "readinessDeadlineMs": 0,
        "admissionCeiling": {"maxBytes": 65536, "maxDepth": 16, "maxItems": 256}
    }));
    doc
}

fn code(r: Result<impl std::fmt::Debug, EpError>) -> ErrorCode {
    r.unwrap_err().code
}

/// One edit of [`doc`]: set the value at a `/`-separated path, or remove it (`None`).
type Edit = (&'static str, Option<Value>);

fn set(path: &'static str, value: Value) -> Edit {
    (path, Some(value))
}

fn del(path: &'static str) -> Edit {
    (path, None)
}

fn edited(edits: &[Edit]) -> Value {
    let mut v = doc();
    for (path, value) in edits {
        let (parent, field) = path.rsplit_once('/').map_or(("", *path), |(p, f)| (p, f));
        // A JSON pointer: "" is the whole document, "/a/0" a member's element.
        let pointer = if parent.is_empty() {
            String::new()
        } else {
            format!("/{parent}")
        };
        let target = v.pointer_mut(&pointer).unwrap();
        match (value, field.parse::<usize>()) {
            (Some(x), Ok(i)) => target[i] = x.clone(),
            (Some(x), Err(_)) => target[field] = x.clone(),
            (None, _) => drop(target.as_object_mut().unwrap().remove(field)),
        }
    }
    v
}

/// Each `good` edit set of [`doc`] parses; each `bad` edit is `contract-invalid` naming `why`.
fn rule(good: &[&[Edit]], bad: &[(Edit, &str)]) {
    for edits in good {
        let v = edited(edits);
        parse_cluster_document(&v).unwrap_or_else(|e| panic!("{edits:?} refused: {e}"));
    }
    for (edit, why) in bad {
        let e = parse_cluster_document(&edited(std::slice::from_ref(edit))).unwrap_err();
        assert_eq!(e.code, ErrorCode::ContractInvalid, "{e}");
        assert!(e.message.contains(why), "{e} lacks {why:?}");
    }
}

// ---- Canonical bytes --------------------------------------------------------------------

#[test]
fn artifact_bytes_must_be_their_own_canonical_form() {
    assert_eq!(
        verify_artifact_bytes(br#"{"a":[1,2.5]}"#).unwrap(),
        json!({"a": [1, 2.5]})
    );
    let refusals: [(&[u8], &str); 9] = [
        (b"", "non-empty"),
        (br#"{"a": 1}"#, "canonical"),
        (b"{\"a\":1}\n", "canonical"),
        (br#"{"b":1,"a":2}"#, "canonical"),
        (b"1.0", "canonical"),
        (b"1e2", "canonical"),
        (br#"{"a":1,"a":1}"#, "I-JSON"),
        (b"\xff", "UTF-8"),
        (b"nope", "I-JSON"),
    ];
    for (bytes, why) in refusals {
        let e = verify_artifact_bytes(bytes).unwrap_err();
        assert_eq!(e.code, ErrorCode::ContractInvalid, "{bytes:?}");
        assert!(e.message.contains(why), "{e}");
    }
}

#[test]
fn artifact_bytes_are_bounded_at_256_kib() {
    let at = format!("\"{}\"", "a".repeat(MAX_ARTIFACT_BYTES - 2));
    assert!(verify_artifact_bytes(at.as_bytes()).is_ok());
    let over = format!("\"{}\"", "a".repeat(MAX_ARTIFACT_BYTES - 1));
    let e = verify_artifact_bytes(over.as_bytes()).unwrap_err();
    assert!(e.message.contains("bounded at 262144"), "{e}");
}

#[test]
fn canonical_bytes_refuse_non_interchangeable_values() {
    assert_eq!(
        artifact_canonical_bytes(&json!({"b": 1, "a": 1.0})).unwrap(),
        br#"{"a":1,"b":1}"#
    );
    assert_eq!(
        code(artifact_canonical_bytes(&json!(u64::MAX))),
        ErrorCode::ContractInvalid
    );
}

// ---- Manifests and golden digests -------------------------------------------------------

#[test]
fn golden_void_schema_and_small_cluster_closure_digests() {
    assert_eq!(
        content_digest(&json!({"type": "null"})).unwrap(),
        d(VOID_ARTIFACT)
    );
    assert_eq!(
        ClusterManifest::new(d(VOID_ARTIFACT)).closure_digest(),
        d(VOID_CLOSURE)
    );
    let root = Digest::of(&artifact_canonical_bytes(&small_doc()).unwrap());
    assert_eq!(root, d(SMALL_ROOT));
    let manifest = ClusterManifest::new(root);
    assert_eq!(manifest.closure_digest(), d(SMALL_CLOSURE));
    assert_eq!(
        manifest.to_bytes(),
        artifact_canonical_bytes(&manifest.to_value()).unwrap()
    );
    let verified = verify_cluster_manifest(&d(SMALL_CLOSURE), &manifest.to_value()).unwrap();
    assert_eq!(verified, manifest);
}

#[test]
fn manifest_must_hash_to_its_closure_digest() {
    // The raw document presented at the closure digest is not a manifest.
    let e = verify_cluster_manifest(&d(SMALL_CLOSURE), &small_doc()).unwrap_err();
    assert!(e.message.contains("does not hash"), "{e}");
    let e = verify_cluster_manifest(
        &d(VOID_CLOSURE),
        &ClusterManifest::new(d(SMALL_ROOT)).to_value(),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::ContractInvalid);
}

#[test]
fn manifest_must_be_v1_with_a_digest_root_and_no_members() {
    let root = SMALL_ROOT;
    for (manifest, why) in [
        (json!({"v": 2, "root": root, "members": []}), "v is not 1"),
        (json!({"root": root, "members": []}), "v is not 1"),
        (json!({"v": 1, "root": &root[7..], "members": []}), "root"),
        (json!({"v": 1, "root": root}), "members is not an array"),
        (
            json!({"v": 1, "root": root, "members": [VOID_ARTIFACT]}),
            "multi-artifact",
        ),
        (json!([1]), "not an object"),
    ] {
        let closure = content_digest(&manifest).unwrap();
        let e = verify_cluster_manifest(&closure, &manifest).unwrap_err();
        assert_eq!(e.code, ErrorCode::ContractInvalid);
        assert!(e.message.contains(why), "{e} lacks {why:?}");
    }
}

#[test]
fn root_must_hash_to_the_manifest_root() {
    assert!(verify_cluster_root(&d(SMALL_ROOT), &small_doc()).is_ok());
    let mut tampered = small_doc();
    tampered["revision"] = json!(2);
    let e = verify_cluster_root(&d(SMALL_ROOT), &tampered).unwrap_err();
    assert!(e.message.contains("does not hash"), "{e}");
}

// ---- Document rules ---------------------------------------------------------------------

#[test]
fn document_parses_into_typed_commands() {
    let parsed = parse_cluster_document(&doc()).unwrap();
    assert_eq!(
        (parsed.urn.as_str(), parsed.revision),
        ("com.acme.deploy", 1)
    );
    let names: Vec<&str> = parsed.commands.keys().map(CommandToken::as_str).collect();
    assert_eq!(names, ["deploy", "inspect"]);
    let inspect = &parsed.commands[&CommandToken::parse("inspect").unwrap()];
    assert_eq!(
        inspect.targeting,
        Targeting::Targeted(vec![AuthzMode::Owner])
    );
    assert_eq!(inspect.class, CommandClass::Ephemeral);
    let deploy = &parsed.commands[&CommandToken::parse("deploy").unwrap()];
    let ceiling = AdmissionCeiling {
        max_bytes: 65536,
        max_depth: 16,
        max_items: 256,
    };
    assert_eq!(deploy.class, CommandClass::Journal(ceiling));
    assert_eq!(
        (deploy.action, deploy.readiness_deadline_ms),
        (true, Some(0))
    );
    assert_eq!(deploy.input_digest, d(VOID_CLOSURE));
}

#[test]
fn f65_governed_traits_are_only_the_governed_urns_sorted() {
    let parsed = parse_cluster_document(&doc()).unwrap();
    let governed = parsed.governed_traits();
    let by_name = |n: &str| governed[&CommandToken::parse(n).unwrap()].clone();
    assert_eq!(by_name("deploy"), GOVERNED_TRAIT_URNS.to_vec());
    assert!(
        by_name("inspect").is_empty(),
        "an ungoverned command keeps an empty set"
    );
}

#[test]
fn rule_urn_is_reverse_dns() {
    let long_label = format!("a.{}", "b".repeat(64));
    rule(
        &[
            &[set("urn", json!("ai.cotal.lifecycle"))],
            &[set("urn", json!("a-.b"))],
        ],
        &[
            (set("urn", json!("deploy")), "urn"),
            (set("urn", json!("Com.acme")), "urn"),
            (set("urn", json!("-a.b")), "urn"),
            (set("urn", json!(long_label)), "urn"),
            (set("urn", json!(["a"; 17].join("."))), "urn"),
        ],
    );
}

#[test]
fn rule_revision_is_unsigned_integer() {
    rule(
        &[&[set("revision", json!(0))], &[set("revision", json!(3.0))]],
        &[
            (set("revision", json!(-1)), "revision"),
            (set("revision", json!(1.5)), "revision"),
            (set("revision", json!("1")), "revision"),
        ],
    );
}

#[test]
fn rule_attributes_and_events_are_arrays() {
    rule(
        &[&[set("events", json!([{"name": "x"}]))]],
        &[
            (set("attributes", json!({})), "attributes is not an array"),
            (del("events"), "events is not an array"),
        ],
    );
}

#[test]
fn rule_commands_are_a_non_empty_array() {
    rule(
        &[&[set("commands", json!([small_doc()["commands"][0]]))]],
        &[
            (set("commands", json!([])), "non-empty"),
            (set("commands", json!({})), "non-empty"),
            (
                set("commands/0", json!("inspect")),
                "commands[0] is not an object",
            ),
        ],
    );
}

#[test]
fn rule_command_name_is_a_command_token() {
    rule(
        &[&[set("commands/0/name", json!("re-pair"))]],
        &[
            (set("commands/0/name", json!("Inspect")), "commands[0].name"),
            (set("commands/0/name", json!(7)), "commands[0].name"),
        ],
    );
}

#[test]
fn rule_describe_is_reserved() {
    rule(
        &[&[set("commands/0/name", json!("describe-all"))]],
        &[(set("commands/0/name", json!("describe")), "reserved")],
    );
}

#[test]
fn rule_f66_a_command_is_declared_once() {
    rule(
        &[&[set("commands/1/name", json!("inspect-2"))]],
        &[(set("commands/1/name", json!("inspect")), "declared twice")],
    );
}

#[test]
fn rule_class_is_ephemeral_or_journal() {
    rule(
        &[&[]],
        &[
            (set("commands/0/class", json!("stream")), "class"),
            (del("commands/0/class"), "class"),
        ],
    );
}

#[test]
fn rule_targeted_is_a_boolean() {
    rule(
        &[&[
            set("commands/1/targeted", json!(true)),
            set("commands/1/modes", json!(["any"])),
        ]],
        &[
            (
                set("commands/0/targeted", json!("yes")),
                "targeted as a boolean",
            ),
            (del("commands/1/targeted"), "targeted as a boolean"),
        ],
    );
}

#[test]
fn rule_modes_iff_targeted() {
    rule(
        &[&[
            set("commands/0/targeted", json!(false)),
            del("commands/0/modes"),
        ]],
        &[
            (del("commands/0/modes"), "must declare"),
            (set("commands/0/modes", json!([])), "must declare"),
            (
                set("commands/1/modes", json!(["owner"])),
                "must not declare modes",
            ),
            (
                set("commands/1/modes", json!(null)),
                "must not declare modes",
            ),
        ],
    );
}

#[test]
fn rule_modes_are_known_and_unique() {
    let all = json!(["self", "owner", "any", "child", "ledger", "handle", "exact"]);
    rule(
        &[&[set("commands/0/modes", all)]],
        &[
            (set("commands/0/modes", json!(["root"])), "unknown mode"),
            (set("commands/0/modes", json!([1])), "unknown mode"),
            (set("commands/0/modes", json!(["owner", "owner"])), "twice"),
        ],
    );
}

#[test]
fn rule_capability_is_a_bounded_token() {
    let longest = format!("a{}", "-".repeat(63));
    rule(
        &[
            &[set("commands/0/capability", json!("a"))],
            &[set("commands/0/capability", json!(longest))],
        ],
        &[
            (set("commands/0/capability", json!("Deploy")), "capability"),
            (set("commands/0/capability", json!("1deploy")), "capability"),
            (set("commands/0/capability", json!("")), "capability"),
            (
                set("commands/0/capability", json!("a".repeat(65))),
                "capability",
            ),
        ],
    );
}

#[test]
fn rule_input_and_output_are_closure_digests() {
    rule(
        &[&[set("commands/0/outputDigest", json!(SMALL_CLOSURE))]],
        &[
            (
                set("commands/0/inputDigest", json!(&VOID_CLOSURE[7..])),
                "inputDigest",
            ),
            (
                set(
                    "commands/0/outputDigest",
                    json!(VOID_CLOSURE.to_uppercase()),
                ),
                "outputDigest",
            ),
            (del("commands/1/inputDigest"), "inputDigest"),
        ],
    );
}

#[test]
fn rule_traits_are_unique_reverse_dns_urns() {
    rule(
        &[
            &[set("commands/0/traits", json!([]))],
            &[set("commands/0/traits", json!(["x.y"]))],
        ],
        &[
            (
                set("commands/0/traits", json!(["guarded"])),
                "not a reverse-DNS URN",
            ),
            (
                set("commands/0/traits", json!("ai.cotal.guarded")),
                "not an array",
            ),
            (set("commands/0/traits", json!(["x.y", "x.y"])), "twice"),
        ],
    );
}

#[test]
fn rule_action_is_true_and_only_on_journal_commands() {
    rule(
        &[&[
            del("commands/1/action"),
            del("commands/1/readinessDeadlineMs"),
        ]],
        &[
            (set("commands/1/action", json!(false)), "not true"),
            (set("commands/0/action", json!(true)), "not journal-class"),
        ],
    );
}

#[test]
fn rule_journal_commands_and_only_they_declare_admission_ceiling() {
    let ceiling = json!({"maxBytes": 1, "maxDepth": 1, "maxItems": 1});
    rule(
        &[&[set("commands/1/admissionCeiling", ceiling.clone())]],
        &[
            (
                del("commands/1/admissionCeiling"),
                "must declare admissionCeiling",
            ),
            (
                set("commands/1/admissionCeiling/maxDepth", json!(0)),
                "maxDepth",
            ),
            (
                set("commands/1/admissionCeiling/maxItems", json!(1.5)),
                "maxItems",
            ),
            (
                set("commands/0/admissionCeiling", ceiling),
                "must not declare admissionCeiling",
            ),
        ],
    );
}

#[test]
fn rule_readiness_deadline_needs_the_action_composite() {
    rule(
        &[&[set("commands/1/readinessDeadlineMs", json!(30000))]],
        &[
            (
                set("commands/1/readinessDeadlineMs", json!(-1)),
                "readinessDeadlineMs",
            ),
            (del("commands/1/action"), "without the action"),
        ],
    );
}

// ---- Publishing and reading through the model -------------------------------------------

fn publish(world: &mut ModelWorld, bytes: Vec<u8>) -> Result<(Digest, bool), EpError> {
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| publish_artifact(cx, &bytes)),
    )
}

fn publish_doc(world: &mut ModelWorld, doc: Value) -> Digest {
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| publish_cluster(cx, &doc)),
    )
    .unwrap()
}

fn read(world: &mut ModelWorld, closure: Digest) -> ReadClosure {
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| read_closure(cx, &closure)),
    )
    .unwrap()
}

#[test]
fn a_published_closure_reads_back_verified() {
    let mut world = ModelWorld::default();
    let closure = publish_doc(&mut world, small_doc());
    assert_eq!(closure, d(SMALL_CLOSURE));
    let stored = world
        .kv
        .get(Store::Contracts, &d(SMALL_ROOT).hex())
        .unwrap();
    assert_eq!(
        stored.value,
        artifact_canonical_bytes(&small_doc()).unwrap()
    );
    world.log.clear();
    let ReadClosure::Verified(v) = read(&mut world, closure) else {
        panic!("not verified")
    };
    assert_eq!(
        (v.closure, v.root, &v.raw),
        (closure, d(SMALL_ROOT), &small_doc())
    );
    assert_eq!(v.document, parse_cluster_document(&small_doc()).unwrap());
    let expected = [
        Effect::ReadArtifact(closure),
        Effect::ReadArtifact(d(SMALL_ROOT)),
    ];
    assert_eq!(world.log, expected, "two reads, manifest then root");
    assert!(ReadClosure::Verified(v).into_serve_grant().is_ok());
}

#[test]
fn an_absent_manifest_or_root_is_failed_precondition() {
    let mut world = ModelWorld::default();
    let closure = d(SMALL_CLOSURE);
    let absent = read(&mut world, closure);
    assert_eq!(
        absent,
        ReadClosure::Absent {
            closure,
            artifact: closure
        }
    );
    // Only the manifest published: the root is what is missing.
    publish(&mut world, ClusterManifest::new(d(SMALL_ROOT)).to_bytes()).unwrap();
    let absent = read(&mut world, closure);
    assert_eq!(
        absent,
        ReadClosure::Absent {
            closure,
            artifact: d(SMALL_ROOT)
        }
    );
    assert_eq!(
        code(absent.clone().into_registration()),
        ErrorCode::FailedPrecondition
    );
    assert_eq!(
        code(absent.into_serve_grant()),
        ErrorCode::FailedPrecondition
    );
}

#[test]
fn garbled_or_shadow_bytes_at_a_digest_key_are_refused() {
    let mut world = ModelWorld::default();
    let closure = d(SMALL_CLOSURE);
    world.kv.put(Store::Contracts, &closure.hex(), b"garbage");
    let garbled = read(&mut world, closure);
    assert!(matches!(&garbled, ReadClosure::Invalid(e) if e.message.contains("hash to")));
    assert_eq!(code(garbled.into_registration()), ErrorCode::Internal);

    // An honest closure, then a shadow append over its root: the model serves the last message.
    let mut world = ModelWorld::default();
    publish_doc(&mut world, small_doc());
    world
        .kv
        .put(Store::Contracts, &d(SMALL_ROOT).hex(), br#"{"urn":"x"}"#);
    assert_eq!(
        code(read(&mut world, closure).into_serve_grant()),
        ErrorCode::Internal
    );

    // Bytes that hash to their key but are not canonical never serve either.
    let mut world = ModelWorld::default();
    let loose = br#"{"v": 1}"#;
    world
        .kv
        .put(Store::Contracts, &Digest::of(loose).hex(), loose);
    let e = code(read(&mut world, Digest::of(loose)).into_registration());
    assert_eq!(e, ErrorCode::Internal);
}

#[test]
fn intact_artifacts_breaking_the_rules_are_contract_invalid_until_serve_time() {
    let mut world = ModelWorld::default();
    // A well-formed artifact whose manifest says v: 2.
    let manifest = json!({"v": 2, "root": SMALL_ROOT, "members": []});
    let (closure, _) = publish(&mut world, artifact_canonical_bytes(&manifest).unwrap()).unwrap();
    let invalid = read(&mut world, closure);
    assert_eq!(
        code(invalid.clone().into_registration()),
        ErrorCode::ContractInvalid
    );
    assert_eq!(code(invalid.into_serve_grant()), ErrorCode::Internal);
    // A manifest whose root document breaks the grammar (published raw, bypassing the check).
    let mut bad = small_doc();
    bad["commands"][0]["name"] = json!("describe");
    let (root, _) = publish(&mut world, artifact_canonical_bytes(&bad).unwrap()).unwrap();
    let (closure, _) = publish(&mut world, ClusterManifest::new(root).to_bytes()).unwrap();
    assert_eq!(
        code(read(&mut world, closure).into_registration()),
        ErrorCode::ContractInvalid
    );
}

#[test]
fn publish_is_idempotent_by_content() {
    let mut world = ModelWorld::default();
    let bytes = artifact_canonical_bytes(&json!({"type": "null"})).unwrap();
    assert_eq!(
        publish(&mut world, bytes.clone()).unwrap(),
        (d(VOID_ARTIFACT), true)
    );
    assert_eq!(
        publish(&mut world, bytes).unwrap(),
        (d(VOID_ARTIFACT), false)
    );
    assert_eq!(
        world
            .kv
            .history(Store::Contracts, &d(VOID_ARTIFACT).hex())
            .len(),
        1
    );
    assert_eq!(
        publish_doc(&mut world, small_doc()),
        publish_doc(&mut world, small_doc())
    );
}

#[test]
fn foreign_bytes_or_a_marker_at_the_key_refuse_publish() {
    let bytes = artifact_canonical_bytes(&small_doc()).unwrap();
    let key = d(SMALL_ROOT).hex();
    let mut world = ModelWorld::default();
    world.kv.put(Store::Contracts, &key, b"{}");
    assert_eq!(
        code(publish(&mut world, bytes.clone())),
        ErrorCode::Internal
    );
    let mut world = ModelWorld::default();
    world.kv.put(Store::Contracts, &key, &bytes);
    world.kv.delete_unpinned(Store::Contracts, &key);
    assert_eq!(code(publish(&mut world, bytes)), ErrorCode::Internal);
}

#[test]
fn publish_refuses_invalid_input_before_any_effect() {
    let mut world = ModelWorld::default();
    assert_eq!(
        code(publish(&mut world, br#"{"a": 1}"#.to_vec())),
        ErrorCode::ContractInvalid
    );
    let mut bad = small_doc();
    bad["commands"] = json!([]);
    let e = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| publish_cluster(cx, &bad)),
    );
    assert_eq!(code(e), ErrorCode::ContractInvalid);
    assert!(world.log.is_empty());
}

#[test]
fn an_ambiguous_publish_is_settled_by_read_back() {
    let bytes = artifact_canonical_bytes(&small_doc()).unwrap();
    let trigger = || Trigger::new(Store::Contracts, KvOp::CreateStrict, "");
    // Committed but unacknowledged: the read-back finds our bytes.
    let mut world = ModelWorld::default();
    world.kv.inject(trigger(), ambiguous(true));
    assert_eq!(
        publish(&mut world, bytes.clone()).unwrap(),
        (d(SMALL_ROOT), false)
    );
    // Lost before committing: the read-back finds nothing and the create is retried.
    let mut world = ModelWorld::default();
    world.kv.inject(trigger(), ambiguous(false));
    assert_eq!(
        publish(&mut world, bytes.clone()).unwrap(),
        (d(SMALL_ROOT), true)
    );
    // Never settles: `unavailable`, saying it may have committed.
    let mut world = ModelWorld::default();
    for _ in 0..AMBIGUOUS_WRITE_ATTEMPTS {
        world.kv.inject(trigger(), ambiguous(false));
    }
    let e = publish(&mut world, bytes.clone()).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert!(e.message.contains("may have committed"), "{e}");
    // Refused before sending: `unavailable`, nothing written.
    let mut world = ModelWorld::default();
    world.kv.inject(trigger(), Fault::Unavailable);
    assert_eq!(code(publish(&mut world, bytes)), ErrorCode::Unavailable);
    assert!(world
        .kv
        .get(Store::Contracts, &d(SMALL_ROOT).hex())
        .is_none());
}

#[test]
fn f66_a_command_declared_in_two_clusters_is_refused() {
    let mut world = ModelWorld::default();
    let a = publish_doc(&mut world, small_doc());
    let mut other = doc();
    other["urn"] = json!("com.acme.other");
    let b = publish_doc(&mut world, other);
    let verified: Vec<VerifiedClosure> = [a, b]
        .into_iter()
        .map(|c| read(&mut world, c).into_registration().unwrap())
        .collect();
    assert_eq!(merge_commands(&verified[..1]).unwrap().len(), 1);
    let e = merge_commands(&verified).unwrap_err();
    assert_eq!(e.code, ErrorCode::FailedPrecondition);
    assert!(e.message.contains("inspect"), "{e}");
}
