//! A managed agent's broker footprint (SPEC §8, §9 item 3, §13.1; reference
//! `provisionAgentDurables` / `deprovisionAgent`): what a [`DurablesRequest`](super::DurablesRequest)
//! creates and removes, as pure data the NATS adapter executes.
//!
//! Provision creates the agent's bind-only mailboxes — pull consumers the agent may bind but
//! never create, their names and filters keyed on `(principal, lifecycleUid)` so a successor of
//! the alias never inherits them (F4, F51) — and its read-ACL row:
//! * `dm_<owner>-<actor>-<uid>` on `DM_<space>`, filter `cotal.<space>.inst.<owner>.<actor>.>`,
//!   starting strictly after the stream's last sequence at creation (its activation frontier,
//!   F51), and kept as found once it exists (its frontier never moves);
//! * `dlv_<owner>-<actor>-<uid>` on `DLV_<space>`, filter
//!   `cotal.<space>.dlv.<owner>.<actor>.<uid>` (the subject confines a successor already);
//! * with a role, the role-shared `svc_<role>` on `TASK_<space>`, filter
//!   `cotal.<space>.svc.<role>.>` (not lifecycle-scoped: deprovision leaves it);
//! * the ACL row `<owner>.<actor>.<uid>` in `cotal_acl_<space>`:
//!   `{allowSubscribe, issuedAllowSubscribe, revision, updatedAt}`.
//!
//! All three consumers ack explicitly with a 60 s ack wait and no inactivity threshold (an agent
//! relaunched late must still find its mailbox). Deprovision purges the ACL row first (while it
//! may be live, the consumers are not touched), then deletes the two lifecycle-keyed consumers,
//! then purges the membership rows `<channel>/<owner>.<actor>.<uid>` of the channels named.

use serde_json::{json, Value};

use super::envelope::pattern_in_allow;
use super::row::check_channel;
use crate::names::{LifecycleUid, Principal, SpaceName};
use crate::wire::ObjectWriter;

/// Every mailbox's ack wait: 60 s, in nanoseconds (the JetStream API's unit).
pub const ACK_WAIT_NANOS: u64 = 60_000_000_000;

/// One bind-only mailbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailbox {
    pub stream: String,
    pub name: String,
    pub filter: String,
    /// True for the DM mailbox: it starts after the stream's last sequence at creation, and an
    /// existing one is kept as found.
    pub after_frontier: bool,
}

impl Mailbox {
    /// The `CONSUMER.CREATE` body: a durable pull consumer, explicit acks, `frontier` the
    /// stream's last sequence when [`Mailbox::after_frontier`] (it starts at `frontier + 1`).
    pub fn create_body(&self, frontier: u64) -> Value {
        let config = if self.after_frontier {
            json!({
                "durable_name": self.name,
                "filter_subject": self.filter,
                "ack_policy": "explicit",
                "ack_wait": ACK_WAIT_NANOS,
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": frontier.saturating_add(1),
            })
        } else {
            json!({
                "durable_name": self.name,
                "filter_subject": self.filter,
                "ack_policy": "explicit",
                "ack_wait": ACK_WAIT_NANOS,
                "deliver_policy": "all",
            })
        };
        json!({"stream_name": self.stream, "config": config, "action": "create"})
    }
}

/// The lifecycle-keyed dash form `<owner>-<actor>-<uid>` every per-incarnation name carries.
fn keyed(principal: &Principal, uid: &LifecycleUid) -> String {
    format!("{}-{uid}", principal.name())
}

/// The DM and DLV mailboxes of one incarnation.
pub fn lifecycle_mailboxes(
    space: &SpaceName,
    principal: &Principal,
    uid: &LifecycleUid,
) -> [Mailbox; 2] {
    let (s, p) = (space.token(), principal);
    [
        Mailbox {
            stream: format!("DM_{s}"),
            name: format!("dm_{}", keyed(p, uid)),
            filter: format!("cotal.{s}.inst.{}.{}.>", p.owner(), p.actor()),
            after_frontier: true,
        },
        Mailbox {
            stream: format!("DLV_{s}"),
            name: format!("dlv_{}", keyed(p, uid)),
            filter: format!("cotal.{s}.dlv.{}.{}.{uid}", p.owner(), p.actor()),
            after_frontier: false,
        },
    ]
}

/// The role-shared task queue `svc_<role>`.
pub fn task_queue(space: &SpaceName, role: &str) -> Mailbox {
    let s = space.token();
    Mailbox {
        stream: format!("TASK_{s}"),
        name: format!("svc_{role}"),
        filter: format!("cotal.{s}.svc.{role}.>"),
        after_frontier: false,
    }
}

/// The ACL bucket of the space.
pub fn acl_bucket(space: &SpaceName) -> String {
    format!("cotal_acl_{}", space.token())
}

/// The membership bucket of the space.
pub fn members_bucket(space: &SpaceName) -> String {
    format!("cotal_members_{}", space.token())
}

/// The incarnation's ACL key, `<owner>.<actor>.<uid>` (dot form).
pub fn acl_key(principal: &Principal, uid: &LifecycleUid) -> String {
    format!("{principal}.{uid}")
}

/// The incarnation's membership key on `channel`: `<channel>/<owner>.<actor>.<uid>`.
pub fn member_key(channel: &str, principal: &Principal, uid: &LifecycleUid) -> String {
    format!("{channel}/{principal}.{uid}")
}

/// The ACL row a provision writes: the read ceiling raised to `allow` (a reissue), at `revision`
/// (1 on create, the stored one + 1 on a rewrite), stamped `now_ms`.
pub fn acl_row(allow: &[String], revision: u64, now_ms: u64) -> Vec<u8> {
    ObjectWriter::new()
        .strings("allowSubscribe", allow.iter().map(String::as_str))
        .strings("issuedAllowSubscribe", allow.iter().map(String::as_str))
        .uint("revision", revision)
        .uint("updatedAt", now_ms)
        .finish()
        .into_bytes()
}

/// The stored ACL row's `revision`, when it reads as one.
pub fn acl_revision(stored: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Value>(stored)
        .ok()?
        .get("revision")?
        .as_u64()
}

/// The provision's input checks: every channel valid, every `subscribe` entry within
/// `allow_subscribe` (a live subscription never exceeds the read ceiling).
pub fn check_provision(subscribe: &[String], allow_subscribe: &[String]) -> Result<(), String> {
    for channel in subscribe.iter().chain(allow_subscribe) {
        check_channel(channel)?;
    }
    if let Some(outside) = subscribe
        .iter()
        .find(|s| !pattern_in_allow(allow_subscribe, s))
    {
        return Err(format!(
            "subscribe \"{outside}\" is not within allowSubscribe {allow_subscribe:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn principal() -> Principal {
        Principal::parse("u_aaaaaaaaaaaaaaaaaaaaaaaaaa.worker").unwrap()
    }

    fn uid() -> LifecycleUid {
        LifecycleUid::parse("wwwwwwwwwwwwwwwwwwwwwwwwww").unwrap()
    }

    #[test]
    fn f4_every_incarnation_name_carries_its_uid() {
        let space = SpaceName::parse("s1").unwrap();
        let [dm, dlv] = lifecycle_mailboxes(&space, &principal(), &uid());
        let keyed = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa-worker-wwwwwwwwwwwwwwwwwwwwwwwwww";
        assert_eq!(
            (dm.stream.as_str(), dm.name.as_str()),
            ("DM_s1", &*format!("dm_{keyed}"))
        );
        assert_eq!(
            dm.filter,
            "cotal.s1.inst.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.worker.>"
        );
        assert_eq!(dlv.name, format!("dlv_{keyed}"));
        assert_eq!(
            dlv.filter,
            "cotal.s1.dlv.u_aaaaaaaaaaaaaaaaaaaaaaaaaa.worker.wwwwwwwwwwwwwwwwwwwwwwwwww"
        );
        assert_eq!(task_queue(&space, "worker").name, "svc_worker");
        assert_eq!(
            acl_key(&principal(), &uid()),
            "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.worker.wwwwwwwwwwwwwwwwwwwwwwwwww"
        );
        assert_eq!(
            member_key("team.a", &principal(), &uid()),
            "team.a/u_aaaaaaaaaaaaaaaaaaaaaaaaaa.worker.wwwwwwwwwwwwwwwwwwwwwwwwww"
        );
    }

    #[test]
    fn f51_the_dm_mailbox_starts_after_its_frontier_and_the_others_take_all() {
        let space = SpaceName::parse("s1").unwrap();
        let [dm, dlv] = lifecycle_mailboxes(&space, &principal(), &uid());
        let body = dm.create_body(41);
        assert_eq!(body["config"]["deliver_policy"], "by_start_sequence");
        assert_eq!(body["config"]["opt_start_seq"], 42);
        assert_eq!(body["config"]["ack_policy"], "explicit");
        assert_eq!(body["config"]["ack_wait"], ACK_WAIT_NANOS);
        assert_eq!(body["action"], "create");
        assert!(body["config"].get("inactive_threshold").is_none());
        assert_eq!(dm.create_body(0)["config"]["opt_start_seq"], 1);
        assert_eq!(dlv.create_body(41)["config"]["deliver_policy"], "all");
    }

    #[test]
    fn the_acl_row_raises_the_ceiling_at_its_revision() {
        let allow = vec!["general".to_owned(), "team.>".to_owned()];
        let row = acl_row(&allow, 3, 1_700_000_000_000);
        assert_eq!(
            String::from_utf8(row.clone()).unwrap(),
            r#"{"allowSubscribe":["general","team.>"],"issuedAllowSubscribe":["general","team.>"],"revision":3,"updatedAt":1700000000000}"#
        );
        assert_eq!(acl_revision(&row), Some(3));
        assert_eq!(acl_revision(b"garbled"), None);
    }

    #[test]
    fn subscribe_must_stay_within_allow_subscribe() {
        let allow = vec!["team.>".to_owned()];
        assert!(check_provision(&["team.a".to_owned()], &allow).is_ok());
        let e = check_provision(&["general".to_owned()], &allow).unwrap_err();
        assert!(
            e.contains("subscribe \"general\" is not within allowSubscribe"),
            "{e}"
        );
        assert!(check_provision(&["a..b".to_owned()], &allow).is_err());
    }
}
