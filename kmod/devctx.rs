// SPDX-License-Identifier: GPL-2.0
//! A device context: one RDMA device's verbs objects, the engine's accounting of its
//! physical QPs, and the rings bound to it, all under one mutex.
//!
//! Locking: the device mutex serializes every engine call for the device (submission,
//! completion routing, ring close) — the discipline verify/'s loom models check. A
//! file's own mutex only guards which device and ring slot it is bound to, and is never
//! held while the device mutex is taken. Must not be called from an atomic context.

use core::ffi::c_long;

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::time::Ktime;

use crate::abi::engine::{
    complete_wc, direct_complete, PhysQp, Recovery, Wc, WcStatus, DIRECT_WR_ID,
};
use crate::abi::compat::{OneFlags, OneOp};
use crate::abi::cqe::{Cqe, Reason};
use crate::abi::errno::Errno;
use crate::abi::layout::{EnterArgs, EnterFlags, SetupParams};
use crate::backend::{Hw, POOL_QPS, RECV_DEPTH, SEND_DEPTH};
use crate::ring_ctx::RingCtx;
use crate::shim::{self, IbDevice, Vma, WcC};
use crate::store::{KBuf, KStore};

/// How long `IOC_DIRECT` waits for its completion before failing the QP.
const DIRECT_PATIENCE_MS: i64 = 1000;

/// Work completions taken from the CQ per poll.
const POLL_BATCH: usize = 16;

/// What the device mutex guards.
pub(crate) struct DevState {
    hw: Hw,
    qps: KVec<PhysQp<KStore>>,
    /// Recovery of failed pooled QPs, a connected pair at a time.
    recovery: Recovery,
    /// Rings by id; a closed ring stays until its requests have retired.
    rings: KVec<Option<KBox<RingCtx>>>,
    /// Generation of each ring slot, bumped on reuse.
    gens: KVec<u16>,
}

/// A device context.
#[pin_data]
pub(crate) struct DevCtx {
    #[pin]
    state: Mutex<DevState>,
}

impl DevCtx {
    /// Allocates the context of `ib`: PD, CQ, the engine's pool accounting.
    pub(crate) fn new(ib: *mut IbDevice) -> Result<Arc<DevCtx>> {
        let hw = Hw::new(ib)?;
        let mut qps = KVec::with_capacity(POOL_QPS, GFP_KERNEL)?;
        for _ in 0..POOL_QPS {
            qps.push(
                PhysQp::new(KBuf::filled(SEND_DEPTH as usize, 0u64)?, RECV_DEPTH),
                GFP_KERNEL,
            )?;
        }
        let state = DevState {
            hw,
            qps,
            rings: KVec::new(),
            gens: KVec::new(),
            recovery: Recovery::new(2),
        };
        Arc::pin_init(
            pin_init!(DevCtx { state <- new_mutex!(state, "krcore_device") }),
            GFP_KERNEL,
        )
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

    /// Sets up a ring on this device; returns its slot.
    pub(crate) fn attach(&self, p: &mut SetupParams) -> Result<u16> {
        let mut st = self.state.lock();
        if st.hw.dead() {
            return Err(ENODEV);
        }
        let slot = match st.rings.iter().position(|r| r.is_none()) {
            Some(i) => i,
            None if st.rings.len() < u16::MAX as usize => {
                st.rings.push(None, GFP_KERNEL)?;
                st.gens.push(0, GFP_KERNEL)?;
                st.rings.len() - 1
            }
            None => return Err(EMFILE),
        };
        let gen = st.gens[slot].wrapping_add(1);
        let ring = RingCtx::setup(p, slot as u16, gen)?;
        st.gens[slot] = gen;
        st.rings[slot] = Some(ring);
        Ok(slot as u16)
    }

    /// Maps ring `slot` at page offset `pgoff`.
    pub(crate) fn mmap(&self, slot: u16, vma: *mut Vma, pgoff: usize, len: usize) -> Result {
        let st = self.state.lock();
        st.rings
            .get(slot as usize)
            .and_then(|r| r.as_ref())
            .ok_or(ENXIO)?
            .mmap(vma, pgoff, len)
    }

    /// Submits for ring `slot`, routes completions, and with GETEVENTS waits (polling,
    /// yielding between polls) until `min_complete` CQEs are ready. Returns SQEs taken.
    pub(crate) fn enter(&self, slot: u16, args: &EnterArgs) -> Result<c_long> {
        let flags = args.validate()?;
        let mut taken = 0u32;
        let done = self.until(|st| {
            taken += Self::submit(st, slot, args.to_submit - taken)?;
            Self::poll_and_route(st, Some(slot));
            let ring = Self::ring(st, slot)?;
            Ok((!flags.contains(EnterFlags::GETEVENTS)
                || ring.engine().cq_unread() >= args.min_complete)
                .then_some(()))
        })?;
        match done {
            None if taken == 0 => Err(Errno::EINTR.into()),
            _ => Ok(taken as c_long),
        }
    }

    /// The one-op ioctl (abi/src/compat.rs): pushes `op.sqe` into ring `slot`'s SQ and
    /// runs the same submission as enter, then pops one CQE into `op.cqe`, waiting for
    /// it with `WAIT`. A wait interrupted after a push returns with `popped` 0.
    pub(crate) fn one(&self, slot: u16, op: &mut OneOp) -> Result {
        let flags = op.validate()?;
        let pushed = flags.contains(OneFlags::PUSH);
        if pushed && !Self::ring(&mut self.state.lock(), slot)?.app_push(op.sqe) {
            return Err(EAGAIN);
        }
        op.popped = 0;
        let popped = self.until(|st| {
            Self::submit(st, slot, u32::MAX)?;
            Self::poll_and_route(st, Some(slot));
            if !flags.contains(OneFlags::POP) {
                return Ok(Some(None));
            }
            let c = Self::ring(st, slot)?.app_pop();
            Ok((c.is_some() || !flags.contains(OneFlags::WAIT)).then_some(c))
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

    /// Runs `step` under the device lock until it yields a value, giving up the CPU
    /// between tries; `None` when a signal arrived first.
    fn until<T>(&self, mut step: impl FnMut(&mut DevState) -> Result<Option<T>>) -> Result<Option<T>> {
        loop {
            if let Some(v) = step(&mut self.state.lock())? {
                return Ok(Some(v));
            }
            if kernel::current!().signal_pending() {
                return Ok(None);
            }
            // SAFETY: plain scheduling point, no locks held.
            unsafe { shim::krcore_shim_cond_resched() };
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

    fn submit(st: &mut DevState, slot: u16, max: u32) -> Result<u32> {
        let DevState { hw, qps, rings, .. } = st;
        if hw.dead() {
            return Err(ENODEV);
        }
        let ring = rings
            .get_mut(slot as usize)
            .and_then(|r| r.as_mut())
            .ok_or(ENXIO)?;
        match ring.engine().submit(qps.as_mut_slice(), hw, max) {
            Ok(s) => Ok(s.taken),
            Err(_) => Err(EINVAL),
        }
    }

    /// Registers eventfd `fd` for ring `slot`.
    pub(crate) fn set_eventfd(&self, slot: u16, fd: i32) -> Result {
        Self::ring(&mut self.state.lock(), slot)?.set_eventfd(fd)
    }

    /// One step of ring `slot`'s polling thread: take SQEs, route completions. Whether
    /// anything happened; `None` when the ring or the device is gone.
    pub(crate) fn poll_step(&self, slot: u16) -> Option<bool> {
        let mut st = self.state.lock();
        let taken = Self::submit(&mut st, slot, u32::MAX).ok()?;
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
            rings,
            recovery,
            ..
        } = st;
        // Every posted request and receive is counted on its QP until its completion is
        // routed, so with none outstanding the CQ holds nothing for us: skip the poll
        // (pure NOP and control traffic then never touches the NIC).
        let busy = recovery.busy()
            || qps
                .iter()
                .any(|q| q.outstanding() > 0 || q.recv_outstanding() > 0);
        let polled = if busy {
            Self::drain(recovery, hw, qps, rings)
        } else {
            0
        };
        let recycled = Self::recover(recovery, hw, qps, rings);
        if let (0, 0, Some(me)) = (polled, recycled, me) {
            if let Some(Some(r)) = rings.get_mut(me as usize) {
                r.engine().publish();
                r.notify();
            }
            return 0;
        }
        for slot in rings.iter_mut() {
            if let Some(r) = slot {
                let e = r.engine();
                if e.is_closed() {
                    if e.release_idle(qps.as_mut_slice(), hw) {
                        *slot = None;
                    }
                } else {
                    e.publish();
                    r.notify();
                }
            }
        }
        polled
    }

    /// One step of abi's recovery of failed pooled QPs (engine/recovery.rs): pairs fail,
    /// flush and are re-armed together. Returns the QPs recycled.
    fn recover(
        recovery: &mut Recovery,
        hw: &mut Hw,
        qps: &mut KVec<PhysQp<KStore>>,
        rings: &mut KVec<Option<KBox<RingCtx>>>,
    ) -> usize {
        let now = Ktime::ktime_get().to_ms();
        recovery.step(qps.as_mut_slice(), hw, now, |id, done| {
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
            rings,
            recovery,
            ..
        } = st;
        let ring = rings.get_mut(slot as usize).and_then(|r| r.as_mut()).ok_or(ENXIO)?;
        op.popped = 1;
        let posted_on = match ring.engine().direct(&op.sqe, qps.as_slice(), hw) {
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
                if !gave_up && Ktime::ktime_get().to_ms() - started > DIRECT_PATIENCE_MS {
                    gave_up = true;
                    qps[posted_on as usize].fail();
                }
                if gave_up {
                    Self::recover(recovery, hw, qps, rings);
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
        if let Some(Some(r)) = st.rings.get_mut(slot as usize) {
            r.engine().close();
        }
        Self::poll_and_route(&mut st, None);
    }

    /// The device is going away: destroy its QPs (nothing touches memory any more), then
    /// release every ring's MRs and bindings, then the CQ and PD.
    pub(crate) fn remove(&self) {
        let mut st = self.state.lock();
        let DevState { hw, qps, rings, .. } = &mut *st;
        hw.destroy_qps();
        for slot in rings.iter_mut() {
            if let Some(r) = slot {
                r.engine().abandon(qps.as_mut_slice(), hw);
            }
        }
        hw.destroy();
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
