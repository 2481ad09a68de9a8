//! Whether a plane serves (reference §2.8), and what an agent is told when it does not: a
//! plane that is not serving refuses every operation first, with a copy that gives the agent
//! nothing to act on but a retry (the operator's cause is on `/health` and in the log,
//! reference §2.6). The readiness as `/health` and a hosted handle report it, and the context
//! a platform assigned a hosted plane (reference §2.3), are here too: their member order is the
//! bytes a caller reads.

use serde_json::{json, Value};

use crate::error::EpError;
use crate::names::{LifecycleUid, SpaceName};
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
    /// Its server went away and it waits for it to come back, to re-take its plane claim and
    /// serve again; the cause for the operator. A state the reference does not have: it says
    /// `unavailable` with the cause, as the reference's vocabulary allows, but it is not an end.
    Reconnecting(String),
}

impl Readiness {
    /// The refusal every operation of a plane that does not serve answers with: for the agent
    /// that asked, nothing to act on but a retry (the operator's cause is on `/health` and in
    /// the log, reference §2.6). `None` while ready.
    pub fn refusal(&self) -> Option<EpError> {
        match self {
            Readiness::Ready => None,
            Readiness::Draining => Some(EpError::unavailable(DRAINING_AGENT_COPY)),
            Readiness::Unavailable(_) | Readiness::Reconnecting(_) => {
                Some(EpError::unavailable(FENCED_AGENT_COPY))
            }
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Readiness::Ready => "ready",
            Readiness::Draining => "draining",
            Readiness::Unavailable(_) | Readiness::Reconnecting(_) => "unavailable",
        }
    }

    /// The operator's cause of a plane that does not serve on its own account (`None` while
    /// ready or closing).
    pub fn cause(&self) -> Option<&str> {
        match self {
            Readiness::Unavailable(cause) | Readiness::Reconnecting(cause) => Some(cause),
            Readiness::Ready | Readiness::Draining => None,
        }
    }

    /// Whether the plane may still serve again without a new start: ready, or waiting for its
    /// server to come back.
    pub fn may_serve(&self) -> bool {
        matches!(self, Readiness::Ready | Readiness::Reconnecting(_))
    }

    /// `/health`'s body: `{ok, issuer, state, cause?, context?}`, the cause only once the
    /// plane stopped serving on its own (for good, or until its server is back), the context
    /// only for a hosted plane.
    pub fn health(&self, issuer: &str, context: Option<&HostedContext>) -> Value {
        let mut health = json!({"ok": true, "issuer": issuer, "state": self.as_str()});
        if let Some(map) = health.as_object_mut() {
            if let Some(cause) = self.cause() {
                map.insert("cause".into(), cause.into());
            }
            if let Some(context) = context {
                map.insert("context".into(), context.to_json());
            }
        }
        health
    }
}

/// The context a platform assigned a hosted plane (reference §2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedContext {
    pub account_public_key: String,
    pub lifecycle_uid: LifecycleUid,
}

/// What a hosted start says when an input is missing, before anything else is checked.
pub const HOSTED_NEEDS: &str =
    "hosted context needs an account, lifecycle, space, server and stateDir";

impl HostedContext {
    /// The reference's first checks of a hosted start (§2.3), in its order: every input given
    /// (`state_dir_given`: its state dir is not empty), the space's name, the lifecycle uid.
    /// The space and the assigned context; the error is one sentence.
    pub fn check(
        account_public_key: &str,
        lifecycle_uid: &str,
        space: &str,
        servers: &str,
        state_dir_given: bool,
    ) -> Result<(SpaceName, HostedContext), String> {
        let given = [account_public_key, lifecycle_uid, space, servers];
        if given.iter().any(|s| s.trim().is_empty()) || !state_dir_given {
            return Err(HOSTED_NEEDS.to_owned());
        }
        let space = SpaceName::parse(space).map_err(|e| e.message)?;
        let lifecycle_uid = LifecycleUid::parse(lifecycle_uid)
            .map_err(|e| format!("the hosted context's lifecycle uid: {}", e.message))?;
        let context = HostedContext {
            account_public_key: account_public_key.to_owned(),
            lifecycle_uid,
        };
        Ok((space, context))
    }

    /// Refuses a store whose data account is not the one assigned to this context.
    pub fn check_account(&self, data_account: &str) -> Result<(), String> {
        if data_account != self.account_public_key {
            return Err(
                "the store's data account does not match the assigned hosted context".to_owned(),
            );
        }
        Ok(())
    }

    /// The refusal of a state dir (`shown` as the operator gave it) that is not absolute.
    pub fn relative_state_dir(shown: &str) -> String {
        format!(
            "the hosted context's stateDir must be an absolute path, not {shown}; a hosted plane \
             resolves nothing from the working directory"
        )
    }

    /// The refusal of a second start of the live context of `space` on `state_dir` in one
    /// process: it holds the plane claim, and a restart would fence it.
    pub fn already_live(space: &SpaceName, state_dir: &str) -> String {
        format!(
            "a hosted context of space {space} on {state_dir} is live in this process and holds \
             its plane claim; close it before starting it again"
        )
    }

    /// `{accountPublicKey, lifecycleUid}`, as `/health` and the readiness show it.
    pub fn to_json(&self) -> Value {
        json!({
            "accountPublicKey": self.account_public_key,
            "lifecycleUid": self.lifecycle_uid.as_str(),
        })
    }
}

/// The readiness a hosted handle reports (reference §2.8): `{state, context, cause?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedReadiness {
    pub state: &'static str,
    pub context: HostedContext,
    pub cause: Option<String>,
}

impl HostedReadiness {
    /// `readiness` of the plane serving `context`: the cause only once it stopped serving on
    /// its own.
    pub fn of(readiness: &Readiness, context: HostedContext) -> HostedReadiness {
        let cause = readiness.cause().map(str::to_owned);
        HostedReadiness {
            state: readiness.as_str(),
            context,
            cause,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut readiness = json!({"state": self.state, "context": self.context.to_json()});
        if let (Some(cause), Some(map)) = (&self.cause, readiness.as_object_mut()) {
            map.insert("cause".into(), cause.clone().into());
        }
        readiness
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn context() -> HostedContext {
        HostedContext {
            account_public_key: "ACONTEXT".into(),
            lifecycle_uid: LifecycleUid::parse("0123456789abcdefghijklmnopqrstu").unwrap(),
        }
    }

    #[test]
    fn health_and_the_hosted_readiness_carry_the_cause_only_once_the_plane_ended_on_its_own() {
        let issuer = "urn:cotal:auth:s";
        assert_eq!(
            Readiness::Ready.health(issuer, None).to_string(),
            r#"{"ok":true,"issuer":"urn:cotal:auth:s","state":"ready"}"#
        );
        let ended = Readiness::Unavailable("fenced".into());
        let uid = context().lifecycle_uid.as_str().to_owned();
        assert_eq!(
            ended.health(issuer, Some(&context())).to_string(),
            format!(
                r#"{{"ok":true,"issuer":"urn:cotal:auth:s","state":"unavailable","cause":"fenced","context":{{"accountPublicKey":"ACONTEXT","lifecycleUid":"{uid}"}}}}"#
            )
        );
        assert_eq!(
            HostedReadiness::of(&Readiness::Draining, context())
                .to_json()
                .to_string(),
            format!(
                r#"{{"state":"draining","context":{{"accountPublicKey":"ACONTEXT","lifecycleUid":"{uid}"}}}}"#
            )
        );
        let hosted = HostedReadiness::of(&ended, context());
        assert_eq!(hosted.cause.as_deref(), Some("fenced"));
        assert_eq!(hosted.to_json()["cause"], "fenced");
    }

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
        let reconnecting = Readiness::Reconnecting(cause.clone());
        assert_eq!(reconnecting.refusal().unwrap().message, FENCED_AGENT_COPY);
        assert_eq!(
            [
                Readiness::Ready,
                Readiness::Draining,
                Readiness::Unavailable(cause),
                reconnecting,
            ]
            .map(|r| (r.as_str(), r.may_serve())),
            [
                ("ready", true),
                ("draining", false),
                ("unavailable", false),
                ("unavailable", true)
            ]
        );
    }
    #[test]
    fn a_hosted_start_is_checked_in_the_references_order_with_its_sentences() {
        let uid = "0123456789abcdefghijklmnopqrstu";
        let check = |account, uid, space, servers, dir| {
            HostedContext::check(account, uid, space, servers, dir)
        };
        assert_eq!(check("A", uid, "s", " ", true).unwrap_err(), HOSTED_NEEDS);
        assert_eq!(
            check("A", uid, "s", "nats://h", false).unwrap_err(),
            HOSTED_NEEDS
        );
        assert!(check("A", uid, "not a space", "nats://h", true).is_err());
        let e = check("A", "short", "s", "nats://h", true).unwrap_err();
        assert!(e.starts_with("the hosted context's lifecycle uid: "), "{e}");
        let (space, context) = check("ACONTEXT", uid, "s", "nats://h", true).unwrap();
        assert_eq!((space.as_str(), &context), ("s", &self::context()));
        assert_eq!(context.check_account("ACONTEXT"), Ok(()));
        assert_eq!(
            context.check_account("AOTHER").unwrap_err(),
            "the store's data account does not match the assigned hosted context"
        );
        assert_eq!(
            HostedContext::relative_state_dir("rel/dir"),
            "the hosted context's stateDir must be an absolute path, not rel/dir; a hosted plane \
             resolves nothing from the working directory"
        );
        assert_eq!(
            HostedContext::already_live(&space, "/srv/s"),
            "a hosted context of space s on /srv/s is live in this process and holds its plane \
             claim; close it before starting it again"
        );
    }
}
