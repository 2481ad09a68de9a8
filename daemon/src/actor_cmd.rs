//! `cotal-authd actor grant|ls|revoke` and `cotal-authd owner`: the operator's verbs on the
//! space's actor ledger (reference §6.5), the interactive rows a signed-in human exchanges
//! against. The ledger's rules (row grammar, no shadowing of a managed row, fail-closed reads)
//! are `cotal_core::actors`; the files are `cotal_io_fs::FileActors` under the space's state dir;
//! the owner an IdP subject derives is `DaemonMaterial::owner_for_idp_subject`. A revoke and a
//! re-grant end the incarnation they take the grant from through the running plane's interactive
//! retire door (core `lifecycle::admit_door_retirement`), whose barrier kicks its live
//! connections and verifies them gone (F47 (4)); `revoke --credential` kicks them with the
//! servers' own listing and kick. This module only turns flags into a row and outcomes into
//! sentences.

use std::path::Path;

pub use cotal_core::actors::grant::GrantLists;
use cotal_core::actors::grant::{shown, LISTING_HEADERS};
use cotal_core::actors::row::iso8601_millis;
use cotal_core::actors::{denied, ActorRow, ActorsOutcome, ActorsRequest, RowSpace};
use cotal_core::names::{ActorToken, DerivedOwner, LifecycleUid, Principal, SpaceName};
use cotal_io_fs::{discovery, random, trust};
use serde_json::{json, Value};

use cotal_io_fs::ledger_home::{self, LedgerHome};

use cotal_io_nats::{Dial, TlsSettings};

use crate::ledger::{Ledger, VerbConnection};

/// Who a grant is for: an owner token as it is, or the subject the space's pinned IdP
/// authenticates, derived with the space's owner secret.
#[derive(Debug, Clone)]
pub enum OwnerArg {
    Owner(String),
    IdpSubject(String),
}

#[derive(Debug)]
pub struct GrantArgs {
    pub root: std::path::PathBuf,
    /// The server a replicated ledger is reached on, and its TLS.
    pub server: Option<String>,
    pub tls: TlsSettings,
    pub space: SpaceName,
    pub actor: String,
    pub owner: OwnerArg,
    pub lists: GrantLists,
    pub role: Option<String>,
    pub label: Option<String>,
}

/// The ledger one verb writes, open for the verb's length.
#[derive(Debug)]
pub struct VerbLedger {
    ledger: Ledger,
    /// The replicated ledger's short connection, held while the verb runs.
    _connection: Option<VerbConnection>,
}

impl VerbLedger {
    /// The ledger of `space` under the state root (the directory its trust root lives in):
    /// its files, refused when that root's plane serves another state root's
    /// ([`ledger_home::for_verbs`]); or the replicated bucket, over a short operator connection
    /// to `server` (default: the running plane's, from its discovery file).
    pub async fn open(
        root: &Path,
        space: &SpaceName,
        server: Option<String>,
        tls: TlsSettings,
    ) -> Result<VerbLedger, String> {
        match ledger_home::for_verbs(root, space)? {
            LedgerHome::Files(files) => Ok(VerbLedger {
                ledger: Ledger::Files(files),
                _connection: None,
            }),
            LedgerHome::Replicated => {
                let server = Dial::new(&plane_server(root, space, server)?, tls)?;
                let material = trust::load_daemon(root, space)?;
                let (connection, ledger) = VerbConnection::open(server, space, &material).await?;
                Ok(VerbLedger {
                    ledger,
                    _connection: Some(connection),
                })
            }
        }
    }

    async fn ask(&self, request: ActorsRequest) -> ActorsOutcome {
        self.ledger.ask(request).await
    }
}

/// The server a verb connects to: `server`, else the running plane's from its discovery file.
fn plane_server(root: &Path, space: &SpaceName, server: Option<String>) -> Result<String, String> {
    match server {
        Some(server) => Ok(server),
        None => discovery::read(&discovery::path(root, space))?
            .map(|d| d.server)
            .ok_or_else(|| {
                format!(
                    "the plane of space {space} is not up here to name its server; pass                      --server URL"
                )
            }),
    }
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
/// connect (F59); a re-grant then retires the previous incarnation through the running plane,
/// closing its live connections, so the fresh uid exchanges (F60: no takeover barrier runs at
/// the exchange). The grant stands whether or not the plane is up; the sentence says which.
pub async fn grant(args: GrantArgs) -> Result<String, String> {
    let actor = ActorToken::parse(&args.actor)
        .map_err(|e| format!("actor {:?}: {}", args.actor, e.message))?;
    let owner = resolve_owner(&args.root, &args.space, &args.owner)?;
    let [scope, allow_subscribe, allow_publish] =
        args.lists.resolve(&args.space, &actor, &owner)?;
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
    let actors = VerbLedger::open(&args.root, &args.space, args.server, args.tls).await?;
    let previous = current_uid(
        &actors,
        &Principal::new(owner.owner().clone(), row.actor.clone()),
    )
    .await?;
    let row = match actors.ask(ActorsRequest::GrantInteractive(row)).await {
        ActorsOutcome::Granted(row) => row,
        other => return Err(refusal(other)),
    };
    let granted = format!(
        "granted actor {} to owner {} in space {} (scope {}; subscribe {}; publish {}) at \
         lifecycle {}",
        row.actor,
        row.owner,
        args.space,
        shown(&row.scope),
        shown(&row.allow_subscribe),
        shown(&row.allow_publish),
        row.lifecycle_uid.as_ref().map_or("-", LifecycleUid::as_str),
    );
    let Some(previous) = previous.filter(|p| Some(p) != row.lifecycle_uid.as_ref()) else {
        return Ok(granted);
    };
    let retry = retire_command(&args.space, &row.actor, &owner, &previous);
    match retire_at_plane(&args.root, &args.space, &owner, &row.actor, &previous).await {
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

/// The lifecycle uid the interactive grant of `principal` is at, if it is granted.
async fn current_uid(
    actors: &VerbLedger,
    principal: &Principal,
) -> Result<Option<LifecycleUid>, String> {
    match actors
        .ask(ActorsRequest::Find {
            space: RowSpace::Interactive,
            principal: principal.clone(),
        })
        .await
    {
        ActorsOutcome::Found(held) => Ok(held.and_then(|h| h.row.lifecycle_uid)),
        other => Err(refusal(other)),
    }
}

/// The operator's command that retires `uid` of the actor.
fn retire_command(
    space: &SpaceName,
    actor: &ActorToken,
    owner: &DerivedOwner,
    uid: &LifecycleUid,
) -> String {
    format!(
        "cotal-authd actor retire {actor} --space {space} --owner {owner} --lifecycle-uid {uid}"
    )
}

/// What the running plane's interactive retire door did with one lifecycle.
#[derive(Debug)]
enum PlaneRetire {
    Retired,
    AlreadyRetired,
    NotStarted,
    /// No plane of the space answered here; the sentence says why.
    Unreached(String),
    /// The door refused; its status and sentence.
    Refused(String),
}

/// Asks the space's running plane (its discovery file and capability) to retire the actor's
/// lifecycle `uid` at the interactive retire door: the gate frozen, the credentials revoked,
/// the holders kicked and verified gone, then retired (F47).
async fn retire_at_plane(
    root: &Path,
    space: &SpaceName,
    owner: &DerivedOwner,
    actor: &ActorToken,
    uid: &LifecycleUid,
) -> PlaneRetire {
    use std::time::Duration;

    let discovery = match discovery::read(&discovery::path(root, space)) {
        Ok(Some(discovery)) => discovery,
        Ok(None) => {
            return PlaneRetire::Unreached(format!("the plane of space {space} is not up here"))
        }
        Err(why) => return PlaneRetire::Unreached(why),
    };
    let authorization = format!("Bearer {}", discovery.cap);
    let asked = cotal_io_http::fetch::post_json(
        &format!("{}/interactive-lifecycle/retire", discovery.url),
        &[("authorization", &authorization)],
        &json!({"owner": owner.as_str(), "actor": actor.as_str(), "lifecycleUid": uid.as_str()}),
        Duration::from_secs(40),
        64 * 1024,
    )
    .await;
    let (status, answer) = match asked {
        Ok(answered) => answered,
        Err(why) => {
            return PlaneRetire::Unreached(format!(
                "the plane of space {space} did not answer at {} ({why})",
                discovery.url
            ))
        }
    };
    if !status.is_success() {
        return PlaneRetire::Refused(format!(
            "{status}: {}",
            answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ));
    }
    let flag = |name: &str| answer.get(name).and_then(Value::as_bool).unwrap_or(false);
    if flag("alreadyRetired") {
        PlaneRetire::AlreadyRetired
    } else if flag("notStarted") {
        PlaneRetire::NotStarted
    } else {
        PlaneRetire::Retired
    }
}

/// `cotal-authd actor revoke`: ends the incarnation the grant names through the running
/// plane's interactive retire door (its live connections kicked and verified gone, F47 (4)),
/// then removes the interactive row, so its bearers are denied at their next connect (the
/// callout reads the row fresh, F59) and a later grant's fresh uid exchanges (F60). The row is
/// removed whether or not the plane is up; the sentence says which.
pub async fn revoke(
    root: &Path,
    space: &SpaceName,
    actor: &str,
    owner: &OwnerArg,
    server: Option<String>,
    tls: TlsSettings,
) -> Result<String, String> {
    let actor_token =
        ActorToken::parse(actor).map_err(|e| format!("actor {actor:?}: {}", e.message))?;
    let owner = resolve_owner(root, space, owner)?;
    let principal = Principal::new(owner.owner().clone(), actor_token.clone());
    let actors = VerbLedger::open(root, space, server, tls).await?;
    let not_granted = || {
        format!(
            "actor {actor} of owner {owner} has no interactive grant in space {space}; list \
             the grants with `cotal-authd actor ls --space {space}`"
        )
    };
    let uid = match actors
        .ask(ActorsRequest::Find {
            space: RowSpace::Interactive,
            principal: principal.clone(),
        })
        .await
    {
        ActorsOutcome::Found(Some(held)) => held.row.lifecycle_uid,
        ActorsOutcome::Found(None) => return Err(not_granted()),
        other => return Err(refusal(other)),
    };
    let retired = match &uid {
        Some(uid) => Some(retire_at_plane(root, space, &owner, &actor_token, uid).await),
        None => None,
    };
    match actors
        .ask(ActorsRequest::RevokeInteractive { principal })
        .await
    {
        ActorsOutcome::Revoked(true) => {}
        ActorsOutcome::Revoked(false) => return Err(not_granted()),
        other => return Err(refusal(other)),
    }
    let revoked = format!("revoked actor {actor} of owner {owner} in space {space}");
    let refused = "its next connect and exchange are refused";
    let (Some(uid), Some(retired)) = (uid, retired) else {
        return Ok(format!("{revoked}: {refused}"));
    };
    let retry = retire_command(space, &actor_token, &owner, &uid);
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

/// What `actor ls` prints: the readable rows, and the sentence about the unreadable ones
/// (each denies its actor), which fails the command after the listing is printed.
#[derive(Debug)]
pub struct Listing {
    pub out: String,
    pub unreadable: Option<String>,
}

/// `cotal-authd actor ls`: every row of both spaces, a table or JSON.
pub async fn ls(
    root: &Path,
    space: &SpaceName,
    as_json: bool,
    server: Option<String>,
    tls: TlsSettings,
) -> Result<Listing, String> {
    let actors = VerbLedger::open(root, space, server, tls).await?;
    let mut rows = Vec::new();
    let mut broken = Vec::new();
    for kind in [RowSpace::Interactive, RowSpace::Managed] {
        match actors.ask(ActorsRequest::List { space: kind }).await {
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
            .map(|(kind, row)| row.listing_json(*kind))
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

fn table(rows: &[(RowSpace, ActorRow)]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(kind, row)| row.listing_cells(*kind))
        .collect();
    crate::table::render(&LISTING_HEADERS, &cells)
}

/// A ledger answer this verb cannot act on, as its one sentence ([`denied`]).
fn refusal(outcome: ActorsOutcome) -> String {
    denied(outcome, "this command's answer").message
}

/// `cotal-authd actor revoke ACTOR --credential`: revokes, on the space's server, the root
/// credential the actor's incarnation carries (`core::lifecycle::RevokeRootCredential`). Every
/// bearer of the incarnation names that one row, so each is refused at its next connect (F59),
/// and the next exchange refuses too: a revoked root is rotated only by a barrier (F58). Then
/// the principal's live connections are kicked with the servers' own listing and kick, as the
/// plane's system user, and verified gone by a complete sweep (the kill-live layer, §4.0 (3)).
/// The grant row stays. `server` defaults to the running plane's, from its discovery file;
/// both connections dial it with `tls`.
pub async fn revoke_credential(
    root: &Path,
    space: &SpaceName,
    actor: &str,
    owner: &OwnerArg,
    server: Option<String>,
    tls: cotal_io_nats::TlsSettings,
) -> Result<String, String> {
    use std::time::Duration;

    use cotal_core::kv::Store;
    use cotal_core::ledger::Revocation;
    use cotal_core::lifecycle::RevokeRootCredential;
    use cotal_core::plane_grants::{self, PlaneConnection, AUTHORITY_CLIENT_TTL_SECS};
    use cotal_io_nats::liveness::Oracle;
    use cotal_io_nats::{AuthorityClient, DataAccountSigner, SpaceOptions};

    let actor_token =
        ActorToken::parse(actor).map_err(|e| format!("actor {actor:?}: {}", e.message))?;
    let owner = resolve_owner(root, space, owner)?;
    let server = plane_server(root, space, server)?;
    let server = cotal_io_nats::Dial::new(&server, tls)?;
    let material = trust::load_daemon(root, space)?;
    let grant_space = space.clone();
    let client = AuthorityClient::open(
        &server,
        PlaneConnection::CredentialRevoke.label(space),
        DataAccountSigner::of(&material),
        move |conn| {
            plane_grants::credential_revoke(&grant_space, conn).map(cotal_core::profiles::host_user)
        },
        Duration::from_secs(AUTHORITY_CLIENT_TTL_SECS),
        space.clone(),
        SpaceOptions::existing(&[Store::Auth, Store::Records]),
    )
    .await
    .map_err(|e| e.message.clone())?;
    let holder = Principal::new(owner.owner().clone(), actor_token.clone());
    let revoke = RevokeRootCredential {
        owner: owner.owner().clone(),
        actor: actor_token,
    };
    let (outcome, _closed) = client.run_once(revoke, |world| world).await;
    let principal = holder.key();
    let revoked = match outcome {
        Ok(revoked) => revoked,
        Err(e) => {
            crate::audit::refused("operator", "revoke-credential", &principal, &e);
            return Err(e.message);
        }
    };
    let row = format!("cred.{}.{}", revoked.lifecycle_uid, revoked.credential_id);
    crate::audit::granted(
        "operator",
        "revoke-credential",
        &row,
        crate::audit::At::default(),
    );
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
    let oracle = Oracle::new(
        &server,
        material.system_user().creds(),
        material.data_account(),
        PlaneConnection::PlaneSystem.label(space),
    );
    match oracle.evict_with_evidence(&[holder]).await.first() {
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

/// `cotal-authd actor retire ACTOR [--lifecycle-uid UID]`: retires the incarnation the actor's
/// grant names, or the one `uid` names (a predecessor a revoke or re-grant left live while the
/// plane was down), through the running plane's interactive retire door (its discovery file and
/// capability): the gate frozen, the credentials revoked, the holders kicked and verified gone,
/// then retired (F47). The door refuses a managed agent's alias (F49).
pub async fn retire(
    root: &Path,
    space: &SpaceName,
    actor: &str,
    owner: &OwnerArg,
    uid: Option<String>,
    server: Option<String>,
    tls: TlsSettings,
) -> Result<String, String> {
    let actor_token =
        ActorToken::parse(actor).map_err(|e| format!("actor {actor:?}: {}", e.message))?;
    let owner = resolve_owner(root, space, owner)?;
    let principal = Principal::new(owner.owner().clone(), actor_token.clone());
    let current = current_uid(
        &VerbLedger::open(root, space, server, tls).await?,
        &principal,
    )
    .await?;
    let uid = match uid {
        Some(uid) => LifecycleUid::parse(&uid)
            .map_err(|e| format!("--lifecycle-uid {uid:?}: {}", e.message))?,
        None => match &current {
            Some(uid) => uid.clone(),
            None => {
                return Ok(format!(
                    "actor {actor} of owner {owner} has no interactive grant in space {space}, \
                     so no current lifecycle to retire (a revoked or superseded one retires \
                     with --lifecycle-uid UID)"
                ))
            }
        },
    };
    let next = match &current {
        Some(granted) if *granted != uid => {
            format!("its grant at lifecycle {granted} exchanges now")
        }
        _ => "re-grant it to sign in again".to_owned(),
    };
    match retire_at_plane(root, space, &owner, &actor_token, &uid).await {
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
