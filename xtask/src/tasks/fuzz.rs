//! `cargo xtask fuzz`: runs the cargo-fuzz targets in `fuzz/` (libFuzzer, nightly) one
//! after another, each for a fixed time, growing the corpora in `fuzz/corpus/`.
//!
//! One at a time on purpose: libFuzzer takes a core per run, and the machine may be
//! doing other work (run it under `nice -n 19` then). A crash does not stop the other
//! targets; it is reported with its artifact and makes the command fail.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};

use anyhow::{Context, Result};

use super::{check_status, toolchain, workspace_root};

/// The fuzz targets (`fuzz/fuzz_targets/<name>.rs`), in the order they run.
const TARGETS: [&str; 5] = [
    "client_hello",
    "backend_yaml",
    "backend_json",
    "hosts_file",
    "dns_query",
];

/// Corpus files `--cmin` keeps even when they add no coverage: the hand-written seeds
/// (named, they document what each target is for) and the inputs of fixed bugs (what
/// those pin down is a size or a value, not a path through the code).
const KEPT_PREFIXES: [&str; 2] = ["seed-", "regression-"];

/// `cargo xtask fuzz` options.
#[derive(clap::Args, Debug)]
pub struct FuzzArgs {
    /// How long each target runs, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Run only this target.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(TARGETS))]
    target: Option<String>,
    /// Minimise each corpus afterwards (`cargo fuzz cmin`), keeping seeds and regressions.
    #[arg(long)]
    cmin: bool,
}

/// What one run of a target gave.
struct Outcome {
    target: &'static str,
    executions: Option<u64>,
    crashed: bool,
    artifacts: Vec<String>,
}

pub fn fuzz(args: &FuzzArgs) -> Result<ExitCode> {
    // Fails early with a hint when nightly is missing (libFuzzer needs -Zsanitizer).
    toolchain::nightly_sysroot()?;
    ensure_cargo_fuzz()?;
    let targets = TARGETS
        .into_iter()
        .filter(|t| args.target.as_deref().is_none_or(|only| only == *t));
    let mut outcomes = Vec::new();
    for target in targets {
        let outcome = run(target, args.seconds)?;
        if args.cmin && !outcome.crashed {
            cmin(target)?;
        }
        outcomes.push(outcome);
    }
    println!("\n| target | seconds | executions | corpus files | result |");
    println!("|---|---:|---:|---:|---|");
    for o in &outcomes {
        let executions = o.executions.map_or("?".to_owned(), |n| n.to_string());
        let result = if o.crashed {
            format!("CRASH {}", o.artifacts.join(" "))
        } else {
            "ok".to_owned()
        };
        let files = count_files(&corpus(o.target));
        println!(
            "| {} | {} | {executions} | {files} | {result} |",
            o.target, args.seconds
        );
    }
    let crashed = outcomes.iter().any(|o| o.crashed);
    Ok(if crashed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn corpus(target: &str) -> PathBuf {
    workspace_root().join("fuzz/corpus").join(target)
}

fn ensure_cargo_fuzz() -> Result<()> {
    let runs = toolchain::clean_command("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !runs {
        println!("installing cargo-fuzz (once)...");
        check_status(toolchain::clean_command("cargo").args([
            "install",
            "cargo-fuzz",
            "--locked",
        ]))?;
    }
    Ok(())
}

/// `cargo +nightly fuzz run <target>` for `seconds`; libFuzzer's output is passed on and
/// read for the final stats and the crash artifact.
fn run(target: &'static str, seconds: u64) -> Result<Outcome> {
    println!("\n== fuzz {target}: {seconds} s ==");
    let mut child = toolchain::clean_command("cargo")
        .current_dir(workspace_root())
        .args(["+nightly", "fuzz", "run", target, "--"])
        .arg(format!("-max_total_time={seconds}"))
        // A parser that spends 10 s on one small input is a hang worth a report.
        .args(["-timeout=10", "-print_final_stats=1"])
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run cargo +nightly fuzz")?;
    let mut outcome = Outcome {
        target,
        executions: None,
        crashed: false,
        artifacts: Vec::new(),
    };
    if let Some(stderr) = child.stderr.take() {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        // Bytes, not lines of UTF-8: a crash report may quote the input.
        while reader.read_until(b'\n', &mut line)? > 0 {
            let _ = std::io::stderr().write_all(&line);
            read_stat(&String::from_utf8_lossy(&line), &mut outcome);
            line.clear();
        }
    }
    let status = child.wait().context("waiting for cargo fuzz")?;
    outcome.crashed |= !status.success();
    Ok(outcome)
}

fn read_stat(line: &str, outcome: &mut Outcome) {
    if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
        outcome.executions = n.trim().parse().ok();
    } else if let Some((_, path)) = line.split_once("Test unit written to ") {
        outcome.crashed = true;
        outcome.artifacts.push(path.trim().to_owned());
    }
}

/// `cargo fuzz cmin <target>`, with the kept inputs set aside and put back (cmin keeps
/// only inputs that add coverage, renamed after their hash).
fn cmin(target: &str) -> Result<()> {
    let dir = corpus(target);
    let aside = tempfile::tempdir().context("cannot create a temporary directory")?;
    let kept = move_kept(&dir, aside.path())?;
    let minimised = check_status(
        toolchain::clean_command("cargo")
            .current_dir(workspace_root())
            .args(["+nightly", "fuzz", "cmin", target]),
    );
    // Back in any case: a failed cmin must not lose them.
    move_kept(aside.path(), &dir)?;
    minimised?;
    println!("{target}: corpus minimised, {kept} seeds and regression inputs kept");
    Ok(())
}

/// Moves the seeds and regression inputs of `from` into `to`; how many there were.
fn move_kept(from: &Path, to: &Path) -> Result<usize> {
    let mut moved = 0;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot list {}", from.display()))?
    {
        let entry = entry?;
        let name = entry.file_name();
        if KEPT_PREFIXES
            .iter()
            .any(|prefix| name.to_string_lossy().starts_with(prefix))
        {
            let dest = to.join(&name);
            // Same filesystem is not guaranteed (/tmp): copy, then remove.
            std::fs::copy(entry.path(), &dest)
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
            std::fs::remove_file(entry.path())?;
            moved += 1;
        }
    }
    Ok(moved)
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.filter_map(Result::ok).count())
}
