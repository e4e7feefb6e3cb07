//! Timers on the ring: delays, deferrals, and the periodic tick that
//! reports and cancels overdue commands and releases held ones.

use std::time::Duration;

use super::{
    timespec, user_data, Event, IoQueue, PathTable, State, KIND_CANCEL, KIND_CMD, KIND_TICK,
    KIND_TIMER,
};

impl<P: PathTable> IoQueue<P> {
    /// Puts slot `id` on a timer of `after`.
    pub(super) fn start_timer(&mut self, id: usize, after: Duration) -> std::io::Result<()> {
        let slot = &mut self.slots[id];
        let ts = timespec(after);
        let ptr: *const io_uring::types::Timespec = &*ts;
        slot.ts = Some(ts);
        // SAFETY: the timespec is boxed in the slot, which stays in the
        // table until this timer completes.
        let pushed = unsafe { self.ring.push_timeout(ptr, user_data(KIND_TIMER, id)) };
        if pushed.is_err() {
            if let Some(s) = self.slots.get_mut(id) {
                s.ts = None;
            }
            if self.slots[id].state == State::Deferred {
                self.slots.remove(id);
            }
        }
        pushed
    }

    pub(super) fn timer_fired(&mut self, id: usize, _now: u64, f: &mut impl FnMut(Event)) -> usize {
        let Some(slot) = self.slots.get_mut(id) else {
            return 0;
        };
        slot.ts = None;
        match slot.state {
            State::Delayed(outcome) => self.deliver(id, outcome, f),
            State::Deferred => {
                let tag = self.slots.remove(id).tag;
                f(Event::Timer { tag });
                1
            }
            _ => 0,
        }
    }

    /// Ends every timer now (a queue being emptied): delayed completions
    /// and deferrals come back at the next reaps instead of when due.
    pub fn expire_timers(&mut self) {
        for (id, s) in self.slots.iter() {
            if s.ts.is_some() && matches!(s.state, State::Delayed(_) | State::Deferred) {
                // The timer completes with -ECANCELED: handled as fired.
                let _ = self
                    .ring
                    .push_cancel(user_data(KIND_TIMER, id), user_data(KIND_CANCEL, id));
            }
        }
    }

    /// Arms the periodic tick (once: a no-op while it is armed).
    pub fn arm_tick(&mut self) {
        if self.tick_armed {
            return;
        }
        let ptr: *const io_uring::types::Timespec = &*self.tick;
        // SAFETY: the tick's timespec lives as long as the queue.
        match unsafe { self.ring.push_timeout(ptr, user_data(KIND_TICK, 0)) } {
            Ok(()) => self.tick_armed = true,
            Err(e) => log::warn!("io_uring tick: {e}"),
        }
    }

    /// Whether the queue itself needs the tick: held commands, or commands
    /// on a path with an io-timeout to watch.
    pub fn tick_needed(&self) -> bool {
        !self.held.is_empty()
            || self
                .slots
                .iter()
                .any(|(_, s)| watched(s.state) && s.timeout.is_some())
    }

    pub(super) fn tick_fired(
        &mut self,
        now: u64,
        shaped: bool,
        f: &mut impl FnMut(Event),
    ) -> usize {
        self.tick_armed = false;
        let mut n = 0;
        self.files.sweep(&self.ring, &*self.paths);
        if let Some(p) = &mut self.poll {
            p.files.sweep(&p.ring, &*self.paths);
        }
        if shaped {
            for (_, s) in self.slots.iter() {
                let Some(limit) = s.timeout else { continue };
                let age = now.saturating_sub(s.started);
                if watched(s.state) && age > limit {
                    f(Event::Overdue { tag: s.tag, age });
                    n += 1;
                }
            }
        }
        self.cancel_overdue(now);
        if shaped {
            n += self.release_held(now, f);
            f(Event::Tick);
            n += 1;
        }
        if self.tick_needed() {
            self.arm_tick();
        }
        n
    }

    /// Bounds a hung command by its path's io-timeout: a command on the
    /// device past it is cancelled, once. One the kernel can still stop
    /// (file and block-device I/O not yet running in the device) completes
    /// with `-ECANCELED` and is reported timed out; NVMe passthrough
    /// commands carry the same timeout to the kernel, which aborts them.
    fn cancel_overdue(&mut self, now: u64) {
        for (id, s) in self.slots.iter_mut() {
            // A cancellation goes on the command's own ring; the polled
            // ring takes none (NVMe passthrough carries its own timeout).
            if s.state != State::OnDevice || s.cancelled || s.polled {
                continue;
            }
            let Some(limit) = s.timeout else { continue };
            if now.saturating_sub(s.started) > limit
                && self
                    .ring
                    .push_cancel(user_data(KIND_CMD, id), user_data(KIND_CANCEL, id))
                    .is_ok()
            {
                s.cancelled = true;
            }
        }
    }
}

/// A command waiting on its path: on the device, or held by a lab `hang`.
fn watched(state: State) -> bool {
    matches!(state, State::OnDevice | State::Held(_))
}
