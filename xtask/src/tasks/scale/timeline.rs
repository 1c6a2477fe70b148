//! The agent's start-up as the report shows it: its log lines up to `ready:`, in ms after
//! the spawn, with the thousands of `Backend added` lines folded into two.

use std::time::SystemTime;

use super::logs::{ms_between, timestamp};

/// The agent's start-up as (ms since spawn, message): every line up to the ready line,
/// with the per-Backend `Backend added` lines folded into their first and last.
pub fn timeline<S: AsRef<str>>(lines: &[S], spawned_at: SystemTime) -> Vec<(f64, String)> {
    let mut out = Vec::new();
    let mut added: Vec<f64> = Vec::new();
    let flush = |out: &mut Vec<(f64, String)>, added: &mut Vec<f64>| {
        if let (Some(first), Some(last)) = (added.first(), added.last()) {
            out.push((*first, format!("Backend added (first of {})", added.len())));
            if added.len() > 1 {
                out.push((*last, format!("Backend added (last of {})", added.len())));
            }
        }
        added.clear();
    };
    for line in lines {
        let line = line.as_ref();
        let Some(at) = timestamp(line) else { continue };
        let ms = ms_between(spawned_at, at);
        let message = message(line);
        if message.starts_with("Backend added") {
            added.push(ms);
            continue;
        }
        flush(&mut out, &mut added);
        let short: String = message.chars().take(110).collect();
        out.push((ms, short));
        if line.contains("ready:") {
            break;
        }
    }
    flush(&mut out, &mut added);
    out
}

/// The part of a text log line after `<timestamp> <LEVEL> <target>: `.
fn message(line: &str) -> &str {
    let mut rest = line;
    for _ in 0..2 {
        rest = rest.trim_start();
        rest = rest.find(char::is_whitespace).map_or("", |i| &rest[i..]);
    }
    let rest = rest.trim_start();
    match rest.split_once(": ") {
        Some((target, msg)) if !target.contains(' ') => msg,
        _ => rest,
    }
}

#[cfg(test)]
mod tests {
    use super::super::logs;
    use super::*;

    #[test]
    fn message_strips_timestamp_level_and_target() {
        assert_eq!(
            message("2026-11-23T01:52:01.1Z  INFO redirector::run: ready: programs attached"),
            "ready: programs attached"
        );
        assert_eq!(
            message("2026-11-23T01:52:01.1Z  WARN redirector::reconcile: skipped: x: y"),
            "skipped: x: y"
        );
    }

    #[test]
    fn timeline_folds_backend_added_lines() {
        let t = "2026-11-23T01:52:01.000Z";
        let lines: Vec<String> = [
            format!("{t}  INFO redirector::datapath: programs loaded"),
            format!("{t}  INFO redirector::reconcile: Backend added backend=scale/b1"),
            format!("{t}  INFO redirector::reconcile: Backend added backend=scale/b2"),
            format!("{t}  INFO redirector::run: ready: programs attached"),
            format!("{t}  INFO redirector::reconcile: after ready"),
        ]
        .into();
        let at = logs::parse_rfc3339(t).unwrap();
        let messages: Vec<String> = timeline(&lines, at).into_iter().map(|(_, m)| m).collect();
        assert_eq!(
            messages,
            [
                "programs loaded",
                "Backend added (first of 2)",
                "Backend added (last of 2)",
                "ready: programs attached"
            ]
        );
    }
}
