//! The sweep of path models (issue 45): like the pipe sweep of
//! [`super::generate`] (the same kinds of path, slow path and speed
//! change, the same workloads), but each path is also drawn from a model
//! of [`super::models`]:
//! - `pipe`: the FIFO pipe alone;
//! - `device`: 4-128 channels, each command served for a fixed,
//!   exponential or log-normal time (on PCIe the device is most of the
//!   latency; behind a fabric it adds 20-200 us);
//! - `bucket`: an IOPS or MiB/s token bucket (or both) at 5-80% of what
//!   the path would carry at the workload's depth, with a burst of 10 ms to
//!   1 s (or QEMU's default);
//! - `stall`: a pause of 2-25% of a 20-500 ms period, writes only or both;
//! - `tcp` (fabric paths only; a PCIe path draws `device` instead): an RTT
//!   of 30-90% of the path's latency, a window of 64 KiB to 4 MiB, no loss
//!   or 1-2000 ppm;
//! - `tail`: a Pareto extra delay, shape 1.2-2.5, scale 5-100% of the
//!   latency.
//!
//! Half the scenarios give every path the same model (parameters within
//! +-30% of each other, as paths to one device), half draw each path's
//! model on its own (a mix on one disk: a local path beside a throttled or
//! a fabric one). A quarter of the paths add a heavy tail to their model.

use super::models::{ServiceDist, DEFAULT_WINDOW_KIB};
use super::sweep::{assemble, slow_one, workload, TARGET_IOS};
use super::{PathModel, Rng, Scenario, Transfer, Workload};

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Pipe,
    Device,
    Bucket,
    Stall,
    Tcp,
    Tail,
}

const FAMILIES: [Family; 6] = [
    Family::Pipe,
    Family::Device,
    Family::Bucket,
    Family::Stall,
    Family::Tcp,
    Family::Tail,
];

/// A model's parameters, drawn once per scenario (every path alike) or
/// once per path (a mix); each path then spreads them by +-30%.
#[derive(Clone, Copy, Debug)]
struct Params {
    family: Family,
    /// Fraction of the path's latency a device or TCP RTT takes.
    share: f64,
    channels: u32,
    service_dist: ServiceDist,
    fabric_service_us: f64,
    bucket_iops: bool,
    bucket_bytes: bool,
    bucket_fraction: f64,
    burst_ms: Option<f64>,
    stall_every_ms: f64,
    stall_fraction: f64,
    writes_only: bool,
    window_kib: f64,
    loss_ppm: f64,
    tail_alpha: f64,
    tail_scale: f64,
}

fn draw_params(rng: &mut Rng, pcie: bool) -> Params {
    let mut family = FAMILIES[rng.below(FAMILIES.len() as u64) as usize];
    if family == Family::Tcp && pcie {
        family = Family::Device;
    }
    let bucket = rng.below(5);
    Params {
        family,
        share: rng.range(0.3, 0.9),
        channels: [4, 8, 16, 32, 64, 128][rng.below(6) as usize],
        service_dist: [
            ServiceDist::Fixed,
            ServiceDist::Exponential,
            ServiceDist::Lognormal,
        ][rng.below(3) as usize],
        fabric_service_us: rng.log_range(20.0, 200.0),
        // IOPS only, MiB/s only (two in five each) or both.
        bucket_iops: bucket <= 1 || bucket == 4,
        bucket_bytes: bucket >= 2,
        bucket_fraction: rng.log_range(0.05, 0.8),
        burst_ms: [None, Some(10.0), Some(100.0), Some(1000.0)][rng.below(4) as usize],
        stall_every_ms: rng.log_range(20.0, 500.0),
        stall_fraction: rng.range(0.02, 0.25),
        writes_only: rng.chance(0.5),
        window_kib: [64.0, 128.0, 256.0, 1024.0, DEFAULT_WINDOW_KIB][rng.below(5) as usize],
        loss_ppm: if rng.chance(0.3) {
            0.0
        } else {
            rng.log_range(1.0, 2000.0)
        },
        tail_alpha: rng.range(1.2, 2.5),
        tail_scale: rng.log_range(0.05, 1.0),
    }
}

/// Gives `p` the model of `m` (spread by `f`, about 1), for `workload`.
fn apply(p: &mut PathModel, m: &Params, f: f64, pcie: bool, workload: &Workload) {
    let lat = p.base_latency_us;
    match m.family {
        Family::Pipe => {}
        Family::Device => {
            p.channels = m.channels;
            p.service_dist = m.service_dist;
            if pcie {
                // The device is most of a local path's latency.
                p.service_us = lat * m.share * f;
                p.base_latency_us = lat - p.service_us.min(lat * 0.95);
            } else {
                p.service_us = m.fabric_service_us * f;
            }
        }
        Family::Bucket => {
            // What the path carries at the workload's depth, unthrottled.
            let bytes = workload.mean_bytes();
            let depth = f64::from(workload.iodepth * workload.jobs);
            let iops = (p.bandwidth_mib_s * MIB / bytes).min(depth / ((lat + p.delay_us) * 1e-6));
            let rate = iops * m.bucket_fraction * f;
            if m.bucket_iops {
                p.bucket_iops = rate.max(10.0);
            }
            if m.bucket_bytes {
                p.bucket_mib_s = (rate * bytes / MIB).max(0.1);
            }
            p.bucket_burst_ms = m.burst_ms;
        }
        Family::Stall => {
            p.stall_every_ms = m.stall_every_ms * f;
            p.stall_ms = p.stall_every_ms * m.stall_fraction;
            p.stall_writes_only = m.writes_only;
        }
        Family::Tcp => {
            p.rtt_us = lat * m.share * f;
            p.base_latency_us = lat - p.rtt_us.min(lat * 0.95);
            p.window_kib = m.window_kib;
            p.loss_ppm = m.loss_ppm * f;
        }
        Family::Tail => add_tail(p, m, f, lat),
    }
}

fn add_tail(p: &mut PathModel, m: &Params, f: f64, lat: f64) {
    p.tail_alpha = m.tail_alpha;
    p.tail_us = lat * m.tail_scale * f;
}

/// Scenario `index` of the model sweep with `seed`: the same pair always
/// gives the same scenario (and none of [`super::generate`]'s).
pub fn generate_models(seed: u64, index: u64) -> Scenario {
    let mut rng = Rng(seed ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03) ^ 0x4d4f_4445_4c53);
    rng.next();
    let workload = workload(&mut rng);
    let pcie = rng.chance(0.4);
    let (bw, lat) = if pcie {
        (rng.log_range(1500.0, 7000.0), rng.log_range(20.0, 150.0))
    } else {
        (rng.log_range(100.0, 2900.0), rng.log_range(80.0, 2000.0))
    };
    let jitter = if pcie {
        rng.range(0.05, 0.3)
    } else {
        rng.range(0.1, 0.4)
    };
    let slots = if pcie {
        [64, 128, 256, 1024][rng.below(4) as usize]
    } else {
        [32, 64, 128][rng.below(3) as usize]
    };
    let transfer = if rng.chance(0.3) {
        Transfer::Exponential
    } else {
        Transfer::Fixed
    };
    let count = 2 + rng.below(3) as usize;
    let mixed = rng.chance(0.5);
    let shared = draw_params(&mut rng, pcie);
    let mut paths = vec![];
    for i in 0..count {
        let mut p = PathModel {
            slots,
            jitter,
            transfer,
            preferred: i == 0,
            ..PathModel::pipe(
                &format!("p{i}"),
                bw * rng.range(0.7, 1.3),
                lat * rng.range(0.7, 1.3),
            )
        };
        let m = if mixed {
            draw_params(&mut rng, pcie)
        } else {
            shared
        };
        let f = rng.range(0.7, 1.3);
        let base = p.base_latency_us;
        apply(&mut p, &m, f, pcie, &workload);
        if m.family != Family::Tail && rng.chance(0.25) {
            let t = draw_params(&mut rng, pcie);
            add_tail(&mut p, &t, f, base);
        }
        paths.push(p);
    }
    let mut what = vec![format!(
        "{count} {} paths ~{bw:.0} MiB/s ~{lat:.0} us{}",
        if pcie { "PCIe" } else { "NVMe/TCP" },
        if mixed { " mixed" } else { "" }
    )];
    for p in &paths {
        let m = p.models();
        if !m.is_empty() {
            what.push(format!("{} {m}", p.name));
        }
    }
    slow_one(&mut rng, &mut paths, &mut what);
    let duration_ms = duration_ms(&paths, &workload);
    assemble(
        &mut rng,
        format!("models-{seed}-{index}"),
        duration_ms,
        paths,
        workload,
        what,
    )
}

/// Sized to about [`TARGET_IOS`] completions at the best rate the paths
/// allow (each capped by its bucket, window and channels), within 150 ms
/// and [`MAX_MS`], and to three stall periods where there are stalls.
fn duration_ms(paths: &[PathModel], workload: &Workload) -> u64 {
    let bytes = workload.mean_bytes();
    let depth = f64::from(workload.iodepth * workload.jobs);
    let rate: f64 = paths
        .iter()
        .map(|p| {
            let mut cap = p.bandwidth_mib_s * MIB;
            if p.bucket_mib_s > 0.0 {
                cap = cap.min(p.bucket_mib_s * MIB);
            }
            if p.bucket_iops > 0.0 {
                cap = cap.min(p.bucket_iops * bytes);
            }
            if p.has_tcp() {
                let window = super::models::window_bytes(p.window_kib);
                cap = cap.min(window / (p.rtt_us * 1e-6).max(1e-6));
            }
            if p.channels > 0 {
                cap = cap.min(f64::from(p.channels) * bytes / (p.service_us * 1e-6));
            }
            cap
        })
        .sum();
    let fastest = paths
        .iter()
        .map(|p| {
            (p.base_latency_us + p.delay_us + p.service_us + p.rtt_us) * 1e-6
                + bytes / (p.bandwidth_mib_s * MIB)
        })
        .fold(f64::MAX, f64::min);
    let iops = (rate / bytes).min(depth / fastest);
    let stalls = paths
        .iter()
        .map(|p| 3.0 * p.stall_every_ms)
        .fold(0.0, f64::max);
    ((TARGET_IOS / iops) * 1000.0 / 0.75)
        .max(stalls)
        .clamp(150.0, MAX_MS) as u64
}

/// The longest run: longer than the pipe sweep's 2 s, since a throttled
/// path can be slow enough (a 1 MiB command at qd1 through a 17 MiB/s
/// bucket) that 2 s hold a few dozen commands, too few to compare
/// policies; the cost of a run is its commands, not its virtual time.
const MAX_MS: f64 = 10_000.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_model_alone_and_mixed() {
        let s: Vec<Scenario> = (0..300).map(|i| generate_models(3, i)).collect();
        let any = |f: &dyn Fn(&PathModel) -> bool| s.iter().any(|s| s.paths.iter().any(f));
        assert!(any(&|p| p.channels > 0));
        assert!(any(&|p| p.bucket_iops > 0.0));
        assert!(any(&|p| p.bucket_mib_s > 0.0));
        assert!(any(&|p| p.stall_ms > 0.0 && p.stall_writes_only));
        assert!(any(&|p| p.stall_ms > 0.0 && !p.stall_writes_only));
        assert!(any(&|p| p.has_tcp() && p.loss_ppm > 0.0));
        assert!(any(&|p| p.has_tail()));
        assert!(any(&|p| p.models().is_empty()));
        // A disk whose paths follow different models.
        assert!(s.iter().any(|s| {
            let kinds: std::collections::HashSet<String> = s
                .paths
                .iter()
                .map(|p| p.models().split(' ').next().unwrap_or("").to_string())
                .collect();
            kinds.len() > 1
        }));
        // Every drawn scenario is valid.
        for sc in &s {
            let text = format!("{sc:?}");
            for p in &sc.paths {
                assert!(p.check_models().is_ok(), "{text}");
            }
        }
        assert_eq!(
            generate_models(3, 7).description,
            generate_models(3, 7).description
        );
    }
}
