//! The rows of the two issued-authority stores (SPEC §13.15), byte-compatible with the
//! reference's: RFC 8785 canonical JSON throughout.
//!
//! | store | key | row |
//! | --- | --- | --- |
//! | issued | `v1.<owner>.<actor>.<uid>.<generation>` | the evidence `{version:1, ref, sources, permissions, expiresAt?}`, immutable (read as the key's first message) |
//! | issued | `attempt.v1.<owner>.<actor>.<uid>.<generation>` | `{version:1, state, digest}`: `prepared → active → revoked`, or `prepared → aborted`, each step a CAS |
//! | issued | `bysource.v1.<sha256 hex of [1,space,bucket,key]>.<owner>.<actor>.<uid>.<generation>` | `{source, ref}`: the reverse index a source retirement walks |
//! | accepted | `accepted.v1.<token>` | `{version:1, ref}`: which generation the issuer bound to one connection, write-once |

use std::fmt;

use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::canon::{canonicalize, Digest};
use crate::error::EpError;
use crate::names::{
    accepted_bucket, auth_bucket, kv_stream, ActorToken, LifecycleUid, OwnerToken, SpaceName,
};

use super::ceiling::{closed, text, IssuedRef, ShapeError, SubjectPermissions};

/// The bucket token an actor-ledger source names: the auth service's ledger, not a KV bucket.
fn actor_ledger_bucket(space: &SpaceName) -> String {
    format!("cotal_actors_{}", space.token())
}

/// A bucket token of a source coordinate: `[A-Za-z0-9_-]{1,128}`.
fn valid_bucket(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A source key: dotted `[A-Za-z0-9_-]+` tokens, at most 1024 bytes.
fn valid_source_key(s: &str) -> bool {
    s.len() <= 1024
        && s.split('.').all(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

/// The immutable coordinate of a row an issuance depends on (`{space, bucket, key}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IssuedSource {
    space: SpaceName,
    bucket: String,
    key: String,
}

/// What a source coordinate names, for the liveness check only this plane can make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// One actor-ledger row: live while the ledger holds a row for that owner and actor at
    /// exactly that lifecycle uid (in either row space).
    ActorLedger {
        owner: OwnerToken,
        actor: ActorToken,
        uid: LifecycleUid,
    },
    /// A static incarnation's credentials `cred.<uid>` on the auth store: live while the
    /// lifecycle gate `gate.<uid>` exists and is not retired.
    LifecycleCredentials { uid: LifecycleUid },
    /// Any other coordinate: nothing here can attest it.
    Foreign,
}

impl IssuedSource {
    /// `{space, bucket: "cotal_actors_<space>", key: "actor.<owner>.<actor>.<uid>"}`.
    pub fn actor_ledger(
        space: &SpaceName,
        owner: &OwnerToken,
        actor: &ActorToken,
        uid: &LifecycleUid,
    ) -> IssuedSource {
        IssuedSource {
            space: space.clone(),
            bucket: actor_ledger_bucket(space),
            key: format!("actor.{owner}.{actor}.{uid}"),
        }
    }

    /// `{space, bucket: "cotal_auth_<space>", key: "cred.<uid>"}`.
    pub fn lifecycle_credentials(space: &SpaceName, uid: &LifecycleUid) -> IssuedSource {
        IssuedSource {
            space: space.clone(),
            bucket: auth_bucket(space),
            key: format!("cred.{uid}"),
        }
    }

    pub fn space(&self) -> &SpaceName {
        &self.space
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// What this coordinate names; [`SourceKind::Foreign`] for anything this plane did not
    /// mint a source for.
    pub fn kind(&self) -> SourceKind {
        let parts: Vec<&str> = self.key.split('.').collect();
        if self.bucket == actor_ledger_bucket(&self.space) {
            if let ["actor", owner, actor, uid] = parts.as_slice() {
                if let (Ok(owner), Ok(actor), Ok(uid)) = (
                    OwnerToken::parse(owner),
                    ActorToken::parse(actor),
                    LifecycleUid::parse(uid),
                ) {
                    return SourceKind::ActorLedger { owner, actor, uid };
                }
            }
        } else if self.bucket == auth_bucket(&self.space) {
            if let ["cred", uid] = parts.as_slice() {
                if let Ok(uid) = LifecycleUid::parse(uid) {
                    return SourceKind::LifecycleCredentials { uid };
                }
            }
        }
        SourceKind::Foreign
    }

    /// `bysource.v1.<sha256 hex of JSON [1, space, bucket, key]>.`: the digest keeps the
    /// coordinate one token whatever its key looks like.
    pub fn index_prefix(&self) -> String {
        let listed = json!([1, self.space.as_str(), self.bucket, self.key]).to_string();
        format!("bysource.v1.{}.", hex(&Sha256::digest(listed.as_bytes())))
    }

    pub fn to_value(&self) -> Value {
        json!({"space": self.space.as_str(), "bucket": self.bucket, "key": self.key})
    }

    pub fn from_value(value: Option<&Value>) -> Result<IssuedSource, ShapeError> {
        const LABEL: &str = "issued source";
        let m = closed(value, &["space", "bucket", "key"], LABEL)?;
        let space = text(m, "space", LABEL)?;
        let bucket = text(m, "bucket", LABEL)?;
        let key = text(m, "key", LABEL)?;
        let space = SpaceName::parse(space)
            .ok()
            .filter(|s| s.as_str() == space)
            .ok_or("issued source space is malformed")?;
        if !valid_bucket(bucket) || !valid_source_key(key) {
            return Err("invalid issued source coordinate".into());
        }
        Ok(IssuedSource {
            space,
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }
}

impl fmt::Display for IssuedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.bucket, self.key)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The evidence key `v1.<owner>.<actor>.<uid>.<generation>`.
pub fn evidence_key(r: &IssuedRef) -> String {
    format!("v1.{}", caller_path(r))
}

/// The attempt-row key `attempt.v1.<owner>.<actor>.<uid>.<generation>`.
pub fn attempt_key(r: &IssuedRef) -> String {
    format!("attempt.{}", evidence_key(r))
}

/// The reverse-index key of `r` under `source`. The generation suffix keeps two issuances on
/// one source apart.
pub fn source_index_key(source: &IssuedSource, r: &IssuedRef) -> String {
    format!("{}{}", source.index_prefix(), caller_path(r))
}

fn caller_path(r: &IssuedRef) -> String {
    format!("{}.{}.{}.{}", r.owner, r.actor, r.uid, r.generation)
}

/// Canonical bytes of a row value.
fn canonical(value: &Value) -> Result<Vec<u8>, EpError> {
    Ok(canonicalize(value)?.into_bytes())
}

/// What the issuer persists, create-only, before any material is released (F78).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    reference: IssuedRef,
    sources: Vec<IssuedSource>,
    permissions: SubjectPermissions,
    /// Unix seconds; required when no source can end the issuance's liveness.
    expires_at: Option<u64>,
}

impl Evidence {
    /// Refuses a source in another space, a repeated source, a zero expiry, and an issuance
    /// bound to no source without an expiry (nothing else could ever end it).
    pub fn new(
        reference: IssuedRef,
        sources: Vec<IssuedSource>,
        permissions: SubjectPermissions,
        expires_at: Option<u64>,
    ) -> Result<Evidence, ShapeError> {
        if sources.iter().any(|s| s.space != reference.space) {
            return Err("an issued source names a foreign space".into());
        }
        let mut prefixes: Vec<String> = sources.iter().map(IssuedSource::index_prefix).collect();
        prefixes.sort();
        prefixes.dedup();
        if prefixes.len() != sources.len() {
            return Err("duplicate issued source".into());
        }
        if expires_at == Some(0) {
            return Err(
                "issued evidence expiresAt must be a positive integer (unix seconds)".into(),
            );
        }
        if sources.is_empty() && expires_at.is_none() {
            return Err(
                "an issuance bound to no source must carry expiresAt; nothing else can end its \
                 liveness"
                    .into(),
            );
        }
        Ok(Evidence {
            reference,
            sources,
            permissions,
            expires_at,
        })
    }

    pub fn reference(&self) -> &IssuedRef {
        &self.reference
    }

    pub fn sources(&self) -> &[IssuedSource] {
        &self.sources
    }

    pub fn permissions(&self) -> &SubjectPermissions {
        &self.permissions
    }

    pub fn expires_at(&self) -> Option<u64> {
        self.expires_at
    }

    pub fn to_value(&self) -> Value {
        let mut v = json!({
            "version": 1,
            "ref": self.reference.to_value(),
            "sources": self.sources.iter().map(IssuedSource::to_value).collect::<Vec<_>>(),
            "permissions": self.permissions.to_value(),
        });
        if let (Some(at), Some(m)) = (self.expires_at, v.as_object_mut()) {
            m.insert("expiresAt".into(), json!(at));
        }
        v
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>, EpError> {
        canonical(&self.to_value())
    }

    /// `sha256:<hex>` of the canonical bytes: what the attempt row pins.
    pub fn digest(&self) -> Result<String, EpError> {
        Ok(Digest::of(&self.to_bytes()?).to_string())
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Evidence, ShapeError> {
        const LABEL: &str = "issued evidence";
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("{LABEL} is not JSON: {e}"))?;
        let m = closed(
            Some(&value),
            &["version", "ref", "sources", "permissions", "expiresAt"],
            LABEL,
        )?;
        if m.get("version") != Some(&json!(1)) {
            return Err("unsupported issued evidence".into());
        }
        let sources = m
            .get("sources")
            .and_then(Value::as_array)
            .ok_or("unsupported issued evidence")?
            .iter()
            .map(|s| IssuedSource::from_value(Some(s)))
            .collect::<Result<Vec<_>, _>>()?;
        let expires_at = match m.get("expiresAt") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or("issued evidence expiresAt must be a positive integer (unix seconds)")?,
            ),
        };
        Evidence::new(
            IssuedRef::from_value(m.get("ref"))?,
            sources,
            SubjectPermissions::from_value(m.get("permissions"))?,
            expires_at,
        )
    }
}

/// Where an issuance's attempt row stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptState {
    /// Staged; nothing was released on it yet.
    Prepared,
    /// Released: the only state that authorizes.
    Active,
    /// Retired before release.
    Aborted,
    /// Retired after release.
    Revoked,
}

impl AttemptState {
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptState::Prepared => "prepared",
            AttemptState::Active => "active",
            AttemptState::Aborted => "aborted",
            AttemptState::Revoked => "revoked",
        }
    }

    fn parse(s: &str) -> Option<AttemptState> {
        [
            AttemptState::Prepared,
            AttemptState::Active,
            AttemptState::Aborted,
            AttemptState::Revoked,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }

    /// `aborted` and `revoked` never move again.
    pub const fn is_terminal(self) -> bool {
        matches!(self, AttemptState::Aborted | AttemptState::Revoked)
    }

    /// The terminal state retiring an issuance in this state reaches.
    pub const fn retired(self) -> AttemptState {
        match self {
            AttemptState::Prepared | AttemptState::Aborted => AttemptState::Aborted,
            AttemptState::Active | AttemptState::Revoked => AttemptState::Revoked,
        }
    }
}

impl fmt::Display for AttemptState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{version:1, state, digest}`: the one mutable row of an issuance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    pub state: AttemptState,
    /// The evidence digest the row pins (`sha256:<hex>`).
    pub digest: String,
}

impl AttemptRow {
    pub fn to_bytes(&self) -> Result<Vec<u8>, EpError> {
        canonical(&json!({"version": 1, "state": self.state.as_str(), "digest": self.digest}))
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<AttemptRow, ShapeError> {
        const LABEL: &str = "issued attempt";
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("{LABEL} is not JSON: {e}"))?;
        let m = closed(Some(&value), &["version", "state", "digest"], LABEL)?;
        let state = AttemptState::parse(text(m, "state", LABEL)?);
        match (m.get("version"), state) {
            (Some(v), Some(state)) if *v == json!(1) => Ok(AttemptRow {
                state,
                digest: text(m, "digest", LABEL)?.to_owned(),
            }),
            _ => Err("issued attempt is malformed".into()),
        }
    }
}

/// The reverse-index row `{source, ref}`.
pub fn source_index_row(source: &IssuedSource, r: &IssuedRef) -> Result<Vec<u8>, EpError> {
    canonical(&json!({"source": source.to_value(), "ref": r.to_value()}))
}

/// Reads a reverse-index row back.
pub fn parse_source_index_row(bytes: &[u8]) -> Result<(IssuedSource, IssuedRef), ShapeError> {
    const LABEL: &str = "issued source index";
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("{LABEL} is not JSON: {e}"))?;
    let m = closed(Some(&value), &["source", "ref"], LABEL)?;
    Ok((
        IssuedSource::from_value(m.get("source"))?,
        IssuedRef::from_value(m.get("ref"))?,
    ))
}

/// The token a connection's accepted row is keyed by: 32 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AcceptedToken(String);

impl AcceptedToken {
    pub fn parse(s: &str) -> Option<AcceptedToken> {
        let ok = s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| AcceptedToken(s.to_owned()))
    }

    /// The first 32 hex characters of `sha256("cotal.accepted.v1\0" + nonce)`: the client chose
    /// the nonce and derives the token itself, so no token ever comes from a request body, and a
    /// reconnect under the same nonce finds the same row.
    pub fn for_connection(nonce: &str) -> AcceptedToken {
        let mut h = Sha256::new();
        h.update(b"cotal.accepted.v1\0");
        h.update(nonce.as_bytes());
        let mut full = hex(&h.finalize());
        full.truncate(32);
        AcceptedToken(full)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `accepted.v1.<token>`.
    pub fn key(&self) -> String {
        format!("accepted.v1.{}", self.0)
    }

    /// The one read an issued ceiling carries on the accepted store: a per-key `DIRECT.GET` of
    /// exactly this row.
    pub fn read_grant(&self, space: &SpaceName) -> String {
        let bucket = accepted_bucket(space);
        format!(
            "$JS.API.DIRECT.GET.{}.$KV.{bucket}.{}",
            kv_stream(&bucket),
            self.key()
        )
    }
}

impl fmt::Display for AcceptedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The accepted row `{version:1, ref}`.
pub fn accepted_row(r: &IssuedRef) -> Result<Vec<u8>, EpError> {
    canonical(&json!({"version": 1, "ref": r.to_value()}))
}

/// Reads an accepted row back.
pub fn parse_accepted_row(bytes: &[u8]) -> Result<IssuedRef, ShapeError> {
    const LABEL: &str = "accepted row";
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("{LABEL} is not JSON: {e}"))?;
    let m = closed(Some(&value), &["version", "ref"], LABEL)?;
    if m.get("version") != Some(&json!(1)) {
        return Err("unsupported accepted-row version".into());
    }
    IssuedRef::from_value(m.get("ref"))
}
