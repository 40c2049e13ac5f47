// SPDX-License-Identifier: GPL-2.0
//! SQ polling: a kernel thread per SQPOLL ring takes SQEs and routes completions with no
//! syscall from the application, and sleeps after `sq_idle_ms` without work, using the
//! need-wakeup handshake (abi::ring, pair 5; loom-checked). The shim runs the thread and
//! its wait queue; this file decides when it works and when it sleeps.

use core::ffi::{c_int, c_void};

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::time::{ktime_ms_delta, Ktime};

use crate::devctx::DevCtx;
use crate::shim::{self, PollerC};

/// What the polling thread works on.
struct SqPoll {
    dev: Arc<DevCtx>,
    slot: u16,
    idle_ms: u32,
    last_work: Ktime,
    slept: bool,
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
    /// Starts polling ring `slot` of `dev`. Must not be called from an atomic context.
    pub(crate) fn start(dev: Arc<DevCtx>, slot: u16, idle_ms: u32) -> Result<Poller> {
        let ctx = KBox::into_raw(KBox::new(
            SqPoll {
                dev,
                slot,
                idle_ms,
                last_work: Ktime::ktime_get(),
                slept: false,
            },
            GFP_KERNEL,
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

/// One step of the polling thread.
#[no_mangle]
extern "C" fn krcore_rs_sqpoll_step(ctx: *mut c_void) -> c_int {
    // SAFETY: `ctx` is the SqPoll this thread was started on, alive until it stops, and
    // only this thread uses it.
    let p = unsafe { &mut *ctx.cast::<SqPoll>() };
    let now = Ktime::ktime_get();
    if p.slept {
        p.dev.woken(p.slot);
        p.slept = false;
        p.last_work = now;
    }
    match p.dev.poll_step(p.slot) {
        Some(true) => {
            p.last_work = now;
            0
        }
        Some(false) if ktime_ms_delta(now, p.last_work) < p.idle_ms as i64 => 0,
        Some(false) => {
            if p.dev.prepare_sleep(p.slot) {
                p.slept = true;
                1
            } else {
                0
            }
        }
        // The ring or the device is gone: sleep until stopped.
        None => 1,
    }
}
