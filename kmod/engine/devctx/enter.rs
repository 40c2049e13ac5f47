// SPDX-License-Identifier: GPL-2.0
//! The rings' side of a device context: setting a ring up and closing it, a process's
//! enter (take SQEs, route, wait: bounded, interruptible), the one-op ioctl, the SQ
//! polling thread's step, a ring's eventfd, and REG_MR's pinning without the ring's
//! lock.

use crate::device::UserCharge;
use core::ffi::c_long;
use core::sync::atomic::Ordering;

use kernel::prelude::*;
use kernel::sync::Arc;

use crate::abi::compat::{OneFlags, OneOp};
use crate::abi::engine::{Caller, Context, Fabric, Registration, Stall};
use crate::abi::errno::Errno;
use crate::abi::layout::{EnterArgs, EnterFlags, SetupParams};
use crate::abi::waiter::{Wait, WaitPolicy};
use crate::engine::backend::{self};
use crate::ring::ctx::{RingAreas, RingCell, RingCtx};
use crate::shim::{self};

use super::DevCtx;
use crate::clock::now_us;

/// What a step of [`DevCtx::until`] asks for next.
pub(super) enum Next<T> {
    /// Finished with a value.
    Done(T),
    /// Poll again (after a scheduling point).
    Again,
    /// Register memory for the ring without the lock, then step again.
    Register(Registration),
}

/// How a wait (`DevCtx::until`) ended.
pub(super) enum Ended<T> {
    /// Its step finished with a value.
    Done(T),
    /// A signal is pending.
    Interrupted,
    /// The caller's bound passed first.
    TimedOut,
}

/// Work a submission leaves: a registration its caller carries out without the ring's
/// lock, or a wait for another node (a connection set, the MetaServer, a revocation's
/// answers) or MetaServer work due, which the device's workers do if anyone can: no
/// caller does network work.
enum Work {
    Register(Registration),
    Remote,
}

impl DevCtx {
    /// Sets up a ring on this device; returns it and its areas (which the file maps
    /// without any lock).
    pub(crate) fn attach(
        &self,
        p: &mut SetupParams,
        user: UserCharge,
    ) -> Result<(Arc<RingCell>, RingAreas)> {
        if self.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        self.rings.bind(|slot, gen| {
            let ctx = RingCtx::setup(p, slot, gen, user)?;
            let areas = ctx.areas();
            Ok((RingCell::new(ctx, slot, gen)?, areas))
        })
    }

    /// Submits for `ring` as `caller`, routes completions, and with GETEVENTS waits
    /// until `min_complete` CQEs are ready. Returns SQEs taken.
    pub(crate) fn enter(&self, ring: &RingCell, args: &EnterArgs, caller: Caller) -> Result<c_long> {
        let flags = args.validate()?;
        let deadline = flags
            .contains(EnterFlags::TIMEOUT)
            .then(|| now_us() + args.timeout_us as u64);
        let mut taken = 0u32;
        let done = self.until(ring, deadline, |ctx| {
            let (n, work) = self.submit(ctx, args.to_submit - taken, caller)?;
            taken += n;
            match work {
                Some(Work::Register(r)) => return Ok(Next::Register(r)),
                // The workers do it; this caller waits for its CQEs as for any other.
                Some(Work::Remote) => self.kick_net(),
                None => {}
            }
            Ok(
                if !flags.contains(EnterFlags::GETEVENTS)
                    || ctx.engine().cq_unread() >= args.min_complete
                {
                    Next::Done(())
                } else {
                    Next::Again
                },
            )
        })?;
        match done {
            Ended::Interrupted if taken == 0 => Err(Errno::EINTR.into()),
            Ended::TimedOut if taken == 0 => Err(Errno::ETIME.into()),
            _ => Ok(taken as c_long),
        }
    }

    /// The one-op ioctl (abi/src/compat.rs): pushes `op.sqe` into `ring`'s SQ and runs
    /// the same submission as enter, then pops one CQE into `op.cqe`, waiting for it with
    /// `WAIT`. A wait interrupted after a push returns with `popped` 0.
    pub(crate) fn one(&self, ring: &RingCell, op: &mut OneOp, caller: Caller) -> Result {
        let flags = op.validate()?;
        let pushed = flags.contains(OneFlags::PUSH);
        if pushed && !ring.ctx.lock().app_push(op.sqe) {
            return Err(EAGAIN);
        }
        op.popped = 0;
        let popped = self.until(ring, None, |ctx| {
            match self.submit(ctx, u32::MAX, caller)? {
                (_, Some(Work::Register(r))) => return Ok(Next::Register(r)),
                (_, Some(Work::Remote)) => self.kick_net(),
                _ => {}
            }
            if !flags.contains(OneFlags::POP) {
                return Ok(Next::Done(None));
            }
            let c = ctx.app_pop();
            Ok(if c.is_some() || !flags.contains(OneFlags::WAIT) {
                Next::Done(c)
            } else {
                Next::Again
            })
        })?;
        match popped {
            Ended::Interrupted | Ended::TimedOut if !pushed => Err(Errno::EINTR.into()),
            Ended::Interrupted | Ended::TimedOut | Ended::Done(None) => Ok(()),
            Ended::Done(Some(c)) => {
                op.cqe = c;
                op.popped = 1;
                Ok(())
            }
        }
    }

    /// Runs `step` under `ring`'s lock (after taking in what was routed to it) until it
    /// is done or a signal arrives (`None`), carrying out the registrations it asks for
    /// without the lock, and routing the CQ after each step. Between steps it polls or
    /// sleeps as abi's `WaitPolicy` says (polling for `wait_spin_us`, the module
    /// parameter), sleeping on the ring's wait queue with the CQ armed, so a waiting
    /// process costs no CPU: a routed completion wakes it, and so does a slice passing
    /// (deadlines and recovery advance in its steps). A wait with a `deadline` (us, the
    /// `now_us` clock) ends there.
    pub(super) fn until<T>(
        &self,
        ring: &RingCell,
        deadline: Option<u64>,
        mut step: impl FnMut(&mut RingCtx) -> Result<Next<T>>,
    ) -> Result<Ended<T>> {
        // Made at the first step that found nothing, so a call that needs no wait reads
        // neither the parameter nor the clock.
        let mut policy: Option<WaitPolicy> = None;
        // Whether the CQ was routed since the last step: a wait is decided only by a
        // step that saw what was there.
        let mut routed = false;
        loop {
            let mut ctx = ring.ctx.lock();
            ring.absorb_mail(&mut ctx);
            let next = step(&mut ctx);
            // CQEs the step wrote itself (NOPs, rejections, control entries) reach the
            // eventfd and other waiters as routed ones do.
            ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
            match next? {
                Next::Done(v) => {
                    drop(ctx);
                    // Route what our own submission may have completed already.
                    self.route();
                    return Ok(Ended::Done(v));
                }
                Next::Register(r) => {
                    drop(ctx);
                    self.register(ring, r);
                    continue;
                }
                Next::Again => {}
            }
            if !routed {
                drop(ctx);
                self.route();
                routed = true;
                continue;
            }
            routed = false;
            if kernel::current!().signal_pending() {
                return Ok(Ended::Interrupted);
            }
            let policy = policy.get_or_insert_with(|| {
                // SAFETY: reads a module parameter.
                WaitPolicy::new(unsafe { shim::krcore_shim_wait_spin_us() }).until(deadline)
            });
            let timeout_us = match policy.next(now_us()) {
                Wait::Sleep { timeout_us } => timeout_us,
                Wait::TimedOut => return Ok(Ended::TimedOut),
                Wait::Poll => {
                    drop(ctx);
                    // SAFETY: plain scheduling point, no locks held.
                    unsafe { shim::krcore_shim_cond_resched() };
                    continue;
                }
            };
            // The generation is read under the ring's lock, after a step that saw every
            // CQE routed before it, and the CQ armed after that: a completion from here
            // on moves the generation (the router wakes under this lock, and counts
            // this sleeper, registered before the lock goes), or was missed by the arm
            // (then poll again at once).
            let wq = ctx.waitq();
            let seen = wq.generation();
            let missed = self.arm_cq();
            self.sleepers.fetch_add(1, Ordering::AcqRel);
            drop(ctx);
            if !missed {
                // A signal shows in the next round.
                let _ = wq.sleep(seen, timeout_us);
            } else {
                // The next round polls what the arm found; a scheduling point meanwhile,
                // so a waiter never keeps the CPU from whoever does the work it waits on.
                // SAFETY: plain scheduling point, no locks held.
                unsafe { shim::krcore_shim_cond_resched() };
            }
            self.sleepers.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Takes up to `max` SQEs of `ctx`'s ring for `caller`; returns how many, and the
    /// registration it stopped at, claimed for this caller to carry out.
    fn submit(
        &self,
        ctx: &mut RingCtx,
        max: u32,
        caller: Caller,
    ) -> Result<(u32, Option<Work>)> {
        if self.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        let ring = ctx.engine();
        let cx = Context {
            caller,
            // The tick-updated clock: one load per submission, where ktime_get reads the
            // clocksource (throttling needs ms, not ns).
            now_ms: crate::clock::coarse_ms(),
        };
        match ring.submit(&self.shared, max, cx) {
            Ok(s) if s.stall == Some(Stall::Register) => {
                Ok((s.taken, ring.claim_registration().map(Work::Register)))
            }
            Ok(s) if s.stall == Some(Stall::Remote) => Ok((s.taken, Some(Work::Remote))),
            // A revoked export's names wait to be taken out of the MetaServer.
            Ok(s) if self.shared.meta.due() => Ok((s.taken, Some(Work::Remote))),
            Ok(s) => Ok((s.taken, None)),
            Err(_) => Err(EINVAL),
        }
    }

    /// Pins and registers `r` for `ring` with no lock held, then records it.
    fn register(&self, ring: &RingCell, r: Registration) {
        let pd = {
            let mut m = self.shared.members();
            let pd = m.g.hw.pd();
            if pd.is_some() {
                m.g.registering += 1;
            }
            pd
        };
        let result = match pd {
            Some(pd) => backend::register(pd, r.addr, r.len, r.access),
            None => Err(Errno::ENODEV),
        };
        {
            let mut ctx = ring.ctx.lock();
            let e = ctx.engine();
            e.finish_registration(r, result, &self.shared);
            e.publish();
            ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
            if ctx.engine().is_closed() {
                // The registration was what kept it.
                ring.touch();
                self.dirty.swap(true, Ordering::AcqRel);
            }
        }
        if pd.is_some() {
            self.shared.members().g.registering -= 1;
        }
        self.route();
    }

    /// Registers eventfd `fd` for `ring` (-1: none), counting it among the listeners
    /// that keep the CQ armed; the first arms it now.
    pub(crate) fn set_eventfd(&self, ring: &RingCell, fd: i32) -> Result {
        let (had, r, has) = {
            let mut ctx = ring.ctx.lock();
            let had = ctx.has_eventfd();
            let r = ctx.set_eventfd(fd);
            (had, r, ctx.has_eventfd())
        };
        match (had, has) {
            (false, true) => {
                self.listeners.fetch_add(1, Ordering::AcqRel);
                // Route what is there and arm: from here, events route.
                self.cq_event();
            }
            (true, false) => {
                self.listeners.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
        r
    }

    /// A ring's file was polled for the first time: counted among the listeners that
    /// keep the CQ armed (as an eventfd is, until the ring is detached); routes what is
    /// there and arms the CQ now.
    pub(crate) fn listen_polled(&self) {
        self.listeners.fetch_add(1, Ordering::AcqRel);
        self.cq_event();
    }

    /// One step of `ring`'s polling thread: take SQEs, route completions. Whether
    /// anything happened; `None` when the device is gone.
    /// The polling thread is not the ring owner: a REG_MR it takes fails with
    /// `NotOwner` (it has no user address space to pin from). A hostile SQ tail parks
    /// the ring (NEED_WAKEUP set) until the application repairs it and wakes the thread.
    pub(crate) fn poll_step(&self, ring: &RingCell) -> Option<bool> {
        let (taken, remote) = {
            let mut ctx = ring.ctx.lock();
            ring.absorb_mail(&mut ctx);
            let taken = self.submit(&mut ctx, u32::MAX, Caller::Other);
            ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
            match taken {
                Ok((t, work)) => {
                    // A CONNECT to a node with no set yet, or a MetaServer request: the
                    // device's workers do the network work, not this ring's thread.
                    let remote = matches!(work, Some(Work::Remote));
                    if remote {
                        self.kick_net();
                    }
                    (t, remote)
                }
                Err(e) if e == EINVAL => {
                    ctx.engine().sq().park();
                    return None;
                }
                Err(_) => return None,
            }
        };
        let routed = self.route();
        if remote && taken == 0 && routed == 0 {
            // Its entry waits for another node: a moment, rather than spin on it.
            // SAFETY: plain sleep, no lock held.
            unsafe { shim::krcore_shim_msleep(1) };
        }
        Some(taken > 0 || routed > 0)
    }

    /// Need-wakeup, poller side: `true` when `ring`'s poller may sleep.
    pub(crate) fn prepare_sleep(&self, ring: &RingCell) -> bool {
        ring.ctx.lock().engine().sq().prepare_sleep()
    }

    /// The poller of `ring` runs again: clear NEED_WAKEUP.
    pub(crate) fn woken(&self, ring: &RingCell) {
        ring.ctx.lock().engine().sq().woken();
    }

    /// The file of `ring` was closed: no more CQEs; freed once idle.
    pub(crate) fn detach(&self, ring: &RingCell) {
        {
            let mut ctx = ring.ctx.lock();
            if ctx.has_eventfd() {
                // A closed ring listens no more (its CQEs are dropped from here).
                let _ = ctx.set_eventfd(-1);
                self.listeners.fetch_sub(1, Ordering::AcqRel);
            }
            if ctx.polled() {
                self.listeners.fetch_sub(1, Ordering::AcqRel);
            }
            ctx.engine().close(&self.shared);
        }
        ring.touch();
        self.dirty.swap(true, Ordering::AcqRel);
        self.route();
        // Its exports' names leave the MetaServer now, by the device's workers (an MR
        // still in flight is revoked when its ring is freed; the next network work
        // takes those). Under its lock: see `CqEvents::kick_net`.
        let _ctx = ring.ctx.lock();
        if !self.dead.load(Ordering::Acquire) {
            self.kick_net();
        }
    }
}
