//! Sets of physical QPs by index, a bit each: what the recovery, the far links and the
//! revocations keep per QP (failed, errored, live, due, awaited, skipped).
//!
//! Fixed size, so a device has at most [`MAX_QPS`] physical QPs (its pool's and its
//! peer sets'); an index past it is never a member, and inserting one does nothing.

use core::ops::{BitAnd, BitOr, BitOrAssign, Sub, SubAssign};

pub use super::qp_budget::MAX_QPS;

const WORDS: usize = MAX_QPS / 64;

/// A set of physical QP indices below [`MAX_QPS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpBits([u64; WORDS]);

impl QpBits {
    /// No QP.
    pub const EMPTY: QpBits = QpBits([0; WORDS]);

    /// QP `qp` alone (none when it is past [`MAX_QPS`]).
    pub const fn one(qp: u32) -> QpBits {
        let mut b = QpBits::EMPTY;
        if (qp as usize) < MAX_QPS {
            b.0[qp as usize / 64] = 1 << (qp % 64);
        }
        b
    }

    /// The QPs `first..first + n`.
    pub fn range(first: u32, n: u32) -> QpBits {
        let mut b = QpBits::EMPTY;
        for qp in first..first.saturating_add(n) {
            b.insert(qp);
        }
        b
    }

    /// Whether `qp` is in the set.
    pub const fn contains(&self, qp: u32) -> bool {
        (qp as usize) < MAX_QPS && self.0[qp as usize / 64] & (1 << (qp % 64)) != 0
    }

    /// Adds `qp` (nothing past [`MAX_QPS`]).
    pub fn insert(&mut self, qp: u32) {
        *self |= QpBits::one(qp);
    }

    /// Takes `qp` out.
    pub fn remove(&mut self, qp: u32) {
        *self -= QpBits::one(qp);
    }

    /// Whether no QP is in the set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// How many QPs are in the set.
    pub fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// The lowest QP in the set.
    pub fn first(&self) -> Option<u32> {
        self.0
            .iter()
            .enumerate()
            .find(|(_, &w)| w != 0)
            .map(|(i, w)| i as u32 * 64 + w.trailing_zeros())
    }

    /// The QPs in the set, lowest first.
    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..MAX_QPS as u32).filter(move |&qp| self.contains(qp))
    }

    /// The set as 64-bit words, QP `64 * i + j` at bit `j` of word `i` (for a set kept
    /// in atomics).
    pub const fn words(&self) -> [u64; WORDS] {
        self.0
    }

    /// The set of [`words`](Self::words).
    pub const fn from_words(words: [u64; WORDS]) -> QpBits {
        QpBits(words)
    }
}

impl BitOr for QpBits {
    type Output = QpBits;
    fn bitor(mut self, o: QpBits) -> QpBits {
        self |= o;
        self
    }
}

impl BitOrAssign for QpBits {
    fn bitor_assign(&mut self, o: QpBits) {
        for (w, o) in self.0.iter_mut().zip(o.0) {
            *w |= o;
        }
    }
}

impl BitAnd for QpBits {
    type Output = QpBits;
    fn bitand(mut self, o: QpBits) -> QpBits {
        for (w, o) in self.0.iter_mut().zip(o.0) {
            *w &= o;
        }
        self
    }
}

/// The QPs of the left set not in the right one.
impl Sub for QpBits {
    type Output = QpBits;
    fn sub(mut self, o: QpBits) -> QpBits {
        self -= o;
        self
    }
}

impl SubAssign for QpBits {
    fn sub_assign(&mut self, o: QpBits) {
        for (w, o) in self.0.iter_mut().zip(o.0) {
            *w &= !o;
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::vec::Vec;

    #[test]
    fn indices_past_the_end_are_never_members() {
        let mut b = QpBits::one(MAX_QPS as u32);
        assert!(b.is_empty());
        b.insert(u32::MAX);
        assert!(b.is_empty() && !b.contains(u32::MAX));
        assert_eq!(
            QpBits::range(MAX_QPS as u32 - 1, 5)
                .iter()
                .collect::<Vec<_>>(),
            [255]
        );
    }

    proptest! {
        /// Every operation agrees with a set of integers.
        #[test]
        fn behaves_as_a_set(a in proptest::collection::btree_set(0u32..MAX_QPS as u32, 0..40),
                            b in proptest::collection::btree_set(0u32..MAX_QPS as u32, 0..40)) {
            let of = |s: &BTreeSet<u32>| s.iter().fold(QpBits::EMPTY, |mut q, &i| { q.insert(i); q });
            let (qa, qb) = (of(&a), of(&b));
            prop_assert_eq!(qa.iter().collect::<Vec<_>>(), a.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!((qa | qb).iter().collect::<BTreeSet<_>>(), a.union(&b).copied().collect());
            prop_assert_eq!((qa & qb).iter().collect::<BTreeSet<_>>(), a.intersection(&b).copied().collect());
            prop_assert_eq!((qa - qb).iter().collect::<BTreeSet<_>>(), a.difference(&b).copied().collect());
            prop_assert_eq!(qa.len() as usize, a.len());
            prop_assert_eq!(qa.first(), a.first().copied());
            prop_assert_eq!(QpBits::from_words(qa.words()), qa);
            let mut r = qa;
            for i in &b { r.remove(*i); }
            prop_assert_eq!(r, qa - qb);
        }
    }
}
