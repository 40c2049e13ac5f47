// SPDX-License-Identifier: GPL-2.0
//! What differs between the kernel crates krcore builds against: Linux 6.12's and 7.x's.
//!
//! The rest of kmod names these items only, never a kernel-crate path that moved. Kbuild
//! sets `krcore_kcrate_6_12` when building against a 6.x tree; anything else is taken as
//! 7.x's crate. No other file tests that cfg.

use kernel::prelude::*;
use core::ffi::CStr;

use kernel::uaccess::UserSlice;

/// Plain-bytes traits: 6.12 keeps them in `types`, 7.x in `transmute`.
#[cfg(krcore_kcrate_6_12)]
pub(crate) use kernel::types::{AsBytes, FromBytes};
/// Plain-bytes traits: 6.12 keeps them in `types`, 7.x in `transmute`.
#[cfg(not(krcore_kcrate_6_12))]
pub(crate) use kernel::transmute::{AsBytes, FromBytes};

/// The user range `[addr, addr + len)`: 6.12 takes the address as a `usize`, 7.x as a
/// `UserPtr`.
pub(crate) fn user_slice(addr: usize, len: usize) -> UserSlice {
    #[cfg(krcore_kcrate_6_12)]
    let ptr = addr;
    #[cfg(not(krcore_kcrate_6_12))]
    let ptr = kernel::uaccess::UserPtr::from_addr(addr);
    UserSlice::new(ptr, len)
}

/// Takes the last element out of `v`: 7.x's `KVec::pop`, which 6.12's lacks.
pub(crate) fn pop<T>(v: &mut KVec<T>) -> Option<T> {
    #[cfg(not(krcore_kcrate_6_12))]
    return v.pop();
    #[cfg(krcore_kcrate_6_12)]
    {
        let last = v.len().checked_sub(1)?;
        // SAFETY: shrinking by one; the element past the new length is read out exactly
        // once here and owned by the caller from here on.
        unsafe {
            v.set_len(last);
            Some(core::ptr::read(v.as_ptr().add(last)))
        }
    }
}

/// A read-only debugfs file under `krcore/`: its name and what writes its text.
pub(crate) struct DebugFile {
    /// The file's name.
    pub(crate) name: &'static CStr,
    /// Writes the whole text; called for each read.
    pub(crate) text: fn(&mut dyn core::fmt::Write) -> core::fmt::Result,
}

/// `files` in debugfs `krcore/`, there while this is held; dropping it waits for their
/// readers. 7.x's kernel crate makes them (its seq_file writes each text whole); 6.12's
/// has no debugfs, so compat_6_12.c does there (a text cut at 64 KiB).
pub(crate) struct DebugFiles {
    #[cfg(not(krcore_kcrate_6_12))]
    _files: KVec<Pin<KBox<kernel::debugfs::File<&'static DebugFile>>>>,
}

impl DebugFiles {
    /// Adds `files`. Inspection only: the module works without them (debugfs may be
    /// absent, or a file not made), so only a failed allocation fails this.
    pub(crate) fn new(files: &'static [DebugFile]) -> Result<DebugFiles> {
        #[cfg(not(krcore_kcrate_6_12))]
        {
            // The directory goes with its last file.
            let dir = kernel::debugfs::Dir::new(c"krcore");
            let mut made = KVec::with_capacity(files.len(), GFP_KERNEL)?;
            for f in files {
                made.push(KBox::pin_init(dir.read_only_file(f.name, f), GFP_KERNEL)?, GFP_KERNEL)?;
            }
            Ok(DebugFiles { _files: made })
        }
        #[cfg(krcore_kcrate_6_12)]
        {
            let mut names = [core::ptr::null(); 4];
            for (n, f) in names.iter_mut().zip(files) {
                *n = f.name.as_ptr();
            }
            SHOWN.store(files.as_ptr().cast_mut(), Ordering::Release);
            let n = files.len().min(names.len());
            SHOWN_LEN.store(n, Ordering::Release);
            // SAFETY: called once, from the module's init, before any reader; the names
            // are static NUL-terminated strings.
            unsafe { krcore_compat_debugfs_add(names.as_ptr(), n as core::ffi::c_uint) };
            Ok(DebugFiles {})
        }
    }
}

/// A file's text, written by the kernel crate's seq_file for each read.
#[cfg(not(krcore_kcrate_6_12))]
impl kernel::debugfs::Writer for &'static DebugFile {
    fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (self.text)(f)
    }
}

#[cfg(krcore_kcrate_6_12)]
impl Drop for DebugFiles {
    fn drop(&mut self) {
        // SAFETY: added in `new`; waits for the files' readers.
        unsafe { krcore_compat_debugfs_remove() };
    }
}

#[cfg(krcore_kcrate_6_12)]
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// The files compat_6_12.c shows, by index (set before it adds them).
#[cfg(krcore_kcrate_6_12)]
static SHOWN: AtomicPtr<DebugFile> = AtomicPtr::new(core::ptr::null_mut());
#[cfg(krcore_kcrate_6_12)]
static SHOWN_LEN: AtomicUsize = AtomicUsize::new(0);

#[cfg(krcore_kcrate_6_12)]
extern "C" {
    fn krcore_compat_debugfs_add(names: *const *const core::ffi::c_char, n: core::ffi::c_uint);
    fn krcore_compat_debugfs_remove();
}

/// Writes the text of file `which` (an index into the files given to
/// [`DebugFiles::new`]) into compat_6_12.c's buffer of `cap` bytes; returns the bytes
/// written (what does not fit is cut).
#[cfg(krcore_kcrate_6_12)]
#[no_mangle]
extern "C" fn krcore_rs_show(which: core::ffi::c_uint, buf: *mut u8, cap: usize) -> usize {
    let (files, n) = (SHOWN.load(Ordering::Acquire), SHOWN_LEN.load(Ordering::Acquire));
    if files.is_null() || which as usize >= n {
        return 0;
    }
    // SAFETY: `files` is the static slice of `n` files `DebugFiles::new` was given.
    let file = unsafe { &*files.add(which as usize) };
    // SAFETY: the shim passes a buffer of `cap` bytes that it owns for this call.
    let mut w = crate::abi::stats::Buf::new(unsafe { core::slice::from_raw_parts_mut(buf, cap) });
    let _ = (file.text)(&mut w);
    w.len()
}
