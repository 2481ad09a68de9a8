//! The run kinds of the manager-service authority route (reference §5, SPEC §14.8):
//! `manager-run-admission` and `manager-run-attempt`, each in the core's phases with the
//! adapter's inputs gathered between them exactly where the reference gathers them — the one
//! observation of the served subject taken after the manager and its forward are
//! authenticated, the caller's issued evidence resolved on the issuing connection against this
//! plane's actor ledger, and (for an answer) the pause read from the run's own journal.

use std::sync::Arc;

use crate::ledger::Ledger;
use cotal_core::error::EpError;
use cotal_core::issued::{IssuedEvidence, IssuedRef, ResolveIssued};
use cotal_core::jwt::UnixSeconds;
use cotal_core::machine::{Replay, Script};
use cotal_core::manager::{ManagerHost, Supervisor};
use cotal_core::names::{EndpointName, SpaceName};
use cotal_core::run::{
    parse_request_subject, sign_attempt, AdmitRun, AuthorizeRunAdmission, AuthorizeRunAttempt,
    AuthorizedAttempt, JournalCheckpoint, OperatorAnswers, RequestSubject, RunAdmissionRequest,
    RunAttemptRequest, ServedInputs,
};
use cotal_core::trust::DaemonMaterial;
use cotal_io_nats::async_nats::jetstream;
use cotal_io_nats::journal::read_journal_checkpoint;
use cotal_io_nats::observed::RunRequestObserver;
use cotal_io_nats::{NatsWorld, RunJournals};
use serde_json::Value;

use super::connections::PlaneLink;

/// The endpoint whose runs this plane admits: the remote manager's.
const RUN_ENDPOINT: &str = "manager";

/// What the run kinds need, built once per plane.
pub(super) struct Runs {
    pub(super) space: SpaceName,
    pub(super) material: DaemonMaterial,
    pub(super) ledger: Ledger,
    pub(super) connections: PlaneLink,
    /// What callers published on the served run request subjects (SPEC 14.8).
    pub(super) observed: Arc<RunRequestObserver>,
}

impl std::fmt::Debug for Runs {
    // The material holds secrets: only the space is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runs")
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

impl Runs {
    /// Runs one core phase on the plane's issuing connection.
    async fn on_issuer<S: Script>(&self, script: S) -> Result<S::Output, EpError> {
        let bound = self.connections.get()?.issuer.space()?;
        NatsWorld::new(&bound).run(&mut Replay::new(script)).await
    }

    /// The issued evidence a served subject's caller presents, resolved with live-source
    /// checking (F79) against this plane's actor ledger; a legacy-rail subject names none.
    async fn evidence(&self, subject: &RequestSubject) -> Result<IssuedEvidence, EpError> {
        let generation = subject.generation.clone().ok_or_else(|| {
            EpError::permission_denied("the request rode the legacy rail: no issued authority")
        })?;
        let reference = IssuedRef {
            space: self.space.clone(),
            owner: subject.owner.clone(),
            actor: subject.actor.clone(),
            uid: subject.uid.clone(),
            generation,
        };
        let bound = self.connections.get()?.issuer.space()?;
        NatsWorld::new(&bound)
            .with_actors(self.ledger.port())
            .run(&mut Replay::new(ResolveIssued {
                reference,
                now_secs: crate::clock::now_secs(),
            }))
            .await
    }

    fn endpoint() -> Result<EndpointName, EpError> {
        EndpointName::parse(RUN_ENDPOINT).map_err(EpError::stored)
    }

    /// `manager-run-admission` (§5.3): authenticate the manager and its forward, take the one
    /// observation of the forwarded run-start, resolve its caller's issuance, then create the
    /// admission create-only. Keeps F88.
    pub(super) async fn admit(
        &self,
        host: ManagerHost,
        holder: Supervisor,
        request: RunAdmissionRequest,
    ) -> Result<Value, EpError> {
        let authorized = self
            .on_issuer(AuthorizeRunAdmission {
                request: request.clone(),
                host,
                holder,
                endpoint: Self::endpoint()?,
            })
            .await?;
        let observed = self.observed.take(authorized.subject()).await;
        let evidence = match parse_request_subject(authorized.subject()) {
            Some(subject) => self.evidence(&subject).await,
            None => Err(EpError::internal(
                "an authorized run-start subject stopped parsing",
            )),
        };
        let outcome = self
            .on_issuer(AdmitRun {
                authorized,
                observed,
                evidence,
                admitted_at: crate::clock::now_ms(),
            })
            .await?;
        Ok(outcome.to_result(&request))
    }

    /// `manager-run-attempt` (§5.5): authenticate, then issue with what the authorized kind
    /// still needs — nothing for a plain attempt or a read operator; the observation and the
    /// caller's evidence for a served resume; those and the journal's pause for an answer —
    /// and sign the granted credentials for the manager's held nkeys. Keeps F84, F87, F88.
    pub(super) async fn attempt(
        &self,
        host: ManagerHost,
        holder: Supervisor,
        request: RunAttemptRequest,
    ) -> Result<Value, EpError> {
        let owner = holder.owner().clone();
        let authorized = self
            .on_issuer(AuthorizeRunAttempt {
                request: request.clone(),
                host,
                holder,
                endpoint: Self::endpoint()?,
            })
            .await?;
        let decision = match authorized {
            AuthorizedAttempt::Plain(plain) => self.on_issuer(plain.issue()).await?,
            AuthorizedAttempt::Served(served) => {
                let inputs = self.served_inputs(served.call().served(), served.call().subject());
                let inputs = inputs.await;
                self.on_issuer(served.issue(inputs)).await?
            }
            AuthorizedAttempt::Answering(answering) => {
                let inputs = self
                    .served_inputs(answering.call().served(), answering.call().subject())
                    .await;
                let checkpoint = self.checkpoint(answering.answers()).await;
                self.on_issuer(answering.issue(inputs, checkpoint)).await?
            }
        };
        sign_attempt(
            &request,
            &owner,
            &decision,
            self.material.data_signing_key(),
            UnixSeconds(crate::clock::now_secs()),
        )
    }

    /// The pause an answer settles, read from the run's own journal and the pause's status
    /// record on the issuing connection — never from the request.
    async fn checkpoint(
        &self,
        answers: &OperatorAnswers,
    ) -> Result<Option<JournalCheckpoint>, EpError> {
        let bound = self.connections.get()?.issuer.space()?;
        let journals = RunJournals::new(jetstream::new(bound.client().clone()), self.space.clone());
        read_journal_checkpoint(&journals, &bound, &Self::endpoint()?, answers).await
    }

    /// The one observation of a served subject and its caller's evidence.
    async fn served_inputs(&self, served: &str, subject: &RequestSubject) -> ServedInputs {
        ServedInputs {
            observed: self.observed.take(served).await,
            evidence: self.evidence(subject).await,
        }
    }
}
