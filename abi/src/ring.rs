//! The ring protocol: single-producer, single-consumer rings shared by an application
//! and the kernel. The SQ carries [`Sqe`](super::sqe::Sqe)s from the application to the
//! kernel, the CQ carries [`Cqe`](super::cqe::Cqe)s back.
//!
//! # Barrier contract
//!
//! Each pair must hold; verify/'s loom models check every one of them, and fail when any
//! side is weakened to `Relaxed`.
//!
//! 1. SQ publish: app writes SQEs, then **store-release SQ tail** <-> kernel
//!    **load-acquire SQ tail**, then copies SQEs out.
//! 2. SQ release: kernel copies SQEs out, then **store-release SQ head** <-> app
//!    **load-acquire SQ head** before it reuses those slots.
//! 3. CQ publish: kernel writes CQEs, then **store-release CQ tail** <-> app
//!    **load-acquire CQ tail**, then reads CQEs.
//! 4. CQ release: app reads CQEs, then **store-release CQ head** <-> kernel
//!    **load-acquire CQ head** before it overwrites those slots.
//! 5. Need-wakeup (a Dekker pair): the poller sets `NEED_WAKEUP`, **fence(SeqCst)**,
//!    loads the SQ tail; the app stores the SQ tail, **fence(SeqCst)**, loads the flags.
//!    At least one side sees the other: the poller sees the new tail and keeps running,
//!    or the app sees `NEED_WAKEUP` and wakes it. No submission is left asleep.
//!
//! # Hostile input
//!
//! The kernel never trusts what the application can write. It keeps its own copy of the
//! index it owns (SQ head, CQ tail) and of the ring size, and never reads those back
//! from shared memory. It reads the application's index (SQ tail, CQ head) once per
//! batch; an SQ tail claiming more entries than the ring holds is rejected
//! ([`RingError::TailOverrun`]) and a CQ head that ran past the tail makes the CQ count
//! as full, so completions wait in the kernel rather than overwrite unread ones.

use core::sync::atomic::{AtomicU32, Ordering};

use super::layout::SqFlags;

/// An index word shared by the two sides: `AtomicU32` in real use, loom's in models.
pub trait IndexCell {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u32;
    /// Atomic store.
    fn store(&self, v: u32, order: Ordering);
    /// Atomic or; returns the previous value.
    fn fetch_or(&self, v: u32, order: Ordering) -> u32;
    /// Atomic and; returns the previous value.
    fn fetch_and(&self, v: u32, order: Ordering) -> u32;
    /// Atomic wrapping add; returns the previous value.
    fn fetch_add(&self, v: u32, order: Ordering) -> u32;
    /// Atomic wrapping subtract; returns the previous value.
    fn fetch_sub(&self, v: u32, order: Ordering) -> u32;
    /// A memory fence of the same memory model as the cell.
    fn fence(order: Ordering);
}

impl IndexCell for AtomicU32 {
    #[inline]
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }
    #[inline]
    fn store(&self, v: u32, order: Ordering) {
        AtomicU32::store(self, v, order)
    }
    #[inline]
    fn fetch_or(&self, v: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_or(self, v, order)
    }
    #[inline]
    fn fetch_and(&self, v: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_and(self, v, order)
    }
    #[inline]
    fn fetch_add(&self, v: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_add(self, v, order)
    }
    #[inline]
    fn fetch_sub(&self, v: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_sub(self, v, order)
    }
    #[inline]
    fn fence(order: Ordering) {
        core::sync::atomic::fence(order)
    }
}

/// The memory of one ring as one side sees it: three index words and the entry slots.
///
/// The kernel implements it over its pages, uring-lib over its mapping, the loom models
/// over loom cells, tests over plain memory.
pub trait RingMem {
    /// The index word type.
    type Cell: IndexCell;
    /// The entry type.
    type Entry: Copy;
    /// The consumer index.
    fn head(&self) -> &Self::Cell;
    /// The producer index.
    fn tail(&self) -> &Self::Cell;
    /// The flags word.
    fn flags(&self) -> &Self::Cell;
    /// The number of entries: a power of two, from this side's own records (never read
    /// from shared memory by the kernel).
    fn entries(&self) -> u32;
    /// Copies slot `i` out.
    ///
    /// # Safety
    /// `i < self.entries()`, and the protocol gives this side the slot for reading. The
    /// other side may still scribble on it if it is hostile: implementations read
    /// volatile (READ_ONCE), so a torn or changed entry is a wrong value, never UB.
    unsafe fn read(&self, i: u32) -> Self::Entry;
    /// Writes slot `i`.
    ///
    /// # Safety
    /// `i < self.entries()`, and the protocol gives this side the slot for writing.
    unsafe fn write(&self, i: u32, e: Self::Entry);
}

/// Copies an entry out of shared memory as volatile 8-byte words (READ_ONCE per word):
/// the copy is taken exactly once and the compiler cannot re-read the source later, so
/// what was validated is what is used. Word-wise because a volatile read of a whole
/// struct is lowered field by field, several times slower.
///
/// # Safety
/// `src` is valid for reads of `E` and 8-byte aligned.
#[inline(always)]
pub unsafe fn read_entry<E: Copy>(src: *const E) -> E {
    const { assert!(core::mem::size_of::<E>() % 8 == 0 && core::mem::align_of::<E>() >= 8) };
    let mut out = core::mem::MaybeUninit::<E>::uninit();
    let (s, d) = (src.cast::<u64>(), out.as_mut_ptr().cast::<u64>());
    for i in 0..core::mem::size_of::<E>() / 8 {
        // SAFETY: within `E` on both sides (caller's contract for `src`, ours for `out`).
        unsafe { d.add(i).write(s.add(i).read_volatile()) };
    }
    // SAFETY: every byte written; entries are plain integers (any bits are valid).
    unsafe { out.assume_init() }
}

/// Writes an entry into shared memory as volatile 8-byte words (WRITE_ONCE per word).
///
/// # Safety
/// `dst` is valid for writes of `E` and 8-byte aligned.
#[inline(always)]
pub unsafe fn write_entry<E: Copy>(dst: *mut E, e: E) {
    const { assert!(core::mem::size_of::<E>() % 8 == 0 && core::mem::align_of::<E>() >= 8) };
    let (s, d) = ((&e as *const E).cast::<u64>(), dst.cast::<u64>());
    for i in 0..core::mem::size_of::<E>() / 8 {
        // SAFETY: within `E` on both sides.
        unsafe { d.add(i).write_volatile(s.add(i).read()) };
    }
}

/// A ring laid out as [`layout`](super::layout) says, at a raw address: a
/// [`RingHeader`](super::layout::RingHeader) then the entries. The kernel uses it over
/// its ring pages, the application over its mapping of them. The entry count is this
/// side's own record; the header's `ring_entries` is never read back.
///
/// # Invariants
/// `base` points at a live ring area holding a header and `entries` entries of `E`,
/// page-aligned.
pub struct RawRing<E> {
    base: *mut u8,
    entries: u32,
    _e: core::marker::PhantomData<E>,
}

// SAFETY: the area is plain shared memory; every access goes through the protocol.
unsafe impl<E> Send for RawRing<E> {}

impl<E> RawRing<E> {
    /// A view of the ring at `base` with `entries` entries (a power of two).
    ///
    /// # Safety
    /// `base` is 8-byte aligned, valid for reads and writes of the header and `entries`
    /// entries of `E`, and stays so for the life of the view.
    pub unsafe fn new(base: *mut u8, entries: u32) -> Self {
        debug_assert!(entries.is_power_of_two() && base as usize % 8 == 0);
        // INVARIANT: the caller's promise.
        RawRing {
            base,
            entries,
            _e: core::marker::PhantomData,
        }
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is a u32 field of the header at the start of the live area
        // (invariant), 4-byte aligned. The other side may write it concurrently, which
        // is what atomics are for.
        unsafe { AtomicU32::from_ptr(self.base.add(offset).cast::<u32>()) }
    }

    fn slot(&self, i: u32) -> *mut E {
        // SAFETY: callers pass i < entries, inside the live area (invariant); the
        // entries start 8-byte aligned at ENTRIES_OFFSET.
        unsafe {
            self.base
                .add(super::layout::ENTRIES_OFFSET)
                .cast::<E>()
                .add(i as usize)
        }
    }
}

impl<E: Copy> RingMem for RawRing<E> {
    type Cell = AtomicU32;
    type Entry = E;
    fn head(&self) -> &AtomicU32 {
        self.word(core::mem::offset_of!(super::layout::RingHeader, head))
    }
    fn tail(&self) -> &AtomicU32 {
        self.word(core::mem::offset_of!(super::layout::RingHeader, tail))
    }
    fn flags(&self) -> &AtomicU32 {
        self.word(core::mem::offset_of!(super::layout::RingHeader, flags))
    }
    fn entries(&self) -> u32 {
        self.entries
    }
    unsafe fn read(&self, i: u32) -> E {
        // SAFETY: i < entries per the caller; read once, word by word.
        unsafe { read_entry(self.slot(i)) }
    }
    unsafe fn write(&self, i: u32, e: E) {
        // SAFETY: as in `read`.
        unsafe { write_entry(self.slot(i), e) }
    }
}

/// Protocol violations by the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// The SQ tail claims `claimed` entries beyond the head, more than the ring holds.
    TailOverrun {
        /// How many entries the tail claimed.
        claimed: u32,
    },
}

/// Kernel side of the SQ: takes entries the application published.
pub struct SqConsumer<M: RingMem> {
    mem: M,
    /// Our head; the shared head is only ever written from this.
    head: u32,
    /// The tail as last read (and validated).
    tail: u32,
}

impl<M: RingMem> SqConsumer<M> {
    /// A consumer over fresh memory (both indices zero).
    pub fn new(mem: M) -> Self {
        SqConsumer {
            mem,
            head: 0,
            tail: 0,
        }
    }

    /// The ring memory.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Reads the tail once (acquire: pair 1) and returns how many entries are ready.
    pub fn ready(&mut self) -> Result<u32, RingError> {
        let tail = self.mem.tail().load(Ordering::Acquire);
        let claimed = tail.wrapping_sub(self.head);
        if claimed > self.mem.entries() {
            return Err(RingError::TailOverrun { claimed });
        }
        self.tail = tail;
        Ok(claimed)
    }

    /// Copies out the `k`-th ready entry without consuming it; `None` past the ready
    /// count of the last [`ready`](Self::ready).
    pub fn peek(&self, k: u32) -> Option<M::Entry> {
        if k >= self.tail.wrapping_sub(self.head) {
            return None;
        }
        let i = self.head.wrapping_add(k) & (self.mem.entries() - 1);
        // SAFETY: masked below entries(); slots between head and the validated tail are
        // the consumer's to read (pair 1).
        Some(unsafe { self.mem.read(i) })
    }

    /// Consumes `n` peeked entries and publishes the head (release: pair 2).
    pub fn consume(&mut self, n: u32) {
        debug_assert!(n <= self.tail.wrapping_sub(self.head));
        let n = n.min(self.tail.wrapping_sub(self.head));
        if n == 0 {
            return;
        }
        self.head = self.head.wrapping_add(n);
        self.mem.head().store(self.head, Ordering::Release);
    }

    /// Whether entries are pending beyond what was consumed, as of the last `ready`.
    pub fn has_peeked(&self) -> bool {
        self.tail != self.head
    }

    /// Need-wakeup, poller side (pair 5): announces sleep, then looks at the tail once
    /// more. Returns `true` when it is safe to sleep; `false` (with the flag cleared)
    /// when entries arrived meanwhile.
    pub fn prepare_sleep(&mut self) -> bool {
        self.mem
            .flags()
            .fetch_or(SqFlags::NEED_WAKEUP.bits(), Ordering::Relaxed);
        M::Cell::fence(Ordering::SeqCst);
        if self.mem.tail().load(Ordering::Relaxed) != self.head {
            self.woken();
            return false;
        }
        true
    }

    /// Need-wakeup, poller side, when the SQ cannot be used (a hostile tail): announces
    /// sleep unconditionally, so the application, once it repairs its tail, wakes the
    /// poller through enter instead of waiting for a thread that will never look.
    pub fn park(&mut self) {
        self.mem
            .flags()
            .fetch_or(SqFlags::NEED_WAKEUP.bits(), Ordering::Release);
    }

    /// Clears `NEED_WAKEUP` (the poller runs again).
    pub fn woken(&mut self) {
        self.mem
            .flags()
            .fetch_and(!SqFlags::NEED_WAKEUP.bits(), Ordering::Relaxed);
    }

    /// Sets or clears a kernel-owned SQ flag.
    pub fn set_flag(&self, flag: SqFlags, on: bool) {
        if on {
            self.mem.flags().fetch_or(flag.bits(), Ordering::Release);
        } else {
            self.mem.flags().fetch_and(!flag.bits(), Ordering::Release);
        }
    }
}

/// The producing side of a ring: the application on the SQ ([`SqProducer`]), the kernel
/// on the CQ ([`CqProducer`]).
pub struct Producer<M: RingMem> {
    mem: M,
    tail: u32,
    /// The tail last stored: a publish with nothing new stores nothing (the other side
    /// reads it; the producer never reads it back).
    published: u32,
    cached_head: u32,
}

/// The application's side of the SQ.
pub type SqProducer<M> = Producer<M>;
/// The kernel's side of the CQ.
pub type CqProducer<M> = Producer<M>;

impl<M: RingMem> Producer<M> {
    /// A producer over fresh memory (both indices zero).
    pub fn new(mem: M) -> Self {
        Producer {
            mem,
            tail: 0,
            published: 0,
            cached_head: 0,
        }
    }

    /// The ring memory.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Free slots. Refreshes the consumer's head (acquire: pairs 2 and 4) only when the
    /// cached one says full. A head that ran past our tail is hostile and counts as a
    /// full ring, so nothing unread is overwritten.
    pub fn space(&mut self) -> u32 {
        let n = self.mem.entries();
        if self.tail.wrapping_sub(self.cached_head) >= n {
            let head = self.mem.head().load(Ordering::Acquire);
            if self.tail.wrapping_sub(head) > n {
                return 0;
            }
            self.cached_head = head;
        }
        n - self.tail.wrapping_sub(self.cached_head)
    }

    /// [`space`](Self::space) with the consumer's head read now, not only when the
    /// cached one says full: the room there is, for a caller that counts on it ahead
    /// of its pushes.
    pub fn space_now(&mut self) -> u32 {
        let n = self.mem.entries();
        let head = self.mem.head().load(Ordering::Acquire);
        if self.tail.wrapping_sub(head) > n {
            return 0;
        }
        self.cached_head = head;
        n - self.tail.wrapping_sub(head)
    }

    /// Writes an entry, visible to the consumer at the next [`publish`](Self::publish);
    /// gives it back when the ring is full.
    pub fn push(&mut self, e: M::Entry) -> Result<(), M::Entry> {
        if self.space() == 0 {
            return Err(e);
        }
        let i = self.tail & (self.mem.entries() - 1);
        // SAFETY: masked; the consumer released the slot (pairs 2 and 4).
        unsafe { self.mem.write(i, e) };
        self.tail = self.tail.wrapping_add(1);
        Ok(())
    }

    /// Publishes every pushed entry (release: pairs 1 and 3).
    pub fn publish(&mut self) {
        if self.tail != self.published {
            self.mem.tail().store(self.tail, Ordering::Release);
            self.published = self.tail;
        }
    }

    /// Published entries the consumer has not released, as its head says (SQ: not yet
    /// taken by the kernel; CQ: not yet reaped, for waiting on `min_complete`).
    pub fn unread(&self) -> u32 {
        let head = self.mem.head().load(Ordering::Acquire);
        self.tail.wrapping_sub(head).min(self.mem.entries())
    }

    /// Need-wakeup, application side (pair 5): after [`publish`](Self::publish) on the
    /// SQ, whether the poller sleeps and must be woken.
    pub fn needs_wakeup(&self) -> bool {
        M::Cell::fence(Ordering::SeqCst);
        self.flags().contains(SqFlags::NEED_WAKEUP)
    }

    /// The kernel's SQ flags.
    pub fn flags(&self) -> SqFlags {
        SqFlags::from_bits_truncate(self.mem.flags().load(Ordering::Acquire))
    }
}

/// Application side of the CQ: reaps completions.
pub struct CqConsumer<M: RingMem> {
    mem: M,
    head: u32,
    cached_tail: u32,
}

impl<M: RingMem> CqConsumer<M> {
    /// A consumer over fresh memory (both indices zero).
    pub fn new(mem: M) -> Self {
        CqConsumer {
            mem,
            head: 0,
            cached_tail: 0,
        }
    }

    /// The ring memory.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Completions ready to read (acquire: pair 3).
    pub fn ready(&mut self) -> u32 {
        self.cached_tail = self.mem.tail().load(Ordering::Acquire);
        self.cached_tail.wrapping_sub(self.head)
    }

    /// Copies out the next completion; [`release`](Self::release) hands the slots back.
    pub fn pop(&mut self) -> Option<M::Entry> {
        if self.head == self.cached_tail && self.ready() == 0 {
            return None;
        }
        let i = self.head & (self.mem.entries() - 1);
        // SAFETY: masked; between our head and the acquired tail (pair 3).
        let e = unsafe { self.mem.read(i) };
        self.head = self.head.wrapping_add(1);
        Some(e)
    }

    /// Releases every popped slot to the kernel (release: pair 4).
    pub fn release(&mut self) {
        self.mem.head().store(self.head, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::cell::UnsafeCell;
    use std::vec::Vec;

    /// Plain heap ring memory for single-threaded tests.
    struct Mem {
        head: AtomicU32,
        tail: AtomicU32,
        flags: AtomicU32,
        slots: Vec<UnsafeCell<u64>>,
    }

    impl Mem {
        fn new(n: u32) -> Mem {
            Mem {
                head: AtomicU32::new(0),
                tail: AtomicU32::new(0),
                flags: AtomicU32::new(0),
                slots: (0..n).map(|_| UnsafeCell::new(0)).collect(),
            }
        }
    }

    impl RingMem for &Mem {
        type Cell = AtomicU32;
        type Entry = u64;
        fn head(&self) -> &AtomicU32 {
            &self.head
        }
        fn tail(&self) -> &AtomicU32 {
            &self.tail
        }
        fn flags(&self) -> &AtomicU32 {
            &self.flags
        }
        fn entries(&self) -> u32 {
            self.slots.len() as u32
        }
        unsafe fn read(&self, i: u32) -> u64 {
            // SAFETY: single-threaded test; i is in range per the caller.
            unsafe { *self.slots[i as usize].get() }
        }
        unsafe fn write(&self, i: u32, e: u64) {
            // SAFETY: as above.
            unsafe { *self.slots[i as usize].get() = e }
        }
    }

    #[test]
    fn sq_round_trip_and_wrap() {
        let m = Mem::new(4);
        let (mut p, mut c) = (SqProducer::new(&m), SqConsumer::new(&m));
        for round in 0..5u64 {
            for k in 0..4 {
                p.push(round * 10 + k).unwrap();
            }
            assert!(p.push(99).is_err(), "full ring refuses");
            assert_eq!(c.ready().unwrap(), 0, "nothing before publish");
            p.publish();
            assert_eq!(c.ready().unwrap(), 4);
            assert_eq!(c.peek(1), Some(round * 10 + 1));
            assert_eq!(c.peek(4), None);
            c.consume(4);
            assert_eq!(p.unread(), 0);
        }
    }

    #[test]
    fn hostile_sq_tail_is_rejected() {
        let m = Mem::new(8);
        let mut c = SqConsumer::new(&m);
        m.tail.store(9, Ordering::Relaxed);
        assert_eq!(c.ready(), Err(RingError::TailOverrun { claimed: 9 }));
        m.tail.store(u32::MAX, Ordering::Relaxed);
        assert!(
            c.ready().is_err(),
            "a tail behind the head is an overrun too"
        );
        m.tail.store(8, Ordering::Relaxed);
        assert_eq!(c.ready(), Ok(8));
    }

    #[test]
    fn hostile_cq_head_means_full() {
        let m = Mem::new(4);
        let mut p = CqProducer::new(&m);
        for k in 0..4 {
            p.push(k).unwrap();
        }
        p.publish();
        m.head.store(1000, Ordering::Relaxed); // ran past the tail
        assert_eq!(p.space(), 0);
        assert!(p.push(5).is_err());
        m.head.store(2, Ordering::Relaxed); // honest again
        assert_eq!(p.space(), 2);
    }

    #[test]
    fn cq_round_trip() {
        let m = Mem::new(2);
        let (mut p, mut c) = (CqProducer::new(&m), CqConsumer::new(&m));
        for k in 0..10u64 {
            p.push(k).unwrap();
            p.publish();
            assert_eq!(c.pop(), Some(k));
            assert_eq!(c.pop(), None);
            c.release();
        }
    }

    #[test]
    fn need_wakeup_handshake() {
        let m = Mem::new(4);
        let (mut p, mut c) = (SqProducer::new(&m), SqConsumer::new(&m));
        assert!(c.prepare_sleep(), "idle: may sleep");
        p.push(1).unwrap();
        p.publish();
        assert!(p.needs_wakeup(), "the app sees the poller asleep");
        c.woken();
        assert!(!p.needs_wakeup());
        assert!(!c.prepare_sleep(), "work pending: must not sleep");
        assert!(!p.flags().contains(SqFlags::NEED_WAKEUP));
    }
}
