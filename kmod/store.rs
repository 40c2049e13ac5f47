// SPDX-License-Identifier: GPL-2.0
//! The engine's storage in the kernel: fixed-size `KVec`s, allocated at ring setup.

use kernel::prelude::*;

use crate::abi::engine::Store;

/// A `KVec` of fixed length, as the engine's buffer type (6.12's KVec lacks `AsRef`).
pub(crate) struct KBuf<T>(KVec<T>);

impl<T: Clone> KBuf<T> {
    /// `n` copies of `v`. Must not be called from an atomic context.
    pub(crate) fn filled(n: usize, v: T) -> Result<Self> {
        let mut k = KVec::with_capacity(n, GFP_KERNEL)?;
        k.extend_with(n, v, GFP_KERNEL)?;
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
