//! `eprepair` repair cursors from arbitrary bytes: never a panic; an accepted cursor
//! round-trips byte-stably.
//!
//! Input shape: `<key>\n<cursor bytes>` tests a fuzzer-chosen key; without a newline the key is
//! a valid `eprepair.<endpointToken>.<instanceId>`.
#![no_main]

use cotal_core::repair::RepairCursor;
use libfuzzer_sys::fuzz_target;

const KEY: &str = "eprepair.com_acme_deploy.01hq3k9x7m2v5c8n4p6r0t1w3y";

fuzz_target!(|data: &[u8]| {
    let (key, bytes) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => {
            let (key, rest) = data.split_at(at);
            (
                String::from_utf8_lossy(key).into_owned(),
                rest.get(1..).unwrap_or_default(),
            )
        }
        None => (KEY.to_owned(), data),
    };
    let Ok(cursor) = RepairCursor::parse(bytes, &key) else {
        return;
    };
    let serialized = cursor.to_bytes();
    match RepairCursor::parse(&serialized, &key) {
        Ok(again) => {
            assert_eq!(again, cursor, "round trip changed the cursor");
            assert_eq!(again.to_bytes(), serialized, "serialization is not stable");
        }
        Err(e) => panic!("a parsed cursor serialized to bytes its own parser refuses: {e}"),
    }
});
