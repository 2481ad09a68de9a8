//! The Cotal user bearer: the plane's own EdDSA token that an agent presents at connect
//! (reference §10.1 claims, §10.2 issuer). Issue and verify are inverses: every bearer
//! [`BearerIssuer::issue`] mints passes [`BearerIssuer::verify`] until it expires, and a claim
//! shape the verifier would refuse is refused at mint.
//!
//! Wire shape: header `{"alg":"EdDSA","kid":…}`; claims `scope`, `ver`, `act`, `sub`, `iss`,
//! `aud`, `iat`, `nbf`, `exp` in that order, `act` members in the order of [`BearerAct`].

use std::fmt;

use cotal_core::jwt::UnixSeconds;
use cotal_core::names::{
    ActorToken, CredentialId, DerivedOwner, InstanceId, LifecycleUid, OwnerToken, Principal,
    SpaceName,
};
use cotal_core::wire::{unknown_member, MAX_SAFE_INTEGER};
use cotal_core::EpError;
use jsonwebtoken::{Algorithm, Header};
use serde_json::{json, Map, Value};

use super::jose::{self, quote, MAX_TOKEN_BYTES};
use super::keys::KeyRing;

/// The token-shape version; any other `ver` is refused (downgrade defence).
pub const USER_TOKEN_VER: u64 = 1;

/// The longest a bearer lives, in seconds: short enough that re-minting is the working
/// revocation path.
pub const MAX_BEARER_TTL_SECS: u64 = 900;

/// The lifetime cap of a `transfer-writer` bearer: that one-shot credential's five minutes.
pub const TRANSFER_WRITER_TTL_SECS: u64 = 300;

/// Clock skew allowed when verifying a bearer. Issuer and verifier are the same plane (or
/// share its clock discipline), so the reference's 5 s suffices.
pub const BEARER_CLOCK_LEEWAY_SECS: u64 = 5;

/// What refusals call the token.
const WHAT: &str = "bearer";

/// The elevated per-connection profiles a bearer may carry (`act.view`). A closed set on both
/// mint and verify: an unknown view fails closed and never falls back to a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BearerView {
    Admin,
    Purger,
    ChannelPurger,
    ChannelWriter,
    Deployer,
    ManagerService,
    ManagerCaller,
    SessionCaller,
    TransferWriter,
}

impl BearerView {
    pub const ALL: [BearerView; 9] = [
        BearerView::Admin,
        BearerView::Purger,
        BearerView::ChannelPurger,
        BearerView::ChannelWriter,
        BearerView::Deployer,
        BearerView::ManagerService,
        BearerView::ManagerCaller,
        BearerView::SessionCaller,
        BearerView::TransferWriter,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            BearerView::Admin => "admin",
            BearerView::Purger => "purger",
            BearerView::ChannelPurger => "channel-purger",
            BearerView::ChannelWriter => "channel-writer",
            BearerView::Deployer => "deployer",
            BearerView::ManagerService => "manager-service",
            BearerView::ManagerCaller => "manager-caller",
            BearerView::SessionCaller => "session-caller",
            BearerView::TransferWriter => "transfer-writer",
        }
    }

    pub fn parse(s: &str) -> Option<BearerView> {
        BearerView::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The ledger scope a signed-in human must hold to exchange for this view (reference
    /// §10.1 `VIEW_REQUIRED_SCOPE`); `None` for the views any granted actor may ask for.
    pub const fn required_scope(self) -> Option<&'static str> {
        match self {
            BearerView::Admin
            | BearerView::Purger
            | BearerView::ChannelPurger
            | BearerView::ChannelWriter
            | BearerView::TransferWriter => Some("admin"),
            BearerView::Deployer => Some("spawn"),
            BearerView::ManagerService => Some("supervise"),
            BearerView::ManagerCaller | BearerView::SessionCaller => None,
        }
    }

    /// Whether the public face's exchange serves this view (`PUBLIC_EXCHANGE_VIEWS`); the
    /// others are loopback operator surfaces.
    pub const fn on_public_exchange(self) -> bool {
        matches!(
            self,
            BearerView::ChannelWriter
                | BearerView::ChannelPurger
                | BearerView::ManagerCaller
                | BearerView::SessionCaller
                | BearerView::TransferWriter
        )
    }

    /// The longest a bearer with this view (or none) may live.
    pub const fn ttl_cap_secs(view: Option<BearerView>) -> u64 {
        match view {
            Some(BearerView::TransferWriter) => TRANSFER_WRITER_TTL_SECS,
            _ => MAX_BEARER_TTL_SECS,
        }
    }
}

impl fmt::Display for BearerView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The one SPEC §13.6 session a `session-caller` bearer may open (`act.session`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionClaim {
    /// `^[A-Za-z0-9_-]{1,64}$`.
    pub endpoint: String,
    /// `^[A-Za-z0-9_-]{22,128}$`.
    pub session_id: String,
    pub epoch: u64,
    /// The grant's expiry, unix seconds.
    pub exp: u64,
}

/// The one object a `transfer-writer` bearer may upload (`act.transferWriter`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferWriterClaim {
    pub instance_id: InstanceId,
    /// The transcript's SHA-256, 64 lowercase hex digits.
    pub hex: String,
}

/// The server-authored actor claim (`act`). Fields in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BearerAct {
    /// The derived owner (`u_` + 26 base32 chars); equals `sub`.
    pub owner: OwnerToken,
    pub actor: ActorToken,
    pub scope: Option<Vec<String>>,
    /// At most one spawner audit link, `<derived owner>.<actor>`.
    pub parent: Option<Principal>,
    pub lifecycle_uid: Option<LifecycleUid>,
    pub credential_id: Option<CredentialId>,
    pub view: Option<BearerView>,
    /// Present exactly with view `manager-caller`.
    pub manager_instance_id: Option<InstanceId>,
    /// Present exactly with view `session-caller`.
    pub session: Option<SessionClaim>,
    /// Present exactly with view `transfer-writer`.
    pub transfer_writer: Option<TransferWriterClaim>,
}

impl BearerAct {
    /// The plain agent claim: no scope, parent, lifecycle, credential or view.
    pub fn new(owner: OwnerToken, actor: ActorToken) -> Self {
        BearerAct {
            owner,
            actor,
            scope: None,
            parent: None,
            lifecycle_uid: None,
            credential_id: None,
            view: None,
            manager_instance_id: None,
            session: None,
            transfer_writer: None,
        }
    }

    /// The rules a claim must keep beyond its field types; `Err` says which one it broke.
    fn check(&self) -> Result<(), String> {
        if !DerivedOwner::is_derived(self.owner.as_str()) {
            return Err(format!(
                "act.owner {} is not a derived owner (u_ + 26 base32 chars [a-z2-7])",
                quote(self.owner.as_str())
            ));
        }
        if let Some(parent) = &self.parent {
            if !DerivedOwner::is_derived(parent.owner().as_str()) {
                return Err(format!(
                    "act.parent {} does not name a derived owner",
                    quote(&parent.key())
                ));
            }
        }
        let view = self.view;
        let pairs = [
            (
                BearerView::ManagerCaller,
                self.manager_instance_id.is_some(),
                "act.managerInstanceId",
            ),
            (
                BearerView::SessionCaller,
                self.session.is_some(),
                "act.session",
            ),
            (
                BearerView::TransferWriter,
                self.transfer_writer.is_some(),
                "act.transferWriter",
            ),
        ];
        for (needs, present, field) in pairs {
            if (view == Some(needs)) != present {
                return Err(format!(
                    "view \"{needs}\" and {field} come together or not at all"
                ));
            }
        }
        if let Some(session) = &self.session {
            let token = |s: &str, len: std::ops::RangeInclusive<usize>| {
                len.contains(&s.len())
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            };
            if !token(&session.endpoint, 1..=64) {
                return Err("act.session.endpoint is not an endpoint token".to_owned());
            }
            if !token(&session.session_id, 22..=128) {
                return Err("act.session.sessionId is not a session id".to_owned());
            }
            if session.epoch > MAX_SAFE_INTEGER || session.exp > MAX_SAFE_INTEGER {
                return Err("act.session epoch and exp must be safe integers".to_owned());
            }
        }
        if let Some(tw) = &self.transfer_writer {
            let hex = tw.hex.len() == 64
                && tw
                    .hex
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
            if !hex {
                return Err("act.transferWriter.hex is not a sha256 hex digest".to_owned());
            }
        }
        Ok(())
    }

    fn to_json(&self) -> Value {
        let mut act = Map::new();
        act.insert("owner".into(), json!(self.owner.as_str()));
        act.insert("actor".into(), json!(self.actor.as_str()));
        if let Some(scope) = &self.scope {
            act.insert("scope".into(), json!(scope));
        }
        if let Some(parent) = &self.parent {
            act.insert("parent".into(), json!(parent.key()));
        }
        if let Some(uid) = &self.lifecycle_uid {
            act.insert("lifecycleUid".into(), json!(uid.as_str()));
        }
        if let Some(cred) = &self.credential_id {
            act.insert("credentialId".into(), json!(cred.as_str()));
        }
        if let Some(view) = self.view {
            act.insert("view".into(), json!(view.as_str()));
        }
        if let Some(id) = &self.manager_instance_id {
            act.insert("managerInstanceId".into(), json!(id.as_str()));
        }
        if let Some(s) = &self.session {
            act.insert(
                "session".into(),
                json!({
                    "endpoint": s.endpoint,
                    "sessionId": s.session_id,
                    "epoch": s.epoch,
                    "exp": s.exp,
                }),
            );
        }
        if let Some(tw) = &self.transfer_writer {
            act.insert(
                "transferWriter".into(),
                json!({ "instanceId": tw.instance_id.as_str(), "hex": tw.hex }),
            );
        }
        Value::Object(act)
    }

    /// Reads the `act` claim of a signed bearer. Unknown members of `act` are ignored (as the
    /// reference does); `session` and `transferWriter` are closed shapes.
    fn from_json(value: &Value) -> Result<Self, String> {
        let act = value
            .as_object()
            .ok_or("act claim is required (server-authored owner/actor)")?;
        let grammar = |e: EpError| e.message;
        let opt_str = |name: &str| -> Result<Option<&str>, String> {
            match act.get(name) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(format!("act.{name} must be a string when present")),
            }
        };
        let req_str =
            |name: &str| opt_str(name)?.ok_or_else(|| format!("act.{name} must be a string"));
        let owner = OwnerToken::parse(req_str("owner")?).map_err(grammar)?;
        let actor = ActorToken::parse(req_str("actor")?).map_err(grammar)?;
        let scope = match act.get("scope") {
            None => None,
            Some(v) => Some(string_list(v).ok_or("act.scope must be a string list when present")?),
        };
        let view = match opt_str("view")? {
            None => None,
            Some(v) => Some(BearerView::parse(v).ok_or_else(|| {
                let known: Vec<&str> = BearerView::ALL.iter().map(|v| v.as_str()).collect();
                format!(
                    "act.view {} is not a known view ({}); unknown views fail closed",
                    quote(v),
                    known.join(", ")
                )
            })?),
        };
        let session = match act.get("session") {
            None => None,
            Some(v) => Some(session_from_json(v)?),
        };
        let transfer_writer = match act.get("transferWriter") {
            None => None,
            Some(v) => Some(transfer_writer_from_json(v)?),
        };
        Ok(BearerAct {
            owner,
            actor,
            scope,
            parent: opt_str("parent")?
                .map(Principal::parse)
                .transpose()
                .map_err(grammar)?,
            lifecycle_uid: opt_str("lifecycleUid")?
                .map(LifecycleUid::parse)
                .transpose()
                .map_err(grammar)?,
            credential_id: opt_str("credentialId")?
                .map(CredentialId::parse)
                .transpose()
                .map_err(grammar)?,
            view,
            manager_instance_id: opt_str("managerInstanceId")?
                .map(InstanceId::parse)
                .transpose()
                .map_err(grammar)?,
            session,
            transfer_writer,
        })
    }
}

fn session_from_json(v: &Value) -> Result<SessionClaim, String> {
    let o = v.as_object().ok_or("act.session must be an object")?;
    closed(o, &["endpoint", "sessionId", "epoch", "exp"], "act.session")?;
    let s = |k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("act.session.{k} must be a string"))
    };
    let n = |k: &str| {
        o.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("act.session.{k} is not an unsigned integer"))
    };
    Ok(SessionClaim {
        endpoint: s("endpoint")?,
        session_id: s("sessionId")?,
        epoch: n("epoch")?,
        exp: n("exp")?,
    })
}

fn transfer_writer_from_json(v: &Value) -> Result<TransferWriterClaim, String> {
    let o = v
        .as_object()
        .ok_or("act.transferWriter must be an object")?;
    closed(o, &["instanceId", "hex"], "act.transferWriter")?;
    let instance_id = o
        .get("instanceId")
        .and_then(Value::as_str)
        .ok_or("act.transferWriter.instanceId must be a string")?;
    let hex = o
        .get("hex")
        .and_then(Value::as_str)
        .ok_or("act.transferWriter.hex must be a string")?;
    Ok(TransferWriterClaim {
        instance_id: InstanceId::parse(instance_id).map_err(|e| e.message)?,
        hex: hex.to_owned(),
    })
}

/// Refuses a member outside `allowed`.
fn closed(o: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), String> {
    match unknown_member(o, allowed) {
        Some(k) => Err(format!("{what} carries the unknown member {}", quote(k))),
        None => Ok(()),
    }
}

fn string_list(v: &Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// A freshly minted bearer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedBearer {
    /// The compact JWS.
    pub token: String,
    pub expires_at: UnixSeconds,
    /// The signing key's kid.
    pub kid: String,
}

/// A bearer that passed every check, reduced to what the connect boundary needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedBearer {
    /// `sub`, equal to `act.owner`.
    pub owner: OwnerToken,
    /// `aud`: the space.
    pub space: SpaceName,
    /// The top-level `scope` claim (empty when absent).
    pub scope: Vec<String>,
    pub act: BearerAct,
    pub ver: u64,
    pub issued_at: UnixSeconds,
    /// The connect boundary binds the broker credential's lifetime to this instant.
    pub expires_at: UnixSeconds,
    pub kid: String,
}

/// Mints and verifies the plane's bearers for one space, over a [`KeyRing`].
#[derive(Debug, Clone)]
pub struct BearerIssuer {
    issuer: String,
    space: SpaceName,
    ring: KeyRing,
}

impl BearerIssuer {
    /// The issuer for `space`; its `iss` is `urn:cotal:auth:<space>` and its `aud` the space.
    pub fn new(space: SpaceName, ring: KeyRing) -> Self {
        BearerIssuer {
            issuer: format!("urn:cotal:auth:{space}"),
            space,
            ring,
        }
    }

    /// The exact `iss` of every bearer.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn space(&self) -> &SpaceName {
        &self.space
    }

    pub fn ring(&self) -> &KeyRing {
        &self.ring
    }

    /// For [`KeyRing::rotate`] and [`KeyRing::prune`].
    pub fn ring_mut(&mut self) -> &mut KeyRing {
        &mut self.ring
    }

    /// Signs a bearer for `act` with the current key, valid from `now` for `ttl_secs`
    /// (default: the view's cap). Refuses (`bad-request`) a claim the verifier would refuse,
    /// a lifetime outside `(0, cap]` (900 s, or 300 s for `transfer-writer`), and a token
    /// over [`MAX_TOKEN_BYTES`].
    pub fn issue(
        &self,
        act: &BearerAct,
        ttl_secs: Option<u64>,
        now: UnixSeconds,
    ) -> Result<IssuedBearer, EpError> {
        let refuse = |why: String| EpError::bad_request(format!("cannot issue the bearer: {why}"));
        act.check().map_err(refuse)?;
        let cap = BearerView::ttl_cap_secs(act.view);
        let ttl = ttl_secs.unwrap_or(cap);
        if ttl == 0 || ttl > cap {
            return Err(refuse(format!(
                "ttl {ttl} s is out of range (0, {cap}]; short-lived bearers are the revocation lever"
            )));
        }
        let exp = now
            .0
            .checked_add(ttl)
            .filter(|exp| *exp <= MAX_SAFE_INTEGER)
            .ok_or_else(|| refuse(format!("now {} + ttl {ttl} s overflows", now.0)))?;
        let claims = json!({
            "scope": act.scope.clone().unwrap_or_default(),
            "ver": USER_TOKEN_VER,
            "act": act.to_json(),
            "sub": act.owner.as_str(),
            "iss": self.issuer,
            "aud": self.space.as_str(),
            "iat": now.0,
            "nbf": now.0,
            "exp": exp,
        });
        let signer = self.ring.current();
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = None;
        header.kid = Some(signer.kid().to_owned());
        let token = jsonwebtoken::encode(&header, &claims, signer.encoding())
            .map_err(|e| EpError::internal(format!("signing a bearer failed: {e}")))?;
        if token.len() > MAX_TOKEN_BYTES {
            return Err(refuse(format!(
                "the token is {} bytes; the limit is {MAX_TOKEN_BYTES} bytes",
                token.len()
            )));
        }
        Ok(IssuedBearer {
            token,
            expires_at: UnixSeconds(exp),
            kid: signer.kid().to_owned(),
        })
    }

    /// Verifies a bearer at `now`. Every refusal is `permission-denied` with a sentence naming
    /// what was wrong, checked in this order: size and shape, header (no embedded keys, no
    /// `crit`), algorithm (EdDSA only), `kid` (present and published in the ring), signature,
    /// `iss` (exact), `aud` (exactly the space: a string or a one-element list), `exp`, `iat`
    /// and `nbf` (all required) within [`BEARER_CLOCK_LEEWAY_SECS`], `act`, the lifetime cap
    /// anchored to `now` (`exp <= now + cap + leeway` and `exp - iat <= cap`), `ver`, `sub`
    /// (equal to `act.owner`), and `scope`.
    pub fn verify(&self, token: &str, now: UnixSeconds) -> Result<VerifiedBearer, EpError> {
        let denied = |why: String| EpError::permission_denied(format!("{WHAT} {why}"));
        let header = jose::read_header(token, WHAT)?;
        jose::accepted_algorithm(&header.alg, &[Algorithm::EdDSA])?;
        let kid = header.kid.ok_or_else(|| {
            denied("header has no kid; bearer keys are selected by kid only".to_owned())
        })?;
        let key = self.ring.key(&kid).ok_or_else(|| {
            EpError::permission_denied(format!(
                "unknown kid: no key with kid {} is published in the bearer JWKS \
                 (never this plane's, or retired and pruned)",
                quote(&kid)
            ))
        })?;
        let claims = jose::verify_signature(token, Algorithm::EdDSA, key.decoding(), WHAT, &kid)?;

        jose::check_issuer(&claims, &self.issuer, WHAT)?;
        let auds = jose::audiences(&claims, WHAT)?;
        if !matches!(auds.as_slice(), [only] if only == self.space.as_str()) {
            return Err(denied(format!(
                "audience {} is not exactly the space {}; a multi-audience bearer would replay across spaces",
                jose::show_audiences(&auds),
                quote(self.space.as_str())
            )));
        }
        let required = |name: &str| {
            jose::numeric_date(&claims, name, WHAT)?
                .ok_or_else(|| denied(format!("has no {name} claim; it is required")))
        };
        let exp = required("exp")?;
        let iat = required("iat")?;
        let nbf = required("nbf")?;
        jose::check_window(
            WHAT,
            exp,
            Some(nbf),
            Some(iat),
            now,
            BEARER_CLOCK_LEEWAY_SECS,
        )?;

        let act = claims
            .get("act")
            .ok_or_else(|| "act claim is required (server-authored owner/actor)".to_owned())
            .and_then(BearerAct::from_json)
            .and_then(|act| act.check().map(|()| act))
            .map_err(denied)?;
        // The cap holds from *our* clock: a post-dated token (iat and exp both far ahead)
        // would pass `exp - iat <= cap` alone and outlive the revocation lever.
        let cap = BearerView::ttl_cap_secs(act.view);
        let horizon = now
            .0
            .saturating_add(cap)
            .saturating_add(BEARER_CLOCK_LEEWAY_SECS);
        if exp > horizon {
            return Err(denied(format!(
                "exp {exp} is more than the {cap} s cap past now ({}); short-lived bearers are the revocation lever",
                now.0
            )));
        }
        let lifetime = exp.saturating_sub(iat);
        if lifetime > cap {
            return Err(denied(format!(
                "lifetime {lifetime} s exceeds the {cap} s cap; short-lived bearers are the revocation lever"
            )));
        }
        let ver = claims.get("ver").and_then(Value::as_u64);
        if ver != Some(USER_TOKEN_VER) {
            return Err(denied(format!(
                "ver {} is not {USER_TOKEN_VER}: a stale or unknown token shape (downgrade defence)",
                claims.get("ver").map_or("absent".to_owned(), Value::to_string)
            )));
        }
        match claims.get("sub") {
            Some(Value::String(sub)) if sub == act.owner.as_str() => {}
            Some(Value::String(sub)) => {
                return Err(denied(format!(
                    "act.owner {} is not sub {}; inconsistent principal",
                    quote(act.owner.as_str()),
                    quote(sub)
                )))
            }
            _ => return Err(denied("sub must be a string".to_owned())),
        }
        let scope = match claims.get("scope") {
            None => Vec::new(),
            Some(v) => string_list(v)
                .ok_or_else(|| denied("scope must be a string list when present".to_owned()))?,
        };
        Ok(VerifiedBearer {
            owner: act.owner.clone(),
            space: self.space.clone(),
            scope,
            act,
            ver: USER_TOKEN_VER,
            issued_at: UnixSeconds(iat),
            expires_at: UnixSeconds(exp),
            kid,
        })
    }
}
