//! Heavy-tailed jitter (`tail-alpha`, `tail-us`): every command gets an
//! extra delay drawn from a Pareto type II (Lomax) distribution with shape
//! `tail-alpha` and scale `tail-us`, so most commands get little and a few
//! a lot: P(X > x) = (1 + x / tail-us)^-alpha, mean tail-us / (alpha - 1).
//! Power-law tails of this kind are what "The Tail at Scale" (Dean and
//! Barroso, CACM 2013) and "Tales of the Tail" (Li et al., SoCC 2014) find
//! in shared storage and networks. It holds no channel: a slow command
//! does not delay the next. The simulator's `tail_delay` is the same.

use super::Rng;

#[derive(Debug)]
pub(super) struct Tail {
    alpha: f64,
    scale_ns: f64,
}

impl Tail {
    pub(super) fn new(alpha_milli: u32, scale_us: u64) -> Tail {
        Tail {
            alpha: f64::from(alpha_milli) / 1000.0,
            scale_ns: scale_us as f64 * 1000.0,
        }
    }

    /// One command's extra delay (ns), by inversion of the survival
    /// function: scale x (U^(-1/alpha) - 1), U in (0, 1] floored at 1e-12
    /// (a draw of ~0 would otherwise ask for hours).
    pub(super) fn draw(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit().max(1e-12);
        (self.scale_ns * (u.powf(-1.0 / self.alpha) - 1.0)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_follow_lomax() {
        let t = Tail::new(1500, 100);
        let mut rng = Rng(0);
        let mut d: Vec<u64> = (0..200_000).map(|_| t.draw(&mut rng)).collect();
        d.sort_unstable();
        let q = |p: f64| d[(p * d.len() as f64) as usize] as f64;
        // Quantile: scale x ((1 - p)^(-1/alpha) - 1).
        for p in [0.5, 0.9, 0.99] {
            let want = 100_000.0 * ((1.0f64 - p).powf(-1.0 / 1.5) - 1.0);
            let got = q(p);
            assert!((got / want - 1.0).abs() < 0.05, "p{p}: {got} vs {want}");
        }
        // P(X > 10 x scale) = 11^-1.5, about 2.7%.
        let over = d.iter().filter(|&&x| x > 1_000_000).count() as f64 / d.len() as f64;
        assert!((over - 11f64.powf(-1.5)).abs() < 0.002, "{over}");
    }
}
