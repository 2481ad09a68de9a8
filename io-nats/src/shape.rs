//! The JetStream shape of each per-space store (spec-fence-rules §2.1, F7, F10): the stream
//! config the adapter creates, and the checks every bind runs against the live `STREAM.INFO`.
//!
//! | setting | auth | records | admission | contracts (`EPC_`) | issued | accepted | sessions | actors |
//! | --- | --- | --- | --- | --- | --- | --- | --- | --- |
//! | subjects | `$KV.<bucket>.>` only | same | same | `cotal.<space>.epc.>` only | `$KV.<bucket>.>` only | same | same | same |
//! | retention / storage | Limits / File | same | same | same | same | same | same | same |
//! | `max_age` | 0 (none) | 0 | 0 | 0 | 0 | 0 | 0 | 0 |
//! | `max_msgs` / `max_bytes` | unlimited | unlimited | unlimited | unlimited | unlimited | unlimited | unlimited | unlimited |
//! | per-subject history | [`AUTH_HISTORY`] (not verified) | 1 | 1 | 1 | unlimited (-1) | 1 | 1 | 1 |
//! | discard | new (KV) | new (KV) | new, per subject | new, per subject | new (KV) | new, per subject | new (KV) | new (KV) |
//! | `allow_direct` | **false** (F7) | true | false | true | **false** | true | **false** | **false** |
//! | `allow_rollup_hdrs` | false | false | false | false | false | false | false | false |
//! | `deny_delete` | true | true | true | true | true | true | true | true |
//! | `deny_purge` | true (not verified) | true (not verified) | true | true | true | true | true | true |
//! | per-message TTL | off (not verified) | off | off | off | off | off | off | off |
//! | mirror / sources / transform | none | none | none | none | none | none | none | none |
//! | replicas | as configured | as configured | as configured | as configured | as configured | as configured | as configured | as configured |
//!
//! Why each verified setting matters:
//! * **subjects, transform**: the adapter addresses keys as exact subjects of one stream; a second
//!   subject or a transform would let foreign writes land on (or keys vanish from) the store.
//! * **Limits, File, no `max_age`, unlimited `max_msgs`/`max_bytes`** (F10): the only removal
//!   causes left are explicit writes; an age- or count-evicted `open` gate would silently reopen
//!   minting, and memory storage loses every row on a restart.
//! * **`allow_direct`** (F7, F8): the auth and admission stores are read only by leader-served
//!   `STREAM.MSG.GET`; a follower-served Direct Get could be stale. Records and contracts allow
//!   Direct Get for other clients' plain reads (§2.1); the adapter uses it only for a
//!   participant's contract reads (`crate::space::Bind::Participant`), whose grant holds no
//!   other read there.
//! * **no rollup** (F10): a `Nats-Rollup: all` header would wipe every current row of the stream.
//! * **`deny_delete`** (F10): `STREAM.MSG.DELETE` could remove a current row.
//! * **history 1 + discard-new-per-subject** on admission and contracts: one message per subject,
//!   the broker refuses a second one (10077), so a shadow append can never displace a row.
//! * **records history 1**: stated by §2.1 (SPEC §13.6).
//! * **issued: unlimited history, no purge** (SPEC §13.15): the attempt row advances by CAS, so
//!   a one-message cap is not an option; instead nothing on a key is ever removed and every
//!   immutable row is read as the *first* message on its key, so a later write there is inert.
//!   No Direct Get: every read is a leader-served fence.
//! * **accepted: history 1 + discard-new-per-subject, Direct Get on**: a row is written once at
//!   release and never advanced; a client reads exactly its own row through a per-key
//!   `DIRECT.GET` grant, which only a Direct Get subject can express.
//! * **sessions: history 1, no Direct Get**: a serving manager's redemption creates the row and
//!   advances it by revision CAS (F72, F73), so only the last message matters; every reader of
//!   it, the manager's `session-ledger` credential and this plane alike, reads leader-served.
//! * **primary, not sealed, sync persistence**: a mirror or a sourced copy is not the
//!   authoritative primary (F8); a sealed stream refuses every write; ADR-56 async persistence
//!   acknowledges before the write is durable (never for fences).
//! * **replicas**: a bind at R3 refuses an R1 store rather than silently serving with less
//!   durability than the operator asked for.
//!
//! Settings marked "not verified" are what we create, but a store made otherwise is still
//! accepted because the spec allows it: the auth store's history has no authority meaning (every
//! read is the last message), and the spec permits per-key TTL on `cred.`/`epcred.`/`bysrc.`
//! auth rows (our writers never set `Nats-TTL`).

use std::time::Duration;

use async_nats::jetstream::stream::{
    Config, DiscardPolicy, PersistenceMode, RetentionPolicy, StorageType,
};
use cotal_core::kv::Store;
use cotal_core::names::{
    accepted_bucket, actors_bucket, admission_bucket, auth_bucket, contract_stream, issued_bucket,
    kv_stream, records_bucket, sessions_bucket, space_prefix, SpaceName,
};
use cotal_core::EpError;
use serde_json::json;

/// Messages kept per auth key: a short audit trail of each gate's recent moves, equal to the
/// core KV model's default so the real store and the model tests have one shape.
pub const AUTH_HISTORY: i64 = 8;

/// The KV duplicate window the KV clients use (no write of ours sets `Nats-Msg-Id`).
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Stream replication factor of every store of a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Replicas {
    /// Single server: development and CI.
    One,
    /// Three replicas across failure domains: production (ecosystem §8).
    Three,
}

impl Replicas {
    pub const fn count(self) -> usize {
        match self {
            Replicas::One => 1,
            Replicas::Three => 3,
        }
    }

    /// `1` or `3`; anything else is `bad-request`.
    pub fn from_count(n: usize) -> Result<Replicas, EpError> {
        match n {
            1 => Ok(Replicas::One),
            3 => Ok(Replicas::Three),
            other => Err(EpError::bad_request(format!(
                "replicas must be 1 or 3, not {other}"
            ))),
        }
    }
}

/// Where a store lives: its stream and the subject prefix its keys hang off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLayout {
    pub store: Store,
    /// The bucket name for KV stores, the stream name for contracts.
    pub name: String,
    pub stream: String,
    /// The subject of key `k` is `subject_prefix + k`.
    pub subject_prefix: String,
}

impl StoreLayout {
    pub fn of(store: Store, space: &SpaceName) -> StoreLayout {
        let kv = |bucket: String| StoreLayout {
            store,
            stream: kv_stream(&bucket),
            subject_prefix: format!("$KV.{bucket}."),
            name: bucket,
        };
        match store {
            Store::Auth => kv(auth_bucket(space)),
            Store::Records => kv(records_bucket(space)),
            Store::Admission => kv(admission_bucket(space)),
            Store::Issued => kv(issued_bucket(space)),
            Store::Accepted => kv(accepted_bucket(space)),
            Store::Sessions => kv(sessions_bucket(space)),
            Store::Actors => kv(actors_bucket(space)),
            Store::Contracts => StoreLayout {
                store,
                name: contract_stream(space),
                stream: contract_stream(space),
                subject_prefix: format!("{}.epc.", space_prefix(space)),
            },
        }
    }

    /// The one subject the stream is bound to.
    pub fn wildcard(&self) -> String {
        format!("{}>", self.subject_prefix)
    }

    pub fn subject(&self, key: &str) -> String {
        format!("{}{key}", self.subject_prefix)
    }
}

/// The per-store settings that differ (see the module table).
struct Profile {
    history: i64,
    verify_history: bool,
    allow_direct: bool,
    discard_new_per_subject: bool,
    verify_deny_purge: bool,
    verify_no_ttl: bool,
}

fn profile(store: Store) -> Profile {
    match store {
        Store::Auth => Profile {
            history: AUTH_HISTORY,
            verify_history: false,
            allow_direct: false,
            discard_new_per_subject: false,
            verify_deny_purge: false,
            verify_no_ttl: false,
        },
        Store::Records => Profile {
            history: 1,
            verify_history: true,
            allow_direct: true,
            discard_new_per_subject: false,
            verify_deny_purge: false,
            verify_no_ttl: true,
        },
        Store::Admission => Profile {
            history: 1,
            verify_history: true,
            allow_direct: false,
            discard_new_per_subject: true,
            verify_deny_purge: true,
            verify_no_ttl: true,
        },
        Store::Contracts | Store::Accepted => Profile {
            history: 1,
            verify_history: true,
            allow_direct: true,
            discard_new_per_subject: true,
            verify_deny_purge: true,
            verify_no_ttl: true,
        },
        // The actor ledger: one row per key, rewritten and deleted with revision-pinned
        // writes, read only from the leader (a grant or revoke must be seen at once).
        Store::Actors => Profile {
            history: 1,
            verify_history: true,
            allow_direct: false,
            discard_new_per_subject: false,
            verify_deny_purge: true,
            verify_no_ttl: true,
        },
        Store::Sessions => Profile {
            history: 1,
            verify_history: true,
            allow_direct: false,
            discard_new_per_subject: false,
            verify_deny_purge: true,
            verify_no_ttl: true,
        },
        Store::Issued => Profile {
            history: -1,
            verify_history: true,
            allow_direct: false,
            discard_new_per_subject: false,
            verify_deny_purge: true,
            verify_no_ttl: true,
        },
    }
}

/// The stream config the adapter creates for `layout`.
pub fn desired_config(layout: &StoreLayout, replicas: Replicas) -> Config {
    let p = profile(layout.store);
    Config {
        name: layout.stream.clone(),
        description: Some(format!("cotal {:?} store", layout.store)),
        subjects: vec![layout.wildcard()],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        max_age: Duration::ZERO,
        max_messages: -1,
        max_bytes: -1,
        max_message_size: -1,
        max_consumers: -1,
        max_messages_per_subject: p.history,
        discard: DiscardPolicy::New,
        discard_new_per_subject: p.discard_new_per_subject,
        num_replicas: replicas.count(),
        duplicate_window: DUPLICATE_WINDOW,
        allow_direct: p.allow_direct,
        allow_rollup: false,
        deny_delete: true,
        deny_purge: true,
        allow_message_ttl: false,
        ..Config::default()
    }
}

/// Checks a live stream config against the shape of `layout`'s store. The refusal is
/// `failed-precondition`, names the store, the setting, what was expected and what was found
/// (also as a JSON detail), and says that the plane does not serve on it.
pub fn verify(layout: &StoreLayout, live: &Config, replicas: Replicas) -> Result<(), EpError> {
    let p = profile(layout.store);
    let refuse = |setting: &str, expected: String, actual: String| {
        EpError::failed_precondition(format!(
            "store {} (stream {}) has the wrong shape: {setting} is {actual}, the shape requires \
             {expected} (spec-fence-rules §2.1, F10); the plane refuses to serve on it. Fix or \
             recreate the stream",
            layout.name, layout.stream
        ))
        .with_detail(json!({
            "store": layout.name, "stream": layout.stream, "setting": setting,
            "expected": expected, "actual": actual,
        }))
    };
    let check = |ok: bool, setting: &str, expected: &str, actual: String| {
        if ok {
            Ok(())
        } else {
            Err(refuse(setting, expected.to_owned(), actual))
        }
    };
    let wildcard = layout.wildcard();
    check(
        live.subjects == [wildcard.clone()],
        "subjects",
        &format!("exactly [{wildcard}]"),
        format!("{:?}", live.subjects),
    )?;
    check(
        live.subject_transform.is_none(),
        "subject_transform",
        "none",
        format!("{:?}", live.subject_transform),
    )?;
    check(
        live.retention == RetentionPolicy::Limits,
        "retention",
        "limits",
        format!("{:?}", live.retention),
    )?;
    check(
        live.storage == StorageType::File,
        "storage",
        "file",
        format!("{:?}", live.storage),
    )?;
    check(
        live.max_age.is_zero(),
        "max_age",
        "0 (no age eviction)",
        format!("{:?}", live.max_age),
    )?;
    check(
        live.max_messages <= 0,
        "max_msgs",
        "unlimited (-1)",
        live.max_messages.to_string(),
    )?;
    check(
        live.max_bytes <= 0,
        "max_bytes",
        "unlimited (-1)",
        live.max_bytes.to_string(),
    )?;
    check(
        live.mirror.is_none(),
        "mirror",
        "none (the store is the primary)",
        "a mirror".to_owned(),
    )?;
    check(
        live.sources.as_ref().is_none_or(Vec::is_empty),
        "sources",
        "none (the store is the primary)",
        "sourced streams".to_owned(),
    )?;
    check(!live.sealed, "sealed", "false", "true".to_owned())?;
    check(
        live.persist_mode != Some(PersistenceMode::Async),
        "persist_mode",
        "default (ack after store)",
        "async".to_owned(),
    )?;
    check(
        live.allow_direct == p.allow_direct,
        "allow_direct",
        &p.allow_direct.to_string(),
        live.allow_direct.to_string(),
    )?;
    check(
        !live.allow_rollup,
        "allow_rollup_hdrs",
        "false",
        "true".to_owned(),
    )?;
    check(live.deny_delete, "deny_delete", "true", "false".to_owned())?;
    if p.verify_deny_purge {
        check(live.deny_purge, "deny_purge", "true", "false".to_owned())?;
    }
    if p.verify_history {
        check(
            live.max_messages_per_subject == p.history,
            "max_msgs_per_subject",
            &p.history.to_string(),
            live.max_messages_per_subject.to_string(),
        )?;
    }
    if p.discard_new_per_subject {
        check(
            live.discard == DiscardPolicy::New,
            "discard",
            "new",
            format!("{:?}", live.discard),
        )?;
        check(
            live.discard_new_per_subject,
            "discard_new_per_subject",
            "true",
            "false".to_owned(),
        )?;
    }
    if p.verify_no_ttl {
        check(
            !live.allow_message_ttl,
            "allow_msg_ttl",
            "false",
            "true".to_owned(),
        )?;
    }
    check(
        live.num_replicas == replicas.count(),
        "num_replicas",
        &replicas.count().to_string(),
        live.num_replicas.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(store: Store) -> StoreLayout {
        StoreLayout::of(store, &SpaceName::parse("s1").unwrap())
    }

    #[test]
    fn the_created_shape_passes_its_own_verification() {
        for store in [
            Store::Auth,
            Store::Records,
            Store::Admission,
            Store::Contracts,
        ] {
            let l = layout(store);
            for r in [Replicas::One, Replicas::Three] {
                assert!(
                    verify(&l, &desired_config(&l, r), r).is_ok(),
                    "{store:?} {r:?}"
                );
            }
        }
    }

    #[test]
    fn each_wrong_setting_is_refused_by_name() {
        let l = layout(Store::Auth);
        let good = desired_config(&l, Replicas::One);
        let cases: Vec<(&str, Config)> = vec![
            (
                "allow_direct",
                Config {
                    allow_direct: true,
                    ..good.clone()
                },
            ),
            (
                "max_age",
                Config {
                    max_age: Duration::from_secs(60),
                    ..good.clone()
                },
            ),
            (
                "max_msgs",
                Config {
                    max_messages: 1000,
                    ..good.clone()
                },
            ),
            (
                "max_bytes",
                Config {
                    max_bytes: 1 << 20,
                    ..good.clone()
                },
            ),
            (
                "storage",
                Config {
                    storage: StorageType::Memory,
                    ..good.clone()
                },
            ),
            (
                "allow_rollup_hdrs",
                Config {
                    allow_rollup: true,
                    ..good.clone()
                },
            ),
            (
                "subjects",
                Config {
                    subjects: vec!["$KV.other.>".into()],
                    ..good.clone()
                },
            ),
            (
                "num_replicas",
                Config {
                    num_replicas: 3,
                    ..good.clone()
                },
            ),
        ];
        for (setting, config) in cases {
            let e = verify(&l, &config, Replicas::One).unwrap_err();
            assert!(e.message.contains(setting), "{setting}: {}", e.message);
            assert_eq!(e.code, cotal_core::ErrorCode::FailedPrecondition);
        }
    }
}
