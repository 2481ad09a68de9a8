//! The fenced mint end to end (issue: credentials, deliverable 4): a serve credential built from
//! a real serve grant and profile, signed, identified by the digest of its exact text, and
//! released only when the fence wins; the same for a sibling credential.

// Test code: a failed unwrap is a failed test, which is the point.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::ceremony::*;
use common::*;
use cotal_core::driver::ModelWorld;
use cotal_core::jwt::{self, ClaimType, UnixSeconds};
use cotal_core::kv::Store;
use cotal_core::ledger::CredState;
use cotal_core::mint::{prepare_user, Holder, Prepared, ReleaseServe, ReleaseSibling};
use cotal_core::names::{ActorToken, EndpointName, SourceMember};
use cotal_core::profiles::{self, ConnId, GoalWriterBinding, ServeBinding, StandingTtl};
use cotal_core::registration::RegisterInstance;
use cotal_core::serving::{AuthorizedServe, RegisterServing};
use cotal_core::ErrorCode;
use nkeys::{KeyPair, KeyPairType};
use sha2::{Digest as _, Sha256};

const NOW: UnixSeconds = UnixSeconds(1_700_000_000);

fn account() -> KeyPair {
    KeyPair::new_from_raw(KeyPairType::Account, [7; 32]).unwrap()
}

fn user() -> KeyPair {
    KeyPair::new_from_raw(KeyPairType::User, [8; 32]).unwrap()
}

fn serving(world: &mut ModelWorld, r: &RegisterInstance) -> AuthorizedServe {
    run(
        world,
        RegisterServing {
            register: r.clone(),
            status: serde_json::Map::new(),
        },
    )
    .unwrap()
    .serve
}

fn serve_profile(serve: &AuthorizedServe) -> profiles::Profile {
    profiles::endpoint_serve(&ServeBinding {
        grant: serve.grant.clone(),
        actor: ActorToken::parse("term").unwrap(),
        conn: ConnId::parse("conn-0001").unwrap(),
        rail_commands: serve.rail_commands.clone(),
        journal_class: serve.journal_class,
        pools: vec![],
        ttl: StandingTtl::DEFAULT,
    })
    .unwrap()
}

fn prepared_serve(serve: &AuthorizedServe, holder: &Holder) -> Prepared {
    let signer = account();
    prepare_user(
        &serve_profile(serve),
        &signer,
        &signer.public_key(),
        holder,
        NOW,
    )
    .unwrap()
}

fn release(
    world: &mut ModelWorld,
    serve: &AuthorizedServe,
    prepared: Prepared,
) -> Result<cotal_core::mint::Released, cotal_core::EpError> {
    run(
        world,
        ReleaseServe::new(
            gate_ref(),
            serve.grant.clone(),
            ActorToken::parse("term").unwrap(),
            vec![SourceMember::Root],
            prepared,
        ),
    )
}

#[test]
fn f22_a_serve_credential_is_released_only_through_the_fence_and_is_ledgered_by_its_digest() {
    let (mut world, r) = ceremony();
    let serve = serving(&mut world, &r);
    let released = release(
        &mut world,
        &serve,
        prepared_serve(&serve, &Holder::KeyPair(Box::new(user()))),
    )
    .unwrap();
    // The id is the digest of the exact creds text.
    let creds = released.creds.clone().unwrap();
    let digest: [u8; 32] = Sha256::digest(creds.text().as_bytes()).into();
    assert_eq!(
        released.credential_id.as_str(),
        format!("sha256-{}", hex(&digest))
    );
    assert!(released
        .release
        .row_key
        .ends_with(released.credential_id.as_str()));
    assert_eq!(
        row_state(&world, &released.release.row_key),
        Some(CredState::Active)
    );
    // The JWT is a valid user JWT of the account, for the profile, expiring with its TTL.
    let claims = jwt::verify(&released.jwt, ClaimType::User, &account().public_key(), NOW).unwrap();
    assert_eq!(claims.name, profiles::ENDPOINT_SERVE);
    assert_eq!(claims.sub, user().public_key());
    assert_eq!(claims.exp, Some(UnixSeconds(NOW.0 + 86_400)));
    let nats = claims.user().unwrap();
    assert!(nats.tags.contains(&format!("principal:{OWNER}.term")));
    assert_eq!(nats.permissions, serve_profile(&serve).permissions);
}

#[test]
fn a_caller_held_key_gets_a_jwt_only_and_its_seed_never_appears() {
    let (mut world, r) = ceremony();
    let serve = serving(&mut world, &r);
    let holder = Holder::PublicKey(user().public_key());
    let released = release(&mut world, &serve, prepared_serve(&serve, &holder)).unwrap();
    assert!(released.creds.is_none());
    let digest: [u8; 32] = Sha256::digest(released.jwt.as_bytes()).into();
    assert_eq!(
        released.credential_id.as_str(),
        format!("sha256-{}", hex(&digest))
    );
}

#[test]
fn f22_nothing_is_released_under_a_frozen_gate() {
    let (mut world, r) = ceremony();
    let serve = serving(&mut world, &r);
    freeze(&mut world, &op(7)).unwrap();
    let prepared = prepared_serve(&serve, &Holder::KeyPair(Box::new(user())));
    let err = release(&mut world, &serve, prepared).unwrap_err();
    assert_eq!(err.code, ErrorCode::Expired);
    assert!(family(&world).is_empty());
}

#[test]
fn f27_the_predecessors_credential_is_refused_after_a_re_registration() {
    let (mut world, r) = ceremony();
    let old = serving(&mut world, &r);
    serving(&mut world, &RegisterInstance { op_id: op(2), ..r });
    let prepared = prepared_serve(&old, &Holder::KeyPair(Box::new(user())));
    assert_eq!(
        release(&mut world, &old, prepared).unwrap_err().code,
        ErrorCode::Expired
    );
}

#[test]
fn an_oversize_credential_is_refused_before_anything_is_written() {
    let (mut world, r) = ceremony();
    let serve = serving(&mut world, &r);
    let mut profile = serve_profile(&serve);
    profile.permissions.subscribe.allow = (0..400)
        .map(|i| format!("cotal.s1.padding.row.{i:04}.>"))
        .collect();
    let signer = account();
    let before = world.kv.last_sequence(Store::Auth);
    let err = prepare_user(
        &profile,
        &signer,
        &signer.public_key(),
        &Holder::KeyPair(Box::new(user())),
        NOW,
    )
    .unwrap_err();
    assert!(
        err.message.contains("16384") || err.details.iter().any(|d| d["limit"] == 16384),
        "{err}"
    );
    assert_eq!(world.kv.last_sequence(Store::Auth), before);
}

#[test]
fn f43_a_sibling_credential_is_released_through_the_sibling_fence() {
    let (mut world, r) = ceremony();
    serving(&mut world, &r);
    let profile = profiles::goal_writer(&GoalWriterBinding {
        space: gate_ref().space,
        principal: principal(SIBLING),
        conn: ConnId::parse("conn-0002").unwrap(),
        endpoint: EndpointName::parse("throwaway").unwrap(),
        ttl: StandingTtl::DEFAULT,
    })
    .unwrap();
    let signer = account();
    let prepared = prepare_user(
        &profile,
        &signer,
        &signer.public_key(),
        &Holder::KeyPair(Box::new(user())),
        NOW,
    )
    .unwrap();
    let observed = observe(&mut world).unwrap();
    let sibling = ReleaseSibling::new(
        gate_ref(),
        observed.clone(),
        principal(SIBLING),
        vec![SourceMember::Root],
        prepared.clone(),
    )
    .unwrap();
    let released = run(&mut world, sibling).unwrap();
    assert_eq!(
        row_state(&world, &released.release.row_key),
        Some(CredState::Active)
    );
    // The same credential against a gate that moved since the observation: refused, revoked.
    freeze(&mut world, &op(8)).unwrap();
    let stale = ReleaseSibling::new(
        gate_ref(),
        observed,
        principal(SIBLING),
        vec![SourceMember::Root],
        prepared,
    )
    .unwrap();
    assert_eq!(run(&mut world, stale).unwrap_err().code, ErrorCode::Expired);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
