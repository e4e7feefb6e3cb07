//! docs/OPERATIONS.md is the operator's reference: every flag the binary
//! accepts (the daemon's and each subcommand's, read from `--help`), every
//! JSON-RPC method a running daemon lists (`get_methods`) and every metric
//! family it serves must appear there, so that a new option, method or metric
//! cannot ship undocumented.
//!
//! The pages themselves stay readable: README.md is short and maps every
//! page of docs/, its tables hold no essays, every relative link (and its
//! `#anchor`) leads somewhere, and a reference page carries no dated
//! account (those live in docs/history/).

#[path = "docs/markdown.rs"]
mod markdown;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
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

/// README.md's budget: what and why, the two commands, QEMU, libvirt,
/// systemd and the map; the reference is docs/OPERATIONS.md.
const README_MAX_LINES: usize = 400;
/// A README table cell longer than this is an essay that belongs in a page.
const README_CELL_MAX_CHARS: usize = 300;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The `*.md` files directly in `dir`, sorted.
fn md_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    out.sort();
    out
}

#[test]
fn readme_is_short_and_its_tables_hold_no_essays() {
    let readme = read(&workspace_root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move reference \
         material to docs/OPERATIONS.md"
    );
    let cells = markdown::table_cells(&readme);
    assert!(!cells.is_empty(), "no table parsed from README.md");
    let long: Vec<String> = cells
        .iter()
        .filter(|(_, c)| c.chars().count() > README_CELL_MAX_CHARS)
        .map(|(n, c)| format!("line {n}: {} chars: {:.60}...", c.chars().count(), c))
        .collect();
    assert!(
        long.is_empty(),
        "README.md table cells over {README_CELL_MAX_CHARS} characters: {long:#?}"
    );
}

#[test]
fn the_readme_maps_every_page_of_docs() {
    let root = workspace_root();
    let readme = read(&root.join("README.md"));
    let map = markdown::section(&readme, "Documentation").expect("README.md: no ## Documentation");
    let linked: Vec<String> = markdown::links(map).into_iter().map(|(_, t)| t).collect();
    let mut wanted: Vec<String> = md_files(&root.join("docs"))
        .iter()
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_str().unwrap()))
        .collect();
    assert!(wanted.len() >= 5, "docs pages found: {wanted:?}");
    wanted.push("CHANGELOG.md".into());
    if root.join("docs/history").is_dir() {
        wanted.push("docs/history/".into());
    }
    let missing: Vec<&String> = wanted.iter().filter(|w| !linked.contains(w)).collect();
    assert!(
        missing.is_empty(),
        "not linked from README.md's map: {missing:?}"
    );
}

#[test]
fn every_relative_link_leads_somewhere() {
    let root = workspace_root();
    let mut pages = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    pages.extend(md_files(&root.join("docs")));
    if root.join("docs/history").is_dir() {
        pages.extend(md_files(&root.join("docs/history")));
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = read(page);
        for (n, target) in markdown::links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let dest = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let at = format!(
                "{}:{n}: {target}",
                page.strip_prefix(&root).unwrap().display()
            );
            if !dest.exists() {
                broken.push(format!("{at} (no such file)"));
            } else if !anchor.is_empty()
                && dest.extension().is_some_and(|x| x == "md")
                && !markdown::anchors(&read(&dest)).iter().any(|a| a == anchor)
            {
                broken.push(format!("{at} (no such heading)"));
            }
        }
    }
    assert!(checked > 50, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

#[test]
fn reference_pages_carry_no_dated_accounts() {
    // A heading with a date is an account of how the work went: it belongs in
    // docs/history/, not on a page that describes the project as it is.
    let root = workspace_root();
    let dated = |l: &str| {
        l.as_bytes().windows(10).any(|w| {
            w.iter().enumerate().all(|(i, b)| match i {
                4 | 7 => *b == b'-',
                _ => b.is_ascii_digit(),
            }) && w.starts_with(b"20")
        })
    };
    let mut found = Vec::new();
    for page in md_files(&root.join("docs")) {
        for (n, line) in markdown::prose_lines(&read(&page)) {
            // "The fifteenth round of issue 11", "(fourth session)": a log, not a reference.
            let lower = line.to_lowercase();
            let log = lower.contains(" round of issue") || lower.contains(" session)");
            if line.starts_with('#') && (dated(line) || log) {
                found.push(format!("{}:{n}: {line}", page.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "dated sections on reference pages: {found:#?}"
    );
}

#[test]
fn the_markdown_reader_finds_what_it_is_asked() {
    let text = "# A `b`'s title\n\n```sh\n[not](a-link)\n# not a heading\n```\n\
                [x](y.md#a-bs-title) `[code](z)`\n| a | b \\| c |\n## A `b`'s title\n";
    let links: Vec<String> = markdown::links(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(links, ["y.md#a-bs-title"]);
    assert_eq!(markdown::anchors(text), ["a-bs-title", "a-bs-title-1"]);
    let cells: Vec<String> = markdown::table_cells(text)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    assert_eq!(cells, ["a", "b | c"]);
    assert_eq!(
        markdown::section(text, "A `b`'s title")
            .unwrap()
            .lines()
            .count(),
        9
    );
}
