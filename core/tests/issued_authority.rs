//! The issued-authority store (SPEC §13.15) on the KV model: the reference's row bytes, the
//! issuance saga (F77, F78), resolution (F79), renewal under a generation (F80), retirement and
//! the source walk — every write also made unanswered, committed or not, and settled by a
//! read-back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::run;
use cotal_core::actors::{ActorLedger, ActorRow, ActorsOutcome, ActorsRequest};
use cotal_core::driver::ModelWorld;
use cotal_core::issued::{
    attempt_key, evidence_key, source_index_key, AcceptedToken, AttemptState, ConfirmIssued,
    Evidence, IssueGeneration, IssuedGeneration, IssuedRef, IssuedSource, ReadAccepted,
    ResolveIssued, RetireIssued, RetireSource, SubjectAllow, SubjectPermission, SubjectPermissions,
};
use cotal_core::jwt::{Permission, Permissions, ResponsePermission};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::lifecycle::{AgentGate, LifecycleHead};
use cotal_core::names::{
    keys, ActorToken, LifecycleUid, ManagerInstance, OpId, OwnerToken, Principal, SpaceName,
};
use cotal_core::{EpError, ErrorCode};

const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
const UID: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
const GEN: &str = "0123456789abcdef0123456789abcdef";
const GEN2: &str = "fedcba9876543210fedcba9876543210";
const NOW: u64 = 1_780_000_000;

fn space() -> SpaceName {
    SpaceName::parse("s1").unwrap()
}
fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}
fn actor() -> ActorToken {
    ActorToken::parse("cli").unwrap()
}
fn uid(s: &str) -> LifecycleUid {
    LifecycleUid::parse(s).unwrap()
}
fn reference(generation: &str) -> IssuedRef {
    IssuedRef {
        space: space(),
        owner: owner(),
        actor: actor(),
        uid: uid(UID),
        generation: IssuedGeneration::parse(generation).unwrap(),
    }
}
fn ledger_source() -> IssuedSource {
    IssuedSource::actor_ledger(&space(), &owner(), &actor(), &uid(UID))
}
fn ceiling(publish: &str) -> SubjectPermissions {
    SubjectPermissions {
        publish: SubjectPermission {
            allow: SubjectAllow::Patterns(vec![publish.to_owned()]),
            deny: vec![],
        },
        subscribe: SubjectPermission {
            allow: SubjectAllow::All,
            deny: vec![],
        },
    }
}
fn evidence(generation: &str) -> Evidence {
    Evidence::new(
        reference(generation),
        vec![ledger_source()],
        ceiling("a.b"),
        None,
    )
    .unwrap()
}
fn token() -> AcceptedToken {
    AcceptedToken::for_connection("nonce-abcdefghijklmnopqrstu")
}
fn issue(generation: &str) -> IssueGeneration {
    IssueGeneration {
        evidence: evidence(generation),
        accepted: Some(token()),
    }
}
fn resolve(generation: &str) -> ResolveIssued {
    ResolveIssued {
        reference: reference(generation),
        now_secs: NOW,
    }
}

fn grant_at(world: &ModelWorld, at: &str) {
    let row = ActorRow {
        owner: owner(),
        actor: actor(),
        scope: vec!["supervise".into()],
        allow_subscribe: vec![],
        allow_publish: vec![],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(uid(at)),
        granted_at: "2026-12-01T00:00:00.000Z".into(),
    };
    assert!(matches!(
        world.actors.execute(&ActorsRequest::GrantInteractive(row)),
        ActorsOutcome::Granted(_)
    ));
}

/// The actor's lifecycle head, active at `at` (what its first exchange's activation writes).
fn head_at(at: &str) -> LifecycleHead {
    LifecycleHead::activated(
        owner(),
        actor(),
        uid(at),
        ManagerInstance::parse("auth-service:s1").unwrap(),
    )
}

/// A world whose ledger grants the issued actor at [`UID`], its lifecycle active there.
fn world() -> ModelWorld {
    let mut w = ModelWorld::new(KvModel::new());
    grant_at(&w, UID);
    w.kv.put(
        Store::Records,
        &keys::lifecycle_head(&owner(), &actor()),
        &head_at(UID).to_bytes(),
    );
    w
}

fn stored(world: &ModelWorld, store: Store, key: &str) -> String {
    String::from_utf8(world.kv.get(store, key).unwrap().value).unwrap()
}

fn attempt_state(world: &ModelWorld, generation: &str) -> String {
    let row: serde_json::Value = serde_json::from_str(&stored(
        world,
        Store::Issued,
        &attempt_key(&reference(generation)),
    ))
    .unwrap();
    row["state"].as_str().unwrap().to_owned()
}

/// A fault that retires generation [`GEN`] right after the request it fires on: a concurrent
/// retirement landing between two steps of a machine.
fn retire_right_after() -> Fault {
    Fault::After(Box::new(|kv: &mut KvModel| {
        let mut retire = ModelWorld::new(std::mem::take(kv));
        run(
            &mut retire,
            RetireIssued {
                reference: reference(GEN),
            },
        )
        .unwrap();
        *kv = retire.kv;
    }))
}

fn refusal(result: Result<impl std::fmt::Debug, EpError>, code: ErrorCode, words: &str) {
    let e = result.unwrap_err();
    assert_eq!(e.code, code, "{e:?}");
    assert!(e.message.contains(words), "{:?} lacks {words:?}", e.message);
}

const EVIDENCE_BYTES: &str = concat!(
    r#"{"permissions":{"publish":{"allow":{"mode":"patterns","patterns":["a.b"]},"deny":[]},"#,
    r#""subscribe":{"allow":{"mode":"all"},"deny":[]}},"#,
    r#""ref":{"actor":"cli","generation":"0123456789abcdef0123456789abcdef","#,
    r#""owner":"u_aaaaaaaaaaaaaaaaaaaaaaaaaa","space":"s1","uid":"uuuuuuuuuuuuuuuuuuuuuuuuuu"},"#,
    r#""sources":[{"bucket":"cotal_actors_s1","#,
    r#""key":"actor.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.cli.uuuuuuuuuuuuuuuuuuuuuuuuuu","space":"s1"}],"#,
    r#""version":1}"#
);

#[test]
fn f78_issue_stages_evidence_then_activates_then_writes_the_accepted_row() {
    let mut w = world();
    let issued = run(&mut w, issue(GEN)).unwrap();
    assert_eq!(issued, reference(GEN));
    let r = reference(GEN);
    assert_eq!(
        evidence_key(&r),
        format!("v1.{OWNER}.cli.{UID}.{GEN}"),
        "the reference's evidence key"
    );
    assert_eq!(stored(&w, Store::Issued, &evidence_key(&r)), EVIDENCE_BYTES);
    let digest = cotal_core::canon::Digest::of(EVIDENCE_BYTES.as_bytes()).to_string();
    assert_eq!(
        stored(&w, Store::Issued, &attempt_key(&r)),
        format!(r#"{{"digest":"{digest}","state":"active","version":1}}"#)
    );
    let history = w.kv.history(Store::Issued, &attempt_key(&r));
    assert_eq!(history.len(), 2, "prepared, then active by one CAS");
    assert!(String::from_utf8_lossy(&history[0].2).contains(r#""state":"prepared""#));
    // The reverse index: the digest of the JSON `[1, space, bucket, key]`, computed apart.
    let index = source_index_key(&ledger_source(), &r);
    assert_eq!(
        index,
        format!(
            "bysource.v1.f51eaa9897e7825f3ee3fae578f72ee2b9e992e7a5e42940448166b8c489a519.\
             {OWNER}.cli.{UID}.{GEN}"
        )
    );
    assert!(stored(&w, Store::Issued, &index).starts_with(r#"{"ref":{"#));
    // The accepted row, keyed by the token the client derives from its own nonce.
    assert_eq!(token().as_str(), "8714f2df3bd3d587666af6ae18c32034");
    assert_eq!(
        stored(&w, Store::Accepted, &token().key()),
        format!(
            r#"{{"ref":{{"actor":"cli","generation":"{GEN}","owner":"{OWNER}","space":"s1","uid":"{UID}"}},"version":1}}"#
        )
    );
    assert_eq!(
        run(&mut w, ReadAccepted { token: token() }).unwrap(),
        Some(reference(GEN))
    );
    assert_eq!(
        token().read_grant(&space()),
        "$JS.API.DIRECT.GET.KV_cotal_accepted_s1.$KV.cotal_accepted_s1.accepted.v1.8714f2df3bd3d587666af6ae18c32034"
    );
}

#[test]
fn f77_a_generation_is_never_reused() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    let before = w.kv.last_sequence(Store::Issued);
    let again = IssueGeneration {
        evidence: Evidence::new(reference(GEN), vec![ledger_source()], ceiling("x.y"), None)
            .unwrap(),
        accepted: None,
    };
    refusal(run(&mut w, again), ErrorCode::Conflict, "never reused");
    assert_eq!(w.kv.last_sequence(Store::Issued), before, "nothing written");
}

/// Each write of the saga, one at a time, goes unanswered after committing: the read-back
/// finds our own bytes and the saga ends exactly as the clean run does.
#[test]
fn f78_every_unanswered_committed_write_settles_as_ours() {
    let clean = {
        let mut w = world();
        run(&mut w, issue(GEN)).unwrap();
        w
    };
    let writes = [
        (Store::Issued, KvOp::CreateStrict, "v1."),
        (Store::Issued, KvOp::CreateStrict, "attempt."),
        (Store::Issued, KvOp::CreateStrict, "bysource."),
        (Store::Issued, KvOp::Update, "attempt."),
        (Store::Accepted, KvOp::CreateStrict, "accepted."),
    ];
    for (store, op, prefix) in writes {
        for fault in [Fault::AmbiguousApplied, Fault::AmbiguousNotApplied] {
            let mut w = world();
            w.kv.inject(Trigger::new(store, op, prefix), fault);
            assert_eq!(run(&mut w, issue(GEN)).unwrap(), reference(GEN), "{prefix}");
            assert_eq!(w.kv.pending_faults(), 0, "the fault fired on {prefix}");
            for key in [evidence_key(&reference(GEN)), attempt_key(&reference(GEN))] {
                assert_eq!(
                    stored(&w, Store::Issued, &key),
                    stored(&clean, Store::Issued, &key)
                );
            }
            assert_eq!(
                stored(&w, Store::Accepted, &token().key()),
                stored(&clean, Store::Accepted, &token().key())
            );
        }
    }
}

#[test]
fn f78_a_retirement_between_prepare_and_release_wins() {
    let mut w = world();
    w.kv.inject(
        Trigger::new(Store::Issued, KvOp::CreateStrict, "bysource."),
        retire_right_after(),
    );
    refusal(
        run(&mut w, issue(GEN)),
        ErrorCode::Conflict,
        "lost its activation",
    );
    assert_eq!(attempt_state(&w, GEN), "aborted");
    assert!(
        w.kv.get(Store::Accepted, &token().key()).is_none(),
        "no accepted row"
    );
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::PermissionDenied,
        "is aborted",
    );
}

#[test]
fn f78_an_occupied_accepted_row_retires_the_fresh_issuance() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    refusal(
        run(&mut w, issue(GEN2)),
        ErrorCode::Conflict,
        "accepted row",
    );
    assert_eq!(attempt_state(&w, GEN2), "revoked", "released, then retired");
    assert_eq!(
        run(&mut w, ReadAccepted { token: token() }).unwrap(),
        Some(reference(GEN)),
        "the first binding stands"
    );
}

#[test]
fn f79_resolution_returns_the_recorded_ceiling_at_the_linearizing_revision() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    let resolved = run(&mut w, resolve(GEN)).unwrap();
    assert_eq!(resolved.reference, reference(GEN));
    assert_eq!(resolved.permissions, ceiling("a.b"));
    let attempt =
        w.kv.get(Store::Issued, &attempt_key(&reference(GEN)))
            .unwrap();
    assert_eq!(resolved.resolved_revision, attempt.revision.0);
}

#[test]
fn f79_a_forged_generation_has_no_issued_evidence() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    refusal(
        run(&mut w, resolve(GEN2)),
        ErrorCode::PermissionDenied,
        "no issued evidence",
    );
}

#[test]
fn f79_a_revoked_issuance_authorizes_nothing() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    let retire = RetireIssued {
        reference: reference(GEN),
    };
    assert_eq!(run(&mut w, retire.clone()).unwrap(), AttemptState::Revoked);
    assert_eq!(
        run(&mut w, retire).unwrap(),
        AttemptState::Revoked,
        "idempotent on a terminal state"
    );
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::PermissionDenied,
        "revoked",
    );
}

#[test]
fn f79_a_revoked_or_regranted_actor_row_is_a_dead_source() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    w.actors.execute(&ActorsRequest::RevokeInteractive {
        principal: Principal::new(owner(), actor()),
    });
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::PermissionDenied,
        "which is no longer live",
    );
    grant_at(&w, "vvvvvvvvvvvvvvvvvvvvvvvvvv");
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::PermissionDenied,
        "no longer live",
    );
    grant_at(&w, UID);
    run(&mut w, resolve(GEN)).unwrap();
}

/// Retiring an interactive lifecycle leaves its grant row until a re-grant: the head, retiring
/// or retired at the uid, is what ends an issuance on that incarnation.
#[test]
fn f79_a_retired_lifecycle_is_a_dead_actor_ledger_source() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    let retiring = head_at(UID).retiring(&OpId::mint([9; 20])).unwrap();
    w.kv.put(
        Store::Records,
        &keys::lifecycle_head(&owner(), &actor()),
        &retiring.to_bytes(),
    );
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::PermissionDenied,
        "no longer live",
    );
}

#[test]
fn f79_a_retired_lifecycle_gate_is_a_dead_source() {
    let mut w = world();
    let r = reference(GEN);
    let source = IssuedSource::lifecycle_credentials(&space(), &uid(UID));
    let issue = IssueGeneration {
        evidence: Evidence::new(r.clone(), vec![source], ceiling("a.b"), None).unwrap(),
        accepted: None,
    };
    run(&mut w, issue).unwrap();
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::PermissionDenied,
        "no longer live",
    );
    let frozen = AgentGate::activation_frozen(uid(UID), OpId::mint([7; 20]));
    let key = keys::agent_gate(&uid(UID));
    w.kv.put(Store::Auth, &key, &frozen.to_bytes());
    run(&mut w, resolve(GEN)).unwrap();
    let retired = String::from_utf8(frozen.to_bytes())
        .unwrap()
        .replace(r#""state":"frozen""#, r#""state":"retired""#);
    w.kv.put(Store::Auth, &key, retired.as_bytes());
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::PermissionDenied,
        "no longer live",
    );
}

#[test]
fn f79_an_attempt_that_moves_during_resolution_refuses() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    w.kv.inject(
        Trigger::new(Store::Issued, KvOp::Get, "attempt."),
        retire_right_after(),
    );
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::PermissionDenied,
        "changed during resolution",
    );
}

#[test]
fn f79_a_sourceless_issuance_lives_until_its_expiry() {
    assert!(Evidence::new(reference(GEN), vec![], ceiling("a.b"), None).is_err());
    let mut w = world();
    let issue = IssueGeneration {
        evidence: Evidence::new(reference(GEN), vec![], ceiling("a.b"), Some(NOW + 60)).unwrap(),
        accepted: None,
    };
    run(&mut w, issue).unwrap();
    run(&mut w, resolve(GEN)).unwrap();
    let late = ResolveIssued {
        reference: reference(GEN),
        now_secs: NOW + 60,
    };
    refusal(run(&mut w, late), ErrorCode::PermissionDenied, "expired at");
}

#[test]
fn f79_an_unserved_read_refuses_and_never_reads_as_absence() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    w.kv.inject(
        Trigger::new(Store::Issued, KvOp::GetFirst, "v1."),
        Fault::Unavailable,
    );
    refusal(run(&mut w, resolve(GEN)), ErrorCode::Unavailable, "read of");
}

#[test]
fn a_deletion_marker_on_immutable_evidence_is_corruption() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    let key = evidence_key(&reference(GEN));
    w.kv.purge(Store::Issued, &key);
    refusal(
        run(&mut w, resolve(GEN)),
        ErrorCode::FailedPrecondition,
        "deletion marker",
    );
}

#[test]
fn a_later_message_on_an_immutable_key_is_inert() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    let forged = String::from(EVIDENCE_BYTES).replace("a.b", ">");
    w.kv.put(
        Store::Issued,
        &evidence_key(&reference(GEN)),
        forged.as_bytes(),
    );
    let resolved = run(&mut w, resolve(GEN)).unwrap();
    assert_eq!(
        resolved.permissions,
        ceiling("a.b"),
        "the first message is the row"
    );
}

#[test]
fn f80_a_renewal_keeps_the_generation_only_for_a_byte_identical_ceiling() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    let confirm = |publish: &str| ConfirmIssued {
        reference: reference(GEN),
        permissions: ceiling(publish),
    };
    run(&mut w, confirm("a.b")).unwrap();
    refusal(
        run(&mut w, confirm("a.c")),
        ErrorCode::FailedPrecondition,
        "different ceiling",
    );
    run(
        &mut w,
        RetireIssued {
            reference: reference(GEN),
        },
    )
    .unwrap();
    refusal(
        run(&mut w, confirm("a.b")),
        ErrorCode::PermissionDenied,
        "active issuance only",
    );
}

#[test]
fn f79_a_source_retirement_retires_every_issuance_indexed_under_it() {
    let mut w = world();
    run(&mut w, issue(GEN)).unwrap();
    run(
        &mut w,
        IssueGeneration {
            evidence: evidence(GEN2),
            accepted: None,
        },
    )
    .unwrap();
    let other = "0000000000000000000000000000000a";
    let elsewhere = IssuedSource::lifecycle_credentials(&space(), &uid(UID));
    run(
        &mut w,
        IssueGeneration {
            evidence: Evidence::new(reference(other), vec![elsewhere], ceiling("a.b"), None)
                .unwrap(),
            accepted: None,
        },
    )
    .unwrap();
    let retired = run(
        &mut w,
        RetireSource {
            source: ledger_source(),
        },
    )
    .unwrap();
    assert_eq!(retired, 2);
    assert_eq!(attempt_state(&w, GEN), "revoked");
    assert_eq!(attempt_state(&w, GEN2), "revoked");
    assert_eq!(
        attempt_state(&w, other),
        "active",
        "another source's issuance stands"
    );
}

#[test]
fn the_native_ceiling_reads_an_empty_allow_as_unrestricted_and_refuses_what_it_cannot_carry() {
    let native = Permissions {
        publish: Permission {
            allow: vec!["a.>".into()],
            deny: vec!["a.b".into()],
        },
        subscribe: Permission::default(),
        response: None,
    };
    let c = SubjectPermissions::from_native(&native).unwrap();
    assert_eq!(c.publish.allow, SubjectAllow::Patterns(vec!["a.>".into()]));
    assert_eq!(c.subscribe.allow, SubjectAllow::All);
    assert!(!c.publish.permits("a.b") && c.publish.permits("a.c"));
    let queued = Permissions {
        subscribe: Permission {
            allow: vec!["a.b q".into()],
            deny: vec![],
        },
        ..native.clone()
    };
    assert!(SubjectPermissions::from_native(&queued).is_err());
    let resp = Permissions {
        response: Some(ResponsePermission {
            max: 1,
            ttl_nanos: 0,
        }),
        ..native
    };
    assert!(SubjectPermissions::from_native(&resp).is_err());
}

mod manager_caller {
    use super::*;
    use cotal_core::issued::IssueManagerCaller;
    use cotal_core::jwt::UnixSeconds;
    use cotal_core::names::InstanceId;
    use cotal_core::profiles::{ConnId, ConnectTtl, ManagerCallerBinding, ViewBinding};

    const NONCE: &str = "nonce-abcdefghijklmnopqrstu";
    const IID: &str = "iiiiiiiiiiiiiiiiiiiiiiiiii";

    fn binding(actor: &str, instance: &str) -> ManagerCallerBinding {
        ManagerCallerBinding {
            view: ViewBinding {
                space: space(),
                principal: Principal::new(owner(), ActorToken::parse(actor).unwrap()),
                conn_nonce: ConnId::parse(NONCE).unwrap(),
                ttl: ConnectTtl::until(UnixSeconds(NOW), UnixSeconds(NOW + 900)).unwrap(),
            },
            lifecycle_uid: uid(UID),
            instance: InstanceId::parse(instance).unwrap(),
            issued: None,
        }
    }

    fn connect(actor: &str, instance: &str, generation: &str) -> IssueManagerCaller {
        IssueManagerCaller {
            binding: binding(actor, instance),
            fresh_generation: IssuedGeneration::parse(generation).unwrap(),
        }
    }

    /// The callout's first connect under a nonce issues: the signed set is the evidence's
    /// ceiling, the caller's ledger row its one source, and the accepted row names it.
    #[test]
    fn f78_a_first_connect_issues_the_signed_set_against_the_actor_ledger_row() {
        let mut w = world();
        let profile = run(&mut w, connect("cli", IID, GEN)).unwrap();
        let resolved = run(&mut w, resolve(GEN)).unwrap();
        assert_eq!(
            resolved.permissions,
            SubjectPermissions::from_native(&profile.permissions).unwrap()
        );
        let start = format!(
            "cotal.s1.ep.v1.inst.manager.{IID}.run-start.{OWNER}.cli.{UID}.{GEN}.n0nce0123456789abcdefgh"
        );
        assert!(resolved.permissions.publish.permits(&start));
        let legacy = format!(
            "cotal.s1.ep.inst.manager.{IID}.run-start.{OWNER}.cli.{UID}.n0nce0123456789abcdefgh"
        );
        assert!(
            !resolved.permissions.publish.permits(&legacy),
            "F81: no legacy run-start"
        );
        assert_eq!(
            run(
                &mut w,
                ReadAccepted {
                    token: AcceptedToken::for_connection(NONCE)
                }
            )
            .unwrap(),
            Some(reference(GEN))
        );
    }

    /// F80: a reconnect under the same nonce renews the recorded generation (the fresh one is
    /// unused) and writes nothing; a changed ceiling refuses and never re-issues in place.
    #[test]
    fn f80_a_reconnect_renews_the_same_generation_only_for_the_same_ceiling() {
        let mut w = world();
        let first = run(&mut w, connect("cli", IID, GEN)).unwrap();
        let before = w.kv.last_sequence(Store::Issued);
        let again = run(&mut w, connect("cli", IID, GEN2)).unwrap();
        assert_eq!(
            first.permissions, again.permissions,
            "the recorded generation"
        );
        assert_eq!(
            w.kv.last_sequence(Store::Issued),
            before,
            "a renewal writes nothing"
        );
        refusal(
            run(&mut w, connect("cli", "jjjjjjjjjjjjjjjjjjjjjjjjjj", GEN2)),
            ErrorCode::FailedPrecondition,
            "different ceiling",
        );
    }

    #[test]
    fn an_accepted_row_naming_another_caller_refuses_the_connect() {
        let mut w = world();
        run(&mut w, connect("cli", IID, GEN)).unwrap();
        refusal(
            run(&mut w, connect("other", IID, GEN2)),
            ErrorCode::PermissionDenied,
            "reconnect under a new nonce",
        );
    }
}
