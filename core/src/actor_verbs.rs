//! The operator's verbs on the actor ledger (`cotal-authd actor grant|revoke|retire|ls` and
//! `actor revoke --credential`, reference §6.5) as outcomes and sentences: what each verb reads
//! from the ledger's answers, and what it says once the ledger, the running plane's interactive
//! retire door ([`PlaneRetire`]) and the servers' eviction answered. The daemon turns flags
//! into requests and runs them; every sentence the verbs print is written here once.

use serde_json::{json, Value};

use crate::actors::grant::{shown, LISTING_HEADERS};
use crate::actors::{denied, ActorRow, ActorsOutcome, RowSpace};
use crate::ledger::Revocation;
use crate::lifecycle::{PlaneRetire, RetireTarget, RevokeRootCredential, RevokedRoot};
use crate::liveness::EvictionEvidence;
use crate::names::{ActorToken, DerivedOwner, LifecycleUid, Principal, SpaceName};

/// An actor a command line names (`actor grant|revoke|retire`, `login`): a plain token, or the
/// refusal naming it.
pub fn actor_arg(actor: &str) -> Result<ActorToken, String> {
    ActorToken::parse(actor).map_err(|e| format!("actor {actor:?}: {}", e.message))
}

/// An owner `--owner` names: a derived owner, the only kind a human can sign in as, or the
/// refusal that says how to derive it in `space`.
pub fn owner_arg(space: &SpaceName, owner: &str) -> Result<DerivedOwner, String> {
    DerivedOwner::parse(owner).map_err(|_| {
        format!(
            "owner {owner:?} is not a derived owner (u_ + 26 base32 chars); pass --idp-subject \
             SUB to derive it, or print it with `cotal-authd owner --space {space} \
             --idp-subject SUB`"
        )
    })
}

/// A ledger answer a verb cannot act on, as its one sentence ([`denied`]).
pub fn refusal(outcome: ActorsOutcome) -> String {
    denied(outcome, "this command's answer").message
}

/// The interactive row a `Find` answered, if granted; any other answer is the verb's refusal.
pub fn found(outcome: ActorsOutcome) -> Result<Option<ActorRow>, String> {
    match outcome {
        ActorsOutcome::Found(held) => Ok(held.map(|h| h.row)),
        other => Err(refusal(other)),
    }
}

/// The row a `GrantInteractive` wrote; any other answer is the verb's refusal.
pub fn written(outcome: ActorsOutcome) -> Result<ActorRow, String> {
    match outcome {
        ActorsOutcome::Granted(row) => Ok(row),
        other => Err(refusal(other)),
    }
}

/// Whether a `RevokeInteractive` removed a row; any other answer is the verb's refusal.
pub fn removed(outcome: ActorsOutcome) -> Result<bool, String> {
    match outcome {
        ActorsOutcome::Revoked(removed) => Ok(removed),
        other => Err(refusal(other)),
    }
}

/// The actor a verb names: `actor` of `owner` in `space`.
#[derive(Debug, Clone, Copy)]
pub struct Alias<'a> {
    pub space: &'a SpaceName,
    pub actor: &'a ActorToken,
    pub owner: &'a DerivedOwner,
}

impl<'a> Alias<'a> {
    /// `actor` of `owner` in `space`.
    pub fn new(space: &'a SpaceName, actor: &'a ActorToken, owner: &'a DerivedOwner) -> Self {
        Alias {
            space,
            actor,
            owner,
        }
    }

    /// The actor's principal.
    pub fn principal(&self) -> Principal {
        Principal::new(self.owner.owner().clone(), self.actor.clone())
    }

    /// The interactive row `actor grant` writes for the actor: the `lists` as resolved
    /// ([`crate::actors::grant::GrantLists::resolve`]), no parent and no token, at the fresh lifecycle
    /// `uid`, so a re-grant rotates the uid and every bearer of the previous incarnation dies at
    /// its next connect (F59).
    pub fn interactive_row(
        &self,
        [scope, allow_subscribe, allow_publish]: [Vec<String>; 3],
        role: Option<String>,
        label: Option<String>,
        uid: LifecycleUid,
        granted_at: String,
    ) -> ActorRow {
        ActorRow {
            owner: self.owner.owner().clone(),
            actor: self.actor.clone(),
            scope,
            allow_subscribe,
            allow_publish,
            role,
            parent: None,
            label,
            token_hash: None,
            lifecycle_uid: Some(uid),
            granted_at,
        }
    }

    /// The interactive retire door's target: the actor's lifecycle `uid`.
    pub fn retire_target(&self, uid: &LifecycleUid) -> RetireTarget {
        RetireTarget {
            principal: self.principal(),
            uid: uid.clone(),
        }
    }

    /// The revoke of the root credential the actor's incarnation carries (F58, F59).
    pub fn root_revoke(&self) -> RevokeRootCredential {
        RevokeRootCredential {
            owner: self.owner.owner().clone(),
            actor: self.actor.clone(),
        }
    }

    /// The lifecycle `actor retire` retires: the one `--lifecycle-uid` names (`given`, a
    /// predecessor a revoke or re-grant left live), else the grant's `current` one; `None`
    /// when there is neither ([`Alias::no_current_lifecycle`] says so).
    pub fn retiring(
        &self,
        given: Option<&str>,
        current: Option<&LifecycleUid>,
    ) -> Result<Option<LifecycleUid>, String> {
        match given {
            Some(uid) => LifecycleUid::parse(uid)
                .map(Some)
                .map_err(|e| format!("--lifecycle-uid {uid:?}: {}", e.message)),
            None => Ok(current.cloned()),
        }
    }

    /// The operator's command that retires `uid` of the actor.
    pub fn retire_command(&self, uid: &LifecycleUid) -> String {
        let Alias {
            space,
            actor,
            owner,
        } = self;
        format!(
            "cotal-authd actor retire {actor} --space {space} --owner {owner} --lifecycle-uid {uid}"
        )
    }

    /// `actor revoke` of an actor with no interactive grant.
    pub fn not_granted(&self) -> String {
        format!(
            "{}; list the grants with `cotal-authd actor ls --space {}`",
            self.ungranted(),
            self.space
        )
    }

    /// What both ungranted sentences start with.
    fn ungranted(&self) -> String {
        let Alias {
            space,
            actor,
            owner,
        } = self;
        format!("actor {actor} of owner {owner} has no interactive grant in space {space}")
    }

    /// `actor grant`'s sentence for the row it wrote; when the grant replaced an incarnation
    /// at `previous`, with what retiring that one at the running plane did (F59, F60: the new
    /// lifecycle exchanges only once the previous one is retired). A refused retirement fails
    /// the verb; an unreached plane leaves the command to run once it is up.
    pub fn granted(
        &self,
        row: &ActorRow,
        previous: Option<(&LifecycleUid, PlaneRetire)>,
    ) -> Result<String, String> {
        let granted = format!(
            "granted actor {} to owner {} in space {} (scope {}; subscribe {}; publish {}) at \
             lifecycle {}",
            row.actor,
            row.owner,
            self.space,
            shown(&row.scope),
            shown(&row.allow_subscribe),
            shown(&row.allow_publish),
            row.lifecycle_uid.as_ref().map_or("-", LifecycleUid::as_str),
        );
        let Some((previous, retired)) = previous else {
            return Ok(granted);
        };
        let retry = self.retire_command(previous);
        match retired {
            PlaneRetire::Retired => Ok(format!(
                "{granted}; its previous lifecycle {previous} is retired and its live connections \
                 closed and verified gone"
            )),
            PlaneRetire::AlreadyRetired => Ok(format!(
                "{granted}; its previous lifecycle {previous} was already retired"
            )),
            PlaneRetire::NotStarted => Ok(format!(
                "{granted}; its previous lifecycle {previous} never started"
            )),
            PlaneRetire::Unreached(why) => Ok(format!(
                "{granted}; {why}, so its previous lifecycle {previous} is not retired and its live \
                 connections stay until their bearers expire (and the exchange refuses the new \
                 lifecycle until it is): once the plane is up, run `{retry}`"
            )),
            PlaneRetire::Refused(why) => Err(format!(
                "{granted}, but retiring its previous lifecycle {previous} was refused ({why}), so \
                 the exchange refuses the new lifecycle until it is retired: run `{retry}`"
            )),
        }
    }

    /// `actor revoke`'s sentence once the row is removed; when the row named a lifecycle, with
    /// what retiring it at the running plane did (F47 (4): its live connections kicked and
    /// verified gone). A refused retirement fails the verb.
    pub fn revoked(&self, retired: Option<(&LifecycleUid, PlaneRetire)>) -> Result<String, String> {
        let Alias {
            space,
            actor,
            owner,
        } = self;
        let revoked = format!("revoked actor {actor} of owner {owner} in space {space}");
        let refused = "its next connect and exchange are refused";
        let Some((uid, retired)) = retired else {
            return Ok(format!("{revoked}: {refused}"));
        };
        let retry = self.retire_command(uid);
        match retired {
            PlaneRetire::Retired => Ok(format!(
                "{revoked}: its lifecycle {uid} is retired and its live connections closed and \
                 verified gone, and {refused}"
            )),
            PlaneRetire::AlreadyRetired => Ok(format!(
                "{revoked}: its lifecycle {uid} was already retired, and {refused}"
            )),
            PlaneRetire::NotStarted => Ok(format!(
                "{revoked}: its lifecycle {uid} never started, and {refused}"
            )),
            PlaneRetire::Unreached(why) => Ok(format!(
                "{revoked}: {refused}, but {why}, so its live connections stay until their bearers \
                 expire and its lifecycle {uid} is not retired: once the plane is up, run `{retry}`"
            )),
            PlaneRetire::Refused(why) => Err(format!(
                "{revoked}: {refused}, but retiring its lifecycle {uid} was refused ({why}), so its \
                 live connections stay until their bearers expire: run `{retry}`"
            )),
        }
    }

    /// `actor retire` without `--lifecycle-uid` of an actor with no interactive grant.
    pub fn no_current_lifecycle(&self) -> String {
        format!(
            "{}, so no current lifecycle to retire (a revoked or superseded one retires with \
             --lifecycle-uid UID)",
            self.ungranted()
        )
    }

    /// `actor retire`'s sentence for retiring `uid` while the grant is at `current` (F47): what
    /// the door did, and what signs in next. An unreached plane or a refusal fails the verb.
    pub fn retired(
        &self,
        uid: &LifecycleUid,
        current: Option<&LifecycleUid>,
        retired: PlaneRetire,
    ) -> Result<String, String> {
        let Alias { space, actor, .. } = self;
        let next = match current {
            Some(granted) if granted != uid => {
                format!("its grant at lifecycle {granted} exchanges now")
            }
            _ => "re-grant it to sign in again".to_owned(),
        };
        match retired {
            PlaneRetire::Retired => Ok(format!(
                "retired actor {actor}'s lifecycle {uid}: its credentials are revoked and its live \
                 connections closed and verified gone; {next}"
            )),
            PlaneRetire::AlreadyRetired => Ok(format!(
                "actor {actor}'s lifecycle {uid} was already retired; {next}"
            )),
            PlaneRetire::NotStarted => Ok(format!(
                "actor {actor}'s lifecycle {uid} never started: nothing to retire"
            )),
            PlaneRetire::Unreached(why) => Err(format!(
                "{why}; start it with `cotal-authd up --space {space}` and retire again"
            )),
            PlaneRetire::Refused(why) => Err(format!("the retirement was refused ({why})")),
        }
    }
}

/// The root credential row [`RevokedRoot`] names, as the audit line and the sentence name it.
pub fn credential_row(revoked: &RevokedRoot) -> String {
    format!("cred.{}.{}", revoked.lifecycle_uid, revoked.credential_id)
}

/// `actor revoke --credential`'s sentence for the revoke of `principal`'s root credential (F58,
/// F59), then for the eviction of its live connections: verified gone, or the verb fails and
/// says to run it again.
pub fn credential_revoked(
    principal: &str,
    revoked: &RevokedRoot,
    eviction: Option<&EvictionEvidence>,
) -> Result<String, String> {
    let row = credential_row(revoked);
    let said = match revoked.revocation {
        Revocation::Revoked => format!(
            "revoked the root credential {row} of {principal}: every bearer of it is refused at \
             its next connect, and its exchange is refused until the actor is granted afresh \
             (which retires this lifecycle)"
        ),
        Revocation::AlreadyRevoked => {
            format!("the root credential {row} of {principal} was already revoked")
        }
    };
    match eviction {
        Some(e) if e.verified_gone => Ok(format!(
            "{said}; {} live connection(s) of it were closed and verified gone",
            e.kicked
        )),
        Some(e) => Err(format!(
            "{said}, but closing its live connections was not verified ({}), so they stay until \
             their bearers expire; run the revoke again to retry",
            e.note.clone().unwrap_or_else(|| format!(
                "{} connection(s) still listed after {} kick(s)",
                e.remaining, e.kicked
            ))
        )),
        None => Err(format!(
            "{said}, but the eviction answered no verdict for {principal}; run the revoke again \
             to retry"
        )),
    }
}

/// The rows `actor ls` read, space by space, and the unreadable ones (each denies its actor).
#[derive(Debug, Clone, Default)]
pub struct Listed {
    rows: Vec<(RowSpace, ActorRow)>,
    broken: Vec<String>,
}

/// What `actor ls` prints: the readable rows, and the sentence about the unreadable ones
/// (each denies its actor), which fails the command after the listing is printed.
#[derive(Debug)]
pub struct Listing {
    pub out: String,
    pub unreadable: Option<String>,
}

impl Listed {
    /// Adds the `List` answer of row space `kind`; any other answer is the verb's refusal.
    pub fn add(&mut self, kind: RowSpace, outcome: ActorsOutcome) -> Result<(), String> {
        match outcome {
            ActorsOutcome::Listed(listed) => {
                for entry in listed {
                    match entry {
                        Ok(row) => self.rows.push((kind, row)),
                        Err(why) => self.broken.push(why),
                    }
                }
                Ok(())
            }
            other => Err(refusal(other)),
        }
    }

    /// The listing of `space`: a table, or JSON with the unreadable rows' sentences.
    pub fn listing(self, space: &SpaceName, as_json: bool) -> Listing {
        let Listed { rows, broken } = self;
        let out = if as_json {
            let listed: Vec<Value> = rows
                .iter()
                .map(|(kind, row)| row.listing_json(*kind))
                .collect();
            json!({"space": space.as_str(), "actors": listed, "unreadable": broken}).to_string()
        } else {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|(kind, row)| row.listing_cells(*kind))
                .collect();
            crate::table::render(&LISTING_HEADERS, &cells)
        };
        let unreadable = (!broken.is_empty()).then(|| {
            format!(
                "{} unreadable grant(s), each denying its actor: {}",
                broken.len(),
                broken.join("; ")
            )
        });
        Listing { out, unreadable }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::actors::Held;
    use crate::names::{CredentialId, Principal};

    const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const UID: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
    const NEW: &str = "nnnnnnnnnnnnnnnnnnnnnnnnnn";

    struct Names {
        space: SpaceName,
        actor: ActorToken,
        owner: DerivedOwner,
        uid: LifecycleUid,
    }

    fn names() -> Names {
        Names {
            space: SpaceName::parse("demo").unwrap(),
            actor: ActorToken::parse("alice").unwrap(),
            owner: DerivedOwner::parse(OWNER).unwrap(),
            uid: LifecycleUid::parse(UID).unwrap(),
        }
    }

    impl Names {
        fn alias(&self) -> Alias<'_> {
            Alias::new(&self.space, &self.actor, &self.owner)
        }

        fn row(&self) -> ActorRow {
            ActorRow {
                owner: self.owner.owner().clone(),
                actor: self.actor.clone(),
                scope: vec!["admin".into(), "spawn".into()],
                allow_subscribe: vec![">".into()],
                allow_publish: Vec::new(),
                role: None,
                parent: None,
                label: None,
                token_hash: None,
                lifecycle_uid: Some(LifecycleUid::parse(NEW).unwrap()),
                granted_at: "2026-12-01T00:00:00.000Z".to_owned(),
            }
        }
    }

    const RETRY: &str = "cotal-authd actor retire alice --space demo --owner \
                         u_aaaaaaaaaaaaaaaaaaaaaaaaaa --lifecycle-uid uuuuuuuuuuuuuuuuuuuuuuuuuu";

    /// What a verb says (`said`) for each answer of the retire door, in the order retired,
    /// already retired, not started, unreached (`unreached` its reason) and refused (`refused`
    /// its status and sentence).
    fn pins(
        said: impl Fn(PlaneRetire) -> Result<String, String>,
        expected: [Result<String, String>; 5],
        unreached: &str,
        refused: &str,
    ) {
        let answers = [
            PlaneRetire::Retired,
            PlaneRetire::AlreadyRetired,
            PlaneRetire::NotStarted,
            PlaneRetire::Unreached(unreached.to_owned()),
            PlaneRetire::Refused(refused.to_owned()),
        ];
        for (answer, expected) in answers.into_iter().zip(expected) {
            assert_eq!(said(answer), expected);
        }
    }

    /// The command line's actor and owner: a plain token and a derived owner, or one sentence
    /// naming what was given (and how to derive an owner).
    #[test]
    fn the_command_lines_names_are_checked_with_one_sentence_each() {
        let n = names();
        assert_eq!(actor_arg("alice").unwrap(), n.actor);
        assert!(actor_arg("a.b").unwrap_err().starts_with("actor \"a.b\": "));
        assert_eq!(owner_arg(&n.space, OWNER).unwrap(), n.owner);
        assert_eq!(
            owner_arg(&n.space, "alice").unwrap_err(),
            "owner \"alice\" is not a derived owner (u_ + 26 base32 chars); pass --idp-subject \
             SUB to derive it, or print it with `cotal-authd owner --space demo --idp-subject \
             SUB`"
        );
    }

    /// F59: the grant's row carries its lists and the fresh uid, no parent and no token; the
    /// retire door's target and the root revoke name the same principal.
    #[test]
    fn the_alias_builds_its_row_target_and_revoke() {
        let n = names();
        let row = n.row();
        let lists = [
            row.scope.clone(),
            row.allow_subscribe.clone(),
            row.allow_publish.clone(),
        ];
        let uid = LifecycleUid::parse(NEW).unwrap();
        let built = n
            .alias()
            .interactive_row(lists, None, None, uid, row.granted_at.clone());
        assert_eq!(built, row);
        let target = n.alias().retire_target(&n.uid);
        assert_eq!(
            (&target.principal, &target.uid),
            (&n.alias().principal(), &n.uid)
        );
        let revoke = n.alias().root_revoke();
        assert_eq!(
            Principal::new(revoke.owner, revoke.actor),
            n.alias().principal()
        );
    }

    /// `actor retire` retires the named lifecycle, else the grant's current one, else none.
    #[test]
    fn a_retirement_takes_the_named_lifecycle_else_the_current_one() {
        let n = names();
        let new = LifecycleUid::parse(NEW).unwrap();
        let alias = n.alias();
        assert_eq!(
            alias.retiring(Some(UID), Some(&new)).unwrap(),
            Some(n.uid.clone())
        );
        assert_eq!(alias.retiring(None, Some(&new)).unwrap(), Some(new));
        assert_eq!(alias.retiring(None, None).unwrap(), None);
        assert!(alias
            .retiring(Some("short"), None)
            .unwrap_err()
            .starts_with("--lifecycle-uid \"short\": "));
    }

    #[test]
    fn the_retire_command_and_the_ungranted_sentences_name_the_alias() {
        let n = names();
        assert_eq!(n.alias().retire_command(&n.uid), RETRY);
        assert_eq!(
            n.alias().not_granted(),
            "actor alice of owner u_aaaaaaaaaaaaaaaaaaaaaaaaaa has no interactive grant in space \
             demo; list the grants with `cotal-authd actor ls --space demo`"
        );
        assert_eq!(
            n.alias().no_current_lifecycle(),
            "actor alice of owner u_aaaaaaaaaaaaaaaaaaaaaaaaaa has no interactive grant in space \
             demo, so no current lifecycle to retire (a revoked or superseded one retires with \
             --lifecycle-uid UID)"
        );
    }

    /// F59, F60: a re-grant says what retiring its previous lifecycle did; a refusal fails the
    /// verb, an unreached plane leaves the command to run.
    #[test]
    fn a_grant_says_what_became_of_its_previous_lifecycle() {
        let n = names();
        let granted = "granted actor alice to owner u_aaaaaaaaaaaaaaaaaaaaaaaaaa in space demo \
                       (scope admin,spawn; subscribe >; publish -) at lifecycle \
                       nnnnnnnnnnnnnnnnnnnnnnnnnn";
        let said = |retired| n.alias().granted(&n.row(), Some((&n.uid, retired)));
        assert_eq!(n.alias().granted(&n.row(), None).unwrap(), granted);
        let unreached = "the plane of space demo is not up here";
        pins(
            said,
            [
                Ok(format!(
                    "{granted}; its previous lifecycle {UID} is retired and its live connections \
                     closed and verified gone"
                )),
                Ok(format!(
                    "{granted}; its previous lifecycle {UID} was already retired"
                )),
                Ok(format!(
                    "{granted}; its previous lifecycle {UID} never started"
                )),
                Ok(format!(
                    "{granted}; {unreached}, so its previous lifecycle {UID} is not retired and \
                     its live connections stay until their bearers expire (and the exchange \
                     refuses the new lifecycle until it is): once the plane is up, run `{RETRY}`"
                )),
                Err(format!(
                    "{granted}, but retiring its previous lifecycle {UID} was refused (409 \
                     Conflict: no), so the exchange refuses the new lifecycle until it is \
                     retired: run `{RETRY}`"
                )),
            ],
            unreached,
            "409 Conflict: no",
        );
    }

    /// F47 (4): a revoke says whether its lifecycle's live connections are gone.
    #[test]
    fn a_revoke_says_what_became_of_its_lifecycle() {
        let n = names();
        let revoked = "revoked actor alice of owner u_aaaaaaaaaaaaaaaaaaaaaaaaaa in space demo";
        let refused = "its next connect and exchange are refused";
        let said = |retired| n.alias().revoked(Some((&n.uid, retired)));
        assert_eq!(
            n.alias().revoked(None).unwrap(),
            format!("{revoked}: {refused}")
        );
        pins(
            said,
            [
                Ok(format!(
                    "{revoked}: its lifecycle {UID} is retired and its live connections closed \
                     and verified gone, and {refused}"
                )),
                Ok(format!(
                    "{revoked}: its lifecycle {UID} was already retired, and {refused}"
                )),
                Ok(format!(
                    "{revoked}: its lifecycle {UID} never started, and {refused}"
                )),
                Ok(format!(
                    "{revoked}: {refused}, but why, so its live connections stay until their \
                     bearers expire and its lifecycle {UID} is not retired: once the plane is \
                     up, run `{RETRY}`"
                )),
                Err(format!(
                    "{revoked}: {refused}, but retiring its lifecycle {UID} was refused (why), \
                     so its live connections stay until their bearers expire: run `{RETRY}`"
                )),
            ],
            "why",
            "why",
        );
    }

    /// F47: a retirement says what signs in next: the grant at another lifecycle, or a
    /// re-grant.
    #[test]
    fn a_retirement_says_what_signs_in_next() {
        let n = names();
        let new = LifecycleUid::parse(NEW).unwrap();
        let said = |current, retired| n.alias().retired(&n.uid, current, retired);
        assert_eq!(
            said(Some(&new), PlaneRetire::Retired).unwrap(),
            format!(
                "retired actor alice's lifecycle {UID}: its credentials are revoked and its live \
                 connections closed and verified gone; its grant at lifecycle {NEW} exchanges now"
            )
        );
        for current in [None, Some(&n.uid)] {
            assert_eq!(
                said(current, PlaneRetire::AlreadyRetired).unwrap(),
                format!(
                    "actor alice's lifecycle {UID} was already retired; re-grant it to sign in \
                     again"
                )
            );
        }
        assert_eq!(
            said(None, PlaneRetire::NotStarted).unwrap(),
            format!("actor alice's lifecycle {UID} never started: nothing to retire")
        );
        assert_eq!(
            said(None, PlaneRetire::Unreached("the plane is down".into())).unwrap_err(),
            "the plane is down; start it with `cotal-authd up --space demo` and retire again"
        );
        assert_eq!(
            said(None, PlaneRetire::Refused("403 Forbidden: no".into())).unwrap_err(),
            "the retirement was refused (403 Forbidden: no)"
        );
    }

    /// F58, F59: a credential revoke names the row; its eviction is verified or the verb
    /// fails and says to retry.
    #[test]
    fn a_credential_revoke_says_the_row_and_the_evictions_verdict() {
        let n = names();
        let principal = Principal::new(n.owner.owner().clone(), n.actor.clone());
        let key = principal.key();
        let mut revoked = RevokedRoot {
            lifecycle_uid: n.uid.clone(),
            credential_id: CredentialId::mint([7; 20]),
            revocation: Revocation::Revoked,
        };
        let row = credential_row(&revoked);
        assert_eq!(row, format!("cred.{UID}.{}", revoked.credential_id));
        let said = format!(
            "revoked the root credential {row} of {key}: every bearer of it is refused at its \
             next connect, and its exchange is refused until the actor is granted afresh (which \
             retires this lifecycle)"
        );
        let gone = EvictionEvidence::gone(principal.clone(), 2);
        assert_eq!(
            credential_revoked(&key, &revoked, Some(&gone)).unwrap(),
            format!("{said}; 2 live connection(s) of it were closed and verified gone")
        );
        let left = EvictionEvidence::remaining(principal.clone(), 3, 1);
        assert_eq!(
            credential_revoked(&key, &revoked, Some(&left)).unwrap_err(),
            format!(
                "{said}, but closing its live connections was not verified (1 connection(s) \
                 remain after the kicks), so they stay until their bearers expire; run the \
                 revoke again to retry"
            )
        );
        let unnoted = EvictionEvidence { note: None, ..left };
        assert!(credential_revoked(&key, &revoked, Some(&unnoted))
            .unwrap_err()
            .contains("(1 connection(s) still listed after 3 kick(s))"));
        revoked.revocation = Revocation::AlreadyRevoked;
        assert_eq!(
            credential_revoked(&key, &revoked, None).unwrap_err(),
            format!(
                "the root credential {row} of {key} was already revoked, but the eviction \
                 answered no verdict for {key}; run the revoke again to retry"
            )
        );
    }

    #[test]
    fn the_ledgers_answers_read_as_rows_or_refusals() {
        let n = names();
        let held = Held {
            space: RowSpace::Interactive,
            row: n.row(),
        };
        assert_eq!(
            found(ActorsOutcome::Found(Some(held))).unwrap(),
            Some(n.row())
        );
        assert_eq!(found(ActorsOutcome::Found(None)).unwrap(), None);
        assert_eq!(
            found(ActorsOutcome::Unavailable("down".into())).unwrap_err(),
            "down"
        );
        assert!(removed(ActorsOutcome::Revoked(false)).is_ok_and(|r| !r));
        assert_eq!(written(ActorsOutcome::Granted(n.row())).unwrap(), n.row());
        assert_eq!(
            written(ActorsOutcome::Refused("shadowed".into())).unwrap_err(),
            "shadowed"
        );
        assert_eq!(
            removed(ActorsOutcome::Found(None)).unwrap_err(),
            "the actor ledger answered Found(None) where this command's answer was due"
        );
    }

    /// `actor ls`: a table or JSON of both spaces; an unreadable row is listed and fails the
    /// command in one sentence.
    #[test]
    fn a_listing_shows_the_rows_and_says_the_unreadable_ones() {
        let n = names();
        let mut listed = Listed::default();
        let rows = vec![Ok(n.row()), Err("bad row a".to_owned())];
        listed
            .add(RowSpace::Interactive, ActorsOutcome::Listed(rows))
            .unwrap();
        listed
            .add(
                RowSpace::Managed,
                ActorsOutcome::Listed(vec![Err("bad row b".into())]),
            )
            .unwrap();
        let table = listed.clone().listing(&n.space, false);
        assert_eq!(
            table.out,
            "KIND         OWNER                         ACTOR  SCOPE        SUBSCRIBE  PUBLISH  \
             LIFECYCLE\ninteractive  u_aaaaaaaaaaaaaaaaaaaaaaaaaa  alice  admin,spawn  >          \
             -        nnnnnnnnnnnnnnnnnnnnnnnnnn"
        );
        assert_eq!(
            table.unreadable.as_deref(),
            Some("2 unreadable grant(s), each denying its actor: bad row a; bad row b")
        );
        let json: Value = serde_json::from_str(&listed.listing(&n.space, true).out).unwrap();
        assert_eq!(json["space"], "demo");
        assert_eq!(
            json["actors"][0],
            n.row().listing_json(RowSpace::Interactive)
        );
        assert_eq!(json["unreadable"], json!(["bad row a", "bad row b"]));
        let mut empty = Listed::default();
        assert!(empty
            .add(RowSpace::Managed, ActorsOutcome::Corrupt("torn".into()))
            .is_err());
        assert_eq!(empty.listing(&n.space, false).unreadable, None);
    }
}
