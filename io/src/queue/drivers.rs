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
    /// Per path: not looked up yet (`None`), or what the table had.
    cached: Vec<Option<Option<Arc<dyn PathDriver>>>>,
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
            self.look_up(paths, path);
        }
        self.cached[path].as_ref().and_then(Option::as_ref)
    }

    /// Fills `cached[path]` from the table (after a refresh).
    #[cold]
    #[inline(never)]
    fn look_up<P: PathTable>(&mut self, paths: &P, path: usize) {
        self.refresh(paths);
        if path >= self.cached.len() {
            self.cached.resize_with(path + 1, || None);
        }
        self.cached[path].get_or_insert_with(|| paths.driver(path));
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
        true
    }
}
