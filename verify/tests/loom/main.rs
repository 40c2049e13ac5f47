//! loom models of the ring protocol and of the engine under the kernel's locking.
//!
//! Run with `make loom` (`RUSTFLAGS="--cfg loom" cargo test --profile loom --test loom`).
//! Each model has a `weakened_*` twin that must fail: it downgrades the protocol's
//! acquire/release pairs (or the need-wakeup fence) to relaxed, moves a step of the
//! sleeping wait out of its critical section, or breaks the kernel's locking as a
//! plausible change would ([`device::Faults`]): proof that the model checks the
//! protocol and not just runs. This file holds the ring protocol's models; `engine.rs`
//! the engine's under the kernel's locks, on the device `device.rs` builds.
#![cfg(loom)]

mod device;
mod engine;
mod meta;
mod peers;

use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU32;
use loom::sync::{Arc, Mutex};
use loom::thread;

use core::sync::atomic::Ordering;
use krcore_abi::ring::{CqConsumer, CqProducer, IndexCell, RingMem, SqConsumer, SqProducer};

/// Weakens every `fence` call in the current model (need-wakeup twin).
static WEAK_FENCE: AtomicBool = AtomicBool::new(false);

/// An index word on loom's atomics; `weak` downgrades its orderings to Relaxed.
pub struct Cell {
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
    fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
        self.a.fetch_add(v, self.o(o))
    }
    fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
        self.a.fetch_sub(v, self.o(o))
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
pub struct LoomRing<E>(Arc<Inner<E>>);

impl<E> Clone for LoomRing<E> {
    fn clone(&self) -> Self {
        LoomRing(self.0.clone())
    }
}

/// A ring of `n` slots; `weak` makes its index words relaxed.
pub fn ring<E: Default>(n: u32, weak: bool) -> LoomRing<E> {
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

/// Checks `f` under every interleaving loom explores (at most 3 preemptions).
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Runs the ignored test `name` of this binary in a child process and checks that it
/// failed saying `why`. For twins that deadlock: loom reports a deadlock by panicking
/// with every thread's lock guards alive, and their drops then abort the process, which
/// `should_panic` cannot catch.
pub fn fails_in_child(name: &str, why: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("running 1 test"),
        "{name}: not found in this binary\n{stdout}"
    );
    assert!(!out.status.success(), "{name} passed; it must fail ({why})");
    assert!(
        stderr.contains(why),
        "{name} failed, but not with '{why}':\n{stderr}"
    );
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
    /// Reads the wait queue's generation after releasing the ring's lock.
    GenerationAfterUnlock,
    /// Counts itself a sleeper in a second critical section.
    SleeperLate,
}

/// Sleeping waits: a waiter finds no completion under its ring's lock and goes to sleep
/// until the ring's generation moves, while completion routing publishes one under the
/// same lock and bumps the generation only if someone sleeps. Whatever the
/// interleaving, the waiter saw the completion or its generation moved: no lost wakeup.
fn sleep_model(fault: WaitFault) {
    model(move || {
        // (completions published, sleepers), as under the ring's lock (kmod counts
        // sleepers in an atomic, changed and read only under it).
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
