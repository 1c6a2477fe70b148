//! A container's arguments as the kubelet passes them, and checks of them against the
//! real `redirector` command line.

use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use anyhow::Result;
use k8s_openapi::api::core::v1::Container;
use xtask::netlab::agent::redirector_bin;

/// The made-up downward API values: `status.hostIP`, `spec.nodeName`.
pub const NODE_IP: &str = "192.0.2.10";
pub const NODE_NAME: &str = "node-a";

/// The container's args with `$(VAR)` expanded as the kubelet does, the downward API
/// values made up ([`NODE_IP`], [`NODE_NAME`]) except the pod's namespace, which is
/// `namespace` (the DaemonSet's).
pub fn expanded_args(container: &Container, namespace: &str) -> Result<Vec<String>> {
    let fields: BTreeMap<String, String> = [
        ("status.hostIP", NODE_IP),
        ("status.podIP", NODE_IP),
        ("spec.nodeName", NODE_NAME),
        ("metadata.namespace", namespace),
    ]
    .into_iter()
    .map(|(field, value)| (field.to_owned(), value.to_owned()))
    .collect();
    let vars = xtask::manifest::environment(container, &fields)?;
    xtask::manifest::expanded_args(container, &vars)
}

/// The `--flag` of every option argument.
pub fn flags(args: &[String]) -> Vec<&str> {
    args.iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| a.split('=').next().unwrap_or(a))
        .collect()
}

/// The value of `--flag=value` or `--flag value` (the last one given).
pub fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut found = None;
    for (i, arg) in args.iter().enumerate() {
        if let Some(value) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            found = Some(value);
        } else if arg == flag {
            found = args.get(i + 1).map(String::as_str);
        }
    }
    found
}

pub fn redirector(args: &[&str]) -> std::process::Output {
    let bin = redirector_bin().expect("the redirector binary");
    Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()))
}

/// Every flag used appears in `redirector SUBCOMMAND --help`.
pub fn assert_flags_exist(args: &[String]) {
    let help = redirector(&[&args[0], "--help"]);
    assert!(help.status.success(), "{help:?}");
    let help = String::from_utf8_lossy(&help.stdout);
    let known: std::collections::BTreeSet<&str> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '=')
        .filter(|word| word.starts_with("--"))
        .collect();
    for flag in flags(args) {
        assert!(
            known.contains(flag),
            "`{flag}` is not a flag of `redirector {}` (it has {known:?})",
            args[0]
        );
    }
}

/// The real command line accepts the arguments, values included: clap validates every
/// value it meets before it acts on a trailing `--help`, so this needs no privileges.
pub fn assert_parses(args: &[String]) {
    let mut with_help: Vec<&str> = args.iter().map(String::as_str).collect();
    with_help.push("--help");
    let out = redirector(&with_help);
    assert!(
        out.status.success(),
        "redirector {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `path` is on a volume mount of the container (read-only or not as required).
pub fn assert_mounted(container: &Container, path: &str, read_only: bool) {
    let mounts = container.volume_mounts.as_deref().unwrap_or_default();
    let mount = mounts
        .iter()
        .filter(|m| Path::new(path).starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())
        .unwrap_or_else(|| panic!("{path} is on no volume mount of {}", container.name));
    assert_eq!(
        mount.read_only.unwrap_or(false),
        read_only,
        "{}: readOnly",
        mount.mount_path
    );
}

/// `25s`, `1m`, `500ms` (the forms the agent accepts) as a duration.
pub fn seconds(text: &str) -> Duration {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("duration {text:?}"));
    match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number * 60),
        "h" => Duration::from_secs(number * 3600),
        _ => panic!("duration {text:?}: unknown unit"),
    }
}
