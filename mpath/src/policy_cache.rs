//! The installed policy as each worker holds it. A request selects and
//! completes through the policy; loading it from the engine's swap pointer
//! each time costs that pointer's atomics twice per request. A worker keeps
//! an `Arc` of it in its statistics shard instead and takes it again only
//! when the engine's policy generation moved (`Engine::set_policy` bumps it
//! after storing the new policy, so the new generation is never paired
//! with the old policy).

use std::cell::{Cell, Ref, RefCell, RefMut};
use std::sync::Arc;

use crate::engine::Installed;
use crate::policy::PolicyLocal;

#[derive(Debug)]
pub(crate) struct PolicyCache {
    /// The generation of the policy held (`NONE`: none yet), apart from
    /// the policy so that the check on every call takes no borrow.
    generation: Cell<u64>,
    held: RefCell<Option<Arc<Installed>>>,
    /// The worker's own state for the policy held (`PolicyLocal`).
    local: RefCell<PolicyLocal>,
}

/// No generation is held (the engine's count starts at 0 and never gets
/// this far).
const NONE: u64 = u64::MAX;

impl Default for PolicyCache {
    fn default() -> Self {
        Self {
            generation: Cell::new(NONE),
            held: RefCell::default(),
            local: RefCell::default(),
        }
    }
}

impl PolicyCache {
    /// The policy held for `generation`, taken with `load` when the one
    /// held is older.
    #[inline]
    pub(crate) fn get(
        &self,
        generation: u64,
        load: impl FnOnce() -> Arc<Installed>,
    ) -> Ref<'_, Arc<Installed>> {
        if self.generation.get() != generation {
            self.hold(generation, load);
        }
        Ref::map(self.held.borrow(), |h| h.as_ref().expect("held above"))
    }

    // Out of line with the load, so that the check stays small enough to
    // inline into every select and complete.
    #[cold]
    #[inline(never)]
    fn hold(&self, generation: u64, load: impl FnOnce() -> Arc<Installed>) {
        *self.held.borrow_mut() = Some(load());
        self.generation.set(generation);
        // Sums of the policy let go were its own: they go with it.
        *self.local.borrow_mut() = PolicyLocal::default();
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
