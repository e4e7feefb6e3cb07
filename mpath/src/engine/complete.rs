//! A try's completion: its load released, its statistics counted, the
//! policy's sample, and the decision (done, retry, failover, fail) with the
//! request's bookkeeping of paths that failed it.

use std::time::Duration;

use crate::attempts::Attempts;
use crate::classify::{classify, ghost_write_delay, is_ambiguous, Disposition, IoOutcome};
use crate::path::{PathId, PathState};
use crate::policy::PolicyLocal;
use crate::shard::{Cells, StatsShard};
use crate::time::{nanos, Nanos};

use super::{Engine, Installed, IoInfo, IoKind, PolicyCache};

impl Engine {
    /// Releases `io`'s load on `path` without classifying (an I/O dropped
    /// after its frontend went away).
    pub fn release(&self, path: PathId, io: &IoInfo) {
        self.path(path).release(io.bytes, self.now());
    }

    /// Accounts a success: the load released, a good result
    /// for the marginal detector, the statistics, and the policy's sample.
    // Inlined: a separate call passed its arguments on every completion.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn account_done(
        &self,
        path: PathId,
        io: &IoInfo,
        latency: Duration,
        now: Nanos,
        cells: &Cells,
        policy: &Installed,
        local: Option<&mut PolicyLocal>,
    ) {
        self.path(path).release(io.bytes, now);
        self.note_marginal(path, Disposition::Done, IoOutcome::Ok, now, cells);
        let s = cells.path(path.0);
        let lat = nanos(latency);
        match io.kind {
            IoKind::Read => {
                cells.add(&s.reads, 1);
                cells.add(&s.read_bytes, io.bytes);
                cells.record(&s.read_latency, lat);
            }
            IoKind::Write => {
                cells.add(&s.writes, 1);
                cells.add(&s.write_bytes, io.bytes);
                cells.record(&s.write_latency, lat);
            }
            IoKind::Other => cells.add(&s.others, 1),
        }
        policy
            .policy
            .completed(self.paths(), path, io, lat, now, local);
    }

    /// Accounts any other disposition: the load released, the statistics,
    /// and a path error marks the path failed (out of line: rare).
    #[inline(never)]
    fn account_error(
        &self,
        path: PathId,
        io: &IoInfo,
        d: Disposition,
        outcome: IoOutcome,
        now: Nanos,
        cells: &Cells,
    ) {
        let p = self.path(path);
        p.release(io.bytes, now);
        self.note_marginal(path, d, outcome, now, cells);
        let s = cells.path(path.0);
        match d {
            Disposition::Done => unreachable!("a success is accounted by account_done"),
            Disposition::Failover => {
                cells.add(&s.errors, 1);
                cells.add(&s.path_errors, 1);
                // With marginal detection on, an EIO fails the request
                // over and counts in the path's error rate; the rate, not
                // one error, decides (marginal, or failed when nothing
                // succeeds for a whole window).
                if !(p.marginal_on() && is_ambiguous(outcome)) {
                    self.mark_failed_at(path, now);
                }
            }
            Disposition::RetrySamePath { .. } => {
                cells.add(&s.errors, 1);
                cells.add(&s.retries, 1);
            }
            Disposition::Fail => {
                cells.add(&s.errors, 1);
                cells.add(&s.io_errors, 1);
            }
        }
    }

    /// Accounts the completion of one try of a request that keeps its
    /// [`Attempts`] across paths; `range` is its (offset, length) in bytes
    /// (length 0: none). An ambiguous error (EIO) is the request's, not the
    /// path's, when every other path in service already failed this request
    /// the same way, or when the range failed on every path lately: it
    /// completes with an I/O error and the path stays usable. A path error
    /// otherwise fails the path and counts it as tried in this round.
    #[allow(clippy::too_many_arguments)]
    pub fn complete_attempt_at(
        &self,
        path: PathId,
        io: &IoInfo,
        range: (u64, u64),
        latency: Duration,
        outcome: IoOutcome,
        retries: u32,
        att: &mut Attempts,
        now: Nanos,
        shard: &StatsShard,
    ) -> Disposition {
        let (cells, cache) = shard.bind(&self.shards);
        if outcome != IoOutcome::Ok {
            // None of the error rules apply to the success nearly every
            // completion is (nor do the path's retry delays need loading),
            // and an error is never a success.
            let d = self.attempt_error(path, range, outcome, retries, att, now);
            self.account_error(path, io, d, outcome, now, cells);
            return d;
        }
        let policy = self.installed(cache);
        let mut local = cache.map(PolicyCache::local);
        self.account_done(path, io, latency, now, cells, &policy, local.as_deref_mut());
        Disposition::Done
    }

    /// What [`Engine::complete_attempt_at`] decides for a try that failed
    /// with `outcome`, and the request's bookkeeping of it in `att`.
    fn attempt_error(
        &self,
        path: PathId,
        range: (u64, u64),
        outcome: IoOutcome,
        retries: u32,
        att: &mut Attempts,
        now: Nanos,
    ) -> Disposition {
        let mut d = classify(outcome, retries, self.max_retries, self.path(path).crdt());
        if d == Disposition::Failover && is_ambiguous(outcome) {
            att.ambiguous |= 1 << path.0;
            let everywhere =
                att.ambiguous.count_ones() >= 2 && self.in_service() & !att.ambiguous == 0;
            if everywhere {
                self.bad_ranges.remember(range.0, range.1, now);
            }
            if everywhere || self.bad_ranges.overlaps(range.0, range.1, now) {
                d = Disposition::Fail;
            }
        }
        let d = self.marginal_disposition(path, outcome, retries, d);
        if d == Disposition::Failover {
            att.tried |= 1 << path.0;
        }
        d
    }

    /// Paths a request could be sent to now or once they recover: usable
    /// (and ANA-accessible) or failed; not offline or removed.
    pub(super) fn in_service(&self) -> u64 {
        self.paths()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.selectable() || p.state() == PathState::Failed)
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// Ghost-write guard: how long to wait before re-sending `io`, which
    /// failed over from `path` with `outcome` (0 for all but writes that
    /// were cancelled or timed out). See [`ghost_write_delay`].
    pub fn failover_delay(&self, path: PathId, io: &IoInfo, outcome: IoOutcome) -> Duration {
        let delay = self.path(path).write_failover_delay();
        ghost_write_delay(io.kind == IoKind::Write, outcome, delay)
    }
}
