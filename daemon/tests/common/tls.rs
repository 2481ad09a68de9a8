//! Certificates the TLS tests make at test time (rcgen): a CA, a server certificate for
//! `127.0.0.1` and `localhost` (with no extended key usage, so a cluster's nodes present it on
//! their routes too) and a client certificate, as PEM files under a directory.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// One CA's PEM files: the CA certificate, a server certificate and key, a client certificate
/// and key, all signed by it.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn named(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}

/// Makes a CA named `name` and its certificates under `dir/<name>/`.
pub fn make(dir: &Path, name: &str) -> Pki {
    let dir = dir.join(name);
    fs::create_dir_all(&dir).unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name = named(&format!("cotal test CA {name}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let leaf = |sans: Vec<String>, cn: &str, cert: &str, key: &str| {
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name = named(cn);
        let pair = KeyPair::generate().unwrap();
        let signed = params.signed_by(&pair, &ca).unwrap();
        let (cert, key) = (dir.join(cert), dir.join(key));
        fs::write(&cert, signed.pem()).unwrap();
        fs::write(&key, pair.serialize_pem()).unwrap();
        (cert, key)
    };
    let (server_cert, server_key) = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        "nats server",
        "server.pem",
        "server-key.pem",
    );
    let (client_cert, client_key) = leaf(vec![], "cotal client", "client.pem", "client-key.pem");
    let ca_path = dir.join("ca.pem");
    fs::write(&ca_path, ca.pem()).unwrap();
    Pki {
        ca: ca_path,
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}
