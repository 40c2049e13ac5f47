// SPDX-License-Identifier: GPL-2.0
//! Ring memory in the kernel: a vmalloc area the application maps (page by page), viewed as abi's
//! [`RawRing`].

use core::ffi::c_void;

use kernel::prelude::*;

use crate::abi::layout::{RingHeader, ENTRIES_OFFSET};
use crate::abi::ring::RawRing;
use crate::shim::{self, Vma};

/// A zeroed, page-aligned area the application can map.
///
/// # Invariants
/// `ptr` came from `krcore_shim_ring_alloc(size)` and is freed only on drop.
pub(crate) struct RingArea {
    ptr: *mut u8,
    size: usize,
}

// SAFETY: the area is plain memory; concurrent access goes through the ring protocol.
unsafe impl Send for RingArea {}
// SAFETY: as above.
unsafe impl Sync for RingArea {}

impl RingArea {
    /// Allocates `size` bytes. Must not be called from an atomic context.
    pub(crate) fn new(size: usize) -> Result<Self> {
        // SAFETY: plain allocation call.
        let ptr = unsafe { shim::krcore_shim_ring_alloc(size) }.cast::<u8>();
        if ptr.is_null() {
            return Err(ENOMEM);
        }
        // INVARIANT: just allocated with this size.
        Ok(RingArea { ptr, size })
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Maps the area into `vma` (which may not be larger).
    pub(crate) fn map(&self, vma: *mut Vma) -> Result {
        // SAFETY: `vma` is the VMA of the mmap call in progress; the area is a live
        // vmalloc allocation of `size` bytes (invariant), and the shim rejects a VMA
        // larger than that. The mapping keeps the file, and so this area, alive.
        kernel::error::to_result(unsafe {
            shim::krcore_shim_ring_mmap(vma, self.ptr.cast::<c_void>(), self.size)
        })
    }

    /// Writes the header fields the kernel owns at setup.
    pub(crate) fn init_header(&self, entries: u32) {
        let h = self.ptr.cast::<RingHeader>();
        // SAFETY: the area starts with a RingHeader (it is at least ENTRIES_OFFSET bytes),
        // is 4-byte aligned (page-aligned), and nothing else touches it yet.
        unsafe {
            (*h).ring_mask = entries - 1;
            (*h).ring_entries = entries;
        }
    }

    /// The ring view of this area holding `entries` entries of `E`.
    ///
    /// # Safety
    /// The area must outlive the returned ring (its owner drops the ring first).
    pub(crate) unsafe fn ring<E: Copy>(&self, entries: u32) -> RawRing<E> {
        assert!(ENTRIES_OFFSET + entries as usize * size_of::<E>() <= self.size);
        // SAFETY: page-aligned, large enough (just checked), alive as long as the
        // caller promises.
        unsafe { RawRing::new(self.ptr, entries) }
    }
}

impl Drop for RingArea {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` (invariant), freed once.
        unsafe { shim::krcore_shim_ring_free(self.ptr.cast::<c_void>()) };
    }
}
