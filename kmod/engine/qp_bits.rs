// SPDX-License-Identifier: GPL-2.0
//! abi's `QpBits` kept in atomics: a set of physical QPs that paths without a common
//! lock read and change (the live set QPs, the set QPs said failed in the log).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::abi::engine::{QpBits, MAX_QPS};

const WORDS: usize = MAX_QPS / 64;

/// A set of physical QPs, each QP's bit changed atomically (a read of the whole is not
/// one snapshot: each word is).
pub(crate) struct AtomicQpBits([AtomicU64; WORDS]);

impl AtomicQpBits {
    /// No QP.
    pub(crate) const fn new() -> Self {
        AtomicQpBits([const { AtomicU64::new(0) }; WORDS])
    }

    /// Adds `qp` (nothing past `MAX_QPS`).
    pub(crate) fn insert(&self, qp: u32) {
        let w = QpBits::one(qp).words();
        for (a, w) in self.0.iter().zip(w).filter(|(_, w)| *w != 0) {
            a.fetch_or(w, Ordering::AcqRel);
        }
    }

    /// Takes `qp` out.
    pub(crate) fn remove(&self, qp: u32) {
        let w = QpBits::one(qp).words();
        for (a, w) in self.0.iter().zip(w).filter(|(_, w)| *w != 0) {
            a.fetch_and(!w, Ordering::AcqRel);
        }
    }

    /// The set now.
    pub(crate) fn load(&self) -> QpBits {
        QpBits::from_words(core::array::from_fn(|i| self.0[i].load(Ordering::Acquire)))
    }

    /// Replaces the set with `v`: what it was.
    pub(crate) fn swap(&self, v: QpBits) -> QpBits {
        let w = v.words();
        QpBits::from_words(core::array::from_fn(|i| self.0[i].swap(w[i], Ordering::AcqRel)))
    }
}
