//! The library's own costs per operation, natively (no kernel: the benchmark plays its
//! side over anonymous ring memory): building a batch, pushing it into the SQ, and
//! reaping completions from the CQ.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use krcore_uring::abi::cqe::Cqe;
use krcore_uring::bench_support::{detached_ring, entries, handles, publish};
use krcore_uring::Batch;

/// A group of `name` over batch sizes 1, 32 and 128: each round runs `untimed(n)` (the
/// kernel's side of the exchange) then `timed(n)`, and only `timed` is measured.
fn sized(c: &mut Criterion, name: &str, mut untimed: impl FnMut(u32), mut timed: impl FnMut(u32)) {
    let mut g = c.benchmark_group(name);
    for n in [1u32, 32, 128] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let mut t = Duration::ZERO;
                for _ in 0..iters {
                    untimed(n);
                    let start = Instant::now();
                    timed(n);
                    t += start.elapsed();
                }
                t
            })
        });
    }
    g.finish();
}

fn build_batch(c: &mut Criterion) {
    let (ring, _kernel) = detached_ring(8);
    let (vqp, mr, rmr) = handles(&ring, 4096);
    sized(
        c,
        "uring_lib/build_batch",
        |_| (),
        |n| {
            let mut batch = Batch::new();
            for i in 0..n as u64 {
                batch.read(&vqp, &mr, i * 8, &rmr, i * 8, 8).unwrap();
            }
            black_box(batch);
        },
    );
}

fn push(c: &mut Criterion) {
    let (mut ring, mut kernel) = detached_ring(256);
    let (vqp, mr, rmr) = handles(&ring, 4096);
    let mut batch = Batch::new();
    for i in 0..128u64 {
        batch.read(&vqp, &mr, i * 8, &rmr, i * 8, 8).unwrap();
    }
    let sqes = entries(&batch).to_vec();
    sized(
        c,
        "uring_lib/push",
        // The kernel's side takes the previous round's entries.
        |_| {
            let k = kernel.sq.ready().unwrap();
            kernel.sq.consume(k);
        },
        |n| {
            for s in &sqes[..n as usize] {
                // SAFETY: nothing executes these entries.
                unsafe { ring.submission().push(s) }.unwrap();
            }
            publish(&mut ring);
        },
    );
}

fn reap(c: &mut Criterion) {
    let (mut ring, mut kernel) = detached_ring(256);
    sized(
        c,
        "uring_lib/reap",
        // The kernel's side completes n requests.
        |n| {
            for i in 0..n as u64 {
                kernel.cq.push(Cqe::ok(i, 8, 0)).unwrap();
            }
            kernel.cq.publish();
        },
        |n| {
            let got = ring.completions().fold(0, |n, c| {
                black_box(c.res);
                n + 1
            });
            assert_eq!(got, n as usize);
        },
    );
}

criterion_group!(benches, build_batch, push, reap);
criterion_main!(benches);
