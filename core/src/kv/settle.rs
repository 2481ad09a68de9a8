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
