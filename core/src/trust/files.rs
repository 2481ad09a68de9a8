//! The trust-root files: one type per file, each with `to_bytes` and a strict `parse`.
//!
//! A parse re-derives what it can instead of trusting the file: every seed must decode to the
//! right key kind and to the public key stated beside it, every JWT must verify under its
//! stated signer and carry no expiry, the issuer key's `kid` is recomputed, and the space is
//! checked wherever a file names it (`space`, the issuer URN, the callout account's name).

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use nkeys::KeyPairType;
use serde_json::{json, Value};

use super::json::{file_bytes, foreign_space, root_map, Obj, FILE_VERSION};
use super::{
    callout_account_name, ed25519_public, issuer_urn, jwk_thumbprint, CurveKey, IdpPin, NkeyPair,
};
use crate::error::EpError;
use crate::jwt::{self, ClaimType, Claims, Nats};
use crate::names::{DerivedOwner, SpaceName};

/// The subdirectory of the space dir that holds the operator's and the broker's files.
pub const OPERATOR_DIR: &str = "operator";
/// `operator/operator.json`: [`OperatorMaterial`].
pub const OPERATOR_FILE: &str = "operator.json";
/// `operator/broker.json`: [`BrokerMaterial`].
pub const BROKER_FILE: &str = "broker.json";
/// [`ServiceKeys`].
pub const SERVICE_KEYS_FILE: &str = "service-keys.json";
/// [`CalloutMaterial`].
pub const CALLOUT_FILE: &str = "callout.json";
/// [`IssuerKeys`].
pub const ISSUER_FILE: &str = "issuer.json";
/// [`OwnerSecret`].
pub const OWNER_SECRET_FILE: &str = "owner-secret.json";
/// [`SystemUser`].
pub const SYSTEM_USER_FILE: &str = "system-user.json";

fn public_key_of_kind(obj: &Obj<'_>, member: &str, kind: KeyPairType) -> Result<String, EpError> {
    let text = obj.str(member)?;
    match nkeys::from_public_key(text) {
        Ok((prefix, _)) if KeyPairType::from(prefix) == kind => Ok(text.to_owned()),
        _ => Err(obj.corrupt(&format!("member {member} is not a public {kind:?} nkey"))),
    }
}

/// Decodes and verifies a JWT of `kind` the file states, under `issuer` (`None`: its own
/// `iss`, for a self-signed operator), refusing one that expires.
fn stored_jwt(
    obj: &Obj<'_>,
    member: &str,
    kind: ClaimType,
    issuer: Option<&str>,
) -> Result<Claims, EpError> {
    let token = obj.str(member)?;
    let bad = |why: String| obj.corrupt(&format!("member {member} {why}"));
    let claims =
        jwt::decode(token).map_err(|e| bad(format!("is not a valid JWT: {}", e.message)))?;
    let issuer = issuer.unwrap_or(&claims.iss).to_owned();
    let claims = jwt::verify(token, kind, &issuer, claims.iat)
        .map_err(|e| bad(format!("does not verify: {}", e.message)))?;
    if claims.exp.is_some() {
        return Err(bad("expires; the trust root's JWTs never do".to_owned()));
    }
    Ok(claims)
}

// ---- operator/operator.json -----------------------------------------------------------------

/// The seeds only `init` needs: the operator (identity and signing key), the system account
/// and the data account's identity. The running daemon never reads this file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorMaterial {
    space: SpaceName,
    operator: NkeyPair,
    operator_signing: NkeyPair,
    system_account: NkeyPair,
    data_account: NkeyPair,
}

impl OperatorMaterial {
    pub(super) fn new(
        space: SpaceName,
        operator: NkeyPair,
        operator_signing: NkeyPair,
        system_account: NkeyPair,
        data_account: NkeyPair,
    ) -> Self {
        OperatorMaterial {
            space,
            operator,
            operator_signing,
            system_account,
            data_account,
        }
    }

    pub fn operator(&self) -> &NkeyPair {
        &self.operator
    }

    /// The key that signs the accounts (the identity key only signs the operator JWT).
    pub fn operator_signing(&self) -> &NkeyPair {
        &self.operator_signing
    }

    pub fn system_account(&self) -> &NkeyPair {
        &self.system_account
    }

    pub fn data_account(&self) -> &NkeyPair {
        &self.data_account
    }

    /// `{"ver":1,"space","operator":{"pub","seed","signingPub","signingSeed"},
    /// "systemAccount":{"pub","seed"},"dataAccount":{"pub","seed"}}`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let pair = |k: &NkeyPair| json!({"pub": k.public_key(), "seed": k.seed()});
        file_bytes(&json!({
            "ver": FILE_VERSION,
            "space": self.space.as_str(),
            "operator": {
                "pub": self.operator.public_key(),
                "seed": self.operator.seed(),
                "signingPub": self.operator_signing.public_key(),
                "signingSeed": self.operator_signing.seed(),
            },
            "systemAccount": pair(&self.system_account),
            "dataAccount": pair(&self.data_account),
        }))
    }

    pub fn parse(bytes: &[u8], space: &SpaceName, file_label: &str) -> Result<Self, EpError> {
        let map = root_map(bytes, file_label)?;
        let root = Obj::versioned(
            &map,
            file_label,
            &["ver", "space", "operator", "systemAccount", "dataAccount"],
            Some(space),
        )?;
        let operator = root.obj("operator")?;
        operator.closed(&["pub", "seed", "signingPub", "signingSeed"])?;
        let account = |member: &str| {
            let obj = root.obj(member)?;
            obj.closed(&["pub", "seed"])?;
            obj.nkey("seed", Some("pub"), KeyPairType::Account)
        };
        Ok(OperatorMaterial {
            space: space.clone(),
            operator: operator.nkey("seed", Some("pub"), KeyPairType::Operator)?,
            operator_signing: operator.nkey(
                "signingSeed",
                Some("signingPub"),
                KeyPairType::Operator,
            )?,
            system_account: account("systemAccount")?,
            data_account: account("dataAccount")?,
        })
    }
}

// ---- operator/broker.json -------------------------------------------------------------------

/// An account's public key and its JWT, as a server's resolver preload holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountJwt {
    pub public_key: String,
    pub jwt: String,
}

/// The public JWTs a nats-server of the space is configured with ([`super::broker_config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMaterial {
    space: SpaceName,
    operator_jwt: String,
    system_account: AccountJwt,
    data_account: AccountJwt,
    callout_account: AccountJwt,
}

impl BrokerMaterial {
    pub(super) fn new(
        space: SpaceName,
        operator_jwt: String,
        system_account: AccountJwt,
        data_account: AccountJwt,
        callout_account: AccountJwt,
    ) -> Self {
        BrokerMaterial {
            space,
            operator_jwt,
            system_account,
            data_account,
            callout_account,
        }
    }

    pub fn space(&self) -> &SpaceName {
        &self.space
    }

    pub fn operator_jwt(&self) -> &str {
        &self.operator_jwt
    }

    pub fn system_account(&self) -> &AccountJwt {
        &self.system_account
    }

    pub fn data_account(&self) -> &AccountJwt {
        &self.data_account
    }

    pub fn callout_account(&self) -> &AccountJwt {
        &self.callout_account
    }

    /// `{"ver":1,"space","operatorJwt","systemAccount":{"pub","jwt"},"dataAccount":{…},
    /// "calloutAccount":{…}}`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let account = |a: &AccountJwt| json!({"pub": a.public_key, "jwt": a.jwt});
        file_bytes(&json!({
            "ver": FILE_VERSION,
            "space": self.space.as_str(),
            "operatorJwt": self.operator_jwt,
            "systemAccount": account(&self.system_account),
            "dataAccount": account(&self.data_account),
            "calloutAccount": account(&self.callout_account),
        }))
    }

    /// Reads `broker.json`, verifying the operator JWT as self-signed and naming the system
    /// account, and every account JWT as signed by one of the operator's keys for its stated
    /// public key.
    pub fn parse(bytes: &[u8], space: &SpaceName, file_label: &str) -> Result<Self, EpError> {
        let map = root_map(bytes, file_label)?;
        let root = Obj::versioned(
            &map,
            file_label,
            &[
                "ver",
                "space",
                "operatorJwt",
                "systemAccount",
                "dataAccount",
                "calloutAccount",
            ],
            Some(space),
        )?;
        let operator = stored_jwt(&root, "operatorJwt", ClaimType::Operator, None)?;
        let Nats::Operator(op) = &operator.nats else {
            return Err(root.corrupt("member operatorJwt is not an operator JWT"));
        };
        if operator.iss != operator.sub {
            return Err(root.corrupt("member operatorJwt is not self-signed"));
        }
        let signers: Vec<&str> = std::iter::once(operator.sub.as_str())
            .chain(op.signing_keys.iter().map(String::as_str))
            .collect();
        let account = |member: &str| -> Result<AccountJwt, EpError> {
            let obj = root.obj(member)?;
            obj.closed(&["pub", "jwt"])?;
            let public_key = public_key_of_kind(&obj, "pub", KeyPairType::Account)?;
            let iss = jwt::decode(obj.str("jwt")?)
                .map(|c| c.iss)
                .unwrap_or_default();
            if !signers.contains(&iss.as_str()) {
                return Err(obj.corrupt(&format!(
                    "member {member}.jwt is not signed by the operator"
                )));
            }
            let claims = stored_jwt(&obj, "jwt", ClaimType::Account, Some(&iss))?;
            if claims.sub != public_key {
                return Err(obj.corrupt(&format!("member {member}.jwt is not for {member}.pub")));
            }
            Ok(AccountJwt {
                public_key,
                jwt: obj.str("jwt")?.to_owned(),
            })
        };
        let system_account = account("systemAccount")?;
        if op.system_account.as_deref() != Some(system_account.public_key.as_str()) {
            return Err(root.corrupt("names a system account its operator JWT does not name"));
        }
        Ok(BrokerMaterial {
            space: space.clone(),
            operator_jwt: root.str("operatorJwt")?.to_owned(),
            system_account,
            data_account: account("dataAccount")?,
            callout_account: account("calloutAccount")?,
        })
    }
}

// ---- service-keys.json ----------------------------------------------------------------------

/// The only data-account material the daemon holds: its public key and a signing key for the
/// users it mints (reference §9.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceKeys {
    data_account: String,
    data_signing: NkeyPair,
}

impl ServiceKeys {
    pub(super) fn new(data_account: String, data_signing: NkeyPair) -> Self {
        ServiceKeys {
            data_account,
            data_signing,
        }
    }

    /// `{"ver":1,"dataAccount":{"pub","signingSeed"}}`.
    pub fn to_bytes(&self) -> Vec<u8> {
        file_bytes(&json!({
            "ver": FILE_VERSION,
            "dataAccount": {"pub": self.data_account, "signingSeed": self.data_signing.seed()},
        }))
    }

    /// The file names no space; [`DaemonMaterial::assemble`] ties it to the callout account,
    /// which does.
    pub fn parse(bytes: &[u8], file_label: &str) -> Result<Self, EpError> {
        let map = root_map(bytes, file_label)?;
        let root = Obj::versioned(&map, file_label, &["ver", "dataAccount"], None)?;
        let data = root.obj("dataAccount")?;
        data.closed(&["pub", "signingSeed"])?;
        Ok(ServiceKeys {
            data_account: public_key_of_kind(&data, "pub", KeyPairType::Account)?,
            data_signing: data.nkey("signingSeed", None, KeyPairType::Account)?,
        })
    }
}

// ---- callout.json ---------------------------------------------------------------------------

/// The callout account: its keys and JWT, the callout service's creds, the sentinel's creds
/// and the xkey requests are sealed to. `Debug` shows public keys only (creds text holds a
/// seed).
#[derive(Clone, PartialEq, Eq)]
pub struct CalloutMaterial {
    account: NkeyPair,
    signing: NkeyPair,
    jwt: String,
    callout_creds: String,
    sentinel_creds: String,
    xkey: CurveKey,
}

impl std::fmt::Debug for CalloutMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CalloutMaterial")
            .field("account", &self.account)
            .field("signing", &self.signing)
            .field("xkey", &self.xkey)
            .finish_non_exhaustive()
    }
}

impl CalloutMaterial {
    pub(super) fn new(
        account: NkeyPair,
        signing: NkeyPair,
        jwt: String,
        callout_creds: String,
        sentinel_creds: String,
        xkey: CurveKey,
    ) -> Self {
        CalloutMaterial {
            account,
            signing,
            jwt,
            callout_creds,
            sentinel_creds,
            xkey,
        }
    }

    /// `{"ver":1,"callout":{"account":{"pub","seed","signingSeed","signingPub","jwt"},
    /// "calloutCreds","sentinelCreds","xkey":{"seed","pub"}}}`.
    pub fn to_bytes(&self) -> Vec<u8> {
        file_bytes(&json!({
            "ver": FILE_VERSION,
            "callout": {
                "account": {
                    "pub": self.account.public_key(),
                    "seed": self.account.seed(),
                    "signingSeed": self.signing.seed(),
                    "signingPub": self.signing.public_key(),
                    "jwt": self.jwt,
                },
                "calloutCreds": self.callout_creds,
                "sentinelCreds": self.sentinel_creds,
                "xkey": {"seed": self.xkey.seed(), "pub": self.xkey.public_key()},
            },
        }))
    }

    /// Reads `callout.json`: the account JWT must verify, be named `AUTH_<space>` (a foreign
    /// space otherwise), list the signing key and carry the authorization block with this
    /// xkey and the callout user; both creds must be users of this account signed by its
    /// signing key without expiry, and the sentinel must deny everything.
    pub fn parse(bytes: &[u8], space: &SpaceName, file_label: &str) -> Result<Self, EpError> {
        let map = root_map(bytes, file_label)?;
        let root = Obj::versioned(&map, file_label, &["ver", "callout"], None)?;
        let callout = root.obj("callout")?;
        callout.closed(&["account", "calloutCreds", "sentinelCreds", "xkey"])?;
        let account = callout.obj("account")?;
        account.closed(&["pub", "seed", "signingSeed", "signingPub", "jwt"])?;
        let identity = account.nkey("seed", Some("pub"), KeyPairType::Account)?;
        let signing = account.nkey("signingSeed", Some("signingPub"), KeyPairType::Account)?;
        let xkey_obj = callout.obj("xkey")?;
        xkey_obj.closed(&["seed", "pub"])?;
        let xkey = xkey_obj.xkey("seed", "pub")?;

        let claims = stored_jwt(&account, "jwt", ClaimType::Account, None)?;
        let bad = |why: &str| account.corrupt(&format!("member callout.account.jwt {why}"));
        let Nats::Account(nats) = &claims.nats else {
            return Err(bad("is not an account JWT"));
        };
        if claims.sub != identity.public_key() {
            return Err(bad("is not for callout.account.pub"));
        }
        if claims.name != callout_account_name(space) {
            return Err(foreign_space(file_label, &claims.name, space));
        }
        if !nats.signing_keys.iter().any(|k| k == signing.public_key()) {
            return Err(bad(
                "does not list callout.account.signingPub as a signing key",
            ));
        }
        let Some(auth) = &nats.authorization else {
            return Err(bad("carries no authorization (callout) block"));
        };
        if auth.xkey.as_deref() != Some(xkey.public_key()) {
            return Err(bad("seals requests to another xkey than callout.xkey.pub"));
        }

        let creds = |member: &str| -> Result<(String, Claims), EpError> {
            let text = callout.str(member)?;
            let bad = |why: String| callout.corrupt(&format!("member callout.{member} {why}"));
            let parsed = jwt::parse_creds(text).map_err(|e| bad(e.message))?;
            let user = jwt::verify(
                &parsed.jwt,
                ClaimType::User,
                signing.public_key(),
                claims.iat,
            )
            .map_err(|e| bad(format!("does not verify: {}", e.message)))?;
            if user.user_account() != Some(identity.public_key()) {
                return Err(bad("is not a user of the callout account".to_owned()));
            }
            if user.exp.is_some() {
                return Err(bad(
                    "expires; it must not (its expiry would cut every client)".to_owned(),
                ));
            }
            Ok((text.to_owned(), user))
        };
        let (callout_creds, service) = creds("calloutCreds")?;
        if !auth.auth_users.contains(&service.sub) {
            return Err(bad("does not list the calloutCreds user as an auth user"));
        }
        let (sentinel_creds, sentinel) = creds("sentinelCreds")?;
        let deny_all = sentinel.user().is_some_and(|u| {
            let p = &u.permissions;
            let all = |d: &jwt::Permission| d.allow.is_empty() && d.deny == [">"];
            all(&p.publish) && all(&p.subscribe) && p.response.is_none()
        });
        if !deny_all || auth.auth_users.contains(&sentinel.sub) {
            return Err(callout.corrupt(
                "member callout.sentinelCreds is not a deny-all user outside the auth users",
            ));
        }
        Ok(CalloutMaterial {
            jwt: account.str("jwt")?.to_owned(),
            account: identity,
            signing,
            callout_creds,
            sentinel_creds,
            xkey,
        })
    }
}

// ---- issuer.json ----------------------------------------------------------------------------

/// One Ed25519 bearer-issuer key: its RFC 8032 seed, public `x` and RFC 7638 `kid`. `Debug`
/// shows the kid only.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuerKey {
    kid: String,
    x: String,
    seed: [u8; 32],
}

impl std::fmt::Debug for IssuerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IssuerKey({})", self.kid)
    }
}

impl IssuerKey {
    pub fn from_seed(seed: [u8; 32]) -> Result<Self, EpError> {
        let x = URL_SAFE_NO_PAD.encode(ed25519_public(&seed)?);
        Ok(IssuerKey {
            kid: jwk_thumbprint(&x),
            x,
            seed,
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key, base64url (the JWK `x`).
    pub fn x(&self) -> &str {
        &self.x
    }

    /// The RFC 8032 private seed (the JWK `d`).
    pub fn seed(&self) -> &[u8; 32] {
        &self.seed
    }
}

/// The bearer issuer of the space and its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerKeys {
    issuer: String,
    /// A copy of the entry of `keys` that signs, so reading it cannot fail.
    active: IssuerKey,
    keys: Vec<IssuerKey>,
}

impl IssuerKeys {
    pub(super) fn new(space: &SpaceName, key: IssuerKey) -> Self {
        IssuerKeys {
            issuer: issuer_urn(space),
            active: key.clone(),
            keys: vec![key],
        }
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The key that signs new bearers (`activeKid`).
    pub fn active(&self) -> &IssuerKey {
        &self.active
    }

    /// Every key, the active one and any still published.
    pub fn keys(&self) -> &[IssuerKey] {
        &self.keys
    }

    /// The keys that verify but no longer sign.
    pub fn published(&self) -> impl Iterator<Item = &IssuerKey> {
        self.keys.iter().filter(|k| k.kid != self.active.kid)
    }

    /// A rotation: `next` signs from now on, and every key already here stays published and
    /// accepted until [`IssuerKeys::pruned`]. Refuses (`conflict`) a key already listed.
    pub fn rotated(&self, next: IssuerKey) -> Result<IssuerKeys, EpError> {
        if self.keys.iter().any(|k| k.kid == next.kid) {
            return Err(EpError::conflict(format!(
                "issuer key {} is already listed; rotate to a fresh key",
                next.kid
            )));
        }
        let mut keys = self.keys.clone();
        keys.push(next.clone());
        Ok(IssuerKeys {
            issuer: self.issuer.clone(),
            active: next,
            keys,
        })
    }

    /// The prune: only the signing key stays; every bearer another key signed is refused from
    /// then on.
    pub fn pruned(&self) -> IssuerKeys {
        IssuerKeys {
            issuer: self.issuer.clone(),
            active: self.active.clone(),
            keys: vec![self.active.clone()],
        }
    }

    /// `{"ver":1,"issuer","activeKid","keys":[{"kid","privateJwk":{"kty","crv","x","d"}}]}`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let keys: Vec<Value> = self
            .keys
            .iter()
            .map(|k| {
                json!({"kid": k.kid, "privateJwk": {
                    "kty": "OKP", "crv": "Ed25519", "x": k.x, "d": URL_SAFE_NO_PAD.encode(k.seed),
                }})
            })
            .collect();
        file_bytes(&json!({
            "ver": FILE_VERSION,
            "issuer": self.issuer,
            "activeKid": self.active.kid,
            "keys": keys,
        }))
    }

    /// Reads `issuer.json`: the issuer must be this space's URN, every JWK an Ed25519 private
    /// key whose `x` is its `d`'s public key and whose kid is its recomputed thumbprint, kids
    /// unique, and the active kid one of them.
    pub fn parse(bytes: &[u8], space: &SpaceName, file_label: &str) -> Result<Self, EpError> {
        let map = root_map(bytes, file_label)?;
        let root = Obj::versioned(
            &map,
            file_label,
            &["ver", "issuer", "activeKid", "keys"],
            None,
        )?;
        let issuer = root.str("issuer")?;
        if issuer != issuer_urn(space) {
            return Err(foreign_space(file_label, issuer, space));
        }
        let mut keys: Vec<IssuerKey> = Vec::new();
        for (i, value) in root.arr("keys")?.iter().enumerate() {
            let entry = root.element("keys", i, value)?;
            entry.closed(&["kid", "privateJwk"])?;
            let jwk = entry.obj("privateJwk")?;
            jwk.closed(&["kty", "crv", "x", "d"])?;
            if jwk.str("kty")? != "OKP" || jwk.str("crv")? != "Ed25519" {
                return Err(entry.corrupt(&format!("key {i} is not an Ed25519 (OKP) JWK")));
            }
            let seed: [u8; 32] = URL_SAFE_NO_PAD
                .decode(jwk.str("d")?)
                .ok()
                .and_then(|d| d.try_into().ok())
                .ok_or_else(|| {
                    entry.corrupt(&format!("key {i} has a d that is not 32 base64url bytes"))
                })?;
            let key = IssuerKey::from_seed(seed)?;
            if jwk.str("x")? != key.x {
                return Err(
                    entry.corrupt(&format!("key {i} has an x that is not its d's public key"))
                );
            }
            let kid = entry.str("kid")?;
            if kid != key.kid {
                return Err(entry.corrupt(&format!(
                    "key {i} has kid {kid}, not its RFC 7638 thumbprint {}",
                    key.kid
                )));
            }
            if keys.iter().any(|k| k.kid == key.kid) {
                return Err(entry.corrupt(&format!("lists key {kid} twice")));
            }
            keys.push(key);
        }
        let active_kid = root.str("activeKid")?;
        let active = keys
            .iter()
            .find(|k| k.kid == active_kid)
            .cloned()
            .ok_or_else(|| {
                root.corrupt(&format!(
                    "has active kid {active_kid}, which is none of its keys"
                ))
            })?;
        Ok(IssuerKeys {
            issuer: issuer.to_owned(),
            active,
            keys,
        })
    }
}

// ---- owner-secret.json ----------------------------------------------------------------------

/// The 32-byte secret owner identities are derived with; regenerating it re-keys every
/// owner. `Debug` prints nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct OwnerSecret([u8; 32]);

impl std::fmt::Debug for OwnerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerSecret(<redacted>)")
    }
}

impl OwnerSecret {
    pub(super) fn new(secret: [u8; 32]) -> Self {
        OwnerSecret(secret)
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// `{"ver":1,"secretB64"}`, the secret in *standard* base64 with padding (44 characters),
    /// the encoding the reference's `Buffer.toString("base64")` writes.
    pub fn to_bytes(&self) -> Vec<u8> {
        file_bytes(&json!({"ver": FILE_VERSION, "secretB64": STANDARD.encode(self.0)}))
    }

    pub fn parse(bytes: &[u8], file_label: &str) -> Result<Self, EpError> {
        let map = root_map(bytes, file_label)?;
        let root = Obj::versioned(&map, file_label, &["ver", "secretB64"], None)?;
        let decoded = STANDARD
            .decode(root.str("secretB64")?)
            .map_err(|_| root.corrupt("member secretB64 is not padded standard base64"))?;
        let len = decoded.len();
        decoded
            .try_into()
            .map(OwnerSecret)
            .map_err(|_| root.corrupt(&format!("holds a {len}-byte owner secret, not 32 bytes")))
    }
}

// ---- system-user.json ----------------------------------------------------------------------

/// The plane's own system-account user: it lists connections and kicks them (liveness and
/// verified eviction, [`crate::liveness`]) and may do nothing else of the system account. The
/// reference runs these through a separate delivery daemon; this plane holds them itself, so
/// this file is a credential beyond the reference's four secret kinds. `Debug` shows public keys
/// only.
#[derive(Clone, PartialEq, Eq)]
pub struct SystemUser {
    account: String,
    user: String,
    creds: String,
}

impl std::fmt::Debug for SystemUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemUser")
            .field("account", &self.account)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl SystemUser {
    /// Mints the user under the system account's own key (the system account has no signing
    /// keys), with exactly [`liveness::system_user_permissions`](crate::liveness) and no expiry.
    pub fn mint(
        system: &NkeyPair,
        user: &NkeyPair,
        now: jwt::UnixSeconds,
    ) -> Result<SystemUser, EpError> {
        let creds = jwt::user_creds(
            system.key_pair(),
            system.public_key(),
            user.key_pair(),
            crate::liveness::SYSTEM_USER_NAME,
            &jwt::UserNats {
                permissions: crate::liveness::system_user_permissions(),
                limits: crate::profiles::HOST_LIMITS,
                ..jwt::UserNats::default()
            },
            jwt::Validity {
                issued_at: now,
                expires_at: None,
            },
        )?;
        Ok(SystemUser {
            account: system.public_key().to_owned(),
            user: user.public_key().to_owned(),
            creds: creds.text(),
        })
    }

    /// The system account's public key.
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The creds text the plane connects with.
    pub fn creds(&self) -> &str {
        &self.creds
    }

    /// `{"ver":1,"systemUser":{"account","creds"}}`.
    pub fn to_bytes(&self) -> Vec<u8> {
        file_bytes(&json!({
            "ver": FILE_VERSION,
            "systemUser": {"account": self.account, "creds": self.creds},
        }))
    }

    /// Reads `system-user.json`: the creds must be a user signed by the stated system account
    /// itself, named [`crate::liveness::SYSTEM_USER_NAME`], without expiry, and granted exactly
    /// the plane's system permissions (a wider grant is refused, not trusted).
    pub fn parse(bytes: &[u8], file_label: &str) -> Result<Self, EpError> {
        let map = root_map(bytes, file_label)?;
        let root = Obj::versioned(&map, file_label, &["ver", "systemUser"], None)?;
        let user = root.obj("systemUser")?;
        user.closed(&["account", "creds"])?;
        let account = public_key_of_kind(&user, "account", KeyPairType::Account)?;
        let text = user.str("creds")?;
        let bad = |why: String| user.corrupt(&format!("member systemUser.creds {why}"));
        let parsed = jwt::parse_creds(text).map_err(|e| bad(e.message))?;
        let claims = jwt::decode(&parsed.jwt).map_err(|e| bad(e.message))?;
        let claims = jwt::verify(&parsed.jwt, ClaimType::User, &account, claims.iat)
            .map_err(|e| bad(format!("does not verify: {}", e.message)))?;
        if claims.user_account() != Some(account.as_str()) {
            return Err(bad("is not a user of systemUser.account".to_owned()));
        }
        if claims.exp.is_some() {
            return Err(bad("expires; the trust root's JWTs never do".to_owned()));
        }
        if claims.name != crate::liveness::SYSTEM_USER_NAME
            || claims.user().map(|u| &u.permissions)
                != Some(&crate::liveness::system_user_permissions())
        {
            return Err(bad(format!(
                "is not the plane's {} user with exactly its grant",
                crate::liveness::SYSTEM_USER_NAME
            )));
        }
        Ok(SystemUser {
            account,
            user: claims.sub,
            creds: text.to_owned(),
        })
    }
}

// ---- the daemon's set -----------------------------------------------------------------------

/// Everything the running daemon reads: the four secret kinds of the reference, the plane's
/// system user and the IdP pin, checked to belong together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonMaterial {
    service_keys: ServiceKeys,
    callout: CalloutMaterial,
    issuer: IssuerKeys,
    owner_secret: OwnerSecret,
    system_user: SystemUser,
    idp: IdpPin,
}

impl DaemonMaterial {
    /// Puts the parsed files together, refusing a set whose files come from different trust
    /// roots: the callout account must admit exactly the data account of `service-keys.json`,
    /// and the issuer must be this space's.
    pub fn assemble(
        space: &SpaceName,
        service_keys: ServiceKeys,
        callout: CalloutMaterial,
        issuer: IssuerKeys,
        owner_secret: OwnerSecret,
        system_user: SystemUser,
        idp: IdpPin,
    ) -> Result<Self, EpError> {
        let admits = match jwt::decode(&callout.jwt).map(|c| c.nats) {
            Ok(Nats::Account(a)) => a.authorization.map(|a| a.allowed_accounts),
            _ => None,
        };
        if admits.as_deref() != Some(std::slice::from_ref(&service_keys.data_account)) {
            return Err(EpError::internal(format!(
                "{CALLOUT_FILE} does not admit the data account of {SERVICE_KEYS_FILE} ({}) \
                 alone; the two files come from different trust roots",
                service_keys.data_account
            )));
        }
        if issuer.issuer != issuer_urn(space) {
            return Err(foreign_space(ISSUER_FILE, &issuer.issuer, space));
        }
        Ok(DaemonMaterial {
            service_keys,
            callout,
            issuer,
            owner_secret,
            system_user,
            idp,
        })
    }

    /// Refuses a broker whose data or callout account is not this material's.
    pub fn check_broker(&self, broker: &BrokerMaterial) -> Result<(), EpError> {
        let mismatch = |what: &str, file: &str| {
            EpError::internal(format!(
                "{file} and {OPERATOR_DIR}/{BROKER_FILE} name different {what} accounts; they \
                 come from different trust roots"
            ))
        };
        if broker.data_account.public_key != self.service_keys.data_account {
            return Err(mismatch("data", SERVICE_KEYS_FILE));
        }
        if broker.callout_account.public_key != self.callout.account.public_key()
            || broker.callout_account.jwt != self.callout.jwt
        {
            return Err(mismatch("callout", CALLOUT_FILE));
        }
        if broker.system_account.public_key != self.system_user.account {
            return Err(mismatch("system", SYSTEM_USER_FILE));
        }
        Ok(())
    }

    /// The files of the space dir, by name, with their bytes.
    pub fn files(&self) -> [(&'static str, Vec<u8>); 6] {
        [
            (SERVICE_KEYS_FILE, self.service_keys.to_bytes()),
            (CALLOUT_FILE, self.callout.to_bytes()),
            (ISSUER_FILE, self.issuer.to_bytes()),
            (OWNER_SECRET_FILE, self.owner_secret.to_bytes()),
            (SYSTEM_USER_FILE, self.system_user.to_bytes()),
            (super::IDP_FILE, self.idp.to_bytes()),
        ]
    }

    /// The data account users are admitted into.
    pub fn data_account(&self) -> &str {
        &self.service_keys.data_account
    }

    /// Signs the user JWTs of the data account (with `issuer_account` = [`Self::data_account`]).
    pub fn data_signing_key(&self) -> &nkeys::KeyPair {
        self.service_keys.data_signing.key_pair()
    }

    pub fn callout_account(&self) -> &str {
        self.callout.account.public_key()
    }

    /// Signs the authorization responses.
    pub fn callout_signing_key(&self) -> &nkeys::KeyPair {
        self.callout.signing.key_pair()
    }

    /// Opens the sealed requests and seals the responses.
    pub fn callout_xkey(&self) -> &nkeys::XKey {
        self.callout.xkey.xkey()
    }

    /// Creds text of the callout service's user (listed in `auth_users`).
    pub fn callout_creds(&self) -> &str {
        &self.callout.callout_creds
    }

    /// Creds text of the deny-all sentinel clients present with their bearer.
    pub fn sentinel_creds(&self) -> &str {
        &self.callout.sentinel_creds
    }

    pub fn issuer(&self) -> &IssuerKeys {
        &self.issuer
    }

    pub fn owner_secret(&self) -> &[u8; 32] {
        self.owner_secret.bytes()
    }

    pub fn idp(&self) -> &IdpPin {
        &self.idp
    }

    /// The owner the pinned IdP's `subject` derives in this space: the one derivation the
    /// exchange and the operator's `actor grant --idp-subject` share.
    pub fn owner_for_idp_subject(&self, subject: &str) -> Result<DerivedOwner, EpError> {
        DerivedOwner::for_idp_subject(self.owner_secret(), self.idp.issuer(), subject)
    }

    /// The plane's system-account user (liveness and eviction).
    pub fn system_user(&self) -> &SystemUser {
        &self.system_user
    }
}
