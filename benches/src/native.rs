//! The native (criterion) figures of a `make bench` run, read back from criterion's
//! `estimates.json` files into one markdown table.

use std::fmt::Write;
use std::path::Path;

/// The median point estimate (ns per iteration) in a criterion `estimates.json`.
fn median_ns(json: &str) -> Option<f64> {
    let rest = &json[json.find("\"median\":")?..];
    let rest = &rest[rest.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = rest.find([',', '}'])?;
    rest[..end].trim().parse().ok()
}

/// One row per benchmark under `dir` (criterion's output directory): the median per
/// iteration and, for benchmarks parameterized by a batch size, per element.
pub fn markdown(dir: &Path, title: &str) -> Result<String, String> {
    let mut rows = Vec::new();
    let groups = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for g in groups.flatten() {
        let group = g.file_name().to_string_lossy().into_owned();
        if group == "report" {
            continue;
        }
        let mut add = |name: String, per: Option<u32>, est: &Path| {
            if let Some(ns) = std::fs::read_to_string(est)
                .ok()
                .and_then(|j| median_ns(&j))
            {
                rows.push((name, ns, per));
            }
        };
        add(group.clone(), None, &g.path().join("new/estimates.json"));
        for p in std::fs::read_dir(g.path()).into_iter().flatten().flatten() {
            let param = p.file_name().to_string_lossy().into_owned();
            if let Ok(n) = param.parse::<u32>() {
                add(
                    format!("{group}/{n}"),
                    Some(n),
                    &p.path().join("new/estimates.json"),
                );
            }
        }
    }
    if rows.is_empty() {
        return Err(format!("no criterion estimates under {}", dir.display()));
    }
    rows.sort_by(|a, b| (&a.0, a.2).cmp(&(&b.0, b.2)));
    rows.sort_by_key(|r| (r.0.split('/').next().unwrap_or("").to_string(), r.2));
    let mut s =
        format!("{title}\n\n| benchmark | median per iteration | per element |\n|---|---|---|\n");
    for (name, ns, per) in rows {
        let each = per.map_or("—".into(), |n| format!("{:.1} ns", ns / n as f64));
        let _ = writeln!(s, "| {name} | {:.1} ns | {each} |", ns);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_median_not_the_mean() {
        let j = r#"{"mean":{"confidence_interval":{"lower_bound":1.0},"point_estimate":628.19,"standard_error":10.9},"median":{"confidence_interval":{"lower_bound":565.9},"point_estimate":586.5,"standard_error":9.0}}"#;
        assert_eq!(super::median_ns(j), Some(586.5));
    }
}
