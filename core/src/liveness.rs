//! Holder liveness and verified eviction, decided from the NATS servers' own connection listings
//! (DESIGN: liveness and eviction from NATS itself; spec-fence-rules F24, F52, F68). Pure: the
//! adapter sends the requests this module names and hands every reply back to it.
//!
//! One sweep: ask every server for its JetStream view (`JSZ`), which says which servers make up
//! the cluster — its meta group, offline peers included, or the one standalone server — so the
//! expected set comes from the servers themselves, never from configuration; then ask every
//! server for the data account's connections (`CONNZ`, `auth: true`), page by page. The sweep
//! is complete only when every expected server answered every page and no reply was malformed.
//! A holder is `live` when any listed connection is attributed to it, `gone` only under a
//! complete sweep that lists none, and `unknown` otherwise: silence is never death.
//!
//! Attribution is the `principal:<owner>.<actor>` tag every credential the plane mints carries
//! in its user JWT (profiles, and the plane's own connections), which `CONNZ` with `auth: true`
//! lists. A connection without one is infrastructure and never a holder.
//!
//! Eviction is the system account's `KICK` of each attributed connection on the server that
//! listed it, verified by a fresh complete sweep that lists none of the holder's connections.
//! A `KICK` has no per-connection acknowledgement, so only that re-sweep proves anything.
//!
//! Residual: a server listing more than one page can shift its list between two page requests
//! (a connection closing moves later ones down by one), so a page's total must not change
//! between pages or the sweep is incomplete; a close and an open between the same two requests
//! keep the total and can still hide one connection. A page holds [`CONNZ_PAGE`] connections
//! per server and account, so this needs that many live connections of the data account on one
//! server.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::jwt::{Permission, Permissions};
use crate::machine::Liveness;
use crate::names::Principal;
use crate::plane_claim::{ConnTuple, PlaneQuery, PlaneVerdict, TupleLiveness};
use crate::wire::ObjectWriter;

/// The system-account user the trust root provisions for the plane alone.
pub const SYSTEM_USER_NAME: &str = "cotal-plane";
/// The only inbox prefix that user may subscribe under (its creds are static, so the prefix is
/// fixed; every request still draws its own inbox under it).
pub const SYSTEM_INBOX_PREFIX: &str = "_INBOX_cotal_plane";
/// Every server answers with its JetStream view, which names the cluster's members.
pub const JSZ_PING: &str = "$SYS.REQ.SERVER.PING.JSZ";
/// Every server answers with its connections (filtered by account in the request).
pub const CONNZ_PING: &str = "$SYS.REQ.SERVER.PING.CONNZ";
/// Connections asked for per page and server.
pub const CONNZ_PAGE: u64 = 4096;
/// Pages per server before a sweep gives up as incomplete.
pub const MAX_PAGES: u64 = 16;
/// The tag prefix that attributes a connection to its holder.
pub const PRINCIPAL_TAG: &str = "principal:";

/// One server's `CONNZ`, for a later page.
pub fn server_connz(server_id: &str) -> String {
    format!("$SYS.REQ.SERVER.{server_id}.CONNZ")
}

/// One server's `KICK`, which closes one of its connections by id.
pub fn server_kick(server_id: &str) -> String {
    format!("$SYS.REQ.SERVER.{server_id}.KICK")
}

/// The grant of [`SYSTEM_USER_NAME`]: the two pings, one server's listing and its kick, and
/// replies to its own inboxes. Nothing else of the system account: no account or server
/// administration, no event subjects.
pub fn system_user_permissions() -> Permissions {
    Permissions {
        publish: Permission {
            allow: vec![
                JSZ_PING.to_owned(),
                CONNZ_PING.to_owned(),
                server_connz("*"),
                server_kick("*"),
            ],
            deny: Vec::new(),
        },
        subscribe: Permission {
            allow: vec![format!("{SYSTEM_INBOX_PREFIX}.>")],
            deny: Vec::new(),
        },
        response: None,
    }
}

/// The `CONNZ` request for one page of `account`'s connections, with the JWT details
/// (`auth: true`) that carry the tags.
pub fn connz_request(account: &str, offset: u64) -> Vec<u8> {
    json!({"acc": account, "auth": true, "offset": offset, "limit": CONNZ_PAGE, "sort": "cid"})
        .to_string()
        .into_bytes()
}

/// The `KICK` request for connection `cid`.
pub fn kick_request(cid: u64) -> Vec<u8> {
    json!({ "cid": cid }).to_string().into_bytes()
}

/// A server as it names itself in a reply's envelope.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerRef {
    pub name: String,
    pub id: String,
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{what} is not a JSON object"))
}

fn text<'a>(map: &'a Map<String, Value>, member: &str, what: &str) -> Result<&'a str, String> {
    match map.get(member).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(format!("{what} has no {member}")),
    }
}

fn count(map: &Map<String, Value>, member: &str, what: &str) -> Result<u64, String> {
    map.get(member)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{what} has no unsigned {member}"))
}

/// The envelope every `$SYS` reply carries: who answered, and its `data` unless it refused.
struct Envelope {
    server: ServerRef,
    /// The cluster the server declares itself a member of; `None` for a standalone server.
    cluster: Option<String>,
    data: Option<Value>,
}

fn envelope(bytes: &[u8]) -> Result<Envelope, String> {
    let mut value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("a reply is not JSON ({e})"))?;
    let root = object(&value, "a reply")?;
    let server = object(
        root.get("server").unwrap_or(&Value::Null),
        "a reply's server",
    )?;
    let server_ref = ServerRef {
        name: text(server, "name", "a reply's server")?.to_owned(),
        id: text(server, "id", "a reply's server")?.to_owned(),
    };
    let cluster = match server.get("cluster") {
        None => None,
        Some(Value::String(c)) if !c.is_empty() => Some(c.clone()),
        Some(_) => {
            return Err(format!(
                "server {} declares a malformed cluster",
                server_ref.name
            ))
        }
    };
    if let Some(error) = root.get("error") {
        return Err(format!(
            "server {} answered with an error: {error}",
            server_ref.name
        ));
    }
    Ok(Envelope {
        server: server_ref,
        cluster,
        data: value.get_mut("data").map(Value::take),
    })
}

impl Envelope {
    fn data(&self, what: &str) -> Result<&Map<String, Value>, String> {
        let data = self
            .data
            .as_ref()
            .ok_or_else(|| format!("server {} answered {what} without data", self.server.name))?;
        object(data, what)
    }
}

/// How long the meta group's leader must have gone without hearing from a member before that
/// member counts as departed from the cluster ([`Sweep::plane_verdict`]): several of the
/// group's 1 s heartbeats, so a member that is only slow to answer a system-account ping, and
/// still answers its raft peers, is never taken for lost.
pub const DEPARTED_AFTER_NANOS: u64 = 3_000_000_000;

/// The servers a complete sweep must hear from, as the servers themselves report them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    names: BTreeSet<String>,
    /// The members that answered the cluster query: a `CONNZ` ping waits for these, not for a
    /// member that was already silent (it would only wait out its whole timeout again).
    answered: BTreeSet<String>,
    /// The members the meta group's leader (one of the answering servers) reports it has not
    /// heard from for [`DEPARTED_AFTER_NANOS`] or more (its `JSZ` replica's `active`), or never
    /// since it was elected (`current` false, `active` 0: a leader elected after the member
    /// was lost).
    unheard: BTreeSet<String>,
}

impl Topology {
    /// Reads the `JSZ` replies: a clustered server lists its meta group (itself and every
    /// peer, offline ones included, with the group's size); a standalone one declares no
    /// cluster and is the whole set. Every reply must agree, or the topology is unknown.
    pub fn from_jsz(replies: &[Vec<u8>]) -> Result<Topology, String> {
        if replies.is_empty() {
            return Err("no server answered the cluster query".to_owned());
        }
        let mut names = BTreeSet::new();
        let mut answered = BTreeSet::new();
        let mut unheard = BTreeSet::new();
        let mut sizes = BTreeSet::new();
        let mut standalone = 0usize;
        for reply in replies {
            let reply = envelope(reply)?;
            let server = &reply.server;
            names.insert(server.name.clone());
            answered.insert(server.name.clone());
            if reply.cluster.is_none() {
                standalone += 1;
                sizes.insert(1);
                continue;
            }
            let data = reply.data("a JSZ reply")?;
            let meta = data
                .get("meta_cluster")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    format!(
                        "server {} is clustered but reports no JetStream meta group",
                        server.name
                    )
                })?;
            sizes.insert(count(meta, "cluster_size", "a meta group")?);
            // Only the leader tracks when it last heard from each peer; a follower's `active`
            // says nothing.
            let leads = meta.get("leader").and_then(Value::as_str) == Some(server.name.as_str());
            for peer in meta
                .get("replicas")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let peer = object(peer, "a meta group peer")?;
                let name = text(peer, "name", "a meta group peer")?.to_owned();
                // `active` is how long ago the leader last heard from the peer; a leader
                // elected after the peer was lost has never heard from it (`current` false,
                // `active` 0).
                let active = peer.get("active").and_then(Value::as_u64);
                let current = peer.get("current").and_then(Value::as_bool);
                let lost = active.is_some_and(|ns| ns >= DEPARTED_AFTER_NANOS)
                    || (current == Some(false) && active == Some(0));
                if leads && lost {
                    unheard.insert(name.clone());
                }
                names.insert(name);
            }
        }
        let size = match (sizes.len(), sizes.first()) {
            (1, Some(&size)) => size,
            _ => return Err(format!("servers disagree on the cluster size ({sizes:?})")),
        };
        if standalone > 0 && (standalone != replies.len() || replies.len() != 1) {
            return Err("standalone and clustered servers answered together".to_owned());
        }
        if u64::try_from(names.len()).ok() != Some(size) {
            return Err(format!(
                "the meta group has {size} members but names {} servers",
                names.len()
            ));
        }
        Ok(Topology {
            names,
            answered,
            unheard,
        })
    }

    pub fn names(&self) -> &BTreeSet<String> {
        &self.names
    }
}

/// One listed connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub server: ServerRef,
    pub cid: u64,
    /// From its `principal:` tag; `None` for an unattributed (infrastructure) connection.
    pub principal: Option<Principal>,
    /// The connection's name, for the operator's report.
    pub name: String,
    /// The connection's user (its nkey, for a JWT user).
    pub user: Option<String>,
}

/// One server's listing so far.
#[derive(Debug, Clone)]
struct ServerListing {
    server: ServerRef,
    total: u64,
    pages: u64,
    conns: Vec<Listed>,
}

/// A `CONNZ` sweep being assembled from replies.
#[derive(Debug, Clone)]
pub struct Sweep {
    topology: Topology,
    servers: BTreeMap<String, ServerListing>,
    malformed: Option<String>,
}

/// What a sweep established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// Every expected server answered every page.
    Complete(Vec<Listed>),
    /// Why nothing can be concluded from absence.
    Incomplete(String),
}

impl Sweep {
    pub fn new(topology: Topology) -> Sweep {
        Sweep {
            topology,
            servers: BTreeMap::new(),
            malformed: None,
        }
    }

    /// Takes one `CONNZ` reply (a first page from the ping, or a later page asked of one
    /// server). Anything malformed, foreign or out of order makes the sweep incomplete.
    pub fn add(&mut self, bytes: &[u8]) {
        if let Err(why) = self.take(bytes) {
            self.malformed.get_or_insert(why);
        }
    }

    fn take(&mut self, bytes: &[u8]) -> Result<(), String> {
        let reply = envelope(bytes)?;
        let server = reply.server.clone();
        if !self.topology.names.contains(&server.name) {
            return Err(format!(
                "server {} answered but is not a member of the cluster it reports",
                server.name
            ));
        }
        let what = format!("server {}'s connection list", server.name);
        let data = reply.data(&what)?;
        let total = count(data, "total", &what)?;
        let offset = count(data, "offset", &what)?;
        let rows = data
            .get("connections")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{what} has no connections array"))?;
        let mut conns = Vec::with_capacity(rows.len());
        for row in rows {
            conns.push(listed(&server, row)?);
        }
        let entry = self
            .servers
            .entry(server.name.clone())
            .or_insert_with(|| ServerListing {
                server: server.clone(),
                total,
                pages: 0,
                conns: Vec::new(),
            });
        if entry.server != server {
            return Err(format!(
                "server {} answered under two ids ({} and {})",
                server.name, entry.server.id, server.id
            ));
        }
        let expected = u64::try_from(entry.conns.len()).unwrap_or(u64::MAX);
        if offset != expected {
            return Err(format!(
                "{what} came out of order (offset {offset}, {expected} listed so far)"
            ));
        }
        if entry.pages > 0 && total != entry.total {
            return Err(format!(
                "{what} changed between pages ({} then {total} connections)",
                entry.total
            ));
        }
        entry.pages += 1;
        entry.total = total;
        entry.conns.extend(conns);
        if entry.pages > MAX_PAGES && entry.needs_more() {
            return Err(format!("{what} spans more than {MAX_PAGES} pages"));
        }
        Ok(())
    }

    /// The plane claim's reading of this sweep (reference §2.10, F-claim): whether each of a
    /// held claim's two scanner connections is still connected. A complete sweep decides as
    /// [`Listing::tuple_liveness`] does. An incomplete one still decides when the only servers
    /// missing from it have **departed**: every server that answered listed all its pages,
    /// together they are a majority of the cluster's meta group, and the group's leader, among
    /// them, has not heard from any silent one for [`DEPARTED_AFTER_NANOS`] (a member that is
    /// merely slow to answer a ping still answers its raft peers, so it is never taken for
    /// lost). Then a scanner listed anywhere is live, and one that is not listed is gone — on its
    /// own server, if that one answered (a sealed scanner never reconnects elsewhere), and on a
    /// departed server too: a server outside the quorum cannot commit a JetStream write, so a
    /// plane still connected to it can no longer act on the space, and it stops itself once it
    /// cannot read its gate.
    ///
    /// Deviation from the reference, which refuses while any server is silent: without it a
    /// standby could never take over from a plane whose host (its node included) was lost.
    pub fn plane_verdict(&self, query: &PlaneQuery) -> PlaneVerdict {
        let listing = self.listing();
        let note = match &listing {
            Listing::Complete(_) => {
                return PlaneVerdict {
                    ledger: listing.tuple_liveness(&query.ledger),
                    records: listing.tuple_liveness(&query.records),
                    note: None,
                }
            }
            Listing::Incomplete(why) => why.clone(),
        };
        let answered = self.servers.len();
        let departed = self.malformed.is_none()
            && self.servers.values().all(|s| !s.needs_more())
            && answered * 2 > self.topology.names.len()
            && self
                .topology
                .names
                .iter()
                .filter(|n| !self.servers.contains_key(*n))
                .all(|n| self.topology.unheard.contains(n));
        if !departed {
            return PlaneVerdict {
                ledger: TupleLiveness::Unknown,
                records: TupleLiveness::Unknown,
                note: Some(note),
            };
        }
        let liveness = |tuple: &ConnTuple| {
            let listed = self.servers.values().flat_map(|s| &s.conns).any(|c| {
                c.user.as_deref() == Some(tuple.user_nkey.as_str())
                    || (c.server.id == tuple.server_id && c.cid == tuple.cid)
            });
            if listed {
                TupleLiveness::Live
            } else {
                TupleLiveness::Gone
            }
        };
        PlaneVerdict {
            ledger: liveness(&query.ledger),
            records: liveness(&query.records),
            note: Some(format!(
                "{note}; the {answered} that answered are a majority of the cluster and its \
                 leader has not heard from the silent ones for {} s, so they have departed it",
                DEPARTED_AFTER_NANOS / 1_000_000_000
            )),
        }
    }

    /// Servers with more to list: `(server id, offset)` of each next page to ask for.
    pub fn next_pages(&self) -> Vec<(String, u64)> {
        if self.malformed.is_some() {
            return Vec::new();
        }
        self.servers
            .values()
            .filter(|s| s.needs_more() && s.pages <= MAX_PAGES)
            .map(|s| {
                (
                    s.server.id.clone(),
                    u64::try_from(s.conns.len()).unwrap_or(u64::MAX),
                )
            })
            .collect()
    }

    /// True once every server that answered the cluster query has sent its first page: the
    /// most a `CONNZ` ping can still hope to hear.
    pub fn heard_from_the_answering(&self) -> bool {
        self.topology
            .answered
            .iter()
            .all(|n| self.servers.contains_key(n))
    }

    /// True once every expected server has sent its first page.
    pub fn heard_from_all(&self) -> bool {
        self.topology
            .names
            .iter()
            .all(|n| self.servers.contains_key(n))
    }

    /// The sweep's verdict, now.
    pub fn listing(&self) -> Listing {
        if let Some(why) = &self.malformed {
            return Listing::Incomplete(why.clone());
        }
        let silent: Vec<&str> = self
            .topology
            .names
            .iter()
            .filter(|n| !self.servers.contains_key(*n))
            .map(String::as_str)
            .collect();
        if !silent.is_empty() {
            return Listing::Incomplete(format!(
                "{} of {} servers did not answer ({})",
                silent.len(),
                self.topology.names.len(),
                silent.join(", ")
            ));
        }
        if let Some(s) = self.servers.values().find(|s| s.needs_more()) {
            return Listing::Incomplete(format!(
                "server {} listed {} of {} connections",
                s.server.name,
                s.conns.len(),
                s.total
            ));
        }
        Listing::Complete(
            self.servers
                .values()
                .flat_map(|s| s.conns.iter().cloned())
                .collect(),
        )
    }
}

impl ServerListing {
    fn needs_more(&self) -> bool {
        u64::try_from(self.conns.len()).is_ok_and(|n| n < self.total)
    }
}

/// One `CONNZ` row: an id is required (a row without one could be the holder and could not be
/// kicked); the tag, when present, must name a well-formed principal.
fn listed(server: &ServerRef, row: &Value) -> Result<Listed, String> {
    let what = format!("a connection listed by server {}", server.name);
    let row = object(row, &what)?;
    let cid = count(row, "cid", &what)?;
    let mut principal = None;
    for tag in row
        .get("tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(held) = tag.as_str().and_then(|t| t.strip_prefix(PRINCIPAL_TAG)) else {
            continue;
        };
        let parsed = Principal::parse(held).map_err(|e| {
            format!(
                "connection {cid} carries a malformed principal tag: {}",
                e.message
            )
        })?;
        if principal.replace(parsed).is_some() {
            return Err(format!("connection {cid} carries two principal tags"));
        }
    }
    let user = row.get("authorized_user").and_then(Value::as_str);
    // A connection the auth callout admitted lists no JWT tags (nats-server 2.15.1 keeps none
    // for it, verified here by listing one); its `authorized_user` is the admitted user JWT's
    // `name`, the principal's dash form as the reference writes it. Every user JWT of the data
    // account is the plane's own (its signing key, or its callout), so that name is as
    // trustworthy as a tag: without it, a signed-in holder would be invisible to liveness and
    // to verified eviction. The dot form is read too: the callout of builds before the dash
    // form named its users so, and their connections live on for up to a bearer's lifetime
    // after an upgrade, so reading only the new form would call a live holder gone.
    if principal.is_none() {
        principal = user.and_then(|u| {
            Principal::parse_name(u)
                .or_else(|_| Principal::parse(u))
                .ok()
        });
    }
    Ok(Listed {
        server: server.clone(),
        cid,
        principal,
        name: row
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        user: row
            .get("authorized_user")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

impl Listing {
    /// `live` when any listed connection is the holder's, `gone` only under a complete sweep
    /// that lists none, `unknown` when the sweep is incomplete (F52: absence of evidence is not
    /// evidence of absence).
    pub fn liveness(&self, holder: &Principal) -> Liveness {
        match self {
            Listing::Complete(conns) if conns.iter().any(|c| c.holds(holder)) => Liveness::Live,
            Listing::Complete(_) => Liveness::Gone,
            Listing::Incomplete(_) => Liveness::Unknown,
        }
    }

    /// A plane claim's scanner connection (reference §2.10): `live` when that exact connection
    /// or any connection of its user nkey is listed (an identity still connected anywhere blocks
    /// a takeover), `gone` only under a complete sweep — which covers a claimed server that
    /// restarted: its run id never answers again, and every connection it held is gone with
    /// it — and `unknown` otherwise.
    pub fn tuple_liveness(&self, tuple: &ConnTuple) -> TupleLiveness {
        match self {
            Listing::Complete(_) if self.of_tuple(tuple).next().is_some() => TupleLiveness::Live,
            Listing::Complete(_) => TupleLiveness::Gone,
            Listing::Incomplete(_) => TupleLiveness::Unknown,
        }
    }

    /// The listed connections [`Listing::tuple_liveness`] counts for `tuple`: that exact
    /// connection, and every connection of its user nkey.
    pub fn of_tuple<'a>(&'a self, tuple: &'a ConnTuple) -> impl Iterator<Item = &'a Listed> {
        let conns = match self {
            Listing::Complete(conns) => conns.as_slice(),
            Listing::Incomplete(_) => &[],
        };
        conns.iter().filter(move |c| {
            c.user.as_deref() == Some(tuple.user_nkey.as_str())
                || (c.server.id == tuple.server_id && c.cid == tuple.cid)
        })
    }

    /// The holder's listed connections (possibly a partial view when incomplete).
    pub fn held_by<'a>(&'a self, holder: &'a Principal) -> impl Iterator<Item = &'a Listed> {
        let conns = match self {
            Listing::Complete(conns) => conns.as_slice(),
            Listing::Incomplete(_) => &[],
        };
        conns.iter().filter(move |c| c.holds(holder))
    }
}

impl Listed {
    fn holds(&self, holder: &Principal) -> bool {
        self.principal.as_ref() == Some(holder)
    }
}

/// Reads a `KICK` reply: `Err` with the server's description when it refused.
pub fn kick_outcome(bytes: &[u8]) -> Result<(), String> {
    envelope(bytes).map(|_| ())
}

#[cfg(test)]
mod tests;

/// What one verified eviction found for one holder, in the reference's `EvictionResult` shape:
/// how many of its connections were kicked, how many the last sweep still listed, and whether
/// that sweep was complete. Only `verified_gone` counts, and it is true only under a complete
/// sweep that lists none of the holder's connections (the constructors keep that invariant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionEvidence {
    pub principal: Principal,
    pub kicked: u64,
    pub remaining: u64,
    pub verified_gone: bool,
    pub scan_complete: bool,
    pub note: Option<String>,
}

impl EvictionEvidence {
    /// A complete sweep lists none of the holder's connections.
    pub fn gone(principal: Principal, kicked: u64) -> EvictionEvidence {
        let note = (kicked == 0).then(|| "principal not currently live - nothing to evict".into());
        EvictionEvidence {
            principal,
            kicked,
            remaining: 0,
            verified_gone: true,
            scan_complete: true,
            note,
        }
    }

    /// A complete sweep still lists `remaining` connections of the holder after the kicks.
    pub fn remaining(principal: Principal, kicked: u64, remaining: u64) -> EvictionEvidence {
        EvictionEvidence {
            principal,
            kicked,
            remaining,
            verified_gone: remaining == 0,
            scan_complete: true,
            note: (remaining > 0)
                .then(|| format!("{remaining} connection(s) remain after the kicks")),
        }
    }

    /// No complete sweep could be had (`why`): nothing is known of the holder.
    pub fn unknown(principal: Principal, kicked: u64, why: &str) -> EvictionEvidence {
        EvictionEvidence {
            principal,
            kicked,
            remaining: 0,
            verified_gone: false,
            scan_complete: false,
            note: Some(format!("eviction is unknown: {why}")),
        }
    }

    /// `{principal, kicked, remaining, verifiedGone, scanComplete, note?}`.
    pub fn to_json(&self) -> String {
        let flag = |b: bool| if b { "true" } else { "false" };
        let mut w = ObjectWriter::new()
            .string("principal", &self.principal.to_string())
            .uint("kicked", self.kicked)
            .uint("remaining", self.remaining)
            .raw("verifiedGone", flag(self.verified_gone))
            .raw("scanComplete", flag(self.scan_complete));
        if let Some(note) = &self.note {
            w = w.string("note", note);
        }
        w.finish()
    }
}
