//! The two loopback lifecycle-retirement doors (reference §3.9): `/interactive-lifecycle/retire`
//! for an operator-granted actor and `/managed-lifecycle/retire` for a managed agent whose
//! manager is gone. Both run `core::lifecycle::RetireLifecycle` — the terminal barrier: freeze,
//! revoke the family, evict and verify, frontier, retire — on the plane's barrier connection,
//! under the op id the reference derives from the uid, so a crashed retirement is finished by
//! asking again. Retiring the live incarnation is what lets a re-granted actor exchange again.

use cotal_core::actors::{ActorLedger, ActorsOutcome, ActorsRequest, RowSpace};
use cotal_core::error::{EpError, ErrorCode};
use cotal_core::lifecycle::{
    interactive_retirement_op_id, managed_retirement_op_id, RetireLifecycle, Retirement,
};
use cotal_core::names::{ActorToken, DerivedOwner, LifecycleUid, Principal};
use cotal_io_fs::FileActors;
use cotal_io_http::face::{Answer, Door, DoorRequest};
use serde_json::{json, Map, Value};

use super::metrics::PlaneMetrics;
use super::retirement::{Entry, Retirements};
use crate::audit;

/// The retirement doors' dependencies.
pub(super) struct RetireDoors {
    pub(super) ledger: FileActors,
    pub(super) retirements: std::sync::Arc<Retirements>,
    pub(super) metrics: std::sync::Arc<PlaneMetrics>,
}

impl std::fmt::Debug for RetireDoors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetireDoors").finish_non_exhaustive()
    }
}

/// The closed body both doors take.
struct Target {
    principal: Principal,
    uid: LifecycleUid,
}

/// `{owner, actor, lifecycleUid}`, closed; every shape or grammar failure is a 400 naming it.
fn target(body: &Value) -> Result<Target, String> {
    let Value::Object(map) = body else {
        return Err("the body must be an object {owner, actor, lifecycleUid}".to_owned());
    };
    if let Some(extra) = map
        .keys()
        .find(|k| !["owner", "actor", "lifecycleUid"].contains(&k.as_str()))
    {
        return Err(format!("unknown field {extra:?}"));
    }
    let text = |map: &Map<String, Value>, key: &str| {
        map.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("{key} must be a string"))
    };
    let owner = DerivedOwner::parse(&text(map, "owner")?).map_err(|e| e.message)?;
    let actor = ActorToken::parse(&text(map, "actor")?).map_err(|e| e.message)?;
    let uid = LifecycleUid::parse(&text(map, "lifecycleUid")?).map_err(|e| e.message)?;
    Ok(Target {
        principal: Principal::new(owner.into_owner(), actor),
        uid,
    })
}

impl RetireDoors {
    pub(super) async fn answer(&self, request: &DoorRequest) -> Answer {
        let target = match target(&request.body) {
            Ok(target) => target,
            Err(why) => return Answer::bad_request(why),
        };
        let door = request.door;
        let outcome = match door {
            Door::InteractiveRetire => self.interactive(&target).await,
            _ => self.managed(&target).await,
        };
        let row = format!("lifecycle.{}", target.principal.key());
        match outcome {
            Ok(done) => {
                self.metrics.decided("retire", None);
                audit::granted("host", door.path(), &row, audit::At::default());
                let mut body =
                    json!({"retired": done.retired, "lifecycleUid": done.lifecycle_uid.as_str()});
                if let Some(map) = body.as_object_mut() {
                    if done.not_started {
                        map.insert("notStarted".into(), true.into());
                    }
                    if done.already_retired {
                        map.insert("alreadyRetired".into(), true.into());
                    }
                }
                Answer::ok(body)
            }
            Err(e) => {
                self.metrics.decided("retire", Some(e.code));
                audit::refused("host", door.path(), &row, &e);
                Answer::refusal(door, &e)
            }
        }
    }

    /// The interactive door: the actor's grant must exist and be at this uid (a grant at
    /// another uid is a later incarnation, which this door must not retire).
    async fn interactive(&self, t: &Target) -> Result<Retirement, EpError> {
        let row = self.find(RowSpace::Interactive, &t.principal)?;
        let Some(row) = row else {
            return Err(EpError::new(
                ErrorCode::NotFound,
                format!(
                    "interactive actor \"{}/{}\" is not granted",
                    t.principal.owner(),
                    t.principal.actor()
                ),
            ));
        };
        if row.lifecycle_uid.as_ref() != Some(&t.uid) {
            return Err(EpError::new(
                ErrorCode::Conflict,
                format!(
                    "interactive actor \"{}/{}\" is current at lifecycle {}, not {}",
                    t.principal.owner(),
                    t.principal.actor(),
                    row.lifecycle_uid.as_ref().map_or("-", LifecycleUid::as_str),
                    t.uid
                ),
            ));
        }
        self.retire(t, interactive_retirement_op_id(&t.uid)?).await
    }

    /// The managed door: a managed row still at this uid blocks (revoke the grant first); a row
    /// at another uid is a successor and does not.
    async fn managed(&self, t: &Target) -> Result<Retirement, EpError> {
        if let Some(row) = self.find(RowSpace::Managed, &t.principal)? {
            if row.lifecycle_uid.as_ref() == Some(&t.uid) {
                return Err(EpError::new(
                    ErrorCode::Conflict,
                    format!(
                        "managed agent \"{}/{}\" is still granted at lifecycle {}; revoke the \
                         grant before retiring it",
                        t.principal.owner(),
                        t.principal.actor(),
                        t.uid
                    ),
                ));
            }
        }
        self.retire(t, managed_retirement_op_id(&t.uid)?).await
    }

    fn find(
        &self,
        space: RowSpace,
        principal: &Principal,
    ) -> Result<Option<cotal_core::actors::ActorRow>, EpError> {
        match self.ledger.execute(&ActorsRequest::Find {
            space,
            principal: principal.clone(),
        }) {
            ActorsOutcome::Found(held) => Ok(held.map(|h| h.row)),
            ActorsOutcome::Unavailable(why) => Err(EpError::unavailable(why)),
            ActorsOutcome::Refused(why) | ActorsOutcome::Corrupt(why) => {
                Err(EpError::failed_precondition(why))
            }
            other => Err(EpError::internal(format!(
                "the actor ledger answered {other:?} to a find"
            ))),
        }
    }

    /// The barrier under `op_id`, run or joined in the plane's one flight for it: the managed
    /// door and the control rail share the managed op id, so they run one barrier (F49).
    async fn retire(
        &self,
        t: &Target,
        op_id: cotal_core::names::OpId,
    ) -> Result<Retirement, EpError> {
        let barrier = RetireLifecycle {
            owner: t.principal.owner().clone(),
            actor: t.principal.actor().clone(),
            lifecycle_uid: t.uid.clone(),
            op_id,
            guard: None,
        };
        let ran = self.retirements.retire(barrier, Entry::Door).await?;
        Ok(ran.retirement)
    }
}
