//! A least-squares line of a path's mean latency on the bytes it held in
//! flight, over its recent windows (`auto`, rule 3): on a link that
//! queues, the latency grows with the load and the line's intercept is the
//! path's own latency; a jittery or far path shows no such slope. A single
//! window cannot tell a long path from a queue on the link, and windows of
//! more load at no more latency come by chance where windows are short and
//! noisy: the line caps what such a window may raise `L` to.
//!
//! Windows decay by `load_decay` each; the line needs `load_windows` of
//! them, loads spread by `load_spread` of their mean, and a slope that
//! explains `load_queue_share` of the mean latency. A window `load_shift`
//! over the line starts the fit afresh: the path changed.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::auto_tuning::{frac, TUNING as T};

/// Decayed sums of (load, latency) over windows: weight, x, y, xx, xy.
#[derive(Debug, Default)]
pub(crate) struct LoadFit {
    sums: [AtomicU64; 5],
}

impl LoadFit {
    /// Adds a window of mean latency `latency` (ns) with `load` bytes in
    /// flight, and returns the line's intercept (ns) where the latency
    /// grows with the load (a queue), else `None`.
    pub fn add(&self, load: u64, latency: u64) -> Option<u64> {
        let (x, y) = (load as f64, latency as f64);
        if let Some(line) = self.line(0.0) {
            if y > frac(T.load_shift) * (line.a + line.b * x).max(0.0) {
                self.sums.iter().for_each(|s| s.store(0, Relaxed));
            }
        }
        let new = [1.0, x, y, x * x, x * y];
        for (s, v) in self.sums.iter().zip(new) {
            let old = f64::from_bits(s.load(Relaxed));
            s.store((old * frac(T.load_decay) + v).to_bits(), Relaxed);
        }
        let line = self.line(frac(T.load_spread))?;
        let queue = line.b > 0.0 && line.b * line.mean_x >= frac(T.load_queue_share) * line.mean_y;
        queue.then_some(line.a.max(0.0) as u64)
    }

    /// The line, where there are enough windows of loads that vary by
    /// `spread` of their mean (any spread for the shift test).
    fn line(&self, spread: f64) -> Option<Line> {
        let [n, sx, sy, sxx, sxy] =
            [0, 1, 2, 3, 4].map(|i| f64::from_bits(self.sums[i].load(Relaxed)));
        if n < T.load_windows as f64 {
            return None;
        }
        let (mean_x, mean_y) = (sx / n, sy / n);
        let var = sxx / n - mean_x * mean_x;
        if var <= 0.0 || var <= (spread * mean_x).powi(2) {
            return None;
        }
        let b = (sxy / n - mean_x * mean_y) / var;
        Some(Line {
            a: mean_y - b * mean_x,
            b,
            mean_x,
            mean_y,
        })
    }
}

/// `y = a + b x` through the windows' means.
struct Line {
    a: f64,
    b: f64,
    mean_x: f64,
    mean_y: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Latency `base + load x ns_per_byte` at loads 1..=8 units of 128k.
    fn queueing(f: &LoadFit, base: u64, ns_per_byte: u64) -> Option<u64> {
        let mut last = None;
        for k in [1u64, 5, 2, 8, 3, 7, 4, 6] {
            let load = k * 131_072;
            last = f.add(load, base + load * ns_per_byte);
        }
        last
    }

    #[test]
    fn a_queue_on_the_link_gives_the_paths_own_latency() {
        let f = LoadFit::default();
        let a = queueing(&f, 400_000, 3).expect("a queue"); // ~318 MiB/s
        assert!((390_000..=410_000).contains(&a), "{a}");
    }

    #[test]
    fn a_far_or_jittery_path_shows_no_queue() {
        let f = LoadFit::default();
        for (i, k) in [1u64, 5, 2, 8, 3, 7, 4, 6].into_iter().enumerate() {
            // 700 us whatever the load, +-3%.
            let latency = 700_000 + (i as u64 % 3) * 20_000;
            assert_eq!(f.add(k * 131_072, latency), None);
        }
    }

    #[test]
    fn loads_that_do_not_vary_give_no_line() {
        let f = LoadFit::default();
        for _ in 0..8 {
            assert_eq!(f.add(1 << 20, 2_000_000), None);
        }
    }

    #[test]
    fn a_path_that_went_further_away_starts_afresh() {
        let f = LoadFit::default();
        queueing(&f, 400_000, 3).expect("a queue");
        // 2 ms further and a slower link: the first window far over the
        // line drops the old ones, and the line is the new path's (mixed
        // with the old, its intercept would hold `L` down).
        let a = queueing(&f, 2_400_000, 10).expect("a queue");
        assert!((2_300_000..=2_500_000).contains(&a), "{a}");
    }
}
