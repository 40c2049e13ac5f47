// SPDX-License-Identifier: GPL-2.0
//! A ring's wait queue: where a process waiting for completions sleeps.
//!
//! The protocol is the kernel's usual one, with a generation instead of a condition the
//! C side could not evaluate: a waiter, under the device lock and after finding nothing
//! to take, reads the [generation](WaitQueue::generation); whoever gives the ring new
//! completions (routing under that lock) [wakes](WaitQueue::wake) it, bumping the
//! generation; the waiter then [sleeps](WaitQueue::sleep) with no lock held until the
//! generation moves. A completion routed between the read and the sleep has moved it
//! already, so it is never missed.

use kernel::prelude::*;
use kernel::sync::Arc;

use crate::shim::{self, WaitQ};

/// A ring's wait queue. Reference-counted: a sleeper holds it with no lock held, so it
/// outlives the ring if need be.
///
/// # Invariants
/// `0` came from `krcore_shim_waitq_alloc` and is freed only on drop.
pub(crate) struct WaitQueue(*mut WaitQ);

// SAFETY: the C wait queue and its atomic generation may be used from any thread.
unsafe impl Send for WaitQueue {}
// SAFETY: as above.
unsafe impl Sync for WaitQueue {}

/// A sleep ended by a signal.
pub(crate) struct Interrupted;

impl WaitQueue {
    /// A fresh queue, charged to the caller's memory cgroup.
    pub(crate) fn new() -> Result<Arc<WaitQueue>> {
        // SAFETY: plain allocation.
        let w = unsafe { shim::krcore_shim_waitq_alloc() };
        if w.is_null() {
            return Err(ENOMEM);
        }
        // INVARIANT: just allocated.
        Ok(Arc::new(WaitQueue(w), GFP_KERNEL_ACCOUNT)?)
    }

    /// The generation to sleep on.
    pub(crate) fn generation(&self) -> u32 {
        // SAFETY: live (invariant).
        unsafe { shim::krcore_shim_waitq_gen(self.0) }
    }

    /// The ring gained completions: bump the generation and wake its sleepers.
    pub(crate) fn wake(&self) {
        // SAFETY: live (invariant).
        unsafe { shim::krcore_shim_waitq_wake(self.0) }
    }

    /// Has a poll(2) or epoll of `file` (through `pt`, as the kernel's `.poll` got them)
    /// wait on this queue too.
    pub(crate) fn poll_wait(&self, file: *mut shim::FileC, pt: *mut shim::PollTable) {
        // SAFETY: live (invariant); `file` and `pt` are the `.poll` call's, passed on.
        // The queue outlives the file's registration: the file's ring holds it, and
        // epoll lets go of the file's entries before the file is released.
        unsafe { shim::krcore_shim_waitq_poll_wait(self.0, file, pt) }
    }

    /// Sleeps until the generation moves past `seen`, at most `timeout_us`.
    pub(crate) fn sleep(&self, seen: u32, timeout_us: u32) -> Result<(), Interrupted> {
        // SAFETY: live (invariant); no lock is held by the caller.
        match unsafe { shim::krcore_shim_waitq_sleep(self.0, seen, timeout_us) } {
            0 => Ok(()),
            _ => Err(Interrupted),
        }
    }
}

impl Drop for WaitQueue {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` (invariant), freed once; no sleeper is left, as
        // each holds a reference.
        unsafe { shim::krcore_shim_waitq_free(self.0) }
    }
}
