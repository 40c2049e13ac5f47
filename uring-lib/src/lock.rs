//! The ring's lock, and the doorbell rung without it.
//!
//! # The waiting contract
//! The [`Core`] sits behind a std mutex that is held only for bookkeeping: pushing,
//! publishing, reaping, filing. No one holds it across an enter (a submission may
//! register memory in place), and no user code runs under it: regions released under
//! it are dropped, and wakers woken, after it goes.
//!
//! One thread at a time waits in the kernel (`Core::in_kernel`). Only that thread
//! reaps meanwhile: the kernel's wait ends when the CQ holds entries its waiter has
//! not read, so a completion reaped by someone else would leave it asleep. Any other
//! caller that must wait submits what it pushed and waits on [`CoreLock::turn`],
//! which the waiter signals after it came back and reaped. A completion it wants wakes
//! the waiter like any other: a waiter for one completion comes back at once, and one
//! for more comes back within a wait slice, so nobody waits on another's long wait.
//! The async ring never waits in the kernel: it reaps when no one is there, and is
//! woken by whoever files its completions.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use krcore_abi::ioctl::{IOC_ENTER, IOC_ENTER_VALUE};
use krcore_abi::layout::EnterArgs;

use crate::core::Core;
use crate::{Device, Error};

/// The core as the ring, its regions and listeners hold it.
pub(crate) type Shared = Arc<CoreLock>;

/// Ring identities: each ring's own, so a handle of one ring is never taken for a
/// handle of another (each ring numbers its handles from the same start).
static NEXT_RING: AtomicU64 = AtomicU64::new(1);

/// The core behind the ring's lock, and what is used without it.
pub(crate) struct CoreLock {
    /// This ring's identity, which its handles carry.
    pub(crate) id: u64,
    core: Mutex<Core>,
    /// Signalled when the thread that waited in the kernel comes back, having reaped.
    turn: Condvar,
    /// The enter ioctl.
    pub(crate) bell: Doorbell,
}

impl CoreLock {
    /// The core, unlocked, entering through `dev`.
    pub(crate) fn new(core: Core, dev: Device) -> CoreLock {
        CoreLock {
            id: NEXT_RING.fetch_add(1, Ordering::Relaxed),
            core: Mutex::new(core),
            turn: Condvar::new(),
            bell: Doorbell {
                dev,
                by_value: AtomicBool::new(true),
                enters: AtomicU64::new(0),
            },
        }
    }
}

/// Locks the core. A panic under the lock does not make it unusable: the core's state
/// is indices and tables every step leaves consistent.
pub(crate) fn lock(shared: &CoreLock) -> CoreGuard<'_> {
    CoreGuard {
        lock: shared,
        guard: Some(shared.core.lock().unwrap_or_else(PoisonError::into_inner)),
    }
}

/// The core, locked. Regions released while it was held (a parked batch's, once its
/// completions came) are dropped after it goes (dropping one takes the lock again),
/// and the futures whose completions were filed are woken then.
pub(crate) struct CoreGuard<'a> {
    lock: &'a CoreLock,
    /// `None` only inside [`unlocked`](Self::unlocked) and [`wait_turn`](Self::wait_turn).
    guard: Option<MutexGuard<'a, Core>>,
}

impl Deref for CoreGuard<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        self.guard.as_ref().expect("locked")
    }
}

impl DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        self.guard.as_mut().expect("locked")
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        if self.guard.as_mut().is_some_and(|g| g.nudge()) {
            // A failed submission leaves the NOP queued for the next one.
            let _ = self.submit();
        }
        let deferred = self.guard.as_mut().map(|g| g.take_deferred());
        drop(self.guard.take());
        drop(deferred);
    }
}

impl<'a> CoreGuard<'a> {
    /// The doorbell (usable with or without the lock).
    pub(crate) fn bell(&self) -> &'a Doorbell {
        &self.lock.bell
    }

    /// Runs `f` with the lock let go, and takes it again.
    pub(crate) fn unlocked<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let deferred = self.take_deferred();
        drop(self.guard.take());
        drop(deferred);
        let r = f();
        self.guard = Some(
            self.lock
                .core
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        r
    }

    /// Lets the lock go until the thread in the kernel comes back, or `at_most` passes.
    pub(crate) fn wait_turn(&mut self, at_most: Duration) {
        let g = self.guard.take().expect("locked");
        let (g, _) = self
            .lock
            .turn
            .wait_timeout(g, at_most)
            .unwrap_or_else(PoisonError::into_inner);
        self.guard = Some(g);
    }

    /// Wakes every caller waiting for its turn.
    pub(crate) fn end_turn(&self) {
        self.lock.turn.notify_all();
    }
}

/// The enter ioctl, rung by whoever submits or waits, with or without the lock.
pub(crate) struct Doorbell {
    pub(crate) dev: Device,
    /// The module serves `IOC_ENTER_VALUE` (cleared if it answers `ENOTTY`: one built
    /// before it existed).
    by_value: AtomicBool,
    /// Enters made: the ring's syscalls on the data path.
    pub(crate) enters: AtomicU64,
}

impl Doorbell {
    /// Enters with `args`, passed by value when they pack and `by_value` allows.
    pub(crate) fn enter(&self, args: &EnterArgs, by_value: bool) -> Result<u32, Error> {
        self.enters.fetch_add(1, Ordering::Relaxed);
        // By value when the arguments pack (always, for an unbounded wait on a ring
        // this library sets up): nothing for the kernel to copy in.
        if let Some(v) = args
            .pack()
            .filter(|_| by_value && self.by_value.load(Ordering::Relaxed))
        {
            // SAFETY: IOC_ENTER_VALUE's argument is a value, not an address.
            match unsafe { self.dev.ioctl_raw(IOC_ENTER_VALUE, v as usize) } {
                Err(e) if e.raw_os_error() == Some(krcore_abi::errno::Errno::ENOTTY.0) => {
                    self.by_value.store(false, Ordering::Relaxed)
                }
                r => return Ok(r.map_err(|e| e.context("enter"))? as u32),
            }
        }
        // SAFETY: `args` is an EnterArgs the kernel only reads.
        let n = unsafe {
            self.dev
                .ioctl_raw(IOC_ENTER, args as *const EnterArgs as usize)
        }
        .map_err(|e| e.context("enter"))?;
        Ok(n as u32)
    }
}
