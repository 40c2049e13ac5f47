//! The application's side of a ring, shared by the [`Ring`](crate::Ring), the regions
//! it registered and the listens it started (each ends itself when dropped) and, with
//! the `tokio` feature, the [`AsyncRing`](crate::AsyncRing)'s futures: the mapped
//! rings and the library's bookkeeping of them, behind the lock of
//! [`lock`](crate::lock) (whose module says who waits where).
//!
//! Entries the library makes itself carry [`LIB_TAG`] in `user_data`; whoever reaps the
//! CQ files their completions by tag in `finished` (waking the future that waits for
//! them), so any caller may reap for all. Raw entries' completions go to the stash,
//! read by [`Ring::completions`](crate::Ring::completions).
//!
//! An entry nobody waits for any more is *parked* with what it must keep alive: a
//! batch whose future was dropped keeps its regions, registered and allocated, until
//! its last completion; a dropped region's DEREG_MR keeps its buffer. So the NIC
//! never writes into memory that was freed or handed back. What a parked entry
//! released is dropped after the lock goes ([`CoreGuard`](crate::lock::CoreGuard)).

use std::collections::VecDeque;
use std::ops::Range;
use std::task::Waker;

use krcore_abi::cqe::{Cqe, CqeFlags};
use krcore_abi::layout::{EnterArgs, EnterFlags};
use krcore_abi::ring::{CqConsumer, RawRing, SqProducer};
use krcore_abi::sqe::Sqe;

use crate::mmap::Mmap;
use crate::region::{leak, Buffer};
use crate::MemoryRegion;

/// The bit marking `user_data` of the library's own entries; raw entries keep it clear.
pub const LIB_TAG: u64 = 1 << 63;

/// What an entry nobody waits for keeps alive until its last completion.
#[derive(Default)]
pub(crate) struct Keep {
    /// A batch's regions.
    pub(crate) regions: Vec<MemoryRegion>,
    /// A deregistered region's buffer: freed when its DEREG_MR succeeded, leaked when
    /// it failed.
    pub(crate) buffer: Option<Buffer>,
}

/// What a lock holder left to do once the lock is let go: done when this drops.
pub(crate) struct Deferred {
    regions: Vec<MemoryRegion>,
    wake: Vec<Waker>,
}

impl Drop for Deferred {
    fn drop(&mut self) {
        for w in self.wake.drain(..) {
            w.wake();
        }
        // Each takes the lock again to deregister.
        self.regions.clear();
    }
}

/// Parked entries: how many completions they still owe, and what they keep.
struct Parked {
    owed: usize,
    keep: Keep,
}

/// The mapped rings and the library's bookkeeping of them.
pub(crate) struct Core {
    // The views go before the maps they point into.
    sq: SqProducer<RawRing<Sqe>>,
    cq: CqConsumer<RawRing<Cqe>>,
    pub(crate) sqpoll: bool,
    /// A thread waits in the kernel: it alone reaps until it comes back.
    pub(crate) in_kernel: bool,
    /// The last tag handed out.
    next_tag: u64,
    /// Library entries that found the SQ full, pushed before anything else next time.
    backlog: VecDeque<Sqe>,
    /// Completions of raw entries, until [`Ring::completions`](crate::Ring::completions).
    pub(crate) stash: VecDeque<Cqe>,
    /// Raw completions were stashed by a call other than the raw reader's own since it
    /// last looked: a reader asleep in epoll on the ring's fd would not know (the CQ
    /// it polls is empty again), so a NOP is sent to wake it ([`nudge`](Self::nudge)).
    raw_unseen: bool,
    /// That NOP is on its way.
    nudged: bool,
    /// Completions of the library's entries until their waiter takes them (few at a
    /// time: a scan costs less than hashing).
    finished: Vec<Cqe>,
    /// Who waits for which tags: woken when a reap files one of them.
    wakers: Vec<(Range<u64>, Waker)>,
    /// Abandoned entries, by the tags they span.
    parked: Vec<(Range<u64>, Parked)>,
    /// Listens whose [`Listener`](crate::Listener) was dropped before their last
    /// completion: each peer that still joins is disconnected.
    orphan_listens: Vec<u64>,
    /// Regions of parked entries that owe nothing more: dropped once unlocked.
    released: Vec<MemoryRegion>,
    /// Waiters whose completions were filed: woken once unlocked (a waker is the
    /// executor's code).
    to_wake: Vec<Waker>,
    _sq_map: Mmap,
    _cq_map: Mmap,
}

impl Drop for Core {
    fn drop(&mut self) {
        // The ring is going with entries in flight: what they keep may still be reached
        // (see `leak`). Regions leak their buffers as they drop, their ring being gone.
        for (_, p) in self.parked.drain(..) {
            if let Some(b) = p.keep.buffer {
                leak(b);
            }
            drop(p.keep.regions);
        }
    }
}

impl Core {
    /// The core over views `sq` and `cq` of `sq_map` and `cq_map`.
    pub(crate) fn new(
        sqpoll: bool,
        (sq, sq_map): (RawRing<Sqe>, Mmap),
        (cq, cq_map): (RawRing<Cqe>, Mmap),
    ) -> Core {
        Core {
            sq: SqProducer::new(sq),
            cq: CqConsumer::new(cq),
            sqpoll,
            in_kernel: false,
            next_tag: 0,
            backlog: VecDeque::new(),
            stash: VecDeque::new(),
            raw_unseen: false,
            nudged: false,
            finished: Vec::new(),
            wakers: Vec::new(),
            parked: Vec::new(),
            orphan_listens: Vec::new(),
            released: Vec::new(),
            to_wake: Vec::new(),
            _sq_map: sq_map,
            _cq_map: cq_map,
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

    /// Queues `sqe` after the backlog; whether it fit.
    pub(crate) fn push(&mut self, sqe: Sqe) -> bool {
        self.flush_backlog();
        self.backlog.is_empty() && self.sq.push(sqe).is_ok()
    }

    /// Queues `sqe`, in the backlog if the SQ is full: the next enter takes it.
    pub(crate) fn queue(&mut self, sqe: Sqe) {
        if !self.push(sqe) {
            self.backlog.push_back(sqe);
        }
    }

    /// Moves what the backlog holds into the SQ, as far as it fits.
    fn flush_backlog(&mut self) {
        while let Some(s) = self.backlog.front() {
            if self.sq.push(*s).is_err() {
                return;
            }
            self.backlog.pop_front();
        }
    }

    /// Free SQ slots, as the kernel's head says now (none while the backlog waits).
    pub(crate) fn sq_space(&mut self) -> u32 {
        self.flush_backlog();
        match self.backlog.is_empty() {
            true => self.sq.space_now(),
            false => 0,
        }
    }

    pub(crate) fn sq_flags(&self) -> krcore_abi::layout::SqFlags {
        self.sq.flags()
    }

    /// Makes pushed entries visible to the kernel side.
    #[cfg(any(test, feature = "bench-support"))]
    pub(crate) fn publish(&mut self) {
        self.sq.publish();
    }

    /// The arguments of an enter that submits what is queued (published now).
    pub(crate) fn enter_args(
        &mut self,
        min_complete: u32,
        flags: EnterFlags,
        timeout_us: u32,
    ) -> EnterArgs {
        self.flush_backlog();
        self.sq.publish();
        EnterArgs {
            to_submit: self.sq.unread(),
            min_complete,
            flags: flags.bits(),
            timeout_us,
            ..EnterArgs::default()
        }
    }

    /// Whether the SQ polling thread sleeps and must be woken (SQPOLL rings).
    pub(crate) fn sq_needs_wakeup(&self) -> bool {
        self.sq.needs_wakeup()
    }

    /// How many SQEs are published and not yet taken (what an SQPOLL submit counts).
    pub(crate) fn sq_unread(&mut self) -> u32 {
        self.flush_backlog();
        self.sq.publish();
        self.sq.unread()
    }

    /// Takes every ready completion: the library's are filed by tag (or count against
    /// the parked entry they belong to), raw ones go to the stash. Nothing while
    /// another thread waits in the kernel: that thread reaps when it comes back (see
    /// [`lock`](crate::lock)).
    pub(crate) fn reap(&mut self) {
        if self.in_kernel {
            return;
        }
        while let Some(c) = self.cq.pop() {
            self.file(c);
        }
        self.cq.release();
    }

    fn file(&mut self, c: Cqe) {
        let tag = c.user_data;
        if tag & LIB_TAG == 0 {
            self.stash.push_back(c);
            self.raw_unseen = true;
            return;
        }
        if let Some(i) = self.parked.iter().position(|(r, _)| r.contains(&tag)) {
            let p = &mut self.parked[i].1;
            if c.res < 0 {
                // A failed DEREG_MR: the kernel keeps the pages registered.
                if let Some(b) = p.keep.buffer.take() {
                    leak(b);
                }
            }
            p.owed -= 1;
            if p.owed == 0 {
                let (_, p) = self.parked.swap_remove(i);
                self.released.extend(p.keep.regions);
                // Deregistered: nothing reaches the buffer any more.
                drop(p.keep.buffer);
            }
            return;
        }
        if let Some(i) = self.orphan_listens.iter().position(|&t| t == tag) {
            if c.res >= 0 && c.flags & CqeFlags::ACCEPT.bits() != 0 {
                self.detach(Sqe::disconnect(0, c.res as u32), Keep::default());
            }
            if c.flags & CqeFlags::MORE.bits() == 0 {
                self.orphan_listens.swap_remove(i);
            }
            return;
        }
        self.finished.push(c);
        if let Some(i) = self.wakers.iter().position(|(r, _)| r.contains(&tag)) {
            let (_, w) = self.wakers.swap_remove(i);
            self.to_wake.push(w);
        }
    }

    /// The raw reader looked (it reads the stash, or is about to).
    pub(crate) fn raw_looked(&mut self) {
        self.raw_unseen = false;
        self.nudged = false;
    }

    /// Whether a NOP must go to wake a raw reader that may sleep on the ring's fd:
    /// raw completions were stashed behind its back and none went since. Queues it
    /// (parked, owing nothing to anyone); the caller submits.
    pub(crate) fn nudge(&mut self) -> bool {
        if !self.raw_unseen || self.nudged {
            return false;
        }
        self.nudged = true;
        self.detach(Sqe::nop(0), Keep::default());
        true
    }

    /// Queues `sqe` for the next submission with nobody to wait for it, keeping `keep`
    /// until it completed (the backlog takes it if the SQ is full).
    pub(crate) fn detach(&mut self, mut sqe: Sqe, keep: Keep) {
        let tags = self.tag(std::slice::from_mut(&mut sqe));
        self.queue(sqe);
        self.parked.push((tags, Parked { owed: 1, keep }));
    }

    /// Nobody accepts on the listen of `tag` any more: its filed completions are
    /// dropped (their peers disconnected) and so are those to come.
    pub(crate) fn orphan_listen(&mut self, tag: u64) {
        self.orphan_listens.push(tag);
        while let Some(c) = self.take_next(tag) {
            self.file(c);
        }
    }

    /// What waits for the lock to go: regions released under it (to drop) and
    /// waiters to wake.
    pub(crate) fn take_deferred(&mut self) -> Deferred {
        Deferred {
            regions: std::mem::take(&mut self.released),
            wake: std::mem::take(&mut self.to_wake),
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

    /// The entries of `tags` are abandoned: their completions are dropped as they come,
    /// and `regions` kept until the last has (released at once if none is owed).
    pub(crate) fn park(&mut self, tags: Range<u64>, regions: Vec<MemoryRegion>) {
        let before = self.finished.len();
        self.finished.retain(|c| !tags.contains(&c.user_data));
        let owed = (tags.end - tags.start) as usize - (before - self.finished.len());
        if owed == 0 {
            self.released.extend(regions);
        } else {
            let keep = Keep {
                regions,
                buffer: None,
            };
            self.parked.push((tags, Parked { owed, keep }));
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
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;
    use crate::bench_support::{detached_ring, handles, KernelSide};
    use crate::lock::lock;

    fn complete(kernel: &mut KernelSide, user_data: &[u64]) {
        for &u in user_data {
            kernel.cq.push(Cqe::ok(u, 0, 0)).expect("room");
        }
        kernel.cq.publish();
    }

    /// The next published SQE, taken as the kernel would.
    fn take_sqe(kernel: &mut KernelSide) -> Option<Sqe> {
        if kernel.sq.ready().expect("a sane SQ") == 0 {
            return None;
        }
        let s = kernel.sq.peek(0);
        kernel.sq.consume(1);
        s
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
        complete(&mut kernel, &[LIB_TAG | 1, 6]);
        core.reap();
        let raw: Vec<u64> = core.stash.iter().map(|c| c.user_data).collect();
        assert_eq!(
            raw,
            [5, 6],
            "raw ones stashed in order, the library's never"
        );
        let got = core.take_finished(&tags).expect("both filed");
        assert_eq!(
            got.iter().map(|c| c.user_data).collect::<Vec<_>>(),
            [LIB_TAG | 1, LIB_TAG | 2]
        );
        assert!(core.finished.is_empty());
    }

    /// While a thread waits in the kernel, nobody else reaps: the kernel's wait ends on
    /// completions its waiter has not read, so a reap elsewhere could leave it asleep.
    #[test]
    fn nobody_reaps_under_a_thread_in_the_kernel() {
        let (ring, mut kernel) = detached_ring(8);
        let mut core = lock(ring.shared());
        core.in_kernel = true;
        complete(&mut kernel, &[5]);
        core.reap();
        assert!(core.stash.is_empty());
        core.in_kernel = false;
        core.reap();
        assert_eq!(core.stash.len(), 1);
    }

    /// Raw entries pushed against a count of free slots that another thread's entry
    /// took meanwhile wait in the backlog, and the next enter submits them. (Before,
    /// the last one stayed behind until the next call of the ring, and a wait for its
    /// completion never ended.)
    #[test]
    fn a_raw_entry_is_never_stranded() {
        let (mut ring, mut kernel) = detached_ring(8);
        let shared = ring.shared().clone();
        let mut sq = ring.submission();
        for i in 0..8 {
            // SAFETY: NOPs name no memory.
            unsafe { sq.push(&Sqe::nop(i)) }.expect("room for 8");
        }
        // Another thread's region drops meanwhile: its DEREG_MR takes a slot.
        lock(&shared).detach(Sqe::dereg_mr(0, 9), Keep::default());
        drop(sq);
        let mut core = lock(&shared);
        let args = core.enter_args(0, EnterFlags::empty(), 0);
        assert_eq!(args.to_submit, 8);
        for _ in 0..8 {
            take_sqe(&mut kernel).expect("published");
        }
        let args = core.enter_args(0, EnterFlags::empty(), 0);
        assert_eq!(args.to_submit, 1, "the eighth raw entry, from the backlog");
        assert_eq!(take_sqe(&mut kernel).map(|s| s.user_data), Some(7));
    }

    /// A submission counts the room the kernel's head leaves now. (Before, a count
    /// cached while the SQ was filling said the ring was still full after the kernel
    /// had taken everything: `krcore serve` failed its first 16 pushes.)
    #[test]
    fn a_submission_sees_the_room_the_kernel_made() {
        let (mut ring, mut kernel) = detached_ring(8);
        let mut sq = ring.submission();
        for i in 0..4 {
            // SAFETY: NOPs name no memory.
            unsafe { sq.push(&Sqe::nop(i)) }.expect("room for 4");
        }
        drop(sq);
        lock(ring.shared()).enter_args(0, EnterFlags::empty(), 0);
        while take_sqe(&mut kernel).is_some() {}
        assert_eq!(ring.submission().space(), 8, "the kernel took all 4");
    }

    /// Raw completions another call stashed send one NOP, so a raw reader asleep on
    /// the ring's fd (which polls the CQ, empty again) wakes; the reader's own looks
    /// send none. Before, nothing went: the reader slept until some other completion.
    #[test]
    fn a_raw_reader_is_woken_for_what_others_stashed() {
        let (mut ring, mut kernel) = detached_ring(8);
        let shared = ring.shared().clone();
        complete(&mut kernel, &[5]);
        // Another call (a region's drop, say) reaps the raw completion into the stash.
        {
            let mut core = lock(&shared);
            core.reap();
        }
        let nop = take_sqe(&mut kernel).expect("a NOP went out");
        assert_eq!(nop.opcode, krcore_abi::opcode::Opcode::Nop as u8);
        assert_ne!(nop.user_data & LIB_TAG, 0, "the library's own, parked");
        // Another reap with the raw one still unread sends no second NOP.
        complete(&mut kernel, &[6]);
        lock(&shared).reap();
        assert!(take_sqe(&mut kernel).is_none(), "one NOP per unread stash");
        // The reader reads: both raw completions, and the NOP's completion is the
        // library's (parked, dropped).
        complete(&mut kernel, &[nop.user_data]);
        let got: Vec<u64> = ring.completions().map(|c| c.user_data).collect();
        assert_eq!(got, [5, 6]);
        assert!(
            take_sqe(&mut kernel).is_none(),
            "the reader's own look sends none"
        );
        assert!(
            lock(&shared).parked.is_empty(),
            "the NOP's completion settled it"
        );
    }

    /// A handle of one ring is refused by another, before anything is pushed: each
    /// ring numbers its handles from the same start, so the kernel would take it for
    /// one of its own (a PUBLISH of another region, a READ on another connection).
    /// Before, each of these went to the kernel.
    #[test]
    fn another_rings_handles_are_refused() {
        use krcore_abi::errno::Errno;
        let (a, _ka) = detached_ring(8);
        let (mut b, mut kb) = detached_ring(8);
        let (vqp, mr, remote) = handles(&a, 64);
        let foreign = |e: crate::Error| {
            assert_eq!(e.raw_os_error(), Some(Errno::EINVAL.0), "{e}");
            assert!(e.to_string().contains("another ring"), "{e}");
        };
        foreign(b.publish(&mr, "name").unwrap_err());
        foreign(b.import(&vqp, &mr.export().unwrap()).unwrap_err());
        let mut batch = crate::Batch::new();
        batch.read(&vqp, &mr, 0, &remote, 0, 8).unwrap();
        foreign(b.run(batch).unwrap_err());
        let (got, back) = b.run_timeout(vec![mr], std::time::Duration::from_secs(1), |batch, r| {
            batch.read(&vqp, &r[0], 0, &remote, 0, 8).map(|_| ())
        });
        foreign(got.unwrap_err());
        assert_eq!(back.len(), 1, "a refused run hands its regions back");
        // One batch naming two rings' handles runs on neither.
        let (own, _, _) = handles(&b, 64);
        let mut batch = crate::Batch::new();
        batch.read(&vqp, &back[0], 0, &remote, 0, 8).unwrap();
        batch.disconnect(own);
        foreign(b.run(batch).unwrap_err());
        foreign(b.disconnect(vqp).unwrap_err());
        b.publish_sq();
        assert!(take_sqe(&mut kb).is_none(), "nothing reached ring b's SQ");
    }

    /// A batch run with a timeout that gives up (here because the detached ring's
    /// enter fails at once; the guest suite waits out a real bound) parks its regions
    /// until the batch's completion comes.
    #[test]
    fn a_run_that_gives_up_parks_its_regions() {
        use std::time::Duration;
        let (mut ring, mut kernel) = detached_ring(8);
        let (vqp, mr, remote) = handles(&ring, 64);
        let (got, back) = ring.run_timeout(vec![mr], Duration::from_secs(5), |b, r| {
            b.read(&vqp, &r[0], 0, &remote, 0, 8).map(|_| ())
        });
        assert_eq!(
            got.unwrap_err().raw_os_error(),
            Some(krcore_abi::errno::Errno::ENOTTY.0)
        );
        assert!(
            back.is_empty(),
            "nothing comes back while the READ may still land"
        );
        let read = take_sqe(&mut kernel).expect("the READ was submitted");
        assert_eq!(lock(ring.shared()).parked.len(), 1);
        complete(&mut kernel, &[read.user_data]);
        lock(ring.shared()).reap();
        assert!(
            lock(ring.shared()).parked.is_empty(),
            "released with its completion"
        );
    }

    /// A region dropped on another thread while this one waits in the kernel waits its
    /// turn (lock let go), and ends when the waiter comes back and reaps its DEREG_MR.
    /// Dropped inside a loop over completions, a region deregisters without waiting.
    /// (Before, the ring's lock was held across the wait and by the iterator: the first
    /// spun until the wait ended, the second never ended.)
    #[test]
    fn regions_drop_while_the_ring_waits_or_iterates() {
        use std::sync::mpsc;
        use std::time::Duration;
        let (mut ring, mut kernel) = detached_ring(8);
        let mut lent = vec![0u8; 64];
        let borrowed = crate::Registered {
            ptr: lent.as_mut_ptr(),
            len: lent.len(),
            handle: 9,
            descriptor: 0,
            ring: std::sync::Arc::downgrade(ring.shared()),
            ring_id: ring.shared().id,
            live: true,
            _lent: std::marker::PhantomData,
        };
        let shared = ring.shared().clone();
        // This thread "waits in the kernel" (the detached ring's enters fail at once).
        lock(&shared).in_kernel = true;
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            s.spawn(move || {
                drop(borrowed);
                tx.send(()).unwrap();
            });
            // The drop pushed its DEREG_MR and waits for its turn, the lock let go.
            let dereg = loop {
                if let Some(s) = take_sqe(&mut kernel) {
                    break s;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            assert!(
                rx.recv_timeout(Duration::from_millis(50)).is_err(),
                "not before its completion"
            );
            complete(&mut kernel, &[dereg.user_data]);
            // Back from the kernel: reap, and wake whoever waits for a turn.
            let mut core = lock(&shared);
            core.in_kernel = false;
            core.reap();
            core.end_turn();
            drop(core);
            rx.recv_timeout(Duration::from_secs(5))
                .expect("the drop ended with its completion");
        });
        complete(&mut kernel, &[5, 6]);
        let (_, mut owned, _) = handles(&ring, 64);
        owned.region.ring = std::sync::Arc::downgrade(ring.shared());
        owned.region.live = true;
        let mut owned = Some(owned);
        let mut seen = Vec::new();
        for c in ring.completions() {
            drop(owned.take());
            seen.push(c.user_data);
        }
        assert_eq!(seen, [5, 6]);
        let dereg = take_sqe(&mut kernel).expect("the DEREG_MR, queued without a wait");
        assert_eq!(dereg.user_data & LIB_TAG, LIB_TAG);
        assert_eq!(
            lock(&shared).parked.len(),
            1,
            "its buffer kept until it completes"
        );
        complete(&mut kernel, &[dereg.user_data]);
        lock(&shared).reap();
        assert!(lock(&shared).parked.is_empty());
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
        let got = core
            .wait_tagged("batch", &sqes)
            .expect("waited for, not abandoned");
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
        let (_, mr, _) = handles(&ring, 64);
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
        let (_, mr, _) = handles(&ring, 64);
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
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "not under the lock");
        drop(core);
        let mut core = lock(ring.shared());
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "woken once the lock went, once though registered twice"
        );
        core.wake_on(&tags, &waker);
        core.forget_waker(tags.start);
        complete(&mut kernel, &[LIB_TAG | 1]);
        core.reap();
        assert!(core.has_finished(&tags));
        drop(core);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "a forgotten waiter is not woken"
        );
    }
}
