//! Marginal paths (multipathd's `marginal_path_err_*`, the kernel's
//! "shaky" paths): a path whose error rate over a sample window reaches a
//! threshold while it still works is marked marginal. The engine then
//! sends it I/O only when no healthy path is usable. After a recheck gap
//! the path gets a trickle of I/O (one request every `sample_time /
//! MIN_SAMPLES`); a window of that trickle (at least `RECHECK_SAMPLES`
//! results) under half the threshold (`RETURN_SHARE`) returns it to
//! healthy, any other starts a new gap. Errors of the trickle
//! fail over to a healthy path, so the guest never sees them.
//!
//! The record is pure bookkeeping over timestamps; the glue at the end
//! (`impl Engine`) is how the engine feeds it completions and probe
//! results, sets marginal paths aside and sends them the recheck trickle.

use std::time::Duration;

use crate::classify::{is_ambiguous, Disposition, IoOutcome};
use crate::engine::Engine;
use crate::path::{MarginalState, Path, PathId};
use crate::policy;
use crate::shard::Cells;
use crate::time::{nanos, Nanos};

/// A window is judged only once it holds this many results (a path with
/// little I/O is judged over a longer window, never on a handful).
pub const MIN_SAMPLES: u64 = 16;

/// A marginal path's windows need this many: a return must not be luck
/// (a path failing 10 % of its I/O passes 16 tries clean one time in 5,
/// 64 one time in 800). At the trickle's pace that is 4 sample windows.
pub const RECHECK_SAMPLES: u64 = 64;

/// A recheck returns the path when its error rate is under this share of
/// the threshold.
pub const RETURN_SHARE: f64 = 0.5;

/// When a path is marginal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MarginalConfig {
    /// Fraction of failed I/O (0-1) over a window that makes a path
    /// marginal; 0 turns detection off.
    pub err_rate: f64,
    /// Length of the sampling window.
    pub sample_time: Duration,
    /// How long a marginal path gets no I/O (while a healthy path is
    /// usable) before it is rechecked.
    pub recheck_gap: Duration,
}

impl Default for MarginalConfig {
    /// Off, as in multipathd: a two-path disk whose paths both show errors
    /// should not have one of them demoted without the operator asking.
    fn default() -> Self {
        Self {
            err_rate: 0.0,
            sample_time: Duration::from_secs(2),
            recheck_gap: Duration::from_secs(30),
        }
    }
}

impl MarginalConfig {
    pub fn enabled(&self) -> bool {
        self.err_rate > 0.0
    }

    /// Checks the ranges the operator may give.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.err_rate) {
            return Err(format!(
                "marginal error rate {}: expected 0 (off) to 1",
                self.err_rate
            ));
        }
        if self.enabled() && self.sample_time.is_zero() {
            return Err("marginal sample time must be above 0".into());
        }
        Ok(())
    }
}

/// What a result did to the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarginalChange {
    None,
    /// The path became marginal.
    Marked,
    /// A recheck passed: the path is healthy again.
    Returned,
    /// Nothing succeeded in a whole window: the path is dead, not marginal
    /// (the engine fails it; probes bring it back).
    Dead,
}

/// The marginal record of one path.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Marginal {
    pub marginal: bool,
    /// When the path was marked (or its last recheck failed).
    pub marked_at: Nanos,
    window_start: Nanos,
    ios: u64,
    errors: u64,
    next_trickle: Nanos,
    /// Error rate of the last judged window.
    pub last_rate: f64,
    /// Times the path became marginal, returned, failed a recheck.
    pub marks: u64,
    pub returns: u64,
    pub rechecks_failed: u64,
}

impl Marginal {
    /// Accounts one result (an I/O or a probe) at `now`.
    pub fn record(&mut self, ok: bool, now: Nanos, cfg: &MarginalConfig) -> MarginalChange {
        if !cfg.enabled() {
            return self.disable();
        }
        self.absorb(1, u64::from(!ok), now);
        self.judge(now, cfg)
    }

    /// Takes `ios` results, `errors` of them failed, counted elsewhere (the
    /// workers' statistics shards) into the window; the first result of a
    /// window opens it at `now`. [`Marginal::judge`] then decides.
    pub fn absorb(&mut self, ios: u64, errors: u64, now: Nanos) {
        if ios == 0 {
            return;
        }
        if self.ios == 0 {
            self.window_start = now;
        }
        self.ios += ios;
        self.errors += errors.min(ios);
    }

    /// Judges the window at `now` once it is long enough and holds enough
    /// results (else nothing changes).
    pub fn judge(&mut self, now: Nanos, cfg: &MarginalConfig) -> MarginalChange {
        if !cfg.enabled() {
            return self.disable();
        }
        let needed = if self.marginal {
            RECHECK_SAMPLES
        } else {
            MIN_SAMPLES
        };
        if self.ios == 0
            || now.saturating_sub(self.window_start) < nanos(cfg.sample_time)
            || self.ios < needed
        {
            return MarginalChange::None;
        }
        let rate = self.errors as f64 / self.ios as f64;
        self.last_rate = rate;
        self.ios = 0;
        self.errors = 0;
        // A marginal path returns only well below the threshold: one just
        // under it would be marked again by its next window, and a path
        // failing 10% of its I/O under a 3% threshold would pass 64 tries
        // with at most one error one time in 100 (none: one in 850).
        let bad = if self.marginal {
            rate >= cfg.err_rate * RETURN_SHARE
        } else {
            rate >= cfg.err_rate
        };
        let rechecking = self.marginal && self.recheck_due(now, cfg);
        if rate >= 1.0 {
            return MarginalChange::Dead;
        }
        match (self.marginal, bad) {
            (false, true) => {
                self.marginal = true;
                self.marked_at = now;
                self.marks += 1;
                MarginalChange::Marked
            }
            (true, false) if rechecking => {
                self.marginal = false;
                self.returns += 1;
                MarginalChange::Returned
            }
            (true, true) if rechecking => {
                self.marked_at = now;
                self.rechecks_failed += 1;
                MarginalChange::None
            }
            _ => MarginalChange::None,
        }
    }

    /// The earliest time [`Marginal::judge`] could decide anything: 0 while
    /// the window is empty (the next result opens it), else the window's
    /// end. Workers compare their clock with it before taking any lock.
    pub fn judge_due(&self, cfg: &MarginalConfig) -> Nanos {
        if self.ios == 0 {
            0
        } else {
            self.window_start.saturating_add(nanos(cfg.sample_time))
        }
    }

    /// Whether [`Marginal::trickle`] at `now` would give the path a request.
    pub fn trickle_due(&self, now: Nanos, cfg: &MarginalConfig) -> bool {
        self.marginal && self.recheck_due(now, cfg) && now >= self.next_trickle
    }

    fn recheck_due(&self, now: Nanos, cfg: &MarginalConfig) -> bool {
        now >= self.marked_at.saturating_add(nanos(cfg.recheck_gap))
    }

    /// Whether this marginal path should take one request now although a
    /// healthy path is usable (the recheck trickle); takes the slot.
    pub fn trickle(&mut self, now: Nanos, cfg: &MarginalConfig) -> bool {
        if !self.trickle_due(now, cfg) {
            return false;
        }
        // The first trickle of a recheck opens a fresh window: results from
        // before the gap say nothing about the path now.
        if self.next_trickle <= self.marked_at.saturating_add(nanos(cfg.recheck_gap)) {
            self.ios = 0;
            self.errors = 0;
        }
        let every = nanos(cfg.sample_time) / MIN_SAMPLES;
        self.next_trickle = now.saturating_add(every.max(1));
        true
    }

    /// Detection turned off: the path is healthy, the window empty.
    pub fn disable(&mut self) -> MarginalChange {
        self.ios = 0;
        self.errors = 0;
        if self.marginal {
            self.marginal = false;
            return MarginalChange::Returned;
        }
        MarginalChange::None
    }

    /// Operator reset (the path was brought online or re-added).
    pub fn reset(&mut self) {
        let (marks, returns, failed) = (self.marks, self.returns, self.rechecks_failed);
        *self = Self {
            marks,
            returns,
            rechecks_failed: failed,
            ..Self::default()
        };
    }
}

/// What the engine feeds the per-path records, the recheck trickle, and the
/// settings.
impl Engine {
    /// The disk's marginal settings (a path may override them).
    pub fn marginal_defaults(&self) -> MarginalConfig {
        self.marginal
    }

    /// The marginal settings in force on `path`.
    pub fn marginal_config(&self, path: PathId) -> MarginalConfig {
        let m = self
            .path(path)
            .marginal
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        m.config.unwrap_or(self.marginal)
    }

    /// Gives `path` its own marginal settings (`None`: the disk's). With
    /// detection off the path is healthy at once.
    pub fn set_path_marginal(&self, path: PathId, config: Option<MarginalConfig>) {
        let p = self.path(path);
        let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
        self.absorb_marginal(path, &mut m, self.now());
        m.config = config;
        let cfg = config.unwrap_or(self.marginal);
        let on = cfg.enabled();
        if !on {
            m.rec.disable();
        }
        p.set_marginal_flag(m.rec.marginal);
        p.set_marginal_due(m.rec.judge_due(&cfg));
        p.set_marginal_on(on);
    }

    /// Takes the results the shards counted on `path` since the last time
    /// into its marginal record (under its lock).
    pub(crate) fn absorb_marginal(&self, path: PathId, m: &mut MarginalState, now: Nanos) {
        let (ok, bad) = self.shards.marginal_results(path.0);
        let new_ok = ok.saturating_sub(m.seen.0);
        let new_bad = bad.saturating_sub(m.seen.1);
        m.seen = (ok, bad);
        m.rec.absorb(new_ok + new_bad, new_bad, now);
    }

    /// Accounts one probe result in `path`'s marginal record.
    pub(crate) fn record_marginal(&self, path: PathId, ok: bool, now: Nanos) -> MarginalChange {
        let p = self.path(path);
        if !p.marginal_on() {
            return MarginalChange::None;
        }
        let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
        let cfg = m.config.unwrap_or(self.marginal);
        self.absorb_marginal(path, &mut m, now);
        let change = m.rec.record(ok, now, &cfg);
        p.set_marginal_flag(m.rec.marginal);
        p.set_marginal_due(m.rec.judge_due(&cfg));
        change
    }

    /// Accounts a completion's result for the marginal detector: counted in
    /// the worker's shard; the record is locked only when its window may be
    /// judged (or opened), which takes in every shard's results. A dead
    /// window fails the path.
    #[inline]
    fn record_marginal_io(&self, path: PathId, ok: bool, now: Nanos, cells: &Cells) {
        // Detection is off by default: the check stays in the caller.
        if self.path(path).marginal_on() {
            self.count_marginal_io(path, ok, now, cells);
        }
    }

    /// [`Engine::record_marginal_io`] with detection on.
    #[inline(never)]
    fn count_marginal_io(&self, path: PathId, ok: bool, now: Nanos, cells: &Cells) {
        let p = self.path(path);
        let c = cells.path(path.0);
        cells.add(if ok { &c.marginal_ok } else { &c.marginal_bad }, 1);
        if !p.marginal_judge_due(now) {
            return;
        }
        let change = {
            let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
            let cfg = m.config.unwrap_or(self.marginal);
            self.absorb_marginal(path, &mut m, now);
            let change = m.rec.judge(now, &cfg);
            p.set_marginal_flag(m.rec.marginal);
            p.set_marginal_due(m.rec.judge_due(&cfg));
            change
        };
        if change == MarginalChange::Dead {
            self.mark_failed_at(path, now);
        }
    }

    /// Feeds a completion's disposition to the marginal record: done is a
    /// good result, a path error (or an EIO retried on its only path) a
    /// bad one; other retries and request errors say nothing about the path.
    pub(crate) fn note_marginal(
        &self,
        path: PathId,
        d: Disposition,
        outcome: IoOutcome,
        now: Nanos,
        cells: &Cells,
    ) {
        match d {
            Disposition::Done => self.record_marginal_io(path, true, now, cells),
            Disposition::Failover => self.record_marginal_io(path, false, now, cells),
            // An EIO kept on its only path (`marginal_disposition`).
            Disposition::RetrySamePath { .. } if is_ambiguous(outcome) => {
                self.record_marginal_io(path, false, now, cells)
            }
            _ => {}
        }
    }

    /// An EIO on a path under marginal detection that is the only usable
    /// one is retried there (up to `max_retries`) before the round ends:
    /// the path may fail some I/O and is all there is.
    pub(crate) fn marginal_disposition(
        &self,
        path: PathId,
        outcome: IoOutcome,
        retries: u32,
        d: Disposition,
    ) -> Disposition {
        let p = self.path(path);
        if d != Disposition::Failover
            || !is_ambiguous(outcome)
            || !p.marginal_on()
            || retries >= self.max_retries()
            || Self::accessible(self.paths(), 1 << path.0) != 0
        {
            return d;
        }
        Disposition::RetrySamePath {
            after: Duration::ZERO,
        }
    }

    /// A marginal path (set aside from `candidates`) whose recheck trickle
    /// is due takes this request. (Out of line: only with marginal paths.)
    #[inline(never)]
    pub(crate) fn trickle(&self, paths: &[Path], aside: u64, now: Nanos) -> Option<PathId> {
        for i in policy::indices(aside) {
            let p = &paths[i];
            if !p.is_marginal() {
                continue;
            }
            let mut m = p.marginal.lock().unwrap_or_else(|e| e.into_inner());
            let cfg = m.config.unwrap_or(self.marginal);
            if !m.rec.trickle_due(now, &cfg) {
                continue;
            }
            // The first trickle of a recheck empties the window: what the
            // shards counted before it must be taken in (and dropped) first.
            self.absorb_marginal(PathId(i), &mut m, now);
            if m.rec.trickle(now, &cfg) {
                p.set_marginal_due(m.rec.judge_due(&cfg));
                return Some(PathId(i));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn cfg() -> MarginalConfig {
        MarginalConfig {
            err_rate: 0.05,
            sample_time: Duration::from_millis(1000),
            recheck_gap: Duration::from_millis(5000),
        }
    }

    /// `n` results over `span` ms from `t`, every `every`-th one failed
    /// (0: none); the last change seen.
    fn feed(m: &mut Marginal, t: Nanos, span: Nanos, n: u64, every: u64) -> MarginalChange {
        let mut last = MarginalChange::None;
        for i in 0..n {
            let ok = every == 0 || (i + 1) % every != 0;
            let c = m.record(ok, t + span * MS * i / (n - 1), &cfg());
            if c != MarginalChange::None {
                last = c;
            }
        }
        last
    }

    #[test]
    fn off_by_default_and_never_marks() {
        let c = MarginalConfig::default();
        assert!(!c.enabled());
        let mut m = Marginal::default();
        for i in 0..1000 {
            assert_eq!(m.record(false, i * MS, &c), MarginalChange::None);
        }
        assert!(!m.marginal);
    }

    #[test]
    fn a_rate_at_the_threshold_marks_and_below_does_not() {
        let mut m = Marginal::default();
        // 1 in 50 (2%) failing over 2 s: healthy.
        assert_eq!(feed(&mut m, 0, 2000, 200, 50), MarginalChange::None);
        assert!(!m.marginal);
        // 1 in 10 (10%): marginal at the end of a window.
        assert_eq!(
            feed(&mut m, 3000 * MS, 2000, 200, 10),
            MarginalChange::Marked
        );
        assert!(m.marginal);
        assert_eq!(m.marks, 1);
        assert!((m.last_rate - 0.1).abs() < 0.05);
    }

    #[test]
    fn a_window_needs_time_and_enough_samples() {
        let mut m = Marginal::default();
        // Half the results fail, but only 15 of them in 10 s: not judged yet.
        for i in 0..15 {
            let c = m.record(i % 2 == 0, i * 700 * MS, &cfg());
            assert_eq!(c, MarginalChange::None);
        }
        assert_eq!(m.record(false, 11_000 * MS, &cfg()), MarginalChange::Marked);
        // 100 results within 0.5 s: judged at the end of the window only.
        let mut m = Marginal::default();
        for i in 0..100 {
            let c = m.record(i % 2 == 0, i * 5 * MS, &cfg());
            assert_eq!(c, MarginalChange::None);
        }
        assert_eq!(m.record(false, 1000 * MS, &cfg()), MarginalChange::Marked);
    }

    #[test]
    fn trickle_only_after_the_gap_and_spaced() {
        let c = cfg();
        let mut m = Marginal::default();
        feed(&mut m, 0, 1000, 100, 2);
        assert!(m.marginal);
        let at = m.marked_at;
        assert!(!m.trickle(at + 4999 * MS, &c), "no I/O during the gap");
        assert!(m.trickle(at + 5000 * MS, &c));
        assert!(!m.trickle(at + 5001 * MS, &c), "one per sample/16");
        assert!(m.trickle(at + 5000 * MS + 1000 * MS / MIN_SAMPLES, &c));
    }

    #[test]
    fn a_recheck_starts_a_fresh_window() {
        let c = cfg();
        let mut m = Marginal::default();
        feed(&mut m, 0, 1000, 100, 2);
        let t = m.marked_at;
        // Errors while it was the last path, not yet a full window.
        for i in 0..10 {
            m.record(false, t + (i + 1) * MS, &c);
        }
        let r = t + 5000 * MS;
        assert!(m.trickle(r, &c));
        assert_eq!(feed(&mut m, r, 1000, 64, 0), MarginalChange::Returned);
    }

    #[test]
    fn a_clean_recheck_returns_a_bad_one_restarts_the_gap() {
        let c = cfg();
        let mut m = Marginal::default();
        feed(&mut m, 0, 1000, 100, 2);
        let marked = m.marked_at;
        // Clean results inside the gap do not return the path.
        assert_eq!(feed(&mut m, marked + MS, 1000, 64, 0), MarginalChange::None);
        assert!(m.marginal);
        // A bad window after the gap: still marginal, a new gap.
        let t = marked + 6000 * MS;
        feed(&mut m, t, 1000, 64, 2);
        assert!(m.marginal);
        assert_eq!(m.rechecks_failed, 1);
        assert!(m.marked_at >= t);
        assert!(!m.trickle(m.marked_at + 1000 * MS, &c));
        // A clean window after that gap: healthy again.
        let t = m.marked_at + 5000 * MS;
        // 16 clean results are not enough for a return; 64 are.
        assert_eq!(feed(&mut m, t, 1000, 16, 0), MarginalChange::None);
        assert!(m.marginal);
        assert_eq!(
            feed(&mut m, t + 1001 * MS, 1000, 48, 0),
            MarginalChange::Returned
        );
        assert!(!m.marginal);
        assert_eq!(m.returns, 1);
    }

    #[test]
    fn a_recheck_returns_only_well_below_the_threshold() {
        // cfg(): threshold 5%. One error in 64 (1.6%) returns the path;
        // two (3.1%, under the threshold but over half of it) do not.
        let c = cfg();
        let mut m = Marginal::default();
        feed(&mut m, 0, 1000, 100, 10);
        assert!(m.marginal);
        let t = m.marked_at + 5000 * MS;
        assert_eq!(feed(&mut m, t, 1000, 64, 32), MarginalChange::None);
        assert!(m.marginal);
        assert_eq!(m.rechecks_failed, 1);
        let t = m.marked_at + 5000 * MS;
        assert_eq!(feed(&mut m, t, 1000, 64, 64), MarginalChange::Returned);
        assert!(!m.marginal && !m.trickle(t + 2000 * MS, &c));
        assert!(!m.trickle(t + 3000 * MS, &c));
    }

    #[test]
    fn turning_detection_off_returns_the_path() {
        let mut m = Marginal::default();
        feed(&mut m, 0, 1000, 100, 2);
        assert!(m.marginal);
        let off = MarginalConfig {
            err_rate: 0.0,
            ..cfg()
        };
        assert_eq!(m.record(false, 2000 * MS, &off), MarginalChange::Returned);
        assert!(!m.marginal);
    }

    #[test]
    fn a_window_without_a_success_is_a_dead_path() {
        let mut m = Marginal::default();
        let c = feed(&mut m, 0, 1000, 20, 1);
        assert_eq!(c, MarginalChange::Dead);
        assert!(!m.marginal);
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = MarginalConfig {
            err_rate: 1.5,
            ..cfg()
        };
        assert!(bad.validate().is_err());
        let zero = MarginalConfig {
            sample_time: Duration::ZERO,
            ..cfg()
        };
        assert!(zero.validate().is_err());
        assert!(cfg().validate().is_ok());
    }
}
