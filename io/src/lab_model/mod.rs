//! Lab path models that are not pipes (issue 45): a device with internal
//! parallelism, a token bucket, periodic stalls, a TCP-like fabric link and
//! heavy-tailed jitter, so that the daemon can be driven through the same
//! paths the simulator's sweep draws.
//!
//! The models are the simulator's, written once in `mpath::sim::models`
//! ([`Bucket`], [`Tcp`], [`Device`], [`Stalls`], `tail_delay`, `loses`,
//! `ServiceDist::draw`); this module is their real-clock glue: the path
//! keys' settings ([`ModelConfig`]), one path's model state, and the time
//! a command enters them.
//!
//! A model is a stage after the device: a command enters it when the device
//! completes it (for a null path, at submission) and is delivered when the
//! model lets it out, so the model's latency adds to the device's own, as
//! `delay-us` does. The stages run in the simulator's order: token bucket,
//! fabric link, channels (which stalls pause; without channels a command
//! arriving in a pause waits for its end), tail. Every stage decides in the
//! order commands enter it (the order their completions are handled), and
//! nothing sleeps: the caller turns the latency into a timer on its ring.
//!
//! Where this stage differs from the simulator's path, it is because the
//! daemon has the rest of the path elsewhere: the link's bandwidth is
//! `bw-mbps` and the fixed latency `delay-us`, stages of their own, so the
//! fabric link here sends in no time and a path without channels stalls a
//! zero-length service (the simulator stalls its link and its latency).

mod config;
#[cfg(test)]
mod tests;

use mpath::sim::models::{self, Bucket, Device, Stalls, Tcp};
use mpath::sim::Rng;

pub use config::{ModelConfig, ServiceDist, DEFAULT_BURST_MS};

use crate::IoOp;

/// The models of one path with their state, shared by its workers (behind
/// the shaping's lock).
#[derive(Debug)]
pub(crate) struct Model {
    cfg: ModelConfig,
    /// When the first command entered (ns, monotonic): the models' time 0,
    /// as the start of virtual time is the simulator's (a full bucket, idle
    /// channels and link, the stalls' period counted from it).
    epoch: Option<u64>,
    bucket: Bucket,
    tcp: Tcp,
    /// When the fabric link is free (model time).
    link_free: u64,
    device: Device,
    stalls: Stalls,
    /// The draws (loss, service time, tail), in the simulator's order: the
    /// same configuration gives the same sequence after every reset.
    rng: Rng,
}

impl Model {
    pub(crate) fn new(cfg: &ModelConfig) -> Model {
        // A `service-us` alone is one channel.
        let channels = if cfg.service_us > 0 {
            cfg.channels.max(1)
        } else {
            0
        };
        Model {
            cfg: cfg.clone(),
            epoch: None,
            bucket: Bucket::default(),
            tcp: Tcp::new(cfg.window_kib as f64),
            link_free: 0,
            device: Device::new(channels),
            stalls: Stalls {
                every_ms: cfg.stall_every_ms as f64,
                stall_ms: cfg.stall_ms as f64,
                writes_only: cfg.stall_writes_only,
            },
            rng: Rng(0),
        }
    }

    /// How long (ns) the models hold a command of `bytes` that enters them
    /// at `at` (ns, monotonic).
    pub(crate) fn latency(&mut self, op: IoOp, bytes: u64, at: u64) -> u64 {
        // Model time. A command that read its clock before an earlier one
        // took the lock enters with it.
        let epoch = *self.epoch.get_or_insert(at);
        let now = at.saturating_sub(epoch);
        let c = &self.cfg;
        let write = matches!(
            op,
            IoOp::Write { .. } | IoOp::Discard | IoOp::WriteZeroes { .. }
        );
        let mut t = now;
        if c.bucket_iops > 0 || c.bucket_mib_s > 0 {
            t = self.bucket.admit(
                t,
                bytes,
                c.bucket_iops as f64,
                c.bucket_mib_s as f64,
                c.bucket_burst_ms as f64,
            );
        }
        if c.rtt_us > 0 {
            let ppm = f64::from(c.loss_ppm);
            let lost = ppm > 0.0 && models::loses(bytes, ppm, self.rng.unit());
            let (rtt_us, window_kib) = (c.rtt_us as f64, c.window_kib as f64);
            let link = &mut self.link_free;
            t = self.tcp.send(t, link, bytes, 0.0, rtt_us, window_kib, lost);
        }
        t = if c.service_us > 0 {
            let dist = c.service_dist;
            let (u1, u2) = if dist.random() {
                (self.rng.unit(), self.rng.unit())
            } else {
                (0.0, 0.0)
            };
            let service = dist.draw(c.service_us as f64 * 1e3, u1, u2);
            self.device
                .serve(t, service.round() as u64, write, &self.stalls)
        } else {
            self.stalls.apply(t, t, write).1
        };
        if c.tail_us > 0 {
            let alpha = f64::from(c.tail_alpha_milli) / 1000.0;
            let extra = models::tail_delay(alpha, c.tail_us as f64, self.rng.unit());
            t = t.saturating_add(extra.round() as u64);
        }
        t - now
    }
}
