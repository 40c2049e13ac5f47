//! Ring memory on the heap, shared by the two sides of a test ring through `Arc`.

use std::cell::UnsafeCell;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use krcore_abi::ring::{read_entry, write_entry, RingMem};

/// The memory of one ring.
pub struct HeapRing<E> {
    head: AtomicU32,
    tail: AtomicU32,
    flags: AtomicU32,
    slots: Box<[UnsafeCell<E>]>,
}

// SAFETY: slots are accessed only as the ring protocol hands them out, one side at a
// time, with the release/acquire pairs of abi::ring ordering the accesses.
unsafe impl<E: Send> Sync for HeapRing<E> {}

/// A handle on a [`HeapRing`]; clone one for each side.
pub struct SharedRing<E>(Arc<HeapRing<E>>);

impl<E> Clone for SharedRing<E> {
    fn clone(&self) -> Self {
        SharedRing(self.0.clone())
    }
}

impl<E> std::ops::Deref for SharedRing<E> {
    type Target = HeapRing<E>;
    fn deref(&self) -> &HeapRing<E> {
        &self.0
    }
}

/// A ring of `entries` (a power of two) default entries.
pub fn new_ring<E: Copy + Default>(entries: u32) -> SharedRing<E> {
    assert!(entries.is_power_of_two());
    SharedRing(Arc::new(HeapRing {
        head: AtomicU32::new(0),
        tail: AtomicU32::new(0),
        flags: AtomicU32::new(0),
        slots: (0..entries)
            .map(|_| UnsafeCell::new(E::default()))
            .collect(),
    }))
}

impl<E: Copy> HeapRing<E> {
    /// The raw index words, for tests that play a hostile application.
    pub fn raw(&self) -> (&AtomicU32, &AtomicU32, &AtomicU32) {
        (&self.head, &self.tail, &self.flags)
    }

    /// Overwrites slot `i` directly, bypassing the protocol (hostile application).
    pub fn scribble(&self, i: u32, e: E) {
        // SAFETY: tests only; the engine copies slots out once, so a changed slot is a
        // changed value.
        unsafe { write_entry(self.slots[i as usize].get(), e) }
    }
}

impl<E: Copy> RingMem for SharedRing<E> {
    type Cell = AtomicU32;
    type Entry = E;
    fn head(&self) -> &AtomicU32 {
        &self.0.head
    }
    fn tail(&self) -> &AtomicU32 {
        &self.0.tail
    }
    fn flags(&self) -> &AtomicU32 {
        &self.0.flags
    }
    fn entries(&self) -> u32 {
        self.0.slots.len() as u32
    }
    unsafe fn read(&self, i: u32) -> E {
        // SAFETY: the caller holds the slot per the protocol; read as the kernel reads.
        unsafe { read_entry(self.0.slots[i as usize].get()) }
    }
    unsafe fn write(&self, i: u32, e: E) {
        // SAFETY: as above.
        unsafe { write_entry(self.0.slots[i as usize].get(), e) }
    }
}
