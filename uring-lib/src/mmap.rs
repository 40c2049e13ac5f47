//! An owned shared mapping of part of `/dev/krcore`.

use std::os::fd::RawFd;

use crate::Error;

/// A mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    addr: *mut libc::c_void,
    len: usize,
}

impl Mmap {
    /// Maps `len` bytes of `fd` at `offset`, shared, read-write, prefaulted.
    pub(crate) fn new(fd: RawFd, len: usize, offset: u64) -> Result<Mmap, Error> {
        // SAFETY: a fresh mapping chosen by the kernel; nothing aliases it yet.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                offset as libc::off_t,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(Error::last_os("mmap ring"));
        }
        Ok(Mmap { addr, len })
    }

    /// Anonymous shared memory of `len` bytes, zeroed: ring memory with no kernel
    /// behind it (the benchmarks' stand-in).
    #[cfg(any(test, feature = "bench-support"))]
    pub(crate) fn anonymous(len: usize) -> Result<Mmap, Error> {
        // SAFETY: a fresh anonymous mapping; nothing aliases it yet.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(Error::last_os("mmap anonymous ring"));
        }
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
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

// SAFETY: the mapping is plain shared memory owned by this value.
unsafe impl Send for Mmap {}
