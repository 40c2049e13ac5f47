//! SVG plots of a run (plotters' SVG backend: no fonts or native libraries).

use std::path::Path;

use plotters::prelude::*;

use crate::figures::Figures;

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

/// A line plot with categorical x (`labels`) and a log y axis; one line per series.
pub fn lines(
    path: &Path,
    title: &str,
    y_desc: &str,
    labels: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let ys = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = ys.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return Err(format!("{title}: nothing to plot"));
    }
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(-0.3f64..(n as f64 - 0.7), (lo / 2.0..hi * 2.0).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_desc)
        .draw()
        .map_err(|x| e(&x))?;
    for (k, (name, v)) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        let pts: Vec<(f64, f64)> = v
            .iter()
            .enumerate()
            .filter(|(_, y)| y.is_finite() && **y > 0.0)
            .map(|(i, y)| (i as f64, *y))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// A time series plot with linear axes: one line per series of (x, y) points.
pub fn timeline(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let pts = series.iter().flat_map(|(_, v)| v.iter().copied());
    let (x_hi, y_hi) = pts.fold((0f64, 0f64), |(a, b), (x, y)| (a.max(x), b.max(y)));
    if x_hi <= 0.0 || y_hi <= 0.0 {
        return Err(format!("{title}: nothing to plot"));
    }
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..x_hi, 0f64..y_hi * 1.15)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|x| e(&x))?;
    for (k, (name, v)) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        chart
            .draw_series(LineSeries::new(v.clone(), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// Every plot of a run into `dir`, of what it measured; returns the file names written.
pub fn all(f: &Figures, dir: &Path) -> Result<Vec<&'static str>, String> {
    let by_x = |group: &str, value: &dyn Fn(&str, u32) -> f64| {
        let xs = f.xs(group);
        let labels = xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let series = f
            .series(group)
            .into_iter()
            .map(|s| {
                let v = xs.iter().map(|&x| value(&s, x)).collect();
                (s, v)
            })
            .collect::<Vec<_>>();
        (labels, series)
    };
    // One line per figure group, one point per path: the data plane at a glance.
    let by_path = |groups: &[&str]| {
        let paths = f.series(groups[0]);
        let series = groups
            .iter()
            .map(|g| {
                let x = f.xs(g).first().copied().unwrap_or(0);
                (
                    g.to_string(),
                    paths.iter().map(|p| f.median(g, p, x) / 1e3).collect(),
                )
            })
            .collect::<Vec<_>>();
        (paths, series)
    };
    type Plot = (
        &'static str,
        &'static str,
        &'static str,
        (Vec<String>, Vec<(String, Vec<f64>)>),
    );
    let plots: [Plot; 9] = [
        (
            "nop.svg",
            "NOP per operation vs batch size",
            "ns per NOP (median)",
            by_x("nop", &|s, x| f.median("nop", s, x)),
        ),
        (
            "connect-latency.svg",
            "Connect latency vs processes",
            "µs (median)",
            by_x("connect", &|s, x| f.median("connect", s, x) / 1e3),
        ),
        (
            "connect-rate.svg",
            "Connections per second vs processes",
            "connects/s",
            by_x("connect", &|s, x| f.rate("connect", s, x)),
        ),
        (
            "dataplane.svg",
            "8 B data plane by path (throughput: time per op, 12 in flight)",
            "µs per op (median)",
            by_path(&[
                "read8-latency",
                "sendrecv8-latency",
                "read8-throughput",
                "sendrecv8-throughput",
            ]),
        ),
        (
            "across-connect-latency.svg",
            "Across nodes: connect latency vs processes",
            "µs (median)",
            by_x("across-connect", &|s, x| {
                f.median("across-connect", s, x) / 1e3
            }),
        ),
        (
            "across-connect-rate.svg",
            "Across nodes: connections per second vs processes",
            "connects/s",
            by_x("across-connect", &|s, x| f.rate("across-connect", s, x)),
        ),
        (
            "across-dataplane.svg",
            "Across nodes: 8 B data plane by path (throughput: time per op, 12 in flight)",
            "µs per op (median)",
            by_path(&[
                "across-read8-latency",
                "across-send8-latency",
                "across-read8-throughput",
                "across-send8-throughput",
            ]),
        ),
        (
            "across-handoff.svg",
            "Serverless hand-off across 3 nodes: time per hand-off vs bytes",
            "ms per hand-off (median)",
            by_x("across-handoff", &|s, x| {
                f.median("across-handoff", s, x) / 1e6
            }),
        ),
        (
            "across-mesh.svg",
            "Full mesh of 3 nodes: time to done vs processes per node",
            "ms (median)",
            by_x("across-mesh", &|s, x| f.median("across-mesh", s, x) / 1e6),
        ),
    ];
    let mut written = Vec::new();
    for (file, title, y, (labels, series)) in plots {
        if series.is_empty() || labels.is_empty() {
            continue;
        }
        lines(&dir.join(file), title, y, &labels, &series)?;
        written.push(file);
    }
    Ok(written)
}
