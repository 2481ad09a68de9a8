//! The `nats` sections written the way Go's `encoding/json` writes them ([`GoObject`]), so a
//! minted token is byte-identical to `nats-io/jwt`'s.

use nkeys::KeyPairType;

use crate::error::EpError;

use super::claims::{
    AccountNats, ClaimType, ExternalAuthorization, NatsLimits, OperatorNats, Permission,
    Permissions, UnixSeconds, UserNats,
};
use super::read::expect_public_key;
use super::CLAIMS_VERSION;

fn permission_json(p: &Permission) -> Result<String, EpError> {
    GoObject::new()
        .strs_nonempty("allow", &p.allow)
        .strs_nonempty("deny", &p.deny)
        .finish()
}

/// Go's `Permissions`: `pub` and `sub` always (possibly `{}`), `resp` when set.
fn permissions_into(obj: GoObject, p: &Permissions) -> Result<GoObject, EpError> {
    let mut obj = obj
        .raw("pub", &permission_json(&p.publish)?)
        .raw("sub", &permission_json(&p.subscribe)?);
    if let Some(resp) = p.response {
        let r = GoObject::new()
            .int("max", resp.max)
            .int("ttl", resp.ttl_nanos)
            .finish()?;
        obj = obj.raw("resp", &r);
    }
    Ok(obj)
}

fn nats_limits_into(obj: GoObject, l: &NatsLimits) -> GoObject {
    obj.int_nonzero("subs", l.subs)
        .int_nonzero("data", l.data)
        .int_nonzero("payload", l.payload)
}

pub(super) fn generic_into(obj: GoObject, tags: &[String], kind: ClaimType) -> GoObject {
    obj.strs_nonempty("tags", tags)
        .str_nonempty("type", kind.as_str())
        .int("version", CLAIMS_VERSION)
}

/// Go's `User`: permissions, user limits (none written), nats limits, bearer flag, connection
/// types, `issuer_account`, generic fields.
pub(super) fn user_section(u: &UserNats, issuer_account: Option<&str>) -> Result<String, EpError> {
    let obj = permissions_into(GoObject::new(), &u.permissions)?;
    let obj = nats_limits_into(obj, &u.limits)
        .flag("bearer_token", u.bearer_token)
        .strs_nonempty("allowed_connection_types", &u.allowed_connection_types)
        .str_nonempty("issuer_account", issuer_account.unwrap_or(""));
    generic_into(obj, &u.tags, ClaimType::User).finish()
}

/// Go's `Account` (current layout): limits always, signing keys when any, default permissions
/// and the external-authorization object always (`{}` when there is none), generic fields.
pub(super) fn account_section(a: &AccountNats) -> Result<String, EpError> {
    for key in &a.signing_keys {
        expect_public_key(key, &KeyPairType::Account, "account signing key")?;
    }
    let l = &a.limits;
    let js = &l.jetstream;
    let limits = nats_limits_into(GoObject::new(), &l.nats)
        .int_nonzero("imports", l.imports)
        .int_nonzero("exports", l.exports)
        .flag("wildcards", l.wildcards)
        .flag("disallow_bearer", l.disallow_bearer)
        .int_nonzero("conn", l.conn)
        .int_nonzero("leaf", l.leaf)
        .int_nonzero("mem_storage", js.mem_storage)
        .int_nonzero("disk_storage", js.disk_storage)
        .int_nonzero("streams", js.streams)
        .int_nonzero("consumer", js.consumer)
        .int_nonzero("max_ack_pending", js.max_ack_pending)
        .int_nonzero("mem_max_stream_bytes", js.mem_max_stream_bytes)
        .int_nonzero("disk_max_stream_bytes", js.disk_max_stream_bytes)
        .flag("max_bytes_required", js.max_bytes_required)
        .finish()?;
    let defaults = permissions_into(GoObject::new(), &a.default_permissions)?.finish()?;
    let authorization = match &a.authorization {
        None => "{}".to_owned(),
        Some(auth) => authorization_json(auth)?,
    };
    let obj = GoObject::new()
        .raw("limits", &limits)
        .strs_nonempty("signing_keys", &a.signing_keys)
        .raw("default_permissions", &defaults)
        .raw("authorization", &authorization);
    generic_into(obj, &a.tags, ClaimType::Account).finish()
}

/// Go's `ExternalAuthorization` (`auth_users`, `allowed_accounts`, `xkey`), after the checks
/// its `Validate` makes, so a block the server would reject is never signed.
fn authorization_json(auth: &ExternalAuthorization) -> Result<String, EpError> {
    if auth.auth_users.is_empty() {
        return Err(EpError::bad_request(if auth.allowed_accounts.is_empty() {
            "an external authorization block needs at least one auth user; without one the \
             server ignores it"
        } else {
            "an external authorization block with allowed accounts but no auth users makes \
             the server treat the whole account as invalid; name the callout service's user"
        }));
    }
    for user in &auth.auth_users {
        expect_public_key(user, &KeyPairType::User, "auth user")?;
    }
    let wildcard = auth.allowed_accounts.iter().any(|a| a == "*");
    if wildcard && auth.allowed_accounts.len() > 1 {
        return Err(EpError::bad_request(
            "allowed account \"*\" (any account) must be the only entry",
        ));
    }
    if !wildcard {
        for account in &auth.allowed_accounts {
            expect_public_key(account, &KeyPairType::Account, "allowed account")?;
        }
    }
    if let Some(xkey) = &auth.xkey {
        expect_public_key(xkey, &KeyPairType::Curve, "authorization xkey")?;
    }
    GoObject::new()
        .strs_nonempty("auth_users", &auth.auth_users)
        .strs_nonempty("allowed_accounts", &auth.allowed_accounts)
        .str_nonempty("xkey", auth.xkey.as_deref().unwrap_or(""))
        .finish()
}

/// Go's `Operator`: signing keys, system account, generic fields.
pub(super) fn operator_section(o: &OperatorNats) -> Result<String, EpError> {
    for key in &o.signing_keys {
        expect_public_key(key, &KeyPairType::Operator, "operator signing key")?;
    }
    if let Some(system) = &o.system_account {
        expect_public_key(system, &KeyPairType::Account, "system account")?;
    }
    let obj = GoObject::new()
        .strs_nonempty("signing_keys", &o.signing_keys)
        .str_nonempty("system_account", o.system_account.as_deref().unwrap_or(""));
    generic_into(obj, &o.tags, ClaimType::Operator).finish()
}

/// A JSON object written the way Go's `encoding/json` writes a struct: fields in the order
/// appended, `*_nonempty`/`flag`/`seconds` skipping Go's zero values (`omitempty`), strings
/// escaped HTML-safe. Control characters are refused rather than escaped: no subject, tag or
/// name needs one, and Go's own escaping of `\b`/`\f` changed between releases, which would
/// make the `jti` depend on the Go version.
#[derive(Debug)]
pub(super) struct GoObject {
    out: String,
    first: bool,
    control_char: bool,
}

impl GoObject {
    pub(super) fn new() -> Self {
        GoObject {
            out: String::from("{"),
            first: true,
            control_char: false,
        }
    }

    pub(super) fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.push_string(key);
        self.out.push(':');
    }

    pub(super) fn push_string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '<' => self.out.push_str("\\u003c"),
                '>' => self.out.push_str("\\u003e"),
                '&' => self.out.push_str("\\u0026"),
                '\u{2028}' => self.out.push_str("\\u2028"),
                '\u{2029}' => self.out.push_str("\\u2029"),
                c if c < ' ' => self.control_char = true,
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    pub(super) fn str_nonempty(mut self, key: &str, value: &str) -> Self {
        if !value.is_empty() {
            self.key(key);
            self.push_string(value);
        }
        self
    }

    pub(super) fn int(mut self, key: &str, value: i64) -> Self {
        self.key(key);
        self.out.push_str(&value.to_string());
        self
    }

    pub(super) fn int_nonzero(self, key: &str, value: i64) -> Self {
        if value == 0 {
            self
        } else {
            self.int(key, value)
        }
    }

    pub(super) fn seconds(mut self, key: &str, value: Option<UnixSeconds>) -> Self {
        if let Some(UnixSeconds(s)) = value.filter(|s| s.0 != 0) {
            self.key(key);
            self.out.push_str(&s.to_string());
        }
        self
    }

    pub(super) fn flag(mut self, key: &str, value: bool) -> Self {
        if value {
            self.key(key);
            self.out.push_str("true");
        }
        self
    }

    pub(super) fn strs_nonempty(mut self, key: &str, values: &[String]) -> Self {
        if !values.is_empty() {
            self.key(key);
            self.out.push('[');
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.push_string(v);
            }
            self.out.push(']');
        }
        self
    }

    /// Appends an already-serialized JSON value.
    pub(super) fn raw(mut self, key: &str, json: &str) -> Self {
        self.key(key);
        self.out.push_str(json);
        self
    }

    pub(super) fn finish(mut self) -> Result<String, EpError> {
        if self.control_char {
            return Err(EpError::bad_request(
                "a JWT claim string contains a control character; names, subjects and tags \
                 must be printable",
            ));
        }
        self.out.push('}');
        Ok(self.out)
    }
}

/// RFC 4648 base32 (`A–Z2–7`) without padding, as Go's `base32.StdEncoding.WithPadding(NoPadding)`.
pub(super) fn base32_nopad(bytes: &[u8]) -> String {
    data_encoding::BASE32_NOPAD.encode(bytes)
}
