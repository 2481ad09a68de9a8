//! HMAC-SHA256 and constant-time comparison: the keyed-digest primitives of the registration
//! proofs ([`crate::manager`]), the derived owner ([`crate::names`]) and the ledger's token
//! check ([`crate::actors`]). They live below all three so those modules need not import one
//! another for them.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under `key`; the parts are fed in order,
/// so a domain prefix needs no copy.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes a key of any length (a long one is hashed first): `new_from_slice` refuses
    // only fixed-key MACs, so the default-key arm is never taken; it keeps the function total.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new(&Default::default()));
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Equality whose time does not depend on where the inputs differ. A length mismatch is simply
/// unequal (the reference's `timingSafeEqual` throws there; the lengths of proofs are public).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}
