//! Handles a ring hands out: virtual QPs, registered local memory, imported remote
//! memory, and the descriptor an exporter hands to its peers.

use std::marker::PhantomData;

use krcore_abi::sqe::Sqe;

use crate::core::Keep;
use crate::lock::lock;
use crate::ops::RingRef;
use crate::Error;

/// A virtual QP: this ring's connection through a pooled kernel QP.
#[derive(Debug, PartialEq, Eq)]
pub struct Vqp {
    pub(crate) handle: u32,
    pub(crate) qpn: u32,
    pub(crate) port: u16,
    /// The ring it belongs to (its identity).
    pub(crate) ring: u64,
}

impl Vqp {
    /// Its port on this node: a CONNECT's own (the ephemeral one the kernel picked,
    /// unless it named one), or for an accepted one, the port of the peer end (see
    /// [`Accepted`](crate::Accepted)). 0 for a virtual QP with no endpoint (service 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The number of the pooled physical QP it is bound to (shared with other rings).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The handle raw entries ([`Ring::submission`](crate::Ring::submission)) name it by.
    pub fn handle(&self) -> u32 {
        self.handle
    }
}

/// Memory registered with krcore that the caller lent for `'b`: a slice, a `Vec`'s
/// storage, a mapping (huge pages included), or, through the unsafe
/// [`Ring::register_slice_remote`](crate::Ring::register_slice_remote), any range the
/// caller vouches for.
///
/// While it lives the kernel has the pages pinned and the NIC may read or write them,
/// so it holds the borrow: the lender cannot touch the memory until it is dropped.
/// Its bytes are reachable through `&mut self` only, and a [`Batch`](crate::Batch)
/// borrows it until [`Ring::run`](crate::Ring::run) has every completion, so the NIC
/// never writes under a live Rust reference. Dropping it deregisters it, waiting for
/// the DEREG_MR (which waits for sends that use it; for exports, for the nodes that
/// imported it to let go), since the loan ends with the drop; on any thread, while
/// other threads wait on the ring, without blocking them.
/// [`Ring::deregister`](crate::Ring::deregister) does the same and reports failure.
#[derive(Debug)]
pub struct Registered<'b> {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    pub(crate) handle: u32,
    pub(crate) descriptor: u64,
    /// The ring that registered it; gone once the ring is dropped (closing the file
    /// releases every registration).
    pub(crate) ring: RingRef,
    /// That ring's identity (handles of other rings are refused).
    pub(crate) ring_id: u64,
    pub(crate) live: bool,
    pub(crate) _lent: PhantomData<&'b mut [u8]>,
}

// SAFETY: it stands for a `&'b mut [u8]` (Send and Sync): the kernel's use of the
// memory is not tied to any thread, and `&self` reaches only the address and length.
unsafe impl Send for Registered<'_> {}
// SAFETY: as above.
unsafe impl Sync for Registered<'_> {}

impl Registered<'_> {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its start address, as remote peers address it.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The handle raw entries name it by.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// What a peer needs to import it, when it was registered with a remote right:
    /// the kernel-issued descriptor and the range. Give it only to peers you admit;
    /// deregistering the region revokes it.
    pub fn export(&self) -> Option<MrDescriptor> {
        (self.descriptor != 0).then(|| MrDescriptor {
            descriptor: self.descriptor,
            addr: self.addr(),
            len: self.len as u32,
        })
    }

    /// The bytes. No operation of this process on the region is in flight: `&mut self`
    /// proves that much, and for a region with local rights alone (all that safe code
    /// can lend) that is everything.
    ///
    /// A region registered with a remote write right ([`Ring::register`](crate::Ring::register)
    /// owns its memory; lent memory takes the unsafe
    /// [`Ring::register_slice_remote`](crate::Ring::register_slice_remote)) is another
    /// matter: a peer given its descriptor may write it at any time, which no borrow
    /// here can stop. Its bytes then change under the returned slice as a shared
    /// mapping's do: read what a peer wrote only after the peer said so (a message
    /// after its WRITE, a flag it set last), and copy what must not change before
    /// checking it.
    pub fn bytes(&mut self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is valid for `'b` (the lender's borrow, or the raw
        // registration's promise) and exclusively ours (no batch borrows the region).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Deregisters it through its ring and waits for that (the caller must not hold the
    /// ring's lock). `Ok` also when there is nothing to do: the ring is gone, and its
    /// file's registrations with it (the kernel lets each go once nothing in flight
    /// uses it: with local rights alone and every batch waited for, nothing does).
    pub(crate) fn release(&mut self) -> Result<(), Error> {
        if !std::mem::take(&mut self.live) {
            return Ok(());
        }
        let Some(ring) = self.ring.upgrade() else {
            return Ok(());
        };
        let r = lock(&ring).control("deregister memory", Sqe::dereg_mr(0, self.handle));
        if r.is_err() {
            self.live = true;
        }
        r.map(|_| ())
    }

    /// Deregisters it through its ring without waiting: `buf` (its memory) is freed
    /// once the DEREG_MR completed, and leaked if it failed or the ring went first.
    fn release_later(&mut self, buf: Buffer) {
        if !std::mem::take(&mut self.live) {
            return drop(buf);
        }
        match self.ring.upgrade() {
            Some(ring) => {
                let keep = Keep {
                    regions: Vec::new(),
                    buffer: Some(buf),
                };
                let mut core = lock(&ring);
                core.detach(Sqe::dereg_mr(0, self.handle), keep);
                // Sent now if the kernel takes it; else with the ring's next submission.
                let _ = core.submit();
            }
            None => leak(buf),
        }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        // Only a raw entry still using it (a broken raw entry's contract) makes this
        // fail; then the kernel keeps the pages pinned until the ring is closed.
        let _ = self.release();
    }
}

impl AsMut<Registered<'static>> for MemoryRegion {
    fn as_mut(&mut self) -> &mut Registered<'static> {
        &mut self.region
    }
}

impl<'b> AsMut<Registered<'b>> for Registered<'b> {
    fn as_mut(&mut self) -> &mut Registered<'b> {
        self
    }
}

/// A region's buffer as the library allocates it (8-byte aligned).
pub(crate) type Buffer = Box<[std::cell::UnsafeCell<u64>]>;

/// Gives up `buf` for good: memory whose deregistration was not seen to complete. The
/// kernel may still have it registered, with a READ landing or an importer's WRITE on
/// its way: its release on the file's close waits for those on its own time, and a
/// duplicate of the descriptor keeps the file open. Freeing it could hand the NIC
/// reused heap; a leak is bounded by what was registered.
pub(crate) fn leak(buf: Buffer) {
    std::mem::forget(buf);
}

/// Local memory the library allocated (zeroed, 8-byte aligned) and registered: a
/// [`Registered`] region that owns its buffer, which it derefs to.
///
/// Dropped, it deregisters without waiting (never blocking the thread or an async
/// executor): the buffer is freed when the DEREG_MR completes, with whichever call of
/// the ring reaps it. If the kernel refused (see [`Registered`]) or the ring was
/// dropped first, the buffer is leaked, never freed under the NIC: drop regions before
/// their ring.
#[derive(Debug)]
pub struct MemoryRegion {
    pub(crate) region: Registered<'static>,
    pub(crate) buf: Buffer,
}

// SAFETY: a shared `&MemoryRegion` reaches only its `Registered` (itself Sync: the
// address, length and handle); the buffer's bytes are reached through `&mut` alone.
// So it may be shared between threads (a batch on one thread reading the region an
// `Arc` holds on another) as a `Registered` may.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// A zeroed buffer of `len` bytes (rounded up to 8): `ENOMEM` when the allocator
    /// has none, rather than the abort of an infallible allocation.
    pub(crate) fn alloc(len: usize) -> Result<Buffer, Error> {
        let words = len.div_ceil(8);
        let mut v = Vec::new();
        v.try_reserve_exact(words).map_err(|_| {
            Error::errno(
                "register memory: allocate",
                krcore_abi::errno::Errno::ENOMEM,
            )
        })?;
        v.resize_with(words, || std::cell::UnsafeCell::new(0));
        Ok(v.into_boxed_slice())
    }
}

impl std::ops::Deref for MemoryRegion {
    type Target = Registered<'static>;
    fn deref(&self) -> &Registered<'static> {
        &self.region
    }
}

impl std::ops::DerefMut for MemoryRegion {
    fn deref_mut(&mut self) -> &mut Registered<'static> {
        &mut self.region
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        self.region.release_later(buf);
    }
}

/// An exported memory region as its owner hands it to a peer: the kernel-issued
/// descriptor (unguessable, revoked when the region is deregistered) and the range. A
/// peer may import any sub-range by narrowing `addr` and `len`. With the `serde`
/// feature it serializes, for whatever channel the two sides already share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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
    /// The ring it was imported on (its virtual QP's).
    pub(crate) ring: u64,
}

impl RemoteRegion {
    /// The ring's handle of the import (an entry's `rmr`: raw entries, as
    /// [`in_io_uring`](crate::in_io_uring) carries, name it).
    pub fn handle(&self) -> u32 {
        self.handle
    }

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

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::MrDescriptor;

    #[test]
    fn a_descriptor_travels_as_json() {
        let d = MrDescriptor {
            descriptor: u64::MAX - 7,
            addr: 0x7f00_dead_b000,
            len: 65536,
        };
        let s = serde_json::to_string(&d).unwrap();
        assert_eq!(
            s,
            r#"{"descriptor":18446744073709551608,"addr":139641712652288,"len":65536}"#
        );
        assert_eq!(serde_json::from_str::<MrDescriptor>(&s).unwrap(), d);
        assert!(serde_json::from_str::<MrDescriptor>(r#"{"descriptor":1,"addr":2}"#).is_err());
    }
}

#[cfg(test)]
mod alloc_tests {
    use super::MemoryRegion;

    /// An allocation the allocator cannot make is `ENOMEM` (before, the process
    /// aborted).
    #[test]
    fn an_impossible_buffer_is_enomem() {
        let e = MemoryRegion::alloc(1 << 62).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(krcore_abi::errno::Errno::ENOMEM.0));
        assert_eq!(
            MemoryRegion::alloc(13).unwrap().len(),
            2,
            "rounded up to 8 bytes"
        );
    }
}
