use clap::Parser;
use vhost_mpath::cli::Args;
use vhost_mpath::config::Settings;
use vhost_mpath::serve::{self, StartError};
use vhost_mpath::{client, systemd, virtio};

fn init_logging(level: Option<&str>) {
    let mut b = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if let Some(l) = level {
        b.parse_filters(l);
    }
    b.format_timestamp_millis().init();
}

fn main() {
    let args = Args::parse();
    if let Some(cmd) = &args.command {
        std::process::exit(client::run(cmd));
    }
    if args.print_capabilities {
        println!("{}", virtio::capabilities());
        return;
    }
    let fail = |msg: String| -> ! {
        eprintln!("vhost-mpath: {msg}");
        std::process::exit(2);
    };
    // Before any thread starts: it edits the environment.
    let activated = systemd::take_listen_fd().unwrap_or_else(|e| fail(e));
    let settings = Settings::from_args_activated(&args, activated).unwrap_or_else(|e| fail(e));
    init_logging(settings.log_level.as_deref());
    let disk = serve::open_disk(&settings).unwrap_or_else(|StartError(e)| fail(e));
    if let Err(StartError(e)) = serve::run(&settings, disk) {
        fail(e);
    }
}
