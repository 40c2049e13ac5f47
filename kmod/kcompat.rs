// SPDX-License-Identifier: GPL-2.0
//! What differs between the kernel crates krcore builds against: Linux 6.12's and 7.x's.
//!
//! The rest of kmod names these items only, never a kernel-crate path that moved. Kbuild
//! sets `krcore_kcrate_6_12` when building against a 6.x tree; anything else is taken as
//! 7.x's crate. No other file tests that cfg.

use kernel::prelude::*;
use kernel::uaccess::UserSlice;

use crate::inspect::Show;

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

/// The monotonic clock in milliseconds. 6.12's `Ktime` and 7.x's `Instant` both read
/// `ktime_get`; 7.x's keeps the value private, so both builds read it here.
pub(crate) fn now_ms() -> i64 {
    // SAFETY: `ktime_get` may be called from any context once timekeeping is up.
    (unsafe { kernel::bindings::ktime_get() }) / 1_000_000
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

/// The inspection files, debugfs `krcore/counters` and `krcore/peers`, there while this
/// is held; dropping it waits for their readers. 7.x's kernel crate makes them; 6.12's
/// has no debugfs, so compat_6_12.c does there, through [`krcore_rs_show`].
pub(crate) struct DebugFiles {
    #[cfg(not(krcore_kcrate_6_12))]
    _files: [Pin<KBox<kernel::debugfs::File<Show>>>; 2],
}

impl DebugFiles {
    /// Adds the files. Inspection only: the module works without them (debugfs may be
    /// absent, or a file not made), so only a failed allocation fails this.
    pub(crate) fn new() -> Result<DebugFiles> {
        #[cfg(not(krcore_kcrate_6_12))]
        {
            // The directory goes with its last file.
            let dir = kernel::debugfs::Dir::new(c"krcore");
            let counters = KBox::pin_init(dir.read_only_file(c"counters", Show::Counters), GFP_KERNEL)?;
            let peers = KBox::pin_init(dir.read_only_file(c"peers", Show::Peers), GFP_KERNEL)?;
            Ok(DebugFiles {
                _files: [counters, peers],
            })
        }
        #[cfg(krcore_kcrate_6_12)]
        {
            // SAFETY: called once, from the module's init, before any reader.
            unsafe { krcore_compat_debugfs_add() };
            Ok(DebugFiles {})
        }
    }
}

#[cfg(krcore_kcrate_6_12)]
impl Drop for DebugFiles {
    fn drop(&mut self) {
        // SAFETY: added in `new`; waits for the files' readers.
        unsafe { krcore_compat_debugfs_remove() };
    }
}

/// An inspection file's text, written by the kernel crate's seq_file for each read (as
/// long as the text is: nothing is cut).
#[cfg(not(krcore_kcrate_6_12))]
impl kernel::debugfs::Writer for Show {
    fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.write_text(f)
    }
}

#[cfg(krcore_kcrate_6_12)]
extern "C" {
    fn krcore_compat_debugfs_add();
    fn krcore_compat_debugfs_remove();
}

/// Writes inspection file `which` (shim.h's `KRCORE_SHOW_*`) into compat_6_12.c's buffer
/// of `cap` bytes; returns the bytes written (what does not fit is cut).
#[cfg(krcore_kcrate_6_12)]
#[no_mangle]
extern "C" fn krcore_rs_show(which: core::ffi::c_uint, buf: *mut u8, cap: usize) -> usize {
    // SAFETY: the shim passes a buffer of `cap` bytes that it owns for this call.
    let mut w = crate::abi::stats::Buf::new(unsafe { core::slice::from_raw_parts_mut(buf, cap) });
    let show = match which {
        0 => Show::Counters,
        1 => Show::Peers,
        _ => return 0,
    };
    let _ = show.write_text(&mut w);
    w.len()
}
