//! Dropping everything after the frontend went away or reset the device.

use std::sync::atomic::Ordering;

use log::{debug, warn};

use super::{split_user_data, Stage, Worker, TAG_PART, TAG_TIMER};

impl Worker {
    /// Waits for every I/O on the ring and drops all requests without
    /// touching guest memory or rings: the guest may already reuse them.
    pub fn drain_and_discard(&mut self) {
        let engine = &self.disk.engine;
        // Parked parts are not on the ring: drop them now.
        for id in std::mem::take(&mut self.parked) {
            if let Some(io) = self.ios.try_remove(id) {
                match io.stage {
                    Stage::Held(_) => engine.release(io.path, &io.info),
                    Stage::NoPath { .. } => engine.note_no_path_done(false),
                    _ => {}
                }
            }
        }
        while !self.ios.is_empty() {
            if let Err(e) = self.ring.submit().and_then(|_| self.ring.wait()) {
                warn!("waiting for in-flight I/O: {e}");
                break;
            }
            let mut reaped = std::mem::take(&mut self.reaped);
            self.ring.reap(|ud, res, big| reaped.push((ud, res, big)));
            for &(ud, _, _) in &reaped {
                let (tag, index) = split_user_data(ud);
                match tag {
                    TAG_PART | TAG_TIMER => {
                        if let Some(io) = self.ios.try_remove(index) {
                            let holds_load = !matches!(
                                io.stage,
                                Stage::Timer(super::After::Resend(_)) | Stage::NoPath { .. }
                            );
                            if holds_load {
                                engine.release(io.path, &io.info);
                            }
                        }
                    }
                    _ => {}
                }
            }
            reaped.clear();
            self.reaped = reaped;
        }
        let dropped = self.reqs.len();
        self.reqs.clear();
        self.in_flight.fetch_sub(dropped, Ordering::AcqRel);
        if dropped > 0 {
            debug!("discarded {dropped} requests of a frontend that went away");
        }
    }
}
