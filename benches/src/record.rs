//! One measured figure, as the guest prints it and the host reads it back: a JSON
//! object per line (serde_json).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A figure: `series` measured at `x` (batch size, processes, ...) within `group`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// What is compared, e.g. `nop`, `read8-latency`, `connect`, `memory`.
    pub group: String,
    /// Who is measured, e.g. `krcore-enter`, `io_uring`, `verbs-direct`.
    pub series: String,
    /// The parameter the group varies (batch size, processes, in-flight ops); 0 if none.
    pub x: u32,
    /// `ns` (per operation) or `bytes` (per object).
    pub unit: String,
    /// Median.
    pub median: f64,
    /// 99th percentile (the largest sample when there are fewer than 100).
    pub p99: f64,
    /// Operations per second across the whole run (connects/s, ops/s); 0 if not a rate.
    pub rate: f64,
    /// Samples behind the median.
    pub samples: usize,
}

impl Record {
    /// A time figure from raw samples, each covering `per` operations.
    pub fn times(
        group: &str,
        series: &str,
        x: u32,
        mut samples: Vec<Duration>,
        per: u32,
    ) -> Record {
        assert!(!samples.is_empty(), "{group}/{series}: no samples");
        samples.sort();
        let q = |q: f64| {
            let i = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[i].as_nanos() as f64 / per as f64
        };
        Record {
            group: group.into(),
            series: series.into(),
            x,
            unit: "ns".into(),
            median: q(0.5),
            p99: q(0.99),
            rate: 0.0,
            samples: samples.len(),
        }
    }

    /// The same record with an overall rate.
    pub fn with_rate(mut self, rate: f64) -> Record {
        self.rate = rate;
        self
    }

    /// One line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a record is plain data")
    }

    /// Parses a line written by [`to_json`](Self::to_json).
    pub fn from_json(line: &str) -> Result<Record, String> {
        serde_json::from_str(line.trim()).map_err(|e| format!("{e}: {line}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_quantiles() {
        let ms = |v: u64| Duration::from_micros(v);
        let r = Record::times(
            "read8-latency",
            "krcore-enter",
            1,
            (1..=200).rev().map(ms).collect(),
            2,
        )
        .with_rate(1234.5);
        assert_eq!(
            r.median, 50_500.0,
            "median of 1..=200 us at index 100, per 2 ops"
        );
        assert_eq!(r.p99, 99_000.0);
        assert_eq!(Record::from_json(&r.to_json()), Ok(r.clone()));
        assert!(Record::from_json("{\"group\":\"x\"}").is_err());
        // Any string survives, commas and quotes included (stage names have spaces and
        // '+').
        let odd = Record {
            series: "PD+CQ+QP, \"quoted\"".into(),
            ..r
        };
        assert_eq!(Record::from_json(&odd.to_json()), Ok(odd));
    }
}
