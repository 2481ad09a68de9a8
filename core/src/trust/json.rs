//! Strict readers and the one writer of the trust-root files.
//!
//! Every file is a closed, versioned JSON object; a refusal names the file (its label, the
//! path the store shows) and the member, and never echoes a member's value: seeds and the
//! owner secret live in these files.

use nkeys::{KeyPair, KeyPairType, XKey};
use serde_json::{Map, Value};

use super::{CurveKey, NkeyPair};
use crate::error::EpError;
use crate::names::SpaceName;

/// The only version of every trust-root file this build reads and writes.
pub const FILE_VERSION: u64 = 1;

/// A file's bytes: pretty JSON (members in written order) and a trailing newline, so the same
/// material always gives the same bytes and a person can read the public parts.
pub(super) fn file_bytes(value: &Value) -> Vec<u8> {
    let mut text = format!("{value:#}");
    text.push('\n');
    text.into_bytes()
}

/// Parses a file's bytes as one JSON object.
pub(super) fn root_map(bytes: &[u8], label: &str) -> Result<Map<String, Value>, EpError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(EpError::internal(format!(
            "{label} is not a JSON object; the trust root is corrupt"
        ))),
        // serde's message names a line and column, never the bytes there.
        Err(e) => Err(EpError::internal(format!(
            "{label} is not valid JSON ({e}); the trust root is corrupt"
        ))),
    }
}

/// One object of a file, with the file label and the member path for refusals.
#[derive(Debug)]
pub(super) struct Obj<'a> {
    map: &'a Map<String, Value>,
    label: &'a str,
    path: String,
}

impl<'a> Obj<'a> {
    pub(super) fn top(map: &'a Map<String, Value>, label: &'a str) -> Self {
        Obj {
            map,
            label,
            path: String::new(),
        }
    }

    pub(super) fn corrupt(&self, why: &str) -> EpError {
        EpError::internal(format!("{} {why}", self.label))
    }

    fn member(&self, key: &str) -> String {
        format!("{}{key}", self.path)
    }

    /// Refuses any member outside `allowed`.
    /// The top object of a trust file, checked in the order every reader keeps: closed to
    /// `members` (which name `ver`), at this build's version, then — for a file that states
    /// its space — of `space`.
    pub(super) fn versioned(
        map: &'a Map<String, Value>,
        label: &'a str,
        members: &[&str],
        space: Option<&SpaceName>,
    ) -> Result<Self, EpError> {
        let root = Obj::top(map, label);
        root.closed(members)?;
        root.version()?;
        if let Some(space) = space {
            root.space(space)?;
        }
        Ok(root)
    }

    pub(super) fn closed(&self, allowed: &[&str]) -> Result<(), EpError> {
        match crate::wire::unknown_member(self.map, allowed) {
            Some(m) => Err(self.corrupt(&format!(
                "carries unknown member {}; its schema is closed",
                self.member(m)
            ))),
            None => Ok(()),
        }
    }

    /// The `ver` member, which must be [`FILE_VERSION`].
    pub(super) fn version(&self) -> Result<(), EpError> {
        match self.map.get("ver").and_then(Value::as_u64) {
            Some(FILE_VERSION) => Ok(()),
            Some(v) => Err(self.corrupt(&format!(
                "has unknown version {v}; this build reads version {FILE_VERSION}"
            ))),
            None => Err(self.corrupt("has no version number (ver)")),
        }
    }

    pub(super) fn str(&self, key: &str) -> Result<&'a str, EpError> {
        self.map.get(key).and_then(Value::as_str).ok_or_else(|| {
            self.corrupt(&format!(
                "member {} is missing or not a string",
                self.member(key)
            ))
        })
    }

    pub(super) fn obj(&self, key: &str) -> Result<Obj<'a>, EpError> {
        let map = self
            .map
            .get(key)
            .and_then(Value::as_object)
            .ok_or_else(|| {
                self.corrupt(&format!(
                    "member {} is missing or not an object",
                    self.member(key)
                ))
            })?;
        Ok(Obj {
            map,
            label: self.label,
            path: format!("{}.", self.member(key)),
        })
    }

    pub(super) fn arr(&self, key: &str) -> Result<&'a [Value], EpError> {
        self.map
            .get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .ok_or_else(|| {
                self.corrupt(&format!(
                    "member {} is missing or not an array",
                    self.member(key)
                ))
            })
    }

    /// An object element of an array member, for elements' own refusals.
    pub(super) fn element(
        &self,
        key: &str,
        index: usize,
        value: &'a Value,
    ) -> Result<Obj<'a>, EpError> {
        let path = format!("{}[{index}]", self.member(key));
        let map = value
            .as_object()
            .ok_or_else(|| self.corrupt(&format!("member {path} is not an object")))?;
        Ok(Obj {
            map,
            label: self.label,
            path: format!("{path}."),
        })
    }

    /// The `space` member, which must name `space`.
    fn space(&self, space: &SpaceName) -> Result<(), EpError> {
        let found = self.str("space")?;
        if found == space.as_str() {
            Ok(())
        } else {
            Err(foreign_space(self.label, found, space))
        }
    }

    /// An nkey pair from the seed member `seed`, of `kind`, and — when `public` is given —
    /// the public key stated there.
    pub(super) fn nkey(
        &self,
        seed: &str,
        public: Option<&str>,
        kind: KeyPairType,
    ) -> Result<NkeyPair, EpError> {
        let text = self.str(seed)?;
        let key = KeyPair::from_seed(text)
            .ok()
            .filter(|k| k.key_pair_type() == kind)
            .ok_or_else(|| {
                self.corrupt(&format!(
                    "member {} is not a {kind:?} nkey seed",
                    self.member(seed)
                ))
            })?;
        let pair = NkeyPair::new(key, text.to_owned());
        if let Some(public) = public {
            self.belongs(seed, public, pair.public_key())?;
        }
        Ok(pair)
    }

    /// The curve key from the seed member `seed`, matching the public key in `public`.
    pub(super) fn xkey(&self, seed: &str, public: &str) -> Result<CurveKey, EpError> {
        let text = self.str(seed)?;
        let key = XKey::from_seed(text).map_err(|_| {
            self.corrupt(&format!(
                "member {} is not a curve (xkey) seed",
                self.member(seed)
            ))
        })?;
        let pair = CurveKey::new(key, text.to_owned());
        self.belongs(seed, public, pair.public_key())?;
        Ok(pair)
    }

    /// Refuses a file whose seed member `seed` (deriving `derived`) does not belong to the
    /// public key its member `public` states: one of the two was edited or swapped.
    fn belongs(&self, seed: &str, public: &str, derived: &str) -> Result<(), EpError> {
        let stated = self.str(public)?;
        if stated != derived {
            return Err(self.corrupt(&format!(
                "member {} does not belong to {} {stated}",
                self.member(seed),
                self.member(public)
            )));
        }
        Ok(())
    }
}

/// "<file> belongs to a different space (<found>), not <space>".
pub(super) fn foreign_space(label: &str, found: &str, space: &SpaceName) -> EpError {
    EpError::internal(format!(
        "{label} belongs to a different space ({found}), not {space}; the trust root was copied \
         from elsewhere"
    ))
}
