//! The manager-service `session` and `retire` operations on the KV model: the reference's
//! manager-service-authority cells "retire returns only the one-shot requester and echoes the
//! terminal coordinates", "retirement-requester grants only its server-derived caller and exact
//! target", "the retirement requester nkey cannot collapse into a standing identity" and the
//! `authorizeRemoteManagerRetirement` matrix, the session-serving cells (exact mirror of the
//! caller for one session), the plane's session expiry `min(session.exp, now + 24 h)`, and the
//! round-trip counts (session 0, retire 1).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod renewal_support;

use cotal_core::driver::ModelWorld;
use cotal_core::issuance::{observe_gate, ProvisionGate};
use cotal_core::jwt::{self, Claims};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::machine::Ctx;
use cotal_core::manager::ManagerAuthorityRequest;
use cotal_core::names::Principal;
use cotal_core::profiles::{SESSION_SERVING, SESSION_TTL_MAX_SECS};
use cotal_core::renewal::{CredentialName as C, RemoteManagerAuthorityMaterial};
use cotal_core::{EpError, ErrorCode};
use nkeys::KeyPair;
use renewal_support::*;
use serde_json::json;

use common::{run, Proc, IID};

/// `T0` in unix seconds.
const NOW: u64 = T0 / 1000;
const DAY: u64 = 86_400;
const SID: &str = "sess_0123456789abcdef";

fn code<T: std::fmt::Debug>(r: Result<T, EpError>) -> (ErrorCode, String) {
    let e = r.unwrap_err();
    (e.code, e.message)
}

fn claims(out: &RemoteManagerAuthorityMaterial, name: C) -> Claims {
    jwt::decode(&out.credential(name).unwrap().jwt).unwrap()
}

fn rows(claims: &Claims) -> (Vec<String>, Vec<String>) {
    let p = &claims.user().unwrap().permissions;
    (p.publish.allow.clone(), p.subscribe.allow.clone())
}

fn issue_counted(
    world: &mut ModelWorld,
    request: ManagerAuthorityRequest,
) -> (Result<RemoteManagerAuthorityMaterial, EpError>, u64) {
    counted(world, call(request, T0))
}

fn serve_actor() -> String {
    format!("manager_serve_{IID}")
}

// ---- session ----------------------------------------------------------------------------------

/// F74: `session` issues exactly `sessionServing`, to the caller-held session key, expiring at
/// `min(session.exp, now + 24 h)` in both orders; the result's `expiresAt` follows it, and
/// nothing is read or written (0 round trips).
#[test]
fn f74_session_issues_only_session_serving_capped_at_24h() {
    let (mut world, _) = registered();
    for (session_exp, expected) in [(NOW + 600, NOW + 600), (NOW + 3 * DAY, NOW + DAY)] {
        let before = world.kv.last_sequence(Store::Auth);
        let (out, trips) = issue_counted(
            &mut world,
            session_request("session00000000000000001", SID, 0, session_exp),
        );
        let out = out.unwrap();
        assert_eq!(trips, 0, "session reads nothing");
        assert_eq!(world.kv.last_sequence(Store::Auth), before, "nor writes");
        assert_eq!(out.names(), vec![C::SessionServing]);
        assert_eq!(out.credential(C::SessionServing).unwrap().exp, expected);
        assert_eq!(out.expires_at, expected * 1000);
        assert_eq!(out.issued_at, T0);

        let c = claims(&out, C::SessionServing);
        assert_eq!(c.sub, session_key().public_key(), "held by the session key");
        assert_eq!(c.exp.unwrap().0, expected);
        assert_eq!(c.iat.0, NOW);
        assert_eq!(c.name, SESSION_SERVING);
        assert_eq!(c.user_account(), Some(account().public_key().as_str()));
        assert_eq!(
            c.user().unwrap().tags,
            vec![
                format!("owner:{OWNER}"),
                format!("actor:{}", serve_actor()),
                format!("principal:{OWNER}.{}", serve_actor()),
            ],
            "held by the server-derived serve principal"
        );
        let json = out.to_json();
        assert!(json.contains("\"operation\":\"session\""), "{json}");
        assert!(!json.contains("\"retirement\""), "{json}");
        assert!(!json.to_lowercase().contains("seed"), "{json}");
    }
}

/// The 24 h cap is the whole lifetime: one second past it is still capped, exactly at it is
/// kept.
#[test]
fn f74_session_lifetime_boundary_is_exactly_24h() {
    let (mut world, _) = registered();
    for (session_exp, expected) in [(NOW + DAY, NOW + DAY), (NOW + DAY + 1, NOW + DAY)] {
        let out = issue(
            &mut world,
            call(
                session_request("session00000000000000001", SID, 0, session_exp),
                T0,
            ),
        )
        .unwrap();
        assert_eq!(out.credential(C::SessionServing).unwrap().exp, expected);
    }
    assert_eq!(SESSION_TTL_MAX_SECS, DAY);
}

/// F73: the serving credential is the exact mirror of the caller for one session: it publishes
/// only the session's `out` rail and subscribes only its `in` rail (plus its own inbox), both
/// pinned to the session's serving epoch.
#[test]
fn f73_session_serving_rides_only_its_epoch_pinned_rails() {
    let (mut world, _) = registered();
    let out = issue(
        &mut world,
        call(
            session_request("session00000000000000001", SID, 4, NOW + 600),
            T0,
        ),
    )
    .unwrap();
    let (publish, subscribe) = rows(&claims(&out, C::SessionServing));
    let rail = format!("cotal.{SPACE}.eps.manager.{SID}.4");
    assert_eq!(publish, vec![format!("{rail}.out")]);
    assert_eq!(
        subscribe,
        vec![
            format!("{rail}.in"),
            format!("_INBOX_{}.>", session_key().public_key())
        ]
    );
}

/// A proof that is not the deterministic proof of this owner and request is refused
/// `permission-denied` before anything is signed.
#[test]
fn session_refuses_a_forged_proof() {
    let (mut world, _) = registered();
    let mut raw = envelope("session", "session00000000000000001", IID);
    raw["session"] = json!({
        "id": session_key().public_key(), "endpoint": "manager", "sessionId": SID,
        "epoch": 0, "exp": NOW + 600,
    });
    raw["registrationProof"] = json!(format!("sha256:{}", "2".repeat(64)));
    let (c, m) = code(issue(&mut world, call(parse(&raw), T0)));
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert_eq!(
        m,
        "manager-service session proof does not match this owner/lifecycle"
    );

    // Another owner's deterministic proof is forged too: the proof binds the owner.
    let theirs = session_request("session00000000000000001", SID, 0, NOW + 600);
    let holder = cotal_core::manager::Supervisor::human(
        cotal_core::names::DerivedOwner::parse(FOREIGN_OWNER).unwrap(),
        vec!["supervise".into()],
    );
    let foreign = cotal_core::renewal::ManagerAuthority::new(host(), holder, theirs, T0);
    assert_eq!(
        code(issue(&mut world, foreign)).0,
        ErrorCode::PermissionDenied
    );
}

/// A session already expired at `now` (its `exp` at or before the current second) is refused
/// `failed-precondition`: a credential that dies at birth is never signed.
#[test]
fn session_refuses_an_already_expired_session() {
    let (mut world, _) = registered();
    for exp in [NOW, NOW - 1, 1] {
        let (c, m) = code(issue(
            &mut world,
            call(session_request("session00000000000000001", SID, 0, exp), T0),
        ));
        assert_eq!(c, ErrorCode::FailedPrecondition, "exp {exp}");
        assert!(m.contains(&format!("expired at {exp}")), "{m}");
    }
}

/// A session id outside the rail token grammar would widen or break the subject: refused
/// `bad-request` at mint.
#[test]
fn session_refuses_a_session_id_outside_the_rail_grammar() {
    let (mut world, _) = registered();
    for sid in ["a.b", "a*", ">", &"x".repeat(65)] {
        let (c, m) = code(issue(
            &mut world,
            call(
                session_request("session00000000000000001", sid, 0, NOW + 600),
                T0,
            ),
        ));
        assert_eq!(c, ErrorCode::BadRequest, "{sid}");
        assert!(m.contains("session id"), "{m}");
    }
}

/// The session key cannot collapse into a standing identity.
#[test]
fn session_key_reuse_is_refused() {
    let (mut world, _) = registered();
    let serve = identities()[2].public_key();
    let request = proven_request("session", "session00000000000000001", IID, |raw| {
        raw["session"] = json!({
            "id": serve, "endpoint": "manager", "sessionId": SID, "epoch": 0, "exp": NOW + 600,
        });
    });
    let (c, m) = code(issue(&mut world, call(request, T0)));
    assert_eq!(c, ErrorCode::BadRequest);
    assert!(m.contains("identities must be distinct"), "{m}");
}

// ---- retire -----------------------------------------------------------------------------------

fn retire_at(serve_epoch: u64) -> ManagerAuthorityRequest {
    retire_request(
        "retire000000000000000001",
        IID,
        retirement(OWNER, serve_epoch),
    )
}

/// Cell "retire returns only the one-shot requester and echoes the terminal coordinates":
/// exactly `retirementRequester`, to the requester key, five minutes, one gate read, nothing
/// written; the result echoes `retirement` between `run` and `issuedAt` as the reference writes
/// it.
#[test]
fn retire_returns_only_the_retirement_requester_and_echoes_its_coordinates() {
    let (mut world, _) = registered();
    let before = world.kv.last_sequence(Store::Auth);
    let (out, trips) = issue_counted(&mut world, retire_at(0));
    let out = out.unwrap();
    assert_eq!(trips, 1, "one gate read");
    assert_eq!(
        world.kv.last_sequence(Store::Auth),
        before,
        "nothing written"
    );
    assert_eq!(out.names(), vec![C::RetirementRequester]);
    assert_eq!(
        out.credential(C::RetirementRequester).unwrap().exp,
        NOW + 300
    );
    assert_eq!(out.expires_at, (NOW + 300) * 1000);

    let c = claims(&out, C::RetirementRequester);
    assert_eq!(c.sub, requester_key().public_key());
    assert_eq!(c.name, "retirement-requester");
    assert_eq!(c.user_account(), Some(account().public_key().as_str()));
    assert!(c
        .user()
        .unwrap()
        .tags
        .contains(&format!("principal:{OWNER}.{}", serve_actor())));

    let r = retirement(OWNER, 0);
    let echoed = format!(
        "\"retirement\":{{\"id\":\"{}\",\"target\":{{\"owner\":\"{OWNER}\",\"actor\":\"worker\",\
         \"lifecycleUid\":\"{TARGET_UID}\"}},\"opId\":\"{}\",\"serveEpoch\":0}},\"issuedAt\":{T0},",
        requester_key().public_key(),
        r["opId"].as_str().unwrap()
    );
    let json = out.to_json();
    assert!(json.contains(&echoed), "{json}");
    assert!(
        json.contains(&format!("\"registrationProof\":\"{}\",\"retirement\"", {
            out.registration_proof.as_ref().unwrap().as_str()
        })),
        "{json}"
    );
    assert!(!json.to_lowercase().contains("seed"), "{json}");
}

/// F4: the retirement-requester grant reaches only its server-derived caller and the exact
/// target incarnation — the target uid rides the one publish row; no row is `>`, none touches
/// `$KV` or a `STREAM.` API, and no other worker is reachable.
#[test]
fn f4_retirement_requester_reaches_only_the_exact_target() {
    let (mut world, _) = registered();
    let out = issue(&mut world, call(retire_at(0), T0)).unwrap();
    let (publish, subscribe) = rows(&claims(&out, C::RetirementRequester));
    let caller = format!("{OWNER}.{}.{UID}", serve_actor());
    assert_eq!(
        publish,
        vec![format!(
            "cotal.{SPACE}.ep.one.auth.retire-lifecycle.handle.{OWNER}.worker.{TARGET_UID}.\
             {caller}.*"
        )]
    );
    assert_eq!(
        subscribe,
        vec![
            format!("cotal.{SPACE}.ep.reply.*.*.*.{caller}.*"),
            format!("_INBOX_{}.>", requester_key().public_key()),
        ]
    );
    let all: Vec<&String> = publish.iter().chain(&subscribe).collect();
    assert!(all.iter().any(|r| r.contains(TARGET_UID)));
    assert!(
        !all.iter()
            .any(|r| *r == ">" || r.contains("$KV") || r.contains("STREAM.")),
        "{all:?}"
    );
    assert!(!all.iter().any(|r| r.contains("another-worker")));
}

/// A proof that is not this owner's deterministic proof is refused before the gate is read.
#[test]
fn retire_refuses_a_forged_proof() {
    let (mut world, _) = registered();
    let mut raw = envelope("retire", "retire000000000000000001", IID);
    raw["retirement"] = retirement(OWNER, 0);
    raw["registrationProof"] = json!(format!("sha256:{}", "3".repeat(64)));
    let (out, trips) = issue_counted(&mut world, parse(&raw));
    let (c, m) = code(out);
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert_eq!(
        m,
        "manager-service retirement proof does not match this owner/lifecycle"
    );
    assert_eq!(trips, 0);
}

/// Cell "the retirement requester nkey cannot collapse into a standing identity".
#[test]
fn retire_requester_key_reuse_is_refused() {
    let (mut world, _) = registered();
    let mut r = retirement(OWNER, 0);
    r["id"] = json!(identities()[2].public_key());
    let (c, m) = code(issue(
        &mut world,
        call(retire_request("retire000000000000000001", IID, r), T0),
    ));
    assert_eq!(c, ErrorCode::BadRequest);
    assert!(m.contains("identities must be distinct"), "{m}");
}

// ---- the authorizeRemoteManagerRetirement matrix ---------------------------------------------

/// F96, matrix cell "a foreign target owner is refused": the target owner must be the
/// authenticated owner; refused `permission-denied` before any read.
#[test]
fn f96_retire_refuses_a_foreign_target_owner() {
    let (mut world, _) = registered();
    let (out, trips) = issue_counted(
        &mut world,
        retire_request(
            "retire000000000000000001",
            IID,
            retirement(FOREIGN_OWNER, 0),
        ),
    );
    let (c, m) = code(out);
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert_eq!(
        m,
        format!(
            "manager-service retirement may target only its authenticated owner {OWNER}, not \
             {FOREIGN_OWNER}"
        )
    );
    assert_eq!(trips, 0);
}

/// F94, matrix cell "an absent manager gate is refused".
#[test]
fn f94_retire_refuses_a_missing_gate() {
    let (mut world, _) = registered();
    let other = "jjjjjjjjjjjjjjjjjjjjjjjjjj";
    let (c, m) = code(issue(
        &mut world,
        call(
            retire_request("retire000000000000000001", other, retirement(OWNER, 0)),
            T0,
        ),
    ));
    assert_eq!(c, ErrorCode::FailedPrecondition);
    assert_eq!(
        m,
        format!(
            "manager-service retirement found no current open manager gate for instance {other}"
        )
    );
}

/// F94, matrix cell "a frozen manager gate is refused".
#[test]
fn f94_retire_refuses_a_frozen_gate() {
    let (mut world, _) = registered();
    let gate = manager_gate(IID);
    let observed = run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| observe_gate(cx, &gate)),
    )
    .unwrap()
    .unwrap();
    let g = manager_gate(IID);
    run(
        &mut world,
        Proc(move |cx: &mut Ctx<'_>| {
            cotal_core::barrier::freeze(cx, &g, &common::op(9), &observed)
        }),
    )
    .unwrap()
    .unwrap();
    let (c, m) = code(issue(&mut world, call(retire_at(0), T0)));
    assert_eq!(c, ErrorCode::FailedPrecondition);
    assert!(m.contains("no current open manager gate"), "{m}");
}

/// F94, matrix cell "a foreign-principal manager gate is refused": a gate recording any other
/// principal than `<owner>.manager_serve_<iid>` authorizes nothing.
#[test]
fn f94_retire_refuses_a_foreign_principal_gate() {
    let mut world = ModelWorld::default();
    let foreign = format!("{OWNER}.manager_serve_foreign");
    run(
        &mut world,
        ProvisionGate {
            gate: manager_gate(IID),
            principal: Principal::parse(&foreign).unwrap(),
        },
    )
    .unwrap();
    let (c, m) = code(issue(&mut world, call(retire_at(0), T0)));
    assert_eq!(c, ErrorCode::PermissionDenied);
    assert_eq!(
        m,
        format!(
            "manager-service retirement gate belongs to {foreign}, not the server-derived serve \
             principal {OWNER}.{}",
            serve_actor()
        )
    );
}

/// F94, matrix cell "a stale manager serve epoch is refused": after a re-registration advanced
/// the epoch, a retirement at the superseded serve epoch is `conflict`.
#[test]
fn f94_retire_refuses_a_stale_serve_epoch() {
    let (mut world, _) = registered();
    register(&mut world, IID, 2);
    assert_eq!(epoch_of(&mut world).0, 1);
    let (c, m) = code(issue(&mut world, call(retire_at(0), T0)));
    assert_eq!(c, ErrorCode::Conflict);
    assert_eq!(
        m,
        "manager-service retirement serve epoch 0 is stale; current is 1"
    );
    // At the current epoch the same retirement is authorized.
    let out = issue(&mut world, call(retire_at(1), T0)).unwrap();
    assert_eq!(out.names(), vec![C::RetirementRequester]);
}

/// An unreadable gate is `unavailable`, never a guess: nothing is signed.
#[test]
fn retire_reports_an_unreadable_gate_as_unavailable() {
    let (mut world, _) = registered();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Get, manager_gate(IID).key()),
        Fault::Unavailable,
    );
    assert_eq!(
        code(issue(&mut world, call(retire_at(0), T0))).0,
        ErrorCode::Unavailable
    );
}

/// Both operations' credentials verify against nothing but the data account: their JWT issuer
/// is the account's signing key, never a held identity.
#[test]
fn session_and_retire_are_signed_by_the_data_account_signing_key() {
    let (mut world, _) = registered();
    let signer = host().signer.public_key();
    let session = issue(
        &mut world,
        call(
            session_request("session00000000000000001", SID, 0, NOW + 600),
            T0,
        ),
    )
    .unwrap();
    let retire = issue(&mut world, call(retire_at(0), T0)).unwrap();
    assert_eq!(claims(&session, C::SessionServing).iss, signer);
    assert_eq!(claims(&retire, C::RetirementRequester).iss, signer);
    let held: Vec<String> = identities().iter().map(KeyPair::public_key).collect();
    assert!(!held.contains(&claims(&session, C::SessionServing).sub));
    assert!(!held.contains(&claims(&retire, C::RetirementRequester).sub));
}
