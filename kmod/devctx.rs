// SPDX-License-Identifier: GPL-2.0
//! A device context: one RDMA device's verbs objects, the engine's accounting of its
//! physical QPs, its exported MRs, its message links, and the rings bound to it, all
//! under one mutex.
//!
//! # Lock order
//!
//! krcore's locks are always taken in this order and never the other way:
//!
//! 1. a file's `setup_lock` (file.rs): serializes IOC_SETUP on one file;
//! 2. the registry's `devices` mutex (device.rs): which devices exist;
//! 3. a device's `state` mutex (here): serializes every engine call for the device
//!    (submission, completion routing, ring close), as verify/'s loom models assume;
//!
//! and the registry's `users` mutex (device.rs, the per-user quotas) is a leaf: taken
//! with none of the others held, and nothing taken under it. The CQ event work
//! (cq_events.rs) takes the device's `state` mutex alone; a device's removal waits for
//! that work only after releasing the mutex. A ring's wait queue (wait.rs) is woken
//! under the mutex and slept on with no lock held.
//!
//! None is held while user memory is touched: ioctl arguments are copied in before and
//! out after (the device query collects its rows first), REG_MR pins with no lock held
//! (the engine's `register` protocol; the registration is counted so the device's
//! removal waits for it instead of freeing the PD under it), and mmap takes no lock at
//! all (a file's ring areas are reference-counted and reached through its binding).
//! None is held across a wait for a peer either, except IOC_DIRECT's bounded benchmark
//! wait. Every function here must be called from a context that may sleep.

use core::ffi::c_long;

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::time::Ktime;

use crate::abi::engine::{
    complete_wc, direct_complete, Caller, Completion, Context, ExportSlot, Exports,
    MessageStorage, Messages, PhysQp, Posted, Recovery, Registration, Slot, Stall, Wc, WcStatus,
    DIRECT_WR_ID,
};
use crate::abi::compat::{OneFlags, OneOp};
use crate::abi::cqe::{Cqe, Reason};
use crate::abi::errno::Errno;
use crate::abi::layout::{EnterArgs, EnterFlags, SetupParams};
use crate::abi::waiter::{Wait, WaitPolicy};
use crate::backend::{self, Hw, POOL_QPS, SEND_DEPTH};
use crate::cq_events::CqEvents;
use crate::ring_ctx::{RingAreas, RingCtx};
use crate::shim::{self, IbDevice, WcC};
use crate::store::{KBuf, KStore};

/// The monotonic clock, us.
fn now_us() -> u64 {
    // SAFETY: plain call.
    unsafe { shim::krcore_shim_now_us() }
}

/// How long `IOC_DIRECT` waits for its completion before failing the QP.
const DIRECT_PATIENCE_MS: i64 = 1000;

/// Work completions taken from the CQ per poll.
const POLL_BATCH: usize = 16;

/// Exported MRs a device can hold (a power of two; one slot always stays free).
const EXPORTS: usize = 1024;

/// Links (pairs of virtual QPs for messages) a device can hold.
const LINKS: usize = 4096;
/// Receives a device can hold waiting for messages.
const RECVS: usize = 4096;
/// Sends a device can hold waiting for receives: each holds a send credit, so the pool's
/// send queues bound them.
const WAITING: usize = POOL_QPS * SEND_DEPTH as usize;

/// What a step of [`DevCtx::until`] asks for next.
enum Next<T> {
    /// Finished with a value.
    Done(T),
    /// Poll again (after a scheduling point).
    Again,
    /// Register memory for the ring without the lock, then step again.
    Register(Registration),
}

/// What the device mutex guards.
pub(crate) struct DevState {
    hw: Hw,
    qps: KVec<PhysQp<KStore>>,
    /// The MRs the device's rings export (the only source of rkeys on the wire).
    exports: Exports<KStore>,
    /// Links of virtual QPs, with their receives and waiting sends.
    messages: Messages<KStore>,
    /// Registrations pinning memory without the lock, each holding a [`backend::PdRef`].
    registering: u32,
    /// Recovery of failed pooled QPs, a connected pair at a time.
    recovery: Recovery,
    /// Rings by id; a closed ring stays until its requests have retired.
    rings: KVec<Option<KBox<RingCtx>>>,
    /// Generation of each ring slot, bumped on reuse.
    gens: KVec<u16>,
    /// Processes asleep waiting for completions: while any is, the CQ stays armed.
    sleepers: u32,
}

/// A device context.
#[pin_data]
pub(crate) struct DevCtx {
    #[pin]
    state: Mutex<DevState>,
    /// The CQ's event work (cq_events.rs).
    events: CqEvents,
}

impl DevCtx {
    /// Allocates the context of `ib`: PD, CQ, the engine's pool accounting.
    pub(crate) fn new(ib: *mut IbDevice) -> Result<Arc<DevCtx>> {
        let events = CqEvents::new()?;
        let mut qps = KVec::with_capacity(POOL_QPS, GFP_KERNEL)?;
        for _ in 0..POOL_QPS {
            qps.push(
                PhysQp::new(KBuf::filled(
                    SEND_DEPTH as usize,
                    Posted::EMPTY,
                    GFP_KERNEL,
                )?),
                GFP_KERNEL,
            )?;
        }
        let exports = Exports::new(KBuf::filled(EXPORTS, ExportSlot::EMPTY, GFP_KERNEL)?);
        let messages = Messages::new(MessageStorage {
            links: KBuf::filled(LINKS, Slot::EMPTY, GFP_KERNEL)?,
            half_open: KBuf::filled(LINKS, 0u32, GFP_KERNEL)?,
            recvs: KBuf::filled(RECVS, Slot::EMPTY, GFP_KERNEL)?,
            waiting: KBuf::filled(WAITING, Slot::EMPTY, GFP_KERNEL)?,
            owed: KBuf::filled(RECVS + WAITING, (0, Completion::Done), GFP_KERNEL)?,
        });
        // The verbs objects last: a failure after them would leak them (Hw is released
        // only by `destroy`).
        let hw = Hw::new(ib, events.raw())?;
        let state = DevState {
            hw,
            qps,
            exports,
            messages,
            registering: 0,
            rings: KVec::new(),
            gens: KVec::new(),
            sleepers: 0,
            // SAFETY: reads a module parameter.
            recovery: Recovery::new(2, unsafe { shim::krcore_shim_request_timeout_ms() } as i64),
        };
        let ctx = Arc::pin_init(
            pin_init!(DevCtx {
                state <- new_mutex!(state, "krcore_device"),
                events,
            }),
            GFP_KERNEL,
        )?;
        ctx.events.bind(&*ctx);
        Ok(ctx)
    }

    /// The CQ had an event (cq_events.rs): route what it holds, waking the rings that
    /// gained completions, and arm it again while anyone sleeps.
    pub(crate) fn cq_event(&self) {
        let mut st = self.state.lock();
        loop {
            Self::poll_and_route(&mut st, None);
            if st.sleepers == 0 || !st.hw.arm() {
                return;
            }
        }
    }

    /// Builds the QP pool if the device can have one now (the prewarm work item).
    pub(crate) fn prewarm(&self) {
        // SAFETY: reads a module parameter.
        if unsafe { shim::krcore_shim_prewarm_enabled() } {
            let built = self.state.lock().hw.prewarm();
            if built {
                pr_debug!("QP pool ready\n");
            }
        }
    }

    /// Sets up a ring on this device; returns its slot and its areas (which the file
    /// maps without the device lock).
    pub(crate) fn attach(&self, p: &mut SetupParams) -> Result<(u16, RingAreas)> {
        let mut st = self.state.lock();
        if st.hw.dead() {
            return Err(ENODEV);
        }
        let slot = match st.rings.iter().position(|r| r.is_none()) {
            Some(i) => i,
            None if st.rings.len() < u16::MAX as usize => {
                // Both tables grow together or not at all: a failure between two pushes
                // would leave them of different lengths.
                st.rings.reserve(1, GFP_KERNEL)?;
                st.gens.reserve(1, GFP_KERNEL)?;
                st.rings.push(None, GFP_KERNEL)?;
                st.gens.push(0, GFP_KERNEL)?;
                st.rings.len() - 1
            }
            None => return Err(EMFILE),
        };
        let gen = st.gens[slot].wrapping_add(1);
        let ring = RingCtx::setup(p, slot as u16, gen)?;
        let areas = ring.areas();
        st.gens[slot] = gen;
        st.rings[slot] = Some(ring);
        Ok((slot as u16, areas))
    }

    /// Submits for ring `slot` as `caller`, routes completions, and with GETEVENTS waits
    /// (polling, yielding between polls) until `min_complete` CQEs are ready. Returns
    /// SQEs taken.
    pub(crate) fn enter(&self, slot: u16, args: &EnterArgs, caller: Caller) -> Result<c_long> {
        let flags = args.validate()?;
        let mut taken = 0u32;
        let done = self.until(slot, |st| {
            let (n, reg) = Self::submit(st, slot, args.to_submit - taken, caller)?;
            taken += n;
            if let Some(r) = reg {
                return Ok(Next::Register(r));
            }
            Self::poll_and_route(st, Some(slot));
            let ring = Self::ring(st, slot)?;
            Ok(
                if !flags.contains(EnterFlags::GETEVENTS)
                    || ring.engine().cq_unread() >= args.min_complete
                {
                    Next::Done(())
                } else {
                    Next::Again
                },
            )
        })?;
        match done {
            None if taken == 0 => Err(Errno::EINTR.into()),
            _ => Ok(taken as c_long),
        }
    }

    /// The one-op ioctl (abi/src/compat.rs): pushes `op.sqe` into ring `slot`'s SQ and
    /// runs the same submission as enter, then pops one CQE into `op.cqe`, waiting for
    /// it with `WAIT`. A wait interrupted after a push returns with `popped` 0.
    pub(crate) fn one(&self, slot: u16, op: &mut OneOp, caller: Caller) -> Result {
        let flags = op.validate()?;
        let pushed = flags.contains(OneFlags::PUSH);
        if pushed && !Self::ring(&mut self.state.lock(), slot)?.app_push(op.sqe) {
            return Err(EAGAIN);
        }
        op.popped = 0;
        let popped = self.until(slot, |st| {
            if let (_, Some(r)) = Self::submit(st, slot, u32::MAX, caller)? {
                return Ok(Next::Register(r));
            }
            Self::poll_and_route(st, Some(slot));
            if !flags.contains(OneFlags::POP) {
                return Ok(Next::Done(None));
            }
            let c = Self::ring(st, slot)?.app_pop();
            Ok(if c.is_some() || !flags.contains(OneFlags::WAIT) {
                Next::Done(c)
            } else {
                Next::Again
            })
        })?;
        match popped {
            None if !pushed => Err(Errno::EINTR.into()),
            None | Some(None) => Ok(()),
            Some(Some(c)) => {
                op.cqe = c;
                op.popped = 1;
                Ok(())
            }
        }
    }

    /// Runs `step` under the device lock until it is done or a signal arrives (`None`),
    /// carrying out the registrations it asks for without the lock. Between steps it
    /// polls or sleeps as abi's `WaitPolicy` says (polling for `wait_spin_us`, the module
    /// parameter), sleeping on ring `slot`'s wait queue with the CQ armed, so a waiting
    /// process costs no CPU: a routed completion wakes it, and so does a slice passing
    /// (deadlines and recovery advance in its steps).
    fn until<T>(
        &self,
        slot: u16,
        mut step: impl FnMut(&mut DevState) -> Result<Next<T>>,
    ) -> Result<Option<T>> {
        // Made at the first step that found nothing, so a call that needs no wait reads
        // neither the parameter nor the clock.
        let mut policy: Option<WaitPolicy> = None;
        let mut slept = false;
        loop {
            let mut st = self.state.lock();
            if slept {
                st.sleepers -= 1;
                slept = false;
            }
            match step(&mut st)? {
                Next::Done(v) => return Ok(Some(v)),
                Next::Register(r) => {
                    drop(st);
                    self.register(slot, r);
                    continue;
                }
                Next::Again => {}
            }
            if kernel::current!().signal_pending() {
                return Ok(None);
            }
            let policy = policy.get_or_insert_with(|| {
                // SAFETY: reads a module parameter.
                WaitPolicy::new(unsafe { shim::krcore_shim_wait_spin_us() })
            });
            let Wait::Sleep { timeout_us } = policy.next(now_us()) else {
                drop(st);
                // SAFETY: plain scheduling point, no locks held.
                unsafe { shim::krcore_shim_cond_resched() };
                continue;
            };
            // The generation is read under the lock the step ran under, and the CQ armed
            // after its poll: a completion from here on moves the generation, or was
            // missed by the arm (then poll again at once).
            let wq = Self::ring(&mut st, slot)?.waitq();
            let seen = wq.generation();
            let missed = st.hw.arm();
            st.sleepers += 1;
            slept = true;
            drop(st);
            if !missed {
                // A signal shows in the next round.
                let _ = wq.sleep(seen, timeout_us);
            }
        }
    }

    /// Ring `slot`, or `ENXIO` when it is gone.
    fn ring(st: &mut DevState, slot: u16) -> Result<&mut RingCtx> {
        st.rings
            .get_mut(slot as usize)
            .and_then(|r| r.as_mut())
            .map(|r| &mut **r)
            .ok_or(ENXIO)
    }

    /// Takes up to `max` SQEs of ring `slot` for `caller`; returns how many, and the
    /// registration it stopped at, claimed for this caller to carry out.
    fn submit(
        st: &mut DevState,
        slot: u16,
        max: u32,
        caller: Caller,
    ) -> Result<(u32, Option<Registration>)> {
        let DevState {
            hw,
            qps,
            exports,
            messages,
            rings,
            ..
        } = st;
        if hw.dead() {
            return Err(ENODEV);
        }
        let ring = rings
            .get_mut(slot as usize)
            .and_then(|r| r.as_mut())
            .ok_or(ENXIO)?
            .engine();
        let cx = Context {
            caller,
            // The tick-updated clock: one load per submission, where ktime_get reads the
            // clocksource (throttling needs ms, not ns).
            // SAFETY: plain call.
            now_ms: unsafe { shim::krcore_shim_coarse_ms() },
        };
        match ring.submit(qps.as_mut_slice(), exports, messages, hw, max, cx) {
            Ok(s) if s.stall == Some(Stall::Register) => Ok((s.taken, ring.claim_registration())),
            Ok(s) => Ok((s.taken, None)),
            Err(_) => Err(EINVAL),
        }
    }

    /// Pins and registers `r` for ring `slot` with no lock held, then records it.
    fn register(&self, slot: u16, r: Registration) {
        let pd = {
            let mut st = self.state.lock();
            let pd = st.hw.pd();
            if pd.is_some() {
                st.registering += 1;
            }
            pd
        };
        let result = match pd {
            Some(pd) => backend::register(pd, r.addr, r.len, r.hw_access()),
            None => Err(Errno::ENODEV),
        };
        let mut st = self.state.lock();
        if pd.is_some() {
            st.registering -= 1;
        }
        let DevState {
            hw,
            exports,
            rings,
            sleepers,
            ..
        } = &mut *st;
        match rings.get_mut(slot as usize).and_then(|r| r.as_mut()) {
            Some(ring) => {
                let e = ring.engine();
                e.finish_registration(r, result, exports, hw);
                e.publish();
                ring.notify(*sleepers > 0);
            }
            // Unreachable while the file is open (rings outlive their files' ioctls),
            // kept so an MR can never leak.
            None => {
                if let Ok(keys) = result {
                    crate::abi::engine::Backend::dereg_mr(hw, keys);
                }
            }
        }
    }

    /// Registers eventfd `fd` for ring `slot`.
    pub(crate) fn set_eventfd(&self, slot: u16, fd: i32) -> Result {
        Self::ring(&mut self.state.lock(), slot)?.set_eventfd(fd)
    }

    /// One step of ring `slot`'s polling thread: take SQEs, route completions. Whether
    /// anything happened; `None` when the ring or the device is gone.
    /// The polling thread is not the ring owner: a REG_MR it takes fails with
    /// `NotOwner` (it has no user address space to pin from). A hostile SQ tail parks
    /// the ring (NEED_WAKEUP set) until the application repairs it and wakes the thread.
    pub(crate) fn poll_step(&self, slot: u16) -> Option<bool> {
        let mut st = self.state.lock();
        let taken = match Self::submit(&mut st, slot, u32::MAX, Caller::Other) {
            Ok((n, _)) => n,
            Err(e) if e == EINVAL => {
                Self::ring(&mut st, slot).ok()?.engine().sq().park();
                return None;
            }
            Err(_) => return None,
        };
        let routed = Self::poll_and_route(&mut st, Some(slot));
        Some(taken > 0 || routed > 0)
    }

    /// Need-wakeup, poller side: `true` when ring `slot`'s poller may sleep.
    pub(crate) fn prepare_sleep(&self, slot: u16) -> bool {
        let mut st = self.state.lock();
        match st.rings.get_mut(slot as usize) {
            Some(Some(r)) => r.engine().sq().prepare_sleep(),
            _ => true,
        }
    }

    /// The poller of ring `slot` runs again: clear NEED_WAKEUP.
    pub(crate) fn woken(&self, slot: u16) {
        let mut st = self.state.lock();
        if let Some(Some(r)) = st.rings.get_mut(slot as usize) {
            r.engine().sq().woken();
        }
    }

    /// Drains the CQ, routing each completion to its ring, then publishes: when nothing
    /// was routed only ring `me` can have new CQEs (from its own submission), so only it
    /// is published; otherwise every ring is, and closed rings with nothing left are
    /// freed. Returns the completions polled.
    fn poll_and_route(st: &mut DevState, me: Option<u16>) -> usize {
        let DevState {
            hw,
            qps,
            exports,
            messages,
            rings,
            recovery,
            sleepers,
            ..
        } = st;
        // Every posted request is counted on its QP until its completion is routed (the
        // engine posts no receives), so with none posted the CQ holds nothing for us:
        // skip the poll (pure NOP and control traffic then never touches the NIC).
        let busy = recovery.busy() || qps.iter().any(|q| q.posted() > 0);
        let polled = if busy {
            Self::drain(recovery, hw, qps, rings)
        } else {
            0
        };
        let recycled = if recovery.idle(qps, messages) {
            0
        } else {
            Self::recover(recovery, hw, qps, messages, rings)
        };
        // Wait queues are woken only when someone sleeps (sleepers register under this
        // lock, after a step that saw every CQE published before it).
        let wake = *sleepers > 0;
        if let (0, 0, Some(me)) = (polled, recycled, me) {
            if let Some(Some(r)) = rings.get_mut(me as usize) {
                r.engine().publish();
                r.notify(wake);
            }
            return 0;
        }
        for slot in rings.iter_mut() {
            if let Some(r) = slot {
                let e = r.engine();
                if e.is_closed() {
                    if e.release_idle(qps.as_mut_slice(), exports, messages, hw) {
                        *slot = None;
                    }
                } else {
                    e.publish();
                    r.notify(wake);
                }
            }
        }
        polled
    }

    /// One step of abi's recovery of failed pooled QPs (engine/recovery.rs): pairs fail,
    /// flush and are re-armed together; sends that waited too long for a receive fail,
    /// and what `messages` owes is routed. Nonzero when rings may have new CQEs.
    fn recover(
        recovery: &mut Recovery,
        hw: &mut Hw,
        qps: &mut KVec<PhysQp<KStore>>,
        messages: &mut Messages<KStore>,
        rings: &mut KVec<Option<KBox<RingCtx>>>,
    ) -> usize {
        let now = Ktime::ktime_get().to_ms();
        recovery.step(qps.as_mut_slice(), messages, hw, now, |id, done| {
            if let Some(Some(r)) = rings.get_mut(id.ring as usize) {
                r.engine().complete(id, done);
            }
        })
    }

    /// Polls the CQ dry, routing every completion. Returns how many it polled.
    fn drain(
        recovery: &mut Recovery,
        hw: &mut Hw,
        qps: &mut KVec<PhysQp<KStore>>,
        rings: &mut KVec<Option<KBox<RingCtx>>>,
    ) -> usize {
        // Initializing this buffer is a visible part of an empty enter under emulation:
        // only callers with something outstanding come here.
        let mut wcs = [WcC::default(); POLL_BATCH];
        let mut polled = 0;
        loop {
            let n = hw.poll(&mut wcs);
            polled += n;
            for c in &wcs[..n] {
                if let Some((qp, wc)) = Self::wc(hw, c) {
                    Self::route(recovery, qps, rings, qp, &wc);
                }
            }
            if n < POLL_BATCH {
                return polled;
            }
        }
    }

    /// A polled work completion in the engine's terms, with its physical QP's index.
    fn wc(hw: &Hw, c: &WcC) -> Option<(u32, Wc)> {
        let qp = hw.qp_index(c.qp_num)?;
        Some((
            qp,
            Wc {
                wr_id: c.wr_id,
                status: WcStatus::from_ib(c.status),
                byte_len: c.byte_len,
                imm: (c.has_imm != 0).then_some(c.imm),
                recv: c.recv != 0,
            },
        ))
    }

    /// Routes one work completion of physical QP `qp` to the rings it completes (or to
    /// the backend, for its own requests).
    fn route(
        recovery: &mut Recovery,
        qps: &mut KVec<PhysQp<KStore>>,
        rings: &mut KVec<Option<KBox<RingCtx>>>,
        qp: u32,
        wc: &Wc,
    ) {
        if recovery.on_completion(qp, wc.wr_id) {
            return;
        }
        complete_wc(qps.as_mut_slice(), qp, wc, |id, done| {
            if let Some(Some(r)) = rings.get_mut(id.ring as usize) {
                r.engine().complete(id, done);
            }
        });
    }

    /// `IOC_DIRECT` (engine/direct.rs): posts `op.sqe` straight to its physical QP and
    /// polls for its completion, holding the device lock so nothing else is posted
    /// meanwhile; `op.cqe` gets the CQE the ring path would have produced.
    pub(crate) fn direct(&self, slot: u16, op: &mut OneOp) -> Result {
        op.validate()?;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if st.hw.dead() {
            return Err(ENODEV);
        }
        let DevState {
            hw,
            qps,
            exports,
            messages,
            rings,
            recovery,
            ..
        } = st;
        let ring = rings.get_mut(slot as usize).and_then(|r| r.as_mut()).ok_or(ENXIO)?;
        op.popped = 1;
        let posted_on = match ring.engine().direct(&op.sqe, qps.as_slice(), exports, hw) {
            Ok(qp) => qp,
            Err(c) => {
                op.cqe = c;
                return Ok(());
            }
        };
        let started = Ktime::ktime_get().to_ms();
        let mut gave_up = false;
        let mut wcs = [WcC::default(); POLL_BATCH];
        loop {
            let n = hw.poll(&mut wcs);
            for c in &wcs[..n] {
                let Some((qp, wc)) = Self::wc(hw, c) else {
                    continue;
                };
                if wc.wr_id == DIRECT_WR_ID {
                    op.cqe = direct_complete(qps.as_mut_slice(), qp, op.sqe.user_data, op.sqe.len, &wc);
                    return Ok(());
                }
                // Flushes of a recycled QP, say: route them as usual.
                Self::route(recovery, qps, rings, qp, &wc);
            }
            if n == 0 {
                // Not interruptible: a pending "signal" is often only task work (an
                // io_uring of the same process tearing down), and giving up means
                // failing the QP. A request that has not completed within a second is
                // given up on: the QP fails and recovery moves it to the error state, so
                // the request flushes and completes (before its flush marker, so before
                // the pair can be re-armed).
                // SIGKILL is never task work: a dying caller gives up at once.
                // SAFETY: plain query of current.
                let dying = unsafe { shim::krcore_shim_fatal_signal_pending() };
                let patience_over = Ktime::ktime_get().to_ms() - started > DIRECT_PATIENCE_MS;
                if !gave_up && (dying || patience_over) {
                    gave_up = true;
                    qps[posted_on as usize].fail();
                }
                if gave_up {
                    Self::recover(recovery, hw, qps, messages, rings);
                    if !qps[posted_on as usize].failed() {
                        // Re-armed without its flush (the marker was lost too): the
                        // queues were emptied, nothing more will come.
                        op.cqe = Cqe::err(op.sqe.user_data, Reason::QpError);
                        return Ok(());
                    }
                }
                // Lock held on purpose (see above); rxe's work runs on these CPUs too.
                // SAFETY: plain scheduling point; sleeping under a mutex is allowed.
                unsafe { shim::krcore_shim_cond_resched() };
            }
        }
    }

    /// The file of ring `slot` was closed: no more CQEs; freed once idle.
    pub(crate) fn detach(&self, slot: u16) {
        let mut st = self.state.lock();
        let DevState {
            qps,
            exports,
            messages,
            rings,
            ..
        } = &mut *st;
        if let Some(Some(r)) = rings.get_mut(slot as usize) {
            r.engine().close(qps.as_mut_slice(), exports, messages);
        }
        Self::poll_and_route(&mut st, None);
    }

    /// The device is going away: wait for registrations pinning without the lock (they
    /// hold the PD), destroy its QPs (nothing touches memory any more), then release
    /// every ring's MRs and bindings, then the CQ and PD, then the CQ's event work.
    /// Idempotent.
    pub(crate) fn remove(&self) {
        let mut st = loop {
            let st = self.state.lock();
            if st.registering == 0 {
                break st;
            }
            drop(st);
            // A registration pins a bounded range; it ends within its page faults.
            // SAFETY: plain sleep, no lock held.
            unsafe { shim::krcore_shim_msleep(1) };
        };
        let DevState {
            hw,
            qps,
            exports,
            messages,
            rings,
            ..
        } = &mut *st;
        hw.destroy_qps();
        for slot in rings.iter_mut() {
            if let Some(r) = slot {
                r.engine().abandon(qps.as_mut_slice(), exports, messages, hw);
                // A sleeper finds the device gone at once.
                r.waitq().wake();
            }
        }
        hw.destroy();
        drop(st);
        // The CQ is gone: no event queues the work any more; wait for a running one.
        self.events.stop();
    }
}

/// The prewarm work item of a device context.
#[no_mangle]
extern "C" fn krcore_rs_dev_prewarm(ctx: *mut core::ffi::c_void) {
    // SAFETY: `ctx` is the DevCtx the watch was started on; the registry keeps it alive
    // and stops the watch (waiting for this work) before dropping it.
    let dev = unsafe { &*ctx.cast::<DevCtx>() };
    dev.prewarm();
}
