//! An owned shared mapping of part of `/dev/krcore`.

use std::os::fd::BorrowedFd;

use krcore_abi::errno::Errno;
use rustix::mm::{self, MapFlags, ProtFlags};

use crate::Error;

/// A mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    addr: *mut std::ffi::c_void,
    len: usize,
}

const RW: ProtFlags = ProtFlags::READ.union(ProtFlags::WRITE);

impl Mmap {
    /// Maps `len` bytes of `fd` at `offset`, shared, read-write, prefaulted.
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Result<Mmap, Error> {
        let flags = MapFlags::SHARED | MapFlags::POPULATE;
        // SAFETY: a fresh mapping chosen by the kernel; nothing aliases it yet.
        let addr = unsafe { mm::mmap(std::ptr::null_mut(), len, RW, flags, fd, offset) }
            .map_err(|e| Error::errno("mmap ring", Errno(e.raw_os_error())))?;
        Ok(Mmap { addr, len })
    }

    /// Anonymous shared memory of `len` bytes, zeroed: ring memory with no kernel
    /// behind it (the benchmarks' stand-in).
    #[cfg(any(test, feature = "bench-support"))]
    pub(crate) fn anonymous(len: usize) -> Result<Mmap, Error> {
        let flags = MapFlags::SHARED | MapFlags::POPULATE;
        // SAFETY: a fresh anonymous mapping; nothing aliases it yet.
        let addr = unsafe { mm::mmap_anonymous(std::ptr::null_mut(), len, RW, flags) }
            .map_err(|e| Error::errno("mmap anonymous ring", Errno(e.raw_os_error())))?;
        Ok(Mmap { addr, len })
    }

    /// Start of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.addr.cast()
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once; the ring views using it are dropped
        // before it (field order in Ring).
        let _ = unsafe { mm::munmap(self.addr, self.len) };
    }
}

// SAFETY: the mapping is plain shared memory owned by this value.
unsafe impl Send for Mmap {}
