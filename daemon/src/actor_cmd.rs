//! `cotal-authd actor grant|ls|revoke` and `cotal-authd owner`: the operator's verbs on the
//! space's actor ledger (reference §6.5), the interactive rows a signed-in human exchanges
//! against. The ledger's rules (row grammar, no shadowing of a managed row, fail-closed reads)
//! are `cotal_core::actors`; the files are `cotal_io_fs::FileActors` under the space's state dir;
//! the owner an IdP subject derives is `DaemonMaterial::owner_for_idp_subject`. This module only
//! turns flags into a row and outcomes into sentences.

use std::path::Path;

use cotal_core::actors::row::iso8601_millis;
use cotal_core::actors::{ActorLedger, ActorRow, ActorsOutcome, ActorsRequest, RowSpace};
use cotal_core::names::{ActorToken, DerivedOwner, LifecycleUid, Principal, SpaceName};
use cotal_io_fs::{discovery, random, trust, FileActors};
use serde_json::{json, Value};

use cotal_io_fs::ledger_home;

/// Who a grant is for: an owner token as it is, or the subject the space's pinned IdP
/// authenticates, derived with the space's owner secret.
#[derive(Debug, Clone)]
pub enum OwnerArg {
    Owner(String),
    IdpSubject(String),
}

/// What a grant carries. Every list is explicit or `--full`: omitting one never widens it.
#[derive(Debug, Clone, Default)]
pub struct GrantLists {
    pub scope: Option<Vec<String>>,
    pub allow_subscribe: Option<Vec<String>>,
    pub allow_publish: Option<Vec<String>>,
    pub full: bool,
}

/// `--full`: every capability the plane knows, every subject both ways.
const FULL_SCOPE: [&str; 4] = ["admin", "spawn", "supervise", "role:default"];
const EVERY_SUBJECT: &str = ">";

#[derive(Debug)]
pub struct GrantArgs {
    pub root: std::path::PathBuf,
    pub space: SpaceName,
    pub actor: String,
    pub owner: OwnerArg,
    pub lists: GrantLists,
    pub role: Option<String>,
    pub label: Option<String>,
}

/// The ledger of `space` under the state root (the directory its trust root lives in), refused
/// when that root's plane serves another state root's ledger ([`ledger_home::for_verbs`]).
pub fn ledger(root: &Path, space: &SpaceName) -> Result<FileActors, String> {
    ledger_home::for_verbs(root, space)
}

/// The derived owner `owner` names, refusing any owner a human cannot sign in as.
pub fn resolve_owner(
    root: &Path,
    space: &SpaceName,
    owner: &OwnerArg,
) -> Result<DerivedOwner, String> {
    match owner {
        OwnerArg::Owner(o) => DerivedOwner::parse(o).map_err(|_| {
            format!(
                "owner {o:?} is not a derived owner (u_ + 26 base32 chars); pass --idp-subject \
                 SUB to derive it, or print it with `cotal-authd owner --space {space} \
                 --idp-subject SUB`"
            )
        }),
        OwnerArg::IdpSubject(sub) => trust::load_daemon(root, space)?
            .owner_for_idp_subject(sub)
            .map_err(|e| e.message),
    }
}

/// `cotal-authd owner`: the owner the pinned IdP's subject derives in the space.
pub fn owner(root: &Path, space: &SpaceName, subject: &str) -> Result<String, String> {
    resolve_owner(root, space, &OwnerArg::IdpSubject(subject.to_owned())).map(|o| o.to_string())
}

/// `cotal-authd actor grant`: upserts the interactive row at a fresh lifecycle uid, so a
/// re-grant rotates the uid and every bearer of the previous incarnation dies at its next
/// connect.
pub fn grant(args: GrantArgs) -> Result<String, String> {
    let actor = ActorToken::parse(&args.actor)
        .map_err(|e| format!("actor {:?}: {}", args.actor, e.message))?;
    let owner = resolve_owner(&args.root, &args.space, &args.owner)?;
    let [scope, allow_subscribe, allow_publish] = lists(&args.lists, &args.space, &actor, &owner)?;
    let row = ActorRow {
        owner: owner.owner().clone(),
        actor,
        scope,
        allow_subscribe,
        allow_publish,
        role: args.role,
        parent: None,
        label: args.label,
        token_hash: None,
        lifecycle_uid: Some(LifecycleUid::mint(random::entropy()?)),
        granted_at: iso8601_millis(crate::clock::now_ms()),
    };
    match ledger(&args.root, &args.space)?.execute(&ActorsRequest::GrantInteractive(row)) {
        ActorsOutcome::Granted(row) => Ok(format!(
            "granted actor {} to owner {} in space {} (scope {}; subscribe {}; publish {}) at \
             lifecycle {}",
            row.actor,
            row.owner,
            args.space,
            shown(&row.scope),
            shown(&row.allow_subscribe),
            shown(&row.allow_publish),
            row.lifecycle_uid.as_ref().map_or("-", LifecycleUid::as_str),
        )),
        other => Err(refusal(other)),
    }
}

/// The three lists of a grant: all given explicitly, or `--full` alone.
fn lists(
    lists: &GrantLists,
    space: &SpaceName,
    actor: &ActorToken,
    owner: &DerivedOwner,
) -> Result<[Vec<String>; 3], String> {
    let given = [&lists.scope, &lists.allow_subscribe, &lists.allow_publish];
    if lists.full {
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
    match (&lists.scope, &lists.allow_subscribe, &lists.allow_publish) {
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
                 ''); or grant everything with `cotal-authd actor grant {actor} --space {space} \
                 --owner {owner} --full`",
                missing.join(", ")
            ))
        }
    }
}

/// `cotal-authd actor revoke`: removes the interactive row. The row's bearers are denied at
/// their next connect (the callout reads the row fresh).
pub fn revoke(
    root: &Path,
    space: &SpaceName,
    actor: &str,
    owner: &OwnerArg,
) -> Result<String, String> {
    let actor_token =
        ActorToken::parse(actor).map_err(|e| format!("actor {actor:?}: {}", e.message))?;
    let owner = resolve_owner(root, space, owner)?;
    let principal = Principal::new(owner.owner().clone(), actor_token);
    match ledger(root, space)?.execute(&ActorsRequest::RevokeInteractive {
        principal: principal.clone(),
    }) {
        ActorsOutcome::Revoked(true) => Ok(format!(
            "revoked actor {actor} of owner {owner} in space {space}: its next connect and \
             exchange are refused"
        )),
        ActorsOutcome::Revoked(false) => Err(format!(
            "actor {actor} of owner {owner} has no interactive grant in space {space}; list \
             the grants with `cotal-authd actor ls --space {space}`"
        )),
        other => Err(refusal(other)),
    }
}

/// What `actor ls` prints: the readable rows, and the sentence about the unreadable ones
/// (each denies its actor), which fails the command after the listing is printed.
#[derive(Debug)]
pub struct Listing {
    pub out: String,
    pub unreadable: Option<String>,
}

/// `cotal-authd actor ls`: every row of both spaces, a table or JSON.
pub fn ls(root: &Path, space: &SpaceName, as_json: bool) -> Result<Listing, String> {
    let actors = ledger(root, space)?;
    let mut rows = Vec::new();
    let mut broken = Vec::new();
    for kind in [RowSpace::Interactive, RowSpace::Managed] {
        match actors.execute(&ActorsRequest::List { space: kind }) {
            ActorsOutcome::Listed(listed) => {
                for entry in listed {
                    match entry {
                        Ok(row) => rows.push((kind, row)),
                        Err(why) => broken.push(why),
                    }
                }
            }
            other => return Err(refusal(other)),
        }
    }
    let out = if as_json {
        let listed: Vec<Value> = rows
            .iter()
            .map(|(kind, row)| row_json(*kind, row))
            .collect();
        json!({"space": space.as_str(), "actors": listed, "unreadable": broken}).to_string()
    } else {
        table(&rows)
    };
    let unreadable = (!broken.is_empty()).then(|| {
        format!(
            "{} unreadable grant(s), each denying its actor: {}",
            broken.len(),
            broken.join("; ")
        )
    });
    Ok(Listing { out, unreadable })
}

fn row_json(kind: RowSpace, row: &ActorRow) -> Value {
    json!({
        "kind": kind_name(kind),
        "owner": row.owner.as_str(),
        "actor": row.actor.as_str(),
        "scope": row.scope,
        "allowSubscribe": row.allow_subscribe,
        "allowPublish": row.allow_publish,
        "role": row.role,
        "parent": row.parent.as_ref().map(Principal::key),
        "label": row.label,
        "lifecycleUid": row.lifecycle_uid.as_ref().map(LifecycleUid::as_str),
        "grantedAt": row.granted_at,
    })
}

fn kind_name(kind: RowSpace) -> &'static str {
    match kind {
        RowSpace::Interactive => "interactive",
        RowSpace::Managed => "managed",
    }
}

fn table(rows: &[(RowSpace, ActorRow)]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(kind, row)| {
            vec![
                kind_name(*kind).to_owned(),
                row.owner.to_string(),
                row.actor.to_string(),
                shown(&row.scope),
                shown(&row.allow_subscribe),
                shown(&row.allow_publish),
                row.lifecycle_uid
                    .as_ref()
                    .map_or("-".to_owned(), ToString::to_string),
            ]
        })
        .collect();
    crate::table::render(
        &[
            "KIND",
            "OWNER",
            "ACTOR",
            "SCOPE",
            "SUBSCRIBE",
            "PUBLISH",
            "LIFECYCLE",
        ],
        &cells,
    )
}

fn shown(list: &[String]) -> String {
    if list.is_empty() {
        "-".to_owned()
    } else {
        list.join(",")
    }
}

fn refusal(outcome: ActorsOutcome) -> String {
    match outcome {
        ActorsOutcome::Refused(why)
        | ActorsOutcome::Corrupt(why)
        | ActorsOutcome::Unavailable(why) => why,
        other => format!("the actor ledger answered {other:?}, which this command does not expect"),
    }
}

/// `cotal-authd actor revoke ACTOR --credential`: revokes, on the space's server, the root
/// credential the actor's incarnation carries (`core::lifecycle::RevokeRootCredential`). Every
/// bearer of the incarnation names that one row, so each is refused at its next connect, and
/// the next exchange refuses too: a revoked root is rotated only by a barrier. The grant row
/// stays. `server` defaults to the running plane's, from its discovery file.
pub async fn revoke_credential(
    root: &Path,
    space: &SpaceName,
    actor: &str,
    owner: &OwnerArg,
    server: Option<String>,
) -> Result<String, String> {
    use std::sync::Arc;
    use std::time::Duration;

    use cotal_core::kv::Store;
    use cotal_core::ledger::Revocation;
    use cotal_core::lifecycle::RevokeRootCredential;
    use cotal_core::machine::Replay;
    use cotal_core::plane_grants::{self, PlaneConnection, AUTHORITY_CLIENT_TTL_SECS};
    use cotal_io_nats::{AuthorityClient, DataAccountSigner, NatsWorld, SpaceOptions, StoreSet};

    let actor_token =
        ActorToken::parse(actor).map_err(|e| format!("actor {actor:?}: {}", e.message))?;
    let owner = resolve_owner(root, space, owner)?;
    let server = match server {
        Some(server) => server,
        None => discovery::read(&discovery::path(root, space))?
            .map(|d| d.server)
            .ok_or_else(|| {
                format!(
                    "the plane of space {space} is not up here to name its server; pass \
                     --server URL"
                )
            })?,
    };
    let material = trust::load_daemon(root, space)?;
    let options = SpaceOptions {
        create_missing: false,
        replicas_as_found: true,
        stores: StoreSet::of(&[Store::Auth, Store::Records]),
        ..SpaceOptions::default()
    };
    let grant_space = space.clone();
    let client = AuthorityClient::open(
        &server,
        PlaneConnection::CredentialRevoke.label(space),
        DataAccountSigner {
            account: material.data_account().to_owned(),
            signer: Arc::new(material.data_signing_key().clone()),
        },
        move |conn| plane_grants::credential_revoke(&grant_space, conn).map(Into::into),
        Duration::from_secs(AUTHORITY_CLIENT_TTL_SECS),
        space.clone(),
        options,
    )
    .await
    .map_err(|e| e.message.clone())?;
    let revoke = RevokeRootCredential {
        owner: owner.owner().clone(),
        actor: actor_token,
    };
    let outcome = match client.space() {
        Ok(bound) => NatsWorld::new(&bound).run(&mut Replay::new(revoke)).await,
        Err(e) => Err(e),
    };
    let _ = client.close().await;
    let principal = format!("{owner}.{actor}");
    match outcome {
        Ok(revoked) => {
            let row = format!("cred.{}.{}", revoked.lifecycle_uid, revoked.credential_id);
            crate::audit::granted(
                "operator",
                "revoke-credential",
                &row,
                crate::audit::At::default(),
            );
            Ok(match revoked.revocation {
                Revocation::Revoked => format!(
                    "revoked the root credential {row} of {principal}: every bearer of it is \
                     refused at its next connect, and its exchange is refused until the actor \
                     is retired and granted afresh"
                ),
                Revocation::AlreadyRevoked => {
                    format!("the root credential {row} of {principal} was already revoked")
                }
            })
        }
        Err(e) => {
            crate::audit::refused("operator", "revoke-credential", &principal, &e);
            Err(e.message)
        }
    }
}

/// `cotal-authd actor retire ACTOR`: retires the incarnation the actor's grant names, through
/// the running plane's interactive retire door (its discovery file and capability): the gate
/// frozen, the credentials revoked, the holders kicked and verified gone, then retired. Retire
/// before re-granting: a re-grant while the incarnation lives is refused at the exchange.
pub async fn retire(
    root: &Path,
    space: &SpaceName,
    actor: &str,
    owner: &OwnerArg,
) -> Result<String, String> {
    use std::time::Duration;

    let actor_token =
        ActorToken::parse(actor).map_err(|e| format!("actor {actor:?}: {}", e.message))?;
    let owner = resolve_owner(root, space, owner)?;
    let principal = Principal::new(owner.owner().clone(), actor_token);
    let row = match ledger(root, space)?.execute(&ActorsRequest::Find {
        space: RowSpace::Interactive,
        principal,
    }) {
        ActorsOutcome::Found(Some(held)) => held.row,
        ActorsOutcome::Found(None) => {
            return Err(format!(
                "actor {actor} of owner {owner} has no interactive grant in space {space}; list \
                 the grants with `cotal-authd actor ls --space {space}`"
            ))
        }
        other => return Err(refusal(other)),
    };
    let uid = row
        .lifecycle_uid
        .ok_or_else(|| format!("actor {actor} has no lifecycle uid on its grant; re-grant it"))?;
    let discovery = discovery::read(&discovery::path(root, space))?.ok_or_else(|| {
        format!(
            "the plane of space {space} is not up; start it with `cotal-authd up --space {space}`"
        )
    })?;
    let authorization = format!("Bearer {}", discovery.cap);
    let (status, answer) = cotal_io_http::fetch::post_json(
        &format!("{}/interactive-lifecycle/retire", discovery.url),
        &[("authorization", &authorization)],
        &json!({"owner": owner.as_str(), "actor": actor, "lifecycleUid": uid.as_str()}),
        Duration::from_secs(40),
        64 * 1024,
    )
    .await?;
    if !status.is_success() {
        return Err(format!(
            "the retirement was refused ({status}): {}",
            answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ));
    }
    let flag = |name: &str| answer.get(name).and_then(Value::as_bool).unwrap_or(false);
    Ok(if flag("alreadyRetired") {
        format!("actor {actor}'s lifecycle {uid} was already retired")
    } else if flag("notStarted") {
        format!("actor {actor}'s lifecycle {uid} never started: nothing to retire")
    } else {
        format!(
            "retired actor {actor}'s lifecycle {uid}: its credentials are revoked and its \
             connections closed; re-grant it to sign in again"
        )
    })
}
