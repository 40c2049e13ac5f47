//! Benchmark support (feature `bench-support`; not part of the API): a ring over
//! anonymous memory with the benchmark as the kernel side, and region handles as the
//! kernel would have returned them, so the library's own costs (building a batch,
//! pushing, reaping) are measured natively with no kernel behind them.

use std::cell::UnsafeCell;

use krcore_abi::cqe::Cqe;
use krcore_abi::layout::SetupParams;
use krcore_abi::ring::{CqProducer, RawRing, SqConsumer};
use krcore_abi::sqe::Sqe;

use crate::mmap::Mmap;
use crate::{Device, MemoryRegion, Registered, RemoteRegion, Ring, Vqp};

/// The kernel's side of a detached ring, driven by the benchmark.
pub struct KernelSide {
    /// Takes what the application submitted.
    pub sq: SqConsumer<RawRing<Sqe>>,
    /// Produces completions for the application to reap.
    pub cq: CqProducer<RawRing<Cqe>>,
    // The maps are owned by the Ring; it must outlive this side.
}

/// A ring of `sq_entries` (CQ twice that) over anonymous memory. Anything that enters
/// the kernel fails (the device is /dev/null); the ring must outlive the kernel side.
pub fn detached_ring(sq_entries: u32) -> (Ring, KernelSide) {
    let mut p = SetupParams {
        sq_entries,
        ..SetupParams::default()
    };
    p.normalize(size_of::<Sqe>(), size_of::<Cqe>(), u32::MAX)
        .expect("valid sizes");
    let sq_map = Mmap::anonymous(p.sq_off.map_len as usize).expect("anonymous SQ");
    let cq_map = Mmap::anonymous(p.cq_off.map_len as usize).expect("anonymous CQ");
    // SAFETY: the maps are fresh, page-aligned and map_len long; they live in the Ring,
    // which the caller keeps alive as long as these views.
    let (sq, cq) = unsafe {
        (
            RawRing::new(sq_map.as_ptr(), p.sq_entries),
            RawRing::new(cq_map.as_ptr(), p.cq_entries),
        )
    };
    let dev = Device::from_file(std::fs::File::open("/dev/null").expect("/dev/null"));
    (
        Ring::over(dev, p, sq_map, cq_map),
        KernelSide {
            sq: SqConsumer::new(sq),
            cq: CqProducer::new(cq),
        },
    )
}

/// A virtual QP, a registered region of `len` bytes and an imported remote region, as
/// CONNECT, REG_MR and IMPORT_MR on `ring` would have returned them.
pub fn handles(ring: &Ring, len: usize) -> (Vqp, MemoryRegion, RemoteRegion) {
    let buf: Box<[UnsafeCell<u64>]> = MemoryRegion::alloc(len).expect("memory");
    let id = ring.shared().id;
    (
        Vqp {
            handle: 1,
            qpn: 17,
            port: 0,
            ring: id,
        },
        MemoryRegion {
            region: Registered {
                ptr: buf.as_ptr() as *mut u8,
                len: buf.len() * 8,
                handle: 2,
                descriptor: 0x200,
                ring: std::sync::Weak::new(),
                ring_id: id,
                live: false,
                _lent: std::marker::PhantomData,
            },
            buf,
        },
        RemoteRegion {
            handle: 3,
            vqp: 1,
            addr: 0x7000_0000,
            len: len as u32,
            ring: id,
        },
    )
}

/// The entries a batch holds, as [`Ring::run`] would push them (before tagging).
pub fn entries<'b>(batch: &'b crate::Batch<'_>) -> &'b [Sqe] {
    &batch.sqes
}

/// Publishes what was pushed, as entering the kernel does first.
pub fn publish(ring: &mut Ring) {
    ring.publish_sq();
}
