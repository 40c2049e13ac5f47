// SPDX-License-Identifier: GPL-2.0
//! A device's door for peer kernels: what cm.c's listener asks before it accepts a
//! connection (a hello's challenge, a proof's admission by abi's `cluster::auth`
//! gate), and the PD and CQ it accepts with, pinned so the device's removal waits for
//! the requests using them.
//!
//! Locks: `gate` is a leaf (taken by cm.c's listener under rdma_cm's handler mutex,
//! nothing of krcore's held, and by the counters); the rest is atomics.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::abi::cluster::auth::{Gate, Verdict, NONCE_LEN};
use crate::clock::{coarse_ms, wall_ms};
use crate::shim::{self, IbCq, IbPd};

/// The door of one device.
#[pin_data]
pub(crate) struct Door {
    /// The challenges' secret, what good proofs spent, what was refused (a leaf lock).
    #[pin]
    gate: Mutex<Gate>,
    /// The PD and CQ, fixed from creation to removal, for cm.c's request handler
    /// (which must not wait for the membership lock: a CONNECT holding it may be
    /// closing a connection in cm.c).
    verbs: (AtomicPtr<IbPd>, AtomicPtr<IbCq>),
    /// Requests and dials using `verbs` now.
    pins: AtomicU32,
    /// No pin is given any more: the device is quiescing or going.
    shut: AtomicBool,
}

/// What the door counted: proofs refused and replayed, FRESH proofs admitted and
/// answered with a challenge instead.
pub(crate) struct DoorCounts {
    pub(crate) refused: u64,
    pub(crate) replayed: u64,
    pub(crate) fresh: u64,
    pub(crate) stale: u64,
}

impl Door {
    /// The door of a device whose PD and CQ are `pd` and `cq`: its challenges keyed by
    /// a secret of its own from the kernel's CSPRNG. FRESH proofs made before it are not
    /// admitted: an earlier door may have admitted them already.
    pub(crate) fn new(pd: *mut IbPd, cq: *mut IbCq) -> impl PinInit<Self> {
        // SAFETY: plain calls.
        let secret = unsafe { [shim::krcore_shim_random_u64(), shim::krcore_shim_random_u64()] };
        let mut gate = Gate::new(secret, coarse_ms());
        gate.start_fresh(wall_ms());
        pin_init!(Door {
            gate <- new_mutex!(gate, "krcore_auth"),
            verbs: (AtomicPtr::new(pd), AtomicPtr::new(cq)),
            pins: AtomicU32::new(0),
            shut: AtomicBool::new(false),
        })
    }

    /// The PD and CQ, pinned until [`unpin`](Self::unpin); `None` once shut.
    pub(crate) fn pin(&self) -> Option<(*mut IbPd, *mut IbCq)> {
        // SeqCst with `close`'s store and load: one of the two sees the other.
        self.pins.fetch_add(1, Ordering::SeqCst);
        if self.shut.load(Ordering::SeqCst) {
            self.unpin();
            return None;
        }
        Some((self.verbs.0.load(Ordering::Relaxed), self.verbs.1.load(Ordering::Relaxed)))
    }

    /// Ends a [`pin`](Self::pin).
    pub(crate) fn unpin(&self) {
        self.pins.fetch_sub(1, Ordering::SeqCst);
    }

    /// No pin from now on.
    pub(crate) fn shut(&self) {
        self.shut.store(true, Ordering::SeqCst);
    }

    /// Shuts the door and waits for the pins given: each ends within its QP's creation
    /// and accept. Holding no lock cm.c's request handlers take.
    pub(crate) fn close(&self) {
        self.shut();
        while self.pins.load(Ordering::SeqCst) != 0 {
            // SAFETY: plain sleep.
            unsafe { shim::krcore_shim_msleep(1) };
        }
    }

    /// A peer kernel's hello from IPv4 address `from`: the challenge to answer it
    /// with (nothing is kept).
    pub(crate) fn challenge(&self, from: u32) -> [u8; NONCE_LEN] {
        self.gate.lock().challenge(from, coarse_ms())
    }

    /// A proof from `from` to `to` (IPv4, network order), FRESH or answering
    /// `nonce_r`, its tag found good or not by cm.c, at a device whose own address is
    /// `own` (none before its pool is built): abi's `Gate::judge`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn judge(
        &self,
        fresh: bool,
        tag_good: bool,
        from: u32,
        to: u32,
        own: Option<[u8; 16]>,
        nonce_i: &[u8; NONCE_LEN],
        nonce_r: &[u8; NONCE_LEN],
    ) -> Verdict {
        let own = own.map(|g| u32::from_ne_bytes([g[12], g[13], g[14], g[15]]));
        let (now, wall) = (coarse_ms(), wall_ms());
        self.gate.lock().judge(fresh, tag_good, from, to, own, nonce_i, nonce_r, now, wall)
    }

    /// What the door counted.
    pub(crate) fn counts(&self) -> DoorCounts {
        let g = self.gate.lock();
        DoorCounts {
            refused: g.refused,
            replayed: g.replayed,
            fresh: g.fresh,
            stale: g.stale,
        }
    }
}

/// A peer kernel's connection from `node` (an IPv4 address, wire order), its proof
/// good: whether the listener takes it (abi's `cluster::accepted`, charged to `node`).
/// Under cm.c's connection lock.
#[no_mangle]
extern "C" fn krcore_rs_cm_admit(node: u32) -> bool {
    crate::device::Registry::get().accepted.lock().admit(node)
}

/// A connection [`krcore_rs_cm_admit`] took from `node` went. Under cm.c's
/// connection lock.
#[no_mangle]
extern "C" fn krcore_rs_cm_release(node: u32) {
    crate::device::Registry::get().accepted.lock().release(node)
}
