//! Whether a plane serves (reference §2.8), and what an agent is told when it does not: a
//! plane that is not serving refuses every operation first, with a copy that gives the agent
//! nothing to act on but a retry (the operator's cause is on `/health` and in the log,
//! reference §2.6).

use crate::error::EpError;
use crate::plane_claim::FENCED_AGENT_COPY;

/// What an agent is told by a plane that is shutting down (or whose connections are already
/// closed under a door still answering).
pub const DRAINING_AGENT_COPY: &str = "the auth service is shutting down; retry shortly";

/// Whether the plane serves (reference §2.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Its close has begun.
    Draining,
    /// It stopped serving on its own; the cause for the operator.
    Unavailable(String),
}

impl Readiness {
    /// The refusal every operation of a plane that does not serve answers with: for the agent
    /// that asked, nothing to act on but a retry (the operator's cause is on `/health` and in
    /// the log, reference §2.6). `None` while ready.
    pub fn refusal(&self) -> Option<EpError> {
        match self {
            Readiness::Ready => None,
            Readiness::Draining => Some(EpError::unavailable(DRAINING_AGENT_COPY)),
            Readiness::Unavailable(_) => Some(EpError::unavailable(FENCED_AGENT_COPY)),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Readiness::Ready => "ready",
            Readiness::Draining => "draining",
            Readiness::Unavailable(_) => "unavailable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn a_plane_that_does_not_serve_refuses_with_the_agent_copy_never_the_cause() {
        assert_eq!(Readiness::Ready.refusal(), None);
        let draining = Readiness::Draining.refusal().unwrap();
        assert_eq!(draining.code, ErrorCode::Unavailable);
        assert_eq!(draining.message, DRAINING_AGENT_COPY);
        let cause = "the gate moved from epoch 0 to 1; a successor registered".to_owned();
        let fenced = Readiness::Unavailable(cause.clone()).refusal().unwrap();
        assert_eq!(fenced.code, ErrorCode::Unavailable);
        assert_eq!(fenced.message, FENCED_AGENT_COPY);
        assert!(!fenced.message.contains(&cause));
        assert_eq!(
            [
                Readiness::Ready,
                Readiness::Draining,
                Readiness::Unavailable(cause)
            ]
            .map(|r| r.as_str()),
            ["ready", "draining", "unavailable"]
        );
    }
}
