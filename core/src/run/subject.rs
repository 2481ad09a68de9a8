//! The `ep` request-plane subjects a run request rides (SPEC §13.2, §13.15), as far as run
//! admission reads them: `cotal.<space>.ep[.v1].<one|all|inst>.<endpointToken>[.<instanceId>]
//! .<command>[.<authz>[.<target…>]].<owner>.<actor>.<uid>[.<generation>].<nonce>`. The `v1` rail
//! carries the caller's issued generation between the uid and the nonce.

use crate::names::{ActorToken, EndpointToken, InstanceId, LifecycleUid, OwnerToken};

use crate::issued::IssuedGeneration;

/// The reserved authorization-mode tokens (including `exact`, SPEC Q-20) with their pinned
/// target arity.
const AUTHZ_MODES: [(&str, usize); 7] = [
    ("self", 0),
    ("owner", 1),
    ("any", 1),
    ("child", 1),
    ("ledger", 1),
    ("handle", 3),
    ("exact", 3),
];

/// The whole-subject bound of the rails.
pub const MAX_EP_SUBJECT_BYTES: usize = 1024;

/// How a request routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    One,
    All,
    Inst(InstanceId),
}

/// A parsed request subject. `target` is the authz mode token when the form is targeted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSubject {
    pub space: String,
    pub v1: bool,
    pub route: Route,
    pub endpoint: EndpointToken,
    pub command: String,
    pub target: Option<String>,
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub uid: LifecycleUid,
    /// Present exactly on the `v1` rail.
    pub generation: Option<IssuedGeneration>,
    pub nonce: String,
}

fn is_nonce(s: &str) -> bool {
    (22..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_command(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Parses a request subject, or `None` for anything that is not exactly one (a subject with no
/// defined shape has no sender and must not be handled). Token grammars are checked here too:
/// this is a forwarded string, not a broker-delivered one.
pub fn parse_request_subject(subject: &str) -> Option<RequestSubject> {
    if subject.len() > MAX_EP_SUBJECT_BYTES {
        return None;
    }
    let parts: Vec<&str> = subject.split('.').collect();
    let mut it = parts.iter().copied().peekable();
    if it.next()? != "cotal" {
        return None;
    }
    let space = it.next()?.to_owned();
    if it.next()? != "ep" {
        return None;
    }
    let v1 = it.peek() == Some(&"v1");
    if v1 {
        it.next();
    }
    let route = it.next()?;
    let endpoint = EndpointToken::parse(it.next()?).ok()?;
    let route = match route {
        "one" => Route::One,
        "all" => Route::All,
        "inst" => Route::Inst(InstanceId::parse(it.next()?).ok()?),
        _ => return None,
    };
    let command = it.next()?;
    if !is_command(command) {
        return None;
    }
    let rest: Vec<&str> = it.collect();
    let (target, tail) = match rest.first() {
        Some(first) => match AUTHZ_MODES.iter().find(|(m, _)| m == first) {
            Some((mode, arity)) => (Some((*mode).to_owned()), rest.get(1 + arity..)?),
            None => (None, rest.as_slice()),
        },
        None => return None,
    };
    let (owner, actor, uid, generation, nonce) = match (v1, tail) {
        (true, [o, a, u, g, n]) => (o, a, u, Some(IssuedGeneration::parse(g)?), n),
        (false, [o, a, u, n]) => (o, a, u, None, n),
        _ => return None,
    };
    if space.is_empty() || !is_nonce(nonce) {
        return None;
    }
    Some(RequestSubject {
        space,
        v1,
        route,
        endpoint,
        command: command.to_owned(),
        target,
        owner: OwnerToken::parse(owner).ok()?,
        actor: ActorToken::parse(actor).ok()?,
        uid: LifecycleUid::parse(uid).ok()?,
        generation,
        nonce: (*nonce).to_owned(),
    })
}
