//! Medians over repeats and the printed table.

use std::collections::BTreeMap;

/// One measured cell.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub iops: f64,
    pub mib_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Server CPU seconds (utime + stime) used during the cell.
    pub cpu_s: f64,
    /// I/Os completed per server CPU-second.
    pub iops_per_cpu: f64,
    /// Seconds the server spent spinning for the client's next requests
    /// (ours: `get_queues`' `spin_us`); NaN where unknown (qsd).
    pub spin_s: f64,
    /// Calls (used-buffer notifications) per I/O (ours: `get_queues`);
    /// NaN where unknown.
    pub calls_per_io: f64,
    /// Kicks (available-buffer notifications) per I/O (ours: `get_queues`);
    /// NaN where unknown.
    pub kicks_per_io: f64,
    /// I/Os per server CPU-second not spent spinning (all of it where the
    /// spin is unknown).
    pub iops_per_busy_cpu: f64,
    /// The client's (this process's) CPU seconds during the cell: near the
    /// cell's length, the client was the bottleneck (its CPU is saturated),
    /// and a server that spins meanwhile shows the client's rate per CPU.
    pub client_cpu_s: f64,
    /// Sleeps (voluntary context switches) of the client's queue threads
    /// per I/O: how often the client waited to be woken by a call.
    pub client_sleeps_per_io: f64,
    /// Sleeps of the server's threads per I/O.
    pub server_sleeps_per_io: f64,
}

/// (backend, workload index, server) -> samples, in insertion order of workloads.
#[derive(Default)]
pub struct Results {
    cells: BTreeMap<(String, usize, String), Vec<Sample>>,
    workloads: Vec<String>,
}

impl Results {
    pub fn add(&mut self, backend: &str, workload: usize, name: &str, server: &str, s: Sample) {
        if self.workloads.len() <= workload {
            self.workloads.resize(workload + 1, String::new());
        }
        self.workloads[workload] = name.to_string();
        self.cells
            .entry((backend.to_string(), workload, server.to_string()))
            .or_default()
            .push(s);
    }

    fn median_of(&self, key: &(String, usize, String), f: impl Fn(&Sample) -> f64) -> Option<f64> {
        let mut v: Vec<f64> = self.cells.get(key)?.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// Prints one row per (backend, workload, server); the `a` rows carry the ratios a/b.
    pub fn print(&self, backends: &[&str], a: &str, b: &str) {
        println!(
            "{:<10} {:<7} {:<18} {:>9} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>10} {:>8} {:>10} {:>11}",
            "server",
            "backend",
            "workload",
            "IOPS",
            "MiB/s",
            "p50 us",
            "p99 us",
            "CPU s",
            "spin s",
            "cli s",
            "cli slp",
            "srv slp",
            "calls",
            "kicks",
            "IOPS/CPUs",
            "IOPS a/b",
            "perCPU a/b",
            "perBusy a/b"
        );
        for backend in backends {
            for (w, name) in self.workloads.iter().enumerate() {
                let key = |s: &str| (backend.to_string(), w, s.to_string());
                let per_cpu = |s: &str| self.median_of(&key(s), |x| x.iops_per_cpu);
                let per_busy = |s: &str| self.median_of(&key(s), |x| x.iops_per_busy_cpu);
                let iops = |s: &str| self.median_of(&key(s), |x| x.iops);
                for server in [a, b] {
                    let k = key(server);
                    let Some(iops_v) = self.median_of(&k, |x| x.iops) else {
                        continue;
                    };
                    let m = |f: fn(&Sample) -> f64| self.median_of(&k, f).unwrap_or(f64::NAN);
                    let ratios = if server == a {
                        format!(
                            "{:>8} {:>10} {:>11}",
                            ratio(Some(iops_v), iops(b)),
                            ratio(per_cpu(a), per_cpu(b)),
                            ratio(per_busy(a), per_busy(b))
                        )
                    } else {
                        String::new()
                    };
                    println!(
                        "{:<10} {:<7} {:<18} {:>9.0} {:>8.1} {:>8.1} {:>8.1} {:>7.2} {:>7} {:>7.2} {:>7.3} {:>7.3} {:>7} {:>7} {:>10.0} {}",
                        server,
                        backend,
                        name,
                        iops_v,
                        m(|x| x.mib_s),
                        m(|x| x.p50_us),
                        m(|x| x.p99_us),
                        m(|x| x.cpu_s),
                        known(m(|x| x.spin_s), 2),
                        m(|x| x.client_cpu_s),
                        m(|x| x.client_sleeps_per_io),
                        m(|x| x.server_sleeps_per_io),
                        known(m(|x| x.calls_per_io), 3),
                        known(m(|x| x.kicks_per_io), 3),
                        per_cpu(server).unwrap_or(f64::NAN),
                        ratios
                    );
                }
            }
        }
    }
}

/// `v` with `decimals` decimals, or "-" where unknown (NaN).
fn known(v: f64, decimals: usize) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.decimals$}")
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() && b.is_finite() => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}
