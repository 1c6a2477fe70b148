//! The `redirector` command: parses the command line, sets up logging and the runtime,
//! and hands over to the library (`lib.rs` maps where things happen).

use std::process::ExitCode;

use clap::Parser;
use redirector::{
    check,
    cli::{self, Cli, Command, LogFormat},
    crd, run, status,
};
/// mimalloc rather than glibc's malloc: every catalog change builds a new table of all
/// Backends on whichever worker thread runs the reconciler, and glibc kept the freed
/// memory in per-thread arenas (VmRSS 76 -> 172 MiB over 100 changes with 10,000
/// Backends, heap steady); mimalloc returns freed pages to the system.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.command {
        Command::Run(args) => tokio_main(args.worker_threads, run::run(*args)),
        Command::Check(args) => return check::check(&args.dirs),
        Command::Status(args) => status::print(args.admin_addr),
        Command::Crd(args) if args.backend_policy => {
            print!("{}", crd::policy_crd_yaml());
            return ExitCode::SUCCESS;
        }
        Command::Crd(args) => {
            // Two YAML documents: `kubectl apply -f -` installs both.
            let xbackend = crd::crd_yaml(args.gateway_api.into());
            print!(
                "{xbackend}---
{}",
                crd::policy_crd_yaml()
            );
            return ExitCode::SUCCESS;
        }
        Command::Uninstall(args) => run::uninstall(&args.bpffs.bpffs),
        Command::Probe(args) => {
            let path = match args.what {
                cli::ProbeKind::Ready => "/readyz",
                cli::ProbeKind::Live => "/healthz",
            };
            status::probe(&args.admin_socket, path)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

fn tokio_main(
    workers: Option<u16>,
    future: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let mut builder = match workers {
        // One thread: the current-thread scheduler, with no work-stealing machinery and
        // no cross-thread wake-ups (measured in bench/results.md).
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(workers) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(usize::from(workers));
            builder
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build()?.block_on(future)
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::{EnvFilter, fmt};
    let filter = EnvFilter::try_from_env("REDIRECTOR_LOG")
        // kube-rs logs every failed request itself; the Kubernetes source reports those
        // failures rate-limited, with hints.
        .unwrap_or_else(|_| EnvFilter::new("info,kube_client=off,kube_runtime=off"));
    use std::io::IsTerminal;
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
