//! The three questions the sign-in path asks the actor ledger (reference §6.5), each answered
//! from a fresh read and failing closed:
//!
//! * [`authorize_human_grant`] — may this signed-in human exchange for this actor (with this
//!   view)? Interactive rows only: the IdP mint boundary never reads a managed row as a grant.
//! * [`authorize_agent_exchange`] — does this agent secret open this managed row? Every
//!   authentication failure is one sentence, so a caller learns nothing about which agents
//!   exist; the digest comparison is constant-time; the delegation envelope is re-walked after
//!   the secret matched, since a spawner may have been narrowed since the spawn.
//! * [`authorize_connect`] — may a bearer still connect? Either space; the bearer's scope must be
//!   inside the row's current scope and its lifecycle uid must be the row's, so a re-grant (which
//!   rotates the uid) kills every bearer of the predecessor at its next connect.

use sha2::{Digest as _, Sha256};

use super::row::{ActorRow, RowSpace};
use super::{ActorsOutcome, ActorsRequest, Boundary, Held, LedgerRead};
use crate::error::EpError;
use crate::mac::constant_time_eq;
use crate::names::{ActorToken, DerivedOwner, LifecycleUid, OwnerToken, Principal, SpaceName};

/// The one sentence every failed agent authentication gets (reference §3.5).
pub const AGENT_EXCHANGE_REFUSED: &str = "agent exchange refused: unknown agent or wrong secret \
     - if this agent should exist, respawn it (`cotal spawn`) to rotate its grant";

/// What an interactive grant lets a signed-in human exchange for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HumanGrant {
    pub row: ActorRow,
    /// The row's lifecycle: every bearer of this exchange is bound to it.
    pub lifecycle_uid: LifecycleUid,
}

/// The SHA-256 hex digest of an agent's secret, as its managed row stores it.
pub fn token_digest(secret: &str) -> String {
    data_encoding::HEXLOWER.encode(&Sha256::digest(secret.as_bytes()))
}

fn find<L: LedgerRead>(
    ledger: &mut L,
    space: RowSpace,
    principal: &Principal,
) -> Result<Option<ActorRow>, L::Error> {
    Ok(ledger.find_row(space, principal)?.map(|h| h.row))
}

/// The IdP mint boundary (`ledgerAuthorizeGrant`): the interactive row of `owner.actor`, with a
/// lifecycle uid, whose scope holds `required_scope` when the exchange asks for a view. A
/// missing row says how to grant it (or that the name is a managed agent's); every refusal is
/// `permission-denied` (a ledger that cannot answer is [`super::denied`]'s).
pub fn authorize_human_grant<L: LedgerRead>(
    ledger: &mut L,
    space: &SpaceName,
    owner: &DerivedOwner,
    actor: &ActorToken,
    required_scope: Option<(&str, &str)>,
) -> Result<HumanGrant, L::Error> {
    let principal = Principal::new(owner.owner().clone(), actor.clone());
    let Some(row) = find(ledger, RowSpace::Interactive, &principal)? else {
        if find(ledger, RowSpace::Managed, &principal)?.is_some() {
            return Err(EpError::permission_denied(format!(
                "actor {:?} is a managed agent - it exchanges its own secret, never a human \
                 sign-in; sign in as an interactive actor instead",
                actor.as_str()
            ))
            .into());
        }
        return Err(EpError::permission_denied(format!(
            "actor {:?} is not granted for this user - an operator grants it with \
             `cotal-authd actor grant {actor} --space {space} --owner {owner} --full` (or \
             explicit --scope/--allow-subscribe/--allow-publish lists)",
            actor.as_str()
        ))
        .into());
    };
    let Some(lifecycle_uid) = row.lifecycle_uid.clone() else {
        return Err(EpError::permission_denied(format!(
            "actor {:?} has no lifecycle uid on its grant - re-grant it (`cotal-authd actor \
             grant {actor} --space {space} --owner {owner} …`)",
            actor.as_str()
        ))
        .into());
    };
    if let Some((view, scope)) = required_scope {
        if !row.scope.iter().any(|s| s == scope) {
            return Err(EpError::permission_denied(format!(
                "the {view} view needs scope {scope:?}, which actor {:?} is not granted - \
                 re-grant the whole row with it: `cotal-authd actor grant {actor} --space \
                 {space} --owner {owner} --scope '{}' --allow-subscribe '{}' --allow-publish \
                 '{}'`",
                actor.as_str(),
                row.scope
                    .iter()
                    .map(String::as_str)
                    .chain([scope])
                    .collect::<Vec<_>>()
                    .join(","),
                row.allow_subscribe.join(","),
                row.allow_publish.join(","),
            ))
            .into());
        }
    }
    Ok(HumanGrant { row, lifecycle_uid })
}

/// The stored hash a refusal with no row (or a row without a token hash) compares the digest
/// against: 64 hex digits like a real one, so the comparison does the same work. No secret's
/// digest opens anything through it — without a row the answer is a refusal whatever the compare
/// says.
const DUMMY_TOKEN_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A managed row as the ledger stores one (a spawned agent's, of typical size), parsed by a
/// refusal that found no row: a known agent's refusal pays the row parse, so an unknown one pays
/// it too.
const DECOY_ROW: &str = r#"{
  "ver": 1,
  "owner": "u_aaaaaaaaaaaaaaaaaaaaaaaaaa",
  "actor": "decoy",
  "scope": [],
  "allowSubscribe": ["team.>"],
  "allowPublish": ["team.a"],
  "parent": "u_aaaaaaaaaaaaaaaaaaaaaaaaaa.cli",
  "tokenHash": "0000000000000000000000000000000000000000000000000000000000000000",
  "lifecycleUid": "aaaaaaaaaaaaaaaaaaaaaaaaaa",
  "grantedAt": "2026-12-01T00:00:00.000Z"
}"#;

/// The agent-secret boundary (`ledgerAuthorizeAgentExchange`): the managed row of
/// `owner.actor` whose token hash is the secret's digest, compared in constant time. An owner
/// or actor that does not parse, a missing or unreadable row and a wrong secret all get
/// [`AGENT_EXCHANGE_REFUSED`]: none of them may tell a prober whether the agent exists.
///
/// **Equal-time refusals.** Every refusal pays the same work as a known agent with a wrong
/// secret: a row is parsed (the stored one, or `DECOY_ROW` when there is none), and the secret
/// is always digested and compared in constant time, against the row's hash or, when there is
/// no row (or it holds no hash), against `DUMMY_TOKEN_HASH`. So neither the sentence nor the
/// time of an answer tells an unknown agent from a known one (the `agent_refusal` benchmark
/// measures the two side by side; the file ledger reads a decoy file for a missing row, so its
/// I/O is the same too). After the secret matched, the
/// envelope walk's own sentence says what was narrowed.
pub fn authorize_agent_exchange<L: LedgerRead>(
    ledger: &mut L,
    owner: &str,
    actor: &str,
    secret: &str,
) -> Result<ActorRow, L::Error> {
    let principal = match (OwnerToken::parse(owner), ActorToken::parse(actor)) {
        (Ok(owner), Ok(actor)) if DerivedOwner::parse(owner.as_str()).is_ok() => {
            Some(Principal::new(owner, actor))
        }
        _ => None,
    };
    // A missing and an unreadable row are the same refusal; only a script's suspension passes.
    let row = match principal {
        Some(principal) => match ledger.read(ActorsRequest::Find {
            space: RowSpace::Managed,
            principal,
        })? {
            ActorsOutcome::Found(Some(held)) => Some(held.row),
            _ => None,
        },
        None => None,
    };
    if row.is_none() {
        // `black_box`: the parse must run although its result is not used.
        std::hint::black_box(ActorRow::from_file_bytes(
            std::hint::black_box(DECOY_ROW.as_bytes()),
            RowSpace::Managed,
        ))
        .ok();
    }
    let digest = token_digest(secret);
    let stored = row
        .as_ref()
        .and_then(|row| row.token_hash.as_ref())
        .map_or(DUMMY_TOKEN_HASH, |stored| stored.as_str());
    let matches = constant_time_eq(stored.as_bytes(), digest.as_bytes());
    match row {
        Some(row) if matches && row.token_hash.is_some() => {
            ledger.check_envelope(&row, Boundary::Exchange)?;
            Ok(row)
        }
        _ => Err(EpError::permission_denied(AGENT_EXCHANGE_REFUSED).into()),
    }
}

/// The callout's connect boundary (`ledgerAuthorizeConnect`): the row of `principal` in either space (a principal in
/// both is a broken ledger, which denies), every entry of the bearer's `scope` still in the
/// row's scope, and the bearer's lifecycle uid equal to the row's. Applies to viewed bearers too.
pub fn authorize_connect<L: LedgerRead>(
    ledger: &mut L,
    principal: &Principal,
    bearer_scope: &[String],
    bearer_uid: Option<&LifecycleUid>,
) -> Result<Held, L::Error> {
    let Some(held) = ledger.find_unified(principal)? else {
        return Err(EpError::permission_denied(format!(
            "actor {:?} of owner {} is not granted (any more)",
            principal.actor().as_str(),
            principal.owner()
        ))
        .into());
    };
    if let Some(extra) = bearer_scope.iter().find(|s| !held.row.scope.contains(s)) {
        return Err(EpError::permission_denied(format!(
            "bearer scope {extra:?} exceeds the actor's current grant"
        ))
        .into());
    }
    match (bearer_uid, &held.row.lifecycle_uid) {
        (Some(bearer), Some(row)) if bearer == row => Ok(held),
        (None, _) => Err(EpError::permission_denied(
            "the bearer carries no lifecycle uid; exchange again",
        )
        .into()),
        _ => Err(EpError::permission_denied(
            "the bearer belongs to a previous grant of this actor (its lifecycle was rotated by \
             a re-grant); exchange again",
        )
        .into()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::actors::{ActorLedger, MemoryActors, TokenHash};
    use crate::names::LifecycleUid;

    const OWNER: &str = "u_cccccccccccccccccccccccccc";
    const SECRET: &str = "the-agent-secret";

    fn ledger_with_worker() -> MemoryActors {
        let ledger = MemoryActors::new();
        let row = ActorRow {
            owner: OwnerToken::parse(OWNER).unwrap(),
            actor: ActorToken::parse("worker").unwrap(),
            scope: vec![],
            allow_subscribe: vec!["team.>".into()],
            allow_publish: vec!["team.a".into()],
            role: None,
            parent: None,
            label: None,
            token_hash: Some(TokenHash::parse(&token_digest(SECRET)).unwrap()),
            lifecycle_uid: Some(LifecycleUid::mint([2; 20])),
            granted_at: "2023-11-14T22:13:20.000Z".into(),
        };
        assert!(matches!(
            ledger.execute(&ActorsRequest::GrantManaged(row)),
            ActorsOutcome::Granted(_)
        ));
        ledger
    }

    /// The stand-in a refusal without a row compares against has a real digest's shape, so
    /// that compare does the same work as a known agent's.
    #[test]
    fn the_dummy_hash_is_shaped_like_a_stored_digest() {
        assert_eq!(DUMMY_TOKEN_HASH.len(), token_digest(SECRET).len());
        assert!(TokenHash::parse(DUMMY_TOKEN_HASH).is_ok());
    }

    /// The decoy a refusal without a row parses is a valid managed row, so its parse runs to
    /// the end as a stored row's does.
    #[test]
    fn the_decoy_row_parses_as_a_managed_row() {
        let row = ActorRow::from_file_bytes(DECOY_ROW.as_bytes(), RowSpace::Managed).unwrap();
        assert_eq!(row.token_hash.unwrap().as_str(), DUMMY_TOKEN_HASH);
    }

    /// A known agent with a wrong secret and an unknown agent (and a name that does not even
    /// parse) get the identical error, code and sentence, while the right secret still opens
    /// the row.
    #[test]
    fn known_wrong_and_unknown_refusals_are_the_identical_error() {
        let ledger = ledger_with_worker();
        let known_wrong = authorize_agent_exchange(&mut &ledger, OWNER, "worker", "a-guess");
        let unknown = authorize_agent_exchange(&mut &ledger, OWNER, "ghost", SECRET);
        let unparsed = authorize_agent_exchange(&mut &ledger, "u_short", "worker", SECRET);
        let expected = EpError::permission_denied(AGENT_EXCHANGE_REFUSED);
        assert_eq!(known_wrong, Err(expected.clone()));
        assert_eq!(unknown, Err(expected.clone()));
        assert_eq!(unparsed, Err(expected));
        let row = authorize_agent_exchange(&mut &ledger, OWNER, "worker", SECRET).unwrap();
        assert_eq!(row.actor.as_str(), "worker");
    }
}
