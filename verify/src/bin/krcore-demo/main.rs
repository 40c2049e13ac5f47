//! `make demo`: the paper's motivating case, an elastic key-value store across nodes.
//!
//! A memory node holds a hash table in its memory (verify::kv: RACE-style buckets, a
//! YCSB key set), published by name in the MetaServer (run by that node's module) and,
//! for the baseline, served to user-space verbs over rdma_cm. Compute nodes launch
//! short-lived workers, each a fresh process as a serverless function or a newly added
//! compute node would be, that bootstrap (krcore: open, ring, CONNECT, IMPORT_NAME; verbs:
//! rdma_cm's stages, the descriptor in the accept) and serve GETs with one-sided READs,
//! every value checked. Each node's launcher prints every worker's stages, its time to
//! its first GET and the node's GETs over time as workers join, as
//! [`verify::demo::Record`] lines; the host's `bench-report demo` sums the nodes and
//! writes the timeline's plot.
//!
//! ```text
//! krcore-demo memory KEYS CLIENTS SECS
//!     build the table, register and publish it as `kv`, serve it over rdma_cm (port
//!     7473) until CLIENTS verbs connections came and left, or SECS passed
//! krcore-demo compute ADDR KEYS WORKERS JOIN_MS RUN_MS OFFSET_MS
//!     the launcher: for krcore, then verbs, wait for the store at ADDR, then start
//!     WORKERS workers, one every JOIN_MS from OFFSET_MS on, each serving GETs until
//!     RUN_MS after the phase began
//! krcore-demo worker SYSTEM ADDR KEYS SPAWN_NS PHASE_NS END_NS SEED
//!     one worker (started by the launcher; times on CLOCK_MONOTONIC)
//! ```

mod launcher;
mod memory;
mod worker;

use std::process::ExitCode;

/// The name the table is published under.
const NAME: &str = "kv";
/// The rdma_cm port the memory node serves verbs workers on.
const PORT: u16 = 7473;
/// The width of the timeline's bins.
const BIN_MS: u64 = 100;

type Res<T> = Result<T, String>;

/// The service a process CONNECTs on: 0, no endpoint (its requests are one-sided).
const SERVICE: u32 = 0;

/// The demo's processes.
#[derive(clap::Parser)]
#[command(name = "krcore-demo")]
enum Cli {
    /// The memory node: build the table, publish it, serve verbs clients.
    Memory {
        /// The table's keys.
        keys: u64,
        /// Verbs connections to serve before leaving.
        clients: usize,
        /// The longest it serves.
        secs: u64,
    },
    /// A compute node's launcher.
    Compute(launcher::Plan),
    /// One worker (started by a launcher).
    Worker(worker::Job),
}

fn main() -> ExitCode {
    let (what, r) = match <Cli as clap::Parser>::parse() {
        Cli::Memory {
            keys,
            clients,
            secs,
        } => ("memory", memory::run(keys, clients, secs)),
        Cli::Compute(plan) => ("compute", launcher::run(&plan)),
        Cli::Worker(job) => ("worker", worker::run(&job)),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("krcore-demo {what}: {e}");
            ExitCode::FAILURE
        }
    }
}
