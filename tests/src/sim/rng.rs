//! The simulator's only source of randomness: SplitMix64, seeded per run, so a seed replays a
//! whole history bit for bit (no `rand`, no global state, no clock).

/// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state word, full period, good enough
/// statistics for scheduling decisions, and trivially reproducible.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0). The modulo bias is irrelevant at these sizes.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below_u32(&mut self, n: u32) -> u32 {
        u32::try_from(self.below(u64::from(n))).unwrap_or(0)
    }

    /// Uniform index into a collection of `len` items (0 when empty).
    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).unwrap_or(0)
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }

    /// A uniform pick; `None` from an empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.index(items.len()))
    }

    /// An index drawn in proportion to `weights`; `None` when every weight is 0.
    pub fn weighted(&mut self, weights: &[u32]) -> Option<usize> {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut roll = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if roll < u64::from(w) {
                return Some(i);
            }
            roll -= u64::from(w);
        }
        None
    }

    /// 20 bytes of entropy (op ids).
    pub fn entropy20(&mut self) -> [u8; 20] {
        let mut out = [0u8; 20];
        for chunk in out.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            for (slot, byte) in chunk.iter_mut().zip(word) {
                *slot = byte;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_replays_the_same_stream() {
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        let xs: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(SplitMix64::new(8).next_u64(), xs[0]);
    }

    #[test]
    fn weighted_never_picks_a_zero_weight() {
        let mut r = SplitMix64::new(1);
        for _ in 0..1000 {
            assert_ne!(r.weighted(&[3, 0, 5]), Some(1));
        }
        assert_eq!(r.weighted(&[0, 0]), None);
    }
}
