//! [`Dial`]: where every connection goes and how — the server URLs and the TLS material, applied
//! by the one [`Dial::apply`] every connect site of this crate runs, so no connection of the
//! plane (self-minted, callout, system user, short provisioner) can go out without the TLS its
//! operator asked for.
//!
//! The flags and variables are the nats CLI's (`--tlsca`/`NATS_CA`, `--tlscert`/`NATS_CERT`,
//! `--tlskey`/`NATS_KEY`). As with the nats clients, any TLS material makes TLS required: a
//! client given a CA never falls back to a plaintext server, whatever the URL's scheme.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::{ConnectError, ConnectOptions};

/// The TLS material a client connects with: the CA the server's certificate must chain to, and
/// an optional client certificate for a server that verifies its clients.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM CA certificate(s) the server's certificate must chain to (else the system's roots).
    pub ca: Option<PathBuf>,
    /// PEM client certificate, presented with [`TlsSettings::key`].
    pub cert: Option<PathBuf>,
    /// PEM private key of [`TlsSettings::cert`].
    pub key: Option<PathBuf>,
}

impl TlsSettings {
    /// True when no TLS material is given.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }

    /// Refuses, in one sentence naming the flag, a client certificate without its key (or the
    /// reverse) and a named file that cannot be read, before any connection is tried.
    pub fn check(&self) -> Result<(), String> {
        match (&self.cert, &self.key) {
            (Some(_), None) => return Err("--tlscert needs --tlskey (NATS_KEY)".to_owned()),
            (None, Some(_)) => return Err("--tlskey needs --tlscert (NATS_CERT)".to_owned()),
            _ => {}
        }
        for (flag, path) in [
            ("--tlsca", &self.ca),
            ("--tlscert", &self.cert),
            ("--tlskey", &self.key),
        ] {
            if let Some(path) = path {
                readable(flag, path)?;
            }
        }
        Ok(())
    }
}

fn readable(flag: &str, path: &Path) -> Result<(), String> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| format!("{flag} {} cannot be read: {e}", path.display()))
}

/// The servers a connection dials (one URL, or several separated by commas: the nodes of a
/// cluster) and the TLS it dials them with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dial {
    servers: String,
    tls: TlsSettings,
}

/// The URL schemes a client dials: plaintext (`nats://`, upgraded when the server requires TLS)
/// and TLS (`tls://`).
const SCHEMES: [&str; 2] = ["nats://", "tls://"];

impl Dial {
    /// A dial of `servers` with `tls`, refusing in one sentence an empty list, a URL of another
    /// scheme, and TLS material that does not check ([`TlsSettings::check`]).
    pub fn new(servers: &str, tls: TlsSettings) -> Result<Dial, String> {
        if servers.trim().is_empty() {
            return Err("--server must not be empty".to_owned());
        }
        for url in servers.split(',').map(str::trim) {
            let scheme_ok = match url.split_once("://") {
                Some(_) => SCHEMES
                    .iter()
                    .any(|s| url.len() > s.len() && has_scheme(url, s)),
                // A bare HOST:PORT is a nats:// one, as the nats clients read it.
                None => !url.is_empty(),
            };
            if !scheme_ok {
                return Err(format!(
                    "--server takes nats:// or tls:// URLs (comma-separated), got {:?}",
                    scheme_of(url)
                ));
            }
        }
        tls.check()?;
        Ok(Dial {
            servers: servers.to_owned(),
            tls,
        })
    }

    /// A dial of `servers` as given, without TLS material (a `tls://` URL still dials TLS,
    /// verified against the system's roots).
    pub fn plain(servers: &str) -> Dial {
        Dial {
            servers: servers.to_owned(),
            tls: TlsSettings::default(),
        }
    }

    /// The servers as given (comma-separated). It may carry credentials: say it through
    /// `discovery::redacted`.
    pub fn servers(&self) -> &str {
        &self.servers
    }

    /// The TLS material.
    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// Each server URL, trimmed.
    pub fn urls(&self) -> Vec<String> {
        self.servers
            .split(',')
            .map(|s| s.trim().to_owned())
            .collect()
    }

    /// True when every connection of this dial is TLS: TLS material is given, or a URL is
    /// `tls://`.
    pub fn requires_tls(&self) -> bool {
        !self.tls.is_empty() || self.urls().iter().any(|u| has_scheme(u, "tls://"))
    }

    /// `options` with this dial's TLS applied (the CA as the only roots, the client
    /// certificate, and TLS required whenever [`Dial::requires_tls`] holds) and reconnects
    /// paced by [`reconnect_delay`].
    pub fn apply(&self, options: ConnectOptions) -> ConnectOptions {
        let mut options = options
            .require_tls(self.requires_tls())
            .reconnect_delay_callback(reconnect_delay);
        if let Some(ca) = &self.tls.ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&self.tls.cert, &self.tls.key) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        options
    }

    /// What a failed connect says: a server that refused this client's certificate (or its
    /// lack of one), and a server certificate that does not verify (against which CA), are
    /// named as such; anything else is said as the client reported it.
    pub fn describe(&self, error: &ConnectError) -> String {
        let said = error.to_string();
        let lower = said.to_ascii_lowercase();
        if lower.contains("received fatal alert") {
            // The alert comes from the server: it is our side it refused.
            match &self.tls.cert {
                Some(cert) => format!(
                    "the server refused this client's TLS certificate {} ({said})",
                    cert.display()
                ),
                None => format!(
                    "the server requires a client certificate: pass --tlscert and --tlskey \
                     (NATS_CERT, NATS_KEY) ({said})"
                ),
            }
        } else if lower.contains("certificate") || lower.contains("unknownissuer") {
            let against = match &self.tls.ca {
                Some(ca) => format!("the CA in {}", ca.display()),
                None => "the system's roots (pass --tlsca or NATS_CA)".to_owned(),
            };
            format!("its TLS certificate does not verify against {against} ({said})")
        } else if lower.contains("tls") && !self.requires_tls() {
            format!("{said}; the server requires TLS: pass --tlsca (NATS_CA) or a tls:// URL")
        } else {
            said
        }
    }
}

/// True when `url` starts with `scheme`, in any case.
fn has_scheme(url: &str, scheme: &str) -> bool {
    url.get(..scheme.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(scheme))
}

/// The scheme part of `url`, for a refusal that must not echo credentials.
fn scheme_of(url: &str) -> String {
    url.split_once("://")
        .map_or_else(|| url.to_owned(), |(s, _)| format!("{s}://"))
}

impl From<&str> for Dial {
    fn from(servers: &str) -> Dial {
        Dial::plain(servers)
    }
}

impl From<&String> for Dial {
    fn from(servers: &String) -> Dial {
        Dial::plain(servers)
    }
}

impl From<String> for Dial {
    fn from(servers: String) -> Dial {
        Dial {
            servers,
            tls: TlsSettings::default(),
        }
    }
}

impl From<&Dial> for Dial {
    fn from(dial: &Dial) -> Dial {
        dial.clone()
    }
}

/// The longest a dropped connection of ours waits between two reconnect attempts.
pub const RECONNECT_DELAY_CAP: Duration = Duration::from_millis(100);

/// How long a dropped connection waits before its reconnect attempt number `attempts`: at once
/// for the first, then doubling from 2 ms up to [`RECONNECT_DELAY_CAP`]. The client's own
/// backoff doubles up to 4 s, so a plane whose server restarted would come back seconds after
/// the clients it admits, and every connect the server put to the callout meanwhile would wait
/// out the server's auth timeout unanswered; capped, the plane is among the first back. A few
/// connections retrying ten times a second cost a server that is down nothing.
pub fn reconnect_delay(attempts: usize) -> Duration {
    let doubled = u32::try_from(attempts.saturating_sub(1))
        .ok()
        .and_then(|exp| 2_u64.checked_pow(exp))
        .map_or(RECONNECT_DELAY_CAP, Duration::from_millis);
    match attempts {
        0 | 1 => Duration::ZERO,
        _ => doubled.min(RECONNECT_DELAY_CAP),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_double_from_at_once_to_the_cap() {
        let delays: Vec<u64> = [0, 1, 2, 3, 7, 8, 64, usize::MAX]
            .map(|n| reconnect_delay(n).as_millis() as u64)
            .to_vec();
        assert_eq!(delays, [0, 0, 2, 4, 64, 100, 100, 100]);
    }

    #[test]
    fn schemes_other_than_nats_and_tls_are_refused() {
        assert!(Dial::new("nats://a:4222,tls://b:4222", TlsSettings::default()).is_ok());
        assert!(Dial::new("a:4222", TlsSettings::default()).is_ok());
        let refused = Dial::new("ws://u:p@a:80", TlsSettings::default()).unwrap_err();
        assert_eq!(
            refused,
            "--server takes nats:// or tls:// URLs (comma-separated), got \"ws://\""
        );
        assert!(Dial::new(" ", TlsSettings::default()).is_err());
    }

    #[test]
    fn tls_is_required_by_material_or_scheme() {
        assert!(!Dial::plain("nats://a:1").requires_tls());
        assert!(Dial::plain("nats://a:1,TLS://b:2").requires_tls());
        let ca = Dial {
            servers: "nats://a:1".into(),
            tls: TlsSettings {
                ca: Some("/ca.pem".into()),
                ..TlsSettings::default()
            },
        };
        assert!(ca.requires_tls());
    }

    #[test]
    fn a_certificate_without_its_key_is_refused() {
        let half = TlsSettings {
            cert: Some("/c.pem".into()),
            ..TlsSettings::default()
        };
        assert_eq!(
            half.check().unwrap_err(),
            "--tlscert needs --tlskey (NATS_KEY)"
        );
        let missing = TlsSettings {
            ca: Some("/no/such/ca.pem".into()),
            ..TlsSettings::default()
        };
        assert!(missing
            .check()
            .unwrap_err()
            .starts_with("--tlsca /no/such/ca.pem cannot be read"));
    }
}
