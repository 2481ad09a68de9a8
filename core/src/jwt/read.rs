//! Reading the claims and each kind's `nats` section out of a decoded payload, lenient where
//! Go's decoder is and strict where a fence needs it.

use std::fmt;

use nkeys::KeyPairType;
use serde_json::{Map, Value};

use crate::error::EpError;

use super::claims::{
    AccountLimits, AccountNats, AuthToken, AuthorizationRequest, AuthorizationResponse,
    AuthorizationVerdict, ClaimType, Claims, ExternalAuthorization, JetStreamLimits, Nats,
    NatsLimits, OperatorNats, Permission, Permissions, RequestClient, RequestConnect,
    RequestServer, ResponsePermission, UnixSeconds, UserNats,
};
use super::CLAIMS_VERSION;

/// Reads typed optional fields; JSON `null` counts as absent, as in Go.
struct Fields<'m> {
    map: &'m Map<String, Value>,
    section: &'static str,
}

impl<'m> Fields<'m> {
    fn get(&self, key: &str) -> Option<&'m Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, expected: &str) -> EpError {
        malformed(format_args!("{}{key} is not {expected}", self.section))
    }

    fn str(&self, key: &str) -> Result<Option<&'m str>, EpError> {
        self.get(key)
            .map(|v| v.as_str().ok_or_else(|| self.wrong(key, "a string")))
            .transpose()
    }

    fn int(&self, key: &str) -> Result<i64, EpError> {
        self.get(key)
            .map(|v| {
                v.as_i64()
                    .ok_or_else(|| self.wrong(key, "a 64-bit integer"))
            })
            .transpose()
            .map(Option::unwrap_or_default)
    }

    /// A time claim; zero is absent (Go's `omitempty`); negative is refused, since Go would
    /// read a negative `exp` as "never expires".
    fn seconds(&self, key: &str) -> Result<Option<UnixSeconds>, EpError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(0) => Ok(None),
                Some(s) => Ok(Some(UnixSeconds(s))),
                None => Err(self.wrong(key, "a non-negative integer")),
            },
        }
    }

    fn flag(&self, key: &str) -> Result<bool, EpError> {
        self.get(key)
            .map(|v| v.as_bool().ok_or_else(|| self.wrong(key, "a boolean")))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    fn strs(&self, key: &str) -> Result<Vec<String>, EpError> {
        let Some(v) = self.get(key) else {
            return Ok(Vec::new());
        };
        let items = v
            .as_array()
            .ok_or_else(|| self.wrong(key, "an array of strings"))?;
        items
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| self.wrong(key, "an array of strings"))
            })
            .collect()
    }

    fn object(&self, key: &str, section: &'static str) -> Result<Option<Fields<'m>>, EpError> {
        self.get(key)
            .map(|v| {
                v.as_object()
                    .map(|map| Fields { map, section })
                    .ok_or_else(|| self.wrong(key, "an object"))
            })
            .transpose()
    }
}

pub(super) fn claims_from(map: &Map<String, Value>) -> Result<Claims, EpError> {
    let top = Fields { map, section: "" };
    if top.get("type").is_some() {
        return Err(malformed(
            "a v1 claim (top-level type); only v2 NATS JWTs are accepted",
        ));
    }
    let nats = top
        .object("nats", "nats.")?
        .ok_or_else(|| malformed("claims carry no nats section"))?;
    let version = nats.int("version")?;
    if version != CLAIMS_VERSION {
        return Err(malformed(format_args!(
            "claims version {version}; only version 2 is accepted"
        )));
    }
    let type_name = nats.str("type")?.unwrap_or("");
    let kind = ClaimType::parse(type_name).ok_or_else(|| {
        EpError::bad_request(format!(
            "unsupported NATS JWT claim type {type_name:?}; expected operator, account, user, \
             authorization_request or authorization_response"
        ))
    })?;
    let iss = top.str("iss")?.unwrap_or("");
    let issuer_kind = public_key_kind(iss)
        .ok_or_else(|| malformed(format_args!("iss {iss:?} is not a public nkey")))?;
    if !kind.issuer_allowed(&issuer_kind) {
        return Err(malformed(format_args!(
            "{issuer_kind:?} keys cannot issue {kind} claims"
        )));
    }
    let sub = top.str("sub")?.unwrap_or("");
    expect_public_key(sub, &kind.subject_kind(), "sub").map_err(|e| malformed(e.message))?;
    let nats = match kind {
        ClaimType::User => user_from(&nats)?,
        ClaimType::Account => Nats::Account(account_from(&nats)?),
        ClaimType::Operator => Nats::Operator(operator_from(&nats)?),
        ClaimType::AuthorizationRequest => Nats::AuthorizationRequest(request_from(&nats)?),
        ClaimType::AuthorizationResponse => Nats::AuthorizationResponse(response_from(&nats)?),
    };
    Ok(Claims {
        jti: top.str("jti")?.unwrap_or("").to_owned(),
        iat: top.seconds("iat")?.unwrap_or(UnixSeconds(0)),
        exp: top.seconds("exp")?,
        nbf: top.seconds("nbf")?,
        aud: top.str("aud")?.map(str::to_owned),
        iss: iss.to_owned(),
        sub: sub.to_owned(),
        name: top.str("name")?.unwrap_or("").to_owned(),
        nats,
    })
}

fn permission_from(f: Option<Fields<'_>>) -> Result<Permission, EpError> {
    let Some(f) = f else {
        return Ok(Permission::default());
    };
    Ok(Permission {
        allow: f.strs("allow")?,
        deny: f.strs("deny")?,
    })
}

fn permissions_from(f: &Fields<'_>) -> Result<Permissions, EpError> {
    let response = match f.object("resp", "nats.resp.")? {
        Some(r) => Some(ResponsePermission {
            max: r.int("max")?,
            ttl_nanos: r.int("ttl")?,
        }),
        None => None,
    };
    Ok(Permissions {
        publish: permission_from(f.object("pub", "nats.pub.")?)?,
        subscribe: permission_from(f.object("sub", "nats.sub.")?)?,
        response,
    })
}

fn nats_limits_from(f: &Fields<'_>) -> Result<NatsLimits, EpError> {
    Ok(NatsLimits {
        subs: f.int("subs")?,
        data: f.int("data")?,
        payload: f.int("payload")?,
    })
}

fn user_from(f: &Fields<'_>) -> Result<Nats, EpError> {
    let issuer_account = f.str("issuer_account")?.map(str::to_owned);
    if let Some(account) = &issuer_account {
        expect_public_key(account, &KeyPairType::Account, "nats.issuer_account")
            .map_err(|e| malformed(e.message))?;
    }
    Ok(Nats::User {
        user: UserNats {
            permissions: permissions_from(f)?,
            limits: nats_limits_from(f)?,
            bearer_token: f.flag("bearer_token")?,
            allowed_connection_types: f.strs("allowed_connection_types")?,
            tags: f.strs("tags")?,
        },
        issuer_account,
    })
}

fn account_from(f: &Fields<'_>) -> Result<AccountNats, EpError> {
    let limits = match f.object("limits", "nats.limits.")? {
        None => AccountLimits {
            nats: NatsLimits {
                subs: 0,
                data: 0,
                payload: 0,
            },
            imports: 0,
            exports: 0,
            wildcards: false,
            disallow_bearer: false,
            conn: 0,
            leaf: 0,
            jetstream: JetStreamLimits::default(),
        },
        Some(l) => AccountLimits {
            nats: nats_limits_from(&l)?,
            imports: l.int("imports")?,
            exports: l.int("exports")?,
            wildcards: l.flag("wildcards")?,
            disallow_bearer: l.flag("disallow_bearer")?,
            conn: l.int("conn")?,
            leaf: l.int("leaf")?,
            jetstream: JetStreamLimits {
                mem_storage: l.int("mem_storage")?,
                disk_storage: l.int("disk_storage")?,
                streams: l.int("streams")?,
                consumer: l.int("consumer")?,
                max_ack_pending: l.int("max_ack_pending")?,
                mem_max_stream_bytes: l.int("mem_max_stream_bytes")?,
                disk_max_stream_bytes: l.int("disk_max_stream_bytes")?,
                max_bytes_required: l.flag("max_bytes_required")?,
            },
        },
    };
    // Scoped signing keys (objects with a user template) are refused rather than read as plain
    // keys: dropping the template would misstate what the key may sign.
    let signing_keys = f.strs("signing_keys").map_err(|_| {
        malformed("nats.signing_keys is not a list of public keys (scoped signers are unsupported)")
    })?;
    let default_permissions = match f.object("default_permissions", "nats.default_permissions.")? {
        Some(d) => permissions_from(&d)?,
        None => Permissions::default(),
    };
    let authorization = match f.object("authorization", "nats.authorization.")? {
        Some(a) => authorization_from(&a)?,
        None => None,
    };
    Ok(AccountNats {
        limits,
        signing_keys,
        default_permissions,
        authorization,
        tags: f.strs("tags")?,
    })
}

/// An enabled block (one with `auth_users`) or `None`: the server ignores a block without
/// users (an `xkey` alone included), and refuses an account whose block allows accounts
/// without users, so such a token is malformed here too.
fn authorization_from(f: &Fields<'_>) -> Result<Option<ExternalAuthorization>, EpError> {
    let auth_users = f.strs("auth_users")?;
    let allowed_accounts = f.strs("allowed_accounts")?;
    if auth_users.is_empty() {
        if !allowed_accounts.is_empty() {
            return Err(malformed(
                "nats.authorization has allowed accounts but no auth users (the server treats \
                 such an account as invalid)",
            ));
        }
        return Ok(None);
    }
    Ok(Some(ExternalAuthorization {
        auth_users,
        allowed_accounts,
        xkey: f.str("xkey")?.filter(|x| !x.is_empty()).map(str::to_owned),
    }))
}

fn request_from(f: &Fields<'_>) -> Result<AuthorizationRequest, EpError> {
    let text = |f: &Fields<'_>, key: &str| f.str(key).map(|s| s.unwrap_or("").to_owned());
    let server_id = match f.object("server_id", "nats.server_id.")? {
        None => RequestServer::default(),
        Some(s) => RequestServer {
            id: text(&s, "id")?,
            name: text(&s, "name")?,
            host: text(&s, "host")?,
            version: text(&s, "version")?,
            xkey: s.str("xkey")?.filter(|x| !x.is_empty()).map(str::to_owned),
        },
    };
    let client_info = match f.object("client_info", "nats.client_info.")? {
        None => RequestClient::default(),
        Some(c) => RequestClient {
            host: text(&c, "host")?,
            id: u64::try_from(c.int("id")?)
                .map_err(|_| malformed("nats.client_info.id is negative"))?,
            user: text(&c, "user")?,
            name_tag: text(&c, "name_tag")?,
            kind: text(&c, "kind")?,
        },
    };
    let connect_opts = match f.object("connect_opts", "nats.connect_opts.")? {
        None => RequestConnect::default(),
        Some(c) => RequestConnect {
            // Go writes both with `omitempty`: an empty string is a field the client left out.
            auth_token: c
                .str("auth_token")?
                .filter(|t| !t.is_empty())
                .map(AuthToken::new),
            name: c.str("name")?.filter(|n| !n.is_empty()).map(str::to_owned),
            lang: text(&c, "lang")?,
            version: text(&c, "version")?,
        },
    };
    Ok(AuthorizationRequest {
        server_id,
        user_nkey: text(f, "user_nkey")?,
        client_info,
        connect_opts,
    })
}

/// Go's `AuthorizationResponse.Validate`: exactly one of `jwt` and a non-empty `error`.
fn response_from(f: &Fields<'_>) -> Result<AuthorizationResponse, EpError> {
    let jwt = f.str("jwt")?.filter(|s| !s.is_empty());
    let error = f.str("error")?.filter(|s| !s.is_empty());
    let verdict = match (jwt, error) {
        (Some(jwt), None) => AuthorizationVerdict::Jwt(jwt.to_owned()),
        (None, Some(error)) => AuthorizationVerdict::Error(error.to_owned()),
        (Some(_), Some(_)) => {
            return Err(malformed(
                "an authorization response sets both jwt and error",
            ))
        }
        (None, None) => {
            return Err(malformed(
                "an authorization response sets neither jwt nor error",
            ))
        }
    };
    let issuer_account = f.str("issuer_account")?.map(str::to_owned);
    if let Some(account) = &issuer_account {
        expect_public_key(account, &KeyPairType::Account, "nats.issuer_account")
            .map_err(|e| malformed(e.message))?;
    }
    Ok(AuthorizationResponse {
        verdict,
        issuer_account,
    })
}

fn operator_from(f: &Fields<'_>) -> Result<OperatorNats, EpError> {
    Ok(OperatorNats {
        signing_keys: f.strs("signing_keys")?,
        system_account: f.str("system_account")?.map(str::to_owned),
        tags: f.strs("tags")?,
    })
}

/// The kind of a well-formed public nkey (base32, checksum, public prefix), `None` when `s` is
/// not one. Like Go's `IsValidPublic*Key` it does not decompress the curve point: that costs as
/// much as a third of a signature, and [`verify`](super::verify) does it once for the issuer anyway.
fn public_key_kind(s: &str) -> Option<KeyPairType> {
    nkeys::from_public_key(s)
        .ok()
        .map(|(prefix, _)| KeyPairType::from(prefix))
}

/// A refusal of a token that is not a well-formed NATS JWT.
pub(super) fn malformed(what: impl fmt::Display) -> EpError {
    EpError::bad_request(format!("malformed NATS JWT: {what}"))
}

pub(super) fn expect_public_key(s: &str, kind: &KeyPairType, what: &str) -> Result<(), EpError> {
    match public_key_kind(s) {
        Some(k) if &k == kind => Ok(()),
        _ => Err(EpError::bad_request(format!(
            "{what} {s:?} is not a public {kind:?} nkey"
        ))),
    }
}
