//! Cost of decoding and validating an ioctl command: paid on every syscall crossing.
use criterion::{criterion_group, criterion_main, Criterion};
use krcore_abi::ioctl::{decode, IOC_QUERY_DEVICES};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    c.bench_function("ioctl_decode", |b| {
        b.iter(|| decode(black_box(IOC_QUERY_DEVICES)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
