//! The paths' drivers as one I/O queue holds them. A submission and its
//! completion each need the path's driver; reading it from the table every
//! time costs a lock-free swap-pointer load with its own atomics (a few per
//! request, in the profile). The queue keeps its own `Arc` of each driver
//! instead, good for as long as the table's generation stays the same: one
//! atomic load per access. The table bumps the generation whenever a
//! driver is replaced or dropped, and wakes the queues so that a removed
//! path's device closes without waiting for their next I/O.

use std::sync::Arc;

use super::PathTable;
use crate::PathDriver;

#[derive(Default)]
pub(super) struct Drivers {
    generation: u64,
    /// Per path: the driver the table had; `None` where not looked up yet
    /// or gone (`gone` tells which). One null check on the common path,
    /// where `Option<Option<Arc<..>>>` took a tag and a pointer check.
    cached: Vec<Option<Arc<dyn PathDriver>>>,
    /// Per path: looked up, and the table had no driver (until the
    /// generation changes).
    gone: Vec<bool>,
}

impl Drivers {
    /// Path `path`'s driver; `None` once it is gone.
    #[inline]
    pub(super) fn get<P: PathTable>(
        &mut self,
        paths: &P,
        path: usize,
    ) -> Option<&Arc<dyn PathDriver>> {
        // Inline only the common case (same generation, driver held), the
        // rest out of line: a call per submission and completion showed.
        if paths.generation() != self.generation || !matches!(self.cached.get(path), Some(Some(_)))
        {
            return self.look_up(paths, path);
        }
        self.cached[path].as_ref()
    }

    /// Path `path`'s driver from the table (after a refresh), unless it
    /// was found gone already in this generation.
    #[cold]
    #[inline(never)]
    fn look_up<P: PathTable>(&mut self, paths: &P, path: usize) -> Option<&Arc<dyn PathDriver>> {
        self.refresh(paths);
        if path >= self.cached.len() {
            self.cached.resize_with(path + 1, || None);
            self.gone.resize(path + 1, false);
        }
        if self.cached[path].is_none() && !self.gone[path] {
            self.cached[path] = paths.driver(path);
            self.gone[path] = self.cached[path].is_none();
        }
        self.cached[path].as_ref()
    }

    /// Drops every driver held when the table changed since they were
    /// taken; `true` if it had.
    pub(super) fn refresh<P: PathTable>(&mut self, paths: &P) -> bool {
        let now = paths.generation();
        if now == self.generation {
            return false;
        }
        self.generation = now;
        self.cached.clear();
        self.gone.clear();
        true
    }
}
