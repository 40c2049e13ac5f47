//! Exported memory regions: the only way a remote key reaches the wire.
//!
//! Every MR lives in the module's one protection domain, so an rkey names memory that
//! any QP of the device may touch. A user therefore never supplies an rkey. Registering
//! an MR with remote access exports it: the node's [`Exports`] table records its range,
//! rights and rkey under a *descriptor*, a 64-bit value drawn from the kernel's random
//! generator, which is both the entry's name and its secret. The owner hands the
//! descriptor (with the address and length) to whoever it wants to admit; IMPORT_MR
//! resolves it against this table, and every one-sided operation resolves it again when
//! it is validated, so a descriptor that was forged, guessed, or revoked (its MR
//! deregistered, its ring closed) fails with [`Reason::BadDescriptor`] and nothing is
//! posted. A guess succeeds with probability `exports / 2^64` per try.
//!
//! The table is open addressing with linear probing over caller storage; the
//! descriptor's low bits pick the home slot (they are uniformly random), and removal
//! shifts the probe run back so no tombstones accumulate.
//!
//! [`Reason::BadDescriptor`]: super::cqe::Reason::BadDescriptor

use super::sqe::MrAccess;
use super::Store;

/// One exported MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Export {
    /// The descriptor: random, nonzero, unique in its table.
    pub descriptor: u64,
    /// The exporting ring's id and generation.
    pub owner: (u16, u16),
    /// Start address (the exporter's virtual address, which the MR's iova equals).
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// The remote rights the exporter granted (only `REMOTE_*` bits matter).
    pub access: MrAccess,
    /// The rkey, which never leaves the kernel.
    pub rkey: u32,
}

/// A slot of an [`Exports`] table; descriptor 0 marks it empty.
#[derive(Clone, Copy, Debug)]
pub struct ExportSlot(Export);

impl ExportSlot {
    /// An empty slot, for filling the storage a table is made from.
    pub const EMPTY: ExportSlot = ExportSlot(Export {
        descriptor: 0,
        owner: (0, 0),
        addr: 0,
        len: 0,
        access: MrAccess::empty(),
        rkey: 0,
    });

    fn is_empty(&self) -> bool {
        self.0.descriptor == 0
    }
}

/// Why an export was not recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportError {
    /// Every slot is used.
    Full,
    /// The descriptor is zero or already in use (draw another).
    Taken,
}

/// A node's exported MRs.
pub struct Exports<S: Store> {
    slots: S::Buf<ExportSlot>,
    len: usize,
    /// Exports ever revoked: the table's *epoch*. An import that resolved its export at
    /// epoch `e` still names a live export while the epoch is `e` (entries never
    /// change in place), so it need not look again (see [`Fabric::exports_epoch`]).
    ///
    /// [`Fabric::exports_epoch`]: super::Fabric::exports_epoch
    removals: u64,
}

impl<S: Store> Exports<S> {
    /// A table over `storage`, whose length must be a power of two (its slots are reset).
    pub fn new(mut storage: S::Buf<ExportSlot>) -> Self {
        let slots = storage.as_mut();
        assert!(
            slots.len().is_power_of_two(),
            "export table size must be a power of two"
        );
        slots.iter_mut().for_each(|s| *s = ExportSlot::EMPTY);
        Exports {
            slots: storage,
            len: 0,
            removals: 0,
        }
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is exported.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> usize {
        self.slots.as_ref().len() - 1
    }

    /// The slot holding `descriptor`, if any.
    fn find(&self, descriptor: u64) -> Option<usize> {
        if descriptor == 0 {
            return None;
        }
        let slots = self.slots.as_ref();
        let mut i = descriptor as usize & self.mask();
        // The table is never full (insert keeps one slot free), so a run ends.
        loop {
            let s = &slots[i];
            if s.is_empty() {
                return None;
            }
            if s.0.descriptor == descriptor {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Records `e` under `e.descriptor`.
    pub fn insert(&mut self, e: Export) -> Result<(), ExportError> {
        if e.descriptor == 0 || self.find(e.descriptor).is_some() {
            return Err(ExportError::Taken);
        }
        // One slot always stays empty, so every probe run terminates.
        if self.len + 1 >= self.slots.as_ref().len() {
            return Err(ExportError::Full);
        }
        let mask = self.mask();
        let slots = self.slots.as_mut();
        let mut i = e.descriptor as usize & mask;
        while !slots[i].is_empty() {
            i = (i + 1) & mask;
        }
        slots[i] = ExportSlot(e);
        self.len += 1;
        Ok(())
    }

    /// The export named by `descriptor`.
    pub fn get(&self, descriptor: u64) -> Option<&Export> {
        self.find(descriptor).map(|i| &self.slots.as_ref()[i].0)
    }

    /// Exports revoked so far (the epoch; see the field).
    pub fn removals(&self) -> u64 {
        self.removals
    }

    /// Revokes `descriptor`; returns what it named.
    pub fn remove(&mut self, descriptor: u64) -> Option<Export> {
        let mut hole = self.find(descriptor)?;
        let mask = self.mask();
        let slots = self.slots.as_mut();
        let gone = slots[hole].0;
        slots[hole] = ExportSlot::EMPTY;
        self.len -= 1;
        self.removals += 1;
        // Backward shift: move later members of the run into the hole when their home
        // slot does not lie cyclically in (hole, j], so every lookup still finds them.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if slots[j].is_empty() {
                return Some(gone);
            }
            let home = slots[j].0.descriptor as usize & mask;
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                slots[hole] = slots[j];
                slots[j] = ExportSlot::EMPTY;
                hole = j;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::engine::VecStore;
    use std::collections::HashMap;
    use std::vec;

    fn export(descriptor: u64) -> Export {
        Export {
            descriptor,
            owner: (1, 1),
            addr: descriptor.wrapping_mul(3),
            len: 64,
            access: MrAccess::REMOTE_READ,
            rkey: descriptor as u32,
        }
    }

    #[test]
    fn zero_and_duplicates_are_refused_and_one_slot_stays_free() {
        let mut t = Exports::<VecStore>::new(vec![ExportSlot::EMPTY; 4]);
        assert_eq!(t.insert(export(0)), Err(ExportError::Taken));
        t.insert(export(4)).unwrap();
        assert_eq!(t.insert(export(4)), Err(ExportError::Taken));
        t.insert(export(8)).unwrap();
        t.insert(export(1)).unwrap();
        assert_eq!(t.insert(export(2)), Err(ExportError::Full));
        assert_eq!(t.get(12), None, "a probe run ends at the free slot");
    }

    /// Random inserts, lookups and removals, colliding on purpose (few low bits), agree
    /// with a map.
    #[test]
    fn agrees_with_a_map_under_collisions() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let mut t = Exports::<VecStore>::new(vec![ExportSlot::EMPTY; 16]);
            let mut model = HashMap::new();
            for _ in 0..300 {
                // Descriptors from a small set, so runs wrap and collide.
                let d = 1 + next() % 40;
                match next() % 3 {
                    0 => {
                        let r = t.insert(export(d));
                        if model.contains_key(&d) {
                            assert_eq!(r, Err(ExportError::Taken));
                        } else if model.len() + 1 >= 16 {
                            assert_eq!(r, Err(ExportError::Full));
                        } else {
                            assert_eq!(r, Ok(()));
                            model.insert(d, export(d));
                        }
                    }
                    1 => assert_eq!(t.remove(d), model.remove(&d)),
                    _ => assert_eq!(t.get(d), model.get(&d)),
                }
                assert_eq!(t.len(), model.len());
                for (k, v) in &model {
                    assert_eq!(t.get(*k), Some(v), "every live export stays reachable");
                }
            }
        }
    }
}
