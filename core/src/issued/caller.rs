//! The auth callout's issuance of an interactive user's `manager-caller` connection (SPEC
//! §13.15 "User-auth issuance"): the one place this plane is the issuer of a peer's material.

use crate::error::EpError;
use crate::machine::{Ctx, Halt, Script};
use crate::profiles::{manager_caller, CallerIssuance, ManagerCallerBinding, Profile};

use super::ceiling::{IssuedGeneration, IssuedRef, SubjectPermissions};
use super::rows::{AcceptedToken, Evidence, IssuedSource};
use super::store::{ConfirmIssued, IssueGeneration, ReadAccepted};

/// Mints the `manager-caller` profile of one connection as an issuance, before the callout
/// signs it:
/// * the accepted token is derived from the connection's own inbox nonce, never taken from a
///   body;
/// * no accepted row yet → the fresh generation, evidence whose ceiling is exactly the
///   permission set being signed and whose one source is the caller's actor-ledger row, release,
///   then the accepted row ([`IssueGeneration`], F78);
/// * a row naming this space, owner, actor and uid → a reconnect under the same nonce: the same
///   generation, renewed only if the ceiling is byte-identical ([`ConfirmIssued`], F80);
/// * a row naming anything else → refused: the client adopts a new generation only through a
///   new connection under a new nonce.
///
/// `binding.issued` is ignored: the issuance is decided here. Keeps F77–F80.
#[derive(Debug, Clone)]
pub struct IssueManagerCaller {
    pub binding: ManagerCallerBinding,
    /// Issuer-chosen entropy for a first issuance (unused on a renewal).
    pub fresh_generation: IssuedGeneration,
}

impl IssueManagerCaller {
    fn profile(
        &self,
        generation: &IssuedGeneration,
        accepted: &AcceptedToken,
    ) -> Result<(Profile, SubjectPermissions), EpError> {
        let binding = ManagerCallerBinding {
            issued: Some(CallerIssuance {
                generation: generation.clone(),
                accepted: accepted.clone(),
            }),
            ..self.binding.clone()
        };
        let profile = manager_caller(&binding)?;
        let ceiling = SubjectPermissions::from_native(&profile.permissions).map_err(|why| {
            EpError::internal(format!(
                "the manager-caller profile is not a ceiling: {why}"
            ))
        })?;
        Ok((profile, ceiling))
    }
}

impl Script for IssueManagerCaller {
    type Output = Profile;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Profile, Halt> {
        let view = &self.binding.view;
        let token = AcceptedToken::for_connection(view.conn_nonce.as_str());
        let reference = |generation: IssuedGeneration| IssuedRef {
            space: view.space.clone(),
            owner: view.principal.owner().clone(),
            actor: view.principal.actor().clone(),
            uid: self.binding.lifecycle_uid.clone(),
            generation,
        };
        let bound = cx.call(&ReadAccepted {
            token: token.clone(),
        })?;
        match bound.as_ref() {
            None => {
                let (profile, ceiling) = self.profile(&self.fresh_generation, &token)?;
                let r = reference(self.fresh_generation.clone());
                let source = IssuedSource::actor_ledger(&r.space, &r.owner, &r.actor, &r.uid);
                let evidence = Evidence::new(r, vec![source], ceiling, None)
                    .map_err(|why| EpError::internal(format!("unissuable evidence: {why}")))?;
                cx.call(&IssueGeneration {
                    evidence,
                    accepted: Some(token),
                })?;
                Ok(profile)
            }
            Some(r) if *r == reference(r.generation.clone()) => {
                let (profile, ceiling) = self.profile(&r.generation, &token)?;
                cx.call(&ConfirmIssued {
                    reference: r.clone(),
                    permissions: ceiling,
                })?;
                Ok(profile)
            }
            Some(r) => Err(EpError::permission_denied(format!(
                "this connection's accepted row names {}.{} at lifecycle {}, not the caller; \
                 reconnect under a new nonce (SPEC 13.15)",
                r.owner, r.actor, r.uid
            ))
            .into()),
        }
    }
}
