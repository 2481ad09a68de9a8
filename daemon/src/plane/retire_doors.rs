//! The two loopback lifecycle-retirement doors (reference §3.9): `/interactive-lifecycle/retire`
//! and `/managed-lifecycle/retire`. Core parses the body and makes the door's pre-check
//! (`lifecycle::admit_door_retirement`: each door refuses the other kind's alias, F49); the
//! barrier it returns — freeze, revoke the family, evict and verify, frontier, retire — runs in
//! the plane's one flight per op id on the barrier connection, so a crashed retirement is
//! finished by asking again, and core answers its outcome (`DoorRetirement::answer`). Retiring
//! the live incarnation — current, superseded by a re-grant, or revoked — is what lets a
//! re-granted actor exchange again (F60).

use crate::ledger::Ledger;
use cotal_core::error::EpError;
use cotal_core::lifecycle::{admit_door_retirement, RetireDoor, RetireTarget, Retirement};
use cotal_io_http::face::{Answer, Door, DoorRequest};

use super::decision::{Decided, Recorder};
use super::retirement::{Entry, Retirements};

/// The retirement doors' dependencies.
pub(super) struct RetireDoors {
    pub(super) ledger: Ledger,
    pub(super) retirements: std::sync::Arc<Retirements>,
    pub(super) recorder: Recorder,
}

impl std::fmt::Debug for RetireDoors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetireDoors").finish_non_exhaustive()
    }
}

impl RetireDoors {
    pub(super) async fn answer(&self, request: &DoorRequest) -> Answer {
        let target = match RetireTarget::parse(&request.body) {
            Ok(target) => target,
            Err(why) => return Answer::bad_request(why),
        };
        let door = request.door;
        let kind = match door {
            Door::InteractiveRetire => RetireDoor::Interactive,
            _ => RetireDoor::Managed,
        };
        let row = target.row();
        let decided = Decided {
            audited: door.path(),
            ..Decided::new("retire", "host", &row)
        };
        let outcome = self
            .retire(kind, &target)
            .await
            .map(|done| done.door_json());
        self.recorder.answer(request, &decided, outcome)
    }

    /// The door's pre-check on a fresh ledger read, then its barrier, run or joined in the
    /// plane's one flight for its op id: the managed door and the control rail share the managed
    /// op id, so they run one barrier (F49).
    async fn retire(&self, kind: RetireDoor, target: &RetireTarget) -> Result<Retirement, EpError> {
        let target_of_read = target.clone();
        let admitted = self
            .ledger
            .run(move |ledger| admit_door_retirement(&mut &*ledger, kind, &target_of_read))
            .await??;
        let ran = self
            .retirements
            .retire(admitted.barrier.clone(), Entry::Door)
            .await?;
        admitted.answer(ran.retirement)
    }
}
