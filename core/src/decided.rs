//! What a door records and answers once its core decision is in: who asked and the row the
//! decision was over (the audit line's subjects, one pair per door outcome), and the answers a
//! door writes from a core outcome. The adapter's recorder writes the metric, the audit line
//! and the answer; what they say is decided here, beside the decisions.

use serde_json::Value;

use crate::control_rail::RetireCall;
use crate::error::EpError;
use crate::exchange::{BearerPlan, ExchangeRefusal};
use crate::lifecycle::Ran;

/// Who asked, and the row the decision was over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audited {
    pub caller: String,
    pub row: String,
}

impl BearerPlan {
    /// A granted exchange: the ledger row's principal, over the credential row the bearer is
    /// bound to.
    pub fn audited(&self) -> Audited {
        Audited {
            caller: self.principal.key(),
            row: self.row.clone(),
        }
    }
}

impl ExchangeRefusal {
    /// A refusal before the caller is known (a token that did not verify, a read that failed).
    pub fn anonymous(error: EpError) -> ExchangeRefusal {
        ExchangeRefusal {
            caller: None,
            error,
        }
    }

    /// A refused exchange: the caller's actor row once the caller is known, else `anonymous`
    /// over no row.
    pub fn audited(&self) -> Audited {
        match &self.caller {
            Some(p) => Audited {
                caller: p.key(),
                row: format!("actor.{}", p.key()),
            },
            None => Audited {
                caller: "anonymous".to_owned(),
                row: "-".to_owned(),
            },
        }
    }
}

/// Who a rail refusal names: the caller's triple is not trusted before the call is admitted.
pub const RAIL_REFUSED_CALLER: &str = "manager";

impl RetireCall {
    /// An admitted rail retirement: the calling manager's alias over the target's head.
    pub fn audited(&self) -> Audited {
        Audited {
            caller: format!("{}.{}", self.caller.owner, self.caller.actor),
            row: format!("lifecycle.{}.{}", self.target.owner, self.target.actor),
        }
    }

    /// The rail's answer once the barrier ran (reference §2.5 step 9): the retired output with
    /// every principal it evicted, or `failed-precondition` when no incarnation at the target
    /// uid was ever current (nothing to retire, F60).
    pub fn answer(&self, ran: &Ran) -> Result<Value, EpError> {
        if ran.retirement.not_started {
            return Err(EpError::failed_precondition(format!(
                "lifecycle {} of \"{}/{}\" was never current, so there is nothing to retire",
                self.target.uid, self.target.owner, self.target.actor
            )));
        }
        Ok(self.output(&ran.evicted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bearer::BearerAct;
    use crate::error::ErrorCode;
    use crate::gate::ProcessEpoch;
    use crate::lifecycle::Retirement;
    use crate::names::{
        ActorToken, EndpointName, InstanceId, LifecycleUid, OpId, OwnerToken, Principal, SpaceName,
    };
    use crate::profiles::RailCaller;

    const UID: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn alice() -> Principal {
        Principal::new(OwnerToken::local(), ActorToken::parse("alice").unwrap())
    }

    fn triple(actor: &str) -> RailCaller {
        RailCaller {
            owner: OwnerToken::local(),
            actor: ActorToken::parse(actor).unwrap(),
            uid: LifecycleUid::parse(UID).unwrap(),
        }
    }

    fn call() -> RetireCall {
        RetireCall {
            space: SpaceName::parse("s1").unwrap(),
            caller: triple("mgr"),
            target: triple("alice"),
            nonce: "n".to_owned(),
            op_id: OpId::parse("bbbbbbbbbbbbbbbbbbbbbbbbbb").unwrap(),
            serve_endpoint: EndpointName::parse("manager").unwrap(),
            serve_instance: InstanceId::parse("cccccccccccccccccccccccccc").unwrap(),
            serve_epoch: ProcessEpoch(1),
        }
    }

    fn ran(not_started: bool) -> Ran {
        Ran {
            retirement: Retirement {
                retired: !not_started,
                lifecycle_uid: LifecycleUid::parse(UID).unwrap(),
                not_started,
                already_retired: false,
            },
            evicted: vec![alice()],
        }
    }

    #[test]
    fn an_exchange_is_audited_over_its_credential_row_or_its_callers_actor_row() {
        let plan = BearerPlan {
            principal: alice(),
            act: BearerAct::new(OwnerToken::local(), ActorToken::parse("alice").unwrap()),
            ttl_secs: 60,
            row: format!("cred.{UID}.c1"),
        };
        let audited = plan.audited();
        assert_eq!(
            (audited.caller.as_str(), audited.row.as_str()),
            ("local.alice", "cred.aaaaaaaaaaaaaaaaaaaaaaaaaa.c1")
        );
        let known = ExchangeRefusal {
            caller: Some(alice()),
            error: EpError::permission_denied("no"),
        };
        assert_eq!(
            known.audited(),
            Audited {
                caller: "local.alice".to_owned(),
                row: "actor.local.alice".to_owned()
            }
        );
        let anonymous = ExchangeRefusal::anonymous(EpError::permission_denied("no"));
        assert_eq!(
            anonymous.audited(),
            Audited {
                caller: "anonymous".to_owned(),
                row: "-".to_owned()
            }
        );
    }

    #[test]
    fn a_rail_retirement_is_audited_as_the_managers_over_the_targets_head() {
        assert_eq!(
            call().audited(),
            Audited {
                caller: "local.mgr".to_owned(),
                row: "lifecycle.local.alice".to_owned()
            }
        );
    }

    #[test]
    fn the_rail_answers_the_evicted_or_refuses_a_never_current_lifecycle() {
        let answered = call().answer(&ran(false)).unwrap();
        assert_eq!(answered, call().output(&[alice()]));
        let e = call().answer(&ran(true)).unwrap_err();
        assert_eq!(e.code, ErrorCode::FailedPrecondition);
        assert_eq!(
            e.message,
            format!("lifecycle {UID} of \"local/alice\" was never current, so there is nothing to retire")
        );
    }
}
