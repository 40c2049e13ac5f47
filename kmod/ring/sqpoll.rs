// SPDX-License-Identifier: GPL-2.0
//! SQ polling: a kernel thread per SQPOLL ring takes SQEs and routes completions with no
//! syscall from the application, and sleeps after `sq_idle_ms` without work, using the
//! need-wakeup handshake (abi::ring, pair 5; loom-checked). The shim runs the thread and
//! its wait queue; abi's `PollPolicy` decides when it works and when it sleeps.

use core::ffi::{c_int, c_void};

use kernel::prelude::*;
use kernel::sync::Arc;

use crate::abi::poller::{Next, PollPolicy};
use crate::engine::devctx::DevCtx;
use crate::ring::ctx::RingCell;
use crate::shim::{self, PollerC};

/// What the polling thread works on.
struct SqPoll {
    dev: Arc<DevCtx>,
    ring: Arc<RingCell>,
    policy: PollPolicy,
}

/// A running polling thread, stopped on drop.
///
/// # Invariants
/// `thread` runs `krcore_rs_sqpoll_step` on `ctx` until stopped; `ctx` is freed only
/// after the thread has stopped.
pub(crate) struct Poller {
    thread: *mut PollerC,
    ctx: *mut SqPoll,
}

// SAFETY: the handle is used only to wake and stop the thread, which the shim makes
// safe from any thread.
unsafe impl Send for Poller {}
// SAFETY: as above.
unsafe impl Sync for Poller {}

impl Poller {
    /// Starts polling `ring` of `dev`. Must not be called from an atomic context.
    pub(crate) fn start(dev: Arc<DevCtx>, ring: Arc<RingCell>, idle_ms: u32) -> Result<Poller> {
        let ctx = KBox::into_raw(KBox::new(
            SqPoll {
                dev,
                ring,
                policy: PollPolicy::new(idle_ms, crate::clock::now_ms()),
            },
            GFP_KERNEL_ACCOUNT,
        )?);
        // SAFETY: `ctx` is a live SqPoll, owned by the Poller until after the thread stops.
        let thread = unsafe { shim::krcore_shim_poller_start(ctx.cast::<c_void>()) };
        // SAFETY: pointer inspection only.
        let err = unsafe { shim::krcore_shim_ptr_err(thread.cast::<c_void>()) };
        if err != 0 {
            // SAFETY: never handed to a thread.
            drop(unsafe { KBox::from_raw(ctx) });
            return Err(Error::from_errno(err as i32));
        }
        // INVARIANT: the thread was started on `ctx`.
        Ok(Poller { thread, ctx })
    }

    /// Wakes the thread (the application saw NEED_WAKEUP).
    pub(crate) fn wake(&self) {
        // SAFETY: the thread runs until drop (invariant).
        unsafe { shim::krcore_shim_poller_wake(self.thread) };
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // SAFETY: started in `start`, stopped once; after it returns the thread no longer
        // touches `ctx`, which is then freed.
        unsafe {
            shim::krcore_shim_poller_stop(self.thread);
            drop(KBox::from_raw(self.ctx));
        }
    }
}

/// One step of the polling thread: 0 run again, 1 sleep, 2 yield then run again.
#[no_mangle]
extern "C" fn krcore_rs_sqpoll_step(ctx: *mut c_void) -> c_int {
    // SAFETY: `ctx` is the SqPoll this thread was started on, alive until it stops, and
    // only this thread uses it.
    let p = unsafe { &mut *ctx.cast::<SqPoll>() };
    let now = crate::clock::now_ms();
    if p.policy.resume(now) {
        p.dev.woken(&p.ring);
    }
    let worked = p.dev.poll_step(&p.ring);
    let (dev, ring) = (&p.dev, &p.ring);
    match p.policy.after(now, worked, || dev.prepare_sleep(ring)) {
        Next::Run => 0,
        Next::Sleep => 1,
        Next::Yield => 2,
    }
}
