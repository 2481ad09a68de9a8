//! Settling a write whose outcome was not heard (DESIGN §3): an ambiguous write may or may not
//! have committed, and the machine decides from a leader read-back, never by guessing.
//!
//! [`settle_write`] owns the loop every writer shares: send, and when the answer is not a
//! commit, let the caller's read-back say whether the write is there (ours), something else is
//! there (settled, not ours), or the key is unmoved (not committed: send it again), at most
//! [`AMBIGUOUS_WRITE_ATTEMPTS`] times. What "ours" means is the caller's: byte-identical
//! content, our `opId` on a frozen gate, our exact successor coordinate.

use crate::kv::{KvRequest, Revision, WriteOutcome};
use crate::machine::{Ctx, Halt};

/// Sends of one write while each comes back unanswered and reads back unmoved.
pub const AMBIGUOUS_WRITE_ATTEMPTS: usize = 3;

/// What a send heard when it was not a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// The send went out unanswered: it may or may not have committed.
    Unanswered(String),
    /// The send's revision pin or create-only condition did not hold. `earlier` is why an
    /// earlier send of this write went unanswered, if one did: that send may have landed late
    /// and be what this one lost to.
    Lost { earlier: Option<String> },
    /// The send never went out; `earlier` as for [`Heard::Lost`].
    NotSent {
        why: String,
        earlier: Option<String>,
    },
}

impl Heard {
    /// Why the latest unanswered send of this write went unanswered: this one's, or an earlier
    /// one's; `None` when every send so far was answered.
    pub fn last_unanswered(&self) -> Option<&str> {
        match self {
            Heard::Unanswered(why) => Some(why),
            Heard::Lost { earlier } | Heard::NotSent { earlier, .. } => earlier.as_deref(),
        }
    }
}

/// What the caller's read-back decided about a send that was not a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<T> {
    /// Settled: the write is ours, or it is not, as `T` says. Nothing is sent again.
    Settled(T),
    /// The key reads unmoved: the write did not commit, so it is sent again (bounded).
    Unmoved,
}

/// How [`settle_write`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled<T> {
    /// A send was acknowledged at this revision.
    Written(Revision),
    /// The read-back settled it.
    Judged(T),
    /// All [`AMBIGUOUS_WRITE_ATTEMPTS`] sends read back unmoved; what the last one heard. The
    /// write may still commit.
    Exhausted(Heard),
}

/// Sends the write `request` and settles every answer that is not a commit with `is_mine`: the
/// caller reads the key back by a leader read (or refuses outright, e.g. on [`Heard::NotSent`]
/// or on a lost pin it takes as conclusive) and says whether the write is settled or the key is
/// unmoved. An unmoved key gets the same request again, at most [`AMBIGUOUS_WRITE_ATTEMPTS`]
/// sends in all. Round trips: one per send, plus whatever `is_mine` reads.
pub fn settle_write<T>(
    cx: &mut Ctx<'_>,
    request: &KvRequest,
    mut is_mine: impl FnMut(&mut Ctx<'_>, &Heard) -> Result<Verdict<T>, Halt>,
) -> Result<Settled<T>, Halt> {
    let mut earlier: Option<String> = None;
    let mut sends = 1;
    loop {
        let heard = match cx.write(request.clone())? {
            WriteOutcome::Written(revision) => return Ok(Settled::Written(revision)),
            WriteOutcome::Ambiguous(why) => {
                earlier = Some(why.clone());
                Heard::Unanswered(why)
            }
            WriteOutcome::CasLost => Heard::Lost {
                earlier: earlier.clone(),
            },
            WriteOutcome::NotSent(why) => Heard::NotSent {
                why,
                earlier: earlier.clone(),
            },
        };
        match is_mine(cx, &heard)? {
            Verdict::Settled(settled) => return Ok(Settled::Judged(settled)),
            Verdict::Unmoved if sends >= AMBIGUOUS_WRITE_ATTEMPTS => {
                return Ok(Settled::Exhausted(heard))
            }
            Verdict::Unmoved => sends += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvOutcome, Store};
    use crate::machine::{script, Effect, Machine, Observation, Replay, Step};

    fn create() -> KvRequest {
        KvRequest::Create {
            store: Store::Auth,
            key: "k".into(),
            value: b"{}".to_vec(),
        }
    }

    /// How a test settle ended, with what each read-back heard.
    type Ended = Step<(Settled<()>, Vec<Heard>)>;

    /// Drives a settle whose read-back always says "unmoved" through `answers`, recording what
    /// each read-back heard; returns how it ended and the number of sends.
    fn drive(answers: &[KvOutcome]) -> (Ended, usize) {
        let mut m = Replay::new(script(|cx| {
            let mut heard = Vec::new();
            let settled = settle_write(cx, &create(), |_, h| {
                heard.push(h.clone());
                Ok(Verdict::Unmoved)
            })?;
            Ok((settled, heard))
        }));
        let mut sends = 0;
        let mut step = m.step(None);
        for answer in answers {
            match step {
                Step::Effect(Effect::Kv(ref r)) if *r == create() => sends += 1,
                _ => break,
            }
            step = m.step(Some(Observation::Kv(answer.clone())));
        }
        (step, sends)
    }

    #[test]
    fn an_unmoved_key_is_sent_again_at_most_the_bound() {
        let unanswered = KvOutcome::Ambiguous("timed out".into());
        let (step, sends) = drive(&vec![unanswered; AMBIGUOUS_WRITE_ATTEMPTS + 1]);
        assert_eq!(sends, AMBIGUOUS_WRITE_ATTEMPTS);
        match step {
            Step::Done(Ok((Settled::Exhausted(last), heard))) => {
                assert_eq!(last, Heard::Unanswered("timed out".into()));
                assert_eq!(heard.len(), AMBIGUOUS_WRITE_ATTEMPTS);
            }
            other => panic!("expected an exhausted settle, got {other:?}"),
        }
    }

    #[test]
    fn a_later_loss_or_refusal_carries_the_earlier_unanswered_send() {
        let (step, _) = drive(&[
            KvOutcome::CasLost,
            KvOutcome::Ambiguous("first".into()),
            KvOutcome::Unavailable("down".into()),
        ]);
        match step {
            Step::Done(Ok((Settled::Exhausted(last), heard))) => {
                assert_eq!(
                    heard,
                    [
                        Heard::Lost { earlier: None },
                        Heard::Unanswered("first".into()),
                        Heard::NotSent {
                            why: "down".into(),
                            earlier: Some("first".into())
                        },
                    ]
                );
                assert_eq!(last.last_unanswered(), Some("first"));
            }
            other => panic!("expected an exhausted settle, got {other:?}"),
        }
    }

    #[test]
    fn an_acknowledged_send_needs_no_read_back() {
        let (step, sends) = drive(&[
            KvOutcome::Ambiguous("lost".into()),
            KvOutcome::Written(Revision(7)),
        ]);
        assert_eq!(sends, 2);
        assert!(matches!(
            step,
            Step::Done(Ok((Settled::Written(Revision(7)), heard))) if heard.len() == 1
        ));
    }
}
