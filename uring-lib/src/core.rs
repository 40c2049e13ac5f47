//! The application's side of a ring, shared by the [`Ring`](crate::Ring), the regions
//! it registered (a region deregisters itself when dropped) and, with the `tokio`
//! feature, the [`AsyncRing`](crate::AsyncRing)'s futures.
//!
//! Everything here runs under the one mutex of [`Shared`]. Entries the library makes
//! itself carry [`LIB_TAG`] in `user_data`; whoever reaps the CQ files their completions
//! by tag in `finished` (waking the future that waits for them), so any caller may reap
//! for all. Raw entries' completions go to the stash, read by
//! [`Ring::completions`](crate::Ring::completions).
//!
//! A batch whose future was dropped before its completions came is *parked*: its
//! regions stay here, registered and allocated, until its last completion is reaped,
//! and are dropped (deregistered) after the lock is let go, by [`CoreGuard`]. So the
//! NIC never writes into memory that was freed or handed back.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Waker;

use krcore_abi::cqe::Cqe;
use krcore_abi::ioctl::{IOC_ENTER, IOC_ENTER_VALUE};
use krcore_abi::layout::{EnterArgs, EnterFlags};
use krcore_abi::ring::{CqConsumer, RawRing, SqProducer};
use krcore_abi::sqe::Sqe;

use crate::mmap::Mmap;
use crate::{Device, Error, MemoryRegion};

/// The bit marking `user_data` of the library's own entries; raw entries keep it clear.
pub const LIB_TAG: u64 = 1 << 63;

/// The core as the ring and its regions hold it.
pub(crate) type Shared = Arc<CoreLock>;

/// The core behind the ring's lock. Every push, submit and reap takes it, so it is
/// cheaper than std's mutex where that counts: taken with one atomic exchange and given
/// back with a plain release store (std's gives back with a second exchange, to find
/// sleepers). Only a region dropped on another thread, or a future of another task,
/// ever finds it taken; they wait yielding, for as long as one call of the ring.
pub(crate) struct CoreLock {
    locked: AtomicBool,
    core: UnsafeCell<Core>,
}

// SAFETY: the core is reached only through a `CoreGuard`, one at a time (the lock);
// `Core` itself may move between threads.
unsafe impl Sync for CoreLock {}
// SAFETY: as above.
unsafe impl Send for CoreLock {}

impl CoreLock {
    /// The core, unlocked.
    pub(crate) fn new(core: Core) -> CoreLock {
        CoreLock {
            locked: AtomicBool::new(false),
            core: UnsafeCell::new(core),
        }
    }
}

/// Locks the core.
pub(crate) fn lock(shared: &CoreLock) -> CoreGuard<'_> {
    while shared.locked.swap(true, Ordering::Acquire) {
        while shared.locked.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
    }
    CoreGuard(shared)
}

/// The core, locked. Regions released while it was held (a parked batch's, once its
/// completions came) are dropped after the lock goes: dropping one deregisters it,
/// which takes the lock again. A panic under the lock gives it back on unwinding (the
/// core's state is indices and tables every step leaves consistent).
pub(crate) struct CoreGuard<'a>(&'a CoreLock);

impl Deref for CoreGuard<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        // SAFETY: the lock is held by this guard alone.
        unsafe { &*self.0.core.get() }
    }
}

impl DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        // SAFETY: as above, and `&mut self` makes the reference unique.
        unsafe { &mut *self.0.core.get() }
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        let released = std::mem::take(&mut self.released);
        self.0.locked.store(false, Ordering::Release);
        drop(released);
    }
}

/// A batch abandoned by its future: its regions, and how many completions it still owes.
struct Parked {
    owed: usize,
    regions: Vec<MemoryRegion>,
}

/// The mapped rings and the library's bookkeeping of them.
pub(crate) struct Core {
    // The views go before the maps they point into, the maps before the file.
    sq: SqProducer<RawRing<Sqe>>,
    cq: CqConsumer<RawRing<Cqe>>,
    sqpoll: bool,
    /// The module serves `IOC_ENTER_VALUE` (cleared if it answers `ENOTTY`: one built
    /// before it existed).
    enter_by_value: bool,
    pub(crate) enters: u64,
    /// The last tag handed out.
    next_tag: u64,
    /// Completions of raw entries met while reaping for the library's own.
    stash: VecDeque<Cqe>,
    /// Completions of the library's entries until their waiter takes them (few at a
    /// time: a scan costs less than hashing).
    finished: Vec<Cqe>,
    /// Who waits for which tags: woken when a reap files one of them.
    wakers: Vec<(Range<u64>, Waker)>,
    /// Abandoned batches, by their first tag, with the range they span.
    parked: Vec<(Range<u64>, Parked)>,
    /// Regions of parked batches that owe nothing more: dropped once unlocked.
    released: Vec<MemoryRegion>,
    _sq_map: Mmap,
    _cq_map: Mmap,
    pub(crate) dev: Arc<Device>,
}

impl Core {
    /// The core over views `sq` and `cq` of `sq_map` and `cq_map`.
    pub(crate) fn new(
        dev: Arc<Device>,
        sqpoll: bool,
        (sq, sq_map): (RawRing<Sqe>, Mmap),
        (cq, cq_map): (RawRing<Cqe>, Mmap),
    ) -> Core {
        Core {
            sq: SqProducer::new(sq),
            cq: CqConsumer::new(cq),
            sqpoll,
            enter_by_value: true,
            enters: 0,
            next_tag: 0,
            stash: VecDeque::new(),
            finished: Vec::new(),
            wakers: Vec::new(),
            parked: Vec::new(),
            released: Vec::new(),
            _sq_map: sq_map,
            _cq_map: cq_map,
            dev,
        }
    }

    /// Tags `sqes` with fresh library tags; returns the range.
    pub(crate) fn tag(&mut self, sqes: &mut [Sqe]) -> Range<u64> {
        let first = LIB_TAG | (self.next_tag + 1);
        self.next_tag += sqes.len() as u64;
        for (i, s) in sqes.iter_mut().enumerate() {
            s.user_data = first + i as u64;
        }
        first..first + sqes.len() as u64
    }

    pub(crate) fn push(&mut self, sqe: Sqe) -> bool {
        self.sq.push(sqe).is_ok()
    }

    pub(crate) fn sq_space(&mut self) -> u32 {
        self.sq.space()
    }

    pub(crate) fn sq_flags(&self) -> krcore_abi::layout::SqFlags {
        self.sq.flags()
    }

    /// Makes pushed entries visible to the kernel side.
    #[cfg(any(test, feature = "bench-support"))]
    pub(crate) fn publish(&mut self) {
        self.sq.publish();
    }

    /// See [`Ring::submit`](crate::Ring::submit).
    pub(crate) fn submit(&mut self) -> Result<u32, Error> {
        if self.sqpoll {
            self.sq.publish();
            let n = self.sq.unread();
            if self.sq.needs_wakeup() {
                self.enter(0, EnterFlags::SQ_WAKEUP, 0)?;
            }
            return Ok(n);
        }
        self.enter(0, EnterFlags::empty(), 0)
    }

    /// See [`Ring::submit_and_wait`](crate::Ring::submit_and_wait); with `timeout_us`
    /// (non-zero) the wait ends there: `ETIME` if fewer than `want` are ready then.
    pub(crate) fn submit_and_wait(&mut self, want: u32, timeout_us: u32) -> Result<u32, Error> {
        self.sq.publish();
        let wake = if self.sqpoll && self.sq.needs_wakeup() {
            EnterFlags::SQ_WAKEUP
        } else {
            EnterFlags::empty()
        };
        let bound = match timeout_us {
            0 => None,
            t => Some(std::time::Instant::now() + std::time::Duration::from_micros(t as u64)),
        };
        let mut flags = EnterFlags::GETEVENTS | wake;
        let mut taken = None;
        // The kernel returns early when a signal or task work (io_uring's, for one) is
        // pending, as io_uring_enter does: enter again until `want` are visible.
        loop {
            let ready = self.cq.ready() as usize + self.stash.len();
            if taken.is_some() && ready >= want as usize {
                return Ok(taken.unwrap_or(0));
            }
            let left = match bound {
                None => 0,
                Some(b) => match b.checked_duration_since(std::time::Instant::now()) {
                    Some(d) if !d.is_zero() => (d.as_micros() as u32).max(1),
                    _ => return Err(Error::errno("wait", krcore_abi::errno::Errno::ETIME)),
                },
            };
            let min = want - (self.stash.len().min(want as usize) as u32);
            let timed = if left > 0 {
                EnterFlags::TIMEOUT
            } else {
                EnterFlags::empty()
            };
            match self.enter(min, flags | timed, left) {
                Ok(n) => {
                    taken.get_or_insert(n);
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => {
                    taken.get_or_insert(0);
                }
                Err(e) => return Err(e),
            }
            flags = EnterFlags::GETEVENTS;
        }
    }

    pub(crate) fn enter(
        &mut self,
        min_complete: u32,
        flags: EnterFlags,
        timeout_us: u32,
    ) -> Result<u32, Error> {
        self.enter_with(min_complete, flags, timeout_us, true)
    }

    pub(crate) fn enter_with(
        &mut self,
        min_complete: u32,
        flags: EnterFlags,
        timeout_us: u32,
        by_value: bool,
    ) -> Result<u32, Error> {
        self.enters += 1;
        self.sq.publish();
        let args = EnterArgs {
            to_submit: self.sq.unread(),
            min_complete,
            flags: flags.bits(),
            timeout_us,
            ..EnterArgs::default()
        };
        // By value when the arguments pack (always, for an unbounded wait on a ring
        // this library sets up): nothing for the kernel to copy in.
        if let Some(v) = args.pack().filter(|_| by_value && self.enter_by_value) {
            // SAFETY: IOC_ENTER_VALUE's argument is a value, not an address.
            match unsafe { self.dev.ioctl_raw(IOC_ENTER_VALUE, v as usize) } {
                Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => self.enter_by_value = false,
                r => return Ok(r.map_err(|e| e.context("enter"))? as u32),
            }
        }
        // SAFETY: `args` is an EnterArgs the kernel only reads.
        let n = unsafe {
            self.dev
                .ioctl_raw(IOC_ENTER, &args as *const EnterArgs as usize)
        }
        .map_err(|e| e.context("enter"))?;
        Ok(n as u32)
    }

    /// Takes every ready completion: the library's are filed by tag (or count against
    /// the parked batch they belong to), raw ones go to the stash.
    pub(crate) fn reap(&mut self) {
        while let Some(c) = self.cq.pop() {
            self.file(c);
        }
        self.cq.release();
    }

    fn file(&mut self, c: Cqe) {
        let tag = c.user_data;
        if tag & LIB_TAG == 0 {
            self.stash.push_back(c);
            return;
        }
        if let Some(i) = self.parked.iter().position(|(r, _)| r.contains(&tag)) {
            let p = &mut self.parked[i].1;
            p.owed -= 1;
            if p.owed == 0 {
                let (_, p) = self.parked.swap_remove(i);
                self.released.extend(p.regions);
            }
            return;
        }
        self.finished.push(c);
        if let Some(i) = self.wakers.iter().position(|(r, _)| r.contains(&tag)) {
            self.wakers.swap_remove(i).1.wake();
        }
    }

    /// The completions of `tags` if every one has come, taken out of `finished`.
    pub(crate) fn take_finished(&mut self, tags: &Range<u64>) -> Option<Vec<Cqe>> {
        if !self.has_finished(tags) {
            return None;
        }
        let mut got: Vec<Cqe> = Vec::with_capacity(tags.clone().count());
        self.finished.retain(|c| {
            let mine = tags.contains(&c.user_data);
            if mine {
                got.push(*c);
            }
            !mine
        });
        got.sort_by_key(|c| c.user_data);
        Some(got)
    }

    /// Whether every completion of `tags` has come.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn has_finished(&self, tags: &Range<u64>) -> bool {
        let n = self
            .finished
            .iter()
            .filter(|c| tags.contains(&c.user_data))
            .count();
        n as u64 == tags.end - tags.start
    }

    /// Wakes `waker` when a completion of `tags` is filed.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn wake_on(&mut self, tags: &Range<u64>, waker: &Waker) {
        match self.wakers.iter_mut().find(|(r, _)| r == tags) {
            Some((_, w)) => w.clone_from(waker),
            None => self.wakers.push((tags.clone(), waker.clone())),
        }
    }

    /// Nobody waits for the tags starting at `first` any more.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn forget_waker(&mut self, first: u64) {
        self.wakers.retain(|(r, _)| r.start != first);
    }

    /// The batch of `tags` is abandoned: its completions are dropped as they come, and
    /// `regions` kept until the last has (released at once if none is owed).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn park(&mut self, tags: Range<u64>, regions: Vec<MemoryRegion>) {
        let before = self.finished.len();
        self.finished.retain(|c| !tags.contains(&c.user_data));
        let owed = (tags.end - tags.start) as usize - (before - self.finished.len());
        if owed == 0 {
            self.released.extend(regions);
        } else {
            self.parked.push((tags, Parked { owed, regions }));
        }
    }

    /// Pushes `sqes` (tagged), submits, and waits until each has completed; returns
    /// their completions in order.
    pub(crate) fn wait_tagged(
        &mut self,
        op: &'static str,
        sqes: &[Sqe],
    ) -> Result<Vec<Cqe>, Error> {
        let tags = match (sqes.first(), sqes.last()) {
            (Some(f), Some(l)) => f.user_data..l.user_data + 1,
            _ => return Ok(Vec::new()),
        };
        let mut pushed = 0;
        loop {
            while pushed < sqes.len() && self.push(sqes[pushed]) {
                pushed += 1;
            }
            match self.submit_and_wait(1, 0) {
                Ok(_) => {}
                // Nothing of the batch is in the SQ, or the device is gone and its QPs
                // with it: nothing can still use the memory the batch borrows.
                Err(e) if pushed == 0 || e.raw_os_error() == Some(libc::ENODEV) => {
                    return Err(e.context(op))
                }
                // Entries are queued or in flight: the batch's borrows last until each
                // completed (returning now would let the caller free memory the NIC
                // still writes), so the wait goes on.
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
            self.reap();
            if let Some(got) = self.take_finished(&tags) {
                return Ok(got);
            }
        }
    }

    /// Takes the oldest filed completion of `tag` (an entry that completes more than
    /// once files each under its one tag).
    pub(crate) fn take_next(&mut self, tag: u64) -> Option<Cqe> {
        let i = self.finished.iter().position(|c| c.user_data == tag)?;
        Some(self.finished.remove(i))
    }

    /// Whether a completion of `tag` is filed.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn has_next(&self, tag: u64) -> bool {
        self.finished.iter().any(|c| c.user_data == tag)
    }

    /// Drops every filed completion of `tag` (an entry nobody waits on any more).
    pub(crate) fn drop_tag(&mut self, tag: u64) {
        self.finished.retain(|c| c.user_data != tag);
    }

    /// Submits, then waits until a completion of `tag` is filed and takes it: at most
    /// `timeout_us` (0: no bound; then `ETIME`).
    pub(crate) fn wait_next(
        &mut self,
        op: &'static str,
        tag: u64,
        timeout_us: u32,
    ) -> Result<Cqe, Error> {
        let bound = std::time::Instant::now() + std::time::Duration::from_micros(timeout_us as u64);
        loop {
            self.reap();
            if let Some(c) = self.take_next(tag) {
                return Ok(c);
            }
            let left = match timeout_us {
                0 => 0,
                _ => match bound.checked_duration_since(std::time::Instant::now()) {
                    Some(d) if !d.is_zero() => (d.as_micros() as u32).max(1),
                    _ => return Err(Error::errno(op, krcore_abi::errno::Errno::ETIME)),
                },
            };
            self.submit_and_wait(1, left).map_err(|e| e.context(op))?;
        }
    }

    /// Runs one control entry tagged by the library and waits for its completion,
    /// which fails the call if it failed.
    pub(crate) fn control(&mut self, op: &'static str, mut sqe: Sqe) -> Result<Cqe, Error> {
        self.tag(std::slice::from_mut(&mut sqe));
        let c = self.wait_tagged(op, &[sqe])?.pop().expect("one completion");
        if c.res < 0 {
            return Err(Error::failed(op, &c));
        }
        Ok(c)
    }

    /// The next raw completion (the library's are filed on the way).
    pub(crate) fn next_raw(&mut self) -> Option<Cqe> {
        if let Some(c) = self.stash.pop_front() {
            return Some(c);
        }
        loop {
            let c = self.cq.pop()?;
            if c.user_data & LIB_TAG == 0 {
                return Some(c);
            }
            self.file(c);
        }
    }

    /// Gives the CQ slots read so far back to the kernel.
    pub(crate) fn release_cq(&mut self) {
        self.cq.release();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;
    use crate::bench_support::{detached_ring, handles, KernelSide};

    fn complete(kernel: &mut KernelSide, user_data: &[u64]) {
        for &u in user_data {
            kernel.cq.push(Cqe::ok(u, 0, 0)).expect("room");
        }
        kernel.cq.publish();
    }

    #[test]
    fn library_completions_are_filed_and_raw_ones_stashed() {
        let (ring, mut kernel) = detached_ring(8);
        let mut core = lock(ring.shared());
        let mut sqes = [Sqe::nop(0); 2];
        let tags = core.tag(&mut sqes);
        assert_eq!(tags, LIB_TAG | 1..LIB_TAG | 3);
        complete(&mut kernel, &[LIB_TAG | 2, 5]);
        core.reap();
        assert!(
            core.take_finished(&tags).is_none(),
            "one of two is not enough"
        );
        assert_eq!(core.next_raw().map(|c| c.user_data), Some(5));
        complete(&mut kernel, &[LIB_TAG | 1, 6]);
        // Raw iteration files the library's completions it meets, never returns them.
        assert_eq!(core.next_raw().map(|c| c.user_data), Some(6));
        assert_eq!(core.next_raw(), None);
        let got = core.take_finished(&tags).expect("both filed");
        assert_eq!(
            got.iter().map(|c| c.user_data).collect::<Vec<_>>(),
            [LIB_TAG | 1, LIB_TAG | 2]
        );
        assert!(core.finished.is_empty());
    }

    /// A batch whose entries are queued is waited for to its last completion, even
    /// when an enter fails: returning would end its borrows while the NIC may still use
    /// them. (Before, the first failed enter returned.)
    #[test]
    fn a_batch_is_waited_for_whatever_an_enter_says() {
        let (ring, mut kernel) = detached_ring(8);
        let mut core = lock(ring.shared());
        let mut sqes = [Sqe::nop(0); 2];
        core.tag(&mut sqes);
        // Every enter fails here (the ring's file is /dev/null: ENOTTY); the entries'
        // completions come all the same.
        complete(&mut kernel, &[LIB_TAG | 1, LIB_TAG | 2]);
        let got = core.wait_tagged("batch", &sqes).expect("waited for, not abandoned");
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn a_parked_batch_keeps_its_regions_until_its_last_completion() {
        let (ring, mut kernel) = detached_ring(8);
        let mut core = lock(ring.shared());
        let mut sqes = [Sqe::nop(0); 3];
        let tags = core.tag(&mut sqes);
        // One completion came before the future was dropped.
        complete(&mut kernel, &[LIB_TAG | 1]);
        core.reap();
        let (_, mr, _) = handles(64);
        core.park(tags, vec![mr]);
        assert!(core.finished.is_empty(), "what came is dropped");
        assert_eq!(core.parked[0].1.owed, 2);
        complete(&mut kernel, &[LIB_TAG | 3]);
        core.reap();
        assert!(core.released.is_empty(), "one completion is still owed");
        complete(&mut kernel, &[LIB_TAG | 2]);
        core.reap();
        assert!(core.parked.is_empty());
        assert_eq!(core.released.len(), 1, "released with its last completion");
        drop(core);
        assert!(
            lock(ring.shared()).released.is_empty(),
            "dropped once unlocked"
        );
        // A batch that owes nothing is released at once.
        let mut core = lock(ring.shared());
        let (_, mr, _) = handles(64);
        core.park(LIB_TAG | 9..LIB_TAG | 9, vec![mr]);
        assert_eq!(core.released.len(), 1);
    }

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_waiter_is_woken_by_whoever_files_its_completion() {
        let (ring, mut kernel) = detached_ring(8);
        let mut core = lock(ring.shared());
        let mut sqes = [Sqe::nop(0); 2];
        let tags = core.tag(&mut sqes);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        core.wake_on(&tags, &waker);
        core.wake_on(&tags, &waker);
        complete(&mut kernel, &[7]);
        core.reap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "a raw completion wakes nobody"
        );
        complete(&mut kernel, &[LIB_TAG | 2]);
        core.reap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "woken once, registered once"
        );
        core.wake_on(&tags, &waker);
        core.forget_waker(tags.start);
        complete(&mut kernel, &[LIB_TAG | 1]);
        core.reap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "a forgotten waiter is not woken"
        );
        assert!(core.has_finished(&tags));
    }
}
