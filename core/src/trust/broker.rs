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

/// A complete nats-server config for the space: operator mode trusting the space's operator
/// JWT (inline), the system account, a memory resolver preloaded with the system, data and
/// callout accounts, and JetStream on `store_dir` with `sync_interval: always` (JetStream is
/// enabled for the data account alone, by its JWT's limits). No `auth_callout` block: operator
/// mode forbids one (the server refuses to boot); the callout is the callout account's
/// `authorization` claim. `authorization { timeout }` is left at the server's 2 s: the
/// callout must answer well inside it anyway (the first PING comes at ~2 s, G6).
///
/// `listen` is `HOST:PORT`; it and `store_dir` may hold spaces and quotes (they are written as
/// quoted strings) but not control characters.
pub fn broker_config(
    broker: &BrokerMaterial,
    listen: &str,
    store_dir: &str,
) -> Result<String, EpError> {
    plain("listen address", listen)?;
    plain("store dir", store_dir)?;
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
         max_control_line: {MAX_CONTROL_LINE}\n",
        space = quote(broker.space().as_str()),
        listen = quote(listen),
        operator = quote(broker.operator_jwt()),
        system = quote(&broker.system_account().public_key),
        store = quote(store_dir),
    ))
}
