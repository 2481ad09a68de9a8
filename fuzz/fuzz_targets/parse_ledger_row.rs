//! `cred.`/`epcred.` ledger rows from arbitrary bytes: never a panic; an accepted row rebuilds
//! the key it was read from, and round-trips byte-stably.
//!
//! Input shape: `<key>\n<row bytes>` tests rows against a fuzzer-chosen key; without a newline
//! the key is derived from the row's own identity fields, so the fuzzer reaches the accepting
//! path without having to guess a matching key.
#![no_main]

use cotal_core::ledger::LedgerRow;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn derived_key(bytes: &[u8]) -> String {
    let value: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let field = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or("x");
    let (cred, uid) = (field("credentialId"), field("lifecycleUid"));
    match value.get("endpoint").and_then(Value::as_str) {
        Some(endpoint) => format!("epcred.{}.{uid}.{cred}", endpoint.replace('.', "_")),
        None => format!("cred.{uid}.{cred}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let (key, bytes) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => {
            let (key, rest) = data.split_at(at);
            (
                String::from_utf8_lossy(key).into_owned(),
                rest.get(1..).unwrap_or_default(),
            )
        }
        None => (derived_key(data), data),
    };
    let Ok(row) = LedgerRow::parse(bytes, &key) else {
        return;
    };
    assert_eq!(
        row.key(),
        key,
        "an accepted row must rebuild the key it was read from"
    );
    let serialized = row.to_bytes();
    match LedgerRow::parse(&serialized, &key) {
        Ok(again) => {
            assert_eq!(again, row, "round trip changed the row");
            assert_eq!(again.to_bytes(), serialized, "serialization is not stable");
            // The revoked form is a row of the same key too (barriers write it).
            let revoked = row.revoked();
            assert_eq!(
                LedgerRow::parse(&revoked.to_bytes(), &key).ok(),
                Some(revoked)
            );
        }
        Err(e) => panic!("a parsed row serialized to bytes its own parser refuses: {e}"),
    }
});
