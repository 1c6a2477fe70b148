//! Reading the agent's text log lines and summarising samples.
//!
//! A line looks like
//! `2026-11-23T01:52:01.123456Z  INFO redirector::reconcile: Backends applied backends=10 addresses=20 elapsed_ms=3`:
//! an RFC 3339 timestamp (UTC, from the same realtime clock as our `SystemTime`), the
//! level, the target, the message and `key=value` fields.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The timestamp at the start of `line`, if it has one.
pub fn timestamp(line: &str) -> Option<SystemTime> {
    parse_rfc3339(line.split_whitespace().next()?)
}

/// The value of field `key` (`key=value`, ended by whitespace), quotes removed.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let needle = format!(" {key}=");
    let start = line.find(&needle)? + needle.len();
    let rest = &line[start..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"'))
}

/// [`field`] as a number.
pub fn field_u64(line: &str, key: &str) -> Option<u64> {
    field(line, key)?.parse().ok()
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` -> the instant it names.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(range)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos: u64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        for (i, c) in frac.bytes().take(digits).enumerate() {
            if i < 9 {
                nanos = nanos * 10 + u64::from(c - b'0');
            }
        }
        for _ in digits..9 {
            nanos *= 10;
        }
        rest = &frac[digits..];
    }
    let offset_s: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hh: i64 = rest.get(1..3)?.parse().ok()?;
            let mm: i64 = rest.get(4..6)?.parse().ok()?;
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            sign * (hh * 3600 + mm * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::new(secs, u32::try_from(nanos).ok()?))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds from `from` to `to` (negative if `to` is earlier).
pub fn ms_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64() * 1e3,
        Err(e) => -e.duration().as_secs_f64() * 1e3,
    }
}

/// Order statistics of a set of samples (milliseconds).
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Summary {
    /// `None` for no samples. The median of an even count is the mean of the middle
    /// two; p99 is the nearest-rank percentile (the 99th of 100 sorted samples).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n);
        Some(Summary {
            n,
            min: s[0],
            median,
            p99: s[rank - 1],
            max: s[n - 1],
            mean: s.iter().sum::<f64>() / n as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_agent_timestamp() {
        let line = "2026-11-23T01:52:01.123456Z  INFO redirector::reconcile: Backends applied backends=10000 addresses=100000 elapsed_ms=812";
        let at = timestamp(line).unwrap();
        let since = at.duration_since(UNIX_EPOCH).unwrap();
        // date -u -d 2026-11-23T01:52:01Z +%s
        assert_eq!(since.as_secs(), 1_795_398_721);
        assert_eq!(since.subsec_micros(), 123_456);
        assert_eq!(field_u64(line, "elapsed_ms"), Some(812));
        assert_eq!(field_u64(line, "addresses"), Some(100_000));
        assert_eq!(field(line, "missing"), None);
        assert_eq!(
            parse_rfc3339("2026-11-23T03:52:01+02:00"),
            parse_rfc3339("2026-11-23T01:52:01Z")
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
        assert_eq!(timestamp("ready: no timestamp"), None);
    }

    #[test]
    fn summary_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples).unwrap();
        assert_eq!((s.min, s.median, s.p99, s.max), (1.0, 50.5, 99.0, 100.0));
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!((one.median, one.p99), (7.0, 7.0));
        assert!(Summary::of(&[]).is_none());
    }
}
