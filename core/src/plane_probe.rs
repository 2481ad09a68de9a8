//! The liveness question of the plane claim ([`crate::plane_claim`]): the connection
//! identities a claim records, and what the oracle answers about them. It sits below both the
//! claim and the machine protocol ([`crate::machine::Effect::ProbePlane`]), so the machine's
//! effect vocabulary does not depend on the claim that asks it.

use serde_json::{json, Value};

use crate::error::EpError;
use crate::wire::MAX_SAFE_INTEGER;

/// One connection as the servers identify it: the server's run id, its connection id there, and
/// the connection's user nkey.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConnTuple {
    pub server_id: String,
    pub cid: u64,
    pub user_nkey: String,
}

impl ConnTuple {
    /// A tuple as the row's closed schema allows it: a server id of 1..=128 characters, a cid in
    /// 1..=2^53-1, and a user public nkey (`U` + 55 base32 characters).
    pub fn new(server_id: &str, cid: u64, user_nkey: &str) -> Result<ConnTuple, EpError> {
        let nkey_ok = user_nkey.len() == 56
            && user_nkey.starts_with('U')
            && user_nkey
                .bytes()
                .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b));
        if server_id.is_empty()
            || server_id.len() > 128
            || !(1..=MAX_SAFE_INTEGER).contains(&cid)
            || !nkey_ok
        {
            return Err(EpError::bad_request(format!(
                "({server_id}, {cid}, {user_nkey}) is not a scanner connection identity"
            )));
        }
        Ok(ConnTuple {
            server_id: server_id.to_owned(),
            cid,
            user_nkey: user_nkey.to_owned(),
        })
    }

    pub(crate) fn parse(value: &Value) -> Option<ConnTuple> {
        let map = value.as_object()?;
        if map.len() != 3 {
            return None;
        }
        ConnTuple::new(
            map.get("serverId")?.as_str()?,
            map.get("cid")?.as_u64()?,
            map.get("userNkey")?.as_str()?,
        )
        .ok()
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({"serverId": self.server_id, "cid": self.cid, "userNkey": self.user_nkey})
    }
}

/// What the oracle says about one claimed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TupleLiveness {
    /// The connection, or another connection of its user nkey, is listed.
    Live,
    /// A complete listing of every server shows neither.
    Gone,
    /// The listing cannot decide.
    Unknown,
}

/// The two claimed scanner connections of a held row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaneQuery {
    pub ledger: ConnTuple,
    pub records: ConnTuple,
}

/// The oracle's answer to a [`PlaneQuery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaneVerdict {
    pub ledger: TupleLiveness,
    pub records: TupleLiveness,
    /// Why the listing could not decide, when it could not.
    pub note: Option<String>,
}

impl PlaneVerdict {
    /// The fail-closed answer of a world with no oracle.
    pub fn unknown(note: impl Into<String>) -> PlaneVerdict {
        PlaneVerdict {
            ledger: TupleLiveness::Unknown,
            records: TupleLiveness::Unknown,
            note: Some(note.into()),
        }
    }
}
