//! `auto`'s check on its own model: now and then it serves the load with
//! an even split instead (service-time's: the fewest bytes in flight), and
//! keeps whichever delivered more. Under a closed loop the throughput says
//! which choice is better; the model only decides from estimates. The
//! rules (thresholds: `Tuning`, `auto_tuning`):
//!
//! - *Epochs*: the load is served in epochs of at least `epoch_ios`
//!   completions and `epoch_depths` times the requests in flight, or
//!   `epoch_min_ios` once one has run `epoch_time`. After a switch the
//!   next epoch starts once the requests sent before it have completed (only
//!   theirs count down), or after one incumbent epoch, or `max_skip`.
//! - *Trials*: after `until_trial` epochs of the incumbent mode (first
//!   `first_trial`), one epoch is served by the other mode. It wins if it
//!   delivered `margin` more bytes per second than the incumbent (the even
//!   split) or at most `margin` less (the model: its lower latency is worth
//!   keeping). A loss doubles the wait to the next trial up to
//!   `max_backoff` epochs; a win resets it. The epoch after a trial is not
//!   kept (the paths still carry the trial's requests).
//! - *Cut short*: a trial has lost once it ran `losing_after` of the
//!   incumbent's last epoch at under `losing_rate` of its rate; a trial
//!   of the even split that the model expects to deliver less (a doubtful
//!   one) has lost after `doubtful_after` at under `doubtful_rate`. An
//!   incumbent epoch that does as badly is closed too.
//! - *Fell*: the incumbent's rate is the mean of its last two epochs (the
//!   last one where they differ by `moved`). Where the even split is the
//!   incumbent and two epochs in a row fell under `moved` of that, the
//!   model is tried at once (the even split does not see latency; the
//!   model does). One fallen epoch is a stall or a spent burst, not a
//!   path that changed.
//! - *Far paths*: no even split is tried while a path's learned latency
//!   `L` is over the shorter of the
//!   incumbent's last two epochs: its requests would outlast the trial.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use super::auto_local::EpochSums;
use super::auto_tuning::{at_least, over, pm, TUNING as T};
use crate::time::{Nanos, NANOS_PER_SEC};

/// `a` moved from `b`: under `moved` of it, or `b` under `moved` of `a`.
fn moved(a: u64, b: u64) -> bool {
    !at_least(a, b, T.moved) || !at_least(b, a, T.moved)
}

/// How `auto` chooses paths during an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The pipe model (`auto`'s own choice).
    Model,
    /// The fewest bytes in flight (service-time with the paths' weights).
    Even,
}

impl Mode {
    fn other(self) -> Mode {
        match self {
            Mode::Model => Mode::Even,
            Mode::Even => Mode::Model,
        }
    }
}

#[derive(Debug)]
struct State {
    incumbent: Mode,
    trialing: bool,
    /// The incumbent's bytes per second in its last two epochs (0: none).
    rates: [u64; 2],
    until_trial: u32,
    backoff: u32,
    /// The next epoch is not kept (it follows a trial).
    settle: bool,
    /// The rate an even split fell from in its last epoch (0: it did not).
    fell_from: u64,
}

impl State {
    /// The incumbent's rate: the mean of its last two epochs, or the last
    /// one where they differ by more than a quarter.
    fn rate(&self) -> u64 {
        match self.rates {
            [a, b] if b == 0 || moved(a, b) => a,
            [a, b] => (a + b) / 2,
        }
    }

    /// The mode to serve the next epoch, after one of `mode` at `rate`.
    fn close(&mut self, mode: Mode, rate: u64) -> Mode {
        if self.trialing {
            self.trialing = false;
            self.settle = true;
            let incumbent = self.rate();
            let wins = match mode {
                Mode::Even => over(rate, incumbent, 1000 + T.margin),
                Mode::Model => at_least(rate, incumbent, 1000 - T.margin),
            };
            if wins {
                self.incumbent = mode;
                self.rates = [rate, 0];
                self.backoff = 1;
            } else {
                self.backoff = (self.backoff * 2).min(T.max_backoff);
            }
            self.until_trial = self.backoff;
            return self.incumbent;
        }
        if self.settle {
            self.settle = false;
            return self.incumbent;
        }
        // A second fallen epoch is measured against the rate before the first.
        let before = match self.fell_from {
            0 => self.rate(),
            from => from,
        };
        let fell = self.incumbent == Mode::Even && before > 0 && !at_least(rate, before, T.moved);
        if fell && self.fell_from > 0 {
            // *Fell*: an even split is blind to a path that went far away;
            // the model has seen it.
            self.until_trial = 1;
        }
        self.fell_from = if fell && self.fell_from == 0 {
            before
        } else {
            0
        };
        self.rates = [rate, self.rates[0]];
        self.until_trial = self.until_trial.saturating_sub(1);
        if self.until_trial == 0 {
            self.trialing = true;
            return self.incumbent.other();
        }
        self.incumbent
    }
}

/// The paths' state that an epoch boundary needs: read only there, not on
/// every completion (it takes a scan of the paths).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Load {
    /// Requests in flight on all paths.
    pub in_flight: u64,
    /// The largest learned fixed latency of any path.
    pub farthest: Nanos,
    /// What the model expects an even split of the load to deliver,
    /// bytes per second (`u64::MAX`: it cannot tell).
    pub even_rate: u64,
}

#[derive(Debug)]
pub(crate) struct Trial {
    even: AtomicBool,
    epoch_start: AtomicU64,
    bytes: AtomicU64,
    count: AtomicU64,
    /// Completions the current epoch needs (set when it starts).
    epoch_ios: AtomicU64,
    /// Completions still to come of requests sent before the last switch
    /// (at `switched_at`): an epoch starts once the other mode's requests
    /// are back (*Epochs*).
    skip: AtomicU64,
    switched_at: AtomicU64,
    /// How long the incumbent's last epoch took.
    epoch_len: AtomicU64,
    /// The shorter of the incumbent's last two epochs (*Far paths*).
    short_len: AtomicU64,
    /// Below this many bytes per second an epoch has lost (*Cut short*) ...
    losing_rate: AtomicU64,
    /// ... once it ran this share (per-mille) of an epoch.
    losing_after: AtomicU64,
    state: Mutex<State>,
}

impl Default for Trial {
    fn default() -> Self {
        Self {
            even: AtomicBool::new(false),
            epoch_start: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            count: AtomicU64::new(0),
            epoch_ios: AtomicU64::new(T.epoch_ios),
            skip: AtomicU64::new(0),
            switched_at: AtomicU64::new(0),
            epoch_len: AtomicU64::new(0),
            short_len: AtomicU64::new(0),
            losing_rate: AtomicU64::new(0),
            losing_after: AtomicU64::new(T.losing_after),
            state: Mutex::new(State {
                incumbent: Mode::Model,
                trialing: false,
                rates: [0; 2],
                until_trial: T.first_trial,
                backoff: 1,
                settle: false,
                fell_from: 0,
            }),
        }
    }
}

/// Where a completion found the epoch that began at `start` (0: none
/// yet) at a boundary ([`Trial::note`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Boundary {
    /// No epoch runs: the completion may count down the skip (`skipping`)
    /// or start one.
    Between { skipping: bool, start: Nanos },
    /// The epoch is over.
    Close { start: Nanos },
}

impl Trial {
    /// The mode the current epoch is served by.
    pub fn mode(&self) -> Mode {
        if self.even.load(Relaxed) {
            Mode::Even
        } else {
            Mode::Model
        }
    }

    /// A completion of `bytes` at `now`, summed in a worker's `sums`
    /// (moved to the shared ones `at_once`, when ripe, and before the epoch
    /// is closed: `auto_local`): what it needs done beyond its sums, where
    /// an epoch starts or ends, is returned for [`Trial::at_boundary`]. Inlined into every completion; the
    /// caller builds what `load` needs only past a boundary.
    #[inline]
    pub fn note(
        &self,
        bytes: u64,
        now: Nanos,
        sums: &mut EpochSums,
        at_once: bool,
    ) -> Option<Boundary> {
        let start = self.epoch_start.load(Relaxed);
        let skipping = self.skip.load(Relaxed) > 0;
        if skipping || start == 0 {
            return Some(Boundary::Between { skipping, start });
        }
        sums.add(start, bytes, now);
        let so_far = self.bytes.load(Relaxed) + sums.bytes;
        let count = self.count.load(Relaxed) + sums.count;
        let full = count >= self.epoch_ios.load(Relaxed)
            || (now.saturating_sub(start) >= T.epoch_time && count >= T.epoch_min_ios);
        let open = (!full && !self.losing(so_far, start, now)) || now <= start;
        if at_once || !open || sums.ripe(now) {
            let (b, c) = sums.take();
            self.bytes.fetch_add(b, Relaxed);
            self.count.fetch_add(c, Relaxed);
        }
        if open {
            return None;
        }
        Some(Boundary::Close { start })
    }

    /// What [`Trial::note`] found a completion at `now` of a request sent
    /// at `submitted` to need: `load` is asked for the paths' state.
    pub fn at_boundary(
        &self,
        b: Boundary,
        submitted: Nanos,
        now: Nanos,
        load: impl FnOnce(u64) -> Load,
    ) {
        match b {
            Boundary::Between { skipping, start } => {
                self.between_epochs(skipping, start, submitted, now, load);
            }
            Boundary::Close { start } => self.close_epoch(start, now, load),
        }
    }

    /// `completed` while no epoch runs: skipping the completions of the
    /// requests sent before a switch, or before the first epoch.
    #[inline(never)]
    fn between_epochs(
        &self,
        skipping: bool,
        start: Nanos,
        submitted: Nanos,
        now: Nanos,
        load: impl FnOnce(u64) -> Load,
    ) {
        if skipping {
            self.count_down(submitted, now);
        }
        if start == 0 || self.skip.load(Relaxed) == 0 {
            // The epoch starts once every request in flight was sent
            // by its mode; its length follows the depth of the load.
            let depth = load(0).in_flight.saturating_mul(T.epoch_depths);
            self.epoch_ios.store(T.epoch_ios.max(depth), Relaxed);
            self.bytes.store(0, Relaxed);
            self.count.store(0, Relaxed);
            self.epoch_start.store(now.max(1), Relaxed);
        }
    }

    /// `completed` at the end of the epoch that began at `start`: its rate
    /// goes to the state, which says the mode of the next one.
    #[inline(never)]
    fn close_epoch(&self, start: Nanos, now: Nanos, load: impl FnOnce(u64) -> Load) {
        if self
            .epoch_start
            .compare_exchange(start, now, Relaxed, Relaxed)
            .is_err()
        {
            return;
        }
        let bytes = self.bytes.swap(0, Relaxed);
        let ios = self.count.swap(0, Relaxed);
        let len = now - start;
        let rate = (u128::from(bytes) * u128::from(NANOS_PER_SEC) / u128::from(len))
            .min(u128::from(u64::MAX)) as u64;
        let mode = self.mode();
        let Load {
            in_flight,
            farthest: far,
            even_rate,
        } = load(bytes / ios.max(1));
        // The next epoch (without a switch, it starts now) is sized to the
        // load as it is now.
        let depth = in_flight.saturating_mul(T.epoch_depths);
        self.epoch_ios.store(T.epoch_ios.max(depth), Relaxed);
        let next = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if !st.trialing && !st.settle {
                let prev = self.epoch_len.load(Relaxed);
                self.epoch_len.store(len, Relaxed);
                let short = if prev == 0 { len } else { len.min(prev) };
                self.short_len.store(short, Relaxed);
            }
            let mut next = st.close(mode, rate.max(1));
            if next == Mode::Even && st.trialing && far > self.short_len.load(Relaxed) {
                // *Far paths*: the trial could not be measured; lost.
                next = st.close(Mode::Even, 0);
            }
            // *Cut short*, for any epoch; a doubtful trial sooner. The
            // model only shortens a trial the measurement says is losing.
            let doubtful = next == Mode::Even && st.trialing && even_rate < st.rate();
            let (losing, after) = if doubtful {
                (pm(st.rate(), T.doubtful_rate), T.doubtful_after)
            } else {
                (pm(st.rate(), T.losing_rate), T.losing_after)
            };
            self.losing_rate.store(losing, Relaxed);
            self.losing_after.store(after, Relaxed);
            next
        };
        if next != mode {
            self.switched_at.store(now, Relaxed);
            self.skip.store(in_flight, Relaxed);
            self.even.store(next == Mode::Even, Relaxed);
        }
    }

    /// While skipping after a switch: a completion of a request sent
    /// before it counts down.
    fn count_down(&self, submitted: Nanos, now: Nanos) {
        let switched = self.switched_at.load(Relaxed);
        let bound = T.max_skip.min(self.epoch_len.load(Relaxed));
        if now.saturating_sub(switched) >= bound {
            // A request that never came back (failed over, cancelled), or
            // one far away, does not hold the epoch off for long.
            self.skip.store(0, Relaxed);
        } else if submitted < switched {
            self.skip
                .fetch_update(Relaxed, Relaxed, |s| s.checked_sub(1))
                .ok();
        }
    }

    /// The epoch has lost (*Cut short*): it ran `losing_after` of the
    /// incumbent's last epoch at under `losing_rate`.
    fn losing(&self, bytes: u64, start: Nanos, now: Nanos) -> bool {
        let rate = self.losing_rate.load(Relaxed);
        let elapsed = now.saturating_sub(start);
        rate > 0
            && at_least(
                elapsed,
                self.epoch_len.load(Relaxed),
                self.losing_after.load(Relaxed),
            )
            && u128::from(bytes) * u128::from(NANOS_PER_SEC)
                < u128::from(rate) * u128::from(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Trial {
        /// A completion at `now` of `bytes` sent at `submitted`, summed in a
        /// worker's `sums` (moved to the shared ones `at_once`, when ripe, and
        /// before the epoch is closed: `auto_local`). `load` is asked for the
        /// paths' state only where an epoch starts or ends.
        pub fn completed(
            &self,
            bytes: u64,
            submitted: Nanos,
            now: Nanos,
            sums: &mut EpochSums,
            at_once: bool,
            load: impl FnOnce(u64) -> Load,
        ) {
            if let Some(b) = self.note(bytes, now, sums, at_once) {
                self.at_boundary(b, submitted, now, load);
            }
        }
    }

    fn state() -> State {
        Trial::default().state.into_inner().unwrap()
    }

    /// One 4k completion at `now` of a request sent at `submitted`, with
    /// `in_flight` requests out and a path `far` away.
    fn complete(t: &Trial, submitted: Nanos, now: Nanos, in_flight: u64, far: Nanos) {
        let load = Load {
            in_flight,
            farthest: far,
            even_rate: u64::MAX,
        };
        t.completed(
            4096,
            submitted,
            now,
            &mut EpochSums::default(),
            true,
            |_| load,
        );
    }

    /// The model as incumbent at 100, its next trial eight epochs away.
    fn steady() -> State {
        let mut s = state();
        s.rates = [100, 100];
        s.until_trial = 8;
        s.backoff = 8;
        s
    }

    #[test]
    fn a_trial_of_the_even_split_comes_early_and_backs_off_when_it_loses() {
        let mut s = state();
        assert_eq!(s.close(Mode::Model, 100), Mode::Model);
        assert_eq!(s.close(Mode::Model, 100), Mode::Even);
        // 2% more is not enough
        assert_eq!(s.close(Mode::Even, 102), Mode::Model);
        assert_eq!(s.until_trial, 2);
        // the epoch after a trial is not counted
        assert_eq!(s.close(Mode::Model, 10), Mode::Model);
        assert_eq!(s.close(Mode::Model, 100), Mode::Model);
        assert_eq!(s.close(Mode::Model, 100), Mode::Even);
        assert_eq!(s.close(Mode::Even, 50), Mode::Model);
        assert_eq!(s.until_trial, 4);
    }

    #[test]
    fn an_even_split_that_delivers_more_takes_over_until_the_model_ties() {
        let mut s = state();
        s.close(Mode::Model, 100);
        s.close(Mode::Model, 100);
        assert_eq!(s.close(Mode::Even, 120), Mode::Even);
        assert_eq!(s.incumbent, Mode::Even);
        // settle, then the model is tried again at once, and loses at 10% less
        assert_eq!(s.close(Mode::Even, 120), Mode::Even);
        assert_eq!(s.close(Mode::Even, 120), Mode::Model);
        assert_eq!(s.close(Mode::Model, 108), Mode::Even);
        // ... and wins back where it ties
        assert_eq!(s.close(Mode::Even, 120), Mode::Even);
        assert_eq!(s.close(Mode::Even, 120), Mode::Even);
        assert_eq!(s.close(Mode::Even, 120), Mode::Model);
        assert_eq!(s.close(Mode::Model, 118), Mode::Model);
        assert_eq!(s.incumbent, Mode::Model);
    }

    #[test]
    fn an_even_split_whose_rate_falls_twice_gives_way_to_the_model_at_once() {
        let mut s = state();
        s.incumbent = Mode::Even;
        s.rates = [100, 100];
        s.until_trial = 8;
        s.backoff = 8;
        // the first path went far away: the even split, blind to it,
        // would serve more epochs there; after a second fallen epoch the
        // model is tried next
        assert_eq!(s.close(Mode::Even, 30), Mode::Even);
        assert!(!s.trialing);
        assert_eq!(s.close(Mode::Even, 30), Mode::Model);
        assert!(s.trialing);
        // ... and, delivering more than the fallen rate, takes over
        assert_eq!(s.close(Mode::Model, 90), Mode::Model);
        assert_eq!(s.incumbent, Mode::Model);
        // one fallen epoch (a stall, a spent burst) keeps the turn
        let mut s = state();
        s.incumbent = Mode::Even;
        s.rates = [100, 100];
        s.until_trial = 8;
        assert_eq!(s.close(Mode::Even, 30), Mode::Even);
        assert_eq!(s.close(Mode::Even, 100), Mode::Even);
        assert_eq!(s.close(Mode::Even, 30), Mode::Even);
        assert!(!s.trialing);
        // a rate that rose is no reason to leave the even split
        let mut s = state();
        s.incumbent = Mode::Even;
        s.rates = [100, 100];
        s.until_trial = 8;
        assert_eq!(s.close(Mode::Even, 150), Mode::Even);
    }

    #[test]
    fn a_trial_is_not_held_against_the_epoch_a_change_stalled() {
        let mut s = steady();
        s.until_trial = 2;
        // requests stuck on a path that just went far away: an epoch at
        // under a third of the rate, and the model, having learned it,
        // back at its rate the next: the incumbent's rate is that one's,
        // not the mean of the two
        assert_eq!(s.close(Mode::Model, 30), Mode::Model);
        assert_eq!(s.close(Mode::Model, 100), Mode::Even);
        assert_eq!(s.rate(), 100);
        // an even split at 80 loses (it beats the stalled epoch's 30 and
        // the mean's 65)
        assert_eq!(s.close(Mode::Even, 80), Mode::Model);
        assert_eq!(s.incumbent, Mode::Model);
        // where two epochs differ by less, the rate is their mean
        let mut s = steady();
        s.close(Mode::Model, 80);
        assert_eq!(s.rate(), 90);
    }

    #[test]
    fn backoff_is_bounded() {
        let mut s = state();
        for _ in 0..2000 {
            let m = if s.trialing { Mode::Even } else { Mode::Model };
            let r = if m == Mode::Even { 10 } else { 100 };
            s.close(m, r);
        }
        assert_eq!(s.backoff, T.max_backoff);
        assert_eq!(s.incumbent, Mode::Model);
    }

    /// A closed loop of `depth` requests at one request per `model` or
    /// `even` ns each (by the mode it was sent by) for `ios` completions:
    /// the share of the time the model served.
    fn drive(t: &Trial, depth: usize, ios: usize, model: Nanos, even: Nanos) -> f64 {
        drive_expecting(t, depth, ios, model, even, u64::MAX)
    }

    /// Bytes per second of two 4k requests in flight, `per` ns each.
    fn depth_two_rate(per: Nanos) -> u64 {
        2 * 4096 * NANOS_PER_SEC / per
    }

    /// `drive`, with the model expecting the even split to deliver
    /// `even_rate` bytes per second.
    fn drive_expecting(
        t: &Trial,
        depth: usize,
        ios: usize,
        model: Nanos,
        even: Nanos,
        even_rate: u64,
    ) -> f64 {
        let mut now = 1;
        let mut out: Vec<(Nanos, Mode, Nanos)> = Vec::new();
        let mut model_time = 0;
        for _ in 0..ios {
            // Every event a nanosecond after the last at least, as on a
            // clock: a request sent after a switch is sent after it, and
            // requests sent together before one come back one by one.
            while out.len() < depth {
                now += 1;
                let m = t.mode();
                let lat = if m == Mode::Even { even } else { model };
                out.push((now + lat, m, now));
            }
            out.sort_by_key(|&(done, _, _)| done);
            let (done, m, sent) = out.remove(0);
            let at = done.max(now + 1);
            if m == Mode::Model {
                model_time += at - now;
            }
            now = at;
            let in_flight = out.len() as u64;
            t.completed(4096, sent, now, &mut EpochSums::default(), true, |_| Load {
                in_flight,
                farthest: 0,
                even_rate,
            });
        }
        model_time as f64 / now as f64
    }

    #[test]
    fn the_model_keeps_nearly_all_the_time_against_a_slower_even_split() {
        let t = Trial::default();
        let share = drive(&t, 16, 50_000, 1_000_000, 3_000_000);
        assert!(share > 0.95, "{share}");
        assert_eq!(t.mode(), Mode::Model);
    }

    #[test]
    fn a_faster_even_split_takes_over() {
        let t = Trial::default();
        let share = drive(&t, 16, 50_000, 1_000_000, 700_000);
        assert!(share < 0.1, "{share}");
        assert_eq!(t.mode(), Mode::Even);
    }

    #[test]
    fn a_trial_far_behind_is_cut_after_half_an_epoch() {
        // Ten times slower at depth 4: without the cut each trial ran to
        // its deadline, twice the model's epoch, and the model served 0.93
        // of the time over 20,000 completions (0.97 with it).
        let t = Trial::default();
        let share = drive(&t, 4, 20_000, 100_000, 1_000_000);
        assert!(share > 0.95, "{share}");
    }

    #[test]
    fn an_epoch_of_the_incumbent_that_slows_down_is_cut_short() {
        // Depth 1 at 100 us per request, then at 10 ms (a path 10 ms
        // further away, the only one used): the epoch under way closes
        // within a few slow completions, not after 96 of them (1 s).
        let t = Trial::default();
        let mut now = 1;
        for _ in 0..2000 {
            now += 100_000;
            complete(&t, now - 100_000, now, 1, 0);
        }
        let before = t.epoch_start.load(Relaxed);
        let mut slow = 0;
        while t.epoch_start.load(Relaxed) == before {
            now += 10_000_000;
            complete(&t, now - 10_000_000, now, 1, 0);
            slow += 1;
            assert!(slow < 20, "the epoch ran {slow} slow completions");
        }
    }

    /// Completions at depth 1, `per` ns each, until `n` epochs have
    /// started: how many completions each of them took.
    fn epoch_sizes(per: Nanos, n: usize) -> Vec<u64> {
        let t = Trial::default();
        let mut now = 1;
        let (mut sizes, mut last, mut count) = (Vec::new(), 0, 0);
        while sizes.len() < n {
            now += per;
            complete(&t, now - per, now, 0, 0);
            count += 1;
            let start = t.epoch_start.load(Relaxed);
            if start != last {
                if last != 0 {
                    sizes.push(count);
                }
                (last, count) = (start, 0);
            }
        }
        sizes
    }

    #[test]
    fn an_epoch_of_slow_completions_closes_after_its_time() {
        // 2 ms each: 96 completions would take 192 ms, a tenth of a run
        // of two seconds per epoch; at 100 ms it has 50.
        assert!(epoch_sizes(2_000_000, 6).iter().all(|&n| n == 50));
        // 10 ms each: 24 completions at the least, not the 10 of 100 ms.
        assert!(epoch_sizes(10_000_000, 6)
            .iter()
            .all(|&n| n == T.epoch_min_ios));
        // 0.1 ms each: 96, the time is not reached.
        assert!(epoch_sizes(100_000, 6).iter().all(|&n| n == T.epoch_ios));
    }

    /// A `Trial` just switched from the model to an even split (its first
    /// trial) with three of the model's requests still out, and the time.
    fn just_switched() -> (Trial, Nanos) {
        let t = Trial::default();
        let mut now: Nanos = 1;
        while t.mode() == Mode::Model {
            now += 100_000;
            complete(&t, now.saturating_sub(400_000), now, 3, 0);
        }
        assert_eq!(t.skip.load(Relaxed), 3);
        (t, now)
    }

    #[test]
    fn after_a_switch_only_requests_sent_before_it_hold_the_epoch_off() {
        let (t, switched) = just_switched();
        let mut now = switched;
        // the even split's own, sent after the switch, come back first
        for _ in 0..10 {
            now += 10_000;
            complete(&t, now - 5_000, now, 3, 0);
            assert_eq!(t.epoch_start.load(Relaxed), switched);
        }
        // then the model's three
        for _ in 0..3 {
            now += 10_000;
            complete(&t, switched - 1, now, 3, 0);
        }
        assert_eq!(t.epoch_start.load(Relaxed), now);
    }

    #[test]
    fn a_request_that_never_comes_back_holds_the_epoch_off_one_epoch_at_most() {
        // Two of the model's three come back, the third never: the epoch
        // starts one of the model's epochs (96 completions of 0.1 ms)
        // after the switch.
        let (t, switched) = just_switched();
        complete(&t, switched - 1, switched + 1, 3, 0);
        complete(&t, switched - 1, switched + 2, 3, 0);
        let mut now = switched + 2;
        while t.epoch_start.load(Relaxed) == switched {
            now += 100_000;
            complete(&t, now - 5_000, now, 3, 0);
            assert!(now - switched <= 9_700_000, "{} ns", now - switched);
        }
    }

    #[test]
    fn a_path_farther_than_the_shorter_of_two_epochs_keeps_the_even_split_out() {
        // Epochs of 96 completions at 1 ms (96 ms), then one slowed to
        // 1.9 ms each (182 ms) by a path now 150 ms away: measured against
        // the slow epoch alone that path would let a trial in.
        let t = Trial::default();
        let mut now = 1;
        let mut step = |per: Nanos, n: usize, far: Nanos| {
            for _ in 0..n {
                now += per;
                complete(&t, now - per, now, 1, far);
                assert_eq!(t.mode(), Mode::Model);
            }
        };
        step(1_000_000, 97, 0);
        step(1_900_000, 96, 150_000_000);
        step(1_000_000, 500, 150_000_000);
    }

    #[test]
    fn a_slow_trial_at_depth_one_is_cut_short() {
        // 30 times slower: each trial lasts twice the model's epoch, not
        // its 96 completions.
        let t = Trial::default();
        let share = drive(&t, 1, 50_000, 100_000, 3_000_000);
        assert!(share > 0.9, "{share}");
    }

    #[test]
    fn a_trial_the_model_doubts_is_cut_once_it_falls_short() {
        // Depth 2, the even split at 2/3 of the model's rate: never under
        // half, so an ordinary trial runs its whole epoch. Expected by the
        // model at under the incumbent's rate, it is cut after a quarter.
        let (model, even) = (1_000_000, 1_500_000);
        let trusted = drive(&Trial::default(), 2, 20_000, model, even);
        let doubted = drive_expecting(
            &Trial::default(),
            2,
            20_000,
            model,
            even,
            depth_two_rate(even),
        );
        assert!(
            1.0 - doubted < (1.0 - trusted) / 2.0,
            "even split's share of the time: {:.4} doubted, {:.4} trusted",
            1.0 - doubted,
            1.0 - trusted
        );
    }

    #[test]
    fn a_doubted_trial_that_delivers_more_still_wins() {
        // The model expects the even split at a third of its rate, but
        // it delivers twice as much: the measurement decides.
        let t = Trial::default();
        let (model, even) = (1_000_000, 500_000);
        let share = drive_expecting(&t, 2, 20_000, model, even, depth_two_rate(3_000_000));
        assert_eq!(t.mode(), Mode::Even);
        assert!(share < 0.2, "{share}");
    }
}
