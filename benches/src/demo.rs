//! The host's report of `make demo`: the guests' [`Record`] lines summed over
//! the compute nodes into each system's bootstrap (stage medians, time to the first
//! GET) and the cluster's GET throughput over time, as markdown and an SVG timeline.

use std::collections::BTreeMap;
use std::path::Path;

use verify::demo::{Record, SYSTEMS};
use verify::guest::Cost;

use crate::plot;

/// The goal: a worker's time to its first GET at least this many times shorter with
/// krcore than with verbs.
pub const FIRST_GET_GOAL: f64 = 20.0;

/// Median and largest of `v` (not empty).
fn median_max(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1])
}

/// The medians of `costs` (not empty), each measure apart.
fn median_cost(costs: &[Cost]) -> Cost {
    let mut cpu: Vec<f64> = costs.iter().map(|c| c.cpu_us).collect();
    let mut faults: Vec<f64> = costs.iter().map(|c| c.faults as f64).collect();
    Cost {
        cpu_us: median_max(&mut cpu).0,
        faults: median_max(&mut faults).0 as u64,
    }
}

/// One system's summary.
struct System {
    workers: usize,
    first_get: (f64, f64),
    /// Medians of the CPU time and page faults to the first GET.
    first_get_cost: Cost,
    /// Each stage's median time, and median cost where every worker measured it.
    stages: Vec<(String, f64, Option<Cost>)>,
    gets: u64,
    /// GETs/s per bin from the phase start, summed over the nodes.
    timeline: Vec<f64>,
    bin_s: f64,
}

fn system(records: &[Record], name: &str) -> Result<System, String> {
    let workers: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Worker {
                system,
                stages,
                costs,
                first_get_us,
                first_get_cost,
                gets,
                ..
            } if system == name => Some((stages, *first_get_us, *gets, costs, *first_get_cost)),
            _ => None,
        })
        .collect();
    if workers.is_empty() {
        return Err(format!("no {name} worker in the log"));
    }
    let mut first: Vec<f64> = workers.iter().map(|w| w.1).collect();
    let stages = workers[0]
        .0
        .iter()
        .enumerate()
        .map(|(i, (n, _))| {
            let mut v: Vec<f64> = workers
                .iter()
                .filter_map(|w| w.0.get(i).map(|s| s.1))
                .collect();
            let costs: Option<Vec<Cost>> = workers
                .iter()
                .map(|w| w.3.get(i).copied().flatten())
                .collect();
            (
                n.clone(),
                median_max(&mut v).0,
                costs.map(|c| median_cost(&c)),
            )
        })
        .collect();
    let mut timeline: Vec<f64> = Vec::new();
    let mut bin_s = 0.1;
    for r in records {
        if let Record::Timeline {
            system,
            bin_ms,
            counts,
            ..
        } = r
        {
            if system == name {
                bin_s = *bin_ms as f64 / 1e3;
                timeline.resize(timeline.len().max(counts.len()), 0.0);
                for (t, c) in timeline.iter_mut().zip(counts) {
                    *t += *c as f64 / bin_s;
                }
            }
        }
    }
    Ok(System {
        workers: workers.len(),
        first_get: median_max(&mut first),
        first_get_cost: median_cost(&workers.iter().map(|w| w.4).collect::<Vec<_>>()),
        stages,
        gets: workers.iter().map(|w| w.2).sum(),
        timeline,
        bin_s,
    })
}

/// Markdown for the run in `log` (titled `title`), and the timeline plot written into
/// `dir` as `NAME-timeline.svg`.
pub fn report(log: &str, title: &str, dir: &Path, name: &str) -> Result<String, String> {
    let records = log
        .lines()
        .filter_map(Record::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let mut md = format!("{title}\n\n");
    for r in &records {
        if let Record::Store {
            keys,
            bytes,
            build_ms,
        } = r
        {
            md += &format!(
                "The memory node's table: {keys} keys (YCSB `user` keys, 16-100 B values), {:.1} MiB, built in {build_ms:.0} ms; GET keys Zipfian (θ 0.99). A GET is two round trips: both candidate buckets in one batch, then the key's block.\n\n",
                *bytes as f64 / (1 << 20) as f64
            );
        }
    }
    let contacts: BTreeMap<(String, String), f64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Contact { system, node, ms } => Some(((system.clone(), node.clone()), *ms)),
            _ => None,
        })
        .collect();
    let systems = SYSTEMS
        .iter()
        .map(|s| system(&records, s).map(|v| (*s, v)))
        .collect::<Result<Vec<_>, _>>()?;
    md += "## A worker's bootstrap (medians over the workers of both compute nodes, µs)\n\n";
    for (name, s) in &systems {
        md += &format!(
            "**{name}** ({} workers, {} GETs checked): time to the first GET from the process's start (its exec apart) {:.1} ms median, {:.1} ms worst; of it on the CPU {:.1} ms, with {} page faults (medians)\n\n| stage | µs | CPU µs | page faults |\n|---|---:|---:|---:|\n",
            s.workers,
            s.gets,
            s.first_get.0 / 1e3,
            s.first_get.1 / 1e3,
            s.first_get_cost.cpu_us / 1e3,
            s.first_get_cost.faults,
        );
        for (stage, us, cost) in &s.stages {
            match cost {
                Some(c) => {
                    md += &format!("| {stage} | {us:.0} | {:.0} | {} |\n", c.cpu_us, c.faults)
                }
                None => md += &format!("| {stage} | {us:.0} | | |\n"),
            }
        }
        md += "\n";
    }
    md += "First contact of each compute node with the store (before its workers: for krcore the connection set to the memory node and the first, uncached name lookup; for verbs one rdma_cm connection):";
    for ((system, node), ms) in &contacts {
        md += &format!(" {system} on {node} {ms:.0} ms;");
    }
    md.pop();
    md += ".\n\n";
    let (kr, vb) = (&systems[0].1, &systems[1].1);
    let ratio = vb.first_get.0 / kr.first_get.0;
    md += &format!(
        "## Goal\n\nA worker's time to its first GET at least {FIRST_GET_GOAL:.0}x shorter than with verbs: **{ratio:.1}x** ({} ms vs {:.1} ms, medians) — {}.\n\n",
        format_args!("{:.1}", vb.first_get.0 / 1e3),
        kr.first_get.0 / 1e3,
        if ratio >= FIRST_GET_GOAL { "met" } else { "missed" }
    );
    md += "## GET throughput as workers join (both compute nodes summed)\n\n| system | peak GETs/s | mean GETs/s over the last second |\n|---|---:|---:|\n";
    let mut series = Vec::new();
    for (name, s) in &systems {
        // The last bin holds only the tail of the run.
        let full = &s.timeline[..s.timeline.len().saturating_sub(1)];
        let last_s = (1.0 / s.bin_s) as usize;
        let tail = &full[full.len().saturating_sub(last_s)..];
        md += &format!(
            "| {name} | {:.0} | {:.0} |\n",
            full.iter().copied().fold(0.0, f64::max),
            tail.iter().sum::<f64>() / tail.len().max(1) as f64
        );
        series.push((
            name.to_string(),
            full.iter()
                .enumerate()
                .map(|(i, v)| ((i as f64 + 0.5) * s.bin_s, *v))
                .collect::<Vec<_>>(),
        ));
    }
    plot::timeline(
        &dir.join(format!("{name}-timeline.svg")),
        "Elastic KV store: cluster GET throughput as workers join",
        "seconds from the phase start",
        "GETs/s",
        &series,
    )?;
    md += &format!("\n![GET throughput over time]({name}-timeline.svg)\n");
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(system: &str, node: &str, first_get_us: f64) -> Record {
        Record::Worker {
            system: system.into(),
            node: node.into(),
            joined_ms: 0.0,
            stages: vec![
                ("open".into(), first_get_us / 2.0),
                ("first GET".into(), first_get_us / 2.0),
            ],
            costs: vec![
                Some(Cost {
                    cpu_us: first_get_us / 4.0,
                    faults: 100,
                }),
                None,
            ],
            first_get_us,
            first_get_cost: Cost {
                cpu_us: first_get_us / 3.0,
                faults: 300,
            },
            gets: 10,
        }
    }

    fn timeline(system: &str, node: &str, counts: Vec<u64>) -> Record {
        Record::Timeline {
            system: system.into(),
            node: node.into(),
            bin_ms: 100,
            counts,
        }
    }

    #[test]
    fn nodes_are_summed_and_the_goal_is_judged() {
        let records = [
            worker("krcore", "b", 4_000.0),
            worker("krcore", "c", 6_000.0),
            worker("krcore", "c", 5_000.0),
            worker("verbs", "b", 150_000.0),
            worker("verbs", "c", 170_000.0),
            worker("verbs", "c", 160_000.0),
            timeline("krcore", "b", vec![1, 2, 3]),
            timeline("krcore", "c", vec![4, 5, 6]),
            timeline("verbs", "b", vec![1, 1, 1]),
            timeline("verbs", "c", vec![0, 1, 1]),
        ];
        let log: String = records
            .iter()
            .map(|r| format!("[b] {}\n", r.line()))
            .collect();
        let dir = std::env::temp_dir().join(format!("krcore-demo-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let md = report(&log, "# t", &dir, "demo").unwrap();
        // Medians: 5 ms against 160 ms: 32x, met.
        assert!(md.contains("**32.0x**"), "{md}");
        assert!(md.contains("— met"), "{md}");
        // Peak of the summed bins but the last (a partial bin): (2 + 5) / 0.1 s.
        assert!(md.contains("| krcore | 70 |"), "{md}");
        // Costs: measured stages with their medians, the others blank.
        assert!(md.contains("| open | 2500 | 1250 | 100 |"), "{md}");
        assert!(md.contains("| first GET | 2500 | | |"), "{md}");
        assert!(
            md.contains("on the CPU 1.7 ms, with 300 page faults"),
            "{md}"
        );
        assert!(dir.join("demo-timeline.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
        let slow: String = [
            worker("krcore", "b", 100_000.0),
            worker("verbs", "b", 150_000.0),
        ]
        .iter()
        .map(|r| r.line() + "\n")
        .collect();
        let dir = std::env::temp_dir().join(format!("krcore-demo-slow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = report(&slow, "# t", &dir, "demo").unwrap_err();
        assert!(
            err.contains("nothing to plot"),
            "no timeline, no plot: {err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
