//! One measured figure, as the guest prints it and the host reads it back: a flat JSON
//! object per line. The format is ours and flat (strings without quotes or commas,
//! numbers), so it is written and parsed here without a JSON library.

use std::time::Duration;

/// A figure: `series` measured at `x` (batch size, processes, ...) within `group`.
#[derive(Clone, Debug, PartialEq)]
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
        format!(
            "{{\"group\":\"{}\",\"series\":\"{}\",\"x\":{},\"unit\":\"{}\",\"median\":{:.1},\"p99\":{:.1},\"rate\":{:.1},\"samples\":{}}}",
            self.group, self.series, self.x, self.unit, self.median, self.p99, self.rate, self.samples
        )
    }

    /// Parses a line written by [`to_json`](Self::to_json).
    pub fn from_json(line: &str) -> Result<Record, String> {
        let body = line
            .trim()
            .strip_prefix('{')
            .and_then(|l| l.strip_suffix('}'))
            .ok_or_else(|| format!("not an object: {line}"))?;
        let mut fields = std::collections::HashMap::new();
        for kv in body.split(',') {
            let (k, v) = kv
                .split_once(':')
                .ok_or_else(|| format!("bad field {kv:?} in {line}"))?;
            fields.insert(k.trim_matches('"'), v.trim_matches('"'));
        }
        let get = |k: &str| {
            fields
                .get(k)
                .copied()
                .ok_or_else(|| format!("no {k} in {line}"))
        };
        let num = |k: &str| -> Result<f64, String> {
            get(k)?.parse().map_err(|e| format!("{k} in {line}: {e}"))
        };
        Ok(Record {
            group: get("group")?.into(),
            series: get("series")?.into(),
            x: num("x")? as u32,
            unit: get("unit")?.into(),
            median: num("median")?,
            p99: num("p99")?,
            rate: num("rate")?,
            samples: num("samples")? as usize,
        })
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
        assert_eq!(Record::from_json(&r.to_json()), Ok(r));
        assert!(Record::from_json("{\"group\":\"x\"}").is_err());
    }
}
