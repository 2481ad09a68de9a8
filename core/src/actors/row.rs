//! One actor-ledger row: its grammar, its file bytes, and the fail-closed reader.
//!
//! A row file is `<owner>.<actor>.json` in `actors/` (interactive) or `managed-actors/`
//! (managed); the space is the directory, never a field a partial write could flip. The bytes
//! are the reference's `JSON.stringify({ver: 1, ...row}, null, 2)` in the field order
//! `ver, owner, actor, scope, allowSubscribe, allowPublish, role?, parent?, label?, tokenHash?,
//! lifecycleUid?, grantedAt`.

use serde_json::{Map, Value};

use crate::ecma::push_json_string;
use crate::error::EpError;
use crate::names::{ActorToken, DerivedOwner, LifecycleUid, OwnerToken, Principal};
use crate::wire::unknown_member;

/// The only row version.
pub const LEDGER_VER: u64 = 1;

/// The two disjoint row spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RowSpace {
    /// `actors/`: operator-authored rows, exchanged with a human IdP proof.
    Interactive,
    /// `managed-actors/`: spawn/enrollment rows carrying the agent secret's hash.
    Managed,
}

impl RowSpace {
    /// The directory of the space under the ledger root.
    pub fn dir(self) -> &'static str {
        match self {
            RowSpace::Interactive => "actors",
            RowSpace::Managed => "managed-actors",
        }
    }

    /// The other space.
    pub fn other(self) -> RowSpace {
        match self {
            RowSpace::Interactive => RowSpace::Managed,
            RowSpace::Managed => RowSpace::Interactive,
        }
    }
}

/// The file name of a row: `<owner>.<actor>.json`.
pub fn file_name(principal: &Principal) -> String {
    format!("{}.json", principal.key())
}

/// The principal a row file is named for: the inverse of [`file_name`], refusing any other name.
pub fn principal_of_file(name: &str) -> Option<Principal> {
    name.strip_suffix(".json")
        .and_then(|key| Principal::parse(key).ok())
        .filter(|p| file_name(p) == name)
}

/// The SHA-256 hex digest of an agent's standing actor token: 64 lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenHash(String);

impl TokenHash {
    pub fn parse(s: &str) -> Result<Self, EpError> {
        if is_token_hash(s) {
            Ok(TokenHash(s.to_owned()))
        } else {
            Err(EpError::bad_request(
                "tokenHash must be a sha256 hex digest (64 lowercase hex characters)",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_token_hash(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a policy channel pattern: dot-separated NATS-safe tokens (`[A-Za-z0-9_-]`), `*`, or
/// a final `>`. The refusal is the sentence the reference prints.
pub fn check_channel(channel: &str) -> Result<(), String> {
    if channel.is_empty() || channel.split('.').any(str::is_empty) {
        return Err(format!(
            "invalid channel {channel:?}: empty segment (no leading/trailing/double dots)"
        ));
    }
    let count = channel.split('.').count();
    for (i, segment) in channel.split('.').enumerate() {
        match segment {
            ">" if i + 1 != count => {
                return Err(format!(
                    "invalid channel {channel:?}: '>' is only valid as the last segment"
                ))
            }
            ">" | "*" => {}
            s if s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') => {}
            s => {
                return Err(format!(
                    "invalid channel {channel:?}: segment {s:?} must be a NATS-safe token \
                     ([A-Za-z0-9_-]), '*', or '>'"
                ))
            }
        }
    }
    Ok(())
}

/// A capability token: `[A-Za-z0-9_:-]+`.
pub fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':' || b == b'-')
}

/// A role: `[A-Za-z0-9_-]+`.
pub fn is_role(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One granted `(owner, actor)` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorRow {
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub scope: Vec<String>,
    pub allow_subscribe: Vec<String>,
    pub allow_publish: Vec<String>,
    pub role: Option<String>,
    /// The spawning principal (audit link and the envelope chain).
    pub parent: Option<Principal>,
    pub label: Option<String>,
    /// Required in a managed row, refused in an interactive one.
    pub token_hash: Option<TokenHash>,
    pub lifecycle_uid: Option<LifecycleUid>,
    /// ISO-8601 UTC with milliseconds, as `Date.prototype.toISOString` writes it.
    pub granted_at: String,
}

impl ActorRow {
    pub fn principal(&self) -> Principal {
        Principal::new(self.owner.clone(), self.actor.clone())
    }

    /// The write-boundary checks of the reference's `assertRowInputs` plus the space's shape:
    /// a derived owner, a `u_` parent, valid channels, scope and role tokens; a managed row
    /// needs a token hash and a lifecycle uid, an interactive row must not carry a hash and
    /// (because the ledger mints nothing) must carry a uid too.
    pub fn check_for_write(&self, space: RowSpace) -> Result<(), String> {
        let who = match space {
            RowSpace::Interactive => "grantActor",
            RowSpace::Managed => "grantManagedActor",
        };
        if !DerivedOwner::is_derived(self.owner.as_str()) {
            return Err(format!(
                "{who}: owner {:?} is not a derived owner (u_ + 26 base32 chars)",
                self.owner.as_str()
            ));
        }
        if let Some(parent) = &self.parent {
            if !DerivedOwner::is_derived(parent.owner().as_str()) {
                return Err(format!(
                    "{who}: parent {:?} is not a principal (<u_owner>.<actor>)",
                    parent.key()
                ));
            }
        }
        for channel in self.allow_subscribe.iter().chain(&self.allow_publish) {
            check_channel(channel).map_err(|e| format!("{who}: {e}"))?;
        }
        if let Some(bad) = self.scope.iter().find(|s| !is_scope_token(s)) {
            return Err(format!(
                "{who}: scope entry {bad:?} must be a plain capability token ([A-Za-z0-9_:-])"
            ));
        }
        if let Some(role) = self.role.as_ref().filter(|r| !is_role(r)) {
            return Err(format!(
                "{who}: role {role:?} must be a plain token ([A-Za-z0-9_-])"
            ));
        }
        match (space, &self.token_hash) {
            (RowSpace::Interactive, Some(_)) => {
                return Err(format!(
                    "{who}: an interactive grant cannot carry an agent token hash - managed-agent \
                     rows are written by the spawn path only"
                ))
            }
            (RowSpace::Managed, None) => {
                return Err(format!("{who}: tokenHash must be a sha256 hex digest"))
            }
            _ => {}
        }
        if self.lifecycle_uid.is_none() {
            return Err(format!(
                "{who}: a grant must carry the lifecycle uid its writer chose; the ledger never \
                 mints one"
            ));
        }
        Ok(())
    }

    /// The file bytes: `JSON.stringify({ver: 1, ...row}, null, 2)`.
    pub fn to_file_bytes(&self) -> Vec<u8> {
        let mut out = String::from("{\n  \"ver\": 1");
        let mut field = |key: &str, value: &str| {
            out.push_str(",\n  ");
            push_json_string(&mut out, key);
            out.push_str(": ");
            out.push_str(value);
        };
        let string = |s: &str| {
            let mut v = String::new();
            push_json_string(&mut v, s);
            v
        };
        let list = |items: &[String]| {
            if items.is_empty() {
                return "[]".to_owned();
            }
            let mut v = String::from("[");
            for (i, item) in items.iter().enumerate() {
                v.push_str(if i == 0 { "\n    " } else { ",\n    " });
                push_json_string(&mut v, item);
            }
            v.push_str("\n  ]");
            v
        };
        field("owner", &string(self.owner.as_str()));
        field("actor", &string(self.actor.as_str()));
        field("scope", &list(&self.scope));
        field("allowSubscribe", &list(&self.allow_subscribe));
        field("allowPublish", &list(&self.allow_publish));
        if let Some(role) = &self.role {
            field("role", &string(role));
        }
        if let Some(parent) = &self.parent {
            field("parent", &string(&parent.key()));
        }
        if let Some(label) = &self.label {
            field("label", &string(label));
        }
        if let Some(hash) = &self.token_hash {
            field("tokenHash", &string(hash.as_str()));
        }
        if let Some(uid) = &self.lifecycle_uid {
            field("lifecycleUid", &string(uid.as_str()));
        }
        field("grantedAt", &string(&self.granted_at));
        out.push_str("\n}");
        out.into_bytes()
    }

    /// Reads row bytes of `space`, failing closed on anything but a well-formed row of that
    /// space. The refusal is a clause; the caller prefixes the file it read.
    pub fn from_file_bytes(bytes: &[u8], space: RowSpace) -> Result<ActorRow, String> {
        let map = open_row(bytes)?;
        let owner = req_str(&map, "owner")?;
        if !DerivedOwner::is_derived(owner) {
            return Err(format!(
                "actor grant owner {owner:?} is not a derived owner (u_ + 26 base32 chars)"
            ));
        }
        let owner = OwnerToken::parse(owner).map_err(|e| e.message)?;
        let actor = ActorToken::parse(req_str(&map, "actor")?).map_err(|e| e.message)?;
        let lists = (
            str_list(&map, "scope"),
            str_list(&map, "allowSubscribe"),
            str_list(&map, "allowPublish"),
        );
        let (Some(scope), Some(allow_subscribe), Some(allow_publish)) = lists else {
            return Err(
                "actor grant is missing explicit scope/allowSubscribe/allowPublish lists".into(),
            );
        };
        let token_hash = row_token_hash(&map, space)?;
        let parent = opt_str(&map, "parent")?
            .map(|p| Principal::parse(p).map_err(|e| e.message))
            .transpose()?;
        let lifecycle_uid = opt_str(&map, "lifecycleUid")?
            .map(|u| LifecycleUid::parse(u).map_err(|e| e.message))
            .transpose()?;
        let row = ActorRow {
            owner,
            actor,
            scope,
            allow_subscribe,
            allow_publish,
            role: opt_str(&map, "role")?.map(str::to_owned),
            parent,
            label: opt_str(&map, "label")?.map(str::to_owned),
            token_hash,
            lifecycle_uid,
            granted_at: req_str(&map, "grantedAt")?.to_owned(),
        };
        row.check_tokens()?;
        Ok(row)
    }

    /// The token grammars of a parsed row: every channel, every scope entry and the role.
    fn check_tokens(&self) -> Result<(), String> {
        for channel in self.allow_subscribe.iter().chain(&self.allow_publish) {
            check_channel(channel)?;
        }
        if let Some(bad) = self.scope.iter().find(|s| !is_scope_token(s)) {
            return Err(format!(
                "actor grant scope entry {bad:?} is not a capability token"
            ));
        }
        if let Some(role) = self.role.as_ref().filter(|r| !is_role(r)) {
            return Err(format!("actor grant role {role:?} is not a plain token"));
        }
        Ok(())
    }
}

/// Opens row bytes: a JSON object at [`LEDGER_VER`] with no member outside the row's closed
/// schema.
fn open_row(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    let map = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err("actor grant is not a JSON object".into()),
        Err(e) => {
            return Err(format!(
                "unreadable actor grant ({e}) - fix or remove the row; a broken row denies \
                 its actor"
            ))
        }
    };
    if map.get("ver").and_then(Value::as_u64) != Some(LEDGER_VER) {
        return Err(format!(
            "unknown actor-grant version {} (expected {LEDGER_VER}) - refusing to guess at \
             an authorization row",
            map.get("ver")
                .map_or("undefined".to_owned(), Value::to_string)
        ));
    }
    const FIELDS: [&str; 12] = [
        "ver",
        "owner",
        "actor",
        "scope",
        "allowSubscribe",
        "allowPublish",
        "role",
        "parent",
        "label",
        "tokenHash",
        "lifecycleUid",
        "grantedAt",
    ];
    if let Some(unknown) = unknown_member(&map, &FIELDS) {
        return Err(format!(
            "actor grant carries unknown field {unknown:?}; its schema is closed"
        ));
    }
    Ok(map)
}

/// The row's token hash as `space` requires it: an interactive grant carries none; a managed
/// one carries a well-formed hash.
fn row_token_hash(map: &Map<String, Value>, space: RowSpace) -> Result<Option<TokenHash>, String> {
    match (space, opt_str(map, "tokenHash")?) {
        (RowSpace::Interactive, Some(_)) => Err(
            "an interactive grant must not carry an agent token hash - it was written by the \
             wrong path; remove the row and re-grant (`cotal actor grant`)"
                .into(),
        ),
        (RowSpace::Managed, Some(h)) if is_token_hash(h) => Ok(Some(TokenHash(h.to_owned()))),
        (RowSpace::Managed, _) => Err(
            "managed-agent grant has a missing/corrupted secret hash - respawn the agent \
             (`cotal spawn`) to rewrite it"
                .into(),
        ),
        (RowSpace::Interactive, None) => Ok(None),
    }
}

fn req_str<'m>(map: &'m Map<String, Value>, key: &str) -> Result<&'m str, String> {
    map.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("actor grant field {key:?} is missing or not a string"))
}

fn opt_str<'m>(map: &'m Map<String, Value>, key: &str) -> Result<Option<&'m str>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("actor grant field {key:?} is not a string")),
    }
}

fn str_list(map: &Map<String, Value>, key: &str) -> Option<Vec<String>> {
    map.get(key)?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// `Date.prototype.toISOString` of a unix-millisecond instant: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn iso8601_millis(unix_ms: u64) -> String {
    let days = unix_ms / 86_400_000;
    let in_day = unix_ms % 86_400_000;
    // Civil-from-days (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// A unix-seconds instant as human output shows it: RFC 3339 in UTC to the second
/// (`2026-12-05T01:33:30Z`), the ISO 8601 profile every log reader and `date -d` parse.
pub fn rfc3339_secs(unix_secs: u64) -> String {
    let millis = iso8601_millis(unix_secs.saturating_mul(1000));
    // `YYYY-MM-DDTHH:MM:SS.mmmZ` with whole seconds: drop the `.000`.
    match millis.strip_suffix(".000Z") {
        Some(seconds) => format!("{seconds}Z"),
        None => millis,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_times_are_rfc_3339_utc_seconds() {
        assert_eq!(rfc3339_secs(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_secs(1_796_441_610), "2026-12-05T03:33:30Z");
        assert_eq!(rfc3339_secs(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn iso_matches_to_iso_string() {
        assert_eq!(iso8601_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso8601_millis(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(iso8601_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn channels_follow_the_policy_grammar() {
        assert!(check_channel("team.>").is_ok());
        assert!(check_channel("a.*.b").is_ok());
        assert!(check_channel("general..bad").is_err_and(|e| e.contains("empty segment")));
        assert!(check_channel("a.>.b").is_err());
        assert!(check_channel("foo/bar").is_err());
    }
}
