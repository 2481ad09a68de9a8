//! The serving side of one targeted endpoint command on the `ep` rails (SPEC §13.2–§13.3): the
//! request subject of the `handle` / `exact` modes, the request envelope checked against it and
//! against the served contract, and the reply (its subject derived from the request's, never
//! from a transport reply target: the confused-deputy boundary of §13.2).
//!
//! Subject forms, `P` = `cotal.<space>` (zero-based tokens):
//! * class: `P.ep.one.<e>.<cmd>.<mode>.<tO>.<tA>.<tUid>.<O>.<A>.<uid>.<nonce>` (14 tokens);
//! * instance: `P.ep.inst.<e>.<iid>.<cmd>.<mode>.<tO>.<tA>.<tUid>.<O>.<A>.<uid>.<nonce>` (15);
//! * reply: `P.ep.reply.<e>.<iid>.<epoch>.<O>.<A>.<uid>.<nonce>`.
//!
//! The envelope ignores unknown fields (§5) and checks the defined ones in the catalog's
//! order: `v` (`unsupported-version`), `op` against the subject (`op-mismatch`) and the served
//! contract's digests (`contract-mismatch`), `class` (`class-mismatch`), `target` against the
//! subject's target tokens (`target-mismatch`), `from.id` against the subject's sender
//! (`sender-mismatch`), then `bind` (`failed-precondition` for another instance, `expired` for
//! another epoch of this one).

use serde_json::{json, Map, Value};

use crate::canon::Digest;
use crate::error::{EpError, ErrorCode};
use crate::gate::ProcessEpoch;
use crate::host::{retire_lifecycle_digests, AUTH_ENDPOINT, RETIRE_LIFECYCLE};
use crate::names::{
    space_prefix, ActorToken, CommandToken, EndpointName, InstanceId, LifecycleUid, OwnerToken,
    SpaceName,
};
use crate::profiles::RailCaller;
use crate::wire::safe_uint;

/// The two modes whose subject carries a full target triple.
const TRIPLE_MODES: [&str; 2] = ["handle", "exact"];

/// The served command one listener answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCommand {
    pub space: SpaceName,
    pub endpoint: EndpointName,
    pub command: CommandToken,
    /// The answering instance and the epoch its registration committed: the reply's tokens.
    pub instance: InstanceId,
    pub epoch: ProcessEpoch,
    pub input_digest: Digest,
    pub output_digest: Digest,
}

/// The command the plane's own `auth` instance serves on its control rail, at the epoch its
/// registration committed.
pub fn retire_lifecycle_served(
    space: &SpaceName,
    instance: &InstanceId,
    epoch: ProcessEpoch,
) -> Result<ServedCommand, EpError> {
    let (input_digest, output_digest) = retire_lifecycle_digests()?;
    Ok(ServedCommand {
        space: space.clone(),
        endpoint: EndpointName::parse(AUTH_ENDPOINT)?,
        command: CommandToken::parse(RETIRE_LIFECYCLE)?,
        instance: instance.clone(),
        epoch,
        input_digest,
        output_digest,
    })
}

/// A request subject of the served command, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetedSubject {
    pub target: RailCaller,
    pub caller: RailCaller,
    pub nonce: String,
}

/// A request checked against its subject and the served contract.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetedRequest {
    pub subject: TargetedSubject,
    /// The envelope's `id`, echoed by the reply.
    pub id: String,
    /// False for a cast (`replyExpected: false`): run, answer nothing.
    pub reply_expected: bool,
    pub args: Value,
}

/// How far a refused or failed call got (§13.3 `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Refused before the handler ran.
    NotExecuted,
    /// The handler ran.
    Executed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::NotExecuted => "not-executed",
            Outcome::Executed => "executed",
        }
    }
}

fn is_nonce(s: &str) -> bool {
    (22..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ServedCommand {
    /// The class-rail subscription (queue-qualified by the endpoint token, F70) and the own
    /// instance rail, both spanning every mode and caller of this one command.
    pub fn subscriptions(&self) -> [String; 2] {
        let (p, e, c) = (
            space_prefix(&self.space),
            self.endpoint.token(),
            &self.command,
        );
        [
            format!("{p}.ep.one.{e}.{c}.>"),
            format!("{p}.ep.inst.{e}.{}.{c}.>", self.instance),
        ]
    }

    /// Parses a request subject of this command; `None` when it is not one (wrong form, mode,
    /// or a token outside its grammar). A subject that does not parse names no caller and no
    /// nonce, so nothing can be answered: the listener drops it.
    pub fn subject(&self, subject: &str) -> Option<TargetedSubject> {
        let prefix = space_prefix(&self.space);
        let rest = subject.strip_prefix(&prefix)?.strip_prefix('.')?;
        let rest: Vec<&str> = rest.split('.').collect();
        let e = self.endpoint.token();
        let tail = match rest.as_slice() {
            ["ep", "one", endpoint, command, tail @ ..]
                if *endpoint == e.as_str() && *command == self.command.as_str() =>
            {
                tail
            }
            ["ep", "inst", endpoint, instance, command, tail @ ..]
                if *endpoint == e.as_str()
                    && *instance == self.instance.as_str()
                    && *command == self.command.as_str() =>
            {
                tail
            }
            _ => return None,
        };
        let [mode, t_owner, t_actor, t_uid, owner, actor, uid, nonce] = tail else {
            return None;
        };
        if !TRIPLE_MODES.contains(mode) || !is_nonce(nonce) {
            return None;
        }
        let triple = |o: &str, a: &str, u: &str| {
            Some(RailCaller {
                owner: OwnerToken::parse(o).ok()?,
                actor: ActorToken::parse(a).ok()?,
                uid: LifecycleUid::parse(u).ok()?,
            })
        };
        Some(TargetedSubject {
            target: triple(t_owner, t_actor, t_uid)?,
            caller: triple(owner, actor, uid)?,
            nonce: (*nonce).to_owned(),
        })
    }

    /// The reply subject of a call: this instance's endpoint, instance and epoch tokens, then
    /// the caller triple and nonce copied from the request subject.
    pub fn reply_subject(&self, subject: &TargetedSubject) -> String {
        format!(
            "{}.ep.reply.{}.{}.{}.{}.{}",
            space_prefix(&self.space),
            self.endpoint.token(),
            self.instance,
            self.epoch,
            subject.caller,
            subject.nonce
        )
    }

    /// Checks the envelope `body` of a call on `subject` (see the module doc). The error
    /// carries the envelope's `id` when it had a usable one, so the refusal can echo it.
    pub fn request(
        &self,
        subject: TargetedSubject,
        body: &[u8],
    ) -> Result<TargetedRequest, (Option<String>, EpError)> {
        let Ok(Value::Object(envelope)) = serde_json::from_slice::<Value>(body) else {
            return Err((
                None,
                EpError::bad_request("the endpoint request is not a JSON object"),
            ));
        };
        let id = envelope
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| {
                (1..=64).contains(&id.len())
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            })
            .map(str::to_owned);
        let refuse = |e: EpError| (id.clone(), e);
        let Some(request_id) = id.clone() else {
            return Err(refuse(EpError::bad_request(
                "the endpoint request's id must be 1..64 characters of [A-Za-z0-9_-]",
            )));
        };
        if envelope.get("v").and_then(safe_uint) != Some(1) {
            return Err(refuse(EpError::new(
                ErrorCode::UnsupportedVersion,
                "this endpoint speaks envelope version 1 only",
            )));
        }
        self.check_op(&envelope).map_err(&refuse)?;
        if envelope.get("class").and_then(Value::as_str) != Some("ephemeral") {
            return Err(refuse(EpError::new(
                ErrorCode::ClassMismatch,
                format!("{} is an ephemeral command", self.command),
            )));
        }
        check_target(&envelope, &subject.target).map_err(&refuse)?;
        let sender = format!("{}.{}", subject.caller.owner, subject.caller.actor);
        let from = envelope
            .get("from")
            .and_then(|f| f.get("id"))
            .and_then(Value::as_str);
        if from != Some(sender.as_str()) {
            return Err(refuse(EpError::new(
                ErrorCode::SenderMismatch,
                format!(
                    "the request's from.id {} is not its subject's sender {sender}",
                    from.unwrap_or("<absent>")
                ),
            )));
        }
        self.check_bind(&envelope).map_err(&refuse)?;
        let reply_expected = match envelope.get("replyExpected") {
            Some(Value::Bool(expected)) => *expected,
            _ => {
                return Err(refuse(EpError::bad_request(
                    "the endpoint request's replyExpected must be a boolean",
                )))
            }
        };
        Ok(TargetedRequest {
            subject,
            id: request_id,
            reply_expected,
            args: envelope.get("args").cloned().unwrap_or(Value::Null),
        })
    }

    fn check_op(&self, envelope: &Map<String, Value>) -> Result<(), EpError> {
        let op = envelope.get("op").and_then(Value::as_object);
        let field = |k: &str| op.and_then(|o| o.get(k)).and_then(Value::as_str);
        if field("endpoint") != Some(self.endpoint.as_str())
            || field("command") != Some(self.command.as_str())
        {
            return Err(EpError::new(
                ErrorCode::OpMismatch,
                format!(
                    "the request's op names {}/{}, not the subject's {}/{}",
                    field("endpoint").unwrap_or("<absent>"),
                    field("command").unwrap_or("<absent>"),
                    self.endpoint,
                    self.command
                ),
            ));
        }
        let digests = (
            field("inputDigest").and_then(|d| Digest::parse_prefixed(d).ok()),
            field("outputDigest").and_then(|d| Digest::parse_prefixed(d).ok()),
        );
        if digests != (Some(self.input_digest), Some(self.output_digest)) {
            return Err(EpError::new(
                ErrorCode::ContractMismatch,
                format!(
                    "the request pins contract digests other than {}'s served input {} and \
                     output {}",
                    self.command,
                    self.input_digest.to_prefixed(),
                    self.output_digest.to_prefixed()
                ),
            ));
        }
        Ok(())
    }

    fn check_bind(&self, envelope: &Map<String, Value>) -> Result<(), EpError> {
        let Some(bind) = envelope.get("bind") else {
            return Ok(());
        };
        let instance = bind.get("instanceId").and_then(Value::as_str);
        let epoch = bind.get("epoch").and_then(safe_uint);
        let refused = |code, message: String| {
            Err(EpError::new(code, message)
                .with_detail(json!({"kind": "ai.cotal.ep.bind-refused"})))
        };
        match (instance, epoch) {
            (Some(i), Some(_)) if i != self.instance.as_str() => refused(
                ErrorCode::FailedPrecondition,
                format!(
                    "the request is bound to instance {i}; this is instance {}",
                    self.instance
                ),
            ),
            (Some(_), Some(e)) if e != self.epoch.0 => refused(
                ErrorCode::Expired,
                format!(
                    "the request is bound to epoch {e} of instance {}, which serves at epoch {}",
                    self.instance, self.epoch
                ),
            ),
            (Some(_), Some(_)) => Ok(()),
            _ => Err(EpError::bad_request(
                "the request's bind must be {instanceId, epoch}",
            )),
        }
    }
}

/// `target` is required in the triple modes and must name the subject's target tokens.
fn check_target(envelope: &Map<String, Value>, target: &RailCaller) -> Result<(), EpError> {
    let t = envelope.get("target").and_then(Value::as_object);
    let field = |k: &str| t.and_then(|o| o.get(k)).and_then(Value::as_str);
    if field("owner") != Some(target.owner.as_str())
        || field("actor") != Some(target.actor.as_str())
        || field("lifecycleUid") != Some(target.uid.as_str())
    {
        return Err(EpError::new(
            ErrorCode::TargetMismatch,
            format!(
                "the request's target must be the subject's {}/{} at lifecycle {}",
                target.owner, target.actor, target.uid
            ),
        ));
    }
    Ok(())
}

/// The reply body of a successful call: `{v:1, id, ok:true, data}`.
pub fn reply_ok(id: &str, data: Value) -> Vec<u8> {
    json!({"v": 1, "id": id, "ok": true, "data": data})
        .to_string()
        .into_bytes()
}

/// The reply body of a refused or failed call: `{v:1, id, ok:false, error: {code, message,
/// details?, outcome}}`.
pub fn reply_error(id: &str, error: &EpError, outcome: Outcome) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("code".into(), error.code.as_str().into());
    body.insert("message".into(), error.message.clone().into());
    if !error.details.is_empty() {
        body.insert("details".into(), Value::Array(error.details.clone()));
    }
    body.insert("outcome".into(), outcome.as_str().into());
    json!({"v": 1, "id": id, "ok": false, "error": body})
        .to_string()
        .into_bytes()
}
