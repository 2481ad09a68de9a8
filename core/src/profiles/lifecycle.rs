//! The one-shot credentials around an incarnation's lifecycle: the retirement requester that asks
//! to retire one, the provisioner that sets up the space, and the deprovisioner that tears one down.

use std::collections::BTreeSet;

use super::{
    assemble, caller_reply_filter, inbox, Channel, ConnId, Profile, RailCaller, Space,
    DEPROVISIONER, HOST_LIMITS, ONE_SHOT_TTL_SECS, PROVISIONER, RETIREMENT_REQUESTER,
};
use crate::error::EpError;
use crate::host::{AUTH_ENDPOINT, RETIRE_LIFECYCLE};
use crate::names::{LifecycleUid, Principal, SpaceName};

// ---- retirement-requester -------------------------------------------------------------------

/// What a `retirement-requester` credential binds: the requesting caller triple and ONE target
/// incarnation, both literal in the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetirementRequesterBinding {
    pub space: SpaceName,
    /// The requesting manager's own triple (its serve actor and lifecycle uid).
    pub caller: RailCaller,
    pub conn: ConnId,
    /// The one incarnation this credential may ask to retire.
    pub target: RailCaller,
}

/// `retirement-requester`: request + reply on the auth endpoint's rail and nothing else — it
/// only asks; the plane holds every executing right and re-checks the caller's serve gate at
/// serve time. Five minutes.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `P.ep.one.auth.retire-lifecycle.handle.<tO>.<tA>.<tUid>.<cO>.<cA>.<cUid>.*` | own triple, one target, the nonce the only wildcard |
/// | 2 | sub | `P.ep.reply.*.*.*.<cO>.<cA>.<cUid>.*` | own reply rail |
/// | 3 | sub | `inbox` | |
///
/// The target rides the subject as the `handle` triple, so a leaked requester cannot be
/// re-aimed (F4: a recycled alias names a different uid). No `$KV`, no `STREAM.`, no `>`.
pub fn retirement_requester(b: &RetirementRequesterBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let (t, c) = (&b.target, &b.caller);
    let publish = vec![format!(
        "{}.ep.one.{AUTH_ENDPOINT}.{RETIRE_LIFECYCLE}.handle.{t}.{c}.*",
        sp.p
    )];
    let sub = vec![caller_reply_filter(&sp, c), inbox(&b.conn)];
    let holder = Principal::new(c.owner.clone(), c.actor.clone());
    assemble(
        RETIREMENT_REQUESTER,
        HOST_LIMITS,
        &holder,
        ONE_SHOT_TTL_SECS,
        publish,
        sub,
    )
}

// ---- provisioner ----------------------------------------------------------------------------

/// What a `provisioner` credential binds: only its holder — it provisions the space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionerBinding {
    pub space: SpaceName,
    pub principal: Principal,
    pub conn: ConnId,
}

/// `provisioner`: the ephemeral onboarding authority — create-or-verify the space's streams and
/// buckets, pre-create agents' bind-only mailboxes, write read ACLs and the channel registry.
/// It never reads a mailbox body, never deletes or purges a stream. Five minutes.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | |
/// | 2 | pub | per stream `X` of the inventory below: `$JS.API.STREAM.CREATE.X`, `$JS.API.STREAM.INFO.X` | idempotent create-or-verify |
/// | 3 | pub | `$JS.API.STREAM.UPDATE.KV_cotal_{presence,delivery,manager}_s` | reconcile the TTL'd buckets' `max_age` |
/// | 4 | pub | for `DM_s`, `DLV_s`, `TASK_s`: `$JS.API.CONSUMER.CREATE.X.>`, `…CONSUMER.DURABLE.CREATE.X.>`, `…CONSUMER.INFO.X.>` | pre-create bind-only mailboxes (no MSG.NEXT/ACK: never reads a body) |
/// | 5 | pub | `$KV.cotal_acl_s.>`, `$KV.cotal_channels_s.>` | the two registries provisioning writes |
/// | 6 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_acl_s`, `$JS.API.DIRECT.GET.KV_cotal_acl_s.>`, same for `channels` | read-before-write of those registries |
/// | 7 | pub | `$JS.API.STREAM.UPDATE.KV_cotal_{records,issued,accepted,admission}_s` | one-time hardening of the authority stores |
/// | 8 | pub | `$JS.API.CONSUMER.{CREATE,INFO,DELETE}.KV_cotal_records_s.>` | the boot sweep's slot enumeration |
/// | 9 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_records_s`, `$JS.API.DIRECT.GET.KV_cotal_records_s.$KV.cotal_records_s.mgrslot.>` | slot reads |
/// | 10 | sub | `inbox` | |
///
/// Stream inventory, in order: `CHAT_s`, `DM_s`, `TASK_s`, `INBOX_s`, `DLV_s`,
/// `OBJ_cotal_artifacts_s`, `EPJ_s`, `EPF_s`, `EPE_s`, `EPT_REQ_s`, `EPR_s`, `EPT_s`, `EPW_s`,
/// `WFJ_s`, `EPC_s`, `KV_cotal_sessions_s`, `KV_cotal_records_s`, then `KV_cotal_<b>_s` for
/// `presence`, `channels`, `members`, `acl`, `membership`, `delivery`, `manager`.
///
/// Keeps F98: `KV_cotal_auth_s` is absent from the inventory (the reference lists it); the plane
/// ensures its own auth store, and no host profile holds any grant on that bucket.
pub fn provisioner(b: &ProvisionerBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let kv = |kind: &str| format!("KV_{}", sp.bucket(kind));
    let mut inventory: Vec<String> = ["CHAT", "DM", "TASK", "INBOX", "DLV"]
        .iter()
        .map(|f| sp.stream(f))
        .collect();
    inventory.push(format!("OBJ_{}", sp.bucket("artifacts")));
    inventory.extend(
        ["EPJ", "EPF", "EPE", "EPT_REQ", "EPR", "EPT", "EPW", "WFJ"]
            .iter()
            .map(|f| sp.stream(f)),
    );
    inventory.push(sp.epc.clone());
    inventory.push(kv("sessions"));
    inventory.push(format!("KV_{}", sp.records));
    inventory.extend(
        [
            "presence",
            "channels",
            "members",
            "acl",
            "membership",
            "delivery",
            "manager",
        ]
        .iter()
        .map(|k| kv(k)),
    );
    let mut publish = vec!["$JS.API.INFO".to_owned()];
    for x in &inventory {
        publish.push(format!("$JS.API.STREAM.CREATE.{x}"));
        publish.push(format!("$JS.API.STREAM.INFO.{x}"));
    }
    for k in ["presence", "delivery", "manager"] {
        publish.push(format!("$JS.API.STREAM.UPDATE.{}", kv(k)));
    }
    for f in ["DM", "DLV", "TASK"] {
        let x = sp.stream(f);
        publish.push(format!("$JS.API.CONSUMER.CREATE.{x}.>"));
        publish.push(format!("$JS.API.CONSUMER.DURABLE.CREATE.{x}.>"));
        publish.push(format!("$JS.API.CONSUMER.INFO.{x}.>"));
    }
    let (acl, channels) = (sp.bucket("acl"), sp.bucket("channels"));
    publish.push(format!("$KV.{acl}.>"));
    publish.push(format!("$KV.{channels}.>"));
    for bucket in [&acl, &channels] {
        publish.push(format!("$JS.API.STREAM.MSG.GET.KV_{bucket}"));
        publish.push(format!("$JS.API.DIRECT.GET.KV_{bucket}.>"));
    }
    for x in [
        format!("KV_{}", sp.records),
        kv("issued"),
        kv("accepted"),
        format!("KV_{}", sp.admission),
    ] {
        publish.push(format!("$JS.API.STREAM.UPDATE.{x}"));
    }
    let rec = &sp.records;
    publish.extend([
        format!("$JS.API.CONSUMER.CREATE.KV_{rec}.>"),
        format!("$JS.API.CONSUMER.INFO.KV_{rec}.>"),
        format!("$JS.API.CONSUMER.DELETE.KV_{rec}.>"),
        format!("$JS.API.STREAM.MSG.GET.KV_{rec}"),
        format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.mgrslot.>"),
    ]);
    assemble(
        PROVISIONER,
        HOST_LIMITS,
        &b.principal,
        ONE_SHOT_TTL_SECS,
        publish,
        vec![inbox(&b.conn)],
    )
}

// ---- deprovisioner --------------------------------------------------------------------------

/// What a `deprovisioner` credential binds: ONE departed incarnation's footprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeprovisionerBinding {
    pub space: SpaceName,
    /// The minting authority's principal (the credential's holder).
    pub principal: Principal,
    pub conn: ConnId,
    /// The incarnation torn down.
    pub target: Principal,
    pub target_uid: LifecycleUid,
    /// Concrete channels whose durable membership rows for the target are deleted.
    pub member_channels: Vec<Channel>,
}

/// `deprovisioner`: target-pinned teardown of one retired incarnation — its two bind-only
/// mailboxes, its read-ACL row and the membership rows of the channels named. Five minutes.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | |
/// | 2 | pub | `$JS.API.CONSUMER.DELETE.DM_s.dm_<o>-<a>-<uid>` | the DM mailbox, by exact lifecycle-keyed name |
/// | 3 | pub | `$JS.API.CONSUMER.DELETE.DLV_s.dlv_<o>-<a>-<uid>` | the delivery mailbox |
/// | 4 | pub | `$JS.API.STREAM.INFO.KV_cotal_acl_s`, `$KV.cotal_acl_s.<o>.<a>.<uid>` | the read-ACL row |
/// | 5 | pub | if channels: `$JS.API.STREAM.INFO.KV_cotal_members_s`, then per channel (sorted) `$KV.cotal_members_s.<ch>/<o>.<a>.<uid>` | one exact membership row each (Appendix B) |
/// | 6 | sub | `inbox` | |
///
/// Keeps F4: every name carries the target's lifecycle uid, so a replayed teardown is
/// broker-denied against a same-alias successor. It never reads a body, never touches a peer,
/// never deletes a stream or the role-shared `svc_<role>`.
pub fn deprovisioner(b: &DeprovisionerBinding) -> Result<Profile, EpError> {
    let sp = Space::new(&b.space);
    let t = &b.target;
    let uid = &b.target_uid;
    let name = format!("{}-{uid}", t.name());
    let acl = sp.bucket("acl");
    let mut publish = vec![
        "$JS.API.INFO".to_owned(),
        format!("$JS.API.CONSUMER.DELETE.{}.dm_{name}", sp.stream("DM")),
        format!("$JS.API.CONSUMER.DELETE.{}.dlv_{name}", sp.stream("DLV")),
        format!("$JS.API.STREAM.INFO.KV_{acl}"),
        format!("$KV.{acl}.{}.{uid}", t.key()),
    ];
    let channels: BTreeSet<&Channel> = b.member_channels.iter().collect();
    if !channels.is_empty() {
        let members = sp.bucket("members");
        publish.push(format!("$JS.API.STREAM.INFO.KV_{members}"));
        for ch in channels {
            publish.push(format!("$KV.{members}.{ch}/{}.{uid}", t.key()));
        }
    }
    assemble(
        DEPROVISIONER,
        HOST_LIMITS,
        &b.principal,
        ONE_SHOT_TTL_SECS,
        publish,
        vec![inbox(&b.conn)],
    )
}
