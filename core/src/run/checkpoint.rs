//! The pause an answering run operator settles (reference-auth-service §5.5 item 4, SPEC §14.8).
//! Its token comes from the run's own journal, never from the request: every manager instance's
//! pauses share one token namespace, so a token the manager named could be another run's. The
//! journal is a JetStream stream core does not model: the adapter reads the run's journal
//! subject and [`super::ReadJournalCheckpoint`] folds it to the step's pause and reads the
//! pause's status record, handing the result in as [`JournalCheckpoint`].

use std::fmt;

use crate::error::EpError;
use crate::profiles::CheckpointToken;

use super::request::OperatorAnswers;

/// The id of an accepted answer a settled pause names: non-empty, at most 256 bytes, no
/// whitespace or control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AnswerId(String);

impl AnswerId {
    pub fn parse(s: &str) -> Option<AnswerId> {
        let ok =
            (1..=256).contains(&s.len()) && !s.chars().any(|c| c.is_whitespace() || c.is_control());
        ok.then(|| AnswerId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AnswerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a journal-recorded pause stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointState {
    /// Open: no answer settled it yet.
    Waiting,
    /// Settled by a resume; `answer_id` names the accepted answer when the resume named one.
    Resumed { answer_id: Option<AnswerId> },
    /// Settled by its deadline: an expiry accepts no answer, so there is nothing to amend.
    Expired,
}

/// The latest checkpoint the run's journal records at one step, as the adapter read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalCheckpoint {
    pub step_key: String,
    pub token: CheckpointToken,
    pub state: CheckpointState,
}

/// The token of the pause `answers` settles (§5.5 item 4): an answer needs the step's checkpoint
/// `waiting` ("…has no open checkpoint…"), an amendment needs it `resumed` with an accepted
/// answer ("…is not amendable…"); both refusals are `failed-precondition`. `view` is the
/// adapter's journal read (its failure passes through); a view of another step is an adapter
/// bug, `internal`.
pub fn pause_token(
    view: &Result<Option<JournalCheckpoint>, EpError>,
    answers: &OperatorAnswers,
) -> Result<CheckpointToken, EpError> {
    let (run, step) = (answers.run_id.as_str(), answers.step_key.as_str());
    let view = view.as_ref().map_err(Clone::clone)?;
    if let Some(cp) = view.as_ref().filter(|cp| cp.step_key != answers.step_key) {
        return Err(EpError::internal(format!(
            "the journal checkpoint read for run {run} names step {:?}, not the answered step",
            cp.step_key
        )));
    }
    let state = view.as_ref().map(|cp| &cp.state);
    match (answers.amend, state, view) {
        (false, Some(CheckpointState::Waiting), Some(cp)) => Ok(cp.token.clone()),
        (false, state, _) => {
            Err(EpError::failed_precondition(format!(
            "run {run} has no open checkpoint at step {step:?}{}; a run operator answers only a \
             checkpoint that is still waiting",
            if state.is_some() { " (it already settled)" } else { "" }
        )))
        }
        (true, Some(CheckpointState::Resumed { answer_id: Some(_) }), Some(cp)) => {
            Ok(cp.token.clone())
        }
        (true, state, _) => Err(EpError::failed_precondition(format!(
            "run {run} checkpoint at step {step:?} is not amendable: {}; a run operator amends \
             only a checkpoint whose answer was accepted",
            match state {
                None => "the journal records no checkpoint there",
                Some(CheckpointState::Waiting) => "it is still waiting, so answer it instead",
                Some(CheckpointState::Resumed { .. }) => "it settled without an accepted answer",
                Some(CheckpointState::Expired) => "it expired, and an expiry accepts no answer",
            }
        ))),
    }
}
