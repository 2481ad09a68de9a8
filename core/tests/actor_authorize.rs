//! The sign-in path's three ledger questions (reference §6.5, the exchange cells of §11.3 and
//! the auth-callout cells of §11.7) on the in-memory ledger twin, which fails closed exactly as
//! the files do.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_core::actors::authorize::{
    authorize_agent_exchange, authorize_connect, authorize_human_grant, token_digest,
    AGENT_EXCHANGE_REFUSED,
};
use cotal_core::actors::{
    ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, MemoryActors, RowSpace, TokenHash,
};
use cotal_core::error::ErrorCode;
use cotal_core::names::{ActorToken, DerivedOwner, LifecycleUid, OwnerToken, Principal, SpaceName};

const OWNER: &str = "u_cccccccccccccccccccccccccc";
const SECRET: &str = "agent-secret-of-worker";

fn owner() -> DerivedOwner {
    DerivedOwner::parse(OWNER).unwrap()
}

fn actor(a: &str) -> ActorToken {
    ActorToken::parse(a).unwrap()
}

fn principal(a: &str) -> Principal {
    Principal::new(OwnerToken::parse(OWNER).unwrap(), actor(a))
}

fn space() -> SpaceName {
    SpaceName::parse("main").unwrap()
}

fn uid(n: u8) -> LifecycleUid {
    LifecycleUid::mint([n; 20])
}

fn interactive(a: &str, scope: &[&str]) -> ActorRow {
    ActorRow {
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: actor(a),
        scope: scope.iter().map(|s| (*s).to_owned()).collect(),
        allow_subscribe: vec!["team.>".into()],
        allow_publish: vec!["team.>".into()],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(uid(1)),
        granted_at: "2023-11-14T22:13:20.000Z".into(),
    }
}

fn managed(a: &str, parent: &str, publish: &str) -> ActorRow {
    ActorRow {
        scope: vec![],
        allow_subscribe: vec!["team.>".into()],
        allow_publish: vec![publish.into()],
        parent: Some(principal(parent)),
        token_hash: Some(TokenHash::parse(&token_digest(SECRET)).unwrap()),
        lifecycle_uid: Some(uid(2)),
        ..interactive(a, &[])
    }
}

fn grant(l: &MemoryActors, row: ActorRow, space: RowSpace) {
    let request = match space {
        RowSpace::Interactive => ActorsRequest::GrantInteractive(row),
        RowSpace::Managed => ActorsRequest::GrantManaged(row),
    };
    assert!(matches!(l.execute(&request), ActorsOutcome::Granted(_)));
}

fn ledger() -> MemoryActors {
    let l = MemoryActors::new();
    grant(&l, interactive("cli", &["spawn"]), RowSpace::Interactive);
    grant(&l, managed("worker", "cli", "team.a"), RowSpace::Managed);
    l
}

#[test]
fn wrong_secret_and_unknown_agent_get_the_identical_sentence() {
    let l = ledger();
    let wrong = authorize_agent_exchange(&mut &l, OWNER, "worker", "not-the-secret").unwrap_err();
    let unknown = authorize_agent_exchange(&mut &l, OWNER, "ghost", SECRET).unwrap_err();
    let bad_owner = authorize_agent_exchange(&mut &l, "u_short", "worker", SECRET).unwrap_err();
    let human_row = authorize_agent_exchange(&mut &l, OWNER, "cli", SECRET).unwrap_err();
    for e in [&wrong, &unknown, &bad_owner, &human_row] {
        assert_eq!(e.message, AGENT_EXCHANGE_REFUSED);
        assert_eq!(e.code, ErrorCode::PermissionDenied);
    }
    let row = authorize_agent_exchange(&mut &l, OWNER, "worker", SECRET).unwrap();
    assert_eq!(row.lifecycle_uid, Some(uid(2)));
}

#[test]
fn a_spawner_narrowed_since_the_spawn_refuses_the_agent_exchange_with_its_reason() {
    let l = ledger();
    // The spawner loses `team.>` publish: the agent's `team.a` now exceeds it.
    let mut narrowed = interactive("cli", &["spawn"]);
    narrowed.allow_publish = vec!["other".into()];
    grant(&l, narrowed, RowSpace::Interactive);
    let e = authorize_agent_exchange(&mut &l, OWNER, "worker", SECRET).unwrap_err();
    assert!(e.message.contains("CURRENT grant"), "{e:?}");
}

#[test]
fn an_ungranted_human_actor_is_told_the_grant_command() {
    let l = ledger();
    let e = authorize_human_grant(&mut &l, &space(), &owner(), &actor("ops"), None).unwrap_err();
    assert!(
        e.message.contains(&format!(
            "cotal-authd actor grant ops --space main --owner {OWNER}"
        )),
        "{e:?}"
    );
    let managed =
        authorize_human_grant(&mut &l, &space(), &owner(), &actor("worker"), None).unwrap_err();
    assert!(managed.message.contains("managed agent"), "{managed:?}");
    let g = authorize_human_grant(&mut &l, &space(), &owner(), &actor("cli"), None).unwrap();
    assert_eq!(g.lifecycle_uid, uid(1));
}

#[test]
fn a_view_needs_its_scope_and_the_refusal_prints_the_whole_row_regrant() {
    let l = ledger();
    let e = authorize_human_grant(
        &mut &l,
        &space(),
        &owner(),
        &actor("cli"),
        Some(("channel-writer", "admin")),
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("--scope 'spawn,admin' --allow-subscribe 'team.>' --allow-publish 'team.>'"),
        "{e:?}"
    );
    grant(
        &l,
        interactive("cli", &["spawn", "admin"]),
        RowSpace::Interactive,
    );
    assert!(authorize_human_grant(
        &mut &l,
        &space(),
        &owner(),
        &actor("cli"),
        Some(("channel-writer", "admin"))
    )
    .is_ok());
}

#[test]
fn auth_callout_ledger_denied_bearers_are_refused_at_connect() {
    let l = ledger();
    let p = principal("cli");
    let spawn = vec!["spawn".to_owned()];
    assert!(authorize_connect(&mut &l, &p, &spawn, Some(&uid(1))).is_ok());
    let wider = authorize_connect(&mut &l, &p, &["admin".to_owned()], Some(&uid(1))).unwrap_err();
    assert!(
        wider.message.contains("exceeds the actor's current grant"),
        "{wider:?}"
    );
    let rotated = authorize_connect(&mut &l, &p, &spawn, Some(&uid(9))).unwrap_err();
    assert!(rotated.message.contains("re-grant"), "{rotated:?}");
    assert!(authorize_connect(&mut &l, &p, &spawn, None).is_err());
    assert!(authorize_connect(&mut &l, &principal("ghost"), &[], Some(&uid(1))).is_err());
    // The agent's row connects from the managed space.
    assert!(authorize_connect(&mut &l, &principal("worker"), &[], Some(&uid(2))).is_ok());
}
