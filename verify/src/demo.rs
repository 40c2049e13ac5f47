//! What the elastic key-value demo (`make demo`) prints in the guests for the
//! host's report: one JSON object per line, prefixed by [`PREFIX`] so the host picks
//! them out of the guests' interleaved logs.

use serde::{Deserialize, Serialize};

use crate::guest::Cost;

/// Starts every record line.
pub const PREFIX: &str = "demo-record ";

/// The two ways a worker reaches the store.
pub const SYSTEMS: [&str; 2] = ["krcore", "verbs"];

/// One line of the demo's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// The memory node's table.
    Store {
        /// Keys stored.
        keys: u64,
        /// The table's length.
        bytes: u64,
        /// How long building it took.
        build_ms: f64,
    },
    /// A compute node's first contact with the store, before its workers (the launcher's
    /// probe: for krcore the connection set to the memory node is made then).
    Contact {
        /// `krcore` or `verbs`.
        system: String,
        /// The compute node.
        node: String,
        /// From the first attempt to the store found.
        ms: f64,
    },
    /// One short-lived worker.
    Worker {
        /// `krcore` or `verbs`.
        system: String,
        /// The compute node it ran on.
        node: String,
        /// When it was started, from its node's phase start.
        joined_ms: f64,
        /// Its bootstrap, stage by stage, in order: (name, microseconds).
        stages: Vec<(String, f64)>,
        /// Each stage's CPU time and page faults, where the worker measured them.
        #[serde(default)]
        costs: Vec<Option<Cost>>,
        /// From its process's main to its first GET's value in hand (its exec is the
        /// first stage, apart).
        first_get_us: f64,
        /// The CPU time and page faults of the same stretch.
        #[serde(default)]
        first_get_cost: Cost,
        /// GETs it made, every value checked.
        gets: u64,
    },
    /// GETs completed on one node per bin, from its phase start.
    Timeline {
        /// `krcore` or `verbs`.
        system: String,
        /// The compute node.
        node: String,
        /// The bins' width.
        bin_ms: u64,
        /// GETs per bin.
        counts: Vec<u64>,
    },
}

impl Record {
    /// The record as one line.
    pub fn line(&self) -> String {
        format!(
            "{PREFIX}{}",
            serde_json::to_string(self).expect("plain data")
        )
    }

    /// The record in `line`, if it holds one (anywhere in it: the runner prefixes the
    /// guest's role).
    pub fn parse(line: &str) -> Option<Result<Record, String>> {
        let at = line.find(PREFIX)?;
        Some(serde_json::from_str(&line[at + PREFIX.len()..]).map_err(|e| format!("{e}: {line}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_the_runners_prefix() {
        let r = Record::Worker {
            system: "krcore".into(),
            node: "b".into(),
            joined_ms: 500.0,
            stages: vec![("CONNECT".into(), 12.5)],
            costs: vec![Some(Cost {
                cpu_us: 9.0,
                faults: 3,
            })],
            first_get_us: 800.0,
            first_get_cost: Cost {
                cpu_us: 700.0,
                faults: 40,
            },
            gets: 42,
        };
        let line = format!("[b] {}", r.line());
        assert_eq!(Record::parse(&line), Some(Ok(r)));
        assert_eq!(Record::parse("[b] something else"), None);
        assert!(matches!(
            Record::parse("[b] demo-record {\"kind\":\"nope\"}"),
            Some(Err(_))
        ));
    }
}
