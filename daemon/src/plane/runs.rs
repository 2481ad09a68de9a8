//! The run kinds of the manager-service authority route (reference §5, SPEC §14.8):
//! `manager-run-admission` and `manager-run-attempt`, each in the core's phases with the
//! adapter's inputs gathered between them exactly where the reference gathers them — the one
//! observation of the served subject taken after the manager and its forward are
//! authenticated, the caller's issued evidence resolved on the issuing connection against this
//! plane's actor ledger, and (for an answer) the pause read from the run's own journal.

use std::sync::Arc;

use crate::ledger::Ledger;
use cotal_core::error::EpError;
use cotal_core::issued::{IssuedEvidence, ResolveIssued};
use cotal_core::jwt::UnixSeconds;
use cotal_core::machine::Script;
use cotal_core::manager_ops::Run;
use cotal_core::names::SpaceName;
use cotal_core::run::{
    run_endpoint, sign_attempt, AdmitRun, AuthorizedAttempt, JournalCheckpoint, OperatorAnswers,
    RequestSubject, RunAdmissionRequest, RunAttemptRequest, ServedCall, ServedInputs,
};
use cotal_core::trust::DaemonMaterial;
use cotal_io_nats::async_nats::jetstream;
use cotal_io_nats::journal::read_journal_checkpoint;
use cotal_io_nats::observed::RunRequestObserver;
use cotal_io_nats::{NatsWorld, RunJournals};
use serde_json::Value;

use super::connections::PlaneLink;

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
        NatsWorld::new(&bound).run_script(script).await
    }

    /// The issued evidence a served subject's caller presents (core names it: F79), resolved
    /// with live-source checking against this plane's actor ledger.
    async fn evidence(&self, subject: &RequestSubject) -> Result<IssuedEvidence, EpError> {
        let reference = subject.issued_ref(&self.space)?;
        let bound = self.connections.get()?.issuer.space()?;
        let now_secs = crate::clock::now_secs();
        NatsWorld::new(&bound)
            .with_actors(self.ledger.port())
            .run_script(ResolveIssued {
                reference,
                now_secs,
            })
            .await
    }

    /// `manager-run-admission` (§5.3): authenticate the manager and its forward, take the one
    /// observation of the forwarded run-start, resolve its caller's issuance, then create the
    /// admission create-only. Keeps F88.
    pub(super) async fn admit(&self, run: Run<RunAdmissionRequest>) -> Result<Value, EpError> {
        let (authorize, request) = run.authorize()?;
        let authorized = self.on_issuer(authorize).await?;
        let observed = self.observed.take(authorized.subject()).await;
        let evidence = self.evidence(authorized.caller()).await;
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
    pub(super) async fn attempt(&self, run: Run<RunAttemptRequest>) -> Result<Value, EpError> {
        let (authorize, request, owner) = run.authorize()?;
        let authorized = self.on_issuer(authorize).await?;
        let decision = match authorized {
            AuthorizedAttempt::Plain(plain) => self.on_issuer(plain.issue()).await?,
            AuthorizedAttempt::Served(served) => {
                let inputs = self.served_inputs(served.call()).await;
                self.on_issuer(served.issue(inputs)).await?
            }
            AuthorizedAttempt::Answering(answering) => {
                let inputs = self.served_inputs(answering.call()).await;
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
        read_journal_checkpoint(&journals, &bound, &run_endpoint()?, answers).await
    }

    /// The one observation of a served subject and its caller's evidence.
    async fn served_inputs(&self, call: &ServedCall) -> ServedInputs {
        ServedInputs {
            observed: self.observed.take(call.served()).await,
            evidence: self.evidence(call.subject()).await,
        }
    }
}
