//! The nats-server 2.15 configuration of a space's broker, rendered from [`BrokerMaterial`].

use serde_json::Value;

use super::BrokerMaterial;
use crate::error::EpError;

/// The `max_control_line` the broker runs with, in bytes.
///
/// A user JWT travels inside `CONNECT`, whose JSON argument the server bounds by this setting
/// (default 4096, callout-operator-mode §8). The plane mints user JWTs up to
/// [`crate::jwt::MAX_JWT_BYTES`] (16 384 bytes) that connect directly, and the CONNECT envelope
/// around one adds the fixed fields, the 86-character nonce signature and the client name: a
/// nats-py CONNECT is 274 + len(jwt) + len(token) bytes, 12 + len(name) more with a name.
/// Measured (`trust::tests::max_control_line_covers_the_largest_connect`, and live in
/// `tests/tests/nats_trust_root.rs`): a user JWT at the bound is 16 382 bytes and its CONNECT
/// about 16 732 with a 64-character name; the deny-all sentinel JWT is 698 bytes, so a sentinel
/// CONNECT leaves about 31 700 bytes for the bearer. 32 KiB is twice the mint bound: headroom
/// for the envelope and a bearer, while a runaway line is still refused long before memory
/// matters.
pub const MAX_CONTROL_LINE: usize = 32 * 1024;

/// A JSON string literal, which is also a valid nats-server config string (`\"` and `\\` are
/// the only escapes JSON emits once control characters are refused).
fn quote(s: &str) -> String {
    Value::from(s).to_string()
}

fn plain(what: &str, s: &str) -> Result<(), EpError> {
    if s.is_empty() || s.chars().any(char::is_control) {
        return Err(EpError::bad_request(format!(
            "the broker {what} is empty or contains control characters"
        )));
    }
    Ok(())
}

/// The TLS a broker serves clients (and, with [`ClusterRoutes`], its routes) with: nats-server's
/// `--tlscert`, `--tlskey`, `--tlscacert` and `--tlsverify`, as paths the server reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerTls {
    /// The server's PEM certificate (`cert_file`).
    pub cert: String,
    /// Its PEM private key (`key_file`).
    pub key: String,
    /// The PEM CA clients' certificates are verified against (`ca_file`); routes need it.
    pub ca: Option<String>,
    /// Require and verify a client certificate (`verify`); needs `ca`.
    pub verify: bool,
}

/// A cluster's route listener and the routes to its peers (nats-server's `--cluster`,
/// `--cluster_name` and `--routes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterRoutes {
    /// The cluster's name, the same on every node.
    pub name: String,
    /// `HOST:PORT` the route listener binds.
    pub listen: String,
    /// The peers' route URLs (`nats-route://HOST:PORT`, or `tls://` ones).
    pub routes: Vec<String>,
}

/// How the broker serves beyond the space's own material: its TLS and its cluster routes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Serving {
    /// Serve clients over TLS only (and the routes too, with `cluster`).
    pub tls: Option<ServerTls>,
    /// Route to the other nodes of a cluster.
    pub cluster: Option<ClusterRoutes>,
}

/// A `tls { }` block at `indent`: the certificate and key, the CA and client verification when
/// given. Routes always verify each other (nats-server forces it), so `routes` adds the CA's
/// verification on both sides and needs the CA.
fn tls_block(tls: &ServerTls, indent: &str, routes: bool) -> Result<String, EpError> {
    plain("TLS certificate path", &tls.cert)?;
    plain("TLS key path", &tls.key)?;
    let mut block = format!(
        "{indent}tls {{
{indent}  cert_file: {}
{indent}  key_file: {}
",
        quote(&tls.cert),
        quote(&tls.key)
    );
    match &tls.ca {
        Some(ca) => {
            plain("TLS CA path", ca)?;
            block.push_str(&format!(
                "{indent}  ca_file: {}
",
                quote(ca)
            ));
        }
        None if tls.verify => {
            return Err(EpError::bad_request(
                "--tlsverify needs --tlscacert: the CA client certificates are verified against",
            ))
        }
        None if routes => {
            return Err(EpError::bad_request(
                "TLS routes need --tlscacert: the nodes of a cluster verify each other against it",
            ))
        }
        None => {}
    }
    if tls.verify || routes {
        block.push_str(&format!(
            "{indent}  verify: true
"
        ));
    }
    block.push_str(&format!(
        "{indent}}}
"
    ));
    Ok(block)
}

/// The `cluster { }` block: name, route listener, routes, and their TLS when the server has TLS.
fn cluster_block(cluster: &ClusterRoutes, tls: Option<&ServerTls>) -> Result<String, EpError> {
    plain("cluster name", &cluster.name)?;
    plain("cluster listen address", &cluster.listen)?;
    for route in &cluster.routes {
        plain("route URL", route)?;
    }
    let routes: Vec<String> = cluster.routes.iter().map(|r| quote(r)).collect();
    let tls = tls.map(|t| tls_block(t, "  ", true)).transpose()?;
    Ok(format!(
        "cluster {{
  name: {}
  listen: {}
  routes: [{}]
{}}}
",
        quote(&cluster.name),
        quote(&cluster.listen),
        routes.join(", "),
        tls.unwrap_or_default()
    ))
}

/// [`broker_config_with`] serving plaintext clients, without routes.
pub fn broker_config(
    broker: &BrokerMaterial,
    listen: &str,
    store_dir: &str,
) -> Result<String, EpError> {
    broker_config_with(broker, listen, store_dir, &Serving::default())
}

/// A complete nats-server config for the space: operator mode trusting the space's operator
/// JWT (inline), the system account, a memory resolver preloaded with the system, data and
/// callout accounts, and JetStream on `store_dir` with `sync_interval: always` (JetStream is
/// enabled for the data account alone, by its JWT's limits). No `auth_callout` block: operator
/// mode forbids one (the server refuses to boot); the callout is the callout account's
/// `authorization` claim. `authorization { timeout }` is left at the server's 2 s: the
/// callout must answer well inside it anyway (the first PING comes at ~2 s, G6).
///
/// `listen` is `HOST:PORT`; it and `store_dir` may hold spaces and quotes (they are written as
/// quoted strings) but not control characters. With `serving.tls`, clients must use TLS
/// (`tls { }`); with `serving.cluster`, the routes (over TLS too when the server has it).
pub fn broker_config_with(
    broker: &BrokerMaterial,
    listen: &str,
    store_dir: &str,
    serving: &Serving,
) -> Result<String, EpError> {
    plain("listen address", listen)?;
    plain("store dir", store_dir)?;
    let tls = serving
        .tls
        .as_ref()
        .map(|t| tls_block(t, "", false))
        .transpose()?
        .unwrap_or_default();
    let cluster = serving
        .cluster
        .as_ref()
        .map(|c| cluster_block(c, serving.tls.as_ref()))
        .transpose()?
        .unwrap_or_default();
    let preload: String = [
        broker.system_account(),
        broker.data_account(),
        broker.callout_account(),
    ]
    .iter()
    .map(|a| format!("  {}: {}\n", quote(&a.public_key), quote(&a.jwt)))
    .collect();
    Ok(format!(
        "# nats-server config of Cotal space {space} (generated from the trust root; do not edit).\n\
         listen: {listen}\n\
         operator: {operator}\n\
         system_account: {system}\n\
         resolver: MEMORY\n\
         resolver_preload: {{\n{preload}}}\n\
         jetstream {{\n  store_dir: {store}\n  sync_interval: always\n}}\n\
         # A user JWT (up to 16 KiB) rides in CONNECT; see cotal_core::trust::MAX_CONTROL_LINE.\n\
         max_control_line: {MAX_CONTROL_LINE}\n\
         {tls}{cluster}",
        space = quote(broker.space().as_str()),
        listen = quote(listen),
        operator = quote(broker.operator_jwt()),
        system = quote(&broker.system_account().public_key),
        store = quote(store_dir),
    ))
}
