//! The Cotal bearer's actor claim (`act`, reference §10.1) as data: who the bearer speaks for,
//! at which lifecycle and credential, and the one view it may carry with exactly the binding
//! that view needs. The JOSE envelope and the claim's JSON codec are io-http's; the exchange
//! builds this value and the connect decision reads it.

use crate::names::{
    ActorToken, CredentialId, DerivedOwner, InstanceId, LifecycleUid, OwnerToken, Principal,
};
use crate::view::View;
use crate::wire::MAX_SAFE_INTEGER;

/// The one SPEC §13.6 session a `session-caller` bearer may open (`act.session`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionClaim {
    /// `^[A-Za-z0-9_-]{1,64}$`.
    pub endpoint: String,
    /// `^[A-Za-z0-9_-]{22,128}$`.
    pub session_id: String,
    pub epoch: u64,
    /// The grant's expiry, unix seconds.
    pub exp: u64,
}

/// The one object a `transfer-writer` bearer may upload (`act.transferWriter`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferWriterClaim {
    pub instance_id: InstanceId,
    /// The transcript's SHA-256, 64 lowercase hex digits.
    pub hex: String,
}

/// The server-authored actor claim (`act`). Fields in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BearerAct {
    /// The derived owner (`u_` + 26 base32 chars); equals `sub`.
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub scope: Option<Vec<String>>,
    /// At most one spawner audit link, `<derived owner>.<actor>`.
    pub parent: Option<Principal>,
    pub lifecycle_uid: Option<LifecycleUid>,
    pub credential_id: Option<CredentialId>,
    pub view: Option<View>,
    /// Present exactly with view `manager-caller`.
    pub manager_instance_id: Option<InstanceId>,
    /// Present exactly with view `session-caller`.
    pub session: Option<SessionClaim>,
    /// Present exactly with view `transfer-writer`.
    pub transfer_writer: Option<TransferWriterClaim>,
}

impl BearerAct {
    /// The plain agent claim: no scope, parent, lifecycle, credential or view.
    pub fn new(owner: OwnerToken, actor: ActorToken) -> Self {
        BearerAct {
            owner,
            actor,
            scope: None,
            parent: None,
            lifecycle_uid: None,
            credential_id: None,
            view: None,
            manager_instance_id: None,
            session: None,
            transfer_writer: None,
        }
    }

    /// The rules a claim must keep beyond its field types; `Err` says which one it broke.
    pub fn check(&self) -> Result<(), String> {
        if !DerivedOwner::is_derived(self.owner.as_str()) {
            return Err(format!(
                "act.owner {:?} is not a derived owner (u_ + 26 base32 chars [a-z2-7])",
                self.owner.as_str()
            ));
        }
        if let Some(parent) = &self.parent {
            if !DerivedOwner::is_derived(parent.owner().as_str()) {
                return Err(format!(
                    "act.parent {:?} does not name a derived owner",
                    parent.key()
                ));
            }
        }
        let view = self.view;
        let pairs = [
            (
                View::ManagerCaller,
                self.manager_instance_id.is_some(),
                "act.managerInstanceId",
            ),
            (View::SessionCaller, self.session.is_some(), "act.session"),
            (
                View::TransferWriter,
                self.transfer_writer.is_some(),
                "act.transferWriter",
            ),
        ];
        for (needs, present, field) in pairs {
            if (view == Some(needs)) != present {
                return Err(format!(
                    "view \"{needs}\" and {field} come together or not at all"
                ));
            }
        }
        if let Some(session) = &self.session {
            let token = |s: &str, len: std::ops::RangeInclusive<usize>| {
                len.contains(&s.len())
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            };
            if !token(&session.endpoint, 1..=64) {
                return Err("act.session.endpoint is not an endpoint token".to_owned());
            }
            if !token(&session.session_id, 22..=128) {
                return Err("act.session.sessionId is not a session id".to_owned());
            }
            if session.epoch > MAX_SAFE_INTEGER || session.exp > MAX_SAFE_INTEGER {
                return Err("act.session epoch and exp must be safe integers".to_owned());
            }
        }
        if let Some(tw) = &self.transfer_writer {
            let hex = tw.hex.len() == 64
                && tw
                    .hex
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
            if !hex {
                return Err("act.transferWriter.hex is not a sha256 hex digest".to_owned());
            }
        }
        Ok(())
    }
}
