//! Deterministic data patterns, so that a read can be checked against what was written.

/// Bytes derived from `seed` and the absolute disk offset of each byte: the same
/// `(seed, offset)` always gives the same data, whatever the request boundaries.
pub fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| byte_at(seed, offset + i)).collect()
}

fn byte_at(seed: u64, pos: u64) -> u8 {
    // splitmix64 over the 8-byte word, then pick the byte: cheap and not periodic.
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(pos / 8)
        .wrapping_add(0x632b_e59b_d9b4_e019);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> ((pos % 8) * 8)) as u8
}

/// A tiny xorshift generator for random offsets (no external crate needed).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is negligible for our ranges.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_position_based() {
        let whole = pattern(7, 1000, 64);
        assert_eq!(&whole[10..30], &pattern(7, 1010, 20)[..]);
        assert_ne!(pattern(7, 0, 512), pattern(8, 0, 512));
        assert!(pattern(7, 0, 4096).iter().any(|&b| b != 0));
    }
}
