//! The wire grammars of manager requests: public nkeys, idempotency tokens, proofs.

use crate::names::str_newtype;

use super::proof::constant_time_eq;

// ---- Wire grammars ---------------------------------------------------------------------------

/// `first` followed by exactly `rest` characters of RFC 4648 base32 (`[A-Z2-7]`): the shape the
/// reference checks for public nkeys (no checksum at this boundary).
fn is_nkey(s: &str, first: u8, rest: usize) -> bool {
    let b = s.as_bytes();
    b.first() == Some(&first)
        && b.len() == rest + 1
        && b.iter()
            .skip(1)
            .all(|&c| matches!(c, b'A'..=b'Z' | b'2'..=b'7'))
}

/// A [`str_newtype`] whose `parse` answers `None` outside the grammar, because each request
/// parser words its own refusal.
macro_rules! wire_string {
    ($(#[$doc:meta])* $name:ident, $valid:expr) => {
        str_newtype! { $(#[$doc])* $name }

        impl $name {
            /// `None` when `s` is outside the grammar.
            pub fn parse(s: &str) -> Option<$name> {
                let valid: fn(&str) -> bool = $valid;
                valid(s).then(|| $name(s.to_owned()))
            }
        }
    };
}

wire_string!(
    /// A public user nkey `^U[A-Z2-7]{55}$`, generated and held by the participant.
    UserKey,
    |s| is_nkey(s, b'U', 55)
);
wire_string!(
    /// A public account nkey `^A[A-Z2-7]{55}$`.
    AccountKey,
    |s| is_nkey(s, b'A', 55)
);
wire_string!(
    /// An idempotency token `^[A-Za-z0-9_-]{22,64}$`.
    RequestId,
    |s| (22..=64).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
);
wire_string!(
    /// A registration proof `^sha256:[0-9a-f]{64}$` (either kind: deterministic or HMAC).
    RegistrationProof,
    |s| s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
);

impl RegistrationProof {
    /// A proof the plane computed: `sha256:` + the lower-hex digest.
    pub(super) fn computed(prefixed: String) -> RegistrationProof {
        debug_assert!(RegistrationProof::parse(&prefixed).is_some());
        RegistrationProof(prefixed)
    }

    /// Whether `self` equals `expected`, in time independent of where they differ: the one
    /// comparison of a presented proof with the one the plane computed.
    pub fn matches(&self, expected: &RegistrationProof) -> bool {
        constant_time_eq(self.0.as_bytes(), expected.0.as_bytes())
    }
}
