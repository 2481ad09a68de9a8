//! The delegation envelope (reference `assertWithinSpawnerGrant`): everything under an owner
//! stays within its spawner's grant, at every hop of the parent chain.

use std::collections::BTreeSet;

use super::row::ActorRow;
use super::{Boundary, Denial};
use crate::names::Principal;

/// Does policy pattern `cap` cover every channel `pattern` matches? `*` is one token, `>` one or
/// more trailing tokens; a non-terminal `>` on either side covers nothing (fail closed).
pub fn pattern_covers(cap: &str, pattern: &str) -> bool {
    let c: Vec<&str> = cap.split('.').collect();
    let p: Vec<&str> = pattern.split('.').collect();
    let inner_tail = |v: &[&str]| v.split_last().is_some_and(|(_, init)| init.contains(&">"));
    if inner_tail(&c) || inner_tail(&p) {
        return false;
    }
    for (i, cs) in c.iter().enumerate() {
        let Some(ps) = p.get(i) else {
            // The pattern's matches are exactly p.len() tokens, fewer than the cap requires
            // (a `>` cap needs at least one more token too).
            return false;
        };
        match (*cs, *ps) {
            (">", _) => return true,
            (_, ">") => return false,
            ("*", _) => {}
            (_, "*") => return false,
            (a, b) if a != b => return false,
            _ => {}
        }
    }
    c.len() == p.len()
}

/// Is `pattern` covered by some single entry of `allow`? A union of entries is deliberately not
/// considered: per-entry containment may refuse a covered pattern, never admit an uncovered one.
pub fn pattern_in_allow(allow: &[String], pattern: &str) -> bool {
    allow.iter().any(|a| pattern_covers(a, pattern))
}

/// Walks `row`'s whole parent chain with `lookup` (a unified read of both spaces). Stops at an
/// authority root: an ancestor with `admin` in scope, or a parentless row. A cycle, a missing
/// ancestor, a cross-owner hop or any widening refuses; the refusal names what exceeds and the
/// `cotal actor grant` command that would admit it. Lookup failures pass through unchanged.
pub fn check_within_spawner_grant(
    row: &ActorRow,
    boundary: Boundary,
    lookup: &mut dyn FnMut(&Principal) -> Result<Option<ActorRow>, Denial>,
) -> Result<(), Denial> {
    let mut walk = Walk {
        leaf: row.actor.as_str(),
        boundary,
        deep: false,
    };
    let mut seen = BTreeSet::from([row.principal()]);
    let mut child = row.clone();
    while let Some(parent_key) = child.parent.clone() {
        if !seen.insert(parent_key.clone()) {
            return Err(Denial::Refused(format!(
                "agent {:?}: its delegation chain contains a cycle at {:?} - a broken ledger \
                 denies; repair the parent links (`cotal actor list`)",
                walk.leaf,
                parent_key.key()
            )));
        }
        let Some(parent) = lookup(&parent_key)? else {
            return Err(walk.missing_spawner(&parent_key));
        };
        if parent.scope.iter().any(|s| s == "admin") {
            return Ok(());
        }
        if child.owner != *parent_key.owner() {
            return Err(Denial::Refused(format!(
                "agent {:?} cannot be delegated by spawner {:?} of a different owner - \
                 cross-owner spawns are operator (admin) launches only",
                child.principal().key(),
                parent_key.key()
            )));
        }
        let excess = Excess::of(&child, &parent);
        if !excess.is_empty() {
            return Err(walk.exceeds(&child, &parent_key, &parent, &excess));
        }
        child = parent;
        walk.deep = true;
    }
    Ok(())
}

/// Where the walk of [`check_within_spawner_grant`] stands: the leaf it started from, the
/// boundary it answers for, and whether the current child is an ancestor of the leaf (every
/// hop after the first), which the refusals name.
struct Walk<'a> {
    leaf: &'a str,
    boundary: Boundary,
    deep: bool,
}

impl Walk<'_> {
    /// The refusal for an ancestor with no row: at spawn, how to grant it; at exchange, that
    /// revoking a spawner revoked everything under it.
    fn missing_spawner(&self, parent_key: &Principal) -> Denial {
        let (leaf, deep) = (self.leaf, self.deep);
        let (p_owner, p_actor) = (parent_key.owner().as_str(), parent_key.actor().as_str());
        Denial::Refused(match self.boundary {
            Boundary::Spawn => format!(
                "spawner {:?}{} has no grant in this space - delegation flows from a granted \
                 spawner chain, so grant {p_actor:?} under owner {p_owner:?} first, carrying \
                 \"spawn\" in its --scope, and name --allow-subscribe and --allow-publish \
                 yourself: a flag left off is the WIDE default",
                parent_key.key(),
                if deep {
                    format!(" (an ancestor of {leaf:?})")
                } else {
                    String::new()
                }
            ),
            Boundary::Exchange => format!(
                "agent {leaf:?}: spawner {:?}{} is no longer granted - revoking a spawner \
                 revokes everything under it; re-grant it, then respawn (`cotal spawn`)",
                parent_key.key(),
                if deep { " (an ancestor)" } else { "" }
            ),
        })
    }

    /// The refusal for a child whose grant exceeds its parent's: what exceeds, and the grant
    /// command that would widen the parent to admit it.
    fn exceeds(
        &self,
        child: &ActorRow,
        parent_key: &Principal,
        parent: &ActorRow,
        excess: &Excess<'_>,
    ) -> Denial {
        let leaf = self.leaf;
        let wrongs = excess.wrongs(child, parent);
        let add_scope: Vec<&String> = excess
            .scope
            .iter()
            .copied()
            .chain(&excess.role_cap)
            .collect();
        let widen = widen_command(parent_key, parent, &add_scope, &excess.sub, &excess.publish);
        let who = if self.deep {
            format!("agent {leaf:?}: its ancestor {:?}", child.principal().key())
        } else {
            format!("agent {leaf:?}")
        };
        Denial::Refused(match self.boundary {
            Boundary::Spawn => format!(
                "{who} would exceed its spawner's grant - delegation only narrows: {} - the \
                 mesh operator widens the spawner with `{widen}`, then respawn",
                wrongs.join("; ")
            ),
            Boundary::Exchange => format!(
                "{who} exceeds its spawner's CURRENT grant (narrowed since spawn): {} - the \
                 mesh operator widens the spawner with `{widen}`, or respawn within it",
                wrongs.join("; ")
            ),
        })
    }
}

/// What a child's grant holds beyond its parent's: scope entries the parent lacks, read and
/// post patterns no single parent entry covers, and the `role:<r>` capability its role needs
/// when the parent's scope lacks it.
struct Excess<'a> {
    scope: Vec<&'a String>,
    sub: Vec<&'a String>,
    publish: Vec<&'a String>,
    role_cap: Option<String>,
}

impl<'a> Excess<'a> {
    fn of(child: &'a ActorRow, parent: &ActorRow) -> Self {
        Excess {
            scope: child
                .scope
                .iter()
                .filter(|s| !parent.scope.contains(s))
                .collect(),
            sub: child
                .allow_subscribe
                .iter()
                .filter(|c| !pattern_in_allow(&parent.allow_subscribe, c))
                .collect(),
            publish: child
                .allow_publish
                .iter()
                .filter(|c| !pattern_in_allow(&parent.allow_publish, c))
                .collect(),
            role_cap: child
                .role
                .as_ref()
                .map(|r| format!("role:{r}"))
                .filter(|cap| !parent.scope.contains(cap)),
        }
    }

    fn is_empty(&self) -> bool {
        self.scope.is_empty()
            && self.sub.is_empty()
            && self.publish.is_empty()
            && self.role_cap.is_none()
    }

    /// One clause per kind that exceeds, in the order scope, read, post, role, each naming
    /// the parent's grant it exceeds.
    fn wrongs(&self, child: &ActorRow, parent: &ActorRow) -> Vec<String> {
        let join = |v: &[&String]| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        let or_none = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        let mut wrongs = Vec::new();
        if !self.scope.is_empty() {
            wrongs.push(format!(
                "scope [{}] beyond [{}]",
                join(&self.scope),
                or_none(&parent.scope)
            ));
        }
        if !self.sub.is_empty() {
            wrongs.push(format!(
                "read [{}] beyond [{}]",
                join(&self.sub),
                or_none(&parent.allow_subscribe)
            ));
        }
        if !self.publish.is_empty() {
            wrongs.push(format!(
                "post [{}] beyond [{}]",
                join(&self.publish),
                or_none(&parent.allow_publish)
            ));
        }
        if let (Some(cap), Some(role)) = (&self.role_cap, &child.role) {
            wrongs.push(format!(
                "role {role:?} beyond scope [{}] (a role is delegated with the `{cap}` \
                 capability)",
                or_none(&parent.scope)
            ));
        }
        wrongs
    }
}

/// The exact re-grant admitting the refused delegation: the spawner's current row with the
/// missing entries unioned in, every defaulting flag named (an omitted flag is the wide
/// default), free-form values single-quoted for a POSIX shell.
fn widen_command(
    spawner: &Principal,
    row: &ActorRow,
    add_scope: &[&String],
    add_sub: &[&String],
    add_pub: &[&String],
) -> String {
    let union = |base: &[String], add: &[&String]| {
        let mut out: Vec<String> = Vec::new();
        for s in base.iter().chain(add.iter().copied()) {
            if !out.contains(s) {
                out.push(s.clone());
            }
        }
        out.join(",")
    };
    let shq = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let mut parts = vec![
        format!(
            "cotal actor grant {} --owner {}",
            spawner.actor(),
            spawner.owner()
        ),
        format!("--scope {}", shq(&union(&row.scope, add_scope))),
        format!(
            "--allow-subscribe {}",
            shq(&union(&row.allow_subscribe, add_sub))
        ),
        format!(
            "--allow-publish {}",
            shq(&union(&row.allow_publish, add_pub))
        ),
    ];
    if let Some(role) = &row.role {
        parts.push(format!("--role {}", shq(role)));
    }
    if let Some(label) = &row.label {
        parts.push(format!("--label {}", shq(label)));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::pattern_covers;

    #[test]
    fn containment_is_nats_wildcard_containment() {
        assert!(pattern_covers("review.>", "review.>"));
        assert!(pattern_covers("review.>", "review.pua"));
        assert!(!pattern_covers("review.pua", "review.>"));
        assert!(!pattern_covers("review.>", "review"));
        assert!(pattern_covers("a.*", "a.b"));
        assert!(!pattern_covers("a.b", "a.*"));
        assert!(pattern_covers(">", "a.b.c"));
        assert!(!pattern_covers("a.>.b", "a.x.b"));
        assert!(!pattern_covers("a.*", "a.b.c"));
    }
}
