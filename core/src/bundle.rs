//! The public face's discovery bundle (reference §3.3, `GET /.well-known/cotal-mesh`): what a
//! client needs to reach the space and sign in, built from the plane's own configuration once
//! the public face is bound. Its member order is the bytes the face serves.

use serde_json::{json, Value};

use crate::names::SpaceName;
use crate::trust::IdpPin;

/// What the bundle is made of.
#[derive(Debug, Clone, Copy)]
pub struct MeshBundle<'a> {
    pub space: &'a SpaceName,
    /// The server clients connect to: the advertised one, else the plane's own (never with
    /// userinfo: the adapter redacts it).
    pub server: &'a str,
    /// Whether the server the plane reached requires TLS (the plane dials TLS, or the server
    /// said so in its INFO).
    pub server_tls: bool,
    /// The pinned IdP clients sign in at.
    pub idp: &'a IdpPin,
    /// Where the public face is reached (the advertised https:// URL, else where it is bound).
    pub url: &'a str,
    /// The operator's agent provisioning URL, when given.
    pub agent_provisioning_url: Option<&'a str>,
    /// The deny-all sentinel creds clients present with their bearer.
    pub sentinel_creds: &'a str,
}

impl MeshBundle<'_> {
    /// `{space, server, tlsRequired, userAuth: {provider, idp, endpoints}, sentinelCreds}`. TLS
    /// is required when the server URL is `tls://` or `wss://` (any case), or the server
    /// requires it.
    pub fn to_json(&self) -> Value {
        let base = self.url.trim_end_matches('/');
        let mut endpoints = json!({
            "url": self.url,
            "managerAuthorityUrl": format!("{base}/manager-service-authority"),
        });
        if let (Some(provisioning), Some(map)) =
            (self.agent_provisioning_url, endpoints.as_object_mut())
        {
            map.insert("agentProvisioningUrl".into(), provisioning.into());
        }
        let tls_scheme = ["tls://", "wss://"].iter().any(|scheme| {
            self.server
                .get(..scheme.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
        });
        let idp = json!({
            "url": self.idp.url(),
            "issuer": self.idp.issuer(),
            "audience": self.idp.audience(),
        });
        json!({
            "space": self.space.as_str(),
            "server": self.server,
            "tlsRequired": tls_scheme || self.server_tls,
            "userAuth": {"provider": "cotal", "idp": idp, "endpoints": endpoints},
            "sentinelCreds": self.sentinel_creds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle<'a>(space: &'a SpaceName, idp: &'a IdpPin, server: &'a str) -> MeshBundle<'a> {
        MeshBundle {
            space,
            server,
            server_tls: false,
            idp,
            url: "https://auth.example.test/",
            agent_provisioning_url: None,
            sentinel_creds: "-----BEGIN NATS USER JWT-----",
        }
    }

    #[test]
    fn the_bundle_names_the_space_its_server_the_idp_and_the_faces_endpoints() {
        let space = SpaceName::parse("mesh").unwrap();
        let idp = IdpPin::from_url("http://127.0.0.1:4190").unwrap();
        let plain = bundle(&space, &idp, "nats://127.0.0.1:4222");
        let json = plain.to_json();
        assert_eq!(json["space"], "mesh");
        assert_eq!(json["server"], "nats://127.0.0.1:4222");
        assert_eq!(json["tlsRequired"], false);
        assert_eq!(json["sentinelCreds"], "-----BEGIN NATS USER JWT-----");
        assert_eq!(json["userAuth"]["provider"], "cotal");
        assert_eq!(json["userAuth"]["idp"]["url"], idp.url());
        assert_eq!(json["userAuth"]["idp"]["issuer"], idp.issuer());
        assert_eq!(json["userAuth"]["idp"]["audience"], idp.audience());
        assert_eq!(
            json["userAuth"]["endpoints"],
            json!({
                "url": "https://auth.example.test/",
                "managerAuthorityUrl": "https://auth.example.test/manager-service-authority",
            })
        );

        let provisioned = MeshBundle {
            agent_provisioning_url: Some("https://provision.example.test"),
            ..plain
        };
        assert_eq!(
            provisioned.to_json()["userAuth"]["endpoints"]["agentProvisioningUrl"],
            "https://provision.example.test"
        );
    }

    #[test]
    fn tls_is_required_by_a_tls_or_wss_server_url_in_any_case_or_by_the_server() {
        let space = SpaceName::parse("mesh").unwrap();
        let idp = IdpPin::from_url("http://127.0.0.1:4190").unwrap();
        for (server, server_tls, required) in [
            ("TLS://nats.example.test:4222", false, true),
            ("wss://nats.example.test", false, true),
            ("ws://nats.example.test", false, false),
            ("nats://nats.example.test", true, true),
            ("tl", false, false),
        ] {
            let json = MeshBundle {
                server_tls,
                ..bundle(&space, &idp, server)
            }
            .to_json();
            assert_eq!(json["tlsRequired"], required, "{server}");
        }
    }
}
