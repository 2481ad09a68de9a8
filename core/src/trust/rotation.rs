//! The operator's rotation of a space's bearer-issuer key (`cotal-authd issuer rotate|prune`,
//! reference §10.2) as sentences and one check: when a prune may cut the keys a rotation left
//! published. A key stops being needed `retention` seconds after it stopped signing (one JWKS
//! cache lifetime plus the longest bearer, the bearer codec's `KEY_RETENTION_SECS`), so a prune
//! before then would refuse bearers that are still live; `--force` does that on purpose.

use crate::actors::row::rfc3339_secs;
use crate::names::SpaceName;

use super::{IssuerKey, IssuerKeys};

/// `issuer rotate`'s sentence at `now`: `rotated`'s active key signs, every other key stays
/// published and accepted, and the prune may run `retention` seconds later.
pub fn rotated(space: &SpaceName, rotated: &IssuerKeys, now: u64, retention: u64) -> String {
    let previous: Vec<&str> = rotated.published().map(IssuerKey::kid).collect();
    format!(
        "rotated the bearer issuer of space {space}: key {} signs from now on; {} stay \
         published and accepted ({}); prune them with `cotal-authd issuer prune --space {space}` \
         from {} on (a running plane adopts the new key within seconds)",
        rotated.active().kid(),
        previous.len(),
        previous.join(", "),
        rfc3339_secs(now.saturating_add(retention))
    )
}

/// The kids a prune of `keys` would cut: every published key but the signer.
fn cut(keys: &IssuerKeys) -> Vec<&str> {
    keys.published().map(IssuerKey::kid).collect()
}

/// `issuer prune` of `keys` that publish only their signer: nothing to prune, said once.
pub fn nothing_to_prune(space: &SpaceName, keys: &IssuerKeys) -> Option<String> {
    cut(keys).is_empty().then(|| {
        format!(
            "the bearer issuer of space {space} publishes only its signing key {}; nothing to \
             prune",
            keys.active().kid()
        )
    })
}

/// An unforced prune at `now` of keys last rotated at `rotated_at`: refused until no bearer a
/// cut key signed can still be live (`retention` seconds after the rotation).
pub fn may_prune(
    keys: &IssuerKeys,
    now: u64,
    rotated_at: u64,
    retention: u64,
) -> Result<(), String> {
    let safe_from = rotated_at.saturating_add(retention);
    if now < safe_from {
        return Err(format!(
            "a bearer signed by {} may still be live until {} ({retention} s after the last \
             rotation); prune from then on, or pass --force to refuse those bearers now",
            cut(keys).join(", "),
            rfc3339_secs(safe_from)
        ));
    }
    Ok(())
}

/// `issuer prune`'s sentence once `keys` were pruned to their signer.
pub fn pruned(space: &SpaceName, keys: &IssuerKeys) -> String {
    format!(
        "pruned {} from the bearer issuer of space {space}: only {} is published and accepted \
         (a running plane adopts it within seconds)",
        cut(keys).join(", "),
        keys.active().kid()
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// 2026-12-05T03:33:30Z.
    const NOW: u64 = 1_796_441_610;

    fn key(byte: u8) -> IssuerKey {
        IssuerKey::from_seed([byte; 32]).unwrap()
    }

    #[test]
    fn a_rotation_and_a_prune_say_which_keys_sign_and_stay() {
        let space = SpaceName::parse("demo").unwrap();
        let one = IssuerKeys::new(&space, key(1));
        assert_eq!(
            nothing_to_prune(&space, &one).unwrap(),
            format!(
                "the bearer issuer of space demo publishes only its signing key {}; nothing to \
                 prune",
                key(1).kid()
            )
        );
        let two = one.rotated(key(2)).unwrap();
        assert_eq!(nothing_to_prune(&space, &two), None);
        assert_eq!(
            rotated(&space, &two, NOW, 1200),
            format!(
                "rotated the bearer issuer of space demo: key {} signs from now on; 1 stay \
                 published and accepted ({}); prune them with `cotal-authd issuer prune --space \
                 demo` from 2026-12-05T03:53:30Z on (a running plane adopts the new key within \
                 seconds)",
                key(2).kid(),
                key(1).kid()
            )
        );
        assert_eq!(
            pruned(&space, &two),
            format!(
                "pruned {} from the bearer issuer of space demo: only {} is published and \
                 accepted (a running plane adopts it within seconds)",
                key(1).kid(),
                key(2).kid()
            )
        );
    }

    /// A prune waits out the retention after the last rotation: a bearer a cut key signed
    /// may be live until then.
    #[test]
    fn an_unforced_prune_waits_out_the_retention() {
        let space = SpaceName::parse("demo").unwrap();
        let two = IssuerKeys::new(&space, key(1)).rotated(key(2)).unwrap();
        assert_eq!(
            may_prune(&two, NOW + 1199, NOW, 1200).unwrap_err(),
            format!(
                "a bearer signed by {} may still be live until 2026-12-05T03:53:30Z (1200 s after \
                 the last rotation); prune from then on, or pass --force to refuse those bearers \
                 now",
                key(1).kid()
            )
        );
        assert!(may_prune(&two, NOW + 1200, NOW, 1200).is_ok());
        assert!(may_prune(&two, NOW, u64::MAX, 1200).is_err());
    }
}
