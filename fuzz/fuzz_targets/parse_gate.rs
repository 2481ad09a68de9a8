//! `epgate` rows from arbitrary bytes: the parser never panics, and whatever it accepts
//! serializes to bytes that parse back to the same gate and re-serialize identically (the
//! touch rewrites stored bytes verbatim, so a gate whose serialization drifted could never
//! be touched by a peer comparing bytes).
#![no_main]

use cotal_core::gate::EndpointGate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(gate) = EndpointGate::parse(data) else {
        return;
    };
    let bytes = gate.to_bytes();
    match EndpointGate::parse(&bytes) {
        Ok(again) => {
            assert_eq!(again, gate, "round trip changed the gate");
            assert_eq!(again.to_bytes(), bytes, "serialization is not stable");
        }
        Err(e) => panic!("a parsed gate serialized to bytes its own parser refuses: {e}"),
    }
});
