//! Distributions and failure counts, as the JSON the bench reads.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

/// Durations in milliseconds.
#[derive(Default)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64() * 1000.0);
    }

    pub fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `{n, min, p50, p90, p99, max, mean}` (nearest rank), `{n: 0}` when empty.
    pub fn summary(mut self) -> Value {
        if self.0.is_empty() {
            return json!({ "n": 0 });
        }
        self.0.sort_by(f64::total_cmp);
        let v = &self.0;
        let pct = |p: f64| {
            let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
            round(v[rank.min(v.len()) - 1])
        };
        json!({
            "n": v.len(),
            "min": round(v[0]),
            "p50": pct(50.0),
            "p90": pct(90.0),
            "p99": pct(99.0),
            "max": round(v[v.len() - 1]),
            "mean": round(v.iter().sum::<f64>() / v.len() as f64),
        })
    }
}

/// Three decimals: microseconds are the finest that means anything here.
fn round(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// Counts by kind (`ok`, `refused`, `eof`, `status-502`...).
#[derive(Default)]
pub struct Tally(BTreeMap<String, u64>);

impl Tally {
    pub fn add(&mut self, kind: impl Into<String>) {
        *self.0.entry(kind.into()).or_default() += 1;
    }

    pub fn merge(&mut self, other: Tally) {
        for (kind, n) in other.0 {
            *self.0.entry(kind).or_default() += n;
        }
    }

    pub fn json(&self) -> Value {
        json!(self.0)
    }
}

pub fn ms(d: Duration) -> f64 {
    round(d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::default();
        for i in 1..=100 {
            s.push(Duration::from_millis(i));
        }
        let v = s.summary();
        assert_eq!(v["p50"], 50.0);
        assert_eq!(v["p99"], 99.0);
        assert_eq!(v["max"], 100.0);
        assert_eq!(Samples::default().summary()["n"], 0);
    }
}
