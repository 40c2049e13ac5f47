// SPDX-License-Identifier: GPL-2.0
//! One file's rings: the SQ and CQ areas the application maps, and the engine's ring
//! over them.

use core::sync::atomic::{AtomicBool, Ordering};

use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

use kernel::new_mutex;
use kernel::sync::{Arc, Mutex};

use crate::abi::cqe::Cqe;
use crate::abi::engine::{
    Completion, Creds, Delivered, Diverted, Groups, Inbox, Ring, RingStorage,
    Slot, WrId, MAX_GROUPS,
};
use crate::abi::layout::{SetupParams, OFF_CQ_RING, OFF_SQ_RING};
use crate::abi::ring::{CqConsumer, RawRing, SqProducer};
use crate::abi::sqe::Sqe;
use crate::device::UserCharge;
use crate::ring::mem::RingArea;
use crate::shim::{self, EventfdCtx, Vma};
use crate::engine::store::{KBuf, KStore};
use crate::ring::wait::WaitQueue;

/// MR and imported MR slots per ring.
const TABLE_SLOTS: usize = 64;
/// Virtual QP slots per ring: a server's ring holds one per client it accepted, as a
/// socket server holds a socket each (bounded device-wide by the links).
const VQP_SLOTS: usize = 1024;

pub(crate) type EngineRing = Ring<KStore, RawRing<Sqe>, RawRing<Cqe>>;

/// An eventfd reference, put on drop.
///
/// # Invariants
/// `0` came from `krcore_shim_eventfd_get` and holds one reference.
struct EventFd(*mut EventfdCtx);

// SAFETY: eventfd contexts are refcounted and signalled from any context.
unsafe impl Send for EventFd {}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: one reference held (invariant), put once.
        unsafe { shim::krcore_shim_eventfd_put(self.0) };
    }
}

/// A file's rings.
pub(crate) struct RingCtx {
    // Declared before the areas: fields drop in order, so the engine's ring, which
    // points into them, goes first.
    ring: KBox<EngineRing>,
    /// The application's side of the rings, driven by the kernel for the one-op ioctl
    /// (abi/src/compat.rs). Views into the same areas, so also declared before them.
    app_sq: SqProducer<RawRing<Sqe>>,
    app_cq: CqConsumer<RawRing<Cqe>>,
    areas: RingAreas,
    eventfd: Option<EventFd>,
    /// Where waiters for its completions sleep.
    waitq: Arc<WaitQueue>,
    /// CQEs produced when waiters and the eventfd were last told.
    signalled: u64,
    /// Its file was polled (poll, select or epoll): every new completion wakes the
    /// queue, whether or not anyone sleeps in the kernel.
    polled: bool,
    /// In-flight slots: the most completions that can be routed to the ring at once.
    inflight: usize,
    /// The ring charged to its user, whose slot its shares are counted under (see
    /// abi's `shares`): returned when the ring is freed, after everything it held.
    _user: UserCharge,
}

/// A ring's two areas, reference-counted: the ring holds them until its requests have
/// retired, the file's binding for mmap (which so needs no device lock), and each
/// mapping keeps the file, so an area outlives every view of it.
#[derive(Clone)]
pub(crate) struct RingAreas {
    sq: Arc<RingArea>,
    cq: Arc<RingArea>,
}

impl RingAreas {
    /// Maps the area at page offset `pgoff` into `vma`.
    pub(crate) fn mmap(&self, vma: *mut Vma, pgoff: usize, len: usize) -> Result {
        let area = match pgoff.checked_mul(PAGE_SIZE).map(|o| o as u64) {
            Some(OFF_SQ_RING) => &self.sq,
            Some(OFF_CQ_RING) => &self.cq,
            _ => return Err(EINVAL),
        };
        if len > area.size() {
            return Err(EINVAL);
        }
        area.map(vma)
    }
}

fn page_round(n: usize) -> usize {
    n.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

impl RingCtx {
    /// Sizes and allocates the rings for `p`, filling in what the kernel grants.
    /// Must not be called from an atomic context.
    pub(crate) fn setup(
        p: &mut SetupParams,
        id: u16,
        gen: u16,
        user: UserCharge,
    ) -> Result<KBox<RingCtx>> {
        // SAFETY: reads a module parameter.
        let max_idle = unsafe { shim::krcore_shim_max_sq_idle_ms() };
        p.normalize(size_of::<Sqe>(), size_of::<Cqe>(), max_idle)?;
        let gfp = GFP_KERNEL_ACCOUNT;
        let sq = Arc::new(RingArea::new(page_round(p.sq_off.map_len as usize))?, gfp)?;
        let cq = Arc::new(RingArea::new(page_round(p.cq_off.map_len as usize))?, gfp)?;
        sq.init_header(p.sq_entries);
        cq.init_header(p.cq_entries);
        let inflight = 2 * p.sq_entries as usize;
        // Everything a ring owns is charged to the caller's memory cgroup.
        let gfp = GFP_KERNEL_ACCOUNT;
        let storage = RingStorage::<KStore> {
            vqps: KBuf::filled(VQP_SLOTS, Slot::EMPTY, gfp)?,
            mrs: KBuf::filled(TABLE_SLOTS, Slot::EMPTY, gfp)?,
            rmrs: KBuf::filled(TABLE_SLOTS, Slot::EMPTY, gfp)?,
            inflight: KBuf::filled(inflight, Slot::EMPTY, gfp)?,
            // Room rule: larger than the in-flight table (see engine/ring_state.rs).
            overflow: KBuf::filled(inflight + p.sq_entries as usize, Cqe::default(), gfp)?,
            // What io_uring carried (engine/uring.rs): as many as the overflow list.
            diverted: KBuf::filled(inflight + p.sq_entries as usize, Diverted::default(), gfp)?,
        };
        // SAFETY: the views point into `sq` and `cq`, which the RingCtx holds references
        // to and drops after every view (field order).
        let (sq_ring, cq_ring, app_sq, app_cq) = unsafe {
            (
                sq.ring::<Sqe>(p.sq_entries),
                cq.ring::<Cqe>(p.cq_entries),
                sq.ring::<Sqe>(p.sq_entries),
                cq.ring::<Cqe>(p.cq_entries),
            )
        };
        let mut ring = KBox::new(Ring::new(id, gen, sq_ring, cq_ring, storage), gfp)?;
        ring.set_trace(crate::inspect::TRACE);
        // Its ports are its creator's, as a socket's are its binder's.
        // SAFETY: a plain read of the current task's credentials.
        let bind_low = unsafe { shim::krcore_shim_may_bind_low() };
        let who = user.identity();
        let mut groups = [0u32; MAX_GROUPS];
        let n = match who.groups {
            // SAFETY: as above; `groups` has room for MAX_GROUPS.
            true => unsafe { shim::krcore_shim_current_groups(groups.as_mut_ptr(), MAX_GROUPS as u32) },
            false => 0,
        };
        ring.set_creds(Creds {
            uid: who.uid,
            gid: who.gid,
            groups: Groups::new(&groups[..n as usize]),
            bind_low,
            user: user.slot(),
        });
        Ok(KBox::new(
            RingCtx {
                ring,
                app_sq: SqProducer::new(app_sq),
                app_cq: CqConsumer::new(app_cq),
                areas: RingAreas { sq, cq },
                eventfd: None,
                waitq: WaitQueue::new()?,
                signalled: 0,
                polled: false,
                inflight,
                _user: user,
            },
            gfp,
        )?)
    }

    /// Another reference to the ring's areas.
    pub(crate) fn areas(&self) -> RingAreas {
        self.areas.clone()
    }

    /// Whether an eventfd is registered.
    pub(crate) fn has_eventfd(&self) -> bool {
        self.eventfd.is_some()
    }

    /// Registers the eventfd `fd` of the calling process (-1: none).
    pub(crate) fn set_eventfd(&mut self, fd: i32) -> Result {
        self.eventfd = None;
        if fd >= 0 {
            // SAFETY: plain lookup in the calling process's file table.
            let ctx = unsafe { shim::krcore_shim_eventfd_get(fd) };
            // SAFETY: pointer inspection only.
            let err = unsafe { shim::krcore_shim_ptr_err(ctx.cast::<core::ffi::c_void>()) };
            if err != 0 {
                return Err(Error::from_errno(err as i32));
            }
            // INVARIANT: one reference from eventfd_ctx_fdget.
            self.eventfd = Some(EventFd(ctx));
        }
        Ok(())
    }

    /// Tells the eventfd, and the waiters if `waiters` (someone on the device sleeps),
    /// that the ring gained completions, if it did since the last time. Called under the
    /// device lock, under which a waiter reads the generation before it sleeps.
    pub(crate) fn notify(&mut self, waiters: bool) {
        let produced = self.ring.stats().completed;
        if produced == self.signalled {
            return;
        }
        self.signalled = produced;
        if waiters || self.polled {
            self.waitq.wake();
        }
        if let Some(e) = &self.eventfd {
            // SAFETY: live reference (invariant of EventFd).
            unsafe { shim::krcore_shim_eventfd_signal(e.0) };
        }
    }

    /// Wakes whoever waits on the ring, in the kernel or on its eventfd, with no new
    /// completion: the device's network work is done, so an entry that waited for it
    /// may be taken now.
    pub(crate) fn wake(&mut self) {
        self.waitq.wake();
        if let Some(e) = &self.eventfd {
            // SAFETY: live reference (invariant of EventFd).
            unsafe { shim::krcore_shim_eventfd_signal(e.0) };
        }
    }

    /// A poll of the ring's file (through `pt`): waits on its queue, woken by every new
    /// completion from now on. Whether completions are ready, and whether this was its
    /// first poll (then the device counts it among the listeners that keep the CQ
    /// armed, as an eventfd).
    pub(crate) fn poll(&mut self, file: *mut shim::FileC, pt: *mut shim::PollTable) -> (bool, bool) {
        let first = self.keep_armed();
        self.waitq.poll_wait(file, pt);
        (self.ring.cq_unread() > 0, first)
    }

    /// From now on, completions are routed with nobody waiting in the kernel: its file
    /// was polled, or io_uring carries its entries (whose completions nobody else
    /// routes). Whether this is the first time (then the device counts it among the
    /// listeners that keep the CQ armed, until the file is closed).
    pub(crate) fn keep_armed(&mut self) -> bool {
        !core::mem::replace(&mut self.polled, true)
    }

    /// Whether its file was ever polled.
    pub(crate) fn polled(&self) -> bool {
        self.polled
    }

    /// The ring's wait queue.
    pub(crate) fn waitq(&self) -> Arc<WaitQueue> {
        self.waitq.clone()
    }

    /// The engine's ring.
    pub(crate) fn engine(&mut self) -> &mut EngineRing {
        &mut self.ring
    }

    /// Hands every CQE owed to an io_uring command back to io_uring (abi's
    /// engine/uring.rs), completed in its task's context; but `keep`'s, which is
    /// returned for its caller to complete itself.
    pub(crate) fn hand_back(&mut self, keep: u64) -> Option<Cqe> {
        let h = self.ring.hand_back(keep, |sink, res, extra| {
            // SAFETY: `sink` is a command io_uring issued to this ring's file and has not
            // seen completed (the engine diverts one CQE per taken entry, once); io_uring
            // holds the file, so the command and the module outlive the call.
            unsafe { shim::krcore_shim_uring_complete(sink as *mut core::ffi::c_void, res, extra) };
        });
        if h.dropped != 0 {
            kernel::pr_warn!("io_uring command given a second CQE: dropped\n");
        }
        h.kept
    }

    /// One-op ioctl, application side: pushes `sqe` into the SQ and publishes it.
    /// `false` when the SQ is full.
    pub(crate) fn app_push(&mut self, sqe: Sqe) -> bool {
        let ok = self.app_sq.push(sqe).is_ok();
        self.app_sq.publish();
        ok
    }

    /// One-op ioctl, application side: takes the next CQE, releasing its slot.
    pub(crate) fn app_pop(&mut self) -> Option<Cqe> {
        let c = self.app_cq.pop();
        self.app_cq.release();
        c
    }
}

/// A ring as its device shares it: its context under its mutex, and the completions
/// routed to it that it has not taken in yet (its *inbox*, a leaf lock), so routing,
/// which runs under a QP's lock, never takes a ring's.
#[pin_data]
pub(crate) struct RingCell {
    /// Its slot in the device's table.
    pub(crate) index: u16,
    #[pin]
    pub(crate) ctx: Mutex<KBox<RingCtx>>,
    /// Its inbox (abi's engine/route.rs), which also holds its mark for the router.
    #[pin]
    inbox: Mutex<Inbox<KStore>>,
    /// A hint that the inbox may hold completions, so an enter with nothing routed to
    /// its ring skips the inbox's lock. Set after each delivery (a swap, as the loom
    /// model's marks), cleared before a drain; a delivery it misses is taken in by the
    /// router's flush, which always drains.
    mail: AtomicBool,
}

impl RingCell {
    /// Shares `ctx`, the ring in slot `index` of generation `gen`.
    pub(crate) fn new(ctx: KBox<RingCtx>, index: u16, gen: u16) -> Result<Arc<RingCell>> {
        // Each in-flight request is routed once, so the inbox never holds more (a
        // listen's nudges are gathered as bits beside the queue).
        let inbox = Inbox::new(index, gen, KBuf::filled(
            ctx.inflight,
            (0, Completion::Done),
            GFP_KERNEL_ACCOUNT,
        )?);
        Arc::pin_init(
            pin_init!(RingCell {
                index,
                ctx <- new_mutex!(ctx, "krcore_ring"),
                inbox <- new_mutex!(inbox, "krcore_inbox"),
                mail: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )
    }

    /// Routes completion `c` of request `id` here. Any lock but the ring's may be held.
    pub(crate) fn deliver(&self, id: WrId, c: Completion) {
        if self.inbox.lock().deliver(id, c) == Delivered::Full {
            // Unreachable (see `new`); a completion lost would leave the ring busy
            // forever, so say it.
            pr_err!("ring {}: completion inbox full\n", self.index);
        }
        self.mail.swap(true, Ordering::AcqRel);
    }

    /// Marks the ring for the router's attention (its file closed).
    pub(crate) fn touch(&self) {
        self.inbox.lock().mark();
    }

    /// Whether completions were delivered (or the ring touched) since the last call.
    pub(crate) fn take_dirty(&self) -> bool {
        self.inbox.lock().take_mark()
    }

    /// Takes the delivered completions into the ring (whose lock the caller holds, as
    /// `ctx`). Returns how many.
    pub(crate) fn absorb(&self, ctx: &mut RingCtx) -> usize {
        let n = self.take_in(ctx);
        // What io_uring carried goes back to it, not to the CQ.
        ctx.hand_back(0);
        n
    }

    /// [`absorb`](Self::absorb) but for the hand-back: what io_uring carried stays in
    /// the engine's diverted list for the caller.
    pub(crate) fn take_in(&self, ctx: &mut RingCtx) -> usize {
        self.mail.swap(false, Ordering::AcqRel);
        self.inbox.lock().drain_into(ctx.engine())
    }

    /// [`absorb`](Self::absorb) if anything was delivered since the last one (an
    /// enter's fast path; the router's flush takes in anything this misses).
    pub(crate) fn absorb_mail(&self, ctx: &mut RingCtx) -> usize {
        if !self.mail.load(Ordering::Acquire) {
            return 0;
        }
        self.absorb(ctx)
    }
}
