//! Data plane (the paper's Figures 10 and 11): 8-byte READ and SEND/RECV, one at a time
//! (latency) and with 12 operations in flight (throughput), over every path.

use std::time::{Duration, Instant};

use krcore_benches::record::Record;

use crate::paths::{KrDirect, KrPerOp, KrRing, Op, Path, Verbs};

/// Operations in flight for the throughput figures (the paper's setting).
pub const IN_FLIGHT: u32 = 12;
const LATENCY_SAMPLES: usize = 2000;
const THROUGHPUT_REPS: usize = 31;
const THROUGHPUT_OPS: u64 = 240;

fn name(op: Op) -> &'static str {
    match op {
        Op::Read => "read8",
        Op::SendRecv => "sendrecv8",
    }
}

/// One operation at a time: post, wait for its completions.
fn latency(p: &mut dyn Path, op: Op) -> Vec<Duration> {
    (0..LATENCY_SAMPLES as u64)
        .map(|i| {
            let t = Instant::now();
            p.post(op, i);
            let mut got = 0;
            while got < op.cqes() {
                got += p.reap(op.cqes() - got);
            }
            t.elapsed()
        })
        .collect()
}

/// Keeps `IN_FLIGHT` operations outstanding for `THROUGHPUT_OPS` operations; one
/// sample per repetition (its time for all of them).
fn throughput(p: &mut dyn Path, op: Op) -> Vec<Duration> {
    let per = op.cqes();
    (0..THROUGHPUT_REPS)
        .map(|_| {
            let t = Instant::now();
            let (mut posted, mut cqes) = (0u64, 0usize);
            while posted < IN_FLIGHT as u64 {
                p.post(op, posted);
                posted += 1;
            }
            while cqes < THROUGHPUT_OPS as usize * per {
                cqes += p.reap(1);
                // Refill to IN_FLIGHT operations outstanding.
                while posted < THROUGHPUT_OPS
                    && (posted as usize * per - cqes) < (IN_FLIGHT as usize * per)
                {
                    p.post(op, posted);
                    posted += 1;
                }
            }
            t.elapsed()
        })
        .collect()
}

/// Every data-plane figure.
pub fn figures(out: &mut Vec<Record>) {
    let paths: [(&str, fn() -> Box<dyn Path>); 4] = [
        ("krcore-enter", || Box::new(KrRing::new(false))),
        ("krcore-sqpoll", || Box::new(KrRing::new(true))),
        ("krcore-per-op", || Box::new(KrPerOp::new())),
        ("verbs-direct", || Box::new(Verbs::new())),
    ];
    // The kernel-direct baseline: READ latency only (see paths::KrDirect).
    match KrDirect::new() {
        Some(mut d) => {
            let l = latency(&mut d, Op::Read);
            out.push(Record::times("read8-latency", "kernel-direct", 1, l, 1));
        }
        None => eprintln!("[figures] IOC_DIRECT not served (load krcore with bench_direct=1): no kernel-direct figure"),
    }
    for (series, make) in paths {
        eprintln!("[figures] data plane: {series}");
        let mut p = make();
        for op in [Op::Read, Op::SendRecv] {
            let l = latency(&mut *p, op);
            out.push(Record::times(
                &format!("{}-latency", name(op)),
                series,
                1,
                l,
                1,
            ));
            let t = throughput(&mut *p, op);
            let r = Record::times(
                &format!("{}-throughput", name(op)),
                series,
                IN_FLIGHT,
                t,
                THROUGHPUT_OPS as u32,
            );
            let rate = 1e9 / r.median;
            out.push(r.with_rate(rate));
        }
    }
}
