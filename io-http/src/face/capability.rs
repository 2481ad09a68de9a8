//! The loopback face's per-start capability (§3.2): 32 random bytes in lowercase hex, carried
//! only in the 0600 discovery file (or the hosted handle), presented as
//! `Authorization: Bearer <cap>` on every loopback POST route.
//!
//! The same-user file ACL on the discovery file is the boundary, so the capability is a secret:
//! it is compared in constant time, zeroed on drop, redacted from `Debug`, and a wrong value
//! is never logged.

use std::fmt;
use std::fmt::Write as _;

use hyper::header::AUTHORIZATION;
use hyper::HeaderMap;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::routes::Door;

/// How many random bytes a capability carries.
pub const CAPABILITY_BYTES: usize = 32;

/// 429 once the invalid-capability window holds more than
/// [`crate::face::budget::BAD_CAP_PER_MIN`] entries.
pub const TOO_MANY_BAD_CAPS: &str =
    "too many invalid-capability attempts - wait a minute and retry";

/// A refusal to build a [`Capability`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapabilityError {
    /// The value is not 64 lowercase hex digits.
    Malformed,
    /// The OS random source failed.
    Entropy(String),
}

impl fmt::Display for CapabilityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapabilityError::Malformed => write!(
                f,
                "the exchange capability must be {} lowercase hex digits",
                CAPABILITY_BYTES * 2
            ),
            CapabilityError::Entropy(e) => write!(
                f,
                "could not draw the exchange capability from the OS random source: {e}"
            ),
        }
    }
}

impl std::error::Error for CapabilityError {}

/// The per-start loopback capability. Rotates with every start of the plane.
pub struct Capability {
    hex: Zeroizing<String>,
    /// The exact `Authorization` value that proves it: `Bearer <hex>`.
    expected: Zeroizing<Vec<u8>>,
}

impl Capability {
    /// Draws a fresh capability from the OS CSPRNG.
    pub fn generate() -> Result<Capability, CapabilityError> {
        let mut bytes = Zeroizing::new([0u8; CAPABILITY_BYTES]);
        getrandom::fill(bytes.as_mut_slice())
            .map_err(|e| CapabilityError::Entropy(e.to_string()))?;
        let mut hex = String::with_capacity(CAPABILITY_BYTES * 2);
        for b in bytes.iter() {
            // Writing into a String cannot fail.
            let _ = write!(hex, "{b:02x}");
        }
        Ok(Capability::from_valid_hex(hex))
    }

    /// Adopts a capability the caller already holds (a hosted composition, a test): exactly
    /// 64 lowercase hex digits.
    pub fn from_hex(hex: &str) -> Result<Capability, CapabilityError> {
        let well_formed = hex.len() == CAPABILITY_BYTES * 2
            && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !well_formed {
            return Err(CapabilityError::Malformed);
        }
        Ok(Capability::from_valid_hex(hex.to_owned()))
    }

    fn from_valid_hex(hex: String) -> Capability {
        let mut expected = Vec::with_capacity(BEARER_PREFIX.len() + hex.len());
        expected.extend_from_slice(BEARER_PREFIX);
        expected.extend_from_slice(hex.as_bytes());
        Capability {
            hex: Zeroizing::new(hex),
            expected: Zeroizing::new(expected),
        }
    }

    /// The hex form, for the discovery file and the hosted handle only.
    pub fn expose_hex(&self) -> &str {
        &self.hex
    }

    /// Whether the request's `Authorization` header is exactly `Bearer <cap>`. The comparison
    /// runs in constant time over the expected length (only the length of a wrong value can
    /// show, and the length of the right one is public). With several `Authorization` headers
    /// the first counts, as in Node.
    pub fn authorizes(&self, headers: &HeaderMap) -> bool {
        headers
            .get(AUTHORIZATION)
            .is_some_and(|value| bool::from(value.as_bytes().ct_eq(&self.expected)))
    }
}

impl fmt::Debug for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Capability(<redacted>)")
    }
}

const BEARER_PREFIX: &[u8] = b"Bearer ";

/// The 401 sentence of a door reached with a missing or wrong capability. Every variant
/// contains `missing/invalid exchange capability`; the exchange says where to read the
/// capability, the other doors say what kind of action they are.
pub const fn missing_capability(door: Door) -> &'static str {
    match door {
        Door::Exchange => {
            "missing/invalid exchange capability - read it from the space's auth-service.json"
        }
        Door::ManagerServiceAuthority => {
            "missing/invalid exchange capability - manager-service authority requires the \
             operator exchange capability on this face"
        }
        Door::VerifyEnrollment => {
            "missing/invalid exchange capability - managed agent enrollment verification is a \
             loopback host action"
        }
        Door::InteractiveRetire => {
            "missing/invalid exchange capability - interactive lifecycle retirement is a \
             loopback operator action"
        }
        Door::ManagedRetire => {
            "missing/invalid exchange capability - managed lifecycle retirement is a loopback \
             host action"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers_with(auth: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in auth {
            headers.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn generated_capabilities_are_64_lowercase_hex_and_differ() {
        let a = Capability::generate().unwrap();
        let b = Capability::generate().unwrap();
        assert_eq!(a.expose_hex().len(), 64);
        assert!(Capability::from_hex(a.expose_hex()).is_ok());
        assert_ne!(a.expose_hex(), b.expose_hex());
    }

    #[test]
    fn from_hex_takes_only_64_lowercase_hex_digits() {
        assert!(Capability::from_hex(&"a1".repeat(32)).is_ok());
        for bad in [
            String::new(),
            "a1".repeat(31),
            "a1".repeat(33),
            "A1".repeat(32),
            "g1".repeat(32),
            format!(" {}", "a".repeat(63)),
        ] {
            assert_eq!(
                Capability::from_hex(&bad).unwrap_err(),
                CapabilityError::Malformed
            );
        }
    }

    #[test]
    fn only_the_exact_bearer_value_authorizes() {
        let hex = "0f".repeat(32);
        let cap = Capability::from_hex(&hex).unwrap();
        assert!(cap.authorizes(&headers_with(&[&format!("Bearer {hex}")])));
        for wrong in [
            String::new(),
            hex.clone(),
            format!("bearer {hex}"),
            format!("Bearer  {hex}"),
            format!("Bearer {hex} "),
            format!("Bearer {}", "0e".repeat(32)),
            format!("Bearer {}", &hex[..63]),
        ] {
            assert!(!cap.authorizes(&headers_with(&[&wrong])), "{wrong:?}");
        }
        assert!(!cap.authorizes(&HeaderMap::new()));
        assert!(!cap.authorizes(&headers_with(&["Bearer wrong", &format!("Bearer {hex}")])));
    }

    #[test]
    fn debug_never_shows_the_value() {
        let hex = "ab".repeat(32);
        let cap = Capability::from_hex(&hex).unwrap();
        assert!(!format!("{cap:?}").contains(&hex));
    }

    #[test]
    fn every_door_sentence_names_the_capability() {
        for door in [
            Door::Exchange,
            Door::ManagerServiceAuthority,
            Door::VerifyEnrollment,
            Door::InteractiveRetire,
            Door::ManagedRetire,
        ] {
            assert!(missing_capability(door).starts_with("missing/invalid exchange capability - "));
        }
        assert!(missing_capability(Door::Exchange).contains("auth-service.json"));
    }
}
