//! `mpath-sim SCENARIO.toml [--json]`: runs a scenario's workloads under each
//! of its policies in virtual time and prints a table, or one JSON object
//! per line and policy.

use std::io::Write;
use std::process::ExitCode;

use mpath::sim::{self, Scenario};

fn main() -> ExitCode {
    let mut json = false;
    let mut files = vec![];
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                println!("usage: mpath-sim SCENARIO.toml... [--json]");
                return ExitCode::SUCCESS;
            }
            _ => files.push(arg),
        }
    }
    if files.is_empty() {
        eprintln!("usage: mpath-sim SCENARIO.toml... [--json]");
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
