//! `cargo xtask <command>`: the developer entry point of the workspace.
//!
//! Everything a contributor or CI needs beyond stable cargo (nightly eBPF build, linker
//! install, root-only test suite) is here, so the README can say "run `cargo xtask test`".

mod tasks;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "redirector developer tasks"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the eBPF programs into target/bpf/redirector.bpf.o (installs rust-src and
    /// bpf-linker on first use).
    BuildEbpf {
        /// Accepted for symmetry; the eBPF object is always optimised (the verifier needs it).
        #[arg(long)]
        release: bool,
    },
    /// Build everything and run the whole test suite as root (end-to-end tests included).
    Test {
        /// Passed verbatim to `cargo test --workspace` (e.g. `-- --no-fail-fast -- --nocapture`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run the end-to-end demo in throw-away network namespaces.
    Demo {
        /// Run the agent from the image (`cargo xtask image`) under podman, as the
        /// DaemonSet's pod (directory mode), instead of as a plain process.
        #[arg(long)]
        container: bool,
    },
    /// Build the agent image with podman, without a registry: the release binary and the
    /// libraries it links, FROM scratch, tagged as deploy/daemonset.yaml names it (as root).
    Image,
    /// cargo fmt --check and cargo clippy -D warnings over the workspace.
    Lint,
    /// Benchmark the redirector against HAProxy and direct TLS (as root); see bench/README.md.
    Bench(tasks::BenchArgs),
    /// Scale benchmark: 10,000 Backends, 100,000 map entries, change latency, RSS (as
    /// root); writes bench/scale.md.
    BenchScale(tasks::BenchScaleArgs),
    /// CPU cost per run of the connect4 eBPF program, per path through it (as root);
    /// writes bench/hooks.md.
    BenchHooks(tasks::BenchHooksArgs),
    /// DNS capture benchmark: dnsperf from the pod, captured and not captured (as root);
    /// writes bench/dns.md.
    BenchDns(tasks::BenchDnsArgs),
    /// Load and fault benchmark: 10,000 held connections, slow peers, a black-holed
    /// upstream (as root); writes bench/load.md.
    BenchLoad(tasks::BenchLoadArgs),
    /// Run the fuzz targets (cargo-fuzz, nightly) for a while each; corpora in fuzz/corpus.
    Fuzz(tasks::FuzzArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::BuildEbpf { release: _ } => tasks::ebpf::build_ebpf().map(|_| ExitCode::SUCCESS),
        Cmd::Test { args } => tasks::test(&args),
        Cmd::Demo { container } => tasks::demo(container),
        Cmd::Image => tasks::image(),
        Cmd::Lint => tasks::lint(),
        Cmd::Bench(args) => tasks::bench(&args),
        Cmd::BenchScale(args) => tasks::bench_scale(&args),
        Cmd::BenchHooks(args) => tasks::bench_hooks(&args),
        Cmd::BenchDns(args) => tasks::bench_dns(&args),
        Cmd::BenchLoad(args) => tasks::bench_load(&args),
        Cmd::Fuzz(args) => tasks::fuzz(&args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("xtask: {e:#}");
        ExitCode::FAILURE
    })
}
