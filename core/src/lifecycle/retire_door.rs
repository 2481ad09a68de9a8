//! The two loopback retire doors (reference §3.9) up to their barrier: the closed body, the
//! grant-at-uid pre-check each door makes against the host's actor ledger, the barrier it then
//! runs under the op id the reference derives from the uid, and the answer's bytes.
//!
//! `/interactive-lifecycle/retire` retires an operator-granted actor's incarnation, and only
//! while the grant is at that uid (a grant at another uid is a later incarnation). The
//! `/managed-lifecycle/retire` door retires a managed agent whose manager is gone, refused while
//! the managed grant is still at that uid (revoke it first); a row at another uid is a
//! successor and does not block.

use serde_json::{json, Value};

use crate::actors::{LedgerRead, RowSpace};
use crate::error::{EpError, ErrorCode};
use crate::names::{ActorToken, DerivedOwner, LifecycleUid, Principal};
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

    /// The alias row the audit line names.
    pub fn row(&self) -> String {
        format!("lifecycle.{}", self.principal.key())
    }

    fn alias(&self) -> String {
        format!("{}/{}", self.principal.owner(), self.principal.actor())
    }
}

/// The door's pre-check against a fresh ledger read, then the barrier it runs (F49: one op id
/// per uid and door kind, so asking again resumes a crashed retirement).
pub fn admit_door_retirement<L: LedgerRead>(
    ledger: &mut L,
    door: RetireDoor,
    t: &RetireTarget,
) -> Result<RetireLifecycle, L::Error> {
    let (space, op_id) = match door {
        RetireDoor::Interactive => (RowSpace::Interactive, interactive_retirement_op_id(&t.uid)?),
        RetireDoor::Managed => (RowSpace::Managed, managed_retirement_op_id(&t.uid)?),
    };
    let row = ledger.find_row(space, &t.principal)?.map(|h| h.row);
    let current = row.as_ref().and_then(|r| r.lifecycle_uid.as_ref());
    match (door, row.as_ref()) {
        (RetireDoor::Interactive, None) => {
            return Err(EpError::new(
                ErrorCode::NotFound,
                format!("interactive actor \"{}\" is not granted", t.alias()),
            )
            .into())
        }
        (RetireDoor::Interactive, Some(_)) if current != Some(&t.uid) => {
            return Err(EpError::new(
                ErrorCode::Conflict,
                format!(
                    "interactive actor \"{}\" is current at lifecycle {}, not {}",
                    t.alias(),
                    current.map_or("-", LifecycleUid::as_str),
                    t.uid
                ),
            )
            .into())
        }
        (RetireDoor::Managed, Some(_)) if current == Some(&t.uid) => {
            return Err(EpError::new(
                ErrorCode::Conflict,
                format!(
                    "managed agent \"{}\" is still granted at lifecycle {}; revoke the grant \
                     before retiring it",
                    t.alias(),
                    t.uid
                ),
            )
            .into())
        }
        _ => {}
    }
    Ok(RetireLifecycle {
        owner: t.principal.owner().clone(),
        actor: t.principal.actor().clone(),
        lifecycle_uid: t.uid.clone(),
        op_id,
        guard: None,
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
