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

/// The service a process CONNECTs on: its pid. A service names one virtual QP per pair of
/// nodes (two-sided messages are routed by it), so concurrent workers on one node each
/// need their own; a pid is unique while the process lives.
fn service() -> u32 {
    std::process::id()
}

fn num<T: std::str::FromStr>(s: &str, what: &str) -> Res<T> {
    s.parse().map_err(|_| format!("{what}: not a number: {s}"))
}

fn run(args: &[String]) -> Res<()> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a[..] {
        ["memory", keys, clients, secs] => memory::run(
            num(keys, "KEYS")?,
            num(clients, "CLIENTS")?,
            num(secs, "SECS")?,
        ),
        ["compute", addr, keys, workers, join, run, offset] => launcher::run(&launcher::Plan {
            addr: num(addr, "ADDR")?,
            keys: num(keys, "KEYS")?,
            workers: num(workers, "WORKERS")?,
            join_ms: num(join, "JOIN_MS")?,
            run_ms: num(run, "RUN_MS")?,
            offset_ms: num(offset, "OFFSET_MS")?,
        }),
        ["worker", system, addr, keys, spawn, phase, end, seed] => worker::run(&worker::Job {
            system: system.to_string(),
            addr: num(addr, "ADDR")?,
            keys: num(keys, "KEYS")?,
            spawn_ns: num(spawn, "SPAWN_NS")?,
            phase_ns: num(phase, "PHASE_NS")?,
            end_ns: num(end, "END_NS")?,
            seed: num(seed, "SEED")?,
        }),
        _ => Err(
            "usage: krcore-demo memory KEYS CLIENTS SECS | compute ADDR KEYS WORKERS \
                  JOIN_MS RUN_MS OFFSET_MS | worker SYSTEM ADDR KEYS SPAWN_NS PHASE_NS END_NS SEED"
                .into(),
        ),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "krcore-demo {}: {e}",
                args.first().map_or("", String::as_str)
            );
            ExitCode::FAILURE
        }
    }
}
