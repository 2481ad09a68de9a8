//! The repair cursor `eprepair.<endpoint>.<instanceId>`: durable progress of the verified
//! eviction one frozen registration owes, so a resumed or reconciling barrier never re-trusts a
//! holder it has not verified under *this* freeze.
//!
//! A cursor is bound to one freeze (`opId` + `freezeToken`, the frozen gate's revision) and one
//! holder set; any later freeze has another revision, so a stale cursor can never vouch for it.

use crate::error::EpError;
use crate::issuance::GateRef;
use crate::kv::{Revision, Store, WriteOutcome};
use crate::ledger;
use crate::machine::{Ctx, Halt};
use crate::names::{keys, OpId, Principal};
use crate::wire::{self, ObjectWriter};

/// One repair cursor. Fields are private: every value satisfies the closed schema.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepairCursor {
    op_id: OpId,
    freeze_token: u64,
    holders: Vec<Principal>,
    verified: Vec<Principal>,
}

const CURSOR_FIELDS: [&str; 5] = ["v", "opId", "freezeToken", "holders", "verified"];
const WHAT: &str = "repair cursor";

impl RepairCursor {
    /// A cursor for the freeze `(op_id, freeze_token)` owing eviction of `holders`, none verified
    /// yet. Holders are sorted and de-duplicated; each must have a real owner (it is evicted).
    pub fn new(op_id: OpId, freeze_token: u64, holders: Vec<Principal>) -> Result<Self, EpError> {
        if freeze_token == 0 || freeze_token > wire::MAX_SAFE_INTEGER {
            return Err(EpError::bad_request(
                "a repair cursor's freeze token is a gate revision: ≥ 1 and a safe integer",
            ));
        }
        let mut holders = holders;
        holders.sort_by_key(Principal::key);
        holders.dedup();
        if let Some(p) = holders.iter().find(|p| !p.owner().is_real_owner()) {
            return Err(EpError::bad_request(format!(
                "holder {p} has no real owner and cannot be evicted"
            )));
        }
        Ok(RepairCursor {
            op_id,
            freeze_token,
            holders,
            verified: Vec::new(),
        })
    }

    pub fn op_id(&self) -> &OpId {
        &self.op_id
    }
    pub fn freeze_token(&self) -> u64 {
        self.freeze_token
    }
    pub fn holders(&self) -> &[Principal] {
        &self.holders
    }
    pub fn verified(&self) -> &[Principal] {
        &self.verified
    }

    /// Holders still owed a verified eviction, in order.
    pub fn unverified(&self) -> impl Iterator<Item = &Principal> {
        self.holders.iter().filter(|h| !self.verified.contains(h))
    }

    /// The cursor with `newly` marked verified; refuses a principal outside the holder set.
    pub fn with_verified(&self, newly: &[Principal]) -> Result<Self, EpError> {
        if let Some(p) = newly.iter().find(|p| !self.holders.contains(p)) {
            return Err(EpError::internal(format!(
                "{p} is not a holder of this repair cursor"
            )));
        }
        let mut verified: Vec<Principal> = self.verified.iter().chain(newly).cloned().collect();
        verified.sort_by_key(Principal::key);
        verified.dedup();
        Ok(RepairCursor {
            verified,
            ..self.clone()
        })
    }

    /// True iff the cursor is bound to exactly this freeze and holder set.
    pub fn matches(&self, op_id: &OpId, freeze_token: u64, holders: &[Principal]) -> bool {
        let mut binding: Vec<Principal> = holders.to_vec();
        binding.sort_by_key(Principal::key);
        binding.dedup();
        self.op_id == *op_id && self.freeze_token == freeze_token && self.holders == binding
    }

    pub fn to_json(&self) -> String {
        let holders: Vec<String> = self.holders.iter().map(Principal::key).collect();
        let verified: Vec<String> = self.verified.iter().map(Principal::key).collect();
        ObjectWriter::new()
            .uint("v", 1)
            .string("opId", self.op_id.as_str())
            .uint("freezeToken", self.freeze_token)
            .strings("holders", holders.iter().map(String::as_str))
            .strings("verified", verified.iter().map(String::as_str))
            .finish()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_json().into_bytes()
    }

    /// Parses a stored cursor read from `key`: closed schema, `v` = 1, `freezeToken` ≥ 1,
    /// `holders` and `verified` sorted, unique, real-owner principals with `verified ⊆ holders`,
    /// and a key of exactly `eprepair.<endpoint>.<instanceId>`. Every violation is `internal`.
    pub fn parse(bytes: &[u8], key: &str) -> Result<Self, EpError> {
        keys::parse_eprepair(key).map_err(EpError::stored)?;
        let map = wire::parse_object(bytes, WHAT)?;
        wire::reject_unknown(&map, &CURSOR_FIELDS, WHAT)?;
        if wire::uint_field(&map, "v", WHAT)? != 1 {
            return Err(EpError::internal(
                "stored repair cursor has a version other than 1",
            ));
        }
        let op_id = OpId::parse(wire::str_field(&map, "opId", WHAT)?).map_err(EpError::stored)?;
        let freeze_token = wire::uint_field(&map, "freezeToken", WHAT)?;
        if freeze_token == 0 {
            return Err(EpError::internal("stored repair cursor has freeze token 0"));
        }
        let holders = principal_set(&map, "holders")?;
        let verified = principal_set(&map, "verified")?;
        if let Some(p) = verified.iter().find(|p| !holders.contains(p)) {
            return Err(EpError::internal(format!(
                "stored repair cursor verified {p}, which is not one of its holders"
            )));
        }
        Ok(RepairCursor {
            op_id,
            freeze_token,
            holders,
            verified,
        })
    }
}

fn principal_set(
    map: &serde_json::Map<String, serde_json::Value>,
    field: &str,
) -> Result<Vec<Principal>, EpError> {
    let raw = wire::str_array_field(map, field, WHAT)?;
    if raw.windows(2).any(|w| matches!(w, [a, b] if a >= b)) {
        return Err(EpError::internal(format!(
            "stored repair cursor {field} is not sorted and unique"
        )));
    }
    raw.into_iter()
        .map(|s| {
            let p = Principal::parse(s).map_err(EpError::stored)?;
            if p.owner().is_real_owner() {
                Ok(p)
            } else {
                Err(EpError::internal(format!(
                    "stored repair cursor {field} holds {p}, which has no real owner"
                )))
            }
        })
        .collect()
}

/// A stored cursor with the revision it was read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCursor {
    pub cursor: RepairCursor,
    pub revision: Revision,
}

/// Loads the cursor of `gate`: `None` when absent or behind a DEL/PURGE marker (a cleared cursor
/// is no progress at all, which is the safe reading: every holder is re-verified).
pub fn load_cursor(cx: &mut Ctx<'_>, gate: &GateRef) -> Result<Option<StoredCursor>, Halt> {
    let key = keys::eprepair(&gate.endpoint, &gate.instance);
    match ledger::read(cx, Store::Auth, &key)? {
        Some(entry) if entry.is_put() => Ok(Some(StoredCursor {
            cursor: RepairCursor::parse(&entry.value, &key)?,
            revision: entry.revision,
        })),
        _ => Ok(None),
    }
}

/// Saves `cursor`: created when `expected` is `None` (an identical stored cursor is accepted as
/// our own retry, any other is `conflict`), else written pinned to `expected` (a lost pin is
/// `conflict`: re-observe before skipping any holder). An ambiguous write reads back: our exact
/// bytes mean it committed. Returns the cursor's new revision.
pub fn save_cursor(
    cx: &mut Ctx<'_>,
    gate: &GateRef,
    cursor: &RepairCursor,
    expected: Option<Revision>,
) -> Result<Revision, Halt> {
    let key = keys::eprepair(&gate.endpoint, &gate.instance);
    let bytes = cursor.to_bytes();
    let Some(expected) = expected else {
        return ledger::create_byte_idempotent(cx, Store::Auth, &key, &bytes, "repair cursor");
    };
    // One send and one read-back, not a settle loop: the repair re-observes the cursor before it
    // skips any holder, so an unsettled save is refused rather than re-sent.
    match cx.update(Store::Auth, key.as_str(), bytes.clone(), expected)? {
        WriteOutcome::Written(revision) => Ok(revision),
        WriteOutcome::CasLost => Err(EpError::conflict(format!(
            "repair cursor {key} moved since it was read; re-observe it before skipping any holder"
        ))
        .into()),
        WriteOutcome::Ambiguous(why) => match ledger::read(cx, Store::Auth, &key)? {
            Some(entry) if entry.is_put() && entry.value == bytes && entry.revision != expected => {
                Ok(entry.revision)
            }
            _ => Err(EpError::unavailable(format!(
                "saving repair cursor {key} has an unknown outcome ({why}); it may have committed"
            ))
            .into()),
        },
        WriteOutcome::NotSent(why) => Err(EpError::unavailable(format!(
            "saving repair cursor {key} failed before it was sent: {why}"
        ))
        .into()),
    }
}

/// Deletes the cursor pinned to `expected`. A lost pin is `conflict`; an ambiguous delete reads
/// back (a marker past the pin means it committed).
pub fn delete_cursor(cx: &mut Ctx<'_>, gate: &GateRef, expected: Revision) -> Result<(), Halt> {
    let key = keys::eprepair(&gate.endpoint, &gate.instance);
    match cx.delete(Store::Auth, key.as_str(), expected)? {
        WriteOutcome::Written(_) => Ok(()),
        WriteOutcome::CasLost => Err(EpError::conflict(format!(
            "repair cursor {key} moved since it was read; it was not deleted"
        ))
        .into()),
        WriteOutcome::Ambiguous(why) => match ledger::read(cx, Store::Auth, &key)? {
            Some(entry) if !entry.is_put() && entry.revision != expected => Ok(()),
            _ => Err(EpError::unavailable(format!(
                "deleting repair cursor {key} has an unknown outcome ({why})"
            ))
            .into()),
        },
        WriteOutcome::NotSent(why) => Err(EpError::unavailable(format!(
            "deleting repair cursor {key} failed before it was sent: {why}"
        ))
        .into()),
    }
}
