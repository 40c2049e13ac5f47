//! `krcore`: what the module sees and does, and how fast it goes.
//!
//! ```text
//! krcore devices                         RDMA devices, ports and GIDs the module serves
//! krcore counters [--all]                per-device counters (debugfs; root)
//! krcore peers                           the pool, listened services and connection sets per
//!                                        peer node (debugfs; root)
//! krcore rings                           rings per process (/proc/PID/fdinfo)
//! krcore lookup NODE NAME                a MetaServer lookup, timed (first, then cached)
//! krcore lat [--op read] [--size 8]      latency of one operation at a time, as ib_read_lat
//! krcore bw [--op write] [--size 65536]  bandwidth with operations in flight, as ib_write_bw
//!                                        (--op send: SENDs a `krcore serve` echoes)
//! krcore serve [--name N] [--service S]  the far side: memory published as N, messages
//!                                        to service S echoed
//! ```
//! `lat` and `bw` use this node's loopback pool and their own memory unless told a
//! `--node` and the `--name` of memory it published (`krcore serve --name`); `--op send`
//! needs a `krcore serve --service` there, named with `--service`.

mod inspect;
mod perf;
mod serve;

use clap::{Parser, Subcommand};

/// krcore's command-line tool.
#[derive(Parser)]
#[command(name = "krcore", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// RDMA devices, ports and GIDs the module serves.
    Devices,
    /// Counters per device: rings, entries, connects, recoveries, failures by reason.
    Counters {
        /// Show every failure reason, zeros included.
        #[arg(long)]
        all: bool,
    },
    /// Connection sets per peer node, and what is bound to them.
    Peers,
    /// Rings per process: who holds them, what they hold, what they did.
    Rings,
    /// Looks NAME up in the MetaServer through a virtual QP to NODE, timed.
    Lookup {
        /// The node that published the name (address or host name).
        node: String,
        /// The name.
        name: String,
        /// Bytes to import.
        #[arg(long, default_value_t = 8)]
        len: u32,
        /// Lookups after the first (served from the kernel's cache).
        #[arg(long, default_value_t = 10)]
        again: u32,
    },
    /// Latency of one operation at a time (median and 99th percentile).
    Lat(perf::Args),
    /// Bandwidth with operations in flight.
    Bw(perf::Args),
    /// The far side of `lat` and `bw`: memory published under a name, and a service
    /// that echoes messages.
    Serve(serve::Args),
}

/// Parses `args` as one subcommand's arguments alone (the tests' parser).
#[cfg(test)]
fn parse_only<A: clap::Args>(args: &[&str]) -> Result<A, clap::Error> {
    #[derive(Parser)]
    struct Only<A: clap::Args> {
        #[command(flatten)]
        a: A,
    }
    Only::<A>::try_parse_from(std::iter::once("krcore").chain(args.iter().copied())).map(|o| o.a)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Devices => inspect::devices(),
        Command::Counters { all } => inspect::counters(all),
        Command::Peers => inspect::peers(),
        Command::Rings => inspect::rings(),
        Command::Lookup {
            node,
            name,
            len,
            again,
        } => perf::lookup(&node, &name, len, again),
        Command::Lat(a) => perf::lat(&a),
        Command::Bw(a) => perf::bw(&a),
        Command::Serve(a) => serve::serve(&a),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("krcore: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
