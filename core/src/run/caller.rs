//! What the run kinds' adapter asks of a served subject between the core phases (reference §5,
//! SPEC §14.8): the endpoint whose runs a plane admits, and the issued authority a subject's
//! caller presents, so the adapter only resolves it on its connection.

use crate::error::EpError;
use crate::issued::IssuedRef;
use crate::names::{EndpointName, SpaceName};

use super::subject::RequestSubject;

/// The endpoint whose runs this plane admits: the remote manager's.
pub const RUN_ENDPOINT: &str = "manager";

/// [`RUN_ENDPOINT`] as a name.
pub fn run_endpoint() -> Result<EndpointName, EpError> {
    EndpointName::parse(RUN_ENDPOINT).map_err(EpError::stored)
}

impl RequestSubject {
    /// The issued authority this subject's caller presents in `space`, for the adapter to
    /// resolve with live-source checking (F79); a legacy-rail subject names none and is refused
    /// `permission-denied`.
    pub fn issued_ref(&self, space: &SpaceName) -> Result<IssuedRef, EpError> {
        let generation = self.generation.clone().ok_or_else(|| {
            EpError::permission_denied("the request rode the legacy rail: no issued authority")
        })?;
        Ok(IssuedRef {
            space: space.clone(),
            owner: self.owner.clone(),
            actor: self.actor.clone(),
            uid: self.uid.clone(),
            generation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::run::parse_request_subject;

    #[test]
    fn the_run_endpoint_is_the_managers() {
        assert_eq!(
            run_endpoint().map(|e| e.to_string()).ok().as_deref(),
            Some("manager")
        );
    }

    const TAIL: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const NONCE: &str = "nonce_0123456789abcdefgh";
    const GEN: &str = "0123456789abcdef0123456789abcdef";

    fn subject(text: &str) -> RequestSubject {
        parse_request_subject(text).expect("a well-formed request subject")
    }

    #[test]
    fn a_legacy_rail_subject_names_no_issued_authority() {
        let space = SpaceName::parse("s1").unwrap();
        let legacy = subject(&format!(
            "cotal.s1.ep.one.manager.run-start.local.alice.{TAIL}.{NONCE}"
        ));
        let e = legacy.issued_ref(&space).unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        assert_eq!(
            e.message,
            "the request rode the legacy rail: no issued authority"
        );
    }

    #[test]
    fn a_v1_subject_names_its_callers_issued_authority() {
        let space = SpaceName::parse("s1").unwrap();
        let v1 = subject(&format!(
            "cotal.s1.ep.v1.one.manager.run-start.local.alice.{TAIL}.{GEN}.{NONCE}"
        ));
        let reference = v1.issued_ref(&space).unwrap();
        assert_eq!(reference.space, space);
        assert_eq!(reference.owner, v1.owner);
        assert_eq!(reference.actor.as_str(), "alice");
        assert_eq!(reference.uid.as_str(), TAIL);
        assert_eq!(reference.generation.as_str(), GEN);
    }
}
