//! The 30 cells of the reference's `governance-slot-orphan.smoke.ts` (reference-gate-impl §6.7,
//! §3.12) on the real machines — `RegisterInstance`, `Deregister`, `ReconcileGate` — over the KV
//! model: endpoint `manager`, owner `local`, a one-cluster spec, residues staged through the
//! shipped registration path by faulting the writes to one chosen key, as the reference's store
//! proxy does. The sections build on each other as in the smoke; each test restages what it needs
//! and names the cells it checks.
//!
//! The matched pair is sections 3 and 5: same holder, same slot, one variable — the holder's gate
//! (frozen at the stamp → refuse; reopened past it → reclaim). Section 6 is the residue the
//! reconciler cannot reach (the holder's gate is already open), and section 8 aims every doubtful
//! observation of the holder's gate at a genuine orphan, then a truthful one.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::Arc;

use common::ceremony::{command, document, publish, spec_for, TableAuthority};
use common::{run, Proc};
use cotal_core::authority::NameAuthority;
use cotal_core::deregistration::{Deregister, Deregistration, NotRemoved};
use cotal_core::driver::ModelWorld;
use cotal_core::gate::{EndpointGate, GateState, Generation, OpKind};
use cotal_core::govern::{
    assert_foreign_slot_is_orphaned, observe_holder_generation, ForeignSlotCondition,
    GovernanceHead, HolderGeneration, Slot,
};
use cotal_core::issuance::{GateRef, ProvisionGate};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::{Entry, KvOp, KvRequest, Store};
use cotal_core::machine::{Ctx, Effect, Liveness};
use cotal_core::names::{keys, EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName};
use cotal_core::reconcile::{ReconcileCondition, ReconcileGate, ReconcileReport};
use cotal_core::registration::{RegisterInstance, Registered, EVICT_PRINCIPALS_MAX};
use cotal_core::service::ServiceSpec;
use cotal_core::{EpError, ErrorCode};

const SPACE: &str = "govslotsmoke";
const ENDPOINT: &str = "manager";
const OWNER: &str = "local";
/// The binding every reclaim must carry forward: `ping`'s governed trait, which every surface
/// below re-declares, and a tombstone for `legacy`, which none does — a reclaim that rebuilt the
/// binding from its own surface would launder it away (section 7).
const BINDING: &str = r#"{"ping":["ai.cotal.guarded"],"legacy":["ai.cotal.priced"]}"#;
/// Writes to the faulted key that fail: more than any one registration makes.
const WRITE_FAULTS: usize = 3;

fn iid(c: char) -> InstanceId {
    InstanceId::parse(&c.to_string().repeat(26)).unwrap()
}
fn endpoint() -> EndpointName {
    EndpointName::parse(ENDPOINT).unwrap()
}
fn gate_ref(c: char) -> GateRef {
    GateRef::new(SpaceName::parse(SPACE).unwrap(), endpoint(), iid(c))
}
fn spec_key(c: char) -> String {
    keys::svc_spec(&endpoint(), &iid(c))
}
fn govern_key() -> String {
    keys::govern(&endpoint())
}
fn refused(e: &EpError, code: ErrorCode, fragments: &[&str]) {
    assert_eq!(e.code, code, "{e}");
    for fragment in fragments {
        assert!(e.message.contains(fragment), "{e} lacks {fragment:?}");
    }
}

/// One space on the KV model (auth history 8, as the smoke's bucket), every eviction verified and
/// every probed holder gone (the smoke's `evict: true`, `probeHolder: gone`).
struct Smoke {
    world: ModelWorld,
    spec: ServiceSpec,
    authority: Arc<dyn NameAuthority>,
    ops: u8,
}

impl Smoke {
    fn new() -> Self {
        let mut world = ModelWorld::new(KvModel::with_history(8));
        world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
        world.set_prober(Box::new(|_| Liveness::Gone));
        let ping = command("ping", "ephemeral", &["ai.cotal.guarded"]);
        let legacy = command("legacy", "ephemeral", &["ai.cotal.priced"]);
        let surface = publish(&mut world, document("ai.cotal.govslot", vec![ping.clone()]));
        let earlier = publish(
            &mut world,
            document("ai.cotal.govlegacy", vec![ping, legacy]),
        );
        let mut s = Smoke {
            world,
            spec: spec_for(ENDPOINT, OWNER, &[surface]),
            authority: TableAuthority::with(ENDPOINT, OWNER, 0),
            ops: 0,
        };
        // An earlier incarnation Z established the binding through the shipped path.
        s.provision('z');
        let r = s.registrar('z', spec_for(ENDPOINT, OWNER, &[earlier]));
        run(&mut s.world, r).unwrap();
        assert_eq!(s.head().commands.to_json(), BINDING);
        assert_eq!(s.slot(), None);
        s.world.log.clear();
        s
    }

    fn provision(&mut self, c: char) {
        let principal = Principal::parse(&format!("local.govslot{}", c.to_string().repeat(4)));
        let provision = ProvisionGate {
            gate: gate_ref(c),
            principal: principal.unwrap(),
        };
        run(&mut self.world, provision).unwrap();
    }

    /// A registrar with a fresh op id per attempt (the smoke mints one per call).
    fn registrar(&mut self, c: char, spec: ServiceSpec) -> RegisterInstance {
        self.ops += 1;
        RegisterInstance {
            space: SpaceName::parse(SPACE).unwrap(),
            spec,
            instance: iid(c),
            registrant: OwnerToken::local(),
            authority: self.authority.clone(),
            op_id: OpId::mint([self.ops; 20]),
            evict_max: EVICT_PRINCIPALS_MAX,
        }
    }

    fn register(&mut self, c: char) -> Result<Registered, EpError> {
        let r = self.registrar(c, self.spec.clone());
        run(&mut self.world, r)
    }

    /// Registers `c` while every write to `key` fails with `fault` — the smoke's proxy, which
    /// throws on each create/update/put of one key while every other key commits for real.
    fn register_faulting(
        &mut self,
        c: char,
        key: &str,
        fault: fn() -> Fault,
    ) -> Result<Registered, EpError> {
        for op in [KvOp::Create, KvOp::CreateStrict, KvOp::Update] {
            for _ in 0..WRITE_FAULTS {
                self.world
                    .kv
                    .inject(Trigger::new(Store::Records, op, key), fault());
            }
        }
        let result = self.register(c);
        self.world.kv.clear_faults();
        result
    }

    fn reconcile(&mut self, c: char) -> Result<ReconcileReport, EpError> {
        run(&mut self.world, ReconcileGate { gate: gate_ref(c) })
    }

    fn gate(&self, c: char) -> EndpointGate {
        let entry = self.world.kv.get(Store::Auth, &gate_ref(c).key()).unwrap();
        EndpointGate::parse(&entry.value).unwrap()
    }

    fn head(&self) -> GovernanceHead {
        let entry = self.world.kv.get(Store::Records, &govern_key()).unwrap();
        GovernanceHead::parse(&entry.value).unwrap()
    }

    fn slot(&self) -> Option<Slot> {
        self.head().provisional
    }

    fn spec_entry(&self, c: char) -> Option<Entry> {
        self.world.kv.get(Store::Records, &spec_key(c))
    }

    /// The shipped holder-generation reader, as the registration aims it at a foreign slot.
    fn holder_generation(&mut self, c: char) -> HolderGeneration {
        let script = move |cx: &mut Ctx<'_>| {
            let space = SpaceName::parse(SPACE).unwrap();
            observe_holder_generation(cx, &space, &endpoint(), &iid(c))
        };
        run(&mut self.world, Proc(script)).unwrap()
    }

    fn probes(&self) -> usize {
        let probes = self.world.log.iter();
        probes.filter(|e| matches!(e, Effect::Probe(_))).count()
    }
}

// ---- staging, section by section ------------------------------------------------------------

/// Section 1: A dies at its Phase-3 spec publish. The smoke's proxy throws "the process died
/// before this write committed"; the closest model fault is a write refused unsent.
fn section_1() -> (Smoke, EpError) {
    let mut s = Smoke::new();
    s.provision('a');
    let died = s.register_faulting('a', &spec_key('a'), || Fault::Unavailable);
    (s, died.unwrap_err())
}

/// Section 3: B's ordinary start while A's registration is indistinguishable from in flight.
fn section_3() -> (Smoke, EpError) {
    let (mut s, _) = section_1();
    s.provision('b');
    let refusal = s.register('b').unwrap_err();
    (s, refusal)
}

/// Section 5: the operator reconciles A, then B starts again.
struct Section5 {
    s: Smoke,
    a_frozen: EndpointGate,
    reconciled: Result<ReconcileReport, EpError>,
    a_reopened: EndpointGate,
    head_before_reclaims: GovernanceHead,
    reclaimed: Result<Registered, EpError>,
}

fn section_5() -> Section5 {
    let (mut s, _) = section_3();
    let a_frozen = s.gate('a');
    let reconciled = s.reconcile('a');
    let a_reopened = s.gate('a');
    let head_before_reclaims = s.head();
    let reclaimed = s.register('b');
    Section5 {
        s,
        a_frozen,
        reconciled,
        a_reopened,
        head_before_reclaims,
        reclaimed,
    }
}

/// Section 6: C's slot-take hears an ambiguous answer (`fault` says whether it landed), C retries
/// and dies at its spec publish, C is reconciled, D starts.
struct Section6 {
    s: Smoke,
    head_before_reclaims: GovernanceHead,
    staged: EpError,
    c_after_abort: EndpointGate,
    slot_after_abort: Option<Slot>,
    not_frozen: EpError,
    probed_by_refusal: bool,
    retry_slot: Option<Slot>,
    c_retry: EndpointGate,
    d: Result<Registered, EpError>,
}

fn section_6(fault: fn() -> Fault) -> Section6 {
    let Section5 {
        mut s,
        head_before_reclaims,
        ..
    } = section_5();
    s.provision('c');
    let staged = s.register_faulting('c', &govern_key(), fault).unwrap_err();
    let (c_after_abort, slot_after_abort) = (s.gate('c'), s.slot());
    let probes = s.probes();
    let not_frozen = s.reconcile('c').unwrap_err();
    let probed_by_refusal = s.probes() != probes;
    // The retry puts a slot stamped at its own frozen generation into the head, through the
    // shipped slot-take (replacing its own orphan if the ambiguous take had landed).
    s.register_faulting('c', &spec_key('c'), || Fault::Unavailable)
        .unwrap_err();
    let (retry_slot, c_retry) = (s.slot(), s.gate('c'));
    s.reconcile('c').unwrap();
    s.provision('d');
    let d = s.register('d');
    Section6 {
        s,
        head_before_reclaims,
        staged,
        c_after_abort,
        slot_after_abort,
        not_frozen,
        probed_by_refusal,
        retry_slot,
        c_retry,
        d,
    }
}

/// Section 8: an orphan held by E, staged twice so its stamp lands at 1 (a stamp of 0 has nothing
/// behind it, so cell 29 could not be expressed), and a registrant F.
struct Section8 {
    s: Smoke,
    orphan: Slot,
    /// E's gate row as provisioned (generation 0), for the rolled-back observation.
    e_provisioned: Vec<u8>,
}

fn section_8() -> Section8 {
    let mut s = section_6(|| Fault::AmbiguousApplied).s;
    s.provision('e');
    let e_provisioned = s.world.kv.get(Store::Auth, &gate_ref('e').key()).unwrap();
    for _ in 0..2 {
        s.register_faulting('e', &spec_key('e'), || Fault::Unavailable)
            .unwrap_err();
        s.reconcile('e').unwrap();
    }
    let orphan = s.slot().unwrap();
    s.provision('f');
    Section8 {
        s,
        orphan,
        e_provisioned: e_provisioned.value,
    }
}

// ---- section 1: the residue ----------------------------------------------------------------

#[test]
fn f64_cells_01_to_05_a_registration_dying_at_its_spec_publish_leaves_an_in_flight_slot() {
    let (s, died) = section_1();
    // 1: the documented ambiguous Phase-3 outcome.
    refused(
        &died,
        ErrorCode::Unavailable,
        &["spec-write outcome is ambiguous", "left frozen"],
    );
    // 2: A's gate is frozen under a registration op.
    let a = s.gate('a');
    assert_eq!(a.state(), GateState::Frozen);
    assert_eq!(a.op().map(|op| op.kind()), Some(OpKind::Registration));
    // 3: the slot is held by A.
    let slot = s.slot().unwrap();
    assert_eq!(slot.instance, iid('a'));
    // 4: A published no spec.
    assert!(s.spec_entry('a').filter(Entry::is_put).is_none());
    // 5: the stamp equals the holder's frozen generation — the in-flight coordinate.
    assert_eq!(
        (slot.generation, a.generation()),
        (Generation(0), Generation(0))
    );
}

// ---- section 2: deregistration is not an exit ------------------------------------------------

#[test]
fn f64_cell_06_deregistration_answers_absent_for_a_slot_held_by_a_spec_publication() {
    let (mut s, _) = section_1();
    let slot = s.slot();
    let answer = run(
        &mut s.world,
        Deregister {
            gate: gate_ref('a'),
        },
    )
    .unwrap();
    assert_eq!(answer, Deregistration::NotRemoved(NotRemoved::Absent));
    // Correct, and still no exit: the slot and the freeze are untouched.
    assert_eq!(s.slot(), slot);
    assert_eq!(s.gate('a').state(), GateState::Frozen);
}

// ---- section 3: the negative control ---------------------------------------------------------

#[test]
fn f64_cells_07_to_11_an_in_flight_slot_is_never_stolen() {
    let (s, refusal) = section_3();
    // 7: B refuses while A's registration may be in flight.
    refused(
        &refusal,
        ErrorCode::Conflict,
        &["holds the governance slot through its spec publication"],
    );
    assert_eq!(
        ForeignSlotCondition::of(&refusal),
        Some(ForeignSlotCondition::InFlight)
    );
    // 8: it names why: the holder's gate is still at the stamp.
    refused(
        &refusal,
        ErrorCode::Conflict,
        &["still at generation 0", "IN FLIGHT"],
    );
    // 9: and a remedy that reaches this state.
    refused(
        &refusal,
        ErrorCode::Conflict,
        &[
            "cotal-authd gate reconcile --space",
            "--instance aaaaaaaaaaaaaaaaaaaaaaaaaa",
        ],
    );
    // 10: the slot is untouched: still A's, still stamped 0.
    let slot = s.slot().unwrap();
    assert_eq!((slot.instance, slot.generation), (iid('a'), Generation(0)));
    // 11: B's own gate abort-reopened; it moved, and it is not an input to the predicate.
    let b = s.gate('b');
    assert_eq!(
        (b.state(), b.generation()),
        (GateState::Open, Generation(1))
    );
}

// ---- section 4: the control discriminates ----------------------------------------------------

#[test]
fn f64_cells_12_13_the_negative_control_discriminates_an_off_by_one() {
    let (mut s, _) = section_3();
    let slot = s.slot().unwrap();
    let live = s.holder_generation('a');
    let shipped = assert_foreign_slot_is_orphaned(
        &SpaceName::parse(SPACE).unwrap(),
        &endpoint(),
        &slot,
        &live,
    )
    .is_ok();
    let loosened = matches!(live, HolderGeneration::Live(g) if g >= slot.generation);
    // 12: at section 3's coordinate the shipped predicate refuses and `live >= stamp` admits.
    assert!(
        !shipped && loosened,
        "{live:?} vs stamp {}",
        slot.generation
    );
    // 13: so section 3 turns red under the loosened predicate.
    assert_ne!(shipped, loosened);
}

// ---- section 5: reconcile orphans the slot; the next start reclaims it ------------------------

#[test]
fn f64_cells_14_to_18_reconciling_the_holder_lets_the_next_start_reclaim_the_slot() {
    let Section5 {
        s,
        a_frozen,
        reconciled,
        a_reopened,
        head_before_reclaims,
        reclaimed,
    } = section_5();
    // 14: reconcile reopens A's gate at the successor generation (nothing committed: abort).
    let report = reconciled.unwrap();
    assert_eq!(report.reopened_at_generation, Generation(1));
    assert!(!report.completed_registration);
    // 15: the slot is now provably orphaned: still stamped 0, its holder open at 1.
    let stamp = head_before_reclaims.provisional.unwrap().generation;
    assert_eq!(a_reopened.state(), GateState::Open);
    assert_eq!(a_reopened.generation().0, a_frozen.generation().0 + 1);
    assert!(stamp < a_reopened.generation(), "stamp {stamp}");
    // 16: B's ordinary start registers (its abort-reopen left it at 1, so it reopens at 2).
    assert_eq!(reclaimed.unwrap().generation, Generation(2));
    // 17: the slot is released after B's completing reopen.
    assert_eq!(s.slot(), None);
    // 18: B's spec is published.
    let spec = s.spec_entry('b').unwrap();
    assert!(spec.is_put());
    assert_eq!(spec.value, s.spec.to_bytes());
}

// ---- section 6: the residue the reconciler cannot reach --------------------------------------

/// The smoke's proxy throws on the slot-take, which the reference classifies as ambiguous. Here
/// an ambiguous answer is one of two model faults — the take did not land (the smoke's literal
/// residue) or it landed unacked (the self-orphaning residue its comment describes) — and a
/// write refused unsent is a definite no-write, reported as such (`take_slot`). Both ambiguous
/// variants run.
#[test]
fn f64_cells_19_20_22_23_an_ambiguous_slot_take_self_orphans_past_the_reconciler() {
    let variants: [(fn() -> Fault, bool); 2] = [
        (|| Fault::AmbiguousNotApplied, false),
        (|| Fault::AmbiguousApplied, true),
    ];
    for (fault, landed) in variants {
        let c6 = section_6(fault);
        // 19: C's slot-take is ambiguous, so C aborts and abort-reopens.
        refused(
            &c6.staged,
            ErrorCode::Unavailable,
            &["governance slot-take for endpoint \"manager\" is ambiguous"],
        );
        // 20: C's gate is open, past the generation its take was stamped with: a take that
        // landed is already an orphan.
        let c = &c6.c_after_abort;
        assert_eq!(
            (c.state(), c.generation()),
            (GateState::Open, Generation(1))
        );
        let stamped = c6.slot_after_abort.map(|s| (s.instance, s.generation));
        assert_eq!(stamped, landed.then(|| (iid('c'), Generation(0))));
        // 22: C's retry holds the slot, stamped at the generation the retry froze.
        let slot = c6.retry_slot.unwrap();
        assert_eq!(slot.instance, iid('c'));
        assert_eq!(
            (c6.c_retry.state(), slot.generation),
            (GateState::Frozen, c6.c_retry.generation())
        );
        assert_eq!(slot.generation, Generation(1));
        // 23: D reclaims an orphan whose holder gate is open.
        assert_eq!(c6.s.gate('c').state(), GateState::Open);
        c6.d.unwrap();
        assert_eq!(c6.s.slot(), None);
    }
}

/// Cell 21 on its own, so the cells around it are graded independently of its message.
#[test]
fn f64_cell_21_the_reconciler_refuses_the_open_holder_gate_not_frozen() {
    let c6 = section_6(|| Fault::AmbiguousApplied);
    // Nothing is frozen, so the reconciler refuses `not-frozen` without probing the holder, in
    // the reference's words (`is "open", not "frozen"`).
    assert_eq!(
        ReconcileCondition::of(&c6.not_frozen),
        Some(ReconcileCondition::NotFrozen)
    );
    assert!(!c6.probed_by_refusal);
    refused(
        &c6.not_frozen,
        ErrorCode::FailedPrecondition,
        &["not \"frozen\""],
    );
}

// ---- section 7: the binding survives every reclaim --------------------------------------------

#[test]
fn f65_cell_24_every_reclaim_carries_the_binding_forward() {
    let c6 = section_6(|| Fault::AmbiguousApplied);
    // 24: the binding after every reclaim equals the binding before them, byte for byte.
    let before = c6.head_before_reclaims.commands.to_json();
    assert_eq!(c6.s.head().commands.to_json(), before);
    assert_eq!(before, BINDING);
    // Stronger: every head write since the binding was established carried it unchanged — only
    // `provisional` was ever replaced (takes, promotes, releases, reclaims alike).
    let writes: Vec<GovernanceHead> =
        c6.s.world
            .log
            .iter()
            .filter_map(|e| match e {
                Effect::Kv(
                    KvRequest::Create { key, value, .. }
                    | KvRequest::CreateStrict { key, value, .. }
                    | KvRequest::Update { key, value, .. },
                ) if *key == govern_key() => Some(GovernanceHead::parse(value).unwrap()),
                _ => None,
            })
            .collect();
    // At least B's and D's take, promote and release, plus C's two takes.
    assert!(writes.len() >= 8, "{} head writes", writes.len());
    for head in writes {
        assert_eq!(head.commands.to_json(), BINDING);
    }
}

// ---- section 8: every doubtful observation fails closed ---------------------------------------

#[test]
fn f64_cell_25_an_orphan_is_staged_behind_its_holders_live_gate() {
    let Section8 { s, orphan, .. } = section_8();
    let e = s.gate('e');
    assert_eq!(orphan.instance, iid('e'));
    assert_eq!(e.state(), GateState::Open);
    assert!(Generation(0) < orphan.generation && orphan.generation < e.generation());
}

/// How F's observation of E's gate is made doubtful. The reference injects a seam function; here
/// the seam is the shipped reader over the auth store, so each doubt is staged in the store for
/// one registration attempt and E's live row restored afterwards.
#[derive(Debug, Clone, Copy)]
enum Doubt {
    /// "The seam throws": the leader read of E's gate fails.
    ReadFails,
    /// Also unreadable: E's gate carries a DEL marker (unreadable is not absent).
    DelMarker,
    /// "The seam returns `\"7\"`": E's gate row holds the string `"7"` as its generation.
    Garbled,
    /// "The seam returns 0": E's gate reads as its provisioned row at generation 0, behind the
    /// stamp — an acknowledged-write rollback.
    RolledBack,
}

impl Doubt {
    const ALL: [Doubt; 4] = [
        Doubt::ReadFails,
        Doubt::DelMarker,
        Doubt::Garbled,
        Doubt::RolledBack,
    ];

    fn expected(self) -> (&'static [&'static str], ForeignSlotCondition) {
        match self {
            Doubt::ReadFails => (&["could not be observed"], ForeignSlotCondition::Unreadable),
            Doubt::DelMarker => (
                &["could not be observed", "carries a DEL marker"],
                ForeignSlotCondition::Unreadable,
            ),
            Doubt::Garbled => (
                &["not an unsigned generation"],
                ForeignSlotCondition::Garbled,
            ),
            Doubt::RolledBack => (
                &["ahead of its observed live gate generation"],
                ForeignSlotCondition::Behind,
            ),
        }
    }
}

/// Registers F under `doubt`, checks it failed closed with the slot and E's orphan untouched, and
/// restores E's live row.
fn fails_closed(s8: &mut Section8, doubt: Doubt) {
    let key = gate_ref('e').key();
    let live = s8.s.world.kv.get(Store::Auth, &key).unwrap().value;
    let kv = &mut s8.s.world.kv;
    match doubt {
        Doubt::ReadFails => kv.inject(
            Trigger::new(Store::Auth, KvOp::Get, key.clone()),
            Fault::Unavailable,
        ),
        Doubt::DelMarker => {
            kv.delete_unpinned(Store::Auth, &key);
        }
        Doubt::Garbled => {
            let gate = String::from_utf8(live.clone()).unwrap();
            let field = format!("\"generation\":{},", s8.orphan.generation.0 + 1);
            assert!(gate.contains(&field), "{gate}");
            kv.put(
                Store::Auth,
                &key,
                gate.replace(&field, "\"generation\":\"7\",").as_bytes(),
            );
        }
        Doubt::RolledBack => {
            kv.put(Store::Auth, &key, &s8.e_provisioned);
        }
    }
    let f_before = s8.s.gate('f').generation();
    let refusal = s8.s.register('f').unwrap_err();
    s8.s.world.kv.clear_faults();
    let now = s8.s.world.kv.get(Store::Auth, &key).unwrap();
    if !now.is_put() || now.value != live {
        s8.s.world.kv.put(Store::Auth, &key, &live);
    }
    let (fragments, condition) = doubt.expected();
    refused(&refusal, ErrorCode::Unavailable, fragments);
    assert_eq!(
        ForeignSlotCondition::of(&refusal),
        Some(condition),
        "{doubt:?}"
    );
    assert_eq!(s8.s.slot().as_ref(), Some(&s8.orphan), "{doubt:?}");
    let f = s8.s.gate('f');
    assert_eq!(
        (f.state(), f.generation().0),
        (GateState::Open, f_before.0 + 1),
        "{doubt:?}: F abort-reopened"
    );
}

/// This codebase has no unwired seam: `RegisterInstance` always reads the holder's gate from the
/// auth store it already holds. The "no seam" observation is therefore graded where it lives, on
/// the shipped predicate, against the staged orphan itself.
#[test]
fn f64_cell_26_no_seam_refuses_conflict() {
    let Section8 { s, orphan, .. } = section_8();
    let e = assert_foreign_slot_is_orphaned(
        &SpaceName::parse(SPACE).unwrap(),
        &endpoint(),
        &orphan,
        &HolderGeneration::NoSeam,
    );
    let e = e.unwrap_err();
    refused(
        &e,
        ErrorCode::Conflict,
        &["cannot observe that instance's issuance gate"],
    );
    assert_eq!(
        ForeignSlotCondition::of(&e),
        Some(ForeignSlotCondition::NoSeam)
    );
    assert_eq!(s.slot(), Some(orphan));
}

#[test]
fn f64_cell_27_an_unreadable_holder_gate_refuses_unavailable() {
    for doubt in [Doubt::ReadFails, Doubt::DelMarker] {
        fails_closed(&mut section_8(), doubt);
    }
}

#[test]
fn f64_cell_28_a_garbled_holder_generation_refuses_unavailable() {
    fails_closed(&mut section_8(), Doubt::Garbled);
}

#[test]
fn f64_cell_29_a_holder_gate_behind_the_stamp_refuses_unavailable() {
    let mut s8 = section_8();
    let provisioned = EndpointGate::parse(&s8.e_provisioned).unwrap();
    assert!(provisioned.generation() < s8.orphan.generation);
    fails_closed(&mut s8, Doubt::RolledBack);
}

#[test]
fn f64_cell_30_a_truthful_observation_of_the_same_orphan_reclaims_it() {
    let mut s8 = section_8();
    for doubt in Doubt::ALL {
        fails_closed(&mut s8, doubt);
    }
    // The positive control: the same registrant against the same orphan, observed truthfully.
    let done = s8.s.register('f').unwrap();
    assert_eq!(done.generation.0, Doubt::ALL.len() as u64 + 1);
    assert_eq!(s8.s.slot(), None);
    assert_eq!(s8.s.head().commands.to_json(), BINDING);
}
