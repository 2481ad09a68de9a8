//! Validation of the public face's operator settings (§3.3 `checkPublicFace`, §2.2), the same
//! rules for the CLI flags and a hosted configuration. Every refusal is one sentence that starts
//! with `auth-service:` and names the flag to fix.

use std::fmt;

use url::Url;

/// The public face's settings as given, before validation. `port: None` means the face is
/// off, and then none of the other settings may be given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublicFaceFlags {
    /// `--exchange-public-port`, as typed.
    pub port: Option<String>,
    /// `--exchange-public-url`: the https:// address the reverse proxy serves the face at.
    pub url: Option<String>,
    /// `--exchange-trusted-proxy`: attribute peers by the last `X-Forwarded-For` hop.
    pub trusted_proxy: bool,
    /// `--advertised-server`: the broker address the discovery bundle advertises.
    pub advertised_server: Option<String>,
    /// `--agent-provisioning-url`: the bundle's remote agent-provisioning endpoint.
    pub agent_provisioning_url: Option<String>,
}

/// Validated public-face settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicFaceSettings {
    /// The port to bind on 127.0.0.1 (0 = ephemeral).
    pub port: u16,
    /// The advertised https:// URL, when given.
    pub url: Option<String>,
    /// Whether the last `X-Forwarded-For` hop is the peer.
    pub trusted_proxy: bool,
    /// A broker URL with scheme `nats`, `tls`, `ws` or `wss`, when given.
    pub advertised_server: Option<String>,
    /// An https: URL, when given.
    pub agent_provisioning_url: Option<String>,
}

/// A refused public-face setting: the sentence to show the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaceConfigError(String);

impl FaceConfigError {
    /// The sentence.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FaceConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FaceConfigError {}

/// Checks the public face's settings in the reference's order; `Ok(None)` when the face is
/// off and nothing else was given.
pub fn check_public_face(
    flags: &PublicFaceFlags,
) -> Result<Option<PublicFaceSettings>, FaceConfigError> {
    let port = match &flags.port {
        None => None,
        Some(raw) => Some(parse_port(raw).ok_or_else(|| {
            refuse(format!(
                "--exchange-public-port must be a port number, got \"{raw}\""
            ))
        })?),
    };
    if let Some(url) = &flags.url {
        // TLS terminates at the reverse proxy; the advertised address must say so.
        if !url.starts_with("https://") {
            return Err(refuse(format!(
                "--exchange-public-url must be an https:// URL (TLS terminates at the reverse \
                 proxy), got \"{url}\""
            )));
        }
    }
    if port.is_none() && (flags.url.is_some() || flags.trusted_proxy) {
        return Err(refuse(
            "--exchange-public-url/--exchange-trusted-proxy require --exchange-public-port",
        ));
    }
    if let Some(server) = &flags.advertised_server {
        if port.is_none() {
            return Err(refuse(
                "--advertised-server rides the public bundle - it requires \
                 --exchange-public-port",
            ));
        }
        check_advertised_server(server)?;
    }
    if let Some(provisioning) = &flags.agent_provisioning_url {
        if port.is_none() {
            return Err(refuse(
                "--agent-provisioning-url rides the public bundle - it requires \
                 --exchange-public-port",
            ));
        }
        check_agent_provisioning_url(provisioning)?;
    }
    Ok(port.map(|port| PublicFaceSettings {
        port,
        url: flags.url.clone(),
        trusted_proxy: flags.trusted_proxy,
        advertised_server: flags.advertised_server.clone(),
        agent_provisioning_url: flags.agent_provisioning_url.clone(),
    }))
}

/// The advertised broker address: a URL participants will dial, in the scheme family
/// `cotal meshes add` accepts.
pub fn check_advertised_server(raw: &str) -> Result<(), FaceConfigError> {
    let url = Url::parse(raw)
        .map_err(|_| refuse(format!("--advertised-server is not a URL, got \"{raw}\"")))?;
    match url.scheme() {
        "nats" | "tls" | "ws" | "wss" => Ok(()),
        other => Err(refuse(format!(
            "--advertised-server must be a broker URL (nats://, tls://, ws:// or wss://), got \
             {other}://"
        ))),
    }
}

/// The agent-provisioning endpoint: https only, because `cotal spawn` sends the login bearer to
/// it; a plaintext or non-URL value is refused at start, not discovered by a participant.
pub fn check_agent_provisioning_url(raw: &str) -> Result<(), FaceConfigError> {
    let url = Url::parse(raw).map_err(|_| {
        refuse(format!(
            "--agent-provisioning-url is not a URL, got \"{raw}\""
        ))
    })?;
    if url.scheme() != "https" {
        return Err(refuse(format!(
            "--agent-provisioning-url must be https:// (the login bearer rides the request), \
             got {}://",
            url.scheme()
        )));
    }
    Ok(())
}

/// A port number: decimal digits only, at most 65 535 (0 asks for an ephemeral port).
fn parse_port(raw: &str) -> Option<u16> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse::<u16>().ok()
}

fn refuse(sentence: impl AsRef<str>) -> FaceConfigError {
    FaceConfigError(format!("auth-service: {}", sentence.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(port: Option<&str>) -> PublicFaceFlags {
        PublicFaceFlags {
            port: port.map(str::to_owned),
            ..PublicFaceFlags::default()
        }
    }

    fn error(flags: &PublicFaceFlags) -> String {
        check_public_face(flags).unwrap_err().to_string()
    }

    #[test]
    fn no_face_and_no_settings_is_off() {
        assert_eq!(check_public_face(&flags(None)), Ok(None));
    }

    #[test]
    fn ports_are_0_to_65535() {
        for (raw, port) in [("0", 0), ("8443", 8443), ("65535", 65535)] {
            assert_eq!(
                check_public_face(&flags(Some(raw))).unwrap().unwrap().port,
                port
            );
        }
        for raw in ["", "65536", "-1", "80.5", "x", " 80", "+80", "99999999999"] {
            assert_eq!(
                error(&flags(Some(raw))),
                format!(
                    "auth-service: --exchange-public-port must be a port number, got \"{raw}\""
                )
            );
        }
    }

    #[test]
    fn the_public_url_must_be_https() {
        let mut f = flags(Some("0"));
        f.url = Some("https://exchange.example".into());
        assert_eq!(
            check_public_face(&f).unwrap().unwrap().url.as_deref(),
            Some("https://exchange.example")
        );
        for bad in [
            "http://exchange.example",
            "HTTPS://exchange.example",
            "exchange.example",
        ] {
            f.url = Some(bad.into());
            assert_eq!(
                error(&f),
                format!(
                    "auth-service: --exchange-public-url must be an https:// URL (TLS terminates \
                     at the reverse proxy), got \"{bad}\""
                )
            );
        }
    }

    #[test]
    fn settings_without_a_port_are_refused() {
        let mut f = flags(None);
        f.trusted_proxy = true;
        assert_eq!(
            error(&f),
            "auth-service: --exchange-public-url/--exchange-trusted-proxy require \
             --exchange-public-port"
        );
        let mut f = flags(None);
        f.url = Some("https://x.example".into());
        assert!(error(&f).contains("require --exchange-public-port"));
        let mut f = flags(None);
        f.advertised_server = Some("wss://x.example".into());
        assert_eq!(
            error(&f),
            "auth-service: --advertised-server rides the public bundle - it requires \
             --exchange-public-port"
        );
        let mut f = flags(None);
        f.agent_provisioning_url = Some("https://x.example".into());
        assert_eq!(
            error(&f),
            "auth-service: --agent-provisioning-url rides the public bundle - it requires \
             --exchange-public-port"
        );
    }

    #[test]
    fn the_advertised_server_is_a_broker_url() {
        for ok in [
            "nats://x:4222",
            "tls://x:4222",
            "ws://x/ws",
            "wss://x/ws",
            "NATS://x",
        ] {
            assert_eq!(check_advertised_server(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check_advertised_server("https://x").unwrap_err().message(),
            "auth-service: --advertised-server must be a broker URL (nats://, tls://, ws:// or \
             wss://), got https://"
        );
        assert_eq!(
            check_advertised_server("not a url").unwrap_err().message(),
            "auth-service: --advertised-server is not a URL, got \"not a url\""
        );
    }

    #[test]
    fn the_agent_provisioning_url_is_https() {
        assert_eq!(
            check_agent_provisioning_url("https://p.example/spawn"),
            Ok(())
        );
        assert_eq!(
            check_agent_provisioning_url("http://p.example")
                .unwrap_err()
                .message(),
            "auth-service: --agent-provisioning-url must be https:// (the login bearer rides the \
             request), got http://"
        );
        assert_eq!(
            check_agent_provisioning_url("//p").unwrap_err().message(),
            "auth-service: --agent-provisioning-url is not a URL, got \"//p\""
        );
    }

    #[test]
    fn the_checks_run_in_the_reference_order() {
        // A bad port is reported before a bad URL; a bad URL before a missing port.
        let f = PublicFaceFlags {
            port: Some("x".into()),
            url: Some("http://u".into()),
            ..PublicFaceFlags::default()
        };
        assert!(error(&f).contains("--exchange-public-port must be"));
        let f = PublicFaceFlags {
            url: Some("http://u".into()),
            ..PublicFaceFlags::default()
        };
        assert!(error(&f).contains("--exchange-public-url must be an https:// URL"));
    }

    #[test]
    fn a_full_valid_setting_passes_through() {
        let f = PublicFaceFlags {
            port: Some("8443".into()),
            url: Some("https://exchange.example".into()),
            trusted_proxy: true,
            advertised_server: Some("wss://mesh.example/nats".into()),
            agent_provisioning_url: Some("https://p.example/spawn".into()),
        };
        let s = check_public_face(&f).unwrap().unwrap();
        assert_eq!(s.port, 8443);
        assert!(s.trusted_proxy);
        assert_eq!(
            s.advertised_server.as_deref(),
            Some("wss://mesh.example/nats")
        );
    }
}
