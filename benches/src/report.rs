//! The markdown report of one in-VM run: every figure in tables, and the goals
//! with the measured ratio and whether each was met.

use std::fmt::Write;

use crate::figures::Figures;

/// A duration in ns, in a readable unit.
pub fn time(ns: f64) -> String {
    if ns.is_nan() {
        "—".into()
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// A goal: what was asked, the measured ratio, the bar.
pub struct Goal {
    /// What the goal asks.
    pub what: &'static str,
    /// How the ratio is computed, with the figures it came from.
    pub measured: String,
    /// The ratio (higher is better).
    pub ratio: f64,
    /// The ratio that meets the goal.
    pub bar: f64,
}

impl Goal {
    /// Whether the measured ratio reaches the bar.
    pub fn met(&self) -> bool {
        self.ratio >= self.bar
    }
}

/// The goals against this run: those on one node, and those across nodes, each where
/// the run measured them.
pub fn goals(f: &Figures) -> Vec<Goal> {
    let mut g = Vec::new();
    if !f.series("nop").is_empty() {
        g.extend(node_goals(f));
    }
    if !f.series("across-connect").is_empty() {
        g.extend(across_goals(f));
    }
    g
}

/// The goals across nodes (the paper's figures, beside the user-space verbs baseline).
fn across_goals(f: &Figures) -> Vec<Goal> {
    let warm = f.median("across-connect", "krcore-warm", 1);
    let cm_fresh = f.median("across-connect", "verbs-cm-fresh-process", 1);
    let cm = f.median("across-connect", "verbs-cm-device-already-open", 1);
    // Every first contact, each its own figure (x: which), and their summary (x 0).
    let first = f.get("across-first-contact", "krcore", 0);
    let (first_median, first_worst) = first.map_or((f64::NAN, f64::NAN), |r| (r.median, r.p99));
    let each_first: Vec<String> = f
        .xs("across-first-contact")
        .into_iter()
        .filter(|&x| x > 0)
        .map(|x| time(f.median("across-first-contact", "krcore", x)))
        .collect();
    let names = f.xs("across-lookup").first().copied().unwrap_or(0);
    let uncached = f.median("across-lookup", "metaserver-uncached", names);
    let cached = f.median("across-lookup", "metaserver-cached", names);
    let rpc = f.median("across-lookup", "request-reply", names);
    let read = f.median("across-read8-latency", "krcore-enter", 1);
    let read_verbs = f.median("across-read8-latency", "verbs-cm", 1);
    vec![
        Goal {
            what: "across nodes: connect on a warm set ≥ 1,000× faster than verbs with rdma_cm (1 process)",
            measured: format!(
                "rdma_cm in a fresh process {} / krcore warm {} (rdma_cm with the device already open: {:.0}×)",
                time(cm_fresh),
                time(warm),
                cm / warm
            ),
            ratio: cm_fresh / warm,
            bar: 1000.0,
        },
        Goal {
            what: "across nodes: every first contact no slower than one rdma_cm connect",
            measured: format!(
                "rdma_cm with the device already open {} / the slowest of {} krcore first contacts {} (median {}; each: {})",
                time(cm),
                first.map_or(0, |r| r.samples),
                time(first_worst),
                time(first_median),
                each_first.join(", ")
            ),
            ratio: cm / first_worst,
            bar: 1.0,
        },
        Goal {
            what: "MetaServer lookup ≥ 3× faster than a request/reply lookup (one READ)",
            measured: format!(
                "request/reply {} / uncached lookup {} ({names} names present; the uncached lookup is {:.2}× an 8 B READ; cached {})",
                time(rpc),
                time(uncached),
                uncached / read,
                time(cached)
            ),
            ratio: rpc / uncached,
            bar: 3.0,
        },
        Goal {
            what: "across nodes: 8 B READ through the ring within 10% of verbs",
            measured: format!("verbs (rdma_cm QP) {} / ring {}", time(read_verbs), time(read)),
            ratio: read_verbs / read,
            bar: 1.0 / 1.1,
        },
    ]
}

/// The goals on one node.
fn node_goals(f: &Figures) -> Vec<Goal> {
    let warm = f.median("connect", "krcore-warm", 1);
    let verbs = f.median("connect", "verbs-opening-device", 1);
    let verbs_qp = f.median("connect", "verbs-device-already-open", 1);
    let nop_ring = f.median("nop", "krcore-enter", 32);
    let nop_one = f.median("nop", "krcore-per-op", 32);
    let read_ring = f.median("read8-latency", "krcore-enter", 1);
    let read_in_uring = f.median("read8-latency", "krcore-in-io_uring", 1);
    let wait_cpu = f.median("wait-cpu", "krcore-sleep", 1000);
    let wait_spin_cpu = f.median("wait-cpu", "krcore-spin", 1000);
    let (direct_series, direct) = match f.get("read8-latency", "kernel-direct", 1) {
        Some(r) => ("kernel-direct", r.median),
        None => (
            "verbs-direct (no kernel-direct figure)",
            f.median("read8-latency", "verbs-direct", 1),
        ),
    };
    vec![
        Goal {
            what: "connect with a warm pool ≥ 1,000× faster than verbs (1 process)",
            measured: format!(
                "verbs, opening the device, {} / krcore warm {} (verbs with the device already open: {:.0}×)",
                time(verbs),
                time(warm),
                verbs_qp / warm
            ),
            ratio: verbs / warm,
            bar: 1000.0,
        },
        Goal {
            what: "batched small ops ≥ 5× the throughput of one ioctl per op (NOP, batch 32)",
            measured: format!(
                "one-ioctl-per-op {} / ring {} per NOP (8 B READ with 12 in flight, where rxe's emulated work dominates: {:.2}×)",
                time(nop_one),
                time(nop_ring),
                f.rate("read8-throughput", "krcore-enter", 12)
                    / f.rate("read8-throughput", "krcore-per-op", 12)
            ),
            ratio: nop_one / nop_ring,
            bar: 5.0,
        },
        nop_goal(
            f,
            "krcore-enter",
            "krcore NOP at batch 1, 8, 32 and 128 at least as fast as io_uring's NOP",
            1.0,
        ),
        nop_goal(
            f,
            "krcore-in-io_uring",
            "krcore NOP carried by io_uring within 1.1× of io_uring's own NOP at every batch",
            1.0 / 1.1,
        ),
        Goal {
            what: "8 B READ carried by io_uring within 10% of krcore's own ring",
            measured: format!(
                "ring {} / through io_uring {}",
                time(read_ring),
                time(read_in_uring)
            ),
            ratio: read_ring / read_in_uring,
            bar: 1.0 / 1.1,
        },
        Goal {
            what: "8 B READ latency through the ring within 10% of a kernel-direct post",
            measured: format!(
                "{direct_series} {} / ring {}",
                time(direct),
                time(read_ring)
            ),
            ratio: direct / read_ring,
            bar: 1.0 / 1.1,
        },
        Goal {
            what: "a process waiting 1 s for a slow peer uses under 5% of a core",
            measured: format!(
                "{} CPU over the 1 s wait ({:.1}%; polling: {}, {:.0}%)",
                time(wait_cpu),
                wait_cpu / 1e7,
                time(wait_spin_cpu),
                wait_spin_cpu / 1e7
            ),
            ratio: 0.05e9 / wait_cpu,
            bar: 1.0,
        },
    ]
}

/// krcore's NOP through `series` against io_uring's own NOP at every batch: the worst
/// batch's ratio, against `bar`.
fn nop_goal(f: &Figures, series: &str, what: &'static str, bar: f64) -> Goal {
    let ratios: Vec<(u32, f64)> = [1, 8, 32, 128]
        .into_iter()
        .map(|b| {
            (
                b,
                f.median("nop", "io_uring", b) / f.median("nop", series, b),
            )
        })
        .collect();
    Goal {
        what,
        measured: format!(
            "io_uring / krcore per NOP: {}",
            ratios
                .iter()
                .map(|(b, r)| format!("{r:.2}× at {b}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        ratio: ratios.iter().map(|r| r.1).fold(f64::INFINITY, f64::min),
        bar,
    }
}

/// The markdown report: `title` (date and machine) then every table.
pub fn markdown(f: &Figures, title: &str, plots: &[&str]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{title}\n");
    let _ = writeln!(
        s,
        "## Against the goals\n\n| goal | measured | ratio | met |\n|---|---|---|---|"
    );
    for g in goals(f) {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2}× (bar {:.2}×) | {} |",
            g.what,
            g.measured,
            g.ratio,
            g.bar,
            if g.met() { "yes" } else { "**no**" }
        );
    }

    if !f.series("nop").is_empty() {
        node_sections(&mut s, f);
    }
    if !f.series("across-connect").is_empty() {
        across_sections(&mut s, f);
    }
    if !f.series("across-handoff").is_empty() || !f.series("across-mesh").is_empty() {
        cluster_sections(&mut s, f);
    }
    if !plots.is_empty() {
        let _ = writeln!(s, "\n## Plots\n");
        for p in plots {
            let _ = writeln!(s, "![{p}]({p})");
        }
    }
    s
}

/// The tables of the figures on one node.
fn node_sections(s: &mut String, f: &Figures) {
    let _ = writeln!(s, "\n## Ring crossing: NOP, per operation (median / p99)\n");
    table_by_x(s, f, "nop", "batch", false);

    for (group, what) in [
        ("read8-latency", "8 B READ, one at a time"),
        (
            "sendrecv8-latency",
            "8 B SEND into a posted RECV, one at a time",
        ),
        (
            "read8-throughput",
            "8 B READ, 12 in flight (time per op; ops/s)",
        ),
        (
            "read8-wait",
            "8 B READ, one at a time, the wait polling (wait_spin_us 10^6) or sleeping (0); blocks alternated",
        ),
        (
            "sendrecv8-throughput",
            "8 B SEND/RECV, 12 in flight (time per op; ops/s)",
        ),
    ] {
        path_table(s, f, group, &format!("Data plane: {what}"), "path", "ops/s");
    }

    let _ = writeln!(
        s,
        "\n## Waiting 1 s for a slow peer: CPU used by the waiting thread\n\n| wait | CPU (median) | largest | share of a core | waits |\n|---|---|---|---|---|"
    );
    for series in f.series("wait-cpu") {
        let r = f.get("wait-cpu", &series, 1000).expect("listed");
        let _ = writeln!(
            s,
            "| {series} | {} | {} | {:.1}% | {} |",
            time(r.median),
            time(r.p99),
            r.median / 1e7,
            r.samples
        );
    }

    let _ = writeln!(
        s,
        "\n## Control plane: connect from N processes at once (median / p99; connects/s overall)\n"
    );
    table_by_x(s, f, "connect", "processes", true);

    let _ = writeln!(s, "\n## Kernel memory per object\n\n| object | bytes (median) | largest | objects per measurement | repetitions |\n|---|---|---|---|---|");
    for series in f.series("memory") {
        let x = f
            .xs("memory")
            .into_iter()
            .find(|&x| f.get("memory", &series, x).is_some())
            .expect("listed");
        let r = f.get("memory", &series, x).expect("listed");
        let _ = writeln!(
            s,
            "| {series} | {:.0} | {:.0} | {} | {} |",
            r.median, r.p99, r.x, r.samples
        );
    }
}

/// The tables of the figures across nodes.
fn across_sections(s: &mut String, f: &Figures) {
    for (group, what) in [
        ("across-read8-latency", "8 B READ, one at a time"),
        (
            "across-send8-latency",
            "8 B SEND into a receive the far node keeps posted, one at a time",
        ),
        (
            "across-read8-throughput",
            "8 B READ, 12 in flight (time per op; ops/s)",
        ),
        (
            "across-send8-throughput",
            "8 B SEND, 12 in flight (time per op; ops/s)",
        ),
    ] {
        path_table(
            s,
            f,
            group,
            &format!("Across nodes, data plane: {what}"),
            "path",
            "ops/s",
        );
    }
    let names = f.xs("across-lookup").first().copied().unwrap_or(0);
    path_table(
        s,
        f,
        "across-lookup",
        &format!("Across nodes: a lookup by name, {names} names in the MetaServer (the request/reply lookup asks a process on the far node over krcore's SEND/RECV)"),
        "lookup",
        "lookups/s",
    );
    let _ = writeln!(
        s,
        "\n## Across nodes: connect to the far node from N processes at once (median / p99; connects/s overall)\n"
    );
    table_by_x(s, f, "across-connect", "processes", true);
    if !f.series("across-echo").is_empty() {
        let _ = writeln!(
            s,
            "\n## Across nodes: RPC echo, one listener on the far node, N client processes here, one request at a time each (median / p99 per request; requests/s overall)\n"
        );
        table_by_x(s, f, "across-echo", "processes", true);
        let _ = writeln!(
            s,
            "\n## Across nodes: RPC echo, each client's connection setup (krcore: CONNECT to the service; verbs: its own rdma_cm connection) (median / p99)\n"
        );
        table_by_x(s, f, "across-echo-setup", "processes", false);
    }
    path_table(
        s,
        f,
        "across-first-contact",
        "Across nodes: krcore's first contact (the module loaded afresh, its connection set to the far node made by this CONNECT)",
        "CONNECT",
        "connects/s",
    );
}

/// The tables of the three-guest figures: the serverless hand-off and the full mesh.
fn cluster_sections(s: &mut String, f: &Figures) {
    if !f.series("across-handoff").is_empty() {
        let _ = writeln!(
            s,
            "\n## Across 3 nodes: serverless hand-off, time per hand-off end to end (chains of fresh processes on the nodes in turn, each taking the previous one's output with one-sided READs; median / p99 over chains)\n"
        );
        table_by_x(s, f, "across-handoff", "bytes", false);
        let ratios: Vec<String> = f
            .xs("across-handoff")
            .into_iter()
            .map(|x| {
                let r = f.median("across-handoff", "verbs", x)
                    / f.median("across-handoff", "krcore", x);
                format!("{x} B: {r:.1}×")
            })
            .collect();
        let _ = writeln!(s, "\nverbs ÷ krcore per hand-off: {}.", ratios.join(", "));
        let _ = writeln!(
            s,
            "\n## Across 3 nodes: each function on its node, from its request's arrival to its trigger of the next (median / p99)\n"
        );
        table_by_x(s, f, "across-handoff-function", "bytes", false);
        for system in ["krcore", "verbs"] {
            let group = format!("across-handoff-stages-{system}");
            if f.series(&group).is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "\n## Across 3 nodes: a {system} function's stages (median / p99; exec is from its request's arrival)\n"
            );
            table_by_x(s, f, &group, "bytes", false);
        }
    }
    if !f.series("across-mesh").is_empty() {
        let _ = writeln!(
            s,
            "\n## Across 3 nodes: full mesh, N fresh processes per node each connecting to every other node, time to done (median / p99; connections/s)\n"
        );
        table_by_x(s, f, "across-mesh", "processes per node", true);
    }
}

/// One row per series of `group` (measured at one x): median, p99 and the rate.
fn path_table(s: &mut String, f: &Figures, group: &str, title: &str, what: &str, rate: &str) {
    let Some(&x) = f.xs(group).first() else {
        return;
    };
    let _ = writeln!(
        s,
        "\n## {title}\n\n| {what} | median | p99 | {rate} |\n|---|---|---|---|"
    );
    for series in f.series(group) {
        let r = f.get(group, &series, x).expect("listed");
        let rate = if r.rate > 0.0 {
            format!("{:.0}", r.rate)
        } else {
            "—".into()
        };
        let _ = writeln!(
            s,
            "| {series} | {} | {} | {rate} |",
            time(r.median),
            time(r.p99)
        );
    }
}

/// One row per x, one column per series: `median / p99`, and the rate if asked.
fn table_by_x(s: &mut String, f: &Figures, group: &str, xname: &str, rate: bool) {
    let series = f.series(group);
    let _ = write!(s, "| {xname} |");
    for name in &series {
        let _ = write!(s, " {name} |");
    }
    let _ = write!(s, "\n|---|");
    for _ in &series {
        let _ = write!(s, "---|");
    }
    let _ = writeln!(s);
    for x in f.xs(group) {
        let _ = write!(s, "| {x} |");
        for name in &series {
            match f.get(group, name, x) {
                Some(r) if rate && r.rate > 0.0 => {
                    let _ = write!(
                        s,
                        " {} / {}; {:.0}/s |",
                        time(r.median),
                        time(r.p99),
                        r.rate
                    );
                }
                Some(r) => {
                    let _ = write!(s, " {} / {} |", time(r.median), time(r.p99));
                }
                None => {
                    let _ = write!(s, " — |");
                }
            }
        }
        let _ = writeln!(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    fn fig(group: &str, series: &str, x: u32, median: f64, rate: f64) -> Record {
        Record {
            group: group.into(),
            series: series.into(),
            x,
            unit: "ns".into(),
            median,
            p99: median * 2.0,
            rate,
            samples: 10,
        }
    }

    #[test]
    fn across_goals_come_from_their_own_series() {
        let f = Figures(vec![
            fig("across-read8-latency", "krcore-enter", 1, 600e3, 0.0),
            fig("across-read8-latency", "verbs-cm", 1, 570e3, 0.0),
            fig("across-connect", "krcore-warm", 1, 3e3, 1e5),
            fig(
                "across-connect",
                "verbs-cm-device-already-open",
                1,
                20e6,
                50.0,
            ),
            fig("across-connect", "verbs-cm-fresh-process", 1, 190e6, 5.0),
            fig("across-first-contact", "krcore", 0, 15e6, 0.0),
            fig("across-first-contact", "krcore", 1, 14e6, 0.0),
            fig("across-first-contact", "krcore", 2, 40e6, 0.0),
            fig("across-lookup", "metaserver-uncached", 10000, 1.5e6, 600.0),
            fig("across-lookup", "metaserver-cached", 10000, 6e3, 1e5),
            fig("across-lookup", "request-reply", 10000, 3e6, 300.0),
        ]);
        let g = goals(&f);
        assert_eq!(
            g.len(),
            4,
            "only the goals across nodes: no node figures in this run"
        );
        let ratio = |what: &str| g.iter().find(|g| g.what.contains(what)).unwrap().ratio;
        assert!((ratio("warm set") - 190e6 / 3e3).abs() < 1e-6);
        assert!(
            (ratio("first contact") - 20e6 / 30e6).abs() < 1e-9,
            "the slowest (the summary's p99) against rdma_cm"
        );
        let first = g.iter().find(|g| g.what.contains("first contact")).unwrap();
        assert!(
            first.measured.contains("each: 14.00 ms, 40.00 ms"),
            "{}",
            first.measured
        );
        assert!((ratio("MetaServer") - 2.0).abs() < 1e-9);
        assert!(!g
            .iter()
            .find(|g| g.what.contains("MetaServer"))
            .unwrap()
            .met());
        assert!((ratio("READ through") - 570.0 / 600.0).abs() < 1e-9);
        let md = markdown(&f, "# t", &[]);
        for heading in [
            "Across nodes, data plane: 8 B READ, one at a time",
            "Across nodes: a lookup by name, 10000 names",
            "Across nodes: connect to the far node",
            "first contact",
        ] {
            assert!(md.contains(heading), "{heading} missing from\n{md}");
        }
        assert!(
            !md.contains("Ring crossing"),
            "no node figures, no node tables"
        );
    }

    #[test]
    fn three_node_tables_only_when_measured() {
        let mut f = Figures(vec![
            fig("across-handoff", "krcore", 4096, 40e6, 0.0),
            fig("across-handoff", "verbs", 4096, 200e6, 0.0),
            fig("across-handoff-function", "krcore", 4096, 30e6, 0.0),
            fig(
                "across-handoff-stages-verbs",
                "resolve addr",
                4096,
                5e6,
                0.0,
            ),
            fig("across-mesh", "krcore-warm", 4, 90e6, 130.0),
        ]);
        let md = markdown(&f, "# t", &[]);
        assert!(
            md.contains("verbs ÷ krcore per hand-off: 4096 B: 5.0×"),
            "{md}"
        );
        assert!(md.contains("a verbs function's stages"), "{md}");
        assert!(
            !md.contains("a krcore function's stages"),
            "not measured: {md}"
        );
        assert!(md.contains("| 4 | 90.00 ms / 180.00 ms; 130/s |"), "{md}");
        assert!(goals(&f).is_empty(), "no goals are set on these");
        f.0.retain(|r| r.group != "across-mesh");
        assert!(!markdown(&f, "# t", &[]).contains("full mesh"));
        f.0.clear();
        assert!(!markdown(&f, "# t", &[]).contains("hand-off"));
    }
}
