//! The manager-service route's operations as data (reference §3.7): for each parsed
//! [`ManagerServiceRequest`], the core operation it runs and what the adapter must attach to
//! run it, so the daemon's dispatch is one arm per connection set instead of one per kind.
//!
//! Each operation's result is carried as its wire JSON text (the result types' own
//! `to_json`), so every kind that runs on the same connections is one variant: the daemon
//! wires connections and answers; which script a kind is, and how its result is written, is
//! decided here.

use crate::actors::{AliasScript, LockHeld};
use crate::enrollment::{EnrollManagedAgent, EnrollmentRequest, PrepareManagedRetirement};
use crate::error::EpError;
use crate::liveness::EvictionEvidence;
use crate::machine::{Ctx, Halt, Script};
use crate::manager::{
    AuthorizeGoalIndexScan, AuthorizeMaintenance, AuthorizeManagerAdmin, GoalIndexScanRequest,
    MaintenanceRequest, ManagerHost, ScanGoalIndex, Supervisor, ValidateRetainedAgent,
};
use crate::manager_route::ManagerServiceRequest;
use crate::names::{OwnerToken, Principal};
use crate::reconcile::ReconcileReport;
use crate::renewal::ManagerAuthority;
use crate::run::{
    run_endpoint, AuthorizeRunAdmission, AuthorizeRunAttempt, RunAdmissionRequest,
    RunAttemptRequest,
};
use serde_json::Value;

/// A result's wire JSON text as a value for the answer; text that is not JSON is a fault of the
/// operation's writer (`internal`), never the caller's.
pub fn json_value(text: &str) -> Result<Value, EpError> {
    serde_json::from_str(text)
        .map_err(|e| EpError::internal(format!("the operation's result is not JSON: {e}")))
}

/// A script whose result is its wire JSON, as a value for the answer.
pub struct JsonScript(Box<dyn Script<Output = Value> + Send>);

impl std::fmt::Debug for JsonScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonScript").finish_non_exhaustive()
    }
}

impl Script for JsonScript {
    type Output = Value;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Value, Halt> {
        self.0.run(cx)
    }
}

/// An alias-serialized script whose result is its wire JSON, as a value for the answer.
pub struct JsonAliasScript(Box<dyn AliasScript<Output = Value> + Send>);

impl std::fmt::Debug for JsonAliasScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonAliasScript").finish_non_exhaustive()
    }
}

impl AliasScript for JsonAliasScript {
    type Output = Value;
    fn alias(&self) -> Principal {
        self.0.alias()
    }
    fn run_held(&self, cx: &mut Ctx<'_>, held: LockHeld<'_>) -> Result<Value, Halt> {
        self.0.run_held(cx, held)
    }
}

/// A script with the writer of its result's wire JSON.
struct Written<S, O> {
    script: S,
    write: fn(&O) -> String,
}

impl<S: Script> Script for Written<S, S::Output> {
    type Output = Value;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Value, Halt> {
        let out = self.script.run(cx)?;
        Ok(json_value(&(self.write)(&out))?)
    }
}

impl<S: AliasScript> AliasScript for Written<S, S::Output> {
    type Output = Value;
    fn alias(&self) -> Principal {
        self.script.alias()
    }
    fn run_held(&self, cx: &mut Ctx<'_>, held: LockHeld<'_>) -> Result<Value, Halt> {
        let out = self.script.run_held(cx, held)?;
        Ok(json_value(&(self.write)(&out))?)
    }
}

fn written<S: Script + Send + 'static>(script: S, write: fn(&S::Output) -> String) -> JsonScript {
    JsonScript(Box::new(Written { script, write }))
}

fn written_alias<S: AliasScript + Send + 'static>(
    script: S,
    write: fn(&S::Output) -> String,
) -> JsonAliasScript {
    JsonAliasScript(Box::new(Written { script, write }))
}

/// What one parsed request runs, and on what.
#[derive(Debug)]
pub enum Operation {
    /// Managed-agent enrollment (reference §6.3): under the alias lock with the ledger and the
    /// broker's durables, once the adapter drew the fresh uid's entropy ([`Enrollment::with`]).
    Enroll(Enrollment),
    /// Under the alias lock, on the issuer with the ledger and the broker's durables (§6.6).
    Serialized(JsonAliasScript),
    /// On the issuer connection with the host's actor ledger attached, read fresh.
    WithLedger(JsonScript),
    /// On the issuer connection alone.
    OnIssuer(JsonScript),
    /// `manager-run-admission` (§5.3), in the run phases the adapter gathers inputs between.
    RunAdmission(Run<RunAdmissionRequest>),
    /// `manager-run-attempt` (§5.5), likewise.
    RunAttempt(Run<RunAttemptRequest>),
    /// `manager-service-maintenance`: the door, then an eviction or a reconcile.
    Maintenance(Maintenance),
    /// `manager-goal-index-scan`: the door on the issuer, then the scan on the records scanner.
    GoalIndexScan(GoalIndex),
}

/// An enrollment waiting for the host's entropy (used only when nothing is enrolled yet).
#[derive(Debug)]
pub struct Enrollment {
    host: ManagerHost,
    caller: Supervisor,
    request: EnrollmentRequest,
    now_ms: u64,
}

impl Enrollment {
    /// The enrollment with the fresh uid's entropy drawn by the adapter.
    pub fn with(self, fresh_uid_entropy: [u8; 20]) -> JsonAliasScript {
        let enroll = EnrollManagedAgent {
            host: self.host,
            caller: self.caller,
            request: self.request,
            fresh_uid_entropy,
            now_ms: self.now_ms,
        };
        written_alias(enroll, |result| result.to_json())
    }
}

/// A run kind with the host and holder its phases authenticate.
#[derive(Debug)]
pub struct Run<R> {
    pub host: ManagerHost,
    pub holder: Supervisor,
    pub request: R,
}

impl Run<RunAdmissionRequest> {
    /// Phase one of `manager-run-admission` (§5.3) at [`run_endpoint`], and the request its
    /// result echoes (F88).
    pub fn authorize(self) -> Result<(AuthorizeRunAdmission, RunAdmissionRequest), EpError> {
        let authorize = AuthorizeRunAdmission {
            request: self.request.clone(),
            host: self.host,
            holder: self.holder,
            endpoint: run_endpoint()?,
        };
        Ok((authorize, self.request))
    }
}

impl Run<RunAttemptRequest> {
    /// Phase one of `manager-run-attempt` (§5.5) at [`run_endpoint`], the request its signed
    /// credentials answer, and the holder's owner they are signed for (F84, F87, F88).
    pub fn authorize(
        self,
    ) -> Result<(AuthorizeRunAttempt, RunAttemptRequest, OwnerToken), EpError> {
        let owner = self.holder.owner().clone();
        let authorize = AuthorizeRunAttempt {
            request: self.request.clone(),
            host: self.host,
            holder: self.holder,
            endpoint: run_endpoint()?,
        };
        Ok((authorize, self.request, owner))
    }
}

/// The maintenance door, and what its answer echoes.
#[derive(Debug)]
pub struct Maintenance {
    pub authorize: AuthorizeMaintenance,
    pub echo: MaintenanceEcho,
}

/// What a maintenance answer echoes: the request, for the authenticated owner.
#[derive(Debug)]
pub struct MaintenanceEcho {
    pub owner: OwnerToken,
    pub request: MaintenanceRequest,
}

/// What the maintenance door's plan came to: the eviction's evidence, or the reconcile's report.
#[derive(Debug)]
pub enum Maintained {
    Evicted(Vec<EvictionEvidence>),
    Reconciled(Box<ReconcileReport>),
}

impl MaintenanceEcho {
    /// The answer, echoing the request for the authenticated owner: an eviction answered from
    /// its evidence (refused when a holder was not verified gone, F68), a reconcile with the
    /// reference's report.
    pub fn answer(&self, done: Maintained) -> Result<Value, EpError> {
        let answer = match done {
            Maintained::Evicted(evidence) => {
                self.request.eviction_answer(&self.owner, &evidence)?
            }
            Maintained::Reconciled(report) => self
                .request
                .reconcile_answer(&self.owner, &report.to_reference_json()),
        };
        json_value(&answer)
    }
}

/// The host as a request is served: with the public face's exchange URL once that face is bound
/// (enrolled agents exchange their secrets there).
pub fn served_host(host: &ManagerHost, public_exchange: Option<&String>) -> ManagerHost {
    let mut host = host.clone();
    if let Some(url) = public_exchange {
        host.agents.agent_bearer_exchange_url = url.clone();
    }
    host
}

/// The goal-index scan's door and the scan it authorizes (reference §4.7).
#[derive(Debug)]
pub struct GoalIndex {
    pub authorize: AuthorizeGoalIndexScan,
    pub scan: JsonScript,
}

impl ManagerServiceRequest {
    /// The operation this request runs for `holder` under `host` at `now_ms`: the one
    /// per-kind table of the route (each kind's script and where it runs).
    pub fn operation(self, host: ManagerHost, holder: Supervisor, now_ms: u64) -> Operation {
        match self {
            ManagerServiceRequest::Enrollment(request) => Operation::Enroll(Enrollment {
                host,
                caller: holder,
                request,
                now_ms,
            }),
            ManagerServiceRequest::PrepareRetirement(request) => {
                let prepare = PrepareManagedRetirement {
                    host,
                    caller: holder,
                    request,
                };
                Operation::Serialized(written_alias(prepare, |r| r.to_json()))
            }
            ManagerServiceRequest::RunAdmission(request) => Operation::RunAdmission(Run {
                host,
                holder,
                request,
            }),
            ManagerServiceRequest::RunAttempt(request) => Operation::RunAttempt(Run {
                host,
                holder,
                request,
            }),
            ManagerServiceRequest::Maintenance(request) => Operation::Maintenance(Maintenance {
                echo: MaintenanceEcho {
                    owner: holder.owner().clone(),
                    request: request.clone(),
                },
                authorize: AuthorizeMaintenance {
                    host,
                    caller: holder,
                    request,
                },
            }),
            ManagerServiceRequest::RetainedValidation(request) => {
                let validate = ValidateRetainedAgent {
                    host,
                    caller: holder,
                    request,
                };
                Operation::WithLedger(written(validate, |r| r.to_json()))
            }
            ManagerServiceRequest::AdminAuthorization(request) => {
                let authorize = AuthorizeManagerAdmin {
                    host,
                    holder,
                    request,
                };
                Operation::WithLedger(written(authorize, |r| r.to_json()))
            }
            ManagerServiceRequest::GoalIndexScan(request) => {
                Operation::GoalIndexScan(GoalIndex::new(host, holder, request))
            }
            ManagerServiceRequest::Authority(request) => {
                let call = ManagerAuthority::new(host, holder, request, now_ms);
                Operation::OnIssuer(written(call, |material| material.to_json()))
            }
        }
    }
}

impl GoalIndex {
    fn new(host: ManagerHost, caller: Supervisor, request: GoalIndexScanRequest) -> GoalIndex {
        let owner = caller.owner().clone();
        GoalIndex {
            authorize: AuthorizeGoalIndexScan {
                host,
                caller,
                request: request.clone(),
            },
            scan: written(ScanGoalIndex { owner, request }, |scan| scan.to_json()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{drive, ModelWorld};
    use crate::error::ErrorCode;
    use crate::kv::model::KvModel;
    use crate::machine::{script, Replay};

    fn run(script: JsonScript) -> Result<Value, EpError> {
        drive(
            &mut Replay::new(script),
            &mut ModelWorld::new(KvModel::new()),
        )
    }

    fn host() -> ManagerHost {
        let key = nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::Account, [7; 32]).unwrap();
        ManagerHost {
            space: crate::names::SpaceName::parse("s1").unwrap(),
            account: crate::manager::AccountKey::parse(&key.public_key()).unwrap(),
            signer: std::sync::Arc::new(key),
            proof_secret: crate::manager::ProofSecret::new("secret"),
            standing_ttl: crate::profiles::StandingTtl::DEFAULT,
            agents: crate::manager::AgentOnboarding {
                sentinel_creds: String::new(),
                agent_bearer_exchange_url: String::new(),
            },
        }
    }

    #[test]
    fn a_request_is_served_with_the_public_exchange_once_bound() {
        let unbound = served_host(&host(), None);
        assert_eq!(unbound.agents.agent_bearer_exchange_url, "");
        let url = "https://auth.example/exchange".to_owned();
        let bound = served_host(&host(), Some(&url));
        assert_eq!(bound.agents.agent_bearer_exchange_url, url);
        assert_eq!(bound.space, host().space);
    }

    #[test]
    fn a_result_is_answered_as_the_json_its_writer_wrote() {
        let answered = run(written(script(|_| Ok(7_u64)), |n| format!("{{\"n\":{n}}}")));
        assert_eq!(answered.unwrap(), serde_json::json!({"n": 7}));
    }

    #[test]
    fn a_writer_that_writes_no_json_is_internal() {
        let e = run(written(script(|_| Ok(())), |_| "not json".to_owned())).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(e
            .message
            .starts_with("the operation's result is not JSON: "));
    }

    #[test]
    fn a_refusal_passes_through_unwritten() {
        let refused = written(
            script(|_| -> Result<(), Halt> { Err(EpError::permission_denied("no").into()) }),
            |_| unreachable!("a refused script writes nothing"),
        );
        let e = run(refused).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (ErrorCode::PermissionDenied, "no")
        );
    }
}
