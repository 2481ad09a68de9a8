//! The one check of a session's caller, at the exchange and again at the callout.

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::kv::{ReadOutcome, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::manager::{manager_verdict, Verdict};
use crate::names::{keys, EndpointToken, LifecycleUid, Principal, SessionId, SpaceName};

use super::row::{SessionCoordinates, SessionRow, SessionState};

/// The endpoint whose sessions this plane's callers may hold: the manager's, whose gate and
/// registration it can judge (§3.10).
const MANAGER_ENDPOINT: &str = "manager";

/// A session the caller holds, as the row states it: what `act.session` carries and the
/// session-caller connection is pinned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedeemedSession {
    pub endpoint: EndpointToken,
    pub session_id: SessionId,
    pub epoch: ProcessEpoch,
    /// The row's expiry in unix seconds (rounded down), never the caller's word.
    pub exp_secs: u64,
}

/// `verifySessionRedemption` (reference §3.5, §8.4; SPEC §13.6, F72–F74): whether `holder` at
/// `lifecycle_uid` holds the redeemed session `claim` selects, right now.
///
/// One leader-served read of `session.<sessionId>` in the sessions store (F7), then, in order
/// (each refusal `permission-denied` "session redemption refused: …"): the row is `active` (an
/// `issuing` row confers nothing, F72; a terminal one never again, F73); at the exchange the
/// presented grant's signature is the row's; the row's holder is `holder` and its lifecycle
/// `lifecycle_uid` (a re-granted actor's successor holds nothing of its predecessor's); the
/// endpoint and serving epoch are the claim's (sessions die with the serving epoch, F73); the
/// row is unexpired; and the serving manager instance is a [`Verdict::Candidate`] of the
/// holder's owner whose gate runs at the row's epoch, so a restarted or fenced manager's
/// sessions confer nothing. No row, a deleted one, or a row on another endpoint than the
/// manager's refuses too; an unanswered read is `unavailable`. KV round trips: 2–4.
#[derive(Debug, Clone)]
pub struct VerifySession {
    pub space: SpaceName,
    pub holder: Principal,
    pub lifecycle_uid: LifecycleUid,
    pub claim: SessionCoordinates,
    pub now_ms: u64,
}

fn refused(why: String) -> Halt {
    EpError::permission_denied(format!("session redemption refused: {why}")).into()
}

impl Script for VerifySession {
    type Output = RedeemedSession;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<RedeemedSession, Halt> {
        let sid = &self.claim.session_id;
        let key = keys::session(sid);
        let entry = match cx.get(Store::Sessions, &key)? {
            ReadOutcome::Entry(None) => return Err(refused(format!("no session row for {sid}"))),
            ReadOutcome::Entry(Some(entry)) if !entry.is_put() => {
                return Err(refused(format!("the session row for {sid} is deleted")))
            }
            ReadOutcome::Entry(Some(entry)) => entry,
            ReadOutcome::Unavailable(why) => {
                return Err(EpError::unavailable(format!(
                    "reading the session row {key} failed: {why}; an authority read fails closed"
                ))
                .into())
            }
        };
        let row = SessionRow::parse(&entry.value, sid)?;
        if row.state != SessionState::Active {
            return Err(refused(format!(
                "session {sid} is {:?}, not active",
                row.state.as_str()
            )));
        }
        if let Some(sig) = &self.claim.grant_sig {
            if *sig != row.grant_sig {
                return Err(refused(
                    "the presented grant is not the one this session was redeemed with".into(),
                ));
            }
        }
        if row.holder != self.holder {
            return Err(refused(format!(
                "session {sid} was issued to {}, not {}",
                row.holder.key(),
                self.holder.key()
            )));
        }
        if row.holder_uid != self.lifecycle_uid {
            return Err(refused(
                "the bearer's lifecycle is not the session holder's".into(),
            ));
        }
        if row.endpoint != self.claim.endpoint {
            return Err(refused(format!(
                "session {sid} is on endpoint {}, not {}",
                row.endpoint, self.claim.endpoint
            )));
        }
        if row.serving_epoch != self.claim.epoch {
            return Err(refused(format!(
                "session {sid} is pinned to serving epoch {}, not {}",
                row.serving_epoch, self.claim.epoch
            )));
        }
        if row.exp_ms <= self.now_ms {
            return Err(refused(format!(
                "session {sid} expired at {} (unix ms)",
                row.exp_ms
            )));
        }
        if row.endpoint.as_str() != MANAGER_ENDPOINT {
            return Err(refused(format!(
                "session {sid} is on endpoint {}; this plane serves callers of the manager's \
                 sessions only",
                row.endpoint
            )));
        }
        let instance = &row.serving_instance;
        let (verdict, epoch) = manager_verdict(cx, &self.space, self.holder.owner(), instance)?;
        if verdict != Verdict::Candidate {
            return Err(refused(format!(
                "the serving manager {instance} is {verdict}"
            )));
        }
        if epoch != Some(row.serving_epoch) {
            return Err(refused(format!(
                "the serving manager's epoch is {}, not the session's {}",
                epoch.map_or_else(|| "unknown".to_owned(), |e| e.to_string()),
                row.serving_epoch
            )));
        }
        Ok(RedeemedSession {
            endpoint: row.endpoint,
            session_id: row.session_id,
            epoch: row.serving_epoch,
            exp_secs: row.exp_ms / 1000,
        })
    }
}
