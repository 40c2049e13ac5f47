//! `bench-report vm LOG.. DIR`: turns the guest logs of `krcore-figures` (one node, and
//! across nodes) into DIR/vm-figures.jsonl, DIR/vm-figures.md (tables and the goals,
//! titled with the date and the machine) and SVG plots.
//! `bench-report native CRITERION-DIR DIR`: criterion's medians into DIR/native.md.
//! Both are part of `make bench`.
//! `bench-report demo LOG DIR`: `make demo`'s guest log into DIR/demo.md and
//! DIR/demo-timeline.svg, the summary printed.

use std::path::PathBuf;

use krcore_benches::figures::Figures;
use krcore_benches::{plot, report};

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

fn date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Reports of `make bench` and `make demo`.
#[derive(clap::Parser)]
#[command(name = "bench-report")]
enum Cli {
    /// The in-VM figures: guest logs, then the results directory.
    Vm {
        /// The guest logs, then the results directory.
        #[arg(required = true, num_args = 2..)]
        paths: Vec<String>,
    },
    /// Criterion's medians into native.md.
    Native { criterion: String, dir: String },
    /// The demo's guest log into NAME.md and its timeline NAME-timeline.svg.
    Demo {
        log: String,
        dir: String,
        /// The report's name: `demo`, or `demo-alone` for `make demo-alone`'s workers
        /// run one at a time.
        #[arg(long, default_value = "demo")]
        name: String,
    },
}

fn main() {
    match <Cli as clap::Parser>::parse() {
        Cli::Vm { paths } => {
            let (dir, logs) = paths.split_last().expect("two or more");
            let logs: Vec<&str> = logs.iter().map(String::as_str).collect();
            vm(&logs, PathBuf::from(dir))
        }
        Cli::Native { criterion, dir } => {
            let title = format!("# Native figures (criterion), {}

Host: {}; no kernel involved: the abi engine over a fake NIC, uring-lib over anonymous ring memory, io_uring on the host kernel.", date(), machine());
            let md = krcore_benches::native::markdown(std::path::Path::new(&criterion), &title)
                .unwrap_or_else(|e| {
                    eprintln!("bench-report: {e}");
                    std::process::exit(1);
                });
            std::fs::write(PathBuf::from(&dir).join("native.md"), md).unwrap();
            println!("[bench] wrote {dir}/native.md");
        }
        Cli::Demo { log, dir, name } => {
            let text =
                std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("reading {log}: {e}"));
            let title = match name.as_str() {
                "demo" => format!("# Elastic key-value store (make demo), {}\n\nHost: {}. Three guests under QEMU TCG (no KVM), rdma_rxe, RoCE v2 between them: a holds the table and the MetaServer, b and c launch the workers. Compare ratios within this run.", date(), machine()),
                _ => format!("# A lone worker's bootstrap (make demo-alone), {}\n\nHost: {}. Two guests under QEMU TCG (no KVM), rdma_rxe, RoCE v2 between them: a holds the table and the MetaServer, b launches one worker per system at a time, nothing else running, each a fresh process. CPU time is the process's (user and system); under TCG it includes translating the code a process runs for the first time. Compare ratios within this run.", date(), machine()),
            };
            let md = krcore_benches::demo::report(&text, &title, std::path::Path::new(&dir), &name)
                .unwrap_or_else(|e| {
                    eprintln!("bench-report: {e}");
                    std::process::exit(1);
                });
            std::fs::write(PathBuf::from(&dir).join(format!("{name}.md")), &md).unwrap();
            println!("{md}\n[demo] wrote {dir}/{name}.md and {dir}/{name}-timeline.svg");
        }
    }
}

fn vm(logs: &[&str], dir: PathBuf) {
    let logs: Vec<String> = logs
        .iter()
        .map(|l| std::fs::read_to_string(l).unwrap_or_else(|e| panic!("reading {l}: {e}")))
        .collect();
    let texts: Vec<&str> = logs.iter().map(String::as_str).collect();
    let figs = Figures::from_logs(&texts).unwrap_or_else(|e| {
        eprintln!("bench-report: {e}");
        std::process::exit(1);
    });
    let guest = texts
        .iter()
        .flat_map(|l| l.lines())
        .find_map(|l| krcore_benches::figures::strip_role(l).strip_prefix("guest-kernel: "))
        .unwrap_or("unknown")
        .trim();
    let date = date();
    std::fs::create_dir_all(&dir).unwrap();
    let jsonl: String = figs.0.iter().map(|r| r.to_json() + "\n").collect();
    std::fs::write(dir.join("vm-figures.jsonl"), jsonl).unwrap();
    let plots = plot::all(&figs, &dir).unwrap_or_else(|e| panic!("{e}"));
    let title = format!(
        "# In-VM figures, {date}\n\nHost: {}. Guest: Linux {guest} under QEMU TCG (no KVM), 2 vCPUs, rdma_rxe.\nEmulation makes absolute times large; compare ratios within this run.",
        machine()
    );
    let md = report::markdown(&figs, &title, &plots);
    std::fs::write(dir.join("vm-figures.md"), &md).unwrap();
    for g in report::goals(&figs) {
        println!(
            "[bench] {}: {:.2}× (bar {:.2}×) {}",
            g.what,
            g.ratio,
            g.bar,
            if g.met() { "met" } else { "MISSED" }
        );
    }
    println!(
        "[bench] wrote {}/vm-figures.md, vm-figures.jsonl and {} plots",
        dir.display(),
        plots.len()
    );
}
