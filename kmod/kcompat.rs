// SPDX-License-Identifier: GPL-2.0
//! What differs between the kernel crates krcore builds against: Linux 6.12's and 7.x's.
//!
//! The rest of kmod names these items only, never a kernel-crate path that moved. Kbuild
//! sets `krcore_kcrate_6_12` when building against a 6.x tree; anything else is taken as
//! 7.x's crate. No other file tests that cfg.

use kernel::prelude::*;
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
