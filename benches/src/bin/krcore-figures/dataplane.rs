//! Data plane (the paper's Figures 10 and 11): 8-byte READ and SEND/RECV, one at a time
//! (latency) and with 12 operations in flight (throughput), over every path.
//!
//! The paths are measured interleaved, one sample (or repetition) of each in turn, so
//! drift in the emulator's speed falls on all of them alike and the ratios hold. The
//! SQPOLL ring is measured on its own afterwards: its polling thread spins while the
//! ring is live and would take a CPU from the others.

use std::time::{Duration, Instant};

use krcore_benches::record::Record;

use crate::paths::{KrDirect, KrInIoUring, KrPerOp, KrRing, Op, Path, Target, Verbs};

/// Operations in flight for the throughput figures (the paper's setting).
pub const IN_FLIGHT: u32 = 12;
const LATENCY_SAMPLES: usize = 2000;
const THROUGHPUT_REPS: usize = 31;
const THROUGHPUT_OPS: u64 = 240;

fn name(op: Op) -> &'static str {
    match op {
        Op::Read => "read8",
        Op::SendRecv => "sendrecv8",
        Op::Send => "send8",
    }
}

/// One operation at a time: post, wait for its completions.
pub fn one(p: &mut dyn Path, op: Op, i: u64) -> Duration {
    let t = Instant::now();
    p.post(op, i);
    let mut got = 0;
    while got < op.cqes() {
        got += p.reap(op.cqes() - got);
    }
    t.elapsed()
}

/// `THROUGHPUT_OPS` operations with `IN_FLIGHT` outstanding: the time for all of them.
fn window(p: &mut dyn Path, op: Op) -> Duration {
    let per = op.cqes();
    let t = Instant::now();
    let (mut posted, mut cqes) = (0u64, 0usize);
    while cqes < THROUGHPUT_OPS as usize * per {
        // Refill to IN_FLIGHT operations outstanding.
        while posted < THROUGHPUT_OPS && (posted as usize * per - cqes) < IN_FLIGHT as usize * per {
            p.post(op, posted);
            posted += 1;
        }
        cqes += p.reap(1);
    }
    t.elapsed()
}

/// A path under measurement and its samples per figure.
pub struct Measured {
    /// Its series name.
    pub series: &'static str,
    /// The path.
    pub path: Box<dyn Path>,
    /// Serves READ latency only (the kernel-direct baseline).
    pub read_latency_only: bool,
    /// Serves READs only (io_uring carries no RECV).
    pub reads_only: bool,
}

impl Measured {
    /// A path serving every figure.
    pub fn new(series: &'static str, path: Box<dyn Path>) -> Measured {
        Measured {
            series,
            path,
            read_latency_only: false,
            reads_only: false,
        }
    }
}

/// Latency and throughput of `op` over `paths`, interleaved; the groups are named
/// `{prefix}{op}-latency` and `{prefix}{op}-throughput`.
pub fn measure(paths: &mut [Measured], op: Op, prefix: &str, out: &mut Vec<Record>) {
    let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); paths.len()];
    for i in 0..LATENCY_SAMPLES as u64 {
        for (k, m) in paths.iter_mut().enumerate() {
            if op == Op::Read || !(m.read_latency_only || m.reads_only) {
                lat[k].push(one(&mut *m.path, op, i));
            }
        }
    }
    let mut tput: Vec<Vec<Duration>> = vec![Vec::new(); paths.len()];
    for _ in 0..THROUGHPUT_REPS {
        for (k, m) in paths.iter_mut().enumerate() {
            if !m.read_latency_only && (op == Op::Read || !m.reads_only) {
                tput[k].push(window(&mut *m.path, op));
            }
        }
    }
    for (k, m) in paths.iter().enumerate() {
        if !lat[k].is_empty() {
            let l = std::mem::take(&mut lat[k]);
            out.push(Record::times(
                &format!("{prefix}{}-latency", name(op)),
                m.series,
                1,
                l,
                1,
            ));
        }
        if !tput[k].is_empty() {
            let t = std::mem::take(&mut tput[k]);
            let r = Record::times(
                &format!("{prefix}{}-throughput", name(op)),
                m.series,
                IN_FLIGHT,
                t,
                THROUGHPUT_OPS as u32,
            );
            let rate = 1e9 / r.median;
            out.push(r.with_rate(rate));
        }
    }
}

/// Every data-plane figure.
pub fn figures(out: &mut Vec<Record>) {
    let mut paths = Vec::new();
    match KrDirect::new() {
        Some(d) => paths.push(Measured {
            series: "kernel-direct",
            path: Box::new(d),
            read_latency_only: true,
            reads_only: true,
        }),
        None => eprintln!("[figures] IOC_DIRECT not served (load krcore with bench_direct=1): no kernel-direct figure"),
    }
    paths.push(Measured::new(
        "krcore-enter",
        Box::new(KrRing::new(false, Target::Local)),
    ));
    paths.push(Measured::new(
        "krcore-per-op",
        Box::new(KrPerOp::new(Target::Local)),
    ));
    paths.push(Measured::new("verbs-direct", Box::new(Verbs::new())));
    paths.push(Measured {
        series: "krcore-in-io_uring",
        path: Box::new(KrInIoUring::new(Target::Local)),
        read_latency_only: false,
        reads_only: true,
    });
    for op in [Op::Read, Op::SendRecv] {
        measure(&mut paths, op, "", out);
    }
    drop(paths);
    let mut sqpoll = [Measured::new(
        "krcore-sqpoll",
        Box::new(KrRing::new(true, Target::Local)),
    )];
    for op in [Op::Read, Op::SendRecv] {
        measure(&mut sqpoll, op, "", out);
    }
}
