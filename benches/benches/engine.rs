//! The engine's cost per SQE against io_uring's NOP, side by side in one run.
//!
//! - `krcore_nop/B`: B NOPs through a krcore ring: the application pushes and publishes,
//!   the engine takes, validates and completes them, the application reaps B CQEs. No
//!   syscall: this is the ring and the engine alone.
//! - `krcore_engine_nop/B`: the same, timing only the engine's `submit` (the kernel
//!   side): push and reap happen outside the timed region. Includes one `Instant` pair
//!   per batch (about 20-25 ns), so small batches read high.
//! - `krcore_write/B`: B 8-byte RDMA WRITEs on a shared QP of a fake NIC: validation,
//!   credits, wr_id tagging, chained posting, completion routing and reaping.
//! - `krcore_connect`: a CONNECT (to the warm pool of the fake NIC) and its DISCONNECT,
//!   one at a time, each pushed, submitted and reaped: the engine's share of a warm
//!   connect (binding, the message link, the handle).
//! - `meta_lookup_10k`: a MetaServer lookup's local share with 10,000 exports in a table
//!   of 40,000 slots held in memory: hashing the name, decoding the 4-slot window the
//!   one READ would bring (the READ itself is a memory copy here; across nodes it is the
//!   round trip that costs).
//! - `io_uring_nop/B`: B IORING_OP_NOPs through the io-uring crate on the host kernel,
//!   one `submit_and_wait(B)` per batch.
//!
//! Criterion reports time per batch; the per-SQE cost is that over B (the throughput
//! line, in elements per second, says the same).
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Bencher, BenchmarkId, Criterion, Throughput};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};
use verify::rig::{Limits, Rig};

const BATCHES: [u32; 4] = [1, 8, 32, 128];
const MR: u64 = 0x10_0000;

fn rig() -> Rig {
    let mut rig = Rig::new(&[256]);
    rig.open(Limits {
        sq: 256,
        cq: 512,
        vqps: 4,
        mrs: 4,
        inflight: 256,
    });
    rig
}

/// Runs `f(bench, batch)` as group `name` at every batch size, in SQEs per second.
fn group(c: &mut Criterion, name: &str, mut f: impl FnMut(&mut Bencher<'_>, u32)) {
    let mut g = c.benchmark_group(name);
    for b in BATCHES {
        g.throughput(Throughput::Elements(b as u64));
        g.bench_with_input(BenchmarkId::from_parameter(b), &b, |bench, &b| f(bench, b));
    }
    g.finish();
}

fn bench_nop(c: &mut Criterion) {
    group(c, "krcore_nop", |bench, b| {
        let mut rig = rig();
        let sqes: Vec<Sqe> = (0..b as u64).map(Sqe::nop).collect();
        {
            bench.iter(|| {
                rig.push(0, black_box(&sqes));
                let s = rig.submit(0, b).unwrap();
                debug_assert_eq!(s.taken, b);
                let t = rig.ring(0);
                for _ in 0..b {
                    black_box(t.cq.pop());
                }
                t.cq.release();
            })
        }
    });
}

fn bench_engine_only(c: &mut Criterion) {
    group(c, "krcore_engine_nop", |bench, b| {
        let mut rig = rig();
        let sqes: Vec<Sqe> = (0..b as u64).map(Sqe::nop).collect();
        {
            bench.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    rig.push(0, &sqes);
                    let t = Instant::now();
                    black_box(rig.submit(0, b).unwrap());
                    total += t.elapsed();
                    rig.reap(0, b as usize);
                }
                total
            })
        }
    });
}

fn bench_write(c: &mut Criterion) {
    group(c, "krcore_write", |bench, b| {
        let mut rig = rig();
        // Connect, register and import once, as a warm application would.
        let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE;
        rig.push(
            0,
            &[
                // Service 0: a virtual QP for one-sided requests, bound at once (a
                // CONNECT to a service waits for its listen).
                Sqe::connect(1, [0; 16], 0),
                Sqe::reg_mr(2, MR, 4096, access),
            ],
        );
        rig.drain();
        let c = rig.reap(0, 2);
        assert!(
            c.len() == 2 && c.iter().all(|c| c.res >= 0),
            "CONNECT, REG_MR: {c:?}"
        );
        let (v, mr) = (c[0].res as u32, c[1].res as u32);
        rig.push(0, &[Sqe::import_mr(3, v, MR, 4096, c[1].aux)]);
        rig.drain();
        let rmr = rig.reap(0, 1)[0].res as u32;
        let sqes: Vec<Sqe> = (0..b as u64)
            .map(|i| Sqe::one_sided(Opcode::Write, i, v, mr, MR + 8 * (i % 64), 8, rmr, MR))
            .collect();
        {
            bench.iter(|| {
                rig.push(0, black_box(&sqes));
                rig.submit(0, b).unwrap();
                rig.nic.execute(0, usize::MAX, false);
                rig.route();
                let t = rig.ring(0);
                for _ in 0..b {
                    black_box(t.cq.pop());
                }
                t.cq.release();
            })
        }
    });
}

fn bench_connect(c: &mut Criterion) {
    let mut rig = rig();
    c.bench_function("krcore_connect", |bench| {
        bench.iter(|| {
            rig.push(0, &[Sqe::connect(1, [0; 16], 0)]);
            rig.submit(0, 1).unwrap();
            let v = rig.ring(0).cq.pop().expect("CONNECT's CQE").res as u32;
            rig.push(0, &[Sqe::disconnect(2, v)]);
            rig.submit(0, 1).unwrap();
            let t = rig.ring(0);
            black_box(t.cq.pop().expect("DISCONNECT's CQE"));
            t.cq.release();
        })
    });
}

fn bench_meta_lookup(c: &mut Criterion) {
    use krcore_abi::meta::claim::publish;
    use krcore_abi::meta::lookup::{lookup, EXPORT_FRAME, PROBE};
    use krcore_abi::meta::record::{name, ExportRecord};
    use krcore_abi::meta::tables::{mem::MemRegion, Tables};
    // The module's table (kmod/meta/mod.rs): 40,960 slots, 10,000 exports published by the
    // claim protocol.
    let t = Tables {
        node_slots: 1024,
        export_slots: 40_960,
        key: [0x6b72_636f_7265, 0x6e61_6d65],
    };
    let mut m = MemRegion::new(t.bytes());
    let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
    let all: Vec<_> = (0..10_000)
        .filter_map(|i| name(&format!("export-{i}")))
        .collect();
    // A name whose 8-slot window is full is refused (`Full`), as the module refuses it;
    // the lookups below ask only for names that were published.
    let mut names = Vec::with_capacity(all.len());
    for (i, n) in all.iter().enumerate() {
        let r = ExportRecord {
            name: *n,
            node: (i % 64) as u16,
            incarnation: 1,
            addr: i as u64 * 4096,
            len: 4096,
            access: 2,
            rkey: i as u32,
            grant: krcore_abi::meta::record::Grant {
                uid: 1000,
                gid: 1000,
                mode: 0o600,
            },
        };
        match publish(&mut m, &t, &r, &mut buf) {
            Ok(_) => names.push(*n),
            Err(krcore_abi::meta::claim::PublishError::Full) => {}
            Err(e) => panic!("publishing {i}: {e:?}"),
        }
    }
    assert!(
        names.len() * 1000 >= all.len() * 999,
        "{} of {} published",
        names.len(),
        all.len()
    );
    let mut i = 0;
    c.bench_function("meta_lookup_10k", |bench| {
        bench.iter(|| {
            i = (i + 1) % names.len();
            black_box(lookup(&names[i], &t, &mut buf, &mut m).unwrap());
        })
    });
}

fn bench_io_uring(c: &mut Criterion) {
    group(c, "io_uring_nop", |bench, b| {
        let mut ring = io_uring::IoUring::new(256).expect("io_uring_setup");
        {
            bench.iter(|| {
                {
                    let mut sq = ring.submission();
                    for i in 0..b {
                        let e = io_uring::opcode::Nop::new().build().user_data(i as u64);
                        // SAFETY: a NOP references no memory.
                        unsafe { sq.push(&e).expect("sq full") };
                    }
                }
                ring.submit_and_wait(b as usize).expect("io_uring_enter");
                for cqe in ring.completion() {
                    black_box(cqe);
                }
            })
        }
    });
}

criterion_group!(
    benches,
    bench_nop,
    bench_engine_only,
    bench_write,
    bench_connect,
    bench_meta_lookup,
    bench_io_uring
);
criterion_main!(benches);
