//! Flush bookkeeping: which paths a flush request must reach, and what a
//! flush command made durable once it succeeds.
//!
//! Each path counts the writes completed on it (its write generation) and
//! remembers the generation its last successful flush covered. A flush
//! request received now needs every path that owes a flush to be flushed
//! successfully; the generation a flush command covers is taken when it is
//! sent, so a write completed while it runs is not counted as covered.
//! Concurrent flush requests each send their own commands and each wait for
//! what they need; a failed flush credits nothing, so the path keeps owing.
//!
//! A path that owes a flush and is down (failed, offline, removed):
//! - when a flush through any path covers its writes (`flush_via_any`: the
//!   volatile cache is the device's, as for an NVMe namespace or O_DIRECT
//!   writes, or one page cache shared by every path, as for a regular
//!   file), it rides on a flush sent through another path;
//! - otherwise (a cache of its own: a block device node that took buffered
//!   writes, as its driver says) the flush waits for that path under the
//!   no-path rules: it is sent when the path is back, or fails with an I/O
//!   error at the no-path deadline, and the path keeps owing;
//! - a removed path always rides: its device is closed, and the last close
//!   of a block device writes its page cache back, so what remains to make
//!   durable is the device's cache, which a flush through any path covers.

use crate::engine::Engine;
use crate::path::{PathId, PathState};

/// One flush command of a flush request: sent on `target` while it is
/// usable, else through any path when that covers `target`, else it waits
/// for `target`. It also covers `riders` (paths that are down and whose
/// writes a flush through any path makes durable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushPart {
    pub target: PathId,
    /// A mask of path indices.
    pub riders: u64,
    /// The write generation of each covered path when the command was
    /// last sent (empty until [`Engine::flush_sent`]).
    covers: Vec<(PathId, u64)>,
}

impl FlushPart {
    pub fn new(target: PathId, riders: u64) -> Self {
        Self {
            target,
            riders: riders & !(1 << target.0),
            covers: Vec::new(),
        }
    }

    /// The paths this command makes durable when it succeeds.
    pub fn covered(&self) -> impl Iterator<Item = PathId> + '_ {
        std::iter::once(self.target).chain(
            (0..crate::engine::MAX_PATHS)
                .filter(|i| self.riders & (1 << i) != 0)
                .map(PathId),
        )
    }
}

impl Engine {
    /// Whether a flush sent through any path makes `path`'s completed writes
    /// durable.
    pub fn flush_goes_anywhere(&self, path: PathId) -> bool {
        let p = self.path(path);
        p.flush_via_any() || p.state() == PathState::Removed
    }

    /// Whether a flush command for `target` can be sent now.
    pub fn flush_can_go(&self, target: PathId) -> bool {
        if self.flush_goes_anywhere(target) {
            self.any_usable()
        } else {
            self.path(target).selectable()
        }
    }

    /// The flush commands a flush request received now needs: one per
    /// usable path that owes a flush, one per owing path that is down and
    /// must be flushed itself, and the owing paths a flush through any path
    /// covers ride on the first of them (or on one of their own, sent
    /// through any path). Empty: nothing completed a write since its last
    /// successful flush, and the request completes at once.
    pub fn flush_plan(&self) -> Vec<FlushPart> {
        let mut parts = Vec::new();
        let mut riders = 0u64;
        for (i, p) in self.paths().iter().enumerate() {
            if !p.owes_flush() {
                continue;
            }
            let id = PathId(i);
            if p.selectable() || !self.flush_goes_anywhere(id) {
                parts.push(FlushPart::new(id, 0));
            } else {
                riders |= 1 << i;
            }
        }
        if riders != 0 {
            let usable = parts.iter_mut().find(|f| self.path(f.target).selectable());
            match usable {
                Some(f) => f.riders = riders,
                None => {
                    let first = PathId(riders.trailing_zeros() as usize);
                    parts.push(FlushPart::new(first, riders));
                }
            }
        }
        parts
    }

    /// `part` is being sent to a device now: takes the write generation of
    /// every path it covers (the writes it will make durable).
    pub fn flush_sent(&self, part: &mut FlushPart) {
        let covers: Vec<_> = part
            .covered()
            .map(|id| (id, self.path(id).write_generation()))
            .collect();
        part.covers = covers;
    }

    /// `part` succeeded: what it covered when it was sent is durable.
    pub fn flush_done(&self, part: &FlushPart) {
        for &(id, gen) in &part.covers {
            self.path(id).flush_covered(gen);
        }
    }

    /// Whether any path owes a flush (a flush request would send commands).
    pub fn flush_owed(&self) -> bool {
        self.paths().iter().any(|p| p.owes_flush())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::PathConfig;
    use crate::policy::PolicyName;

    fn engine(n: usize) -> Engine {
        let cfg: Vec<_> = (0..n)
            .map(|i| PathConfig {
                name: format!("p{i}"),
                weight: 1,
                preferred: false,
            })
            .collect();
        Engine::new(&cfg, PolicyName::RoundRobin).unwrap()
    }

    /// Sends and completes every part of a plan successfully.
    fn flush_all(e: &Engine) {
        for mut f in e.flush_plan() {
            e.flush_sent(&mut f);
            e.flush_done(&f);
        }
    }

    #[test]
    fn first_flush_reaches_every_path_then_only_written_ones() {
        let e = engine(3);
        let plan = e.flush_plan();
        assert_eq!(
            plan.iter().map(|f| f.target.0).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        flush_all(&e);
        assert!(e.flush_plan().is_empty(), "nothing written since");
        e.path(PathId(1)).note_write_done();
        let plan = e.flush_plan();
        assert_eq!(plan, vec![FlushPart::new(PathId(1), 0)]);
    }

    #[test]
    fn a_second_flush_while_the_first_runs_still_needs_a_flush() {
        // Write, flush A sent (slow); flush B arrives: the write is not
        // durable until a flush sent after it succeeds.
        let e = engine(1);
        flush_all(&e);
        let a = PathId(0);
        e.path(a).note_write_done();
        let mut fa = e.flush_plan().pop().unwrap();
        e.flush_sent(&mut fa);
        let mut fb = e.flush_plan().pop().expect("B must flush too");
        // A second write completes; B is sent after it and covers it.
        e.path(a).note_write_done();
        e.flush_sent(&mut fb);
        e.flush_done(&fa);
        assert!(e.path(a).owes_flush(), "A did not cover the second write");
        e.flush_done(&fb);
        assert!(!e.path(a).owes_flush());
    }

    #[test]
    fn a_failed_flush_keeps_the_path_owing() {
        let e = engine(2);
        flush_all(&e);
        e.path(PathId(0)).note_write_done();
        let mut f = e.flush_plan().pop().unwrap();
        e.flush_sent(&mut f);
        // It fails (or times out, or is dropped): no flush_done.
        drop(f);
        assert_eq!(e.flush_plan(), vec![FlushPart::new(PathId(0), 0)]);
        // Re-sent and succeeded: clean.
        let mut f = e.flush_plan().pop().unwrap();
        e.flush_sent(&mut f);
        e.flush_done(&f);
        assert!(!e.flush_owed());
    }

    #[test]
    fn a_down_path_rides_on_a_flush_through_another_when_that_covers_it() {
        let e = engine(3);
        flush_all(&e);
        for i in [0, 2] {
            e.path(PathId(i)).note_write_done();
        }
        e.mark_failed_at(PathId(0), 1);
        let plan = e.flush_plan();
        assert_eq!(plan, vec![FlushPart::new(PathId(2), 1 << 0)]);
        let mut f = plan.into_iter().next().unwrap();
        e.flush_sent(&mut f);
        e.flush_done(&f);
        assert!(!e.flush_owed(), "path 0 covered by path 2's flush");

        // Only down paths owe: one command, through any path.
        e.path(PathId(0)).note_write_done();
        let plan = e.flush_plan();
        assert_eq!(plan, vec![FlushPart::new(PathId(0), 1 << 0)]);
        assert!(e.flush_goes_anywhere(PathId(0)));
        assert!(e.flush_can_go(PathId(0)));
    }

    #[test]
    fn a_down_path_with_a_cache_of_its_own_keeps_its_debt() {
        let e = engine(2);
        flush_all(&e);
        let a = PathId(0);
        e.path(a).set_flush_via_any(false);
        e.path(a).note_write_done();
        e.mark_failed_at(a, 1);
        let plan = e.flush_plan();
        assert_eq!(plan, vec![FlushPart::new(a, 0)], "its own command");
        assert!(!e.flush_goes_anywhere(a));
        assert!(!e.flush_can_go(a), "waits for the path itself");
        // A flush through path 1 does not clear it.
        e.path(PathId(1)).note_write_done();
        for mut f in e.flush_plan() {
            if f.target == PathId(1) {
                e.flush_sent(&mut f);
                e.flush_done(&f);
            }
        }
        assert!(e.path(a).owes_flush());
        // Removed: its device is closed (written back); it rides.
        e.set_path_state(a, PathState::Removed);
        assert!(e.flush_goes_anywhere(a));
        assert_eq!(e.flush_plan(), vec![FlushPart::new(a, 1 << 0)]);
    }

    #[test]
    fn concurrent_flushes_finishing_out_of_order_keep_the_highest_cover() {
        let e = engine(1);
        let a = PathId(0);
        let mut f1 = FlushPart::new(a, 0);
        e.flush_sent(&mut f1);
        e.path(a).note_write_done();
        let mut f2 = FlushPart::new(a, 0);
        e.flush_sent(&mut f2);
        e.flush_done(&f2);
        e.flush_done(&f1);
        assert!(!e.path(a).owes_flush());
    }
}
