//! docs/OPERATIONS.md is the operator's reference: every flag the binary
//! accepts (the daemon's and each subcommand's, read from `--help`), every
//! JSON-RPC method a running daemon lists (`get_methods`) and every metric
//! family it serves must appear there, so that a new option, method or metric
//! cannot ship undocumented.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::Lab;
use vhost_mpath_tests::locate::{ours_binary, workspace_root};

fn operations() -> String {
    let path = workspace_root().join("docs/OPERATIONS.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Whether `doc` holds `word` as a whole token (`--rpc-socket` is not found
/// inside `--rpc-socket-group`).
fn mentions(doc: &str, word: &str) -> bool {
    let tail_ok =
        |c: Option<char>| !c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    doc.match_indices(word).any(|(i, _)| {
        let before = doc[..i].chars().next_back();
        let after = doc[i + word.len()..].chars().next();
        tail_ok(before) && tail_ok(after)
    })
}

fn help(args: &[&str]) -> String {
    let out = Command::new(ours_binary())
        .args(args)
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .expect("run vhost-mpath --help");
    assert!(out.status.success(), "{args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The long flags clap lists in a help text (`  -h, --help`, `      --fd <N>`):
/// option lines are indented at most 6 spaces, their descriptions deeper.
fn long_flags(help: &str) -> Vec<String> {
    help.lines()
        .filter(|l| l.len() - l.trim_start().len() <= 6)
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.find("--").map(|i| &l[i..]))
        .map(|l| {
            l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The subcommands under clap's `Commands:` heading, without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_flag_and_subcommand_is_in_operations_md() {
    let doc = operations();
    let top = help(&[]);
    let subs = subcommands(&top);
    assert!(
        subs.len() >= 7,
        "subcommands parsed from --help: {subs:?}\n{top}"
    );
    let mut missing = Vec::new();
    let mut checked = 0;
    for (who, text) in std::iter::once(("vhost-mpath".to_string(), top.clone())).chain(
        subs.iter()
            .map(|s| (format!("vhost-mpath {s}"), help(&[s.as_str()]))),
    ) {
        let flags = long_flags(&text);
        assert!(!flags.is_empty(), "{who}: no flags parsed from\n{text}");
        for flag in flags {
            checked += 1;
            if !mentions(&doc, &flag) {
                missing.push(format!("{who} {flag}"));
            }
        }
    }
    for s in &subs {
        if !doc.contains(&format!("`{s}")) {
            missing.push(format!("subcommand {s}"));
        }
    }
    // The daemon alone has over 30 flags: a parser that found few is broken.
    assert!(checked > 40, "only {checked} flags parsed");
    assert!(missing.is_empty(), "not in docs/OPERATIONS.md: {missing:?}");
}

/// `GET /metrics` over HTTP/1.0: the body.
fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n")
        .expect("an HTTP response")
        .1
        .to_string()
}

#[test]
fn every_method_and_metric_is_in_operations_md() {
    // --lab: get_methods lists inject_fault only then.
    let Some(lab) = Lab::start("", "", &["--metrics-listen", "127.0.0.1:0"]) else {
        return;
    };
    let doc = operations();
    let mut rpc = lab.rpc();
    let methods = rpc.ok("get_methods", json!({}));
    let methods: Vec<&str> = methods
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(methods.contains(&"inject_fault"), "{methods:?}");
    // Each method has its own paragraph, headed **`name`**.
    let mut missing: Vec<String> = methods
        .iter()
        .filter(|m| !doc.contains(&format!("**`{m}`**")))
        .map(|m| format!("method {m}"))
        .collect();

    let addr = rpc.ok("get_device", json!({}))["metrics_listen"]
        .as_str()
        .expect("metrics_listen")
        .to_string();
    let body = scrape(&addr);
    // A family's name from its TYPE line; counters are sampled as NAME_total,
    // which is how the reference names them.
    let families: Vec<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let mut it = l.split_whitespace();
            let (name, kind) = (it.next().unwrap(), it.next().unwrap_or(""));
            match kind {
                "counter" if !name.ends_with("_total") => format!("{name}_total"),
                _ => name.to_string(),
            }
        })
        .collect();
    assert!(families.len() > 20, "metric families: {families:?}");
    missing.extend(
        families
            .iter()
            .filter(|f| !mentions(&doc, f))
            .map(|f| format!("metric {f}")),
    );
    assert!(missing.is_empty(), "not in docs/OPERATIONS.md: {missing:?}");
}
