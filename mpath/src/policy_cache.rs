//! The installed policy as each worker holds it. A request selects and
//! completes through the policy; loading it from the engine's swap pointer
//! each time costs that pointer's atomics twice per request. A worker keeps
//! an `Arc` of it in its statistics shard instead and takes it again only
//! when the engine's policy generation moved (`Engine::set_policy` bumps it
//! after storing the new policy, so the new generation is never paired
//! with the old policy).

use std::cell::{Ref, RefCell, RefMut};
use std::sync::Arc;

use crate::engine::Installed;
use crate::policy::PolicyLocal;

#[derive(Debug, Default)]
pub(crate) struct PolicyCache {
    held: RefCell<Option<(u64, Arc<Installed>)>>,
    /// The worker's own state for the policy held (`PolicyLocal`).
    local: RefCell<PolicyLocal>,
}

impl PolicyCache {
    /// The policy held for `generation`, taken with `load` when the one
    /// held is older.
    pub(crate) fn get(
        &self,
        generation: u64,
        load: impl FnOnce() -> Arc<Installed>,
    ) -> Ref<'_, Arc<Installed>> {
        let stale = !matches!(&*self.held.borrow(), Some((g, _)) if *g == generation);
        if stale {
            *self.held.borrow_mut() = Some((generation, load()));
            // Sums of the policy let go were its own: they go with it.
            *self.local.borrow_mut() = PolicyLocal::default();
        }
        Ref::map(self.held.borrow(), |c| &c.as_ref().expect("filled above").1)
    }

    /// The worker's state for the policy `get` last returned.
    pub(crate) fn local(&self) -> RefMut<'_, PolicyLocal> {
        self.local.borrow_mut()
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
