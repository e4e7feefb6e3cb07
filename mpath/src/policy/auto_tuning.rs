//! Every threshold of `auto` (its model, the trial, the
//! workers' sums) in one place. Ratios, shares and depths are in per-mille
//! (‰: 1000 is one, 1300 is 1.3 times, a depth of 1500 is 1.5 requests);
//! times are in ns; counts are counts. Each line says what the value trades.

use crate::time::{Nanos, NANOS_PER_SEC};

const MS: Nanos = 1_000_000;

/// One per-mille: the unit of every ratio below.
pub(crate) const ONE: u64 = 1000;

/// The struct and its one value, each field beside its value and doc.
macro_rules! tuning {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $value:expr,)*) => {
        #[derive(Clone, Copy, Debug)]
        pub(crate) struct Tuning {
            $($(#[$doc])* pub $name: $ty,)*
        }

        pub(crate) const TUNING: Tuning = Tuning { $($name: $value,)* };
    };
}

tuning! {
    // Windows and samples.
    /// A window closes after this many completions: fewer is noisier, more sees a change later.
    window_samples: u64 = 16,
    /// ... and no sooner than this: a shorter window holds a burst, not the path.
    window_min: Nanos = 5 * MS,
    /// ... and at the latest this: a path with little I/O is still learned.
    window_max: Nanos = 50 * MS,
    /// Samples over this are ignored: a stuck request says nothing of the path's speed.
    max_sample: Nanos = NANOS_PER_SEC,
    /// The least size a request costs (flushes too): zero bytes would be free.
    min_cost: u64 = 512,

    // Choosing a path.
    /// An unmeasured path takes this many requests at a time: more learns faster, risks more.
    probe_depth: u64 = 4,
    /// An idle path gets a request this often: sooner notices a path that sped up, costs more.
    probe_interval: Nanos = 100 * MS,
    /// ... or after this times its `T0` over the load's depth: a probe costs the load 1/100.
    probe_gap: u64 = 100_000,
    /// `M`, the times a wait counts, per request in flight: more trades latency for throughput.
    wait_per_request: u64 = 2000,
    /// ... up to this: bounds the latency given up for throughput.
    wait_max: u64 = 16_000,
    /// `a` at least: what a small request adds to the wait of large ones behind it.
    min_ahead_share: u64 = 500,
    /// The fill charge, of `T0`: near-equal paths share rather than fill one to a guessed knee.
    fill_charge: u64 = 250,
    /// Paths within this of the least cost and its `T0` are equals: the model is not that exact.
    tie: u64 = 125,

    // Learning from a closed window.
    /// A mean latency over `T0` by this (with `queued_depth` in flight) queued on the link.
    queued_latency: u64 = 1300,
    /// ... with more requests in flight than this (one at a time nothing queues).
    queued_depth: u64 = 1300,
    /// `B` and `L` move this share of the way to a window's evidence: faster, noisier.
    step: u64 = 500,
    /// ... this share towards the headroom floor or an idle sample: evidence of a bound only.
    slow_step: u64 = 250,
    /// Without queueing `B` is at least the delivered rate times this.
    headroom: u64 = 1500,
    /// Loaded to the knee (at least this many in flight) without queueing: `B` was too low ...
    knee_depth: u64 = 1500,
    /// ... and is multiplied by this: finds a fast link in few windows, may overshoot.
    knee_raise: u64 = 2000,
    /// First window, one at a time: the link believed this much faster than delivered.
    alone_headroom: u64 = 8000,
    /// First window: the least latency under this share of the mean, overlapping: a queue.
    first_spread: u64 = 600,
    /// ... `L` then the least latency less a transfer, at least this share of it.
    first_min_base: u64 = 250,
    /// A flat window carries this much more load than the last one ...
    flat_load: u64 = 1200,
    /// ... at no more than this share of its latency.
    flat_latency: u64 = 1050,
    /// From this depth load is counted in bytes (what a link's queue grows with), else requests.
    flat_by_bytes: u64 = 1500,
    /// From this depth a flat window's `L` is its latency less the modelled wait ...
    deep: u64 = 8000,
    /// ... rising to this share of `L` at most, unless its least latency is further.
    deep_rise: u64 = 1100,
    /// A longer path, not a slower link: from this depth where the latency
    /// level began, ...
    longer_depth: u64 = 12_000,
    /// ... this much less load than there ...
    longer_load: u64 = 1200,
    /// ... with every window's mean since within these shares of its.
    longer_low: u64 = 950,
    longer_high: u64 = 1050,
    /// Silent this share of what its requests should take: an answer after it is late.
    overdue: u64 = 3000,
    /// A late answer is remembered until one comes in under this share of it.
    late_clear: u64 = 2000,
    /// A sample sent within this of the request to an idle path is that request.
    solo_tolerance: Nanos = 20_000,
    /// An idle sample under this share of `L` sets `L` at once (else `slow_step`).
    solo_at_once: u64 = 500,
    /// One over this share of `L` moves it only after another (the lesser): a lone one may be a
    /// tail or a stall; a change of the path is seen one sample later.
    rise_confirm: u64 = 4000,
    /// An idle sample over this share of what its path's rest promised: it does not refill.
    rest_broken: u64 = 2000,
    /// *Refill*: an idle answer over this share of the rested one found the bucket dry: lower
    /// takes jitter for a bucket, higher misses a shallow one.
    refill_slow: u64 = 1500,
    /// ... and the last dry answer's refill predicts it within this share (an answer over this
    /// share of what `dry` promised refutes it): wider takes two tail or stall samples for a
    /// bucket and a longer path for one, narrower misses a bucket under jitter.
    refill_match: u64 = 1250,

    // The size fit (latency on request size, rule 1).
    /// Sizes must spread by this share of their mean (standard deviation).
    fit_spread: u64 = 250,
    /// The slope counts at this many standard errors above zero: fewer is noisier.
    fit_sigmas: u64 = 3000,

    // The trial (`auto_trial`).
    /// Completions an epoch needs at least: longer measures better, trials cost more.
    epoch_ios: u64 = 96,
    /// ... and this many times the requests in flight (rounds to settle into the mode).
    epoch_depths: u64 = 4,
    /// An epoch that has run this long closes with `epoch_min_ios` completions.
    epoch_time: Nanos = 100 * MS,
    epoch_min_ios: u64 = 24,
    /// A trial wins by this share (the even split) or loses by no more (the model).
    margin: u64 = 30,
    /// The first trial comes after this many epochs.
    first_trial: u32 = 2,
    /// Most epochs between two trials: what a mode that keeps losing costs, one in this many.
    max_backoff: u32 = 64,
    /// A rate under this share of another (or over its inverse) has moved: the incumbent's rate
    /// is then its last epoch's, and an even split's that fell this far twice in a row is tried
    /// against the model.
    moved: u64 = 750,
    /// An epoch that ran this share of the incumbent's last epoch ...
    losing_after: u64 = 500,
    /// ... at under this share of its rate has lost.
    losing_rate: u64 = 500,
    /// A doubtful trial (the model expects less) has lost after this share of an epoch ...
    doubtful_after: u64 = 250,
    /// ... at under this share of the incumbent's rate.
    doubtful_rate: u64 = 800,
    /// After a switch an epoch starts at the latest this long after it.
    max_skip: Nanos = NANOS_PER_SEC,

    // The workers' own sums (`auto_local`).
    /// Completions a worker sums before it adds them to the shared ones: fewer locked adds.
    flush_every: u64 = 32,
    /// ... or once its oldest is this old, so that they reach the window they belong to.
    flush_age: Nanos = MS,
}

const _: () = assert!(TUNING.window_min <= TUNING.window_max);

/// `x` times `pm` per-mille (exact: `x * pm / 1000`, saturating).
#[inline]
pub(crate) fn pm(x: u64, pm: u64) -> u64 {
    super::auto::ratio(x, pm, ONE)
}

/// A per-mille value as a fraction (exact: the nearest `f64`, as a literal).
pub(crate) fn frac(pm: u64) -> f64 {
    pm as f64 / ONE as f64
}

/// `a` is over `pm` per-mille of `b` (`a * 1000 > b * pm`, without overflow).
#[inline]
pub(crate) fn over(a: u64, b: u64, pm: u64) -> bool {
    u128::from(a) * u128::from(ONE) > u128::from(b) * u128::from(pm)
}

/// `a` is at least `pm` per-mille of `b`.
#[inline]
pub(crate) fn at_least(a: u64, b: u64, pm: u64) -> bool {
    u128::from(a) * u128::from(ONE) >= u128::from(b) * u128::from(pm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_mille_arithmetic_is_exact() {
        assert_eq!(pm(7, 500), 3);
        assert_eq!(pm(u64::MAX, 2000), u64::MAX);
        assert_eq!(frac(150), 0.15);
        assert_eq!(frac(875), 0.875);
        assert!(over(13, 10, 1299) && !over(13, 10, 1300));
        assert!(at_least(13, 10, 1300) && !at_least(13, 10, 1301));
        assert!(over(u64::MAX, u64::MAX, 999));
    }
}
