//! What a start checks against the high-water marks its state dir keeps (ecosystem §8; the
//! marks are `rollback::Mark` per gate and a last sequence per authority stream): which streams
//! are kept, and the one refusal shape a rolled-back gate or stream gives, with the row it is
//! audited over. The reads are the adapter's; every verdict is [`crate::rollback`]'s.

use crate::error::EpError;
use crate::issuance::GateObservation;
use crate::kv::Store;
use crate::rollback::{self, Mark};

/// The stores whose stream sequences the rollback check keeps: the two authority stores.
pub const ROLLBACK_STORES: [Store; 2] = [Store::Auth, Store::Records];

/// A store found behind its high-water mark: the row the refusal is audited over (the gate key
/// or the stream name) and the refusal (`failed-precondition`, [`rollback::ROLLBACK_DETECTED`]).
#[derive(Debug, Clone)]
pub struct RolledBack {
    pub row: String,
    pub error: EpError,
}

/// Checks the gate `gate_key` as a start observes it (`seen`, `None` when absent) against the
/// mark this state dir kept of it, if any: before anything acts on the gate, a rolled-back gate
/// could be registered at a superseded epoch (F69). No mark means nothing was seen to go behind.
pub fn check_gate(
    gate_key: &str,
    mark: Option<&Mark>,
    seen: Option<&GateObservation>,
) -> Result<(), RolledBack> {
    match mark {
        Some(mark) => rollback::check(gate_key, mark, seen).map_err(|error| RolledBack {
            row: gate_key.to_owned(),
            error,
        }),
        None => Ok(()),
    }
}

/// Checks one authority stream's last sequence against the mark kept of it, if any (see
/// [`rollback::check_stream`]).
pub fn check_stream(stream: &str, mark: Option<u64>, last_seq: u64) -> Result<(), RolledBack> {
    match mark {
        Some(mark) => rollback::check_stream(stream, mark, last_seq).map_err(|error| RolledBack {
            row: stream.to_owned(),
            error,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Revision;

    #[test]
    fn no_mark_means_nothing_to_check() {
        assert!(check_gate("epgate.auth.i1", None, None).is_ok());
        assert!(check_stream("KV_cotal_auth_s1", None, 0).is_ok());
    }

    #[test]
    fn a_gone_gate_under_a_mark_is_refused_on_its_key() {
        let mark = Mark {
            revision: Revision(7),
            process_epoch: 2,
            generation: 3,
        };
        let Err(rolled) = check_gate("epgate.auth.i1", Some(&mark), None) else {
            panic!("a gate gone under its mark must refuse");
        };
        assert_eq!(rolled.row, "epgate.auth.i1");
        assert_eq!(
            rolled.error.code,
            crate::error::ErrorCode::FailedPrecondition
        );
        assert!(
            rolled.error.message.contains("is gone"),
            "{}",
            rolled.error.message
        );
    }

    #[test]
    fn a_stream_behind_its_mark_is_refused_on_its_name() {
        assert!(check_stream("KV_cotal_auth_s1", Some(40), 40).is_ok());
        let Err(rolled) = check_stream("KV_cotal_auth_s1", Some(40), 39) else {
            panic!("a stream behind its mark must refuse");
        };
        assert_eq!(rolled.row, "KV_cotal_auth_s1");
        assert_eq!(
            rolled.error,
            rollback::check_stream("KV_cotal_auth_s1", 40, 39).unwrap_err()
        );
    }

    #[test]
    fn the_kept_streams_are_the_two_authority_stores() {
        assert_eq!(ROLLBACK_STORES, [Store::Auth, Store::Records]);
    }
}
