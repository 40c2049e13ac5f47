// SPDX-License-Identifier: GPL-2.0
//! The rings bound to a device, by slot: the table a completion's wr_id names its ring
//! in (abi's `WrId::ring` and its generation), and the counters of the rings freed
//! from it. Both locks are leaves (devctx's lock order): nothing is taken under them,
//! and a ring's own lock is taken only after they are let go.

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

use crate::abi::stats::Counters;
use crate::ring::ctx::RingCell;

/// Which ring is in each slot, and the generation each slot last gave.
struct Table {
    rings: KVec<Option<Arc<RingCell>>>,
    /// Bumped on each reuse of the slot, so a completion for a ring gone is dropped.
    gens: KVec<u16>,
}

/// A device's rings.
#[pin_data]
pub(crate) struct Rings {
    /// The table (a leaf lock).
    #[pin]
    table: Mutex<Table>,
    /// Counters of the rings freed from the table, as they last stood (a leaf lock,
    /// never held with `table`).
    #[pin]
    retired: Mutex<Counters>,
}

impl Rings {
    /// An empty table.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Rings {
            table <- new_mutex!(
                Table {
                    rings: KVec::new(),
                    gens: KVec::new(),
                },
                "krcore_rings"
            ),
            retired <- new_mutex!(Counters::ZERO, "krcore_retired"),
        })
    }

    /// Binds the ring `make` builds for a free slot and its next generation, under the
    /// table's lock (so no two rings take one slot); `EMFILE` when all 65,535 are
    /// taken. Returns the ring and what `make` gave with it.
    pub(crate) fn bind<T>(
        &self,
        make: impl FnOnce(u16, u16) -> Result<(Arc<RingCell>, T)>,
    ) -> Result<(Arc<RingCell>, T)> {
        let mut t = self.table.lock();
        let slot = match t.rings.iter().position(|r| r.is_none()) {
            Some(i) => i,
            None if t.rings.len() < u16::MAX as usize => {
                // Both tables grow together or not at all: a failure between two pushes
                // would leave them of different lengths.
                t.rings.reserve(1, GFP_KERNEL)?;
                t.gens.reserve(1, GFP_KERNEL)?;
                t.rings.push(None, GFP_KERNEL)?;
                t.gens.push(0, GFP_KERNEL)?;
                t.rings.len() - 1
            }
            None => return Err(EMFILE),
        };
        let gen = t.gens[slot].wrapping_add(1);
        let (ring, more) = make(slot as u16, gen)?;
        t.gens[slot] = gen;
        t.rings[slot] = Some(ring.clone());
        Ok((ring, more))
    }

    /// The ring in `slot`, if any.
    pub(crate) fn at(&self, slot: usize) -> Option<Arc<RingCell>> {
        self.table.lock().rings.get(slot).cloned().flatten()
    }

    /// Every ring bound now, one at a time (the table's lock is let go between them, so
    /// `f` may take a ring's lock), with its slot.
    pub(crate) fn each(&self, mut f: impl FnMut(usize, Arc<RingCell>)) {
        let n = self.table.lock().rings.len();
        for slot in 0..n {
            if let Some(r) = self.at(slot) {
                f(slot, r);
            }
        }
    }

    /// Frees `slot` of `ring`, a closed ring with nothing left, keeping its counters
    /// `last`; a slot bound again meanwhile is left alone.
    pub(crate) fn free(&self, slot: usize, ring: &Arc<RingCell>, last: &Counters) {
        self.retired.lock().add(last);
        let mut t = self.table.lock();
        if t.rings[slot].as_ref().is_some_and(|x| Arc::ptr_eq(x, ring)) {
            t.rings[slot] = None;
        }
    }

    /// The counters of the rings freed and of every ring bound.
    pub(crate) fn counters(&self) -> Counters {
        let mut c = *self.retired.lock();
        self.each(|_, r| c.add(&r.ctx.lock().engine().stats()));
        c
    }

    /// Wakes every ring, so entries that waited for network work are taken again (a
    /// waiter steps, an eventfd is told).
    pub(crate) fn wake_all(&self) {
        self.each(|_, r| r.ctx.lock().wake());
    }
}
