//! Fresh randomness for what the plane mints (instance, operation and lifecycle ids, nonces),
//! from the OS CSPRNG the trust root's seeds come from too.

use cotal_core::names::OpId;

/// `N` bytes from the OS CSPRNG.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|e| format!("cannot draw from the OS random source: {e}"))?;
    Ok(buf)
}

/// 20 bytes from the OS CSPRNG (what an id mints from).
pub fn entropy() -> Result<[u8; 20], String> {
    random_bytes()
}

/// A fresh operation id.
pub fn fresh_op_id() -> Result<OpId, String> {
    Ok(OpId::mint(entropy()?))
}
