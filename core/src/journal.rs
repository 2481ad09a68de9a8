//! Run journal activation ordering (SPEC §14.4, F84, F85).
//!
//! A successor driver replays the run's journal and then appends an *activation* record at the
//! replayed head. Whether that activation may take authority over the journal's existing one is
//! a pure decision over `(holder, epoch, fencingToken)`; the subject-sequence CAS that makes the
//! append itself serial lives with the journal adapter, not here.

use std::fmt;

use crate::error::EpError;

/// The journal holder `^[A-Za-z0-9_.-]{1,256}$` (a run holder ends with `.<takeoverId>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunHolder(String);

impl RunHolder {
    pub fn parse(s: &str) -> Result<RunHolder, EpError> {
        let ok = (1..=256).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if ok {
            Ok(RunHolder(s.to_owned()))
        } else {
            Err(EpError::bad_request(
                "a run holder must match ^[A-Za-z0-9_.-]{1,256}$",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A run's takeover epoch (a fresh lease grant advances it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunEpoch(pub u64);

/// A run's fencing token: the total order activations are decided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(pub u64);

/// The authority coordinates an activation record carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Activation {
    pub holder: RunHolder,
    pub epoch: RunEpoch,
    pub fencing_token: FencingToken,
}

/// Why an activation was refused. Each means "my replay is stale" (F85): the candidate has
/// driven nothing yet and may re-replay and retry while it holds the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The journal is already activated at a higher fencing token.
    LowerToken,
    /// Same token, another holder.
    EqualTokenOtherHolder,
    /// Same token and holder, another epoch.
    EqualTokenOtherEpoch,
}

/// The outcome of [`activation_decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The journal has no activation yet: the candidate activates.
    First,
    /// A strictly higher fencing token: the candidate supersedes the current driver.
    Supersedes,
    /// The very same `(holder, epoch, token)` re-activating (e.g. a retried append).
    Reaffirms,
    Refused(Refusal),
}

impl Decision {
    pub fn accepted(self) -> bool {
        !matches!(self, Decision::Refused(_))
    }
}

impl Refusal {
    /// The refusal as the plane reports it: `conflict`, naming both coordinates.
    pub fn to_error(self, current: &Activation, candidate: &Activation) -> EpError {
        let why = match self {
            Refusal::LowerToken => "a higher fencing token already activated the journal",
            Refusal::EqualTokenOtherHolder => {
                "the same fencing token was activated by another holder"
            }
            Refusal::EqualTokenOtherEpoch => {
                "the same fencing token was activated at another epoch"
            }
        };
        EpError::conflict(format!(
            "run journal activation by {} at epoch {} token {} is refused: {why} ({} at epoch {} \
             token {}); the replay is stale, re-replay before retrying (F84, F85)",
            candidate.holder,
            candidate.epoch.0,
            candidate.fencing_token.0,
            current.holder,
            current.epoch.0,
            current.fencing_token.0
        ))
    }
}

/// Decides whether `candidate` may activate a journal whose existing activation is `current`
/// (F84): a lower fencing token is refused; an equal token only when BOTH holder and epoch
/// match; a higher token wins. Pure: the caller appends the activation only on acceptance, under
/// the run subject's expected-last-sequence CAS.
pub fn activation_decision(current: Option<&Activation>, candidate: &Activation) -> Decision {
    let Some(current) = current else {
        return Decision::First;
    };
    match candidate.fencing_token.cmp(&current.fencing_token) {
        std::cmp::Ordering::Less => Decision::Refused(Refusal::LowerToken),
        std::cmp::Ordering::Greater => Decision::Supersedes,
        std::cmp::Ordering::Equal if candidate.holder != current.holder => {
            Decision::Refused(Refusal::EqualTokenOtherHolder)
        }
        std::cmp::Ordering::Equal if candidate.epoch != current.epoch => {
            Decision::Refused(Refusal::EqualTokenOtherEpoch)
        }
        std::cmp::Ordering::Equal => Decision::Reaffirms,
    }
}

/// Checks `s` is `prefix` followed by exactly `len` lowercase hex digits.
fn is_prefixed_hex(s: &str, prefix: &str, len: usize) -> bool {
    s.strip_prefix(prefix).is_some_and(|hex| {
        hex.len() == len && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// A driver-minted run id `run-<32 lowercase hex>` (F87).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(String);

impl RunId {
    pub fn parse(s: &str) -> Result<RunId, EpError> {
        if is_prefixed_hex(s, "run-", 32) {
            Ok(RunId(s.to_owned()))
        } else {
            Err(EpError::bad_request(
                "a run id must match ^run-[0-9a-f]{32}$",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A takeover id `<16 lowercase hex>`, minted by the lease granter once per takeover (F87).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TakeoverId(String);

impl TakeoverId {
    pub fn parse(s: &str) -> Result<TakeoverId, EpError> {
        if is_prefixed_hex(s, "", 16) {
            Ok(TakeoverId(s.to_owned()))
        } else {
            Err(EpError::bad_request(
                "a takeover id must match ^[0-9a-f]{16}$",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}
