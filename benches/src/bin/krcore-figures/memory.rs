//! Kernel memory per ring, per virtual QP, and per RC QP (created through user-space
//! verbs on rxe and connected), from /proc/meminfo before and after creating many.

use krcore_benches::record::Record;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::{Builder, Device, Ring};
use verify::verbs::{Context, RcQp, ROCE_V2_GID_INDEX};

use crate::paths::{leak, run, GID};

const REPS: usize = 5;

/// Kernel memory in bytes that objects like these grow: unreclaimable slab, vmalloc,
/// page tables (of ring mappings) and kernel stacks.
fn kernel_bytes() -> i64 {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap();
    ["SUnreclaim", "VmallocUsed", "PageTables", "KernelStack"]
        .iter()
        .map(|k| {
            let line = s
                .lines()
                .find(|l| l.starts_with(&format!("{k}:")))
                .unwrap_or_else(|| panic!("{k} not in meminfo"));
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<i64>()
                .unwrap()
                * 1024
        })
        .sum()
}

/// Bytes per object: in each repetition `setup` makes what the objects live in (not
/// counted), then `make` creates `n` objects kept alive until measured.
fn per_object<S, T>(
    series: &str,
    n: usize,
    mut setup: impl FnMut() -> S,
    mut make: impl FnMut(&mut S) -> T,
) -> Record {
    let mut v: Vec<i64> = (0..REPS)
        .map(|_| {
            let mut s = setup();
            let before = kernel_bytes();
            let objs: Vec<T> = (0..n).map(|_| make(&mut s)).collect();
            let after = kernel_bytes();
            drop(objs);
            (after - before) / n as i64
        })
        .collect();
    v.sort();
    Record {
        group: "memory".into(),
        series: series.into(),
        x: n as u32,
        unit: "bytes".into(),
        median: v[REPS / 2] as f64,
        p99: v[REPS - 1] as f64,
        rate: 0.0,
        samples: REPS,
    }
}

/// Every memory figure.
pub fn figures(out: &mut Vec<Record>) {
    out.push(per_object(
        "ring",
        32,
        || (),
        |_| {
            Builder::new(64)
                .build(Device::open().expect("open"))
                .expect("ring")
        },
    ));
    // Virtual QPs on one fresh ring per repetition (its tables hold 64).
    let ring = || -> Ring {
        Builder::new(64)
            .build(Device::open().expect("open"))
            .expect("ring")
    };
    out.push(per_object("virtual-qp", 60, ring, |r| {
        let c = run(r, Sqe::connect(1, GID, 0));
        assert!(
            c.res >= 0,
            "CONNECT: {:?}",
            krcore_uring::describe_failure(&c)
        );
    }));
    let ctx = leak(Context::open("rxe0", 64).expect("verbs"));
    let peer = RcQp::create(ctx, 64).unwrap();
    let pe = peer.endpoint(ROCE_V2_GID_INDEX).unwrap();
    out.push(per_object(
        "rc-qp",
        32,
        || (),
        |_| {
            let q = RcQp::create(ctx, 64).expect("QP");
            q.connect(pe, ROCE_V2_GID_INDEX).expect("connect");
            q
        },
    ));
}
