//! An inbox reachable only by its principal (issue 26 item 1), on the KV model: the callout binds
//! a connection's inbox nonce to the first principal admitted under it, admits the holder's
//! reconnects on one read, refuses every other principal, settles an unanswered bind by a
//! leader read-back, and refuses whenever the binding cannot be read or written.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{principal, run, OTHER, P};
use cotal_core::driver::ModelWorld;
use cotal_core::inbox::{binding_row, parse_binding_row, BindInbox, InboxToken};
use cotal_core::kv::model::{Fault, KvModel, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::profiles::ConnId;
use cotal_core::{EpError, ErrorCode};

const NONCE: &str = "ibxAAAAbbbbCCCCdddd0123";

fn nonce() -> ConnId {
    ConnId::parse(NONCE).unwrap()
}

fn key() -> String {
    InboxToken::for_nonce(&nonce()).key()
}

fn bind(holder: &str) -> BindInbox {
    BindInbox {
        nonce: nonce(),
        principal: principal(holder),
    }
}

fn world() -> ModelWorld {
    ModelWorld::new(KvModel::new())
}

fn stored(w: &ModelWorld) -> Option<String> {
    w.kv.get(Store::Accepted, &key())
        .map(|e| String::from_utf8(e.value).unwrap())
}

fn refusal(result: Result<(), EpError>, code: ErrorCode, words: &str) {
    let e = result.unwrap_err();
    assert_eq!(e.code, code, "{e:?}");
    assert!(e.message.contains(words), "{:?} lacks {words:?}", e.message);
}

/// The row's key and bytes: a hashed key of its own prefix in the accepted store (never the
/// accepted token of the same nonce), and canonical JSON naming the principal's dot form.
#[test]
fn inbox_binding_row_bytes() {
    let mut w = world();
    run(&mut w, bind(P)).unwrap();
    // sha256("cotal.inbox.v1\0" + nonce), computed apart (python3 hashlib).
    assert_eq!(key(), "inbox.v1.0e136f7be7875646027137fcad7d8ffe");
    assert_eq!(
        stored(&w).unwrap(),
        format!(r#"{{"principal":"{P}","version":1}}"#)
    );
    assert_eq!(
        parse_binding_row(&binding_row(&principal(P)).unwrap()).unwrap(),
        principal(P)
    );
    for garbled in [
        r#"{"principal":"u_cccccccccccccccccccccccccc.term","version":2}"#,
        r#"{"principal":"u_cccccccccccccccccccccccccc.term","version":1,"extra":1}"#,
        r#"{"principal":"not a principal","version":1}"#,
        r#"{"version":1}"#,
        "[]",
        "",
    ] {
        assert!(parse_binding_row(garbled.as_bytes()).is_err(), "{garbled}");
    }
}

/// The first admitted principal holds the nonce; another principal is refused in one sentence
/// and writes nothing; the holder keeps connecting.
#[test]
fn inbox_nonce_bound_to_first_principal() {
    let mut w = world();
    run(&mut w, bind(P)).unwrap();
    let bound = w.kv.history(Store::Accepted, &key());
    refusal(
        run(&mut w, bind(OTHER)),
        ErrorCode::PermissionDenied,
        "inbox nonce of another principal",
    );
    assert_eq!(
        w.kv.history(Store::Accepted, &key()),
        bound,
        "nothing written"
    );
    run(&mut w, bind(P)).unwrap();
    assert_eq!(
        w.kv.history(Store::Accepted, &key()).len(),
        1,
        "one row, ever"
    );
}

/// A reconnect of the holder (the common path) is one leader read and no write.
#[test]
fn holder_reconnect_is_one_read() {
    let mut w = world();
    run(&mut w, bind(P)).unwrap();
    let (served, sequence) = (w.kv.requests_served(), w.kv.last_sequence(Store::Accepted));
    run(&mut w, bind(P)).unwrap();
    assert_eq!(w.kv.requests_served() - served, 1);
    assert_eq!(w.kv.last_sequence(Store::Accepted), sequence);
}

/// Two first connects of different principals on one fresh nonce: both read it unbound, the
/// other's create lands first, ours loses and reads the winner back — refused. Had the winner
/// been a connect of the same principal, ours is admitted on the same row.
#[test]
fn concurrent_first_binds_exactly_one_wins() {
    for (winner, admitted) in [(OTHER, false), (P, true)] {
        let mut w = world();
        let row = binding_row(&principal(winner)).unwrap();
        let k = key();
        w.kv.inject(
            Trigger::new(Store::Accepted, KvOp::GetFirst, "inbox."),
            Fault::After(Box::new(move |kv: &mut KvModel| {
                kv.put(Store::Accepted, &k, &row);
            })),
        );
        let result = run(&mut w, bind(P));
        if admitted {
            result.unwrap();
        } else {
            refusal(result, ErrorCode::PermissionDenied, "another principal");
        }
        assert_eq!(w.kv.pending_faults(), 0);
        assert_eq!(
            stored(&w).unwrap(),
            format!(r#"{{"principal":"{winner}","version":1}}"#),
            "the winner's row stands alone"
        );
        assert_eq!(w.kv.history(Store::Accepted, &key()).len(), 1);
    }
}

/// A bind whose answer is lost is settled by the leader read-back, never guessed: committed
/// and lost → ours, admitted; not committed → sent again, admitted; not committed while
/// another principal's bind landed → refused.
#[test]
fn ambiguous_bind_settled_by_read_back() {
    for fault in [Fault::AmbiguousApplied, Fault::AmbiguousNotApplied] {
        let mut w = world();
        w.kv.inject(
            Trigger::new(Store::Accepted, KvOp::CreateStrict, "inbox."),
            fault,
        );
        run(&mut w, bind(P)).unwrap();
        assert_eq!(w.kv.pending_faults(), 0);
        assert_eq!(
            stored(&w).unwrap(),
            format!(r#"{{"principal":"{P}","version":1}}"#)
        );
        assert_eq!(w.kv.history(Store::Accepted, &key()).len(), 1);
    }

    let mut w = world();
    let other = binding_row(&principal(OTHER)).unwrap();
    let k = key();
    w.kv.inject(
        Trigger::new(Store::Accepted, KvOp::GetFirst, "inbox."),
        Fault::After(Box::new(move |kv: &mut KvModel| {
            kv.put(Store::Accepted, &k, &other);
        })),
    );
    w.kv.inject(
        Trigger::new(Store::Accepted, KvOp::CreateStrict, "inbox."),
        Fault::AmbiguousNotApplied,
    );
    refusal(
        run(&mut w, bind(P)),
        ErrorCode::PermissionDenied,
        "another principal",
    );
    assert_eq!(w.kv.pending_faults(), 0);
}

/// A bind that stays unanswered and reads back absent every time is `unavailable` and admits
/// nothing: it may still commit, and the next connect reads it.
#[test]
fn unsettled_bind_denies() {
    let mut w = world();
    for _ in 0..3 {
        w.kv.inject(
            Trigger::new(Store::Accepted, KvOp::CreateStrict, "inbox."),
            Fault::AmbiguousNotApplied,
        );
    }
    refusal(
        run(&mut w, bind(P)),
        ErrorCode::Unavailable,
        "stayed unanswered",
    );
    let mut w = world();
    w.kv.inject(
        Trigger::new(Store::Accepted, KvOp::CreateStrict, "inbox."),
        Fault::Unavailable,
    );
    refusal(run(&mut w, bind(P)), ErrorCode::Unavailable, "not written");
}

/// An unreadable binding never admits: an unserved read, a garbled row or a deletion marker
/// refuses, and nothing is written over it.
#[test]
fn unreadable_binding_denies() {
    let mut w = world();
    w.kv.inject(
        Trigger::new(Store::Accepted, KvOp::GetFirst, "inbox."),
        Fault::Unavailable,
    );
    refusal(
        run(&mut w, bind(P)),
        ErrorCode::Unavailable,
        "could not be read",
    );
    assert!(stored(&w).is_none(), "nothing written");

    let mut w = world();
    w.kv.put(Store::Accepted, &key(), b"{\"principal\":7}");
    refusal(
        run(&mut w, bind(P)),
        ErrorCode::PermissionDenied,
        "unreadable",
    );
    assert_eq!(w.kv.history(Store::Accepted, &key()).len(), 1);

    let mut w = world();
    w.kv.delete_unpinned(Store::Accepted, &key());
    refusal(
        run(&mut w, bind(P)),
        ErrorCode::PermissionDenied,
        "deletion marker",
    );
}

/// The binding is the key's first message: even if the store's write-once shape were broken
/// and a later message landed on the key, it would rebind nothing.
#[test]
fn a_later_message_never_rebinds() {
    let mut w = world();
    run(&mut w, bind(P)).unwrap();
    w.kv.put(
        Store::Accepted,
        &key(),
        &binding_row(&principal(OTHER)).unwrap(),
    );
    refusal(
        run(&mut w, bind(OTHER)),
        ErrorCode::PermissionDenied,
        "another principal",
    );
    run(&mut w, bind(P)).unwrap();
}
