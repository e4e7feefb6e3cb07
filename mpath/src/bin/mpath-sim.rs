//! `mpath-sim SCENARIO.toml [--json]`: runs a scenario's workloads under each
//! of its policies in virtual time and prints a table, or one JSON object
//! per line and policy.
//!
//! `mpath-sim sweep --seed S --count N [--worst K] [--models pipes|all]
//! [--every-policy]`: runs N generated scenarios under every policy and
//! prints, per policy, the distribution of its MiB/s over the best
//! policy's, and auto's K worst scenarios (with `--every-policy`, each
//! policy's mean and K worst). `--models pipes` (the default) draws issue
//! 11's sweep of FIFO pipes; `--models all` the sweep of every path model
//! (device, token bucket, stalls, TCP link, heavy tail; see
//! `mpath::sim::models`). `--index I` runs scenario I in full.
//! `--draws K` runs each policy K times on each scenario with independent
//! draws of its randomness and keeps the median; `--longer K` runs each
//! scenario K times longer: the checks that a sweep's result is the
//! policy's, not its draw or its warm-up.

use std::io::Write;
use std::process::ExitCode;

use mpath::sim::{self, Generator, Runs, Scenario};

const USAGE: &str = "usage: mpath-sim SCENARIO.toml... [--json]
       mpath-sim sweep --seed S --count N [--worst K] [--models pipes|all] [--every-policy]
                       [--draws K] [--longer K]   (K: 1-100)
       mpath-sim sweep --seed S --index I [--models pipes|all]";

/// The most `--draws` and `--longer` take.
const MAX_RUNS: u64 = 100;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("sweep") {
        return sweep(&args[1..]);
    }
    let mut json = false;
    let mut files = vec![];
    for arg in args {
        match arg.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => files.push(arg),
        }
    }
    if files.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    for (i, f) in files.iter().enumerate() {
        let result =
            Scenario::load(std::path::Path::new(f)).and_then(|s| sim::run_all(&s).map(|r| (s, r)));
        let (scenario, results) = match result {
            Ok(v) => v,
            Err(e) => {
                eprintln!("mpath-sim: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut out = std::io::stdout().lock();
        let written = if json {
            results
                .iter()
                .try_for_each(|r| writeln!(out, "{}", r.to_json()))
        } else {
            let gap = if i > 0 { "\n" } else { "" };
            write!(out, "{gap}{}", sim::table(&scenario, &results))
        };
        if written.is_err() {
            // The reader went away (`| head`): nothing more to say.
            return ExitCode::SUCCESS;
        }
    }
    ExitCode::SUCCESS
}

fn sweep(args: &[String]) -> ExitCode {
    let (mut seed, mut count, mut worst, mut index) = (None, None, 10usize, None);
    let (mut generator, mut every_policy) = (Generator::Pipes, false);
    let mut runs = Runs::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--every-policy" {
            every_policy = true;
            continue;
        }
        if a == "--models" {
            match it.next().and_then(|v| Generator::parse(v)) {
                Some(g) => generator = g,
                None => {
                    eprintln!("{USAGE}");
                    return ExitCode::from(2);
                }
            }
            continue;
        }
        let value = it.next().and_then(|v| v.parse::<u64>().ok());
        match (a.as_str(), value) {
            ("--seed", Some(v)) => seed = Some(v),
            ("--count", Some(v)) => count = Some(v),
            ("--worst", Some(v)) => worst = v as usize,
            ("--index", Some(v)) => index = Some(v),
            // Bounded: a scenario's times in ns must not overflow, and a
            // run must end.
            ("--draws", Some(v @ 1..=MAX_RUNS)) => runs.draws = v,
            ("--longer", Some(v @ 1..=MAX_RUNS)) => runs.longer = v,
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    if index.is_some() && runs != Runs::default() {
        // One scenario in full is one draw of it, at its own length.
        eprintln!("mpath-sim: --draws and --longer are for sweeps (--count), not --index\n{USAGE}");
        return ExitCode::from(2);
    }
    if let (Some(seed), Some(i)) = (seed, index) {
        // One scenario of the sweep in full.
        let s = generator.generate(seed, i);
        return match sim::run_all(&s) {
            Ok(r) => {
                let mut text = sim::table(&s, &r);
                // The drawn paths, to trace why a policy did what it did.
                text += "\npath  MiB/s  latency us  delay us  jitter  slots  transfer\n";
                for p in &s.paths {
                    text += &format!(
                        "{:<4} {:>6.0} {:>11.0} {:>9.0} {:>7.2} {:>6}  {:?}\n",
                        p.name,
                        p.bandwidth_mib_s,
                        p.base_latency_us,
                        p.delay_us,
                        p.jitter,
                        p.slots,
                        p.transfer
                    );
                }
                for p in &s.paths {
                    let m = p.models();
                    if !m.is_empty() {
                        text += &format!("{}: {m}\n", p.name);
                    }
                }
                for c in &s.changes {
                    text += &format!("{c:?}\n");
                }
                // What auto believed of each path at the end (`B`, `L`).
                for r in r.iter().filter(|r| !r.auto_model.is_empty()) {
                    text += "auto's model at the end:";
                    for (p, (b, l)) in s.paths.iter().zip(&r.auto_model) {
                        match (b, l) {
                            (Some(b), Some(l)) => {
                                let mib = *b as f64 / (1 << 20) as f64;
                                text += &format!(
                                    " {} B {mib:.0} MiB/s L {:.0} us;",
                                    p.name,
                                    *l as f64 / 1e3
                                );
                            }
                            _ => text += &format!(" {} unmeasured;", p.name),
                        }
                    }
                    text += "\n";
                }
                // A reader gone early (`| head`) is not an error.
                let _ = write!(std::io::stdout().lock(), "{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mpath-sim: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let (Some(seed), Some(count)) = (seed, count) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match sim::sweep_runs(generator, seed, count, runs) {
        Ok(cases) => {
            let mut text = sim::report(&cases, worst);
            if every_policy {
                text += "\n";
                text += &sim::report_every_policy(&cases, worst);
            }
            let _ = write!(std::io::stdout().lock(), "{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mpath-sim: {e}");
            ExitCode::FAILURE
        }
    }
}
