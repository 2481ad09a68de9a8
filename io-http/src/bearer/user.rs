//! The Cotal user bearer: the plane's own EdDSA token that an agent presents at connect
//! (reference §10.1 claims, §10.2 issuer). Issue and verify are inverses: every bearer
//! [`BearerIssuer::issue`] mints passes [`BearerIssuer::verify`] until it expires, and a claim
//! shape the verifier would refuse is refused at mint.
//!
//! Wire shape: header `{"alg":"EdDSA","kid":…}`; claims `scope`, `ver`, `act`, `sub`, `iss`,
//! `aud`, `iat`, `nbf`, `exp` in that order, `act` members in the order of [`BearerAct`].

pub use cotal_core::bearer::{BearerAct, SessionClaim, TransferWriterClaim};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use cotal_core::jwt::UnixSeconds;
use cotal_core::names::{
    ActorToken, CredentialId, InstanceId, LifecycleUid, OwnerToken, Principal, SpaceName,
};
use cotal_core::trust::IssuerKeys;
use cotal_core::view::View;
pub use cotal_core::view::{MAX_BEARER_TTL_SECS, TRANSFER_WRITER_TTL_SECS};
use cotal_core::wire::{unknown_member, MAX_SAFE_INTEGER};
use cotal_core::EpError;
use jsonwebtoken::{Algorithm, Header};
use serde_json::{json, Map, Value};

use super::jose::{self, quote, MAX_TOKEN_BYTES};
use super::keys::KeyRing;

/// The token-shape version; any other `ver` is refused (downgrade defence).
pub const USER_TOKEN_VER: u64 = 1;

/// Clock skew allowed when verifying a bearer. Issuer and verifier are the same plane (or
/// share its clock discipline), so the reference's 5 s suffices.
pub const BEARER_CLOCK_LEEWAY_SECS: u64 = 5;

/// What refusals call the token.
const WHAT: &str = "bearer";

/// The `act` claim as JSON, members in wire order.
fn act_to_json(act: &BearerAct) -> Value {
    let mut out = Map::new();
    out.insert("owner".into(), json!(act.owner.as_str()));
    out.insert("actor".into(), json!(act.actor.as_str()));
    if let Some(scope) = &act.scope {
        out.insert("scope".into(), json!(scope));
    }
    if let Some(parent) = &act.parent {
        out.insert("parent".into(), json!(parent.key()));
    }
    if let Some(uid) = &act.lifecycle_uid {
        out.insert("lifecycleUid".into(), json!(uid.as_str()));
    }
    if let Some(cred) = &act.credential_id {
        out.insert("credentialId".into(), json!(cred.as_str()));
    }
    if let Some(view) = act.view {
        out.insert("view".into(), json!(view.as_str()));
    }
    if let Some(id) = &act.manager_instance_id {
        out.insert("managerInstanceId".into(), json!(id.as_str()));
    }
    if let Some(s) = &act.session {
        out.insert(
            "session".into(),
            json!({
                "endpoint": s.endpoint,
                "sessionId": s.session_id,
                "epoch": s.epoch,
                "exp": s.exp,
            }),
        );
    }
    if let Some(tw) = &act.transfer_writer {
        out.insert(
            "transferWriter".into(),
            json!({ "instanceId": tw.instance_id.as_str(), "hex": tw.hex }),
        );
    }
    Value::Object(out)
}

/// Reads the `act` claim of a signed bearer. Unknown members of `act` are ignored (as the
/// reference does); `session` and `transferWriter` are closed shapes.
fn act_from_json(value: &Value) -> Result<BearerAct, String> {
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
    let req_str = |name: &str| opt_str(name)?.ok_or_else(|| format!("act.{name} must be a string"));
    let owner = OwnerToken::parse(req_str("owner")?).map_err(grammar)?;
    let actor = ActorToken::parse(req_str("actor")?).map_err(grammar)?;
    let scope = match act.get("scope") {
        None => None,
        Some(v) => Some(string_list(v).ok_or("act.scope must be a string list when present")?),
    };
    let view = match opt_str("view")? {
        None => None,
        Some(v) => Some(View::parse(v).ok_or_else(|| {
            let known: Vec<&str> = View::ALL.iter().map(|v| v.as_str()).collect();
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

/// Mints and verifies the plane's bearers for one space, over a [`KeyRing`]. Clones share the
/// ring: a rotation the plane adopts ([`BearerIssuer::replace_ring`]) is seen at once by every
/// door that signs, verifies or publishes.
#[derive(Debug, Clone)]
pub struct BearerIssuer {
    issuer: String,
    space: SpaceName,
    ring: Arc<RwLock<KeyRing>>,
}

impl BearerIssuer {
    /// The issuer for `space`; its `iss` is `urn:cotal:auth:<space>` and its `aud` the space.
    pub fn new(space: SpaceName, ring: KeyRing) -> Self {
        BearerIssuer {
            issuer: format!("urn:cotal:auth:{space}"),
            space,
            ring: Arc::new(RwLock::new(ring)),
        }
    }

    /// The plane's issuer for `space` over the trust root's issuer keys: the active one signs,
    /// and every key it still lists is published and accepted (a rotation's previous keys,
    /// until `issuer prune`). The error is one sentence.
    pub fn of_issuer_keys(space: SpaceName, keys: &IssuerKeys) -> Result<Self, String> {
        Ok(BearerIssuer::new(space, KeyRing::of_issuer_keys(keys)?))
    }

    /// Re-reads the issuer keys with `read` every `period` and adopts them when they changed
    /// (a rotation or a prune), for every clone at once. A read that fails keeps the keys in
    /// use (a torn or missing file never drops a key), said once until the keys read again.
    /// Never ends: the caller drops it.
    pub async fn follow(
        &self,
        period: Duration,
        read: impl Fn() -> Result<KeyRing, String>,
    ) -> std::convert::Infallible {
        let mut unreadable = false;
        loop {
            tokio::time::sleep(period).await;
            match read() {
                Ok(ring) => {
                    unreadable = false;
                    if let Some(now) = self.adopt(ring) {
                        tracing::info!(
                            signing = now.first().map(String::as_str).unwrap_or_default(),
                            published = ?now,
                            "adopted the issuer keys of the trust root"
                        );
                    }
                }
                Err(why) => {
                    if !unreadable {
                        tracing::warn!(
                            "the issuer keys did not read ({why}); keeping the keys in use"
                        );
                    }
                    unreadable = true;
                }
            }
        }
    }

    /// The exact `iss` of every bearer.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn space(&self) -> &SpaceName {
        &self.space
    }

    /// The ring now (a poisoned lock still holds a whole ring: every write replaces it whole
    /// or runs one [`KeyRing`] method).
    pub fn ring(&self) -> RwLockReadGuard<'_, KeyRing> {
        self.ring.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// For [`KeyRing::rotate`] and [`KeyRing::prune`].
    pub fn ring_mut(&mut self) -> RwLockWriteGuard<'_, KeyRing> {
        self.ring.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adopts `ring` (the trust root's keys after a rotation or a prune) for every clone.
    pub fn replace_ring(&self, ring: KeyRing) {
        *self.ring.write().unwrap_or_else(PoisonError::into_inner) = ring;
    }

    /// Adopts `ring` when its kids differ from the ring in use (a rotation or a prune of the
    /// trust root's keys), and returns the kids it published then, signing key first; `None`
    /// when nothing changed.
    pub fn adopt(&self, ring: KeyRing) -> Option<Vec<String>> {
        let now: Vec<String> = ring.kids().into_iter().map(str::to_owned).collect();
        let before: Vec<String> = self.ring().kids().into_iter().map(str::to_owned).collect();
        if now == before {
            return None;
        }
        self.replace_ring(ring);
        Some(now)
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
        let cap = View::ttl_cap_secs(act.view);
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
            "act": act_to_json(act),
            "sub": act.owner.as_str(),
            "iss": self.issuer,
            "aud": self.space.as_str(),
            "iat": now.0,
            "nbf": now.0,
            "exp": exp,
        });
        let ring = self.ring();
        let signer = ring.current();
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
        let ring = self.ring();
        let key = ring.key(&kid).ok_or_else(|| {
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
            .and_then(act_from_json)
            .and_then(|act| act.check().map(|()| act))
            .map_err(denied)?;
        // The cap holds from *our* clock: a post-dated token (iat and exp both far ahead)
        // would pass `exp - iat <= cap` alone and outlive the revocation lever.
        let cap = View::ttl_cap_secs(act.view);
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
