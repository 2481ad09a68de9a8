//! The two loopback retire doors (reference §3.9) up to their barrier: the closed body, the
//! pre-check each door makes against the host's actor ledger, the barrier it then runs under
//! the op id the reference derives from the uid, and the answer's bytes.
//!
//! `/interactive-lifecycle/retire` retires an operator-granted actor's incarnation: the one its
//! grant names, or one the grant no longer names — a revoked or re-granted predecessor, whose
//! bearers the connect check already refuses but whose head still holds the alias, so a fresh
//! grant could never exchange (F60: this plane runs no takeover barrier, so the operator's
//! retirement is the only way to free the alias). The `/managed-lifecycle/retire` door retires
//! a managed agent whose manager is gone, refused while the managed grant is still at that uid
//! (revoke it first); a row at another uid is a successor and does not block.
//!
//! Each door refuses the other kind's alias: the ledger's row space is the only durable record
//! of an incarnation's kind (the KV rows are the reference's bytes and name none), so an alias
//! the other space grants is never retired under this door's op id (F49: a managed lifecycle
//! has exactly one retirement operation identity). An alias neither space grants any more is
//! admitted by either door; the gate's op pin still lets exactly one retirement operation
//! finish it (G10), and the other door's later ask answers `alreadyRetired`.

use serde_json::{json, Value};

use crate::actors::{LedgerRead, RowSpace};
use crate::error::{EpError, ErrorCode};
use crate::names::{ActorToken, DerivedOwner, LifecycleUid, Principal, SpaceName};
use crate::wire::unknown_member;

use super::retire::{
    interactive_retirement_op_id, managed_retirement_op_id, RetireLifecycle, Retirement,
};

/// Which retire door was knocked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetireDoor {
    Interactive,
    Managed,
}

/// The closed body both doors take: `{owner, actor, lifecycleUid}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetireTarget {
    pub principal: Principal,
    pub uid: LifecycleUid,
}

impl RetireTarget {
    /// The body's target; every shape or grammar failure is one sentence naming it (a 400).
    pub fn parse(body: &Value) -> Result<RetireTarget, String> {
        let Value::Object(map) = body else {
            return Err("the body must be an object {owner, actor, lifecycleUid}".to_owned());
        };
        if let Some(extra) = unknown_member(map, &["owner", "actor", "lifecycleUid"]) {
            return Err(format!("unknown field {extra:?}"));
        }
        let text = |key: &str| {
            map.get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{key} must be a string"))
        };
        let owner = DerivedOwner::parse(text("owner")?).map_err(|e| e.message)?;
        let actor = ActorToken::parse(text("actor")?).map_err(|e| e.message)?;
        let uid = LifecycleUid::parse(text("lifecycleUid")?).map_err(|e| e.message)?;
        Ok(RetireTarget {
            principal: Principal::new(owner.into_owner(), actor),
            uid,
        })
    }

    /// The body a client knocks with: the closed `{owner, actor, lifecycleUid}` that
    /// [`RetireTarget::parse`] reads.
    pub fn body(&self) -> Value {
        json!({
            "owner": self.principal.owner().as_str(),
            "actor": self.principal.actor().as_str(),
            "lifecycleUid": self.uid.as_str(),
        })
    }

    /// The alias row the audit line names.
    pub fn row(&self) -> String {
        format!("lifecycle.{}", self.principal.key())
    }

    fn alias(&self) -> String {
        format!("{}/{}", self.principal.owner(), self.principal.actor())
    }
}

/// A retirement a door admitted: the barrier to run, and how the door answers its outcome.
#[derive(Debug, Clone)]
pub struct DoorRetirement {
    pub barrier: RetireLifecycle,
    /// The interactive door admitted an alias the interactive ledger does not grant: a barrier
    /// that found nothing to retire at the uid answers the reference's 404 "not granted".
    ungranted: Option<String>,
}

impl DoorRetirement {
    /// The door's answer for what the barrier did: `retirement`, or, when the interactive door
    /// admitted an ungranted alias and nothing of it lived at the uid, `not-found`.
    pub fn answer(&self, retirement: Retirement) -> Result<Retirement, EpError> {
        match &self.ungranted {
            Some(alias) if retirement.not_started => Err(EpError::new(
                ErrorCode::NotFound,
                format!("interactive actor \"{alias}\" is not granted"),
            )),
            _ => Ok(retirement),
        }
    }
}

/// The door's pre-check against a fresh ledger read, then the barrier it runs (F49: one op id
/// per uid and door kind, so asking again resumes a crashed retirement).
///
/// * Interactive door: refuses (`conflict`) an alias the managed ledger grants; admits the
///   incarnation at the grant's uid, a superseded one (the grant is at another uid: a re-grant
///   rotated it) and a revoked one (no grant: its bearers are refused at connect already, F59,
///   but its head still holds the alias, F60). An ungranted alias with nothing at the uid
///   answers `not-found` ([`DoorRetirement::answer`]).
/// * Managed door: refuses (`conflict`) an alias the interactive ledger grants, and a managed
///   grant still at the uid ("revoke the grant before retiring it"); a managed row at another
///   uid is a successor and does not block.
///
/// The barrier then keeps F47's order (freeze first, revoke, verified eviction of every holder,
/// frontier, terminal), so the retired incarnation's live connections are kicked and verified
/// gone before the alias is freed (F47 (4), F50).
pub fn admit_door_retirement<L: LedgerRead>(
    ledger: &mut L,
    door: RetireDoor,
    t: &RetireTarget,
) -> Result<DoorRetirement, L::Error> {
    let (own, other, op_id) = match door {
        RetireDoor::Interactive => (
            RowSpace::Interactive,
            RowSpace::Managed,
            interactive_retirement_op_id(&t.uid)?,
        ),
        RetireDoor::Managed => (
            RowSpace::Managed,
            RowSpace::Interactive,
            managed_retirement_op_id(&t.uid)?,
        ),
    };
    if let Some(held) = ledger.find_row(other, &t.principal)?.map(|h| h.row) {
        let at = held
            .lifecycle_uid
            .as_ref()
            .map_or("-", LifecycleUid::as_str);
        return Err(EpError::conflict(match door {
            RetireDoor::Interactive => format!(
                "\"{}\" is a managed agent (granted at lifecycle {at}); its lifecycles retire \
                 through /managed-lifecycle/retire, not the interactive door",
                t.alias()
            ),
            RetireDoor::Managed => format!(
                "\"{}\" is an interactive actor (granted at lifecycle {at}); its lifecycles \
                 retire through /interactive-lifecycle/retire, not the managed door",
                t.alias()
            ),
        })
        .into());
    }
    let row = ledger.find_row(own, &t.principal)?.map(|h| h.row);
    let current = row.as_ref().and_then(|r| r.lifecycle_uid.as_ref());
    if door == RetireDoor::Managed && current == Some(&t.uid) {
        return Err(EpError::new(
            ErrorCode::Conflict,
            format!(
                "managed agent \"{}\" is still granted at lifecycle {}; revoke the grant before \
                 retiring it",
                t.alias(),
                t.uid
            ),
        )
        .into());
    }
    let ungranted = (door == RetireDoor::Interactive && row.is_none()).then(|| t.alias());
    Ok(DoorRetirement {
        barrier: RetireLifecycle {
            owner: t.principal.owner().clone(),
            actor: t.principal.actor().clone(),
            lifecycle_uid: t.uid.clone(),
            op_id,
            guard: None,
        },
        ungranted,
    })
}

impl Retirement {
    /// A retire door's answer: `{retired, lifecycleUid}`, with `notStarted` and `alreadyRetired`
    /// only when true.
    pub fn door_json(&self) -> Value {
        let mut body =
            json!({"retired": self.retired, "lifecycleUid": self.lifecycle_uid.as_str()});
        if let Some(map) = body.as_object_mut() {
            if self.not_started {
                map.insert("notStarted".into(), true.into());
            }
            if self.already_retired {
                map.insert("alreadyRetired".into(), true.into());
            }
        }
        body
    }
}

/// What the running plane's interactive retire door did with one lifecycle, as its client (the
/// operator's `actor grant|revoke|retire`) reads the answer back, or why no door answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaneRetire {
    Retired,
    AlreadyRetired,
    NotStarted,
    /// No plane of the space answered here; the sentence says why.
    Unreached(String),
    /// The door refused; its status and sentence.
    Refused(String),
}

impl PlaneRetire {
    /// A door's answer: whether its status is a success, the status as shown (`409 Conflict`),
    /// and the body ([`Retirement::door_json`], or a refusal's `{"error"}`).
    pub fn answered(success: bool, status: &str, answer: &Value) -> PlaneRetire {
        if !success {
            return PlaneRetire::Refused(format!(
                "{status}: {}",
                answer
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ));
        }
        let flag = |name: &str| answer.get(name).and_then(Value::as_bool).unwrap_or(false);
        if flag("alreadyRetired") {
            PlaneRetire::AlreadyRetired
        } else if flag("notStarted") {
            PlaneRetire::NotStarted
        } else {
            PlaneRetire::Retired
        }
    }

    /// No plane of `space` is up here (it published no discovery file).
    pub fn not_up(space: &SpaceName) -> PlaneRetire {
        PlaneRetire::Unreached(format!("the plane of space {space} is not up here"))
    }

    /// The plane of `space` did not answer at its loopback `url`.
    pub fn unanswered(space: &SpaceName, url: &str, why: &str) -> PlaneRetire {
        PlaneRetire::Unreached(format!(
            "the plane of space {space} did not answer at {url} ({why})"
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::actors::{ActorRow, ActorsOutcome, ActorsRequest, Held};
    use crate::error::ErrorCode;

    const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const UID: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
    const OTHER: &str = "oooooooooooooooooooooooooo";

    /// A ledger holding at most one row of the alias, in `space` at `uid`.
    struct OneRow(Option<(RowSpace, &'static str)>);

    impl LedgerRead for OneRow {
        type Error = EpError;
        fn read(&mut self, request: ActorsRequest) -> Result<ActorsOutcome, EpError> {
            let ActorsRequest::Find { space, principal } = request else {
                panic!("the door reads rows by space only");
            };
            Ok(ActorsOutcome::Found(
                self.0
                    .filter(|(s, _)| *s == space)
                    .map(|(space, uid)| Held {
                        space,
                        row: ActorRow {
                            owner: principal.owner().clone(),
                            actor: principal.actor().clone(),
                            scope: Vec::new(),
                            allow_subscribe: Vec::new(),
                            allow_publish: Vec::new(),
                            role: None,
                            parent: None,
                            label: None,
                            token_hash: None,
                            lifecycle_uid: Some(LifecycleUid::parse(uid).unwrap()),
                            granted_at: "2026-12-01T00:00:00.000Z".to_owned(),
                        },
                    }),
            ))
        }
    }

    fn target() -> RetireTarget {
        RetireTarget::parse(&json!({"owner": OWNER, "actor": "cli", "lifecycleUid": UID})).unwrap()
    }

    fn admit(
        door: RetireDoor,
        row: Option<(RowSpace, &'static str)>,
    ) -> Result<DoorRetirement, EpError> {
        admit_door_retirement(&mut OneRow(row), door, &target())
    }

    fn retirement(not_started: bool) -> Retirement {
        Retirement {
            retired: !not_started,
            lifecycle_uid: LifecycleUid::parse(UID).unwrap(),
            not_started,
            already_retired: false,
        }
    }

    /// F49 and the other-kind rule: each door refuses an alias the other space grants, at any
    /// uid, naming the door that retires it.
    #[test]
    fn each_door_refuses_the_other_kinds_alias() {
        for uid in [UID, OTHER] {
            let e = admit(RetireDoor::Interactive, Some((RowSpace::Managed, uid))).unwrap_err();
            assert_eq!(e.code, ErrorCode::Conflict);
            assert!(
                e.message.contains("/managed-lifecycle/retire"),
                "{}",
                e.message
            );
            let e = admit(RetireDoor::Managed, Some((RowSpace::Interactive, uid))).unwrap_err();
            assert_eq!(e.code, ErrorCode::Conflict);
            assert!(
                e.message.contains("/interactive-lifecycle/retire"),
                "{}",
                e.message
            );
        }
    }

    /// The interactive door admits the grant's incarnation, a superseded one and a revoked
    /// one (F60: the operator's retirement is what frees the alias); only an ungranted alias
    /// with nothing at the uid answers "not granted".
    #[test]
    fn the_interactive_door_admits_current_superseded_and_revoked_incarnations() {
        for row in [
            Some((RowSpace::Interactive, UID)),
            Some((RowSpace::Interactive, OTHER)),
            None,
        ] {
            let admitted = admit(RetireDoor::Interactive, row).unwrap();
            assert_eq!(admitted.barrier.lifecycle_uid.as_str(), UID);
            assert_eq!(
                admitted.barrier.op_id,
                interactive_retirement_op_id(&admitted.barrier.lifecycle_uid).unwrap()
            );
            assert!(admitted.answer(retirement(false)).is_ok());
            let not_started = admitted.answer(retirement(true));
            match row {
                None => assert_eq!(not_started.unwrap_err().code, ErrorCode::NotFound),
                Some(_) => assert!(not_started.unwrap().not_started),
            }
        }
    }

    /// The managed door refuses its grant still at the uid and admits a successor's or none,
    /// under the one managed op id (F49).
    #[test]
    fn the_managed_door_refuses_its_grant_at_the_uid_only() {
        let e = admit(RetireDoor::Managed, Some((RowSpace::Managed, UID))).unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict);
        for row in [Some((RowSpace::Managed, OTHER)), None] {
            let admitted = admit(RetireDoor::Managed, row).unwrap();
            assert_eq!(
                admitted.barrier.op_id,
                managed_retirement_op_id(&admitted.barrier.lifecycle_uid).unwrap()
            );
            assert!(admitted.answer(retirement(true)).unwrap().not_started);
        }
    }

    /// A client's body is the door's closed object, read back as the same target.
    #[test]
    fn a_clients_body_parses_as_the_target_it_names() {
        assert_eq!(RetireTarget::parse(&target().body()).unwrap(), target());
    }

    /// The client reads every door answer back: a retirement, an already-retired or
    /// never-started one, and a refusal's status and sentence; a missing plane or face is
    /// unreached, said with the space and the door's URL.
    #[test]
    fn a_client_reads_the_doors_answer_back() {
        let ok = |r: &Retirement| PlaneRetire::answered(true, "200 OK", &r.door_json());
        assert_eq!(ok(&retirement(false)), PlaneRetire::Retired);
        assert_eq!(ok(&retirement(true)), PlaneRetire::NotStarted);
        let already = Retirement {
            already_retired: true,
            ..retirement(false)
        };
        assert_eq!(ok(&already), PlaneRetire::AlreadyRetired);
        let refused = json!({"error": "managed agent \"u_a/cli\" is still granted"});
        assert_eq!(
            PlaneRetire::answered(false, "409 Conflict", &refused),
            PlaneRetire::Refused("409 Conflict: managed agent \"u_a/cli\" is still granted".into())
        );
        assert_eq!(
            PlaneRetire::answered(false, "500 Internal Server Error", &json!({})),
            PlaneRetire::Refused("500 Internal Server Error: ".into())
        );
        let space = SpaceName::parse("demo").unwrap();
        assert_eq!(
            PlaneRetire::not_up(&space),
            PlaneRetire::Unreached("the plane of space demo is not up here".into())
        );
        assert_eq!(
            PlaneRetire::unanswered(&space, "http://127.0.0.1:9", "refused"),
            PlaneRetire::Unreached(
                "the plane of space demo did not answer at http://127.0.0.1:9 (refused)".into()
            )
        );
    }
}
