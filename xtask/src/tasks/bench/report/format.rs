//! How numbers and reasons are written in the report's tables.

use crate::tasks::numbers::thousands;

pub(super) fn fmt_rate(v: Option<f64>) -> String {
    match v {
        Some(v) => thousands(v.round() as u64),
        None => "—".into(),
    }
}

pub(super) fn fmt_latency(us: Option<f64>) -> String {
    match us {
        Some(us) if us < 1000.0 => format!("{us:.0} µs"),
        Some(us) if us < 1e6 => format!("{:.2} ms", us / 1000.0),
        Some(us) => format!("{:.2} s", us / 1e6),
        None => "—".into(),
    }
}

pub(super) fn fmt_num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.decimals$}"))
}

/// A reason fit for one table cell.
pub(super) fn escape(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

/// Whitespace runs (newlines included) collapsed, cut to 300 characters.
pub fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() > 300 {
        let cut: String = joined.chars().take(300).collect();
        format!("{cut}…")
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(fmt_rate(Some(56072.79)), "56,073");
        assert_eq!(fmt_rate(Some(999.0)), "999");
        assert_eq!(fmt_latency(Some(440.0)), "440 µs");
        assert_eq!(fmt_latency(Some(4190.0)), "4.19 ms");
        assert_eq!(escape("a |b\nc"), "a \\|b c");
    }
}
