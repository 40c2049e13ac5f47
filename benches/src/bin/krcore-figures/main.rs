//! In-VM figures (`make bench`): krcore beside user-space verbs, its own one-ioctl-per-op
//! path and io_uring, in the same guest, in one run. Prints one JSON record per figure
//! (krcore_benches::record) between `FIGURES-BEGIN` and `FIGURES-END`; the guest root is
//! read-only, so the host's `bench-report` writes the results, table and plots.
//!
//! Sections: ring crossing (NOPs), data plane (8 B READ and SEND/RECV latency and
//! throughput with 12 in flight), waiting (polling vs sleeping: READ latency, CPU while
//! a peer is slow), memory per ring / virtual QP / RC QP, control plane
//! (connects from 1-8 processes: krcore warm and cold, verbs with and without the device
//! open). `krcore-figures worker ...` is a control-plane child process.
//! `KRCORE_FIGURES=data,memory` runs only the sections whose names contain a word given.
//!
//! Across nodes (issue 12), on two guests: `krcore-figures far PEER NAMES` on the node
//! measured against (the MetaServer), `krcore-figures across FAR NAMES` on the node that
//! measures and prints the block ([`across`]).
//!
//! On three guests (issue 12): `krcore-figures cluster NODES..` on the first, which
//! coordinates the serverless hand-off and the full mesh and prints the block
//! ([`cluster`]), `krcore-figures node` on the others ([`node`]). The daemons start
//! `krcore-figures function CALL LAUNCH_NS` ([`handoff`]) and `krcore-figures meshproc
//! SYSTEM ME NODES..` ([`mesh`]).
//!
//! The VM runner guarantees a TSC clocksource (it boots with tsc=nowatchdog and boots
//! again when the guest still came up on jiffies, whose 4 ms ticks would be every
//! figure's resolution).

mod across;
mod cluster;
mod control;
mod crossing;
mod dataplane;
mod far;
mod handoff;
mod memory;
mod mesh;
mod node;
mod paths;
mod waiting;

use std::time::Instant;

use krcore_benches::record::Record;

/// A named group of figures.
type Section<'a> = (&'a str, &'a dyn Fn(&mut Vec<Record>));

/// Runs each section into `out`, saying how long each took; with `KRCORE_FIGURES=a,b`,
/// only those whose names contain a or b.
fn run_sections(sections: &[Section], out: &mut Vec<Record>) {
    let only = std::env::var("KRCORE_FIGURES").unwrap_or_default();
    for (name, f) in sections {
        if !only.is_empty() && !only.split(',').any(|o| name.contains(o)) {
            continue;
        }
        let t = Instant::now();
        let before = out.len();
        f(out);
        eprintln!(
            "[figures] {name}: {} figures in {:.1} s",
            out.len() - before,
            t.elapsed().as_secs_f64()
        );
    }
}

const USAGE: &str = "usage: krcore-figures [worker MODE N | far PEER NAMES | across FAR NAMES \
                     | cluster NODES.. | node | function CALL LAUNCH_NS | meshproc SYSTEM ME NODES..]";

fn addrs(args: &[String]) -> Vec<std::net::Ipv4Addr> {
    args.iter()
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("not an address: {a}; {USAGE}"))
        })
        .collect()
}

/// A subcommand's failure: said, and the process fails.
fn fail(what: &str, e: String) -> ! {
    eprintln!("krcore-figures {what}: {e}");
    std::process::exit(1)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, what: &str| -> String {
        args.get(i)
            .cloned()
            .unwrap_or_else(|| panic!("{what} missing: {USAGE}"))
    };
    let mut out = Vec::new();
    match args.first().map(String::as_str) {
        Some("worker") => {
            control::worker(&arg(1, "MODE"), arg(2, "N").parse().expect("worker N"));
            return;
        }
        Some("far") => {
            far::run(
                arg(1, "PEER").parse().expect("PEER"),
                arg(2, "NAMES").parse().expect("NAMES"),
            );
            return;
        }
        Some("across") => {
            let far = arg(1, "FAR").parse().expect("FAR");
            across::figures(far, arg(2, "NAMES").parse().expect("NAMES"), &mut out);
            print_block(&out);
            return;
        }
        Some("cluster") => {
            cluster::figures(&addrs(&args[1..]), &mut out);
            print_block(&out);
            return;
        }
        Some("node") => {
            node::serve(None);
            return;
        }
        Some("function") => {
            let call = serde_json::from_str(&arg(1, "CALL")).expect("CALL: a JSON call");
            let at = arg(2, "LAUNCH_NS").parse().expect("LAUNCH_NS");
            handoff::function(call, at).unwrap_or_else(|e| fail("function", e));
            return;
        }
        Some("meshproc") => {
            let system = match arg(1, "SYSTEM").as_str() {
                "krcore" => node::System::Krcore,
                "verbs" => node::System::Verbs,
                s => panic!("no system {s}: krcore or verbs"),
            };
            let me = arg(2, "ME").parse().expect("ME");
            mesh::process(system, me, &addrs(&args[3..])).unwrap_or_else(|e| fail("meshproc", e));
            return;
        }
        _ => {}
    }
    run_sections(
        &[
            ("ring crossing", &crossing::figures),
            ("data plane", &dataplane::figures),
            ("waiting", &waiting::figures),
            ("memory", &memory::figures),
            ("control plane", &control::figures),
            ("control plane, cold pool", &control::cold_figures),
            ("control plane, before issue 10", &control::before_figures),
        ],
        &mut out,
    );
    print_block(&out);
}

/// The records between `FIGURES-BEGIN` and `FIGURES-END`, for the host's report.
fn print_block(out: &[Record]) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("guest-kernel: {}", release.trim());
    println!("FIGURES-BEGIN");
    for r in out {
        println!("{}", r.to_json());
    }
    println!("FIGURES-END");
}
