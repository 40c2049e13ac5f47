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
//! Across nodes, on two guests: `krcore-figures far PEER NAMES` on the node
//! measured against (the MetaServer), `krcore-figures across FAR NAMES` on the node that
//! measures and prints the block ([`across`]).
//!
//! On three guests: `krcore-figures cluster NODES..` on the first, which
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
mod echo;
mod far;
mod handoff;
mod memory;
mod mesh;
mod node;
mod paths;
mod waiting;

use std::net::Ipv4Addr;
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

/// The in-guest figures of `make bench`. With no subcommand: the one-node figures.
#[derive(clap::Parser)]
#[command(name = "krcore-figures")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// A control-plane worker process (control.rs): MODE, N operations.
    Worker { mode: String, n: usize },
    /// The far side of the two-guest figures: serves PEER, publishing NAMES names.
    Far { peer: Ipv4Addr, names: usize },
    /// The two-guest figures against FAR, with NAMES MetaServer names.
    Across { far: Ipv4Addr, names: usize },
    /// The three-guest figures, coordinated from here, with the other NODES.
    Cluster { nodes: Vec<Ipv4Addr> },
    /// A node daemon of the three-guest figures.
    Node,
    /// One function of the serverless hand-off: CALL (JSON), launched at LAUNCH_NS.
    Function { call: String, launch_ns: u64 },
    /// The ring crossing figures in a guest whose clock counts instructions (the VM
    /// runner's --icount): each printed per operation, krcore's beside io_uring's.
    Instructions,
    /// One process of the full mesh: SYSTEM, this node ME, connecting to NODES.
    Meshproc {
        #[arg(value_enum)]
        system: node::System,
        me: Ipv4Addr,
        nodes: Vec<Ipv4Addr>,
    },
}

/// A subcommand's failure: said, and the process fails.
fn fail(what: &str, e: String) -> ! {
    eprintln!("krcore-figures {what}: {e}");
    std::process::exit(1)
}

fn main() {
    let mut out = Vec::new();
    match <Cli as clap::Parser>::parse().command {
        Some(Command::Worker { mode, n }) => control::worker(&mode, n),
        Some(Command::Far { peer, names }) => far::run(peer, names),
        Some(Command::Across { far, names }) => {
            across::figures(far, names, &mut out);
            print_block(&out);
        }
        Some(Command::Cluster { nodes }) => {
            cluster::figures(&nodes, &mut out);
            print_block(&out);
        }
        Some(Command::Node) => node::serve(None),
        Some(Command::Instructions) => {
            run_sections(&[("ring crossing, counted", &crossing::figures)], &mut out);
            crossing::instructions(&mut out);
            print_block(&out);
        }
        Some(Command::Function { call, launch_ns }) => {
            let call =
                serde_json::from_str(&call).unwrap_or_else(|e| fail("function", e.to_string()));
            handoff::function(call, launch_ns).unwrap_or_else(|e| fail("function", e));
        }
        Some(Command::Meshproc { system, me, nodes }) => {
            mesh::process(system, me, &nodes).unwrap_or_else(|e| fail("meshproc", e))
        }
        None => {
            run_sections(
                &[
                    ("ring crossing", &crossing::figures),
                    ("data plane", &dataplane::figures),
                    ("waiting", &waiting::figures),
                    ("memory", &memory::figures),
                    ("control plane", &control::figures),
                    ("control plane, cold pool", &control::cold_figures),
                ],
                &mut out,
            );
            print_block(&out);
        }
    }
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
