//! The trust root of a space (issue 14): every key, JWT and secret a Cotal authority plane and
//! its nats-server start from, and the versioned files they are kept in.
//!
//! [`provision`] derives all of it from caller-supplied seeds ([`ProvisionSeeds`]) and the
//! [`IdpPin`]: pure and deterministic, so the same seeds and clock give the same bytes and
//! the adapter (io-fs) is the only place entropy is drawn. The material splits by who may
//! read it (reference §9.1–§9.2, callout-operator-mode §1):
//!
//! * [`OperatorMaterial`] (`operator/operator.json`) — the operator and account identity seeds
//!   only `init` needs; the running daemon never reads it, so a daemon compromise cannot mint
//!   accounts;
//! * [`BrokerMaterial`] (`operator/broker.json`) — the public JWTs a nats-server in operator
//!   mode is configured with ([`broker_config`]);
//! * [`DaemonMaterial`] — the daemon's secrets: the data account's signing key
//!   (`service-keys.json`), the callout account (`callout.json`), the bearer issuer keys
//!   (`issuer.json`), the owner secret (`owner-secret.json`), the plane's system-account user
//!   for liveness and eviction (`system-user.json`, [`SystemUser`]) and the IdP pin
//!   (`idp.json`).
//!
//! Nothing here expires: the operator and account JWTs are the server's configuration, and the
//! sentinel's `exp` would cut every client admitted through it (callout-operator-mode G4).

mod broker;
mod files;
mod idp;
mod json;
pub mod rotation;

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use nkeys::{KeyPair, KeyPairType, XKey};
use sha2::{Digest as _, Sha256};

pub use broker::{
    broker_config, broker_config_with, ClusterRoutes, ServerTls, Serving, MAX_CONTROL_LINE,
};
pub use files::{
    AccountJwt, BrokerMaterial, CalloutMaterial, DaemonMaterial, IssuerKey, IssuerKeys,
    OperatorMaterial, OwnerSecret, ServiceKeys, SystemUser, BROKER_FILE, CALLOUT_FILE, ISSUER_FILE,
    OPERATOR_DIR, OPERATOR_FILE, OWNER_SECRET_FILE, SERVICE_KEYS_FILE, SYSTEM_USER_FILE,
};
pub use idp::{IdpPin, IDP_FILE};
pub use json::FILE_VERSION;

use crate::error::EpError;
use crate::jwt::{
    self, AccountLimits, AccountNats, ExternalAuthorization, JetStreamLimits, OperatorNats,
    Permission, Permissions, UnixSeconds, UserNats, Validity,
};
use crate::names::SpaceName;

/// The subject the server sends authorization requests on (inside the callout account).
pub const AUTH_REQUEST_SUBJECT: &str = "$SYS.REQ.USER.AUTH";

/// The system account's name in its JWT.
pub const SYSTEM_ACCOUNT_NAME: &str = "SYS";

/// The callout service user's and the sentinel's names in their JWTs (the sentinel's shows as
/// `client_info.name_tag` in every authorization request).
pub const CALLOUT_USER_NAME: &str = "callout";
pub const SENTINEL_USER_NAME: &str = "sentinel";

/// The callout account's name: `AUTH_<space>` (reference §8.1).
pub fn callout_account_name(space: &SpaceName) -> String {
    format!("AUTH_{}", space.token())
}

/// The operator's name: `cotal-<space>`.
pub fn operator_name(space: &SpaceName) -> String {
    format!("cotal-{}", space.token())
}

/// The bearer issuer of a space: `urn:cotal:auth:<space>` (reference §10.2).
pub fn issuer_urn(space: &SpaceName) -> String {
    format!("urn:cotal:auth:{space}")
}

/// The 32-byte seeds a trust root is derived from, one per key plus the owner secret. The
/// caller draws them (the OS CSPRNG in production, constants in tests). `Debug` prints none.
#[derive(Clone, PartialEq, Eq)]
pub struct ProvisionSeeds {
    pub operator: [u8; 32],
    pub operator_signing: [u8; 32],
    pub system_account: [u8; 32],
    pub data_account: [u8; 32],
    pub data_signing: [u8; 32],
    pub callout_account: [u8; 32],
    pub callout_signing: [u8; 32],
    /// Curve25519, not Ed25519: the key authorization requests are sealed to.
    pub callout_xkey: [u8; 32],
    pub callout_user: [u8; 32],
    pub sentinel_user: [u8; 32],
    /// The RFC 8032 private seed of the first bearer issuer key.
    pub issuer_key: [u8; 32],
    pub owner_secret: [u8; 32],
    /// The plane's system-account user (liveness and eviction).
    pub system_user: [u8; 32],
}

impl ProvisionSeeds {
    /// How many entropy bytes [`ProvisionSeeds::from_entropy`] takes: thirteen seeds of 32.
    pub const ENTROPY_BYTES: usize = 13 * 32;

    /// Splits one buffer of fresh entropy into the seeds, in field order, so an adapter makes
    /// one CSPRNG call.
    pub fn from_entropy(entropy: &[u8; Self::ENTROPY_BYTES]) -> ProvisionSeeds {
        let mut chunks = entropy.chunks_exact(32).map(|c| {
            let mut seed = [0u8; 32];
            seed.copy_from_slice(c);
            seed
        });
        let mut next = || chunks.next().unwrap_or_default();
        ProvisionSeeds {
            operator: next(),
            operator_signing: next(),
            system_account: next(),
            data_account: next(),
            data_signing: next(),
            callout_account: next(),
            callout_signing: next(),
            callout_xkey: next(),
            callout_user: next(),
            sentinel_user: next(),
            issuer_key: next(),
            owner_secret: next(),
            system_user: next(),
        }
    }
}

impl fmt::Debug for ProvisionSeeds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProvisionSeeds(<redacted>)")
    }
}

/// An Ed25519 nkey pair with its seed text (kept to write the files back byte-exactly).
/// `Debug` shows the public key only; equality is by seed.
#[derive(Clone)]
pub struct NkeyPair {
    key: KeyPair,
    seed: String,
    public: String,
}

impl NkeyPair {
    fn new(key: KeyPair, seed: String) -> Self {
        let public = key.public_key();
        NkeyPair { key, seed, public }
    }

    fn from_raw(kind: KeyPairType, raw: &[u8; 32]) -> Result<Self, EpError> {
        let key = KeyPair::new_from_raw(kind.clone(), *raw)
            .map_err(|_| EpError::internal(format!("cannot derive a {kind:?} nkey from a seed")))?;
        let seed = key
            .seed()
            .map_err(|_| EpError::internal(format!("a fresh {kind:?} nkey has no seed")))?;
        Ok(NkeyPair::new(key, seed))
    }

    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// The key pair, for signing.
    pub fn key_pair(&self) -> &KeyPair {
        &self.key
    }

    fn seed(&self) -> &str {
        &self.seed
    }
}

impl PartialEq for NkeyPair {
    fn eq(&self, other: &Self) -> bool {
        self.seed == other.seed
    }
}

impl Eq for NkeyPair {}

impl fmt::Debug for NkeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NkeyPair({})", self.public)
    }
}

/// A curve (xkey) pair with its seed text. `Debug` shows the public key only.
#[derive(Clone)]
pub struct CurveKey {
    key: XKey,
    seed: String,
    public: String,
}

impl CurveKey {
    fn new(key: XKey, seed: String) -> Self {
        let public = key.public_key();
        CurveKey { key, seed, public }
    }

    fn from_raw(raw: &[u8; 32]) -> Result<Self, EpError> {
        let key = XKey::new_from_raw(*raw);
        let seed = key
            .seed()
            .map_err(|_| EpError::internal("a fresh curve key has no seed"))?;
        Ok(CurveKey::new(key, seed))
    }

    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// The key, for opening requests and sealing responses.
    pub fn xkey(&self) -> &XKey {
        &self.key
    }

    fn seed(&self) -> &str {
        &self.seed
    }
}

impl PartialEq for CurveKey {
    fn eq(&self, other: &Self) -> bool {
        self.seed == other.seed
    }
}

impl Eq for CurveKey {}

impl fmt::Debug for CurveKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CurveKey({})", self.public)
    }
}

/// The raw 32-byte Ed25519 public key of an RFC 8032 seed (nkeys derives its keys the same
/// way, so this is also the key an nkey of that seed carries).
fn ed25519_public(seed: &[u8; 32]) -> Result<[u8; 32], EpError> {
    let pair = KeyPair::new_from_raw(KeyPairType::User, *seed)
        .map_err(|_| EpError::internal("cannot derive an Ed25519 key from a seed"))?;
    nkeys::from_public_key(&pair.public_key())
        .map(|(_, raw)| raw)
        .map_err(|_| EpError::internal("an Ed25519 public key did not round-trip"))
}

/// The RFC 7638 SHA-256 thumbprint of the Ed25519 public key `x` (base64url): the digest of
/// `{"crv":"Ed25519","kty":"OKP","x":…}`, members sorted and no whitespace, base64url without
/// padding. `x` is base64url text, which needs no JSON escaping.
pub fn jwk_thumbprint(x: &str) -> String {
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

/// Everything a space starts from, split by reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRoot {
    pub operator: OperatorMaterial,
    pub broker: BrokerMaterial,
    pub daemon: DaemonMaterial,
}

/// Derives a space's whole trust root from `seeds` (see the module doc), with `now` as every
/// JWT's `iat` and no JWT expiring.
pub fn provision(
    space: &SpaceName,
    idp: IdpPin,
    seeds: &ProvisionSeeds,
    now: UnixSeconds,
) -> Result<TrustRoot, EpError> {
    let forever = Validity {
        issued_at: now,
        expires_at: None,
    };
    let keys = SpaceKeys::derive(seeds)?;
    let broker = broker_material(space, &keys, forever)?;
    let (callout_creds, sentinel_creds) = callout_users(&keys, forever)?;
    let SpaceKeys {
        operator,
        operator_signing,
        system,
        data,
        data_signing,
        callout,
        callout_signing,
        xkey,
        ..
    } = keys;
    let issuer_key = IssuerKey::from_seed(seeds.issuer_key)?;
    let daemon = DaemonMaterial::assemble(
        space,
        ServiceKeys::new(data.public_key().to_owned(), data_signing),
        CalloutMaterial::new(
            callout,
            callout_signing,
            broker.callout_account().jwt.clone(),
            callout_creds,
            sentinel_creds,
            xkey,
        ),
        IssuerKeys::new(space, issuer_key),
        OwnerSecret::new(seeds.owner_secret),
        SystemUser::mint(
            &system,
            &NkeyPair::from_raw(KeyPairType::User, &seeds.system_user)?,
            now,
        )?,
        idp,
    )?;
    Ok(TrustRoot {
        operator: OperatorMaterial::new(space.clone(), operator, operator_signing, system, data),
        broker,
        daemon,
    })
}

/// The keys [`provision`] signs with and hands out, derived from their seeds.
struct SpaceKeys {
    operator: NkeyPair,
    operator_signing: NkeyPair,
    system: NkeyPair,
    data: NkeyPair,
    data_signing: NkeyPair,
    callout: NkeyPair,
    callout_signing: NkeyPair,
    xkey: CurveKey,
    callout_user: NkeyPair,
    sentinel: NkeyPair,
}

impl SpaceKeys {
    fn derive(seeds: &ProvisionSeeds) -> Result<SpaceKeys, EpError> {
        Ok(SpaceKeys {
            operator: NkeyPair::from_raw(KeyPairType::Operator, &seeds.operator)?,
            operator_signing: NkeyPair::from_raw(KeyPairType::Operator, &seeds.operator_signing)?,
            system: NkeyPair::from_raw(KeyPairType::Account, &seeds.system_account)?,
            data: NkeyPair::from_raw(KeyPairType::Account, &seeds.data_account)?,
            data_signing: NkeyPair::from_raw(KeyPairType::Account, &seeds.data_signing)?,
            callout: NkeyPair::from_raw(KeyPairType::Account, &seeds.callout_account)?,
            callout_signing: NkeyPair::from_raw(KeyPairType::Account, &seeds.callout_signing)?,
            xkey: CurveKey::from_raw(&seeds.callout_xkey)?,
            callout_user: NkeyPair::from_raw(KeyPairType::User, &seeds.callout_user)?,
            sentinel: NkeyPair::from_raw(KeyPairType::User, &seeds.sentinel_user)?,
        })
    }
}

/// The broker's material: the operator JWT, self-signed, and the system, data and callout
/// account JWTs, signed by the operator's signing key.
fn broker_material(
    space: &SpaceName,
    k: &SpaceKeys,
    forever: Validity,
) -> Result<BrokerMaterial, EpError> {
    let operator_jwt = jwt::operator_jwt(
        k.operator.key_pair(),
        &operator_name(space),
        &OperatorNats {
            signing_keys: vec![k.operator_signing.public_key().to_owned()],
            system_account: Some(k.system.public_key().to_owned()),
            tags: Vec::new(),
        },
        forever,
    )?;
    let account =
        |pair: &NkeyPair, name: &str, nats: &AccountNats| -> Result<AccountJwt, EpError> {
            Ok(AccountJwt {
                public_key: pair.public_key().to_owned(),
                jwt: jwt::account_jwt(
                    k.operator_signing.key_pair(),
                    pair.public_key(),
                    name,
                    nats,
                    forever,
                )?,
            })
        };
    let system_jwt = account(&k.system, SYSTEM_ACCOUNT_NAME, &AccountNats::default())?;
    let data_jwt = account(
        &k.data,
        space.as_str(),
        &AccountNats {
            // The account's `subs` and `payload` bound every connection of the account, and
            // they are the only per-connection bound a callout-admitted client meets: since
            // 2.11 the server drops the callout-minted user JWT after reading its permissions,
            // so that JWT's own limits are never applied. The ceiling is the largest profile's.
            limits: AccountLimits {
                nats: crate::profiles::HOST_LIMITS,
                jetstream: JetStreamLimits::UNLIMITED,
                ..AccountLimits::default()
            },
            signing_keys: vec![k.data_signing.public_key().to_owned()],
            ..AccountNats::default()
        },
    )?;
    let callout_jwt = account(
        &k.callout,
        &callout_account_name(space),
        &AccountNats {
            signing_keys: vec![k.callout_signing.public_key().to_owned()],
            authorization: Some(ExternalAuthorization {
                auth_users: vec![k.callout_user.public_key().to_owned()],
                allowed_accounts: vec![k.data.public_key().to_owned()],
                xkey: Some(k.xkey.public_key().to_owned()),
            }),
            ..AccountNats::default()
        },
    )?;
    Ok(BrokerMaterial::new(
        space.clone(),
        operator_jwt,
        system_jwt,
        data_jwt,
        callout_jwt,
    ))
}

/// The creds of the callout account's two users: the callout service and the deny-all
/// sentinel, each signed by the account's signing key.
fn callout_users(k: &SpaceKeys, forever: Validity) -> Result<(String, String), EpError> {
    let user_creds = |user: &NkeyPair, name: &str, permissions: Permissions| {
        let creds = jwt::user_creds(
            k.callout_signing.key_pair(),
            k.callout.public_key(),
            user.key_pair(),
            name,
            &UserNats {
                permissions,
                limits: crate::profiles::HOST_LIMITS,
                ..UserNats::default()
            },
            forever,
        )?;
        Ok::<_, EpError>(creds.text())
    };
    let strings = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    // Reference §8.1: requests arrive on the auth subject; responses go to the server's
    // `$SYS._INBOX.…` reply subjects, which the `>` allow covers.
    let callout_creds = user_creds(
        &k.callout_user,
        CALLOUT_USER_NAME,
        Permissions {
            publish: Permission {
                allow: strings(&[">"]),
                deny: strings(&[AUTH_REQUEST_SUBJECT]),
            },
            subscribe: Permission {
                allow: strings(&[AUTH_REQUEST_SUBJECT]),
                deny: Vec::new(),
            },
            response: None,
        },
    )?;
    let deny_all = Permission {
        allow: Vec::new(),
        deny: strings(&[">"]),
    };
    let sentinel_creds = user_creds(
        &k.sentinel,
        SENTINEL_USER_NAME,
        Permissions {
            publish: deny_all.clone(),
            subscribe: deny_all,
            response: None,
        },
    )?;
    Ok((callout_creds, sentinel_creds))
}

/// The plane's system user for a trust root made before that user existed: minted from the
/// operator material's system account with a fresh `seed`, as [`provision`] mints it.
pub fn system_user_for(
    operator: &OperatorMaterial,
    seed: &[u8; 32],
    now: UnixSeconds,
) -> Result<SystemUser, EpError> {
    SystemUser::mint(
        operator.system_account(),
        &NkeyPair::from_raw(KeyPairType::User, seed)?,
        now,
    )
}

#[cfg(test)]
mod tests;
