//! Handles a ring hands out: virtual QPs, registered local memory, imported remote
//! memory.

use std::cell::UnsafeCell;

/// A virtual QP: this ring's connection through a pooled kernel QP.
#[derive(Debug, PartialEq, Eq)]
pub struct Vqp {
    pub(crate) handle: u32,
    pub(crate) qpn: u32,
}

impl Vqp {
    /// The number of the pooled physical QP it is bound to (shared with other rings).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The handle raw entries ([`Ring::push`](crate::Ring::push)) name it by.
    pub fn handle(&self) -> u32 {
        self.handle
    }
}

/// Local memory registered with krcore, owned by this value: the kernel has its pages
/// pinned and the NIC may read or write them while operations using it are in flight.
///
/// Its bytes are reachable only through `&mut self`, and a [`Batch`](crate::Batch)
/// borrows the region until [`Ring::run`](crate::Ring::run) has waited for every
/// completion, so the NIC never writes under a live Rust borrow. Deregister it with
/// [`Ring::deregister`](crate::Ring::deregister); dropped while still registered, its
/// buffer is leaked rather than freed under the NIC.
#[derive(Debug)]
pub struct MemoryRegion {
    pub(crate) buf: Box<[UnsafeCell<u64>]>,
    pub(crate) handle: u32,
    pub(crate) descriptor: u64,
    pub(crate) registered: bool,
}

impl MemoryRegion {
    pub(crate) fn alloc(len: usize) -> Box<[UnsafeCell<u64>]> {
        (0..len.div_ceil(8)).map(|_| UnsafeCell::new(0)).collect()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len() * 8
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Its start address, as remote peers address it.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// What a peer needs to import it, when it was registered with a remote right:
    /// the kernel-issued descriptor and the range. Give it only to peers you admit;
    /// deregistering the region revokes it.
    pub fn export(&self) -> Option<MrDescriptor> {
        (self.descriptor != 0).then(|| MrDescriptor {
            descriptor: self.descriptor,
            addr: self.addr(),
            len: self.len() as u32,
        })
    }

    /// The bytes. No operation on the region is in flight: `&mut self` proves it.
    pub fn bytes(&mut self) -> &[u8] {
        // SAFETY: exclusive access (no batch borrows the region); u64s viewed as bytes.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast(), self.len()) }
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast(), self.len()) }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.registered {
            // The kernel still has the pages pinned and mapped for the NIC: freeing them
            // would let the NIC write into reused heap. Leak instead.
            std::mem::forget(std::mem::take(&mut self.buf));
        }
    }
}

/// An exported memory region as its owner hands it to a peer: the kernel-issued
/// descriptor (unguessable, revoked when the region is deregistered) and the range. A
/// peer may import any sub-range by narrowing `addr` and `len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrDescriptor {
    /// The descriptor REG_MR returned.
    pub descriptor: u64,
    /// Start address in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
}

/// A peer's memory imported for one virtual QP: the only remote range its operations
/// may touch.
#[derive(Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    pub(crate) handle: u32,
    pub(crate) vqp: u32,
    pub(crate) addr: u64,
    pub(crate) len: u32,
}

impl RemoteRegion {
    /// Remote start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
