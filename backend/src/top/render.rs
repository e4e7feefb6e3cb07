//! A frame of `vhost-mpath top` as text: the disk on top (policy, capacity,
//! totals), then one aligned row per path, as `iostat -x` prints devices.
//! Plain text only: the caller adds the escape codes that redraw a terminal.

use super::frame::{Frame, PathRow};
use crate::client::{human_bytes, Table};

const MIB: f64 = 1024.0 * 1024.0;

fn micros(v: Option<f64>) -> String {
    match v {
        Some(us) if us >= 100.0 => format!("{us:.0}"),
        Some(us) => format!("{us:.1}"),
        None => "-".into(),
    }
}

fn rate(v: f64) -> String {
    format!("{v:.0}")
}

fn mib(bytes_per_s: f64) -> String {
    format!("{:.1}", bytes_per_s / MIB)
}

fn path_row(p: &PathRow) -> Vec<String> {
    let [path, retry, media] = p.errors_total;
    vec![
        p.name.clone(),
        p.state.clone(),
        p.ana_state.clone(),
        rate(p.iops()),
        rate(p.reads_per_s),
        rate(p.writes_per_s),
        mib(p.bytes_per_s),
        micros(p.await_us),
        micros(p.read_p50_us),
        micros(p.read_p99_us),
        micros(p.write_p50_us),
        micros(p.write_p99_us),
        p.in_flight.to_string(),
        format!("{:.1}", p.errors_per_s),
        format!("{path}/{retry}/{media}"),
    ]
}

/// The frame's text, ending in a newline.
pub fn render(f: &Frame) -> String {
    let usable = f.paths.iter().filter(|p| p.state == "usable").count();
    let listed = f.paths.iter().filter(|p| p.state != "removed").count();
    let sum = |g: fn(&PathRow) -> f64| f.paths.iter().map(g).sum::<f64>();
    let (reads, writes) = (sum(|p| p.reads_per_s), sum(|p| p.writes_per_s));
    let in_flight: u64 = f.paths.iter().map(|p| p.in_flight).sum();
    let mut out = format!(
        "vhost-mpath top  {} UTC  last {:.1} s\n\
         policy {}  capacity {}  queues {}  paths {listed} ({usable} usable)\n\
         disk: {} IOPS (read {}, write {})  {} MiB/s  in-flight {in_flight}  errors/s {:.1}\n\
         \x20     no-path waiting {}  qos holding {}  errors to the guest/s {:.1}\n\n",
        f.clock,
        f.interval_s,
        f.policy,
        human_bytes(f.capacity_bytes as f64),
        f.num_queues,
        rate(reads + writes),
        rate(reads),
        rate(writes),
        mib(sum(|p| p.bytes_per_s)),
        sum(|p| p.errors_per_s),
        f.no_path_waiting,
        f.qos_holding,
        f.guest_errors_per_s,
    );
    let mut t = Table::new(&[
        ("NAME", false),
        ("STATE", false),
        ("ANA", false),
        ("IOPS", true),
        ("R/s", true),
        ("W/s", true),
        ("MiB/s", true),
        ("AWAIT-us", true),
        ("R-P50us", true),
        ("R-P99us", true),
        ("W-P50us", true),
        ("W-P99us", true),
        ("IN-FLIGHT", true),
        ("ERR/s", true),
        ("ERR(P/R/M)", true),
    ]);
    for p in &f.paths {
        t.row(path_row(p));
    }
    out.push_str(&t.render());
    out.push_str("AWAIT: mean latency of the interval; percentiles since start or reset_stats\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, state: &str, reads: f64, await_us: Option<f64>) -> PathRow {
        PathRow {
            name: name.into(),
            state: state.into(),
            ana_state: "optimized".into(),
            reads_per_s: reads,
            writes_per_s: 10.0,
            bytes_per_s: 2.0 * MIB,
            await_us,
            read_p50_us: Some(95.5),
            read_p99_us: Some(1234.0),
            write_p50_us: None,
            write_p99_us: None,
            in_flight: 7,
            errors_per_s: 0.5,
            errors_total: [3, 1, 0],
        }
    }

    fn frame() -> Frame {
        Frame {
            clock: "11:22:33".into(),
            interval_s: 1.0,
            policy: "round-robin".into(),
            capacity_bytes: 64 << 20,
            num_queues: 2,
            paths: vec![
                row("a", "usable", 990.0, Some(88.3)),
                row("longer-name", "failed", 0.0, None),
            ],
            no_path_waiting: 0,
            qos_holding: 5,
            guest_errors_per_s: 0.0,
        }
    }

    #[test]
    fn header_totals_and_aligned_rows() {
        let text = render(&frame());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0], "vhost-mpath top  11:22:33 UTC  last 1.0 s",
            "{text}"
        );
        assert_eq!(
            lines[1], "policy round-robin  capacity 64.0M  queues 2  paths 2 (1 usable)",
            "{text}"
        );
        // The disk's totals sum the paths: 990 + 10 + 0 + 10 IOPS, 4 MiB/s, 14 in flight.
        assert!(
            lines[2].starts_with(
                "disk: 1010 IOPS (read 990, write 20)  4.0 MiB/s  in-flight 14  errors/s 1.0"
            ),
            "{text}"
        );
        assert!(lines[3].contains("qos holding 5"), "{text}");
        assert!(
            lines[5].starts_with("NAME         STATE   ANA        IOPS"),
            "{text}"
        );
        let a: Vec<&str> = lines[6].split_whitespace().collect();
        assert_eq!(
            a,
            [
                "a",
                "usable",
                "optimized",
                "1000",
                "990",
                "10",
                "2.0",
                "88.3",
                "95.5",
                "1234",
                "-",
                "-",
                "7",
                "0.5",
                "3/1/0"
            ],
            "{text}"
        );
        let b: Vec<&str> = lines[7].split_whitespace().collect();
        assert_eq!(
            &b[..5],
            ["longer-name", "failed", "optimized", "10", "0"],
            "{text}"
        );
        assert_eq!(b[7], "-", "no interval latency without completions: {text}");
        // Numbers are right-aligned: the IN-FLIGHT column ends where its header does.
        let end = |l: &str, s: &str| l.find(s).map(|i| i + s.len());
        assert_eq!(
            end(lines[5], "IN-FLIGHT"),
            lines[6].find(" 7 ").map(|i| i + 2),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "plain text: {text:?}");
    }
}
