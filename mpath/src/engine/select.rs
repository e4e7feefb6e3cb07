//! Choosing a path for a try of a request: the candidates (usable paths of
//! the best ANA group, healthy before marginal), the policy's pick, the
//! drain handshake, and the rounds over the paths a request may make.

use crate::attempts::{Attempts, Selection};
use crate::path::{AnaState, Path, PathId, PathState};
use crate::policy::SubmitContext;
use crate::shard::{Cells, StatsShard};
use crate::time::Nanos;

use super::{Engine, Installed, IoInfo};

impl Engine {
    /// Selectable paths of the best ANA group, minus `exclude`.
    pub(super) fn candidates(paths: &[Path], exclude: u64) -> u64 {
        Self::candidates_and_aside(paths, exclude).0
    }

    /// [`Engine::candidates`], and the marginal paths of the same group set
    /// aside from them (what `trickle` looks at), in one pass over the paths.
    fn candidates_and_aside(paths: &[Path], exclude: u64) -> (u64, u64) {
        let mut optimized = 0u64;
        let mut non_optimized = 0u64;
        let mut marginal = 0u64;
        for (i, p) in paths.iter().enumerate() {
            if exclude & (1 << i) != 0 {
                continue;
            }
            // One load for the state, the ANA state and the marginal flag.
            let s = p.standing();
            if s.optimized() {
                optimized |= 1 << i;
            } else if s.non_optimized() {
                non_optimized |= 1 << i;
            } else {
                continue;
            }
            if s.marginal() {
                marginal |= 1 << i;
            }
        }
        let all = if optimized != 0 {
            optimized
        } else {
            non_optimized
        };
        // Marginal paths only when no healthy one is usable.
        let healthy = all & !marginal;
        if healthy != 0 {
            (healthy, all & marginal)
        } else {
            (all, 0)
        }
    }

    /// [`Engine::candidates`] before marginal paths are set aside.
    pub(crate) fn accessible(paths: &[Path], exclude: u64) -> u64 {
        let mut optimized = 0u64;
        let mut non_optimized = 0u64;
        for (i, p) in paths.iter().enumerate() {
            if exclude & (1 << i) != 0 || p.state() != PathState::Usable {
                continue;
            }
            match p.ana_state() {
                AnaState::Optimized => optimized |= 1 << i,
                AnaState::NonOptimized => non_optimized |= 1 << i,
                _ => {}
            }
        }
        if optimized != 0 {
            optimized
        } else {
            non_optimized
        }
    }

    /// Whether any path could take I/O now.
    pub fn any_usable(&self) -> bool {
        Self::candidates(self.paths(), 0) != 0
    }

    // Inlined into the selections: a call of its own spilled half its
    // arguments.
    #[inline(always)]
    fn select_in(
        &self,
        io: &IoInfo,
        exclude: u64,
        ctx: &SubmitContext,
        cells: &Cells,
        policy: &Installed,
    ) -> Option<PathId> {
        let paths = self.paths();
        let (candidates, aside) = Self::candidates_and_aside(paths, exclude);
        if candidates == 0 {
            return None;
        }
        let trickled = match aside {
            0 => None,
            _ => self.trickle(paths, aside, ctx.now),
        };
        let id = match trickled {
            Some(id) => id,
            None => policy.policy.select(paths, candidates, io, ctx)?,
        };
        let p = &paths[id.0];
        p.acquire(io.bytes, ctx.now);
        // The drain handshake: the path may have gone offline or been
        // removed since `candidates` looked at it.
        if p.state() == PathState::Usable {
            cells.add(&cells.path(id.0).selected, 1);
            return Some(id);
        }
        p.unacquire(io.bytes, ctx.now);
        self.reselect(io, exclude | 1 << id.0, ctx, cells, policy)
    }

    /// [`Engine::select_in`] out of line, for the rare second selections:
    /// without a path that went out of service as it was picked (at most
    /// once per path: the mask fills), and in a new round. Apart, so that
    /// the common case keeps its registers.
    #[cold]
    #[inline(never)]
    fn reselect(
        &self,
        io: &IoInfo,
        exclude: u64,
        ctx: &SubmitContext,
        cells: &Cells,
        policy: &Installed,
    ) -> Option<PathId> {
        self.select_in(io, exclude, ctx, cells, policy)
    }

    /// Accounts `io` on a path chosen by the caller (a flush that must reach
    /// that path, a retry on the same path), counted in `shard`. `false` if
    /// it is not selectable.
    pub fn select_path_at(
        &self,
        path: PathId,
        io: &IoInfo,
        now: Nanos,
        shard: &StatsShard,
    ) -> bool {
        let Some(p) = self.paths().get(path.0) else {
            return false;
        };
        if !p.selectable() {
            return false;
        }
        p.acquire(io.bytes, now);
        // The drain handshake, as in `select_in`.
        if p.state() != PathState::Usable {
            p.unacquire(io.bytes, now);
            return false;
        }
        let cells = shard.cells_in(&self.shards);
        cells.add(&cells.path(path.0).selected, 1);
        true
    }

    /// Picks a path for a request with `att` (never one that failed it in
    /// this round; a new round once every usable path did) and accounts
    /// `io` on it.
    pub fn select_attempt(
        &self,
        io: &IoInfo,
        att: &mut Attempts,
        ctx: &SubmitContext,
        shard: &StatsShard,
    ) -> Selection {
        let (cells, cache) = shard.bind(&self.shards);
        let policy = self.installed(cache);
        if let Some(p) = self.select_in(io, att.tried, ctx, cells, &policy) {
            return Selection::Path(p);
        }
        if !self.any_usable() {
            // Waiting is pointless when every path that could come back
            // already failed it in the last round.
            let last = att.round >= crate::attempts::MAX_ROUNDS;
            if last && self.in_service() & !att.tried == 0 {
                return Selection::Exhausted;
            }
            return Selection::Wait;
        }
        if !att.next_round() {
            return Selection::Exhausted;
        }
        self.reselect(io, 0, ctx, cells, &policy)
            .map_or(Selection::Wait, Selection::Path)
    }

    /// Picks the path for a flush command for `target`: `target` itself
    /// while it is usable; through any path when that covers it; else it
    /// waits for `target`.
    pub fn select_flush(
        &self,
        target: PathId,
        io: &IoInfo,
        att: &mut Attempts,
        ctx: &SubmitContext,
        shard: &StatsShard,
    ) -> Selection {
        if self.path(target).selectable() {
            if att.tried & (1 << target.0) != 0 && !att.next_round() {
                return Selection::Exhausted;
            }
            if self.select_path_at(target, io, ctx.now, shard) {
                return Selection::Path(target);
            }
        }
        if self.flush_goes_anywhere(target) {
            return self.select_attempt(io, att, ctx, shard);
        }
        let last = att.round >= crate::attempts::MAX_ROUNDS;
        if last && att.tried & (1 << target.0) != 0 {
            Selection::Exhausted
        } else {
            Selection::Wait
        }
    }
}
