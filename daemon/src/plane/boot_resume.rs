//! Boot crash-resume (reference §2.11): before the plane answers anything, every retirement a
//! crash interrupted is found and finished through the plane's retirement flights. Its
//! sentences are `core::lifecycle`'s ([`BootResume`]).

use std::sync::Arc;

use cotal_core::lifecycle::{BootResume, FindOpenOperations};
use tracing::{error, info};

use super::retirement::{Entry, Retirements};
use crate::audit;

impl Retirements {
    /// Boot crash-resume (reference §2.11): finds every retirement a crash interrupted and
    /// finishes each before the plane answers anything. Loud on every failure, never failing
    /// the boot: a retirement that cannot finish leaves its gate frozen, so nothing mints for
    /// that alias until a later resume (or a retire request) succeeds (fail-closed).
    pub(super) async fn resume_open(self: &Arc<Self>) {
        let guard = match self.guard() {
            Ok(guard) => guard,
            Err(e) => return error!("{}", BootResume::unstarted(&e.message)),
        };
        let open = match self.read(FindOpenOperations { guard: Some(guard) }).await {
            Ok(open) => open,
            Err(e) => return error!("{}", BootResume::listing_failed(&e.message)),
        };
        for line in BootResume::unexamined(&open) {
            error!("{line}");
        }
        for barrier in open.retirements {
            let (op, uid) = (barrier.op_id.clone(), barrier.lifecycle_uid.clone());
            let row = BootResume::row(&uid);
            match self.retire(barrier, Entry::Boot).await {
                Ok(ran) => {
                    audit::granted("plane", "resume-retirement", &row, audit::At::default());
                    let evicted = ran.evicted.len();
                    let line = BootResume::finished(&op, &uid, evicted);
                    info!(op = %op, lifecycle = %uid, evicted, "{line}");
                }
                Err(e) => {
                    audit::refused("plane", "resume-retirement", &row, &e);
                    error!("{}", BootResume::failed(&op, &uid, &e.message));
                }
            }
        }
    }
}
