//! A run's records, looked up by group, series and x.

use crate::record::Record;

/// Every record of one run.
pub struct Figures(pub Vec<Record>);

impl Figures {
    /// The records printed between `FIGURES-BEGIN` and `FIGURES-END` in guest logs:
    /// every such block of every log, a line's guest role prefix (`[b] `, from the
    /// multi-guest runner) dropped.
    pub fn from_logs(logs: &[&str]) -> Result<Figures, String> {
        let mut records = Vec::new();
        for log in logs {
            let mut inside = false;
            let before = records.len();
            for line in log.lines() {
                let line = strip_role(line).trim();
                match line {
                    "FIGURES-BEGIN" => inside = true,
                    "FIGURES-END" => inside = false,
                    l if inside && l.starts_with('{') => records.push(Record::from_json(l)?),
                    _ => {}
                }
            }
            if records.len() == before {
                return Err("a log has no records between FIGURES-BEGIN and FIGURES-END".into());
            }
        }
        Ok(Figures(records))
    }

    /// The record of `series` at `x` in `group`.
    pub fn get(&self, group: &str, series: &str, x: u32) -> Option<&Record> {
        self.0
            .iter()
            .find(|r| r.group == group && r.series == series && r.x == x)
    }

    /// Its median, or NaN when it was not measured.
    pub fn median(&self, group: &str, series: &str, x: u32) -> f64 {
        self.get(group, series, x).map_or(f64::NAN, |r| r.median)
    }

    /// Its rate, or NaN.
    pub fn rate(&self, group: &str, series: &str, x: u32) -> f64 {
        self.get(group, series, x).map_or(f64::NAN, |r| r.rate)
    }

    /// The series of `group`, in the order they first appear.
    pub fn series(&self, group: &str) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in self.0.iter().filter(|r| r.group == group) {
            if !v.contains(&r.series) {
                v.push(r.series.clone());
            }
        }
        v
    }

    /// The x values of `group`, ascending.
    pub fn xs(&self, group: &str) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .0
            .iter()
            .filter(|r| r.group == group)
            .map(|r| r.x)
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

/// `line` without the multi-guest runner's role prefix (`[a] `), if it has one.
pub fn strip_role(line: &str) -> &str {
    match line.strip_prefix('[').and_then(|l| l.split_once("] ")) {
        Some((role, rest)) if !role.is_empty() && role.len() <= 8 && !role.contains(' ') => rest,
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_several_logs_with_role_prefixes_are_merged() {
        let r = |g: &str| Record {
            group: g.into(),
            series: "s".into(),
            x: 1,
            unit: "ns".into(),
            median: 1.0,
            p99: 2.0,
            rate: 0.0,
            samples: 3,
        };
        let one = format!(
            "noise\nFIGURES-BEGIN\n{}\nFIGURES-END\n",
            r("nop").to_json()
        );
        let two = format!(
            "[a] [far] {{not a record}}\n[b] FIGURES-BEGIN\n[a] [far] serving\n[b] {}\n[b] FIGURES-END\n",
            r("across-connect").to_json()
        );
        let f = Figures::from_logs(&[&one, &two]).unwrap();
        assert_eq!(f.0, vec![r("nop"), r("across-connect")]);
        assert!(Figures::from_logs(&[&one, "[b] nothing"]).is_err());
        assert_eq!(strip_role("[vm] booted"), "booted");
        assert_eq!(strip_role("[figures] x"), "x");
        assert_eq!(strip_role("{\"group\"}"), "{\"group\"}");
    }
}
