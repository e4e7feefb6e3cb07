//! A small deterministic PRNG (SplitMix64): the same seed gives the same
//! messages, so every failure replays.

/// Environment variable that seeds the fuzzer (decimal or 0x-hex).
pub const SEED_ENV: &str = "VHOST_MPATH_FUZZ_SEED";
/// The seed when none is given: CI runs the same sequences every time.
pub const DEFAULT_SEED: u64 = 0x5eed_0044;

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The seed from [`SEED_ENV`], else [`DEFAULT_SEED`].
    pub fn seed_from_env() -> u64 {
        let Ok(s) = std::env::var(SEED_ENV) else {
            return DEFAULT_SEED;
        };
        let s = s.trim();
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        parsed.unwrap_or_else(|_| panic!("{SEED_ENV}={s}: not a number"))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// A value a fuzzer likes: 0, 1, a power of two, all ones, near a
    /// boundary, or anything.
    pub fn edgy_u64(&mut self) -> u64 {
        match self.below(8) {
            0 => 0,
            1 => 1,
            2 => 1 << self.below(64),
            3 => u64::MAX - self.below(4),
            4 => (1 << self.below(64)) - 1,
            5 => self.below(1 << 16),
            _ => self.next_u64(),
        }
    }
}
