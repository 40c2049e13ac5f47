// SPDX-License-Identifier: GPL-2.0
//! The engine's storage in the kernel: fixed-size `KVVec`s (kmalloc, or vmalloc when
//! large: a MetaServer client's tables are over a MiB), allocated at setup.

use kernel::prelude::*;

use crate::abi::engine::Store;

/// A `KVVec` of fixed length, as the engine's buffer type (6.12's vectors lack `AsRef`).
pub(crate) struct KBuf<T>(KVVec<T>);

impl<T: Clone> KBuf<T> {
    /// `n` copies of `v`, allocated with `flags` (`GFP_KERNEL_ACCOUNT` for what a user's
    /// ring owns, so it is charged to the user's memory cgroup). Must not be called from
    /// an atomic context.
    pub(crate) fn filled(n: usize, v: T, flags: kernel::alloc::Flags) -> Result<Self> {
        let mut k = KVVec::with_capacity(n, flags)?;
        k.extend_with(n, v, flags)?;
        Ok(KBuf(k))
    }
}

impl<T> AsRef<[T]> for KBuf<T> {
    fn as_ref(&self) -> &[T] {
        &self.0
    }
}

impl<T> AsMut<[T]> for KBuf<T> {
    fn as_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

/// [`Store`] over [`KBuf`].
pub(crate) struct KStore;

impl Store for KStore {
    type Buf<T> = KBuf<T>;
}
