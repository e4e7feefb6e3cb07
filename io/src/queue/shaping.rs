//! Lab shaping of completions: hold them (`hang`), delay them (`delay-us`,
//! `bw-mbps`, `flush-delay-us`, the path models of `lab_model`), or hand
//! them over now.

use mpath::IoOutcome;

use super::{Event, IoQueue, PathTable, State};

impl<P: PathTable> IoQueue<P> {
    /// Command `id` finished with `outcome`: shaped, then delivered.
    #[inline(always)]
    pub(super) fn completed(
        &mut self,
        id: usize,
        outcome: IoOutcome,
        now: u64,
        shaped: bool,
        f: &mut impl FnMut(Event),
    ) -> usize {
        // Inline: no shaping on the path (the common case) is one load.
        if !shaped || !super::shaping_active(&*self.paths, self.slots[id].path) {
            return self.deliver(id, outcome, f);
        }
        self.shape_completion(id, outcome, now, f)
    }

    /// [`IoQueue::completed`] on a path with shaping configured.
    #[inline(never)]
    pub(super) fn shape_completion(
        &mut self,
        id: usize,
        outcome: IoOutcome,
        now: u64,
        f: &mut impl FnMut(Event),
    ) -> usize {
        let slot = &mut self.slots[id];
        let shaping = self.paths.shaping(slot.path);
        if shaping.hang() {
            slot.state = State::Held(outcome);
            self.held.push(id);
            self.arm_tick();
            return 0;
        }
        let delay = shaping.completion_delay(slot.len, now)
            + shaping.op_delay(slot.op)
            + shaping.model_delay(slot.op, slot.len, now);
        if delay.is_zero() {
            return self.deliver(id, outcome, f);
        }
        slot.state = State::Delayed(outcome);
        match self.start_timer(id, delay) {
            Ok(()) => 0,
            Err(e) => {
                log::warn!("io_uring timer: {e}; delivering without the delay");
                self.deliver(id, outcome, f)
            }
        }
    }

    /// Whether held command `id` is overdue by more than the kernel's own
    /// timeout would let it be: it then times out as a command on a dead
    /// link does (so a drain waiting for it is bounded the same way).
    fn held_timed_out(&self, id: usize, now: u64) -> bool {
        let slot = &self.slots[id];
        slot.timeout.is_some_and(|limit| {
            now.saturating_sub(slot.started) > limit.saturating_add(KERNEL_TIMER_SLACK)
        })
    }

    /// On a tick: releases what a path no longer holds (a path turned to
    /// failing meanwhile fails what it held, as a link that times out
    /// does) and times out what it held too long.
    pub(super) fn release_held(&mut self, now: u64, f: &mut impl FnMut(Event)) -> usize {
        let mut n = 0;
        for id in std::mem::take(&mut self.held) {
            let Some(slot) = self.slots.get(id) else {
                continue;
            };
            let State::Held(outcome) = slot.state else {
                continue;
            };
            let shaping = self.paths.shaping(slot.path);
            if shaping.hang() {
                if self.held_timed_out(id, now) {
                    n += self.deliver(id, IoOutcome::Errno(libc::ETIMEDOUT), f);
                } else {
                    self.held.push(id);
                }
                continue;
            }
            let outcome = shaping.get().fail.map_or(outcome, |x| x.outcome());
            n += self.completed(id, outcome, now, true, f);
        }
        n
    }

    /// Drops every held command (a queue being emptied: nothing of them is
    /// on the ring); their tags.
    pub fn take_held(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.held)
            .into_iter()
            .filter_map(|id| self.slots.try_remove(id).map(|s| s.tag))
            .collect()
    }
}

/// How late the kernel's block-layer timer may fire past a command's
/// timeout (`roundup_pow_of_two(HZ)` jiffies: 1.024 s at HZ=250).
const KERNEL_TIMER_SLACK: u64 = 1_024_000_000;
