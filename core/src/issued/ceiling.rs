//! What an issuance is (SPEC §13.15): the issued reference and the explicit permission ceiling,
//! whether a ceiling permits one concrete subject, and the resolved evidence a consumer acts on.

use std::fmt;

use serde_json::{json, Map, Value};

use crate::jwt::{Permission, Permissions};
use crate::names::{ActorToken, LifecycleUid, OwnerToken, SpaceName};

/// A refusal met while reading a stored or supplied issued shape; the caller decides the code.
pub type ShapeError = String;

/// `closed(value, keys)`: a JSON object carrying no member outside `keys`.
pub(crate) fn closed<'v>(
    value: Option<&'v Value>,
    keys: &[&str],
    label: &str,
) -> Result<&'v Map<String, Value>, ShapeError> {
    let map = value
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{label} must be a plain record"))?;
    match crate::wire::unknown_member(map, keys) {
        Some(k) => Err(format!("{label} carries an unsupported field {k}")),
        None => Ok(map),
    }
}

pub(crate) fn text<'v>(
    map: &'v Map<String, Value>,
    key: &str,
    label: &str,
) -> Result<&'v str, ShapeError> {
    map.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{label} field {key} must be a string"))
}

/// An issued generation: 32 lowercase hex characters of issuer-chosen entropy, an identifier
/// (never a bearer secret) that rides the `ep.v1` rail beside the caller triple.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IssuedGeneration(String);

impl IssuedGeneration {
    pub fn parse(s: &str) -> Option<IssuedGeneration> {
        let ok = s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| IssuedGeneration(s.to_owned()))
    }

    /// A fresh generation from 16 bytes of the issuer's entropy (an interactive
    /// `manager-caller`'s first issuance, SPEC §13.15): their lowercase hex, valid by
    /// construction.
    pub fn from_entropy(entropy: [u8; 16]) -> IssuedGeneration {
        IssuedGeneration(entropy.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IssuedGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `{space, owner, actor, uid, generation}`: one issuance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IssuedRef {
    pub space: SpaceName,
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub uid: LifecycleUid,
    pub generation: IssuedGeneration,
}

impl IssuedRef {
    pub fn to_value(&self) -> Value {
        json!({
            "space": self.space.as_str(),
            "owner": self.owner.as_str(),
            "actor": self.actor.as_str(),
            "uid": self.uid.as_str(),
            "generation": self.generation.as_str(),
        })
    }

    pub fn from_value(value: Option<&Value>) -> Result<IssuedRef, ShapeError> {
        const LABEL: &str = "issued reference";
        let m = closed(
            value,
            &["space", "owner", "actor", "uid", "generation"],
            LABEL,
        )?;
        let bad = |what: &str| format!("{LABEL} {what} is malformed");
        Ok(IssuedRef {
            space: SpaceName::parse(text(m, "space", LABEL)?)
                .ok()
                .filter(|s| Some(s.as_str()) == m.get("space").and_then(Value::as_str))
                .ok_or_else(|| bad("space"))?,
            owner: OwnerToken::parse(text(m, "owner", LABEL)?).map_err(|_| bad("owner"))?,
            actor: ActorToken::parse(text(m, "actor", LABEL)?).map_err(|_| bad("actor"))?,
            uid: LifecycleUid::parse(text(m, "uid", LABEL)?).map_err(|_| bad("uid"))?,
            generation: IssuedGeneration::parse(text(m, "generation", LABEL)?)
                .ok_or_else(|| bad("generation"))?,
        })
    }
}

/// One direction's allow set, always spelled out: the native JWT fragment's omitted allow
/// means *unrestricted*, so a ceiling never leaves the mode implicit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SubjectAllow {
    All,
    None,
    /// A non-empty list of NATS subject patterns.
    Patterns(Vec<String>),
}

/// One direction of a ceiling: the allow set and the deny list (deny wins).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubjectPermission {
    pub allow: SubjectAllow,
    pub deny: Vec<String>,
}

/// The ceiling an issued credential carries, as the broker enforces it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubjectPermissions {
    pub publish: SubjectPermission,
    pub subscribe: SubjectPermission,
}

/// A subject (or, with `pattern`, a subscription pattern) as a ceiling entry: non-empty, no
/// whitespace or control characters, no empty token, wildcards only as whole tokens and `>`
/// only last.
fn valid_subject(s: &str, pattern: bool) -> bool {
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let tokens: Vec<&str> = s.split('.').collect();
    let last = tokens.len().saturating_sub(1);
    tokens.iter().enumerate().all(|(i, t)| {
        !t.is_empty()
            && (!t.contains('*') || (pattern && *t == "*"))
            && (!t.contains('>') || (pattern && *t == ">" && i == last))
    })
}

/// NATS subject matching of a concrete subject against a pattern (`*` one token, `>` the rest).
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

fn patterns(value: Option<&Value>, label: &str) -> Result<Vec<String>, ShapeError> {
    let items = value
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{label} must be an explicit array"))?;
    items
        .iter()
        .map(|v| match v.as_str() {
            Some(s) if valid_subject(s, true) => Ok(s.to_owned()),
            _ => Err(format!("{label} carries an invalid subject pattern")),
        })
        .collect()
}

impl SubjectPermission {
    /// Does this direction permit one concrete subject? Deny wins; `none` permits nothing.
    pub fn permits(&self, concrete: &str) -> bool {
        if !valid_subject(concrete, false) || self.deny.iter().any(|d| subject_matches(d, concrete))
        {
            return false;
        }
        match &self.allow {
            SubjectAllow::All => true,
            SubjectAllow::None => false,
            SubjectAllow::Patterns(list) => list.iter().any(|p| subject_matches(p, concrete)),
        }
    }

    pub fn to_value(&self) -> Value {
        let allow = match &self.allow {
            SubjectAllow::All => json!({"mode": "all"}),
            SubjectAllow::None => json!({"mode": "none"}),
            SubjectAllow::Patterns(list) => json!({"mode": "patterns", "patterns": list}),
        };
        json!({"allow": allow, "deny": self.deny})
    }

    pub fn from_value(value: Option<&Value>) -> Result<SubjectPermission, ShapeError> {
        let raw = closed(value, &["allow", "deny"], "subject permission")?;
        let allow = closed(raw.get("allow"), &["mode", "patterns"], "subject allow")?;
        let deny = patterns(raw.get("deny"), "deny")?;
        let allow = match (allow.get("mode").and_then(Value::as_str), allow.get("patterns")) {
            (Some("all"), None) => SubjectAllow::All,
            (Some("none"), None) => SubjectAllow::None,
            (Some("patterns"), listed) => {
                let listed = patterns(listed, "allow patterns")?;
                if listed.is_empty() {
                    return Err("patterns mode requires a nonempty list".into());
                }
                SubjectAllow::Patterns(listed)
            }
            _ => return Err("subject allow mode must be all, none or patterns (only patterns mode carries patterns)".into()),
        };
        Ok(SubjectPermission { allow, deny })
    }
}

impl SubjectPermissions {
    /// The ceiling a JWT's native `pub`/`sub` permissions grant: an empty allow list is
    /// *unrestricted* subject to the denies (`all`), never "nothing". A `resp` permission or a
    /// queue-qualified entry has semantics of its own, so it is refused rather than dropped.
    pub fn from_native(native: &Permissions) -> Result<SubjectPermissions, ShapeError> {
        if native.response.is_some() {
            return Err("a response permission is not a ceiling entry".into());
        }
        let direction = |p: &Permission| -> Result<SubjectPermission, ShapeError> {
            let checked = |list: &[String]| -> Result<Vec<String>, ShapeError> {
                list.iter()
                    .map(|s| match valid_subject(s, true) {
                        true => Ok(s.clone()),
                        false => Err(format!(
                            "subject {s:?} is not a ceiling entry (queue-qualified forms are not)"
                        )),
                    })
                    .collect()
            };
            let allow = checked(&p.allow)?;
            Ok(SubjectPermission {
                allow: if allow.is_empty() {
                    SubjectAllow::All
                } else {
                    SubjectAllow::Patterns(allow)
                },
                deny: checked(&p.deny)?,
            })
        };
        Ok(SubjectPermissions {
            publish: direction(&native.publish)?,
            subscribe: direction(&native.subscribe)?,
        })
    }

    pub fn to_value(&self) -> Value {
        json!({"publish": self.publish.to_value(), "subscribe": self.subscribe.to_value()})
    }

    pub fn from_value(value: Option<&Value>) -> Result<SubjectPermissions, ShapeError> {
        let raw = closed(value, &["publish", "subscribe"], "issued permissions")?;
        Ok(SubjectPermissions {
            publish: SubjectPermission::from_value(raw.get("publish"))?,
            subscribe: SubjectPermission::from_value(raw.get("subscribe"))?,
        })
    }
}

/// The caller's issued evidence as the adapter resolved it from the issued store (with
/// live-source checking): the reference it names, its permission ceiling, and the attempt row's
/// revision at the linearizing read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedEvidence {
    pub reference: IssuedRef,
    pub permissions: SubjectPermissions,
    pub resolved_revision: u64,
}

#[cfg(test)]
mod tests {
    use super::IssuedGeneration;

    #[test]
    fn a_generation_from_entropy_is_its_lowercase_hex_and_parses() {
        let mut entropy = [0_u8; 16];
        entropy[0] = 0xab;
        entropy[15] = 0x0f;
        let fresh = IssuedGeneration::from_entropy(entropy);
        assert_eq!(fresh.as_str(), "ab00000000000000000000000000000f");
        assert_eq!(IssuedGeneration::parse(fresh.as_str()), Some(fresh));
    }
}
