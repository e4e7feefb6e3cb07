//! `auto` (ours): each request goes where it adds the most to the
//! throughput of the whole load; where throughput ties, where it completes
//! first. The model below is the whole policy; every threshold named in it
//! is a field of `Tuning` (`auto_tuning`), which says what it trades.
//!
//! **Paths.** A path is a pipe: a fixed latency `L` and a link of bandwidth
//! `B` that moves the bytes of its requests one after the other. With `W`
//! bytes in flight a request of `s` bytes completes after
//!
//! ```text
//! T0 = L + s / B                  (unloaded)
//! E  = max(T0, (W + s) / B)       (it waits once W passes B x L: the knee)
//! ```
//!
//! **Choosing.** A request goes to the path of least
//!
//! ```text
//! cost = T0 + w x (1 + (M - 1) x a) + min((W + s) / B, T0) x fill_charge
//! w = E - T0      M = min(wait_max, wait_per_request x (requests in flight + 1))
//! a = s / (mean size of the requests ahead), at least min_ahead_share
//! ```
//!
//! its own latency, plus its wait counted for itself and for the requests
//! that can queue behind it (no more than the load keeps in flight; a small
//! request behind large ones adds less than it meets), plus a charge for
//! filling the path towards its knee. Below their knees paths fill in order
//! of `T0`; a path with added latency takes what a saturated path would
//! only queue; saturated paths balance their waits. Among the paths within
//! `tie` of the least cost and of its `T0`, the fewest bytes in flight wins.
//! Before the cost:
//! - *unmeasured*: a path without a model takes up to `probe_depth`
//!   requests at a time;
//! - *probe*: an idle path takes one request once `probe_interval` has
//!   passed since its last, or longer where one request's latency there is
//!   more than `1 / probe_gap` of the interval times the load's depth;
//! - *rest*: the cost takes an idle path's `L` less the time since its last
//!   answer, down to what its last idle request sent after resting that
//!   long found, or over `rest_broken` times what the rest promised (`L`
//!   then): a token bucket refills at rest, a long path does not;
//! - *refill*: at QD1 (nothing in flight) a path with a `dry` answer is
//!   priced by its rest instead: its `L` is `dry` less the time since its
//!   last answer, down to `fresh`, less the request's transfer time: at
//!   QD1 a bucket's rest is all that prices it.
//!
//! **Learning from each completion** (samples over `max_sample` ignored):
//! - *idle sample*: a request sent to an idle path met nothing: `L` moves
//!   `slow_step` towards its latency less its transfer time, at once where
//!   that is under `solo_at_once` of `L`; a sample over `rise_confirm` of
//!   `L` only where the idle sample before it was too (towards the lesser
//!   of the two): a lone one is a heavy tail or a stall, not the path.
//! - *late answer*: an answer after a silence of `overdue` times what the
//!   bytes in flight should take (or the last window's mean) sets `L` at
//!   once to `1/overdue` of it, but only where the late answer before it
//!   was not followed by one in time (under `late_clear` of it): a stall
//!   ends, a path that became longer stays late.
//! - *refill*: an idle request's answer (its whole latency) under
//!   `refill_slow` of `fresh` moves `fresh` `slow_step` towards it; one
//!   over it found the path dry, and the answer plus the rest before it is
//!   the path's `dry` (moving `step`) where the last such sum, less this
//!   rest, predicted the answer within `refill_match`. A bucket that answers
//!   at once while it holds a token and after `dry - rest` once empty
//!   agrees with itself; a tail or a stall does not. An answer fast where
//!   `dry` promised a slow one, or over `refill_match` of what it promised
//!   (a path that became long), clears it.
//!
//! A silence is not priced as latency: on a device that stalls, a TCP link
//! that retransmits or a bucket out of tokens, a silence is a pause of the
//! path, not its latency, and a path priced by it was left for good.
//!
//! **Learning from each window** of at least `window_samples` completions
//! and `window_min` (at most `window_max`), with `n` the mean requests in
//! flight while busy and `D` the rate delivered; the rules in order:
//! 1. *size fit*: where request sizes vary, the slope of latency on size is
//!    `1 / B` (a request's own size adds its transfer time; the wait
//!    behind others does not depend on it): `B` moves `step` to it; in a
//!    first window it sets `B`, and `L` from the mean latency.
//! 2. *bootstrap* (first window): `L` is the least latency and
//!    `B = alone_headroom x D` (a long path and a slow link look alike here,
//!    and a link believed too fast is corrected by the next queued window,
//!    one believed too slow never is); unless `n > queued_depth` and the
//!    least latency is under `first_spread` of the mean (latencies spread as
//!    a link serving them one after the other spreads them): then `B = D`
//!    and `L` the least latency less a transfer (at least `first_min_base`
//!    of it).
//! 3. *flat window*: `flat_load` times the last window's load (in bytes
//!    from `flat_by_bytes` requests in flight, else in requests) at no more
//!    than `flat_latency` of its latency is not a queue: `L` moves `step` to
//!    the mean less the transfer time; from `deep` requests in flight, to
//!    the mean of each latency less its modelled wait, at most `deep_rise`
//!    of `L` unless the window's least latency is above that.
//! 4. *longer path*: `longer_load` less load than where the latency level
//!    began (the earliest window since which each mean stayed within
//!    `longer_low` to `longer_high` of its mean at no more load; from
//!    `longer_depth` requests in flight there), and over `queued_latency`
//!    of what the model's queue explains: a queue would have shrunk with
//!    the load, however slowly it fell, so this is a longer path, not a
//!    slower link.
//! 5. *queued window*: a mean over `queued_latency` of `T0` with
//!    `n > queued_depth`, neither flat nor longer: `B` moves `step` to `D`.
//! 6. *headroom* (any other window): `B` is at least `headroom x D`
//!    (moving `slow_step` up to it); loaded to the knee (`n >= knee_depth`
//!    and its bytes in flight take `T0` to move) without queueing, `B`
//!    is multiplied by `knee_raise`.
//!
//! **Trial** (`auto_trial`): now and then an epoch is served by an even
//! split (service-time's choice, ties to the first path) and the mode that
//! delivered more bytes per second is kept: the model's estimates can be
//! off.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::auto_local::{EpochSums, WindowSums};
use super::auto_trial::{Boundary, Load, Mode, Trial};
use super::auto_tuning::{at_least, frac, over, pm, ONE, TUNING as T};
use super::service_time::least_service_time;
use super::{indices, Policy, PolicyLocal, SubmitContext};
use crate::engine::IoInfo;
use crate::path::{Path, PathId};
use crate::stats::PolicyEstimates;
use crate::time::{Nanos, NANOS_PER_SEC};

/// 1 TB/s: more than any path.
const MAX_BANDWIDTH: u64 = 1 << 40;

/// What `auto` believes about one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Model {
    /// Bytes per second the link moves (0: not measured yet).
    pub bandwidth: u64,
    /// `L`, ns, without the transfer time.
    pub base: Nanos,
}

impl Model {
    /// `T0`: latency of a request of `bytes` on an idle path.
    pub fn unloaded(&self, bytes: u64) -> Nanos {
        self.base + transfer_time(bytes, self.bandwidth)
    }

    /// `E`: completion of a request of `bytes` behind `in_flight` bytes.
    pub fn completion(&self, in_flight: u64, bytes: u64) -> Nanos {
        self.unloaded(bytes)
            .max(transfer_time(in_flight + bytes, self.bandwidth))
    }

    /// The model's cost of a request of `bytes` behind `requests` holding
    /// `in_flight` bytes, its wait counted `m` times (`M`).
    pub fn cost_with(&self, in_flight: u64, requests: u64, bytes: u64, m: u64) -> Nanos {
        let t0 = self.unloaded(bytes);
        let wait = self.completion(in_flight, bytes) - t0;
        let fill = pm(
            transfer_time(in_flight + bytes, self.bandwidth).min(t0),
            T.fill_charge,
        );
        let behind = match wait {
            0 => 0,
            _ => ratio(
                wait,
                m.saturating_sub(1) * ahead_share(in_flight, requests, bytes),
                ONE,
            ),
        };
        t0.saturating_add(fill)
            .saturating_add(wait)
            .saturating_add(behind)
    }
}

/// `a`: a request's size against the mean size of the `requests` ahead of
/// it (`in_flight` bytes), per-mille, from `min_ahead_share` to one.
fn ahead_share(in_flight: u64, requests: u64, bytes: u64) -> u64 {
    if requests == 0 || in_flight == 0 {
        return ONE;
    }
    ratio(bytes, requests.saturating_mul(ONE), in_flight).clamp(T.min_ahead_share, ONE)
}

/// What a closed window measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Window {
    count: u64,
    /// Mean request size and mean latency.
    size: u64,
    mean: Nanos,
    /// Mean of each latency less its transfer time and modelled wait.
    free: Nanos,
    /// Least latency less transfer time.
    min_base: Nanos,
    /// `D`: bytes per second while busy.
    delivered: u64,
    /// `n`: requests in flight while busy (per-mille), and in bytes.
    load: u64,
    bytes_load: u64,
}

/// The last window's load, bytes in flight and mean latency (rule 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Prev {
    load: u64,
    bytes_load: u64,
    mean: Nanos,
}

/// Rule 1 in a first window: the model the size fit's `bw` gives.
fn size_fit_first(w: &Window, bw: u64) -> Model {
    Model {
        bandwidth: bw.max(1),
        base: w.mean.saturating_sub(transfer_time(w.size, bw)).max(1),
    }
}

/// Rule 2: the model a first window gives.
fn bootstrap(w: &Window) -> Model {
    if w.load > T.queued_depth && !at_least(w.min_base, w.mean, T.first_spread) {
        let base = w
            .min_base
            .saturating_sub(transfer_time(w.size, w.delivered));
        return Model {
            bandwidth: w.delivered.max(1),
            base: base.max(pm(w.min_base, T.first_min_base)).max(1),
        };
    }
    Model {
        bandwidth: pm(w.delivered, T.alone_headroom).max(1),
        base: w.min_base.max(1),
    }
}

/// Rule 3: more load than the last window at no more latency.
fn flat(w: &Window, prev: &Prev) -> bool {
    let (now, then) = if w.load >= T.flat_by_bytes {
        (w.bytes_load, prev.bytes_load)
    } else {
        (w.load, prev.load)
    };
    prev.load > 0 && at_least(now, then, T.flat_load) && !over(w.mean, prev.mean, T.flat_latency)
}

/// Rule 3: where a flat window takes `L`.
fn flat_base(w: &Window, m: &Model) -> Nanos {
    if w.load >= T.deep {
        w.free.min(w.min_base.max(pm(m.base, T.deep_rise)))
    } else {
        w.mean.saturating_sub(m.unloaded(w.size) - m.base)
    }
}

/// Rule 4: from `level_load`, the load where the window's latency level
/// began (`Learned::level`), `longer_load` less load, well over what the
/// model's queue explains.
fn longer(w: &Window, m: &Model, level_load: u64) -> bool {
    let explained = m
        .unloaded(w.size)
        .max(transfer_time(w.bytes_load, m.bandwidth));
    level_load >= T.longer_depth
        && at_least(level_load, w.load, T.longer_load)
        && over(w.mean, explained, T.queued_latency)
}

/// Rule 5: the link queued.
fn queued(w: &Window, m: &Model) -> bool {
    over(w.mean, m.unloaded(w.size), T.queued_latency) && w.load > T.queued_depth
}

/// Rule 6: the bandwidth a window without queueing leaves: `Ok` at once,
/// `Err` to move towards; `None`: no change.
fn headroom(w: &Window, m: &Model) -> Option<Result<u64, u64>> {
    let floor = pm(w.delivered, T.headroom);
    if w.load >= T.knee_depth && transfer_time(w.bytes_load, m.bandwidth) >= m.unloaded(w.size) {
        let raised = pm(m.bandwidth, T.knee_raise).min(MAX_BANDWIDTH);
        return Some(Ok(raised.max(floor)));
    }
    (floor > m.bandwidth).then_some(Err(floor))
}

#[derive(Debug, Default)]
struct Learned {
    window_start: AtomicU64,
    busy_at_start: AtomicU64,
    /// The window's sums (`WindowSums`; `fit`: `SizeSums`).
    bytes: AtomicU64,
    count: AtomicU64,
    latency_sum: AtomicU64,
    free_sum: AtomicU64,
    fit: SizeSums,
    min_base: AtomicU64,
    /// The model (`bandwidth` 0: none yet).
    bandwidth: AtomicU64,
    base: AtomicU64,
    last_used: AtomicU64,
    /// The last window (`Prev`).
    prev_load: AtomicU64,
    prev_mean: AtomicU64,
    prev_bytes_load: AtomicU64,
    /// The window where the latency level began (rule 4, `level`).
    level_load: AtomicU64,
    level_mean: AtomicU64,
    /// Submission of the last request sent to the path while idle.
    solo_at: AtomicU64,
    /// The last completion, or when the path last went from idle to busy.
    heard_at: AtomicU64,
    /// The last late answer's latency (0: none since one in time).
    late: AtomicU64,
    /// The last idle sample over `rise_confirm` of `L` (0: the last was not).
    rise: AtomicU64,
    /// How long the path had rested when its last idle request was sent.
    rest: AtomicU64,
    /// `L` as the last idle sample sent once rested down to it found it
    /// (0: none): what a path that refills at rest (a token bucket) comes
    /// back to.
    rested: AtomicU64,
    /// *Refill*: the answer after a rest (0: none yet) ...
    fresh: AtomicU64,
    /// ... the answer with no rest where the path refills at rest (0:
    /// not seen) ...
    dry: AtomicU64,
    /// ... and the last dry answer plus the rest before it.
    dry_seen: AtomicU64,
}

impl Learned {
    /// *Refill*: an idle request answered in `answer` (its whole latency:
    /// the rest refills tokens, not transfers) sent after `rest`. A token bucket
    /// answers at once while it holds a token, else once it has refilled:
    /// after a rest `r` a dry answer takes `dry - r`, so each dry answer
    /// plus its rest is the same `dry`. A tail or a stall is not: it is
    /// taken for a bucket only where the last dry answer predicted this
    /// one; an answer fast where `dry` predicted a slow one, or slower than
    /// it predicted (a path that became long), refutes it.
    fn refill(&self, answer: Nanos, rest: Nanos) {
        let (fresh, dry) = (self.fresh.load(Relaxed), self.dry.load(Relaxed));
        // What `dry` promised after this rest (0: no bucket seen).
        let promised = if dry > 0 {
            after_rest(dry, rest, fresh)
        } else {
            0
        };
        if fresh == 0 || !over(answer, fresh, T.refill_slow) {
            if over(promised, fresh, T.refill_slow) {
                self.dry.store(0, Relaxed);
            }
            smooth(&self.fresh, answer, T.slow_step);
            return;
        }
        if promised > 0 && over(answer, promised, T.refill_match) {
            // Slower than `dry` promised: a path that became long.
            self.dry.store(0, Relaxed);
        }
        let refilled = answer.saturating_add(rest);
        let predicted = self.dry_seen.swap(refilled, Relaxed).saturating_sub(rest);
        if predicted > 0
            && !over(predicted, answer, T.refill_match)
            && !over(answer, predicted, T.refill_match)
        {
            smooth(&self.dry, refilled, T.step);
        }
    }

    /// Moves a worker's window sums to the shared ones (`auto_local`).
    fn absorb(&self, w: &mut WindowSums) {
        if w.count > 0 {
            self.bytes.fetch_add(w.bytes, Relaxed);
            self.latency_sum.fetch_add(w.latency_sum, Relaxed);
            self.free_sum.fetch_add(w.free_sum, Relaxed);
            self.fit.absorb(w.count, &w.fit);
            self.count.fetch_add(w.count, Relaxed);
            self.min_base.fetch_min(w.min_base, Relaxed);
        }
        *w = WindowSums::default();
    }

    fn model(&self) -> Model {
        Model {
            bandwidth: self.bandwidth.load(Relaxed),
            base: self.base.load(Relaxed),
        }
    }

    fn set(&self, m: Model) {
        self.bandwidth.store(m.bandwidth, Relaxed);
        self.base.store(m.base, Relaxed);
    }

    /// Takes the window's sums (starting the next); `None` if it is empty.
    fn close_window(&self, path: &Path, now: Nanos) -> Option<Window> {
        let busy_now = path.busy_time(now);
        let busy = busy_now.saturating_sub(self.busy_at_start.swap(busy_now, Relaxed));
        let bytes = self.bytes.swap(0, Relaxed);
        let count = self.count.swap(0, Relaxed);
        let latency_sum = self.latency_sum.swap(0, Relaxed);
        let free_sum = self.free_sum.swap(0, Relaxed);
        let min_base = self.min_base.swap(u64::MAX, Relaxed);
        if count == 0 || busy == 0 || min_base == u64::MAX {
            return None;
        }
        let size = bytes / count;
        let load = ratio(latency_sum, ONE, busy);
        Some(Window {
            count,
            size,
            mean: latency_sum / count,
            free: free_sum / count,
            min_base,
            delivered: ratio(bytes, NANOS_PER_SEC, busy).max(1),
            load,
            bytes_load: load.saturating_mul(size) / ONE,
        })
    }

    /// The load of the window where `w`'s latency level began: the
    /// earliest since which every window's mean stayed within `longer_low`
    /// to `longer_high` of its mean and its load did not rise above its
    /// load. A queue shrinks with its load; a longer path does not, however
    /// slowly the load falls.
    fn level(&self, w: &Window) -> u64 {
        let (load, mean) = (self.level_load.load(Relaxed), self.level_mean.load(Relaxed));
        if w.load <= load
            && at_least(w.mean, mean, T.longer_low)
            && !over(w.mean, mean, T.longer_high)
        {
            return load;
        }
        self.level_load.store(w.load, Relaxed);
        self.level_mean.store(w.mean, Relaxed);
        w.load
    }

    /// Remembers `w` as the last window; returns the one before.
    fn remember(&self, w: &Window) -> Prev {
        Prev {
            load: self.prev_load.swap(w.load, Relaxed),
            mean: self.prev_mean.swap(w.mean, Relaxed),
            bytes_load: self.prev_bytes_load.swap(w.bytes_load, Relaxed),
        }
    }

    /// Closes the window and applies the rules (the module text).
    fn fold(&self, path: &Path, now: Nanos) {
        let Some(w) = self.close_window(path, now) else {
            return;
        };
        if let Some(bw) = self.fit.take() {
            if self.model().bandwidth == 0 {
                return self.set(size_fit_first(&w, bw));
            }
            smooth(&self.bandwidth, bw, T.step);
        }
        let m = self.model();
        if m.bandwidth == 0 {
            return self.set(bootstrap(&w));
        }
        let prev = self.remember(&w);
        let flat = flat(&w, &prev);
        let longer = longer(&w, &m, self.level(&w));
        if flat {
            smooth(&self.base, flat_base(&w, &m), T.step);
        }
        if queued(&w, &m) && !flat && !longer {
            return smooth(&self.bandwidth, w.delivered, T.step);
        }
        match headroom(&w, &m) {
            Some(Ok(bw)) => self.bandwidth.store(bw, Relaxed),
            Some(Err(floor)) => smooth(&self.bandwidth, floor, T.slow_step),
            None => {}
        }
    }
}

#[derive(Debug)]
pub(crate) struct Auto {
    learned: Vec<Learned>,
    /// The model or an even split, whichever delivers more (`auto_trial`).
    trial: Trial,
}

impl Auto {
    pub fn new(paths: usize) -> Self {
        let learned = (0..paths)
            .map(|_| Learned {
                min_base: AtomicU64::new(u64::MAX),
                ..Default::default()
            })
            .collect();
        Self {
            learned,
            trial: Trial::default(),
        }
    }

    /// Service-time's choice (the fewest bytes in flight, by weight), ties
    /// to the first path (rotating them lost on the dev seeds: history in
    /// docs/history/auto-rules.md).
    fn even(&self, paths: &[Path], candidates: u64, io: &IoInfo, now: Nanos) -> Option<PathId> {
        let i = least_service_time(paths, candidates, io.bytes, |_, _| false)?;
        Some(self.chosen(&paths[i], &self.learned[i], i, now))
    }

    /// What the model expects an even split to deliver, bytes per second,
    /// in requests of `size` at `depth` in flight (the completion at hand
    /// included): each path holds an equal share and delivers it at `T0`
    /// up to `B`; below one request per path the slowest paths hold them
    /// (an even split sends to any idle path, and a request stays longest
    /// on a slow one). `u64::MAX`: a path has no model, or `size` is 0.
    fn even_rate(&self, paths: &[Path], depth: u64, size: u64) -> u64 {
        let n = paths.len() as u64;
        if size == 0 || n == 0 || n > 64 {
            return u64::MAX;
        }
        let share = depth.min(n);
        let mut rates = [0u64; 64];
        for (i, l) in self.learned.iter().enumerate().take(paths.len()) {
            let m = l.model();
            if m.bandwidth == 0 {
                return u64::MAX;
            }
            let by_latency = ratio(
                depth.saturating_mul(size),
                NANOS_PER_SEC,
                share.saturating_mul(m.unloaded(size)).max(1),
            );
            rates[i] = by_latency.min(m.bandwidth);
        }
        let rates = &mut rates[..n as usize];
        rates.sort_unstable();
        rates[..share as usize]
            .iter()
            .fold(0, |a, &r| a.saturating_add(r))
    }

    /// Notes a request sent to idle path `i` (*idle sample*, *late answer*).
    fn chosen(&self, p: &Path, l: &Learned, i: usize, now: Nanos) -> PathId {
        if p.in_flight_requests() == 0 {
            l.solo_at.store(now.max(1), Relaxed);
            let heard = l.heard_at.swap(now, Relaxed);
            l.rest.store(now.saturating_sub(heard), Relaxed);
        }
        PathId(i)
    }

    /// A completion that found the trial at boundary `b`: the paths' state
    /// is scanned for it (cold: rare).
    #[cold]
    #[inline(never)]
    fn epoch_boundary(&self, paths: &[Path], b: Boundary, submitted: Nanos, now: Nanos) {
        self.trial.at_boundary(b, submitted, now, |size| {
            let in_flight = paths.iter().map(Path::in_flight_requests).sum();
            Load {
                in_flight,
                even_rate: self.even_rate(paths, in_flight + 1, size),
                farthest: self
                    .learned
                    .iter()
                    .map(|l| l.base.load(Relaxed))
                    .max()
                    .unwrap_or(0),
            }
        });
    }

    /// [`Policy::select`] among two or more candidates: the model's choice
    /// (*Choosing*), or the even split's during an epoch of it. Out of line:
    /// a single candidate saves none of its registers.
    #[inline(never)]
    fn weigh(
        &self,
        paths: &[Path],
        candidates: u64,
        io: &IoInfo,
        ctx: &SubmitContext,
    ) -> Option<PathId> {
        if self.trial.mode() == Mode::Even {
            return self.even(paths, candidates, io, ctx.now);
        }
        let cost = io.bytes.max(T.min_cost);
        let load: u64 = indices(candidates)
            .map(|i| paths[i].in_flight_requests())
            .sum::<u64>()
            + 1;
        let weight = pm(load, T.wait_per_request).clamp(1, T.wait_max / ONE);
        // Nothing in flight on any candidate: the load is QD1 (*refill*).
        let alone = load == 1;
        let mut best: Option<(Nanos, usize)> = None;
        let mut unmeasured: Option<(u64, usize)> = None;
        // The paths priced, for the tie-break below (the first `PRICED`).
        let mut priced = [Priced::default(); PRICED];
        let mut n_priced = 0;
        for i in indices(candidates) {
            let (p, l) = (&paths[i], &self.learned[i]);
            let m = l.model();
            if m.bandwidth == 0 {
                if p.in_flight_requests() < T.probe_depth {
                    return Some(self.chosen(p, l, i, ctx.now));
                }
                if unmeasured.is_none_or(|(b, _)| p.in_flight_bytes() < b) {
                    unmeasured = Some((p.in_flight_bytes(), i));
                }
                continue;
            }
            let last = l.last_used.load(Relaxed);
            let interval = T
                .probe_interval
                .max(pm(m.unloaded(cost), T.probe_gap) / load);
            if p.in_flight_requests() == 0
                && ctx.now.saturating_sub(last) >= interval
                && l.last_used
                    .compare_exchange(last, ctx.now, Relaxed, Relaxed)
                    .is_ok()
            {
                return Some(self.chosen(p, l, i, ctx.now));
            }
            let e = Priced::of(p, l, i, cost, weight, ctx.now, alone);
            if best.is_none_or(|(c, _)| e.cost < c) {
                best = Some((e.cost, i));
            }
            if e.measured {
                if let Some(slot) = priced.get_mut(n_priced) {
                    *slot = e;
                }
                n_priced += 1;
            }
        }
        let Some((least, b)) = best else {
            let (_, i) = unmeasured?;
            return Some(self.chosen(&paths[i], &self.learned[i], i, ctx.now));
        };
        // The tie: within `tie` of the least cost and of its `T0`.
        let margin = least.saturating_add(pm(least, T.tie));
        let nearest = &self.learned[b];
        let near = nearest.model().unloaded(cost);
        let near = near.saturating_add(pm(near, T.tie));
        let mut pick: Option<(u64, usize)> = None;
        let mut consider = |e: &Priced| {
            if e.cost <= margin && e.unloaded <= near && pick.is_none_or(|(q, _)| e.queued < q) {
                pick = Some((e.queued, e.i));
            }
        };
        if n_priced <= PRICED {
            priced[..n_priced].iter().for_each(consider);
        } else {
            // More than were kept: each is priced again, as above.
            for i in indices(candidates) {
                let e = Priced::of(&paths[i], &self.learned[i], i, cost, weight, ctx.now, alone);
                if e.measured {
                    consider(&e);
                }
            }
        }
        let (_, i) = pick.or(best)?;
        Some(self.chosen(&paths[i], &self.learned[i], i, ctx.now))
    }
}

/// Paths whose price `weigh` keeps from its first pass for the tie-break
/// (more are priced again there).
const PRICED: usize = 4;

/// A measured path as `weigh` prices it.
#[derive(Clone, Copy, Debug, Default)]
struct Priced {
    i: usize,
    cost: Nanos,
    /// `T0` of the request.
    unloaded: Nanos,
    /// Bytes in flight on the path.
    queued: u64,
    /// The model has a bandwidth (only such paths tie).
    measured: bool,
}

impl Priced {
    /// `alone`: nothing is in flight on any candidate (the load is QD1).
    fn of(
        p: &Path,
        l: &Learned,
        i: usize,
        cost: u64,
        weight: u64,
        now: Nanos,
        alone: bool,
    ) -> Self {
        let mut m = l.model();
        if p.in_flight_requests() == 0 {
            // Only an idle path has rested (`alone` implies idle).
            let idle = now.saturating_sub(l.heard_at.load(Relaxed));
            let (fresh, dry) = (l.fresh.load(Relaxed), l.dry.load(Relaxed));
            let rested = l.rested.load(Relaxed);
            if alone && dry > 0 && fresh > 0 {
                // *Refill*: at QD1 a bucket is priced by its rest alone.
                let transfer = transfer_time(cost, m.bandwidth);
                m.base = after_rest(dry, idle, fresh).saturating_sub(transfer).max(1);
            } else if rested > 0 && rested < m.base {
                // *Rest*: a path that refilled at rest sheds what it rested.
                m.base = after_rest(m.base, idle, rested);
            }
        }
        let queued = p.in_flight_bytes();
        Self {
            i,
            cost: m.cost_with(queued, p.in_flight_requests(), cost, weight),
            unloaded: m.unloaded(cost),
            queued,
            measured: m.bandwidth != 0,
        }
    }
}

/// Sums over a window of request size (512-byte sectors) and latency
/// (units of 256 ns), for the least-squares line `latency = a + size / B`
/// of rule 1.
#[derive(Debug, Default)]
struct SizeSums {
    n: AtomicU64,
    x: AtomicU64,
    xx: AtomicU64,
    y: AtomicU64,
    yy: AtomicU64,
    xy: AtomicU64,
}

impl SizeSums {
    /// A completion's point: (size in sectors, latency in 256 ns).
    fn point(bytes: u64, latency: Nanos) -> (u64, u64) {
        (
            bytes.div_ceil(512).min(1 << 16),
            (latency >> 8).min(1 << 22),
        )
    }

    /// Adds a worker's sums of `n` points (x, xx, y, yy, xy).
    fn absorb(&self, n: u64, f: &[u64; 5]) {
        self.n.fetch_add(n, Relaxed);
        for (a, v) in [&self.x, &self.xx, &self.y, &self.yy, &self.xy]
            .into_iter()
            .zip(f)
        {
            a.fetch_add(*v, Relaxed);
        }
    }

    /// The link's bandwidth (bytes per second) where sizes spread by
    /// `fit_spread` and the slope is `fit_sigmas` standard errors clear of
    /// zero; the sums start afresh.
    fn take(&self) -> Option<u64> {
        let n = self.n.swap(0, Relaxed) as f64;
        let [x, xx, y, yy, xy] =
            [&self.x, &self.xx, &self.y, &self.yy, &self.xy].map(|a| a.swap(0, Relaxed) as f64);
        if n < T.window_samples as f64 {
            return None;
        }
        let vx = xx - x * x / n;
        let vy = yy - y * y / n;
        let cxy = xy - x * y / n;
        if vx <= 0.0 || vx / n < (frac(T.fit_spread) * x / n).powi(2) {
            return None;
        }
        let slope = cxy / vx;
        let residual = ((vy - slope * cxy) / (n - 2.0)).max(0.0);
        let se = (residual / vx).sqrt();
        // 512 bytes per (slope x 256 ns): bytes per second.
        let bandwidth = |slope: f64| (2e9 / slope).min(MAX_BANDWIDTH as f64).max(1.0) as u64;
        (slope > frac(T.fit_sigmas) * se).then(|| bandwidth(slope))
    }
}

/// *Rest*: `L` after `rest` of rest, no lower than `floor`.
fn after_rest(base: Nanos, rest: Nanos, floor: Nanos) -> Nanos {
    base.saturating_sub(rest).max(floor)
}

/// `a * b / c`, saturating.
pub(super) fn ratio(a: u64, b: u64, c: u64) -> u64 {
    match a.checked_mul(b) {
        // The common case fits: a 64-bit division, not the 128-bit one's
        // library call on every choice.
        Some(p) => p / c.max(1),
        None => {
            (u128::from(a) * u128::from(b) / u128::from(c.max(1))).min(u128::from(u64::MAX)) as u64
        }
    }
}

/// Time to move `bytes` at `bandwidth` bytes per second, in ns.
fn transfer_time(bytes: u64, bandwidth: u64) -> Nanos {
    ratio(bytes, NANOS_PER_SEC, bandwidth)
}

/// `a` moves `share` (per-mille) of the way to `sample`.
fn smooth(a: &AtomicU64, sample: u64, share: u64) {
    let old = a.load(Relaxed);
    let new = if old == 0 {
        sample
    } else {
        old - pm(old, share) + pm(sample, share)
    };
    a.store(new.max(1), Relaxed);
}

impl Policy for Auto {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        io: &IoInfo,
        ctx: &SubmitContext,
    ) -> Option<PathId> {
        if candidates.is_power_of_two() {
            // One candidate: nothing to weigh.
            let i = candidates.trailing_zeros() as usize;
            return Some(self.chosen(&paths[i], &self.learned[i], i, ctx.now));
        }
        self.weigh(paths, candidates, io, ctx)
    }

    fn completed(
        &self,
        paths: &[Path],
        path: PathId,
        io: &IoInfo,
        latency: Nanos,
        now: Nanos,
        local: Option<&mut PolicyLocal>,
    ) {
        let (p, l) = (&paths[path.0], &self.learned[path.0]);
        // Without a worker's own sums, each completion goes to the shared
        // ones at once (made only then: a worker's need not zero them).
        let (mut own_window, mut own_epoch);
        let (window, epoch, at_once) = match local {
            Some(local) => {
                let (w, e) = local.sums(path.0);
                (w, e, false)
            }
            None => {
                (own_window, own_epoch) = (WindowSums::default(), EpochSums::default());
                (&mut own_window, &mut own_epoch, true)
            }
        };
        l.last_used.store(now, Relaxed);
        let heard = l.heard_at.load(Relaxed);
        l.heard_at.store(now, Relaxed);
        if let Some(b) = self
            .trial
            .note(io.bytes.max(T.min_cost), now, epoch, at_once)
        {
            self.epoch_boundary(paths, b, now.saturating_sub(latency), now);
        }
        if latency > T.max_sample {
            return;
        }
        let cost = io.bytes.max(T.min_cost);
        let m = l.model();
        // Its transfer time, and its transfer behind the bytes in flight
        // (they stand for those ahead of it when it was sent).
        let (transfer, behind) = match m.bandwidth {
            0 => (0, 0),
            bw => (
                transfer_time(cost, bw),
                transfer_time(p.in_flight_bytes() + cost, bw),
            ),
        };
        let base = latency.saturating_sub(transfer);
        let submitted = now.saturating_sub(latency);
        let solo = l.solo_at.load(Relaxed);
        if m.bandwidth > 0
            && solo != 0
            && submitted.abs_diff(solo) <= T.solo_tolerance
            && l.solo_at
                .compare_exchange(solo, 0, Relaxed, Relaxed)
                .is_ok()
        {
            // *Idle sample*.
            l.refill(latency, l.rest.load(Relaxed));
            let lone = l.rise.swap(0, Relaxed);
            if base < pm(m.base, T.solo_at_once) {
                l.base.store(base.max(1), Relaxed);
            } else if !over(base, m.base, T.rise_confirm) {
                smooth(&l.base, base, T.slow_step);
            } else if lone == 0 {
                l.rise.store(base, Relaxed);
            } else {
                smooth(&l.base, base.min(lone), T.slow_step);
            }
            // *Rest*: sent after resting down to its floor, it is the floor;
            // far over what the rest promised, the path does not refill.
            let (floor, rest) = (l.rested.load(Relaxed), l.rest.load(Relaxed));
            let promised = after_rest(m.base, rest, floor);
            if floor == 0
                || rest >= m.base.saturating_sub(floor)
                || over(base, promised, T.rest_broken)
            {
                l.rested.store(base.max(1), Relaxed);
            }
        }
        // *Late answer*: after a silence of `overdue` times what the bytes in
        // flight should take, confirmed by an earlier late answer not
        // followed by one in time (a stall ends; a longer path stays).
        let due = (m.base + behind).max(l.prev_mean.load(Relaxed));
        if m.bandwidth > 0 && heard > 0 && now.saturating_sub(heard) > pm(due, T.overdue) {
            if l.late.swap(latency, Relaxed) > 0 {
                l.base
                    .store(ratio(base, ONE, T.overdue).max(m.base).max(1), Relaxed);
            }
        } else if l.late.load(Relaxed) > pm(latency, T.late_clear) {
            l.late.store(0, Relaxed);
        }
        // The modelled wait: its completion less `T0`.
        let wait = match m.bandwidth {
            0 => 0,
            _ => behind.saturating_sub(m.base + transfer),
        };
        let free = base.saturating_sub(wait);
        window.add(
            cost,
            latency,
            base,
            free,
            SizeSums::point(cost, latency),
            now,
        );
        let start = l.window_start.load(Relaxed);
        let age = now.saturating_sub(start);
        // A window younger than `window_min` is not due whatever its
        // count: the shared count is only read after.
        let due = age >= T.window_min
            && (age >= T.window_max || l.count.load(Relaxed) + window.count >= T.window_samples);
        if at_once || start == 0 || due || window.ripe(now) {
            l.absorb(window);
        }
        if start == 0 {
            // The first window starts with the first I/O of the path.
            let first = submitted.max(1);
            if l.window_start
                .compare_exchange(0, first, Relaxed, Relaxed)
                .is_ok()
            {
                l.busy_at_start
                    .store(p.busy_time(first).min(p.busy_time(now)), Relaxed);
            }
            return;
        }
        if due
            && l.window_start
                .compare_exchange(start, now, Relaxed, Relaxed)
                .is_ok()
        {
            l.fold(p, now);
        }
    }

    fn estimates(&self, path: PathId) -> PolicyEstimates {
        let l = &self.learned[path.0];
        let bw = l.bandwidth.load(Relaxed);
        PolicyEstimates {
            bandwidth_bytes_per_s: Some(bw).filter(|&b| b > 0),
            base_latency_ns: Some(l.base.load(Relaxed)).filter(|_| bw > 0),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    const MS: Nanos = 1_000_000;

    impl Model {
        /// `cost_with` at the deepest weight, behind requests of the same size.
        fn cost(&self, in_flight: u64, bytes: u64) -> Nanos {
            let m = T.wait_max / ONE;
            self.cost_with(in_flight, in_flight.div_ceil(bytes), bytes, m)
        }
    }

    impl SizeSums {
        fn add(&self, bytes: u64, latency: Nanos) {
            let (x, y) = Self::point(bytes, latency);
            self.absorb(1, &[x, x * x, y, y * y, x * y]);
        }
    }

    /// Drives `p` over two FIFO links in virtual time: each path serves its
    /// queue at `bw` bytes/s after `base` ns. Returns the I/O split.
    fn run(p: &Auto, ps: &[Path], links: &[(u64, Nanos)], ios: usize, depth: usize) -> Vec<usize> {
        run_timed(p, ps, links, ios, depth).0
    }

    /// `run`, also returning the MiB/s of the second half of the run.
    fn run_timed(
        p: &Auto,
        ps: &[Path],
        links: &[(u64, Nanos)],
        ios: usize,
        depth: usize,
    ) -> (Vec<usize>, f64) {
        run_workers(p, ps, links, ios, depth, &mut [])
    }

    /// `run_timed` with completions taken by `workers` in turn, each
    /// summing on its own (none: straight to the shared sums).
    fn run_workers(
        p: &Auto,
        ps: &[Path],
        links: &[(u64, Nanos)],
        ios: usize,
        depth: usize,
        workers: &mut [PolicyLocal],
    ) -> (Vec<usize>, f64) {
        let mut half: Nanos = 0;
        let mut now: Nanos = 1;
        let mut link_free = vec![0; links.len()];
        let mut in_flight: Vec<(Nanos, usize, Nanos)> = vec![]; // done, path, submitted
        let mut split = vec![0; links.len()];
        let io = read(64 * 1024);
        for n in 0..ios {
            if n == ios / 2 {
                half = now;
            }
            while in_flight.len() < depth {
                let i = pick(p, ps, all(ps), &io, now);
                let (bw, base) = links[i];
                let start = now.max(link_free[i]);
                link_free[i] = start + transfer_time(io.bytes, bw);
                in_flight.push((link_free[i] + base, i, now));
                split[i] += 1;
            }
            in_flight.sort();
            let (done, i, sub) = in_flight.remove(0);
            now = done;
            ps[i].release(io.bytes, now);
            let w = workers.len().max(1);
            p.completed(ps, PathId(i), &io, now - sub, now, workers.get_mut(n % w));
        }
        let bytes = (ios - ios / 2) as f64 * io.bytes as f64;
        (
            split,
            bytes / ((now - half) as f64 / 1e9) / f64::from(1 << 20),
        )
    }

    #[test]
    fn a_worker_summing_on_its_own_learns_what_the_shared_sums_learn() {
        // One worker: its sums reach the shared ones before every window
        // and epoch closes, so everything learned and chosen is the same.
        let links = [(400 << 20, MS), (100 << 20, 3 * MS)];
        let (ps, shared) = (paths(2), Auto::new(2));
        let at_once = run_workers(&shared, &ps, &links, 20_000, 16, &mut []);
        let (ps, own) = (paths(2), Auto::new(2));
        let mut one = [PolicyLocal::default()];
        let summed = run_workers(&own, &ps, &links, 20_000, 16, &mut one);
        assert_eq!(at_once.0, summed.0);
        for i in 0..2 {
            assert_eq!(shared.estimates(PathId(i)), own.estimates(PathId(i)));
            assert_eq!(
                shared.learned[i].prev_mean.load(Relaxed),
                own.learned[i].prev_mean.load(Relaxed)
            );
        }
        // Three workers taking turns: the last few completions of each
        // count a little late; the split and the throughput stay (the
        // slower path's estimates, from few requests, may move).
        let (ps, three) = (paths(2), Auto::new(2));
        let mut workers: [PolicyLocal; 3] = Default::default();
        let split = run_workers(&three, &ps, &links, 20_000, 16, &mut workers);
        let share = |s: &[usize]| s[0] as f64 / (s[0] + s[1]) as f64;
        assert!(
            (share(&split.0) - share(&at_once.0)).abs() < 0.01,
            "{split:?} {at_once:?}"
        );
        assert!(
            split.1 > at_once.1 * 0.99,
            "{} MiB/s against {}",
            split.1,
            at_once.1
        );
    }

    #[test]
    fn ratio_is_exact_and_saturates() {
        assert_eq!(ratio(4096, NANOS_PER_SEC, 3 << 30), 1271);
        assert_eq!(ratio(u64::MAX, 2, 4), u64::MAX / 2);
        assert_eq!(ratio(u64::MAX, u64::MAX, 1), u64::MAX);
        assert_eq!(ratio(7, 3, 0), 21);
    }

    #[test]
    fn learns_bandwidth_and_base_latency() {
        let ps = paths(2);
        let p = Auto::new(2);
        let links = [(400 << 20, MS), (100 << 20, MS)];
        let split = run(&p, &ps, &links, 20_000, 64);
        let e0 = p.estimates(PathId(0));
        let bw = e0.bandwidth_bytes_per_s.unwrap() as f64 / f64::from(400 << 20);
        assert!((0.9..1.1).contains(&bw), "{e0:?}");
        // the fixed 1 ms, within a tenth: the first window's least latency
        // less a transfer (a request that went out at once with the 64
        // queued is no idle sample; counted as one, it raised `L` to 2 ms)
        let base = e0.base_latency_ns.unwrap() as f64 / MS as f64;
        assert!((0.9..1.1).contains(&base), "{e0:?}");
        // in-flight bytes follow bandwidth: about 4:1
        let ratio = split[0] as f64 / split[1] as f64;
        assert!((3.0..5.0).contains(&ratio), "{split:?}");
    }

    #[test]
    fn the_slope_of_latency_on_size_is_the_links_speed() {
        // 4k and 256k on a 1 GB/s link 500 us away, each request behind a
        // wait that does not depend on its own size, and jitter.
        let fit = SizeSums::default();
        for i in 0..64u64 {
            let bytes = if i % 3 == 0 { 256 << 10 } else { 4 << 10 };
            let wait = (i * 7919) % 400_000;
            let jitter = (i * 104_729) % 50_000;
            fit.add(bytes, 500_000 + bytes + wait + jitter);
        }
        let bw = fit.take().expect("sizes vary") as f64;
        assert!((0.9e9..1.1e9).contains(&bw), "{bw}");
        // one size says nothing about the link
        for _ in 0..64 {
            fit.add(4096, 600_000);
        }
        assert_eq!(fit.take(), None);
    }

    #[test]
    fn learns_the_fixed_latency_of_a_lightly_used_path() {
        let ps = paths(1);
        let p = Auto::new(1);
        // one 4k read every 10 ms on a 2 ms path: idle most of the time
        let io = read(4096);
        let mut now = 1;
        for _ in 0..200 {
            pick(&p, &ps, 1, &io, now);
            now += 2 * MS;
            ps[0].release(io.bytes, now);
            p.completed(&ps, PathId(0), &io, 2 * MS, now, None);
            now += 8 * MS;
        }
        let e = p.estimates(PathId(0));
        let base = e.base_latency_ns.unwrap() as f64 / MS as f64;
        assert!((1.5..2.1).contains(&base), "{e:?}");
    }

    #[test]
    fn avoids_a_path_that_slows_down_and_still_probes_it() {
        let ps = paths(2);
        let p = Auto::new(2);
        let links = [(400 << 20, MS), (400 << 20, 30 * MS)];
        let split = run(&p, &ps, &links, 20_000, 16);
        assert!(split[1] * 20 < split[0], "{split:?}");
        assert!(split[1] > 0, "{split:?}");
    }

    #[test]
    fn unmeasured_paths_get_probe_io() {
        let ps = paths(2);
        let p = Auto::new(2);
        let picks: Vec<_> = (0..10)
            .map(|_| pick(&p, &ps, all(&ps), &read(4096), 1))
            .collect();
        assert_eq!(&picks[..8], &[0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(p.select(&ps, 0, &read(1), &at(0)), None);
    }

    const FAST: Model = Model {
        bandwidth: 100 << 20,
        base: MS / 10,
    };

    #[test]
    fn the_pipe_model() {
        // 16k at 100 MiB/s: 156 us on the link, after 100 us of latency
        assert_eq!(FAST.unloaded(16 << 10), 100_000 + 156_250);
        // below the knee (100 MiB/s x 100 us = 10 KiB) nothing waits
        assert_eq!(FAST.completion(0, 16 << 10), FAST.unloaded(16 << 10));
        // above it a request waits for the bytes ahead of it
        assert_eq!(FAST.completion(1 << 20, 16 << 10), 10_156_250);
    }

    #[test]
    fn a_delayed_path_takes_what_a_saturated_one_would_only_queue() {
        // Equal links, one +8 ms. The near one holds 512 KiB (5 ms of
        // queue): a request completes sooner there (the old choice), but
        // adds nothing to its throughput; the far one is below its knee.
        let far = Model {
            base: 8 * MS,
            ..FAST
        };
        let queued = 512 << 10;
        let s = 16 << 10;
        assert!(FAST.completion(queued, s) < far.completion(0, s));
        assert!(far.cost(0, s) < FAST.cost(queued, s));
        // ... until the far one's knee (800 KiB) is reached too
        assert!(FAST.cost(queued, s) < far.cost(2 << 20, s));
    }

    #[test]
    fn at_a_small_depth_the_nearer_paths_queue_is_worth_waiting_for() {
        // Depth 2, one 32k request on a fast link, the other link 1/8 as
        // fast: the second request waits 0.2 ms behind the first rather
        // than take 2.5 ms on the slow link. Under a deep load the same
        // wait, imposed on many requests behind, sends it to the slow one.
        let slow = Model {
            bandwidth: FAST.bandwidth / 8,
            ..FAST
        };
        let s = 32 << 10;
        let depth2 = 2 * 2;
        assert!(FAST.cost_with(s, 1, s, depth2) < slow.cost_with(0, 0, s, depth2));
        assert!(FAST.cost(s, s) > slow.cost(0, s));
    }

    #[test]
    fn a_small_request_behind_a_large_one_stays_on_the_near_path() {
        // Deep load: a near link of 300 MiB/s, 80 us, holding one 128k
        // request, and a path 3.5 ms away. A 4k request waits 0.33 ms
        // behind the 128k one but adds only its own 13 us to the requests
        // behind it: it stays near (2.9 ms, the wait counted 8.5 times).
        // Counted 16 times, that wait (5.3 ms) sent it far away.
        let near = Model {
            bandwidth: 300 << 20,
            base: 80_000,
        };
        let far = Model {
            bandwidth: 370 << 20,
            base: 3_500_000,
        };
        let (s, big) = (4096, 128 << 10);
        let far_cost = far.cost_with(0, 0, s, T.wait_max / ONE);
        assert!(near.cost_with(big, 1, s, T.wait_max / ONE) < far_cost);
        // behind requests of its own size the wait counts in full, as
        // before: 96 4k requests ahead (1.2 ms of wait) send it far
        assert!(near.cost_with(96 * s, 96, s, T.wait_max / ONE) > far_cost);
        assert_eq!(
            near.cost_with(96 * s, 96, s, T.wait_max / ONE),
            near.cost(96 * s, s)
        );
        // a large request behind small ones: counted in full too
        assert_eq!(ahead_share(4 * s, 4, big), 1000);
        assert_eq!(ahead_share(big, 1, s), T.min_ahead_share);
    }

    #[test]
    fn below_the_knee_the_lower_latency_wins() {
        let far = Model {
            base: 8 * MS,
            ..FAST
        };
        let near = Model {
            bandwidth: 1 << 30,
            ..FAST
        };
        // 1 GiB/s x 100 us: 100 KiB before the near path waits
        assert!(near.cost(64 << 10, 4096) < far.cost(0, 4096));
    }

    #[test]
    fn saturated_paths_share_by_bandwidth() {
        let slow = Model {
            bandwidth: 25 << 20,
            ..FAST
        };
        // 1 MiB ahead: 10 ms on the fast link, 40 ms on the slow one
        assert!(FAST.cost(1 << 20, 4096) < slow.cost(1 << 20, 4096));
        // 4:1 in flight: about the same wait, so either may be chosen
        let (f, s) = (FAST.cost(4 << 20, 4096), slow.cost(1 << 20, 4096));
        assert!(f.abs_diff(s) * 50 < f, "{f} {s}");
    }

    #[test]
    fn paths_of_about_the_same_latency_share_below_the_knee() {
        let other = Model {
            base: FAST.base + FAST.base / 10,
            bandwidth: 1 << 30,
        };
        let near = Model {
            bandwidth: 1 << 30,
            ..FAST
        };
        // 10% slower but idle beats a near path filled close to its knee
        assert!(other.cost(0, 4096) < near.cost(96 << 10, 4096));
    }

    #[test]
    fn paths_of_about_the_same_cost_share_by_queued_work() {
        // Two fast links believed 5% apart in latency: the nearer one,
        // with 64k in flight, is still (a little) the cheaper by the model,
        // but the estimates are not that exact: the idle one is taken.
        let ps = paths(2);
        let p = Auto::new(2);
        let now = 10 * MS;
        for (l, base) in p.learned.iter().zip([100_000, 105_000]) {
            l.bandwidth.store(10 << 30, Relaxed);
            l.base.store(base, Relaxed);
            l.last_used.store(now, Relaxed);
        }
        ps[0].acquire(64 << 10, now);
        let io = read(4096);
        let m = |i: usize| p.learned[i].model();
        assert!(m(0).cost(64 << 10, 4096) < m(1).cost(0, 4096));
        assert_eq!(pick(&p, &ps, all(&ps), &io, now), 1);
        // ... but a path clearly further away is not
        p.learned[1].base.store(200_000, Relaxed);
        assert_eq!(pick(&p, &ps, all(&ps), &io, now), 0);
    }

    #[test]
    fn among_more_equals_than_select_keeps_priced_the_least_queued_wins() {
        // More equal paths than the first pass keeps: the one with the
        // fewest bytes in flight is taken, though it comes last...
        let n = PRICED + 2;
        let ps = paths(n);
        let p = Auto::new(n);
        let now = 10 * MS;
        for l in &p.learned {
            l.bandwidth.store(10 << 30, Relaxed);
            l.base.store(100_000, Relaxed);
            l.last_used.store(now, Relaxed);
        }
        for (i, path) in ps.iter().enumerate() {
            path.acquire(if i == n - 1 { 4096 } else { 8192 }, now);
        }
        let io = read(4096);
        assert_eq!(pick(&p, &ps, all(&ps), &io, now), n - 1);
        // ... but not once it is clearly further away, however idle.
        p.learned[n - 1].base.store(200_000, Relaxed);
        ps[n - 1].release(8192, now);
        ps[n - 1].acquire(1, now);
        assert_eq!(pick(&p, &ps, all(&ps), &io, now), 0);
    }

    /// Both paths believed 100 us away on fast links.
    fn two_known_paths(now: Nanos) -> (Vec<Path>, Auto) {
        let ps = paths(2);
        let p = Auto::new(2);
        for l in &p.learned {
            l.bandwidth.store(10 << 30, Relaxed);
            l.base.store(MS / 10, Relaxed);
            l.last_used.store(now, Relaxed);
        }
        (ps, p)
    }

    #[test]
    fn a_lone_far_idle_sample_is_a_tail_two_in_a_row_move_l() {
        // L is 100 us. A 30 ms answer alone (a heavy tail, a stall) moves
        // nothing, nor does the one in time after it; two in a row do, a
        // quarter of the way to the lesser of them (20 ms).
        let start = MS;
        let (ps, p) = two_known_paths(start);
        let io = read(4096);
        let answer = |sent: Nanos, latency: Nanos| {
            p.chosen(&ps[0], &p.learned[0], 0, sent);
            ps[0].acquire(io.bytes, sent);
            ps[0].release(io.bytes, sent + latency);
            p.completed(&ps, PathId(0), &io, latency, sent + latency, None);
            p.estimates(PathId(0)).base_latency_ns.unwrap()
        };
        assert_eq!(answer(start, 30 * MS), MS / 10);
        assert!(answer(40 * MS, MS / 10) <= MS / 10);
        assert!(answer(50 * MS, 30 * MS) <= MS / 10);
        let l = answer(90 * MS, 20 * MS);
        assert!((5 * MS - MS / 5..=5 * MS + MS / 5).contains(&l), "{l}");
    }

    #[test]
    fn a_path_that_refills_at_rest_is_taken_again_once_it_has_rested() {
        // A token bucket at QD1: path 0 answered in 100 us after a rest,
        // then its L rose to 4 ms (its bucket ran dry); path 1 is 1 ms
        // away. Path 0 sheds L as it rests, down to the 100 us it came back
        // to: 1 ms after its last answer path 1 is nearer, 3.95 ms after it
        // path 0 is. Had that rested answer come back at 4 ms (a path that
        // is long, not dry), resting would not bring it back.
        let start = MS;
        let io = read(4096);
        let both = |answer_after_rest: Nanos| {
            let (ps, p) = two_known_paths(start);
            let sent = 20 * MS;
            p.chosen(&ps[0], &p.learned[0], 0, sent);
            ps[0].acquire(io.bytes, sent);
            let done = sent + answer_after_rest;
            ps[0].release(io.bytes, done);
            p.completed(&ps, PathId(0), &io, answer_after_rest, done, None);
            p.learned[0].base.store(4 * MS, Relaxed);
            p.learned[1].base.store(MS, Relaxed);
            let pick = |after: Nanos| p.select(&ps, 0b11, &io, &at(done + after)).unwrap().0;
            (pick(MS), pick(3_950_000))
        };
        assert_eq!(both(MS / 10), (1, 0));
        assert_eq!(both(4 * MS), (1, 1));
        // Taken after a part of the rest (priced 2 ms), it answers in 5 ms,
        // over twice the promise: the path does not refill; no more rest.
        let (ps, p) = two_known_paths(start);
        let l = &p.learned[0];
        l.rested.store(MS / 10, Relaxed);
        l.base.store(4 * MS, Relaxed);
        p.learned[1].base.store(MS, Relaxed);
        let sent = 20 * MS;
        l.heard_at.store(sent - 2 * MS, Relaxed);
        p.chosen(&ps[0], l, 0, sent);
        ps[0].acquire(io.bytes, sent);
        ps[0].release(io.bytes, sent + 5 * MS);
        p.completed(&ps, PathId(0), &io, 5 * MS, sent + 5 * MS, None);
        assert!(l.rested.load(Relaxed) > 4 * MS);
        let after = sent + 5 * MS + 3_950_000;
        assert_eq!(p.select(&ps, 0b11, &io, &at(after)).unwrap().0, 1);
    }

    #[test]
    fn a_bucket_is_what_each_dry_answer_plus_its_rest_agrees_on() {
        const US: Nanos = 1000;
        // A bucket refilling one token per 4 ms, 100 us when it has one.
        let l = Learned::default();
        l.refill(100 * US, 10 * MS);
        assert_eq!(l.fresh.load(Relaxed), 100 * US);
        l.refill(4 * MS, 0);
        assert_eq!(l.dry.load(Relaxed), 0, "one dry answer predicts nothing");
        l.refill(3 * MS, MS);
        assert_eq!(
            l.dry.load(Relaxed),
            4 * MS,
            "3 ms after a 1 ms rest: 4 ms dry"
        );
        // Rested 3.95 ms it answers in 100 us, as `dry` predicts: kept.
        l.refill(100 * US, 3_950 * US);
        assert_eq!(l.dry.load(Relaxed), 4 * MS);
        // With no rest `dry` predicts 4 ms: a fast answer refutes it.
        l.refill(100 * US, 0);
        assert_eq!(l.dry.load(Relaxed), 0);
        // A path that became long: rested 10 ms, `dry` promised 100 us.
        l.refill(4 * MS, 0);
        l.refill(3 * MS, MS);
        assert_eq!(l.dry.load(Relaxed), 4 * MS);
        l.refill(3 * MS, 10 * MS);
        assert_eq!(l.dry.load(Relaxed), 0, "slow where a refill was promised");
        // A tail: slow answers after the same rest that disagree.
        let t = Learned::default();
        t.refill(100 * US, 10 * MS);
        t.refill(MS, 5 * MS);
        t.refill(2 * MS, 5 * MS);
        t.refill(MS / 2, 5 * MS);
        assert_eq!(t.dry.load(Relaxed), 0);
    }

    #[test]
    fn at_qd1_a_dry_bucket_gives_way_to_a_rested_one() {
        // Two buckets of 100 us and 4 ms dry, `L` 100 us each: path 0
        // answered just now, path 1 3.9 ms ago. At QD1 path 1 is the
        // nearer (100 us against 4 ms); with a request in flight
        // elsewhere the refill does not price them.
        let now = 20 * MS;
        let io = read(4096);
        let (ps, p) = two_known_paths(now);
        for (l, heard) in p.learned.iter().zip([now, now - 3_900_000]) {
            l.fresh.store(MS / 10, Relaxed);
            l.dry.store(4 * MS, Relaxed);
            l.heard_at.store(heard, Relaxed);
        }
        assert_eq!(p.select(&ps, 0b11, &io, &at(now)).unwrap().0, 1);
        let ps3 = paths(3);
        let p3 = Auto::new(3);
        for (i, l) in p3.learned.iter().enumerate() {
            l.bandwidth.store(10 << 30, Relaxed);
            l.base.store(MS / 10, Relaxed);
            l.last_used.store(now, Relaxed);
            l.fresh.store(MS / 10, Relaxed);
            l.dry.store(4 * MS, Relaxed);
            l.heard_at.store([now, now - 3_900_000, now][i], Relaxed);
        }
        ps3[2].acquire(io.bytes, now);
        assert_eq!(p3.select(&ps3, 0b011, &io, &at(now)).unwrap().0, 1);
        assert_eq!(p3.select(&ps3, 0b111, &io, &at(now)).unwrap().0, 0);
    }

    #[test]
    fn a_late_answer_moves_l_only_when_the_one_before_was_late_too() {
        // L is 100 us; the path stays busy (a request of the load in flight
        // throughout), so these are not idle samples. One answer after a
        // 30 ms silence (a stall, a retransmit) moves nothing; one in time
        // clears it; two late in a row (a path that became longer) raise L
        // to a third of the second at once.
        let start = MS;
        let (ps, p) = two_known_paths(start);
        let io = read(4096);
        ps[0].acquire(io.bytes, start);
        let answer = |sent: Nanos, latency: Nanos| {
            p.chosen(&ps[0], &p.learned[0], 0, sent);
            ps[0].acquire(io.bytes, sent);
            ps[0].release(io.bytes, sent + latency);
            p.completed(&ps, PathId(0), &io, latency, sent + latency, None);
            p.estimates(PathId(0)).base_latency_ns.unwrap()
        };
        p.completed(&ps, PathId(0), &io, MS / 10, start, None);
        let first = answer(start, 30 * MS);
        assert!(first < MS / 2, "one late answer moved L to {first}");
        let in_time = answer(31 * MS, MS / 10);
        assert!(in_time < MS / 2, "{in_time}");
        let again = answer(32 * MS, 30 * MS);
        assert!(
            again < MS / 2,
            "a late answer after one in time moved L to {again}"
        );
        // (the window of these answers now says 15 ms: late is past 45 ms)
        let twice = answer(62 * MS, 60 * MS);
        assert!(
            (19 * MS..=21 * MS).contains(&twice),
            "two late answers: L {twice}"
        );
    }

    #[test]
    fn a_silent_path_is_priced_by_its_model_not_its_silence() {
        // Path 1 holds four small requests, path 0 more bytes. 20 ms on,
        // with nothing back from path 1 (a stall, a retransmit, a bucket
        // out of tokens), path 1 is still the cheaper one: a pause is not
        // its latency, and a path priced by its silence was left for good.
        let start = MS;
        let (ps, p) = two_known_paths(start);
        for _ in 0..4 {
            p.chosen(&ps[1], &p.learned[1], 1, start);
            ps[1].acquire(4096, start);
        }
        for _ in 0..8 {
            ps[0].acquire(64 << 10, start);
        }
        let io = read(4096);
        let at = |now: Nanos| pick(&p, &ps, all(&ps), &io, now);
        assert_eq!(at(start + MS / 10), 1);
        assert_eq!(at(start + 20 * MS), 1);
    }

    #[test]
    fn less_load_at_the_same_latency_is_not_a_slower_link() {
        // A 111 MiB/s link believed 1.48 ms away that became 7.6 ms further
        // away: 32k at 8.25 ms in every window while the load on it falls
        // from 16.5 to 13 requests. A queue would have shrunk with the
        // load: the link's bandwidth is not cut to the rate delivered
        // (49 MiB/s); the window is one without queueing (and at the
        // model's knee: `B` doubles).
        let ps = paths(1);
        let p = Auto::new(1);
        let l = &p.learned[0];
        let bw = 111 << 20;
        l.bandwidth.store(bw, Relaxed);
        l.base.store(1_480_000, Relaxed);
        l.level_load.store(16_500, Relaxed);
        l.level_mean.store(8_250_000, Relaxed);
        let (t0, count, size) = (1_000_000, 16, 32 << 10);
        // One window: 16 x 32k at 8.25 ms each.
        let window = |since: Nanos| {
            ps[0].acquire(size, since);
            l.bytes.store(count * size, Relaxed);
            l.count.store(count, Relaxed);
            l.latency_sum.store(count * 8_250_000, Relaxed);
            l.free_sum.store(count * 4_800_000, Relaxed);
            l.min_base.store(7_500_000, Relaxed);
        };
        window(t0);
        // 13 requests in flight on average: 16 x 8.25 ms over 10.15 ms
        l.fold(&ps[0], t0 + 10_153_846);
        assert!(l.bandwidth.load(Relaxed) >= bw);
        l.bandwidth.store(bw, Relaxed);
        // ... while a queue that shrinks with the load is one.
        l.level_load.store(16_500, Relaxed);
        l.level_mean.store(10_400_000, Relaxed);
        window(0);
        l.fold(&ps[0], t0 + 2 * 10_153_846);
        assert!(l.bandwidth.load(Relaxed) < bw * 3 / 4);
    }

    #[test]
    fn a_load_falling_slowly_at_the_same_latency_is_a_longer_path() {
        // A 391 MiB/s link 267 us away that became 2 ms further away, at
        // 32k: the load on it falls by a tenth per window at the same
        // latency. Each window against the last is a queue; against the
        // window where the latency level began, from the third on the
        // load fell by a fifth, and a queue would have shrunk: `B` is no
        // longer cut to what the path delivered (pipe sweep 20293301-628
        // cut it to 34 MiB/s, window by window).
        let ps = paths(1);
        let p = Auto::new(1);
        let l = &p.learned[0];
        l.bandwidth.store(391 << 20, Relaxed);
        l.base.store(267_000, Relaxed);
        let (count, size, mean) = (16, 32 << 10, 2_200_000);
        ps[0].acquire(size, 0);
        let mut now = 0;
        let mut cut = vec![];
        for load in [16_000, 14_500, 13_200, 12_000, 10_900] {
            let before = l.bandwidth.load(Relaxed);
            l.bytes.store(count * size, Relaxed);
            l.count.store(count, Relaxed);
            l.latency_sum.store(count * mean, Relaxed);
            l.free_sum.store(count * 1_900_000, Relaxed);
            l.min_base.store(2_000_000, Relaxed);
            // busy for as long as `load` requests in flight take to add
            // up the window's latencies
            now += count * mean * 1000 / load;
            l.fold(&ps[0], now);
            cut.push(l.bandwidth.load(Relaxed) < before);
        }
        assert_eq!(cut, [true, true, false, false, false]);
    }

    /// Folds one window on path 0: `count` requests of `size` at `mean`
    /// each, `load` requests in flight (thousandths), the least of them
    /// `min_base` (less transfer) and their mean less the modelled wait
    /// `free`.
    #[allow(clippy::too_many_arguments)]
    fn fold_window(
        p: &Auto,
        ps: &[Path],
        load: u64,
        count: u64,
        size: u64,
        mean: Nanos,
        free: Nanos,
        min_base: Nanos,
    ) {
        let l = &p.learned[0];
        let t0 = 1_000_000;
        ps[0].acquire(size, t0);
        l.bytes.store(count * size, Relaxed);
        l.count.store(count, Relaxed);
        l.latency_sum.store(count * mean, Relaxed);
        l.free_sum.store(count * free, Relaxed);
        l.min_base.store(min_base, Relaxed);
        // busy for as long as `load` requests in flight take to add up
        // the window's latencies
        l.fold(&ps[0], t0 + count * mean * 1000 / load);
    }

    /// One window (`fold_window`) on a path believed 1093 MiB/s and 1 ms
    /// away, after one of `prev_load` requests (thousandths) and
    /// `prev_bytes` bytes in flight at `mean`. Returns
    /// `L`.
    #[allow(clippy::too_many_arguments)]
    fn flat_window(
        (prev_load, prev_bytes): (u64, u64),
        load: u64,
        count: u64,
        size: u64,
        mean: Nanos,
        free: Nanos,
        min_base: Nanos,
    ) -> Nanos {
        let ps = paths(1);
        let p = Auto::new(1);
        let l = &p.learned[0];
        l.bandwidth.store(1093 << 20, Relaxed);
        l.base.store(MS, Relaxed);
        l.prev_load.store(prev_load, Relaxed);
        l.prev_mean.store(mean, Relaxed);
        l.prev_bytes_load.store(prev_bytes, Relaxed);
        fold_window(&p, &ps, load, count, size, mean, free, min_base);
        l.base.load(Relaxed)
    }

    #[test]
    fn a_window_of_more_small_requests_is_not_flat() {
        // A fifth more requests in flight at the same 2 ms, but smaller
        // ones: 5 x 200k against 4 x 256k, the same bytes. A link's queue
        // grows with bytes, so this window says nothing of `L`. (Counted
        // in requests it was flat, and `L` went halfway to 1.8 ms.)
        let mib = 1 << 20;
        let l = flat_window((4000, mib), 5000, 25, 200 << 10, 2 * MS, 2 * MS, MS / 2);
        assert_eq!(l, MS);
        // A fifth more bytes as well: flat, the latency is the path's own.
        let l = flat_window((4000, mib), 5000, 25, 256 << 10, 2 * MS, 2 * MS, MS / 2);
        assert!(l > MS * 13 / 10, "{l}");
    }

    #[test]
    fn a_deep_flat_window_raises_l_by_a_tenth_at_most() {
        // 10 requests in flight after 8, at the same 4 ms: what the modelled
        // wait does not explain (3 ms a request) may be a queue that a
        // bandwidth believed too high hides, so `L` moves towards 1.1 ms at
        // most (it went to 2 ms, and window after window `L` and `B`
        // ratcheted up together).
        let (size, mib) = (256 << 10, 1 << 20);
        let l = flat_window((8000, 2 * mib), 10_000, 40, size, 4 * MS, 3 * MS, MS / 2);
        assert!(l <= MS * 11 / 10, "{l}");
        // ... unless every request of the window was further away than
        // that: the path itself went further.
        let l = flat_window(
            (8000, 2 * mib),
            10_000,
            40,
            size,
            4 * MS,
            3 * MS,
            5 * MS / 2,
        );
        assert!(l > MS * 15 / 10, "{l}");
    }

    #[test]
    fn the_even_split_is_expected_at_each_paths_share_of_the_load() {
        // Two 512k requests in flight (one just completed): one on a
        // 490 MiB/s path 1.6 ms away, one on a 27 MiB/s link. The even
        // split delivers about 216 MiB/s (service-time in the simulator).
        let ps = paths(2);
        let p = Auto::new(2);
        let set = |i: usize, bw: u64, base: Nanos| {
            p.learned[i].bandwidth.store(bw << 20, Relaxed);
            p.learned[i].base.store(base, Relaxed);
        };
        set(0, 490, 1_600_000);
        set(1, 27, 930_000);
        let size = 512 << 10;
        ps[0].acquire(size, 1);
        let mib_s = p.even_rate(&ps, 2, size) >> 20;
        assert!((200..=230).contains(&mib_s), "{mib_s} MiB/s");
        // Below one request per path, the slowest paths hold them: the
        // 27 MiB/s link one (25 MiB/s), a 490 MiB/s one the other (195).
        let ps = paths(3);
        let p3 = Auto::new(3);
        for (i, bw) in [(0, 27), (1, 490), (2, 490)] {
            p3.learned[i].bandwidth.store(bw << 20, Relaxed);
            p3.learned[i].base.store(1_600_000, Relaxed);
        }
        ps[1].acquire(size, 1);
        let mib_s = p3.even_rate(&ps, 2, size) >> 20;
        assert!((205..=235).contains(&mib_s), "{mib_s} MiB/s");
        // A path without a model: no estimate.
        p3.learned[0].bandwidth.store(0, Relaxed);
        assert_eq!(p3.even_rate(&ps, 2, size), u64::MAX);
    }

    #[test]
    fn uses_the_bandwidth_of_a_delayed_path() {
        // Issue 11: equal links, one 30 ms further away; 32 x 64k in
        // flight. All on the near link (100 MiB/s) the queue there is
        // 20 ms, below the far link's latency; the far link can carry
        // another 64 MiB/s.
        let ps = paths(2);
        let p = Auto::new(2);
        let links = [(100 << 20, MS / 10), (100 << 20, 30 * MS)];
        let (split, mib_s) = run_timed(&p, &ps, &links, 20_000, 32);
        assert!(mib_s > 150.0, "{mib_s:.1} MiB/s, {split:?}");
        assert!(split[1] * 5 > split[0], "{split:?}");
    }

    // The window rules one at a time (the module text's numbers).

    /// A window of `count` requests of `size` at `mean`, `load` in flight
    /// (per-mille), every latency its own (`free`, `min_base`).
    fn win(load: u64, count: u64, size: u64, mean: Nanos) -> Window {
        Window {
            count,
            size,
            mean,
            free: mean,
            min_base: mean,
            delivered: 128 << 20,
            load,
            bytes_load: load * size / ONE,
        }
    }

    const NEAR: Model = Model {
        bandwidth: 1 << 30,
        base: MS,
    };

    #[test]
    fn rule_1_a_size_fit_sets_the_first_model() {
        let w = win(1000, 16, 1 << 20, 2 * MS);
        // 1 MiB at 1 GiB/s: 976_562 ns of the 2 ms
        let m = size_fit_first(&w, 1 << 30);
        assert_eq!(
            m,
            Model {
                bandwidth: 1 << 30,
                base: 2 * MS - 976_562
            }
        );
        assert_eq!(size_fit_first(&w, 1).base, 1);
    }

    #[test]
    fn rule_2_a_first_window_believes_a_fast_link_unless_it_queued() {
        // One request at a time: `L` the least latency, `B` 8 x 128 MiB/s.
        let w = Window {
            min_base: MS,
            ..win(1000, 16, 64 << 10, 2 * MS)
        };
        assert_eq!(
            bootstrap(&w),
            Model {
                bandwidth: 1 << 30,
                base: MS
            }
        );
        // Overlapping, the least latency under 60% of the mean: a queue.
        // `B` is the rate delivered, `L` the least latency less a 64k
        // transfer at that rate (488_281 ns).
        let w = Window { load: 4000, ..w };
        assert_eq!(
            bootstrap(&w),
            Model {
                bandwidth: 128 << 20,
                base: 511_719
            }
        );
        // ... at 60% it is not.
        let w = Window {
            min_base: 1_200_000,
            ..w
        };
        assert_eq!(bootstrap(&w).bandwidth, 1 << 30);
        // `L` at least a quarter of the least latency.
        let w = Window {
            min_base: 300_000,
            mean: MS,
            ..w
        };
        assert_eq!(bootstrap(&w).base, 75_000);
    }

    #[test]
    fn rule_3_a_flat_window_counts_requests_shallow_and_bytes_deep() {
        let prev = Prev {
            load: 1000,
            bytes_load: 64 << 10,
            mean: MS,
        };
        assert!(flat(&win(1200, 16, 64 << 10, 1_050_000), &prev));
        assert!(!flat(&win(1200, 16, 64 << 10, 1_050_001), &prev));
        assert!(!flat(&win(1199, 16, 64 << 10, MS), &prev));
        assert!(!flat(
            &win(1200, 16, 64 << 10, MS),
            &Prev { load: 0, ..prev }
        ));
        // From 1.5 in flight, bytes: more requests of the same bytes are not
        // more load, more bytes are.
        let prev = Prev {
            load: 4000,
            bytes_load: 1 << 20,
            mean: 2 * MS,
        };
        assert!(!flat(&win(5000, 16, 209_715, 2 * MS), &prev));
        assert!(flat(&win(5000, 16, 256 << 10, 2 * MS), &prev));
    }

    #[test]
    fn rule_3_a_flat_windows_l_is_its_own_latency_rising_a_tenth_when_deep() {
        // Shallow: the mean less the transfer time (61_035 ns of 64k).
        assert_eq!(
            flat_base(&win(2000, 16, 64 << 10, 3 * MS), &NEAR),
            3 * MS - 61_035
        );
        // Deep: the latency less the modelled wait, at most 1.1 x `L` ...
        let w = Window {
            min_base: MS / 2,
            ..win(8000, 16, 64 << 10, 3 * MS)
        };
        assert_eq!(flat_base(&w, &NEAR), 1_100_000);
        // ... unless the least latency is further.
        let w = Window {
            min_base: 5 * MS / 2,
            ..w
        };
        assert_eq!(flat_base(&w, &NEAR), 5 * MS / 2);
    }

    #[test]
    fn rule_4_less_load_at_the_same_latency_is_a_longer_path() {
        // 12 requests at 8 ms where the level began at 15, far over the
        // model's 1.03 ms.
        let w = win(12_000, 16, 32 << 10, 8 * MS);
        assert!(longer(&w, &NEAR, 15_000));
        assert!(!longer(&w, &NEAR, 14_399), "under a fifth less load");
        let shallow = win(9_000, 16, 32 << 10, 8 * MS);
        assert!(!longer(&shallow, &NEAR, 11_999), "a level under 12 deep");
        // Not where the model's queue explains the latency.
        let far = Model {
            bandwidth: NEAR.bandwidth,
            base: 7 * MS,
        };
        assert!(!longer(&w, &far, 15_000));
    }

    #[test]
    fn rule_4_a_latency_level_lasts_while_the_mean_holds_and_the_load_does_not_rise() {
        let l = Learned::default();
        assert_eq!(l.level(&win(15_000, 16, 4096, 8 * MS)), 15_000, "the first");
        assert_eq!(l.level(&win(14_000, 16, 4096, 8_300_000)), 15_000);
        assert_eq!(l.level(&win(12_000, 16, 4096, 7_700_000)), 15_000);
        // The mean left the band: a new level ...
        assert_eq!(l.level(&win(11_000, 16, 4096, 7_500_000)), 11_000);
        // ... and more load starts one too.
        assert_eq!(l.level(&win(11_001, 16, 4096, 7_500_000)), 11_001);
    }

    #[test]
    fn rule_5_a_queued_window_needs_latency_and_depth() {
        // 4k: T0 = 1 ms + 3814 ns; queued over 1.3 x that.
        assert!(queued(&win(1301, 16, 4096, 1_310_000), &NEAR));
        assert!(!queued(&win(1300, 16, 4096, 1_310_000), &NEAR));
        assert!(!queued(&win(1301, 16, 4096, 1_300_000), &NEAR));
    }

    #[test]
    fn rule_6_headroom_raises_b_to_the_floor_or_doubles_it_at_the_knee() {
        let m = Model {
            bandwidth: 100 << 20,
            base: MS,
        };
        let w = Window {
            delivered: 100 << 20,
            ..win(1000, 16, 64 << 10, MS)
        };
        assert_eq!(headroom(&w, &m), Some(Err(150 << 20)));
        // 2 MiB in flight take 20 ms at 100 MiB/s, over T0 (11 ms).
        let w = Window {
            delivered: 100 << 20,
            ..win(2000, 16, 1 << 20, MS)
        };
        assert_eq!(headroom(&w, &m), Some(Ok(200 << 20)));
        let w = Window {
            delivered: 50 << 20,
            ..win(1000, 16, 64 << 10, MS)
        };
        assert_eq!(headroom(&w, &m), None);
    }
}
