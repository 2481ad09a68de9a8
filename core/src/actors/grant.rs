//! What an operator's interactive grant carries (`cotal-authd actor grant`), and how the grant
//! listing (`actor ls`) shows a row. The rule that matters: every list is named or `--full`
//! grants all; an omitted list is refused, never read as "everything" (a grant only ever widens
//! by the operator's explicit word).

use serde_json::{json, Value};

use super::{ActorRow, RowSpace};
use crate::names::{ActorToken, DerivedOwner, LifecycleUid, Principal, SpaceName};

/// `--full`: every capability the plane knows.
pub const FULL_SCOPE: [&str; 4] = ["admin", "spawn", "supervise", "role:default"];
/// `--full`: every subject, both ways.
pub const EVERY_SUBJECT: &str = ">";

/// The lists a grant was given: each explicit (possibly empty), or `full` alone.
#[derive(Debug, Clone, Default)]
pub struct GrantLists {
    pub scope: Option<Vec<String>>,
    pub allow_subscribe: Option<Vec<String>>,
    pub allow_publish: Option<Vec<String>>,
    pub full: bool,
}

impl GrantLists {
    /// The row's `[scope, allowSubscribe, allowPublish]`: all three as given, or `--full`'s.
    /// A missing list, or `--full` beside an explicit one, is refused in one sentence that says
    /// how to grant (`space`, `actor`, `owner` fill in the command).
    pub fn resolve(
        &self,
        space: &SpaceName,
        actor: &ActorToken,
        owner: &DerivedOwner,
    ) -> Result<[Vec<String>; 3], String> {
        let given = [&self.scope, &self.allow_subscribe, &self.allow_publish];
        if self.full {
            if given.iter().any(|l| l.is_some()) {
                return Err(
                    "--full grants every capability and subject; drop it to grant explicit \
                     --scope/--allow-subscribe/--allow-publish lists"
                        .to_owned(),
                );
            }
            let every = vec![EVERY_SUBJECT.to_owned()];
            return Ok([FULL_SCOPE.map(str::to_owned).to_vec(), every.clone(), every]);
        }
        match (&self.scope, &self.allow_subscribe, &self.allow_publish) {
            (Some(scope), Some(sub), Some(publish)) => {
                Ok([scope.clone(), sub.clone(), publish.clone()])
            }
            _ => {
                let missing: Vec<&str> = ["--scope", "--allow-subscribe", "--allow-publish"]
                    .into_iter()
                    .zip(given)
                    .filter(|(_, l)| l.is_none())
                    .map(|(flag, _)| flag)
                    .collect();
                Err(format!(
                    "a grant names every list it carries, so it is missing {} (an empty list is \
                     ''); or grant everything with `cotal-authd actor grant {actor} --space \
                     {space} --owner {owner} --full`",
                    missing.join(", ")
                ))
            }
        }
    }
}

impl RowSpace {
    /// The listing's name of the space: `interactive` or `managed`.
    pub fn kind(self) -> &'static str {
        match self {
            RowSpace::Interactive => "interactive",
            RowSpace::Managed => "managed",
        }
    }
}

/// A list as the listing shows it: comma-joined, `-` when empty.
pub fn shown(list: &[String]) -> String {
    if list.is_empty() {
        "-".to_owned()
    } else {
        list.join(",")
    }
}

impl ActorRow {
    /// The row as `actor ls --json` lists it (no token hash: a listing never shows a secret's
    /// digest).
    pub fn listing_json(&self, kind: RowSpace) -> Value {
        json!({
            "kind": kind.kind(),
            "owner": self.owner.as_str(),
            "actor": self.actor.as_str(),
            "scope": self.scope,
            "allowSubscribe": self.allow_subscribe,
            "allowPublish": self.allow_publish,
            "role": self.role,
            "parent": self.parent.as_ref().map(Principal::key),
            "label": self.label,
            "lifecycleUid": self.lifecycle_uid.as_ref().map(LifecycleUid::as_str),
            "grantedAt": self.granted_at,
        })
    }

    /// The row as the `actor ls` table lists it: kind, owner, actor, the three lists, the
    /// lifecycle.
    pub fn listing_cells(&self, kind: RowSpace) -> Vec<String> {
        vec![
            kind.kind().to_owned(),
            self.owner.to_string(),
            self.actor.to_string(),
            shown(&self.scope),
            shown(&self.allow_subscribe),
            shown(&self.allow_publish),
            self.lifecycle_uid
                .as_ref()
                .map_or("-".to_owned(), ToString::to_string),
        ]
    }
}

/// The `actor ls` table's headers, one per [`ActorRow::listing_cells`] entry.
pub const LISTING_HEADERS: [&str; 7] = [
    "KIND",
    "OWNER",
    "ACTOR",
    "SCOPE",
    "SUBSCRIBE",
    "PUBLISH",
    "LIFECYCLE",
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names() -> (SpaceName, ActorToken, DerivedOwner) {
        (
            SpaceName::parse("demo").unwrap(),
            ActorToken::parse("alice").unwrap(),
            DerivedOwner::parse("u_aaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap(),
        )
    }

    #[test]
    fn an_omitted_list_is_refused_never_widened() {
        let (space, actor, owner) = names();
        let lists = GrantLists {
            scope: Some(vec![]),
            ..GrantLists::default()
        };
        let why = lists.resolve(&space, &actor, &owner).unwrap_err();
        assert!(
            why.contains("missing --allow-subscribe, --allow-publish"),
            "{why}"
        );
        assert!(
            why.ends_with("--owner u_aaaaaaaaaaaaaaaaaaaaaaaaaa --full`"),
            "{why}"
        );
    }

    #[test]
    fn full_grants_everything_and_refuses_an_explicit_list_beside_it() {
        let (space, actor, owner) = names();
        let full = GrantLists {
            full: true,
            ..GrantLists::default()
        };
        let [scope, sub, publish] = full.resolve(&space, &actor, &owner).unwrap();
        assert_eq!(scope, FULL_SCOPE.map(str::to_owned).to_vec());
        assert_eq!((sub, publish), (vec![">".to_owned()], vec![">".to_owned()]));
        let both = GrantLists {
            scope: Some(vec!["admin".into()]),
            full: true,
            ..GrantLists::default()
        };
        assert!(both
            .resolve(&space, &actor, &owner)
            .unwrap_err()
            .starts_with("--full grants every capability"));
    }

    #[test]
    fn explicit_lists_are_kept_as_given_and_listed_with_dashes_for_empty() {
        let (space, actor, owner) = names();
        let lists = GrantLists {
            scope: Some(vec![]),
            allow_subscribe: Some(vec!["a.>".into(), "b".into()]),
            allow_publish: Some(vec![]),
            full: false,
        };
        let [scope, sub, publish] = lists.resolve(&space, &actor, &owner).unwrap();
        assert!(scope.is_empty() && publish.is_empty());
        assert_eq!(shown(&sub), "a.>,b");
        assert_eq!(shown(&scope), "-");
    }
}
