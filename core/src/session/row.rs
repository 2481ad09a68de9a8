//! The redeemed session row and the grant coordinates that select it.

use serde_json::{Map, Value};

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::names::{EndpointToken, InstanceId, LifecycleUid, Principal, SessionId};
use crate::wire;

/// The shortest session id a row may be keyed by: SPEC §13.6's unguessability floor (a minted
/// id is 43 base64url characters of 32 random bytes).
pub const SESSION_ID_MIN_CHARS: usize = 22;

const ROW_WHAT: &str = "session row";
const ROW_FIELDS: [&str; 10] = [
    "sessionId",
    "endpoint",
    "serving",
    "holder",
    "grantSig",
    "credCaller",
    "credServing",
    "revoked",
    "state",
    "exp",
];

/// Where a session row is in its life (SPEC §13.6): `issuing → active → terminal`, or
/// `issuing → terminal`. Only `active` confers anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    Issuing,
    Active,
    Closed,
    Expired,
    Superseded,
    Retired,
}

impl SessionState {
    fn parse(s: &str) -> Option<SessionState> {
        Some(match s {
            "issuing" => SessionState::Issuing,
            "active" => SessionState::Active,
            "closed" => SessionState::Closed,
            "expired" => SessionState::Expired,
            "superseded" => SessionState::Superseded,
            "retired" => SessionState::Retired,
            _ => return None,
        })
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            SessionState::Issuing => "issuing",
            SessionState::Active => "active",
            SessionState::Closed => "closed",
            SessionState::Expired => "expired",
            SessionState::Superseded => "superseded",
            SessionState::Retired => "retired",
        }
    }
}

/// `session.<sessionId>` as the manager's redemption writes it (plain JSON in the writer's
/// member order): the session, the serving instance and its epoch, the holder, the signature of
/// the grant it was redeemed with, both per-session credential ids and their revocation marks,
/// the state and the expiry (unix ms). The schema is closed and the row must name its own key:
/// a row that points elsewhere, or carries what no writer writes, is refused rather than read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub session_id: SessionId,
    pub endpoint: EndpointToken,
    pub serving_instance: InstanceId,
    pub serving_epoch: ProcessEpoch,
    pub holder: Principal,
    pub holder_uid: LifecycleUid,
    pub grant_sig: String,
    pub state: SessionState,
    pub exp_ms: u64,
}

fn object<'m>(map: &'m Map<String, Value>, field: &str) -> Result<&'m Map<String, Value>, EpError> {
    map.get(field).and_then(Value::as_object).ok_or_else(|| {
        EpError::internal(format!(
            "stored {ROW_WHAT} field {field:?} is missing or not an object"
        ))
    })
}

impl SessionRow {
    /// Parses the stored bytes of `session.<key_session>`.
    pub fn parse(bytes: &[u8], key_session: &SessionId) -> Result<SessionRow, EpError> {
        let map = wire::parse_object(bytes, ROW_WHAT)?;
        wire::reject_unknown(&map, &ROW_FIELDS, ROW_WHAT)?;
        let session_id = SessionId::parse(wire::str_field(&map, "sessionId", ROW_WHAT)?)
            .map_err(EpError::stored)?;
        if session_id != *key_session {
            return Err(EpError::internal(format!(
                "the {ROW_WHAT} at session.{key_session} names session {session_id}; a row \
                 that points at another key is never read"
            )));
        }
        let serving = object(&map, "serving")?;
        wire::reject_unknown(serving, &["instanceId", "epoch"], "session row serving")?;
        let holder = object(&map, "holder")?;
        wire::reject_unknown(holder, &["principal", "lifecycleUid"], "session row holder")?;
        let revoked = object(&map, "revoked")?;
        wire::reject_unknown(revoked, &["caller", "serving"], "session row revoked")?;
        if !revoked.values().all(Value::is_boolean) || revoked.len() != 2 {
            return Err(EpError::internal(
                "stored session row field \"revoked\" must hold the booleans caller and serving",
            ));
        }
        wire::str_field(&map, "credCaller", ROW_WHAT)?;
        wire::str_field(&map, "credServing", ROW_WHAT)?;
        let state = wire::str_field(&map, "state", ROW_WHAT)?;
        let state = SessionState::parse(state).ok_or_else(|| {
            EpError::internal(format!(
                "stored {ROW_WHAT} state {state:?} is not a session state"
            ))
        })?;
        Ok(SessionRow {
            session_id,
            endpoint: EndpointToken::parse(wire::str_field(&map, "endpoint", ROW_WHAT)?)
                .map_err(EpError::stored)?,
            serving_instance: InstanceId::parse(wire::str_field(
                serving,
                "instanceId",
                "session row serving",
            )?)
            .map_err(EpError::stored)?,
            serving_epoch: ProcessEpoch(wire::uint_field(serving, "epoch", "session row serving")?),
            holder: Principal::parse(wire::str_field(holder, "principal", "session row holder")?)
                .map_err(EpError::stored)?,
            holder_uid: LifecycleUid::parse(wire::str_field(
                holder,
                "lifecycleUid",
                "session row holder",
            )?)
            .map_err(EpError::stored)?,
            grant_sig: wire::str_field(&map, "grantSig", ROW_WHAT)?.to_owned(),
            state,
            exp_ms: wire::uint_field(&map, "exp", ROW_WHAT)?,
        })
    }
}

/// What selects one redeemed session: its endpoint, id and serving epoch, and — at the
/// exchange — the signature of the grant presented, which must be the one the session was
/// redeemed with (the grant's signature itself is the serving manager's, checked at redemption;
/// this plane only compares it byte for byte with the row's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCoordinates {
    pub endpoint: EndpointToken,
    pub session_id: SessionId,
    pub epoch: ProcessEpoch,
    /// Present at the exchange, absent at the callout (the bearer carries no grant).
    pub grant_sig: Option<String>,
}

impl SessionCoordinates {
    /// The coordinates of a signed session grant (the manager's `attach` answer, sent whole as
    /// `sessionGrant`): `sessionId`, `endpoint`, `serving.epoch` and `sig`. Nothing else of it
    /// is read: the row it selects is the authority. A grant without them is refused in one
    /// sentence.
    pub fn from_grant(grant: &Value) -> Result<SessionCoordinates, EpError> {
        let refuse = |why: &str| {
            EpError::permission_denied(format!(
                "sessionGrant is not a session grant: {why} - send the grant the manager's \
                 attach answered, unchanged"
            ))
        };
        let map = grant
            .as_object()
            .ok_or_else(|| refuse("it is not an object"))?;
        let text = |f: &str| {
            map.get(f)
                .and_then(Value::as_str)
                .ok_or_else(|| refuse(&format!("{f} is missing or not a string")))
        };
        let epoch = map
            .get("serving")
            .and_then(|s| s.get("epoch"))
            .and_then(wire::safe_uint)
            .ok_or_else(|| refuse("serving.epoch is missing or not an unsigned integer"))?;
        Ok(SessionCoordinates {
            endpoint: EndpointToken::parse(text("endpoint")?).map_err(|e| refuse(&e.message))?,
            session_id: session_id(text("sessionId")?).map_err(|e| refuse(&e.message))?,
            epoch: ProcessEpoch(epoch),
            grant_sig: Some(text("sig")?.to_owned()),
        })
    }
}

impl SessionCoordinates {
    /// The coordinates a `session-caller` bearer's `act.session` claim carries (no grant).
    pub fn from_claim(
        endpoint: &str,
        session: &str,
        epoch: u64,
    ) -> Result<SessionCoordinates, EpError> {
        let refuse = |e: EpError| {
            EpError::permission_denied(format!(
                "the bearer's session claim is refused: {}",
                e.message
            ))
        };
        Ok(SessionCoordinates {
            endpoint: EndpointToken::parse(endpoint).map_err(refuse)?,
            session_id: session_id(session).map_err(refuse)?,
            epoch: ProcessEpoch(epoch),
            grant_sig: None,
        })
    }
}

/// A session id that may key a row: the id grammar and the unguessability floor.
pub fn session_id(s: &str) -> Result<SessionId, EpError> {
    let id = SessionId::parse(s)?;
    if s.len() < SESSION_ID_MIN_CHARS {
        return Err(EpError::bad_request(format!(
            "sessionId is {} chars, under the {SESSION_ID_MIN_CHARS}-char unguessability floor \
             (SPEC §13.6)",
            s.len()
        )));
    }
    Ok(id)
}
