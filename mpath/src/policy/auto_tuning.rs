//! Every threshold of `auto` (its model, the trial, the load fit, the
//! workers' sums) in one place. Ratios, shares and depths are in per-mille
//! (‰: 1000 is one, 1300 is 1.3 times, a depth of 1500 is 1.5 requests);
//! times are in ns; counts are counts. Each line says what the value trades.

use crate::time::{Nanos, NANOS_PER_SEC};

const MS: Nanos = 1_000_000;

/// One per-mille: the unit of every ratio below.
pub(crate) const ONE: u64 = 1000;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    // Windows and samples.
    /// A window closes after this many completions: fewer is noisier, more is slower to see a change.
    pub window_samples: u64,
    /// ... and no sooner than this: a short window holds a burst, not the path.
    pub window_min: Nanos,
    /// ... and at the latest this: a path with little I/O is still learned.
    pub window_max: Nanos,
    /// Samples over this are ignored: a stuck request says nothing of the path's speed.
    pub max_sample: Nanos,
    /// The least size a request costs (flushes too): zero bytes would be free.
    pub min_cost: u64,

    // Choosing a path.
    /// An unmeasured path takes this many requests at a time: more learns faster, risks more on a bad path.
    pub probe_depth: u64,
    /// An idle path gets a request this often at least: sooner notices a path that sped up, costs more.
    pub probe_interval: Nanos,
    /// ... or when one request's latency there is this share of the gap, times the load's depth.
    pub probe_gap: u64,
    /// A wait counts this many times per request in flight (the requests behind that share it).
    pub wait_per_request: u64,
    /// ... up to this: bounds the latency given up for throughput.
    pub wait_max: u64,
    /// A small request behind large ones counts at least this share of the wait behind it.
    pub min_ahead_share: u64,
    /// The charge for filling a path towards its knee, of its unloaded latency: spreads near-equal paths.
    pub fill_charge: u64,
    /// Paths within this share of the least cost (and unloaded latency) are equals: an even split among them.
    pub tie: u64,
    /// Every this-many-th window is offered more bandwidth than believed, so that the load varies ...
    pub offer_period: u64,
    /// ... by this factor: more finds a faster link sooner, and queues more when it is not.
    pub offer: u64,

    // Learning from a closed window.
    /// Mean latency over the unloaded latency by this, at more than `queued_depth`: the link queued.
    pub queued_latency: u64,
    /// ... with more requests in flight than this.
    pub queued_depth: u64,
    /// Bandwidth moves this share of the way to a window's evidence (size fit, queued rate, flat `L`).
    pub step: u64,
    /// ... and this share towards the headroom floor, or a clean idle sample's latency.
    pub slow_step: u64,
    /// Without queueing, the bandwidth is at least the delivered rate times this.
    pub headroom: u64,
    /// Loaded to the model's knee without queueing (this many requests in flight): the bandwidth doubles.
    pub knee_depth: u64,
    /// ... by this factor.
    pub knee_raise: u64,
    /// First window, one request at a time: the link is believed this much faster than delivered.
    pub alone_headroom: u64,
    /// First window: least latency under this share of the mean, with requests overlapping, is a queue.
    pub first_spread: u64,
    /// ... then `L` is the least latency less a transfer, but at least this share of it.
    pub first_min_base: u64,
    /// A flat window carries this much more load than the last one ...
    pub flat_load: u64,
    /// ... at no more than this share of its latency.
    pub flat_latency: u64,
    /// From this depth a flat window's load is counted in bytes (what a link's queue grows with).
    pub flat_by_bytes: u64,
    /// From this depth a flat window's `L` is its latency less the modelled wait ...
    pub deep: u64,
    /// ... rising to this share of `L` at most, unless the window's least latency is above it.
    pub deep_rise: u64,
    /// A longer path, not a slower link: from this depth, ...
    pub longer_depth: u64,
    /// ... this much less load than a window before ...
    pub longer_load: u64,
    /// ... at a latency within these shares of that window's.
    pub longer_low: u64,
    pub longer_high: u64,
    /// The deepest window kept for that comparison has this many completions at least ...
    pub deepest_count: u64,
    /// ... and is replaced after this many windows.
    pub deepest_windows: u64,
    /// Silent for this share of the time its requests should take: the path is slower than believed.
    pub overdue: u64,
    /// A late answer is remembered until one comes in under this share of it.
    pub late_clear: u64,
    /// A sample sent within this of the request to an idle path is that request (a clean latency).
    pub solo_tolerance: Nanos,
    /// A clean idle sample under this share of `L` sets `L` at once (else `slow_step`).
    pub solo_at_once: u64,

    // The size fit (latency on request size).
    /// Sizes must spread by this share of their mean (standard deviation).
    pub fit_spread: u64,
    /// The slope counts when it is this many standard errors (‰) above zero.
    pub fit_sigmas: u64,

    // The load fit (mean latency on bytes in flight, `auto_load_fit`).
    /// Each window weighs this share of the next one: more remembers longer, follows a change slower.
    pub load_decay: u64,
    /// Windows (decayed) the line needs.
    pub load_windows: u64,
    /// Loads must spread by this share of their mean for a slope.
    pub load_spread: u64,
    /// The slope must explain this share of the mean latency to be a queue.
    pub load_queue_share: u64,
    /// A window this far over the line starts the fit afresh (the path changed).
    pub load_shift: u64,

    // The trial (`auto_trial`).
    /// Completions an epoch needs at least ...
    pub epoch_ios: u64,
    /// ... and this many times the requests in flight.
    pub epoch_depths: u64,
    /// An epoch that has run this long closes with `epoch_min_ios` completions.
    pub epoch_time: Nanos,
    pub epoch_min_ios: u64,
    /// A trial must beat the incumbent by this share (the even split), or lose by no more (the model).
    pub margin: u64,
    /// The first trial comes after this many epochs.
    pub first_trial: u32,
    /// After the incumbent's rate moved, the next trial comes after at most this many epochs.
    pub moved_trial: u32,
    /// Most epochs between two trials: what a mode that keeps losing costs.
    pub max_backoff: u32,
    /// A rate under this share of another (or over its inverse) has moved.
    pub moved: u64,
    /// A trial lasts at most this times the incumbent's last epoch.
    pub trial_span: u64,
    /// A trial that ran this share of an epoch ...
    pub losing_after: u64,
    /// ... at under this share of the incumbent's rate has lost.
    pub losing_rate: u64,
    /// A doubtful trial (the model expects less) has lost after this share of an epoch ...
    pub doubtful_after: u64,
    /// ... at under this share of the incumbent's rate.
    pub doubtful_rate: u64,
    /// After a switch, an epoch starts at the latest this long after it.
    pub max_skip: Nanos,

    // The workers' own sums (`auto_local`).
    /// Completions a worker sums before it adds them to the shared sums: fewer locked adds, later sums.
    pub flush_every: u64,
    /// ... or once its oldest is this old.
    pub flush_age: Nanos,
}

pub(crate) const TUNING: Tuning = Tuning {
    window_samples: 16,
    window_min: 5 * MS,
    window_max: 50 * MS,
    max_sample: NANOS_PER_SEC,
    min_cost: 512,

    probe_depth: 4,
    probe_interval: 100 * MS,
    probe_gap: 100_000,
    wait_per_request: 2000,
    wait_max: 16_000,
    min_ahead_share: 500,
    fill_charge: 250,
    tie: 125,
    offer_period: 4,
    offer: 1250,

    queued_latency: 1300,
    queued_depth: 1300,
    step: 500,
    slow_step: 250,
    headroom: 1500,
    knee_depth: 1500,
    knee_raise: 2000,
    alone_headroom: 8000,
    first_spread: 600,
    first_min_base: 250,
    flat_load: 1200,
    flat_latency: 1050,
    flat_by_bytes: 1500,
    deep: 8000,
    deep_rise: 1100,
    longer_depth: 12_000,
    longer_load: 1200,
    longer_low: 950,
    longer_high: 1050,
    deepest_count: 64,
    deepest_windows: 8,
    overdue: 3000,
    late_clear: 2000,
    solo_tolerance: 20_000,
    solo_at_once: 500,

    fit_spread: 250,
    fit_sigmas: 3000,

    load_decay: 875,
    load_windows: 4,
    load_spread: 150,
    load_queue_share: 500,
    load_shift: 1500,

    epoch_ios: 96,
    epoch_depths: 4,
    epoch_time: 100 * MS,
    epoch_min_ios: 24,
    margin: 30,
    first_trial: 2,
    moved_trial: 2,
    max_backoff: 64,
    moved: 750,
    trial_span: 2000,
    losing_after: 500,
    losing_rate: 500,
    doubtful_after: 250,
    doubtful_rate: 800,
    max_skip: NANOS_PER_SEC,

    flush_every: 32,
    flush_age: MS,
};

const _: () = assert!(TUNING.window_min <= TUNING.window_max);

/// `x` times `pm` per-mille (exact: `x * pm / 1000`, saturating).
#[inline]
pub(crate) fn pm(x: u64, pm: u64) -> u64 {
    super::auto::ratio(x, pm, ONE)
}

/// `x` times `pm` per-mille, divided first (`x / 4 * 5` for 1250 ‰): what
/// the offer to the load has always computed.
pub(crate) fn pm_coarse(x: u64, pm: u64) -> u64 {
    let g = gcd(ONE, pm);
    x / (ONE / g) * (pm / g)
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

const fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_mille_arithmetic_is_exact() {
        assert_eq!(pm(7, 500), 3);
        assert_eq!(pm(u64::MAX, 2000), u64::MAX);
        assert_eq!(pm_coarse(7, 1250), 5); // 7 / 4 * 5
        assert_eq!(frac(150), 0.15);
        assert_eq!(frac(875), 0.875);
        assert!(over(13, 10, 1299) && !over(13, 10, 1300));
        assert!(at_least(13, 10, 1300) && !at_least(13, 10, 1301));
        assert!(over(u64::MAX, u64::MAX, 999));
    }
}
