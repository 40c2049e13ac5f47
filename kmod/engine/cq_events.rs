// SPDX-License-Identifier: GPL-2.0
//! The device CQ's completion events. The CQ is armed while a process sleeps waiting
//! for completions (devctx's `until`), while a ring has an eventfd, and while any set to
//! a peer kernel is up (its notices come with no local process waiting, and each takes
//! one of the set QP's few receives until it is routed); its event queues a work item,
//! which polls the CQ, routes what it finds, wakes the rings that gained completions,
//! and arms the CQ again while any of those holds. The same item carries the device's network work
//! (dials, MetaServer jobs), which submissions queue and never run themselves.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, Ordering};

use kernel::prelude::*;

use crate::engine::devctx::DevCtx;
use crate::shim::{self, CqNotify};

/// A device's CQ event work item.
///
/// # Invariants
/// The pointer came from `krcore_shim_cqnotify_alloc`, or is null once stopped.
pub(crate) struct CqEvents(AtomicPtr<CqNotify>);

impl CqEvents {
    /// A work item with no device context yet (its events do nothing until
    /// [`bind`](Self::bind)).
    pub(crate) fn new() -> Result<CqEvents> {
        // SAFETY: plain allocation.
        let n = unsafe { shim::krcore_shim_cqnotify_alloc() };
        if n.is_null() {
            return Err(ENOMEM);
        }
        // INVARIANT: just allocated.
        Ok(CqEvents(AtomicPtr::new(n)))
    }

    /// What the CQ is created with.
    pub(crate) fn raw(&self) -> *mut CqNotify {
        self.0.load(Ordering::Relaxed)
    }

    /// Points the work at its device context, which must outlive [`stop`](Self::stop).
    pub(crate) fn bind(&self, ctx: *const DevCtx) {
        // SAFETY: live (invariant); the CQ has not been armed yet.
        unsafe { shim::krcore_shim_cqnotify_set(self.raw(), ctx.cast_mut().cast()) }
    }

    /// Queues the device's network work on the module's workers (each once, however
    /// often asked before it runs). Call under a ring's lock after the submission found the
    /// device alive: the removal marks it dead, then takes every ring's lock, before it
    /// stops this item, so no kick comes after [`stop`](Self::stop). Or from the device
    /// watch's work (the prewarm, the tick), which is stopped before the removal begins.
    pub(crate) fn kick_net(&self) {
        let n = self.raw();
        if !n.is_null() {
            // SAFETY: live (invariant; not stopped yet, see above).
            unsafe { shim::krcore_shim_net_kick(n) }
        }
    }

    /// Queues the event work as a CQ event would: a set came up, so the CQ must be
    /// armed from now on for its peer's notices, or the work yields after its passes
    /// (see `DevCtx::cq_event`). Call while pinned (`cm_pin`), or under the CQ's lock
    /// with the device not dying: the removal waits for pins, and marks the device
    /// dying under that lock, before [`stop`](Self::stop), whose `cancel_work_sync`
    /// also ends a work that queues itself.
    pub(crate) fn kick(&self) {
        let n = self.raw();
        if !n.is_null() {
            // SAFETY: live (invariant; not stopped yet, see above).
            unsafe { shim::krcore_shim_cq_kick(n) }
        }
    }

    /// Waits for a running event work and frees the item. Call after the CQ is
    /// destroyed (no event can queue it again) and with no lock held (the work takes
    /// the device lock). Idempotent.
    pub(crate) fn stop(&self) {
        let n = self.0.swap(null_mut(), Ordering::AcqRel);
        if !n.is_null() {
            // SAFETY: allocated in `new`, freed once (swapped out above).
            unsafe { shim::krcore_shim_cqnotify_free(n) }
        }
    }
}

impl Drop for CqEvents {
    /// Frees the item if [`stop`](Self::stop) did not: only on a context that failed to
    /// come up, whose CQ was never armed, so no event can be queued.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The network work of a device context (dials and MetaServer jobs).
#[no_mangle]
extern "C" fn krcore_rs_dev_net(ctx: *mut core::ffi::c_void) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: as for the CQ event below: the removal stops the item (waiting for a
    // running one) before the registry drops the context.
    let dev = unsafe { &*ctx.cast::<DevCtx>() };
    dev.net_work();
}

/// The CQ event work of a device context.
#[no_mangle]
extern "C" fn krcore_rs_dev_cq_event(ctx: *mut core::ffi::c_void) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: `ctx` is the DevCtx the work was bound to; its removal stops the work
    // (waiting for this one) before the registry drops it.
    let dev = unsafe { &*ctx.cast::<DevCtx>() };
    dev.cq_event();
}
