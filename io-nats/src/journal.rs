//! The run journal's checkpoint reader on NATS: the journal walk core cannot perform (the
//! journal is a JetStream stream, not a KV store it models), then the core's
//! [`ReadJournalCheckpoint`] on the space's records.
//!
//! A run's journal is the one subject `cotal.<space>.wfj.<runId>` of the stream `WFJ_<space>`
//! ([`journal_subject`], [`journal_stream`]). It is read by walking that subject with
//! `STREAM.MSG.GET next_by_subj`, from sequence 1, each next read starting one past the last
//! message. The stream leader serves every read (the journal stream has no Direct Get, and a
//! follower could miss the settle the answer depends on). No consumer is created, so the
//! reading connection needs only [`journal_checkpoint_rows`].
//!
//! Round trips: `n + 1` `STREAM.MSG.GET`s for a journal of `n` records (the last one finds
//! nothing), then the core script's 0 or 1 records read. A walk past
//! [`MAX_JOURNAL_RECORDS`] stops with `failed-precondition`. Every failed read is
//! `unavailable`: a journal that cannot be read is never an empty one.
//!
//! [`journal_checkpoint_rows`]: cotal_core::run::journal_checkpoint_rows

use std::sync::atomic::{AtomicU64, Ordering};

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::Context;
use cotal_core::journal::RunId;
use cotal_core::machine::Replay;
use cotal_core::names::{EndpointName, SpaceName};
use cotal_core::run::{
    journal_stream, journal_subject, JournalCheckpoint, JournalMessage, OperatorAnswers,
    ReadJournalCheckpoint, MAX_JOURNAL_RECORDS,
};
use cotal_core::EpError;

use crate::driver::drive;
use crate::space::Space;

/// Reads the run journals of one space on one connection.
#[derive(Debug)]
pub struct RunJournals {
    js: Context,
    space: SpaceName,
    round_trips: AtomicU64,
}

impl RunJournals {
    /// Journals of `space` read on `js`, whose timeout bounds each read. (A JetStream context
    /// is built inside a Tokio runtime, so the caller builds it where it runs.)
    pub fn new(js: Context, space: SpaceName) -> Self {
        RunJournals {
            js,
            space,
            round_trips: AtomicU64::new(0),
        }
    }

    pub fn space(&self) -> &SpaceName {
        &self.space
    }

    /// Requests sent so far (each one round trip).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Every message on `run`'s journal subject, in append order (see the module doc).
    pub async fn read(&self, run: &RunId) -> Result<Vec<JournalMessage>, EpError> {
        let stream_name = journal_stream(&self.space);
        let subject = journal_subject(&self.space, run);
        // No round trip: the handle is a name, and a missing stream surfaces at the first read.
        let stream = self
            .js
            .get_stream_no_info(&stream_name)
            .await
            .map_err(|e| {
                EpError::internal(format!(
                    "the journal stream name {stream_name} is refused: {e}"
                ))
            })?;
        let mut messages: Vec<JournalMessage> = Vec::new();
        let mut from = 1;
        loop {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            let message = match stream
                .get_first_raw_message_by_subject(&subject, from)
                .await
            {
                Ok(message) => message,
                Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => break,
                Err(e) => {
                    return Err(EpError::unavailable(format!(
                        "the leader read of run {} journal {subject} on {stream_name} from \
                         sequence {from} failed: {e}; an unreadable journal is never an empty \
                         one",
                        run.as_str()
                    )))
                }
            };
            // `next_by_subj` names an exact subject, so anything else is a server answering
            // another question; its sequence must also move forward, or the walk never ends.
            if message.subject.as_str() != subject || message.sequence < from {
                return Err(EpError::internal(format!(
                    "the journal read of {subject} from sequence {from} answered {} at sequence \
                     {}",
                    message.subject, message.sequence
                )));
            }
            if messages.len() == MAX_JOURNAL_RECORDS {
                return Err(EpError::failed_precondition(format!(
                    "run {} journal {subject} holds more than {MAX_JOURNAL_RECORDS} records, \
                     more than the plane reads to answer one checkpoint",
                    run.as_str()
                )));
            }
            from = message.sequence + 1;
            messages.push(JournalMessage {
                seq: message.sequence,
                data: message.payload.to_vec(),
            });
        }
        Ok(messages)
    }
}

/// The checkpoint an answering run operator settles, for
/// [`AnsweringAttempt::issue`](cotal_core::run::AnsweringAttempt::issue): `answers`' run
/// journal read on `journals`, folded and combined with the pause's status read on `records`
/// (a binding of the same space with the records store). A failure is the refusal itself.
pub async fn read_journal_checkpoint(
    journals: &RunJournals,
    records: &Space,
    endpoint: &EndpointName,
    answers: &OperatorAnswers,
) -> Result<Option<JournalCheckpoint>, EpError> {
    if records.space() != journals.space() {
        return Err(EpError::internal(format!(
            "the journal of space {} cannot be read against the records of space {}",
            journals.space(),
            records.space()
        )));
    }
    let journal = journals.read(&answers.run_id).await?;
    let read = ReadJournalCheckpoint::for_answers(endpoint.clone(), answers, journal);
    drive(&mut Replay::new(read), records).await
}
