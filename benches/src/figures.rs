//! A run's records, looked up by group, series and x.

use crate::record::Record;

/// Every record of one run.
pub struct Figures(pub Vec<Record>);

impl Figures {
    /// The records printed between `FIGURES-BEGIN` and `FIGURES-END` in a guest log.
    pub fn from_log(log: &str) -> Result<Figures, String> {
        let body = log
            .split_once("FIGURES-BEGIN")
            .and_then(|(_, rest)| rest.split_once("FIGURES-END"))
            .ok_or("no FIGURES-BEGIN ... FIGURES-END block in the log")?
            .0;
        let records = body
            .lines()
            .filter(|l| l.trim_start().starts_with('{'))
            .map(Record::from_json)
            .collect::<Result<Vec<_>, _>>()?;
        if records.is_empty() {
            return Err("the figures block is empty".into());
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
