//! loom models of the ring protocol and of the engine under the kernel's locking.
//!
//! Run with `make loom` (`RUSTFLAGS="--cfg loom" cargo test --profile loom --test loom`).
//! Each model has a `weakened_*` twin that downgrades the protocol's acquire/release
//! pairs (or the need-wakeup fence) to relaxed, or moves a step of the sleeping wait
//! out of its critical section, and must fail: proof that the model checks the
//! protocol and not just runs.
#![cfg(loom)]

use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU32;
use loom::sync::{Arc, Mutex};
use loom::thread;

use core::sync::atomic::Ordering;
use krcore_abi::cqe::Cqe;
use krcore_abi::engine::{
    complete_wc, Context, ExportSlot, Exports, Messages, PhysQp, Posted, Ring, RingStorage, Slot,
    Stall, Submitted, VecStore,
};
use krcore_abi::opcode::Opcode;
use krcore_abi::ring::{CqConsumer, CqProducer, IndexCell, RingMem, SqConsumer, SqProducer};
use krcore_abi::sqe::{MrAccess, Sqe};
use verify::fake::FakeNic;
use verify::node::Node;

/// Weakens every `fence` call in the current model (need-wakeup twin).
static WEAK_FENCE: AtomicBool = AtomicBool::new(false);

/// An index word on loom's atomics; `weak` downgrades its orderings to Relaxed.
struct Cell {
    a: AtomicU32,
    weak: bool,
}

impl Cell {
    fn o(&self, o: Ordering) -> Ordering {
        if self.weak {
            Ordering::Relaxed
        } else {
            o
        }
    }
}

impl IndexCell for Cell {
    fn load(&self, o: Ordering) -> u32 {
        self.a.load(self.o(o))
    }
    fn store(&self, v: u32, o: Ordering) {
        self.a.store(v, self.o(o))
    }
    fn fetch_or(&self, v: u32, o: Ordering) -> u32 {
        self.a.fetch_or(v, self.o(o))
    }
    fn fetch_and(&self, v: u32, o: Ordering) -> u32 {
        self.a.fetch_and(v, self.o(o))
    }
    fn fence(o: Ordering) {
        if !WEAK_FENCE.load(StdOrdering::Relaxed) {
            loom::sync::atomic::fence(o)
        }
    }
}

struct Inner<E> {
    head: Cell,
    tail: Cell,
    flags: Cell,
    slots: Vec<UnsafeCell<E>>,
}

/// Ring memory on loom cells: a slot access not ordered by the protocol is a loom error.
struct LoomRing<E>(Arc<Inner<E>>);

impl<E> Clone for LoomRing<E> {
    fn clone(&self) -> Self {
        LoomRing(self.0.clone())
    }
}

fn ring<E: Default>(n: u32, weak: bool) -> LoomRing<E> {
    let cell = || Cell {
        a: AtomicU32::new(0),
        weak,
    };
    LoomRing(Arc::new(Inner {
        head: cell(),
        tail: cell(),
        flags: cell(),
        slots: (0..n).map(|_| UnsafeCell::new(E::default())).collect(),
    }))
}

impl<E: Copy> RingMem for LoomRing<E> {
    type Cell = Cell;
    type Entry = E;
    fn head(&self) -> &Cell {
        &self.0.head
    }
    fn tail(&self) -> &Cell {
        &self.0.tail
    }
    fn flags(&self) -> &Cell {
        &self.0.flags
    }
    fn entries(&self) -> u32 {
        self.0.slots.len() as u32
    }
    unsafe fn read(&self, i: u32) -> E {
        // SAFETY: loom checks that the protocol ordered this access.
        self.0.slots[i as usize].with(|p| unsafe { *p })
    }
    unsafe fn write(&self, i: u32, e: E) {
        // SAFETY: as above.
        self.0.slots[i as usize].with_mut(|p| unsafe { *p = e })
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// SQ: the application publishes 3 entries into a 2-slot ring (so slots are reused)
/// while the kernel takes them; the kernel sees each exactly once, in order.
fn sq_model(weak: bool) {
    model(move || {
        let mem = ring::<u64>(2, weak);
        let mut p = SqProducer::new(mem.clone());
        let producer = thread::spawn(move || {
            for v in 1..=3u64 {
                while p.push(v).is_err() {
                    thread::yield_now();
                }
                p.publish();
            }
        });
        let mut c = SqConsumer::new(mem);
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let n = c.ready().expect("honest producer");
            if n == 0 {
                thread::yield_now();
                continue;
            }
            seen.push(c.peek(0).unwrap());
            c.consume(1);
        }
        producer.join().unwrap();
        assert_eq!(seen, vec![1, 2, 3]);
    });
}

#[test]
fn sq_producer_consumer() {
    sq_model(false);
}

#[test]
#[should_panic]
fn weakened_sq_producer_consumer() {
    sq_model(true);
}

/// CQ: the kernel publishes 3 completions into a 2-slot ring while the application
/// reaps them.
fn cq_model(weak: bool) {
    model(move || {
        let mem = ring::<u64>(2, weak);
        let mut p = CqProducer::new(mem.clone());
        let producer = thread::spawn(move || {
            for v in 1..=3u64 {
                while p.push(v).is_err() {
                    thread::yield_now();
                }
                p.publish();
            }
        });
        let mut c = CqConsumer::new(mem);
        let mut seen = Vec::new();
        while seen.len() < 3 {
            match c.pop() {
                Some(v) => {
                    seen.push(v);
                    c.release();
                }
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(seen, vec![1, 2, 3]);
    });
}

#[test]
fn cq_producer_consumer() {
    cq_model(false);
}

#[test]
#[should_panic]
fn weakened_cq_producer_consumer() {
    cq_model(true);
}

/// Need-wakeup: the poller decides to sleep while the application submits. Whatever the
/// interleaving, the entry is not left behind: the poller saw it or the app wakes it.
fn wakeup_model(weak_fence: bool) {
    model(move || {
        WEAK_FENCE.store(weak_fence, StdOrdering::Relaxed);
        let mem = ring::<u64>(2, false);
        let mut app = SqProducer::new(mem.clone());
        let mut poller = SqConsumer::new(mem);
        let submitter = thread::spawn(move || {
            app.push(7).unwrap();
            app.publish();
            app.needs_wakeup()
        });
        let slept = poller.prepare_sleep() && poller.ready().unwrap() == 0;
        let woke = submitter.join().unwrap();
        assert!(
            !slept || woke,
            "lost wakeup: the poller sleeps and the app did not wake it"
        );
    });
}

#[test]
fn need_wakeup_handshake() {
    wakeup_model(false);
}

#[test]
#[should_panic]
fn weakened_need_wakeup_handshake() {
    wakeup_model(true);
}

/// How a waiter may break the sleeping-wait protocol (kmod devctx's `until`, wait.rs).
#[derive(Clone, Copy, PartialEq)]
enum WaitFault {
    None,
    /// Reads the wait queue's generation after releasing the device lock.
    GenerationAfterUnlock,
    /// Counts itself a sleeper in a second critical section.
    SleeperLate,
}

/// Sleeping waits: a waiter finds no completion under the device lock and goes to sleep
/// until the ring's generation moves, while completion routing publishes one under the
/// same lock and bumps the generation only if someone sleeps. Whatever the
/// interleaving, the waiter saw the completion or its generation moved: no lost wakeup.
fn sleep_model(fault: WaitFault) {
    model(move || {
        // (completions published, sleepers), as under the device lock.
        let dev = Arc::new(Mutex::new((0u32, 0u32)));
        let gen = Arc::new(AtomicU32::new(0));
        let router = {
            let (dev, gen) = (dev.clone(), gen.clone());
            thread::spawn(move || {
                let mut st = dev.lock().unwrap();
                st.0 += 1;
                if st.1 > 0 {
                    gen.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let seen = {
            let mut st = dev.lock().unwrap();
            if st.0 > 0 {
                None
            } else {
                let seen =
                    (fault != WaitFault::GenerationAfterUnlock).then(|| gen.load(Ordering::SeqCst));
                if fault != WaitFault::SleeperLate {
                    st.1 += 1;
                }
                Some(seen)
            }
        };
        if let Some(seen) = seen {
            let seen = seen.unwrap_or_else(|| gen.load(Ordering::SeqCst));
            if fault == WaitFault::SleeperLate {
                dev.lock().unwrap().1 += 1;
            }
            router.join().unwrap();
            assert_ne!(
                gen.load(Ordering::SeqCst),
                seen,
                "lost wakeup: the waiter sleeps on a generation that will not move"
            );
        } else {
            router.join().unwrap();
        }
    });
}

#[test]
fn sleeping_wait_loses_no_wakeup() {
    sleep_model(WaitFault::None);
}

#[test]
#[should_panic]
fn weakened_sleeping_wait_generation_after_unlock() {
    sleep_model(WaitFault::GenerationAfterUnlock);
}

#[test]
#[should_panic]
fn weakened_sleeping_wait_sleeper_counted_late() {
    sleep_model(WaitFault::SleeperLate);
}

type LRing = Ring<VecStore, LoomRing<Sqe>, LoomRing<Cqe>>;

/// The kernel's side of a device under its lock: the NIC, the physical QPs, the rings.
struct Device {
    nic: FakeNic,
    qps: Vec<PhysQp<VecStore>>,
    exports: Exports<VecStore>,
    messages: Messages<VecStore>,
    rings: Vec<LRing>,
}

impl Device {
    /// One physical QP of depth 2, no rings yet.
    fn new() -> Device {
        Device {
            nic: FakeNic::new(&[2]),
            qps: vec![PhysQp::new(vec![Posted::EMPTY; 2])],
            exports: Exports::new(vec![ExportSlot::EMPTY; 4]),
            messages: Messages::with_capacity(4, 4),
            rings: Vec::new(),
        }
    }

    /// The kernel takes ring `r`'s entries, as its owner's enter would.
    fn submit(&mut self, r: usize) -> Submitted {
        let Device {
            nic,
            qps,
            exports,
            messages,
            rings,
        } = self;
        let node = Node::new(nic, qps, exports, messages);
        rings[r].submit(&node, 8, Context::OWNER).unwrap()
    }

    /// Releases closed ring `r` if nothing of it is left; whether it was.
    fn release_idle(&mut self, r: usize) -> bool {
        let Device {
            nic,
            qps,
            exports,
            messages,
            rings,
        } = self;
        let node = Node::new(nic, qps, exports, messages);
        rings[r].release_idle(&node)
    }
}

const MR: u64 = 0x1000;

fn new_ring(id: u16, sq: LoomRing<Sqe>, cq: LoomRing<Cqe>) -> LRing {
    let storage = RingStorage::<VecStore> {
        vqps: vec![Slot::EMPTY; 2],
        mrs: vec![Slot::EMPTY; 2],
        rmrs: vec![Slot::EMPTY; 2],
        inflight: vec![Slot::EMPTY; 4],
        overflow: vec![Cqe::default(); 8],
    };
    Ring::new(id, 1, sq, cq, storage)
}

/// Sets up ring `r` (connect, register, import) synchronously, before the threads run;
/// returns its virtual QP, MR and remote MR handles.
fn setup(
    d: &mut Device,
    r: usize,
    app: &mut SqProducer<LoomRing<Sqe>>,
    cq: &mut CqConsumer<LoomRing<Cqe>>,
) -> (u32, u32, u32) {
    let mut run = |sqe: Sqe| -> Cqe {
        app.push(sqe).unwrap();
        app.publish();
        let s = d.submit(r);
        let Device {
            nic,
            qps,
            exports,
            messages,
            rings,
        } = d;
        if let Some(reg) = (s.stall == Some(Stall::Register))
            .then(|| rings[r].claim_registration())
            .flatten()
        {
            let keys = nic.reg_mr(reg.addr, reg.len, reg.access);
            let node = Node::new(nic, qps, exports, messages);
            rings[r].finish_registration(reg, keys, &node);
            rings[r].publish();
        }
        let c = cq.pop().unwrap();
        cq.release();
        assert!(c.res > 0, "{c:?}");
        c
    };
    let v = run(Sqe::connect(1, [0; 16], 1)).res as u32;
    let mr = run(Sqe::reg_mr(
        2,
        MR,
        64,
        MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ,
    ));
    let rmr = run(Sqe::import_mr(3, v, MR, 64, mr.aux)).res as u32;
    let mr = mr.res as u32;
    (v, mr, rmr)
}

/// Polls the NIC and routes completions, under the device lock.
fn run_nic(d: &mut Device) {
    let Device {
        nic,
        qps,
        exports,
        messages,
        rings,
    } = d;
    nic.execute(0, usize::MAX, false);
    let wcs: Vec<_> = std::iter::from_fn(|| nic.poll()).collect();
    let node = Node::new(nic, qps, exports, messages);
    for (qp, wc) in wcs {
        complete_wc(&node, qp, &wc, |id, c| {
            if let Some(r) = rings.get_mut(id.ring as usize) {
                r.complete(id, c);
            }
        });
    }
    for r in rings.iter_mut() {
        r.publish();
    }
}

/// Two rings share one physical QP of depth 2. Two kernel threads submit for them and
/// one polls and routes completions, all under the device lock, while each application
/// reaps its CQ without a lock. Each application gets exactly its own completions.
fn shared_qp_model(weak: bool) {
    model(move || {
        let mems: Vec<(LoomRing<Sqe>, LoomRing<Cqe>)> =
            (0..2).map(|_| (ring(4, false), ring(4, weak))).collect();
        let mut d = Device::new();
        let mut apps = Vec::new();
        for (r, (sq, cq)) in mems.iter().enumerate() {
            d.rings.push(new_ring(r as u16, sq.clone(), cq.clone()));
            let (mut p, mut c) = (SqProducer::new(sq.clone()), CqConsumer::new(cq.clone()));
            let (v, mr, rmr) = setup(&mut d, r, &mut p, &mut c);
            let ud = (r as u64 + 1) * 100;
            p.push(Sqe::one_sided(Opcode::Read, ud, v, mr, MR, 8, rmr, MR))
                .unwrap();
            p.publish();
            apps.push(c);
        }
        let dev = Arc::new(Mutex::new(d));
        let kernel: Vec<_> = (0..2)
            .map(|r| {
                let dev = dev.clone();
                thread::spawn(move || {
                    dev.lock().unwrap().submit(r);
                })
            })
            .collect();
        let poller = {
            let dev = dev.clone();
            thread::spawn(move || {
                for _ in 0..2 {
                    run_nic(&mut dev.lock().unwrap());
                    thread::yield_now();
                }
            })
        };
        // Each application reaps concurrently with the kernel threads.
        let mut got = vec![Vec::new(), Vec::new()];
        for (r, c) in apps.iter_mut().enumerate() {
            if let Some(cqe) = c.pop() {
                got[r].push(cqe.user_data);
                c.release();
            }
        }
        for k in kernel {
            k.join().unwrap();
        }
        poller.join().unwrap();
        run_nic(&mut dev.lock().unwrap());
        for (r, c) in apps.iter_mut().enumerate() {
            while let Some(cqe) = c.pop() {
                got[r].push(cqe.user_data);
            }
            c.release();
            assert_eq!(
                got[r],
                vec![(r as u64 + 1) * 100],
                "ring {r} got {:?}",
                got[r]
            );
        }
        assert_eq!(
            dev.lock().unwrap().qps[0].outstanding(),
            0,
            "credits leaked"
        );
    });
}

#[test]
fn shared_qp_concurrent_completions() {
    shared_qp_model(false);
}

#[test]
#[should_panic]
fn weakened_shared_qp_concurrent_completions() {
    shared_qp_model(true);
}

/// A ring is closed while its request is in flight and completions arrive concurrently:
/// the request still retires (credits come back), no CQE is written after the close, the
/// other ring is unaffected, and the closed ring's objects are released once idle.
#[test]
fn ring_closed_in_flight() {
    model(|| {
        let mems: Vec<(LoomRing<Sqe>, LoomRing<Cqe>)> =
            (0..2).map(|_| (ring(4, false), ring(4, false))).collect();
        let mut d = Device::new();
        let mut apps = Vec::new();
        for (r, (sq, cq)) in mems.iter().enumerate() {
            d.rings.push(new_ring(r as u16, sq.clone(), cq.clone()));
            let (mut p, mut c) = (SqProducer::new(sq.clone()), CqConsumer::new(cq.clone()));
            let (v, mr, rmr) = setup(&mut d, r, &mut p, &mut c);
            p.push(Sqe::one_sided(
                Opcode::Read,
                50 + r as u64,
                v,
                mr,
                MR,
                8,
                rmr,
                MR,
            ))
            .unwrap();
            p.publish();
            d.submit(r);
            apps.push(c);
        }
        let dev = Arc::new(Mutex::new(d));
        let closer = {
            let dev = dev.clone();
            thread::spawn(move || {
                let mut g = dev.lock().unwrap();
                let Device {
                    nic,
                    qps,
                    exports,
                    messages,
                    rings,
                } = &mut *g;
                rings[0].close(&Node::new(nic, qps, exports, messages));
                g.release_idle(0)
            })
        };
        let poller = {
            let dev = dev.clone();
            thread::spawn(move || {
                let mut g = dev.lock().unwrap();
                let closed_first = g.rings[0].is_closed();
                run_nic(&mut g);
                closed_first
            })
        };
        let released_at_close = closer.join().unwrap();
        let closed_first = poller.join().unwrap();
        let mut g = dev.lock().unwrap();
        assert!(g.release_idle(0), "closed ring not released once idle");
        assert!(
            !released_at_close || !closed_first,
            "released with a request in flight"
        );
        assert_eq!(g.qps[0].outstanding(), 0, "credits leaked");
        let got = apps[0].pop().map(|c| c.user_data);
        if closed_first {
            assert_eq!(got, None, "a CQE was written into the closed ring");
        } else {
            assert_eq!(
                got,
                Some(50),
                "completed before the close: the CQE is delivered"
            );
        }
        assert_eq!(apps[1].pop().map(|c| c.user_data), Some(51));
        assert_eq!(
            g.nic.live_mrs.len(),
            1,
            "the closed ring's MR was deregistered, the other's kept"
        );
    });
}
