//! Name authority: may this owner register this endpoint name, and at which binding revision?
//!
//! Core single-label names need operator provisioning authority; reverse-DNS names bind to the
//! owner of their domain claim; unregistered names are never authorized (spec-fence-rules §2.10,
//! F61, F62, F67). The answer carries the binding's revision because the gate records the
//! name-authority revision it was registered under, so a later name transfer fences the
//! previous owner's serve grants (F27).

use crate::error::EpError;
use crate::gate::NameAuthorityRevision;
use crate::machine::{Ctx, Halt};
use crate::names::{EndpointName, OwnerToken};
use crate::wire::MAX_SAFE_INTEGER;

/// One authority answer, taken from a single read so `authorized` and `revision` agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameAuthorization {
    pub authorized: bool,
    pub revision: NameAuthorityRevision,
}

/// A source of name authority. Implementations may perform effects through `cx` (one read) or
/// answer from static configuration.
pub trait NameAuthority: std::fmt::Debug + Send + Sync {
    fn authorize(
        &self,
        cx: &mut Ctx<'_>,
        name: &EndpointName,
        owner: &OwnerToken,
    ) -> Result<NameAuthorization, Halt>;
}

/// The authority the plane uses for itself: exactly one endpoint name bound to one owner at
/// revision 0. Everything else is unauthorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfAuthority {
    pub name: EndpointName,
    pub owner: OwnerToken,
}

impl NameAuthority for SelfAuthority {
    fn authorize(
        &self,
        _cx: &mut Ctx<'_>,
        name: &EndpointName,
        owner: &OwnerToken,
    ) -> Result<NameAuthorization, Halt> {
        Ok(NameAuthorization {
            authorized: *name == self.name && *owner == self.owner,
            revision: NameAuthorityRevision(0),
        })
    }
}

/// Checks that `owner` may register `name` and returns the binding revision it holds at.
/// Not authorized → `permission-denied`; a revision beyond the I-JSON range → `internal`.
pub fn assert_name_authority(
    cx: &mut Ctx<'_>,
    authority: &dyn NameAuthority,
    name: &EndpointName,
    owner: &OwnerToken,
) -> Result<NameAuthorityRevision, Halt> {
    let answer = authority.authorize(cx, name, owner)?;
    if !answer.authorized {
        return Err(EpError::permission_denied(format!(
            "owner {owner} holds no name authority for endpoint {name}; single-label names need \
             operator provisioning authority and reverse-DNS names bind to their domain's \
             registered owner"
        ))
        .into());
    }
    if answer.revision.0 > MAX_SAFE_INTEGER {
        return Err(EpError::internal(format!(
            "the name authority answered revision {} for {name}, beyond the safe integer range",
            answer.revision
        ))
        .into());
    }
    Ok(answer.revision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Replay, Script};

    struct Ask(SelfAuthority, &'static str, &'static str);

    impl Script for Ask {
        type Output = NameAuthorityRevision;
        fn run(&self, cx: &mut Ctx<'_>) -> Result<NameAuthorityRevision, Halt> {
            let name = EndpointName::parse(self.1)?;
            let owner = OwnerToken::parse(self.2)?;
            assert_name_authority(cx, &self.0, &name, &owner)
        }
    }

    fn ask(name: &'static str, owner: &'static str) -> Result<NameAuthorityRevision, EpError> {
        let authority = SelfAuthority {
            name: EndpointName::parse("auth").unwrap(),
            owner: OwnerToken::parse("u_aaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap(),
        };
        let mut world = crate::driver::ModelWorld::default();
        crate::driver::drive(&mut Replay::new(Ask(authority, name, owner)), &mut world)
    }

    #[test]
    fn f62_self_authority_binds_one_name_to_one_owner_at_revision_zero() {
        assert_eq!(
            ask("auth", "u_aaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap(),
            NameAuthorityRevision(0)
        );
        for (name, owner) in [
            ("auth", "u_bbbbbbbbbbbbbbbbbbbbbbbbbb"),
            ("manager", "u_aaaaaaaaaaaaaaaaaaaaaaaaaa"),
        ] {
            assert_eq!(
                ask(name, owner).unwrap_err().code,
                crate::ErrorCode::PermissionDenied
            );
        }
    }
}
