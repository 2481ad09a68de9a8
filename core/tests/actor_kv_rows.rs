//! The actor ledger over a KV bucket (issue 27: a standby on another host serves the same
//! rows): the one ledger implementation of `actors::store` run over `KvRows` on the KV model,
//! with its faults — a write whose acknowledgement is lost, a write that never committed, a
//! writer that raced in between, an unanswered read — each settled or failed closed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_core::actors::kv_rows::{row_key, KvRows};
use cotal_core::actors::store::execute;
use cotal_core::actors::{ActorRow, ActorsOutcome, ActorsRequest, Held, RowSpace};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::{KvOp, Operation, Store};
use cotal_core::names::{ActorToken, LifecycleUid, OwnerToken, Principal};

const OWNER: &str = "u_cccccccccccccccccccccccccc";
const BUCKET: &str = "cotal_actors_main";

fn principal(a: &str) -> Principal {
    Principal::new(
        OwnerToken::parse(OWNER).unwrap(),
        ActorToken::parse(a).unwrap(),
    )
}

fn interactive(a: &str, uid: u8) -> ActorRow {
    ActorRow {
        owner: OwnerToken::parse(OWNER).unwrap(),
        actor: ActorToken::parse(a).unwrap(),
        scope: vec![],
        allow_subscribe: vec!["team.>".into()],
        allow_publish: vec!["team.>".into()],
        role: None,
        parent: None,
        label: None,
        token_hash: None,
        lifecycle_uid: Some(LifecycleUid::mint([uid; 20])),
        granted_at: "2023-11-14T22:13:20.000Z".into(),
    }
}

/// One ledger request over the model, as the adapter runs it: fresh rows per request.
fn run(kv: &mut KvModel, request: ActorsRequest) -> ActorsOutcome {
    execute(&mut KvRows::new(kv, BUCKET), &request)
}

fn find(kv: &mut KvModel, a: &str) -> ActorsOutcome {
    run(
        kv,
        ActorsRequest::FindUnified {
            principal: principal(a),
        },
    )
}

#[test]
fn rows_are_the_file_ledgers_bytes_under_one_key_each() {
    let mut kv = KvModel::new();
    let row = interactive("alice", 1);
    assert_eq!(
        run(&mut kv, ActorsRequest::GrantInteractive(row.clone())),
        ActorsOutcome::Granted(row.clone())
    );
    let key = row_key(RowSpace::Interactive, &principal("alice"));
    assert_eq!(key, format!("interactive.{OWNER}.alice"));
    assert_eq!(
        kv.get(Store::Actors, &key).unwrap().value,
        row.to_file_bytes()
    );
    assert_eq!(
        find(&mut kv, "alice"),
        ActorsOutcome::Found(Some(Held {
            space: RowSpace::Interactive,
            row
        }))
    );
}

#[test]
fn revoke_leaves_a_marker_that_reads_as_no_row_and_a_regrant_writes_over_it() {
    let mut kv = KvModel::new();
    run(
        &mut kv,
        ActorsRequest::GrantInteractive(interactive("bob", 1)),
    );
    assert_eq!(
        run(
            &mut kv,
            ActorsRequest::RevokeInteractive {
                principal: principal("bob")
            }
        ),
        ActorsOutcome::Revoked(true)
    );
    let key = row_key(RowSpace::Interactive, &principal("bob"));
    assert_eq!(
        kv.get(Store::Actors, &key).unwrap().operation,
        Operation::Delete
    );
    assert_eq!(find(&mut kv, "bob"), ActorsOutcome::Found(None));
    assert_eq!(
        run(
            &mut kv,
            ActorsRequest::RevokeInteractive {
                principal: principal("bob")
            }
        ),
        ActorsOutcome::Revoked(false)
    );
    // Not listed while revoked; listed again once re-granted over the marker.
    assert_eq!(
        run(
            &mut kv,
            ActorsRequest::List {
                space: RowSpace::Interactive
            }
        ),
        ActorsOutcome::Listed(vec![])
    );
    let again = interactive("bob", 2);
    assert_eq!(
        run(&mut kv, ActorsRequest::GrantInteractive(again.clone())),
        ActorsOutcome::Granted(again.clone())
    );
    assert_eq!(
        run(
            &mut kv,
            ActorsRequest::List {
                space: RowSpace::Interactive
            }
        ),
        ActorsOutcome::Listed(vec![Ok(again)])
    );
}

#[test]
fn a_grant_whose_acknowledgement_was_lost_is_settled_by_reading_it_back() {
    let mut kv = KvModel::new();
    kv.inject(
        Trigger::new(Store::Actors, KvOp::CreateStrict, "interactive."),
        Fault::AmbiguousApplied,
    );
    let row = interactive("carol", 1);
    assert_eq!(
        run(&mut kv, ActorsRequest::GrantInteractive(row.clone())),
        ActorsOutcome::Granted(row)
    );
    assert_eq!(kv.pending_faults(), 0);
}

#[test]
fn a_grant_that_never_committed_is_unavailable_and_grants_nothing() {
    let mut kv = KvModel::new();
    kv.inject(
        Trigger::new(Store::Actors, KvOp::CreateStrict, "interactive."),
        Fault::AmbiguousNotApplied,
    );
    let ActorsOutcome::Unavailable(why) = run(
        &mut kv,
        ActorsRequest::GrantInteractive(interactive("dave", 1)),
    ) else {
        panic!("a lost write was reported as written")
    };
    assert!(why.contains("the grant was not written"), "{why}");
    assert_eq!(find(&mut kv, "dave"), ActorsOutcome::Found(None));
}

#[test]
fn a_writer_that_raced_in_between_is_not_overwritten() {
    let mut kv = KvModel::new();
    run(
        &mut kv,
        ActorsRequest::GrantInteractive(interactive("erin", 1)),
    );
    let key = row_key(RowSpace::Interactive, &principal("erin"));
    let theirs = interactive("erin", 3).to_file_bytes();
    let raced = theirs.clone();
    let raced_key = key.clone();
    // Right after the grant reads the row it is about to replace, another writer replaces it.
    kv.inject(
        Trigger::new(Store::Actors, KvOp::Get, key.as_str()),
        Fault::After(Box::new(move |kv: &mut KvModel| {
            kv.put(Store::Actors, &raced_key, &raced);
        })),
    );
    // The grant first reads the managed space, then pins its write to the interactive row's
    // revision, which it reads now.
    let ActorsOutcome::Unavailable(why) = run(
        &mut kv,
        ActorsRequest::GrantInteractive(interactive("erin", 2)),
    ) else {
        panic!("the racing writer was overwritten")
    };
    assert!(why.contains("the grant was not written"), "{why}");
    assert_eq!(kv.get(Store::Actors, &key).unwrap().value, theirs);
}

#[test]
fn an_unanswered_read_denies_and_a_row_that_is_not_one_is_corrupt() {
    let mut kv = KvModel::new();
    run(
        &mut kv,
        ActorsRequest::GrantInteractive(interactive("frank", 1)),
    );
    kv.inject(
        Trigger::new(Store::Actors, KvOp::Get, "interactive."),
        Fault::AmbiguousNotApplied,
    );
    assert!(matches!(
        find(&mut kv, "frank"),
        ActorsOutcome::Unavailable(_)
    ));

    let key = row_key(RowSpace::Interactive, &principal("grace"));
    kv.put(Store::Actors, &key, b"{not a row");
    let ActorsOutcome::Corrupt(why) = find(&mut kv, "grace") else {
        panic!("a broken row was read as one")
    };
    assert!(why.starts_with(&format!("{BUCKET} key {key}: ")), "{why}");
    // A row stored under another principal's key is refused, not authenticated as it.
    let other = row_key(RowSpace::Interactive, &principal("heidi"));
    kv.put(
        Store::Actors,
        &other,
        &interactive("frank", 1).to_file_bytes(),
    );
    assert!(matches!(find(&mut kv, "heidi"), ActorsOutcome::Corrupt(_)));
}

#[test]
fn one_principal_in_both_spaces_is_a_broken_ledger() {
    let mut kv = KvModel::new();
    run(
        &mut kv,
        ActorsRequest::GrantInteractive(interactive("ivan", 1)),
    );
    let managed = row_key(RowSpace::Managed, &principal("ivan"));
    kv.put(
        Store::Actors,
        &managed,
        &interactive("ivan", 1).to_file_bytes(),
    );
    assert!(matches!(find(&mut kv, "ivan"), ActorsOutcome::Corrupt(_)));
}
