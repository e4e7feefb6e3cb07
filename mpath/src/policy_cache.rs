//! The installed policy as each worker holds it. A request selects and
//! completes through the policy; loading it from the engine's swap pointer
//! each time costs that pointer's atomics twice per request. A worker keeps
//! an `Arc` of it in its statistics shard instead and takes it again only
//! when the engine's policy generation moved (`Engine::set_policy` bumps it
//! after storing the new policy, so the new generation is never paired
//! with the old policy).

use std::cell::{Ref, RefCell};
use std::sync::Arc;

use crate::engine::Installed;

#[derive(Debug, Default)]
pub(crate) struct PolicyCache(RefCell<Option<(u64, Arc<Installed>)>>);

impl PolicyCache {
    /// The policy held for `generation`, taken with `load` when the one
    /// held is older.
    pub(crate) fn get(
        &self,
        generation: u64,
        load: impl FnOnce() -> Arc<Installed>,
    ) -> Ref<'_, Arc<Installed>> {
        let stale = !matches!(&*self.0.borrow(), Some((g, _)) if *g == generation);
        if stale {
            *self.0.borrow_mut() = Some((generation, load()));
        }
        Ref::map(self.0.borrow(), |c| &c.as_ref().expect("filled above").1)
    }
}

/// The installed policy, loaded or from a worker's cache.
pub(crate) enum PolicyRef<'a> {
    Loaded(arc_swap::Guard<Arc<Installed>>),
    Cached(Ref<'a, Arc<Installed>>),
}

impl std::ops::Deref for PolicyRef<'_> {
    type Target = Installed;
    fn deref(&self) -> &Installed {
        match self {
            PolicyRef::Loaded(g) => g,
            PolicyRef::Cached(r) => r,
        }
    }
}
