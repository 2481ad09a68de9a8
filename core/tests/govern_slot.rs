//! The governance head `govern.<endpoint>` and its registration slot: byte goldens, closed-schema
//! parsing, slot take / promote / release under injected faults, F65 continuity, the F64
//! foreign-slot orphan predicate and the holder-generation reader. The reference's §6.7
//! governance-slot-orphan cells run on the real machines in `governance_orphan_cells.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{run, Proc};
use cotal_core::driver::ModelWorld;
use cotal_core::gate::Generation;
use cotal_core::govern::*;
use cotal_core::issuance::{GateRef, ProvisionGate};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::{KvOp, KvRequest, Revision, Store};
use cotal_core::machine::Ctx;
use cotal_core::names::{keys, CommandToken, EndpointName, InstanceId, Principal, SpaceName};
use cotal_core::{EpError, ErrorCode};

const GUARDED: &str = "ai.cotal.guarded";
const PRICED: &str = "ai.cotal.priced";
const AAA: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";

fn ep() -> EndpointName {
    EndpointName::parse("manager").unwrap()
}
fn iid(c: char) -> InstanceId {
    InstanceId::parse(&c.to_string().repeat(26)).unwrap()
}
fn cmd(s: &str) -> CommandToken {
    CommandToken::parse(s).unwrap()
}
fn gmap(entries: &[(&str, &[&str])]) -> GovernedMap {
    let mut m = GovernedMap::new();
    for (c, urns) in entries {
        m.declare(cmd(c), urns.iter().map(|u| (*u).to_owned()))
            .unwrap();
    }
    m
}
fn ping() -> GovernedMap {
    gmap(&[("ping", &[GUARDED])])
}
fn slot(c: char, generation: u64, commands: GovernedMap) -> Slot {
    let (instance, generation) = (iid(c), Generation(generation));
    Slot {
        instance,
        generation,
        commands,
    }
}
fn head_of(commands: GovernedMap, provisional: Option<Slot>) -> GovernanceHead {
    GovernanceHead {
        commands,
        provisional,
    }
}
fn on_head(op: KvOp) -> Trigger {
    Trigger::new(Store::Records, op, keys::govern(&ep()))
}
fn refused<T: std::fmt::Debug>(result: Result<T, EpError>, code: ErrorCode, fragment: &str) {
    let e = result.expect_err("expected a refusal");
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(fragment), "{e:?} lacks {fragment:?}");
}

/// Puts `value` at `key` (or deletes it with `None`) at its current revision; test setup only.
fn raw_write(kv: &mut KvModel, store: Store, key: &str, value: Option<Vec<u8>>) {
    let key = key.to_owned();
    let expected = kv.get(store, &key).map(|e| e.revision);
    kv.apply(&match (value, expected) {
        (Some(value), None) => KvRequest::Create { store, key, value },
        (Some(value), Some(expected)) => KvRequest::Update {
            store,
            key,
            value,
            expected,
        },
        (None, expected) => KvRequest::Delete {
            store,
            key,
            expected: expected.unwrap(),
        },
    });
}
fn head(world: &ModelWorld) -> GovernanceHead {
    let entry = world.kv.get(Store::Records, &keys::govern(&ep())).unwrap();
    GovernanceHead::parse(&entry.value).unwrap()
}
fn read(world: &mut ModelWorld) -> Result<(GovernanceHead, Option<Revision>), EpError> {
    run(world, Proc(|cx: &mut Ctx<'_>| read_governance(cx, &ep())))
}
fn take(world: &mut ModelWorld, slot: Slot) -> Result<Revision, EpError> {
    let (observed, pin) = read(world)?;
    let script = move |cx: &mut Ctx<'_>| take_slot(cx, &ep(), &observed, pin, slot.clone());
    run(world, Proc(script))
}
fn promote(world: &mut ModelWorld, c: char, g: u64) -> Result<(), EpError> {
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| promote_held(cx, &ep(), &iid(c), Generation(g))),
    )
}
fn release(world: &mut ModelWorld, c: char, g: u64) -> Result<SlotRelease, EpError> {
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| release_held(cx, &ep(), &iid(c), Generation(g))),
    )
}

// ---- bytes ----------------------------------------------------------------------------------

#[test]
fn govern_head_golden_without_and_with_provisional() {
    let binding = gmap(&[
        ("ping", &[PRICED, GUARDED]),
        ("quiet", &[]),
        ("deploy", &[GUARDED]),
    ]);
    let bare = r#"{"ping":["ai.cotal.guarded","ai.cotal.priced"],"deploy":["ai.cotal.guarded"]}"#;
    assert_eq!(
        head_of(binding.clone(), None).to_json(),
        format!(r#"{{"commands":{bare}}}"#)
    );
    assert_eq!(GovernanceHead::default().to_json(), r#"{"commands":{}}"#);
    let held = head_of(
        binding,
        Some(slot('a', 3, gmap(&[("ping", &[GUARDED]), ("x", &[])]))),
    );
    let expected = format!(
        r#"{{"commands":{bare},"provisional":{{"instanceId":"{AAA}","generation":3,"commands":{{"ping":["ai.cotal.guarded"]}}}}}}"#
    );
    assert_eq!(held.to_json(), expected);
    // Round trip: the reference's bytes parse and write back identically.
    assert_eq!(
        GovernanceHead::parse(expected.as_bytes())
            .unwrap()
            .to_json(),
        expected
    );
    // The take itself writes those bytes.
    let mut world = ModelWorld::default();
    take(&mut world, slot('a', 0, ping())).unwrap();
    let stored = world
        .kv
        .get(Store::Records, "govern.manager")
        .unwrap()
        .value;
    assert_eq!(
        String::from_utf8(stored).unwrap(),
        format!(
            r#"{{"commands":{{}},"provisional":{{"instanceId":"{AAA}","generation":0,"commands":{{"ping":["ai.cotal.guarded"]}}}}}}"#
        )
    );
}

#[test]
fn govern_head_command_order_follows_js_property_order() {
    // Array-index keys first, ascending; every other key in insertion order.
    let order = ["zeta", "10", "4294967295", "2", "alpha", "01", "4294967294"];
    let m = gmap(&order.map(|c| (c, &[GUARDED][..])));
    let written: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&m.to_json()).unwrap();
    let keys: Vec<&str> = written.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["2", "10", "4294967294", "zeta", "4294967295", "alpha", "01"]
    );
    // URNs sort by UTF-16 code units: U+FF5E sorts after a surrogate pair, unlike UTF-8.
    let urns = gmap(&[("ping", &["\u{ff5e}", "\u{1f600}"])]);
    assert_eq!(urns.to_json(), "{\"ping\":[\"\u{1f600}\",\"\u{ff5e}\"]}");
    // Stored order survives; a merge appends new commands in declaration order.
    let stored = r#"{"7":["ai.cotal.guarded"],"zz":["ai.cotal.priced"],"aa":["ai.cotal.guarded"]}"#;
    let parsed = GovernanceHead::parse(format!(r#"{{"commands":{stored}}}"#).as_bytes()).unwrap();
    assert_eq!(parsed.commands.to_json(), stored);
    let next = gmap(&[("new", &[GUARDED]), ("ungov", &[]), ("aa", &[PRICED])]);
    assert_eq!(
        parsed.commands.merged(&next).to_json(),
        r#"{"7":["ai.cotal.guarded"],"zz":["ai.cotal.priced"],"aa":["ai.cotal.guarded","ai.cotal.priced"],"new":["ai.cotal.guarded"]}"#
    );
    // Unsorted or repeated URNs from a peer read as a set and are written sorted.
    let loose = GovernanceHead::parse(br#"{"commands":{"p":["b","a","b"]}}"#).unwrap();
    assert_eq!(loose.to_json(), r#"{"commands":{"p":["a","b"]}}"#);
}

#[test]
fn govern_head_parse_refusals_are_internal() {
    let top = [
        "not json",
        "[]",
        "{}",
        r#"{"commands":[]}"#,
        r#"{"commands":{},"extra":1}"#,
        r#"{"commands":{"Bad_Cmd":["a"]}}"#,
        r#"{"commands":{"p":"a"}}"#,
        r#"{"commands":{"p":[""]}}"#,
        r#"{"commands":{"p":[1]}}"#,
        r#"{"commands":{},"provisional":null}"#,
    ];
    let slots = [
        r#"{"generation":0,"commands":{}}"#.to_owned(),
        r#"{"instanceId":"short","generation":0,"commands":{}}"#.to_owned(),
        format!(r#"{{"instanceId":"{AAA}","generation":-1,"commands":{{}}}}"#),
        format!(r#"{{"instanceId":"{AAA}","generation":1.5,"commands":{{}}}}"#),
        format!(r#"{{"instanceId":"{AAA}","generation":"1","commands":{{}}}}"#),
        format!(r#"{{"instanceId":"{AAA}","generation":9007199254740992,"commands":{{}}}}"#),
        format!(r#"{{"instanceId":"{AAA}","generation":0}}"#),
        format!(r#"{{"instanceId":"{AAA}","generation":0,"commands":{{}},"x":1}}"#),
    ];
    let slots = slots.map(|s| format!(r#"{{"commands":{{}},"provisional":{s}}}"#));
    for case in top.iter().map(|s| (*s).to_owned()).chain(slots) {
        let e = GovernanceHead::parse(case.as_bytes()).expect_err(&case);
        assert_eq!(e.code, ErrorCode::Internal, "{case}: {e}");
    }
}

#[test]
fn read_governance_absent_marker_garbled_and_unreadable() {
    let mut world = ModelWorld::default();
    assert_eq!(read(&mut world).unwrap(), (GovernanceHead::default(), None));
    let key = keys::govern(&ep());
    raw_write(
        &mut world.kv,
        Store::Records,
        &key,
        Some(b"{\"commands\":7}".to_vec()),
    );
    refused(read(&mut world), ErrorCode::Internal, "command map");
    raw_write(&mut world.kv, Store::Records, &key, None);
    refused(
        read(&mut world),
        ErrorCode::FailedPrecondition,
        "carries a DEL marker",
    );
    world
        .kv
        .inject(on_head(KvOp::Get), Fault::AmbiguousNotApplied);
    refused(
        read(&mut world),
        ErrorCode::Unavailable,
        "reading govern.manager failed",
    );
}

// ---- take / promote / release ---------------------------------------------------------------

#[test]
fn f64_slot_take_creates_then_pins_and_keeps_the_binding() {
    let mut world = ModelWorld::default();
    take(&mut world, slot('a', 0, ping())).unwrap();
    assert!(head(&world).held_by(&iid('a'), Generation(0)));
    let binding = gmap(&[("old", &[PRICED])]);
    let bytes = head_of(binding.clone(), None).to_bytes();
    raw_write(&mut world.kv, Store::Records, "govern.manager", Some(bytes));
    take(&mut world, slot('b', 4, GovernedMap::new())).unwrap();
    assert_eq!(
        head(&world),
        head_of(binding, Some(slot('b', 4, GovernedMap::new())))
    );
}

#[test]
fn f64_slot_take_cas_loss_is_conflict() {
    let mut world = ModelWorld::default();
    let (observed, pin) = read(&mut world).unwrap();
    take(&mut world, slot('a', 0, GovernedMap::new())).unwrap();
    let late = slot('b', 0, GovernedMap::new());
    let script = move |cx: &mut Ctx<'_>| take_slot(cx, &ep(), &observed, pin, late.clone());
    refused(
        run(&mut world, Proc(script)),
        ErrorCode::Conflict,
        "took the governance slot first",
    );
    assert!(head(&world).held_by(&iid('a'), Generation(0)));
}

#[test]
fn f64_slot_take_ambiguous_or_unsent_is_unavailable() {
    for (fault, fragment, lands) in [
        (Fault::AmbiguousApplied, "is ambiguous", true),
        (Fault::AmbiguousNotApplied, "is ambiguous", false),
        (Fault::Unavailable, "failed before it was sent", false),
    ] {
        let mut world = ModelWorld::default();
        world.kv.inject(on_head(KvOp::CreateStrict), fault);
        refused(
            take(&mut world, slot('c', 0, ping())),
            ErrorCode::Unavailable,
            fragment,
        );
        // Landed or not, the caller's abort-reopen is what orphans a slot that landed.
        assert_eq!(
            world.kv.get(Store::Records, "govern.manager").is_some(),
            lands
        );
    }
}

#[test]
fn f65_promote_merges_impositions_and_retains_the_slot() {
    let mut world = ModelWorld::default();
    promote(&mut world, 'a', 0).unwrap(); // no slot: nothing to promote, nothing written
    assert_eq!(world.kv.get(Store::Records, "govern.manager"), None);
    let bytes = head_of(gmap(&[("old", &[PRICED])]), None).to_bytes();
    raw_write(&mut world.kv, Store::Records, "govern.manager", Some(bytes));
    let held = slot('a', 2, gmap(&[("ping", &[GUARDED]), ("old", &[GUARDED])]));
    take(&mut world, held.clone()).unwrap();
    promote(&mut world, 'a', 2).unwrap();
    promote(&mut world, 'a', 2).unwrap(); // idempotent for a reconciler
    let merged = gmap(&[("old", &[GUARDED, PRICED]), ("ping", &[GUARDED])]);
    assert_eq!(head(&world), head_of(merged, Some(held)));
    refused(
        promote(&mut world, 'b', 2),
        ErrorCode::Unavailable,
        "held by instance",
    );
    refused(
        promote(&mut world, 'a', 3),
        ErrorCode::Unavailable,
        "frozen generation 3",
    );
}

#[test]
fn f65_promote_ambiguity_is_settled_by_read_back() {
    let staged = |commands: GovernedMap, faults: Vec<(KvOp, Fault)>| {
        let mut world = ModelWorld::default();
        take(&mut world, slot('a', 0, commands)).unwrap();
        for (op, fault) in faults {
            world.kv.inject(on_head(op), fault);
        }
        world
    };
    let mut world = staged(ping(), vec![(KvOp::Update, Fault::AmbiguousApplied)]);
    promote(&mut world, 'a', 0).unwrap();
    assert_eq!(head(&world).commands, ping());

    let mut world = staged(ping(), vec![(KvOp::Update, Fault::AmbiguousNotApplied)]);
    refused(
        promote(&mut world, 'a', 0),
        ErrorCode::Unavailable,
        "did not complete",
    );
    assert_eq!(head(&world).commands, GovernedMap::new());

    // The first read passes, the write is lost, the read-back fails: still unavailable.
    let passes = Fault::After(Box::new(|_: &mut KvModel| {}));
    let faults = vec![
        (KvOp::Get, passes),
        (KvOp::Update, Fault::AmbiguousNotApplied),
        (KvOp::Get, Fault::Unavailable),
    ];
    let mut world = staged(ping(), faults);
    refused(
        promote(&mut world, 'a', 0),
        ErrorCode::Unavailable,
        "the read-back failed too",
    );

    // A slot that imposes nothing new: the binding already equals the merge, so it is done.
    let ungoverned = gmap(&[("ping", &[])]);
    let mut world = staged(ungoverned, vec![(KvOp::Update, Fault::AmbiguousNotApplied)]);
    promote(&mut world, 'a', 0).unwrap();
}

#[test]
fn f64_release_clears_only_its_own_slot() {
    let mut world = ModelWorld::default();
    take(&mut world, slot('a', 1, ping())).unwrap();
    promote(&mut world, 'a', 1).unwrap();
    assert_eq!(release(&mut world, 'b', 1).unwrap(), SlotRelease::NotHeld);
    assert_eq!(release(&mut world, 'a', 0).unwrap(), SlotRelease::NotHeld);
    assert_eq!(release(&mut world, 'a', 1).unwrap(), SlotRelease::Released);
    assert_eq!(head(&world), head_of(ping(), None));
    assert_eq!(release(&mut world, 'a', 1).unwrap(), SlotRelease::NotHeld);
}

#[test]
fn f64_release_ambiguity_is_settled_by_read_back() {
    let cases = [
        (vec![Fault::AmbiguousApplied], SlotRelease::Released),
        (vec![Fault::AmbiguousNotApplied], SlotRelease::Released),
        (
            vec![Fault::AmbiguousNotApplied, Fault::AmbiguousNotApplied],
            SlotRelease::Leftover,
        ),
    ];
    for (faults, expected) in cases {
        let mut world = ModelWorld::default();
        take(&mut world, slot('a', 1, GovernedMap::new())).unwrap();
        for fault in faults {
            world.kv.inject(on_head(KvOp::Update), fault);
        }
        assert_eq!(release(&mut world, 'a', 1).unwrap(), expected);
        let still_held = head(&world).held_by(&iid('a'), Generation(1));
        assert_eq!(still_held, expected == SlotRelease::Leftover);
    }
    // A successor reclaims between our read and our write: the CAS loses and the slot is theirs.
    let mut world = ModelWorld::default();
    take(&mut world, slot('a', 1, GovernedMap::new())).unwrap();
    let theirs = head_of(GovernedMap::new(), Some(slot('d', 5, GovernedMap::new())));
    let reclaim = move |kv: &mut KvModel| {
        raw_write(
            kv,
            Store::Records,
            "govern.manager",
            Some(theirs.to_bytes()),
        );
    };
    world
        .kv
        .inject(on_head(KvOp::Get), Fault::After(Box::new(reclaim)));
    assert_eq!(release(&mut world, 'a', 1).unwrap(), SlotRelease::NotHeld);
    assert!(head(&world).held_by(&iid('d'), Generation(5)));
}

// ---- F65 / F66 ------------------------------------------------------------------------------

#[test]
fn f65_governed_trait_never_disappears() {
    let binding = gmap(&[("ping", &[GUARDED, PRICED])]);
    let stripped = gmap(&[("ping", &[GUARDED])]);
    let e = check_continuity(&binding, &stripped).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(
        e.message
            .contains("\"ai.cotal.priced\" from command \"ping\""),
        "{e}"
    );
    // Whatever the surface does, a merge never drops an imposition.
    assert_eq!(binding.merged(&stripped), binding);
}

#[test]
fn f65_removed_command_keeps_its_tombstone() {
    let binding = gmap(&[("ping", &[GUARDED]), ("was", &[])]);
    check_continuity(&binding, &gmap(&[("other", &[])])).unwrap();
    let after_removal = binding.merged(&gmap(&[("other", &[])]));
    assert_eq!(after_removal.get(&cmd("ping")), ping().get(&cmd("ping")));
    // Re-adding it ungoverned later still refuses; an empty binding set imposes nothing.
    let re_added = gmap(&[("ping", &[]), ("was", &[])]);
    refused(
        check_continuity(&after_removal, &re_added),
        ErrorCode::PermissionDenied,
        "drops governed trait",
    );
}

#[test]
fn f65_added_traits_and_new_commands_pass() {
    let richer = gmap(&[("ping", &[GUARDED, PRICED]), ("new", &[])]);
    check_continuity(&ping(), &richer).unwrap();
    check_continuity(&GovernedMap::new(), &gmap(&[("ping", &[])])).unwrap();
}

#[test]
fn f66_a_command_is_declared_once() {
    let mut m = ping();
    let twice = m.declare(cmd("ping"), [PRICED.to_owned()]);
    assert_eq!(twice.unwrap_err().code, ErrorCode::FailedPrecondition);
    let empty_urn = m.declare(cmd("p2"), [String::new()]);
    assert_eq!(empty_urn.unwrap_err().code, ErrorCode::BadRequest);
}

// ---- F64 predicates -------------------------------------------------------------------------

fn live(g: u64) -> HolderGeneration {
    HolderGeneration::Live(Generation(g))
}

#[test]
fn f64_foreign_slot_predicate_refuses_all_but_a_stamp_behind_the_live_gate() {
    use ErrorCode::{Conflict, Unavailable};
    let held = slot('a', 3, GovernedMap::new());
    let cases = [
        (
            HolderGeneration::NoSeam,
            Conflict,
            "no-seam",
            "cannot observe that instance's issuance",
        ),
        (
            HolderGeneration::Unreadable("down".into()),
            Unavailable,
            "unreadable",
            "could not be",
        ),
        (
            HolderGeneration::Garbled("\"7\"".into()),
            Unavailable,
            "garbled",
            "not an unsigned gen",
        ),
        (
            live(2),
            Unavailable,
            "behind",
            "ahead of its observed live gate generation 2",
        ),
        (live(3), Conflict, "in-flight", "IN FLIGHT"),
    ];
    for (observed, code, condition, fragment) in cases {
        let e = assert_foreign_slot_is_orphaned(
            &SpaceName::parse("govslotsmoke").unwrap(),
            &ep(),
            &held,
            &observed,
        )
        .unwrap_err();
        assert_eq!((e.code, e.message.contains(fragment)), (code, true), "{e}");
        let detail = serde_json::json!({
            "kind": FOREIGN_SLOT_HELD, "holderInstanceId": AAA, "condition": condition,
        });
        assert_eq!(e.details, vec![detail]);
        assert_eq!(
            ForeignSlotCondition::of(&e).map(ForeignSlotCondition::as_str),
            Some(condition)
        );
    }
    assert_foreign_slot_is_orphaned(
        &SpaceName::parse("govslotsmoke").unwrap(),
        &ep(),
        &held,
        &live(4),
    )
    .unwrap();
}

#[test]
fn f64_slot_stance_for_fresh_and_resumed_registrations() {
    let stance = |head: &GovernanceHead, c: char, g: u64, resuming: bool| {
        slot_stance(head, &iid(c), Generation(g), resuming).map(|s| format!("{s:?}"))
    };
    assert_eq!(
        stance(&GovernanceHead::default(), 'a', 2, false).unwrap(),
        "Vacant"
    );
    let mine = head_of(GovernedMap::new(), Some(slot('a', 2, GovernedMap::new())));
    assert_eq!(stance(&mine, 'a', 2, true).unwrap(), "Resumed");
    assert_eq!(stance(&mine, 'a', 3, false).unwrap(), "OwnOrphan");
    assert!(stance(&mine, 'b', 0, false).unwrap().starts_with("Foreign"));
    refused(
        stance(&mine, 'a', 2, false),
        ErrorCode::Internal,
        "this very instance",
    );
    // A resume whose crashed predecessor never reached its take finds the head as a fresh run
    // would: its own older slot is an orphan, another's is foreign (and orphan-checked).
    assert_eq!(stance(&mine, 'a', 3, true).unwrap(), "OwnOrphan");
    assert!(stance(&mine, 'b', 0, true).unwrap().starts_with("Foreign"));
    assert_eq!(
        stance(&GovernanceHead::default(), 'a', 2, true).unwrap(),
        "Vacant"
    );
}

#[test]
fn f64_deregistration_slot_check_triad() {
    let held = slot('a', 3, GovernedMap::new());
    let check = |observed| deregistration_slot_check(&ep(), &held, &observed);
    assert_eq!(check(live(3)).unwrap(), DeregistrationSlot::InFlight);
    assert_eq!(check(live(4)).unwrap(), DeregistrationSlot::Leftover);
    refused(
        check(live(2)),
        ErrorCode::Unavailable,
        "ahead of the observed live gate",
    );
    let unobserved = [
        HolderGeneration::NoSeam,
        HolderGeneration::Unreadable("x".into()),
        HolderGeneration::Garbled("x".into()),
    ];
    for observed in unobserved {
        refused(
            check(observed),
            ErrorCode::Unavailable,
            "refusing the delete",
        );
    }
}

// ---- the holder-generation reader -------------------------------------------------------------

/// The seam the registration aims at a foreign slot's holder; the §6.7 cells that exercise it
/// through the real machines live in `governance_orphan_cells.rs`.
#[test]
fn f64_holder_generation_is_observed_from_the_auth_store() {
    let mut world = ModelWorld::default();
    let gate = GateRef::new(SpaceName::parse("govslotsmoke").unwrap(), ep(), iid('a'));
    let observe = |world: &mut ModelWorld| {
        let space = gate.space.clone();
        let script =
            move |cx: &mut Ctx<'_>| observe_holder_generation(cx, &space, &ep(), &iid('a'));
        run(world, Proc(script)).unwrap()
    };
    assert!(matches!(observe(&mut world), HolderGeneration::Unreadable(m) if m.contains("absent")));
    let principal = Principal::parse("local.govslotaaaa").unwrap();
    let provision = ProvisionGate {
        gate: gate.clone(),
        principal,
    };
    run(&mut world, provision).unwrap();
    assert_eq!(observe(&mut world), live(0));
    let gate_get = Trigger::new(Store::Auth, KvOp::Get, "epgate.");
    world.kv.inject(gate_get, Fault::AmbiguousNotApplied);
    assert!(matches!(
        observe(&mut world),
        HolderGeneration::Unreadable(_)
    ));
    raw_write(
        &mut world.kv,
        Store::Auth,
        &gate.key(),
        Some(b"{}".to_vec()),
    );
    assert!(matches!(observe(&mut world), HolderGeneration::Garbled(_)));
    raw_write(&mut world.kv, Store::Auth, &gate.key(), None);
    assert!(
        matches!(observe(&mut world), HolderGeneration::Unreadable(m) if m.contains("DEL marker"))
    );
}
