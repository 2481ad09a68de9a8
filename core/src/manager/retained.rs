//! `manager-retained-agent-validation` (reference-auth-service §4.7): a restarted remote
//! manager that kept a managed agent running proves, before it resumes supervising it, that
//! the agent's retained material (its standing actor token and the space's sentinel
//! credentials) still opens the same live lifecycle. Nothing is minted, written or rotated: the
//! answer is the agent's current authority, or a refusal.
//!
//! **The door.** The request is closed, its two secrets bounded on the wire (an actor token of
//! at most [`ACTOR_TOKEN_MAX`] and sentinel credentials of at most [`SENTINEL_CREDS_MAX`] UTF-16
//! units, as the reference measures them). The human holder needs `supervise` (F90), the target
//! must be its own agent, and the manager must hold its instance's current registration at the
//! request's serve epoch (F94's check, through the one door).
//!
//! **The host's validation.** The reference hands the material to its auth provider, which
//! checks it against the provider's secret store and ledger files (`validateRetainedManagedAgent`).
//! This plane's host state is its trust root and its actor ledger, so it checks the same things
//! there: the sentinel credentials are the space's (compared as SHA-256 digests in constant
//! time), the target has a managed row whose token hash is the actor token's digest (constant
//! time; a wrong token gets the exchange's one sentence), the row's delegation envelope still
//! holds against its spawner's current grant, and a second read finds the row unchanged. The
//! reference's provider also verifies its managed rows' history files; this ledger keeps no such
//! history (each row is one atomically replaced file), so the re-read is the nearest check:
//! a row replaced during the validation is refused rather than answered.
//!
//! **The answer** names exactly the requested target: a row at another lifecycle uid is a
//! replacement, refused `conflict`. It carries the row's authority and never a secret.

use std::fmt;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::actors::authorize::{token_digest, AGENT_EXCHANGE_REFUSED};
use crate::actors::{ActorRow, Boundary, LedgerRead};
use crate::enrollment::{exact_target, find_managed, open_closed, refuse, ManagedEnvelope};
use crate::error::EpError;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{ActorToken, LifecycleUid, OwnerToken, Principal};
use crate::wire::ObjectWriter;

use super::door::RETAINED_VALIDATION;
use super::echo_current;
use super::host::{ManagerHost, Supervisor};
use super::proof::constant_time_eq;
use super::request::RetirementTarget;

/// The request kind this door serves.
pub const RETAINED_VALIDATION_KIND: &str = "manager-retained-agent-validation";
/// The longest actor token a request may carry, in UTF-16 units (`String.length`).
pub const ACTOR_TOKEN_MAX: usize = 4096;
/// The longest sentinel credentials a request may carry, in UTF-16 units.
pub const SENTINEL_CREDS_MAX: usize = 16 * 1024;

/// How the door's refusals name it.
const WHAT: &str = "manager retained-agent validation";

/// A secret the request carries: compared, never printed, never answered.
#[derive(Clone, PartialEq, Eq)]
pub struct RetainedSecret(String);

impl RetainedSecret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RetainedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RetainedSecret(..)")
    }
}

/// A parsed `manager-retained-agent-validation` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedValidationRequest {
    pub envelope: ManagedEnvelope,
    /// The exact incarnation the manager retained.
    pub target: RetirementTarget,
    pub actor_token: RetainedSecret,
    pub sentinel_creds: RetainedSecret,
}

impl RetainedValidationRequest {
    /// The reference's closed parser, in its order: an object, no unknown member, the envelope,
    /// the two secrets non-empty and within their bounds, then `target`, exactly `{owner (u_),
    /// actor, lifecycleUid}`. Every refusal is `bad-request` "manager retained-agent validation
    /// request …"; none quotes a secret.
    pub fn parse(raw: &Value) -> Result<RetainedValidationRequest, EpError> {
        let own = ["target", "actorToken", "sentinelCreds"];
        let (map, envelope) = open_closed(raw, WHAT, RETAINED_VALIDATION_KIND, &own)?;
        let secret = |key: &str| {
            map.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| refuse(WHAT, format!("requires non-empty {key}")))
        };
        let (actor_token, sentinel_creds) = (secret("actorToken")?, secret("sentinelCreds")?);
        if actor_token.encode_utf16().count() > ACTOR_TOKEN_MAX
            || sentinel_creds.encode_utf16().count() > SENTINEL_CREDS_MAX
        {
            return Err(refuse(
                WHAT,
                "secret material exceeds its bounded wire size",
            ));
        }
        Ok(RetainedValidationRequest {
            envelope,
            target: exact_target(map, WHAT)?,
            actor_token: RetainedSecret(actor_token.to_owned()),
            sentinel_creds: RetainedSecret(sentinel_creds.to_owned()),
        })
    }
}

/// The retained agent's current authority, as its managed row grants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedAgentAuthority {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    /// The lifecycle the row is at now.
    pub lifecycle_uid: LifecycleUid,
    pub scope: Vec<String>,
    pub allow_subscribe: Vec<String>,
    pub allow_publish: Vec<String>,
    pub role: Option<String>,
    pub parent: Option<Principal>,
}

impl RetainedAgentAuthority {
    /// Members in the reference provider's order; `role` and `parent` only when set.
    pub fn to_json(&self) -> String {
        let mut w = ObjectWriter::new()
            .string("owner", self.owner.as_str())
            .string("actor", self.actor.as_str())
            .string("lifecycleUid", self.lifecycle_uid.as_str())
            .strings("scope", self.scope.iter().map(String::as_str))
            .strings(
                "allowSubscribe",
                self.allow_subscribe.iter().map(String::as_str),
            )
            .strings(
                "allowPublish",
                self.allow_publish.iter().map(String::as_str),
            );
        if let Some(role) = &self.role {
            w = w.string("role", role);
        }
        if let Some(parent) = &self.parent {
            w = w.string("parent", &parent.key());
        }
        w.finish()
    }
}

/// The door's answer: the request's coordinates (never its secrets), the authenticated owner,
/// the target and the agent's authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedAgentValidation {
    pub request: RetainedValidationRequest,
    pub owner: OwnerToken,
    pub authority: RetainedAgentAuthority,
}

impl RetainedAgentValidation {
    /// The wire answer, members in the reference's order.
    pub fn to_json(&self) -> String {
        let t = &self.request.target;
        let target = ObjectWriter::new()
            .string("owner", t.owner.as_str())
            .string("actor", t.actor.as_str())
            .string("lifecycleUid", t.lifecycle_uid.as_str())
            .finish();
        echo_current(
            RETAINED_VALIDATION_KIND,
            &self.request.envelope,
            Some(&self.owner),
        )
        .raw("target", &target)
        .raw("authority", &self.authority.to_json())
        .finish()
    }
}

/// The door and the host's validation (`authorizeRemoteRetainedAgentValidation`, the host
/// provider's `validateRetainedManagedAgent`, `completeRemoteRetainedAgentValidation`), in the
/// reference's order:
/// 1. the request's space is the host's (`permission-denied`);
/// 2. the holder's scope names `supervise` (`permission-denied`, F90);
/// 3. the target's owner is the authenticated owner (`permission-denied`);
/// 4. the registered-manager check at the request's serve epoch with its current-registration
///    proof ([`RETAINED_VALIDATION`]; F94's check);
/// 5. the host's validation (module docs): sentinel credentials, managed row, actor token,
///    envelope, unchanged re-read, a lifecycle uid on the row;
/// 6. the row is at the target's lifecycle (`conflict` otherwise: a replacement).
///
/// KV round trips: 1 (the gate); ledger requests: 3 (read, envelope walk, re-read).
#[derive(Debug, Clone)]
pub struct ValidateRetainedAgent {
    pub host: ManagerHost,
    pub caller: Supervisor,
    pub request: RetainedValidationRequest,
}

impl Script for ValidateRetainedAgent {
    type Output = RetainedAgentValidation;

    fn run(&self, cx: &mut Ctx<'_>) -> Result<RetainedAgentValidation, Halt> {
        let (r, e) = (&self.request, &self.request.envelope);
        e.require_host_space(&self.host, &format!("{WHAT} request"))?;
        self.caller.require_supervise(WHAT)?;
        let owner = self.caller.owner();
        if r.target.owner != *owner {
            return Err(EpError::permission_denied(format!(
                "{WHAT} may target only its authenticated owner {owner}, not {}",
                r.target.owner
            ))
            .into());
        }
        e.check_current(cx, &RETAINED_VALIDATION, &self.host, owner)?;
        let authority = self.validate_agent(cx)?;
        let t = &r.target;
        if authority.owner != t.owner
            || authority.actor != t.actor
            || authority.lifecycle_uid != t.lifecycle_uid
        {
            return Err(EpError::conflict(format!(
                "{WHAT} host returned a replacement principal or lifecycle"
            ))
            .into());
        }
        Ok(RetainedAgentValidation {
            request: r.clone(),
            owner: owner.clone(),
            authority,
        })
    }
}

impl ValidateRetainedAgent {
    /// The host's validation of the retained material against its own state (module docs).
    fn validate_agent(&self, cx: &mut Ctx<'_>) -> Result<RetainedAgentAuthority, Halt> {
        let r = &self.request;
        let principal = Principal::new(r.target.owner.clone(), r.target.actor.clone());
        let alias = principal.key();
        if !same_secret(r.sentinel_creds.expose(), &self.host.agents.sentinel_creds) {
            return Err(EpError::permission_denied(format!(
                "retained sentinel credential for {alias} does not match space \"{}\"",
                self.host.space
            ))
            .into());
        }
        let row = find_managed(cx, &principal)?.ok_or_else(|| {
            EpError::failed_precondition(format!(
                "retained agent {alias} does not have a managed row"
            ))
        })?;
        let digest = token_digest(r.actor_token.expose());
        let opens = row
            .token_hash
            .as_ref()
            .is_some_and(|stored| constant_time_eq(stored.as_str().as_bytes(), digest.as_bytes()));
        if !opens {
            return Err(EpError::permission_denied(AGENT_EXCHANGE_REFUSED).into());
        }
        cx.check_envelope(&row, Boundary::Exchange)?;
        if find_managed(cx, &principal)?.as_ref() != Some(&row) {
            return Err(EpError::conflict(format!(
                "retained agent {alias} changed during retained validation"
            ))
            .into());
        }
        let lifecycle_uid = row.lifecycle_uid.clone().ok_or_else(|| {
            EpError::failed_precondition(format!(
                "retained agent {alias} has no lifecycleUid on its current ledger row; re-grant \
                 it (bearers are lifecycle-bound from v0.4)"
            ))
        })?;
        let ActorRow {
            owner,
            actor,
            scope,
            allow_subscribe,
            allow_publish,
            role,
            parent,
            ..
        } = row;
        Ok(RetainedAgentAuthority {
            owner,
            actor,
            lifecycle_uid,
            scope,
            allow_subscribe,
            allow_publish,
            role,
            parent,
        })
    }
}

/// Whether two secrets are equal, compared as SHA-256 digests in constant time, so neither
/// their lengths nor where they differ shows in the time taken.
fn same_secret(a: &str, b: &str) -> bool {
    constant_time_eq(&Sha256::digest(a.as_bytes()), &Sha256::digest(b.as_bytes()))
}
