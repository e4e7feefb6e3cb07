//! The man pages and shell completions, generated from the clap definition so
//! they never drift from `--help`: `vhost-mpath man --out-dir DIR` and
//! `vhost-mpath completions SHELL` (hidden commands; the Debian package's build
//! runs them, packaging/build-deb).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Args;

/// What the main page adds after the subcommands (roff).
const FILES: &str = r".SH FILES
.TP
/etc/vhost\-mpath/\fIINSTANCE\fR.toml
The configuration of vhost\-mpath@\fIINSTANCE\fR.service.
.TP
/etc/vhost\-mpath/example.toml
An example to copy: two file paths on a sparse image.
.TP
/run/vhost\-mpath/\fIINSTANCE\fR.sock
The vhost\-user socket of vhost\-mpath@\fIINSTANCE\fR.socket.
.TP
/var/lib/vhost\-mpath/
The service's state directory (images).
.SH SEE ALSO
/usr/share/doc/vhost\-mpath/OPERATIONS.md: every option, configuration key,
JSON\-RPC method and metric; systemd.socket(5), qemu(1).
";

fn command() -> clap::Command {
    Args::command().disable_help_subcommand(true)
}

/// The main page: clap_mangen's sections, then FILES and SEE ALSO.
fn render_main(out: &mut dyn Write) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(command());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    out.write_all(FILES.as_bytes())?;
    man.render_version_section(out)
}

/// Writes `vhost-mpath.1` and one `vhost-mpath-SUBCOMMAND.1` per visible
/// subcommand into `dir`; returns the files written.
pub fn write_man_pages(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(command(), dir)?;
    // generate_to's main page has no FILES: rewritten.
    let mut main = std::fs::File::create(dir.join("vhost-mpath.1"))?;
    render_main(&mut main)?;
    main.flush()?;
    let mut pages = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if p.extension().is_some_and(|e| e == "1") {
            pages.push(p);
        }
    }
    pages.sort();
    Ok(pages)
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command(), "vhost-mpath", &mut out);
    out
}

/// `vhost-mpath man --out-dir DIR`: exit code.
pub fn run_man(dir: &Path) -> i32 {
    match write_man_pages(dir) {
        Ok(pages) => {
            for p in pages {
                println!("{}", p.display());
            }
            0
        }
        Err(e) => {
            eprintln!("vhost-mpath: man pages in {}: {e}", dir.display());
            1
        }
    }
}

/// `vhost-mpath completions SHELL`: exit code.
pub fn run_completions(shell: Shell) -> i32 {
    match std::io::stdout().write_all(&completions(shell)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vhost-mpath: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The subcommands `--help` lists (not the hidden generators, not `help`).
    fn visible_subcommands() -> Vec<String> {
        let cmd = Args::command();
        let names: Vec<String> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_string())
            .collect();
        assert!(names.len() >= 7, "too few subcommands: {names:?}");
        names
    }

    #[test]
    fn man_pages_cover_every_subcommand_and_flag() {
        let dir = std::env::temp_dir().join(format!("vmp-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let pages = write_man_pages(&dir).unwrap();
        let main = std::fs::read_to_string(dir.join("vhost-mpath.1")).unwrap();
        assert!(main.contains(".TH vhost-mpath 1"), "{main}");
        assert!(main.contains(".SH FILES\n"), "FILES section missing");
        assert!(main.contains("OPERATIONS.md"), "SEE ALSO missing");
        assert!(main.contains(".SH SUBCOMMANDS"), "SUBCOMMANDS missing");
        // roff escapes '-' as '\-'.
        for flag in [
            "socket\\-path",
            "config",
            "policy",
            "no\\-path\\-timeout",
            "metrics\\-listen",
        ] {
            assert!(
                main.contains(&format!("\\-\\-{flag}")),
                "main page lacks --{flag}"
            );
        }
        for sub in visible_subcommands() {
            assert!(
                main.contains(&format!("vhost\\-mpath\\-{sub}(1)")),
                "main page lists no {sub}"
            );
            let page = dir.join(format!("vhost-mpath-{sub}.1"));
            let text = std::fs::read_to_string(&page)
                .unwrap_or_else(|e| panic!("{}: {e} (pages: {pages:?})", page.display()));
            assert!(
                text.contains("rpc\\-socket"),
                "{sub}'s page lacks --rpc-socket"
            );
        }
        for hidden in ["man", "completions"] {
            assert!(!dir.join(format!("vhost-mpath-{hidden}.1")).exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn completions_name_every_subcommand() {
        for shell in [Shell::Bash, Shell::Zsh] {
            let script = String::from_utf8(completions(shell)).unwrap();
            for sub in visible_subcommands() {
                assert!(script.contains(&sub), "{shell} completions lack {sub}");
            }
            for flag in ["--socket-path", "--no-path-timeout", "--rpc-socket"] {
                assert!(script.contains(flag), "{shell} completions lack {flag}");
            }
        }
        let bash = String::from_utf8(completions(Shell::Bash)).unwrap();
        assert!(bash.contains("complete -F _vhost__mpath"), "{bash}");
        let zsh = String::from_utf8(completions(Shell::Zsh)).unwrap();
        assert!(zsh.starts_with("#compdef vhost-mpath"), "{zsh}");
    }
}
