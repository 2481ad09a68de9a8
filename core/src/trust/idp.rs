//! The IdP pin (`idp.json`): which identity provider a space's owners come from.
//!
//! The pin is what owner identities are derived under, so it is fixed at `init` and never
//! re-pointed (that would re-key every owner). The URL grammar is deliberately narrow and
//! parsed here by hand (core takes no URL crate):
//!
//! * `https://`, or `http://` only when the host is a loopback *literal* — an IPv4 address in
//!   `127.0.0.0/8` or `[::1]`. `localhost` is refused over http: a name goes through the
//!   resolver (`/etc/hosts`, DNS), so a plaintext pin to it is only as safe as that resolver.
//! * No userinfo, query or fragment; no whitespace, control or non-ASCII characters.
//! * `issuer = audience = origin(url)`: lowercase scheme and host, the default port dropped.
//! * One trailing `/` is stripped before anything else, so `https://idp/` and `https://idp`
//!   pin the same provider and `jwksUri` is always `<url>/jwks`, the direct child of the
//!   pinned path. Only one: `https://idp/a//` pins the path `/a/`.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::json;

use super::json::{root_map, Obj, FILE_VERSION};
use crate::error::EpError;

/// The `idp.json` file name inside the space dir.
pub const IDP_FILE: &str = "idp.json";

/// The pinned identity provider of a space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdpPin {
    url: String,
    issuer: String,
    jwks_uri: String,
}

fn refuse(why: &str) -> EpError {
    EpError::bad_request(format!("the IdP URL {why}"))
}

impl IdpPin {
    /// Parses and normalizes an IdP URL (the module doc gives the grammar). Refusals never
    /// echo the URL: a userinfo or query part may carry a credential.
    pub fn from_url(input: &str) -> Result<IdpPin, EpError> {
        if input.is_empty() {
            return Err(refuse("is empty; give an https:// URL"));
        }
        if !input.chars().all(|c| c.is_ascii_graphic()) {
            return Err(refuse(
                "contains whitespace, control or non-ASCII characters; give it percent-free and plain",
            ));
        }
        let url = input.strip_suffix('/').unwrap_or(input);
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| refuse("is not an absolute URL (expected https://host/...)"))?;
        let scheme = scheme.to_ascii_lowercase();
        let secure = match scheme.as_str() {
            "https" => true,
            "http" => false,
            _ => {
                return Err(refuse(
                    "must use https (or http on a loopback address literal)",
                ))
            }
        };
        if rest.contains('?') {
            return Err(refuse("must not carry a query"));
        }
        if rest.contains('#') {
            return Err(refuse("must not carry a fragment"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(refuse("must not carry userinfo (user:password@)"));
        }
        let (host, port) = split_host_port(authority)?;
        let loopback = is_loopback_literal(&host);
        if !secure && !loopback {
            return Err(refuse(&format!(
                "uses plain http on {host}, which is not a loopback address literal (127.0.0.0/8 \
                 or [::1]); use https"
            )));
        }
        if path.contains('\\') || path.contains('%') {
            return Err(refuse("has a path with backslashes or percent-escapes"));
        }
        let default_port = if secure { 443 } else { 80 };
        let origin = match port {
            Some(p) if p != default_port => format!("{scheme}://{host}:{p}"),
            _ => format!("{scheme}://{host}"),
        };
        Ok(IdpPin {
            jwks_uri: format!("{url}/jwks"),
            url: url.to_owned(),
            issuer: origin,
        })
    }

    /// The pinned URL, one trailing `/` stripped.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The expected `iss` of the IdP's tokens: the URL's origin.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The expected `aud` of the IdP's tokens: the URL's origin, as the reference pins it.
    pub fn audience(&self) -> &str {
        &self.issuer
    }

    /// Where the IdP's keys are fetched: `<url>/jwks`.
    pub fn jwks_uri(&self) -> &str {
        &self.jwks_uri
    }

    /// `idp.json`: `{"ver":1,"url","issuer","audience","jwksUri"}`, pretty, newline-terminated.
    pub fn to_bytes(&self) -> Vec<u8> {
        super::json::file_bytes(&json!({
            "ver": FILE_VERSION,
            "url": self.url,
            "issuer": self.issuer,
            "audience": self.issuer,
            "jwksUri": self.jwks_uri,
        }))
    }

    /// Reads `idp.json` strictly: closed schema, version 1, and the derived members must be
    /// what the pinned URL derives (a hand-edited issuer is refused, not trusted).
    pub fn parse(bytes: &[u8], file_label: &str) -> Result<IdpPin, EpError> {
        let map = root_map(bytes, file_label)?;
        let root = Obj::versioned(
            &map,
            file_label,
            &["ver", "url", "issuer", "audience", "jwksUri"],
            None,
        )?;
        let pin = IdpPin::from_url(root.str("url")?)
            .map_err(|e| root.corrupt(&format!("has a url that is not pinnable: {}", e.message)))?;
        for (member, want) in [
            ("issuer", pin.issuer()),
            ("audience", pin.audience()),
            ("jwksUri", pin.jwks_uri()),
        ] {
            if root.str(member)? != want {
                return Err(root.corrupt(&format!(
                    "member {member} is not the one its url derives ({want})"
                )));
            }
        }
        Ok(pin)
    }
}

/// Splits `host[:port]` / `[v6][:port]`, lowercasing the host.
fn split_host_port(authority: &str) -> Result<(String, Option<u16>), EpError> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (inside, after) = v6
            .split_once(']')
            .ok_or_else(|| refuse("has an unclosed [IPv6] host"))?;
        if inside.parse::<Ipv6Addr>().is_err() {
            return Err(refuse("has a bracketed host that is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| refuse("has junk after its [IPv6] host"))?,
            ),
        };
        (format!("[{}]", inside.to_ascii_lowercase()), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if host.is_empty() || !host.split('.').all(label_ok) {
            return Err(refuse("has no valid host name"));
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| refuse("has a port that is not a number in 1..=65535"))?,
        ),
    };
    Ok((host, port))
}

/// `127.0.0.0/8` as a dotted quad, or `[::1]`; never a name.
fn is_loopback_literal(host: &str) -> bool {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|a| a.is_loopback());
    }
    host.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback())
}
