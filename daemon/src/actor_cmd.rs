//! `cotal-authd actor grant|ls|revoke` and `cotal-authd owner`: the operator's verbs on the
//! space's actor ledger (reference §6.5), the interactive rows a signed-in human exchanges
//! against. The ledger's rules (row grammar, no shadowing of a managed row, fail-closed reads)
//! are `cotal_core::actors`; the files are `cotal_io_fs::FileActors` under the space's state dir;
//! the owner an IdP subject derives is `DaemonMaterial::owner_for_idp_subject`. A revoke and a
//! re-grant end the incarnation they take the grant from through the running plane's interactive
//! retire door (core `lifecycle::admit_door_retirement`), whose barrier kicks its live
//! connections and verifies them gone (F47 (4)); `revoke --credential` kicks them with the
//! servers' own listing and kick. This module only turns flags into requests and runs them;
//! what each verb reads from the answers and says is `cotal_core::actor_verbs`.

use std::path::Path;

pub use cotal_core::actor_verbs::Listing;
use cotal_core::actor_verbs::{self as verbs, Alias, Listed};
pub use cotal_core::actors::grant::GrantLists;
use cotal_core::actors::row::iso8601_millis;
use cotal_core::actors::{ActorRow, ActorsRequest, RowSpace};
use cotal_core::lifecycle::PlaneRetire;
use cotal_core::names::{ActorToken, DerivedOwner, LifecycleUid, Principal, SpaceName};
use cotal_core::plane_grants::{self, PlaneConnection};
use cotal_io_fs::{discovery, random, trust};
use cotal_io_http::loopback::Loopback;
use cotal_io_nats::liveness::Oracle;
use cotal_io_nats::{AuthorityClient, Dial, TlsSettings};

use crate::ledger::VerbLedger;

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

/// The derived owner `owner` names, refusing any owner a human cannot sign in as.
pub fn resolve_owner(
    root: &Path,
    space: &SpaceName,
    owner: &OwnerArg,
) -> Result<DerivedOwner, String> {
    match owner {
        OwnerArg::Owner(o) => verbs::owner_arg(space, o),
        OwnerArg::IdpSubject(sub) => trust::load_daemon(root, space)?
            .owner_for_idp_subject(sub)
            .map_err(|e| e.message),
    }
}

/// `cotal-authd owner`: the owner the pinned IdP's subject derives in the space.
pub fn owner(root: &Path, space: &SpaceName, subject: &str) -> Result<String, String> {
    resolve_owner(root, space, &OwnerArg::IdpSubject(subject.to_owned())).map(|o| o.to_string())
}

/// The actor and owner a verb names, checked.
fn named(
    root: &Path,
    space: &SpaceName,
    actor: &str,
    owner: &OwnerArg,
) -> Result<(ActorToken, DerivedOwner), String> {
    let actor = verbs::actor_arg(actor)?;
    Ok((actor, resolve_owner(root, space, owner)?))
}

/// `cotal-authd actor grant`: upserts the interactive row at a fresh lifecycle uid, so a
/// re-grant rotates the uid and every bearer of the previous incarnation dies at its next
/// connect (F59); a re-grant then retires the previous incarnation through the running plane,
/// closing its live connections, so the fresh uid exchanges (F60: no takeover barrier runs at
/// the exchange). The grant stands whether or not the plane is up; the sentence says which.
pub async fn grant(args: GrantArgs) -> Result<String, String> {
    let (actor, owner) = named(&args.root, &args.space, &args.actor, &args.owner)?;
    let alias = Alias::new(&args.space, &actor, &owner);
    let lists = args.lists.resolve(&args.space, &actor, &owner)?;
    let uid = LifecycleUid::mint(random::entropy()?);
    let granted_at = iso8601_millis(crate::clock::now_ms());
    let row = alias.interactive_row(lists, args.role, args.label, uid, granted_at);
    let actors = VerbLedger::open(&args.root, &args.space, args.server, args.tls).await?;
    let previous = current_uid(&actors, alias.principal()).await?;
    let row = verbs::written(actors.ask(ActorsRequest::GrantInteractive(row)).await)?;
    let Some(previous) = previous.filter(|p| Some(p) != row.lifecycle_uid.as_ref()) else {
        return alias.granted(&row, None);
    };
    let retired = retire_at_plane(&args.root, &alias, &previous).await;
    alias.granted(&row, Some((&previous, retired)))
}

/// The interactive row of `principal`, if it is granted.
async fn interactive(
    actors: &VerbLedger,
    principal: Principal,
) -> Result<Option<ActorRow>, String> {
    let space = RowSpace::Interactive;
    verbs::found(actors.ask(ActorsRequest::Find { space, principal }).await)
}

/// The lifecycle uid the interactive grant of `principal` is at, if it is granted.
async fn current_uid(
    actors: &VerbLedger,
    principal: Principal,
) -> Result<Option<LifecycleUid>, String> {
    Ok(interactive(actors, principal)
        .await?
        .and_then(|row| row.lifecycle_uid))
}

/// Asks the space's running plane (its discovery file and capability) to retire the actor's
/// lifecycle `uid` at the interactive retire door: the gate frozen, the credentials revoked,
/// the holders kicked and verified gone, then retired (F47).
async fn retire_at_plane(root: &Path, alias: &Alias<'_>, uid: &LifecycleUid) -> PlaneRetire {
    let discovery = match discovery::read(&discovery::path(root, alias.space)) {
        Ok(Some(discovery)) => discovery,
        Ok(None) => return PlaneRetire::not_up(alias.space),
        Err(why) => return PlaneRetire::Unreached(why),
    };
    let face = Loopback {
        url: &discovery.url,
        cap: &discovery.cap,
    };
    face.retire_interactive(alias.space, &alias.retire_target(uid))
        .await
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
    let (actor, owner) = named(root, space, actor, owner)?;
    let alias = Alias::new(space, &actor, &owner);
    let actors = VerbLedger::open(root, space, server, tls).await?;
    let uid = match interactive(&actors, alias.principal()).await? {
        Some(row) => row.lifecycle_uid,
        None => return Err(alias.not_granted()),
    };
    let retired = match &uid {
        Some(uid) => Some((uid, retire_at_plane(root, &alias, uid).await)),
        None => None,
    };
    let principal = alias.principal();
    let removed = actors
        .ask(ActorsRequest::RevokeInteractive { principal })
        .await;
    if !verbs::removed(removed)? {
        return Err(alias.not_granted());
    }
    alias.revoked(retired)
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
    let mut listed = Listed::default();
    for kind in [RowSpace::Interactive, RowSpace::Managed] {
        listed.add(kind, actors.ask(ActorsRequest::List { space: kind }).await)?;
    }
    Ok(listed.listing(space, as_json))
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
    tls: TlsSettings,
) -> Result<String, String> {
    let (actor, owner) = named(root, space, actor, owner)?;
    let alias = Alias::new(space, &actor, &owner);
    let server = Dial::new(&discovery::server_or_plane(root, space, server)?, tls)?;
    let material = trust::load_daemon(root, space)?;
    let client = AuthorityClient::for_operator(
        &server,
        &material,
        space,
        PlaneConnection::CredentialRevoke,
        plane_grants::credential_revoke,
    )
    .await?;
    let (outcome, _closed) = client.run_once(alias.root_revoke(), |world| world).await;
    let principal = alias.principal().key();
    let revoked = match outcome {
        Ok(revoked) => revoked,
        Err(e) => {
            crate::audit::refused("operator", "revoke-credential", &principal, &e);
            return Err(e.message);
        }
    };
    crate::audit::granted(
        "operator",
        "revoke-credential",
        &verbs::credential_row(&revoked),
        crate::audit::At::default(),
    );
    let oracle = Oracle::of_system(&server, &material, space);
    let evicted = oracle.evict_with_evidence(&[alias.principal()]).await;
    verbs::credential_revoked(&principal, &revoked, evicted.first())
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
    let (actor, owner) = named(root, space, actor, owner)?;
    let alias = Alias::new(space, &actor, &owner);
    let actors = VerbLedger::open(root, space, server, tls).await?;
    let current = current_uid(&actors, alias.principal()).await?;
    let Some(uid) = alias.retiring(uid.as_deref(), current.as_ref())? else {
        return Ok(alias.no_current_lifecycle());
    };
    let retired = retire_at_plane(root, &alias, &uid).await;
    alias.retired(&uid, current.as_ref(), retired)
}
