//! RFC 8785 canonicalization of arbitrary bytes: never a panic (deep nesting, huge numbers,
//! lone surrogates, duplicate keys are refusals), and canonical output is a fixed point:
//! canonicalizing it again gives the same text, and `is_canonical` agrees.
#![no_main]

use cotal_core::canon::{canonicalize_bytes, is_canonical};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(canonical) = canonicalize_bytes(data) else {
        return;
    };
    match canonicalize_bytes(canonical.as_bytes()) {
        Ok(again) => assert_eq!(again, canonical, "canonicalization is not idempotent"),
        Err(e) => panic!("canonical output {canonical:?} is refused by its own canonicalizer: {e}"),
    }
    assert!(
        is_canonical(canonical.as_bytes()),
        "is_canonical rejects canonical output"
    );
    // Input that was already canonical is returned unchanged.
    if is_canonical(data) {
        assert_eq!(canonical.as_bytes(), data);
    }
});
